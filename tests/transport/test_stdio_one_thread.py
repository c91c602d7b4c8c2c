"""The stdio transport's one thread, its coalesced writes, and the one-threaded launcher
(issue 14): real launchers and servers, real pipes; waits are bounded, never sleeps.

- many callers writing at once: every line arrives whole and every answer is matched;
- a server that stops reading: every writer returns or fails in time, one reason;
- the launcher killed by SIGKILL: the host ends the group, on_closed once, with why;
- a server that exits with a status: reported once, with its stderr tail;
- an idle connection costs the host one thread (two with its client actor), the
  launcher is one thread, and nothing is left once closed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import threading
import time

from albedo_actors.actors.client import ServerHandle
from albedo_actors.config import ServerConfig
from albedo_actors.transport.stdio import LaunchSpec, StdioTransport, TransportClosed, WriteTimeout
from helpers import HERE, text_of

PROCESS_SERVER = os.path.join(HERE, "servers", "fault_process_server.py")

# Answers each chunk's lines in reverse order, so the answers come back out of order.
ECHO = """
    import json, os, sys
    buffer = b""
    while True:
        chunk = os.read(0, 1 << 16)
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = buffer.split(b"\\n")
        out = [json.dumps({"id": json.loads(line)["id"], "size": len(line)}).encode() + b"\\n" for line in lines if line]
        os.write(1, b"".join(reversed(out)))
"""


class Recorder:
    """Lines and the one closing call, from the transport's thread."""

    def __init__(self) -> None:
        self.lines: list[dict] = []
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.closings: list[tuple[str, bool]] = []
        self.closed = threading.Event()

    def on_line(self, line: bytes) -> None:
        with self.changed:
            self.lines.append(json.loads(line))
            self.changed.notify_all()

    def on_closed(self, reason: str, local: bool) -> None:
        with self.changed:
            self.closings.append((reason, local))
        self.closed.set()

    def wait_lines(self, count: int, timeout: float = 30.0) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: len(self.lines) >= count, timeout)


def script(tmp_path, body: str, name: str = "server.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def start(tmp_path, body: str, *args: str, env: dict | None = None, secrets: tuple = ()) -> tuple[StdioTransport, Recorder]:
    spec = LaunchSpec(executable=sys.executable, args=(script(tmp_path, body), *args), cwd=str(tmp_path),
                      env=env or {"PATH": os.defpath}, secrets=secrets)
    recorder = Recorder()
    transport = StdioTransport(spec, recorder.on_line, recorder.on_closed, name="t")
    transport.start()
    return transport, recorder


def stop(transport: StdioTransport) -> None:
    transport.close()
    assert transport.wait_closed(), "the server did not end"


def tasks(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    return data[data.rindex(b")") + 2:].split()[0] not in (b"Z", b"X")


def transport_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("mcp-stdio")]


def test_64_concurrent_writers_get_every_answer_matched_and_no_line_torn(tmp_path):
    transport, recorder = start(tmp_path, ECHO)
    writers, each = 64, 40
    go = threading.Barrier(writers)
    failures: list[BaseException] = []

    def write(first: int) -> None:
        go.wait()
        try:
            for n in range(first, first + each):
                # Lines of different sizes, some over a pipe-buffer page, to tear if torn.
                pad = "x" * (n % 7 * 1500)
                transport.send(json.dumps({"id": n, "pad": pad}).encode() + b"\n", timeout=10.0)
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(i * each,)) for i in range(writers)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not failures, failures
        assert recorder.wait_lines(writers * each), f"{len(recorder.lines)} of {writers * each} answers came"
    finally:
        stop(transport)
    ids = sorted(line["id"] for line in recorder.lines)
    assert ids == list(range(writers * each)), "an answer was lost or repeated"
    # Each line reached the server whole: its size is the size that was sent.
    for line in recorder.lines:
        n = line["id"]
        assert line["size"] == len(json.dumps({"id": n, "pad": "x" * (n % 7 * 1500)})), line
    assert len(recorder.closings) == 1


NEVER_READS = """
    import time
    print('{"id": -1}', flush=True)
    time.sleep(3600)
"""


def test_concurrent_writers_to_a_server_that_stops_reading_all_end_in_time_with_one_reason(tmp_path):
    transport, recorder = start(tmp_path, NEVER_READS)
    assert recorder.wait_lines(1)
    outcomes: list[str] = []
    started = time.monotonic()

    def write() -> None:
        try:
            for _ in range(200):
                transport.send(b'{"pad": "' + b"y" * 65536 + b'"}\n', timeout=0.5)
            outcomes.append("returned")
        except WriteTimeout:
            outcomes.append("timeout")
        except TransportClosed:
            outcomes.append("closed")

    threads = [threading.Thread(target=write) for _ in range(16)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        hung = [t for t in threads if t.is_alive()]
        took = time.monotonic() - started
        if hung:  # free them (a write to a pipe nobody holds fails) before failing
            os.killpg(transport.server_pid, signal.SIGKILL)
            for thread in hung:
                thread.join(10)
        assert not hung, "a writer hung on a server that does not read"
        assert transport.closed
        assert recorder.closed.wait(10)
    finally:
        stop(transport)
    assert len(outcomes) == 16 and "timeout" in outcomes, outcomes
    assert took < 15, took  # one bounded write (0.5 s) ends them all; the bound only guards a hang
    [(reason, local)] = recorder.closings
    assert reason == "the server stopped reading its input" and local


def test_a_sigkilled_launcher_leaves_the_host_to_end_the_group_and_report_once(tmp_path):
    # A server that ignores EOF and SIGTERM, with a child in its group.
    body = """
        import os, signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c", "import time, signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"])
        print('{"pid": %d, "child": %d, "ppid": %d}' % (os.getpid(), child.pid, os.getppid()), flush=True)
        sys.stdin.read()
        time.sleep(3600)
    """
    transport, recorder = start(tmp_path, body)
    try:
        assert recorder.wait_lines(1)
        pids = recorder.lines[0]
        assert pids["pid"] == transport.server_pid
        os.kill(pids["ppid"], signal.SIGKILL)
        # EOF, 2 s, SIGTERM (ignored), 2 s, SIGKILL: then its output ends.
        assert recorder.closed.wait(15), "on_closed was never called"
    finally:
        stop(transport)  # returns once the group is gone
    assert not running(pids["pid"]), "the server outlived its launcher"
    assert not running(pids["child"]), "the server's child outlived its group's end"
    assert recorder.closings == [("its launcher was killed by signal 9; the server was ended", True)]
    assert transport_threads() == []


def test_a_server_that_exits_with_a_status_is_reported_once_with_its_stderr(tmp_path):
    body = """
        import os, sys
        sys.stderr.write("starting\\nkey " + os.environ["KEY"] + " refused\\n")
        sys.exit(7)
    """
    transport, recorder = start(tmp_path, body, env={"PATH": os.defpath, "KEY": "hush-hush-42"}, secrets=("hush-hush-42",))
    try:
        assert recorder.closed.wait(10)
    finally:
        stop(transport)
    [(reason, local)] = recorder.closings
    assert reason == "exited with status 7; its stderr ended with: starting | key *** refused"
    assert not local


IDLE = """
    import sys
    print('{"id": 0}', flush=True)
    sys.stdin.read()
"""


def test_an_idle_connection_is_one_host_thread_and_a_one_threaded_launcher(tmp_path):
    before = set(threading.enumerate())
    transport, recorder = start(tmp_path, IDLE)
    try:
        assert recorder.wait_lines(1)
        assert len(set(threading.enumerate()) - before) == 1
        launcher = transport._launcher
        assert launcher is not None and tasks(launcher.pid) == 1
    finally:
        stop(transport)
    assert set(threading.enumerate()) - before == set()
    assert [reason for reason, _local in recorder.closings] == ["closed"]


def test_each_further_idle_stdio_server_costs_the_host_at_most_two_threads(tmp_path):
    handles = []
    try:
        first = ServerHandle.start(ServerConfig(name="s0", type="stdio", command=sys.executable, args=(PROCESS_SERVER,)), str(tmp_path))
        handles.append(first)
        text_of(first.call_tool("pids"))
        base = threading.active_count()
        for i in range(1, 4):
            handle = ServerHandle.start(ServerConfig(name=f"s{i}", type="stdio", command=sys.executable, args=(PROCESS_SERVER,)), str(tmp_path))
            handles.append(handle)
            text_of(handle.call_tool("pids"))
        assert threading.active_count() - base <= 2 * 3, [t.name for t in threading.enumerate()]
    finally:
        for handle in handles:
            handle.stop()


def test_a_host_with_descriptors_past_1024_starts_writes_and_times_out_writes(tmp_path):
    # A host with a few hundred servers holds more than 1024 descriptors: select()
    # refuses those, poll() does not.
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1300:
        if hard != resource.RLIM_INFINITY and hard < 1300:
            import pytest

            pytest.skip(f"the descriptor limit ({hard}) is below 1300")
        resource.setrlimit(resource.RLIMIT_NOFILE, (1300, hard))
    held = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        transport, recorder = start(tmp_path, ECHO)
        try:
            transport.send(b'{"id": 5}\n', timeout=5.0)
            assert recorder.wait_lines(1) and recorder.lines[0]["id"] == 5
        finally:
            stop(transport)
        transport, recorder = start(tmp_path, NEVER_READS)
        try:
            assert recorder.wait_lines(1)
            try:
                for _ in range(100):
                    transport.send(b"z" * 65536 + b"\n", timeout=0.3)
                raise AssertionError("a server that never reads took 6.5 MiB")
            except WriteTimeout:
                pass
        finally:
            stop(transport)
    finally:
        for fd in held:
            os.close(fd)
        if soft < 1300:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert recorder.closings == [("the server stopped reading its input", True)]


def test_an_on_line_that_raises_ends_the_connection_and_the_thread_still_reaps(tmp_path):
    closings: list[tuple[str, bool]] = []
    closed = threading.Event()

    def on_line(line: bytes) -> None:
        raise KeyError("our bug")

    def on_closed(reason: str, local: bool) -> None:
        closings.append((reason, local))
        closed.set()

    spec = LaunchSpec(executable=sys.executable, args=(script(tmp_path, IDLE),), cwd=str(tmp_path), env={"PATH": os.defpath})
    transport = StdioTransport(spec, on_line, on_closed, name="t")
    transport.start()
    launcher = transport._launcher
    try:
        assert closed.wait(10), "on_closed was never called"
    finally:
        stop(transport)
    assert closings == [("sent output this client could not handle (KeyError)", False)]
    assert launcher is not None and launcher.returncode == 0, "the launcher was not reaped"
    assert transport_threads() == []
