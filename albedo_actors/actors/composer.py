"""SessionComposer: the composition one session sees, swapped atomically, refreshed after turns.

**Owns** the session's current :class:`~albedo_actors.catalogue.composition.Composition`,
whether the extension is on for this session, whether a turn is running, and the
probe schedule of the servers that were left out.

**Asks** the ServerRegistry (for a left-out server's client), with a timeout. **Tells**
the RuntimePreparer :class:`~albedo_actors.actors.preparer.Prepare` (a request whose
reply one helper thread waits on, never this mailbox), :class:`Subscribe` and
:class:`Unsubscribe`, and the registry :class:`Release` (nothing to wait for).

**Requests** from the host (reply.py's pattern: the host tells one and waits on its
``reply``): :class:`Open`, :class:`Reload`, :class:`SetEnabled`, :class:`SetOverlays`,
:class:`SetOverlaysEnabled`, :class:`SetServerEnabled`, :class:`TurnEnded`, :class:`ProbesSettled`. What answers
at once is a proxy call: :meth:`~SessionComposer.composition`,
:meth:`~SessionComposer.turn_started`, :meth:`~SessionComposer.take_changes`,
:meth:`~SessionComposer.set_budget` (tool search: the session's own budget). The binding reads the
composition the composer publishes in :class:`Published` (asked for once).

- A replacement is always prepared first; the previous clients are retired only after
  the swap, and a failed preparation keeps the previous composition.
- A preparation releases exactly the clients the registry held for it (``held``): a
  stale or failed one at once, a shown one when it is replaced. Nothing else is ever
  released, so no client another composition (or session) holds is stopped.
- A swap lands only between turns: a preparation ready during a turn waits for its end.
- A changed catalogue (told by the preparer) or a server that came back refreshes the
  session after the end of the next turn, never in the middle of one: found mid-turn,
  after that turn; found while idle, after the turn that follows (the reference: "A
  server found up waits for the end of a turn and then asks the session to refresh,
  so it appears after the turn that follows its return, not mid-turn").
- Servers that come back: no timer. On session activity (a submit or the end of a turn)
  the left-out servers are probed, first ``retryMs`` after the session prepared, then at
  doubling intervals capped at twenty times ``retryMs``.
- Disabling the extension closes every connection of the composition.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import time
from typing import Any, Callable, Hashable, Mapping

import pykka

from ..config import McpConfig, ServerConfig
from ..errors import AlbedoError, SessionClosed, SessionError
from .client import ServerHandle, connect_all
from ..catalogue.composition import Composition, Usage
from .preparer import CatalogueSaved, Prepare, Subscribe, Unsubscribe
from .registry import Release
from .reply import ASK_TIMEOUT, Message, Reply, Request, chain, fail, fail_queued, resolve, set_field
from ..wire import telemetry

logger = telemetry.logger(__name__)  # records carry the server and trace ids

PROBE_CAP = 20  # probe intervals double up to this many times retryMs
PREPARE_LIMIT = 3600.0  # the preparer bounds each dial; this only guards against a lost future


class Published:
    """The composer's current composition, for readers on other threads (the binding).

    Only the composer's thread replaces it, whole, at the moment its own composition is
    swapped, so a reader sees one composition or the next, never a mix, and reading it
    asks the composer nothing (a call never waits behind a preparation or a probe).
    """

    __slots__ = ("composition",)

    def __init__(self, composition: Composition) -> None:
        self.composition = composition


# -- requests (reply.py): each ``reply`` resolves with the Composition in use once the
# preparation it asked for has landed (or fails with the AlbedoError that kept it out) --


class Open(Request):
    """Subscribe to the preparer's catalogue changes and prepare the first composition."""

    __slots__ = ()


class Reload(Request):
    """Prepare a replacement from the current configuration; swapped only if it succeeds."""

    __slots__ = ()


class SetEnabled(Request):
    """The session's own choice for the "mcp" extension (None: the configured default)."""

    __slots__ = ("enabled",)
    enabled: bool | None

    def __init__(self, enabled: bool | None, *, reply: Reply | None = None) -> None:
        super().__init__(reply=reply)
        set_field(self, "enabled", enabled)


class SetOverlays(Request):
    """Editor overlays a host hands over at run time; their credentials stay in memory."""

    __slots__ = ("servers", "credentials")
    servers: tuple[ServerConfig, ...]
    credentials: Mapping[str, Any] | None

    def __init__(self, servers: tuple[ServerConfig, ...], credentials: Mapping[str, Any] | None = None, *,
                 reply: Reply | None = None) -> None:
        super().__init__(reply=reply)
        set_field(self, "servers", servers)
        set_field(self, "credentials", credentials)


class SetOverlaysEnabled(Request):
    """The session's own choice for editor overlays (None: the configured default)."""

    __slots__ = ("enabled",)
    enabled: bool | None

    def __init__(self, enabled: bool | None, *, reply: Reply | None = None) -> None:
        super().__init__(reply=reply)
        set_field(self, "enabled", enabled)


class SetServerEnabled(Request):
    """The session's own choice for one configured server: True dials it for this
    session even when extensions.json switches it off, False leaves it out of this
    session alone (never dialled for it), None returns to the configuration's choice.
    Applied from the session's next turn (a swap lands between turns)."""

    __slots__ = ("server", "enabled")
    server: str
    enabled: bool | None

    def __init__(self, server: str, enabled: bool | None, *, reply: Reply | None = None) -> None:
        super().__init__(reply=reply)
        set_field(self, "server", server)
        set_field(self, "enabled", enabled)


class TurnEnded(Request):
    """The turn ended: a swap or a refresh that waited for it runs now. ``reply``: the
    composition once that swap or refresh (or a preparation still running, asked for
    before the turn ended) has landed, or None at once when none waited.
    A host that does not wait for it simply tells it."""

    __slots__ = ()


class ProbesSettled(Request):
    """``reply`` resolves (with None) once no probe of a left-out server is running."""

    __slots__ = ()


class _Prepared(Message):
    __slots__ = ("generation", "composition", "error")
    generation: int
    composition: Composition | None
    error: AlbedoError | None

    def __init__(self, generation: int, composition: Composition | None, error: AlbedoError | None) -> None:
        set_field(self, "generation", generation)
        set_field(self, "composition", composition)
        set_field(self, "error", error)


class SignInNeeded(Message):
    """Told by the binding: a call found ``server`` needing a sign-in (see
    :meth:`SessionComposer.server_needs_sign_in`); nothing to wait for."""

    __slots__ = ("server",)
    server: str

    def __init__(self, server: str) -> None:
        set_field(self, "server", server)


class ToolProgress(Message):
    """Told by the binding: the latest progress of a running tool call (``report`` a
    :class:`~albedo_actors.connection.progress.ProgressReport`), at most
    REPORTS_PER_SECOND a second per call; ``report`` None when the call ended. The
    composer keeps the latest of each running call (:meth:`SessionComposer.progress`)."""

    __slots__ = ("call", "operation", "report")
    call: int
    operation: str
    report: Any

    def __init__(self, call: int, operation: str, report: Any) -> None:
        set_field(self, "call", call)
        set_field(self, "operation", operation)
        set_field(self, "report", report)


MAX_PROGRESS_CALLS = 256  # running calls whose latest progress the composer keeps


class _Probed(Message):
    __slots__ = ("server", "up")
    server: str
    up: bool

    def __init__(self, server: str, up: bool) -> None:
        set_field(self, "server", server)
        set_field(self, "up", up)


class SessionComposer(pykka.ThreadingActor):
    """One per session; see the module docstring."""

    def __init__(
        self,
        preparer: pykka.ActorRef,
        registry: pykka.ActorRef,
        config: Callable[[], McpConfig],
        *,
        enabled: bool | None = None,
        overlays_enabled: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_changed: Callable[[], None] | None = None,
        stamp: Callable[[], Hashable] | None = None,
    ) -> None:
        # ``on_changed()``: called on this actor's thread, once per swap that changed what
        # the model is offered; it must only hand the news on (the Session queues it for
        # the daemon's event thread). ``stamp()``: a cheap token of the settings (the
        # daemon's ChangeWatch); a session that sees it differ at a turn's start or end
        # prepares again, so a change made by anyone reaches it between turns.
        super().__init__()
        self._on_changed = on_changed
        self._stamp = stamp
        self._seen: Hashable = None
        self._server_choices: dict[str, bool] = {}
        self._overlay_choice = overlays_enabled  # None: the configured editor-mcp default
        self._overlay_configs: tuple[ServerConfig, ...] = ()
        self._overlay_credentials: Mapping[str, Any] = {}
        self._overlay_handles: dict[str, tuple[Any, ServerHandle]] = {}  # name -> (what started it, client)
        self._overlays_wanted: set[str] = set()
        self._preparer = preparer
        self._registry = registry
        self._config = config
        self._choice = enabled  # the session's own choice; None: the configured default
        self._clock = clock
        self._composition = Composition()
        self._published = Published(self._composition)
        self._generation = 0
        self._waiting: dict[int, concurrent.futures.Future] = {}
        self._in_turn = False
        self._parked: _Prepared | None = None  # ready during a turn: swapped at its end
        self._refresh_due = False
        self._changed = False  # a "capabilities changed" turn is owed to the model
        self._probe_at: float | None = None
        self._probe_wait = 0.0
        self._probing: set[str] = set()
        self._probes_settled: list[concurrent.futures.Future] = []
        self._pending: list[concurrent.futures.Future] = []  # preparations told to the preparer, not yet answered
        self._threads: list[threading.Thread] = []
        self._progress: dict[int, ToolProgress] = {}  # running call -> its latest progress
        # Tool search: the budget (configured, or the session's own) and the most recently
        # used operations; every composition this session publishes shares it.
        self._usage = Usage()

    # -- public API -------------------------------------------------------------------------
    # Requests whose answer comes after a preparation are the messages below (Open,
    # Reload, ...; reply.py's pattern); what answers at once is a proxy call.

    def composition(self) -> Composition:
        return self._composition

    def published(self) -> Published:
        """Where the current composition is published (asked once, then read without asking)."""
        return self._published

    def turn_started(self) -> Composition:
        """The host submitted a turn: activity, so left-out servers may be probed and the
        settings checked for a change. The composition this turn sees (a swap waits for
        the turn's end)."""
        self._in_turn = True
        self._probe_if_due()
        self._check_settings()
        return self._composition

    def server_choices(self) -> dict[str, bool]:
        """This session's own choices of servers (:class:`SetServerEnabled`), by name."""
        return dict(self._server_choices)

    def server_needs_sign_in(self, server: str) -> None:
        """A call found ``server`` needing a sign-in: after this turn the session is
        prepared again, which leaves it out (with its context line) until signed in."""
        if server in self._composition.catalogues and server not in self._composition.left_out:
            logger.info("server %r needs a sign-in; the session refreshes after this turn", server)
            self._refresh_after_turn()

    def progress(self) -> list[dict[str, Any]]:
        """The latest progress of each running tool call that reported some, oldest call first:
        ``{"operation", "server", "progress", "total", "message"}`` (text escaped and bounded)."""
        return [{"operation": event.operation, **event.report._asdict()} for event in self._progress.values()]

    def set_budget(self, max_tools: int | None, pinned: tuple[str, ...] | None = None, *, configured: bool = False) -> None:
        """This session's own budget of advertised operations (``max_tools`` None: every
        operation; ``configured``: the configuration's ``mcp.advertise`` again). It holds
        from the next :meth:`Composition.model_operations`, that is the next turn's set.

        Raises:
            ConfigError: ``max_tools`` is not a whole number of at least 2.
        """
        self._usage.set_budget(max_tools, pinned, configured=configured)

    def swap_waiting(self) -> bool:
        """True while a prepared composition waits for the current turn to end."""
        return self._parked is not None

    def take_changes(self) -> bool:
        """True once after a refresh changed what the model sees (append a user turn)."""
        changed, self._changed = self._changed, False
        return changed

    # -- messages ------------------------------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Request):
            try:
                self._on_request(message)
            except Exception as exc:  # noqa: BLE001 - a bug fails this request, not the session
                logger.exception("the session could not handle %s", type(message).__name__)
                fail(message.reply, exc if isinstance(exc, AlbedoError) else
                     SessionError(f"the MCP session failed ({type(exc).__name__}); the previous servers stay in use"))
        elif isinstance(message, _Prepared):
            self._on_prepared(message)
        elif isinstance(message, SignInNeeded):
            self.server_needs_sign_in(message.server)
        elif isinstance(message, ToolProgress):
            if message.report is None:
                self._progress.pop(message.call, None)
            elif message.call in self._progress or len(self._progress) < MAX_PROGRESS_CALLS:
                self._progress[message.call] = message
        elif isinstance(message, CatalogueSaved):
            shown = self._composition.catalogues.get(message.server)
            if shown is not None and not shown.same_listing(message.catalogue):
                self._refresh_after_turn()
        elif isinstance(message, _Probed):
            self._probing.discard(message.server)
            if message.up:
                logger.info("server %r is back; the session refreshes after this turn", message.server)
                self._refresh_after_turn()
            if not self._probing:
                settled, self._probes_settled = self._probes_settled, []
                for future in settled:
                    resolve(future, None)
        else:
            return super().on_receive(message)
        return None

    def _on_request(self, message: Request) -> None:
        if isinstance(message, TurnEnded):
            self._turn_ended(message.reply)
            return
        if isinstance(message, ProbesSettled):
            if self._probing:
                self._probes_settled.append(message.reply)
            else:
                resolve(message.reply, None)
            return
        if isinstance(message, Open):
            try:
                self._preparer.tell(Subscribe(self.actor_ref))
            except pykka.ActorDeadError:
                pass  # _prepare below says the preparer has stopped
        elif isinstance(message, SetEnabled):
            self._choice = message.enabled
        elif isinstance(message, SetOverlays):
            self._overlay_configs = tuple(message.servers)
            self._overlay_credentials = dict(message.credentials or {})
        elif isinstance(message, SetOverlaysEnabled):
            self._overlay_choice = message.enabled
        elif isinstance(message, SetServerEnabled):
            if message.enabled is None:
                self._server_choices.pop(message.server, None)
            else:
                self._server_choices[message.server] = bool(message.enabled)
        elif not isinstance(message, Reload):
            fail(message.reply, SessionError(f"the MCP session does not handle {type(message).__name__}"))
            return
        self._prepare(message.reply)

    def _turn_ended(self, reply: concurrent.futures.Future) -> None:
        self._in_turn = False
        parked, self._parked = self._parked, None
        landed = None
        if parked is not None:
            landed = self._waiting.get(parked.generation)
            self._on_prepared(parked)
        self._probe_if_due()
        if self._settings_changed():
            self._refresh_due = True
        if self._refresh_due:
            self._refresh_due = False
            self._prepare(reply)
        elif landed is not None:
            chain(landed, reply)
        elif self._generation in self._waiting:
            # A preparation asked for before the turn ended is still running (a change to
            # the settings, a server choice): the reply is its landing, so the next turn
            # sees it (its swap lands at once, the turn being over).
            chain(self._waiting[self._generation], reply)
        else:
            resolve(reply, None)

    # -- lifecycle -------------------------------------------------------------------------------

    def on_stop(self) -> None:
        # Nothing here waits on an actor below: what the helper threads wait on ends
        # first (DESIGN rule 1). The overlays close (their servers get EOF at once), the
        # preparations still with the preparer are cancelled (it releases what it
        # prepared for a cancelled one), and only then are the threads joined.
        fail_queued(self, lambda message: SessionClosed("the MCP session closed; start a new session"))
        try:
            self._preparer.tell(Unsubscribe(self.actor_ref))
        except pykka.ActorDeadError:
            pass
        for _key, handle in self._overlay_handles.values():
            handle.stop_async()
        for pending in self._pending:
            pending.cancel()
        self._pending = []
        for thread in self._threads:
            thread.join(30)
            if thread.is_alive():
                logger.warning("a session thread (%s) did not end within 30 s of the stop; it ends on its own", thread.name)
        self._overlay_handles = {}
        if self._parked is not None:
            if self._parked.composition is not None:
                self._release(self._parked.composition.held)
            self._parked = None
        self._release(self._composition.held)
        self._composition = Composition()
        self._published.composition = self._composition
        for future in self._waiting.values():
            fail(future, SessionClosed("the MCP session closed before it was prepared; start a new session"))
        for future in self._probes_settled:
            resolve(future, None)
        self._probes_settled = []

    # -- internals -------------------------------------------------------------------------------

    def _enabled(self, config: McpConfig) -> bool:
        return config.extension_enabled("mcp") if self._choice is None else self._choice

    def _prepare(self, done: concurrent.futures.Future | None = None) -> None:
        """Start a preparation; ``done`` (the request's reply) resolves once it landed."""
        self._generation += 1
        generation = self._generation
        done = done if done is not None else concurrent.futures.Future()
        self._waiting[generation] = done
        if self._stamp is not None:
            self._seen = self._read_stamp()  # read before the configuration: a later change is seen next time
        try:
            config = _with_choices(self._config(), self._server_choices)
        except AlbedoError as exc:
            self.actor_ref.tell(_Prepared(generation, None, exc))
            return
        self._usage.configured = config.advertising
        if self._enabled(config):
            # A tell, not an ask: this mailbox never waits on the preparer, and the
            # helper thread below waits on this one future (bounded).
            asked = Prepare(config)
            pending = asked.reply
            try:
                self._preparer.tell(asked)
            except pykka.ActorDeadError:
                self._waiting.pop(generation, None)
                fail(done, SessionError("the runtime preparer has stopped; start a new session to use MCP again"))
                return
        else:
            pending = concurrent.futures.Future()
            pending.set_result(Composition(mcp_off=True))  # the binding says MCP is off
        self._pending = [p for p in self._pending if not p.done()] + [pending]
        overlays = self._start_overlays(config)
        if not overlays:
            # Nothing to dial here: the reply is reported (a tell) from wherever it
            # resolves, with no helper thread to start and to wake.
            ref, registry, shown, usage = self.actor_ref, self._registry, self._overlays_shown, self._usage
            pending.add_done_callback(lambda done: _report(ref, registry, generation, done, {}, {}, {}, shown, usage))
            return
        thread = threading.Thread(
            target=_finish, args=(self.actor_ref, self._registry, generation, pending, overlays, self._overlays_shown, self._usage),
            name="mcp-compose", daemon=True
        )
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _start_overlays(self, config: McpConfig) -> dict[str, ServerHandle]:
        """The overlay clients this preparation uses, reusing those whose setup is unchanged."""
        on = config.extension_enabled("editor-mcp") if self._overlay_choice is None else self._overlay_choice
        # The reference ("Editor servers over ACP"): with editor-mcp off, overlays are
        # still validated and discovered; only their tools are hidden from the model.
        wanted = {server.name: server for server in self._overlay_configs}
        self._overlays_shown = on
        self._overlays_wanted = set(wanted)
        chosen = {}
        for name, server in wanted.items():
            key = (server, id(self._overlay_credentials.get(name)))
            entry = self._overlay_handles.get(name)
            if entry is None or entry[0] != key or not entry[1].alive:
                entry = (key, ServerHandle.start(server, config.home, credentials=self._overlay_credentials.get(name)))
                self._overlay_handles[name] = entry
            chosen[name] = entry[1]
        return chosen

    def _on_prepared(self, message: _Prepared) -> None:
        done = self._waiting.pop(message.generation, None)
        if message.error is not None:
            # The session keeps its previous working composition.
            logger.warning("MCP preparation failed; keeping the previous composition: %s", message.error)
            if done is not None:
                fail(done, message.error)
            return
        composition = message.composition
        assert composition is not None  # a preparation without an error has its composition
        if message.generation != self._generation:
            # A newer preparation was asked for; this one is stale. Let go of what the
            # registry held for it, and only that: the shown composition and the newer
            # preparation hold their own counts on any client they share with it.
            self._release(composition.held)
            if done is not None:
                resolve(done, self._composition)
            return
        if self._in_turn:
            # Ready during a turn: it waits for the turn's end (turn_ended swaps it in).
            self._waiting[message.generation] = done if done is not None else concurrent.futures.Future()
            older, self._parked = self._parked, message
            if older is not None:
                self._on_prepared(older)  # stale now: released
            return
        previous, self._composition = self._composition, composition
        self._published.composition = composition
        if (previous.catalogues or previous.overlays or previous.left_out) and not _same(previous, composition):
            self._changed = True
            if self._on_changed is not None:
                try:
                    self._on_changed()
                except Exception:  # noqa: BLE001 - the host's news channel must not break the swap
                    logger.exception("the session's change notice failed")
        # Overlay clients this composition no longer uses end now (they are this session's).
        kept = {id(h) for h in composition.overlay_handles.values()}
        for name, (key, handle) in list(self._overlay_handles.items()):
            if id(handle) not in kept and name not in self._overlays_wanted:
                del self._overlay_handles[name]
                handle.stop_async()
        for old in previous.overlay_handles.values():
            if id(old) not in kept and all(entry[1] is not old for entry in self._overlay_handles.values()):
                old.stop_async()
        # The new clients are held since apply(); let go of the previous ones: connections
        # close only after the swap, and only when nobody else holds them.
        self._release(previous.held)
        self._schedule_probes(reset=True)
        if done is not None:
            resolve(done, composition)

    def _read_stamp(self) -> Hashable:
        assert self._stamp is not None
        try:
            return self._stamp()
        except Exception as exc:  # noqa: BLE001 - a failing watch must not break a turn
            logger.warning("the MCP settings could not be checked for changes (%s: %s)", type(exc).__name__, exc)
            return self._seen

    def _settings_changed(self) -> bool:
        """True when the settings' stamp differs from the one the last preparation read."""
        return self._stamp is not None and self._read_stamp() != self._seen

    def _check_settings(self) -> None:
        """At a turn's start: a change to the settings starts a preparation now; its swap
        lands when this turn ends (or at once when the turn is over by then)."""
        if self._settings_changed():
            self._prepare()

    def _refresh_after_turn(self) -> None:
        # Mid-turn or idle alike: the refresh runs when the (next) turn ends.
        self._refresh_due = True

    def _schedule_probes(self, reset: bool) -> None:
        if not self._composition.left_out:
            self._probe_at = None
            return
        retry = self._config_retry()
        if reset or self._probe_at is None:
            self._probe_wait = retry
        else:
            self._probe_wait = min(self._probe_wait * 2, retry * PROBE_CAP)
        self._probe_at = self._clock() + self._probe_wait

    def _config_retry(self) -> float:
        try:
            return self._config().retry_ms / 1000
        except AlbedoError:
            return 30.0

    def _probe_if_due(self) -> None:
        if self._probe_at is None or self._clock() < self._probe_at:
            return
        self._schedule_probes(reset=False)
        registry = self._registry.proxy()
        for name in self._composition.left_out:
            if name in self._probing:
                continue
            handle = registry.handle(name).get(timeout=ASK_TIMEOUT)
            if handle is None:
                continue
            self._probing.add(name)
            thread = threading.Thread(target=_probe, args=(self.actor_ref, name, handle), name=f"mcp-probe-{name}", daemon=True)
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            thread.start()

    def _release(self, handles: tuple) -> None:
        if handles:
            _release_now(self._registry, handles)


def _with_choices(config: McpConfig, choices: Mapping[str, bool]) -> McpConfig:
    """``config`` with the session's own choice of each server it names (a name the
    configuration does not have is ignored: it may come back)."""
    if not choices:
        return config
    servers = tuple(dataclasses.replace(s, enabled=choices[s.name]) if s.name in choices and s.enabled != choices[s.name] else s
                    for s in config.servers)
    return dataclasses.replace(config, servers=servers)


def _probe(composer: pykka.ActorRef, name: str, handle: ServerHandle) -> None:
    try:
        handle.connect()
        up = True
    except AlbedoError:
        up = False
    try:
        composer.tell(_Probed(name, up))
    except pykka.ActorDeadError:
        pass


def _release_now(registry: pykka.ActorRef, handles: tuple) -> None:
    try:
        registry.tell(Release(tuple(handles)))
    except pykka.ActorDeadError:
        for handle in handles:
            handle.stop_async()


def _same(a: Composition, b: Composition) -> bool:
    def same(x: Mapping[str, Any], y: Mapping[str, Any]) -> bool:
        return set(x) == set(y) and all(x[name].same_listing(y[name]) for name in x)

    return (same(a.catalogues, b.catalogues) and same(a.overlays, b.overlays) and a.overlays_shown == b.overlays_shown
            and {n: [h.tool for h in held] for n, held in a.on_hold.items()} == {n: [h.tool for h in held] for n, held in b.on_hold.items()})


def _finish(composer: pykka.ActorRef, registry: pykka.ActorRef, generation: int, pending: concurrent.futures.Future[Composition], overlays: dict,
            shown: bool = True, usage: Usage | None = None) -> None:
    """On a helper thread: dial the overlays, wait for the preparer, report the whole."""
    catalogues, left_out = {}, {}
    for name, outcome in connect_all(overlays).items():
        if isinstance(outcome, AlbedoError):
            left_out[name] = getattr(outcome, "detail", str(outcome))
        else:
            catalogues[name] = outcome
    try:
        pending.result(timeout=PREPARE_LIMIT)
    except Exception:  # noqa: BLE001 - _report reads the outcome (a timeout included)
        pass
    _report(composer, registry, generation, pending, overlays, catalogues, left_out, shown, usage)


def _report(composer: pykka.ActorRef, registry: pykka.ActorRef, generation: int, pending: concurrent.futures.Future[Composition],
            overlays: dict, catalogues: dict, left_out: dict, shown: bool, usage: Usage | None = None) -> None:
    """Tell the composer what the preparation gave (with the overlays found), or why not."""
    try:
        composition = pending.result(timeout=0)
        error = None
    except AlbedoError as exc:
        composition, error = None, exc
    except Exception as exc:  # noqa: BLE001 - a timeout, a cancelled reply or a bug fails this preparation only
        composition, error = None, SessionError(f"preparation failed: {type(exc).__name__}: {exc}")
    if composition is not None:
        composition = composition.with_overlays(catalogues, {name: overlays[name] for name in catalogues}, left_out, shown, usage)
    try:
        composer.tell(_Prepared(generation, composition, error))
    except pykka.ActorDeadError:
        if composition is not None:  # nobody will use it
            _release_now(registry, composition.held)
