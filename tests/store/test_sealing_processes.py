"""Encryption at rest with real processes, on SQLite and PostgreSQL (issue 15 item 4).

- ``store encrypt`` and a rotation killed with SIGKILL inside a row's transaction
  (``sealing_worker.py`` stops there and says so: no timing) leave every row readable,
  and the command run again finishes.
- Two processes refreshing under encryption make one token request (the two-process
  race of tests/auth/test_refresh_races.py, run with ``$ALBEDO_STORE_KEY`` set).
- The database (SQLite's files byte by byte, PostgreSQL's rows as text) holds no token,
  refresh token or client secret in clear after a sign-in with a key, and after
  ``albedo-mcp store encrypt`` of a store signed in without one.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import select
import signal
import subprocess
import sys

import pytest

from albedo_actors.auth.signin import SignIn, follow_redirect_agent
from albedo_actors.config import ServerConfig
from albedo_actors.store import Credentials, open_store
from albedo_actors.store.sealing import StoreKeys, new_key, parse_key

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "sealing_worker.py")
WAIT_S = 60.0  # the bound on every wait here, never an expected duration
ROWS, CLIENTS = 8, 2


def keys_of(*texts: str) -> StoreKeys:
    return StoreKeys(parse_key(texts[0], "k"), tuple(parse_key(t, "k") for t in texts[1:]))


def environ(**keys: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALBEDO_STORE_") and k != "ALBEDO_DATABASE_URL"}
    env.update(keys)
    return env


def albedo(backend, *argv: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    _kind, home, url = backend
    where = ["--database", url] if url else []
    return subprocess.run([sys.executable, "-m", "albedo_actors", "--home", home, *where, *argv], env=env,
                          capture_output=True, text=True, timeout=WAIT_S)


def creds(n: int) -> Credentials:
    return Credentials(bearer_token=f"bearer-{n}", env={"K": f"env-{n}"},
                       oauth={"access_token": f"access-{n}", "refresh_token": f"refresh-{n}"})


def fill(store) -> None:
    for n in range(ROWS):
        store.put_credentials(f"s{n}", creds(n))
    for n in range(CLIENTS):
        store.put_oauth_client(f"https://as{n}.example", "http://127.0.0.1/cb", {"client_id": f"c{n}", "client_secret": f"cs-{n}"})


def assert_all_readable(store) -> None:
    assert store.get_credentials_of([f"s{n}" for n in range(ROWS)]) == {f"s{n}": creds(n) for n in range(ROWS)}
    for n in range(CLIENTS):
        assert store.get_oauth_client(f"https://as{n}.example", "http://127.0.0.1/cb")["client_secret"] == f"cs-{n}"


def run_until_paused(backend, stop_after: int, env: dict[str, str]) -> None:
    """Start the worker, wait (bounded) until it stops inside row ``stop_after``'s transaction, SIGKILL it."""
    _kind, home, url = backend
    proc = subprocess.Popen([sys.executable, WORKER, home, url or "-", str(stop_after)], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        ready = select.select([proc.stdout], [], [], WAIT_S)[0]
        line = proc.stdout.readline().decode() if ready else ""
        assert line.startswith("paused "), (line, proc.stderr.read().decode() if proc.poll() is not None else "")
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(WAIT_S) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT_S)
        proc.stdin.close()
        proc.stdout.close()
        proc.stderr.close()


def kill_midway(backend, stop_after: int, env: dict[str, str], keys: StoreKeys, was: str, becomes: str) -> None:
    """SIGKILL the worker (run with ``env``) inside row ``stop_after``'s transaction; then, read
    with ``keys``, every row is readable: the rows before it were committed sealed under
    ``becomes`` (a ``sealing_status`` label), that one rolled back, and the rest are still ``was``."""
    _kind, home, url = backend
    run_until_paused(backend, stop_after, env)
    store = open_store(home, url, keys=keys)
    try:
        assert_all_readable(store)
        status = {"plaintext": 0}
        status[was] = ROWS + CLIENTS - (stop_after - 1)
        status[becomes] = stop_after - 1
        assert store.sealing_status() == status
    finally:
        store.close()


def assert_all_sealed(backend, key: str) -> None:
    """The store read with ``key`` alone: every row sealed under it, and readable."""
    _kind, home, url = backend
    store = open_store(home, url, keys=keys_of(key))
    try:
        assert store.sealing_status() == {"plaintext": 0, f"key {keys_of(key).kid}": ROWS + CLIENTS}
        assert_all_readable(store)
    finally:
        store.close()


@pytest.mark.parametrize("stop_after", [3, ROWS + 1])  # in the credentials, in the OAuth clients
def test_encrypt_killed_midway_leaves_every_row_readable_and_a_second_run_finishes(backend, stop_after):
    _kind, home, url = backend
    key = new_key()
    plain = open_store(home, url, keys=None)
    fill(plain)
    plain.close()

    kill_midway(backend, stop_after, environ(ALBEDO_STORE_KEY=key), keys_of(key), "plaintext", f"key {keys_of(key).kid}")

    done = albedo(backend, "store", "encrypt", env=environ(ALBEDO_STORE_KEY=key))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (f"encrypted {ROWS + CLIENTS - (stop_after - 1)} rows under key {keys_of(key).kid}; "
                                   f"{stop_after - 1} were so already")
    assert_all_sealed(backend, key)


@pytest.mark.parametrize("stop_after", [3, ROWS + 1])
def test_rotation_killed_midway_reads_with_both_keys_and_rotate_key_run_again_finishes(backend, stop_after):
    _kind, home, url = backend
    old, new = new_key(), new_key()
    sealed = open_store(home, url, keys=keys_of(old))
    fill(sealed)
    sealed.close()

    # A rotation as a host mid-rotation runs it: the new key seals, the old one still opens.
    kill_midway(backend, stop_after, environ(ALBEDO_STORE_KEY=new, ALBEDO_STORE_OLD_KEY=old), keys_of(new, old),
                f"key {keys_of(old).kid}", f"key {keys_of(new).kid}")

    key_file = os.path.join(os.path.dirname(home), "new.key")
    made = albedo(backend, "store", "new-key", "--file", key_file, env=environ())
    assert made.returncode == 0, made.stderr
    with open(key_file, "w") as f:  # the test's own new key, in the file made 0600
        f.write(new + "\n")
    done = albedo(backend, "store", "rotate-key", "--new-key-file", key_file, env=environ(ALBEDO_STORE_KEY=old))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == (f"re-encrypted {ROWS + CLIENTS - (stop_after - 1)} rows under key "
                                           f"{keys_of(new).kid}; {stop_after - 1} were so already")
    assert_all_sealed(backend, new)  # the new key alone reads everything
    status = albedo(backend, "store", "status", env=environ(ALBEDO_STORE_KEY=old))
    assert status.stdout.strip() == (f"0 rows in clear, {ROWS + CLIENTS} encrypted under key {keys_of(new).kid} "
                                     f"(the key given is {keys_of(old).kid})")


# --- two processes refreshing ------------------------------------------------------------------


def _races():
    """tests/auth/test_refresh_races.py as a module of its own (its tests are not collected here)."""
    path = os.path.join(os.path.dirname(HERE), "auth", "test_refresh_races.py")
    spec = importlib.util.spec_from_file_location("_refresh_races_for_sealing", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def races_with_key(backend, tmp_path, monkeypatch):
    """The races module, ``$ALBEDO_STORE_KEY`` set for this process and its workers, and its ``workers`` fixture."""
    key = new_key()
    monkeypatch.setenv("ALBEDO_STORE_KEY", key)
    races = _races()
    started = {}

    def make(server):
        started["w"] = races.Workers(backend, server, tmp_path)
        return started["w"]

    yield races, make, key
    if "w" in started:
        started["w"].stop_all()


@pytest.mark.parametrize("mode", ["held", "refresher"])
def test_two_processes_refreshing_under_encryption_make_one_request(oauth_server, backend, races_with_key, mode):
    races, workers, key = races_with_key
    # The whole two-process race, every assertion of it, with every store (this process's
    # and both workers') sealing under the key.
    races.test_two_processes_refreshing_at_once_make_one_request(oauth_server, backend, workers, mode)
    _kind, home, url = backend
    raw = open_store(home, url, keys=None)
    try:
        from albedo_actors.store.models import CredentialRow

        [oauth] = CredentialRow.select(CredentialRow.oauth).where(CredentialRow.server == races.NAME) \
            .tuples().execute(raw._db)
        assert oauth[0].startswith(f"enc:v1:{keys_of(key).kid}:")
    finally:
        raw.close()


# --- no plaintext on disk ----------------------------------------------------------------------


def sign_in(server, store):
    config = ServerConfig(name="guarded", type="http", url=server.url)
    record = SignIn(config, store, agent=follow_redirect_agent(), port=0, lifetime=30).run()
    assert record.state == "signed_in" and record.access_token and record.refresh_token
    return record


def secrets_of(store, record) -> list[str]:
    """The access and refresh tokens, and every client secret the sign-in stored."""
    found = [record.access_token, record.refresh_token]
    if record.client_secret:
        found.append(record.client_secret)
    from albedo_actors.store.models import OAuthClientRow

    for issuer, redirect_uri in OAuthClientRow.select(OAuthClientRow.issuer, OAuthClientRow.redirect_uri) \
            .tuples().execute(store._db):
        client = store.get_oauth_client(issuer, redirect_uri)
        if client.get("client_secret"):
            found.append(client["client_secret"])
    assert all(len(s) >= 8 for s in found)
    return found


def database_bytes(backend) -> bytes:
    """SQLite: the database file and its -wal and -shm, byte by byte. PostgreSQL: every row of
    the two tables as text."""
    kind, home, url = backend
    if kind == "sqlite":
        out = b""
        for suffix in ("", "-wal", "-shm"):
            path = os.path.join(home, "albedo.db" + suffix)
            if os.path.exists(path):
                with open(path, "rb") as f:
                    out += f.read()
        return out
    import psycopg2

    conn = psycopg2.connect(url, connect_timeout=10)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT c::text FROM credentials c UNION ALL SELECT o::text FROM oauth_clients o")
            return "\n".join(row[0] for row in cur.fetchall()).encode()
    finally:
        conn.close()


def test_after_a_sign_in_with_a_key_the_database_holds_no_token_or_secret_in_clear(oauth_server, backend):
    _kind, home, url = backend
    server = oauth_server()
    store = open_store(home, url, keys=keys_of(new_key()))
    try:
        record = sign_in(server, store)
        secrets = secrets_of(store, record)
        data = database_bytes(backend)  # while open: the -wal holds every write
        assert data and not [s for s in secrets if s.encode() in data]
    finally:
        store.close()
    data = database_bytes(backend)
    assert not [s for s in secrets if s.encode() in data]


def test_after_store_encrypt_the_database_holds_no_token_or_secret_in_clear(oauth_server, backend):
    _kind, home, url = backend
    server = oauth_server()
    store = open_store(home, url, keys=None)
    try:
        record = sign_in(server, store)
        if _kind == "sqlite":
            # As a SQLite built without SQLITE_SECURE_DELETE writes (Debian's has it): the
            # space of a replaced row version keeps its bytes.
            store._db.execute_sql("PRAGMA secure_delete=0")
        for n in range(3):  # more versions of the row, in clear, each of another size
            store.update_credentials("guarded", lambda c: dataclasses.replace(c, env={"PAD": "x" * (n * 300)}))
        secrets = secrets_of(store, record)
    finally:
        store.close()
    assert [s for s in secrets if s.encode() in database_bytes(backend)] == secrets  # the scan sees them now
    key = new_key()
    host = open_store(home, url, keys=keys_of(key))  # a host running meanwhile: its connection stays open
    try:
        assert host.get_credentials("guarded").oauth["access_token"] == record.access_token
        done = albedo(backend, "store", "encrypt", env=environ(ALBEDO_STORE_KEY=key))
        assert done.returncode == 0, done.stderr
        data = database_bytes(backend)  # the last connection has not closed: no checkpoint on close
        assert data and not [s for s in secrets if s.encode() in data]
        assert host.get_credentials("guarded").oauth["access_token"] == record.access_token
    finally:
        host.close()
    store = open_store(home, url, keys=keys_of(key))
    try:
        assert store.get_credentials("guarded").oauth["access_token"] == record.access_token
    finally:
        store.close()


# --- the refresher over a row it cannot read ---------------------------------------------------


def test_a_refresh_without_the_right_key_makes_no_request_and_leaves_the_row_as_it_was(oauth_server, backend):
    from albedo_actors.actors.refresher import TokenRefresher, refresh_by
    from albedo_actors.auth.http import AuthHttp
    from albedo_actors.auth.refresh import refresh_held
    from albedo_actors.auth.server_auth import ServerAuth
    from albedo_actors.errors import NeedsSignIn, StoreError
    from albedo_actors.store.models import CredentialRow
    from albedo_actors.store.sealing import NEEDS_KEY

    _kind, home, url = backend
    server = oauth_server()
    store = open_store(home, url, keys=keys_of(new_key()))
    try:
        record = sign_in(server, store)
    finally:
        store.close()
    server.expire()
    config = ServerConfig(name="guarded", type="http", url=server.url)
    for keys in (None, keys_of(new_key())):
        store = open_store(home, url, keys=keys)
        try:
            before = list(CredentialRow.select().tuples().execute(store._db))
            with pytest.raises(StoreError) as caught:
                refresh_held(store, config, record.access_token, {}, lambda s: AuthHttp())
            assert str(caught.value).endswith(NEEDS_KEY) and "\n" not in str(caught.value)
            ref = TokenRefresher.start(store, {})
            try:
                with pytest.raises(NeedsSignIn) as needs:
                    ServerAuth(config, store, refresh_by(ref))._refresh(record.access_token)
                assert NEEDS_KEY in str(needs.value)
            finally:
                ref.stop(timeout=WAIT_S)
            assert list(CredentialRow.select().tuples().execute(store._db)) == before
        finally:
            store.close()
    assert server.stats()["token_requests"]["refresh_token"] == 0
