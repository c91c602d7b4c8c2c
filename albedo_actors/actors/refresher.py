"""TokenRefresher: the only code that talks to a token endpoint for a running server.

One actor per daemon. ``refresh(server, seen)`` answers at once with a
``concurrent.futures.Future`` of the server's new :class:`OAuthRecord`; while a refresh
of that server is in flight every caller gets the same future (single-flight in this
process). The refresh itself runs on a worker thread the actor owns, never in its
mailbox, inside :meth:`Store.holding_credentials`: the row lock makes it single-flight
across processes sharing the database too. Under the lock the stored record is read
again first: when it already holds another access token than the one the caller saw
(another thread or process refreshed, or the user signed in again) and that token is
not expiring, no request is made. So with rotating refresh tokens a lost race reads
the winner's tokens instead of spending (and wiping) them.

A refusal (``invalid_grant`` ...) marks the server ``needs_sign_in`` and keeps the
client registration; a transient failure (5xx, 429, timeout, unreachable) keeps the
tokens and fails only this refresh.

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
from typing import Any, Callable, Mapping

import pykka

from ..auth import discovery
from ..auth.discovery import Challenge
from ..auth.http import AuthHttp
from ..auth.record import OAuthRecord, from_credentials, usable
from ..auth.tokens import TokenError
from ..config import ServerConfig
from ..errors import AlbedoError, AuthError, NeedsSignIn, StoreError

log = logging.getLogger(__name__)

ASK_TIMEOUT = 5.0
REFRESH_WAIT_S = 45.0  # token request (10 s) + waiting for another process's row lock (30 s)
MAX_AUTHORIZATIONS = 3  # interactive sign-ins in a row for one request (step-up loops end)

__all__ = ["TokenRefresher", "ServerAuth", "MAX_AUTHORIZATIONS", "oauth_for", "sign_in_needed"]


class RefreshDeferred(NeedsSignIn):
    """A refresh that could not be done for now (5xx, timeout): the tokens are kept."""


class TokenRefresher(pykka.ThreadingActor):
    """Single-flight refreshes per server name; see the module docstring."""

    def __init__(self, store: Any, environ: Mapping[str, str] | None = None,
                 http_factory: Callable[[ServerConfig], AuthHttp] | None = None) -> None:
        super().__init__()
        self._store = store
        self._environ = dict(os.environ) if environ is None else dict(environ)
        self._http_factory = http_factory or (lambda server: AuthHttp(verify=server.ca_file or True))
        self._inflight: dict[str, concurrent.futures.Future] = {}
        self._threads: set[threading.Thread] = set()
        self.requests = 0  # token requests made (tests and benchmarks read it)

    def refresh(self, server: ServerConfig, seen: str | None) -> concurrent.futures.Future:
        """The future of ``server``'s record after a refresh of the token ``seen``."""
        future = self._inflight.get(server.name)
        if future is not None and not future.done():
            return future  # a finished one (its _Finished not handled yet) is not in flight
        future = concurrent.futures.Future()
        self._inflight[server.name] = future
        thread = threading.Thread(target=self._work, args=(server, seen, future), name=f"oauth-refresh-{server.name}",
                                  daemon=True)
        self._threads.add(thread)
        thread.start()
        return future

    def token_requests(self) -> int:
        return self.requests

    def _finished(self, name: str, future: concurrent.futures.Future, thread: threading.Thread, requested: bool) -> None:
        if self._inflight.get(name) is future:
            del self._inflight[name]
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
                self.actor_ref.tell(_Finished(server.name, future, threading.current_thread(), requested))
            except pykka.ActorDeadError:
                pass

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, _Finished):
            self._finished(message.name, message.future, message.thread, message.requested)
            return None
        return super().on_receive(message)


@dataclasses.dataclass(frozen=True)
class _Finished:
    name: str
    future: concurrent.futures.Future
    thread: threading.Thread
    requested: bool


def refresh_held(store: Any, server: ServerConfig, seen: str | None, environ: Mapping[str, str],
                 http_factory: Callable[[ServerConfig], AuthHttp]) -> tuple[OAuthRecord | None, bool]:
    """Refresh under the row lock; returns (the record now stored, whether a request was made)."""
    from ..auth.signin import refresh_record

    with store.holding_credentials(server.name) as (credentials, put):
        record = usable(from_credentials(credentials), server.url)
        if record is None or record.state != "signed_in" or not record.access_token:
            return record, False
        if record.access_token != seen and not record.expiring():
            return record, False  # someone else refreshed (or signed in) meanwhile
        with http_factory(server) as http:
            try:
                fresh = refresh_record(http, server, record, environ)
            except TokenError as exc:
                if exc.transient:
                    log.warning("server %r: token refresh failed for now (%s); the tokens are kept", server.name, exc)
                    raise RefreshDeferred(server.name, f"the token could not be refreshed for now: {exc}") from None
                log.warning("server %r: the authorization server refused the refresh (%s); it needs a sign-in", server.name,
                            exc.error)
                fresh = record.signed_out("needs_sign_in", f"the refresh was refused ({exc.error})")
        put(dataclasses.replace(credentials, oauth=fresh.to_json()))
        return fresh, True


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
