"""ChangeWatch: a running host hears every change, whoever makes it (issue 24, item 4).

Real writers in real processes: ``albedo-mcp`` writing directly (on SQLite and on
PostgreSQL, where a host with another home that shares only the database hears it
too), another process's ``Settings``, the settings service, and a sign-in, token
refresh, refused refresh and sign-out against the loopback authorization server. Then
the watch's own protections, each with a stand-in store: a stat that cannot tell two
writes apart, a store that fails, one that hangs, and callers that ask during a read.

Nothing sleeps: each step is a finished subprocess or call, and the waits on the
stand-in stores are events with bounds.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
import threading

import pytest

from albedo_actors.auth.http import AuthHttp
from albedo_actors.auth.record import from_credentials
from albedo_actors.auth.refresh import refresh_held
from albedo_actors.auth.signin import SignIn, follow_redirect_agent
from albedo_actors.config import ServerConfig
from albedo_actors.errors import StoreError
from albedo_actors.safefiles import replace_private
from albedo_actors.service.server import Service
from albedo_actors.settings import ServerSpec, Settings
from albedo_actors import settings_watch
from albedo_actors.settings_watch import ChangeWatch, Stamp
from albedo_actors.store import open_store

from helpers import FAULT_SERVER, store_cli, store_cli_env

WAIT_S = 30.0  # the bound on every wait here, never an expected duration
RUN_TIMEOUT = 120


def fault_line(*flags: str) -> str:
    return shlex.join([sys.executable, FAULT_SERVER, *flags])


def moved(watch: ChangeWatch, seen: list[Stamp]) -> bool:
    """Whether the watch's stamp differs from the last one in ``seen`` (appended)."""
    seen.append(watch.stamp())
    return seen[-1] != seen[-2]


@pytest.fixture
def watches():
    """``watches(home, store)``: a ChangeWatch, closed afterwards (its reader thread joined)."""
    opened: list[ChangeWatch] = []

    def make(home, store=None, **kwargs) -> ChangeWatch:
        watch = ChangeWatch(str(home), store, **kwargs)
        opened.append(watch)
        return watch

    yield make
    for watch in opened:
        watch.close()


# -- every writer ---------------------------------------------------------------------------------

# argv, stdin, and whether the command writes (one that exits 2 writes nothing).
COMMANDS = [
    (("add", "--transport", "stdio", fault_line(), "--name", "files", "--env", "API_KEY"), "secret-1\n", True),
    (("add", "--transport", "stdio", fault_line(), "--name", "files"), "", False),  # the name is taken
    (("edit", "files", "--env", "API_KEY"), "secret-2\n", True),
    (("disable", "files"), "", True),
    (("enable", "files"), "", True),
    (("extension", "mcp", "on"), "", True),
    (("add", "http://127.0.0.1:9/mcp", "--name", "off", "--disabled", "--bearer-token"), "token-3\n", True),
    (("edit", "off", "--bearer-token"), "token-4\n", True),  # a secret only: the store alone says so
    (("sign-out", "off"), "", True),
    (("remove", "off"), "", True),
    (("extension", "mcp", "off"), "", True),
]


def test_every_albedo_mcp_command_made_directly_changes_the_stamp(backend, watches, tmp_path):
    _kind, home, url = backend
    store = open_store(home, url)
    try:
        here = watches(home, store)
        # A host elsewhere (another home) sharing the database: the store's revision alone
        # carries every change to it.
        far = watches(tmp_path / "elsewhere", store)
        near, away = [here.stamp()], [far.stamp()]
        env = store_cli_env()
        for argv, stdin, writes in COMMANDS:
            run = store_cli(backend, *argv, env=env, stdin=stdin)
            assert (run.returncode == 0) == writes, (argv, run.stderr)
            assert moved(here, near) == writes, argv
            assert moved(far, away) == writes, argv
            assert "secret-" not in repr(near[-1]) and "token-" not in repr(near[-1])
    finally:
        store.close()


SETTINGS_IN_A_PROCESS = """
import sys
from albedo_actors.settings import Settings, ServerSpec, SecretInput
from albedo_actors.store import open_store
store = open_store(sys.argv[1])
settings = Settings(sys.argv[1], store)
step = sys.argv[2]
if step == "extension":
    settings.set_extension("mcp", True)
elif step == "add":
    settings.add(ServerSpec("docs", "http", url="http://127.0.0.1:9/mcp", enabled=False))
elif step == "secret":
    settings.edit("docs", secrets=SecretInput(bearer_token=sys.stdin.readline().strip()))
store.close()
"""


def test_another_process_using_settings_changes_the_stamp(home, store, watches):
    watch = watches(home, store)
    seen = [watch.stamp()]
    for step in ("extension", "add", "secret"):
        run = subprocess.run([sys.executable, "-c", SETTINGS_IN_A_PROCESS, str(home), step], input="t-1\n",
                             capture_output=True, text=True, timeout=RUN_TIMEOUT)
        assert run.returncode == 0, run.stderr
        assert moved(watch, seen), step


class Served:
    """A home with a running settings service (the CLI finds it in service.json)."""

    def __init__(self, home) -> None:
        self.home = str(home)
        self.saves = 0
        self.store = open_store(self.home)
        self.service = Service(self.home, self.store, on_saved=self._saved, signin_port=0)

    def _saved(self) -> None:
        self.saves += 1


@pytest.fixture
def served(home):
    one = Served(home)
    one.service.start()
    yield one
    one.service.stop()
    one.store.close()


SERVED_COMMANDS = [
    (("extension", "mcp", "on"), "", True),
    (("add", "--transport", "stdio", fault_line(), "--name", "files"), "", True),
    (("disable", "files"), "", True),
    (("add", "http://127.0.0.1:9/mcp", "--name", "off", "--disabled"), "", True),
    (("edit", "off", "--bearer-token"), "token-5\n", False),  # secrets only: extensions.json is as it was
    (("sign-out", "off"), "", False),
    (("remove", "files"), "", True),
]


def test_changes_through_the_settings_service_change_the_stamp(served, watches):
    watch = watches(served.home, served.store)
    file_only = watches(served.home)  # a host without a store: the file alone
    seen, seen_file = [watch.stamp()], [file_only.stamp()]
    env = store_cli_env()
    for argv, stdin, in_the_file in SERVED_COMMANDS:
        saves = served.saves
        run = subprocess.run([sys.executable, "-m", "albedo_actors", "--home", served.home, *argv], env=env,
                             input=stdin, capture_output=True, text=True, timeout=RUN_TIMEOUT)
        assert run.returncode == 0, (argv, run.stderr)
        assert served.saves == saves + 1, f"{argv} did not go through the service"
        assert moved(watch, seen), argv
        assert moved(file_only, seen_file) == in_the_file, argv


def test_a_sign_in_and_a_sign_out_change_the_stamp_and_a_routine_refresh_does_not(home, store, watches, oauth_server):
    server = oauth_server()
    settings = Settings(str(home), store)
    settings.add(ServerSpec("guarded", "http", url=server.url, enabled=False))
    config = ServerConfig(name="guarded", type="http", url=server.url)
    watch = watches(home, store)
    seen = [watch.stamp()]

    signed = SignIn(config, store, agent=follow_redirect_agent(), port=0, lifetime=30).run()
    assert signed.state == "signed_in"
    assert moved(watch, seen), "a sign-in"

    record, requested = refresh_held(store, config, signed.access_token, {}, lambda s: AuthHttp())
    assert requested and record is not None and record.access_token != signed.access_token
    assert from_credentials(store.get_credentials("guarded")).access_token == record.access_token
    assert not moved(watch, seen), "a refresh that only rotated the tokens"

    server.revoke_refresh()
    refused, requested = refresh_held(store, config, record.access_token, {}, lambda s: AuthHttp())
    assert requested and refused is not None and refused.state == "needs_sign_in"
    assert moved(watch, seen), "a refused refresh: the server needs a sign-in"

    settings.sign_out("guarded")
    assert moved(watch, seen), "a sign-out"


# -- the watch's own protections --------------------------------------------------------------------


def test_without_a_store_the_file_alone_is_watched_and_the_same_bytes_change_nothing(home, watches):
    path = os.path.join(home, "extensions.json")
    watch = watches(home)
    seen = [watch.stamp()]
    assert seen[0].store is None
    replace_private(path, '{"enabled": {"mcp": true}}\n')
    assert moved(watch, seen), "created"
    replace_private(path, '{"enabled": {"mcp": true}}\n')  # a new inode, the same settings
    os.utime(path)
    assert not moved(watch, seen), "rewritten as it was"
    replace_private(path, '{"enabled": {"mcp": false}}\n')
    assert moved(watch, seen), "changed"
    os.unlink(path)
    assert moved(watch, seen), "removed"


def test_a_change_the_stat_cannot_show_is_found_by_the_files_bytes(home, watches, monkeypatch):
    # Two writes of the same size in one tick of the file system's clock, the second
    # given the first one's inode: the stat is the same. A stat taken within RACY_S of
    # the file's mtime is not trusted, so the bytes are read again.
    path = os.path.join(home, "extensions.json")
    replace_private(path, '{"enabled": {"mcp": true}} \n')
    same_stat = os.lstat(path)
    look = settings_watch._look(path)
    monkeypatch.setattr(settings_watch, "_look", lambda p: look)
    watch = watches(home)
    seen = [watch.stamp()]
    replace_private(path, '{"enabled": {"mcp": false}}\n')
    assert os.lstat(path).st_size == same_stat.st_size
    assert moved(watch, seen)


class StandIn:
    """A store whose revision() the test drives: a value, failures, and a gate to hold a read."""

    def __init__(self, value: int = 1) -> None:
        self.value = value
        self.failing = False
        self.calls = 0
        self.entered = threading.Event()
        self.gate: threading.Event | None = None

    def revision(self) -> int:
        self.calls += 1
        value = self.value  # as of the read's start
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(WAIT_S), "the test never opened the gate"
        if self.failing:
            raise StoreError("store sqlite:albedo.db: reading the store's revision failed: OperationalError: "
                             "disk I/O error; check that the database is there, writable and not held by another "
                             "program, then retry")
        return value


def test_a_store_that_fails_keeps_the_stamp_and_says_so_once(home, watches, caplog):
    stand_in = StandIn(4)
    watch = watches(home, stand_in)
    first = watch.stamp()
    assert first.store == 4
    stand_in.failing = True
    with caplog.at_level(logging.INFO, logger="albedo_actors.settings_watch"):
        assert {watch.stamp() for _ in range(5)} == {first}
        stand_in.failing, stand_in.value = False, 5
        assert watch.stamp().store == 5
    lines = [r.getMessage() for r in caplog.records if r.name == "albedo_actors.settings_watch"]
    assert len(lines) == 2 and "disk I/O error" in lines[0] and "read again" in lines[1], lines


class Waits(threading.Condition):
    """The watch's condition, counting the bounded waits of callers (the reader's idle wait has none)."""

    def __init__(self) -> None:
        super().__init__(threading.Lock())
        self.bounded = 0

    def wait_for(self, predicate, timeout=None):
        if timeout is not None:
            self.bounded += 1
        return super().wait_for(predicate, timeout)


def test_a_store_that_hangs_costs_one_caller_the_timeout_and_the_next_nothing(home, watches, caplog):
    stand_in = StandIn(7)
    watch = watches(home, stand_in, timeout=0.05)
    watch._cond = waits = Waits()  # before the reader starts: it is the only condition it uses
    assert watch.stamp().store == 7 and waits.bounded == 1
    stand_in.gate, stand_in.value = threading.Event(), 8
    stand_in.entered.clear()
    with caplog.at_level(logging.WARNING, logger="albedo_actors.settings_watch"):
        assert watch.stamp().store == 7  # waited its timeout, kept the last revision
        assert waits.bounded == 2 and stand_in.entered.wait(WAIT_S)
        assert watch.stamp().store == 7  # the read is stuck (and said so): answered without waiting
        assert waits.bounded == 2
    assert ["did not answer" in r.getMessage() for r in caplog.records] == [True]
    stand_in.gate.set()  # the database answers again
    watch.close()


def test_a_caller_never_takes_the_answer_of_a_read_that_began_before_it_asked(home, watches):
    stand_in = StandIn(1)
    watch = watches(home, stand_in, timeout=WAIT_S)
    stand_in.gate = threading.Event()
    first: list[Stamp] = []
    early = threading.Thread(target=lambda: first.append(watch.stamp()))
    early.start()
    assert stand_in.entered.wait(WAIT_S)  # the early read has begun, and read 1
    stand_in.value = 2  # then a change commits, then a second caller asks
    second: list[Stamp] = []
    late = threading.Thread(target=lambda: second.append(watch.stamp()))
    late.start()
    stand_in.gate.set()
    early.join(WAIT_S)
    late.join(WAIT_S)
    assert not early.is_alive() and not late.is_alive()
    # The late caller's read began after it asked; the early one may return the newer too.
    assert second[0].store == 2 and first[0].store in (1, 2)
    assert stand_in.calls == 2


def test_close_stops_the_reader_and_a_stamp_after_it_still_answers(home, watches):
    stand_in = StandIn(3)
    watch = watches(home, stand_in)
    assert watch.stamp().store == 3
    watch.close()
    assert not any(t.name == "albedo-settings-watch" and t.is_alive() for t in threading.enumerate())
    stand_in.value = 4
    assert watch.stamp().store == 3  # no reader any more: the last revision read
    watch.close()  # idempotent


def test_an_extension_switch_with_a_store_that_cannot_be_opened_is_saved_and_says_so(home, watches):
    watch = watches(home)
    seen = [watch.stamp()]
    run = subprocess.run([sys.executable, "-m", "albedo_actors", "--home", str(home), "--database", "nosuch://x",
                          "extension", "mcp", "on"], env=store_cli_env(), capture_output=True, text=True,
                         timeout=RUN_TIMEOUT)
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("albedo-mcp: warning: ") and "saved" in lines[0], lines
    assert moved(watch, seen)
