"""ServerAuth: the tokens of one server for its HTTP link.

:class:`ServerAuth` is the per-server face an :class:`~albedo_actors.connection.http.link.HttpLink`
uses from its worker threads, through one :meth:`ServerAuth.flow` per HTTP request
(:mod:`albedo_actors.auth.flow`): the auth headers of each try (``Authorization``,
plus a fresh ``DPoP`` proof for a DPoP-bound token, RFC 9449 7.1), the ``DPoP-Nonce``
values answers carry, what to do after a 401, and after a 403 ``insufficient_scope``.

It refreshes tokens through the :class:`RefreshFn` seam it declares (the daemon's
TokenRefresher, adapted by ``actors.refresher.refresh_by``); nothing here knows actors.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import dataclasses
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Protocol

from ..wire import telemetry
from ..config import ServerConfig
from ..errors import AlbedoError, AuthError, NeedsSignIn, RefreshDeferred, StoreError, TimedOut
from ..wire.deadline import Bound
from . import discovery, dpop
from .discovery import Challenge
from .flow import Flow, rounds
from .record import OAuthRecord, from_credentials, usable
from .refresh import REFRESH_WAIT_S

if TYPE_CHECKING:  # the record's type only: no layer below actors/ loads the store
    from ..store.records import Credentials

log = telemetry.logger(__name__)  # records carry the server and trace ids

# The grants that sign in with no user: a refusal is fixed in the configuration, not by signing in.
MACHINE_GRANTS = ("client_credentials", "jwt-bearer")
MAX_AUTHORIZATIONS = 3  # interactive sign-ins in a row for one request (step-up loops end)
KEY_LOST = "its DPoP key is missing or unreadable, so its DPoP-bound token is not sent; sign in again"
REFRESHING = "refreshing the token"  # the steps a call's deadline may end (TimedOut.step)
SIGNING_IN = "signing in"


class RefreshFn(Protocol):
    """The single-flight token refresh ServerAuth uses: ``refresh(server, seen)``.

    Returns at once a future of ``server``'s record after a refresh of the token
    ``seen`` (None: nothing stored for its URL). The future fails with
    :class:`AuthError` (the refresh was refused, or the refresher has stopped),
    :class:`RefreshDeferred` or :class:`StoreError`; it never holds another future.
    """

    def __call__(self, server: ServerConfig, seen: str | None, /) -> concurrent.futures.Future[OAuthRecord | None]: ...


class CredentialStore(Protocol):
    """The store as ServerAuth uses it (:class:`albedo_actors.store.Store` is one)."""

    def get_credentials(self, server: str) -> Credentials:
        """The server's credentials (``Credentials()`` when none); raises StoreError."""

    def update_credentials(self, server: str, fn: Callable[[Credentials], Credentials]) -> Credentials:
        """Read, ``fn(old)``, write back, in one short transaction; the new ones. Raises StoreError."""


class ServerAuth:
    """The tokens of one server for its HTTP link; called from the link's worker threads.

    ``authorize`` (optional) is an interactive sign-in ``(server, challenge) -> None``
    the link may run when the server asks for one (the conformance client and tests
    follow the redirect themselves); without it a request that needs a sign-in fails
    with :class:`NeedsSignIn` and the user signs in with ``albedo-mcp sign-in``.
    """

    def __init__(self, server: ServerConfig, store: CredentialStore, refresh: RefreshFn, *,
                 authorize: Callable[[ServerConfig, Challenge | None], Any] | None = None) -> None:
        self.server = server
        self._store = store
        self._refresh_token = refresh
        self._authorize = authorize
        self._lock = threading.Lock()
        self._signing_in = threading.Lock()  # one interactive sign-in at a time per server
        self._record: OAuthRecord | None = None
        self._loaded = 0.0
        self._last_prover: dpop.Prover | None = None  # the record's key, loaded

    # -- what the link asks --------------------------------------------------------------------

    def headers(self, method: str, url: str, deadline: Bound | None = None) -> dict[str, str]:
        """The auth headers of one HTTP request (``method`` to ``url``), the token refreshed
        first when it is expiring; empty without a token.

        A refresh is waited for until the call's ``deadline`` at most (None: the refresh's
        own bound); it goes on in the refresher after that, for the next call.

        A Bearer token: ``Authorization: Bearer <token>``. A DPoP-bound token (RFC 9449 7.1):
        ``Authorization: DPoP <token>`` and a fresh ``DPoP`` proof for this very request
        (``htm``, ``htu``, ``ath``, the origin's nonce). A bound token whose key is missing or
        unreadable is never sent (the server then needs a sign-in).

        Raises:
            TimedOut: (``sent`` False, ``step`` :data:`REFRESHING`) the refresh did not
                finish by ``deadline``.
        """
        record = self._current()
        if record is None or record.state != "signed_in" or not record.access_token:
            return {}
        if record.expiring():
            try:
                fresh = self._refresh(record.access_token, deadline)
            except NeedsSignIn:
                fresh = None if record.expiring(time.time() - 60) else record
            if fresh is None or not fresh.access_token:
                return {}
            record = fresh
        token = record.access_token
        assert token is not None
        if record.token_type != "DPoP":
            return {"Authorization": f"Bearer {token}"}
        prover = self._prover(record)
        if prover is None:
            return {}
        return {"Authorization": f"DPoP {token}", "DPoP": prover.proof(method, url, token)}

    def flow(self, method: str, url: str, deadline: Bound | None = None, *, request: str = "",
             sign_in: bool = True, nonce: bool = True) -> Flow:
        """The auth rounds of one ``method`` request to ``url``, which the link drives
        (:func:`albedo_actors.auth.flow.rounds`: headers, the DPoP nonce, a refresh, a
        step-up or a sign-in after a 401 or 403, each step ending at ``deadline``)."""
        return rounds(self, method, url, deadline, request=request, sign_in=sign_in, nonce=nonce)

    def header(self) -> str | None:
        """The ``Authorization`` value for the next POST to the server; None without one."""
        return self.headers("POST", self.server.url or "").get("Authorization")

    def authorization_context(self) -> str:
        """A digest of the access token in use ("" without one): cached list pages are
        never shared between two (connection/list_cache.py)."""
        record = self._current()
        token = record.access_token if record is not None and record.state == "signed_in" else None
        return hashlib.sha256(token.encode()).hexdigest() if token else ""

    def dpop_nonce(self, url: str, nonce: str) -> bool:
        """A response from ``url`` carried ``DPoP-Nonce: nonce`` (RFC 9449 8.2, 9): kept for its
        origin when it is well-formed; True then."""
        return dpop.NONCES.put(url, nonce)

    def unauthorized(self, sent: str | None, challenge: Challenge | None, method: str, attempt: int,
                     deadline: Bound | None = None) -> str:
        """After a 401: the header to post again with, or raise :class:`NeedsSignIn`.

        A token that was sent is refreshed once (``attempt`` 0); then, or when none was
        sent, the server needs a sign-in: the challenge is recorded (its
        ``resource_metadata`` and ``scope`` guide the sign-in) and the interactive
        sign-in runs when there is one, at most :data:`MAX_AUTHORIZATIONS` times.

        Raises:
            NeedsSignIn: no token to post again with.
            TimedOut: (``sent`` False) the refresh, or waiting for another sign-in, did
                not finish by the call's ``deadline``; it goes on for the next call.
        """
        seen = _sent_token(sent)
        why = "the server refused the token" if seen else "the server asks for a sign-in"
        if seen is None:
            # Nothing was sent: perhaps the user signed in since this link last looked.
            record = self._current(force=True)
            if record is not None and record.state == "signed_in" and record.access_token and attempt == 0:
                return _authorization(record)
            if record is not None and record.state == "needs_sign_in" and record.reason == KEY_LOST:
                why = KEY_LOST
        if seen is not None and attempt == 0:
            try:
                record = self._refresh(seen, deadline)
            except RefreshDeferred as exc:
                raise NeedsSignIn(self.server.name, exc.why, method) from None
            except NeedsSignIn:
                record = None
            if record is not None and record.state == "signed_in" and record.access_token and record.access_token != seen:
                return _authorization(record)
        return self._sign_in(challenge, method, attempt, why, seen, deadline=deadline)

    def forbidden(self, sent: str | None, challenge: Challenge | None, method: str, attempt: int,
                  deadline: Bound | None = None) -> str:
        """After a 403 ``insufficient_scope``: record the step-up; sign in again or raise
        (as :meth:`unauthorized`)."""
        seen = _sent_token(sent)
        record = self._current(force=True)
        if (record is not None and record.state == "signed_in" and record.access_token
                and record.access_token != seen and not record.step_up):
            return _authorization(record)  # signed in again elsewhere since: try that token
        requested = (record.requested_scope or record.scope) if record is not None else None
        wanted = discovery.step_up_scope(requested, challenge.scope if challenge else None) or None

        def step_up(r: OAuthRecord) -> OAuthRecord:
            if r.access_token != seen:
                return r  # not the token that was refused
            return r.replace(step_up=wanted)

        self._update(step_up)
        return self._sign_in(None, method, attempt, f"the server needs more scope ({wanted or 'unnamed'})", seen,
                             keep_tokens=True, deadline=deadline)

    # -- internals ------------------------------------------------------------------------------

    def _sign_in(self, challenge: Challenge | None, method: str, attempt: int, why: str, seen: str | None,
                 keep_tokens: bool = False, deadline: Bound | None = None) -> str:
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
        wait = REFRESH_WAIT_S + 300
        if not self._signing_in.acquire(timeout=wait if deadline is None else min(wait, deadline.remaining())):
            if deadline is not None and deadline.expired:
                raise self._late(SIGNING_IN, deadline)
            raise NeedsSignIn(self.server.name, f"{why}; another sign-in is taking too long", method)
        try:
            record = self._current(force=True)
            if not (record is not None and record.state == "signed_in" and record.access_token
                    and record.access_token != seen and (not keep_tokens or not record.step_up)):
                # Nobody signed in while this request waited for the lock: sign in now.
                self._authorize(self.server, challenge)
        except AlbedoError as exc:
            raise NeedsSignIn(self.server.name, f"{why}; signing in failed: {getattr(exc, 'detail', exc)}", method,
                              machine=self.server.oauth is not None and self.server.oauth.grant in MACHINE_GRANTS) from None
        finally:
            self._signing_in.release()
        record = self._current(force=True)
        if record is None or not record.access_token:
            raise NeedsSignIn(self.server.name, why, method)
        return _authorization(record)

    def _prover(self, record: OAuthRecord) -> dpop.Prover | None:
        """The key of a DPoP-bound record; None (and the server needs a sign-in) when it is lost."""
        if record.dpop_key:
            kept = self._last_prover
            if kept is not None and kept.jwk == record.dpop_key:
                return kept
            try:
                self._last_prover = dpop.prover(record.dpop_key)
                return self._last_prover
            except dpop.DpopKeyError:
                pass
        token = record.access_token
        log.warning("server %r: %s", self.server.name, KEY_LOST)

        def lost(r: OAuthRecord) -> OAuthRecord:
            if r.access_token != token:
                return r  # signed in again meanwhile
            return r.signed_out("needs_sign_in", KEY_LOST)

        self._update(lost)
        return None

    def _late(self, step: str, deadline: Bound) -> TimedOut:
        """The call's deadline came while ``step`` ran (it goes on without the call)."""
        return TimedOut(self.server.name, f"nothing was sent: {step} did not finish within {deadline.seconds:g} s; try again",
                        sent=False, step=step)

    def _refresh(self, seen: str | None, deadline: Bound | None = None) -> OAuthRecord | None:
        """The record after a refresh of ``seen`` by the refresher (single flight).

        Waits until ``deadline`` at most (never longer than REFRESH_WAIT_S); the refresh
        itself is the refresher's and goes on after that, for the next call.

        Raises:
            NeedsSignIn, RefreshDeferred, TimedOut (``deadline`` came first).
        """
        wait = REFRESH_WAIT_S if deadline is None else min(REFRESH_WAIT_S, deadline.remaining())
        try:
            record = self._refresh_token(self.server, seen).result(timeout=wait)
        except concurrent.futures.TimeoutError:
            if deadline is not None and wait < REFRESH_WAIT_S:
                raise self._late(REFRESHING, deadline) from None
            raise NeedsSignIn(self.server.name, "the token refresh took too long") from None
        except concurrent.futures.CancelledError:
            raise NeedsSignIn(self.server.name, "the token refresh was abandoned") from None
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
        if url is None:
            return  # not an HTTP server: it has no OAuth record

        def apply(credentials: Credentials) -> Credentials:
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


def _sent_token(sent: str | None) -> str | None:
    """The token of a sent ``Authorization`` value (``Bearer`` or ``DPoP`` scheme)."""
    if sent:
        scheme, _, token = sent.partition(" ")
        if scheme.lower() in ("bearer", "dpop") and token:
            return token
    return None


def _authorization(record: OAuthRecord) -> str:
    return f"{'DPoP' if record.token_type == 'DPoP' else 'Bearer'} {record.access_token}"


def sign_in_needed(server: ServerConfig, credentials: Credentials | None) -> str | None:
    """Why ``server`` must not be dialled until the user signs in; None when it may be.

    A stored record for this URL that is ``needs_sign_in`` or ``signed_out`` (a
    configured ``Authorization`` header or a grant with no browser, client credentials,
    jwt-bearer or enterprise, never waits for a user).
    """
    if server.type != "http":
        return None
    if server.oauth is not None and server.oauth.grant in ("client_credentials", "jwt-bearer", "enterprise"):
        return None
    record = usable(from_credentials(credentials), server.url)
    if record is None or record.state not in ("needs_sign_in", "signed_out"):
        return None
    if record.state == "signed_out":
        return "signed out"
    return record.reason or "the server asks for a sign-in"
