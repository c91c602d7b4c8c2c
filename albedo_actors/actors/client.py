"""ServerClient: the actor that owns one server's connection; ServerHandle: its typed front.

A handle starts its ServerClient when first used (see :class:`ServerHandle`): the
hundreds of servers a host may configure cost no thread until a session calls them.

**Owns** the current :class:`~albedo_actors.connection.Connection` (at most one), the
catalogue last discovered, the dialer thread that opens a connection, the
discovery thread that re-reads the catalogue after a ``list_changed``, and the reaper
threads that finish connections that ended (then forget them).

**Asks** nobody. **Tells** its owner (an actor ref, optional) :class:`CatalogueChanged`
only when the catalogue really differs, and :class:`ServerLost` when a connection drops.

**Threads**: the actor's own thread only updates state. Blocking work runs on the
dialer and discovery threads, which report back with messages; the transport's
reader thread resolves responses directly (see :mod:`albedo_actors.connection.channel`) and sends
notifications and closures here as messages.

Requests do not pass through the mailbox: :class:`ServerHandle` tells the actor a
:class:`Connect` request (reply.py's pattern) and waits on its reply for the live
connection (dialled first when there is none), then writes its request on the caller's
own thread and waits there, with the call's timeout. Tool calls are never retried.

A stdio server whose process ends unexpectedly is started again without waiting for a
call (the dial waits out a backoff first: RESTART_FIRST_WAIT, doubling; after
RESTART_LIMIT restarts within RESTART_WINDOW the next call dials it instead), so its
subscription is listened to again at once; an HTTP server is dialled again at the next
call.

Stopping: :class:`Close` (told) closes the connection at once, so the server gets EOF;
``on_stop`` closes too (if nobody told Close first) and then waits, bounded, for the
processes and helper threads to end. No helper thread waits on an actor.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import pykka

from ..catalogue import Catalogue
from ..config import ServerConfig
from ..connection.stdio_link import launch_spec
from ..connection import Connection, Handlers, discover, open_http, open_stdio
from ..connection.list_cache import LIST_METHODS, ListCache
from ..errors import AlbedoError, RemoteError, ResourceNotFound, SessionExpired, TimedOut, Unavailable, UnknownOutcome
from ..connection.channel import Link, Pending
from ..connection.progress import CallProgress, Cancel, ProgressReport, Reporter, new_token
from ..transport.stdio import LaunchSpec
from ..wire import jsonrpc, mcp
from ..wire import tasks as wire_tasks
from ..wire.deadline import Deadline
from .reply import Message, Request, chain, fail, fail_queued, resolve, set_field
from ..wire import telemetry

if TYPE_CHECKING:
    from ..connection.http.exchange import LinkAuth
    from ..store.records import Credentials

logger = telemetry.logger(__name__)  # records carry the server and trace ids

LONG_CALL = 10.0  # seconds: a plain call of a tool that allows tasks this long runs as a task next time ("auto")
ASK_TIMEOUT = 5.0  # for the actor's own bookkeeping answers; it never blocks on I/O
# A stdio server whose process exits unexpectedly is started again at once, without
# waiting for a call (2026-07-28 basic/transports/stdio: the client SHOULD restart it):
# after RESTART_FIRST_WAIT s, doubling with each restart within RESTART_WINDOW s; after
# RESTART_LIMIT of those, the next call dials it again instead.
RESTART_FIRST_WAIT = 0.25
RESTART_WINDOW = 60.0
RESTART_LIMIT = 4
STOP_TIMEOUT = 10.0


# -- events told to the owner ------------------------------------------------------------


@dataclass(frozen=True)
class CatalogueChanged:
    server: str
    catalogue: Catalogue


@dataclass(frozen=True)
class ServerLost:
    server: str
    reason: str


# -- messages to the client ----------------------------------------------------------------


class Connect(Request):
    """``reply`` resolves with the live :class:`Connection`, dialling one when there is
    none; it fails with :class:`Unavailable` (or :class:`Incompatible`) when the dial
    fails or the client is closing. Every dial is bounded by ``startupTimeoutMs``.
    ``context``: the asker's OpenTelemetry context (wire/telemetry.py), carried to the
    dial's thread so that its spans are the asker's children."""

    __slots__ = ("context",)
    context: object | None

    def __init__(self, context: object | None = None, *, reply: Any = None) -> None:
        super().__init__(reply=reply)
        set_field(self, "context", context)


class Close(Message):
    """Close the connection now (the server gets EOF) without waiting for its end; the
    stop that follows waits. A runtime that stops tells every client this first, so its
    servers end in parallel."""

    __slots__ = ()


# -- messages from the helper threads --------------------------------------------------------


class _Dialled(Message):
    __slots__ = ("attempt", "connection", "catalogue", "error", "listen")
    attempt: int
    connection: Connection | None
    catalogue: Catalogue | None
    error: AlbedoError | None
    listen: Pending | None  # the held-open subscriptions/listen of a modern stdio server

    def __init__(self, attempt: int, connection: Connection | None, catalogue: Catalogue | None,
                 error: AlbedoError | None, listen: Pending | None = None) -> None:
        set_field(self, "attempt", attempt)
        set_field(self, "connection", connection)
        set_field(self, "catalogue", catalogue)
        set_field(self, "error", error)
        set_field(self, "listen", listen)


class _Notified(Message):
    __slots__ = ("attempt", "method", "params")
    attempt: int
    method: str
    params: dict[str, Any]

    def __init__(self, attempt: int, method: str, params: dict[str, Any]) -> None:
        set_field(self, "attempt", attempt)
        set_field(self, "method", method)
        set_field(self, "params", params)


class _Closed(Message):
    __slots__ = ("attempt", "reason")
    attempt: int
    reason: str

    def __init__(self, attempt: int, reason: str) -> None:
        set_field(self, "attempt", attempt)
        set_field(self, "reason", reason)


class _SavedEra(Message):
    """From the preparer: the era a saved catalogue of this configuration recorded."""

    __slots__ = ("era",)
    era: str

    def __init__(self, era: str) -> None:
        set_field(self, "era", era)


class _Discovered(Message):
    __slots__ = ("attempt", "catalogue", "error")
    attempt: int
    catalogue: Catalogue | None
    error: AlbedoError | None

    def __init__(self, attempt: int, catalogue: Catalogue | None, error: AlbedoError | None) -> None:
        set_field(self, "attempt", attempt)
        set_field(self, "catalogue", catalogue)
        set_field(self, "error", error)


class ServerClient(pykka.ThreadingActor):
    """One per server connection; see the module docstring."""

    def __init__(
        self,
        config: ServerConfig,
        home: str,
        owner: pykka.ActorRef | None = None,
        spec_factory: Callable[[ServerConfig], LaunchSpec] | None = None,
        handlers: Handlers | None = None,
        credentials: Credentials | None = None,
        closed: threading.Event | None = None,
        auth: LinkAuth | None = None,
    ) -> None:
        # ``credentials``: the server's stored credentials, a plain record (see
        # albedo_actors.store.Credentials) with ``bearer_token``, ``header`` and ``env``;
        # the actor never touches the store itself.
        super().__init__()
        self._handlers = handlers
        self._closed_event = closed  # set once on_stop has ended every connection
        self.config = config
        self._home = home
        self._owner = owner
        self._credentials = credentials
        self._auth = auth  # a refresher.ServerAuth for an HTTP server that may ask for OAuth
        self._spec_factory = spec_factory or (lambda cfg: launch_spec(cfg, home, credentials=credentials))
        self._connection: Connection | None = None
        self._catalogue: Catalogue | None = None
        self._attempt = 0
        self._dial: concurrent.futures.Future | None = None
        self._dialer: threading.Thread | None = None
        self._opening = _Opening(config.name)  # transports of the dial in progress
        self._discoverer: threading.Thread | None = None
        self._rediscover = False
        self._listen: Pending | None = None
        self._go: threading.Event | None = None  # set: a dial waiting out a restart's backoff starts now
        self._restarts: list[float] = []  # when each recent restart of a lost stdio server began
        self._stopping = False
        self._old: list[Connection] = []  # closed by a stop: on_stop waits for them
        self._reapers: list[threading.Thread] = []  # each finishing a connection that ended
        self._saved_era: str | None = None  # told by the preparer from a saved catalogue
        # The list pages the server said are fresh (2026-07-28 ttlMs), across this
        # client's connections; discovery reads and fills it, list_changed empties a list.
        self._list_cache = ListCache()

    # -- public API (proxy calls) ------------------------------------------------------------

    def catalogue(self) -> Catalogue | None:
        """The catalogue last discovered (None before the first successful dial)."""
        return self._catalogue

    def status(self) -> dict[str, Any]:
        connection = self._connection
        return {
            "server": self.config.name,
            "connected": connection is not None and connection.alive,
            "era": connection.era if connection else (self._catalogue.era if self._catalogue else None),
            "version": connection.version if connection else None,
            "discovering": self._discoverer is not None,
            "attempt": self._attempt,  # connections dialled so far
            # the list changes its subscription asked for that the server's acknowledgement left out
            "unannounced": connection.channel.unacknowledged if connection is not None else (),
        }

    # -- messages from helper threads ---------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Connect):
            self._on_connect(message.reply, message.context)
        elif isinstance(message, Close):
            self._close()
        elif isinstance(message, _Notified):
            self._on_notified(message)
        elif isinstance(message, _Closed):
            self._on_closed(message)
        elif isinstance(message, _Dialled):
            self._on_dialled(message)
        elif isinstance(message, _Discovered):
            self._on_discovered(message)
        elif isinstance(message, _SavedEra):
            self._saved_era = message.era
        else:
            return super().on_receive(message)
        return None

    def _on_connect(self, reply: concurrent.futures.Future, context: object | None = None) -> None:
        if self._connection is not None:
            if self._connection.alive:
                resolve(reply, self._connection)
                return
            # It ended and its _Closed is still on the way (the caller heard first); the
            # dial below makes that message stale, so the connection is retired here.
            connection, self._connection = self._connection, None
            self._listen = None
            self._retire(connection)
        if self._stopping:
            fail(reply, Unavailable(self.config.name, "the client is closing"))
            return
        if self._dial is None:
            self._start_dial(context)
        elif self._go is not None:
            self._go.set()  # a restart waiting out its backoff: a caller wants it now
        assert self._dial is not None
        chain(self._dial, reply)

    def _on_dialled(self, message: _Dialled) -> None:
        future, self._dial = self._dial, None
        self._dialer = None
        self._go = None
        self._opening.forget()  # the dial is over: what it opened is ours or closed
        if message.error is not None:
            if future is not None:
                future.set_exception(message.error)
            return
        connection = message.connection
        assert connection is not None  # a dial without an error brings its connection
        if self._stopping:
            connection.close("client stopping")
            self._old.append(connection)
            if future is not None:
                future.set_exception(Unavailable(self.config.name, "the client is stopping"))
            return
        self._connection = connection
        self._listen = message.listen if connection.alive else None
        self._adopt(message.catalogue)
        if self._rediscover and connection.alive:
            # A change was announced while the dial was still reading the lists.
            self._rediscover = False
            self._start_discovery()
        if future is not None:
            future.set_result(connection)

    def _on_notified(self, message: _Notified) -> None:
        if message.attempt != self._attempt:
            return
        method = message.method
        if method in mcp.LIST_CHANGED:
            if self._discoverer is not None or self._dialer is not None:
                self._rediscover = True  # runs exactly once more when this one (or the dial) ends
            elif self._connection is not None:
                self._start_discovery()
        elif method == "notifications/cancelled" and self._listen is not None:
            if message.params.get("requestId") == self._listen.id:
                logger.info("server %r ended its change subscription", self.config.name)

    def _on_closed(self, message: _Closed) -> None:
        if message.attempt != self._attempt or self._connection is None:
            return
        connection, self._connection = self._connection, None
        self._listen = None
        self._retire(connection)
        delay = self._restart_delay()
        if delay is None:
            logger.warning("server %r: connection lost: %s; the next call dials it again", self.config.name, message.reason)
        else:
            logger.warning("server %r: connection lost: %s; starting it again in %g s", self.config.name, message.reason, delay)
        self._tell_owner(ServerLost(self.config.name, message.reason))
        if delay is not None and self._dial is None and not self._stopping:
            # Restarted now, not at the next call: a subscription is listened to again at
            # once (the dial sends subscriptions/listen), and a call finds it ready.
            self._start_dial(delay=delay)

    def _restart_delay(self) -> float | None:
        """The wait before restarting a stdio server whose process ended unexpectedly;
        None: not restarted now (an HTTP server, or RESTART_LIMIT restarts within
        RESTART_WINDOW s: the next call dials it)."""
        if self.config.type == "http" or self._stopping:
            return None
        now = time.monotonic()
        self._restarts = [t for t in self._restarts if now - t < RESTART_WINDOW]
        if len(self._restarts) >= RESTART_LIMIT:
            return None
        delay = RESTART_FIRST_WAIT * 2 ** len(self._restarts)
        self._restarts.append(now)
        return delay

    def _on_discovered(self, message: _Discovered) -> None:
        self._discoverer = None
        if message.attempt == self._attempt:
            if message.error is not None:
                logger.warning("server %r: re-discovery failed: %s", self.config.name, message.error)
            else:
                self._adopt(message.catalogue)
        if self._rediscover and not self._stopping and self._connection is not None:
            self._rediscover = False
            self._start_discovery()

    # -- lifecycle ------------------------------------------------------------------------------

    def on_stop(self) -> None:
        fail_queued(self, lambda message: Unavailable(self.config.name, "the client stopped"))
        self._close()
        for thread in (self._dialer, self._discoverer, *self._reapers):
            if thread is not None:
                thread.join(STOP_TIMEOUT)
        self._reapers = []
        if self._dial is not None:
            fail(self._dial, Unavailable(self.config.name, "the client stopped"))
            self._dial = None
        for connection in self._old:
            connection.wait_closed()
        self._old = []
        if self._closed_event is not None:
            self._closed_event.set()

    def _close(self) -> None:
        """Close every connection and the dial in progress without waiting: each server
        gets EOF now. Idempotent; ``on_stop`` then waits for the processes to end."""
        self._stopping = True
        self._opening.close_all()
        if self._go is not None:
            self._go.set()  # a dial waiting to restart the server goes on now, and fails at once
        if self._connection is not None:
            if self._listen is not None and self._connection.alive:
                # 2026-07-28 basic/patterns/subscriptions: on stdio the client ends a
                # subscription with notifications/cancelled for the listen request.
                self._connection.channel.notify("notifications/cancelled", {"requestId": self._listen.id, "reason": "client closing"})
            self._old.append(self._connection)
            self._connection = None
            self._listen = None
        for connection in self._old:
            connection.close("client closing")
        if self._dial is not None:
            fail(self._dial, Unavailable(self.config.name, "the client is closing"))
            self._dial = None

    def on_failure(self, exception_type, exception_value, traceback) -> None:
        self.on_stop()

    # -- internals ----------------------------------------------------------------------------

    def _start_dial(self, context: object | None = None, delay: float = 0.0) -> None:
        """Dial on a helper thread; ``context``: the OpenTelemetry context it runs in;
        ``delay``: seconds it waits first (a restart's backoff), unless a caller or a stop
        sets its go event."""
        self._attempt += 1
        if self._attempt > 1:
            telemetry.count("mcp.client.reconnects", self.config.name)
        self._rediscover = False
        attempt = self._attempt
        self._dial = concurrent.futures.Future()
        go = self._go = threading.Event()
        ref = self.actor_ref
        config = self.config
        cache = self._list_cache
        # The era to open with: what this client last found, else what a saved catalogue
        # says (2026-07-28 basic/versioning: the era MAY be cached and persisted across
        # restarts of the same configuration; the opening re-probes if it is wrong).
        era = self._catalogue.era if self._catalogue is not None else self._saved_era

        def on_notification(method: str, params: dict[str, Any]) -> None:
            # On the reader thread: only what changes state goes to the mailbox, so a
            # flood of log messages costs the actor nothing.
            if method in mcp.LIST_CHANGED:
                # At once, on this thread: the re-discovery it causes asks the server.
                cache.forget(*LIST_METHODS[mcp.LIST_CHANGED[method]])
            if method in mcp.LIST_CHANGED or method == "notifications/cancelled":
                _tell(ref, _Notified(attempt, method, params))
            elif method == "notifications/message":
                logger.debug("server %r logged %s: %.300s", config.name, params.get("level"), params.get("data"))

        def on_closed(reason: str) -> None:
            _tell(ref, _Closed(attempt, reason))

        def dial() -> None:
            if delay > 0:
                go.wait(delay)  # a bounded backoff; a caller or a stop ends it early
            with telemetry.attached(context), telemetry.step("connect", config.name):
                dial_in_context()

        def dial_in_context() -> None:
            connection = catalogue = listen = None
            error: AlbedoError | None = None
            try:
                for _attempt in range(2):
                    connection = self._open(config, on_notification, on_closed, era)
                    # Listen before discovering, on this thread: a change made while the
                    # lists are read is heard, and (HTTP) the stream is open before any
                    # caller can send a request whose server requests may travel on it.
                    listen = connection.start_listen()
                    try:
                        catalogue = discover(connection, config.startup_timeout, cache)
                        break
                    except SessionExpired:
                        # 2025-11-25 basic/transports: after a 404 the client MUST start a
                        # new session; a discovery under way does so once, at once.
                        connection.close("session ended")
                        connection.wait_closed()
                        connection = None
                else:
                    raise Unavailable(config.name, "ended two sessions in a row while being discovered")
            except UnknownOutcome as exc:
                # A discovery request was lost with its connection: for everyone
                # waiting on this dial (a tool call among them) nothing of theirs was
                # sent, so it is "not run, safe to retry", not "may or may not have run".
                error = Unavailable(config.name, f"could not be discovered: {_as_discovery(exc.detail)}; "
                                                 f"nothing waiting on it was sent")
            except AlbedoError as exc:
                error = exc
            except Exception as exc:  # a bug must not leave the dial future hanging
                logger.exception("server %r: dial failed unexpectedly", config.name)
                error = Unavailable(config.name, f"could not connect ({type(exc).__name__}: {exc})")
            if error is not None and connection is not None:
                connection.close("discovery failed")
                connection.wait_closed()
                connection = None
            if not _tell(ref, _Dialled(attempt, connection, catalogue, error, listen)) and connection is not None:
                connection.close("client stopped")
                connection.wait_closed()

        self._dialer = threading.Thread(target=dial, name=f"mcp-dial-{config.name}", daemon=True)
        self._dialer.start()

    def _open(self, config: ServerConfig, on_notification: Any, on_closed: Any, era: str | None = None) -> Connection:
        if config.type == "http":
            return open_http(
                config,
                on_notification,
                on_closed,
                config.startup_timeout,
                track=self._opening.add,
                handlers=self._handlers,
                credentials=self._credentials,
                auth=self._auth,
                era=era,
            )
        spec = self._spec_factory(config)
        return open_stdio(
            config.name, spec, on_notification, on_closed, config.startup_timeout, track=self._opening.add, handlers=self._handlers,
            era=era,
        )

    def _retire(self, connection: Connection) -> None:
        """Finish a connection that ended, on a helper thread, and forget it.

        The reaper waits (bounded by the link's own grace) for its process and threads to
        end and closes an HTTP link's pool and sockets; then nothing refers to it. A server
        that dies a thousand times leaves its client holding none of the thousand (issue
        23's load run: each one was kept until the client stopped). ``on_stop`` joins the
        reapers still running, so a stop still waits for every process to end.
        """
        connection.close("connection lost")  # it ended already; the link begins closing too

        def reap() -> None:
            connection.wait_closed()

        self._reapers = [thread for thread in self._reapers if thread.is_alive()]
        thread = threading.Thread(target=reap, name=f"mcp-reap-{self.config.name}", daemon=True)
        self._reapers.append(thread)
        thread.start()

    def _start_discovery(self) -> None:
        connection, attempt, ref = self._connection, self._attempt, self.actor_ref
        assert connection is not None  # a discovery runs on the live connection only
        timeout = self.config.startup_timeout
        cache = self._list_cache

        def run() -> None:
            try:
                with telemetry.step("discovery", self.config.name):
                    catalogue = discover(connection, timeout, cache)
                _tell(ref, _Discovered(attempt, catalogue, None))
            except AlbedoError as exc:
                _tell(ref, _Discovered(attempt, None, exc))

        self._discoverer = threading.Thread(target=run, name=f"mcp-discover-{self.config.name}", daemon=True)
        self._discoverer.start()

    def _adopt(self, catalogue: Catalogue | None) -> None:
        if catalogue is None:
            return
        previous, self._catalogue = self._catalogue, catalogue
        for warning in catalogue.warnings:
            logger.warning("%s", warning)
        if not catalogue.same_listing(previous):
            self._tell_owner(CatalogueChanged(self.config.name, catalogue))

    def _tell_owner(self, event: Any) -> None:
        if self._owner is not None:
            _tell(self._owner, event)


class _Opening:
    """Links of a dial in progress, so that stopping can close them.

    Shared by the actor and its dialer thread; the lock makes "add unless closed"
    and "close all" exclusive, so no link escapes a stop.
    """

    def __init__(self, server: str) -> None:
        self._server = server
        self._lock = threading.Lock()
        self._transports: list[Link] = []
        self._closed = False

    def add(self, transport: Link) -> None:
        with self._lock:
            if self._closed:
                raise Unavailable(self._server, "the client is stopping")
            self._transports = [t for t in self._transports if not t.closed] + [transport]

    def forget(self) -> None:
        with self._lock:
            self._transports = []

    def close_all(self) -> None:
        with self._lock:
            self._closed = True
            transports, self._transports = self._transports, []
        for transport in transports:
            transport.close("client stopping")


def connect_all(handles: dict[str, ServerHandle]) -> dict[str, Catalogue | AlbedoError]:
    """Connect every client at once (each bounded by its startupTimeoutMs).

    Returns each name's catalogue, or the error that kept it out.
    """
    if not handles:
        return {}
    outcomes: dict[str, Catalogue | AlbedoError] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(handles))) as pool:
        futures = {name: pool.submit(handle.connect) for name, handle in handles.items()}
    for name, future in futures.items():
        try:
            outcomes[name] = future.result()
        except AlbedoError as exc:
            outcomes[name] = exc
    return outcomes


def _tell(ref: pykka.ActorRef, message: Any) -> bool:
    try:
        ref.tell(message)
        return True
    except pykka.ActorDeadError:
        return False


class ServerHandle:
    """The typed front of a ServerClient: plain blocking methods for any thread.

    The actor starts on first use (a dial, a request, a tell it must hear), not when the
    handle is made: a host with hundreds of configured servers whose sessions open from
    saved catalogues runs no thread for a server nobody has called yet. Closing or
    stopping a handle whose actor never started just marks it so (it never starts
    afterwards) and costs nothing.
    """

    def __init__(self, ref: pykka.ActorRef | None, config: ServerConfig, closed: threading.Event | None = None,
                 starter: Callable[[], pykka.ActorRef] | None = None) -> None:
        # ``ref``: a started ServerClient; or None and ``starter``, which starts it when first needed.
        self._started: pykka.ActorRef | None = ref
        self._starter = starter
        self._lock = threading.Lock()  # starting, and closing or stopping before the start
        self._ended: str | None = None  # set when closed ("closing") or stopped ("stopped") before it started
        self._era: str | None = None  # a saved era told before the start: told at the start
        self._closed = closed
        self._proxy_made: Any = None
        self.config = config
        self.name = config.name
        self._live: Connection | None = None  # last connection seen; checked before each use
        # Tasks (connection/tasks.py): where running tasks are kept (the registry sets it),
        # whether their arguments are kept too, and the tools allowing tasks that ran long.
        self.task_book: Any = None
        self.keep_task_arguments = False
        self._long_tools: set[str] = set()
        self._task_required: set[str] = set()  # 2026: tools that refused a plain call (-32021)

    @classmethod
    def start(cls, config: ServerConfig, home: str, owner: pykka.ActorRef | None = None, **kwargs: Any) -> ServerHandle:
        """A handle for ``config``; its ServerClient starts when first used."""
        closed = threading.Event()
        return cls(None, config, closed, starter=lambda: ServerClient.start(config, home, owner, closed=closed, **kwargs))

    # -- the actor, started on first use ------------------------------------------------------

    @property
    def started(self) -> bool:
        """True once the client actor has been started (by a dial, a request or a tell)."""
        return self._started is not None

    @property
    def _ref(self) -> pykka.ActorRef:
        """The client actor, started now if it was not yet.

        Raises:
            Unavailable: the handle was closed or stopped before its actor ever started.
        """
        ref = self._started if self._started is not None else self._start()
        if ref is None:
            raise Unavailable(self.name, f"the client {'is closing' if self._ended == 'closing' else 'has stopped'}")
        return ref

    def _start(self) -> pykka.ActorRef | None:
        with self._lock:
            if self._started is None and self._ended is None and self._starter is not None:
                self._started = self._starter()
                self._starter = None  # what it held (credentials among them) is the actor's now
                if self._era is not None:
                    _tell(self._started, _SavedEra(self._era))  # before any Connect told after this
            return self._started

    @property
    def _proxy(self) -> Any:
        proxy = self._proxy_made
        if proxy is None:
            try:
                proxy = self._proxy_made = self._ref.proxy()
            except pykka.ActorDeadError:
                raise Unavailable(self.name, "the client has stopped") from None
        return proxy

    def _end_unstarted(self, how: str) -> bool:
        """Close or stop a handle whose actor never started; True if it had not (nothing else to do)."""
        with self._lock:
            if self._started is not None:
                return False
            if self._ended != "stopped":
                self._ended = how
            self._starter = None
        if how == "stopped" and self._closed is not None:
            self._closed.set()  # nothing was ever started: nothing to wait for
        return True

    # -- the handle's face ------------------------------------------------------------------------

    def connect(self, timeout: float | None = None) -> Catalogue:
        """Connect (if needed) and return the catalogue.

        Raises:
            Unavailable: the server could not be started, opened or discovered.
        """
        self._connection(timeout)
        catalogue = self._ask(self._proxy.catalogue())
        if catalogue is None:
            raise Unavailable(self.name, "connected but has no catalogue yet")
        return catalogue

    def catalogue(self) -> Catalogue | None:
        if self._started is None:
            return None  # never dialled: nothing discovered
        return self._ask(self._proxy.catalogue())

    def use_saved_era(self, era: str) -> None:
        """Open with ``era`` (from a saved catalogue) until this client finds one itself.

        A tell (or, before the actor starts, kept and told at its start): it is in the
        mailbox before any dial asked for after it."""
        with self._lock:
            if self._started is None:
                self._era = era
                return
        _tell(self._started, _SavedEra(era))

    def status(self) -> dict[str, Any]:
        if self._started is None:
            return {"server": self.name, "connected": False, "era": None, "version": None, "discovering": False, "attempt": 0,
                    "unannounced": ()}
        return self._ask(self._proxy.status())

    def call_tool(self, tool: str, arguments: dict[str, Any] | None = None, timeout: float | None = None,
                  on_progress: Callable[[ProgressReport], None] | None = None, *,
                  deadline: Deadline | None = None, cancel: Cancel | None = None) -> dict[str, Any]:
        """Call one tool; return its CallToolResult. A tool error (``isError``) is a result.

        ``cancel`` (a :class:`~albedo_actors.connection.progress.Cancel`): ``cancel.cancel()``
        from any thread gives the call up; it is cancelled as a timeout cancels it, and
        this raises TimedOut (one not yet sent is never sent).

        ``deadline``: the call's one deadline (else ``timeout`` seconds from now); a dial,
        a token refresh or sign-in and the exchange all end at it. With neither, a dial
        has its own ``startupTimeoutMs`` and the call ``callTimeoutMs`` after it. The request carries a progress token: each ``notifications/progress`` for it
        moves the deadline to ``timeout`` (the deadline's seconds) from then, never past
        ``maxCallTimeoutMs`` from the start. ``on_progress`` gets the latest report (a
        :class:`~albedo_actors.connection.progress.ProgressReport`) at most
        REPORTS_PER_SECOND times a second, on a thread of this call's own; what it
        raises is logged once and changes nothing.

        Never retried. Raises:
            Unavailable: the request never left (not connected, could not dial).
            TimedOut: no answer within ``callTimeoutMs`` (of the last progress, or
                within ``maxCallTimeoutMs`` in all); the server was sent a cancellation.
                With ``sent`` False the request never ran: the dial or the auth step
                was still running at the deadline (a refresh goes on for the next call).
            UnknownOutcome: the connection was lost after the request was sent.
            RemoteError, ProtocolViolation: the server refused or answered badly.
        """
        return self.call_tool_and_deadline(tool, arguments, timeout, on_progress, deadline=deadline, cancel=cancel)[0]

    def call_tool_and_deadline(self, tool: str, arguments: dict[str, Any] | None = None, timeout: float | None = None,
                               on_progress: Callable[[ProgressReport], None] | None = None, *,
                               deadline: Deadline | None = None, cancel: Cancel | None = None,
                               task: str | None = None) -> tuple[dict[str, Any], float]:
        """:meth:`call_tool`, and the call's deadline (``time.monotonic()``) as it stood
        when the answer came: ``callTimeoutMs`` from the start or from the last progress,
        never past the cap. What is done with the result on the call's behalf (checking
        it against the tool's outputSchema, catalogue/schemas.py) ends by then (issue 23).

        ``task``: the tool's ``execution.taskSupport`` when it is "optional" or
        "required" (the catalogue's ``task_tools``); the call may then run as an MCP task
        (connection/tasks.py), followed to its result here, its status reported as
        progress, and kept in the task book while it runs.

        Raises:
            The same as :meth:`call_tool`.
        """
        params: dict[str, Any] = {"name": tool}
        if arguments is not None:
            params["arguments"] = arguments
        connection, deadline = self._dialled("tools/call", timeout, deadline)
        limit = deadline.seconds
        reporter = FirstReport(on_progress, self.name) if on_progress is not None else None
        # The call's deadline from here on, moved by progress; the cap: at least ``limit``.
        progress = CallProgress(new_token(), limit, self.config.max_call_timeout, reporter,  # type: ignore[arg-type]  # poke() is all it uses
                                start=deadline, cancel=cancel)
        if reporter is not None:
            reporter.progress = progress
        try:
            if task is None and not (connection.modern and wire_tasks.server_runs_tool_tasks(connection.capabilities, True)):
                # the hot path: a tool that lists no task support, on a server that could not say otherwise
                # (a 2026 task server goes through _plain even under "never": its -32021 is explained there)
                return connection.request("tools/call", params, progress=progress), progress.deadline
            if self._as_task(connection, tool, task):
                return self._call_as_task(connection, tool, params, progress), progress.deadline
            return self._plain(connection, tool, params, progress, task), progress.deadline
        finally:
            if reporter is not None:
                reporter.close()

    # -- tool calls as tasks (connection/tasks.py) ------------------------------------------

    def _as_task(self, connection: Connection, tool: str, support: str | None) -> bool:
        """Whether this call is sent as a task. Never when the setting is "never" or the
        server runs no tasks. Else when the tool requires one (2026 lists no task support:
        a tool that refused a plain call for want of the extension is known to); when the
        setting is "always" (in 2026 the server then decides, per tool); and under "auto"
        when the tool may run as one and ran long before."""
        mode = self.config.tasks
        if mode == "never" or not wire_tasks.server_runs_tool_tasks(connection.capabilities, connection.modern):
            return False
        if support == "required" or tool in self._task_required or mode == "always":
            return True
        return (support == "optional" or connection.modern) and tool in self._long_tools

    def _call_as_task(self, connection: Connection, tool: str, params: dict[str, Any], progress: CallProgress) -> dict[str, Any]:
        from ..connection.tasks import call_as_task  # the first task call loads it

        return call_as_task(connection, tool, params, progress, self.task_book, self.keep_task_arguments)

    def _plain(self, connection: Connection, tool: str, params: dict[str, Any], progress: CallProgress,
               support: str | None) -> dict[str, Any]:
        """A plain call of a tool that may run as a task. One that runs long (LONG_CALL, or
        half its timeout) or times out runs as a task next time under "auto". In 2026 a
        refusal for want of the tasks extension (-32021, before anything ran) is the news
        that the tool runs only as a task: it is sent again as one at once."""
        started = time.monotonic()
        try:
            return connection.request("tools/call", params, progress=progress)
        except TimedOut as exc:
            if exc.sent:
                self._long_tools.add(tool)
            raise
        except RemoteError as exc:
            if not (connection.modern and wire_tasks.needs_extension(exc.code, exc.data)):
                raise
            if self.config.tasks == "never":
                raise RemoteError(self.name, exc.code, f"tool {tool!r} runs only as a task, and this server's "
                                                       '"tasks" setting is "never"', exc.data) from None
            self._task_required.add(tool)
            return self._call_as_task(connection, tool, params, progress)
        finally:
            if support is not None or connection.modern:
                if time.monotonic() - started >= min(LONG_CALL, progress.seconds / 2):
                    self._long_tools.add(tool)

    def read_resource(self, uri: str, timeout: float | None = None, *, deadline: Deadline | None = None) -> dict[str, Any]:
        """``resources/read`` of ``uri``.

        Raises:
            ResourceNotFound: the server has no such resource: its error -32002 (the code
                of 2025-11-25 and older, accepted from either era, SEP-2164) or, from a
                2026-07-28 server, -32602.
            The rest as :meth:`request`.
        """
        connection, deadline = self._dialled("resources/read", timeout, deadline)
        try:
            return connection.request("resources/read", {"uri": uri}, deadline=deadline)
        except RemoteError as exc:
            if exc.code == jsonrpc.RESOURCE_NOT_FOUND or (exc.code == jsonrpc.INVALID_PARAMS and connection.modern):
                raise ResourceNotFound(self.name, uri, exc.code, exc.remote_message, exc.data) from None
            raise

    def get_prompt(self, name: str, arguments: dict[str, str] | None = None, timeout: float | None = None, *,
                   deadline: Deadline | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name}
        if arguments:
            params["arguments"] = arguments
        return self.request("prompts/get", params, timeout, deadline=deadline)

    def request(self, method: str, params: dict[str, Any] | None, timeout: float | None = None, *,
                deadline: Deadline | None = None) -> dict[str, Any]:
        """Any request, era-correct, on the caller's thread, ending at ``deadline`` (else
        ``timeout`` seconds from now) as :meth:`call_tool` does."""
        connection, deadline = self._dialled(method, timeout, deadline)
        return connection.request(method, params, deadline=deadline)

    def _dialled(self, method: str, timeout: float | None, deadline: Deadline | None) -> tuple[Connection, Deadline]:
        """The live connection and the call's one deadline.

        Given a ``deadline`` (or a ``timeout``, which makes one from now) the dial on the
        call's path ends at it too. Given neither, a dial has its own startupTimeoutMs and
        the call its whole callTimeoutMs after it (issue 11: a call that finds its server
        still starting is not cut short by the start).

        Raises:
            Unavailable, TimedOut: as :meth:`_connection`.
        """
        if deadline is None and timeout is None:
            connection = self._connection(None)
            return connection, Deadline.after(self.config.call_timeout)
        if deadline is None:
            assert timeout is not None
            deadline = Deadline.after(timeout)
        return self._connection(deadline, method), deadline

    def stop(self, timeout: float = STOP_TIMEOUT + 5.0) -> None:
        """Close the connection (the server process ends) and stop the actor."""
        if self._end_unstarted("stopped"):
            return
        try:
            self._started.stop(timeout=timeout)  # type: ignore[union-attr]  # started: never unset
        except pykka.ActorDeadError:
            pass
        except pykka.Timeout:
            logger.warning("server %r: the client did not stop within %s s", self.name, timeout)

    def wait_closed(self, timeout: float) -> bool:
        """Wait until the client has stopped and its server processes have ended."""
        return self._closed is not None and self._closed.wait(timeout)

    @property
    def alive(self) -> bool:
        """True while the client actor runs or may still start (a stopped or crashed one is not)."""
        ref = self._started
        return self._ended != "stopped" if ref is None else ref.is_alive()

    def stop_async(self) -> pykka.Future:
        """Begin stopping; the returned future resolves when the client has stopped."""
        try:
            if not self._end_unstarted("stopped"):
                return self._started.stop(block=False)  # type: ignore[union-attr]  # started: never unset
        except pykka.ActorDeadError:
            pass  # it had stopped already
        done: pykka.ThreadingFuture[Any] = pykka.ThreadingFuture()
        done.set(True)
        return done

    def _connection(self, timeout: float | Deadline | None, method: str | None = None) -> Connection:
        """The live connection, dialled first when there is none.

        ``timeout``: seconds to wait for the dial (None: startupTimeoutMs and a second),
        or the call's :class:`Deadline` for ``method``: the wait ends at the earlier of the
        two, and the dial goes on in the client without the call.

        Raises:
            Unavailable: the dial failed or took longer than startupTimeoutMs.
            TimedOut: (``sent`` False) the call's deadline came first; ``method`` was not sent.
        """
        live = self._live
        if live is not None and live.alive:
            return live  # the hot path: no hop through the actor's mailbox
        asked = Connect(telemetry.capture())
        try:
            self._ref.tell(asked)  # starts the actor on the first dial
        except pykka.ActorDeadError:
            raise Unavailable(self.name, "the client has stopped") from None
        call = timeout if isinstance(timeout, Deadline) else None
        own = self.config.startup_timeout + 1.0 if isinstance(timeout, Deadline) or timeout is None else timeout
        wait = own if call is None else min(own, call.remaining())
        try:
            self._live = asked.reply.result(timeout=wait)
            return self._live
        except concurrent.futures.TimeoutError:
            if call is not None and wait < own:
                raise TimedOut.unsent(self.name, method or "the request", "connecting to the server", call.seconds) from None
            raise Unavailable(self.name, f"did not connect within {wait:g} s") from None
        except concurrent.futures.CancelledError:
            raise Unavailable(self.name, "the connection attempt was abandoned") from None

    def close(self) -> None:
        """Begin closing: the server gets EOF now; :meth:`stop` (or ``stop_async``) waits."""
        if not self._end_unstarted("closing"):
            _tell(self._started, Close())  # type: ignore[arg-type]  # started: never unset

    def _ask(self, future: pykka.Future) -> Any:
        try:
            return future.get(timeout=ASK_TIMEOUT)
        except pykka.ActorDeadError:
            raise Unavailable(self.name, "the client has stopped") from None
        except pykka.Timeout:
            raise Unavailable(self.name, "the client did not answer in time") from None


class FirstReport:
    """A call's progress :class:`Reporter`, made at the call's first report.

    Most calls hear no progress: for them the call path makes only this small object
    (no lock, no name), where a Reporter would cost a lock and a string per call
    (benchmarks/bench_binding.py). :meth:`poke` runs on the reader thread, :meth:`close`
    on the caller's when the call ends; whichever of the two comes second closes the
    Reporter, so none outlives its call: poke writes ``_made`` then reads ``_closed``,
    close writes ``_closed`` then reads ``_made``, and under the GIL one sees the other.
    """

    __slots__ = ("_on_progress", "_server", "_made", "_closed", "progress")

    def __init__(self, on_progress: Callable[[ProgressReport], None], server: str) -> None:
        self._on_progress, self._server = on_progress, server
        self._made: Reporter | None = None
        self._closed = False
        self.progress: CallProgress | None = None

    def poke(self) -> None:
        made = self._made
        if made is None:
            with _FIRST_REPORT:  # two streams may carry one call's reports (HTTP): one Reporter
                made = self._made
                if made is None:
                    if self._closed:
                        return  # a report racing the answer: dropped, as a Reporter closed first drops it
                    made = Reporter([self._on_progress], name=f"mcp-progress-{self._server}")
                    made.progress = self.progress
                    self._made = made
                    if self._closed:
                        made.close()  # the call ended meanwhile and may not have seen it (no thread started)
                        return
        made.poke()

    def close(self) -> None:
        self._closed = True
        made = self._made
        if made is not None:
            made.close()


_FIRST_REPORT = threading.Lock()  # taken at a call's first progress report only


def _as_discovery(detail: str) -> str:
    """A lost discovery request's line without its "may or may not have run" (a list
    request runs nothing)."""
    for tail in ("; it may or may not have run",):
        if detail.endswith(tail):
            return detail[: -len(tail)]
    return detail.replace(" may or may not have run", " was not answered")
