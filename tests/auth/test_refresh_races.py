"""Single-flight OAuth token refresh, against the real loopback authorization server.

Threads of one process share one TokenRefresher: however many of them find the token
expired (a 401 after ``server.expire()``, or a token within a minute of its expiry)
at once, the authorization server sees one refresh_token request and every thread
ends with the same new token. Processes sharing one database (SQLite and PostgreSQL)
are serialised by the credentials row's refresh lease (taken and written in short
transactions, never held over the network): one refreshes, the other reads the
winner's tokens; with rotating refresh tokens a process that saw the old token never
spends (and so never wipes) the winner's.

Synchronisation is by barriers, conditions and pipes, every wait bounded; nothing
sleeps. ``refresh_worker.py`` is the second process.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import select
import subprocess
import sys
import threading
import time

import pytest
import requests

from albedo_actors.actors.client import ServerHandle
from albedo_actors.auth.server_auth import ServerAuth
from albedo_actors.actors.refresher import TokenRefresher, refresh_by
from albedo_actors.auth.refresh import refresh_held
from albedo_actors.auth.http import AuthHttp
from albedo_actors.auth.record import from_credentials
from albedo_actors.auth.signin import SignIn, follow_redirect_agent, refresh_record
from albedo_actors.auth.tokens import TokenError
from albedo_actors.config import ServerConfig
from albedo_actors.store import open_store

from helpers import text_of

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "refresh_worker.py")
NAME = "guarded"
WAIT_S = 60.0  # the bound on every wait of these tests


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path):
    store = open_store(str(tmp_path / "home"))
    yield store
    store.close()


@pytest.fixture
def refresher(store):
    """``refresher(http_factory=None)`` starts a TokenRefresher on ``store``; stopped afterwards."""
    started = []

    def start(http_factory=None):
        ref = TokenRefresher.start(store, {}, http_factory)
        started.append(ref)
        return ref

    yield start
    for ref in started:
        ref.stop(timeout=WAIT_S)


# --- helpers -------------------------------------------------------------------------------


def sign_in(server, store):
    """Sign in to ``server`` (auto-approving AS, ephemeral callback port); (config, record)."""
    config = ServerConfig(name=NAME, type="http", url=server.url)
    record = SignIn(config, store, agent=follow_redirect_agent(), port=0, lifetime=30).run()
    assert record.state == "signed_in" and record.access_token and record.refresh_token
    return config, record


def stored(store):
    return from_credentials(store.get_credentials(NAME))


def refreshes(server) -> int:
    return server.stats()["token_requests"]["refresh_token"]


def fp(token):
    return None if token is None else hashlib.sha256(token.encode()).hexdigest()[:16]


def at_once(n, body):
    """Run ``body(i)`` on ``n`` threads released together by a barrier; their results in order.

    Every thread is joined (bounded); an exception in any of them is raised here.
    """
    barrier = threading.Barrier(n, timeout=WAIT_S)

    def run(i):
        barrier.wait()
        return body(i)

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=n, thread_name_prefix="race")
    try:
        futures = [pool.submit(run, i) for i in range(n)]
        return [f.result(timeout=WAIT_S) for f in futures]
    finally:
        barrier.abort()  # a thread still waiting (another failed to arrive) is released
        pool.shutdown(wait=True)


def accepted(server, header) -> bool:
    """Whether the MCP endpoint takes ``header`` (a 401 is the only refusal of a bad token)."""
    reply = requests.post(server.url, headers={"Authorization": header, "Content-Type": "application/json",
                                               "Accept": "application/json, text/event-stream"},
                          json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=10)
    return reply.status_code != 401


def assert_refresh_token_rotated_away(config, old):
    """The old refresh token is dead at the AS: whoever spent it now would be refused."""
    with AuthHttp() as http, pytest.raises(TokenError) as refused:
        refresh_record(http, config, old, {})
    assert not refused.value.transient and refused.value.error == "invalid_grant"


class CountingRefresher:
    """The refresh seam ServerAuth is given (``refresh_by`` a TokenRefresher), counting
    refresh requests and keeping the reply futures they were answered with.

    The count goes up only after the request is in the actor's mailbox, so a request
    counted before a refresh finishes is handled by the actor before that refresh's completion.
    """

    def __init__(self, ref):
        self._refresh = refresh_by(ref)
        self._changed = threading.Condition()
        self.asks = 0
        self.futures = []

    def __call__(self, server, seen):
        reply = self._refresh(server, seen)
        with self._changed:
            self.asks += 1
            self.futures.append(reply)
            self._changed.notify_all()
        return reply

    def wait_for_asks(self, n) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.asks >= n, WAIT_S)


class GatedHttp:
    """An ``http_factory`` for TokenRefresher: counts token requests; each waits for ``gate()``."""

    def __init__(self, gate=lambda: True):
        self._gate = gate
        self._lock = threading.Lock()
        self.requests = 0

    def __call__(self, server):
        with self._lock:
            self.requests += 1
        assert self._gate(), "the gate of the token request did not open in time"
        return AuthHttp(verify=True)


# --- threads of one process --------------------------------------------------------------------


@pytest.mark.parametrize("shared", [True, False], ids=["one-ServerAuth", "ServerAuth-each"])
@pytest.mark.parametrize("n", [2, 8])
def test_threads_after_a_401_make_one_refresh_and_share_its_token(oauth_server, store, refresher, n, shared):
    server = oauth_server()
    config, old = sign_in(server, store)
    http = GatedHttp()
    ref = refresher(http)
    auths = [ServerAuth(config, store, refresh_by(ref))] * n if shared else \
        [ServerAuth(config, store, refresh_by(ref)) for _ in range(n)]
    for auth in auths:
        assert auth.header() == f"Bearer {old.access_token}"
    assert accepted(server, f"Bearer {old.access_token}")
    server.expire()
    assert not accepted(server, f"Bearer {old.access_token}")

    headers = at_once(n, lambda i: auths[i].unauthorized(sent=f"Bearer {old.access_token}", challenge=None,
                                                         method="tools/call", attempt=0))

    assert refreshes(server) == 1
    assert http.requests == 1
    new = stored(store)
    assert new.state == "signed_in"
    assert new.access_token != old.access_token and new.refresh_token != old.refresh_token
    assert headers == [f"Bearer {new.access_token}"] * n
    assert {auth.header() for auth in auths} == {f"Bearer {new.access_token}"}
    assert accepted(server, headers[0])
    assert refreshes(server) == 1


@pytest.mark.parametrize("n", [2, 8])
def test_tool_calls_through_handles_sharing_a_refresher_make_one_refresh(oauth_server, store, refresher, tmp_path, n):
    server = oauth_server()
    config, old = sign_in(server, store)
    http = GatedHttp()
    ref = refresher(http)
    handles = []
    try:
        for _ in range(n):
            handles.append(ServerHandle.start(config, str(tmp_path / "home"),
                                              auth=ServerAuth(config, store, refresh_by(ref))))
        for handle in handles:
            handle.connect(timeout=WAIT_S)
        assert refreshes(server) == 0
        server.expire()
        unauthorized = server.stats()["mcp_requests_unauthorized"]

        results = at_once(n, lambda i: handles[i].call_tool("echo", {"text": f"call {i}"}, timeout=WAIT_S))

        assert [text_of(result) for result in results] == [f"call {i}" for i in range(n)]
        assert not any(result.get("isError") for result in results)
        stats = server.stats()
        assert stats["token_requests"]["refresh_token"] == 1 and http.requests == 1
        assert stats["mcp_requests_unauthorized"] - unauthorized >= n  # every call met the expired token
        new = stored(store)
        assert new.state == "signed_in" and new.access_token != old.access_token
        # The handles go on with the new token, without another refresh.
        for i, handle in enumerate(handles):
            assert text_of(handle.call_tool("echo", {"text": f"again {i}"}, timeout=WAIT_S)) == f"again {i}"
        assert refreshes(server) == 1
    finally:
        for handle in handles:
            handle.stop()


def test_a_thread_that_saw_the_old_token_after_the_refresh_makes_no_request(oauth_server, store, refresher):
    server = oauth_server()
    config, old = sign_in(server, store)
    http = GatedHttp()
    ref = refresher(http)
    first, late = ServerAuth(config, store, refresh_by(ref)), ServerAuth(config, store, refresh_by(ref))
    assert first.header() == late.header() == f"Bearer {old.access_token}"  # both hold the old record
    server.expire()
    header = first.unauthorized(sent=f"Bearer {old.access_token}", challenge=None, method="tools/call", attempt=0)
    assert refreshes(server) == 1
    before = store.get_credentials(NAME).oauth

    assert late.unauthorized(sent=f"Bearer {old.access_token}", challenge=None, method="tools/call",
                             attempt=0) == header
    assert refreshes(server) == 1 and http.requests == 1
    assert store.get_credentials(NAME).oauth == before
    assert_refresh_token_rotated_away(config, old)


def age_stored_token(store, seconds):
    """Make the stored access token ``seconds`` older (issued and expiring that much earlier).

    The authorization server still takes it (its own clock is untouched): this is a token
    the client finds near its expiry, not one the server refuses.
    """
    def age(credentials):
        record = from_credentials(credentials)
        aged = record.replace(obtained_at=record.obtained_at - seconds, expires_at=record.expires_at - seconds)
        return dataclasses.replace(credentials, oauth=aged.to_json())

    store.update_credentials(NAME, age)
    return stored(store)


@pytest.mark.parametrize("shared", [True, False], ids=["one-ServerAuth", "ServerAuth-each"])
@pytest.mark.parametrize("n", [2, 8])
@pytest.mark.parametrize("lifetime,age", [(30, 20), (3600, 3570)], ids=["30s-token-10s-left", "1h-token-30s-left"])
def test_threads_finding_the_token_expiring_make_one_refresh(oauth_server, store, refresher, n, shared, lifetime, age):
    server = oauth_server("--token-lifetime", str(lifetime))
    config, signed = sign_in(server, store)
    assert not signed.expiring()
    old = age_stored_token(store, age)  # within a minute of its expiry (and past half its life)
    assert old.access_token == signed.access_token and old.expiring()
    assert accepted(server, f"Bearer {old.access_token}")
    # The token request may go only once all n threads have asked the refresher: so
    # every ask meets the one refresh in flight, however the threads are scheduled.
    counting = None
    http = GatedHttp(lambda: counting.wait_for_asks(n))
    ref = refresher(http)
    counting = CountingRefresher(ref)
    auths = [ServerAuth(config, store, counting)] * n if shared else \
        [ServerAuth(config, store, counting) for _ in range(n)]

    headers = at_once(n, lambda i: auths[i].header())

    assert counting.asks == n
    # One refresh: every reply holds the token it made. (An ask the actor reaches after the
    # worker resolved the flight, but before the actor heard so, starts a second worker,
    # which finds that token stored and answers with it without a token request: the
    # same token in another record object. Seen once under a doubly loaded machine.)
    assert len(counting.futures) == n and len({f.result(timeout=0).access_token for f in counting.futures}) == 1
    assert refreshes(server) == 1 and http.requests == 1
    new = stored(store)
    assert new.state == "signed_in" and not new.expiring()
    assert new.access_token != old.access_token and new.refresh_token != old.refresh_token
    assert headers == [f"Bearer {new.access_token}"] * n
    assert accepted(server, headers[0])
    # The new token is used as it is: more headers make no request.
    assert {auth.header() for auth in auths} == {headers[0]}
    assert refreshes(server) == 1
    assert_refresh_token_rotated_away(config, old)


def test_a_late_caller_with_the_old_short_lived_token_reuses_the_winners_token(oauth_server, store):
    # The winner's new token lives 30 s, less than the one-minute margin: still the caller
    # that comes second (it saw the old token) reads it instead of refreshing again.
    server = oauth_server("--token-lifetime", "30")
    config, signed = sign_in(server, store)
    old = age_stored_token(store, 20)
    assert old.expiring()
    winner, won = refresh_held(store, config, old.access_token, {}, lambda s: AuthHttp())
    assert won and refreshes(server) == 1 and winner.access_token != old.access_token
    record, requested = refresh_held(store, config, old.access_token, {}, lambda s: AuthHttp())
    assert (requested, record.access_token, record.refresh_token) == (False, winner.access_token, winner.refresh_token)
    assert refreshes(server) == 1


# --- processes sharing the database ------------------------------------------------------------


class Worker:
    """One refresh_worker.py process (see its docstring); killed if still running at the end."""

    def __init__(self, mode, backend, server, stderr_path):
        _kind, home, url = backend
        self.stderr_path = stderr_path
        with open(stderr_path, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, WORKER, mode, home, url or "-", server.url, NAME],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        self._buffer = b""
        self.result = None

    def send(self, word):
        self.proc.stdin.write(word.encode() + b"\n")
        self.proc.stdin.flush()

    def lines(self):
        """Complete lines read so far (one read; b"" at EOF is noted by ``None``)."""
        chunk = os.read(self.proc.stdout.fileno(), 65536)
        if not chunk:
            return None
        self._buffer += chunk
        *done, self._buffer = self._buffer.split(b"\n")
        return [json.loads(line) for line in done if line.strip()]

    def stderr(self):
        with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
            return f.read()[-4000:]

    def finish(self):
        """Wait (bounded) for exit 0."""
        try:
            code = self.proc.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"worker did not exit: {self.stderr()}")
        assert code == 0, self.stderr()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(WAIT_S)
        self.proc.stdin.close()
        self.proc.stdout.close()


class Workers:
    """Starts workers for a test; ``drive`` exchanges the protocol with them; all stopped afterwards."""

    def __init__(self, backend, server, tmp_path):
        self.backend, self.server, self.tmp_path = backend, server, tmp_path
        self.started = []

    def start(self, mode):
        worker = Worker(mode, self.backend, self.server, self.tmp_path / f"worker{len(self.started)}.err")
        self.started.append(worker)
        return worker

    def drive(self, workers, on_event, done):
        """Feed each worker's events to ``on_event(worker, event)`` until ``done()``; bounded."""
        deadline = time.monotonic() + WAIT_S
        open_ = {w.proc.stdout.fileno(): w for w in workers}
        finished = set()  # reported their result: their end of output is due
        while not done():
            if not open_:
                pytest.fail("every worker ended before the exchange was done: " + " | ".join(w.stderr() for w in workers))
            ready = select.select(list(open_), [], [], max(0.0, deadline - time.monotonic()))[0]
            if not ready:
                pytest.fail("the workers went quiet: " + " | ".join(w.stderr() for w in workers))
            for fd in ready:
                worker = open_[fd]
                events = worker.lines()
                if events is None:
                    if worker in finished:
                        del open_[fd]  # it ended after its result, maybe before another's
                        continue
                    pytest.fail(f"a worker exited early (status {worker.proc.wait(WAIT_S)}): {worker.stderr()}")
                for event in events:
                    assert event["event"] in ("ready", "calling", "locking", "holding", "result"), event
                    if event["event"] == "result":
                        finished.add(worker)
                    on_event(worker, event)

    def ready(self, workers):
        """Wait until every worker has opened the store and read its token; their ``seen`` fingerprints."""
        seen = {}
        self.drive(workers, lambda w, e: seen.__setitem__(w, e["seen"]), lambda: len(seen) == len(workers))
        return [seen[w] for w in workers]

    def race(self, workers):
        """``go`` to all at once, until every worker has reported its result.

        A worker holding the refresh lease may make its token request only once every worker
        has asked for the row (or finished without): so the others read the record
        while (or after) the request is made, never before it started.
        """
        locking, holding = set(), []

        def on_event(worker, event):
            if event["event"] == "locking":
                locking.add(worker)
            elif event["event"] == "holding":
                holding.append(worker)
            elif event["event"] == "result":
                worker.result = event
            if all(w in locking or w.result is not None for w in workers):
                while holding:
                    holding.pop(0).send("proceed")

        for worker in workers:
            worker.send("go")
        self.drive(workers, on_event, lambda: all(w.result is not None for w in workers))
        for worker in workers:
            worker.finish()
        return [w.result for w in workers]

    def stop_all(self):
        for worker in self.started:
            worker.stop()


@pytest.fixture
def workers(backend, tmp_path):
    started = {}

    def make(server):
        started["w"] = Workers(backend, server, tmp_path)
        return started["w"]

    yield make
    if "w" in started:
        started["w"].stop_all()


def assert_next_refresh_works(server, store, config):
    """A refresh with the stored refresh token succeeds: the lost race left the winner's tokens."""
    before = stored(store)
    count = refreshes(server)
    record, requested = refresh_held(store, config, before.access_token, {}, lambda s: AuthHttp())
    assert requested and record.state == "signed_in"
    assert record.access_token != before.access_token and record.refresh_token != before.refresh_token
    assert refreshes(server) == count + 1
    assert accepted(server, f"Bearer {record.access_token}")


@pytest.mark.parametrize("mode", ["held", "refresher"])
def test_two_processes_refreshing_at_once_make_one_request(oauth_server, backend, workers, mode):
    _kind, home, url = backend
    server = oauth_server()
    store = open_store(home, url)
    try:
        config, old = sign_in(server, store)
        server.expire()
        pool = workers(server)
        racers = [pool.start(mode), pool.start(mode)]
        assert pool.ready(racers) == [fp(old.access_token)] * 2  # both saw the old token

        results = pool.race(racers)

        assert refreshes(server) == 1
        assert sorted(r["requests"] for r in results) == [0, 1]
        now = stored(store)
        assert now.state == "signed_in"
        assert now.access_token != old.access_token and now.refresh_token != old.refresh_token
        for r in results:
            assert r["state"] == r["stored_state"] == "signed_in"
            assert (r["access"], r["refresh"]) == (r["stored_access"], r["stored_refresh"]) == \
                   (fp(now.access_token), fp(now.refresh_token))
        assert accepted(server, f"Bearer {now.access_token}")
        assert_refresh_token_rotated_away(config, old)
        assert_next_refresh_works(server, store, config)
    finally:
        store.close()


@pytest.mark.parametrize("mode", ["held", "refresher"])
def test_a_process_that_saw_the_old_token_does_not_spend_the_rotated_one(oauth_server, backend, workers, mode):
    _kind, home, url = backend
    server = oauth_server()
    store = open_store(home, url)
    try:
        config, old = sign_in(server, store)
        server.expire()
        pool = workers(server)
        stale = pool.start(mode)
        assert pool.ready([stale]) == [fp(old.access_token)]  # it has seen the old token...
        winner = pool.start(mode)
        assert pool.ready([winner]) == [fp(old.access_token)]
        [won] = pool.race([winner])  # ...and another process refreshes first
        assert won["requests"] == 1 and refreshes(server) == 1
        after_win = store.get_credentials(NAME).oauth
        assert after_win["access_token"] != old.access_token and after_win["refresh_token"] != old.refresh_token

        [late] = pool.race([stale])

        assert late["requests"] == 0 and refreshes(server) == 1
        assert late["state"] == "signed_in"
        assert (late["access"], late["refresh"]) == (won["access"], won["refresh"]) == \
               (fp(after_win["access_token"]), fp(after_win["refresh_token"]))
        assert store.get_credentials(NAME).oauth == after_win  # not overwritten, not wiped
        assert_refresh_token_rotated_away(config, old)  # spending the old one would have been refused
        assert_next_refresh_works(server, store, config)
    finally:
        store.close()
