"""The daemon, its sessions, and the one-session runtime: what a host starts and stops.

A host process runs one :class:`Daemon` (a ServerRegistry, a RuntimePreparer and, with
a store, a TokenRefresher) and opens a :class:`Session` per conversation::

    with Daemon(home, store) as daemon:
        session = daemon.open_session(enabled=True, on_changed=lambda s: print("tools changed"))
        mcp = session.mcp()                      # sync binding; session.amcp() for asyncio
        session.turn_started()
        mcp.docs.search(query="pykka")
        session.turn_ended()                     # a swap or refresh that waited lands now
        session.close()

:class:`Runtime` is a Daemon with one Session, for a host (or a script) with a single
conversation; it has the Session's methods itself::

    with Runtime(home, store, enabled=True) as runtime:
        runtime.mcp().call("docs/search", query="pykka")

Every session follows the configured default of the ``mcp`` extension (the top-level
``enabled`` object of ``extensions.json``: off unless it says ``{"mcp": true}``) and of
``editor-mcp`` (on unless set), unless it chooses for itself alone (``enabled=``,
``overlays_enabled=``, :meth:`Session.set_enabled`). Off means no server is dialled and
the binding says MCP is off. A session can also switch one server on or off for itself
alone (:meth:`Session.set_server_enabled`).

A daemon hears every change to the settings, whoever makes it (``albedo-mcp`` writing
directly, another process, the settings service): each session compares the settings'
stamp at the start and end of each turn and prepares again when it moved; the swap
lands between turns, and ``on_changed(session)`` is called (on the daemon's event
thread, never an actor's) once per swap that changed what the model is offered.

Stopping closes every server at once, then stops the sessions' composers, the
preparer, the registry and the refresher, each bounded (see :meth:`Daemon.stop`).
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable

import pykka

from .actors.composer import (
    Open,
    Reload,
    SessionComposer,
    SetEnabled,
    SetOverlays,
    SetOverlaysEnabled,
    SetServerEnabled,
    TurnEnded,
)
from .actors.preparer import BackgroundSettled, RuntimePreparer
from .actors.registry import CloseAll, ServerRegistry
from .actors.reply import CLOSED, Request, ask, request
from .binding import AsyncMcp, Mcp
from .catalogue.composition import Composition
from .catalogue.trust import HeldTool
from .config import McpConfig, ServerConfig, load
from .errors import ConfigError, SessionClosed
from .wire import telemetry

if TYPE_CHECKING:
    from .auth.grants import IdTokenProvider
    from .settings_watch import ChangeWatch
    from .store import Store

logger = telemetry.logger(__name__)  # records carry the server and trace ids

OPEN_TIMEOUT = 600.0  # a bound only: each server's dial is bounded by its startupTimeoutMs
STOP_TIMEOUT = 30.0
TURN_TIMEOUT = 600.0  # turn_ended's default bound on a swap that waited for the turn
EVENTS_STOP_S = 5.0
NOT_RUNNING = "the MCP daemon is not running; use it inside `with Daemon(...)`, or start() it first"
RUNTIME_NOT_RUNNING = "the runtime is not running; use it inside `with Runtime(...)`, or start() it first"


class Daemon:
    """One registry, preparer and token refresher for ``home``; see the module docstring.

    ``store``: saved catalogues and credentials (None: neither; an OAuth server then
    stays left out, needing a sign-in). ``config``: the configuration, or a source read
    at every preparation; default HOME/extensions.json. ``background=False``: servers
    advertised from a saved catalogue are not dialled in the background (their first use
    dials them). ``id_token``: the host's source of the signed-in user's id_token,
    ``id_token(server) -> str``, for servers with the enterprise grant (auth/grants.py);
    ``machine_grants=False`` makes jwt-bearer and enterprise servers wait for a sign-in
    like any other. ``watch=False``: sessions do not look for changes to the settings.
    ``on_held(server, holds)``: told each new hold of tool integrity (a tuple of
    catalogue/trust.py's ``HeldTool``: a tool that changed since it was trusted, a new
    one, or changed instructions), on the daemon's event thread, so a host can show its
    own approval prompt and answer with :meth:`Session.approve`. ``handlers``: the host's
    answers to what a server asks of it, by kind (``{"elicitation": fn}``: ``fn(params)``
    returns an ElicitResult such as ``{"action": "accept", "content": {...}}``); the
    client declares exactly these capabilities. ``keep_task_arguments``: a tool call that
    runs as a task keeps its arguments in the store with it (else only their digest).
    """

    def __init__(
        self,
        home: str,
        store: Store | None = None,
        *,
        config: McpConfig | Callable[[], McpConfig] | None = None,
        background: bool = True,
        clock: Callable[[], float] = time.monotonic,
        id_token: IdTokenProvider | None = None,
        machine_grants: bool = True,
        watch: bool = True,
        on_held: Callable[[str, tuple[HeldTool, ...]], None] | None = None,
        handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
        keep_task_arguments: bool = False,
    ) -> None:
        self.home = home
        self._on_held = on_held
        self._handlers = handlers
        self._keep_task_arguments = keep_task_arguments
        self._auth: Any = None
        self._task_book: Any = None
        self._store = store
        if config is None:
            self._source: Callable[[], McpConfig] = lambda: load(home)
        elif isinstance(config, McpConfig):
            self._source = lambda: config
        else:
            self._source = config
        self._background = background
        self._clock = clock
        self._id_token = id_token
        self._machine_grants = machine_grants
        self._watch_on = watch
        self._watch: ChangeWatch | None = None
        self._registry: pykka.ActorRef | None = None
        self._refresher: pykka.ActorRef | None = None
        self._preparer: pykka.ActorRef | None = None
        self._sessions: list[Session] = []
        self._lock = threading.Lock()  # the sessions list (open and close come from any host thread)
        self._events = _Events()

    def __enter__(self) -> Daemon:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._preparer is not None

    def start(self) -> Daemon:
        """Start the registry, the preparer and (with a store) the token refresher.

        Raises:
            AlbedoError: the daemon is running already.
        """
        if self._preparer is not None:
            raise ConfigError("the MCP daemon is running already; stop() it before starting it again")
        auth = None
        if self._store is not None:
            # OAuth needs somewhere to keep tokens: without a store a 401 server stays
            # left out (needs a sign-in), with one its tokens are sent and refreshed.
            from .actors.refresher import TokenRefresher, oauth_for, server_auth_factory  # OAuth's modules: only with a store

            self._refresher = TokenRefresher.start(self._store)
            auth = (server_auth_factory(self._store, self._refresher, self._id_token) if self._machine_grants
                    else oauth_for(self._store, self._refresher))
        self._auth = auth
        if self._store is not None:
            from .actors.tasks import StoreTaskBook  # tasks are kept only with a store

            self._task_book = StoreTaskBook(self._store)
        self._registry = ServerRegistry.start(self.home, auth=auth, handlers=self._handlers, task_book=self._task_book,
                                              keep_task_arguments=self._keep_task_arguments)
        held = None
        if self._on_held is not None:
            on_held, events = self._on_held, self._events

            def held(server: str, holds: tuple[HeldTool, ...]) -> None:  # on a preparer thread: hand it on
                events.put(lambda pair: on_held(*pair), (server, holds))

        self._preparer = RuntimePreparer.start(self._registry, self._store, background=self._background, on_held=held)
        if self._watch_on:
            from .settings_watch import ChangeWatch

            self._watch = ChangeWatch(self.home, self._store)
        return self

    def open_session(self, enabled: bool | None = None, overlays_enabled: bool | None = None, *,
                     on_changed: Callable[[Session], None] | None = None, warn: Callable[[str], None] | None = None,
                     timeout: float | None = None) -> Session:
        """Open a session and prepare its first composition (servers heard from before
        come from their saved catalogues at once; the others are dialled, each bounded by
        its startupTimeoutMs).

        ``enabled`` / ``overlays_enabled``: this session's own choice for the "mcp" /
        "editor-mcp" extension; None follows the configured default. ``on_changed(session)``:
        called once per swap that changed what the model is offered, on the daemon's
        event thread (what it raises is logged). ``warn(line)``: the bindings' warnings.
        ``timeout``: the bound on the first preparation (default OPEN_TIMEOUT).

        Raises:
            SessionClosed: the daemon is not running.
            ConfigError: the configuration is unusable (e.g. a catalogue is over the size limit; a
                server naming an unset variable is only left out, with a warning).
            SessionTimedOut: the servers did not open within ``timeout``.
            SessionError: preparing the servers failed.
        """
        if self._preparer is None or self._registry is None:
            raise SessionClosed(NOT_RUNNING)
        session = Session(self, enabled, overlays_enabled, on_changed, warn)
        with self._lock:
            self._sessions.append(session)
        try:
            session._open(OPEN_TIMEOUT if timeout is None else timeout)
        except BaseException:
            session.close()
            raise
        return session

    @property
    def sessions(self) -> tuple[Session, ...]:
        """The sessions open now."""
        with self._lock:
            return tuple(self._sessions)

    def wait_background(self, timeout: float = 30.0) -> bool:
        """Wait (at most ``timeout`` s) for the preparer's background dials; True if they settled."""
        if self._preparer is None:
            return True
        settled = BackgroundSettled()
        try:
            self._preparer.tell(settled)
        except pykka.ActorDeadError:
            raise SessionClosed(CLOSED) from None
        try:
            settled.reply.result(timeout=timeout)  # the one future, the caller's bound
            return True
        except concurrent.futures.TimeoutError:
            return False

    def stop(self) -> None:
        """Close every server at once, then stop the sessions, the preparer, the registry
        and the token refresher, in that order (each bounded), and the event thread.

        The registry first tells every client to close (EOF: the servers exit in
        parallel), so nothing the upper actors' helper threads wait on is still
        dialling when those actors stop; the registry's stop then waits for the
        processes to be gone. Safe to call twice, and on a daemon that never started.
        """
        if self._registry is not None:
            try:
                self._registry.tell(CloseAll())
            except pykka.ActorDeadError:
                pass
        for session in self.sessions:
            session.close()
        for ref in (self._preparer, self._registry, self._refresher):
            if ref is not None:
                try:
                    ref.stop(timeout=STOP_TIMEOUT)
                except (pykka.ActorDeadError, pykka.Timeout):
                    pass
        self._preparer = self._registry = self._refresher = None
        if self._watch is not None:
            self._watch.close()  # its reader thread, before the host closes the store
            self._watch = None
        self._events.stop()

    # -- for the sessions -------------------------------------------------------------------------

    def _forget(self, session: Session) -> None:
        with self._lock:
            if session in self._sessions:
                self._sessions.remove(session)


class Session:
    """One conversation's view of the daemon's servers: its composer and its bindings.

    Made by :meth:`Daemon.open_session`. Plain methods, each bounded; what fails raises
    an error of albedo_actors/errors.py's tree (a closed session: :class:`SessionClosed`).
    """

    def __init__(self, daemon: Daemon, enabled: bool | None, overlays_enabled: bool | None,
                 on_changed: Callable[[Session], None] | None, warn: Callable[[str], None] | None) -> None:
        self._daemon = daemon
        self._warn = warn
        self._mcp: Mcp | None = None
        self._amcp: AsyncMcp | None = None
        self._lock = threading.Lock()
        notify = None
        if on_changed is not None:
            events = daemon._events

            def notify() -> None:  # on the composer's thread: hand the news on, nothing more
                events.put(on_changed, self)

        assert daemon._preparer is not None and daemon._registry is not None
        self._ref: pykka.ActorRef | None = SessionComposer.start(
            daemon._preparer, daemon._registry, daemon._source, enabled=enabled, overlays_enabled=overlays_enabled,
            clock=daemon._clock, on_changed=notify, stamp=daemon._watch.stamp if daemon._watch is not None else None,
        )

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _open(self, timeout: float) -> Composition:
        # One request, one future, one bound.
        return request(self._composer, Open(), timeout,
                       late=f"the MCP servers did not open within {timeout:g} s; "
                            "check each server's startupTimeoutMs, then start a new session")

    @property
    def _composer(self) -> pykka.ActorRef:
        ref = self._ref
        if ref is None:
            raise SessionClosed(CLOSED)
        return ref

    @property
    def _proxy(self) -> Any:
        try:
            return self._composer.proxy()
        except pykka.ActorDeadError:
            raise SessionClosed(CLOSED) from None

    # -- the bindings -------------------------------------------------------------------------------

    def mcp(self, warn: Callable[[str], None] | None = None) -> Mcp:
        """The synchronous Python binding over this session (one per session; with
        ``warn``, a new one whose warnings go there).

        Raises:
            SessionClosed: the session has closed.
        """
        if warn is not None:
            return Mcp(self._composer, warn, session=self)
        with self._lock:
            if self._mcp is None:
                self._mcp = Mcp(self._composer, self._warn, session=self)
            return self._mcp

    def amcp(self) -> AsyncMcp:
        """The asyncio binding over this session (one per session; its calls run on the
        session's own lanes, one per server, which :meth:`close` ends).

        Raises:
            SessionClosed: the session has closed.
        """
        with self._lock:
            if self._amcp is None:
                self._amcp = AsyncMcp(self._composer, self._warn, session=self)
            return self._amcp

    def composition(self) -> Composition:
        """What the session sees now (clients, catalogues, left_out, warnings, operations).

        Raises:
            SessionClosed: the session has closed.
            SessionTimedOut: the session did not answer in time.
        """
        return ask(self._proxy.composition)

    # -- turns ----------------------------------------------------------------------------------------

    def turn_started(self) -> Composition:
        """The host submitted a turn: the composition this turn sees. Activity: left-out
        servers may be probed, and a change to the settings starts a preparation (its
        swap lands when the turn ends).

        Raises:
            SessionClosed, SessionTimedOut: the session closed, or did not answer in time.
        """
        return ask(self._proxy.turn_started)

    def turn_ended(self, timeout: float = TURN_TIMEOUT) -> Composition | None:
        """The turn ended: a swap or refresh that waited for it lands now. The composition
        in use once it has (None when nothing waited), waiting at most ``timeout`` s.

        Raises:
            SessionClosed: the session has closed.
            SessionTimedOut: the swap did not land within ``timeout`` (it still lands later).
            SessionError, ConfigError: the refresh failed; the previous composition stays.
        """
        return request(self._composer, TurnEnded(), timeout)

    def take_changes(self) -> bool:
        """True once after a swap changed what the model is offered (append a
        "capabilities changed" user turn)."""
        return ask(self._proxy.take_changes)

    # -- tool integrity ---------------------------------------------------------------------------

    def approve(self, server: str, tools: Iterable[str] | None = None, timeout: float = OPEN_TIMEOUT) -> list[str]:
        """Approve what is held of ``server`` (catalogue/trust.py): ``tools`` by name (the
        instructions as ``"(instructions)"``), None for all of them. The approval is kept
        in the store (the history says "host") and bumps its revision, so every session
        (this one, others, other processes on the same store) offers it from its next
        turn; this session is prepared again now. The names approved.

        Raises:
            ConfigError: there is no store, or a tool named is not held.
            StoreError: the store failed.
            SessionClosed: the session has closed.
        """
        from .settings.trust import approve_held

        store = self._daemon._store
        if store is None:
            raise ConfigError(f"server {server!r}: nothing is held without a store, so there is nothing to approve")
        approved = approve_held(store, server, tools, who="host")
        if approved:
            self.reload(timeout)
        return approved

    # -- choices ----------------------------------------------------------------------------------

    def set_server_enabled(self, name: str, on: bool | None) -> None:
        """Switch the configured server ``name`` on or off for this session alone (None:
        back to the configuration's choice). Applied from the session's next turn: a
        replacement is prepared now and swapped in between turns. A server switched off
        is not dialled for this session; other sessions are untouched.

        Raises:
            ConfigError: ``name`` is not a configured server, or ``on`` not a bool or None.
            SessionClosed: the session has closed.
        """
        if on is not None and not isinstance(on, bool):
            raise ConfigError(f"set_server_enabled takes True, False or None, not {on!r}")
        names = [server.name for server in self._daemon._source().servers]
        if name not in names:
            raise ConfigError(f"no MCP server {name!r} in the configuration; `albedo-mcp servers` lists them")
        self._send(SetServerEnabled(name, on))

    def server_choices(self) -> dict[str, bool]:
        """This session's own choices of servers (set_server_enabled), by name."""
        return ask(self._proxy.server_choices)

    def set_enabled(self, on: bool | None, timeout: float = OPEN_TIMEOUT) -> Composition:
        """This session's own choice for the "mcp" extension (None: the configured default);
        the composition once it landed (between turns)."""
        return self.request(SetEnabled(on), timeout)

    def set_overlays(self, servers: tuple[ServerConfig, ...], credentials: dict[str, Any] | None = None,
                     timeout: float = OPEN_TIMEOUT) -> Composition:
        """Editor overlays the host hands over (their credentials stay in memory); the
        composition once it landed."""
        return self.request(SetOverlays(tuple(servers), credentials), timeout)

    def set_overlays_enabled(self, on: bool | None, timeout: float = OPEN_TIMEOUT) -> Composition:
        """This session's own choice for editor overlays (None: the configured default)."""
        return self.request(SetOverlaysEnabled(on), timeout)

    def reload(self, timeout: float = OPEN_TIMEOUT) -> Composition:
        """Prepare again from the current configuration; the composition once it landed."""
        return self.request(Reload(), timeout)

    def set_budget(self, max_tools: int | None, pinned: tuple[str, ...] | None = None, *, configured: bool = False) -> None:
        """This session's own budget of advertised operations (see SessionComposer.set_budget)."""
        proxy = self._proxy
        ask(lambda: proxy.set_budget(max_tools, pinned, configured=configured))

    def progress(self) -> list[dict[str, Any]]:
        """The latest progress of each running tool call that reported some."""
        return ask(self._proxy.progress)

    # -- tasks (issue 29: actors/tasks.py) ------------------------------------------------------

    def tasks(self, pending_only: bool = True) -> list[dict[str, Any]]:
        """The stored tasks (those not ended, by default), newest first: ``id``, ``server``,
        ``tool``, ``state``, ``message``, ``age`` and ``expiresIn`` (seconds), and more.
        Without a store none is kept: an empty list."""
        desk = self._desk(needed=False)
        return [] if desk is None else desk.list(pending_only)

    def task_result(self, task_id: str, timeout: float | None = None,
                    on_progress: Callable[[Any], None] | None = None) -> dict[str, Any]:
        """The tool result of a stored task (``id`` or ``SERVER/ID``), polling it from this
        process until it ends or ``timeout`` seconds pass (a task still running then goes
        on; ask again). See actors/tasks.py's TaskDesk.result.

        Raises:
            ConfigError: no such task, no store, or its server is off for this session.
            TimedOut, UnknownOutcome, RemoteError: as a tool call.
        """
        desk = self._desk()
        assert desk is not None
        return desk.result(task_id, timeout, on_progress)

    def cancel_task(self, task_id: str) -> str:
        """Cancel a stored task; one line saying what happened (see :meth:`task_result`)."""
        desk = self._desk()
        assert desk is not None
        return desk.cancel(task_id)

    def _desk(self, needed: bool = True) -> Any:
        daemon = self._daemon
        if daemon._store is None or daemon._task_book is None:
            if needed:
                raise ConfigError("tasks are kept in the store, and this runtime has none: give it one (open_store)")
            return None
        from .actors.tasks import TaskDesk

        return TaskDesk(daemon._store, lambda server: self.composition().handles.get(server), daemon._auth,
                        daemon._handlers, daemon._task_book)

    # -- the composer's requests, for what has no method ---------------------------------------------

    def request(self, message: Request, timeout: float = OPEN_TIMEOUT) -> Any:
        """Tell the composer one of its requests and wait, bounded, for its reply.

        Raises:
            SessionClosed, SessionTimedOut: the session has closed, or did not answer in time.
            SessionError, ConfigError: the request failed (the previous composition stays).
        """
        return request(self._composer, message, timeout)

    def send(self, message: Request) -> concurrent.futures.Future:
        """Tell the composer one of its requests without waiting; its reply future.

        Raises:
            SessionClosed: the session has closed.
        """
        return self._send(message)

    def _send(self, message: Request) -> concurrent.futures.Future:
        try:
            self._composer.tell(message)
        except pykka.ActorDeadError:
            raise SessionClosed(CLOSED) from None
        return message.reply

    @property
    def closed(self) -> bool:
        ref = self._ref
        return ref is None or not ref.is_alive()

    def close(self) -> None:
        """End the session: its async lanes, then its composer (which lets go of its
        servers; a server no other session holds closes). Safe to call twice."""
        with self._lock:
            ref, self._ref = self._ref, None
            amcp, self._amcp = self._amcp, None
        if amcp is not None:
            amcp.close()
        if ref is not None:
            try:
                ref.stop(timeout=STOP_TIMEOUT)
            except (pykka.ActorDeadError, pykka.Timeout):
                pass
        self._daemon._forget(self)


class Runtime(Daemon):
    """A daemon with one session, for a host with a single conversation (and the command
    line). It has the session's methods itself; ``runtime.session`` is that session.

    ``enabled`` / ``overlays_enabled``: the session's own choice for "mcp" / "editor-mcp"
    (None: the configured default). The other arguments are the Daemon's.
    """

    def __init__(
        self,
        home: str,
        store: Store | None = None,
        *,
        config: McpConfig | Callable[[], McpConfig] | None = None,
        background: bool = True,
        enabled: bool | None = None,
        overlays_enabled: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        id_token: IdTokenProvider | None = None,
        machine_grants: bool = True,
        watch: bool = True,
        on_changed: Callable[[Session], None] | None = None,
        warn: Callable[[str], None] | None = None,
        on_held: Callable[[str, tuple[HeldTool, ...]], None] | None = None,
        handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
        keep_task_arguments: bool = False,
    ) -> None:
        super().__init__(home, store, config=config, background=background, clock=clock, id_token=id_token,
                         machine_grants=machine_grants, watch=watch, on_held=on_held, handlers=handlers,
                         keep_task_arguments=keep_task_arguments)
        self._choice = (enabled, overlays_enabled)
        self._on_changed = on_changed
        self._warn = warn
        self._session: Session | None = None

    def __enter__(self) -> Runtime:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def start(self) -> Composition:  # type: ignore[override]
        """Start the daemon and open its session; the session's first composition.

        Raises:
            ConfigError: the configuration is unusable (e.g. a catalogue is over the size limit; a
                server naming an unset variable is only left out, with a warning).
            SessionTimedOut: the servers did not open within ``OPEN_TIMEOUT``.
            SessionError: preparing the servers failed (``SessionClosed``: it closed meanwhile).
        """
        super().start()
        self._session = self.open_session(*self._choice, on_changed=self._on_changed, warn=self._warn)
        return self._session.composition()

    def stop(self) -> None:
        super().stop()
        self._session = None

    @property
    def session(self) -> Session:
        """The runtime's one session.

        Raises:
            SessionClosed: the runtime is not running.
        """
        if self._session is None:
            raise SessionClosed(RUNTIME_NOT_RUNNING)
        return self._session

    @property
    def _composer(self) -> pykka.ActorRef | None:
        return self._session._ref if self._session is not None else None

    @property
    def composer(self) -> Any:
        """The session composer's proxy, for what answers at once (composition,
        turn_started, take_changes); requests go through :meth:`request`."""
        return self.session._proxy

    # The session's face, on the runtime itself.

    def mcp(self, warn: Callable[[str], None] | None = None) -> Mcp:
        return self.session.mcp(warn)

    def amcp(self) -> AsyncMcp:
        return self.session.amcp()

    def composition(self) -> Composition:
        return self.session.composition()

    def turn_started(self) -> Composition:
        return self.session.turn_started()

    def turn_ended(self, timeout: float = TURN_TIMEOUT) -> Composition | None:
        return self.session.turn_ended(timeout)

    def take_changes(self) -> bool:
        return self.session.take_changes()

    def set_server_enabled(self, name: str, on: bool | None) -> None:
        self.session.set_server_enabled(name, on)

    def approve(self, server: str, tools: Iterable[str] | None = None, timeout: float = OPEN_TIMEOUT) -> list[str]:
        return self.session.approve(server, tools, timeout)

    def tasks(self, pending_only: bool = True) -> list[dict[str, Any]]:
        return self.session.tasks(pending_only)

    def task_result(self, task_id: str, timeout: float | None = None,
                    on_progress: Callable[[Any], None] | None = None) -> dict[str, Any]:
        return self.session.task_result(task_id, timeout, on_progress)

    def cancel_task(self, task_id: str) -> str:
        return self.session.cancel_task(task_id)

    def request(self, message: Request, timeout: float = OPEN_TIMEOUT) -> Any:
        return self.session.request(message, timeout)

    def send(self, message: Request) -> concurrent.futures.Future:
        return self.session.send(message)


class _Events:
    """The daemon's event thread: calls the host's ``on_changed`` callbacks in order,
    never on an actor's thread (a callback may call back into its session). Started at
    the first event; what a callback raises is logged."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stopped = False

    def put(self, callback: Callable[[Any], None], argument: Any) -> None:
        with self._lock:
            if self._stopped:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="mcp-events", daemon=True)
                self._thread.start()
        self._queue.put((callback, argument))

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            thread = self._thread
        if thread is not None:
            self._queue.put(None)
            if thread is not threading.current_thread():
                thread.join(EVENTS_STOP_S)
                if thread.is_alive():
                    logger.warning("a host's on_changed callback did not return within %g s of the stop; it ends on its own",
                                   EVENTS_STOP_S)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            callback, argument = item
            try:
                callback(argument)
            except Exception:  # noqa: BLE001 - the host's callback: logged, never the daemon's end
                logger.exception("the host's on_changed callback failed")


__all__ = ["Daemon", "Runtime", "Session"]
