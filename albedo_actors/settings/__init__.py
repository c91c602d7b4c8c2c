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

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import re
import shlex
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterator, Mapping

import pykka

from ..actors.client import ServerHandle
from ..actors.refresher import TokenRefresher, oauth_for
from ..config import ENV_NAME, HEADER_NAME, SERVER_NAME, EXTENSION_DEFAULTS, ServerConfig, parse
from ..auth.callback import DEFAULT_LIFETIME_S, DEFAULT_PORT
from ..auth.record import NO_AUTH_VIEW, OAuthRecord, from_credentials, usable
from ..auth.signin import SignIn, check_new_client
from ..errors import AlbedoError, ConfigError, NeedsSignIn, SettingsConflict, StoreError
from ..safefiles import FileRefused, make_private_dirs, open_private, read_text, replace_private
from ..catalogue.saved import fingerprint, save_if_changed

if TYPE_CHECKING:
    from ..store import Store
    from ..store.records import Credentials

logger = logging.getLogger(__name__)

REMOVE = "-"  # a secret given as "-" removes the stored one
FILE_NAME = "extensions.json"
LOCK_NAME = ".extensions.lock"


@dataclass(frozen=True)
class ServerSpec:
    """A new server, as the reference's form takes it (secrets apart)."""

    name: str
    transport: str = "http"  # "http" or "stdio"
    url: str | None = None
    command: str | None = None
    args: tuple[str, ...] = ()
    enabled: bool = True


@dataclass(frozen=True)
class ServerChanges:
    """What :meth:`Settings.edit` changes; None leaves a field as it is."""

    url: str | None = None
    command: str | None = None
    args: tuple[str, ...] | None = None


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
        return bool(self.bearer_token or self.headers or self.oauth_client)


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

    @property
    def state(self) -> str:
        if self.problem is not None:
            return "credentials unreadable"
        if not self.enabled:
            return "disabled"
        if self.auth.get("state") in ("needs_sign_in", "signed_out"):
            return "needs sign-in" if self.auth["state"] == "needs_sign_in" else "signed out"
        return "catalogue saved" if self.catalogue_saved else "not discovered yet"

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
        }


class Settings:
    """Reads and writes one home's server settings and the store's credentials."""

    def __init__(self, home: str, store: Store) -> None:
        self.home = os.path.abspath(home)
        self.store = store
        self.path = os.path.join(self.home, FILE_NAME)

    # -- reading ------------------------------------------------------------------------------

    def servers(self) -> list[ServerView]:
        """Every configured server, never a secret. A server whose stored credentials
        cannot be read is listed with the store's line as its ``problem``, beside the others.

        Raises:
            ConfigError: extensions.json is invalid. StoreError: the database failed.
        """
        config = parse(self._read_document(), self.home, source=self.path)
        stored = self._credentials_of([server.name for server in config.servers])
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
                    catalogue_saved=self._has_catalogue(server.name),
                    credentials=described,
                    auth=auth,
                    problem=problem,
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
        return list(self._servers(self._read_document()))

    def extensions(self) -> dict[str, bool]:
        """Each extension's default for every session: the top-level ``enabled`` object
        over the built-in defaults (``mcp`` off, ``editor-mcp`` on)."""
        return dict(parse(self._read_document(), self.home, source=self.path).extensions)

    # -- writing ------------------------------------------------------------------------------

    def set_extension(self, extension: str, on: bool) -> dict[str, bool]:
        """Turn ``extension`` (``mcp`` or ``editor-mcp``) on or off for every session that
        does not choose for itself, in the top-level ``enabled`` object; the new defaults.

        Raises:
            ConfigError: an unknown extension, or the file is invalid.
        """
        if extension not in EXTENSION_DEFAULTS:
            raise ConfigError(f"no extension named {extension!r}; the extensions are {', '.join(sorted(EXTENSION_DEFAULTS))}")
        with self._lock():
            document = self._read_document()
            enabled = document.setdefault("enabled", {})
            if not isinstance(enabled, dict):
                raise ConfigError(f'{self.path}: "enabled" must map extension names to true or false, e.g. {{"mcp": true}}')
            enabled[extension] = bool(on)
            parse(document, self.home, source=self.path)  # raises before anything is written
            self._write(document)
        logger.info("extension %r switched %s for every session", extension, "on" if on else "off")
        return self.extensions()

    def add(self, spec: ServerSpec, secrets: SecretInput | None = None) -> ServerView:
        """Add a server and its credentials; connect it unless it is disabled.

        Raises:
            ConfigError: the entry is invalid, or the name is taken.
            SettingsConflict: it could not connect; nothing was kept.
        """
        secrets = secrets or SecretInput()
        with self._lock():
            document = self._read_document()
            servers = self._servers(document)
            servers[spec.name] = new_entry(spec, secrets, servers, self.path)

            def fresh(current: Credentials) -> Credentials:  # a new server starts with no stored secret
                credentials = _apply(_empty_credentials(), secrets, spec.name)
                return _apply_oauth_client(credentials, secrets, spec.url, spec.name)

            self._save(spec.name, document, fresh, try_connect=spec.enabled)
        return self._view(spec.name)

    def edit(self, name: str, changes: ServerChanges | None = None, secrets: SecretInput | None = None) -> ServerView:
        """Change a server's URL or command and its secrets; reconnect unless disabled.

        Raises:
            ConfigError: no such server, or the result is invalid.
            SettingsConflict: it could not connect; the previous settings were restored.
        """
        changes = changes or ServerChanges()
        secrets = secrets or SecretInput()
        with self._lock():
            document = self._read_document()
            servers = self._servers(document)
            entry = self._existing(servers, name)
            kind = edit_entry(name, entry, changes, secrets)

            def edited(current: Credentials) -> Credentials:
                credentials = _apply(current, secrets, name)
                if kind == "http":
                    credentials = _apply_oauth_client(credentials, secrets, entry.get("url"), name)
                return credentials

            self._save(name, document, edited, try_connect=entry.get("enabled", True))
        return self._view(name)

    def remove(self, name: str) -> None:
        """Delete a server, its credentials and its saved catalogue."""
        with self._lock():
            document = self._read_document()
            servers = self._servers(document)
            self._existing(servers, name)
            del servers[name]
            self._write(document)
            self.store.delete_credentials(name)
            with contextlib.suppress(AttributeError):
                self.store.delete_catalogue(name)
        logger.info("server %r removed", name)

    def enable(self, name: str) -> ServerView:
        """Switch a server back on (drops ``"enabled": false``); it must connect.

        Raises:
            SettingsConflict: it could not connect; it stays switched off.
        """
        with self._lock():
            document = self._read_document()
            entry = self._existing(self._servers(document), name)
            entry.pop("enabled", None)
            self._save(name, document, None, try_connect=True)
        return self._view(name)

    def disable(self, name: str) -> ServerView:
        """Switch a server off (``"enabled": false``); it is not tried."""
        with self._lock():
            document = self._read_document()
            entry = self._existing(self._servers(document), name)
            entry["enabled"] = False
            self._save(name, document, None, try_connect=False)
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
        config = parse(self._read_document(), self.home, source=self.path)
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
        config = parse(self._read_document(), self.home, source=self.path)
        server = config.server(name)

        if server.type == "http":
            self.store.update_credentials(name, lambda credentials: signed_out(server, credentials))
        logger.info("server %r signed out", name)
        return self._view(name)

    # -- internals ----------------------------------------------------------------------------

    def _save(self, name: str, document: dict, change: Callable[[Credentials], Credentials] | None,
              try_connect: bool) -> None:
        """Validate, write the file and the credentials, try the server; undo both on failure.

        ``change`` maps the server's stored credentials to the saved ones. It is checked
        on what is stored now (a ConfigError before anything is written), then applied
        to the row under its lock (:func:`change_credentials`), so a token refresh that
        commits meanwhile is kept, never undone by a snapshot read before it.
        """
        config = parse(document, self.home, source=self.path)  # raises before anything is written
        server = config.server(name)
        stored = self.store.get_credentials(name)  # StoreError (an unreadable row) before anything is written
        if change is not None:
            change(stored)  # ConfigError before anything is written
        previous_text = self._read_text()
        self._write(document)
        written = previous = None
        try:
            if change is not None:
                previous, written = change_credentials(self.store, name, change)
                stored = written
        except BaseException:
            self._restore_file(previous_text)
            raise
        if not try_connect:
            logger.info("server %r saved (switched off, not tried)", name)
            return
        try:
            catalogue = self._try(server, stored)
        except NeedsSignIn as exc:
            # The reference: saving a server that answers 401 keeps it, needing a sign-in.
            logger.info("server %r saved; it needs a sign-in (%s)", name, exc.why)
            self._mark_needs_sign_in(server, exc.why)
            return
        except AlbedoError as exc:
            logger.info("server %r could not connect; restoring its previous settings", name)
            self._restore_file(previous_text)
            if written is not None and previous is not None:
                ours, before = written, previous
                self.store.update_credentials(name, lambda current: undo_save(current, ours, before))
            raise SettingsConflict(name, exc) from None
        self._save_catalogue(server, catalogue)
        logger.info("server %r saved and connected", name)

    def _save_catalogue(self, server: ServerConfig, catalogue: Any) -> None:
        """Keep what connecting discovered, keyed as a session's preparer keys it (the
        credentials as stored now, the host's environment), so no session dials again."""
        try:
            key = fingerprint(server, self.store.get_credentials(server.name), os.environ,
                              getattr(self.store, "digest_key", None))
            save_if_changed(self.store, server.name, key, catalogue)
        except (StoreError, ValueError) as exc:
            # The server is saved and works; only the head start is lost.
            logger.warning("server %r: its catalogue was not saved (%s)", server.name, exc)

    def _try(self, server: ServerConfig, credentials: Credentials | None) -> Any:
        refresher = TokenRefresher.start(self.store) if server.type == "http" else None
        try:
            auth = oauth_for(self.store, refresher)(server) if refresher is not None else None
            handle = ServerHandle.start(server, self.home, credentials=credentials, auth=auth)
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

    def _mark_needs_sign_in(self, server: ServerConfig, why: str) -> None:
        def mark(credentials: Credentials) -> Credentials:
            record = usable(from_credentials(credentials), server.url)
            if record is not None and record.state == "signed_in" and record.access_token:
                record = record.replace(reason=why)  # a step-up: the tokens stay
            else:
                record = (record or OAuthRecord(url=server.url or "")).signed_out("needs_sign_in", why)
            return dataclasses.replace(credentials, oauth=record.to_json())

        self.store.update_credentials(server.name, mark)

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

    def _existing(self, servers: dict, name: str) -> dict:
        entry = servers.get(name)
        if not isinstance(entry, dict):
            raise ConfigError(f"no server named {name!r} in {self.path}")
        return entry

    def _servers(self, document: dict) -> dict:
        mcp = document.setdefault("mcp", {})
        if not isinstance(mcp, dict):
            raise ConfigError(f'{self.path}: "mcp" must be an object')
        servers = mcp.setdefault("servers", {})
        if not isinstance(servers, dict):
            raise ConfigError(f'{self.path}: "mcp.servers" must be an object of name → server')
        return servers

    def _read_text(self) -> str | None:
        try:
            return read_text(self.path)  # never through a symbolic link
        except FileNotFoundError:
            return None
        except FileRefused as exc:
            raise ConfigError(str(exc)) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read {self.path}: {exc}") from None

    def _read_document(self) -> dict:
        text = self._read_text()
        if text is None:
            return {}
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{self.path} is not valid JSON: {exc}") from None
        if not isinstance(document, dict):
            raise ConfigError(f"{self.path}: the top level must be a JSON object")
        return document

    def _write(self, document: dict) -> None:
        with self._file_errors("cannot write the settings"):
            self._write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")

    def _restore_file(self, text: str | None) -> None:
        with self._file_errors("cannot restore the previous settings"):
            if text is None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
                self._bump_revision()
            else:
                self._write_text(text)

    @contextlib.contextmanager
    def _file_errors(self, what: str, path: str | None = None) -> Iterator[None]:
        """An OSError of the settings files is a ConfigError naming the file (one line)."""
        try:
            yield
        except FileRefused as exc:  # its message names the file and says what to do
            raise ConfigError(f"{what}: {exc}") from None
        except OSError as exc:
            raise ConfigError(f"{what}: {exc.filename or path or self.path}: {exc.strerror or type(exc).__name__}; "
                              f"check that {self.home} is a directory albedo can write") from None

    def _write_text(self, text: str) -> None:
        make_private_dirs(self.home)  # only what we create is 0700; an existing home keeps its mode
        replace_private(self.path, text)
        self._bump_revision()

    def _bump_revision(self) -> None:
        """Tell running hosts that extensions.json changed, through the store's revision.

        After the file is in place (a host that sees the new revision reads the new
        file). A failure keeps the save: a host on this machine still sees the file
        change (``ChangeWatch`` stats it); one that shares only the database hears of it
        with the next change that bumps."""
        bump = getattr(self.store, "bump_revision", None)
        if bump is None:  # a store without a revision (a test's stand-in)
            return
        try:
            bump()
        except StoreError as exc:
            logger.warning("the settings were saved, but running hosts that share the store may not hear of it "
                           "until they see %s change: %s", self.path, exc)

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        lock = os.path.join(self.home, LOCK_NAME)
        with self._file_errors("cannot lock the settings", lock):
            make_private_dirs(self.home)
            fd = open_private(lock)  # 0600, never through a link
        try:
            with self._file_errors("cannot lock the settings", lock):
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


# -- helpers ----------------------------------------------------------------------------------


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
    kind = _kind(entry)
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


def _kind(entry: dict) -> str:
    return entry.get("type") or ("stdio" if "command" in entry else "http")


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
    if not spec.enabled:
        entry["enabled"] = False
    return entry


def _credentials_type() -> Any:
    from ..store import Credentials

    return Credentials


def _empty_credentials() -> Any:
    return _credentials_type()()


def _is_empty(credentials: Credentials) -> bool:
    return not (credentials.bearer_token or credentials.headers or credentials.env or credentials.oauth)


def _apply(current: Any, secrets: SecretInput, name: str) -> Any:
    """The credentials after a save: blank keeps, ``-`` removes, anything else replaces."""
    bearer = current.bearer_token
    if secrets.bearer_token == REMOVE:
        bearer = None
    elif secrets.bearer_token:
        _check_value(secrets.bearer_token, "the bearer token", name)
        bearer = secrets.bearer_token
    headers = apply_headers(current.headers, secrets.headers, name)
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
            _check_value(value, f"the {header} header", name)
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


def _apply_oauth_client(current: Any, secrets: SecretInput, url: Any, name: str) -> Any:
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
            _check_value(secret, "the OAuth client secret", name)
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


def _check_value(value: str, what: str, name: str) -> None:
    if any(ch in value for ch in "\r\n\0"):
        raise ConfigError(f"server {name!r}: {what} holds a line break or NUL, which cannot go into an HTTP header")
    from ..store.sealing import PREFIX  # the store's own rule (sealing.refuse_prefix), said before anything is written

    if value.startswith(PREFIX):
        raise ConfigError(f"server {name!r}: {what} starts with {PREFIX!r}, which marks a value encrypted at rest, "
                          "so it cannot be stored; give the secret itself, not a value copied from the database")


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
    base = _from_url(target) if transport == "http" else _from_command(target)
    base = re.sub(r"[^A-Za-z0-9_-]+", "-", base).strip("-_")[:44] or "server"
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
