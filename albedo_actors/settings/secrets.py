"""The secret rules of a save: what the typed secrets do to a server's stored credentials.

A blank secret (``""`` or ``None``) keeps the stored one, ``"-"`` (:data:`REMOVE`)
removes it, anything else replaces it; headers and env entries each by name. A save
changes a credentials row with a function of what it holds (:func:`change_credentials`,
under the row's lock), and a failed save is undone field by field (:func:`undo_save`),
so a token refresh that committed meanwhile is never lost. Secrets go to the store only.
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..auth.record import OAuthRecord, from_credentials, usable
from ..config import ENV_NAME, HEADER_NAME, ServerConfig
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..store import Store
    from ..store.records import Credentials

REMOVE = "-"  # a secret given as "-" removes the stored one


@dataclass(frozen=True)
class SecretInput:
    """Secrets typed for a save. Per value: blank keeps the stored one, ``-`` removes it.

    ``headers`` maps each custom HTTP header's name to its value, in the order given
    (names compare without case): a value adds or replaces that header, ``-`` removes
    it, blank keeps it. A blank value for a name not stored renames the server's one
    stored header, keeping its value (when it has exactly one). ``header=(name, value)``
    is the older one-header form, the same as ``headers={name: value}``. ``env`` maps
    KEY -> value (stdio).
    """

    bearer_token: str | None = None
    header: tuple[str, str] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    # (client id, client secret or None): an OAuth client registered by hand (HTTP); an id
    # of "-" forgets it, a secret of "-" forgets the secret only, a blank one keeps it.
    oauth_client: tuple[str, str | None] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    clear_headers: bool = False  # every stored header removed first (the older API's "header": null)

    def __post_init__(self) -> None:
        if self.header is not None:  # the one-header form joins the others, first
            merged = {self.header[0]: self.header[1]}
            merged.update(self.headers)
            object.__setattr__(self, "headers", merged)
            object.__setattr__(self, "header", None)

    def __repr__(self) -> str:  # never show a secret, even in a traceback
        client = self.oauth_client[0] if self.oauth_client else None
        return (f"SecretInput(bearer_token={'***' if self.bearer_token else None}, headers={list(self.headers)}, "
                f"env={sorted(self.env)}, oauth_client={client})")

    @property
    def for_http(self) -> bool:
        """Whether any secret here is one only an HTTP server takes."""
        return bool(self.bearer_token or self.headers or self.clear_headers or self.oauth_client)


def change_credentials(store: Store, name: str, change: Callable[[Credentials], Credentials]) -> tuple[Credentials, Credentials]:
    """Apply ``change`` to ``name``'s credentials row under its lock; ``(before, after)``.

    A save never writes a snapshot read earlier: a token refresh (or any other writer)
    that committed between that read and this write is the ``current`` that ``change``
    sees, so a rotated refresh token is never lost. ``before`` is what the row held
    just before, for :func:`undo_save`.

    Raises:
        StoreError: the database failed.
        ConfigError: ``change`` refused what is stored now (nothing written).
    """
    seen: list[Credentials] = []

    def apply(current: Credentials) -> Credentials:
        seen.append(current)
        return change(current)

    after = store.update_credentials(name, apply)
    return seen[-1], after


def signed_out(server: ServerConfig, credentials: Credentials) -> Credentials:
    """``credentials`` signed out of ``server``: its tokens forgotten, and the server
    unbound from every dynamic registration kept until now.

    The unbinding is a time in the record (``reuse_registrations_after``): the next
    sign-in of this server reuses no registration kept before it, so it registers a
    new client, whose registration then replaces the kept one for that issuer and
    redirect URI. That is a sign-out's reset of a client the authorization server
    forgot, even one that never produced a token. Another server that signed in with
    the old registration is not touched: its record holds the client id and secret its
    tokens were issued to, which its refreshes use (the kept row never is), and it
    may go on sharing the old registration until one of them registers anew. A value
    of the record alone, so that the settings service's sign-out (which writes the
    record as this makes it) unbinds exactly as ``Settings.sign_out`` does.
    """
    record = usable(from_credentials(credentials), server.url) or OAuthRecord(url=server.url or "")
    # Signing out also forgets which issuer a configured client belongs to, for an
    # authorization server that has really moved (signin.check_client_issuer).
    record = dataclasses.replace(record, bound_client_id=None, bound_issuer=None, reuse_registrations_after=time.time())
    return dataclasses.replace(credentials, oauth=record.signed_out("signed_out", "signed out by the user").to_json())


def credentials_type() -> Any:
    from ..store import Credentials

    return Credentials


def empty_credentials() -> Any:
    return credentials_type()()


def is_empty(credentials: Credentials) -> bool:
    return not (credentials.bearer_token or credentials.headers or credentials.env or credentials.oauth)


def apply_secrets(current: Any, secrets: SecretInput, name: str) -> Any:
    """The credentials after a save: blank keeps, ``-`` removes, anything else replaces."""
    bearer = current.bearer_token
    if secrets.bearer_token == REMOVE:
        bearer = None
    elif secrets.bearer_token:
        check_value(secrets.bearer_token, "the bearer token", name)
        bearer = secrets.bearer_token
    headers = apply_headers(() if secrets.clear_headers else current.headers, secrets.headers, name)
    env = dict(current.env or {})
    for key, value in secrets.env.items():
        if not ENV_NAME.match(key):
            raise ConfigError(f"server {name!r}: {key!r} is not an environment variable name")
        if value == REMOVE:
            env.pop(key, None)
        elif value:
            if "\0" in value:
                raise ConfigError(f"server {name!r}: env {key} holds a NUL character")
            env[key] = value
        elif key not in env:
            raise ConfigError(f"server {name!r}: env {key} has no stored value to keep; give one")
    return dataclasses.replace(current, bearer_token=bearer, headers=headers, env=env)


def check_header_name(header: str, name: str) -> None:
    """Refuse a header name that is not an HTTP token, without quoting anything after a
    ``:`` or a space in it (``"X-Key: VALUE"``, the curl form, carries a value)."""
    if isinstance(header, str) and HEADER_NAME.match(header):
        return
    head = re.split(r"[:\s]", header, maxsplit=1)[0] if isinstance(header, str) else ""
    if head and HEADER_NAME.match(head):
        raise ConfigError(f"server {name!r}: give the {head} header by its name alone; its value is given apart, "
                          "never with the name")
    raise ConfigError(f"server {name!r}: a header name must be letters, digits and !#$%&'*+.^_`|~- only (e.g. X-Api-Key)")


def apply_headers(stored: tuple[tuple[str, str], ...], given: Mapping[str, str],
                  name: str) -> tuple[tuple[str, str], ...]:
    """The custom headers after a save: per name (without case), a value adds or replaces
    it, ``-`` removes it, blank keeps it; a blank for a name not stored renames the one
    stored header (see :class:`SecretInput`). The stored order is kept, new ones follow."""
    headers = list(stored)

    def at(header: str) -> int | None:
        return next((i for i, (known, _) in enumerate(headers) if known.lower() == header.lower()), None)

    renaming = len(stored) == 1 and not any(header.lower() == stored[0][0].lower() for header in given)
    for header, value in given.items():
        check_header_name(header, name)
        index = at(header)
        if value == REMOVE:
            if index is not None:
                del headers[index]
        elif value:
            check_value(value, f"the {header} header", name)
            if index is None:
                headers.append((header, value))
            else:
                headers[index] = (header, value)
        elif index is not None:
            headers[index] = (header, headers[index][1])  # kept (in the spelling given)
        elif renaming and headers == list(stored):
            headers = [(header, stored[0][1])]  # the one stored header renamed, its value kept
            renaming = False
        else:
            raise ConfigError(f"server {name!r}: the {header} header has no stored value to keep; give one")
    return tuple(headers)


def apply_oauth_client(current: Any, secrets: SecretInput, url: Any, name: str) -> Any:
    """The credentials with the hand-registered OAuth client of ``secrets`` (if any).

    The client follows the server, not its URL: when the URL changed, the tokens of
    the old URL are dropped (they are never sent elsewhere) and the client is kept.
    """
    if not isinstance(url, str):
        return current
    stored = from_credentials(current)
    record = usable(stored, url)
    moved = None
    if record is None and stored is not None and stored.configured_client_id is not None:
        moved = record = OAuthRecord(url=url, state="none", configured_client_id=stored.configured_client_id,
                                     configured_client_secret=stored.configured_client_secret,
                                     bound_client_id=stored.bound_client_id, bound_issuer=stored.bound_issuer)
    if secrets.oauth_client is None:
        return dataclasses.replace(current, oauth=moved.to_json()) if moved is not None else current
    client_id, secret = secrets.oauth_client
    record = record or OAuthRecord(url=url, state="none")
    if client_id == REMOVE:
        record = dataclasses.replace(record, configured_client_id=None, configured_client_secret=None)
    else:
        if not client_id or len(client_id) > 4096 or any(ch in client_id for ch in "\r\n\0"):
            raise ConfigError(f"server {name!r}: the OAuth client id must be a non-empty one-line string")
        kept = record.configured_client_secret if record.configured_client_id == client_id else None
        if secret == REMOVE:
            secret = None
        elif secret:
            check_value(secret, "the OAuth client secret", name)
        else:
            secret = kept
        # A client given (again) is bound afresh to the issuer of its next sign-in.
        record = dataclasses.replace(record, configured_client_id=client_id, configured_client_secret=secret,
                                     bound_client_id=None, bound_issuer=None)
    return dataclasses.replace(current, oauth=record.to_json())


# The sign-in state of an OAuth record: restored or kept together, never mixed.
_TOKEN_KEYS = frozenset({"state", "reason", "access_token", "refresh_token", "expires_at", "obtained_at", "scope",
                         "account", "requested_scope", "updated_at"})


def undo_save(current: Any, written: Any, previous: Any) -> Any:
    """The credentials after undoing a save that wrote ``written`` over ``previous``.

    A field goes back to ``previous`` only if it is still as the save wrote it; one
    that changed since (connecting refreshed and rotated the tokens, another process
    wrote) is kept. Within the OAuth record the same holds key by key, and its tokens
    and sign-in state as one: a rotated refresh token is never replaced by the spent
    one the save started from.
    """
    def field(name: str) -> Any:
        now, ours, before = getattr(current, name), getattr(written, name), getattr(previous, name)
        return before if now == ours else now

    oauth = _undo_oauth(thaw_json(current.oauth), thaw_json(written.oauth), thaw_json(previous.oauth))
    return dataclasses.replace(current, bearer_token=field("bearer_token"), headers=field("headers"),
                               env=dict(field("env") or {}), oauth=oauth)


def thaw_json(value: Any) -> Any:
    from ..store.records import thaw

    return None if value is None else thaw(value)


def _undo_oauth(now: Any, ours: Any, before: Any) -> Any:
    if now == ours:
        return before
    if ours == before or now is None or ours is None or before is None or now.get("url") != ours.get("url"):
        return now  # the save did not change it, or it was replaced since: what is stored now stays
    keys = set(now) | set(ours) | set(before)
    tokens_changed = any(now.get(k) != ours.get(k) for k in _TOKEN_KEYS)
    merged = {}
    for key in keys:
        if key in _TOKEN_KEYS and tokens_changed:
            value = now.get(key)
        else:
            value = before.get(key) if now.get(key) == ours.get(key) else now.get(key)
        if value is not None:
            merged[key] = value
    return merged


def check_value(value: str, what: str, name: str) -> None:
    if any(ch in value for ch in "\r\n\0"):
        raise ConfigError(f"server {name!r}: {what} holds a line break or NUL, which cannot go into an HTTP header")
    from ..store.sealing import PREFIX  # the store's own rule (sealing.refuse_prefix), said before anything is written

    if value.startswith(PREFIX):
        raise ConfigError(f"server {name!r}: {what} starts with {PREFIX!r}, which marks a value encrypted at rest, "
                          "so it cannot be stored; give the secret itself, not a value copied from the database")
