"""Sign-in under faults (issue 10, item 7), through the real client over 127.0.0.1.

Each test drives the client's own code (``SignIn``, ``refresh_held``, ``TokenRefresher``,
``ServerAuth``, ``Settings``, ``CallbackListener``, ``AuthHttp``) against
``servers/fault_auth_server.py`` (an authorization server + MCP server with fault
switches) and checks what happened: the time taken, which requests reached which
server, what the store holds, the one-line error.

- a token endpoint that trickles its answer is cut at the exchange's total deadline,
  and no writer of the store waits for it (no database lock over the network);
- the refresh lease: a loser waits for the holder's write and makes no request, a dead
  holder's lease runs out, a late refresh never overwrites a newer sign-in;
- a save that fails to connect keeps the tokens its connect rotated;
- ``invalid_client`` forgets the kept registration (sign-in and refresh);
- refreshes are keyed by server and URL;
- a configured client's secret never goes to another issuer;
- the callback listener answers only its own Host and no idle connection delays it;
- discovery never fetches link-local, private or metadata addresses for a loopback
  server (loopback stays allowed), and the connection goes to the checked address.

Waits are on events and bounded; nothing sleeps to synchronise.
"""

from __future__ import annotations

import base64
import dataclasses
import socket
import threading
import time
import urllib.request

import peewee
import pytest

from albedo_actors.errors import RefreshDeferred
from albedo_actors.auth.server_auth import ServerAuth
from albedo_actors.actors.refresher import TokenRefresher, refresh_by
from albedo_actors.auth.refresh import refresh_held
from albedo_actors.auth import callback
from albedo_actors.auth.addresses import AddressGuard, AddressRefused
from albedo_actors.auth.callback import CallbackListener
from albedo_actors.auth.http import AuthHttp, AuthHttpError
from albedo_actors.auth.record import OAuthRecord, from_credentials
from albedo_actors.auth.signin import SignIn, follow_redirect_agent
from albedo_actors.config import OAuthSettings, ServerConfig
from albedo_actors.errors import AuthError, SettingsConflict
from albedo_actors.settings import SecretInput, ServerSpec, Settings
from albedo_actors.store import open_store
from albedo_actors.store import migrations
from albedo_actors.store.records import Credentials
from servers.fault_auth_server import FaultAuthServer
from servers.fault_http_server import CanaryServer

NAME = "faulty"
WAIT_S = 30.0  # the bound on every wait of these tests
NO_BROWSER = {"ALBEDO_NO_BROWSER": "1"}


# -- fixtures and helpers ----------------------------------------------------------------------


@pytest.fixture
def home(tmp_path):
    return str(tmp_path / "home")


@pytest.fixture
def store(home):
    opened = open_store(home)
    yield opened
    opened.close()


@pytest.fixture
def stores(home):
    """More stores on the same database: their own connections, as other processes have."""
    opened = []

    def make():
        opened.append(open_store(home))
        return opened[-1]

    yield make
    for s in opened:
        s.close()


@pytest.fixture
def threads():
    """Threads a test starts; every one is joined (bounded) at the end."""
    started: list[threading.Thread] = []

    def start(target) -> threading.Thread:
        thread = threading.Thread(target=target, daemon=True)
        started.append(thread)
        thread.start()
        return thread

    yield start
    for thread in started:
        thread.join(WAIT_S)


def config_of(server: FaultAuthServer, **changes) -> ServerConfig:
    return ServerConfig(name=NAME, type="http", url=server.url, startup_timeout_ms=10000, call_timeout_ms=10000,
                        **changes)


def sign_in(config: ServerConfig, store, *, port: int = 0, environ: dict | None = None, http: AuthHttp | None = None):
    return SignIn(config, store, environ=environ or NO_BROWSER, agent=follow_redirect_agent(), port=port, lifetime=10,
                  http=http).run()


def stored(store, name: str = NAME) -> OAuthRecord | None:
    return from_credentials(store.get_credentials(name))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_line(message: str) -> None:
    assert "\n" not in message and "Traceback" not in message
    assert f"server {NAME!r}" in message


class Gate:
    """An ``http_factory`` whose token request waits for ``open()``; ``entered`` is set once it is asked."""

    def __init__(self, on_enter=None) -> None:
        self.entered = threading.Event()
        self._open = threading.Event()
        self._on_enter = on_enter
        self.calls = 0

    def open(self) -> None:
        self._open.set()

    def __call__(self, server):
        self.calls += 1
        self.entered.set()
        if self._on_enter is not None:
            self._on_enter()
        assert self._open.wait(WAIT_S), "the gate was never opened"
        return AuthHttp()


# -- no database lock over the network; a total deadline ----------------------------------------


def test_a_trickling_token_endpoint_is_cut_at_the_deadline_and_blocks_no_writer_of_the_store(fault, store, stores,
                                                                                               threads):
    server = fault()
    config = config_of(server)
    signed = sign_in(config, store)
    server.trickle["/token"] = 0.3  # one byte every 0.3 s: no per-read timeout of 1 s ever fires
    before = server.hits("/token")
    other = stores()  # another connection to the database, as another process has
    outcome: dict = {}

    def refresh() -> None:
        started = time.monotonic()
        try:
            refresh_held(store, config, signed.access_token, {}, lambda s: AuthHttp(timeout=1.5))
        except RefreshDeferred as exc:
            outcome["error"] = str(exc)
        outcome["took"] = time.monotonic() - started

    thread = threads(refresh)
    assert server.wait_hits("/token", before + 1, WAIT_S)
    # The token request is in flight: every writer of the store goes on meanwhile,
    # the writer of that very row included.
    started = time.monotonic()
    other.put_credentials("bystander", Credentials(bearer_token="bystander-token"))
    other.update_credentials(NAME, lambda c: c)
    writes_took = time.monotonic() - started
    in_flight = thread.is_alive()
    thread.join(WAIT_S)

    assert in_flight and writes_took < 0.5, f"a store write waited {writes_took:.2f} s for the token request"
    assert not thread.is_alive()
    assert 1.4 <= outcome["took"] < 3.0, outcome
    assert "no answer within 1.5 s" in outcome["error"] and "\n" not in outcome["error"]
    assert server.fully_trickled() == []  # the client gave up; it did not wait the answer out
    now = stored(store)
    assert (now.state, now.access_token, now.refresh_token) == ("signed_in", signed.access_token, signed.refresh_token)
    assert other.credentials_and_lease(NAME)[1] is None  # the lease was given back
    assert other.get_credentials("bystander").bearer_token == "bystander-token"


@pytest.mark.parametrize("path", ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-authorization-server",
                                  "/register", "/mcp"])
def test_every_exchange_of_a_sign_in_has_a_total_deadline(fault, store, path):
    server = fault(trickle={path: 0.25})
    started = time.monotonic()
    with pytest.raises(AuthError) as caught:
        sign_in(config_of(server), store, http=AuthHttp(timeout=1.0))
    took = time.monotonic() - started
    assert took < 2.5, f"the sign-in took {took:.1f} s with a 1 s deadline per exchange"
    one_line(str(caught.value))
    assert "no answer within 1 s" in str(caught.value)
    assert server.hits("/token") == 0 and stored(store) is None


def test_an_answer_trickled_within_the_deadline_is_read(fault):
    server = fault(trickle={"/.well-known/oauth-authorization-server": 0.001})
    reply = AuthHttp(timeout=10).get(server.base + "/.well-known/oauth-authorization-server")
    assert reply.status == 200 and reply.json()["issuer"] == server.issuer  # every byte of it, one at a time


# -- the refresh lease -------------------------------------------------------------------------------


def test_a_loser_waits_for_the_lease_holders_write_and_makes_no_request(fault, store, stores, threads):
    server = fault()
    config = config_of(server)
    signed = sign_in(config, store)
    holder_gate, loser_gate = Gate(), Gate()
    loser_gate.open()
    results: dict = {}
    threads(lambda: results.__setitem__("holder", refresh_held(store, config, signed.access_token, {}, holder_gate)))
    assert holder_gate.entered.wait(WAIT_S)  # the holder has its lease and is about to ask
    lease = store.credentials_and_lease(NAME)[1]
    assert lease is not None and lease.until > time.time()
    loser_store = stores()
    loser = threads(lambda: results.__setitem__("loser", refresh_held(loser_store, config, signed.access_token, {},
                                                                      loser_gate)))
    loser.join(0.5)
    assert loser.is_alive()  # waiting for the holder, not asking the server
    holder_gate.open()
    loser.join(WAIT_S)

    (won, won_requested), (lost, lost_requested) = results["holder"], results["loser"]
    assert (won_requested, lost_requested) == (True, False)
    assert loser_gate.calls == 0 and server.grants("refresh_token") == 1
    now = stored(store)
    assert lost.access_token == won.access_token == now.access_token != signed.access_token
    assert now.refresh_token in server.refresh_tokens()
    assert store.credentials_and_lease(NAME)[1] is None


def test_a_lease_whose_holder_died_runs_out_and_the_next_caller_refreshes(fault, store):
    server = fault()
    config = config_of(server)
    signed = sign_in(config, store)
    with store.holding_credentials(NAME) as (_credentials, put):
        put.take_lease("a-process-that-died", time.time() + 1.5)
    started = time.monotonic()
    record, requested = refresh_held(store, config, signed.access_token, {}, lambda s: AuthHttp())
    took = time.monotonic() - started
    assert requested and record.state == "signed_in" and record.access_token != signed.access_token
    assert 1.3 <= took < 6.0, f"took {took:.2f} s for a lease with 1.5 s left"
    assert server.grants("refresh_token") == 1
    assert store.credentials_and_lease(NAME)[1] is None


def test_a_refresh_that_ends_after_a_new_sign_in_never_overwrites_it(fault, store, threads):
    server = fault()
    config = config_of(server)
    signed = sign_in(config, store)
    again: dict = {}
    gate = Gate(on_enter=lambda: again.__setitem__("record", sign_in(config, store)))  # the user signs in meanwhile
    gate.open()
    record, requested = refresh_held(store, config, signed.access_token, {}, gate)
    newer = again["record"]
    assert requested and server.grants("refresh_token") == 1  # the refresh was made, and answered...
    now = stored(store)
    assert now.access_token == newer.access_token and now.refresh_token == newer.refresh_token  # ...but not written
    assert record.access_token == newer.access_token
    assert store.credentials_and_lease(NAME)[1] is None


def test_a_version_1_database_gains_the_lease_columns_and_keeps_its_rows(home):
    import os

    os.makedirs(home, mode=0o700)
    path = os.path.join(home, "albedo.db")
    db = peewee.SqliteDatabase(path)
    db.connect()
    saved = migrations.MIGRATIONS[:]
    try:
        migrations.MIGRATIONS[:] = saved[:1]
        migrations.migrate(db)
        db.execute_sql("INSERT INTO credentials (server, bearer_token, env, updated_at) VALUES (?, ?, '{}', 0)",
                       ("old", "old-token"))
    finally:
        migrations.MIGRATIONS[:] = saved
        db.close()
    opened = open_store(home)
    try:
        assert opened.migrations_applied == (2, 3, 4, 5, 6)
        credentials, lease = opened.credentials_and_lease("old")
        assert credentials.bearer_token == "old-token" and lease is None
    finally:
        opened.close()


# -- Settings never writes back older credentials -------------------------------------------------


def test_a_save_that_fails_to_connect_keeps_the_tokens_its_connect_rotated(fault, home, store):
    server = fault()
    settings = Settings(home, store)
    added = settings.add(ServerSpec(NAME, "http", url=server.url))
    assert added.auth["state"] == "needs_sign_in"
    settings.begin_sign_in(NAME, environ=NO_BROWSER, agent=follow_redirect_agent(), port=0, lifetime=10).run()
    signed = stored(store)
    server.expire()  # the next request is refused: the connect refreshes (rotating the refresh token)...
    server.mcp = "broken"  # ...and then fails

    with pytest.raises(SettingsConflict) as caught:
        settings.edit(NAME, secrets=SecretInput(header=("X-Extra", "extra-value")))

    assert "\n" not in str(caught.value)
    assert server.grants("refresh_token") == 1
    now = stored(store)
    assert now.refresh_token != signed.refresh_token and now.access_token != signed.access_token
    assert server.refresh_tokens() == {now.refresh_token}  # the stored one is the live one
    assert store.get_credentials(NAME).header is None  # the save's own change was undone
    # The next refresh works (the spent token would get invalid_grant).
    server.mcp = "oauth"
    server.expire()
    record, requested = refresh_held(store, config_of(server), now.access_token, {}, lambda s: AuthHttp())
    assert requested and record.state == "signed_in" and record.access_token != now.access_token


def test_a_failed_save_still_restores_what_it_changed_when_nothing_else_did(home, store):
    settings = Settings(home, store)
    store.put_credentials(NAME, Credentials(header=("X-Old", "old-value"), oauth={"url": "http://127.0.0.1:9/x"}))
    nowhere = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there: the connect fails
    with pytest.raises(SettingsConflict):
        settings.add(ServerSpec(NAME, "http", url=nowhere),
                     SecretInput(header=("X-New", "new-value"), oauth_client=("hand", "hand-secret")))
    assert store.get_credentials(NAME) == Credentials(header=("X-Old", "old-value"), oauth={"url": "http://127.0.0.1:9/x"})


# -- invalid_client -----------------------------------------------------------------------------------


def test_invalid_client_at_the_token_endpoint_forgets_the_kept_registration(fault, store):
    server = fault()
    config = config_of(server)
    port = free_port()
    first = sign_in(config, store, port=port)
    redirect = f"http://127.0.0.1:{port}/callback"
    assert store.get_oauth_client(server.issuer, redirect)["client_id"] == first.client_id
    assert sign_in(config, store, port=port).client_id == first.client_id  # kept and reused
    assert server.hits("/register") == 1

    server.token = "invalid_client"  # every exchange: the kept client, then the new one registered in its place
    with pytest.raises(AuthError) as caught:
        sign_in(config, store, port=port)
    one_line(str(caught.value))
    assert ("the authorization server refused the client albedo registered (invalid_client), and the new one "
            "registered in its place too (invalid_client)") in str(caught.value)
    assert str(caught.value).endswith("give it with `albedo-mcp edit faulty --oauth-client-id ID`")
    assert store.get_oauth_client(server.issuer, redirect) is None  # both forgotten
    assert server.hits("/register") == 2  # registered anew once, not more

    server.token = "ok"
    third = sign_in(config, store, port=port)
    assert server.hits("/register") == 3 and third.client_id != first.client_id
    assert store.get_oauth_client(server.issuer, redirect)["client_id"] == third.client_id


def test_invalid_client_at_refresh_forgets_the_kept_registration(fault, store):
    server = fault()
    config = config_of(server)
    port = free_port()
    signed = sign_in(config, store, port=port)
    redirect = f"http://127.0.0.1:{port}/callback"
    server.token = "invalid_client"
    record, requested = refresh_held(store, config, signed.access_token, {}, lambda s: AuthHttp())
    assert requested and record.state == "needs_sign_in" and record.client_id is None
    assert "invalid_client" in record.reason
    assert store.get_oauth_client(server.issuer, redirect) is None
    server.token = "ok"
    again = sign_in(config, store, port=port)
    assert server.hits("/register") == 2 and again.client_id != signed.client_id


# -- refreshes keyed by server and URL ---------------------------------------------------------------


def test_a_refresh_for_one_url_is_never_handed_to_the_client_of_another(fault, store):
    first, second = fault(), fault()
    at_first, at_second = config_of(first), dataclasses.replace(config_of(first), url=second.url)
    signed = sign_in(at_first, store)
    gate = Gate()
    ref = TokenRefresher.start(store, {}, gate)
    try:
        refresh = refresh_by(ref)
        in_flight = refresh(at_first, signed.access_token)
        assert gate.entered.wait(WAIT_S)
        other = refresh(at_second, signed.access_token)  # the server was edited meanwhile
        assert other is not in_flight
        assert other.result(timeout=WAIT_S) is None  # nothing for that URL: no token, no request
        assert gate.calls == 1
        gate.open()
        refreshed = in_flight.result(timeout=WAIT_S)
        assert refreshed.url == first.url and refreshed.access_token != signed.access_token
        # The client of the other URL never gets it.
        assert ServerAuth(at_second, store, refresh).header() is None
        assert ServerAuth(at_first, store, refresh).header() == f"Bearer {refreshed.access_token}"
    finally:
        gate.open()
        ref.stop(timeout=WAIT_S)


# -- a configured client belongs to its issuer --------------------------------------------------------

HAND_ID, HAND_SECRET = "hand-client", "hand-secret-9f3c"


@pytest.mark.parametrize("given", ["extensions.json", "settings"])
def test_a_configured_clients_secret_never_goes_to_another_issuer(fault, store, given):
    clients = {HAND_ID: HAND_SECRET}
    good = fault(clients=clients, auth_methods=("client_secret_basic",))
    other = fault(clients=clients, auth_methods=("client_secret_basic",))  # it would take the secret gladly
    environ = dict(NO_BROWSER)
    if given == "extensions.json":
        config = config_of(good, oauth=OAuthSettings(client_id=HAND_ID, client_secret_env_var="HAND_SECRET"))
        environ["HAND_SECRET"] = HAND_SECRET
    else:
        config = config_of(good)
        store.put_credentials(NAME, Credentials(oauth=OAuthRecord(
            url=good.url, state="none", configured_client_id=HAND_ID, configured_client_secret=HAND_SECRET).to_json()))
    first = sign_in(config, store, environ=environ)
    assert first.client_kind == "configured" and (first.bound_client_id, first.bound_issuer) == (HAND_ID, good.issuer)
    assert good.hits("/token") == 1

    good.authorization_servers = [other.base]  # the resource metadata now names another authorization server
    with pytest.raises(AuthError) as caught:
        sign_in(config, store, environ=environ)

    message = str(caught.value)
    one_line(message)
    assert other.base in message and good.issuer in message and "sign-out" in message
    assert HAND_SECRET not in message
    assert {r.path for r in other.requests} <= {"/.well-known/oauth-authorization-server"}
    basic = base64.b64encode(f"{HAND_ID}:{HAND_SECRET}".encode()).decode()
    for request in other.requests:
        seen = repr(request.headers) + request.body.decode("utf-8", "replace") + repr(request.query)
        assert HAND_SECRET not in seen and basic not in seen and HAND_ID not in seen
    now = stored(store)
    assert now.access_token == first.access_token and now.bound_issuer == good.issuer  # the sign-in is kept


def test_a_refresh_never_sends_a_configured_clients_secret_to_another_issuers_token_endpoint(fault, store):
    clients = {HAND_ID: HAND_SECRET}
    good = fault(clients=clients, auth_methods=("client_secret_basic",))
    other = fault(clients=clients, auth_methods=("client_secret_basic",))
    config = config_of(good)
    store.put_credentials(NAME, Credentials(oauth=OAuthRecord(
        url=good.url, state="none", configured_client_id=HAND_ID, configured_client_secret=HAND_SECRET).to_json()))
    signed = sign_in(config, store)
    # A record whose token endpoint is not its bound issuer's (tampered, or written by an older albedo).
    moved = dataclasses.replace(signed, issuer=other.issuer, token_endpoint=other.base + "/token")
    store.put_credentials(NAME, Credentials(oauth=moved.to_json()))
    record, requested = refresh_held(store, config, signed.access_token, {}, lambda s: AuthHttp())
    assert record.state == "needs_sign_in" and "issuer_mismatch" in record.reason
    assert other.requests == [] and good.grants("refresh_token") == 0


def test_signing_out_lets_a_configured_client_follow_a_moved_authorization_server(fault, home, store):
    clients = {HAND_ID: HAND_SECRET}
    good = fault(clients=clients, auth_methods=("client_secret_basic",))
    moved = fault(clients=clients, auth_methods=("client_secret_basic",))
    settings = Settings(home, store)
    settings.add(ServerSpec(NAME, "http", url=good.url), SecretInput(oauth_client=(HAND_ID, HAND_SECRET)))
    settings.begin_sign_in(NAME, environ=NO_BROWSER, agent=follow_redirect_agent(), port=0, lifetime=10).run()
    good.authorization_servers = [moved.base]
    with pytest.raises(AuthError):
        settings.begin_sign_in(NAME, environ=NO_BROWSER, agent=follow_redirect_agent(), port=0, lifetime=10).run()
    assert moved.hits("/token") == 0
    settings.sign_out(NAME)  # the user accepts the move
    record = settings.begin_sign_in(NAME, environ=NO_BROWSER, agent=follow_redirect_agent(), port=0, lifetime=10).run()
    assert record.bound_issuer == moved.issuer and moved.hits("/token") == 1


# -- the callback listener -----------------------------------------------------------------------------


def raw_request(port: int, request: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def callback_request(port: int, host: str | None, state: str, target: str | None = None) -> bytes:
    target = target or f"/callback?code=the-code&state={state}"
    head = f"GET {target} HTTP/1.1\r\n" + (f"Host: {host}\r\n" if host is not None else "") + "Connection: close\r\n\r\n"
    return raw_request(port, head.encode())


def test_the_callback_listener_answers_only_its_own_host():
    with CallbackListener("the-state", port=0, lifetime=30) as listener:
        port = listener.port
        for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1:{port + 1}", "127.0.0.1", "localhost",
                     f"127.0.0.1:{port}.evil.example", f"[::1]:{port}", None):
            answer = callback_request(port, host, "the-state")
            assert answer.startswith(b"HTTP/1.0 421"), (host, answer[:40])
            assert b"the-code" not in answer
        # An absolute-form target naming another authority, with our own Host.
        answer = callback_request(port, f"127.0.0.1:{port}", "the-state",
                                  target="http://evil.example/callback?code=the-code&state=the-state")
        assert answer.startswith(b"HTTP/1.0 421")
        assert listener.result is None
        assert callback_request(port, f"LOCALHOST:{port}", "the-state").startswith(b"HTTP/1.0 200")
        assert listener.wait(5) == {"code": "the-code", "state": "the-state"}


def test_idle_connections_do_not_delay_the_callback():
    with CallbackListener("the-state", port=0, lifetime=30) as listener:
        idle = [socket.create_connection(("127.0.0.1", listener.port), timeout=5) for _ in range(4)]
        idle[0].sendall(b"GET /callback?code=x")  # half a request line, never finished
        try:
            started = time.monotonic()
            url = f"http://127.0.0.1:{listener.port}/callback?code=the-code&state=the-state"
            with urllib.request.urlopen(url, timeout=10) as reply:
                assert reply.status == 200
            took = time.monotonic() - started
            assert took < 1.0, f"the callback waited {took:.1f} s behind idle connections"
            assert listener.wait(5) == {"code": "the-code", "state": "the-state"}
            started = time.monotonic()
            listener.close()
            assert time.monotonic() - started < 3.0
            for sock in idle:  # closed by the listener, not left hanging
                assert sock.recv(100) == b""
        finally:
            for sock in idle:
                sock.close()


def test_a_connection_that_trickles_its_request_is_cut_when_its_time_is_up(monkeypatch):
    monkeypatch.setattr(callback, "REQUEST_TIMEOUT_S", 0.5)
    with CallbackListener("the-state", port=0, lifetime=30) as listener:
        with socket.create_connection(("127.0.0.1", listener.port), timeout=5) as sock:
            started = time.monotonic()
            sock.settimeout(0.2)
            cut = False
            for byte in b"GET /callback?code=a-very-long-code-sent-slowly&state=the-state HTTP/1.1\r\n":
                try:
                    sock.sendall(bytes([byte]))
                    if sock.recv(100) == b"":  # waits 0.2 s for the listener to hang up
                        cut = True
                        break
                except socket.timeout:
                    continue
                except OSError:
                    cut = True
                    break
            took = time.monotonic() - started
        assert cut and took < 2.0, f"cut={cut} after {took:.1f} s"
        assert listener.result is None


# -- discovery and private addresses ------------------------------------------------------------------


@pytest.mark.parametrize("where", [
    "http://169.254.169.254/latest/meta-data", "http://169.254.170.2", "http://[fe80::1]:8080", "http://10.0.0.1",
    "http://172.16.5.4", "http://192.168.1.1", "http://100.64.0.1", "http://[fc00::1]", "http://[fd00:ec2::254]",
    "http://[::ffff:169.254.169.254]", "http://metadata.google.internal", "http://224.0.0.1",
    # issue 23: special-purpose ranges and IPv4-in-IPv6 forms that were taken for the public Internet
    "http://[::ffff:0:a9fe:a9fe]/", "http://198.18.0.1", "http://[::a9fe:a9fe]", "http://[::ffff:0:a00:1]",
    "http://[64:ff9b:1::a9fe:a9fe]", "http://[64:ff9b:1::a00:1]", "http://[fec0::1]", "http://192.0.0.1",
    "http://192.0.0.170", "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]", "http://[2001:2::1]", "http://[5f00::1]",
])
def test_discovery_never_fetches_private_or_metadata_addresses_for_a_loopback_server(fault, store, where):
    server = fault(authorization_servers=[where])
    started = time.monotonic()
    with pytest.raises(AuthError) as caught:
        sign_in(config_of(server), store)
    assert time.monotonic() - started < 3.0
    message = str(caught.value)
    one_line(message)
    assert "albedo does not fetch it" in message
    assert server.hits("/token") == 0 and server.hits("/register") == 0 and stored(store) is None


def test_a_challenge_naming_the_metadata_service_is_not_fetched(fault, store):
    server = fault(challenge_prm="http://169.254.169.254/latest/meta-data/iam/security-credentials/")
    with pytest.raises(AuthError) as caught:
        sign_in(config_of(server), store)
    one_line(str(caught.value))
    assert "cloud metadata" in str(caught.value)
    assert server.discovery_hits() == 0


@pytest.mark.parametrize("where,kind", [
    ("http://[::ffff:0:a9fe:a9fe]/latest/meta-data/", "cloud metadata"), ("http://198.18.0.1/", "benchmarking"),
    ("http://[::a9fe:a9fe]/", "cloud metadata"), ("http://192.0.0.1/.well-known/x", "reserved"),
    ("http://[64:ff9b:1::a00:1]/", "private-network"), ("http://[fec0::1]/", "private-network"),
])
def test_a_server_on_the_public_internet_is_not_followed_to_a_special_address(where, kind):
    # The HTTP client of every sign-in exchange, with the guard a server at a public
    # address gets (a literal: nothing is looked up); the refusal comes before any connection.
    http = AuthHttp(timeout=5, guard=AddressGuard("https://8.8.8.8/mcp"))
    started = time.monotonic()
    with pytest.raises(AuthHttpError) as caught:
        http.get(where)
    assert time.monotonic() - started < 3.0  # refused, not a connection left to time out
    assert kind in str(caught.value) and "albedo does not fetch it" in str(caught.value)


def test_the_unspecified_address_is_refused_though_it_would_reach_this_host(fault, store):
    canary = CanaryServer()
    base = canary.start()
    try:
        port = int(base.rsplit(":", 1)[1].split("/", 1)[0])
        server = fault(authorization_servers=[f"http://0.0.0.0:{port}"])  # 0.0.0.0 connects to this host on Linux
        with pytest.raises(AuthError) as caught:
            sign_in(config_of(server), store)
        assert "unspecified" in str(caught.value)
        assert canary.hits == []
    finally:
        canary.stop()


def test_loopback_names_stay_allowed_for_a_loopback_server(fault, store):
    server = fault()
    port = server.base.rsplit(":", 1)[1]
    server.authorization_servers = [f"http://localhost:{port}"]  # resolved, checked: loopback, like the server
    with pytest.raises(AuthError) as caught:
        sign_in(config_of(server), store)
    assert "does not fetch" not in str(caught.value)  # refused for its issuer name, not its address
    assert server.hits("/.well-known/oauth-authorization-server") == 1


def test_the_connection_goes_to_the_checked_address(fault, monkeypatch):
    server = fault()
    port = int(server.base.rsplit(":", 1)[1])
    real = socket.getaddrinfo
    answers = []

    def rebinding(host, *args, **kwargs):  # a DNS server that changes its answer after the first one
        if host != "rebind.test":
            return real(host, *args, **kwargs)
        address = "127.0.0.1" if not answers else "169.254.169.254"
        answers.append(address)
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    http = AuthHttp(timeout=5, guard=AddressGuard(server.url))
    reply = http.get(f"http://rebind.test:{port}/.well-known/oauth-authorization-server")
    assert reply.status == 200 and answers == ["127.0.0.1"]  # looked up once; that address was used
    with pytest.raises(AuthHttpError) as caught:
        http.get(f"http://rebind.test:{port}/.well-known/oauth-authorization-server")
    assert "link-local" in str(caught.value) or "metadata" in str(caught.value)
    assert server.hits("/.well-known/oauth-authorization-server") == 1


def _addr(ip: str, port: int = 443):
    return (socket.AF_INET6, (ip, port, 0, 0)) if ":" in ip else (socket.AF_INET, (ip, port))


# Public addresses here are well-known resolvers (the guard never connects to them): the
# documentation ranges are not public (issue 23), so a server there is its own kind.
@pytest.mark.parametrize("server_url,allowed,refused", [
    ("https://8.8.8.8/mcp", ["1.1.1.1", "2606:4700:4700::1111", "9.9.9.9", "::ffff:1.1.1.1", "64:ff9b::808:808"],
     ["127.0.0.1", "::1", "10.1.1.1", "172.31.0.1", "192.168.0.1", "169.254.169.254", "169.254.1.1", "fe80::1",
      "fd00:ec2::254", "fc00::5", "100.64.1.1", "100.100.100.200", "0.0.0.0", "::", "224.0.0.1", "::ffff:10.0.0.1",
      "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::1", "203.0.113.1", "2001:db8::1", "198.18.0.1", "192.0.0.1",
      "::a9fe:a9fe", "::ffff:0:a9fe:a9fe", "64:ff9b:1::a00:1", "fec0::1"]),
    ("https://203.0.113.7/mcp", ["198.51.100.1", "2001:db8::1", "8.8.8.8"], ["10.0.0.1", "198.18.0.1", "127.0.0.1"]),
    ("http://10.0.0.5/mcp", ["10.9.9.9", "192.168.3.3", "fd12::1", "fec0::5", "1.1.1.1"],
     ["127.0.0.1", "169.254.169.254", "169.254.1.1", "0.0.0.0", "203.0.113.1", "198.18.0.1"]),
    ("http://127.0.0.1:9/mcp", ["127.0.0.2", "::1", "::ffff:127.0.0.3", "1.1.1.1"],
     ["10.0.0.1", "169.254.169.254", "192.168.1.1", "203.0.113.1"]),
    ("http://169.254.10.10/mcp", ["169.254.20.20"], ["169.254.169.254", "10.0.0.1"]),
    ("http://198.18.0.5/mcp", ["198.19.255.1", "2001:2::1", "1.1.1.1"], ["10.0.0.1", "127.0.0.1", "192.0.2.1"]),
])
def test_the_guard_allows_the_public_internet_and_the_servers_own_kind_of_address(server_url, allowed, refused):
    guard = AddressGuard(server_url)
    deadline = time.monotonic() + 5
    for ip in allowed:
        guard.check(ip, [_addr(ip)], deadline)
    for ip in refused:
        with pytest.raises(AddressRefused):
            guard.check(ip, [_addr(ip)], deadline)
    # A name resolving to an allowed and a refused address is refused.
    with pytest.raises(AddressRefused):
        guard.check("mixed.example", [_addr(allowed[0]), _addr(refused[0])], deadline)
