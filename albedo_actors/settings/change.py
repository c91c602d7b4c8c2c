"""One settings change, written once: :class:`Change` and its all-or-nothing :func:`apply`.

::

    change = Change(servers={"docs": {"type": "stdio", "command": "docs-mcp"}},
                    secrets={"docs": SecretInput(env={"DOCS_TOKEN": "..."})}, added=frozenset({"docs"}))
    apply(change, document, store)         # raises ConfigError (nothing written) or SettingsConflict (all undone)
    Change.from_json(body).to_json()       # the service's PATCH body, both ways

A change holds what one save changes: server entries added, replaced or removed (as
in ``extensions.json``), their secrets (:class:`~albedo_actors.settings.secrets.SecretInput`),
sign-outs, the extensions' defaults and ``retryMs``. :meth:`Settings <albedo_actors.settings.Settings>`
builds one per command, the settings service builds one from each PATCH body, and the
command line sends one to a running service: all three are this one :func:`apply`.

:func:`apply`, under the home's lock:

1. checks everything and parses the whole new ``extensions.json`` (ConfigError: nothing
   written), and checks each secret on what is stored now;
2. writes the file and each server's credentials (as a function of the row, under its
   lock: a token refresh that commits meanwhile is kept);
3. connects each saved or switched-on server once (within its ``startupTimeoutMs``)
   whose entry or secrets changed (or that the change names in ``retry``); a change
   of ``enabledTools``, ``disabledTools`` or ``trust`` alone connects nothing; a server
   that answers 401 is kept, needing a sign-in;
4. on any failure restores the file and every credential it wrote or deleted (each
   only if still as it wrote it: tokens a connect rotated stay) and raises
   :class:`~albedo_actors.errors.SettingsConflict` naming the server;
5. saves the catalogues it discovered, and deletes a removed server's catalogue (and tasks).
"""

from __future__ import annotations

import copy
import dataclasses
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

import pykka

from ..actors.client import ServerHandle
from ..actors.refresher import TokenRefresher, oauth_for
from ..auth.record import OAuthRecord, from_credentials, usable
from ..catalogue.saved import fingerprint
from ..config import SERVER_NAME, McpConfig, ServerConfig, parse
from ..errors import AlbedoError, ConfigError, NeedsSignIn, SettingsConflict, StoreError
from .secrets import (REMOVE, SecretInput, apply_oauth_client, apply_secrets, change_credentials, empty_credentials,
                      is_empty, signed_out, undo_save)
from ..wire import telemetry

if TYPE_CHECKING:
    from ..store import Store
    from ..store.records import Credentials
    from .document import Document

logger = telemetry.logger(__name__)  # records carry the server and trace ids

__all__ = ["Change", "apply", "apply_locked", "kind_of", "check_server_name"]

NOT_GIVEN: Any = object()  # ``retry_ms`` left as it is
_KEYS = frozenset({"servers", "secrets", "enabled", "retryMs", "added"})
_SECRET_KEYS = frozenset({"bearerToken", "header", "headers", "env", "oauth", "oauth_client"})


@dataclass(frozen=True)
class Change:
    """What one save changes (see the module docstring). Every part is optional.

    ``servers``: NAME -> the entry as in extensions.json, or None to remove it.
    ``secrets``: NAME -> the secrets typed for it. ``sign_out``: servers whose OAuth
    tokens are forgotten. ``enabled``: extension -> on, off, or None (back to the
    built-in default). ``retry_ms``: the new ``retryMs`` (None removes it).
    ``added``: names that must not exist yet (an add, never an edit of a server of the
    same name). ``retry``: servers tried even when their entry and secrets are unchanged.
    """

    servers: Mapping[str, dict[str, Any] | None] = field(default_factory=dict)
    secrets: Mapping[str, SecretInput] = field(default_factory=dict)
    sign_out: frozenset[str] = frozenset()
    enabled: Mapping[str, bool | None] = field(default_factory=dict)
    retry_ms: Any = NOT_GIVEN
    added: frozenset[str] = frozenset()
    retry: frozenset[str] = frozenset()

    def __repr__(self) -> str:  # the secrets' own repr shows no value
        return (f"Change(servers={sorted(self.servers)}, secrets={dict(self.secrets)!r}, sign_out={sorted(self.sign_out)}, "
                f"enabled={dict(self.enabled)}, added={sorted(self.added)})")

    @property
    def empty(self) -> bool:
        return not (self.servers or self.secrets or self.sign_out or self.enabled or self.retry_ms is not NOT_GIVEN)

    @property
    def names(self) -> list[str]:
        """The servers it touches, sorted."""
        return sorted({*self.servers, *self.secrets, *self.sign_out})

    # -- JSON: the settings service's PATCH body ------------------------------------------------

    @classmethod
    def from_json(cls, body: Any) -> Change:
        """A PATCH body (``servers``, ``secrets``, ``enabled``, ``retryMs``, ``added``) as a change.

        Raises:
            ConfigError: the body's shape is wrong (one line; never a value).
        """
        if not isinstance(body, dict):
            raise ConfigError("the PATCH body must be a JSON object with servers, secrets, enabled and retryMs (each optional)")
        unknown = set(body) - _KEYS
        if unknown:
            raise ConfigError(f"unknown key(s) in the PATCH body: {', '.join(sorted(unknown))} (known: {', '.join(sorted(_KEYS))})")
        servers = _object(body.get("servers"), "servers")
        for name, entry in servers.items():
            check_server_name(name)
            if entry is not None and not isinstance(entry, dict):
                raise ConfigError(f"server {name!r}: give its entry as in extensions.json (an object), or null to remove it")
        secrets: dict[str, SecretInput] = {}
        sign_out = set()
        for name, given in _object(body.get("secrets"), "secrets").items():
            check_server_name(name)
            typed, signing_out = _secrets_from_json(name, given)
            if typed is not None:
                secrets[name] = typed
            if signing_out:
                sign_out.add(name)
        enabled = body.get("enabled", {})
        if not isinstance(enabled, dict):
            raise ConfigError('"enabled" must map extension names to true, false or null, e.g. {"mcp": true}')
        added = body.get("added", [])
        if not isinstance(added, list) or not all(isinstance(name, str) and name in servers for name in added):
            raise ConfigError('"added" must list names of "servers" that must not exist yet')
        return cls(servers=copy.deepcopy(servers), secrets=secrets, sign_out=frozenset(sign_out), enabled=dict(enabled),
                   retry_ms=body.get("retryMs", NOT_GIVEN) if "retryMs" in body else NOT_GIVEN,
                   added=frozenset(added))

    def to_json(self) -> dict[str, Any]:
        """The PATCH body of this change (``retry`` is not sent: the service tries what changed)."""
        body: dict[str, Any] = {}
        if self.servers:
            body["servers"] = copy.deepcopy(dict(self.servers))
        secrets: dict[str, dict[str, Any]] = {name: _secrets_to_json(typed) for name, typed in self.secrets.items()}
        for name in self.sign_out:
            secrets.setdefault(name, {})["oauth"] = None
        secrets = {name: typed for name, typed in secrets.items() if typed}
        if secrets:
            body["secrets"] = secrets
        if self.enabled:
            body["enabled"] = dict(self.enabled)
        if self.retry_ms is not NOT_GIVEN:
            body["retryMs"] = self.retry_ms
        if self.added:
            body["added"] = sorted(self.added)
        return body


def apply(change: Change, document: Document, store: Store) -> bool:
    """Apply ``change`` under the home's lock, all or nothing; True when something was written.

    Raises:
        ConfigError: invalid input; nothing was written.
        SettingsConflict: a server could not connect; everything was restored.
        StoreError: the database failed.
    """
    if change.empty:
        return False
    with document.lock():
        return apply_locked(change, document, store)


def apply_locked(change: Change, document: Document, store: Store) -> bool:
    """:func:`apply`, for a caller that holds the home's lock already (it read what it changes under it)."""
    if change.empty:
        return False
    previous_text = document.read_text()
    data = document.read()
    servers = document.servers(data)
    before = copy.deepcopy(servers)
    to_connect: list[str] = []
    removed: list[str] = []
    for name, entry in change.servers.items():
        check_server_name(name)
        if name in change.added and name in before:
            raise ConfigError(f"a server named {name!r} exists already in {document.path}; edit or remove it")
        if entry is None:
            if name not in servers:
                raise ConfigError(f"no server named {name!r} in {document.path}")
            del servers[name]
            removed.append(name)
            continue
        servers[name] = copy.deepcopy(entry)
        if entry.get("enabled", True) is True:
            to_connect.append(name)
    if change.enabled:
        _set_extensions(data, change.enabled, document.path)
    if change.retry_ms is not NOT_GIVEN:
        mcp = data.setdefault("mcp", {})
        if change.retry_ms is None:
            mcp.pop("retryMs", None)
        else:
            mcp["retryMs"] = change.retry_ms
    config = parse(data, document.home, source=document.path)  # before anything is written
    by_name = {server.name: server for server in config.servers}
    stored: dict[str, Credentials] = {name: store.get_credentials(name)
                                      for name in {*change.servers, *change.secrets, *change.sign_out} - set(removed)}
    # A removed server's credentials are deleted even when they cannot be read (removing
    # it is the way out of a damaged row); only readable ones can be put back on failure.
    kept_removed: dict[str, Credentials] = {}
    for name in removed:
        try:
            kept_removed[name] = store.get_credentials(name)
        except StoreError:
            logger.info("server %r: its unreadable credentials are deleted with it", name)
    # Each server's credentials change as a function of its row, applied under the row's
    # lock (a token refresh that commits meanwhile is kept); checked here on what is
    # stored now, so an invalid secret refuses the change before anything is written.
    changes: dict[str, Callable[[Credentials], Credentials]] = {}
    secrets_changed: set[str] = set()
    for name in change.servers:
        if name in by_name and name not in before:  # a new server starts with no stored secret
            changes[name] = _fresh
        elif name in by_name and kind_of(before[name]) != by_name[name].type:
            raise ConfigError(f"server {name!r}: remove it and add it again to change its transport")
    for name in sorted({*change.secrets, *change.sign_out}):
        server = by_name.get(name)
        if server is None:
            raise ConfigError(f"no server named {name!r} in {document.path} to keep secrets for")
        typed = change.secrets.get(name)
        _check_transport(server, typed, name in change.sign_out)
        changes[name] = _with_secrets(server, typed, name in change.sign_out, changes.get(name))
        if typed is not None:  # anything but a sign-out: the server is tried
            secrets_changed.add(name)
            if server.enabled and name not in to_connect:
                to_connect.append(name)
    for name, credentials_change in list(changes.items()):
        if credentials_change(stored[name]) == stored[name] and name in before:  # raises ConfigError
            del changes[name]  # nothing to write
    # A server whose entry and secrets are unchanged is not tried again, unless asked; nor
    # one whose entry changed only in which tools are offered or how they are trusted
    # (a tool toggle: what it connects to is the same, and a down server's tools can
    # still be toggled).
    to_connect = [name for name in to_connect
                  if name in change.retry or not (name in before and _same_connection(before[name], servers[name])
                                                  and name not in secrets_changed)]
    sign_out_only = not (change.servers or change.secrets or change.enabled or change.retry_ms is not NOT_GIVEN)
    if not sign_out_only:
        document.write(data)
    previous: dict[str, Credentials] = {}
    written: dict[str, Credentials] = {}
    try:
        for name, credentials_change in changes.items():
            previous[name], written[name] = change_credentials(store, name, credentials_change)
        for name in removed:
            store.delete_credentials(name)
        catalogues = {}
        for name in to_connect:
            server = by_name[name]
            try:
                catalogues[name] = try_server(document.home, store, server, store.get_credentials(name))
            except NeedsSignIn as exc:
                # The reference: saving a server that answers 401 keeps it, needing a sign-in.
                logger.info("server %r saved; it needs a sign-in (%s)", name, exc.why)
                mark_needs_sign_in(store, server, exc.why)
            except AlbedoError as exc:
                logger.info("server %r could not connect; restoring the previous settings", name)
                raise SettingsConflict(name, exc) from None
    except BaseException:
        _restore(document, store, None if sign_out_only else previous_text, previous, written,
                 kept_removed, restore_file=not sign_out_only)
        raise
    for name, catalogue in catalogues.items():
        save_catalogue(store, by_name[name], catalogue, config)
    for name in removed:
        try:
            # and the state doctor saw of it, and its tasks
            for what in ("delete_catalogue", "delete_server_state", "delete_server_tasks"):
                delete = getattr(store, what, None)
                if delete is not None:
                    delete(name)
        except StoreError as exc:  # removed all the same; only its saved catalogue (state, tasks) stays
            logger.warning("server %r: its saved catalogue, last state or tasks were not deleted (%s)", name, exc)
    for name in catalogues:
        logger.info("server %r saved and connected", name)
    logger.info("settings saved: %s", ", ".join(change.names) or "defaults")
    return True


# -- connecting ----------------------------------------------------------------------------------


def try_server(home: str, store: Store, server: ServerConfig, credentials: Credentials | None) -> Any:
    """Connect ``server`` once, within its startup timeout; its catalogue.

    Raises:
        NeedsSignIn: it answered 401. AlbedoError: it could not connect.
    """
    refresher = TokenRefresher.start(store) if server.type == "http" else None
    try:
        auth = oauth_for(store, refresher)(server) if refresher is not None else None
        handle = ServerHandle.start(server, home, credentials=credentials, auth=auth)
        try:
            return handle.connect(timeout=server.startup_timeout + 1.0)
        finally:
            handle.stop()
    finally:
        if refresher is not None:
            try:
                refresher.stop(timeout=10)
            except (pykka.ActorDeadError, pykka.Timeout):  # pykka's errors never reach a caller
                logger.warning("server %r: the token refresher did not stop within 10 s", server.name)


def save_catalogue(store: Store, server: ServerConfig, catalogue: Any, config: McpConfig) -> None:
    """Keep what connecting discovered, keyed as a session's preparer keys it (the
    credentials as stored now, the host's environment), so no session dials again; and
    review it as the preparer does (tool integrity): this is the first sight of the
    server's tools, so they are trusted then, and a change before its first session is
    held, never trusted in place of what was seen here."""
    from ..actors.preparer import save_and_review
    from ..catalogue.trust import Policy

    try:
        key = fingerprint(server, store.get_credentials(server.name), os.environ, getattr(store, "digest_key", None))
        save_and_review(store, server.name, key, catalogue, Policy.of(config, server))
    except (StoreError, ValueError) as exc:
        # The server is saved and works; only the head start is lost.
        logger.warning("server %r: its catalogue was not saved (%s)", server.name, exc)


def mark_needs_sign_in(store: Store, server: ServerConfig, why: str) -> None:
    def mark(credentials: Credentials) -> Credentials:
        record = usable(from_credentials(credentials), server.url)
        if record is not None and record.state == "signed_in" and record.access_token:
            record = record.replace(reason=why)  # a step-up: the tokens stay
        else:
            record = (record or OAuthRecord(url=server.url or "")).signed_out("needs_sign_in", why)
        return dataclasses.replace(credentials, oauth=record.to_json())

    store.update_credentials(server.name, mark)


# -- internals -------------------------------------------------------------------------------------


def kind_of(entry: dict) -> str:
    """An extensions.json entry's transport."""
    return entry.get("type") or ("stdio" if "command" in entry else "http")


# The keys of an entry that change what is offered of a server, never how it is reached.
TOOL_KEYS = frozenset({"enabledTools", "disabledTools", "trust"})


def _same_connection(before: Any, after: Any) -> bool:
    """Whether two entries of a server differ at most in :data:`TOOL_KEYS` (and its
    ``enabled`` is unchanged): saving the new one needs no connect."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        return before == after
    return ({k: v for k, v in before.items() if k not in TOOL_KEYS}
            == {k: v for k, v in after.items() if k not in TOOL_KEYS})


def check_server_name(name: Any) -> None:
    if not isinstance(name, str) or not SERVER_NAME.match(name):
        shown = name[:60] if isinstance(name, str) else name
        raise ConfigError(f"{shown!r} is not a valid server name: 1-48 letters, digits, '-' or '_', "
                          "starting with a letter or digit")


def _check_transport(server: ServerConfig, typed: SecretInput | None, signing_out: bool) -> None:
    http = server.type == "http"
    if not http and ((typed is not None and typed.for_http) or signing_out):
        raise ConfigError(f"server {server.name!r}: a bearer token, header or OAuth client is for HTTP servers")
    if http and typed is not None and typed.env:
        raise ConfigError(f"server {server.name!r}: env entries are for stdio servers")


def _fresh(current: Credentials) -> Credentials:
    """A new server's credentials: none, whatever a row of that name held."""
    return empty_credentials()


def _with_secrets(server: ServerConfig, typed: SecretInput | None, signing_out: bool,
                  base: Callable[[Credentials], Credentials] | None) -> Callable[[Credentials], Credentials]:
    """The change that applies ``typed`` (and a sign-out) to a row, after ``base``."""
    def changed(current: Credentials) -> Credentials:
        credentials = base(current) if base is not None else current
        if typed is not None:
            credentials = apply_secrets(credentials, typed, server.name)
            if server.type == "http":
                credentials = apply_oauth_client(credentials, typed, server.url, server.name)
        if signing_out:
            credentials = signed_out(server, credentials)
        return credentials

    return changed


def _restore(document: Document, store: Store, text: str | None, previous: dict[str, Credentials],
             written: dict[str, Credentials], removed: dict[str, Credentials], *, restore_file: bool) -> None:
    """Undo a change: the file as it was, each credential it wrote (or deleted) back
    unless it changed since (rotated tokens stay)."""
    if restore_file:
        document.restore(text)

    def undo(ours: Credentials, before: Credentials) -> Callable[[Credentials], Credentials]:
        return lambda current: undo_save(current, ours, before)

    def put_back(before: Credentials) -> Callable[[Credentials], Credentials]:
        return lambda current: before if is_empty(current) else current

    for name, ours in written.items():
        store.update_credentials(name, undo(ours, previous[name]))
    for name, before in removed.items():
        if not is_empty(before):
            store.update_credentials(name, put_back(before))


def _set_extensions(data: dict, value: Mapping[str, bool | None], path: str) -> None:
    enabled = data.get("enabled", {})
    if not isinstance(enabled, dict):
        raise ConfigError(f'{path}: "enabled" must map extension names to true or false, e.g. {{"mcp": true}}')
    for extension, on in value.items():
        if on is None:
            enabled.pop(extension, None)
        else:
            enabled[extension] = on
    if enabled:
        data["enabled"] = enabled
    else:
        data.pop("enabled", None)


def _object(value: Any, what: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f'"{what}" must be an object of server name -> value')
    return value


def _value(value: Any, what: str, name: str) -> str:
    """A secret as JSON: a string ("" keeps the stored one). Never quoted in an error."""
    if not isinstance(value, str):
        raise ConfigError(f"server {name!r}: {what} must be a string (\"\" keeps the stored one), or null to remove it")
    return value


def _secrets_from_json(name: str, given: Any) -> tuple[SecretInput | None, bool]:
    """A server's secrets of a PATCH body: the SecretInput (None: only a sign-out), and
    whether it signs out. An omitted secret is kept, ``""`` keeps it, null removes it."""
    if not isinstance(given, dict):
        raise ConfigError(f"server {name!r}: its secrets must be an object of bearerToken, headers, env, oauth, oauth_client")
    unknown = set(given) - _SECRET_KEYS
    if unknown:
        raise ConfigError(f"server {name!r}: unknown secret key(s) {', '.join(sorted(unknown))} "
                          f"(known: {', '.join(sorted(_SECRET_KEYS))})")
    bearer = None
    if "bearerToken" in given:
        bearer = REMOVE if given["bearerToken"] is None else _value(given["bearerToken"], "bearerToken", name)
    headers: dict[str, str] = {}
    clear_headers = False
    if "header" in given:  # the one-header form, kept for older clients
        value = given["header"]
        if value is None:
            clear_headers = True  # the one header (or every one) removed
        elif isinstance(value, dict) and set(value) <= {"name", "value"} and isinstance(value.get("name"), str):
            kept = value.get("value")  # left out or "": renames the stored header, keeping its value
            headers[value["name"]] = "" if kept is None else _value(kept, "the header value", name)
        else:
            raise ConfigError(f'server {name!r}: "header" must be {{"name": ..., "value": ...}} or null')
    if "headers" in given:
        value = given["headers"]
        if not isinstance(value, dict):
            raise ConfigError(f'server {name!r}: "headers" must map each header name to its value, "" (kept) or null (removed)')
        for header, item in value.items():
            headers[header] = REMOVE if item is None else _value(item, "a header value", name)
    env: dict[str, str] = {}
    if "env" in given:
        value = given["env"]
        if not isinstance(value, dict):
            raise ConfigError(f'server {name!r}: "env" must map KEY to a value, "" (kept) or null (removed)')
        for key, item in value.items():
            env[key] = REMOVE if item is None else _value(item, "an env value", name)
    client: tuple[str, str | None] | None = None
    if "oauth_client" in given:
        value = given["oauth_client"]
        if value is None:
            client = (REMOVE, None)
        elif isinstance(value, dict) and set(value) <= {"clientId", "clientSecret"} and isinstance(value.get("clientId"), str):
            secret = value.get("clientSecret", "")
            secret = REMOVE if secret is None else _value(secret, "clientSecret", name)
            client = (value["clientId"], secret or None)
        else:
            raise ConfigError(f'server {name!r}: "oauth_client" must be {{"clientId": ..., "clientSecret": ...}} or null')
    if "oauth" in given and given["oauth"] is not None:
        raise ConfigError(f'server {name!r}: "oauth" takes only null (the sign-out); sign in with PUT /api/auth/logins/mcp:{name}')
    typed = None
    if set(given) - {"oauth"}:
        typed = SecretInput(bearer_token=bearer, headers=headers, env=env, oauth_client=client, clear_headers=clear_headers)
    return typed, "oauth" in given


def _secrets_to_json(typed: SecretInput) -> dict[str, Any]:
    """A SecretInput as a PATCH body's secrets: a blank is ``""`` (kept, checked against
    what is stored), ``-`` is null (removed)."""
    def value(item: str | None) -> str | None:
        return None if item == REMOVE else (item or "")

    out: dict[str, Any] = {}
    if typed.bearer_token:
        out["bearerToken"] = value(typed.bearer_token)
    if typed.clear_headers:
        out["header"] = None
    if typed.headers:
        out["headers"] = {header: value(item) for header, item in typed.headers.items()}
    if typed.env:
        out["env"] = {key: value(item) for key, item in typed.env.items()}
    if typed.oauth_client is not None:
        client_id, secret = typed.oauth_client
        if client_id == REMOVE:
            out["oauth_client"] = None
        else:
            # A blank secret keeps the stored one (for the same client id); "-" forgets it.
            out["oauth_client"] = {"clientId": client_id, "clientSecret": None if secret == REMOVE else (secret or "")}
    return out
