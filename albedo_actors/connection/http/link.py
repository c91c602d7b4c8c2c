"""The link of one streamable-HTTP connection (both eras) between a channel and HTTP.

**Owns** the HTTP transport (its pooled session), a pool of worker threads that each
send one POST and read its answer (a JSON body or an SSE stream) to the end, the
session id of an older server, and the listening stream (:mod:`.listen`).

- Every request is its own exchange (:mod:`.exchange`): its first POST runs on the
  caller's thread when the caller waits for the answer, else on a worker.
- Auth: a :class:`~.exchange.LinkAuth`, unless the configuration gives its own
  ``Authorization``: each HTTP request is driven through its flow
  (:mod:`albedo_actors.auth.flow`), which gives the auth headers of each try and
  decides the 401/403/DPoP-nonce rounds; the other headers are :mod:`.headers`'.
- A 404 for the session ends the connection.
- Cancellation: an older server is sent ``notifications/cancelled``; for a modern
  server closing the request's stream is the cancellation (2026-07-28
  basic/patterns/cancellation), done by shutting its socket down.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import threading
from typing import Any, Callable

from ...errors import TimedOut, Unavailable
from ...transport.http import Exchange, HttpFailed, HttpTransport
from ...wire import jsonrpc, mcp
from ...wire.deadline import Bound, Deadline
from ..channel import LinkClosed, Pending, RpcChannel
from . import headers as http_headers
from .exchange import AuthFlow, LinkAuth, RequestExchange, begin, no_auth, settle
from .listen import Listener
from ...wire import telemetry

logger = telemetry.logger(__name__)  # records carry the server and trace ids

__all__ = ["HttpLink", "LinkAuth"]

WORKERS = 64
NOTIFY_TIMEOUT = 10.0
DELETE_TIMEOUT = 2.0
LISTEN_OPEN_WAIT = 2.0  # for the first opening's answer before the connection is used


class HttpLink:
    """Thread-safe; ``close()`` once, then ``wait_closed()`` from a thread that is not a worker."""

    def __init__(self, channel: RpcChannel, transport: HttpTransport, server: str, headers: dict[str, str],
                 auth: LinkAuth | None = None) -> None:
        self.channel = channel
        self.transport = transport
        self.server = server
        self._static_headers = headers  # configured credentials: never logged
        self.configured = any(h.lower() == "authorization" for h in headers)
        # OAuth (a ServerAuth) unless the configuration gives its own Authorization.
        self.auth = None if self.configured else auth
        self.url = transport.url  # a DPoP proof's htu
        self._negotiated: mcp.Negotiated | None = None  # the connection's (use()); None: probing, modern headers
        self.session_id: str | None = None
        # Tasks running in this 2025-11-25 session (connection/tasks.py): while there are
        # some, or the session was borrowed from a stored task (``keep_session``), closing
        # does not end the session, so that another process can still poll them.
        self.pending_tasks: set[str] = set()
        self.keep_session = False
        self._tool_headers: http_headers.ToolHeaders = {}
        self._exchanges: dict[int, Exchange] = {}
        self._others: set[Exchange] = set()  # notifications and responses being POSTed
        self._lock = threading.Lock()
        self.closing = threading.Event()
        self._closed_reason: str | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix=f"mcp-http-{server}")
        self._listener: Listener | None = None

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
                and self._listener.alive():
            # Progress may come on the session's listening stream while this thread is
            # blocked reading the answer, whose read could not follow the moved deadline:
            # a worker reads it, and the caller's wait (which follows it) bounds it.
            deadline = None
        exchange = Exchange(deadline)  # a CallProgress moves it: the exchange re-reads it before each read
        request = RequestExchange(self, pending, message, exchange, bound)
        with self._lock:
            if self.closing.is_set():
                raise LinkClosed()
            self._exchanges[pending.id] = exchange
            if deadline is None:
                try:
                    self._pool.submit(request.run)
                except RuntimeError:  # the pool was shut down meanwhile
                    self._exchanges.pop(pending.id, None)
                    raise LinkClosed() from None
                return
        request.inline()

    def send_other(self, message: dict[str, Any]) -> None:
        """POST a notification or a response; it must be accepted (2xx)."""
        exchange = Exchange()
        with self._lock:
            if self.closing.is_set():
                raise LinkClosed()
            self._others.add(exchange)
        flow = self.auth_flow("POST", sign_in=False)  # a DPoP nonce round only: no refresh, no sign-in
        try:
            while True:
                headers = self.post_headers(message, begin(flow))
                reply = self.transport.send("POST", headers, exchange, body=jsonrpc.encode(message), read_timeout=NOTIFY_TIMEOUT)
                try:
                    flow.send(reply)
                except StopIteration:
                    break
                reply.close()  # RFC 9449 9: once more, with the nonce it gave
        except HttpFailed as exc:  # the channel's word for "not delivered"; nobody waits on an answer
            logger.debug("server %r: %s was not delivered: %s", self.server, message.get("method", "a response"), exc)
            raise LinkClosed() from None
        finally:
            with self._lock:
                self._others.discard(exchange)
        reply.close()
        if not 200 <= reply.status < 300:
            logger.debug("server %r refused %s with HTTP %s", self.server, message.get("method", "a response"), reply.status)
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
            if self.closing.is_set():
                return
            self.closing.set()
            exchanges = list(self._exchanges.values()) + list(self._others)
            self._exchanges.clear()
        self._closed_reason = reason
        for exchange in exchanges:
            exchange.abort()
        if self._listener is not None:
            self._listener.abort()
        self._pool.shutdown(wait=False)
        self.channel.connection_lost(reason, local=True)

    def wait_closed(self, timeout: float | None = None) -> bool:
        """End the session (DELETE) and wait for the workers and the listener (``timeout``: 5 s)."""
        timeout = 5.0 if timeout is None else timeout
        if self.session_id is not None and self.era == "legacy" and not self.pending_tasks and not self.keep_session:
            self._delete_session(self.session_id, Deadline.after(min(timeout, DELETE_TIMEOUT)))
        ended = self._listener is None or self._listener.join(timeout)
        self._pool.shutdown(wait=True)
        self.transport.close()
        return ended

    @property
    def closed(self) -> bool:
        return self.closing.is_set()

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
            raise Unavailable(self.server, f"did not accept {method}") from None

    def listen(self, filters: dict[str, bool], wait: float = LISTEN_OPEN_WAIT) -> None:
        """Open the listening stream: GET (older session) or subscriptions/listen for
        ``filters`` (modern, only when some list can change). The link holds it: None.

        Waits up to ``wait`` seconds for the server's answer to the first opening, so
        that the stream is there before the connection is used: a server may send its
        requests (an elicitation) and notifications only on it, and drop them while it
        is not open.
        """
        if self.era == "legacy" or filters:
            self._listener = Listener(self, None if self.era == "legacy" else filters)
            self._listener.start()
            self._listener.answered.wait(wait)
        return None

    def authorization_context(self) -> str:
        """A digest of the configured headers and of the OAuth token in use."""
        digest = hashlib.sha256(json.dumps(sorted(self._static_headers.items())).encode())
        if self.auth is not None:
            digest.update(b"\0" + self.auth.authorization_context().encode())
        return digest.hexdigest()

    def set_tool_headers(self, tools: tuple[dict[str, Any], ...], warnings: list[str]) -> tuple[dict[str, Any], ...]:
        """2026-07-28 server/tools "x-mcp-header": an HTTP client MUST leave out invalid tools.

        A modern link records each kept tool's ``Mcp-Param-*`` paths for its
        ``tools/call`` requests; an older session sends no such headers.
        """
        if self.era != "modern":
            return tools
        kept, self._tool_headers = http_headers.tool_headers(self.server, tools, warnings)
        return kept

    # -- for the exchanges and the listener (exchange.LinkState) ----------------------------------

    def auth_flow(self, method: str, deadline: Bound | None = None, *, request: str = "", sign_in: bool = True,
                  nonce: bool = True) -> AuthFlow:
        """The auth rounds of one request (:meth:`LinkAuth.flow`); without OAuth, none."""
        if self.auth is None:
            return no_auth()
        return self.auth.flow(method, self.url, deadline, request=request, sign_in=sign_in, nonce=nonce)

    def post_headers(self, message: dict[str, Any], given: dict[str, str]) -> dict[str, str]:
        """The headers of one POST of ``message``, with the auth's ``given`` ones."""
        return http_headers.post_headers(message, {**self._static_headers, **given}, legacy=self.era == "legacy",
                                         version=self.version, session_id=self.session_id,
                                         tool_headers=self._tool_headers)

    def stream_headers(self, given: dict[str, str], last_event_id: str | None = None) -> dict[str, str | bytes]:
        """Headers of a GET stream, with the auth's ``given`` ones; ``Last-Event-ID`` when
        resuming after that id.

        Raises:
            InvalidHeaderValue: the id cannot go into a header.
        """
        return http_headers.stream_headers({**self._static_headers, **given}, version=self.version,
                                           session_id=self.session_id, last_event_id=last_event_id)

    def submit(self, fn: Callable[[], None]) -> bool:
        try:
            self._pool.submit(fn)
            return True
        except RuntimeError:
            return False  # closing

    def finished(self, pending: Pending) -> None:
        self._exchanges.pop(pending.id, None)

    def session_lost(self) -> None:
        # 2025-11-25 basic/transports: after a 404 the client MUST start a new session.
        self.session_id = None
        self.close("the server ended the session (HTTP 404)")

    # -- internals ----------------------------------------------------------------------------

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

    def _delete_session(self, session_id: str, deadline: Deadline) -> None:
        """End the session, by ``deadline``: closing never waits for a token refresh."""
        flow = self.auth_flow("DELETE", deadline, nonce=False)
        try:
            headers = {"Mcp-Session-Id": session_id, "MCP-Protocol-Version": self.version, **self._static_headers,
                       **begin(flow)}
        except TimedOut:
            return  # the server ends an idle session itself
        try:
            reply = self.transport.send("DELETE", headers, Exchange(deadline))
            settle(flow, reply)
            reply.close()
        except HttpFailed:
            pass  # the server may already be gone; the session ends with it
