"""A token refresh under the credentials row's refresh lease, across processes.

Called by the TokenRefresher actor on a worker thread it owns (never in its mailbox).

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
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Callable, Mapping, Protocol

from ..config import ServerConfig
from ..errors import RefreshDeferred, StoreError
from .http import TIMEOUT_S, AuthHttp
from .record import OAuthRecord, from_credentials, usable
from .tokens import TokenError
from ..wire import telemetry

if TYPE_CHECKING:  # the records' types only: no layer below actors/ loads the store
    from ..store.records import Credentials
    from ..store.store import Lease

log = telemetry.logger(__name__)  # records carry the server and trace ids

# A refresh lease outlives the token request's whole deadline (10 s) 2.5 times over.
LEASE_S = 2.5 * TIMEOUT_S
# How long a caller waits for a refresh: another process's lease, then our own request
# (each store transaction is short; they wait at most the busy timeout when contended).
REFRESH_WAIT_S = LEASE_S + TIMEOUT_S + 10.0
POLL_FIRST_S, POLL_MAX_S = 0.02, 0.25  # how often a loser looks at the lease holder's row


class LeaseWriter(Protocol):
    """The ``put`` of a held credentials row: writes inside its transaction."""

    lease: Lease | None  # the row's refresh lease as read under the lock

    def __call__(self, new: Credentials) -> None:
        """Replace the credentials (the lease stays as it is)."""

    def take_lease(self, owner: str, until: float) -> None: ...

    def drop_lease(self, owner: str) -> None:
        """Clear the lease if ``owner`` holds it."""


class RefreshStore(Protocol):
    """The store as a refresh uses it (:class:`albedo_actors.store.Store` is one); each
    method raises StoreError when the database fails."""

    def holding_credentials(self, server: str) -> AbstractContextManager[tuple[Credentials, LeaseWriter]]:
        """Hold the server's credentials row for one short read-decide-write."""

    def credentials_and_lease(self, server: str) -> tuple[Credentials, Lease | None]:
        """The credentials and the refresh lease, read without a lock."""

    def delete_oauth_client(self, issuer: str, client_id: str) -> int:
        """Forget the registrations of ``client_id`` at ``issuer``; how many."""


def default_http(server: ServerConfig) -> AuthHttp:
    """The HTTP client of a refresh: TLS as configured, requests only to addresses the server's kind allows."""
    from .addresses import AddressGuard  # first refresh: the address tables load here

    return AuthHttp(verify=server.ca_file or True, guard=AddressGuard(server.url or ""))


# The DPoP key travels with the tokens it binds (a refresh keeps it: RFC 9449 5).
_TOKEN_FIELDS = ("state", "reason", "access_token", "refresh_token", "expires_at", "obtained_at", "scope", "account",
                 "requested_scope", "token_type", "dpop_key")


def _same_tokens(a: OAuthRecord, b: OAuthRecord) -> bool:
    return (a.state, a.access_token, a.refresh_token) == (b.state, b.access_token, b.refresh_token)


def _carry_tokens(onto: OAuthRecord, fresh: OAuthRecord) -> OAuthRecord:
    """``onto`` (the record as stored now) with the tokens and sign-in state of ``fresh``."""
    return onto.replace(**{name: getattr(fresh, name) for name in _TOKEN_FIELDS})


def refresh_held(store: RefreshStore, server: ServerConfig, seen: str | None, environ: Mapping[str, str],
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
        # Its span carries the server's name only: never a token or an assertion.
        with telemetry.step("token refresh", server.name), http_factory(server) as http:
            fresh = _request(http, server, taken, environ)
        telemetry.count("mcp.client.token_refreshes", server.name, outcome="refreshed")
    except TokenError as exc:
        telemetry.count("mcp.client.token_refreshes", server.name, outcome="deferred" if exc.transient else "refused")
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
            assert fresh is not None  # not refused: the request answered
            result = _carry_tokens(current, fresh)
        put(dataclasses.replace(credentials, oauth=result.to_json()))
    issuer, client_id = forget_client or (None, None)
    if issuer and client_id:
        try:
            store.delete_oauth_client(issuer, client_id)
        except (StoreError, AttributeError) as exc:
            log.warning("server %r: could not forget the refused client registration: %s", server.name, exc)
    return result, True


@dataclasses.dataclass(frozen=True)
class _Claimed:
    record: OAuthRecord


def _claim(store: RefreshStore, server: ServerConfig, seen: str | None, owner: str) -> _Claimed | OAuthRecord | None:
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


def _wait_for_holder(store: RefreshStore, server: ServerConfig, seen: str | None, lease: Lease, give_up: float) -> bool:
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


def _release(store: RefreshStore, server: ServerConfig, owner: str) -> None:
    try:
        with store.holding_credentials(server.name) as (_credentials, put):
            put.drop_lease(owner)
    except StoreError as exc:  # it runs out on its own
        log.warning("server %r: could not clear the refresh lease: %s", server.name, exc)


def _request(http: AuthHttp, server: ServerConfig, record: OAuthRecord, environ: Mapping[str, str]) -> OAuthRecord:
    from .signin import refresh_record

    return refresh_record(http, server, record, environ)
