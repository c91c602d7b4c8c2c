"""The stdio launcher and transport: exact launch, reduced environment, shutdown."""

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from albedo_actors.config import ServerConfig
from albedo_actors.connection.stdio_link import launch_spec
from albedo_actors.transport.stdio import LaunchFailed, LaunchSpec, StdioTransport


class Recorder:
    """Collects lines and the closing reason from a transport's reader thread."""

    def __init__(self):
        self.lines = []
        self.closed = threading.Event()
        self.reason = None
        self.got_line = threading.Event()

    def on_line(self, line):
        self.lines.append(json.loads(line))
        self.got_line.set()

    def on_closed(self, reason, local):
        self.reason = reason
        self.closed.set()

    def first(self, timeout=10):
        assert self.got_line.wait(timeout), "the server printed nothing"
        return self.lines[0]


def script(tmp_path, body, name="server.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def start(spec):
    recorder = Recorder()
    transport = StdioTransport(spec, recorder.on_line, recorder.on_closed, name="t")
    transport.start()
    return transport, recorder


def stop(transport):
    transport.close()
    assert transport.wait_closed(), "the server did not end"


def python_spec(tmp_path, path, *args, env=None):
    return LaunchSpec(executable=sys.executable, args=(path, *args), cwd=str(tmp_path), env=env or {"PATH": os.defpath})


def pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def wait_gone(pid, timeout=10.0):
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not pid_alive(pid)


ENV_DUMP = """
    import json, os, sys
    print(json.dumps({"env": dict(os.environ), "argv": sys.argv[1:], "cwd": os.getcwd()}), flush=True)
    sys.stdin.read()
"""


def test_server_gets_only_home_path_tmpdir_and_named_values(tmp_path, monkeypatch):
    monkeypatch.setenv("ALBEDO_CANARY_SECRET", "canary-7f3a9d")
    monkeypatch.setenv("MY_DOCS_TOKEN", "docs-token-5521")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    server = ServerConfig(
        name="envtest", type="stdio", command=sys.executable, args=("-I", script(tmp_path, ENV_DUMP)),
        cwd=str(tmp_path), env={"DOCS_TOKEN": "MY_DOCS_TOKEN"},
    )
    transport, recorder = start(launch_spec(server, str(tmp_path)))
    try:
        env = recorder.first()["env"]
        with open(f"/proc/{transport._launcher.pid}/environ", "rb") as f:
            launcher_env = f.read()
    finally:
        stop(transport)
    env.pop("LC_CTYPE", None)  # CPython may set it for its own locale coercion
    assert env == {"HOME": os.environ["HOME"], "PATH": os.environ["PATH"], "TMPDIR": str(tmp_path), "DOCS_TOKEN": "docs-token-5521"}
    assert b"canary-7f3a9d" not in launcher_env


def test_arguments_reach_the_server_verbatim_without_a_shell(tmp_path):
    args = ["; touch pwned", "$(touch pwned2)", "`id`", "a b", "*", "'\"", "&&", "|", "\\n"]
    transport, recorder = start(python_spec(tmp_path, script(tmp_path, ENV_DUMP), *args))
    try:
        seen = recorder.first()
    finally:
        stop(transport)
    assert seen["argv"] == args
    assert seen["cwd"] == str(tmp_path)
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()


SIGNALS = """
    import os, signal, sys, time
    log = sys.argv[1]
    stubborn = len(sys.argv) > 2
    def note(what):
        with open(log, "a") as f:
            f.write(what + "\\n")
    def on_term(signum, frame):
        note("term")
        if not stubborn:
            sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    print('{"ready": true}', flush=True)
    sys.stdin.read()
    note("eof")
    if stubborn:
        while True:
            time.sleep(3600)
"""


def test_server_that_exits_on_eof_is_not_signalled(tmp_path):
    log = tmp_path / "log"
    transport, recorder = start(python_spec(tmp_path, script(tmp_path, SIGNALS), str(log)))
    recorder.first()
    pid = transport.server_pid
    stop(transport)
    assert not pid_alive(pid)
    assert log.read_text().split() == ["eof"]


def test_server_that_ignores_eof_and_sigterm_still_ends(tmp_path):
    log = tmp_path / "log"
    transport, recorder = start(python_spec(tmp_path, script(tmp_path, SIGNALS), str(log), "stubborn"))
    recorder.first()
    pid = transport.server_pid
    stop(transport)
    assert not pid_alive(pid)
    # It saw EOF, then SIGTERM, ignored both, and was killed.
    assert log.read_text().split() == ["eof", "term"]


HOST = """
    import sys, time
    from albedo_actors.transport.stdio import LaunchSpec, StdioTransport
    spec = LaunchSpec(executable=sys.executable, args=("-c", "import time; time.sleep(3600)"), cwd=sys.argv[1], env={"PATH": "/usr/bin:/bin"})
    transport = StdioTransport(spec, lambda line: None, lambda reason, local: None)
    transport.start()
    print(transport.server_pid, flush=True)
    time.sleep(3600)
"""


def test_server_ends_when_the_host_dies(tmp_path):
    host = subprocess.Popen([sys.executable, script(tmp_path, HOST, "host.py"), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        server_pid = int(host.stdout.readline())
        assert pid_alive(server_pid)
    finally:
        host.kill()
        host.wait()
        host.stdout.close()
    # The launcher sees its control pipe close, and ends the server (it ignores no signal).
    assert wait_gone(server_pid), "the server outlived its host"


def test_unexpected_exit_reports_status_and_stderr_tail_with_secrets_redacted(tmp_path):
    body = """
        import os, sys
        sys.stderr.write("loading config\\n" + "noise\\n" * 500 + "token is " + os.environ["TOKEN"] + "\\nfatal: cannot open database /nope\\n")
        sys.exit(3)
    """
    spec = LaunchSpec(
        executable=sys.executable, args=(script(tmp_path, body),), cwd=str(tmp_path),
        env={"PATH": os.defpath, "TOKEN": "sekrit-value-991"}, secrets=("sekrit-value-991",),
    )
    transport, recorder = start(spec)
    try:
        assert recorder.closed.wait(10)
    finally:
        stop(transport)
    assert recorder.reason.startswith("exited with status 3; its stderr ended with:")
    assert "fatal: cannot open database /nope" in recorder.reason
    assert "token is ***" in recorder.reason and "sekrit-value-991" not in recorder.reason
    assert "loading config" not in recorder.reason  # only a bounded tail is kept
    assert "\n" not in recorder.reason


def test_an_executable_that_cannot_run_fails_to_start_with_its_reason(tmp_path):
    path = tmp_path / "not-executable"
    path.write_text("#!/bin/sh\n")
    recorder = Recorder()
    transport = StdioTransport(
        LaunchSpec(executable=str(path), args=(), cwd=str(tmp_path), env={"PATH": os.defpath}), recorder.on_line, recorder.on_closed
    )
    with pytest.raises(LaunchFailed, match="Permission denied"):
        transport.start()
    assert transport.wait_closed(2)


def test_writes_to_a_server_that_never_reads_are_bounded(tmp_path):
    from albedo_actors.transport.stdio import WriteTimeout

    body = "import time\nprint('{}', flush=True)\ntime.sleep(3600)\n"
    transport, recorder = start(python_spec(tmp_path, script(tmp_path, body)))
    recorder.first()
    try:
        with pytest.raises(WriteTimeout):
            for _ in range(1000):
                transport.send(b"x" * 65536 + b"\n", timeout=0.2)
        assert transport.closed
    finally:
        stop(transport)
