"""Suite-wide fixtures: no test may leave actors, threads or processes behind.

The checks themselves are in _leaks.py. A leak makes the test fail (reported
by pytest as an error at teardown) and is cleaned up so later tests start
clean. Whatever broader-scoped fixtures leave behind is caught at session end.
"""

import os

import pytest

try:  # tests/ as a package, or (pytest's default) as a plain directory
    from . import _leaks
except ImportError:
    import _leaks

_SESSION_BASELINE = pytest.StashKey()


def pytest_sessionstart(session):
    # Orphaned grandchildren re-parent to pytest, so they can be found.
    _leaks.become_subreaper()
    session.stash[_SESSION_BASELINE] = _leaks.snapshot()


def pytest_sessionfinish(session, exitstatus):
    problems = _leaks.check(session.stash[_SESSION_BASELINE])
    if problems:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        write = reporter.write_line if reporter else print
        write("left behind at the end of the session:\n  " + "\n  ".join(problems))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _no_leaks():
    before = _leaks.snapshot()
    yield
    problems = _leaks.check(before)
    if problems:
        pytest.fail("test left behind:\n  " + "\n  ".join(problems), pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # Under CI=true nothing may be skipped for lack of a service or package:
    # a skip there is turned into a failure.
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("CI") == "true" and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, which must run everything: {report.longrepr}"


@pytest.fixture
def clients(tmp_path):
    """Start ServerHandles with ``clients.start(config)``; all are stopped afterwards."""
    from helpers import Clients

    started = Clients(str(tmp_path))
    yield started
    started.stop_all()
