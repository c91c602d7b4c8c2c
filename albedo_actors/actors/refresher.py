"""TokenRefresher: the only code that talks to a token endpoint for a running server.

One actor per daemon. ``refresh(server, seen)`` answers at once with a
``concurrent.futures.Future`` of the server's new :class:`OAuthRecord`. Refreshes are
keyed by server name *and URL*: while a refresh of that server at that URL is in
flight every caller gets the same future (single-flight in this process), and a caller
for another URL (the server was edited meanwhile) never joins it, so one URL's token
never reaches the client of another. The refresh runs on a worker thread the actor
owns, never in its mailbox (:func:`refresh_held`).

Across processes sharing the database, no database lock is held over the network (on
SQLite the write lock is the whole database's: a slow token endpoint would stop every
writer). Instead each credentials row has a *refresh lease* (``refresh_owner``,
``refresh_until``; migration 0002):

1. **Claim** (one short transaction, ``Store.holding_credentials``): read the record.
   If it holds another access token than the one the caller saw and that token is not
   expiring, someone else already refreshed (or the user signed in again): it is the
   answer and no request is made. Else, if another process holds an unexpired lease,
   go to 2. Else take the lease (``refreshing until now + LEASE_S by <random id>``) and
   remember the tokens read.
2. **Wait** (a loser): poll the row, without a lock, until the lease is gone, changed
   hands or ran out, or the tokens changed; then claim again (1). The whole wait is
   bounded (about :data:`LEASE_S`); running out of it is a transient failure.
3. **Request** (the holder, no lock held): one token request, which has a total
   deadline (``AuthHttp``, 10 s) well inside the lease, so a lease is never taken over
   while its request can still be answered.
4. **Compare and write** (one short transaction): if the stored tokens are still the
   ones read in 1, the new tokens are written (onto the record as it is now, keeping
   any other change made meanwhile) and the lease is cleared. If they changed (a sign-in,
   a sign-out, an edit, another process after our lease ran out), the stored record is
   newer than ours and is kept as it is: it is the answer.

So with rotating refresh tokens a lost race reads the winner's tokens instead of
spending (and wiping) them, and a refresh that finishes late never overwrites a newer
sign-in. A holder that dies leaves its lease to run out (at most :data:`LEASE_S`). A
holder that overran its lease (stopped for longer than the lease) and then got a
refusal writes nothing while another holds the lease. Lease times are wall-clock
Unix times, so hosts sharing one PostgreSQL store should keep their clocks within a
few seconds of each other (a skew shortens or lengthens a lease by that much).

A refusal (``invalid_grant`` ...) marks the server ``needs_sign_in`` and keeps the
client registration; ``invalid_client`` also forgets a registration albedo kept (the
authorization server no longer knows it), so the next sign-in registers afresh. A
transient failure (5xx, 429, timeout, unreachable) keeps the tokens and fails only
this refresh.

:class:`ServerAuth` is the per-server face an :class:`~albedo_actors.httplink.HttpLink`
uses from its POST worker threads: the ``Authorization`` value for the next request,
what to do after a 401, and after a 403 ``insufficient_scope``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
import threading
import time
import uuid
from typing import Any, Callable, Mapping

import pykka

from ..auth import discovery
from ..auth.addresses import AddressGuard
from ..auth.discovery import Challenge
from ..auth.http import TIMEOUT_S, AuthHttp
from ..auth.record import OAuthRecord, from_credentials, usable
from ..auth.tokens import TokenError
from ..config import ServerConfig
from ..errors import AlbedoError, AuthError, NeedsSignIn, StoreError

log = logging.getLogger(__name__)

ASK_TIMEOUT = 5.0
# A refresh lease outlives the token request's whole deadline (10 s) 2.5 times over.
LEASE_S = 2.5 * TIMEOUT_S
# How long a caller waits for a refresh: another process's lease, then our own request
# (each store transaction is short; they wait at most the busy timeout when contended).
REFRESH_WAIT_S = LEASE_S + TIMEOUT_S + 10.0
MAX_AUTHORIZATIONS = 3  # interactive sign-ins in a row for one request (step-up loops end)
POLL_FIRST_S, POLL_MAX_S = 0.02, 0.25  # how often a loser looks at the lease holder's row

__all__ = ["TokenRefresher", "ServerAuth", "MAX_AUTHORIZATIONS", "LEASE_S", "oauth_for", "sign_in_needed",
           "refresh_held", "default_http"]


class RefreshDeferred(NeedsSignIn):
    """A refresh that could not be done for now (5xx, timeout): the tokens are kept."""


def default_http(server: ServerConfig) -> AuthHttp:
    """The HTTP client of a refresh: TLS as configured, requests only to addresses the server's kind allows."""
    return AuthHttp(verify=server.ca_file or True, guard=AddressGuard(server.url or ""))


class TokenRefresher(pykka.ThreadingActor):
    """Single-flight refreshes per server name and URL; see the module docstring."""

    def __init__(self, store: Any, environ: Mapping[str, str] | None = None,
                 http_factory: Callable[[ServerConfig], AuthHttp] | None = None) -> None:
        super().__init__()
        self._store = store
        self._environ = dict(os.environ) if environ is None else dict(environ)
        self._http_factory = http_factory or default_http
        self._inflight: dict[tuple[str, str | None], concurrent.futures.Future] = {}
        self._threads: set[threading.Thread] = set()
        self.requests = 0  # token requests made (tests and benchmarks read it)

    def refresh(self, server: ServerConfig, seen: str | None) -> concurrent.futures.Future:
        """The future of ``server``'s record after a refresh of the token ``seen``."""
        key = (server.name, server.url)
        future = self._inflight.get(key)
        if future is not None and not future.done():
            return future  # a finished one (its _Finished not handled yet) is not in flight
        future = concurrent.futures.Future()
        self._inflight[key] = future
        thread = threading.Thread(target=self._work, args=(server, seen, future), name=f"oauth-refresh-{server.name}",
                                  daemon=True)
        self._threads.add(thread)
        thread.start()
        return future

    def token_requests(self) -> int:
        return self.requests

    def _finished(self, key: tuple[str, str | None], future: concurrent.futures.Future, thread: threading.Thread,
                  requested: bool) -> None:
        if self._inflight.get(key) is future:
            del self._inflight[key]
        self._threads.discard(thread)
        if requested:
            self.requests += 1

    def on_stop(self) -> None:
        for thread in list(self._threads):
            thread.join(REFRESH_WAIT_S)

    # -- the worker thread ------------------------------------------------------------------

    def _work(self, server: ServerConfig, seen: str | None, future: concurrent.futures.Future) -> None:
        requested = False
        try:
            record, requested = refresh_held(self._store, server, seen, self._environ, self._http_factory)
            future.set_result(record)
        except BaseException as exc:  # delivered to every waiter; nothing escapes the thread
            future.set_exception(exc if isinstance(exc, Exception) else AuthError(server.name, "the refresh was interrupted"))
        finally:
            try:
                self.actor_ref.tell(_Finished((server.name, server.url), future, threading.current_thread(), requested))
            except pykka.ActorDeadError:
                pass

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, _Finished):
            self._finished(message.key, message.future, message.thread, message.requested)
            return None
        return super().on_receive(message)


@dataclasses.dataclass(frozen=True)
class _Finished:
    key: tuple[str, str | None]
    future: concurrent.futures.Future
    thread: threading.Thread
    requested: bool


_TOKEN_FIELDS = ("state", "reason", "access_token", "refresh_token", "expires_at", "obtained_at", "scope", "account",
                 "requested_scope")


def _same_tokens(a: OAuthRecord, b: OAuthRecord) -> bool:
    return (a.state, a.access_token, a.refresh_token) == (b.state, b.access_token, b.refresh_token)


def _carry_tokens(onto: OAuthRecord, fresh: OAuthRecord) -> OAuthRecord:
    """``onto`` (the record as stored now) with the tokens and sign-in state of ``fresh``."""
    return onto.replace(**{name: getattr(fresh, name) for name in _TOKEN_FIELDS})


def refresh_held(store: Any, server: ServerConfig, seen: str | None, environ: Mapping[str, str],
                 http_factory: Callable[[ServerConfig], AuthHttp]) -> tuple[OAuthRecord | None, bool]:
    """Refresh under the row's refresh lease (module docstring); returns (the record now stored,
    whether a token request was made). No database lock is held during the request."""
    owner = uuid.uuid4().hex
    claimed = _claim(store, server, seen, owner)
    if not isinstance(claimed, _Claimed):
        return claimed, False
    taken = claimed.record
    refused: TokenError | None = None
    try:
        with http_factory(server) as http:
            fresh = _request(http, server, taken, environ)
    except TokenError as exc:
        if exc.transient:
            _release(store, server, owner)
            log.warning("server %r: token refresh failed for now (%s); the tokens are kept", server.name, exc)
            raise RefreshDeferred(server.name, f"the token could not be refreshed for now: {exc}") from None
        refused, fresh = exc, None
    except BaseException:
        _release(store, server, owner)
        raise
    forget_client = None
    with store.holding_credentials(server.name) as (credentials, put):
        lease = put.lease
        put.drop_lease(owner)
        current = usable(from_credentials(credentials), server.url)
        if current is None or not _same_tokens(current, taken):
            return current, True  # changed meanwhile: the stored record is newer than our answer
        if refused is not None:
            if lease is not None and lease.owner != owner and lease.until > time.time():
                return current, True  # ours ran out and another is refreshing: it decides
            log.warning("server %r: the authorization server refused the refresh (%s); it needs a sign-in",
                        server.name, refused.error)
            result = current.signed_out("needs_sign_in", f"the refresh was refused ({refused.error})")
            if refused.error == "invalid_client" and current.client_kind == "registered":
                forget_client = (current.issuer, current.client_id)
                result = dataclasses.replace(result, client_id=None, client_secret=None, client_kind=None,
                                             reason="the authorization server no longer accepts the client albedo "
                                                    "registered (invalid_client); the next sign-in registers again")
        else:
            result = _carry_tokens(current, fresh)
        put(dataclasses.replace(credentials, oauth=result.to_json()))
    if forget_client is not None and forget_client[0] and forget_client[1]:
        try:
            store.delete_oauth_client(*forget_client)
        except (StoreError, AttributeError) as exc:
            log.warning("server %r: could not forget the refused client registration: %s", server.name, exc)
    return result, True


@dataclasses.dataclass(frozen=True)
class _Claimed:
    record: OAuthRecord


def _claim(store: Any, server: ServerConfig, seen: str | None, owner: str) -> Any:
    """Step 1 and 2: ``_Claimed`` (we hold the lease) or the stored record that answers the caller."""
    give_up = time.monotonic() + LEASE_S + 2.0
    while True:
        with store.holding_credentials(server.name) as (credentials, put):
            record = usable(from_credentials(credentials), server.url)
            if record is None or record.state != "signed_in" or not record.access_token:
                return record
            if record.access_token != seen and not record.expiring():
                return record  # someone else refreshed (or signed in) meanwhile
            lease, now = put.lease, time.time()
            if lease is None or lease.until <= now or lease.owner == owner:
                put.take_lease(owner, now + LEASE_S)
                return _Claimed(record)
        if not _wait_for_holder(store, server, seen, lease, give_up):
            raise RefreshDeferred(server.name, "another process has been refreshing the token for too long; "
                                               "the tokens are kept")


def _wait_for_holder(store: Any, server: ServerConfig, seen: str | None, lease: Any, give_up: float) -> bool:
    """Poll (bounded) until ``lease`` is no longer the row's live lease or the tokens changed; False on give-up."""
    pause = POLL_FIRST_S
    while True:
        left = give_up - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(pause, left, max(0.0, lease.until - time.time()) + 0.01))
        pause = min(pause * 2, POLL_MAX_S)
        try:
            credentials, now_lease = store.credentials_and_lease(server.name)
        except StoreError:
            continue  # a transient read failure: look again (the give-up still bounds it)
        record = usable(from_credentials(credentials), server.url)
        if record is None or record.access_token != seen:
            return True
        if now_lease is None or now_lease != lease or now_lease.until <= time.time():
            return True


def _release(store: Any, server: ServerConfig, owner: str) -> None:
    try:
        with store.holding_credentials(server.name) as (_credentials, put):
            put.drop_lease(owner)
    except StoreError as exc:  # it runs out on its own
        log.warning("server %r: could not clear the refresh lease: %s", server.name, exc)


def _request(http: AuthHttp, server: ServerConfig, record: OAuthRecord, environ: Mapping[str, str]) -> OAuthRecord:
    from ..auth.signin import refresh_record

    return refresh_record(http, server, record, environ)


class ServerAuth:
    """The tokens of one server for its HTTP link; called from the link's worker threads.

    ``authorize`` (optional) is an interactive sign-in ``(server, challenge) -> None``
    the link may run when the server asks for one (the conformance client and tests
    follow the redirect themselves); without it a request that needs a sign-in fails
    with :class:`NeedsSignIn` and the user signs in with ``albedo-mcp sign-in``.
    """

    def __init__(self, server: ServerConfig, store: Any, refresher: Any, *,
                 authorize: Callable[[ServerConfig, Challenge | None], Any] | None = None) -> None:
        self.server = server
        self._store = store
        self._refresher = refresher  # an ActorProxy of TokenRefresher
        self._authorize = authorize
        self._lock = threading.Lock()
        self._signing_in = threading.Lock()  # one interactive sign-in at a time per server
        self._record: OAuthRecord | None = None
        self._loaded = 0.0

    # -- what the link asks --------------------------------------------------------------------

    def header(self) -> str | None:
        """``Bearer <token>`` for the next request, refreshed first when it is expiring; None without one."""
        record = self._current()
        if record is None or record.state != "signed_in" or not record.access_token:
            return None
        if record.expiring():
            try:
                record = self._refresh(record.access_token)
            except NeedsSignIn:
                return None if record.expiring(time.time() - 60) else f"Bearer {record.access_token}"
            if record is None or not record.access_token:
                return None
        return f"Bearer {record.access_token}"

    def unauthorized(self, sent: str | None, challenge: Challenge | None, method: str, attempt: int) -> str:
        """After a 401: the header to post again with, or raise :class:`NeedsSignIn`.

        A token that was sent is refreshed once (``attempt`` 0); then, or when none was
        sent, the server needs a sign-in: the challenge is recorded (its
        ``resource_metadata`` and ``scope`` guide the sign-in) and the interactive
        sign-in runs when there is one, at most :data:`MAX_AUTHORIZATIONS` times.
        """
        seen = sent[7:] if sent and sent.startswith("Bearer ") else None
        if seen is None:
            # Nothing was sent: perhaps the user signed in since this link last looked.
            record = self._current(force=True)
            if record is not None and record.state == "signed_in" and record.access_token and attempt == 0:
                return f"Bearer {record.access_token}"
        if seen is not None and attempt == 0:
            try:
                record = self._refresh(seen)
            except RefreshDeferred as exc:
                raise NeedsSignIn(self.server.name, exc.why, method) from None
            except NeedsSignIn:
                record = None
            if record is not None and record.state == "signed_in" and record.access_token and record.access_token != seen:
                return f"Bearer {record.access_token}"
        return self._sign_in(challenge, method, attempt, "the server refused the token" if seen else "the server asks for a sign-in",
                             seen)

    def forbidden(self, sent: str | None, challenge: Challenge | None, method: str, attempt: int) -> str:
        """After a 403 ``insufficient_scope``: record the step-up; sign in again or raise."""
        seen = sent[7:] if sent and sent.startswith("Bearer ") else None
        record = self._current(force=True)
        if (record is not None and record.state == "signed_in" and record.access_token
                and record.access_token != seen and not record.step_up):
            return f"Bearer {record.access_token}"  # signed in again elsewhere since: try that token
        requested = (record.requested_scope or record.scope) if record is not None else None
        wanted = discovery.step_up_scope(requested, challenge.scope if challenge else None) or None

        def step_up(r: OAuthRecord) -> OAuthRecord:
            if r.access_token != seen:
                return r  # not the token that was refused
            return r.replace(step_up=wanted)

        self._update(step_up)
        return self._sign_in(None, method, attempt, f"the server needs more scope ({wanted or 'unnamed'})", seen, keep_tokens=True)

    # -- internals ------------------------------------------------------------------------------

    def _sign_in(self, challenge: Challenge | None, method: str, attempt: int, why: str, seen: str | None,
                 keep_tokens: bool = False) -> str:
        if challenge is not None:
            self._update(lambda r: r.replace(resource_metadata=challenge.resource_metadata or r.resource_metadata,
                                             challenge_scope=challenge.scope or r.challenge_scope),
                         create=True)
        if self._authorize is None or attempt >= MAX_AUTHORIZATIONS:
            if not keep_tokens:
                def mark(r: OAuthRecord) -> OAuthRecord:
                    if r.state == "signed_in" and r.access_token and r.access_token != seen:
                        return r  # signed in (or refreshed) since: not the token that was refused
                    if r.state == "signed_in":
                        return r.signed_out("needs_sign_in", why)
                    return r.replace(reason=r.reason or why)

                self._update(mark, create=True)
            if attempt >= MAX_AUTHORIZATIONS and self._authorize is not None:
                why = f"{why}; gave up after {MAX_AUTHORIZATIONS} sign-ins for one request"
            raise NeedsSignIn(self.server.name, why, method, step_up=keep_tokens)
        if not self._signing_in.acquire(timeout=REFRESH_WAIT_S + 300):
            raise NeedsSignIn(self.server.name, f"{why}; another sign-in is taking too long", method)
        try:
            record = self._current(force=True)
            if not (record is not None and record.state == "signed_in" and record.access_token
                    and record.access_token != seen and (not keep_tokens or not record.step_up)):
                # Nobody signed in while this request waited for the lock: sign in now.
                self._authorize(self.server, challenge)
        except AlbedoError as exc:
            raise NeedsSignIn(self.server.name, f"{why}; signing in failed: {getattr(exc, 'detail', exc)}", method) from None
        finally:
            self._signing_in.release()
        record = self._current(force=True)
        if record is None or not record.access_token:
            raise NeedsSignIn(self.server.name, why, method)
        return f"Bearer {record.access_token}"

    def _refresh(self, seen: str | None) -> OAuthRecord | None:
        try:
            future = self._refresher.refresh(self.server, seen).get(timeout=ASK_TIMEOUT)
            record = future.result(timeout=REFRESH_WAIT_S)
        except concurrent.futures.TimeoutError:
            raise NeedsSignIn(self.server.name, "the token refresh took too long") from None
        except pykka.ActorDeadError:
            raise NeedsSignIn(self.server.name, "the token refresher has stopped") from None
        except StoreError as exc:
            raise NeedsSignIn(self.server.name, f"the stored tokens could not be read: {exc}") from None
        except RefreshDeferred:
            raise
        except AuthError as exc:
            raise NeedsSignIn(self.server.name, exc.detail) from None
        if record is not None and record.url != self.server.url:
            record = None  # never another URL's token (the refresher keys by URL; this is the last check)
        with self._lock:
            self._record, self._loaded = record, time.monotonic()
        return record

    def _current(self, force: bool = False) -> OAuthRecord | None:
        with self._lock:
            record, loaded = self._record, self._loaded
        # A signed-in record is trusted until it expires; any other state is read again
        # (at most once a second) so a sign-in made elsewhere is seen.
        if not force and loaded and record is not None and record.state == "signed_in":
            return record
        if not force and loaded and time.monotonic() - loaded < 1.0:
            return record
        try:
            record = usable(from_credentials(self._store.get_credentials(self.server.name)), self.server.url)
        except StoreError:
            return record
        with self._lock:
            self._record, self._loaded = record, time.monotonic()
        return record

    def _update(self, change: Callable[[OAuthRecord], OAuthRecord], create: bool = False) -> None:
        url = self.server.url

        def apply(credentials: Any) -> Any:
            record = usable(from_credentials(credentials), url)
            if record is None:
                if not create:
                    return credentials
                record = OAuthRecord(url=url, state="needs_sign_in")
            return dataclasses.replace(credentials, oauth=change(record).to_json())

        try:
            new = self._store.update_credentials(self.server.name, apply)
        except StoreError as exc:
            log.warning("server %r: could not record its sign-in state: %s", self.server.name, exc)
            return
        with self._lock:
            self._record, self._loaded = usable(from_credentials(new), url), time.monotonic()


def oauth_for(store: Any, refresher: pykka.ActorRef,
              authorize: Callable[[ServerConfig, Challenge | None], Any] | None = None) -> Callable[[ServerConfig], Any]:
    """The factory a registry gives each HTTP client: its :class:`ServerAuth`."""
    proxy = refresher.proxy()

    def make(server: ServerConfig) -> ServerAuth | None:
        if server.type != "http":
            return None
        return ServerAuth(server, store, proxy, authorize=authorize)

    return make


def sign_in_needed(server: ServerConfig, credentials: Any) -> str | None:
    """Why ``server`` must not be dialled until the user signs in; None when it may be.

    A stored record for this URL that is ``needs_sign_in`` or ``signed_out`` (a
    configured ``Authorization`` header or a client credentials grant never waits for a
    user).
    """
    if server.type != "http":
        return None
    if server.oauth is not None and server.oauth.grant == "client_credentials":
        return None
    record = usable(from_credentials(credentials), server.url)
    if record is None or record.state not in ("needs_sign_in", "signed_out"):
        return None
    if record.state == "signed_out":
        return "signed out"
    return record.reason or "the server asks for a sign-in"
