"""Suite-wide fixtures: no test may leave actors, threads or processes behind,
nor make pykka log "Unexpected message" (an event told to an actor that does not
handle it).

The checks themselves are in _leaks.py. A leak makes the test fail (reported
by pytest as an error at teardown) and is cleaned up so later tests start
clean. Whatever broader-scoped fixtures leave behind is caught at session end.

``home`` is a private (0700) ALBEDO_HOME with $ALBEDO_DATABASE_URL unset, ``store``
its SQLite store (closed afterwards); a test module may define its own. ``oauth_server``
starts tests/servers/oauth_server.py (a real loopback authorization server).

``backend`` gives a test SQLite and PostgreSQL in turn. PostgreSQL comes from
$ALBEDO_TEST_POSTGRES_URL (scripts/test starts a throwaway cluster and sets
it); run directly, one throwaway cluster is started for the session. Under
CI=true a missing PostgreSQL fails the tests. Each test gets a fresh database.
"""

import functools
import os
import sys
import urllib.parse
import uuid

import pytest

try:  # tests/ as a package, or (pytest's default) as a plain directory
    from . import _leaks
except ImportError:
    import _leaks

_SESSION_BASELINE = pytest.StashKey()


def pytest_sessionstart(session):
    # Orphaned grandchildren re-parent to pytest, so they can be found.
    _leaks.become_subreaper()
    _leaks.watch_messages()
    session.stash[_SESSION_BASELINE] = _leaks.snapshot()


_WORKER_LEAKS = pytest.StashKey()


def pytest_sessionfinish(session, exitstatus):
    problems = _leaks.check(session.stash[_SESSION_BASELINE])
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        # A pytest-xdist worker (scripts/test runs two): its output is not shown, so
        # what it left behind goes to the controller, which reports it and fails the run.
        workeroutput["albedo_leaks"] = problems
        return
    problems = session.config.stash.get(_WORKER_LEAKS, []) + problems
    if problems:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        write = reporter.write_line if reporter else print
        write("left behind at the end of the session:\n  " + "\n  ".join(problems))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller: a worker ended; keep what it left behind (above)."""
    problems = getattr(node, "workeroutput", {}).get("albedo_leaks") or []
    worker = getattr(node, "gateway", None)
    label = getattr(worker, "id", "a worker")
    node.config.stash.setdefault(_WORKER_LEAKS, []).extend(f"{label}: {problem}" for problem in problems)


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


@pytest.fixture(scope="session")
def pg_server_url():
    url = os.environ.get("ALBEDO_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    # Imported here: test_leak_fixture.py runs a copy of this file where tests/store is not.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "store"))
    import pgcluster  # tests/store/pgcluster.py

    bindir = pgcluster.find_bin()
    if bindir is None:
        pytest.fail("no PostgreSQL: set $ALBEDO_TEST_POSTGRES_URL or install Debian's postgresql "
                    "(scripts/test does both)", pytrace=False)
    cluster = pgcluster.Cluster(bindir)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def _with_db(url: str, dbname: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request, tmp_path, pg_server_url):
    """(kind, home, url): where a store of this test lives; url None means SQLite in home.

    ``pg_server_url`` is asked for even on SQLite, so that a cluster started here is
    up before the leak check's first snapshot (it is session-wide, not the test's).
    """
    home = str(tmp_path / "home")
    if request.param == "sqlite":
        yield "sqlite", home, None
        return
    import psycopg2

    server = pg_server_url
    name = "albedo_t_" + uuid.uuid4().hex[:16]
    admin = psycopg2.connect(server, connect_timeout=10)
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        yield "postgresql", home, _with_db(server, name)
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture
def fault():
    """``fault(**modes)`` starts a FaultAuthServer (tests/servers/fault_auth_server.py, a
    loopback authorization server); all are stopped afterwards."""
    from servers.fault_auth_server import FaultAuthServer

    started: list[FaultAuthServer] = []

    def start(**modes) -> FaultAuthServer:
        server = FaultAuthServer(**modes)
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def http_fault():
    """``http_fault(**options)`` starts tests/servers/fault_http_server.py's FaultHTTPServer
    (``http_fault(cls=..., ...)`` a subclass); each is stopped afterwards, and a server
    whose threads do not end fails the test."""
    from servers.fault_http_server import FaultHTTPServer

    servers = []

    def start(cls=FaultHTTPServer, **options):
        server = cls(**options)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        assert server.stop(), "the fault server's threads did not end"


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.delenv("ALBEDO_DATABASE_URL", raising=False)
    path = tmp_path / "home"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def store(home):
    from albedo_actors.store import open_store

    opened = open_store(str(home))
    yield opened
    opened.close()


@pytest.fixture
def server_processes():
    """``server_processes(cls, *flags)`` starts ``cls(*flags)``, a helpers._ServerProcess, and
    returns it; all are stopped afterwards, the last started first. The fixtures of the
    peer servers (``oauth_server`` here, ``idp_server`` in tests/auth/test_grants.py) are made
    of it."""
    started: list = []

    def start(cls, *flags: str):
        server = cls(*flags)
        server.start()
        started.append(server)
        return server

    yield start
    for server in reversed(started):
        server.stop()


@pytest.fixture
def oauth_server(server_processes):
    """``oauth_server(*flags)`` starts tests/servers/oauth_server.py; all are stopped afterwards."""
    from helpers import OAuthServer

    return functools.partial(server_processes, OAuthServer)


@pytest.fixture(scope="module")
def everything_http(tmp_path_factory):
    """The npm server-everything's streamableHttp transport, one per module; yields (url,
    path of its stdout log, where it logs every request and session)."""
    from helpers import everything_http_server

    log_path = tmp_path_factory.mktemp("everything") / "stdout.log"
    with everything_http_server(log_path) as url:
        yield url, log_path
