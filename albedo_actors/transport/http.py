"""Blocking HTTP for one MCP endpoint: pooled requests, bounded bodies, abortable reads.

Owns one ``requests.Session`` (HTTP/1.1 keep-alive pool, TLS verified against the
configured trust store) that does not follow redirects and does not read the
environment's proxy or ``.netrc`` settings (``trust_env = False``), so no body,
header or token reaches any origin but the configured one.

Every exchange runs on the caller's thread (a worker of the HTTP link) and can be
aborted from any other thread: :class:`Exchange` learns the socket its request is
written to, and ``abort()`` shuts that socket down, which ends a blocked read at
once (``response.close()`` alone does not interrupt a read in progress).

Knows nothing of JSON-RPC ids or actors; :mod:`albedo_actors.connection.http_link` does.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from ..wire.headers import field_value_problem
from ..wire.jsonrpc import MAX_MESSAGE_BYTES, Json, WireError, parse_line
from ..wire.sse import SseEvent, SseParser, SseTooLarge

CONNECT_TIMEOUT = 10.0
READ_CHUNK = 1 << 16
POOL_SIZE = 64
ACCEPT_BOTH = "application/json, text/event-stream"

_current = threading.local()  # the Exchange the current thread is performing


class HttpFailed(Exception):
    """The exchange failed before a usable answer; ``sent`` tells if the body may have left."""

    def __init__(self, reason: str, *, sent: bool) -> None:
        super().__init__(reason)
        self.sent = sent


class Exchange:
    """One HTTP exchange that another thread may abort."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self.aborted = False
        self.sent = False  # the request was handed to a socket

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


def _shutdown(sock: socket.socket | None) -> None:
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class _Tracking(HTTPConnection):
    """Connection mixin: tell the thread's current Exchange which socket it uses."""

    def request(self, *args: Any, **kwargs: Any) -> Any:
        exchange = getattr(_current, "exchange", None)
        if exchange is not None:
            if self.sock is None:
                self.connect()
            exchange.attach(self.sock)
        return super().request(*args, **kwargs)


class _TrackedHTTPConnection(_Tracking, HTTPConnection):
    pass


class _TrackedHTTPSConnection(_Tracking, HTTPSConnection):
    pass


class _TrackedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _TrackedHTTPConnection


class _TrackedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _TrackedHTTPSConnection


class _Adapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _TrackedHTTPPool, "https": _TrackedHTTPSPool}


@dataclass
class Reply:
    """An answer whose body has not been read yet. Close it (or read it to the end)."""

    status: int
    headers: dict[str, str]  # lower-case names
    response: requests.Response
    exchange: Exchange

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    @property
    def is_sse(self) -> bool:
        return self.content_type == "text/event-stream"

    def body(self, limit: int = MAX_MESSAGE_BYTES) -> bytes:
        """The whole body, at most ``limit`` bytes.

        Raises:
            HttpFailed: larger than the limit, or the connection broke.
        """
        declared = self.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            self.close()
            raise HttpFailed(f"sent a body of {int(declared)} bytes, over the {limit >> 20} MiB limit", sent=True)
        chunks, size = [], 0
        try:
            while True:
                chunk = self.response.raw.read1(READ_CHUNK)
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    raise HttpFailed(f"sent a body of more than {limit >> 20} MiB, over the limit", sent=True)
                chunks.append(chunk)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise HttpFailed(_broken(self.exchange, exc), sent=True) from None
        finally:
            self.close()
        return b"".join(chunks)

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
        raw = self.response.raw
        try:
            while True:
                chunk = raw.read1(READ_CHUNK)
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
        self.response.close()


def _broken(exchange: Exchange, exc: Exception) -> str:
    if exchange.aborted:
        return "the exchange was closed by the client"
    return f"the connection broke ({type(exc).__name__})"


class HttpTransport:
    """Pooled HTTP to one endpoint URL. Thread-safe; close() once."""

    def __init__(self, url: str, verify: bool | str = True, pool_size: int = POOL_SIZE) -> None:
        self.url = url
        self._session = requests.Session()
        self._session.trust_env = False  # no proxies or .netrc behind the user's back
        self._session.verify = verify
        adapter = _Adapter(pool_connections=1, pool_maxsize=pool_size, max_retries=0)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)

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
        Latin-1) or ``bytes`` (sent as they are).

        Raises:
            HttpFailed: no connection, aborted, a redirect, the connection broke, or a
                header value that cannot go into an HTTP header (nothing is sent then).
        """
        for name, value in headers.items():
            # Checked here, not left to http.client: it would raise UnicodeEncodeError
            # for a non-Latin-1 str and ValueError only for some CR/LF, and send other
            # controls. The value itself is never quoted: it may be a credential.
            problem = field_value_problem(value)
            if problem is not None:
                raise HttpFailed(f"the {name} header value {problem}, so it cannot be sent", sent=False)
        base = {"Accept-Encoding": "identity", "Connection": "keep-alive"}
        _current.exchange = exchange
        try:
            if exchange.aborted:
                raise HttpFailed("the exchange was closed by the client", sent=False)
            response = self._session.request(
                method,
                self.url,
                data=body,
                headers={**base, **headers},
                stream=True,
                allow_redirects=False,
                timeout=(CONNECT_TIMEOUT, read_timeout),
            )
        except HttpFailed:
            raise
        except requests.exceptions.ConnectTimeout:
            raise HttpFailed("could not connect within 10 s", sent=False) from None
        except requests.exceptions.ConnectionError as exc:
            if exchange.aborted:
                raise HttpFailed("the exchange was closed by the client", sent=exchange.sent) from None
            raise HttpFailed(_connection_reason(exc), sent=exchange.sent) from None
        except requests.exceptions.Timeout:
            raise HttpFailed(f"no answer within {read_timeout:g} s", sent=True) from None
        except requests.exceptions.RequestException as exc:
            raise HttpFailed(f"the request failed ({type(exc).__name__})", sent=exchange.sent) from None
        except (ValueError, UnicodeError) as exc:  # from http.client while writing the request
            raise HttpFailed(f"the request could not be written ({type(exc).__name__})", sent=exchange.sent) from None
        finally:
            _current.exchange = None
        headers_in = {name.lower(): value for name, value in response.headers.items()}
        if 300 <= response.status_code < 400:
            response.close()
            where = headers_in.get("location", "elsewhere")
            raise HttpFailed(
                f"answered {response.status_code} redirecting to {where[:120]}; redirects are not followed: "
                "put the final URL in extensions.json",
                sent=True,
            )
        return Reply(response.status_code, headers_in, response, exchange)

    def close(self) -> None:
        self._session.close()


def _connection_reason(exc: Exception) -> str:
    text = str(exc)
    for marker, reason in (
        ("Connection refused", "refused the connection"),
        ("Name or service not known", "has a host name that does not resolve"),
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
