"""The HTTP side of signing in: metadata GETs, registration and token POSTs.

One :class:`AuthHttp` per sign-in or refresh: a thin layer over
:class:`albedo_actors.transport.http.DirectHttp` (one connection per request, never
pooled, ``http.client`` parsing the answer) that adds what an OAuth request needs:

* **every exchange has one total deadline** (``timeout``, 10 s by default, a
  :class:`~albedo_actors.wire.deadline.Deadline` its :class:`~albedo_actors.transport.http.Exchange`
  holds): the name lookup, the connection, TLS, sending, the status line, the headers
  and the body all count against it. Each blocking socket operation waits at most for
  the time that is left, so an answer trickled one byte at a time ends when the
  deadline does, not after one per-read timeout per byte;
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
  still verifies the certificate against the host name;
* :meth:`AuthHttp.abort` ends the exchange in flight from any other thread
  (:meth:`Exchange.abort <albedo_actors.transport.http.Exchange.abort>`).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from ..wire.deadline import Deadline
from ..wire.jsonrpc import Json, WireError, parse_line

if TYPE_CHECKING:
    # transport.http (with http.client, the email package and ssl) and the address
    # checks load with the first exchange: a host whose servers never ask for OAuth
    # never needs them.
    from ..transport.http import DirectHttp, Exchange, HttpFailed

    from .addresses import AddressGuard

MAX_BODY = 64 * 1024
TIMEOUT_S = 10.0
USER_AGENT = "albedo-actors-oauth"
_ABANDONED = "the request was abandoned: its owner is stopping"

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


class AuthHttp:
    """Bounded, redirect-free HTTP for the OAuth requests of one server (see the module docstring)."""

    def __init__(self, verify: bool | str = True, timeout: float = TIMEOUT_S, guard: AddressGuard | None = None) -> None:
        self._verify = verify
        self._timeout = timeout
        self._guard = guard
        self._http: DirectHttp | None = None  # made at the first request
        self._lock = threading.Lock()
        self._exchange: Exchange | None = None  # the exchange in progress, for abort()
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
            exchange = self._exchange
        if exchange is not None:
            exchange.abort()

    def __enter__(self) -> "AuthHttp":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- one exchange -----------------------------------------------------------------------

    def _send(self, method: str, url: str, headers: dict[str, str], body: bytes | None) -> AuthReply:
        from ..transport.http import DirectHttp, Exchange, HttpFailed, Target  # first use (see above)

        from .addresses import AddressRefused, resolve

        try:
            target = Target.of(url)
        except HttpFailed as exc:
            raise AuthHttpError(url, str(exc), transient=False) from None
        deadline = Deadline.after(self._timeout)
        exchange = Exchange(deadline)
        with self._lock:
            aborted = self._aborted
            self._exchange = exchange
            if self._http is None:
                self._http = DirectHttp(self._verify)
            http = self._http
        try:
            if aborted:
                raise AuthHttpError(url, _ABANDONED)
            try:
                if self._guard is not None:
                    self._guard.check_name(target.host)
                addresses = resolve(target.host, target.port, self._left(url, deadline))
                if self._guard is not None:
                    self._guard.check(target.host, addresses, deadline.at)
            except AddressRefused as exc:
                raise AuthHttpError(url, exc.reason, transient=False) from None
            except TimeoutError:
                raise AuthHttpError(url, self._late()) from None
            except OSError as exc:
                raise AuthHttpError(url, _ABANDONED if exchange.aborted else f"could not be reached ({type(exc).__name__})") from None
            sent = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity", "Connection": "close", **headers}
            reply = http.send(method, target, sent, exchange, addresses=addresses, body=body)
            found = reply.headers
            return AuthReply(
                status=reply.status,
                content_type=found.get("content-type", ""),
                body=reply.body(MAX_BODY),
                location=found.get("location"),
                www_authenticate=found.get("www-authenticate"),
                dpop_nonce=found.get("dpop-nonce"),
            )
        except HttpFailed as exc:
            raise self._error(url, exc) from None
        finally:
            with self._lock:
                if self._exchange is exchange:
                    self._exchange = None

    def _left(self, url: str, deadline: Deadline) -> float:
        if deadline.expired:
            raise AuthHttpError(url, self._late())
        return deadline.remaining()

    def _late(self) -> str:
        return f"no answer within {self._timeout:g} s"

    def _error(self, url: str, failed: HttpFailed) -> AuthHttpError:
        """The transport's failure in this module's words (as they were before it moved there)."""
        from ..transport import http as transport  # loaded already: failed came from it

        kind = failed.kind
        if failed.timed_out or kind == transport.TIMEOUT:
            return AuthHttpError(url, self._late())
        if kind == transport.TLS:
            return AuthHttpError(url, "its TLS certificate was not accepted", transient=False)
        if kind == transport.TOO_LARGE:
            return AuthHttpError(url, f"answered with more than {MAX_BODY} bytes", transient=False)
        if kind == transport.BROKEN:
            return AuthHttpError(url, f"broke off its answer ({failed.cause})")
        if kind == transport.ABORTED:
            return AuthHttpError(url, _ABANDONED)
        return AuthHttpError(url, f"could not be reached ({failed.cause or 'ValueError'})")
