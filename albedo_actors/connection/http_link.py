"""The link of one streamable-HTTP connection (both eras) between a channel and HTTP.

**Owns** the HTTP transport (its pooled session), a pool of worker threads that each
send one POST and read its answer (a JSON body or an SSE stream) to the end, the
session id of an older server, and the listening thread.

- Every request is its own POST on a worker (2025-11-25 and 2026-07-28
  basic/transports); messages on its SSE stream go to the channel, which answers
  the server's requests (by POST) and resolves the pending request. A non-2xx
  answer carrying a JSON-RPC error reaches the request as the server's error.
- Auth (a :class:`LinkAuth`, unless the configuration gives its own ``Authorization``):
  every HTTP request asks it for its headers (``Authorization``, and a fresh DPoP proof
  for a DPoP-bound token: the proof names the request's method), and every answer's
  ``DPoP-Nonce`` goes to it. A 401 ``use_dpop_nonce`` to a DPoP request is posted again
  once with the nonce it gave (RFC 9449 9; no refresh, no sign-in), a second one fails
  the request; any other 401 (or a 403 ``insufficient_scope``) goes to the auth.
- Modern requests carry ``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name`` and the
  tool's ``Mcp-Param-*`` headers; older ones ``Mcp-Session-Id`` and the negotiated
  ``MCP-Protocol-Version``. A 404 for the session ends the connection.
- Cancellation: an older server is sent ``notifications/cancelled``; for a modern
  server closing the request's stream is the cancellation (2026-07-28
  basic/patterns/cancellation), done by shutting its socket down.
- Resumption (2025-11-25-era sessions only, basic/transports "Resumability and
  Redelivery"): a stream that ends before its response is resumed with a GET carrying
  ``Last-Event-ID`` after the stream's ``retry`` (250 ms without one, at most 30 s),
  until the response arrives, the request is given up, or five resumptions in a row
  bring no new event. A stream without event ids cannot resume. The id goes back in
  UTF-8 (WHATWG HTML, server-sent events); one that cannot go into a header (a
  control character) is the server's protocol violation, and so is an
  ``Mcp-Session-Id`` that is not visible ASCII: one error line, nothing sent with it.
- Listening: the optional GET stream of an older session, or a held-open
  ``subscriptions/listen`` for a modern server whose lists can change. A stream that
  ends is reopened after the server's ``retry`` or our wait, whichever is longer: the
  wait is 1 s, doubling up to 60 s with each attempt that heard nothing, so there is
  always at least 1 s between two openings, even with ``retry: 0``. An attempt heard
  something only if a real notification arrived (not a comment, a ``retry`` field, an
  event without data, a response, a request, or the subscription's acknowledgement);
  eight attempts in a row that heard nothing give up. A server that sends one real
  notification per stream forever is bounded too: at most 60 openings in any ten
  minutes (LISTEN_WINDOW_OPENINGS per LISTEN_WINDOW), then the next waits for the
  oldest to leave the window; it is never given up, as it keeps delivering.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from typing import Any, Callable, Protocol

from ..auth import discovery as auth_discovery
from ..auth.discovery import Challenge
from ..errors import (HttpRefused, HttpServerFailed, NeedsSignIn, ProtocolViolation, SessionExpired, TimedOut, Unavailable,
                      UnknownOutcome)
from .channel import LinkClosed, Pending, RpcChannel
from ..transport.http import ACCEPT_BOTH, Exchange, HttpFailed, HttpTransport, Reply, decode_message
from ..wire import headers as mcp_headers
from ..wire import jsonrpc, mcp
from ..wire.deadline import Bound, Deadline
from ..wire.jsonrpc import Json, WireError
from ..wire.sse import SseParser

logger = logging.getLogger(__name__)

WORKERS = 64
NOTIFY_TIMEOUT = 10.0
DELETE_TIMEOUT = 2.0
RESUME_DEFAULT_MS = 250
RESUME_MAX_MS = 30_000
RESUME_LIMIT = 5
LISTEN_FIRST_WAIT = 1.0  # also the least wait between two openings, whatever retry says
LISTEN_MAX_WAIT = 60.0
LISTEN_LIMIT = 8
LISTEN_WINDOW = 600.0  # seconds; at most LISTEN_WINDOW_OPENINGS openings within any such span
LISTEN_WINDOW_OPENINGS = 60
LISTEN_OPEN_WAIT = 2.0  # for the first opening's answer before the connection is used
MAX_AUTH_ROUNDS = 4  # one refresh and three sign-ins, then the request fails
# What a call's TimedOut names when its deadline came during the link's auth step.
PREPARING = "refreshing the token"
AUTHORIZING = "signing in / refreshing the token"
CONNECTING = "connecting to the server"


class LinkAuth(Protocol):
    """The OAuth of one server as its link uses it, from the link's worker threads
    (implemented by :class:`albedo_actors.auth.server_auth.ServerAuth`)."""

    def headers(self, method: str, url: str, deadline: Bound | None = None) -> dict[str, str]:
        """The auth headers (``Authorization``, and a ``DPoP`` proof for a DPoP-bound token)
        of one ``method`` request to ``url``; empty to send none. Called once per HTTP
        request: a proof is never reused. A refresh it waits for ends at ``deadline``
        (:class:`~albedo_actors.errors.TimedOut`, ``sent`` False) and goes on without it."""

    def dpop_nonce(self, url: str, nonce: str) -> bool:
        """A response carried ``DPoP-Nonce`` (RFC 9449 9); True when it was kept."""

    def unauthorized(self, sent: str | None, challenge: Challenge | None, method: str, attempt: int,
                     deadline: Bound | None = None) -> str:
        """After a 401 to a request that sent ``sent``: the header to post it again
        with, or raise :class:`~albedo_actors.errors.NeedsSignIn` (or ``TimedOut`` at
        ``deadline``, as :meth:`headers`)."""

    def forbidden(self, sent: str | None, challenge: Challenge | None, method: str, attempt: int,
                  deadline: Bound | None = None) -> str:
        """After a 403 ``insufficient_scope``: as :meth:`unauthorized`, for a step-up."""


class HttpLink:
    """Thread-safe; ``close()`` once, then ``wait_closed()`` from a thread that is not a worker."""

    def __init__(self, channel: RpcChannel, transport: HttpTransport, server: str, headers: dict[str, str],
                 auth: LinkAuth | None = None) -> None:
        self._channel = channel
        self._transport = transport
        self._server = server
        self._static_headers = headers  # configured credentials: never logged
        # OAuth (a ServerAuth) unless the configuration gives its own Authorization.
        self._auth = None if any(h.lower() == "authorization" for h in headers) else auth
        self._url = transport.url  # a DPoP proof's htu
        self._negotiated: mcp.Negotiated | None = None  # the connection's (use()); None: probing, modern headers
        self.session_id: str | None = None
        self._tool_headers: dict[str, dict[str, tuple[str, ...]]] = {}  # tool -> Mcp-Param header -> path
        self._exchanges: dict[int, Exchange] = {}
        self._others: set[Exchange] = set()  # notifications and responses being POSTed
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._closed_reason: str | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix=f"mcp-http-{server}")
        self._listener: threading.Thread | None = None
        self._listen_answered = threading.Event()  # the first opening has its answer (or failed)
        self._listen_exchange: Exchange | None = None

    # -- Link protocol (called by the channel) ------------------------------------------------

    def send_request(self, pending: Pending, message: dict[str, Any], deadline: Bound | None = None) -> None:
        """POST a request. With a ``deadline`` (the caller waits for the answer) the
        exchange starts on the caller's thread, and a JSON answer is read there too, by
        the deadline: no hand-off to a worker. A stream (SSE), a sign-in round or any
        exchange without a deadline runs on a worker of the link.

        The auth step (a token refresh before the POST, the 401/403/nonce rounds) ends at
        the call's deadline wherever it runs: the request then fails with
        :class:`TimedOut` saying it was not sent, and the refresh goes on for the next call."""
        progress = pending.progress
        bound = deadline if deadline is not None else progress  # the call's deadline, wherever its steps run
        if progress is not None and deadline is not None and self.era == "legacy" and self._listener is not None \
                and self._listener.is_alive():
            # Progress may come on the session's listening stream while this thread is
            # blocked reading the answer, whose read could not follow the moved deadline:
            # a worker reads it, and the caller's wait (which follows it) bounds it.
            deadline = None
        exchange = Exchange(deadline)  # a CallProgress moves it: the exchange re-reads it before each read
        with self._lock:
            if self._closing.is_set():
                raise LinkClosed()
            self._exchanges[pending.id] = exchange
            if deadline is None:
                try:
                    self._pool.submit(self._run_request, pending, message, exchange, bound)
                except RuntimeError:  # the pool was shut down meanwhile
                    self._exchanges.pop(pending.id, None)
                    raise LinkClosed() from None
                return
        try:
            self._inline(pending, message, exchange, deadline)
        except Exception as exc:  # a bug must not leave the request waiting forever
            logger.exception("server %r: the HTTP exchange for %s failed unexpectedly", self._server, pending.method)
            self._channel.fail(pending, UnknownOutcome(self._server, f"the exchange failed ({type(exc).__name__})"))
            self._exchanges.pop(pending.id, None)

    def send_other(self, message: dict[str, Any]) -> None:
        """POST a notification or a response; it must be accepted (2xx)."""
        exchange = Exchange()
        with self._lock:
            if self._closing.is_set():
                raise LinkClosed()
            self._others.add(exchange)
        try:
            for again in (False, True):
                headers = self._headers_for(message)
                reply = self._transport.send("POST", headers, exchange, body=jsonrpc.encode(message), read_timeout=NOTIFY_TIMEOUT)
                self._nonce_from(reply)
                if again or not self._nonce_refused(reply, headers):
                    break
                reply.close()  # RFC 9449 9: once more, with the nonce it gave
        except HttpFailed as exc:
            logger.debug("server %r: %s was not delivered: %s", self._server, message.get("method", "a response"), exc)
            raise LinkClosed() from None
        finally:
            with self._lock:
                self._others.discard(exchange)
        reply.close()
        if not 200 <= reply.status < 300:
            logger.debug("server %r refused %s with HTTP %s", self._server, message.get("method", "a response"), reply.status)
            raise LinkClosed()

    def cancel(self, pending: Pending) -> None:
        exchange = self._exchanges.pop(pending.id, None)
        if self.era == "legacy":
            # 2025-11-25 basic/transports: a disconnect is not a cancellation; say it.
            notice = jsonrpc.notification("notifications/cancelled", {"requestId": pending.id, "reason": "timed out"})
            self._submit(self._notify_quietly, notice)
        if exchange is not None:
            exchange.abort()  # modern: closing the stream *is* the cancellation

    def forget(self, pending: Pending) -> None:
        exchange = self._exchanges.pop(pending.id, None)
        if exchange is not None:
            exchange.abort()

    def close(self, reason: str = "closed") -> None:
        """Begin closing: abort every exchange, end the session, fail pending requests."""
        with self._lock:
            if self._closing.is_set():
                return
            self._closing.set()
            exchanges = list(self._exchanges.values()) + list(self._others)
            self._exchanges.clear()
        self._closed_reason = reason
        for exchange in exchanges:
            exchange.abort()
        if self._listen_exchange is not None:
            self._listen_exchange.abort()
        self._pool.shutdown(wait=False)
        self._channel.connection_lost(reason, local=True)

    def wait_closed(self, timeout: float | None = None) -> bool:
        """End the session (DELETE) and wait for the workers and the listener (``timeout``: 5 s)."""
        timeout = 5.0 if timeout is None else timeout
        if self.session_id is not None and self.era == "legacy":
            self._delete_session(self.session_id, Deadline.after(min(timeout, DELETE_TIMEOUT)))
        if self._listener is not None and self._listener is not threading.current_thread():
            self._listener.join(timeout)
        self._pool.shutdown(wait=True)
        self._transport.close()
        return self._listener is None or not self._listener.is_alive()

    @property
    def closed(self) -> bool:
        return self._closing.is_set()

    # -- era-aware helpers (called by the connection) ------------------------------------------

    def use(self, negotiated: mcp.Negotiated | None) -> None:
        """Speak as ``negotiated`` (None: probing again, with modern headers); outside
        the legacy era there is no session."""
        self._negotiated = negotiated
        if negotiated is None or not negotiated.legacy:
            self.session_id = None

    @property
    def era(self) -> str | None:
        """"modern", "legacy", or None while the opening probes."""
        return self._negotiated.era if self._negotiated is not None else None

    @property
    def version(self) -> str:
        return self._negotiated.version if self._negotiated is not None else mcp.MODERN_VERSION

    def notify_accepted(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a notification the server must accept (e.g. notifications/initialized).

        Raises:
            Unavailable: it was refused or could not be delivered.
        """
        try:
            self.send_other(jsonrpc.notification(method, params))
        except LinkClosed:
            raise Unavailable(self._server, f"did not accept {method}") from None

    def listen(self, filters: dict[str, bool], wait: float = LISTEN_OPEN_WAIT) -> None:
        """Open the listening stream: GET (older session) or subscriptions/listen for
        ``filters`` (modern, only when some list can change). The link holds it: None.

        Waits up to ``wait`` seconds for the server's answer to the first opening, so
        that the stream is there before the connection is used: a server may send its
        requests (an elicitation) and notifications only on it, and drop them while it
        is not open.
        """
        if self.era == "legacy" or filters:
            self._listener = threading.Thread(
                target=self._listen_loop, args=(None if self.era == "legacy" else filters,),
                name=f"mcp-listen-{self._server}", daemon=True
            )
            self._listener.start()
            self._listen_answered.wait(wait)
        return None

    def set_tool_headers(self, tools: tuple[dict[str, Any], ...], warnings: list[str]) -> tuple[dict[str, Any], ...]:
        """2026-07-28 server/tools "x-mcp-header": an HTTP client MUST leave out invalid tools.

        A modern link records each kept tool's ``Mcp-Param-*`` paths for its
        ``tools/call`` requests; an older session sends no such headers.
        """
        if self.era != "modern":
            return tools
        kept, paths = [], {}
        for tool in tools:
            try:
                found = mcp_headers.tool_param_headers(tool)
            except mcp_headers.InvalidToolHeaders as exc:
                warnings.append(f"server {self._server!r}: left out tool {tool['name'][:80]!r}: "
                                f"its x-mcp-header annotations break the spec's rules ({exc})")
                continue
            if found:
                paths[tool["name"]] = found
            kept.append(tool)
        self._tool_headers = paths
        return tuple(kept)

    # -- workers ------------------------------------------------------------------------------------

    def _submit(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            self._pool.submit(fn, *args)
        except RuntimeError:
            pass  # closing

    def _notify_quietly(self, message: dict[str, Any]) -> None:
        try:
            self.send_other(message)
        except LinkClosed:
            pass

    def _run_request(self, pending: Pending, message: dict[str, Any], exchange: Exchange, bound: Bound | None,
                     reply: Reply | None = None, headers: dict[str, str] | None = None) -> None:
        try:
            self._exchange(pending, message, exchange, bound, reply, headers)
        except Exception as exc:  # a bug must not leave the request waiting forever
            logger.exception("server %r: the HTTP exchange for %s failed unexpectedly", self._server, pending.method)
            self._channel.fail(pending, UnknownOutcome(self._server, f"the exchange failed ({type(exc).__name__})"))
        finally:
            self._exchanges.pop(pending.id, None)

    def _inline(self, pending: Pending, message: dict[str, Any], exchange: Exchange, bound: Bound) -> None:
        """The first POST of a request on the caller's thread (see :meth:`send_request`).

        Past the deadline the request is left pending: the caller's wait then times it
        out and cancels it as the era wants, as it does when a worker is slow."""
        headers = self._prepared(pending, message, bound, PREPARING)
        if headers is None:
            self._exchanges.pop(pending.id, None)
            return
        reply = self._post(pending, message, exchange, headers)
        if reply is None:
            self._exchanges.pop(pending.id, None)
            return
        if (self._auth is not None and reply.status in (401, 403)) or reply.is_sse:
            # A sign-in may take minutes and a stream may last: a worker reads on, and
            # only the caller's wait (and the call's deadline, for the auth step and a
            # resumption) bounds it from now on.
            exchange.unbind()
            try:
                self._pool.submit(self._run_request, pending, message, exchange, bound, reply, headers)
                return
            except RuntimeError:  # closing: the pending request has failed already
                reply.close()
                self._exchanges.pop(pending.id, None)
                return
        try:
            self._answered(pending, message, exchange, reply, bound)
        finally:
            self._exchanges.pop(pending.id, None)

    def _prepared(self, pending: Pending, message: dict[str, Any], bound: Bound | None, step: str,
                  refused: bool = False) -> dict[str, str] | None:
        """The headers of ``message``'s next POST; None when ``pending`` has failed or was
        given up meanwhile (its caller's deadline came during the auth step: nothing is
        sent then). While the headers are made (a token refresh may be waited for) the
        pending request names ``step``, so a caller's wait that ends first says it was
        not sent (``refused``: the server refused it before, so it did not run)."""
        pending.unsent = (step, refused)
        try:
            headers = self._headers_for(message, bound)
        except TimedOut as exc:  # the auth's refresh, at the call's deadline: it goes on without us
            seconds = bound.seconds if bound is not None else 0.0
            self._channel.fail(pending, TimedOut.unsent(self._server, pending.method, exc.step or step, seconds,
                                                        refused=refused))
            return None
        # Cleared before looking: a caller that gave up after this sees it and cancels.
        pending.unsent = None
        if not self._channel.is_pending(pending):
            return None  # its caller gave up while it was made, saying it was not sent
        return headers

    def _post(self, pending: Pending, message: dict[str, Any], exchange: Exchange, headers: dict[str, str]) -> Reply | None:
        """POST ``message``; None when it failed (``pending`` has failed then, or, past
        its deadline, is left for the caller's wait to time out)."""
        try:
            reply = self._transport.send("POST", headers, exchange, body=jsonrpc.encode(message))
            self._nonce_from(reply)
            return reply
        except HttpFailed as exc:
            deadline = exchange.deadline
            if exc.timed_out and deadline is not None:
                if not exc.sent:  # the connection did not open by the deadline: say nothing was sent
                    self._channel.fail(pending, TimedOut.unsent(self._server, pending.method, CONNECTING, deadline.seconds))
                return None
            error = UnknownOutcome if exc.sent else Unavailable
            tail = "; it may or may not have run" if exc.sent else f"; {pending.method} was not sent"
            self._channel.fail(pending, error(self._server, f"{exc}{tail}"))
            return None

    def _exchange(self, pending: Pending, message: dict[str, Any], exchange: Exchange, bound: Bound | None,
                  reply: Reply | None = None, headers: dict[str, str] | None = None) -> None:
        attempt = 0
        nonce_retried = False
        refused = False  # the server refused it once (a 401 or 403): it did not run
        while True:
            if reply is None:
                headers = self._prepared(pending, message, bound, AUTHORIZING if refused else PREPARING, refused)
                if headers is None:
                    return
                reply = self._post(pending, message, exchange, headers)
                if reply is None:
                    return
            assert headers is not None
            if self._auth is not None and reply.status == 401 and "DPoP" in headers:
                nonce = self._nonce_asked(pending, reply, nonce_retried)
                if nonce is not None:
                    if not nonce:
                        return  # failed: asked again, or without a usable nonce
                    nonce_retried, reply, refused = True, None, True  # RFC 9449 9: once more, with the nonce
                    continue
            if not self._authorize_again(pending, reply, headers.get("Authorization"), attempt, bound):
                if not self._channel.is_pending(pending):
                    return  # it failed as needing a sign-in
                break
            attempt += 1
            nonce_retried = False  # a new token: its server may ask for a nonce once more
            reply, refused = None, True
            if self._closing.is_set() or not self._channel.is_pending(pending):
                return
        self._answered(pending, message, exchange, reply, bound)

    def _answered(self, pending: Pending, message: dict[str, Any], exchange: Exchange, reply: Reply, bound: Bound | None) -> None:
        """The server answered ``message`` (no more sign-in rounds): read the answer."""
        if pending.method == "initialize" and 200 <= reply.status < 300:
            session_id = reply.headers.get("mcp-session-id") or None
            if session_id is not None:
                try:
                    mcp_headers.session_id(session_id)
                except mcp_headers.InvalidHeaderValue as exc:
                    reply.close()
                    self._channel.fail(pending, ProtocolViolation(
                        self._server, f"sent an Mcp-Session-Id that {exc}; it cannot be sent back, so the session cannot be used"))
                    return
            self.session_id = session_id
        if 200 <= reply.status < 300 and reply.status != 202:
            if reply.is_sse:
                self._read_stream(pending, reply, exchange, bound)
            else:
                self._read_json(pending, reply)
            return
        self._refused(pending, reply)

    def _authorize_again(self, pending: Pending, reply: Reply, sent: str | None, attempt: int, bound: Bound | None) -> bool:
        """After a 401, or a 403 ``insufficient_scope``: True to post the request again.

        The request did not run. A refused token is refreshed once; then (or with no
        token) the server needs a sign-in, done here only when the host gave an
        interactive one (at most ``MAX_AUTHORIZATIONS`` in a row); else the request
        fails with NeedsSignIn. Any other answer is left to the caller (False).

        The refresh (or the wait for another sign-in) ends at the call's ``bound``: the
        request then fails with TimedOut saying it did not run. While it runs the pending
        request names the step, so a caller's wait that ends first says the same; a
        sign-in that runs on goes on without the call (the next call gets its token).
        """
        if self._auth is None or reply.status not in (401, 403) or attempt > MAX_AUTH_ROUNDS:
            return False
        challenge = auth_discovery.bearer_challenge(reply.headers)
        if reply.status == 403 and (challenge is None or challenge.error != "insufficient_scope"):
            return False
        reply.close()
        pending.unsent = (AUTHORIZING, True)  # cleared by _prepared, once the headers are made
        try:
            if reply.status == 401:
                self._auth.unauthorized(sent, challenge, pending.method, attempt, bound)
            else:
                self._auth.forbidden(sent, challenge, pending.method, attempt, bound)
        except NeedsSignIn as exc:
            pending.unsent = None
            self._channel.fail(pending, exc)
            return False
        except TimedOut as exc:
            pending.unsent = None
            seconds = bound.seconds if bound is not None else 0.0
            self._channel.fail(pending, TimedOut.unsent(self._server, pending.method, exc.step or AUTHORIZING, seconds,
                                                        refused=True))
            return False
        return True

    def _nonce_asked(self, pending: Pending, reply: Reply, retried: bool) -> bool | None:
        """A 401 to a DPoP request: None when it is not ``use_dpop_nonce`` (the usual 401
        path follows); True to post again with the nonce it gave (once per token); False
        when ``pending`` has failed (asked again, or gave no usable nonce)."""
        challenge = auth_discovery.dpop_challenge(reply.headers)
        if challenge is None or challenge.error != "use_dpop_nonce":
            return None
        reply.close()
        assert self._auth is not None
        nonce = reply.headers.get("dpop-nonce")
        if retried or nonce is None or not self._auth.dpop_nonce(self._url, nonce):
            why = ("asked again for a new DPoP nonce (use_dpop_nonce) after albedo sent the one it gave; albedo asks once"
                   if retried else "asked for a DPoP nonce (use_dpop_nonce) without giving a usable one")
            self._channel.fail(pending, HttpRefused(self._server, 401, f"{why}; {pending.method} did not run"))
            return False
        return True

    def _nonce_refused(self, reply: Reply, headers: dict[str, str]) -> bool:
        """A 401 ``use_dpop_nonce`` to a DPoP request that gave a usable nonce (already kept)."""
        if self._auth is None or reply.status != 401 or "DPoP" not in headers:
            return False
        challenge = auth_discovery.dpop_challenge(reply.headers)
        nonce = reply.headers.get("dpop-nonce")
        return (challenge is not None and challenge.error == "use_dpop_nonce" and nonce is not None
                and self._auth.dpop_nonce(self._url, nonce))

    def _nonce_from(self, reply: Reply) -> None:
        """RFC 9449 8.2, 9: any response may carry the next nonce; the auth keeps it for the origin."""
        if self._auth is not None:
            nonce = reply.headers.get("dpop-nonce")
            if nonce is not None:
                self._auth.dpop_nonce(self._url, nonce)

    def _auth_header(self, headers: dict[str, str], method: str = "POST", deadline: Bound | None = None) -> dict[str, str]:
        """``headers`` with the auth's; a refresh it waits for ends at ``deadline`` (TimedOut)."""
        if self._auth is not None:
            headers.update(self._auth.headers(method, self._url, deadline))
        return headers

    def _read_json(self, pending: Pending, reply: Reply) -> None:
        try:
            body = reply.body()
            value = jsonrpc.parse_line(body)
        except HttpFailed as exc:
            if exc.timed_out and reply.exchange.deadline is not None:
                return  # the caller's wait times it out and cancels it
            self._channel.fail(pending, UnknownOutcome(self._server, f"{exc}; {pending.method} may or may not have run"))
            return
        except WireError as exc:
            self._channel.fail(pending, ProtocolViolation(self._server, f"answered {pending.method} with {exc}"))
            return
        items = value if isinstance(value, list) else [value]  # 2025-03-26 allowed batches
        for item in items:
            # Its share of the body's bytes (a discovery's byte budget counts them).
            self._channel.feed_message(item, len(body) // max(1, len(items)))
        if self._channel.is_pending(pending):
            self._channel.fail(pending, ProtocolViolation(self._server, f"answered {pending.method} without its response"))

    def _read_stream(self, pending: Pending, reply: Reply, exchange: Exchange, bound: Bound | None) -> None:
        """Read ``pending``'s SSE answer to its response, resuming (legacy) as the module
        docstring says. Only the caller's wait bounds the read itself (it aborts the
        exchange at the deadline); the wait before a resumption, and its token refresh,
        end at the call's ``bound``."""
        parser = SseParser(max_retry_ms=RESUME_MAX_MS)
        last_id: str | None = None
        quiet_resumptions = 0
        while True:
            heard = False
            problem = "the stream ended"
            try:
                for event in reply.events(parser):
                    if event.id is not None and event.id != last_id:
                        last_id, heard = event.id, True
                    if not event.data:
                        continue  # a priming event: an id and no message
                    heard = True
                    try:
                        self._channel.feed_message(decode_message(event.data), len(event.data))
                    except WireError as exc:
                        self._channel.fail(pending, ProtocolViolation(self._server, f"sent an SSE event with {exc}"))
                        reply.close()
                        return
                    if not self._channel.is_pending(pending):
                        reply.close()  # answered: the rest of the stream is not ours
                        return
            except HttpFailed as exc:
                problem = str(exc)
            if not self._channel.is_pending(pending) or exchange.aborted:
                return
            # An empty id is the server's reset: no Last-Event-ID, so nothing to resume from.
            resumable = self.era == "legacy" and self.session_id is not None and bool(last_id)
            if not resumable:
                why = "and could not be resumed (no event ids)" if self.era == "legacy" else "(2026-07-28 streams do not resume)"
                self._channel.fail(
                    pending,
                    UnknownOutcome(self._server, f"{problem} before the response to {pending.method} {why}; it may or may not have run"),
                )
                return
            quiet_resumptions = 0 if heard else quiet_resumptions + 1
            if quiet_resumptions >= RESUME_LIMIT:
                self._channel.fail(
                    pending, UnknownOutcome(self._server, f"{problem}; {RESUME_LIMIT} resumptions brought nothing new; it may or may not have run")
                )
                return
            delay = min(parser.retry_ms if parser.retry_ms is not None else RESUME_DEFAULT_MS, RESUME_MAX_MS) / 1000
            if bound is not None:
                if bound.remaining() <= delay:
                    return  # it could not resume before the call's deadline: the caller's wait ends it
                delay = min(delay, bound.remaining())
            if self._closing.wait(delay) or exchange.aborted:
                return
            try:
                headers = self._stream_headers(last_id, bound)
            except TimedOut:
                return  # the call's deadline came during a token refresh: the caller's wait ends it
            except mcp_headers.InvalidHeaderValue as exc:
                self._channel.fail(pending, ProtocolViolation(
                    self._server, f"sent an SSE event id that {exc}, so its stream cannot be resumed; "
                                  f"{pending.method} may or may not have run"))
                return
            resumed: Reply | None
            try:
                resumed = self._transport.send("GET", headers, exchange)
                self._nonce_from(resumed)
            except HttpFailed as exc:
                resumed = None
                problem = str(exc)
            if resumed is None or resumed.status != 200 or not resumed.is_sse:
                if resumed is not None:
                    resumed.close()
                    problem = f"resuming the stream was refused (HTTP {resumed.status})"
                self._channel.fail(pending, UnknownOutcome(self._server, f"{problem}; {pending.method} may or may not have run"))
                return
            reply = resumed
            parser = SseParser(max_retry_ms=RESUME_MAX_MS)

    def _refused(self, pending: Pending, reply: Reply) -> None:
        status = reply.status
        if status == 404 and self.session_id is not None and self.era == "legacy":
            reply.close()
            # End the connection before the caller hears why, so that its next call
            # finds it closed and dials a new session.
            mine = self._channel.take(pending)
            self._session_lost()
            if mine:
                pending.resolve(error=SessionExpired(self._server, f"its session ended (HTTP 404); {pending.method} did not run"))
            return
        configured = any(h.lower() == "authorization" for h in self._static_headers)
        challenge = auth_discovery.bearer_challenge(reply.headers) if status in (401, 403) else None
        if not configured and (status == 401 or (challenge is not None and challenge.error == "insufficient_scope")):
            # Whatever its body says: the request did not run, and a sign-in would help.
            reply.close()
            scope = challenge.scope if challenge is not None else None
            why = "the server asks for a sign-in" if status == 401 else f"the server needs more scope ({scope or 'unnamed'})"
            self._channel.fail(pending, NeedsSignIn(self._server, why, pending.method, step_up=status == 403))
            return
        try:
            value = reply.json()
        except (HttpFailed, WireError):
            value = None
        error = value.get("error") if isinstance(value, dict) else None
        if isinstance(error, dict) and value.get("id") in (pending.id, None) and isinstance(error.get("code"), int):
            # A refusal's JSON-RPC error reaches its request as the server's error.
            self._channel.feed_message({**value, "id": pending.id})
            return
        if status in (401, 403):
            message = (f"refused the configured credentials (HTTP {status}); check the token extensions.json names"
                       if configured and status == 401 else f"refused {pending.method} (HTTP {status})")
            self._channel.fail(pending, HttpRefused(self._server, status, message))
        elif status == 202:
            self._channel.fail(pending, ProtocolViolation(self._server, f"accepted {pending.method} (202) without answering it"))
        elif status >= 500:
            self._channel.fail(
                pending, HttpServerFailed(self._server, status, f"failed with HTTP {status}; {pending.method} may or may not have run")
            )
        else:
            self._channel.fail(pending, HttpRefused(self._server, status, f"refused {pending.method} with HTTP {status}"))

    def _session_lost(self) -> None:
        # 2025-11-25 basic/transports: after a 404 the client MUST start a new session.
        self.session_id = None
        self.close("the server ended the session (HTTP 404)")

    def _delete_session(self, session_id: str, deadline: Deadline) -> None:
        """End the session, by ``deadline``: closing never waits for a token refresh."""
        try:
            headers = self._auth_header({"Mcp-Session-Id": session_id, "MCP-Protocol-Version": self.version,
                                         **self._static_headers}, "DELETE", deadline)
        except TimedOut:
            return  # the server ends an idle session itself
        try:
            reply = self._transport.send("DELETE", headers, Exchange(deadline))
            self._nonce_from(reply)
            reply.close()
        except HttpFailed:
            pass  # the server may already be gone; the session ends with it

    # -- headers ------------------------------------------------------------------------------------

    def _headers_for(self, message: dict[str, Any], deadline: Bound | None = None) -> dict[str, str]:
        """The headers of one POST of ``message``.

        Raises:
            TimedOut: a token refresh did not finish by ``deadline``.
        """
        headers = self._auth_header({"Content-Type": "application/json", "Accept": ACCEPT_BOTH, **self._static_headers},
                                    deadline=deadline)
        method = message.get("method")
        if self.era == "legacy":
            if self.session_id is not None:
                headers["Mcp-Session-Id"] = self.session_id
            if method != "initialize":
                headers["MCP-Protocol-Version"] = self.version
            return headers
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        if method is None:
            headers["MCP-Protocol-Version"] = self.version
            return headers
        version = params.get("_meta", {}).get(mcp.META_PROTOCOL_VERSION, self.version)
        headers.update(mcp_headers.request_headers(method, params, version))
        if method == "tools/call":
            name = params.get("name")
            paths = self._tool_headers.get(name) if isinstance(name, str) else None
            if paths:
                headers.update(mcp_headers.param_headers(paths, params.get("arguments")))
        return headers

    def _stream_headers(self, last_event_id: str | None = None, deadline: Bound | None = None) -> dict[str, str | bytes]:
        """Headers of a GET stream; ``Last-Event-ID`` when resuming after that id.

        Raises:
            InvalidHeaderValue: the id cannot go into a header.
            TimedOut: a token refresh did not finish by ``deadline``.
        """
        headers: dict[str, str | bytes] = {**self._auth_header(
            {"Accept": "text/event-stream", "MCP-Protocol-Version": self.version, **self._static_headers}, "GET", deadline)}
        if self.session_id is not None:
            headers["Mcp-Session-Id"] = self.session_id
        if last_event_id:  # WHATWG: an empty last event ID string sends no header
            headers["Last-Event-ID"] = mcp_headers.last_event_id(last_event_id)
        return headers

    # -- listening ----------------------------------------------------------------------------------

    def _listen_loop(self, filters: dict[str, bool] | None) -> None:
        quiet = 0
        wait = LISTEN_FIRST_WAIT
        openings: collections.deque[float] = collections.deque()  # when each stream of the window opened
        while not self._closing.is_set():
            openings.append(time.monotonic())
            heard, retry_ms, refused = self._listen_once(filters)
            if refused or self._closing.is_set():
                return
            if heard:
                quiet, wait = 0, LISTEN_FIRST_WAIT
            else:
                quiet += 1
                if quiet >= LISTEN_LIMIT:
                    logger.info("server %r: its listening stream heard nothing %d times; given up", self._server, quiet)
                    return
            # The server's retry or our wait, whichever is longer: a retry of 0 (or a
            # stream that ends at once) never makes a busy loop.
            delay = max(wait, retry_ms / 1000 if retry_ms is not None else 0.0)
            if not heard:
                wait = min(wait * 2, LISTEN_MAX_WAIT)
            now = time.monotonic()
            while openings and openings[0] <= now - LISTEN_WINDOW:
                openings.popleft()
            if len(openings) >= LISTEN_WINDOW_OPENINGS:
                # Each stream heard a notification, but a server that hangs up after
                # every one is still held to a rate: wait for the oldest to leave.
                delay = max(delay, openings[0] + LISTEN_WINDOW - now)
                logger.debug("server %r: %d listening streams in %g s; the next waits %.1f s",
                             self._server, len(openings), LISTEN_WINDOW, delay)
            if self._closing.wait(delay):
                return

    def _listen_once(self, filters: dict[str, bool] | None) -> tuple[bool, int | None, bool]:
        """One listening stream; returns (heard something, retry ms, refused for good)."""
        exchange = Exchange()
        self._listen_exchange = exchange
        if self._closing.is_set():
            self._listen_answered.set()
            return False, None, True
        pending = None
        try:
            if self.era == "legacy":
                reply = self._transport.send("GET", self._stream_headers(), exchange)
            else:
                pending = self._channel.reserve("subscriptions/listen")
                message = jsonrpc.request(pending.id, "subscriptions/listen", mcp.modern_params({"notifications": filters}, self.version, self._channel.capabilities))
                reply = self._transport.send("POST", self._headers_for(message), exchange, body=jsonrpc.encode(message))
        except HttpFailed as exc:
            self._listen_answered.set()
            if pending is not None:
                self._channel.drop(pending)
            logger.debug("server %r: listening stream failed: %s", self._server, exc)
            return False, None, False
        self._listen_answered.set()
        self._nonce_from(reply)
        if reply.status != 200 or not reply.is_sse:
            # A 405 or any other refusal leaves the stream closed for the connection's life.
            reply.close()
            if pending is not None:
                self._channel.drop(pending)
            logger.debug("server %r: no listening stream (HTTP %s)", self._server, reply.status)
            return False, None, True
        parser = SseParser(max_retry_ms=int(LISTEN_MAX_WAIT * 1000))
        heard = False
        try:
            for event in reply.events(parser):
                if not event.data:
                    continue
                try:
                    message = decode_message(event.data)
                except WireError as exc:
                    logger.warning("server %r sent an invalid message on its listening stream: %s", self._server, exc)
                    continue
                # Only a real notification is "hearing something": not the
                # acknowledgement, a response or a request (nor, above, a comment, a
                # retry field or an event without data). A server that sends only those
                # and hangs up is given up after LISTEN_LIMIT attempts.
                if _real_notification(message):
                    heard = True
                self._channel.feed_message(message)
                if pending is not None and not self._channel.is_pending(pending):
                    return heard, parser.retry_ms, True  # the server ended the subscription gracefully
        except HttpFailed as exc:
            logger.debug("server %r: listening stream dropped: %s", self._server, exc)
        finally:
            reply.close()
            if pending is not None:
                self._channel.drop(pending)
        return heard, parser.retry_ms, False


def _real_notification(message: Json) -> bool:
    """A JSON-RPC notification (a method, no id) other than the listen acknowledgement."""
    return (
        isinstance(message, dict)
        and "id" not in message
        and isinstance(message.get("method"), str)
        and message["method"] != "notifications/subscriptions/acknowledged"
    )
