"""A fast streamable-HTTP MCP server for the benchmark matrix (standard library only).

The JSON-RPC logic is the bundled demo server's (``albedo_actors/demo/server.py``,
loaded by path so that this file runs without the package importable); the transport
is ``http.server.ThreadingHTTPServer`` with HTTP/1.1 keep-alive, ``TCP_NODELAY`` on
every accepted connection, bound to 127.0.0.1, one path (``/mcp``), JSON bodies only
(never SSE), each answer written in one ``send()``. It is deliberately lean: it checks
what it needs to pick the era and the session, not every header rule of the spec
(``tests/servers/fault_http_server.py`` is the strict one).

Eras, on one endpoint:

* modern (2026-07-28): a POST whose ``MCP-Protocol-Version`` header is not a legacy
  revision, or whose body is ``server/discover`` or carries the ``_meta``
  protocolVersion, is judged alone by one shared modern demo server (stateless).
* legacy (2024-11-05 .. 2025-11-25): ``initialize`` opens a session and answers with a
  new ``Mcp-Session-Id``; every later POST needs it (missing: 400, unknown: 404).
  Notifications get 202, ``DELETE`` ends the session, ``GET`` (the listening stream)
  gets 405: the lists never change, and the server advertises ``listChanged: false``
  so that no client opens a listening stream.

Methods: ``server/discover``, ``initialize`` + notifications, ``ping``, ``tools/list``,
``tools/call`` (``echo``, ``add``, ``time``), ``resources/list``,
``resources/templates/list``, ``resources/read``, ``prompts/list``, ``prompts/get``.

With ``--cert FILE --key FILE`` it serves HTTPS (the TLS handshake runs on the
connection's own thread, not on the accepting one).

Run::

    python benchmarks/_fast_http_server.py [--port 0] [--cert C --key K]

It prints its URL (``http://127.0.0.1:PORT/mcp``) as the first line of stdout once it
is listening, and serves until SIGTERM/SIGINT or stdin's EOF with ``--exit-on-eof``.
In-process: ``FastServer(...).start()`` returns the URL; ``stop()`` ends it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import socket
import ssl
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_DEMO_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "albedo_actors", "demo", "server.py")


def _load_demo() -> Any:
    spec = importlib.util.spec_from_file_location("_albedo_demo_server", _DEMO_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclass-free, but keep it findable like any module
    spec.loader.exec_module(module)
    return module


demo = _load_demo()

PATH = "/mcp"
MODERN_VERSIONS = frozenset(demo.MODERN_VERSIONS)
LEGACY_VERSIONS = frozenset(demo.LEGACY_VERSIONS)
# An error's HTTP status in the modern era (as the strict test server has it).
_MODERN_ERROR_STATUS = {-32700: 400, -32600: 400, -32602: 400, -32020: 400, -32021: 400, -32022: 400, -32601: 404}
MAX_BODY = 4 * 1024 * 1024


class _Bench(demo.DemoServer):
    """The demo logic with static lists: no list-changed announcements."""

    def capabilities(self) -> dict:
        return {"tools": {"listChanged": False}, "resources": {}, "prompts": {}}

    def send(self, message: Any) -> None:  # pragma: no cover - nothing here sends unprompted
        raise RuntimeError("the fast HTTP server sends nothing outside an answer")


class _State:
    def __init__(self) -> None:
        self.modern = _Bench(era="modern", stdin=False, stdout=False)
        self.sessions: dict[str, _Bench] = {}
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "albedo-fast-bench/1"
    sys_version = ""
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # -- writing ----------------------------------------------------------------------

    def _answer(self, status: int, body: bytes = b"", extra: str = "") -> None:
        """Status line, headers and body in one write."""
        reason = self.responses.get(status, ("",))[0]
        head = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Length: {len(body)}\r\n"
            f"{'Content-Type: application/json' + chr(13) + chr(10) if body else ''}{extra}\r\n"
        )
        self.wfile.write(head.encode("latin-1") + body)

    def _json(self, status: int, message: Any, extra: str = "") -> None:
        self._answer(status, json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode(), extra)

    # -- methods ----------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 - http.server's names
        self._answer(405, extra="Allow: POST, DELETE\r\n")

    def do_DELETE(self) -> None:  # noqa: N802
        sid = self.headers.get("Mcp-Session-Id")
        with self.server.state.lock:
            known = self.server.state.sessions.pop(sid, None) if sid else None
        self._answer(200 if known is not None else 404)

    def do_POST(self) -> None:  # noqa: N802
        if self.path.split("?", 1)[0] != PATH:
            self._answer(404)
            return
        try:
            length = int(self.headers.get("Content-Length") or "")
        except ValueError:
            self._answer(411)
            return
        if length < 0 or length > MAX_BODY:
            self._answer(413)
            self.close_connection = True
            return
        raw = self.rfile.read(length)
        try:
            message = json.loads(raw)
        except (ValueError, RecursionError):
            self._json(400, {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
            return
        if not isinstance(message, dict):
            self._json(400, {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid Request"}})
            return
        method = message.get("method")
        if self._is_modern(message, method):
            answer = self.server.state.modern.handle(message)
            if answer is None:
                self._answer(202)
            elif "error" in answer:
                self._json(_MODERN_ERROR_STATUS.get(answer["error"].get("code"), 200), answer)
            else:
                self._json(200, answer)
            return
        self._legacy(message, method)

    def _is_modern(self, message: dict, method: Any) -> bool:
        header = self.headers.get("MCP-Protocol-Version")
        if header is not None:
            return header not in LEGACY_VERSIONS
        if method == "initialize":
            return False
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        return method == "server/discover" or (isinstance(meta, dict) and demo.META_VERSION in meta)

    def _legacy(self, message: dict, method: Any) -> None:
        state = self.server.state
        if method == "initialize":
            session = _Bench(era="legacy", stdin=False, stdout=False)
            answer = session.handle(message)
            sid = uuid.uuid4().hex
            if answer is not None and "result" in answer:
                with state.lock:
                    state.sessions[sid] = session
                self._json(200, answer, f"Mcp-Session-Id: {sid}\r\n")
            else:
                self._json(400, answer)
            return
        sid = self.headers.get("Mcp-Session-Id")
        if not sid:
            self._json(400, {"jsonrpc": "2.0", "id": message.get("id"),
                             "error": {"code": -32600, "message": "Bad Request: missing Mcp-Session-Id"}})
            return
        with state.lock:
            session = state.sessions.get(sid)
        if session is None:
            self._json(404, {"jsonrpc": "2.0", "id": message.get("id"),
                             "error": {"code": -32600, "message": "Session not found"}})
            return
        answer = session.handle(message)
        if answer is None:
            self._answer(202)
        else:
            self._json(200, answer)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, port: int, context: ssl.SSLContext | None) -> None:
        self.state = _State()
        self.context = context
        self.connections: dict[threading.Thread, Any] = {}
        super().__init__(("127.0.0.1", port), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """One thread per connection, remembered so that :meth:`close_connections` can end it."""
        thread = threading.Thread(target=self.process_request_thread, args=(request, client_address),
                                  name="fast-http-connection", daemon=True)
        with self.state.lock:
            self.connections = {t: s for t, s in self.connections.items() if t.is_alive()}
            self.connections[thread] = request
        thread.start()

    def close_connections(self, timeout: float = 5.0) -> None:
        """Shut every open connection down (its thread reads EOF and ends) and join the threads."""
        with self.state.lock:
            connections, self.connections = dict(self.connections), {}
        for sock in connections.values():
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed
        for thread in connections:
            thread.join(timeout)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        if self.context is not None:
            # The handshake happens on the first read, on the connection's thread.
            sock = self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address


class FastServer:
    """The server in this process, on a thread of its own."""

    def __init__(self, port: int = 0, cert: str | None = None, key: str | None = None) -> None:
        context = None
        if cert:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert, key)
        self.httpd = _Server(port, context)
        scheme = "https" if context is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}{PATH}"
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fast-http-server", daemon=True)
        self._thread.start()
        return self.url

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.httpd.close_connections()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> FastServer:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="fast stdlib streamable-HTTP MCP server (benchmarks)")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cert", default=None, help="PEM certificate: serve HTTPS")
    parser.add_argument("--key", default=None, help="PEM private key of --cert")
    parser.add_argument("--exit-on-eof", action="store_true", help="stop when stdin reaches EOF")
    opts = parser.parse_args(argv)
    server = FastServer(opts.port, opts.cert, opts.key)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    server.start()
    print(server.url, flush=True)
    if opts.exit_on_eof:
        threading.Thread(target=lambda: (sys.stdin.buffer.read(), done.set()), daemon=True).start()
    while not done.wait(0.5):
        pass
    server.stop()


if __name__ == "__main__":
    main()
