"""The settings API: the one writer of ``extensions.json`` and of the stored credentials.

::

    settings = Settings(home, store)
    settings.servers()                        # [ServerView], never a secret
    settings.add(ServerSpec("docs", "stdio", command="docs-mcp", args=("--root", "/srv")),
                 SecretInput(env={"DOCS_TOKEN": "..."}))
    settings.edit("docs", ServerChanges(args=("--root", "/data")), SecretInput(env={"DOCS_TOKEN": "-"}))
    settings.disable("docs"); settings.enable("docs"); settings.remove("docs")
    settings.extensions()                     # {"mcp": False, "editor-mcp": True}
    settings.set_extension("mcp", True)       # on for every session that does not choose
    settings.apply(Change(...))               # any change, all or nothing (settings.change)
    settings.approve("docs", ["search"])      # tool integrity: trust held tools (settings.trust)

The package: :mod:`.document` (the ``extensions.json`` document: read, lock, write),
:mod:`.secrets` (the secret rules: :class:`SecretInput`, blank keeps, ``-`` removes) and
:mod:`.change` (a :class:`Change`, what one save changes, and its one all-or-nothing
``apply``) and :mod:`.trust` (approving what tool integrity holds: the store alone,
never ``extensions.json``). Every write here, the settings service's PATCH and the command line's path
through the service build a :class:`Change` and apply it. :class:`SettingsPort` is what
an admin command needs; :class:`Settings` and the service's client implement it.

A save writes the server's entry into ``extensions.json`` (atomically: a temporary file
in the same directory, fsync, ``os.replace``, mode 0600) and its credentials into the
store together. Then, unless the server is switched off (``"enabled": false``), it is
connected once, within its ``startupTimeoutMs``; when that fails the previous file is
restored, and so are the credential fields the save changed, each only if it is still
as the save wrote it (connecting may have refreshed and rotated the OAuth tokens: those
newer tokens are kept, never replaced by the older ones), and :class:`SettingsConflict`
is raised with the server's one-line error. The catalogue that connecting discovered
is saved like a session's discovery (under the server's fingerprint, see
:mod:`albedo_actors.catalogue.saved`), so the next session and ``servers`` start from it. Saves of one home are serialised by an advisory lock
(``HOME/.extensions.lock``), so two admin processes do not interleave.

Every write of ``extensions.json`` (a save, its undoing, an extension switched) then
bumps the store's revision (:meth:`albedo_actors.store.Store.bump_revision`), and the
store bumps it itself when a server's secrets or sign-in change: a running host hears
every change through :class:`albedo_actors.settings_watch.ChangeWatch`, whichever process
made it.

Secret edits follow the reference's form: a blank secret (``""`` or ``None``) keeps the
stored one, ``"-"`` removes it, anything else replaces it. Secrets go to the store
only; ``extensions.json`` only ever names environment variables.
"""

from __future__ import annotations

import os
import re
import shlex
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable, Mapping, Protocol

from ..auth.callback import DEFAULT_LIFETIME_S, DEFAULT_PORT
from ..auth.record import NO_AUTH_VIEW, from_credentials, usable
from ..auth.signin import SignIn, check_new_client
from ..catalogue.saved import fingerprint
from ..config import EXTENSION_DEFAULTS, SERVER_NAME, ServerConfig, parse
from ..errors import ConfigError, StoreError
from .change import Change, apply, apply_locked, kind_of
from .document import FILE_NAME, LOCK_NAME, Document
from .secrets import (
    REMOVE,
    SecretInput,
    apply_headers,
    change_credentials,
    check_header_name,
    signed_out,
    undo_save,
)
from ..wire import telemetry

if TYPE_CHECKING:
    from ..store import Store
    from ..store.records import Credentials

logger = telemetry.logger(__name__)  # records carry the server and trace ids

__all__ = ["Settings", "SettingsPort", "ServerSpec", "ServerChanges", "ServerView", "SecretInput", "Change", "apply",
           "Document", "REMOVE", "FILE_NAME", "LOCK_NAME", "new_entry", "edit_entry", "suggest_name", "signed_out",
           "undo_save", "change_credentials", "apply_headers", "check_header_name", "auth_view", "describe_credentials"]


@dataclass(frozen=True)
class ServerSpec:
    """A new server, as the reference's form takes it (secrets apart)."""

    name: str
    transport: str = "http"  # "http" or "stdio"
    url: str | None = None
    command: str | None = None
    args: tuple[str, ...] = ()
    enabled: bool = True
    # Further keys of the extensions.json entry, spelt as the file spells them (``cwd``,
    # ``env`` and ``headers`` references, ``bearerTokenEnvVar``, tool lists, timeouts):
    # ``albedo-mcp import`` fills them; they are validated as the file's own.
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ServerChanges:
    """What :meth:`Settings.edit` changes; None leaves a field as it is."""

    url: str | None = None
    command: str | None = None
    args: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ServerView:
    """One server as :meth:`Settings.servers` lists it. Never carries a secret."""

    name: str
    transport: str
    enabled: bool
    target: str  # the URL, or the command line (shell-quoted)
    catalogue_saved: bool
    credentials: tuple[str, ...]  # what is stored, e.g. "bearer token", "header X-Key", "env KEY"
    auth: Mapping[str, Any] = field(default_factory=lambda: dict(NO_AUTH_VIEW))  # OAuth state, never a token
    # Why the stored credentials cannot be read (the store's one line, saying what to do),
    # or None: this server's problem alone, listed beside the others.
    problem: str | None = None
    # The saved catalogue: "current" (saved under the server's configuration and
    # credentials as they are now), "outdated" (saved under others) or "none".
    catalogue: str = "none"
    # The last state ``albedo-mcp doctor`` saw: {"state", "at" (Unix time), "error",
    # "configurationChanged"}, or None when it never checked the server.
    last_seen: Mapping[str, Any] | None = None

    @property
    def state(self) -> str:
        if self.problem is not None:
            return "credentials unreadable"
        if not self.enabled:
            return "disabled"
        if self.auth.get("state") in ("needs_sign_in", "signed_out"):
            return "needs sign-in" if self.auth["state"] == "needs_sign_in" else "signed out"
        seen = self.last_seen
        if seen is not None and not seen.get("configurationChanged") and seen.get("state") in ("down", "misconfigured"):
            return str(seen["state"])  # what doctor saw last, of this very configuration
        if self.catalogue == "outdated":
            return "catalogue outdated"
        return "catalogue saved" if self.catalogue == "current" else "not discovered yet"

    @classmethod
    def from_json(cls, view: Mapping[str, Any]) -> ServerView:
        """A view as :meth:`as_json` gave it (the settings service's answer)."""
        return cls(name=str(view.get("name")), transport=str(view.get("transport")), enabled=bool(view.get("enabled")),
                   target=str(view.get("target") or ""), catalogue_saved=bool(view.get("catalogueSaved")),
                   credentials=tuple(str(item) for item in view.get("credentials") or ()),
                   auth=dict(view.get("auth") or NO_AUTH_VIEW), problem=view.get("problem"),
                   catalogue=str(view.get("catalogue") or ("current" if view.get("catalogueSaved") else "none")),
                   last_seen=view["lastSeen"] if isinstance(view.get("lastSeen"), Mapping) else None)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "transport": self.transport,
            "enabled": self.enabled,
            "state": self.state,
            "target": self.target,
            "catalogueSaved": self.catalogue_saved,
            "credentials": list(self.credentials),
            "auth": dict(self.auth),
            "problem": self.problem,
            "catalogue": self.catalogue,
            "lastSeen": dict(self.last_seen) if self.last_seen is not None else None,
        }


class SettingsPort(Protocol):
    """What an admin command needs of the settings: :class:`Settings` acting on the home
    directly, or :class:`albedo_actors.service.client.ServiceClient` through a running
    settings service (the one writer). Each admin command is written once, against this."""

    def add(self, spec: ServerSpec, secrets: SecretInput | None = None) -> ServerView: ...

    def edit(self, name: str, changes: ServerChanges | None = None, secrets: SecretInput | None = None) -> ServerView: ...

    def remove(self, name: str) -> None: ...

    def enable(self, name: str) -> ServerView: ...

    def disable(self, name: str) -> ServerView: ...

    def extensions(self) -> dict[str, bool]: ...

    def set_extension(self, extension: str, on: bool) -> dict[str, bool]: ...

    def sign_out(self, name: str) -> ServerView | None: ...

    def names(self) -> list[str]: ...

    def approve(self, server: str, tools: Iterable[str] | None = None) -> list[str]: ...


class Settings:
    """Reads and writes one home's server settings and the store's credentials."""

    def __init__(self, home: str, store: Store) -> None:
        self.home = os.path.abspath(home)
        self.store = store
        self.document = Document(self.home, store)
        self.path = self.document.path

    # -- reading ------------------------------------------------------------------------------

    def servers(self) -> list[ServerView]:
        """Every configured server, never a secret. A server whose stored credentials
        cannot be read is listed with the store's line as its ``problem``, beside the others.

        Raises:
            ConfigError: extensions.json is invalid. StoreError: the database failed.
        """
        config = parse(self.document.read(), self.home, source=self.path)
        stored = self._credentials_of([server.name for server in config.servers])
        seen = seen_states(self.store, config.servers, stored)
        views = []
        for server in config.servers:
            target = server.url if server.type == "http" else shlex.join([server.command or "", *server.args])
            credentials = stored[server.name]
            described: tuple[str, ...] = ()
            if isinstance(credentials, StoreError):
                problem: str | None = str(credentials)
                auth: Mapping[str, Any] = {**NO_AUTH_VIEW, "state": "unknown"}
            else:
                problem, described, auth = None, describe_credentials(credentials), auth_view(server, credentials)
            views.append(
                ServerView(
                    name=server.name,
                    transport=server.type,
                    enabled=server.enabled,
                    target=target or "",
                    catalogue_saved=seen[server.name][0] != "none",
                    credentials=described,
                    auth=auth,
                    problem=problem,
                    catalogue=seen[server.name][0],
                    last_seen=seen[server.name][1],
                )
            )
        return views

    def _credentials_of(self, names: list[str]) -> Mapping[str, Credentials | StoreError]:
        many = getattr(self.store, "get_credentials_of", None)
        if many is not None:
            return many(names)
        found: dict[str, Credentials | StoreError] = {}
        for name in names:  # a store that reads one server at a time
            try:
                found[name] = self.store.get_credentials(name)
            except StoreError as exc:
                found[name] = exc
        return found

    def names(self) -> list[str]:
        return list(self.document.servers(self.document.read()))

    def extensions(self) -> dict[str, bool]:
        """Each extension's default for every session: the top-level ``enabled`` object
        over the built-in defaults (``mcp`` off, ``editor-mcp`` on)."""
        return dict(parse(self.document.read(), self.home, source=self.path).extensions)

    # -- writing ------------------------------------------------------------------------------

    def set_extension(self, extension: str, on: bool) -> dict[str, bool]:
        """Turn ``extension`` (``mcp`` or ``editor-mcp``) on or off for every session that
        does not choose for itself, in the top-level ``enabled`` object; the new defaults.

        Raises:
            ConfigError: an unknown extension, or the file is invalid.
        """
        if extension not in EXTENSION_DEFAULTS:
            raise ConfigError(f"no extension named {extension!r}; the extensions are {', '.join(sorted(EXTENSION_DEFAULTS))}")
        self.apply(Change(enabled={extension: bool(on)}))
        logger.info("extension %r switched %s for every session", extension, "on" if on else "off")
        return self.extensions()

    def apply(self, change: Change) -> bool:
        """Apply one :class:`Change`, all or nothing (:func:`albedo_actors.settings.change.apply`);
        True when something was written."""
        return apply(change, self.document, self.store)

    def add(self, spec: ServerSpec, secrets: SecretInput | None = None) -> ServerView:
        """Add a server and its credentials; connect it unless it is disabled.

        Raises:
            ConfigError: the entry is invalid, or the name is taken.
            SettingsConflict: it could not connect; nothing was kept.
        """
        secrets = secrets or SecretInput()
        with self.document.lock():
            taken = self.document.servers(self.document.read())
            entry = new_entry(spec, secrets, taken, self.path)
            apply_locked(Change(servers={spec.name: entry}, secrets={spec.name: secrets}, added=frozenset({spec.name}),
                                retry=frozenset({spec.name})), self.document, self.store)
        return self._view(spec.name)

    def edit(self, name: str, changes: ServerChanges | None = None, secrets: SecretInput | None = None) -> ServerView:
        """Change a server's URL or command and its secrets; reconnect unless disabled.

        Raises:
            ConfigError: no such server, or the result is invalid.
            SettingsConflict: it could not connect; the previous settings were restored.
        """
        changes = changes or ServerChanges()
        secrets = secrets or SecretInput()
        with self.document.lock():
            entry = self.document.existing(self.document.servers(self.document.read()), name)
            edit_entry(name, entry, changes, secrets)
            apply_locked(Change(servers={name: entry}, secrets={name: secrets}, retry=frozenset({name})),
                         self.document, self.store)
        return self._view(name)

    def remove(self, name: str) -> None:
        """Delete a server, its credentials, its saved catalogue, the state doctor saw of it and its tasks."""
        self.apply(Change(servers={name: None}))
        logger.info("server %r removed", name)

    def enable(self, name: str) -> ServerView:
        """Switch a server back on (drops ``"enabled": false``); it must connect.

        Raises:
            SettingsConflict: it could not connect; it stays switched off.
        """
        with self.document.lock():
            entry = self.document.existing(self.document.servers(self.document.read()), name)
            entry.pop("enabled", None)
            apply_locked(Change(servers={name: entry}, retry=frozenset({name})), self.document, self.store)
        return self._view(name)

    def disable(self, name: str) -> ServerView:
        """Switch a server off (``"enabled": false``); it is not tried."""
        with self.document.lock():
            entry = self.document.existing(self.document.servers(self.document.read()), name)
            entry["enabled"] = False
            apply_locked(Change(servers={name: entry}), self.document, self.store)
        return self._view(name)

    # -- signing in ---------------------------------------------------------------------------

    def begin_sign_in(self, name: str, *, environ: Mapping[str, str] | None = None, agent: Any = None,
                      announce: Callable[[str], None] | None = None, port: int = DEFAULT_PORT,
                      lifetime: float = DEFAULT_LIFETIME_S, new_client: bool = False) -> SignIn:
        """A sign-in to ``name`` (an HTTP server): ``run()`` it; ``offer(url)`` a pasted
        callback URL; ``cancel()`` it from another thread. The tokens land in the store.
        ``new_client`` registers a new client instead of reusing the kept one.

        Raises:
            ConfigError: no such server, it is not an HTTP server, or ``new_client``
                for a server whose client the user configured (never replaced).
        """
        config = parse(self.document.read(), self.home, source=self.path)
        server = config.server(name)
        if server.type != "http":
            raise ConfigError(f"server {name!r} is a stdio server; only HTTP servers sign in with OAuth")
        if new_client:
            check_new_client(server, usable(from_credentials(self.store.get_credentials(name)), server.url))
        return SignIn(server, self.store, environ=environ, agent=agent, announce=announce, port=port, lifetime=lifetime,
                      new_client=new_client)

    def sign_out(self, name: str) -> ServerView:
        """Forget ``name``'s tokens (its state becomes ``signed_out``) and unbind it from the
        dynamic client registrations kept so far: its next sign-in registers a new client
        (see :func:`signed_out`)."""
        server = parse(self.document.read(), self.home, source=self.path).server(name)
        if server.type == "http":
            self.apply(Change(sign_out=frozenset({name})))
        logger.info("server %r signed out", name)
        return self._view(name)

    def approve(self, server: str, tools: Iterable[str] | None = None, *, who: str = "cli") -> list[str]:
        """Approve what tool integrity holds of ``server`` (catalogue/trust.py): the
        ``tools`` named (the instructions as ``(instructions)``), or all (None). Kept in
        the store with the history (by ``who``: "cli", "service" or "host"); the store's
        revision moves, so running sessions offer them from their next turn. The names
        approved (empty: nothing was held).

        Raises:
            ConfigError: no such server, or a name given is not held (nothing approved).
            StoreError: the store failed.
        """
        from .trust import approve_held

        parse(self.document.read(), self.home, source=self.path).server(server)
        approved = approve_held(self.store, server, tools, who=who)
        if approved:
            logger.info("server %r: approved %s", server, ", ".join(approved))
        return approved

    # -- internals ----------------------------------------------------------------------------

    def _view(self, name: str) -> ServerView:
        for view in self.servers():
            if view.name == name:
                return view
        raise ConfigError(f"no server named {name!r} in {self.path}")

    def _has_catalogue(self, name: str) -> bool:
        try:
            return self.store.load_catalogue(name) is not None
        except (AttributeError, TypeError):
            return False
        except StoreError:  # a damaged saved catalogue is not used (the next connect replaces it)
            return False

# -- helpers ----------------------------------------------------------------------------------


def new_entry(spec: ServerSpec, secrets: SecretInput, taken: Collection[str], path: str) -> dict[str, Any]:
    """:meth:`Settings.add`'s checks, in its order and words; the new extensions.json entry.

    ``taken``: the names configured now; ``path``: the file they are in (for the message).
    The command line runs the same checks before it asks a running service to add it.
    """
    if not SERVER_NAME.match(spec.name or ""):
        raise ConfigError(f"{spec.name!r} is not a valid server name: 1-48 letters, digits, '-' or '_', starting with a letter or digit")
    entry = _entry(spec)
    if spec.name in taken:
        raise ConfigError(f"a server named {spec.name!r} exists already in {path}; edit or remove it")
    if spec.transport == "http" and secrets.env:
        raise ConfigError(f"server {spec.name!r}: env entries are for stdio servers")
    if spec.transport == "stdio" and secrets.for_http:
        raise ConfigError(f"server {spec.name!r}: a bearer token, header or OAuth client is for HTTP servers")
    return entry


def edit_entry(name: str, entry: dict[str, Any], changes: ServerChanges, secrets: SecretInput) -> str:
    """:meth:`Settings.edit`'s checks, then ``changes`` applied to ``entry`` in place; its kind.

    The command line runs the same before it sends a running service the edited entry.
    """
    kind = kind_of(entry)
    if kind == "http":
        if changes.command is not None or changes.args is not None:
            raise ConfigError(f"server {name!r} is an HTTP server: change its URL, not a command")
        if secrets.env:
            raise ConfigError(f"server {name!r}: env entries are for stdio servers")
        if changes.url is not None:
            entry["url"] = changes.url
    else:
        if changes.url is not None:
            raise ConfigError(f"server {name!r} is a stdio server: change its command, not a URL")
        if secrets.for_http:
            raise ConfigError(f"server {name!r}: a bearer token, header or OAuth client is for HTTP servers")
        if changes.command is not None:
            entry["command"] = changes.command
        if changes.args is not None:
            entry["args"] = list(changes.args)
    return kind


def _entry(spec: ServerSpec) -> dict[str, Any]:
    if spec.transport == "http":
        if not spec.url:
            raise ConfigError(f"server {spec.name!r}: an HTTP server needs a URL")
        entry: dict[str, Any] = {"type": "http", "url": spec.url}
    elif spec.transport == "stdio":
        if not spec.command:
            raise ConfigError(f"server {spec.name!r}: a stdio server needs a command")
        entry = {"type": "stdio", "command": spec.command}
        if spec.args:
            entry["args"] = list(spec.args)
    else:
        raise ConfigError(f"server {spec.name!r}: the transport must be http or stdio, not {spec.transport!r}")
    entry.update({key: value for key, value in spec.extra.items() if key not in entry and key != "enabled"})
    if not spec.enabled:
        entry["enabled"] = False
    return entry


def auth_view(server: ServerConfig, credentials: Credentials | None) -> dict[str, Any]:
    """A server's ``auth`` as the settings report it: state and facts, never a token."""
    if server.type != "http":
        return dict(NO_AUTH_VIEW)
    stored = from_credentials(credentials)
    record = usable(stored, server.url)
    if record is None:
        if stored is not None:  # a sign-in made for another URL is never used here
            return {**NO_AUTH_VIEW, "state": "needs_sign_in", "reason": "the server's URL changed since the last sign-in"}
        return dict(NO_AUTH_VIEW)
    return record.view()


def seen_states(store: Any, servers: Collection[ServerConfig],
                stored: Mapping[str, Any]) -> dict[str, tuple[str, dict[str, Any] | None]]:
    """Each server's saved catalogue ("current", "outdated" or "none") and the last state
    doctor saw of it (None: never checked), compared with the fingerprint of its
    configuration and ``stored`` credentials now (a saved catalogue's key). Read at once;
    a store that cannot say (a stand-in, a damaged row) gives "none" and None.

    Raises:
        StoreError: the database failed.
    """
    names = [server.name for server in servers]
    load_catalogues = getattr(store, "load_catalogues", None)
    load_states = getattr(store, "load_server_states", None)
    catalogues = dict(load_catalogues(names)) if load_catalogues is not None and names else {}
    states = dict(load_states(names)) if load_states is not None and names else {}
    key = getattr(store, "digest_key", None)
    out: dict[str, tuple[str, dict[str, Any] | None]] = {}
    for server in servers:
        credentials = stored.get(server.name)
        now = fingerprint(server, None if isinstance(credentials, StoreError) else credentials, os.environ, key)
        saved = catalogues.get(server.name)
        catalogue = "none"
        if saved is not None and not isinstance(saved, StoreError):
            catalogue = "current" if saved.fingerprint == now else "outdated"
        state = states.get(server.name)
        seen = None
        if state is not None and not isinstance(state, StoreError):
            error = state.report.get("error")
            seen = {"state": state.state, "at": state.seen_at, "error": error if isinstance(error, str) else None,
                    "configurationChanged": state.fingerprint != now}
        out[server.name] = (catalogue, seen)
    return out


def describe_credentials(credentials: Credentials) -> tuple[str, ...]:
    """What is stored for a server, without any value: safe to print."""
    out = []
    if credentials.bearer_token:
        out.append("bearer token")
    out.extend(f"header {header}" for header, _ in credentials.headers)
    out.extend(f"env {key}" for key in sorted(credentials.env or {}))
    if credentials.oauth:
        out.append("oauth")
    return tuple(out)


# -- what a target is -------------------------------------------------------------------------


def guess_transport(target: str) -> str:
    """``http`` for an ``http://`` or ``https://`` URL, else ``stdio`` (a command line).

    Any other ``scheme://`` is taken as a URL too, so that it is refused as one (only
    http and https are served) rather than run as a command."""
    return "http" if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", target.strip()) else "stdio"


def split_command(line: str, what: str) -> list[str]:
    """A command line as its words (shell quoting).

    Raises:
        ConfigError: the quoting is broken, or it names no command.
    """
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise ConfigError(f"{what} is not a valid command line: {exc}") from None
    if not words:
        raise ConfigError(f"{what} names no command")
    return words


def guess(target: str, taken: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """What ``albedo-mcp add TARGET`` would make of ``target``: ``{"transport", "url",
    "command", "args", "name"}`` (the name suggested, not in ``taken``).

    Raises:
        ConfigError: the target is empty, a URL that is not http(s), or a broken command line.
    """
    if not isinstance(target, str) or not target.strip():
        raise ConfigError("give a URL (https://host/mcp) or a command line (npx -y package)")
    target = target.strip()
    transport = guess_transport(target)
    if transport == "http":
        parts = urllib.parse.urlsplit(target)
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"{target[:80]!r} is not an http:// or https:// URL with a host; "
                              "give an MCP server's URL, or a command line")
        return {"transport": "http", "url": target, "command": None, "args": [],
                "name": suggest_name("http", target, taken)}
    words = split_command(target, "the target")
    return {"transport": "stdio", "url": None, "command": words[0], "args": words[1:],
            "name": suggest_name("stdio", target, taken)}


# -- name suggestion --------------------------------------------------------------------------

_LAUNCHERS = {"npx", "bunx", "uvx", "pipx", "pnpx", "node", "deno", "bun", "python", "python3", "uv", "pnpm", "yarn", "npm", "docker", "podman", "run", "dlx", "exec", "tool"}
_HOST_NOISE = {"mcp", "api", "www"}


def suggest_name(transport: str, target: str, taken: set[str] | frozenset[str] = frozenset()) -> str:
    """A server name from a URL host or a command's package.

    URL: the host's labels without the top-level domain and without leading ``mcp``,
    ``api`` or ``www`` labels; the last label left is the name (``mcp.example.com`` →
    ``example``, ``docs.acme.io`` → ``acme``, ``localhost`` → ``localhost``; an IP
    address gives its digits joined by ``-``). Command: the first word that is not a
    launcher (``npx``, ``uvx``, ``python``, ``node``, ``docker run``, ...) or an option,
    as a package name without scope, version or extension (``npx -y
    @modelcontextprotocol/server-filesystem "/srv/my docs"`` → ``server-filesystem``).
    A name already taken gets ``-2``, ``-3``, ...
    """
    return fit_name(_from_url(target) if transport == "http" else _from_command(target), taken)


def fit_name(text: str, taken: set[str] | frozenset[str] = frozenset()) -> str:
    """``text`` made a valid server name (every run of other characters becomes ``-``,
    at most 44 characters, starting with a letter or digit), with ``-2``, ``-3``, ...
    when it is taken: the rule of :func:`suggest_name`, also used by ``albedo-mcp import``."""
    base = re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-_")[:44] or "server"
    if not base[0].isalnum():
        base = "s" + base
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    return name


def _from_url(url: str) -> str:
    host = urllib.parse.urlsplit(url).hostname or ""
    if re.fullmatch(r"[0-9.]+", host) or ":" in host:
        return re.sub(r"[^0-9A-Za-z]+", "-", host)
    labels = [label for label in host.split(".") if label]
    if len(labels) > 1:
        labels = labels[:-1]
    while len(labels) > 1 and labels[0].lower() in _HOST_NOISE:
        labels = labels[1:]
    return labels[-1] if labels else "server"


def _from_command(command: str) -> str:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    for word in words:
        if word.startswith("-") or "=" in word:
            continue
        base = os.path.basename(word.rstrip("/"))
        if base.lower() in _LAUNCHERS or re.fullmatch(r"python[0-9.]*", base):
            continue
        if word.startswith("@") and "/" in word:  # @scope/package[@version]
            base = word.split("/", 1)[1]
        base = base.split("@", 1)[0] if not base.startswith("@") else base.lstrip("@")
        base = re.sub(r"\.(py|js|mjs|cjs|ts|sh|exe)$", "", base)
        if base:
            return base
    return "server"
