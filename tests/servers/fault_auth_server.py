"""A misbehaving OAuth authorization server + protected MCP server, for hostile sign-in tests.

Standard library only (``http.server.ThreadingHTTPServer``), bound to 127.0.0.1 on a
free port, served from a thread of the test process::

    server = FaultAuthServer(token="not_json")   # modes: see __init__
    url = server.start()                          # "http://127.0.0.1:PORT/mcp"
    ...
    server.hits("/authorize")                     # how many requests reached a path
    server.requests                               # every request (RecordedRequest)
    server.stop()                                 # closes the socket, joins every thread

It is also a context manager. To prove a redirect is not followed, point it at
``fault_http_server.CanaryServer``, which only records what reaches it.

Normal behaviour (every mode off)
---------------------------------
* ``POST /mcp``: without a token this server issued, 401 with ``WWW-Authenticate:
  Bearer resource_metadata="<base>/.well-known/oauth-protected-resource/mcp"`` (and
  ``error="invalid_token"`` when some token was sent). With one, a minimal MCP server
  of the 2025-11-25 era: ``server/discover`` gets -32601 (an older server),
  ``initialize`` a result (tools capability), notifications 202, ``tools/list`` one
  tool ``echo``, ``tools/call`` a text result. ``GET /mcp`` 405, ``DELETE /mcp`` 200.
* ``GET /.well-known/oauth-protected-resource[/mcp]``: RFC 9728 metadata, ``resource``
  the MCP URL, ``authorization_servers`` [base].
* ``GET /.well-known/oauth-authorization-server``: RFC 8414 metadata, issuer = base
  (``http://127.0.0.1:PORT``), PKCE S256, ``none`` client auth, registration,
  ``authorization_response_iss_parameter_supported`` true. ``openid-configuration``: 404.
* ``POST /register``: a public client, ``client_id`` ``client-N``, the redirect URIs asked.
* ``GET /authorize``: auto-approves: 302 to ``redirect_uri?code=...&state=...&iss=<base>``
  (it must name a registered client and carry an S256 ``code_challenge``).
* ``POST /token``: the ``authorization_code`` grant (code single use, PKCE checked),
  answering a Bearer ``access_token`` that the MCP endpoint then accepts, and the
  ``refresh_token`` grant (rotating: a refresh token works once). A client
  authenticates as it registered: ``none`` (``client_id`` in the body), or, for a
  ``clients`` entry with a secret, HTTP Basic or ``client_secret_post``.

Sign-in faults (issue 10; every one a mutable attribute, so a test can switch it
between two sign-ins): ``trickle`` ({path: seconds}) writes that path's whole answer
one byte at a time, ``token`` ``"invalid_client"`` refuses every token request as
RFC 6749 5.2 ``invalid_client``, ``mcp`` ``"broken"`` answers a valid token's
requests 500, ``authorization_servers`` replaces the PRM's list and ``challenge_prm``
the challenge's ``resource_metadata``. ``expire()`` forgets every access token issued,
``wait_hits(path, n)`` waits (bounded) until ``n`` requests reached ``path``.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import itertools
import json
import threading
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlencode, urlsplit

HUGE = 70 * 1024  # more than the 64 KiB albedo reads of any OAuth answer
JOIN_TIMEOUT_S = 10.0

MCP_MODES = ("oauth", "always_401", "always_403_scope", "tools_401", "broken")
REGISTER_MODES = ("ok", "huge_length", "huge_chunked", "not_json", "array", "no_client_id", "invalid_redirect_uri",
                  "invalid_client_metadata")
TOKEN_MODES = ("ok", "huge_length", "huge_chunked", "not_json", "not_bearer", "newline", "invalid_client")
REDIRECTABLE = ("prm", "as_metadata", "register", "authorize", "token")


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict
    headers: dict  # lower-cased names
    body: bytes = field(repr=False)

    def form(self) -> dict:
        return {k: v[0] for k, v in parse_qs(self.body.decode("utf-8", "replace")).items()}

    def json(self):
        return json.loads(self.body.decode("utf-8"))


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = False
    block_on_close = True  # server_close() joins the handler threads
    allow_reuse_address = True

    def __init__(self, address, owner):
        self.owner = owner
        super().__init__(address, _Handler)

    def handle_error(self, request, client_address):  # a client that hung up early: not news
        pass


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server_version = "fault-auth"
    sys_version = ""
    timeout = 10

    def log_message(self, format, *args):  # noqa: A002
        pass

    def _dispatch(self):
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        request = RecordedRequest(self.command, parts.path, {k: v[0] for k, v in parse_qs(parts.query).items()},
                                  {k.lower(): v for k, v in self.headers.items()}, body)
        owner: FaultAuthServer = self.server.owner
        owner._record(request)
        try:
            owner._handle(self, request)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading (an oversized answer): expected

    do_GET = do_POST = do_DELETE = do_PUT = _dispatch

    # -- answering ------------------------------------------------------------------------

    def send(self, status: int, body: bytes = b"", content_type: str = "application/json",
             headers: dict | None = None) -> None:
        owner: FaultAuthServer = self.server.owner
        pace = owner.trickle.get(urlsplit(self.path).path)
        if pace is not None:
            self._trickle(status, body, content_type, headers or {}, pace, owner)
            return
        self.send_response(status)
        if body or status not in (202, 204):
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Connection", "close")
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _trickle(self, status: int, body: bytes, content_type: str, headers: dict, pace: float,
                 owner: "FaultAuthServer") -> None:
        """The whole answer (status line included), one byte every ``pace`` seconds, until the
        client hangs up or the server stops (so a client's per-read timeout never fires)."""
        head = [f"HTTP/1.0 {status} Trickle", f"Content-Type: {content_type}", f"Content-Length: {len(body)}",
                *(f"{k}: {v}" for k, v in headers.items()), "Connection: close", "", ""]
        raw = "\r\n".join(head).encode("latin-1") + body
        for i in range(len(raw)):
            if owner._stopping.wait(pace):
                return  # the server stops: leave the rest unsent
            try:
                self.wfile.write(raw[i:i + 1])
                self.wfile.flush()
            except OSError:
                return  # the client gave up, as it should
        owner._note_trickled(self.path)

    def send_json(self, status: int, document, headers: dict | None = None) -> None:
        self.send(status, json.dumps(document).encode(), headers=headers)

    def send_chunked(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        """HTTP/1.1 chunked transfer coding: no Content-Length announces the size."""
        self.protocol_version = "HTTP/1.1"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        for start in range(0, len(body), 8192):
            piece = body[start:start + 8192]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        self.wfile.write(b"0\r\n\r\n")
        self.close_connection = True


def _padded(document: dict) -> bytes:
    """``document`` as JSON, valid and usable, padded beyond 64 KiB."""
    return json.dumps({**document, "padding": "x" * HUGE}).encode()


class FaultAuthServer:
    """See the module docstring. Every mode is a constructor keyword.

    ``mcp``: ``oauth`` (default), ``always_401`` (every MCP request, with or without a
    token), ``always_403_scope`` (401 without a token, 403 ``insufficient_scope`` with
    scope ``challenge_scope`` with any token), ``tools_401`` (the handshake and lists are
    served to anyone, ``tools/call`` gets 401).
    ``jsonrpc_401_body``: every 401 from ``/mcp`` carries a JSON-RPC error for the
    request's id instead of a plain body.
    ``prm_resource``: the PRM ``resource`` (default: the MCP URL).
    ``as_issuer``: the AS metadata ``issuer`` (default: base).
    ``iss_supported``: ``authorization_response_iss_parameter_supported``.
    ``iss``: the ``iss`` of the redirect: ``"issuer"`` (base), ``"none"`` (left out),
    ``"slash"`` (base + "/") or any other literal value.
    ``authorization_endpoint``: the metadata's value; ``{base}`` is replaced by base.
    ``register`` / ``token``: the answer of that endpoint (REGISTER_MODES / TOKEN_MODES);
    ``invalid_redirect_uri`` and ``invalid_client_metadata`` refuse every registration
    with that RFC 7591 3.2.2 error and ``register_description``.
    ``first_id``: the first number of client ids, codes and tokens (two servers apart).
    ``issue_refresh``: token answers carry a ``refresh_token``. ``token_suffix``: appended
    to every token issued. ``scopes_supported``: the AS metadata's.
    ``authorize_error`` / ``error_description``: ``/authorize`` redirects with this
    RFC 6749 4.1.2.1 error (and description) instead of a code.
    ``redirects``: {endpoint: URL} for REDIRECTABLE endpoints, answered 302 (GET) or 307
    (POST, which a follower would re-post with the same body) to that URL.
    """

    def __init__(self, *, mcp: str = "oauth", jsonrpc_401_body: bool = False, prm_resource: str | None = None,
                 as_issuer: str | None = None, iss_supported: bool = True, iss: str = "issuer",
                 authorization_endpoint: str | None = None, register: str = "ok", token: str = "ok",
                 redirects: dict | None = None, challenge_scope: str = "mcp admin",
                 authorize_error: str | None = None, error_description: str | None = None,
                 no_prm: bool = False, clients: dict | None = None, auth_methods: tuple = ("none",),
                 trickle: dict | None = None, authorization_servers: list | None = None,
                 challenge_prm: str | None = None, register_description: str = "refused",
                 first_id: int = 1, issue_refresh: bool = True, token_suffix: str = "",
                 scopes_supported: tuple = ("mcp", "admin")) -> None:
        if mcp not in MCP_MODES or register not in REGISTER_MODES or token not in TOKEN_MODES:
            raise ValueError("unknown mode")
        if any(key not in REDIRECTABLE for key in (redirects or {})):
            raise ValueError("unknown redirect")
        self.mcp = mcp
        self.jsonrpc_401_body = jsonrpc_401_body
        self.prm_resource = prm_resource
        self.as_issuer = as_issuer
        self.iss_supported = iss_supported
        self.iss = iss
        self.authorization_endpoint = authorization_endpoint
        self.register = register
        self.register_description = register_description
        self.issue_refresh = issue_refresh  # False: token answers carry no refresh_token (the AS's discretion)
        self.token_suffix = token_suffix  # appended to every token issued (to find one in a file's bytes)
        self.scopes_supported = list(scopes_supported)  # the AS metadata's scopes_supported
        self.token = token
        self.redirects = dict(redirects or {})
        self.challenge_scope = challenge_scope
        self.authorize_error = authorize_error
        self.error_description = error_description
        self.no_prm = no_prm  # a 2025-03-26 server: no resource metadata, none named in the challenge
        self.preregistered = dict(clients or {})  # client id -> secret (None: public); any redirect URI
        self.auth_methods = tuple(auth_methods)
        self.trickle = dict(trickle or {})  # path -> seconds between the bytes of its answers
        self.authorization_servers = authorization_servers  # None: [base]
        self.challenge_prm = challenge_prm  # None: <base>/.well-known/oauth-protected-resource/mcp
        self._stopping = threading.Event()
        self._arrived = threading.Condition()
        self._refresh_tokens: dict[str, str] = {}  # refresh token -> client id (each works once)
        self._trickled: list[str] = []
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._clients: dict[str, list[str]] = {}
        self._codes: dict[str, dict] = {}
        self._tokens: set[str] = set()
        self._ids = itertools.count(first_id)  # client ids, codes: another first_id tells two servers' apart
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.base = ""
        self.url = ""

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> str:
        self._server = _Server(("127.0.0.1", 0), self)
        port = self._server.server_address[1]
        self.base = f"http://127.0.0.1:{port}"
        self.url = f"{self.base}/mcp"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"fault-auth-{port}", daemon=True)
        self._thread.start()
        return self.url

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(JOIN_TIMEOUT_S)

    def __enter__(self) -> "FaultAuthServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- what reached it -------------------------------------------------------------------

    @property
    def issuer(self) -> str:
        return self.base

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def hits(self, path: str, method: str | None = None) -> int:
        return sum(1 for r in self.requests if r.path == path and (method is None or r.method == method))

    def matching(self, path: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == path]

    def discovery_hits(self) -> int:
        return sum(1 for r in self.requests if r.path.startswith("/.well-known/"))

    def issued_tokens(self) -> set[str]:
        with self._lock:
            return set(self._tokens)

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)
        with self._arrived:
            self._arrived.notify_all()

    def wait_hits(self, path: str, n: int = 1, timeout: float = 30.0) -> bool:
        """Wait until ``n`` requests reached ``path`` (bounded); whether they did."""
        with self._arrived:
            return self._arrived.wait_for(lambda: self.hits(path) >= n, timeout)

    def _note_trickled(self, path: str) -> None:
        with self._lock:
            self._trickled.append(path)

    def fully_trickled(self) -> list[str]:
        """The paths whose trickled answer was written to the end (a client that waited it out)."""
        with self._lock:
            return list(self._trickled)

    def expire(self) -> None:
        """Every access token issued so far is refused from now on (the refresh tokens still work)."""
        with self._lock:
            self._tokens.clear()

    def refresh_tokens(self) -> set[str]:
        """The refresh tokens that would work now."""
        with self._lock:
            return set(self._refresh_tokens)

    def grants(self, grant_type: str) -> int:
        return sum(1 for r in self.matching("/token") if r.form().get("grant_type") == grant_type)

    # -- routing -----------------------------------------------------------------------------

    def _handle(self, h: _Handler, r: RecordedRequest) -> None:
        routes = {
            "/mcp": self._mcp,
            "/.well-known/oauth-protected-resource/mcp": self._prm,
            "/.well-known/oauth-protected-resource": self._prm,
            "/.well-known/oauth-authorization-server": self._as_metadata,
            "/register": self._register,
            "/authorize": self._authorize,
            "/token": self._token,
        }
        route = routes.get(r.path)
        if self.no_prm and r.path.startswith("/.well-known/oauth-protected-resource"):
            route = None
        if route is None:
            h.send(404, b"not found\n", "text/plain")
            return
        route(h, r)

    def _redirected(self, h: _Handler, r: RecordedRequest, key: str) -> bool:
        target = self.redirects.get(key)
        if target is None:
            return False
        h.send(307 if r.method == "POST" else 302, b"", headers={"Location": target})
        return True

    # -- the MCP endpoint --------------------------------------------------------------------

    def _challenge(self, error: str | None = None, scope: str | None = None) -> str:
        prm = self.challenge_prm or f"{self.base}/.well-known/oauth-protected-resource/mcp"
        value = "Bearer" if self.no_prm else f'Bearer resource_metadata="{prm}"'
        params = [f'error="{error}"'] if error else []
        if scope:
            params.append(f'scope="{scope}"')
        if self.no_prm:
            return value + (" " + ", ".join(params) if params else "")
        return value + "".join(f", {p}" for p in params)

    def _unauthorized(self, h: _Handler, r: RecordedRequest, sent: bool) -> None:
        headers = {"WWW-Authenticate": self._challenge("invalid_token" if sent else None)}
        if self.jsonrpc_401_body:
            try:
                rid = r.json().get("id")
            except (ValueError, AttributeError):
                rid = None
            h.send_json(401, {"jsonrpc": "2.0", "id": rid, "error": {"code": -32001, "message": "Unauthorized"}}, headers)
        else:
            h.send(401, b"unauthorized\n", "text/plain", headers)

    def _mcp(self, h: _Handler, r: RecordedRequest) -> None:
        authorization = r.headers.get("authorization", "")
        sent = bool(authorization)
        token = authorization[7:] if authorization.startswith("Bearer ") else None
        with self._lock:
            valid = token is not None and token in self._tokens
        try:
            message = r.json() if r.method == "POST" else None
        except ValueError:
            message = None
        method = message.get("method") if isinstance(message, dict) else None
        if self.mcp == "broken" and valid:
            h.send(500, b"broken\n", "text/plain")
            return
        if self.mcp == "always_401":
            self._unauthorized(h, r, sent)
            return
        if self.mcp == "always_403_scope":
            if not sent:
                self._unauthorized(h, r, sent)
            else:
                h.send(403, b"forbidden\n", "text/plain", {
                    "WWW-Authenticate": self._challenge("insufficient_scope", self.challenge_scope)})
            return
        if self.mcp == "tools_401":
            if method == "tools/call":
                self._unauthorized(h, r, sent)
                return
        elif not valid:
            self._unauthorized(h, r, sent)
            return
        self._serve_mcp(h, r, message)

    def _serve_mcp(self, h: _Handler, r: RecordedRequest, message) -> None:
        if r.method == "GET":
            h.send(405, b"", "text/plain", {"Allow": "POST, DELETE"})
            return
        if r.method == "DELETE":
            h.send(200, b"")
            return
        if not isinstance(message, dict):
            h.send_json(400, {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
            return
        method, rid = message.get("method"), message.get("id")
        if rid is None:
            h.send(202)  # a notification or a response
            return
        if method == "initialize":
            result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                      "serverInfo": {"name": "fault-auth", "version": "1"}}
            h.send_json(200, {"jsonrpc": "2.0", "id": rid, "result": result}, {"Mcp-Session-Id": "fault-auth-session"})
        elif method == "tools/list":
            tools = [{"name": "echo", "description": "echo", "inputSchema": {"type": "object"}}]
            h.send_json(200, {"jsonrpc": "2.0", "id": rid, "result": {"tools": tools}})
        elif method == "tools/call":
            h.send_json(200, {"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "ran"}]}})
        elif method == "ping":
            h.send_json(200, {"jsonrpc": "2.0", "id": rid, "result": {}})
        else:
            h.send_json(200, {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})

    # -- discovery ---------------------------------------------------------------------------

    def _prm(self, h: _Handler, r: RecordedRequest) -> None:
        if self._redirected(h, r, "prm"):
            return
        servers = self.authorization_servers if self.authorization_servers is not None else [self.base]
        h.send_json(200, {"resource": self.prm_resource or self.url, "authorization_servers": list(servers),
                          "scopes_supported": ["mcp"], "bearer_methods_supported": ["header"]})

    def _as_metadata(self, h: _Handler, r: RecordedRequest) -> None:
        if self._redirected(h, r, "as_metadata"):
            return
        endpoint = (self.authorization_endpoint or "{base}/authorize").replace("{base}", self.base)
        h.send_json(200, {
            "issuer": self.as_issuer or self.base,
            "authorization_endpoint": endpoint,
            "token_endpoint": f"{self.base}/token",
            "registration_endpoint": f"{self.base}/register",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": list(self.auth_methods),
            "scopes_supported": list(self.scopes_supported),
            "authorization_response_iss_parameter_supported": self.iss_supported,
        })

    # -- registration ------------------------------------------------------------------------

    def _register(self, h: _Handler, r: RecordedRequest) -> None:
        if self._redirected(h, r, "register"):
            return
        try:
            asked = r.json()
            redirects = [u for u in asked.get("redirect_uris", []) if isinstance(u, str)]
        except (ValueError, AttributeError):
            h.send_json(400, {"error": "invalid_client_metadata"})
            return
        if self.register in ("invalid_redirect_uri", "invalid_client_metadata"):  # RFC 7591 3.2.2
            h.send_json(400, {"error": self.register, "error_description": self.register_description})
            return
        client_id = f"client-{next(self._ids)}"
        with self._lock:
            self._clients[client_id] = redirects
        answer = {"client_id": client_id, "redirect_uris": redirects, "token_endpoint_auth_method": "none",
                  "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"]}
        mode = self.register
        if mode == "ok":
            h.send_json(201, answer)
        elif mode == "huge_length":
            h.send(201, _padded(answer))
        elif mode == "huge_chunked":
            h.send_chunked(201, _padded(answer))
        elif mode == "not_json":
            h.send(201, b"<html>registered " + client_id.encode() + b"</html>", "application/json")
        elif mode == "array":
            h.send_json(201, [answer])
        elif mode == "no_client_id":
            h.send_json(201, {k: v for k, v in answer.items() if k != "client_id"})

    # -- authorization -----------------------------------------------------------------------

    def _authorize(self, h: _Handler, r: RecordedRequest) -> None:
        if self._redirected(h, r, "authorize"):
            return
        q = r.query
        with self._lock:
            registered = self._clients.get(q.get("client_id", ""))
        redirect_uri = q.get("redirect_uri")
        if q.get("client_id") in self.preregistered and redirect_uri:
            registered = [redirect_uri]  # a client registered by hand: any loopback redirect
        if registered is None or redirect_uri not in registered or q.get("code_challenge_method") != "S256" \
                or not q.get("code_challenge") or q.get("response_type") != "code":
            h.send(400, b"bad authorization request\n", "text/plain")
            return
        code = f"code-{next(self._ids)}"
        with self._lock:
            self._codes[code] = {"challenge": q["code_challenge"], "redirect_uri": redirect_uri,
                                 "client_id": q["client_id"]}
        params = {"code": code, "state": q.get("state", "")}
        if self.authorize_error is not None:
            params = {"error": self.authorize_error, "state": q.get("state", "")}
            if self.error_description is not None:
                params["error_description"] = self.error_description
        iss = {"issuer": self.base, "none": None, "slash": self.base + "/"}.get(self.iss, self.iss)
        if iss is not None:
            params["iss"] = iss
        h.send(302, b"", headers={"Location": f"{redirect_uri}?{urlencode(params)}"})

    # -- tokens ------------------------------------------------------------------------------

    def _client_of(self, r: RecordedRequest, form: dict) -> str | None:
        """The authenticated client of a token request (RFC 6749 2.3.1), or None."""
        authorization = r.headers.get("authorization", "")
        if authorization.startswith("Basic "):
            try:
                client_id, _, secret = base64.b64decode(authorization[6:]).decode().partition(":")
            except ValueError:
                return None
        else:
            client_id, secret = form.get("client_id", ""), form.get("client_secret")
        if client_id in self.preregistered:
            return client_id if self.preregistered[client_id] == secret else None
        with self._lock:
            known = client_id in self._clients
        return client_id if known and secret is None else None

    def _token(self, h: _Handler, r: RecordedRequest) -> None:
        if self._redirected(h, r, "token"):
            return
        form = r.form()
        client = self._client_of(r, form)
        if self.token == "invalid_client" or client is None:
            h.send_json(401, {"error": "invalid_client"}, {"WWW-Authenticate": "Basic"})
            return
        if form.get("grant_type") == "refresh_token":
            with self._lock:
                owner = self._refresh_tokens.pop(form.get("refresh_token", ""), None)
            if owner != client:
                h.send_json(400, {"error": "invalid_grant"})
                return
        else:
            with self._lock:
                grant = self._codes.pop(form.get("code", ""), None)
            verifier = form.get("code_verifier", "")
            expected = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
            if (form.get("grant_type") != "authorization_code" or grant is None or grant["challenge"] != expected
                    or grant["redirect_uri"] != form.get("redirect_uri") or grant["client_id"] != client):
                h.send_json(400, {"error": "invalid_grant"})
                return
        access = f"at-{next(self._ids)}{self.token_suffix}"
        answer = {"access_token": access, "token_type": "Bearer", "expires_in": 3600, "scope": "mcp",
                  "refresh_token": f"rt-{next(self._ids)}{self.token_suffix}"}
        if not self.issue_refresh:
            del answer["refresh_token"]
        mode = self.token
        if mode == "ok":
            with self._lock:
                self._tokens.add(access)
                if "refresh_token" in answer:
                    self._refresh_tokens[answer["refresh_token"]] = client
            h.send_json(200, answer, {"Cache-Control": "no-store"})
        elif mode == "huge_length":
            h.send(200, _padded(answer))
        elif mode == "huge_chunked":
            h.send_chunked(200, _padded(answer))
        elif mode == "not_json":
            h.send(200, b"access_token=" + access.encode() + b"&token_type=bearer", "application/json")
        elif mode == "not_bearer":
            h.send_json(200, {**answer, "token_type": "mac"})
        elif mode == "newline":
            h.send_json(200, {**answer, "access_token": access + "\r\nX-Injected: 1"})
