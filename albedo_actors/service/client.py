"""The command line's client of a running settings service (the one writer of a home).

::

    client = ServiceClient.find(home)      # None: no service for this home (act directly)
    client.get()                           # GET /api/mcp
    client.patch({"servers": {...}, "secrets": {...}})
    client.sign_in(name[, new_client=True]); client.sign_in_status(name); client.offer(name, url); client.cancel_sign_in(name)
    client.new_link()                      # a single-use URL that opens the page
    client.add(spec, secrets); client.edit(name, changes, secrets); client.remove(name) ...
    client.approve(server[, tools])        # POST /api/mcp/approve (tool integrity)

It implements :class:`albedo_actors.settings.SettingsPort` as :class:`~albedo_actors.settings.Settings`
does, each save one PATCH of a :class:`~albedo_actors.settings.change.Change`.

It talks to the service on the home's Unix socket only (:mod:`.local`), never to a TCP
port, so a stale ``service.json`` (after an unclean stop; its pid reused by any process
since) can never send the token or a secret to whoever listens on that port. ``find``
proves, before anything is sent, that the service is ours and answers:

1. ``HOME/service.json`` gives the token (:func:`~albedo_actors.service.server.read_service_file`;
   missing, malformed, or its pid gone: None);
2. the socket accepts within :data:`CONNECT_TIMEOUT_S` (no socket file, or nothing
   accepting on it, is a stale file: None), and the kernel says its listener runs as
   our own user (``SO_PEERCRED``; another user's: None, with a warning);
3. ``GET /api/health`` answers within :data:`CONNECT_TIMEOUT_S`. A service that does
   not (stalled, or flooded) is passed by: :class:`ServiceSilent`, and the caller acts
   on the home directly, saying so.

Each request then has its own connection, with ``Authorization: Bearer <token>``, a
bounded connect and read, and its answer read up to :data:`MAX_ANSWER` bytes.

Errors are ours, one line each: 400 (and any other 4xx) -> :class:`ConfigError` with the
service's ``{"error"}`` line; 409 -> :class:`ServiceConflict` (a :class:`SettingsConflict`:
exit 3, the server could not connect and nothing was kept); 401/403 -> ConfigError (the
service refused the token); 5xx or an answer that is not JSON -> :class:`SessionError`; no
answer in time -> :class:`SessionTimedOut`. A connection that could not be made raises
:class:`ServiceGone`: nothing was sent, and the caller acts on the home directly.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import urllib.parse
from typing import TYPE_CHECKING, Any, Iterable

from ..errors import AlbedoError, AuthError, ConfigError, SessionError, SessionTimedOut, SettingsConflict, StoreError
from . import local
from ..wire import telemetry

if TYPE_CHECKING:
    from ..settings import Change, Document, SecretInput, ServerChanges, ServerSpec, ServerView

logger = telemetry.logger(__name__)  # records carry the server and trace ids

CONNECT_TIMEOUT_S = 2.0  # the socket's connect, and the health check's whole answer
READ_TIMEOUT_S = 120.0  # a save connects the server (startupTimeoutMs, 30 s by default) under the home's lock
MAX_ANSWER = 16 * 1024 * 1024


class ServiceGone(Exception):
    """The service refused the connection: nothing was sent; act on the home directly."""


class ServiceSilent(ServiceGone):
    """The service accepted but did not answer its health check in time: nothing else
    was sent; act on the home directly (its message says so, in one line)."""


class ServiceConflict(SettingsConflict):
    """A 409 from the service: its one line, exit 3 like :class:`SettingsConflict`."""

    def __init__(self, server: str, message: str) -> None:  # noqa: D107 - the service's line, as it is
        ConfigError.__init__(self, message)
        self.server = server
        self.cause = ConfigError(message)


class ServiceSignInFailed(AuthError):
    """A sign-in the service ran ended failed or cancelled: its one-line reason, exit 3."""

    def __init__(self, server: str, line: str) -> None:  # noqa: D107 - the service's line, as it is
        AlbedoError.__init__(self, line)
        self.server = server
        self.detail = line


class ServiceClient:
    """Talks to one running settings service over its home's socket (see the module's docstring)."""

    def __init__(self, home: str, token: str, *, source: str = "service.json") -> None:
        self.home = os.path.abspath(home)
        self._token = token
        self._source = source

    def __repr__(self) -> str:  # never the token
        return f"ServiceClient({os.path.join(self.home, local.SOCKET_FILE)!r})"

    @classmethod
    def find(cls, home: str) -> ServiceClient | None:
        """The client of the live service of ``home``, proven ours and answering; else None.

        Raises:
            ServiceSilent: a service of ours accepted but did not answer in time.
        """
        from .server import read_service_file

        info = read_service_file(home)
        token = info.get("token") if info else None
        if not isinstance(token, str) or not token:
            return None
        client = cls(home, token, source=os.path.join(os.path.abspath(home), "service.json"))
        try:
            client._check()
        except ServiceSilent:
            raise
        except ServiceGone:
            logger.info("service.json of %s names no running service: it is stale", home)
            return None
        return client

    def fork(self) -> ServiceClient:
        """A client of the same service, for another thread (each request has its own connection)."""
        return ServiceClient(self.home, self._token, source=self._source)

    def close(self) -> None:
        """Nothing to close: each request had its own connection."""

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the API -------------------------------------------------------------------------------

    def get(self) -> dict[str, Any]:
        return self._json("GET", "/api/mcp")

    def patch(self, body: dict[str, Any], *, name: str = "", timeout: float = READ_TIMEOUT_S) -> dict[str, Any]:
        return self._json("PATCH", "/api/mcp", body, name=name, timeout=timeout)

    # -- the settings port (albedo_actors.settings.SettingsPort): each save one PATCH -----------

    def names(self) -> list[str]:
        return [str(view.get("name")) for view in self.get().get("servers") or [] if isinstance(view, dict)]

    def extensions(self) -> dict[str, bool]:
        return dict(self.get().get("enabled") or {})

    def add(self, spec: ServerSpec, secrets: SecretInput | None = None) -> ServerView:
        """As :meth:`Settings.add`: its checks here, then the change (the service refuses a
        name taken meanwhile)."""
        from ..settings import Change, SecretInput, new_entry

        secrets = secrets or SecretInput()
        entry = new_entry(spec, secrets, self.names(), self._document().path)
        return self._saved(Change(servers={spec.name: entry}, secrets={spec.name: secrets},
                                  added=frozenset({spec.name})), spec.name, entry)

    def edit(self, name: str, changes: ServerChanges | None = None, secrets: SecretInput | None = None) -> ServerView:
        """As :meth:`Settings.edit`: the entry as the home's file holds it now, edited here."""
        from ..settings import Change, SecretInput, ServerChanges, edit_entry

        secrets = secrets or SecretInput()
        document = self._document()
        entry = document.existing(document.servers(document.read()), name)
        edit_entry(name, entry, changes or ServerChanges(), secrets)
        return self._saved(Change(servers={name: entry}, secrets={name: secrets}), name, entry)

    def remove(self, name: str) -> None:
        from ..settings import Change

        self.patch(Change(servers={name: None}).to_json(), name=name)

    def enable(self, name: str) -> ServerView:
        from ..settings import Change

        document = self._document()
        entry = document.existing(document.servers(document.read()), name)
        entry.pop("enabled", None)
        return self._saved(Change(servers={name: entry}), name, entry)

    def disable(self, name: str) -> ServerView:
        from ..settings import Change

        document = self._document()
        entry = document.existing(document.servers(document.read()), name)
        entry["enabled"] = False
        return self._saved(Change(servers={name: entry}), name, entry)

    def set_extension(self, extension: str, on: bool) -> dict[str, bool]:
        from ..config import EXTENSION_DEFAULTS
        from ..settings import Change

        if extension not in EXTENSION_DEFAULTS:
            raise ConfigError(f"no extension named {extension!r}; the extensions are {', '.join(sorted(EXTENSION_DEFAULTS))}")
        return dict(self.patch(Change(enabled={extension: bool(on)}).to_json()).get("enabled") or {})

    def approve(self, server: str, tools: Iterable[str] | None = None) -> list[str]:
        """``POST /api/mcp/approve``: what the service approved of ``server``'s held tools."""
        answer = self._json("POST", "/api/mcp/approve", {"server": server, "tools": None if tools is None else list(tools)},
                            name=server)
        return [str(name) for name in answer.get("approved") or []]

    def sign_out(self, name: str) -> ServerView | None:
        from ..settings import Change, ServerView

        answer = self.patch(Change(sign_out=frozenset({name})).to_json(), name=name)
        views = [view for view in answer.get("servers") or [] if isinstance(view, dict) and view.get("name") == name]
        return ServerView.from_json(views[0]) if views else None

    def _document(self) -> Document:
        from ..settings import Document

        return Document(self.home, None)  # read only: the service writes

    def _saved(self, change: Change, name: str, entry: dict[str, Any]) -> ServerView:
        """PATCH ``change``; ``name``'s view in the answer."""
        from ..config import DEFAULT_STARTUP_TIMEOUT_MS
        from ..settings import ServerView

        startup = entry.get("startupTimeoutMs", DEFAULT_STARTUP_TIMEOUT_MS)
        startup_s = startup / 1000 if isinstance(startup, int) and not isinstance(startup, bool) and startup > 0 else 30.0
        # The save connects the server within its startupTimeoutMs, after any save ahead of it.
        answer = self.patch(change.to_json(), name=name, timeout=max(READ_TIMEOUT_S, 2 * startup_s + 30.0))
        for view in answer.get("servers") or []:
            if isinstance(view, dict) and view.get("name") == name:
                return ServerView.from_json(view)
        raise ConfigError(f"server {name!r}: the settings service saved it but does not list it; see `albedo-mcp servers`")

    def sign_in(self, name: str, *, new_client: bool = False) -> dict[str, Any]:
        return self._json("PUT", _login(name), {"newClient": True} if new_client else {}, name=name)

    def sign_in_status(self, name: str) -> dict[str, Any]:
        return self._json("GET", _login(name), name=name)

    def offer(self, name: str, url: str) -> dict[str, Any]:
        return self._json("POST", _login(name) + "/callback", {"url": url}, name=name)

    def cancel_sign_in(self, name: str) -> None:
        self._request("DELETE", _login(name), None, name=name, timeout=READ_TIMEOUT_S)

    def new_link(self) -> str:
        """A new single-use URL that opens the settings page.

        Raises:
            SessionError: the service gave no usable URL.
        """
        url = self._json("POST", "/api/links", {}).get("url")
        if not isinstance(url, str) or not url.startswith("http://127.0.0.1:"):
            raise SessionError("the settings service gave no page link; restart `albedo-mcp serve`")
        return url

    # -- internals -----------------------------------------------------------------------------

    def _check(self) -> None:
        """Ours and answering, before anything else is sent (see the module docstring)."""
        where = os.path.join(self.home, local.SOCKET_FILE)
        try:
            sock = local.connect(self.home, CONNECT_TIMEOUT_S)
        except local.Gone:
            raise ServiceGone(where) from None
        except OSError as exc:  # a full backlog or a timeout: it does not answer
            raise ServiceSilent(_silent(self.home, f"its socket did not accept ({type(exc).__name__})")) from None
        try:
            uid, pid = local.peer(sock)
            if uid != os.geteuid():
                logger.warning("%s is served by uid %d (pid %d), not by you: ignored as stale", where, uid, pid)
                raise ServiceGone(where)
            connection = _Connection(sock, CONNECT_TIMEOUT_S)
            try:
                connection.request("GET", "/api/health", headers=self._headers(None))
                reply = connection.getresponse()
                reply.read(4096)
            except (OSError, http.client.HTTPException) as exc:
                raise ServiceSilent(_silent(self.home, f"its health check failed ({type(exc).__name__})")) from None
            finally:
                connection.close()
        finally:
            sock.close()
        if reply.status in (401, 403):
            raise ConfigError(f"the settings service of {self.home} refused the token of {self._source}; "
                              f"restart `albedo-mcp serve`")
        if reply.status != 200:
            raise ServiceSilent(_silent(self.home, f"its health check answered HTTP {reply.status}"))

    def _headers(self, body: bytes | None) -> dict[str, str]:
        headers = {"Host": "localhost", "Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        return headers

    def _json(self, method: str, path: str, body: Any = None, *, name: str = "", timeout: float = READ_TIMEOUT_S) -> dict[str, Any]:
        status, data = self._request(method, path, body, name=name, timeout=timeout)
        if status == 204:
            return {}
        if not isinstance(data, dict):
            raise SessionError(f"the settings service of {self.home} answered {method} {path} with no JSON object; "
                               f"check `albedo-mcp servers` before trying again")
        return data

    def _request(self, method: str, path: str, body: Any, *, name: str, timeout: float) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode("utf-8")
        try:
            sock = local.connect(self.home, CONNECT_TIMEOUT_S)
        except (local.Gone, OSError):
            raise ServiceGone(self.home) from None  # nothing was sent
        uid, pid = local.peer(sock)
        if uid != os.geteuid():  # the socket was replaced since find(): never send it the token
            sock.close()
            logger.warning("%s is served by uid %d (pid %d), not by you: nothing was sent to it",
                           os.path.join(self.home, local.SOCKET_FILE), uid, pid)
            raise ServiceGone(self.home)
        connection = _Connection(sock, timeout)
        try:
            connection.request(method, path, body=data, headers=self._headers(data))
            reply = connection.getresponse()
            raw = _read_capped(reply)
        except TimeoutError:
            raise SessionTimedOut(_no_answer(self.home, method)) from None
        except (OSError, http.client.HTTPException):
            raise SessionError(f"the settings service of {self.home} closed the connection during {method} {path}; "
                               f"check `albedo-mcp servers` before trying again") from None
        finally:
            connection.close()
            sock.close()
        status = reply.status
        try:
            parsed = json.loads(raw.decode("utf-8")) if raw else None
        except ValueError:
            parsed = None
        if 200 <= status < 300:
            return status, parsed
        error = parsed.get("error") if isinstance(parsed, dict) else None
        line = error if isinstance(error, str) and error else f"the settings service answered HTTP {status}"
        if status in (401, 403):
            raise ConfigError(f"the settings service of {self.home} refused the token of {self._source}; "
                              f"restart `albedo-mcp serve`, or remove that file if no service runs")
        if status == 409:
            raise ServiceConflict(name, line)
        if 400 <= status < 500:
            raise ConfigError(line)
        if status == 503:  # the service's store could not be read or written
            raise StoreError(line)
        raise SessionError(f"the settings service of {self.home} failed: {line}")


class _Connection(http.client.HTTPConnection):
    """HTTP/1.1 over a socket already connected (the home's Unix socket)."""

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        sock.settimeout(timeout)
        self.sock = sock

    def connect(self) -> None:  # the socket is given; a second connect would be a bug
        raise OSError("the service connection is already closed")


def _login(name: str) -> str:
    return "/api/auth/logins/" + urllib.parse.quote(f"mcp:{name}", safe=":")


def _read_capped(reply: http.client.HTTPResponse) -> bytes:
    """The answer's body, at most MAX_ANSWER + 1 bytes, read in chunks (``read(n)`` would
    allocate ``n`` bytes up front: 16 MiB for every answer)."""
    too_large = SessionError(f"the settings service's answer is larger than {MAX_ANSWER} bytes")
    if reply.length is not None and reply.length > MAX_ANSWER:
        raise too_large  # refused by its length, unread
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = reply.read(65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_ANSWER:
            raise too_large
        chunks.append(chunk)


def _silent(home: str, why: str) -> str:
    return (f"the settings service of {home} did not answer within {CONNECT_TIMEOUT_S:g} s ({why}); "
            f"acting on the home directly")


def _no_answer(home: str, method: str) -> str:
    what = "; check `albedo-mcp servers` before trying again" if method not in ("GET",) else "; try again"
    return f"the settings service of {home} did not answer in time{what}"
