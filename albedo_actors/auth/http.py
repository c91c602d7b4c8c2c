"""The HTTP side of signing in: metadata GETs, registration and token POSTs.

One :class:`AuthHttp` per sign-in or refresh. It speaks HTTP/1.1 itself over one
connection per request (``http.client`` parses the answer), so that:

* **every exchange has one total deadline** (``timeout``, 10 s by default): the name
  lookup, the connection, TLS, sending, the status line, the headers and the body all
  count against it. Each blocking socket operation waits at most for the time that is
  left, so an answer trickled one byte at a time ends when the deadline does, not
  after one per-read timeout per byte;
* nothing of the environment applies: no proxies, no ``.netrc``, no cookies; a token
  request never goes anywhere but the URL we name;
* a redirect is never followed (a 3xx is an answer like any other, so a secret is
  never re-sent to another address);
* TLS is verified as the MCP server's entry says (``verify``: True for the bundle
  ``requests`` uses, a CA file or directory, or False), set up by
  :func:`albedo_actors.transport.tls.client_context`, as the MCP exchange's is;
* at most :data:`MAX_BODY` bytes of any answer are read;
* with a ``guard`` (:class:`~albedo_actors.auth.addresses.AddressGuard`), the target's
  addresses are resolved and checked first, and the connection goes to a checked
  address (the name is not looked up again, so DNS rebinding cannot move it); TLS
  still verifies the certificate against the host name.
"""

from __future__ import annotations

import io
import json
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

from ..wire.jsonrpc import Json, WireError, parse_line

if TYPE_CHECKING:
    # http.client (with the email package), ssl, socket and the address checks load
    # with the first exchange: a host whose servers never ask for OAuth never needs them.
    import http.client
    import socket
    import ssl

    from .addresses import AddressGuard

MAX_BODY = 64 * 1024
TIMEOUT_S = 10.0
USER_AGENT = "albedo-actors-oauth"
_CHUNK = 16 * 1024
# Characters left as they are in a request target; anything else (spaces, controls,
# non-ASCII) is percent-encoded, so nothing from a URL can break the request line.
_TARGET_SAFE = "!#$%&'()*+,/:;=?@[]~"

__all__ = ["AuthHttp", "AuthReply", "AuthHttpError", "MAX_BODY", "TIMEOUT_S"]


class AuthHttpError(Exception):
    """The request did not get an answer (connection, TLS, timeout, oversized body, refused address)."""

    def __init__(self, url: str, reason: str, *, transient: bool = True) -> None:
        super().__init__(f"{_short(url)}: {reason}")
        self.url = url
        self.reason = reason
        self.transient = transient


@dataclass(frozen=True)
class AuthReply:
    status: int
    content_type: str
    body: bytes
    location: str | None = None
    www_authenticate: str | None = None
    dpop_nonce: str | None = None  # RFC 9449 8: the server's DPoP-Nonce (unchecked server text)

    def json(self) -> Json:
        """The body as JSON, or None when it is not JSON (bounded as MCP messages are:
        strict UTF-8 and JSON, bounded nesting, no lone surrogates)."""
        try:
            return parse_line(self.body)
        except WireError:
            return None


def _short(url: str, limit: int = 160) -> str:
    url = str(url).split("?", 1)[0]
    return url if len(url) <= limit else url[: limit - 1] + "…"


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left; raises ``TimeoutError`` once there are none."""
        left = self.at - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline")
        return left


class _DeadlineReader(io.RawIOBase):
    """The socket's input, each ``recv`` bounded by the time left of the whole exchange."""

    def __init__(self, sock: socket.socket, deadline: _Deadline) -> None:
        super().__init__()
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self._sock.settimeout(self._deadline.left())
        return self._sock.recv_into(buffer)


class _ResponseSocket:
    """What ``http.client.HTTPResponse`` reads from: only ``makefile`` is asked for."""

    def __init__(self, sock: socket.socket, deadline: _Deadline) -> None:
        self._reader = io.BufferedReader(_DeadlineReader(sock, deadline), _CHUNK)

    def makefile(self, mode: str, *args: Any, **kwargs: Any) -> io.BufferedReader[_DeadlineReader]:
        return self._reader


class AuthHttp:
    """Bounded, redirect-free HTTP for the OAuth requests of one server (see the module docstring)."""

    def __init__(self, verify: bool | str = True, timeout: float = TIMEOUT_S, guard: AddressGuard | None = None) -> None:
        self._verify = verify
        self._timeout = timeout
        self._guard = guard
        self._tls: ssl.SSLContext | None = None
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None  # the exchange in progress, for abort()
        self._aborted = False

    def get(self, url: str, accept: str = "application/json", headers: dict[str, str] | None = None) -> AuthReply:
        return self._send("GET", url, {"Accept": accept, **(headers or {})}, None)

    def post_form(self, url: str, form: dict[str, str], headers: dict[str, str] | None = None) -> AuthReply:
        sent = {"Accept": "application/json", "Content-Type": "application/x-www-form-urlencoded"}
        sent.update(headers or {})
        return self._send("POST", url, sent, urlencode(form).encode("utf-8"))

    def post_json(self, url: str, document: Json, headers: dict[str, str] | None = None) -> AuthReply:
        sent = {"Accept": "application/json", "Content-Type": "application/json", **(headers or {})}
        return self._send("POST", url, sent, json.dumps(document).encode("utf-8"))

    def close(self) -> None:
        """Nothing is kept between requests; kept for the context-manager use."""

    def abort(self) -> None:
        """From any thread: end the exchange in progress now (its socket is shut down, so
        a blocked read returns at once) and refuse every later one. Its caller gets
        :class:`AuthHttpError`; a stopping owner never waits for a hung token endpoint."""
        with self._lock:
            self._aborted = True
            sock = self._sock
        if sock is not None:
            _shut(sock)

    def _held(self, sock: socket.socket | None) -> None:
        """``sock`` is the exchange's now (None: it ended); shut at once if aborted."""
        with self._lock:
            self._sock = sock
            aborted = self._aborted
        if aborted and sock is not None:
            _shut(sock)

    def __enter__(self) -> "AuthHttp":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- one exchange -----------------------------------------------------------------------

    def _send(self, method: str, url: str, headers: dict[str, str], body: bytes | None) -> AuthReply:
        import http.client  # first use (see the TYPE_CHECKING imports above)
        import socket
        import ssl

        from .addresses import AddressRefused, resolve

        deadline = _Deadline(self._timeout)
        scheme, host, port, netloc, target = self._target(url)
        sock: socket.socket | None = None
        try:
            if self._aborted:
                raise AuthHttpError(url, "the request was abandoned: its owner is stopping")
            try:
                if self._guard is not None:
                    self._guard.check_name(host)
                addresses = resolve(host, port, deadline.left())
                if self._guard is not None:
                    self._guard.check(host, addresses, deadline.at)
            except AddressRefused as exc:
                raise AuthHttpError(url, exc.reason, transient=False) from None
            sock = self._connect(addresses, deadline)
            self._held(sock)
            if scheme == "https":
                sock = self._wrap(sock, host, deadline)
                self._held(sock)
            sock.settimeout(deadline.left())
            sock.sendall(self._request(method, netloc, target, headers, body))
            response = http.client.HTTPResponse(_ResponseSocket(sock, deadline), method=method)  # type: ignore[arg-type]
            response.begin()
            return self._read(url, response)
        except AuthHttpError:
            raise
        except ssl.SSLError:
            raise AuthHttpError(url, "its TLS certificate was not accepted", transient=False) from None
        except (TimeoutError, socket.timeout):
            raise AuthHttpError(url, f"no answer within {self._timeout:g} s") from None
        except http.client.HTTPException as exc:
            raise AuthHttpError(url, f"broke off its answer ({type(exc).__name__})") from None
        except (OSError, ValueError) as exc:
            if self._aborted:
                raise AuthHttpError(url, "the request was abandoned: its owner is stopping") from None
            raise AuthHttpError(url, f"could not be reached ({type(exc).__name__})") from None
        finally:
            self._held(None)
            if sock is not None:
                try:
                    sock.close()
                except OSError:
                    pass

    def _target(self, url: str) -> tuple[str, str, int, str, str]:
        try:
            parts = urlsplit(url)
            port = parts.port
        except (ValueError, TypeError):
            raise AuthHttpError(str(url), "is not a valid URL", transient=False) from None
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise AuthHttpError(url, "is not an http(s) URL", transient=False)
        if "@" in parts.netloc:
            raise AuthHttpError(url, "holds user information, which albedo does not send", transient=False)
        host = parts.hostname
        try:
            host.encode("ascii")
        except UnicodeEncodeError:
            try:
                host = host.encode("idna").decode("ascii")
            except UnicodeError:
                raise AuthHttpError(url, "has a host name that cannot be encoded", transient=False) from None
        netloc = parts.netloc if parts.netloc.isascii() else (host + (f":{port}" if port else ""))
        if any(ord(c) < 0x21 or ord(c) == 0x7F for c in netloc):
            raise AuthHttpError(url, "has a host that cannot be sent", transient=False)
        target = quote(parts.path or "/", safe=_TARGET_SAFE)
        if parts.query:
            target += "?" + quote(parts.query, safe=_TARGET_SAFE)
        return scheme, host, port or (443 if scheme == "https" else 80), netloc, target

    def _connect(self, addresses: list[tuple[int, tuple]], deadline: _Deadline) -> socket.socket:
        import socket

        error: OSError | None = None
        for family, sockaddr in addresses:
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.settimeout(deadline.left())
                sock.connect(sockaddr)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return sock
            except TimeoutError:
                sock.close()
                raise
            except OSError as exc:
                sock.close()
                error = exc
        raise error or OSError("no address")

    def _wrap(self, sock: socket.socket, host: str, deadline: _Deadline) -> socket.socket:
        # The handshake is one call bounded by the socket timeout as a whole (CPython
        # keeps one deadline across its reads and writes), set to the time left.
        sock.settimeout(deadline.left())
        wrapped = self._context().wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
        wrapped.do_handshake()
        return wrapped

    def _context(self) -> ssl.SSLContext:
        from ..transport.tls import client_context  # first use (see the TYPE_CHECKING imports above)

        if self._tls is None:
            self._tls = client_context(self._verify)
        return self._tls

    @staticmethod
    def _request(method: str, netloc: str, target: str, headers: dict[str, str], body: bytes | None) -> bytes:
        sent = {"Host": netloc, "User-Agent": USER_AGENT, "Accept-Encoding": "identity", "Connection": "close"}
        sent.update(headers)
        if body is not None:
            sent["Content-Length"] = str(len(body))
        lines = [f"{method} {target} HTTP/1.1"]
        for name, value in sent.items():
            value = str(value)
            if any(c in name for c in ":\r\n\0 ") or any(c in value for c in "\r\n\0"):
                raise ValueError("a header cannot be sent")  # never reached with our own headers
            lines.append(f"{name}: {value}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head + (body or b"")

    @staticmethod
    def _read(url: str, response: http.client.HTTPResponse) -> AuthReply:
        declared = response.getheader("Content-Length")
        if declared is not None and declared.strip().isdigit() and int(declared) > MAX_BODY:
            raise AuthHttpError(url, f"answered with more than {MAX_BODY} bytes", transient=False)
        chunks, size = [], 0
        while True:
            chunk = response.read(_CHUNK)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_BODY:
                raise AuthHttpError(url, f"answered with more than {MAX_BODY} bytes", transient=False)
            chunks.append(chunk)
        challenges = response.msg.get_all("WWW-Authenticate") or []
        return AuthReply(
            status=response.status,
            content_type=response.getheader("Content-Type", "") or "",
            body=b"".join(chunks),
            location=response.getheader("Location"),
            www_authenticate=", ".join(challenges) if challenges else None,
            dpop_nonce=response.getheader("DPoP-Nonce"),
        )


def _shut(sock: socket.socket) -> None:
    import socket

    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # closed meanwhile
