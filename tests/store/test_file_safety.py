"""Files albedo keeps (issue 10 item 6): modes under any umask, directories it does not
own keep theirs, and nothing in the home is opened through a symbolic link.

The store and the settings are the real ones; the CLI runs as a subprocess with its
own umask. Every assertion is on the file system (stat, lstat, bytes) or on the exact
error line.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys

import pytest

from albedo_actors.config import ServerConfig, load
from albedo_actors.connection.stdio_link import launch_spec
from albedo_actors.errors import ConfigError, StoreError
from albedo_actors.settings import ServerSpec, Settings
from albedo_actors.store import Credentials, open_store

RUN_TIMEOUT = 60  # a bound on each CLI run, never an expected duration


OFF = ServerSpec(name="off", transport="stdio", command="/bin/true", enabled=False)  # saved, never started


@pytest.fixture
def elsewhere(tmp_path):
    """A store outside the home under test, for the settings tests."""
    store = open_store(str(tmp_path / "db"))
    yield store
    store.close()


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@contextlib.contextmanager
def umask(value: int):
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


def albedo(home, *argv: str, mask: int = 0o022, database: str | None = None) -> subprocess.CompletedProcess:
    """The CLI under ``mask`` (set by a shell before exec, so the whole process has it)."""
    command = [sys.executable, "-m", "albedo_actors", *argv, "--home", str(home)]
    if database:
        command += ["--database", database]
    environ = {k: v for k, v in os.environ.items() if k != "ALBEDO_DATABASE_URL"}
    return subprocess.run(["sh", "-c", f'umask {mask:03o}; exec "$@"', "sh", *command],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT, env=environ)


def one_error_line(run: subprocess.CompletedProcess, code: int) -> str:
    assert run.returncode == code, f"exit {run.returncode}, stderr: {run.stderr!r}"
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("albedo-mcp: ") and "Traceback" not in run.stderr, run.stderr
    return lines[0]


def planted(tmp_path, name="precious"):
    """A file somewhere else that a link in the home points at: it must stay as it is."""
    target = tmp_path / name
    target.write_bytes(b"not albedo's\n")
    os.chmod(target, 0o644)
    return target


def untouched(target) -> bool:
    return target.read_bytes() == b"not albedo's\n" and mode(target) == 0o644


# -- directories ----------------------------------------------------------------------


def test_an_existing_directory_named_by_the_database_url_keeps_its_mode(tmp_path):
    # The /tmp case: world-writable and sticky. chmod 0700 there would break the machine.
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    store = open_store(str(tmp_path / "home"), f"sqlite:///{shared}/albedo.db")
    try:
        store.put_credentials("s", Credentials(bearer_token="t"))
    finally:
        store.close()
    assert mode(shared) == 0o1777
    assert mode(shared / "albedo.db") == 0o600


def test_the_cli_with_a_database_in_an_existing_directory_leaves_its_mode(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    run = albedo(tmp_path / "home", "servers", database=f"sqlite:///{shared}/albedo.db")
    assert run.returncode == 0, run.stderr
    assert mode(shared) == 0o1777
    assert mode(shared / "albedo.db") == 0o600


@pytest.mark.parametrize("mask", [0o000, 0o022, 0o077])
def test_every_directory_albedo_creates_is_0700_whatever_the_umask(tmp_path, mask):
    base = tmp_path / "base"
    base.mkdir()
    os.chmod(base, 0o755)
    with umask(mask):
        # The store's home, the settings' home and a stdio server's own directory.
        store = open_store(str(base / "a" / "b" / "home"))
        try:
            Settings(str(base / "c" / "home"), store).add(OFF)
        finally:
            store.close()
        launch_spec(ServerConfig(name="srv", type="stdio", command="/bin/true"), str(base / "d" / "home"))
    assert mode(base) == 0o755  # not created by albedo: untouched
    created = [base / "a", base / "a" / "b", base / "a" / "b" / "home", base / "c", base / "c" / "home",
               base / "d", base / "d" / "home", base / "d" / "home" / "servers", base / "d" / "home" / "servers" / "srv"]
    assert {str(d): mode(d) for d in created} == {str(d): 0o700 for d in created}


# -- file modes ---------------------------------------------------------------------------


@pytest.mark.parametrize("mask", [0o000, 0o022])
def test_database_wal_shm_and_lock_files_are_0600_whatever_the_umask(tmp_path, mask):
    home = tmp_path / "home"
    with umask(mask):
        store = open_store(str(home))
        try:
            store.put_credentials("s", Credentials(bearer_token="t"))
            Settings(str(home), store).add(OFF)
            for name in ("albedo.db", "albedo.db-wal", "albedo.db-shm", ".extensions.lock", "extensions.json"):
                assert (home / name).exists(), name
                assert mode(home / name) == 0o600, name
        finally:
            store.close()


def test_a_loose_database_and_lock_file_left_from_before_are_made_0600(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    for name in ("albedo.db", ".extensions.lock"):
        (home / name).touch()
        os.chmod(home / name, 0o666)
    store = open_store(str(home))
    try:
        Settings(str(home), store).add(OFF)
    finally:
        store.close()
    assert mode(home / "albedo.db") == 0o600
    assert mode(home / ".extensions.lock") == 0o600


@pytest.mark.parametrize("mask", [0o000, 0o022])
def test_the_cli_under_a_umask_creates_private_files_and_directories(tmp_path, mask):
    home = tmp_path / "new" / "home"
    run = albedo(home, "add", "--disabled", "--transport", "stdio", "--name", "off", "/bin/true", mask=mask)
    assert run.returncode == 0, run.stderr
    assert mode(tmp_path / "new") == 0o700 and mode(home) == 0o700
    for name in ("albedo.db", ".extensions.lock", "extensions.json"):
        assert mode(home / name) == 0o600, name


# -- symbolic links ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["albedo.db", "albedo.db-wal", "albedo.db-shm"])
def test_a_link_planted_at_the_database_or_its_wal_is_refused(tmp_path, name):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    target = planted(tmp_path)
    os.symlink(target, home / name)
    with pytest.raises(StoreError) as caught:
        open_store(str(home)).close()
    message = str(caught.value)
    assert message == (f"store sqlite:{home / 'albedo.db'}: refused: {home / name} is a symbolic link, "
                       "and albedo opens its files only directly: remove it and retry")
    assert untouched(target)
    assert os.path.islink(home / name)


def test_the_cli_refuses_a_linked_database_with_one_line(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    target = planted(tmp_path)
    os.symlink(target, home / "albedo.db")
    line = one_error_line(albedo(home, "servers"), 7)  # a store error (errors.EXIT_CODES), not usage
    assert line == (f"albedo-mcp: store sqlite:{home / 'albedo.db'}: refused: {home / 'albedo.db'} is a symbolic "
                    "link, and albedo opens its files only directly: remove it and retry")
    assert untouched(target)


def test_a_link_planted_at_the_wal_of_an_open_database_is_refused_at_the_next_connect(tmp_path):
    # SQLite opens -wal and -shm by name; each new connection re-checks them first.
    home = tmp_path / "home"
    store = open_store(str(home))
    store.close()
    for name in ("albedo.db-wal", "albedo.db-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(home / name)
    target = planted(tmp_path)
    os.symlink(target, home / "albedo.db-wal")
    with pytest.raises(StoreError, match="albedo.db-wal is a symbolic link"):
        open_store(str(home))
    assert untouched(target)


def test_a_link_planted_at_the_settings_lock_is_refused(tmp_path, elsewhere):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    target = planted(tmp_path)
    os.symlink(target, home / ".extensions.lock")
    with pytest.raises(ConfigError) as caught:
        Settings(str(home), elsewhere).add(OFF)
    assert str(caught.value) == (f"cannot lock the settings: {home / '.extensions.lock'} is a symbolic link, "
                                 "and albedo opens its files only directly: remove it and retry")
    assert untouched(target)
    assert not (home / "extensions.json").exists()


def test_a_link_at_extensions_json_is_not_read(tmp_path, elsewhere):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    target = planted(tmp_path)
    os.symlink(target, home / "extensions.json")
    with pytest.raises(ConfigError) as caught:
        load(str(home))
    assert str(caught.value) == (f"{home / 'extensions.json'} is a symbolic link, "
                                 "and albedo opens its files only directly: remove it and retry")
    with pytest.raises(ConfigError, match="is a symbolic link"):
        Settings(str(home), elsewhere).servers()
    assert untouched(target)


def test_a_fifo_planted_at_the_lock_is_refused_without_blocking(tmp_path, elsewhere):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    os.mkfifo(home / ".extensions.lock")
    with pytest.raises(ConfigError, match="is not a regular file"):
        Settings(str(home), elsewhere).add(OFF)
