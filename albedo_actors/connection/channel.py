"""The JSON-RPC endpoint of one server connection: numbering, matching, timeouts.

Owns the table of pending requests. Callers' threads write their own requests and
wait on their own pending entry (a lock released when the answer arrives), so a call
costs one wake-up of the reader thread and one of the caller, with no hop through an
actor's mailbox. The reader thread of the transport feeds every line to
:meth:`RpcChannel.feed_line`, which

- resolves the matching pending request (ids are our own integers; an unknown,
  duplicate, late or differently typed id is dropped, never cross-matched);
- answers the server's requests itself (``ping`` → ``{}``, anything else → -32601,
  since we declare no client capabilities);
- hands notifications to ``on_notification`` (the owner turns them into actor
  messages).

When the connection ends, every pending request fails at once: those that were
sent get :class:`UnknownOutcome`. A malformed message ends the connection, because
nothing after it can be trusted to belong to the request it claims. Whatever a
message holds, handling it never raises on the reader thread: a failure there ends
the connection as that server's protocol violation (DESIGN rule 6), so the reader
always lives to report the end and no later call waits on a dead connection.

Requests the host registered handlers for run on a small pool per connection
(:data:`HANDLER_WORKERS` threads, at most :data:`HANDLER_BACKLOG` waiting or running);
one more is answered with an error at once, so a flood costs no thread.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
import time
from typing import Any, Callable, Protocol

from ..errors import ProtocolViolation, RemoteError, ServerError, TimedOut, Unavailable, UnknownOutcome
from ..wire import jsonrpc, mcp, telemetry
from ..wire.deadline import Bound, Deadline
from ..wire.jsonrpc import Json, WireError
from .progress import CallProgress, parse_report

logger = telemetry.logger(__name__)  # records carry the server and trace ids

WRITE_TIMEOUT = 5.0
HANDLER_WORKERS = 2  # threads answering a server's requests for host capabilities
HANDLER_BACKLOG = 16  # of those requests, at most this many running or waiting


# Task status notifications: 2025-11-25's, and the 2026 extension's on a listen stream.
TASK_NOTIFICATIONS = frozenset({"notifications/tasks/status", "notifications/tasks"})
# The requests for a host capability: 2026-07-28 sends none (MRTR's inputRequests instead).
HOST_REQUESTS = frozenset(mcp.HANDLED_METHODS.values())
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
# Notifications that belong to a subscriptions/listen: correlated by subscriptionId on stdio.
SUBSCRIPTION_NOTIFICATIONS = frozenset({*mcp.LIST_CHANGED, "notifications/resources/updated", ACKNOWLEDGED})


class LinkClosed(Exception):
    """Raised by a link when a message could not be sent at all."""


class Link(Protocol):
    """How a channel reaches its server: stdio (:class:`~.stdio_link.StdioLink`) or HTTP
    (:class:`~.http.link.HttpLink`). A connection uses its link through this alone: it
    never asks which transport it has."""

    def send_request(self, pending: Pending, message: dict[str, Any], deadline: Bound | None = None) -> None:
        """Send a request; raise LinkClosed if nothing was sent.

        ``deadline`` (the call's one deadline): the caller waits for the answer until then
        on this thread, so the link may do the exchange here; None: return at once.
        Whatever the link does for the request (an auth step, the exchange) ends at it;
        while a step before the send runs, the link names it in ``pending.unsent``."""

    def send_other(self, message: dict[str, Any]) -> None:
        """Send a notification or a response; raise LinkClosed if it could not be sent."""

    def cancel(self, pending: Pending) -> None:
        """The request timed out: tell the server to stop it, as the transport wants."""

    def forget(self, pending: Pending) -> None:
        """The request's answer no longer matters (it is not cancelled)."""

    def close(self, reason: str) -> None:
        """Begin closing; returns at once (:meth:`wait_closed` waits for the end)."""

    @property
    def closed(self) -> bool:
        """True once closing began."""

    def wait_closed(self, timeout: float | None = None) -> bool:
        """After :meth:`close`: wait (at most ``timeout`` s, None: the link's own bound)
        for its threads and process to end; True if they did."""

    def use(self, negotiated: mcp.Negotiated) -> None:
        """Speak as ``negotiated`` (era and version) from the next message on."""

    def listen(self, filters: dict[str, bool]) -> Pending | None:
        """Open the listening stream for list changes, as the transport and era want.

        ``filters`` are the ``subscriptions/listen`` notifications the server's
        capabilities say can change (possibly none). Returns the held-open request when
        the channel holds it (stdio), None when the link holds the stream itself (HTTP)
        or there is nothing to listen for.
        """

    def authorization_context(self) -> str:
        """A digest of the credentials the next request carries ("" for none): two
        requests share cached pages only when it is the same (connection/list_cache.py)."""

    def set_tool_headers(self, tools: tuple[dict[str, Any], ...], warnings: list[str]) -> tuple[dict[str, Any], ...]:
        """Adopt a discovered tool list; return the tools this link can call.

        Over modern HTTP each tool's ``x-mcp-header`` annotations become its
        ``Mcp-Param-*`` headers, and a tool whose annotations break the spec's rules is
        left out with a warning (2026-07-28 server/tools). Elsewhere: the tools as they are.
        """


class Pending:
    """One request awaiting its answer. Resolved exactly once, by whoever pops it."""

    __slots__ = ("id", "method", "size", "progress", "unsent", "interrupted", "span", "_lock", "_result", "_error", "_waker")

    def __init__(self, id_: int, method: str, waker: threading.Event | None, progress: CallProgress | None = None) -> None:
        self.id = id_
        self.method = method
        self.size = 0  # bytes of the answer on the wire, once resolved (0: not known)
        self.progress = progress  # its call's moving deadline, when progress can extend it
        # The step the link runs before the request is sent (a token refresh), and whether
        # the server refused it first (a 401): while set, a timeout says it did not run.
        self.unsent: tuple[str, bool] | None = None
        self.interrupted = False  # its caller gave it up (progress.Cancel): the waiter cancels it
        self.span: telemetry.RequestSpan | None = None  # its OpenTelemetry span, with the API installed
        self._lock = threading.Lock()
        self._lock.acquire()
        self._result: dict[str, Any] = {}
        self._error: ServerError | None = None
        self._waker = waker

    def resolve(self, result: dict[str, Any] | None = None, error: ServerError | None = None) -> None:
        """End the request with its result (a JSON object) or ``error``."""
        self._result = result if result is not None else {}
        self._error = error
        if self.span is not None:  # ended before the waiter wakes: the host sees it at once
            self.span.end(result, error)
        self._lock.release()
        if self._waker is not None:
            self._waker.set()

    def wait(self, timeout: float) -> bool:
        """True once resolved; False if ``timeout`` passed first."""
        if self._lock.acquire(timeout=max(0.0, timeout)):
            self._lock.release()  # stay "resolved" for later waiters
            return True
        return False

    @property
    def done(self) -> bool:
        return not self._lock.locked()

    def outcome(self) -> dict[str, Any]:
        """The result (a JSON object) of a resolved request.

        Raises:
            ServerError: the server's error, or ours (unknown outcome, ...).
        """
        if self._error is not None:
            raise self._error
        return self._result


class RpcChannel:
    """Thread-safe JSON-RPC endpoint over one transport."""

    def __init__(
        self,
        server: str,
        on_notification: Callable[[str, dict[str, Any]], None],
        on_closed: Callable[[str], None],
        handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
    ) -> None:
        self.server = server
        # Requests the host answers (elicitation, sampling, roots), by method; the
        # capabilities declared are exactly these.
        self.handlers = {mcp.HANDLED_METHODS[kind]: fn for kind, fn in (handlers or {}).items() if kind in mcp.HANDLED_METHODS}
        self.capabilities = mcp.client_capabilities(handlers)
        self._on_notification = on_notification
        self._on_closed = on_closed
        self._link: Link | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, Pending] = {}
        self._progress: dict[str, CallProgress] = {}  # progress token -> its running call
        # task id -> the running task call that hears its status notifications (connection/tasks.py)
        self._tasks: dict[str, Callable[[dict[str, Any]], None]] = {}
        self._closed_reason: str | None = None
        self._poisoned = False
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._backlog = threading.BoundedSemaphore(HANDLER_BACKLOG)
        self._pool_lock = threading.Lock()
        self._refusing = False  # warned of the current burst of refusals
        # OpenTelemetry: network.transport, server.address and server.port (set by the
        # opener), and the era once negotiated (set by the Connection).
        self.telemetry: dict[str, Any] = {}
        # The server's secret values (its env's, its headers'): never in a span attribute
        # (recorded arguments and results are redacted of them).
        self.secrets: tuple[str, ...] = ()
        self.negotiated: mcp.Negotiated | None = None
        self.opened_at = 0.0  # time.monotonic() when negotiated
        # The subscriptions/listen requests this channel holds (stdio), by id: the filters
        # each asked for. None: the link holds its listen streams itself (HTTP), one
        # stream per subscription, and nothing here is correlated.
        self._listens: dict[int, dict[str, bool]] | None = None
        # Filters asked for that the server's acknowledgement left out, sorted.
        self.unacknowledged: tuple[str, ...] = ()

    def attach(self, link: Link) -> None:
        self._link = link

    def _attached(self) -> Link:
        if self._link is None:  # not so once opened: a link is attached before the first request
            raise LinkClosed()
        return self._link

    # -- requests ------------------------------------------------------------------

    def start(self, method: str, params: dict[str, Any] | None, waker: threading.Event | None = None,
              deadline: Bound | None = None, progress: CallProgress | None = None,
              subscription: dict[str, bool] | None = None) -> Pending:
        """Send a request; return its pending entry.

        ``subscription``: the request is a ``subscriptions/listen`` this channel holds,
        asking for these filters: from now on the notifications of a subscription pass
        only when their ``subscriptionId`` is such a request's id.

        ``deadline``: the caller will wait for the answer until then (see
        :meth:`Link.send_request`); the entry may be answered when this returns.
        ``progress``: the call's progress (registered with :meth:`track`), whose
        deadline :meth:`wait` follows.

        Raises:
            Unavailable: the connection is closed or would not take the request.
        """
        pending = Pending(next(self._ids), method, waker, progress)
        self._pending[pending.id] = pending  # before writing: the answer may race us
        if subscription is not None:  # before writing too: its acknowledgement may race us
            self._listens = {**(self._listens or {}), pending.id: dict(subscription)}
        if self._closed_reason is not None:
            self._pending.pop(pending.id, None)
            raise Unavailable(self.server, f"not connected ({self._closed_reason}); {method} was not sent")
        cancel = progress.cancel if progress is not None else None
        if cancel is not None:
            if cancel.cancelled:  # given up before it was sent: it is not sent
                self._pending.pop(pending.id, None)
                raise TimedOut(self.server, f"{method} was not sent: its caller gave it up", sent=False)
            cancel.bind(lambda: self.interrupt(pending))
        if telemetry.api() is not None:
            pending.span, params = telemetry.start_request(method, params, self.telemetry_attributes, pending.id,
                                                           secrets=self.secrets)
        try:
            self._attached().send_request(pending, jsonrpc.request(pending.id, method, params), deadline)
        except LinkClosed:
            self._pending.pop(pending.id, None)
            error = Unavailable(self.server, f"the connection closed before {method} was sent")
            if pending.span is not None:
                pending.span.end(error=error)
            raise error from None
        return pending

    def telemetry_attributes(self) -> dict[str, Any]:
        """The connection's attributes of a request span (OpenTelemetry MCP conventions)."""
        attributes = dict(self.telemetry)
        negotiated = self.negotiated
        if negotiated is not None:
            attributes["mcp.protocol.version"] = negotiated.version
            session = getattr(self._link, "session_id", None)
            if session is not None and not negotiated.modern:  # never for 2026-07-28
                attributes["mcp.session.id"] = session
        return attributes

    def interrupt(self, pending: Pending) -> None:
        """Its caller gave ``pending`` up (any thread; no blocking I/O here): an exchange
        reading its answer is aborted and the caller's wait ends at once; the waiting
        thread then cancels the request as a timeout does (:meth:`wait`)."""
        if self._pending.pop(pending.id, None) is None:
            return  # answered (or given up) already
        pending.interrupted = True
        if self._link is not None:
            self._link.forget(pending)  # HTTP: the exchange is aborted (a socket shut); stdio: nothing
        pending.resolve(error=TimedOut(self.server, f"{pending.method} was given up by its caller; the server was told "
                                                    "to cancel it"))

    def reserve(self, method: str, waker: threading.Event | None = None) -> Pending:
        """Register a request that the caller sends itself (e.g. a held-open listen)."""
        pending = Pending(next(self._ids), method, waker)
        self._pending[pending.id] = pending
        return pending

    def track(self, progress: CallProgress) -> None:
        """From now on a ``notifications/progress`` for ``progress.token`` reaches it."""
        self._progress[progress.token] = progress

    def untrack(self, progress: CallProgress) -> None:
        """The call ended: its token's notifications change nothing any more."""
        self._progress.pop(progress.token, None)

    def fail(self, pending: Pending, error: ServerError) -> None:
        """End ``pending`` with ``error`` unless it was answered (or given up) already."""
        if self._pending.pop(pending.id, None) is not None:
            pending.resolve(error=error)

    def take(self, pending: Pending) -> bool:
        """Remove ``pending`` without resolving it; True if it was still pending."""
        return self._pending.pop(pending.id, None) is not None

    def is_pending(self, pending: Pending) -> bool:
        return pending.id in self._pending

    def wait(self, pending: Pending, timeout: float, *, cancel: bool = True) -> dict[str, Any]:
        """Wait for ``pending``'s answer for at most ``timeout`` seconds.

        On timeout the request is dropped and, when ``cancel``, cancelled the way
        its transport wants (stdio: ``notifications/cancelled``, 2025-11-25
        basic/utilities/cancellation, 2026-07-28 basic/patterns/cancellation).

        With ``pending.progress`` the wait ends at its deadline instead, which a
        progress notification may move (never past its cap): ``timeout`` is unused.

        Raises:
            TimedOut, UnknownOutcome, RemoteError, ProtocolViolation.
        """
        try:
            return self._wait(pending, timeout, cancel)
        except ServerError as exc:  # given up here (an answer has ended its span already)
            if pending.span is not None:
                pending.span.end(error=exc)
            raise

    def _wait(self, pending: Pending, timeout: float, cancel: bool) -> dict[str, Any]:
        progress = pending.progress
        if progress is not None:
            try:
                return self._wait_moving(pending, progress, cancel)
            finally:
                if progress.cancel is not None:
                    progress.cancel.bind(None)
        if not pending.wait(timeout):
            if self._pending.pop(pending.id, None) is not None:
                self._give_up(pending, cancel, timeout)
                raise TimedOut(self.server, f"{pending.method} got no answer within {timeout:g} s; it was cancelled")
            pending.wait(1.0)  # answered as we gave up: it was resolved just now
        return pending.outcome()

    def _give_up(self, pending: Pending, cancel: bool, seconds: float) -> None:
        """The wait for ``pending`` (taken from the table) ended at its deadline: cancel it,
        or, when a step before its send was still running, drop it and say so.

        Raises:
            TimedOut: with ``sent`` False, when the request was never sent.
        """
        unsent = pending.unsent
        if unsent is not None:  # nothing runs on the server to cancel: the step goes on without us
            self._attached().forget(pending)
            raise TimedOut.unsent(self.server, pending.method, unsent[0], seconds, refused=unsent[1])
        if cancel:
            self._attached().cancel(pending)
        else:
            self._attached().forget(pending)

    def _wait_moving(self, pending: Pending, progress: CallProgress, cancel: bool) -> dict[str, Any]:
        while not pending.wait(progress.deadline - time.monotonic()):
            if progress.deadline > time.monotonic():
                continue  # progress moved the deadline while we waited
            if self._pending.pop(pending.id, None) is not None:
                self._give_up(pending, cancel, progress.timeout)
                raise TimedOut(self.server, progress.timed_out(self.server, pending.method))
            pending.wait(1.0)  # answered as we gave up: it was resolved just now
            break
        if pending.interrupted:  # its caller gave it up: cancelled here, on the caller's thread, as at a timeout
            try:
                self._give_up(pending, cancel, progress.timeout)
            except TimedOut:
                pass  # a step before the send was still running: nothing ran, nothing to cancel
        return pending.outcome()

    def request(self, method: str, params: dict[str, Any] | None, timeout: float) -> dict[str, Any]:
        """Send a request and wait for its result (see :meth:`start`, :meth:`wait`)."""
        return self.wait(self.start(method, params, deadline=Deadline.after(timeout)), timeout)

    def drop(self, pending: Pending) -> None:
        """Forget a request whose answer no longer matters (it is not cancelled)."""
        if self._pending.pop(pending.id, None) is not None:
            if pending.span is not None:
                pending.span.end()  # abandoned: no outcome
            if self._link is not None:
                self._link.forget(pending)

    def notify(self, method: str, params: dict[str, Any] | None = None) -> bool:
        """Send a notification; False if the connection could not take it."""
        return self._write(jsonrpc.notification(method, params))

    def close(self, reason: str = "closed") -> None:
        if self._link is not None:
            self._link.close(reason)

    @property
    def closed_reason(self) -> str | None:
        """Why the connection ended, or None while it is open."""
        return self._closed_reason

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    # -- from the transport's reader thread -----------------------------------------

    def feed_line(self, line: bytes) -> None:
        """One line from a byte-stream transport. Never raises."""
        if self._poisoned:
            return  # after a malformed message nothing can be trusted; the end is near
        try:
            message = jsonrpc.parse_line(line)
        except WireError as exc:
            self._violation(str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - the reader thread must live (module docstring)
            self._failed(exc)
            return
        self.feed_message(message, len(line))

    def feed_message(self, message: Json, size: int = 0) -> None:
        """One parsed JSON value from the server, ``size`` bytes on the wire. Never raises."""
        if self._poisoned:
            return
        try:
            kind = jsonrpc.classify(message)
        except WireError as exc:
            self._violation(str(exc))
            return
        try:
            if kind is jsonrpc.RESPONSE:
                self._on_response(message, size)
            elif kind is jsonrpc.NOTIFICATION:
                params = message.get("params")
                params = params if isinstance(params, dict) else {}
                method = message["method"]
                if method == "notifications/progress":
                    self._on_progress(params)
                elif method in TASK_NOTIFICATIONS:
                    self._on_task(params)
                elif self._listens is not None and method in SUBSCRIPTION_NOTIFICATIONS:
                    if self._correlated(method, params):
                        self._on_notification(method, params)
                else:
                    self._on_notification(message["method"], params)
            else:
                self._on_request(message)
        except Exception as exc:  # noqa: BLE001 - the reader thread must live (module docstring)
            self._failed(exc)

    def connection_lost(self, reason: str, local: bool = False) -> None:
        """The transport ended: fail every pending request at once."""
        first = self._closed_reason is None
        self._closed_reason = reason
        negotiated = self.negotiated
        if first and negotiated is not None and not negotiated.modern and telemetry.api() is not None:
            # mcp.client.session.duration: a session-era connection's whole life.
            attributes = {**self.telemetry, "mcp.protocol.version": negotiated.version}
            if not local:  # the server or the transport ended it, not we
                attributes["error.type"] = "connection_lost"
            telemetry.session_ended(time.monotonic() - self.opened_at, attributes)
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)  # its threads end with their handler
        for id_ in list(self._pending):
            pending = self._pending.pop(id_, None)
            if pending is not None:
                message = f"the connection ended ({reason}) before {pending.method} was answered"
                pending.resolve(error=UnknownOutcome(self.server, message + "; it may or may not have run"))
        self._on_closed(reason)

    # -- internals -------------------------------------------------------------------

    def _on_response(self, message: dict[str, Any], size: int = 0) -> None:
        id_ = message.get("id")
        pending = self._pending.pop(id_, None) if type(id_) is int else None
        if pending is None:
            if id_ is None:
                logger.warning("server %r reported an error for an unreadable request: %s", self.server, _brief(message.get("error")))
            else:
                logger.debug("server %r answered unknown id %r; dropped", self.server, id_)
            return
        pending.size = size
        if "error" in message:
            error = message["error"]
            pending.resolve(error=RemoteError(self.server, error["code"], error.get("message", ""), error.get("data")))
        elif isinstance(message["result"], dict):
            pending.resolve(result=message["result"])
        else:
            pending.resolve(error=ProtocolViolation(self.server, f"the result of {pending.method} is not an object"))

    def _on_progress(self, params: dict[str, Any]) -> None:
        """A progress notification: O(1), and only for a call that is running."""
        token = params.get("progressToken")
        progress = self._progress.get(token) if isinstance(token, str) else None
        if progress is None:
            return  # another's token, or a call that has ended: it changes nothing
        report = parse_report(self.server, params)
        if report is not None:
            progress.note(report)

    def watch_task(self, task_id: str, hear: Callable[[dict[str, Any]], None] | None) -> None:
        """From now on a task status notification naming ``task_id`` reaches ``hear``
        (on the reader thread: it must be O(1)); None: no longer."""
        if hear is None:
            self._tasks.pop(task_id, None)
        else:
            self._tasks[task_id] = hear

    def _on_task(self, params: dict[str, Any]) -> None:
        """A task's status notification: O(1), and only for a task call that is running."""
        task_id = params.get("taskId")
        hear = self._tasks.get(task_id) if isinstance(task_id, str) else None
        if hear is not None:
            hear(params)

    def _correlated(self, method: str, params: dict[str, Any]) -> bool:
        """Whether a subscription's notification is for the owner: its ``subscriptionId``
        names a listen of ours that asked for its type (2026-07-28
        basic/patterns/subscriptions: on stdio the client MUST correlate by it). An
        acknowledgement is handled here, never passed on."""
        listens = self._listens or {}
        meta = params.get("_meta")
        sid = meta.get(mcp.META_SUBSCRIPTION_ID) if isinstance(meta, dict) else None
        asked = listens.get(sid) if type(sid) is int else None
        if asked is None:
            logger.debug("server %r: %s for subscription %r, which is none of ours; dropped", self.server, method, _brief(sid))
            return False
        if method == ACKNOWLEDGED:
            self._acknowledged(asked, params.get("notifications"))
            return False
        kind = mcp.LIST_CHANGED.get(method)
        if kind is not None and asked.get(mcp.LISTEN_FILTERS[kind]) is not True:
            logger.debug("server %r: %s, which its subscription did not ask for; dropped", self.server, method)
            return False
        return True

    def _acknowledged(self, asked: dict[str, bool], honoured: Any) -> None:
        """The server's acknowledgement of a listen: the filters it left out are noted
        (:attr:`unacknowledged`) and said once; the subscription goes on for the rest, and
        the lists left out are read again at each new connection only."""
        honoured = honoured if isinstance(honoured, dict) else {}
        missing = tuple(sorted(name for name, on in asked.items() if on and honoured.get(name) is not True))
        self.unacknowledged = missing
        if missing:
            logger.info("server %r will not announce %s on its subscription; those lists are read again only when it "
                        "reconnects", self.server, ", ".join(missing))
        extra = sorted(name for name, on in honoured.items() if on is True and name not in asked)
        if extra:
            logger.debug("server %r acknowledged %s, which were not asked for; ignored", self.server, _brief(extra))

    def _on_request(self, message: dict[str, Any]) -> None:
        method = message["method"]
        handler = self.handlers.get(method)
        negotiated = self.negotiated
        if method in HOST_REQUESTS and negotiated is not None and negotiated.modern:
            # SEP-2260: a request for client input with no request of ours behind it is
            # refused as invalid params; 2026-07-28 has no server requests at all, so none
            # is associated (its input comes in an input_required result's inputRequests).
            self._write(jsonrpc.error_response(message["id"], jsonrpc.INVALID_PARAMS,
                                               f"{method} is not associated with a request of this client"))
            return
        if method == "ping":
            self._write(jsonrpc.result_response(message["id"], {}))
        elif handler is not None:
            # A host handler may take its time (ask a user): never on the reader thread,
            # and never more than HANDLER_BACKLOG of them for one connection.
            if not self._submit_handler(handler, message):
                # One warning a burst (a flood of refusals must not flood the log).
                if not self._refusing:
                    self._refusing = True
                    logger.warning("server %r: more than %d requests for the host at once; refusing the excess", self.server, HANDLER_BACKLOG)
                logger.debug("server %r: refused %s (id %r): too many at once", self.server, method, message["id"])
                self._write(jsonrpc.error_response(message["id"], jsonrpc.INTERNAL_ERROR, "the client is busy answering earlier requests"))
        else:
            # Only what a host registered a handler for is declared and answered.
            self._write(jsonrpc.error_response(message["id"], jsonrpc.METHOD_NOT_FOUND, f"Method not found: {method}"))

    def _submit_handler(self, handler: Callable[[dict[str, Any]], dict[str, Any]], message: dict[str, Any]) -> bool:
        """Queue ``message`` for ``handler`` on the pool; False when the backlog is full."""
        if not self._backlog.acquire(blocking=False):
            return False
        with self._pool_lock:
            if self._closed_reason is not None:
                self._backlog.release()
                return True  # closing: nothing will be answered anyway
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(HANDLER_WORKERS, thread_name_prefix=f"mcp-handler-{self.server}")
            future = self._pool.submit(self._answer_with, handler, message)
        future.add_done_callback(self._handler_done)
        return True

    def _handler_done(self, _future: concurrent.futures.Future[None]) -> None:
        self._backlog.release()
        self._refusing = False

    def _answer_with(self, handler: Callable[[dict[str, Any]], dict[str, Any]], message: dict[str, Any]) -> None:
        params = message.get("params")
        try:
            result = handler(params if isinstance(params, dict) else {})
            answer = jsonrpc.result_response(message["id"], result)
            jsonrpc.encode(answer)  # a handler's result that cannot be sent fails here, not in the link
        except Exception as exc:  # noqa: BLE001 - the host's handler failing is the server's error to see
            logger.warning("server %r: the host's handler for %s failed: %s", self.server, message["method"], exc)
            self._write(jsonrpc.error_response(message["id"], jsonrpc.INTERNAL_ERROR, "the client could not handle the request"))
            return
        self._write(answer)

    def _failed(self, exc: Exception) -> None:
        """Handling a message raised: our bug or a server's text we did not foresee."""
        logger.error("server %r: handling its message failed (%s: %s)", self.server, type(exc).__name__, _brief(exc))
        logger.debug("server %r: the failure in full", self.server, exc_info=True)
        self._violation(f"a message this client could not handle ({type(exc).__name__})")

    def _violation(self, reason: str) -> None:
        self._poisoned = True
        logger.warning("server %r sent an invalid message (%s); closing the connection", self.server, reason)
        self.close(f"it sent an invalid message: {reason}")

    def _write(self, message: dict[str, Any]) -> bool:
        if self._closed_reason is not None or self._link is None:
            return False
        try:
            self._link.send_other(message)
            return True
        except LinkClosed:
            return False


def _brief(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 200 else text[:199] + "…"
