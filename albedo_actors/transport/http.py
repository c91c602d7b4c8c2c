"""Blocking HTTP for one MCP endpoint: pooled connections, bounded bodies, abortable reads.

Drives one ``urllib3`` connection pool (the HTTP/1.1 keep-alive pool ``requests`` is
built on) directly: ``requests`` costs about as much CPU per request again as the
exchange itself, and its extras are exactly what this module must not do. Nothing
follows a redirect (``redirect=False``), nothing is retried (``retries=False``), and
no environment proxy or ``.netrc`` is read (urllib3 reads neither), so no body, header
or token reaches any origin but the configured one. TLS is verified against the
configured trust store, or the certifi bundle ``requests`` uses.

Every exchange runs on the caller's thread and can be aborted from any other thread:
:class:`Exchange` learns the socket its request is written to, and ``abort()`` shuts
that socket down, which ends a blocked read at once (closing the response alone does
not interrupt a read in progress). The request line, headers and a body go out in one
``send()``, so a small request is one TCP segment.

Knows nothing of JSON-RPC ids or actors; :mod:`albedo_actors.connection.http_link` does.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Iterator, Mapping

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError, ReadTimeoutError
from urllib3.util.retry import Retry

from ..wire.headers import field_value_problem
from ..wire.jsonrpc import MAX_MESSAGE_BYTES, Json, WireError, parse_line
from ..wire.sse import SseEvent, SseParser, SseTooLarge

CONNECT_TIMEOUT = 10.0
READ_CHUNK = 1 << 16
POOL_SIZE = 64
ACCEPT_BOTH = "application/json, text/event-stream"
USER_AGENT = "albedo-actors"
BASE_HEADERS = {"Accept-Encoding": "identity", "Connection": "keep-alive", "User-Agent": USER_AGENT}

_current = threading.local()  # the Exchange the current thread is performing
_LEGAL_NAMES: set[str] = set()  # header names http.client has accepted
NO_RETRY = Retry(total=False, redirect=False)  # raise the first error as it is


class HttpFailed(Exception):
    """The exchange failed before a usable answer; ``sent`` tells if the body may have left."""

    def __init__(self, reason: str, *, sent: bool, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.sent = sent
        self.timed_out = timed_out  # the exchange's deadline or read timeout passed


class Exchange:
    """One HTTP exchange that another thread may abort.

    ``deadline`` (a ``time.monotonic()`` value, or None) bounds the whole exchange,
    not each read: a server that drips its answer a byte at a time still ends at it.
    """

    def __init__(self, deadline: float | None = None) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self.aborted = False
        self.sent = False  # the request was handed to a socket
        self.deadline = deadline

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

    def remaining(self) -> float | None:
        """Seconds left before the deadline (None: no deadline).

        Raises:
            HttpFailed: the deadline has passed.
        """
        if self.deadline is None:
            return None
        left = self.deadline - time.monotonic()
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


class _Tracking(HTTPConnection):
    """Connection mixin: tell the thread's current Exchange which socket it uses, and
    send the request line, headers and body in one ``send()`` (urllib3 sends the
    headers, then the body: two segments, and with Nagle and delayed ACKs a stall)."""

    _held: bytes | None = None

    def request(self, method: str, url: str, body: Any = None, headers: Any = None, **kwargs: Any) -> None:
        exchange = getattr(_current, "exchange", None)
        if exchange is not None:
            if self.sock is None:
                self.connect()
            exchange.attach(self.sock)
        self._hold = isinstance(body, bytes) and len(body) <= READ_CHUNK
        try:
            super().request(method, url, body=body, headers=headers, **kwargs)
            if self._held is not None:  # an empty body: the head alone
                held, self._held = self._held, None
                super().send(held)
        finally:
            self._hold = False
            self._held = None

    def _send_output(self, message_body: Any = None, encode_chunked: bool = False) -> None:
        if not getattr(self, "_hold", False) or message_body is not None:
            super()._send_output(message_body, encode_chunked=encode_chunked)  # type: ignore[misc]
            return
        # As http.client does it, but the head waits for the body's send().
        buffer: list[bytes] = self._buffer  # type: ignore[attr-defined]
        buffer.extend((b"", b""))
        self._held = b"\r\n".join(buffer)
        del buffer[:]

    def putheader(self, header: str, *values: Any) -> None:
        # send() checked every value it was given; names are checked once each. The
        # rest is http.client's putheader, without its per-call encode and regexes.
        if len(values) == 1 and type(values[0]) is str and header in _LEGAL_NAMES:
            self._buffer.append(f"{header}: {values[0]}".encode("latin-1"))  # type: ignore[attr-defined]
            return
        super().putheader(header, *values)
        if len(_LEGAL_NAMES) < 256:
            _LEGAL_NAMES.add(header)  # it passed http.client's checks

    def send(self, data: Any) -> None:
        if self._held is not None:
            data, self._held = self._held + data, None
        super().send(data)


class _TrackedHTTPConnection(_Tracking, HTTPConnection):
    pass


class _TrackedHTTPSConnection(_Tracking, HTTPSConnection):
    pass


class _TrackedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _TrackedHTTPConnection


class _TrackedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _TrackedHTTPSConnection


class Reply:
    """An answer whose body has not been read yet. Close it (or read it to the end)."""

    __slots__ = ("status", "headers", "response", "exchange")

    def __init__(self, status: int, headers: dict[str, str], response: urllib3.BaseHTTPResponse, exchange: Exchange) -> None:
        self.status = status
        self.headers = headers  # lower-case names
        self.response = response
        self.exchange = exchange

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
            raise HttpFailed(f"sent a body of {int(declared)} bytes, over the {limit >> 20} MiB limit", sent=True)
        exchange = self.exchange
        chunks, size = [], 0
        try:
            while True:
                exchange.bound_read()
                chunk = self.response.read1(READ_CHUNK)
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    raise HttpFailed(f"sent a body of more than {limit >> 20} MiB, over the limit", sent=True)
                chunks.append(chunk)
        except HttpFailed:
            raise
        except (ReadTimeoutError, TimeoutError):
            raise HttpFailed("no answer in time", sent=True, timed_out=True) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise HttpFailed(_broken(exchange, exc), sent=True) from None
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
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise HttpFailed(_broken(self.exchange, exc), sent=True) from None
        finally:
            self.close()

    def close(self) -> None:
        """Done with the answer: a connection whose body was read whole goes back to the
        pool; one that was not is closed (its unread rest cannot be trusted)."""
        response = self.response
        if response.closed or getattr(response, "_fp", None) is None:
            response.release_conn()
        else:
            response.close()


def _broken(exchange: Exchange, exc: Exception) -> str:
    if exchange.aborted:
        return "the exchange was closed by the client"
    return f"the connection broke ({type(exc).__name__})"


class HttpTransport:
    """Pooled HTTP to one endpoint URL. Thread-safe; close() once."""

    def __init__(self, url: str, verify: bool | str = True, pool_size: int = POOL_SIZE) -> None:
        self.url = url
        parts = urllib3.util.parse_url(url)
        self._target = parts.request_uri  # path and query, as the request line carries it
        host, port = parts.host or "", parts.port
        pool: HTTPConnectionPool
        if parts.scheme == "https":
            if verify is False:
                pool = _TrackedHTTPSPool(host, port, maxsize=pool_size, cert_reqs="CERT_NONE", retries=False)
            else:
                ca = verify if isinstance(verify, str) else _default_ca()
                pool = _TrackedHTTPSPool(host, port, maxsize=pool_size, cert_reqs="CERT_REQUIRED", ca_certs=ca, retries=False)
        else:
            pool = _TrackedHTTPPool(host, port, maxsize=pool_size, retries=False)
        self._pool = pool
        self._timeouts: dict[float | None, urllib3.Timeout] = {}

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
        left = exchange.remaining()
        if left is not None:
            read_timeout = left if read_timeout is None else min(left, read_timeout)
            timeout = urllib3.Timeout(connect=min(CONNECT_TIMEOUT, left), read=read_timeout)
        else:
            timeout = self._timeout(read_timeout)
        _current.exchange = exchange
        try:
            response = self._pool.urlopen(
                method, self._target, body=body, headers={**BASE_HEADERS, **headers},
                retries=NO_RETRY, redirect=False, assert_same_host=False, timeout=timeout,
                preload_content=False, decode_content=False, release_conn=False,
            )
        except NewConnectionError as exc:  # before ConnectTimeoutError: it is one
            raise HttpFailed(_connection_reason(exc), sent=False) from None
        except ConnectTimeoutError:
            raise HttpFailed(f"could not connect within {timeout.connect_timeout:g} s", sent=False) from None
        except (ReadTimeoutError, TimeoutError):
            if exchange.deadline is not None:
                raise HttpFailed("no answer in time", sent=True, timed_out=True) from None
            raise HttpFailed(f"no answer within {read_timeout:g} s", sent=True, timed_out=True) from None
        except urllib3.exceptions.HTTPError as exc:
            if exchange.aborted:
                raise HttpFailed("the exchange was closed by the client", sent=exchange.sent) from None
            raise HttpFailed(_connection_reason(exc), sent=exchange.sent) from None
        except OSError as exc:
            if exchange.aborted:
                raise HttpFailed("the exchange was closed by the client", sent=exchange.sent) from None
            raise HttpFailed(_connection_reason(exc), sent=exchange.sent) from None
        except (ValueError, UnicodeError) as exc:  # from http.client while writing the request
            raise HttpFailed(f"the request could not be written ({type(exc).__name__})", sent=exchange.sent) from None
        finally:
            _current.exchange = None
        raw = response.headers
        # One value a name; repeated fields joined with ", " (RFC 9110 5.3).
        headers_in = {name.lower(): raw[name] for name in raw}
        status = response.status
        if 300 <= status < 400:
            response.close()
            where = headers_in.get("location", "elsewhere")
            raise HttpFailed(
                f"answered {status} redirecting to {where[:120]}; redirects are not followed: "
                "put the final URL in extensions.json",
                sent=True,
            )
        return Reply(status, headers_in, response, exchange)

    def _timeout(self, read: float | None) -> urllib3.Timeout:
        timeout = self._timeouts.get(read)
        if timeout is None:
            timeout = self._timeouts[read] = urllib3.Timeout(connect=CONNECT_TIMEOUT, read=read)
        return timeout

    def close(self) -> None:
        self._pool.close()


def _default_ca() -> str:
    import certifi  # what requests verifies against by default; a dependency of requests

    return certifi.where()


def _connection_reason(exc: Exception) -> str:
    text = str(exc)
    for marker, reason in (
        ("Connection refused", "refused the connection"),
        ("Name or service not known", "has a host name that does not resolve"),
        ("Failed to resolve", "has a host name that does not resolve"),
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


__all__ = ["Exchange", "HttpFailed", "HttpTransport", "Reply", "WireError", "decode_message", "ACCEPT_BOTH"]
