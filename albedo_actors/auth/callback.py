"""The loopback listener that receives the OAuth authorization redirect.

``CallbackListener`` is single use. It binds ``127.0.0.1:33418`` (or, when
that port is busy, an ephemeral port; ``redirect_uri`` says which) and serves
HTTP on its own thread:

* only a request whose ``Host`` is its own (``127.0.0.1:PORT`` or
  ``localhost:PORT``) is answered at all, others get 421: a web page that
  rebinds its own name to 127.0.0.1 cannot reach it;
* only ``GET /callback`` is answered; other paths get 404, other methods 405
  (or 501 for unknown ones), each with a fixed plain body;
* a callback whose ``state`` is missing or differs from the expected one is
  answered 400 and ignored: the listener keeps waiting;
* the first valid callback's parameters (``code``, ``state``, ``iss``,
  ``error``, ``error_description``, those present) are the result;
* every page is fixed text (``text/plain``, ``Cache-Control: no-store``):
  nothing from the request is ever reflected, and nothing is logged;
* it closes after the first valid callback, after its ``lifetime`` runs out,
  on ``cancel()`` or on ``close()``; when ``wait()`` returns on the lifetime,
  or ``offer()`` returns True, the port is already closed;
* connections are served at once, each on its own thread (at most
  :data:`MAX_CONNECTIONS` at a time; more are closed unanswered), and each has
  :data:`REQUEST_TIMEOUT_S` in all to send its request: an idle or trickling
  local connection delays no other, and is cut when its time is up.

``offer(url)`` takes a callback URL the user pasted and races the listener;
the first valid one wins.

Cancellation: ``cancel()`` ends a sign-in in flight; ``wait()`` then returns
``None`` (as it does on a timeout) and ``cancelled`` is true, so the caller
can tell the two apart. No exception is raised.
"""

from __future__ import annotations

import errno
import hmac
import http.server
import socket
import threading
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 33418
CALLBACK_PATH = "/callback"
# How long the listener waits for the browser before closing on its own.
DEFAULT_LIFETIME_S = 300.0
# How long one connection may take, in all, to send its request and get its answer.
REQUEST_TIMEOUT_S = 5.0
# Connections served at once; more are closed without an answer.
MAX_CONNECTIONS = 64
# How long close() waits for the serving thread and the connection threads.
JOIN_TIMEOUT_S = 2.0
# How often the serving thread checks whether it should stop.
POLL_S = 0.05

RESULT_KEYS = ("code", "state", "iss", "error", "error_description")

_BODY_OK = b"Sign-in received. You can close this window and return to the application.\n"
_BODY_BAD_STATE = b"This sign-in response was not expected. It was ignored.\n"
_BODY_NOT_FOUND = b"Not found.\n"
_BODY_NOT_ALLOWED = b"Method not allowed.\n"
_BODY_ERROR = b"Bad request.\n"
_BODY_MISDIRECTED = b"This listener does not serve that host.\n"


def _parse_callback(query: str, expected_state: str) -> dict[str, str] | None:
    """The result parameters of a callback query, or None if it is not valid.

    Valid means: exactly one ``state`` equal to the expected one, at most one
    value for each result key, and a ``code`` or an ``error``.
    """
    try:
        params = parse_qs(query, keep_blank_values=True, strict_parsing=False, max_num_fields=64)
    except ValueError:
        return None
    result: dict[str, str] = {}
    for key in RESULT_KEYS:
        values = params.get(key)
        if values is None:
            continue
        if len(values) != 1:
            return None
        result[key] = values[0]
    state = result.get("state")
    if state is None or not hmac.compare_digest(state.encode(), expected_state.encode()):
        return None
    if "code" not in result and "error" not in result:
        return None
    return result


class _Server(http.server.HTTPServer):
    # SO_REUSEADDR lets a new sign-in bind the fixed port while an earlier
    # one's connections are in TIME_WAIT; a port someone listens on (or has
    # bound without SO_REUSEADDR) still refuses the bind. No SO_REUSEPORT.
    allow_reuse_address = True

    def __init__(self, address, listener: "CallbackListener"):
        self.listener = listener
        self._conns_lock = threading.Lock()
        # connection socket -> [its thread, the monotonic time it must be done by, answering yet]
        self._conns: dict[socket.socket, list[Any]] = {}
        super().__init__(address, _Handler)

    def handle_error(self, request, client_address):  # pragma: no cover - never print request data
        pass

    def process_request(self, request, client_address):
        """Serve the connection on its own thread, so no connection waits for another."""
        with self._conns_lock:
            if len(self._conns) >= MAX_CONNECTIONS:
                full = True
            else:
                full = False
                thread = threading.Thread(target=self._serve_one, args=(request, client_address),
                                          name=f"oauth-callback-conn-{self.server_address[1]}", daemon=True)
                self._conns[request] = [thread, time.monotonic() + REQUEST_TIMEOUT_S, False]
        if full:
            self.shutdown_request(request)
            return
        thread.start()

    def _serve_one(self, request, client_address) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # a client that hung up or was cut off: nothing to report
            pass
        finally:
            self.shutdown_request(request)
            with self._conns_lock:
                self._conns.pop(request, None)

    def answering(self, conn) -> None:
        """``conn`` has sent its request and is being answered (close() lets it finish)."""
        with self._conns_lock:
            if conn in self._conns:
                self._conns[conn][2] = True

    def cut_overdue(self, now: float | None = None, idle: bool = False) -> None:
        """Shut down connections past their deadline (with ``idle``, also every one not being answered)."""
        now = time.monotonic() if now is None else now
        with self._conns_lock:
            overdue = [conn for conn, (_thread, deadline, answering) in self._conns.items()
                       if deadline <= now or (idle and not answering)]
        for conn in overdue:
            try:
                conn.shutdown(socket.SHUT_RDWR)  # wakes its thread's read; the thread then closes it
            except OSError:
                pass

    def join_connections(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._conns_lock:
            threads = [entry[0] for entry in self._conns.values()]
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))


class _Handler(http.server.BaseHTTPRequestHandler):
    server_version = "albedo"
    sys_version = ""
    timeout = REQUEST_TIMEOUT_S
    protocol_version = "HTTP/1.0"
    server: _Server  # the listener's server (socketserver sets it)

    def log_message(self, format, *args):  # noqa: A002 - the code and state must never be logged
        pass

    def parse_request(self):
        parsed = super().parse_request()
        if parsed:  # the whole request is in: from here on it is being answered
            self.server.answering(self.connection)
        return parsed

    def _reply(self, status: int, body: bytes, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Pragma", "no-cache")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            try:
                self.wfile.write(body)
            except OSError:
                pass
        self.close_connection = True

    def send_error(self, code, message=None, explain=None):
        # The default page quotes the request line; this one is fixed text.
        body = {404: _BODY_NOT_FOUND, 405: _BODY_NOT_ALLOWED}.get(code, _BODY_ERROR)
        if not hasattr(self, "command") or self.command is None:
            self.command = "GET"
        self._reply(code, body)

    def _own_host(self) -> bool:
        """Whether the request names this listener as its ``Host`` (RFC 9110 7.2), and is origin-form."""
        host = (self.headers.get("Host") or "").strip().lower()
        port = self.server.server_port
        own = {f"127.0.0.1:{port}", f"localhost:{port}", f"{self.server.listener._host.lower()}:{port}"}
        if host not in own or len(self.headers.get_all("Host") or []) != 1:
            return False
        return self.path.startswith("/")  # an absolute-form target names some other authority

    def do_GET(self):
        if not self._own_host():
            self._reply(421, _BODY_MISDIRECTED)
            return
        try:
            target = urlsplit(self.path)
        except ValueError:
            self._reply(400, _BODY_ERROR)
            return
        if target.path != CALLBACK_PATH:
            self._reply(404, _BODY_NOT_FOUND)
            return
        if self.server.listener._accept(target.query):
            self._reply(200, _BODY_OK)
        else:
            self._reply(400, _BODY_BAD_STATE)

    def _not_allowed(self):
        if not self._own_host():
            self._reply(421, _BODY_MISDIRECTED)
            return
        self._reply(405, _BODY_NOT_ALLOWED, {"Allow": "GET"})

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_TRACE = do_CONNECT = _not_allowed


class CallbackListener:
    """A single-use loopback HTTP listener for one OAuth authorization redirect.

    ``CallbackListener(state)`` binds and starts serving at once; use it as a
    context manager (or call ``close()``) so the thread and socket are gone
    afterwards. ``port=0`` asks for an ephemeral port directly.
    """

    def __init__(
        self,
        expected_state: str,
        *,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        lifetime: float = DEFAULT_LIFETIME_S,
    ):
        if not expected_state:
            raise ValueError("the expected state must not be empty")
        self._expected_state = expected_state
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._stop = threading.Event()
        self._result: dict[str, str] | None = None
        self._cancelled = False
        self._timed_out = False
        self._deadline = time.monotonic() + lifetime
        self._server = self._bind(host, port)
        self._port = self._server.server_address[1]
        self._host = host
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name=f"oauth-callback-{self._port}", daemon=True)
        self._thread.start()

    # --- binding ---------------------------------------------------------

    def _bind(self, host: str, port: int) -> _Server:
        try:
            return _Server((host, port), self)
        except OSError as exc:
            if port == 0 or exc.errno not in (errno.EADDRINUSE, errno.EACCES):
                raise
        # The fixed port is busy: an ephemeral one (the client registers again).
        return _Server((host, 0), self)

    # --- public API --------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def redirect_uri(self) -> str:
        return f"http://{self._host}:{self._port}{CALLBACK_PATH}"

    @property
    def fallback(self) -> bool:
        """True when the listener is not on the default port."""
        return self._port != DEFAULT_PORT

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def timed_out(self) -> bool:
        """True when the listener closed because its lifetime ran out."""
        return self._timed_out

    @property
    def result(self) -> dict[str, str] | None:
        with self._lock:
            return None if self._result is None else dict(self._result)

    def wait(self, timeout: float | None = None) -> dict[str, str] | None:
        """The callback's parameters, or None on timeout, cancel or close.

        ``timeout=None`` waits at most until the listener's own lifetime ends.
        """
        if timeout is None:
            timeout = max(0.0, self._deadline - time.monotonic()) + 1.0
        self._done.wait(timeout)
        return self.result

    def offer(self, url: str) -> bool:
        """Accept a callback URL pasted by the user; True if it won the race."""
        if not isinstance(url, str):
            return False
        try:
            parts = urlsplit(url.strip())
        except ValueError:
            return False
        query = parts.query
        if not query and "?" not in url and "=" in url:
            # Only the query string was pasted.
            query = url.strip().lstrip("?")
        if not self._accept(query):
            return False
        # A pasted URL won: the port is closed when offer() returns, so the browser's
        # late redirect finds nothing rather than a listener that has stopped caring.
        self._stop_serving()
        return True

    def cancel(self) -> None:
        """End the sign-in: ``wait`` returns None and ``cancelled`` is true."""
        with self._lock:
            if self._done.is_set():
                return
            self._cancelled = True
            self._done.set()
        self._stop.set()

    def close(self) -> None:
        """Stop serving and close the socket; the thread is joined (bounded)."""
        with self._lock:
            if not self._done.is_set():
                self._done.set()
        self._stop_serving()
        # Connections still sending (idle, trickling) are cut; one being answered (the
        # browser's, whose page is being written) is let finish, within its own deadline.
        self._server.cut_overdue(idle=True)
        self._server.join_connections(JOIN_TIMEOUT_S)

    def _stop_serving(self) -> None:
        """Stop the serving thread and close the listening socket before returning."""
        self._stop.set()
        # Wake the serving thread now rather than at its next poll: shutting the
        # listening socket down makes its select() return and accept() fail.
        try:
            self._server.socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self._thread is not threading.current_thread():
            self._thread.join(JOIN_TIMEOUT_S)
        self._close_socket()

    def __enter__(self) -> "CallbackListener":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- internals -------------------------------------------------------

    def _accept(self, query: str) -> bool:
        result = _parse_callback(query, self._expected_state)
        if result is None:
            return False
        with self._lock:
            if self._done.is_set():
                return False
            self._result = result
            self._done.set()
        self._stop.set()
        return True

    def _serve(self) -> None:
        server = self._server
        server.timeout = POLL_S
        try:
            while not self._stop.is_set():
                if time.monotonic() >= self._deadline:
                    # The socket closes before waiters wake, so a caller whose wait()
                    # returned on the lifetime finds nothing listening on the port.
                    self._close_socket()
                    with self._lock:
                        if not self._done.is_set():
                            self._timed_out = True
                            self._done.set()
                    break
                server.handle_request()
                server.cut_overdue()
        finally:
            self._close_socket()

    def _close_socket(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._server.server_close()
        except OSError:
            pass
