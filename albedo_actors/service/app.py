"""The settings service's WSGI application: the JSON API, the sign-in API and the page.

::

    app = make_app(settings_factory=lambda: Settings(home, store), signins=signins, token=token,
                   pages=PageSessions(), port=lambda: port, on_saved=reload_sessions,
                   static_dir=STATIC_DIR, open_url=lambda: service.open_url())

Routes (Werkzeug's routing; no hand-written HTTP parsing):

- ``GET /api/mcp``: ``{"enabled": {...}, "retryMs": N, "servers": [...]}``, each server as
  ``albedo-mcp servers --json`` prints it (``ServerView.as_json()``: ``auth`` included,
  never a secret).
- ``PATCH /api/mcp``: ``servers`` (NAME -> entry as in extensions.json, or null to
  remove), ``secrets`` (NAME -> bearerToken, headers (header name -> value, "" kept, null
  removed; the older ``header`` ``{"name", "value"}`` is still taken), env, oauth:
  null (the sign-out), oauth_client), ``enabled``, ``retryMs``; every part optional, all or nothing: 400
  writes nothing, 409 (a saved or enabled server could not connect) restores
  extensions.json and the credentials, 200 returns the new GET body and calls
  ``on_saved`` once.
- ``PUT|GET|DELETE /api/auth/logins/mcp:NAME``, ``POST .../callback``: the sign-ins
  (:class:`~albedo_actors.service.signins.SignIns`): 202, 200, 204, 200.
- ``POST /api/session`` ``{"open": LINK}``: spends a single-use opening link (the page
  reads it from its URL's ``#open=`` fragment) for a page session token, 201
  ``{"token", "expiresIn"}``; 401 when the link is spent or expired. ``DELETE
  /api/session``: the page's sign-out, 204.
- ``POST /api/links`` (the service token only): 201 ``{"url"}``, a new opening link
  (``albedo-mcp open``).
- ``GET /api/health``: 200 ``{"ok": true}``, the command line's check that the service
  answers before it sends anything.
- ``GET /`` the page (static: it holds no data; what it shows comes through the API with
  its page session); ``GET /static/FILE``.

Who may call it, checked in this order:

1. **Host.** ``127.0.0.1:PORT``, ``localhost:PORT`` or ``[::1]:PORT`` (and, on the home's
   Unix socket, ``localhost``), else 403 (DNS rebinding: a page of another site resolved
   to 127.0.0.1 still sends its own Host).
2. **Token.** ``Authorization: Bearer <token>``: the service token, or a live page
   session token (:class:`~albedo_actors.service.pages.PageSessions`), compared in
   constant time. Neither: 401, with no detail. **No cookie authorises anything**: a
   cookie is per host, not per port, so another local port's page would be sent it.
3. **Content type.** A body must be ``application/json`` (a cross-site form cannot send
   that type without a CORS preflight, which this service never answers): else 415.
4. **Size.** A body over 1 MiB: 413.

No response, page or log line carries a secret, a token or the service token: errors
are the settings' own one-line messages (they never quote a value).
"""

from __future__ import annotations

import copy
import hmac
import json
import logging
import mimetypes
import os
from typing import TYPE_CHECKING, Any, Callable, Iterable

from werkzeug.exceptions import HTTPException, NotFound
from werkzeug.routing import Map, Rule
from werkzeug.security import safe_join
from werkzeug.wrappers import Request, Response

from ..config import SERVER_NAME, parse
from ..errors import AlbedoError, ConfigError, NeedsSignIn, SettingsConflict, StoreError
from ..settings import (REMOVE, SecretInput, _apply, _apply_oauth_client, _empty_credentials, _is_empty, _kind,
                        change_credentials, signed_out, undo_save)

if TYPE_CHECKING:
    from ..config import ServerConfig
    from ..settings import Settings
    from ..store.records import Credentials
    from .pages import PageSessions
    from .signins import SignIns

logger = logging.getLogger(__name__)

__all__ = ["make_app", "MAX_BODY"]

MAX_BODY = 1024 * 1024  # request bodies above 1 MiB: 413
_PATCH_KEYS = frozenset({"servers", "secrets", "enabled", "retryMs"})
_SECRET_KEYS = frozenset({"bearerToken", "header", "headers", "env", "oauth", "oauth_client"})
_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
}

_URLS = Map([
    Rule("/", endpoint="page", methods=["GET"]),
    Rule("/static/<file>", endpoint="static", methods=["GET"]),
    Rule("/api/mcp", endpoint="mcp", methods=["GET", "PATCH"]),
    Rule("/api/session", endpoint="session", methods=["POST", "DELETE"]),
    Rule("/api/links", endpoint="links", methods=["POST"]),
    Rule("/api/health", endpoint="health", methods=["GET"]),
    Rule("/api/auth/logins/mcp:<name>", endpoint="login", methods=["GET", "PUT", "DELETE"]),
    Rule("/api/auth/logins/mcp:<name>/callback", endpoint="callback", methods=["POST"]),
], strict_slashes=False)


class _Refused(Exception):
    """An answer decided before the endpoint runs (403, 401, 415, 413, 400)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def make_app(*, settings_factory: Callable[[], Settings], signins: SignIns, token: str, pages: PageSessions,
             port: Callable[[], int], on_saved: Callable[[], None], static_dir: str,
             open_url: Callable[[], str], local: bool = False) -> Callable[..., Iterable[bytes]]:
    """The WSGI application of one service (see the module docstring).

    ``port()`` is the port the service listens on (known once it is bound); ``token``
    the service token; ``pages`` the page's links and sessions; ``open_url()`` mints a
    new opening link; ``on_saved()`` is called once after every PATCH that saved.
    ``local``: this app answers on the home's Unix socket (whose clients send
    ``Host: localhost``).
    """

    def allowed_hosts() -> tuple[str, ...]:
        p = port()
        hosts = (f"127.0.0.1:{p}", f"localhost:{p}", f"[::1]:{p}")
        return (*hosts, "localhost") if local else hosts

    def bearer(request: Request) -> str | None:
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        return given.strip() if scheme.lower() == "bearer" and given.strip() else None

    def authorise(request: Request, endpoint: str) -> None:
        """The service token, or a page session's (not for minting links); raises _Refused (401/415)."""
        if request.content_length and not _is_json(request):
            raise _Refused(415, "send the body as application/json")
        if endpoint == "session" and request.method == "POST":
            return  # the opening link in its body is its credential
        given = bearer(request)
        if given is None:
            raise _Refused(401, "unauthorized")
        if _same(given, token):
            return
        if endpoint != "links" and pages.valid(given):
            return
        raise _Refused(401, "unauthorized")

    def body_of(request: Request) -> Any:
        if request.content_length is not None and request.content_length > MAX_BODY:
            raise _Refused(413, f"the request body is larger than {MAX_BODY} bytes")
        raw = request.stream.read(MAX_BODY + 1)
        if len(raw) > MAX_BODY:
            raise _Refused(413, f"the request body is larger than {MAX_BODY} bytes")
        if not raw:
            return {}
        try:
            return json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise _Refused(400, "the request body is not valid JSON") from None

    # -- endpoints ---------------------------------------------------------------------------------

    def mcp(request: Request) -> Response:
        settings = settings_factory()
        if request.method == "GET":
            return _json(200, _state(settings))
        body = body_of(request)
        saved = patch(settings, body)
        if saved:
            try:
                on_saved()
            except Exception as exc:  # the sessions reload at their next prepare anyway
                logger.warning("the sessions could not be told to reload (%s)", type(exc).__name__)
        return _json(200, _state(settings))

    def login(request: Request, name: str) -> Response:
        _check_name(name)
        if request.method == "PUT":
            body = body_of(request)  # {} or {"newClient": true}: register a new client first
            if not isinstance(body, dict) or set(body) - {"newClient"} or not isinstance(body.get("newClient", False), bool):
                raise ConfigError(f'server {name!r}: the sign-in takes {{}} or {{"newClient": true}}')
            return _json(202, signins.start(name, new_client=body.get("newClient", False)))
        if request.method == "DELETE":
            signins.cancel(name)
            return Response(status=204, headers=_HEADERS)
        return _json(200, signins.status(name))

    def callback(request: Request, name: str) -> Response:
        _check_name(name)
        body = body_of(request)
        url = body.get("url") if isinstance(body, dict) else None
        if not isinstance(url, str) or set(body) != {"url"}:
            raise ConfigError(f'server {name!r}: send {{"url": "<the callback URL the browser was sent to>"}}')
        return _json(200, signins.offer(name, url))

    def session(request: Request) -> Response:
        if request.method == "DELETE":
            given = bearer(request)
            if given is not None:
                pages.close(given)
            return Response(status=204, headers=_HEADERS)
        body = body_of(request)
        link = body.get("open") if isinstance(body, dict) else None
        if not isinstance(link, str) or set(body) != {"open"}:
            raise ConfigError('send {"open": "<the secret after #open= in the page\'s link>"}')
        opened = pages.open(link)
        if opened is None:
            raise _Refused(401, "this link was used already or has expired: run `albedo-mcp open` for a new one")
        session_token, lifetime = opened
        return _json(201, {"token": session_token, "expiresIn": int(lifetime)})

    def links(request: Request) -> Response:
        body_of(request)
        return _json(201, {"url": open_url()})

    def health(request: Request) -> Response:
        return _json(200, {"ok": True})

    def page(request: Request) -> Response:
        return _file(static_dir, "index.html")  # static: what it shows comes through the API

    def static(request: Request, file: str) -> Response:
        return _file(static_dir, file)

    endpoints: dict[str, Callable[..., Response]] = {"mcp": mcp, "login": login, "callback": callback,
                                                      "session": session, "links": links, "health": health,
                                                      "page": page, "static": static}

    def dispatch(request: Request) -> Response:
        # 1. the Host, before anything else (DNS rebinding)
        if request.headers.get("Host", "").lower() not in allowed_hosts():
            return _json(403, {"error": "this service answers only to 127.0.0.1, localhost or [::1] on its own port"})
        try:
            adapter = _URLS.bind_to_environ(request.environ)
            endpoint, values = adapter.match()
            if request.path.startswith("/api/"):
                authorise(request, endpoint)
            return endpoints[endpoint](request, **values)
        except _Refused as refused:
            return _json(refused.status, {"error": str(refused)})
        except HTTPException as exc:  # no such route, or the wrong method
            return _json(exc.code or 400, {"error": f"{request.method} {request.path}: {exc.name.lower()}"})
        except SettingsConflict as exc:
            return _json(409, {"error": str(exc)})
        except ConfigError as exc:
            return _json(400, {"error": str(exc)})
        except StoreError as exc:
            return _json(503, {"error": str(exc)})
        except AlbedoError as exc:
            return _json(500, {"error": str(exc)})
        except Exception as exc:  # a bug: one line out, its type in the log (never locals or values)
            logger.error("%s %s failed unexpectedly (%s)", request.method, request.path, type(exc).__name__)
            return _json(500, {"error": f"the settings service failed unexpectedly ({type(exc).__name__}); see its log"})

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        request = Request(environ)
        request.max_content_length = None  # body_of reads at most MAX_BODY + 1 bytes itself
        return dispatch(request)(environ, start_response)

    return app


# -- PATCH /api/mcp ----------------------------------------------------------------------------------


def patch(settings: Settings, body: Any) -> bool:
    """Apply one PATCH body, all or nothing; True when something was written.

    Everything is checked, and the whole new extensions.json parsed, before anything is
    written (ConfigError: nothing written). Then the file and the credentials are
    written and each saved or switched-on server is connected once, as
    :meth:`Settings.add` does; one that cannot connect restores the file and every
    credential the PATCH changed (as :func:`albedo_actors.settings.undo_save` does:
    newer tokens a connect rotated are kept) and raises SettingsConflict naming it.
    One home's saves are serialised by the settings' advisory lock, across processes.

    Raises:
        ConfigError: invalid input; nothing was written.
        SettingsConflict: a server could not connect; everything was restored.
    """
    if not isinstance(body, dict):
        raise ConfigError("the PATCH body must be a JSON object with servers, secrets, enabled and retryMs (each optional)")
    unknown = set(body) - _PATCH_KEYS
    if unknown:
        raise ConfigError(f"unknown key(s) in the PATCH body: {', '.join(sorted(unknown))} (known: {', '.join(sorted(_PATCH_KEYS))})")
    servers_part = _object(body.get("servers"), "servers")
    secrets_part = _object(body.get("secrets"), "secrets")
    if not (servers_part or secrets_part or "enabled" in body or "retryMs" in body):
        return False
    with settings._lock():
        previous_text = settings._read_text()
        document = settings._read_document()
        servers = settings._servers(document)
        before = copy.deepcopy(servers)
        to_connect: list[str] = []
        removed: list[str] = []
        for name, entry in servers_part.items():
            _check_name(name)
            if entry is None:
                if name not in servers:
                    raise ConfigError(f"no server named {name!r} in {settings.path}")
                del servers[name]
                removed.append(name)
                continue
            if not isinstance(entry, dict):
                raise ConfigError(f"server {name!r}: give its entry as in extensions.json (an object), or null to remove it")
            servers[name] = copy.deepcopy(entry)
            if entry.get("enabled", True) is True:
                to_connect.append(name)
        if "enabled" in body:
            _set_extensions(document, body["enabled"], settings.path)
        if "retryMs" in body:
            if body["retryMs"] is None:
                document["mcp"].pop("retryMs", None)
            else:
                document["mcp"]["retryMs"] = body["retryMs"]
        config = parse(document, settings.home, source=settings.path)  # 400 before anything is written
        by_name = {server.name: server for server in config.servers}
        stored: dict[str, Credentials] = {name: settings.store.get_credentials(name)
                                          for name in {*servers_part, *secrets_part}}
        # Each server's credentials change as a function of its row, applied under the
        # row's lock (a token refresh that commits meanwhile is kept); checked here on
        # what is stored now, so an invalid secret is a 400 before anything is written.
        changes: dict[str, Callable[[Credentials], Credentials]] = {}
        secrets_changed: set[str] = set()
        for name in servers_part:
            if name in by_name and name not in before:  # a new server starts with no stored secret
                changes[name] = _fresh
            elif name in by_name and _kind(before[name]) != by_name[name].type:
                raise ConfigError(f"server {name!r}: remove it and add it again to change its transport")
        for name, given in secrets_part.items():
            server = by_name.get(name)
            if server is None:
                raise ConfigError(f"no server named {name!r} in {settings.path} to keep secrets for")
            if not isinstance(given, dict):
                raise ConfigError(f"server {name!r}: its secrets must be an object of bearerToken, headers, env, oauth, oauth_client")
            changes[name] = _with_secrets(server, given, changes.get(name))
            if set(given) - {"oauth"}:  # anything but a sign-out: the server is tried
                secrets_changed.add(name)
                if server.enabled and name not in to_connect:
                    to_connect.append(name)
        for name, change in list(changes.items()):
            if change(stored[name]) == stored[name] and name in before:  # raises ConfigError: a 400
                del changes[name]  # nothing to write
        # A server whose entry and secrets are unchanged is not tried again.
        to_connect = [name for name in to_connect
                      if not (name in before and before[name] == servers[name] and name not in secrets_changed)]
        settings._write(document)
        previous: dict[str, Credentials] = {}
        written: dict[str, Credentials] = {}
        try:
            for name, change in changes.items():
                previous[name], written[name] = change_credentials(settings.store, name, change)
            for name in removed:
                settings.store.delete_credentials(name)
            catalogues = {}
            for name in to_connect:
                server = by_name[name]
                try:
                    catalogues[name] = settings._try(server, settings.store.get_credentials(name))
                except NeedsSignIn as exc:
                    # The reference: saving a server that answers 401 keeps it, needing a sign-in.
                    logger.info("server %r saved; it needs a sign-in (%s)", name, exc.why)
                    settings._mark_needs_sign_in(server, exc.why)
                except AlbedoError as exc:
                    logger.info("server %r could not connect; restoring the previous settings", name)
                    raise SettingsConflict(name, exc) from None
        except BaseException:
            _restore(settings, previous_text, previous, written, {name: stored[name] for name in removed})
            raise
        for name, catalogue in catalogues.items():
            settings._save_catalogue(by_name[name], catalogue)
        for name in removed:
            try:
                settings.store.delete_catalogue(name)
            except StoreError as exc:  # removed all the same; only its saved catalogue stays
                logger.warning("server %r: its saved catalogue was not deleted (%s)", name, exc)
    logger.info("settings saved through the service: %s", ", ".join(sorted({*servers_part, *secrets_part})) or "defaults")
    return True


def _restore(settings: Settings, text: str | None, previous: dict[str, Credentials],
             written: dict[str, Credentials], removed: dict[str, Credentials]) -> None:
    """Undo a PATCH: the file as it was, each credential the PATCH wrote (or deleted)
    back unless it changed since (rotated tokens stay)."""
    settings._restore_file(text)

    def undo(ours: Credentials, before: Credentials) -> Callable[[Credentials], Credentials]:
        return lambda current: undo_save(current, ours, before)

    def put_back(before: Credentials) -> Callable[[Credentials], Credentials]:
        return lambda current: before if _is_empty(current) else current

    for name, ours in written.items():
        settings.store.update_credentials(name, undo(ours, previous[name]))
    for name, before in removed.items():
        if not _is_empty(before):
            settings.store.update_credentials(name, put_back(before))


def _fresh(current: Credentials) -> Credentials:
    """A new server's credentials: none, whatever a row of that name held."""
    return _empty_credentials()


def _with_secrets(server: ServerConfig, given: Any,
                  base: Callable[[Credentials], Credentials] | None) -> Callable[[Credentials], Credentials]:
    """The change that applies the API's ``given`` secrets (after ``base``) to a row."""
    def change(current: Credentials) -> Credentials:
        return _secrets(server, base(current) if base is not None else current, given)[0]

    return change


def _secrets(server: ServerConfig, current: Credentials, given: Any) -> tuple[Credentials, bool]:
    """``current`` with the API's secrets for ``server`` applied; and whether the server
    must be tried (anything but a sign-out changed). An omitted secret is kept, null removes it."""
    name = server.name
    if not isinstance(given, dict):
        raise ConfigError(f"server {name!r}: its secrets must be an object of bearerToken, headers, env, oauth, oauth_client")
    unknown = set(given) - _SECRET_KEYS
    if unknown:
        raise ConfigError(f"server {name!r}: unknown secret key(s) {', '.join(sorted(unknown))} "
                          f"(known: {', '.join(sorted(_SECRET_KEYS))})")
    http = server.type == "http"
    if not http and ({"bearerToken", "header", "headers", "oauth", "oauth_client"} & set(given)):
        raise ConfigError(f"server {name!r}: a bearer token, header or OAuth secret is for HTTP servers")
    if http and "env" in given:
        raise ConfigError(f"server {name!r}: env entries are for stdio servers")
    bearer = None
    if "bearerToken" in given:
        bearer = REMOVE if given["bearerToken"] is None else _value(given["bearerToken"], "bearerToken", name)
    headers: dict[str, str] = {}
    if "header" in given:  # the one-header form, kept for older clients
        value = given["header"]
        if value is None:
            headers.update({stored: REMOVE for stored, _ in current.headers})  # the one header (or every one) removed
        elif isinstance(value, dict) and set(value) <= {"name", "value"} and isinstance(value.get("name"), str):
            kept = value.get("value")  # left out or "": renames the stored header, keeping its value
            headers[value["name"]] = "" if kept in (None, "") else _value(kept, "header value", name)
        else:
            raise ConfigError(f'server {name!r}: "header" must be {{"name": ..., "value": ...}} or null')
    if "headers" in given:
        value = given["headers"]
        if not isinstance(value, dict):
            raise ConfigError(f'server {name!r}: "headers" must map each header name to its value, "" (kept) or null (removed)')
        for header, item in value.items():
            headers[header] = REMOVE if item is None else ("" if item == "" else _value(item, "a header value", name))
    env: dict[str, str] = {}
    if "env" in given:
        value = given["env"]
        if not isinstance(value, dict):
            raise ConfigError(f'server {name!r}: "env" must map KEY to a value or null')
        for key, item in value.items():
            env[key] = REMOVE if item is None else _value(item, f"env {key}", name)
    client: tuple[str, str | None] | None = None
    if "oauth_client" in given:
        value = given["oauth_client"]
        if value is None:
            client = (REMOVE, None)
        elif isinstance(value, dict) and set(value) <= {"clientId", "clientSecret"} and isinstance(value.get("clientId"), str):
            secret = value.get("clientSecret", "")
            secret = REMOVE if secret is None else (secret if secret == "" else _value(secret, "clientSecret", name))
            client = (value["clientId"], secret or None)
        else:
            raise ConfigError(f'server {name!r}: "oauth_client" must be {{"clientId": ..., "clientSecret": ...}} or null')
    if "oauth" in given and given["oauth"] is not None:
        raise ConfigError(f'server {name!r}: "oauth" takes only null (the sign-out); sign in with PUT /api/auth/logins/mcp:{name}')
    secrets = SecretInput(bearer_token=bearer, headers=headers, env=env, oauth_client=client)
    credentials = _apply(current, secrets, name)
    if http:
        credentials = _apply_oauth_client(credentials, secrets, server.url, name)
    if "oauth" in given:
        credentials = signed_out(server, credentials)
    return credentials, bool(set(given) - {"oauth"})


def _set_extensions(document: dict, value: Any, path: str) -> None:
    if not isinstance(value, dict):
        raise ConfigError('"enabled" must map extension names to true, false or null, e.g. {"mcp": true}')
    enabled = document.get("enabled", {})
    if not isinstance(enabled, dict):
        raise ConfigError(f'{path}: "enabled" must map extension names to true or false')
    for extension, on in value.items():
        if on is None:
            enabled.pop(extension, None)
        else:
            enabled[extension] = on
    if enabled:
        document["enabled"] = enabled
    else:
        document.pop("enabled", None)


def _value(value: Any, what: str, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"server {name!r}: {what} must be a non-empty string, or null to remove it")
    return value


def _object(value: Any, what: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f'"{what}" must be an object of server name -> value')
    return value


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not SERVER_NAME.match(name):
        raise ConfigError(f"{name[:60]!r} is not a valid server name: 1-48 letters, digits, '-' or '_'")


# -- GET /api/mcp and the responses ----------------------------------------------------------------


def _state(settings: Settings) -> dict[str, Any]:
    config = parse(settings._read_document(), settings.home, source=settings.path)
    return {"enabled": dict(config.extensions), "retryMs": config.retry_ms,
            "servers": [view.as_json() for view in settings.servers()]}


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8"))


def _is_json(request: Request) -> bool:
    return request.mimetype == "application/json"


def _json(status: int, body: Any) -> Response:
    return Response(json.dumps(body, ensure_ascii=False), status=status, headers=_HEADERS,
                    content_type="application/json; charset=utf-8")


def _text(status: int, text: str) -> Response:
    return Response(text + "\n", status=status, headers=_HEADERS, content_type="text/plain; charset=utf-8")


def _file(directory: str, name: str) -> Response:
    path = safe_join(directory, name)
    if path is None or not os.path.isfile(path):
        raise NotFound()
    with open(path, "rb") as f:
        data = f.read()
    kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
    if kind.startswith("text/") or kind in ("application/javascript", "text/javascript"):
        kind += "; charset=utf-8"
    return Response(data, status=200, headers=_HEADERS, content_type=kind)
