"""Stored tasks resumed from another process (docs/tasks.rst, "How a host resumes"), with
real processes: a host (tests/task_host.py, a Runtime over a store) calls a task tool and
SIGKILLs itself mid-task, or closes normally while the task runs; then ``albedo-mcp tasks``
or ``mcp.tasks()`` / ``mcp.task_result()`` of a new process finds the task and resumes it.

Peers: server-everything over streamable HTTP (2025-11-25, one task store per
``Mcp-Session-Id``; started here so that a test can stop or restart it) and over stdio;
the fastmcp-tasks peer over HTTP (2026-07-28, stateless). Two hosts share a PostgreSQL
database (``pg_server_url``): only one polls a task, and one takes over when the other's
lease runs out. What each host sent is counted with its OpenTelemetry spans (task_host.py
prints its ``tasks/get`` count).

Waits are bounded (WAIT); nothing sleeps to synchronise: a host says when it got where
the test needs it (a line on its stdout), and a row's change is polled with a bound.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import uuid

import pytest

from albedo_actors.actors.tasks import arguments_digest
from albedo_actors.errors import UnknownOutcome
from albedo_actors.runtime import Runtime
from albedo_actors.store import open_store
from albedo_actors.store.records import TaskRecord
from albedo_actors.store.sealing import new_key
import helpers
from helpers import HERE, FastMCPTasksServer, require_everything, store_cli_env

sys.path.insert(0, os.path.join(HERE, "peers"))
from test_fastmcp_tasks_peer import rpc, tasks_python  # noqa: E402  (tests/peers)

from test_cli import assert_one_line_error  # noqa: E402

RESEARCH = "simulate-research-query"
WAIT = 60.0  # seconds: a bound on what a process is proven to do, never an expected duration
HOST = os.path.join(HERE, "task_host.py")
REPO = os.path.dirname(HERE)


# -- processes --------------------------------------------------------------------------------


def env(**extra: str) -> dict[str, str]:
    """A host's or the CLI's environment: no store key or database of this process, PYTHONPATH this tree."""
    found = store_cli_env(**extra)
    found["PYTHONPATH"] = REPO
    return found


class Host:
    """tests/task_host.py with ``spec``; ``line()`` is its next stdout line, as JSON."""

    def __init__(self, spec: dict, environ: dict[str, str] | None = None) -> None:
        self.started = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, HOST, json.dumps(spec)], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=environ or env())
        self._buffer = b""

    def line(self) -> dict:
        deadline = time.monotonic() + WAIT
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                self.kill()
                raise AssertionError(f"the host said nothing within {WAIT:g} s: {self.proc.stderr.read().decode()}")
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                raise AssertionError(f"the host ended ({self.proc.wait()}) without a line: "
                                     f"{self.proc.stderr.read().decode()}")
            self._buffer += chunk
        text, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(text)

    def wait(self) -> int:
        code = self.proc.wait(WAIT)
        self.stderr = self.proc.stderr.read().decode()
        self.proc.stdout.close()
        self.proc.stderr.close()
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def host(home, mode: str, operation: str, *, environ=None, **spec) -> Host:
    return Host({"home": str(home), "mode": mode, "operation": operation, **spec}, environ)


def cli(home, *argv: str, environ=None, database: str | None = None) -> subprocess.CompletedProcess:
    where = ["--database", database] if database else []
    return subprocess.run([sys.executable, "-m", "albedo_actors", "--home", str(home), *where, *argv],
                          capture_output=True, text=True, timeout=WAIT * 2, env=environ or env())


def write_config(home, servers: dict) -> None:
    home.mkdir(mode=0o700, exist_ok=True)
    (home / "extensions.json").write_text(json.dumps({"mcp": {"servers": servers}}), encoding="utf-8")


def until(check, what: str):
    return helpers.until(check, what, WAIT)


def row(home, server: str, task_id: str, database: str | None = None, **environ) -> TaskRecord | None:
    store = open_store(str(home), url=database, environ=environ)
    try:
        return store.get_task(server, task_id)
    finally:
        store.close()


def no_traceback(*runs: subprocess.CompletedProcess) -> None:
    for run in runs:
        assert "Traceback" not in run.stderr, run.stderr


class Everything:
    """server-everything's streamableHttp on a port of its own, which a test can stop
    and start again (a restarted server forgets its sessions). Its stdout (a line per
    request and session) is appended to ``log``."""

    def __init__(self, log) -> None:
        self.log = log
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(["node", require_everything(), "streamableHttp"],
                                         env={**os.environ, "PORT": str(self.port)}, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        seen = b""
        while b"listening on port" not in seen:
            if not select.select([self.proc.stderr], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise RuntimeError("server-everything did not start listening within 30 s")
            chunk = os.read(self.proc.stderr.fileno(), 4096)
            if not chunk:
                raise RuntimeError(f"server-everything exited ({self.proc.wait()}): {seen.decode(errors='replace')}")
            seen += chunk

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr.close()

    def logged(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


@pytest.fixture
def everything(tmp_path):
    server = Everything(tmp_path / "everything.log")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def fastmcp_http():
    server = FastMCPTasksServer(tasks_python())
    server.start()
    yield server.url
    server.stop()


def killed(home, operation: str, at: str, **spec) -> str:
    """A host that calls ``operation`` and SIGKILLs itself when a report says ``at``; the task's id."""
    started = host(home, "kill", operation, at=at, **spec)
    said = started.line()
    assert started.wait() == -signal.SIGKILL, started.stderr
    return said["id"]


# -- 1. a host SIGKILLed mid-task, resumed by a new process ------------------------------------


def test_everything_http_task_of_a_killed_host_is_resumed_by_the_cli(tmp_path, everything):
    home = tmp_path / "home"
    write_config(home, {"every": {"url": everything.url}})
    task_id = killed(home, f"every/{RESEARCH}", "Analyzing content", arguments={"topic": "tides"})

    listed = cli(home, "tasks", "--json")
    assert listed.returncode == 0, listed.stderr
    [task] = json.loads(listed.stdout)
    assert (task["id"], task["server"], task["tool"], task["state"]) == (task_id, "every", RESEARCH, "working")
    assert isinstance(task["age"], (int, float)) and 0 <= task["age"] < WAIT
    assert isinstance(task["expiresIn"], (int, float)) and task["expiresIn"] > 0
    assert task["polled"] is False  # its poller is a process of this machine that no longer runs

    # Resumed at once (the lease of a dead process of this machine is not waited out: 60 s).
    resumed = cli(home, "tasks", "result", task_id, "--timeout", "30")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith("# Research Report: tides\n")
    assert "Stage 4: Generating report" in resumed.stdout
    assert resumed.stderr == ""

    after = cli(home, "tasks")
    assert after.returncode == 0 and task_id not in after.stdout
    assert after.stdout.startswith("no tasks running")
    every = json.loads(cli(home, "tasks", "--all", "--json").stdout)
    assert [(t["id"], t["state"]) for t in every] == [(task_id, "completed")]

    # Answered from the row: the server is not even running.
    everything.stop()
    again = cli(home, "tasks", "result", task_id)
    assert again.returncode == 0, again.stderr
    assert again.stdout == resumed.stdout
    no_traceback(listed, after, again)


def test_fastmcp_http_task_of_a_killed_host_is_resumed_through_the_python_api(tmp_path, fastmcp_http):
    home = tmp_path / "home"
    write_config(home, {"fast": {"url": fastmcp_http, "tasks": "always"}})
    task_id = killed(home, "fast/slow", "step ", arguments={"seconds": 3})

    store = open_store(str(home))
    try:
        with Runtime(str(home), store, enabled=True, background=False) as runtime:
            mcp = runtime.mcp()
            [task] = mcp.tasks()
            assert (task["id"], task["server"], task["tool"], task["state"]) == (task_id, "fast", "slow", "working")
            assert task["era"] == "modern" and task["transport"] == "http"
            result = mcp.task_result(task_id, timeout=30)
            assert result["structuredContent"] == {"result": "slept 3.0"}
            assert mcp.tasks() == []
            assert [(t["id"], t["state"]) for t in mcp.tasks(pending_only=False)] == [(task_id, "completed")]
            again = mcp.task_result(f"fast/{task_id}", timeout=1)
            assert again.as_dict() == result.as_dict()  # answered from the row
    finally:
        store.close()


def test_stdio_task_of_a_killed_host_is_lost_in_one_line(tmp_path):
    home = tmp_path / "home"
    write_config(home, {"every": {"command": "node", "args": [require_everything(), "stdio"]}})
    task_id = killed(home, f"every/{RESEARCH}", "Gathering sources", arguments={"topic": "tides"})

    resumed = cli(home, "tasks", "result", task_id)
    line = assert_one_line_error(resumed, 4, task_id, "is lost", "stdio server process")
    assert "ended with its host" in line
    record = row(home, "every", task_id)
    assert record is not None and record.state == "lost"
    # Asked again, the row answers the same.
    assert_one_line_error(cli(home, "tasks", "result", task_id), 4, "is lost", "stdio")


def test_everything_restarted_after_the_kill_forgot_the_session_so_the_task_is_lost(tmp_path, everything):
    home = tmp_path / "home"
    write_config(home, {"every": {"url": everything.url}})
    task_id = killed(home, f"every/{RESEARCH}", "Gathering sources", arguments={"topic": "tides"})
    everything.stop()
    everything.start()  # the same port; no session of before

    resumed = cli(home, "tasks", "result", task_id)
    assert_one_line_error(resumed, 4, task_id, "is lost", "session")
    record = row(home, "every", task_id)
    assert record is not None and record.state == "lost"


# -- 2. a host that closes normally while a task runs ------------------------------------------


def test_a_host_closing_while_a_task_runs_keeps_the_session_and_the_task_is_resumed(tmp_path, everything):
    home = tmp_path / "home"
    write_config(home, {"every": {"url": everything.url}})
    closing = host(home, "close", f"every/{RESEARCH}", at="Gathering sources", arguments={"topic": "tides"})
    task_id = closing.line()["id"]
    closed = closing.line()
    assert closing.wait() == 0, closing.stderr
    assert closed["closed"] is True and closed["call"] != "returned", closed
    assert "Traceback" not in closing.stderr

    # No DELETE reached the server: the session (and its task store) lives on.
    assert "Session initialized with ID" in everything.logged()
    assert "session termination" not in everything.logged()

    resumed = cli(home, "tasks", "result", task_id, "--timeout", "30")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith("# Research Report: tides\n")
    assert "session termination" not in everything.logged()


# -- 3. two hosts on PostgreSQL ----------------------------------------------------------------


@pytest.fixture
def database(pg_server_url):
    import psycopg2

    name = "albedo_t_" + uuid.uuid4().hex[:16]
    admin = psycopg2.connect(pg_server_url, connect_timeout=10)
    admin.autocommit = True
    parts = urllib.parse.urlsplit(pg_server_url)
    try:
        with admin.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        yield urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def test_two_hosts_on_postgresql_only_one_polls_and_the_other_takes_over_a_lease_run_out(
        tmp_path, database, fastmcp_http):
    homes = []
    for name in ("a", "b"):
        home = tmp_path / name
        write_config(home, {"fast": {"url": fastmcp_http, "tasks": "always"}})
        homes.append(home)
    home_a, home_b = homes

    # A polls its task; B asks for the same task's result meanwhile: it waits on the row.
    a = host(home_a, "call", "fast/slow", at="step ", arguments={"seconds": 6}, database=database)
    task_id = a.line()["id"]
    b = host(home_b, "result", "fast/slow", task=task_id, timeout=WAIT, database=database)
    got_b = b.line()
    got_a = a.line()
    assert a.wait() == 0 and b.wait() == 0, (a.stderr, b.stderr)
    assert got_a["result"]["structuredContent"] == {"result": "slept 6.0"}
    assert got_b.get("result") == got_a["result"], got_b
    assert got_a["gets"] > 0
    assert got_b["gets"] == 0  # B never polled: A held the lease until the task ended
    record = row(home_b, "fast", task_id, database)
    assert record.state == "completed" and got_b["asked_at"] < record.updated_at  # B asked while A polled

    # The takeover: A, on "another machine" with a 2 s lease, is killed mid-task.
    task_id = killed(home_a, "fast/slow", "step ", arguments={"seconds": 4}, database=database,
                     hostname="elsewhere.example", lease=2)
    record = row(home_b, "fast", task_id, database)
    assert record is not None and record.state == "working"
    assert record.lease_owner is not None and record.lease_owner.startswith("elsewhere.example:")
    b = host(home_b, "result", "fast/slow", task=task_id, timeout=WAIT, database=database)
    got_b = b.line()
    assert b.wait() == 0, b.stderr
    assert got_b.get("result", {}).get("structuredContent") == {"result": "slept 4.0"}, got_b
    assert got_b["gets"] > 0  # B polled once A's lease ran out
    assert time.time() >= record.lease_until  # ... not before
    record = row(home_b, "fast", task_id, database)
    assert record.state == "completed" and record.lease_owner is None


# -- 4. the CLI's faces -------------------------------------------------------------------------


def stored(home, server: str, task_id: str, *, state: str = "completed", result: dict | None = None,
           expires_at: float | None = None, **environ) -> None:
    now = time.time()
    store = open_store(str(home), environ=environ)
    try:
        store.add_task(TaskRecord(
            server=server, task_id=task_id, tool="slow", era="modern", version="2026-07-28", transport="http",
            session_id=None, arguments_digest="sha256:0", arguments=None, state=state, message=None, poll_ms=200,
            ttl_ms=None if expires_at is None else 1000, created_at=now, updated_at=now, expires_at=expires_at,
            result=result, delivered=False))
    finally:
        store.close()


def text_result(text: str) -> dict:
    return {"content": [{"type": "text", "text": text}]}


def test_the_cli_faces_of_tasks(tmp_path, fastmcp_http):
    home = tmp_path / "home"
    write_config(home, {"fast": {"url": fastmcp_http, "tasks": "always"},
                        "twin": {"url": fastmcp_http, "tasks": "always"}})
    runs = []

    none = cli(home, "tasks")
    assert (none.returncode, none.stdout) == (0, "no tasks running (--all lists the ended ones kept)\n")
    assert cli(home, "tasks", "--all").stdout == "no tasks\n"
    assert json.loads(cli(home, "tasks", "--json").stdout) == []

    unknown = cli(home, "tasks", "result", "no-such-task")
    assert_one_line_error(unknown, 2, "no-such-task", "albedo-mcp tasks --all")

    # One id, two servers: SERVER/ID says which.
    stored(home, "fast", "shared-1", result=text_result("from fast"))
    stored(home, "twin", "shared-1", result=text_result("from twin"))
    shared = cli(home, "tasks", "result", "shared-1")
    assert_one_line_error(shared, 2, "shared-1", "fast, twin", "SERVER/shared-1")
    named = cli(home, "tasks", "result", "twin/shared-1")
    assert (named.returncode, named.stdout) == (0, "from twin\n"), named.stderr
    listed = json.loads(cli(home, "tasks", "--all", "--json").stdout)
    assert {(t["server"], t["id"], t["state"]) for t in listed} == {("fast", "shared-1", "completed"),
                                                                    ("twin", "shared-1", "completed")}
    assert set(listed[0]) >= {"id", "server", "tool", "state", "message", "age", "expiresIn"}

    # Cancel: the server got tasks/cancel, the row ends cancelled, a result then says so.
    task_id = killed(home, "fast/forever", "running until cancelled")
    cancelled = cli(home, "tasks", "cancel", task_id)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout == f"task {task_id} of server 'fast' was cancelled\n"
    on_server = rpc(fastmcp_http, "tasks/get", {"taskId": task_id}, name=task_id)["result"]
    assert on_server["status"] == "cancelled"
    assert row(home, "fast", task_id).state == "cancelled"
    after = cli(home, "tasks", "result", task_id)
    assert_one_line_error(after, 4, task_id, "cancelled")
    runs += [cancelled, after]

    # --timeout 1 on a task that runs longer: exit 5, it goes on, and completes.
    task_id = killed(home, "fast/slow", "step ", arguments={"seconds": 5})
    short = cli(home, "tasks", "result", task_id, "--timeout", "1")
    assert_one_line_error(short, 5, task_id, "goes on")
    assert row(home, "fast", task_id).state == "working"
    later = cli(home, "tasks", "result", task_id, "--timeout", "30")
    assert (later.returncode, later.stdout) == (0, "slept 5.0\n"), later.stderr
    runs += [none, named, short, later]
    no_traceback(*runs)


# -- 5. what is stored ---------------------------------------------------------------------------


def test_arguments_are_kept_only_when_asked_and_the_digest_is_keyed_under_a_store_key(tmp_path, fastmcp_http):
    key = new_key()
    rows = {}
    for name, keep, environ in (("plain", False, {}), ("kept", True, {"ALBEDO_STORE_KEY": key})):
        home = tmp_path / name
        write_config(home, {"fast": {"url": fastmcp_http, "tasks": "always"}})
        called = host(home, "call", "fast/slow", arguments={"seconds": 0.2}, keep_arguments=keep,
                      environ=env(**environ))
        assert called.line()["result"]["structuredContent"] == {"result": "slept 0.2"}
        assert called.wait() == 0, called.stderr
        store = open_store(str(home), environ=environ)
        try:
            [rows[name]] = store.list_tasks(pending_only=False)
            assert rows[name].arguments_digest == arguments_digest({"seconds": 0.2}, store.digest_key)
            assert (store.digest_key is None) == (name == "plain")
        finally:
            store.close()

    plain, kept = rows["plain"], rows["kept"]
    assert plain.arguments is None
    assert plain.arguments_digest == "sha256:" + hashlib.sha256(b'{"seconds":0.2}').hexdigest()
    assert dict(kept.arguments) == {"seconds": 0.2}
    assert kept.arguments_digest.startswith("hmac-sha256:")
    assert kept.arguments_digest.removeprefix("hmac-sha256:") != plain.arguments_digest.removeprefix("sha256:")


def test_the_session_id_is_sealed_at_rest_under_a_store_key(tmp_path, everything):
    key = new_key()
    home = tmp_path / "home"
    write_config(home, {"every": {"url": everything.url}})
    task_id = killed(home, f"every/{RESEARCH}", "Gathering sources", arguments={"topic": "tides"},
                     environ=env(ALBEDO_STORE_KEY=key))
    record = row(home, "every", task_id, ALBEDO_STORE_KEY=key)
    assert record.session_id and record.session_id in everything.logged()
    for path in home.iterdir():
        if path.name.startswith("albedo.db"):
            assert record.session_id.encode() not in path.read_bytes(), path.name
    # Resumed under the key, inside that session.
    resumed = cli(home, "tasks", "result", task_id, "--timeout", "30", environ=env(ALBEDO_STORE_KEY=key))
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith("# Research Report: tides\n")


# -- 6. expiry ------------------------------------------------------------------------------------


def test_an_expired_task_is_deleted_by_the_listing_and_its_result_says_it_expired(tmp_path, fastmcp_http):
    home = tmp_path / "home"
    write_config(home, {"fast": {"url": fastmcp_http}})
    stored(home, "fast", "old-1", state="working", expires_at=time.time() - 5)
    listed = cli(home, "tasks", "--all", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []
    assert row(home, "fast", "old-1") is None

    stored(home, "fast", "old-2", state="working", expires_at=time.time() - 5)
    expired = cli(home, "tasks", "result", "old-2")
    assert_one_line_error(expired, 4, "old-2", "expired")
    assert row(home, "fast", "old-2") is None

    stored(home, "fast", "old-3", state="working", expires_at=time.time() - 5)
    store = open_store(str(home))
    try:
        with Runtime(str(home), store, enabled=True, background=False) as runtime:
            with pytest.raises(UnknownOutcome, match="expired"):
                runtime.mcp().task_result("old-3", timeout=5)
    finally:
        store.close()
