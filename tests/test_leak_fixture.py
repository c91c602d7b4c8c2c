"""The leak fixture in conftest.py turns leaks into failures.

Each test runs an inner pytest session, in a subprocess so that its threads
and processes stay out of this one, with this directory's real conftest.py
and _leaks.py. If the fixture stops catching leaks, these tests fail.
"""

import ctypes
import pathlib

import pytest

pytest_plugins = ["pytester"]

HERE = pathlib.Path(__file__).parent
PR_GET_CHILD_SUBREAPER = 37


@pytest.fixture
def inner(pytester):
    pytester.makeconftest((HERE / "conftest.py").read_text())
    pytester.makepyfile(_leaks=(HERE / "_leaks.py").read_text())
    return pytester


def run(pytester, source):
    pytester.makepyfile(test_inner=source)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", timeout=90)


def running(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


def test_work_that_finishes_in_time_passes(inner):
    result = run(
        inner,
        """
        import subprocess, threading, time

        def test_finishing():
            threading.Thread(target=time.sleep, args=(0.5,)).start()
            subprocess.Popen(["sleep", "0.5"])  # never waited for: reaped
            subprocess.run(["sh", "-c", "sleep 0.5 &"], check=True)  # orphan
        """,
    )
    result.assert_outcomes(passed=1)


def test_leaked_thread_fails(inner):
    result = run(
        inner,
        """
        import threading

        def test_leaks_a_thread():
            threading.Thread(
                target=threading.Event().wait, args=(60,), name="leaky-thread", daemon=True
            ).start()
        """,
    )
    result.assert_outcomes(errors=1, passed=1)  # the test itself passed
    result.stdout.fnmatch_lines(["*thread still running: 'leaky-thread' (daemon, Event.wait)*"])


def test_leaked_processes_fail_and_are_killed(inner):
    result = run(
        inner,
        """
        import subprocess

        def test_leaks_processes():
            child = subprocess.Popen(["sleep", "301"])
            # The shell exits at once; its child becomes an orphan, which the
            # subreaper makes pytest's child.
            orphan = subprocess.run(
                ["sh", "-c", "sleep 302 >/dev/null 2>&1 & echo $!"],
                check=True, capture_output=True, text=True,
            ).stdout.strip()
            with open("pids", "w") as f:
                f.write(f"{child.pid} {orphan}")
        """,
    )
    pids = (inner.path / "pids").read_text().split()
    result.assert_outcomes(errors=1, passed=1)
    result.stdout.fnmatch_lines(
        [
            f"*process still running: pid {pids[0]} (parent *): sleep 301*",
            f"*process still running: pid {pids[1]} (parent *): sleep 302*",
        ]
    )
    # The inner fixture killed both; neither outlived the inner session.
    assert [pid for pid in pids if running(pid)] == []


def test_leaked_actor_fails_and_is_stopped(inner):
    result = run(
        inner,
        """
        import pykka

        class Idle(pykka.ThreadingActor):
            use_daemon_thread = True  # without the fixture, exit anyway

        def test_leaks_an_actor():
            Idle.start()

        def test_next_test_sees_it_stopped():
            assert pykka.ActorRegistry.get_all() == []
        """,
    )
    result.assert_outcomes(errors=1, passed=2)
    result.stdout.fnmatch_lines(["*pykka actor still running: Idle (urn:uuid:*"])


def test_a_message_nobody_handles_fails_the_test(inner):
    result = run(
        inner,
        """
        import pykka

        class Deaf(pykka.ThreadingActor):
            def on_receive(self, message):
                if message == "known":
                    return "handled"
                return super().on_receive(message)  # pykka logs "Unexpected message"

        def test_tells_a_message_nobody_handles():
            ref = Deaf.start()
            try:
                ref.tell("stray event")
                assert ref.ask("known", timeout=10) == "handled"  # the stray one came first
            finally:
                ref.stop(timeout=10)

        def test_handled_messages_pass():
            ref = Deaf.start()
            try:
                ref.tell("known")
                assert ref.ask("known", timeout=10) == "handled"
            finally:
                ref.stop(timeout=10)
        """,
    )
    result.assert_outcomes(errors=1, passed=2)  # the first test itself passed
    result.stdout.fnmatch_lines(["*pykka logged: Unexpected message received by Deaf (urn:uuid:*): stray event*"])


SESSION_LEAK = """
import threading

import pytest


@pytest.fixture(scope="module")
def helper():
    # A module fixture that starts a thread and never stops it: no test sees it
    # as new, so only the check at the end of the session can.
    threading.Thread(target=threading.Event().wait, args=(60,), name="module-leak", daemon=True).start()
    yield


def test_uses_the_helper(helper):
    pass
"""


@pytest.mark.parametrize("workers", [(), ("-n", "1")], ids=["in-process", "xdist-worker"])
def test_a_leak_at_the_end_of_the_session_fails_the_run(inner, workers):
    inner.makepyfile(test_inner=SESSION_LEAK)
    result = inner.runpytest_subprocess("-p", "no:cacheprovider", "-rA", *workers, timeout=90)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*left behind at the end of the session:",
                                 "*thread still running: 'module-leak' (daemon, Event.wait)*"])
    result.assert_outcomes(passed=1)


def test_pytest_is_a_child_subreaper():
    value = ctypes.c_int(0)
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) == 0
    assert value.value == 1
