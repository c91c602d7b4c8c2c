"""The settings service's WSGI application: the JSON API, the sign-in API and the page.

::

    app = make_app(settings_factory=lambda: Settings(home, store), signins=signins, token=token,
                   pages=PageSessions(), port=lambda: port, on_saved=reload_sessions,
                   static_dir=STATIC_DIR, open_url=lambda: service.open_url(), live=live_source)

Routes (Werkzeug's routing; no hand-written HTTP parsing):

- ``GET /api/mcp``: ``{"enabled": {...}, "retryMs": N, "daemon": bool, "servers": [...]}``,
  each server once, as ``albedo-mcp servers --json`` prints it (``ServerView.as_json()``:
  ``auth`` included, never a secret), with ``entry`` (its extensions.json entry, as is:
  never a secret), ``held`` (how many of its tools, or its instructions, tool integrity
  holds) and ``live``: ``{"state", "era", "protocolVersion", "tools", "error", "stderr",
  "source", "at"}`` from ``live()`` (:mod:`.live`: the serve runtime's session, asked
  within a short bound; ``"source": "check"`` when a Check saw it since). Without
  ``live``, ``"daemon": false`` and every ``live`` is null.
- ``GET /api/mcp/tools/NAME``: the server's whole discovered tool list, each tool with
  ``enabled`` (its ``enabledTools``/``disabledTools``) and ``held`` (what tool integrity
  holds of it, or null), and everything held (:func:`.live.tool_list`); from the
  session's composition, else the saved catalogue. 404 for an unknown server.
- ``POST /api/mcp/doctor`` ``{"server": NAME}``: ``albedo-mcp doctor NAME``
  (:func:`~albedo_actors.settings.doctor.examine`: bounded by its startupTimeoutMs; it
  saves what it finds), 200 its report's JSON; ``on_saved`` is called when the server is
  ``ok`` and the session had it otherwise. 404 for an unknown server.
- ``POST /api/mcp/guess`` ``{"target": URL | command line}``: what ``albedo-mcp add
  TARGET`` would make of it (:func:`~albedo_actors.settings.guess`), 200 ``{"transport",
  "url", "command", "args", "name"}``; 400 for an unusable target.
- ``POST /api/mcp/import`` ``{"text", "kind", "dryRun", "inputs", "disabled"}``: another
  client's configuration, pasted (:func:`.importer.import_text`: the rules of
  ``albedo-mcp import``), 200 ``{"kind", "inputs", "servers", "imported"}``; ``on_saved``
  once when something was imported; 400 when the text is no format albedo reads.
- ``PATCH /api/mcp``: a :class:`~albedo_actors.settings.change.Change` as JSON
  (``Change.from_json``): ``servers`` (NAME -> entry as in extensions.json, or null to
  remove), ``secrets`` (NAME -> bearerToken, headers (header name -> value), env
  (KEY -> value), each value a string, "" keeping the stored one, null removing it; the
  older ``header`` ``{"name", "value"}`` is still taken; oauth: null (the sign-out),
  oauth_client), ``enabled``, ``retryMs``, ``added`` (names that must not exist yet);
  every part optional, applied by ``Settings.apply``, all or nothing: 400
  writes nothing, 409 (a saved or enabled server could not connect) restores
  extensions.json and the credentials, 200 returns the new GET body and calls
  ``on_saved`` once. An entry changed only in ``enabledTools``, ``disabledTools`` or
  ``trust`` (a tool toggle) is not connected.
- ``PUT|GET|DELETE /api/auth/logins/mcp:NAME``, ``POST .../callback``: the sign-ins
  (:class:`~albedo_actors.service.signins.SignIns`): 202, 200, 204, 200. The status of a
  sign-in that failed because the authorization server refused the client has
  ``"newClient": true`` (``PUT`` ``{"newClient": true}`` registers a new one).
- ``POST /api/session`` ``{"open": LINK}``: spends a single-use opening link (the page
  reads it from its URL's ``#open=`` fragment) for a page session token, 201
  ``{"token", "expiresIn"}``; 401 when the link is spent or expired. ``DELETE
  /api/session``: the page's sign-out, 204.
- ``POST /api/links`` (the service token only): 201 ``{"url"}``, a new opening link
  (``albedo-mcp open``).
- ``POST /api/mcp/approve`` ``{"server": NAME, "tools": [NAME, ...] | null}``: approve
  what tool integrity holds of the server (``Settings.approve``; null: all of it), 200
  ``{"server", "approved": [...]}``; 400 when a tool named is not held (nothing is
  approved). The history says "service"; ``on_saved`` is called once when something was
  approved.
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

On the port, requests that may wait on a server (a PATCH that connects, a Check, an
import, a sign-in's start) run at most ``slow_at_once`` at a time, and the port has two
request threads more, so the page's polls always find one; past that cap: 429 at once,
"busy, try again". The home's socket (the command line) has no cap: its commands wait
their turn. A
server whose add is being tried is in extensions.json meanwhile (and goes again when it
cannot connect): ``GET /api/mcp`` does not list it until its save ends.

No response, page or log line carries a secret, a token or the service token: errors
are the settings' own one-line messages (they never quote a value).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import mimetypes
import os
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from werkzeug.exceptions import HTTPException, NotFound
from werkzeug.routing import Map, Rule
from werkzeug.security import safe_join
from werkzeug.wrappers import Request, Response

from ..config import SERVER_NAME, parse
from ..errors import AlbedoError, ConfigError, SettingsConflict, StoreError
from ..settings import Change
from ..wire import telemetry

if TYPE_CHECKING:
    from ..settings import Settings
    from .live import Snapshot
    from .pages import PageSessions
    from .signins import SignIns

logger = telemetry.logger(__name__)  # records carry the server and trace ids

__all__ = ["make_app", "MAX_BODY"]

MAX_BODY = 1024 * 1024  # request bodies above 1 MiB: 413
# Requests that may wait on a server (a save that connects, a Check, an import, a
# sign-in's start) run at most this many at once per listener; the listener has more
# request threads than that, so the page's polls always find one (429 past it).
SLOW_AT_ONCE = 4
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
    Rule("/api/mcp/approve", endpoint="approve", methods=["POST"]),
    Rule("/api/mcp/tools/<name>", endpoint="tools", methods=["GET"]),
    Rule("/api/mcp/doctor", endpoint="doctor", methods=["POST"]),
    Rule("/api/mcp/guess", endpoint="guess", methods=["POST"]),
    Rule("/api/mcp/import", endpoint="import_", methods=["POST"]),
    Rule("/api/session", endpoint="session", methods=["POST", "DELETE"]),
    Rule("/api/links", endpoint="links", methods=["POST"]),
    Rule("/api/health", endpoint="health", methods=["GET"]),
    Rule("/api/auth/logins/mcp:<name>", endpoint="login", methods=["GET", "PUT", "DELETE"]),
    Rule("/api/auth/logins/mcp:<name>/callback", endpoint="callback", methods=["POST"]),
], strict_slashes=False)


class _Adding:
    """The names of servers whose add is being saved now (hidden from GET /api/mcp until it ends)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._names: dict[str, int] = {}

    @contextlib.contextmanager
    def hold(self, names: Iterable[Any]) -> Iterator[None]:
        held = [name for name in names if isinstance(name, str)]
        with self._lock:
            for name in held:
                self._names[name] = self._names.get(name, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                for name in held:
                    self._names[name] -= 1
                    if not self._names[name]:
                        del self._names[name]

    def names(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._names)


class _Refused(Exception):
    """An answer decided before the endpoint runs (403, 401, 415, 413, 400)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def make_app(*, settings_factory: Callable[[], Settings], signins: SignIns, token: str, pages: PageSessions,
             port: Callable[[], int], on_saved: Callable[[], None], static_dir: str,
             open_url: Callable[[], str], local: bool = False,
             live: Callable[[], Snapshot] | None = None, slow_at_once: int | None = SLOW_AT_ONCE) -> Callable[..., Iterable[bytes]]:
    """The WSGI application of one service (see the module docstring).

    ``port()`` is the port the service listens on (known once it is bound); ``token``
    the service token; ``pages`` the page's links and sessions; ``open_url()`` mints a
    new opening link; ``on_saved()`` is called once after every PATCH that saved.
    ``local``: this app answers on the home's Unix socket (whose clients send
    ``Host: localhost``). ``live()``: the daemon's view of the servers
    (:class:`~albedo_actors.service.live.LiveSource`); None: the service runs without
    one (``"daemon": false``, every ``"live"`` null). ``slow_at_once``: how many requests
    that may wait on a server run at once (give the listener more request threads than
    that, so the page's polls always find one); None: no cap (the home's socket, whose
    commands wait their turn).
    """
    slow_slots = threading.BoundedSemaphore(slow_at_once) if slow_at_once is not None else None
    adding = _Adding()

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

    def reload() -> None:
        try:
            on_saved()
        except Exception as exc:  # the sessions reload at their next prepare anyway
            logger.warning("the sessions could not be told to reload (%s)", type(exc).__name__)

    def mcp(request: Request) -> Response:
        settings = settings_factory()
        if request.method == "GET":
            return _json(200, _state(settings, live, adding.names()))
        body = body_of(request)
        added = body.get("added") if isinstance(body, dict) else None
        with slow(), adding.hold(added if isinstance(added, list) else ()):
            saved = patch(settings, body)
        if saved:
            reload()
        return _json(200, _state(settings, live, adding.names()))

    def tools(request: Request, name: str) -> Response:
        from .live import tool_list

        _check_name(name)
        settings = settings_factory()
        if name not in settings.names():
            return _json(404, {"error": f"no server named {name!r}; GET /api/mcp lists them"})
        return _json(200, tool_list(settings, name, live() if live is not None else None))

    @contextlib.contextmanager
    def slow() -> Iterator[None]:
        """A slot for a request that may wait on a server (a save that connects, a Check,
        an import, a sign-in's start): at most ``slow_at_once`` at a time, so the
        listener always keeps request threads for the page's polls. None free: 429."""
        if slow_slots is None:
            yield
            return
        if not slow_slots.acquire(blocking=False):
            raise _Refused(429, f"the settings service is busy with {slow_at_once} saves, checks or sign-ins; "
                                "try again when one has finished")
        try:
            yield
        finally:
            slow_slots.release()

    def doctor(request: Request) -> Response:
        from ..settings.doctor import examine

        body = body_of(request)
        server = body.get("server") if isinstance(body, dict) else None
        if not isinstance(server, str) or set(body) != {"server"}:
            raise ConfigError('send {"server": "<name>"}')
        _check_name(server)
        settings = settings_factory()
        config = parse(settings.document.read(), settings.home, source=settings.path)
        if server not in {s.name for s in config.servers}:
            return _json(404, {"error": f"no server named {server!r}; GET /api/mcp lists them"})
        before = _live_state_of(settings, server, live)
        with slow():
            (report,) = examine(config, settings.store, [server])  # bounded by its startupTimeoutMs
        if report.state == "ok" and (before not in (None, "ok") or report.catalogue_updated):
            # The session left it out (it is dialled again now that it answers), or the
            # check found its catalogue changed (what tool integrity holds of it is new).
            reload()
        return _json(200, report.as_json())

    def guess(request: Request) -> Response:
        from ..settings import guess as guess_target

        body = body_of(request)
        target = body.get("target") if isinstance(body, dict) else None
        if not isinstance(target, str) or set(body) != {"target"}:
            raise ConfigError('send {"target": "<a URL, or a command line>"}')
        return _json(200, guess_target(target, set(settings_factory().names())))

    def import_(request: Request) -> Response:
        from .importer import import_text

        body = body_of(request)
        with slow():
            answer, imported = import_text(settings_factory(), body, adding=adding.hold)
        if imported:
            reload()
        return _json(200, answer)

    def approve(request: Request) -> Response:
        body = body_of(request)
        server = body.get("server") if isinstance(body, dict) else None
        tools = body.get("tools") if isinstance(body, dict) else None
        if (not isinstance(server, str) or set(body) - {"server", "tools"}
                or not (tools is None or (isinstance(tools, list) and all(isinstance(t, str) for t in tools)))):
            raise ConfigError('send {"server": "<name>", "tools": ["<tool>", ...]} (or "tools": null for all of them)')
        _check_name(server)
        approved = settings_factory().approve(server, tools, who="service")
        if approved:
            reload()  # the sessions see the store's new revision anyway
        return _json(200, {"server": server, "approved": approved})

    def login(request: Request, name: str) -> Response:
        _check_name(name)
        if request.method == "PUT":
            body = body_of(request)  # {} or {"newClient": true}: register a new client first
            if not isinstance(body, dict) or set(body) - {"newClient"} or not isinstance(body.get("newClient", False), bool):
                raise ConfigError(f'server {name!r}: the sign-in takes {{}} or {{"newClient": true}}')
            with slow():
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

    endpoints: dict[str, Callable[..., Response]] = {"mcp": mcp, "approve": approve, "tools": tools, "doctor": doctor,
                                                      "guess": guess, "import_": import_,
                                                      "login": login, "callback": callback,
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

    The body is a :class:`~albedo_actors.settings.change.Change` as JSON, applied by
    :meth:`Settings.apply` as every other save is: ConfigError (400) writes nothing;
    SettingsConflict (409) restores the file and every credential the PATCH changed.

    Raises:
        ConfigError: invalid input; nothing was written.
        SettingsConflict: a server could not connect; everything was restored.
    """
    change = Change.from_json(body)
    if not settings.apply(change):
        return False
    logger.info("settings saved through the service: %s", ", ".join(change.names) or "defaults")
    return True


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not SERVER_NAME.match(name):
        raise ConfigError(f"{name[:60]!r} is not a valid server name: 1-48 letters, digits, '-' or '_'")


# -- GET /api/mcp and the responses ----------------------------------------------------------------


def _state(settings: Settings, live: Callable[[], Snapshot] | None, hidden: frozenset[str] = frozenset()) -> dict[str, Any]:
    """GET /api/mcp's body: the defaults, and each server once, with its entry, how much
    tool integrity holds of it, and its live state (null without a daemon). ``hidden``:
    servers whose add is still being saved (their entry is in the file while they are
    tried, and goes again if they cannot connect): not listed until that save ends."""
    from ..settings.trust import held_tools
    from .live import live_states

    data = settings.document.read()
    config = parse(data, settings.home, source=settings.path)
    entries = settings.document.servers(data)
    views = [view for view in settings.servers() if view.name not in hidden]
    held = held_tools(settings.store, [view.name for view in views]) if views else {}
    states = live_states(settings, views, live()) if live is not None and views else {}
    servers = []
    for view in views:
        servers.append({**view.as_json(), "entry": entries.get(view.name), "held": len(held.get(view.name, ())),
                        "live": states.get(view.name)})
    return {"enabled": dict(config.extensions), "retryMs": config.retry_ms, "daemon": live is not None,
            "servers": servers}


def _live_state_of(settings: Settings, name: str, live: Callable[[], Snapshot] | None) -> str | None:
    """The daemon's state of ``name`` now (None without a daemon)."""
    from .live import live_states

    if live is None:
        return None
    views = [view for view in settings.servers() if view.name == name]
    return live_states(settings, views, live()).get(name, {}).get("state") if views else None


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
