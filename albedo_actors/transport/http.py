"""Blocking HTTP: pooled connections to one MCP endpoint, one-shot requests to any URL,
bounded bodies, abortable reads.

The call path runs on the standard library's ``http.client``, the floor of any Python
HTTP client, with a keep-alive pool of its own (a list of idle connections). Both
``requests`` and the ``urllib3`` pool under it were measured on this path: ``requests``
costs about three times the CPU of ``http.client`` per request and ``urllib3`` about
twice, and what they add (redirects, retries, proxies from the environment, ``.netrc``)
is exactly what this module must not do.

- :class:`HttpTransport`: pooled HTTP to one MCP endpoint (the call path).
- :class:`DirectHttp`: one request to any URL on a connection of its own, never pooled,
  made to the addresses the caller resolved and checked (the OAuth requests of
  :mod:`albedo_actors.auth.http`, whose address guard must not be bypassed by a second
  lookup); the URL's host name still goes into SNI, the certificate check and ``Host``.
  A 3xx is an answer like any other there: its caller refuses to follow it.

- Nothing follows a redirect: :class:`HttpTransport` refuses a 3xx with its ``Location``
  named; :class:`DirectHttp` hands it back as an answer, for its caller to refuse.
- Nothing reads the environment: no proxy, no ``.netrc``; no body, header or token
  reaches any origin but the configured one.
- TLS is verified (certificate and host name) against the configured trust store, or
  the certifi bundle (the Mozilla store ``requests`` uses too): :mod:`.tls`, the one
  TLS setup the OAuth requests share.
- An idle connection the server has closed is noticed before reuse and replaced; a
  request is never re-sent.
- Every exchange runs on the caller's thread and can be aborted from any other thread:
  :class:`Exchange` holds the socket its request is written to, and ``abort()`` shuts it
  down, which ends a blocked read at once. Its deadline bounds the whole exchange, not
  each read (for :class:`DirectHttp`, the connection, TLS and the status line and
  headers too: an answer trickled a byte at a time ends when the deadline does).
- The request line, headers and body go out in one ``send()``: one TCP segment for a
  small request.

Knows nothing of JSON-RPC ids or actors; :mod:`albedo_actors.connection.http` does.
"""

from __future__ import annotations

import http.client
import io
import select
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from ..wire.deadline import Bound
from .tls import client_context
from ..wire.headers import field_value_problem
from ..wire.jsonrpc import MAX_MESSAGE_BYTES, Json, WireError, parse_line
from ..wire.sse import SseEvent, SseParser, SseTooLarge

CONNECT_TIMEOUT = 10.0
READ_CHUNK = 1 << 16
POOL_SIZE = 64  # idle connections kept; more may be open at once, and are closed when done
USER_AGENT = "albedo-actors"
BASE_HEADERS = {"Accept-Encoding": "identity", "User-Agent": USER_AGENT}

_LEGAL_NAMES: set[str] = set()  # header names http.client has accepted once


# What an HttpFailed is, for a caller that words its own messages (HttpFailed.kind).
URL = "url"  # the URL cannot be requested (Target.of); nothing was looked up or sent
HEADER = "header"  # a header value cannot be sent; nothing was sent
TIMEOUT = "timeout"  # the deadline or read timeout passed (timed_out is True too)
TLS = "tls"  # TLS failed: the certificate was not accepted, or the handshake broke
BROKEN = "broken"  # the answer was not HTTP, or was cut off
UNREACHABLE = "unreachable"  # the connection could not be made, or broke
ABORTED = "aborted"  # Exchange.abort() ended it
TOO_LARGE = "too_large"  # the body was over its limit


class HttpFailed(Exception):
    """The exchange failed before a usable answer; ``sent`` tells if the body may have left.

    ``kind`` is one of the names above (or "" where no caller asks), ``cause`` the name
    of the library exception it was translated from ("" if none).
    """

    def __init__(self, reason: str, *, sent: bool, timed_out: bool = False, kind: str = "", cause: str = "") -> None:
        super().__init__(reason)
        self.sent = sent
        self.timed_out = timed_out  # the exchange's deadline or read timeout passed
        self.kind = TIMEOUT if timed_out and not kind else kind
        self.cause = cause


class Exchange:
    """One HTTP exchange that another thread may abort.

    ``deadline`` (the call's :class:`~albedo_actors.wire.deadline.Bound`, or None) bounds
    the whole exchange, not each read: a server that drips its answer a byte at a time
    still ends at it. Its instant is read again before each read, so a deadline that
    progress moves is followed.
    """

    def __init__(self, deadline: Bound | None = None) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self.aborted = False
        self.sent = False  # the request was handed to a socket
        self.deadline = deadline
        self.idle_timeout: float | None = None  # a read's own bound, apart from the deadline (send's read_timeout)

    def attach(self, sock: socket.socket | None) -> None:
        with self._lock:
            self._sock = sock
            self.sent = True
            if self.aborted:
                _shutdown(sock)

    def abort(self) -> None:
        """Interrupt the exchange now, whatever it is blocked on."""
        with self._lock:
            self.aborted = True
            _shutdown(self._sock)

    def unbind(self) -> None:
        """From now on only the caller's wait bounds this exchange (a worker reads on):
        no deadline, and its socket's reads no longer time out at the one it had (a
        stream read with the caller's first timeout raced the caller's moved deadline)."""
        with self._lock:
            self.deadline = None
            if self._sock is not None:
                try:
                    self._sock.settimeout(self.idle_timeout)
                except OSError:
                    pass  # closed meanwhile: the read reports it

    def remaining(self) -> float | None:
        """Seconds left before the deadline (None: no deadline).

        Raises:
            HttpFailed: the deadline has passed.
        """
        deadline = self.deadline
        if deadline is None:
            return None
        left = deadline.at - time.monotonic()
        if left <= 0:
            raise HttpFailed("no answer in time", sent=self.sent, timed_out=True)
        return left

    def bound_read(self) -> None:
        """Before a read: the socket waits no longer than the deadline allows."""
        if self.deadline is not None and self._sock is not None:
            left = self.remaining()
            try:
                self._sock.settimeout(left)
            except OSError:
                pass  # closed meanwhile: the read reports it


def _shutdown(sock: socket.socket | None) -> None:
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class _Held:
    """http.client's connection (which sets TCP_NODELAY), writing the request's head and
    body in one ``send()``: http.client sends the head, then the body, two segments."""

    def _send_output(self, message_body: Any = None, encode_chunked: bool = False) -> None:
        buffer: list[bytes] = self._buffer  # type: ignore[attr-defined]
        buffer.extend((b"", b""))
        head = b"\r\n".join(buffer)
        del buffer[:]
        if isinstance(message_body, bytes):
            head += message_body
        self.send(head)  # type: ignore[attr-defined]

    def putheader(self, header: str | bytes, *values: Any) -> None:
        # HttpTransport.send checked every value; names are checked once each. The rest
        # is http.client's putheader without its per-call encoding and regexes.
        if len(values) == 1 and type(values[0]) is str and header in _LEGAL_NAMES:
            self._buffer.append(f"{header}: {values[0]}".encode("latin-1"))  # type: ignore[attr-defined]
            return
        super().putheader(header, *values)  # type: ignore[misc]
        if isinstance(header, str) and len(_LEGAL_NAMES) < 256:
            _LEGAL_NAMES.add(header)  # it passed http.client's checks


class _Plain(_Held, http.client.HTTPConnection):
    pass


class _Tls(_Held, http.client.HTTPSConnection):
    pass


class Reply:
    """An answer whose body has not been read yet. Close it (or read it to the end)."""

    __slots__ = ("status", "headers", "response", "exchange", "_release")

    def __init__(self, status: int, headers: dict[str, str], response: http.client.HTTPResponse, exchange: Exchange,
                 release: Any = None) -> None:
        self.status = status
        self.headers = headers  # lower-case names
        self.response = response
        self.exchange = exchange
        self._release = release  # called with True when the connection may be reused

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    @property
    def is_sse(self) -> bool:
        return self.content_type == "text/event-stream"

    def body(self, limit: int = MAX_MESSAGE_BYTES) -> bytes:
        """The whole body, at most ``limit`` bytes, by the exchange's deadline.

        Raises:
            HttpFailed: larger than the limit, past the deadline, or the connection broke.
        """
        declared = self.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            self.close()
            raise HttpFailed(f"sent a body of {int(declared)} bytes, over the {_size(limit)} limit", sent=True,
                             kind=TOO_LARGE)
        exchange = self.exchange
        response = self.response
        chunks, size = [], 0
        try:
            while True:
                exchange.bound_read()
                left = response.length  # None: chunked, or until the connection closes
                if left == 0:
                    response.read()  # nothing left: http.client marks the body complete
                    break
                chunk = response.read1(READ_CHUNK if left is None else min(left, READ_CHUNK))
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    raise HttpFailed(f"sent a body of more than {_size(limit)}, over the limit", sent=True, kind=TOO_LARGE)
                chunks.append(chunk)
        except HttpFailed:
            raise
        except TimeoutError:
            raise HttpFailed("no answer in time", sent=True, timed_out=True) from None
        except (http.client.HTTPException, OSError, ValueError) as exc:
            raise _broke(exchange, exc) from None
        finally:
            self.close()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def json(self) -> Json:
        """The body as one JSON value (bounded as :func:`parse_line` bounds it).

        Raises:
            HttpFailed, WireError.
        """
        return parse_line(self.body())

    def events(self, parser: SseParser) -> Iterator[SseEvent]:
        """The SSE events of the body as they arrive; ends when the stream ends.

        An event cut off by the end of the stream is never delivered.

        Raises:
            HttpFailed: the stream broke or an event was over the size limit.
        """
        response = self.response
        try:
            while True:
                chunk = response.read1(READ_CHUNK)
                if not chunk:
                    break
                yield from parser.feed(chunk)
            parser.close()
        except SseTooLarge as exc:
            raise HttpFailed(f"sent an SSE event {exc}", sent=True) from None
        except (http.client.HTTPException, OSError, ValueError) as exc:
            raise HttpFailed(_broken(self.exchange, exc), sent=True) from None
        finally:
            self.close()

    def close(self) -> None:
        """Done with the answer: a connection whose body was read whole goes back to the
        pool; one that was not is closed (its unread rest cannot be trusted)."""
        release, self._release = self._release, None
        if release is not None:
            response = self.response
            reusable = response.isclosed() and not response.will_close and not self.exchange.aborted
            if not reusable:
                response.close()
            release(reusable)


def _broken(exchange: Exchange, exc: Exception) -> str:
    if exchange.aborted:
        return "the exchange was closed by the client"
    return f"the connection broke ({type(exc).__name__})"


def _broke(exchange: Exchange, exc: Exception) -> HttpFailed:
    """The exchange broke after its request left: ``exc`` as an :class:`HttpFailed`."""
    return HttpFailed(_broken(exchange, exc), sent=True, kind=_kind(exchange, exc), cause=type(exc).__name__)


def _kind(exchange: Exchange, exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):  # a handshake or TLS read that abort() cut is no certificate's fault
        return ABORTED if exchange.aborted else TLS
    if isinstance(exc, TimeoutError):
        return TIMEOUT
    if isinstance(exc, http.client.HTTPException):
        return BROKEN
    return ABORTED if exchange.aborted else UNREACHABLE


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit} bytes"


class HttpTransport:
    """Pooled HTTP to one endpoint URL. Thread-safe; close() once."""

    def __init__(self, url: str, verify: bool | str = True, pool_size: int = POOL_SIZE) -> None:
        self.url = url
        parts = urllib.parse.urlsplit(url)
        self._target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._host = parts.hostname or ""
        self._port = parts.port
        self._tls: ssl.SSLContext | None = None
        if parts.scheme == "https":
            # Always verified: ``verify`` names the trust store (a PEM file), or is the
            # certifi bundle; there is no way to turn verification off.
            self._tls = client_context(verify if isinstance(verify, str) else True)
        self._pool_size = pool_size
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    def send(
        self,
        method: str,
        headers: Mapping[str, str | bytes],
        exchange: Exchange,
        *,
        body: bytes | None = None,
        read_timeout: float | None = None,
    ) -> Reply:
        """Send one request and return its reply once the status line and headers are in.

        Redirects are refused, never followed. A header value may be ``str`` (sent as
        Latin-1) or ``bytes`` (sent as they are). The read waits ``read_timeout``
        seconds at most, and never past the exchange's deadline.

        Raises:
            HttpFailed: no connection, aborted, a redirect, the connection broke, past
                the deadline, or a header value that cannot go into an HTTP header
                (nothing is sent then).
        """
        for name, value in headers.items():
            # Checked here, not left to http.client: it would raise UnicodeEncodeError
            # for a non-Latin-1 str and ValueError only for some CR/LF, and send other
            # controls. The value itself is never quoted: it may be a credential.
            problem = field_value_problem(value)
            if problem is not None:
                raise HttpFailed(f"the {name} header value {problem}, so it cannot be sent", sent=False)
        if exchange.aborted:
            raise HttpFailed("the exchange was closed by the client", sent=False)
        exchange.idle_timeout = read_timeout
        left = exchange.remaining()
        if left is not None:
            read_timeout = left if read_timeout is None else min(left, read_timeout)
        conn = self._connection(min(CONNECT_TIMEOUT, left) if left is not None else CONNECT_TIMEOUT, exchange)
        try:
            conn.sock.settimeout(read_timeout)
            conn.putrequest(method, self._target, skip_accept_encoding=True)
            for name, value in BASE_HEADERS.items():
                conn.putheader(name, value)
            for name, value in headers.items():
                conn.putheader(name, value)
            if body is not None or method == "POST":
                conn.putheader("Content-Length", str(len(body or b"")))
            conn.endheaders(body)
            response = conn.getresponse()
        except BaseException as exc:
            conn.close()
            if isinstance(exc, TimeoutError):
                if exchange.deadline is not None:
                    raise HttpFailed("no answer in time", sent=True, timed_out=True) from None
                raise HttpFailed(f"no answer within {read_timeout:g} s", sent=True, timed_out=True) from None
            if isinstance(exc, (ValueError, UnicodeError)) and not exchange.aborted:  # writing the request
                raise HttpFailed(f"the request could not be written ({type(exc).__name__})", sent=exchange.sent) from None
            if isinstance(exc, (http.client.HTTPException, OSError, ValueError)):
                raise HttpFailed(_broken(exchange, exc), sent=True) from None
            raise
        headers_in: dict[str, str] = {}
        for name, value in response.getheaders():
            key = name.lower()
            # One value a name; repeated fields joined with ", " (RFC 9110 5.3).
            headers_in[key] = f"{headers_in[key]}, {value}" if key in headers_in else value
        status = response.status
        reply = Reply(status, headers_in, response, exchange, lambda reusable: self._release(conn, reusable))
        if 300 <= status < 400:
            reply.close()
            where = headers_in.get("location", "elsewhere")
            raise HttpFailed(
                f"answered {status} redirecting to {where[:120]}; redirects are not followed: "
                "put the final URL in extensions.json",
                sent=True,
            )
        return reply

    def _connection(self, connect_timeout: float, exchange: Exchange) -> http.client.HTTPConnection:
        """An idle connection that is still open, or a new one; attached to ``exchange``."""
        while True:
            with self._lock:
                if self._closed:
                    raise HttpFailed("the exchange was closed by the client", sent=False)
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                break
            if not _dropped(conn.sock):
                exchange.attach(conn.sock)
                return conn
            conn.close()  # the server closed it while idle (or sent what it must not)
        conn = (_Tls(self._host, self._port, timeout=connect_timeout, context=self._tls) if self._tls is not None
                else _Plain(self._host, self._port, timeout=connect_timeout))
        try:
            conn.connect()
        except BaseException as exc:
            conn.close()
            if isinstance(exc, TimeoutError):
                # At the exchange's deadline (it bounded the connect) this is its timeout.
                raise HttpFailed(f"could not connect within {connect_timeout:g} s", sent=False,
                                 timed_out=connect_timeout < CONNECT_TIMEOUT) from None
            if isinstance(exc, (OSError, http.client.HTTPException, ValueError)):
                raise HttpFailed(_connection_reason(exc), sent=False) from None
            raise
        exchange.attach(conn.sock)
        return conn

    def _release(self, conn: http.client.HTTPConnection, reusable: bool) -> None:
        if reusable:
            with self._lock:
                if not self._closed and len(self._idle) < self._pool_size:
                    self._idle.append(conn)
                    return
        conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


# Characters left as they are in a request target; anything else (spaces, controls,
# non-ASCII) is percent-encoded, so nothing from a URL can break the request line.
_TARGET_SAFE = "!#$%&'()*+,/:;=?@[]~"


@dataclass(frozen=True)
class Target:
    """Where one :class:`DirectHttp` request goes, parsed and checked before any lookup."""

    scheme: str  # "http" or "https"
    host: str  # ASCII (IDNA): what is looked up, sent as SNI and checked in the certificate
    port: int
    netloc: str  # the Host header
    path: str  # the request target, percent-encoded

    @classmethod
    def of(cls, url: str) -> Target:
        """The target of ``url``.

        Raises:
            HttpFailed: (kind ``URL``) not an http(s) URL, user information in it, or a
                host that cannot be encoded or sent.
        """
        try:
            parts = urllib.parse.urlsplit(url)
            port = parts.port
        except (ValueError, TypeError):
            raise _unusable("is not a valid URL") from None
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise _unusable("is not an http(s) URL")
        if "@" in parts.netloc:
            raise _unusable("holds user information, which albedo does not send")
        host = parts.hostname
        try:
            host.encode("ascii")
        except UnicodeEncodeError:
            try:
                host = host.encode("idna").decode("ascii")
            except UnicodeError:
                raise _unusable("has a host name that cannot be encoded") from None
        netloc = parts.netloc if parts.netloc.isascii() else (host + (f":{port}" if port else ""))
        if any(ord(c) < 0x21 or ord(c) == 0x7F for c in netloc):
            raise _unusable("has a host that cannot be sent")
        path = urllib.parse.quote(parts.path or "/", safe=_TARGET_SAFE)
        if parts.query:
            path += "?" + urllib.parse.quote(parts.query, safe=_TARGET_SAFE)
        return cls(scheme, host, port or (443 if scheme == "https" else 80), netloc, path)


def _unusable(reason: str) -> HttpFailed:
    return HttpFailed(reason, sent=False, kind=URL)


class DirectHttp:
    """One request to any URL on a connection of its own (see the module docstring).

    Nothing is kept between requests but the TLS context (made at the first HTTPS
    request). ``verify`` is the trust store as :func:`.tls.client_context` takes it; False
    (nothing checked) only where a configuration says so for an OAuth endpoint.
    Thread-safe: each request is its own connection.
    """

    def __init__(self, verify: bool | str = True) -> None:
        self._verify = verify
        self._tls: ssl.SSLContext | None = None
        self._lock = threading.Lock()

    def send(
        self,
        method: str,
        target: Target,
        headers: Mapping[str, str],
        exchange: Exchange,
        *,
        addresses: Sequence[tuple[int, tuple[Any, ...]]],
        body: bytes | None = None,
    ) -> Reply:
        """Send one request to ``target`` and return its reply once the status line and
        headers are in (a 3xx too: nothing is followed). The connection goes to the first
        of ``addresses`` (``(family, sockaddr)``, as the caller resolved and checked them)
        that answers; the name is not looked up again. ``Host`` comes first, from the URL,
        and ``Content-Length`` last, with a body; ``headers`` go between, as they are.
        Everything, the connection and TLS included, ends at the exchange's deadline;
        the reply's body is read by the same deadline (``reply.body(limit)``).

        Raises:
            HttpFailed: its ``kind`` says why: ``HEADER``, ``ABORTED``, ``TIMEOUT``,
                ``TLS``, ``BROKEN`` or ``UNREACHABLE``.
        """
        for name, value in headers.items():
            problem = field_value_problem(value)
            if problem is not None:
                raise HttpFailed(f"the {name} header value {problem}, so it cannot be sent", sent=False, kind=HEADER)
        if exchange.aborted:
            raise HttpFailed("the exchange was closed by the client", sent=False, kind=ABORTED)
        conn: _Direct | None = None
        try:
            tls = self._context() if target.scheme == "https" else None
            conn = _Direct(target, addresses, tls, exchange)
            conn.connect()
            conn.putrequest(method, target.path, skip_host=True, skip_accept_encoding=True)
            conn.putheader("Host", target.netloc)
            for name, value in headers.items():
                conn.putheader(name, value)
            if body is not None:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            # Read through the deadline: each read waits at most for the time left.
            response = http.client.HTTPResponse(_BoundSocket(conn.sock, exchange), method=method)  # type: ignore[arg-type]
            response.begin()
        except BaseException as exc:
            if conn is not None:
                conn.close()
            if isinstance(exc, HttpFailed) or not isinstance(exc, (http.client.HTTPException, OSError, ValueError)):
                raise
            kind = _kind(exchange, exc)
            raise HttpFailed(_broken(exchange, exc), sent=exchange.sent, timed_out=kind == TIMEOUT, kind=kind,
                             cause=type(exc).__name__) from None
        headers_in: dict[str, str] = {}
        for name, value in response.getheaders():
            key = name.lower()
            headers_in[key] = f"{headers_in[key]}, {value}" if key in headers_in else value  # RFC 9110 5.3
        done = conn

        def release(reusable: bool) -> None:
            done.close()  # never pooled

        return Reply(response.status, headers_in, response, exchange, release)

    def _context(self) -> ssl.SSLContext:
        with self._lock:
            if self._tls is None:
                self._tls = client_context(self._verify)
            return self._tls


class _Direct(_Held, http.client.HTTPConnection):
    """One connection to checked addresses; TLS names the URL's host (SNI, certificate)."""

    def __init__(self, target: Target, addresses: Sequence[tuple[int, tuple[Any, ...]]],
                 tls: ssl.SSLContext | None, exchange: Exchange) -> None:
        super().__init__(target.host, target.port)
        self._addresses = addresses
        self._tls_context = tls
        self._exchange = exchange

    def connect(self) -> None:
        exchange = self._exchange
        sock = _connect_to(self._addresses, exchange)
        self.sock = sock
        exchange.attach(sock)
        if self._tls_context is not None:
            # The handshake is one call bounded by the socket timeout as a whole (CPython
            # keeps one deadline across its reads and writes), set to the time left.
            sock.settimeout(_left(exchange))
            wrapped = self._tls_context.wrap_socket(sock, server_hostname=self.host, do_handshake_on_connect=False)
            self.sock = wrapped
            exchange.attach(wrapped)
            wrapped.do_handshake()
        self.sock.settimeout(_left(exchange))  # for sending the request


def _left(exchange: Exchange) -> float:
    left = exchange.remaining()
    return CONNECT_TIMEOUT if left is None else left


def _connect_to(addresses: Sequence[tuple[int, tuple[Any, ...]]], exchange: Exchange) -> socket.socket:
    """A connected socket to the first of ``addresses`` that answers, by the deadline.

    Raises:
        OSError: none could be reached (TimeoutError: the deadline passed), HttpFailed.
    """
    error: OSError | None = None
    for family, sockaddr in addresses:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(_left(exchange))
            sock.connect(sockaddr)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except TimeoutError:
            sock.close()
            raise
        except OSError as exc:
            sock.close()
            error = exc
        except BaseException:
            sock.close()
            raise
    raise error or OSError("no address")


class _BoundReader(io.RawIOBase):
    """A socket's input, each ``recv`` bounded by the time left of the exchange."""

    def __init__(self, sock: socket.socket, exchange: Exchange) -> None:
        super().__init__()
        self._sock = sock
        self._exchange = exchange

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._exchange.remaining()
        if left is not None:
            self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


class _BoundSocket:
    """What ``http.client.HTTPResponse`` reads from: only ``makefile`` is asked for."""

    def __init__(self, sock: socket.socket, exchange: Exchange) -> None:
        self._reader = io.BufferedReader(_BoundReader(sock, exchange), 16 * 1024)

    def makefile(self, mode: str, *args: Any, **kwargs: Any) -> io.BufferedReader[_BoundReader]:
        return self._reader


def _dropped(sock: socket.socket | None) -> bool:
    """An idle keep-alive socket is readable only when the server closed it (or sent
    something unasked): either way it cannot carry a request."""
    if sock is None:
        return True
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


def _connection_reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "refused the connection"
    if isinstance(exc, socket.gaierror):
        return "has a host name that does not resolve"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return "has a TLS certificate that is not trusted"
    text = str(exc)
    for marker, reason in (
        ("CERTIFICATE_VERIFY_FAILED", "has a TLS certificate that is not trusted"),
        ("timed out", "did not answer in time"),
    ):
        if marker in text:
            return reason
    return "could not be reached (connection error)"


def decode_message(data: str) -> Json:
    """Parse one SSE event's data as a JSON-RPC message (bounded).

    Raises:
        WireError
    """
    return parse_line(data.encode("utf-8"))


__all__ = ["DirectHttp", "Exchange", "HttpFailed", "HttpTransport", "Reply", "Target", "WireError", "decode_message"]
