"""The admin commands of ``albedo-mcp`` (servers, add, edit, remove, enable, disable), as subprocesses.

Secrets go in on standard input (never in argv). The last test is the canary test of
issue 4 item 6: every command and failure path runs at DEBUG logging (``--verbose``)
with canary secrets, and no canary may show up in any output, in extensions.json, or in
any file under the home other than the database's own files.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from helpers import FAULT_SERVER
from servers.fault_http_server import FaultHTTPServer

pytest.importorskip("albedo_actors.store")

RUN_TIMEOUT = 60  # seconds; a bound on every command, never an expected duration
DATABASE_FILES = {"albedo.db", "albedo.db-wal", "albedo.db-shm", "albedo.db-journal"}


def fault_line(*flags: str) -> str:
    return shlex.join([sys.executable, FAULT_SERVER, *flags])


def albedo(home, *argv: str, stdin: str = "", env: dict | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "albedo_actors", *argv, "--home", str(home)]
    environ = {k: v for k, v in os.environ.items() if k != "ALBEDO_DATABASE_URL"}
    environ.update(env or {})
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=RUN_TIMEOUT, env=environ)


def assert_one_line_error(run: subprocess.CompletedProcess, code: int) -> str:
    assert run.returncode == code, f"exit {run.returncode}, stderr: {run.stderr!r}"
    assert "Traceback" not in run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("albedo-mcp: "), run.stderr
    return lines[0]


@pytest.fixture
def http_server():
    server = FaultHTTPServer()
    server.start()
    yield server
    assert server.stop(), "the fault server's threads did not end"


def servers_json(home) -> list[dict]:
    run = albedo(home, "servers", "--json")
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_add_stdio_with_an_env_secret_from_stdin_then_list_and_call(tmp_path):
    home = tmp_path / "home"
    run = albedo(home, "add", "--transport", "stdio", fault_line(), "--name", "files", "--env", "API_KEY", stdin="from-stdin-42\n")
    assert run.returncode == 0, run.stderr
    assert "from-stdin-42" not in (home / "extensions.json").read_text()
    listed = servers_json(home)
    assert listed == [
        {
            "name": "files",
            "transport": "stdio",
            "enabled": True,
            "state": "catalogue saved",
            "target": fault_line(),
            "catalogueSaved": True,
            "credentials": ["env API_KEY"],
            "auth": {"state": "none", "account": None, "expires_at": None, "scope": None, "step_up": None, "reason": None, "client": None},
            "problem": None,
            "catalogue": "current",
            "lastSeen": None,
        }
    ]
    call = subprocess.run(
        [sys.executable, "-m", "albedo_actors", "--home", str(home), "call", "files/env"],
        capture_output=True, text=True, timeout=RUN_TIMEOUT,
    )
    assert call.returncode == 0, call.stderr
    assert json.loads(call.stdout)["API_KEY"] == "from-stdin-42"


def test_add_suggests_the_name_from_the_command_package_and_the_url_host(tmp_path, http_server):
    home = tmp_path / "home"
    run = albedo(home, "add", "--transport", "stdio", fault_line() + ' "/srv/my docs"', "--disabled")
    assert run.returncode == 0, run.stderr
    run = albedo(home, "add", http_server.url)  # http://127.0.0.1:PORT/mcp
    assert run.returncode == 0, run.stderr
    listed = {entry["name"]: entry for entry in servers_json(home)}
    assert set(listed) == {"fault_server", "127-0-0-1"}
    assert listed["fault_server"]["target"].endswith("'/srv/my docs'")
    saved = json.loads((home / "extensions.json").read_text())["mcp"]["servers"]["fault_server"]
    assert saved["args"] == [FAULT_SERVER, "/srv/my docs"]  # quotes honoured, no shell


def test_add_http_bearer_and_header_from_stdin_reach_the_server(tmp_path, http_server):
    home = tmp_path / "home"
    run = albedo(home, "add", http_server.url, "--name", "web", "--bearer-token", "--header", "X-Api-Key", stdin="tok-9\nkey-9\n")
    assert run.returncode == 0, run.stderr
    posts = [r for r in http_server.requests if r.method == "POST"]
    assert posts and all(r.header("Authorization") == "Bearer tok-9" and r.header("X-Api-Key") == "key-9" for r in posts)
    assert servers_json(home)[0]["credentials"] == ["bearer token", "header X-Api-Key"]


def test_add_that_cannot_connect_exits_3_and_saves_nothing(tmp_path):
    home = tmp_path / "home"
    run = albedo(home, "add", "--transport", "stdio", fault_line("--stderr-and-exit", "3"), "--name", "broken")
    line = assert_one_line_error(run, 3)
    assert "'broken'" in line and "not saved" in line
    assert servers_json(home) == []


def test_disable_enable_remove(tmp_path):
    home = tmp_path / "home"
    assert albedo(home, "add", "--transport", "stdio", fault_line(), "--name", "files").returncode == 0
    assert albedo(home, "disable", "files").returncode == 0
    assert servers_json(home)[0]["enabled"] is False
    assert albedo(home, "enable", "files").returncode == 0
    assert servers_json(home)[0]["enabled"] is True
    assert albedo(home, "remove", "files").returncode == 0
    assert servers_json(home) == []
    assert_one_line_error(albedo(home, "remove", "files"), 2)


def test_edit_blank_keeps_and_dash_removes(tmp_path):
    home = tmp_path / "home"
    run = albedo(home, "add", "--transport", "stdio", fault_line(), "--name", "files", "--env", "A", "--env", "B", stdin="a\nb\n")
    assert run.returncode == 0, run.stderr
    run = albedo(home, "edit", "files", "--env", "A", "--env", "B", stdin="\n-\n")
    assert run.returncode == 0, run.stderr
    assert servers_json(home)[0]["credentials"] == ["env A"]


@pytest.mark.parametrize(
    "argv",
    [
        ["add", "--transport", "stdio", "x 'unclosed"],
        ["add", "http://example.com/", "--env", "K=v"],
        ["add", "ftp://example.com/"],
        ["edit", "nothere"],
        ["add", "http://example.com/", "--bearer-token"],  # stdin ends before the token
    ],
)
def test_usage_errors_exit_2_with_one_line(tmp_path, argv):
    assert_one_line_error(albedo(tmp_path / "home", *argv), 2)


# -- item 6: canaries -------------------------------------------------------------------------


def test_database_option_names_the_store(tmp_path):
    home = tmp_path / "home"
    database = tmp_path / "elsewhere.db"
    url = f"sqlite:///{database}"
    run = albedo(home, "--database", url, "add", "--transport", "stdio", fault_line(), "--name", "files", "--env", "K", stdin="v\n")
    assert run.returncode == 0, run.stderr
    assert database.exists() and not (home / "albedo.db").exists()
    listed = json.loads(albedo(home, "servers", "--json", "--database", url).stdout)
    assert listed[0]["credentials"] == ["env K"]
    call = albedo(home, "call", "files/env", "--database", url)
    assert call.returncode == 0, call.stderr
    assert json.loads(call.stdout)["K"] == "v"


def test_no_canary_secret_leaks_at_debug_logging(tmp_path, http_server, monkeypatch):
    monkeypatch.delenv("ALBEDO_DATABASE_URL", raising=False)
    home = tmp_path / "home"
    canaries = [f"CANARY-{i}-a9f3c1" for i in range(12)]
    outputs: list[str] = []

    def run(*argv: str, stdin: str = "", code: int = 0, env: dict | None = None) -> None:
        result = albedo(home, "--verbose", *argv, stdin=stdin, env=env)
        outputs.extend([result.stdout, result.stderr])
        assert result.returncode == code, f"{argv}: exit {result.returncode}, stderr: {result.stderr[-2000:]}"

    dead = "http://127.0.0.1:9/mcp"
    run("add", http_server.url, "--name", "web", "--bearer-token", "--header", "X-Canary", stdin=f"{canaries[0]}\n{canaries[1]}\n")
    run("add", "--transport", "stdio", fault_line(), "--name", "files", "--env", "TOKEN", stdin=f"{canaries[2]}\n")
    run("add", dead, "--name", "dead", "--bearer-token", "--header", "X-Canary", stdin=f"{canaries[3]}\n{canaries[4]}\n", code=3)
    run("add", "--transport", "stdio", fault_line("--stderr-and-exit", "3"), "--name", "broken", "--env", "T", stdin=f"{canaries[5]}\n", code=3)
    run("add", dead, "--name", "off", "--disabled", "--bearer-token-env", "CANARY_VAR", env={"CANARY_VAR": canaries[6]})
    run("edit", "web", "--bearer-token", stdin=f"{canaries[7]}\n")
    run("edit", "web", "--url", dead, "--bearer-token", stdin=f"{canaries[8]}\n", code=3)
    run("edit", "files", "--env", "TOKEN", "--env", "OTHER", stdin=f"\n{canaries[9]}\n")
    run("edit", "files", "--command", fault_line("--stderr-and-exit", "3"), "--env", "TOKEN", stdin=f"{canaries[10]}\n", code=3)
    run("enable", "off", code=3)
    run("servers")
    run("servers", "--json")
    run("tools")
    run("call", "files/echo", "--args", '{"text": "hello"}')
    run("disable", "web")
    run("enable", "web")
    run("add", "--transport", "stdio", fault_line(), "--env", "KEY", stdin="", code=2)  # stdin ends early
    run("edit", "web", "--header", "Bad Header", stdin=f"{canaries[11]}\n", code=2)
    run("remove", "dead", code=2)
    # The secrets did reach the store (so the test is not vacuous), and failed saves were undone.
    from albedo_actors.store import open_store

    store = open_store(str(home))
    try:
        assert dict(store.get_credentials("files").env) == {"TOKEN": canaries[2], "OTHER": canaries[9]}
        assert store.get_credentials("web").bearer_token == canaries[7]
        assert store.get_credentials("web").header == ("X-Canary", canaries[1])
        assert store.get_credentials("off").bearer_token == canaries[6]
        assert store.get_credentials("dead").empty and store.get_credentials("broken").empty
    finally:
        store.close()
    run("remove", "files")
    run("remove", "web")

    for text in outputs:
        for canary in canaries:
            assert canary not in text, f"{canary} appeared in output: {text[-1500:]}"
    checked = 0
    for directory, _dirs, files in os.walk(home):
        for name in files:
            if directory == str(home) and name in DATABASE_FILES:
                continue
            with open(os.path.join(directory, name), "rb") as f:
                data = f.read()
            checked += 1
            for canary in canaries:
                assert canary.encode() not in data, f"{canary} found in {os.path.join(directory, name)}"
    assert checked >= 1  # extensions.json at least
    assert "DEBUG" in "".join(outputs)  # the runs really logged at DEBUG


def test_a_secret_typed_on_a_terminal_is_not_echoed(tmp_path):
    import pty
    import select
    import time

    home = tmp_path / "home"
    master, slave = pty.openpty()
    command = [sys.executable, "-m", "albedo_actors", "add", "--transport", "stdio", fault_line(), "--name", "files", "--env", "KEY", "--home", str(home)]
    environ = {k: v for k, v in os.environ.items() if k != "ALBEDO_DATABASE_URL"}
    # A new session has no controlling terminal, so getpass uses the pty on stdin.
    proc = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave, start_new_session=True, env=environ)
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while b"value of env KEY" not in seen and time.monotonic() < deadline:
            if select.select([master], [], [], 1.0)[0]:
                seen += os.read(master, 4096)
        assert b"value of env KEY" in seen, seen
        os.write(master, b"typed-secret-5150\n")
        while proc.poll() is None and time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    seen += os.read(master, 4096)
                except OSError:
                    break
        assert proc.wait(timeout=RUN_TIMEOUT) == 0, seen
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert b"typed-secret-5150" not in seen
    assert b"added files" in seen
    assert servers_json(home)[0]["credentials"] == ["env KEY"]
