"""Library errors stop at the public faces (issue 12, Deliver 5): pykka's Timeout and
ActorDeadError, OSError of the settings files, the database's errors and a refused HTTP
connection each reach a caller of the runtime, the binding (sync and async), the
settings, the session, the store or the command line as one class of errors.py's tree,
with a one-line message that names the server (when there is one) and says what to do.

Every failure is made for real: a stopped actor, servers that do not open in time, a
home that is a file, a lock that is a directory, a database file replaced by a
directory or locked by another connection, a port nobody listens on. Nothing sleeps;
every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import concurrent.futures
import os
import socket
import sqlite3
import subprocess
import sys
import threading

import pykka
import pytest

from albedo_actors.cli import entry as cli_entry
from albedo_actors import cli, runtime as runtime_module
from albedo_actors.auth import server_auth
from albedo_actors.binding import AsyncMcp
from albedo_actors.config import McpConfig, ServerConfig
from albedo_actors.errors import (
    EXIT_CODES,
    AlbedoError,
    ConfigError,
    NeedsSignIn,
    SessionClosed,
    SessionTimedOut,
    StoreError,
    Unavailable,
)
from albedo_actors.runtime import Runtime
from albedo_actors.settings import ServerSpec, Settings
from albedo_actors.store import Credentials, open_store
from albedo_actors.store import store as store_module
from helpers import FAULT_SERVER, fault_config, text_of

RUN_TIMEOUT = 60  # seconds: a bound on every command, never an expected duration


def one_line(error: BaseException, *names: str) -> str:
    """Our error, one line, no library class left in it, naming ``names``."""
    assert isinstance(error, AlbedoError), type(error)
    text = str(error)
    assert text and "\n" not in text and "Traceback" not in text
    for name in names:
        assert name in text, text
    return text


def closed_port() -> int:
    """A loopback port that refuses connections (bound once, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def in_thread(call):
    """``call()`` on a fresh thread (so a fresh store connection); what it raised, or None."""
    outcome: list = []

    def run():
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            outcome.append(exc)

    thread = threading.Thread(target=run, name="test-fresh-connection")
    thread.start()
    thread.join(RUN_TIMEOUT)
    assert outcome, "the call did not finish"
    return outcome[0]


def gone(home) -> None:
    """The store's database file is removed, and a directory takes its name."""
    for suffix in ("", "-wal", "-shm"):
        path = os.path.join(home, "albedo.db" + suffix)
        if os.path.exists(path):
            os.remove(path)
    os.mkdir(os.path.join(home, "albedo.db"))


# -- runtime and binding ------------------------------------------------------------------------


def test_a_runtime_that_is_not_running_is_session_closed(tmp_path):
    idle = Runtime(str(tmp_path), None, config=McpConfig(home=str(tmp_path)))
    for call in (lambda: idle.composer, idle.mcp, idle.composition):
        with pytest.raises(SessionClosed) as raised:
            call()
        assert one_line(raised.value).startswith("the runtime is not running; use it inside `with Runtime(...)`")


def test_servers_that_do_not_open_in_time_are_session_timed_out(tmp_path, monkeypatch):
    monkeypatch.setattr(runtime_module, "OPEN_TIMEOUT", 0.5)
    slow = fault_config("slow", "--delay-start", "60", startup_timeout_ms=2000)  # never answers in time
    config = McpConfig(home=str(tmp_path), servers=(slow,), extensions={"mcp": True})
    with pytest.raises(SessionTimedOut) as raised:
        with Runtime(str(tmp_path), None, config=config):
            pass
    assert one_line(raised.value) == ("the MCP servers did not open within 0.5 s; check each server's startupTimeoutMs, "
                                      "then start a new session")
    assert EXIT_CODES[SessionTimedOut] == 5


def test_a_call_on_a_server_whose_client_stopped_is_unavailable_naming_it(tmp_path):
    config = McpConfig(home=str(tmp_path), servers=(fault_config("f"),), extensions={"mcp": True})
    with Runtime(str(tmp_path), None, config=config) as runtime:
        mcp, amcp = runtime.mcp(), AsyncMcp(runtime._composer)
        assert text_of(mcp.call("f/echo", text="up").as_dict()) == "up"
        runtime.composition().handles["f"].stop()  # the server's client actor is gone
        for call in (lambda: mcp.call("f/echo", text="x"), lambda: asyncio.run(amcp.call("f/echo", text="x"))):
            with pytest.raises(Unavailable) as raised:
                call()
            assert not isinstance(raised.value, pykka.ActorDeadError)
            assert one_line(raised.value, "'f'")


def test_a_refused_http_connection_is_unavailable_naming_the_server(tmp_path):
    dead = ServerConfig(name="dead", type="http", url=f"http://127.0.0.1:{closed_port()}/mcp", startup_timeout_ms=5000)
    config = McpConfig(home=str(tmp_path), servers=(dead, fault_config("f")), extensions={"mcp": True})
    with Runtime(str(tmp_path), None, config=config) as runtime:
        composition = runtime.composition()
        assert "dead" in composition.left_out and "f" in composition.catalogues
        with pytest.raises(Unavailable) as raised:
            runtime.mcp().call("dead/echo", text="x")
        assert "ConnectionError" not in one_line(raised.value, "'dead'", "did not run")


# -- session --------------------------------------------------------------------------------------


def test_a_session_over_a_removed_database_is_a_store_error_and_starts_nothing(tmp_path):
    home = tmp_path / "home"
    store = open_store(str(home))
    try:
        store.put_credentials("f", Credentials())
        gone(home)
        config = McpConfig(home=str(home), servers=(fault_config("f"),))

        def open_session():
            with Runtime(str(home), store, config=config, enabled=True, watch=False):
                pass

        error = in_thread(open_session)
        assert isinstance(error, StoreError)
        assert one_line(error, "'f'", "retry")
    finally:
        store.close()


def test_a_session_call_after_its_client_stopped_is_unavailable(tmp_path):
    config = McpConfig(home=str(tmp_path), servers=(fault_config("f"),))
    with Runtime(str(tmp_path), None, config=config, enabled=True, watch=False) as runtime:
        handle = runtime.composition().handles["f"]
        handle.stop()
        with pytest.raises(Unavailable) as raised:
            handle.call_tool("echo", {"text": "x"})
        one_line(raised.value, "'f'")


# -- settings -------------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path):
    opened = open_store(str(tmp_path / "db"))
    yield opened
    opened.close()


def test_settings_in_a_home_that_is_a_file_are_a_config_error(tmp_path, store):
    home = tmp_path / "home"
    home.write_text("not a directory")
    settings = Settings(str(home), store)
    calls = (settings.servers, lambda: settings.set_extension("mcp", True),
             lambda: settings.add(ServerSpec("x", "stdio", command="true", enabled=False)), lambda: settings.remove("x"))
    for call in calls:
        with pytest.raises(ConfigError) as raised:
            call()
        assert one_line(raised.value, str(home))


def test_a_settings_lock_that_is_a_directory_is_a_config_error(tmp_path, store):
    home = tmp_path / "home"
    (home / ".extensions.lock").mkdir(parents=True)
    settings = Settings(str(home), store)
    with pytest.raises(ConfigError) as raised:
        settings.add(ServerSpec("x", "stdio", command="true", enabled=False))
    assert one_line(raised.value, ".extensions.lock", "check that") == (
        f"cannot lock the settings: {home / '.extensions.lock'}: Is a directory; "
        f"check that {home} is a directory albedo can write")


def test_settings_over_a_removed_database_are_a_store_error(tmp_path):
    home = tmp_path / "home"
    store = open_store(str(home))
    try:
        settings = Settings(str(home), store)
        settings.add(ServerSpec("x", "stdio", command="true", enabled=False))
        gone(home)
        for call in (settings.servers, lambda: settings.remove("x")):
            error = in_thread(call)
            assert isinstance(error, StoreError)
            one_line(error, "'x'", "retry")
    finally:
        store.close()


# -- store ----------------------------------------------------------------------------------------


def test_a_store_whose_database_is_a_directory_does_not_open(tmp_path):
    home = tmp_path / "home"
    open_store(str(home)).close()
    gone(home)
    with pytest.raises(StoreError) as raised:
        open_store(str(home))
    one_line(raised.value, "albedo.db")


def test_store_methods_whose_database_went_away_are_store_errors(tmp_path):
    home = tmp_path / "home"
    store = open_store(str(home))
    try:
        store.put_credentials("a", Credentials())
        gone(home)  # a fresh thread's connection finds a directory where the file was
        calls = {
            "get_credentials": lambda: store.get_credentials("a"),
            "put_credentials": lambda: store.put_credentials("a", Credentials()),
            "update_credentials": lambda: store.update_credentials("a", lambda old: old),
            "delete_credentials": lambda: store.delete_credentials("a"),
            "save_catalogue": lambda: store.save_catalogue("a", "fp", "era", {}),
            "load_catalogue": lambda: store.load_catalogue("a"),
            "delete_catalogue": lambda: store.delete_catalogue("a"),
            "put_oauth_client": lambda: store.put_oauth_client("https://issuer", "http://127.0.0.1/cb", {}),
            "get_oauth_client": lambda: store.get_oauth_client("https://issuer", "http://127.0.0.1/cb"),
            "delete_oauth_client": lambda: store.delete_oauth_client("https://issuer", "id"),
            "schema_versions": store.schema_versions,
        }
        for name, call in calls.items():
            error = in_thread(call)
            assert isinstance(error, StoreError), name
            one_line(error, "sqlite:albedo.db", "retry")
    finally:
        store.close()


def test_a_store_locked_by_another_connection_is_a_store_error(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.2)  # read when the database is made
    home = tmp_path / "home"
    store = open_store(str(home))
    holder = sqlite3.connect(str(home / "albedo.db"), isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another program holds the write lock
        for call in (lambda: store.put_credentials("a", Credentials()), lambda: store.update_credentials("a", lambda old: old),
                     lambda: store.save_catalogue("a", "fp", "era", {})):
            with pytest.raises(StoreError) as raised:
                call()
            assert "database is locked" in one_line(raised.value, "'a'", "not held by another program")
        holder.execute("ROLLBACK")
        store.put_credentials("a", Credentials())  # free again: it works
    finally:
        holder.close()
        store.close()


def test_a_catalogue_nested_too_deep_to_encode_is_a_store_error(tmp_path):
    store = open_store(str(tmp_path / "home"))
    try:
        deep: list = []
        for _ in range(100_000):
            deep = [deep]
        with pytest.raises(StoreError) as raised:
            store.save_catalogue("a", "fp", "era", {"tools": deep})
        one_line(raised.value, "'a'")
        with pytest.raises(StoreError):
            store.put_oauth_client("https://issuer", "http://127.0.0.1/cb", {"deep": deep})
    finally:
        store.close()


# -- auth ---------------------------------------------------------------------------------------


def test_a_token_refresher_that_does_not_answer_is_needs_sign_in_not_a_timeout(tmp_path, monkeypatch):
    # The refresher seam (server_auth.RefreshFn): a refresh whose future never resolves.
    monkeypatch.setattr(server_auth, "REFRESH_WAIT_S", 0.3)
    never: concurrent.futures.Future = concurrent.futures.Future()
    store = open_store(str(tmp_path / "home"))
    try:
        server = ServerConfig(name="g", type="http", url="http://127.0.0.1:9/mcp")
        auth = server_auth.ServerAuth(server, store, lambda server, seen: never)
        with pytest.raises(NeedsSignIn) as raised:
            auth.unauthorized("Bearer old", None, "tools/call", 0)
        assert not isinstance(raised.value, concurrent.futures.TimeoutError)
        one_line(raised.value, "'g'", "sign-in g")
    finally:
        store.close()


# -- the command line -----------------------------------------------------------------------------


def albedo(home, *argv: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "ALBEDO_DATABASE_URL"}
    return subprocess.run([sys.executable, "-m", "albedo_actors", "--home", str(home), *argv],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT, env=environ)


def error_line(run: subprocess.CompletedProcess, code: int, *names: str) -> str:
    assert run.returncode == code, f"exit {run.returncode}, stderr: {run.stderr!r}"
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("albedo-mcp: ") and "Traceback" not in run.stderr, run.stderr
    for name in names:
        assert name in lines[0], lines[0]
    return lines[0]


def test_cli_a_store_that_cannot_be_opened_exits_7(tmp_path):
    (tmp_path / "db").mkdir()
    line = error_line(albedo(tmp_path / "home", "servers", "--database", f"sqlite:///{tmp_path / 'db'}"), 7, "store")
    assert "usage" not in line


def test_cli_a_settings_lock_that_is_a_directory_exits_2(tmp_path):
    (tmp_path / "home" / ".extensions.lock").mkdir(parents=True)
    error_line(albedo(tmp_path / "home", "add", "--transport", "stdio", "true", "--disabled"), 2,
               ".extensions.lock")


def test_cli_a_call_to_a_refused_http_server_exits_3(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    url = f"http://127.0.0.1:{closed_port()}/mcp"
    (home / "extensions.json").write_text(json.dumps({"mcp": {"servers": {"dead": {"url": url}}}}), encoding="utf-8")
    error_line(albedo(home, "call", "dead/echo", "--no-store"), 3, "'dead'")


def test_cli_servers_that_do_not_open_in_time_exit_5(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(runtime_module, "OPEN_TIMEOUT", 0.5)
    home = tmp_path / "home"
    home.mkdir()
    entry = {"command": sys.executable, "args": [FAULT_SERVER, "--delay-start", "60"], "startupTimeoutMs": 2000}
    (home / "extensions.json").write_text(json.dumps({"mcp": {"servers": {"slow": entry}}}), encoding="utf-8")
    assert cli.main(["--home", str(home), "--no-store", "tools"]) == 5
    assert capsys.readouterr().err == ("albedo-mcp: the MCP servers did not open within 0.5 s; check each server's "
                                       "startupTimeoutMs, then start a new session\n")


class StalledRefresher(pykka.ThreadingActor):
    """An actor whose mailbox is busy until ``release`` is set: its asks time out."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__()
        self._release = release

    def refresh(self, server, seen):
        self._release.wait(RUN_TIMEOUT)
        return None


@pytest.mark.parametrize("stopped", [False, True], ids=["timed-out", "stopped"])
def test_cli_a_session_future_that_fails_in_pykka_exits_as_our_class(tmp_path, monkeypatch, capsys, stopped):
    # The demo waits on the composer's own futures (turn_started().get(...)): a real
    # actor that does not answer, or has stopped, stands in for that session.
    release = threading.Event()
    stalled = StalledRefresher.start(release)
    proxy = stalled.proxy()
    if stopped:
        release.set()
        stalled.stop(timeout=RUN_TIMEOUT)

    def waiting(args):
        return proxy.refresh(None, None).get(timeout=0.2)

    monkeypatch.setattr(cli_entry, "tools_command", waiting)
    try:
        code = cli.main(["--home", str(tmp_path), "tools"])
    finally:
        release.set()
        if not stopped:
            stalled.stop(timeout=RUN_TIMEOUT)
    expected = SessionClosed if stopped else SessionTimedOut
    assert code == EXIT_CODES[expected]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Timeout" not in err and "ActorDeadError" not in err, err
