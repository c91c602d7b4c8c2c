"""RuntimePreparer: turns a configuration into a composition without waiting on known servers.

**Owns** nothing durable: the store (catalogues, credentials) belongs to the daemon and
the clients to the :class:`~albedo_actors.actors.registry.ServerRegistry`; the preparer
keeps only which subscribers to tell and which background dials are running.

**Asks** the registry (with a timeout) for clients. **Tells** its subscribers (session
composers) :class:`CatalogueSaved` when a background discovery found a catalogue that
differs from the saved one, and the registry :class:`SetOwner` (at start) and
:class:`Release` (what a failed preparation was given).

**Requests** (reply.py's pattern): :class:`Prepare` and :class:`BackgroundSettled`;
each is handled at once and its ``reply`` resolves later.

**Threads**: the preparer's own thread only decides; dials run on helper threads
(one per server being prepared), which report back with messages. A :class:`Prepare`
reply resolves when every server without a usable saved catalogue has been dialled
(each bounded by its ``startupTimeoutMs``).

The reference's "Saved catalogues": a server with a saved catalogue for its current
fingerprint is advertised at once and dialled in the background; one without is
connected during preparation; one that cannot start, initialize or be discovered is
left out with a warning naming it, and so, undialled, is one whose stored credentials
cannot be read (damaged, or sealed under a key not given: the store's line says what to
do) and one that names a variable the host's environment does not set (the line names
the server and the variable; its calls fail with that :class:`ConfigError`). A catalogue
over the size limit fails the whole preparation.

Tool integrity (catalogue/trust.py): every catalogue that becomes a composition is
reviewed against what the store trusts of its server: held tools and held instructions
are taken out of the catalogue the session is offered and listed in the composition's
``on_hold``; a first use is trusted, and new holds are recorded (one row each) and told
to the host's ``on_held(server, holds)``. A background discovery or a list_changed is
reviewed when its catalogue is saved, so a hold is recorded (and told) at once, and the
sessions prepared again after their turn pick it up. A catalogue discovered before the
one saved for its server (a connected client answers a background dial with its own
earlier discovery) is neither saved over it nor reviewed, so a newer hold is never
forgotten. A server whose trusted tools cannot be read is left out (nothing unchecked
is offered).
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from typing import TYPE_CHECKING, Any, Callable, Mapping

import pykka

from ..catalogue import Catalogue
from ..config import McpConfig, http_headers
from ..catalogue.composition import OFF, Composition, Usage
from ..errors import AlbedoError, ConfigError, NeedsSignIn, ServerError, SessionClosed, SessionError, StoreError
from ..catalogue.saved import MAX_CATALOGUE_BYTES, SAVED, STALE, fingerprint, load_current_all, save_discovered, size_of
from ..catalogue import trust as trusting
from .client import CatalogueChanged, ServerHandle, ServerLost, connect_all
from .registry import Release, SetOwner
from .reply import ASK_TIMEOUT, Message, Reply, Request, fail, fail_queued, resolve, set_field
from ..wire import telemetry

if TYPE_CHECKING:
    from ..config import ServerConfig
    from ..store import Store
    from ..store.records import Credentials

logger = telemetry.logger(__name__)  # records carry the server and trace ids

BACKGROUND_DIALS = 16  # background dials at once (as many as connect_all runs)

# Saving a discovered catalogue and reviewing it (tool integrity) happen under this lock,
# in this process, as one step (:func:`save_and_review`); and a preparation reviews the
# catalogues it loaded from the store under it too, after checking that none was saved
# since. So discoveries are reviewed in the order they were made: the first definition
# seen is the one trusted, a newer one is held, and a stale saved catalogue is never
# reviewed after a fresher one (which would trust the change and hold the original, or
# forget the hold the fresher one recorded).
_REVIEWS = threading.Lock()
_saves = 0  # catalogues saved under _REVIEWS so far (a preparation compares it)


class Prepare(Request):
    """Prepare ``config``'s enabled servers. Handled at once (this mailbox never waits on
    a dial); ``reply`` resolves with the :class:`Composition` once every server without
    a usable saved catalogue has been dialled (each bounded by its startupTimeoutMs),
    or fails with :class:`ConfigError` when the configuration is unusable (then nothing
    changed: the caller keeps its previous composition). A reply cancelled meanwhile
    gets nothing, and what was prepared for it is released."""

    __slots__ = ("config",)
    config: McpConfig

    def __init__(self, config: McpConfig, *, reply: Reply | None = None) -> None:
        super().__init__(reply=reply)
        set_field(self, "config", config)


class BackgroundSettled(Request):
    """``reply`` resolves (with None) once no background dial is pending (and its outcome handled)."""

    __slots__ = ()


class CatalogueSaved(Message):
    """Told to subscribers: a background discovery saved a catalogue that differs."""

    __slots__ = ("server", "catalogue")
    server: str
    catalogue: Catalogue

    def __init__(self, server: str, catalogue: Catalogue) -> None:
        set_field(self, "server", server)
        set_field(self, "catalogue", catalogue)


class Subscribe(Message):
    """Told by a session composer: tell it :class:`CatalogueSaved` from now on."""

    __slots__ = ("ref",)
    ref: pykka.ActorRef

    def __init__(self, ref: pykka.ActorRef) -> None:
        set_field(self, "ref", ref)


class Unsubscribe(Message):
    __slots__ = ("ref",)
    ref: pykka.ActorRef

    def __init__(self, ref: pykka.ActorRef) -> None:
        set_field(self, "ref", ref)


class _BackgroundDone(Message):
    __slots__ = ("server", "key", "catalogue", "error")
    server: str
    key: str
    catalogue: Catalogue | None
    error: str | None

    def __init__(self, server: str, key: str, catalogue: Catalogue | None, error: str | None) -> None:
        set_field(self, "server", server)
        set_field(self, "key", key)
        set_field(self, "catalogue", catalogue)
        set_field(self, "error", error)


class RuntimePreparer(pykka.ThreadingActor):
    """One per daemon; see the module docstring."""

    def __init__(
        self,
        registry: pykka.ActorRef,
        store: Store | None = None,
        environ: Mapping[str, str] | None = None,
        *,
        background: bool = True,
        on_held: Callable[[str, tuple[trusting.HeldTool, ...]], None] | None = None,
    ) -> None:
        # ``background=False``: a server advertised from its saved catalogue is not dialled
        # in the background; its first use dials it (the command line, which lists and
        # exits, does not start a server it has heard from before).
        # ``on_held(server, holds)``: told each new hold (a tool or the instructions held
        # now), on a thread of the preparer's; it must only hand the news on.
        super().__init__()
        self._on_held = on_held
        self._policies: dict[str, trusting.Policy] = {}
        self._background_dials = background
        self._registry = registry.proxy()
        self._store = store
        self._environ = dict(os.environ) if environ is None else dict(environ)
        self._subscribers: list[pykka.ActorRef] = []
        self._threads: list[threading.Thread] = []
        self._keys: dict[str, str] = {}  # server -> fingerprint of its last preparation
        self._background_pending = 0
        self._settled: list[concurrent.futures.Future] = []

    # -- public API -------------------------------------------------------------------------

    def subscribe(self, ref: pykka.ActorRef) -> None:
        if ref not in self._subscribers:
            self._subscribers.append(ref)

    def unsubscribe(self, ref: pykka.ActorRef) -> None:
        if ref in self._subscribers:
            self._subscribers.remove(ref)

    # Requests that answer later are the messages :class:`Prepare` and
    # :class:`BackgroundSettled` (reply.py's pattern).

    def _prepare(self, config: McpConfig, result: concurrent.futures.Future) -> None:
        """Start preparing ``config``'s enabled servers; ``result`` gets the :class:`Composition`."""
        servers = config.enabled
        try:
            credentials = self._credentials_of([s.name for s in servers])
            # A server whose stored credentials cannot be read (damaged, sealed under a key
            # not given) is left out with that one line; every other server goes on.
            unreadable = {name: c for name, c in credentials.items() if isinstance(c, StoreError)}
            if unreadable:
                servers = tuple(s for s in servers if s.name not in unreadable)
                credentials = {name: c for name, c in credentials.items() if name not in unreadable}
            # A server naming a variable that is not set (or one that cannot be sent) is
            # left out with that one line, undialled; every other server goes on.
            misconfigured = {s.name: problem for s in servers if (problem := _named_problem(s, self._environ, credentials[s.name]))}
            if misconfigured:
                servers = tuple(s for s in servers if s.name not in misconfigured)
                credentials = {name: c for name, c in credentials.items() if name not in misconfigured}
        except StoreError as exc:
            fail(result, exc)
            return
        # Every configured name stays in the registry's map: another session may have
        # switched on for itself a server this configuration leaves off.
        applied = self._registry.apply(servers, credentials, tuple(s.name for s in config.servers)).get(timeout=ASK_TIMEOUT)
        digest_key = getattr(self._store, "digest_key", None)
        keys = {s.name: fingerprint(s, credentials[s.name], self._environ, digest_key) for s in servers}
        self._keys.update(keys)
        policies = {s.name: trusting.Policy.of(config, s) for s in servers}
        self._policies.update(policies)
        # A server waiting for the user to sign in is left out without a dial (its
        # probes dial it: it joins once signed in, like a server that comes back).
        undialled: dict[str, str | StoreError | ConfigError] = {s.name: why for s in servers
                                                                if (why := sign_in_needed(s, credentials[s.name]))}
        undialled.update(unreadable)
        undialled.update(misconfigured)
        saved_at: dict[str, float] = {}  # when each catalogue found here was saved
        loaded = _saves  # read before the load: a catalogue saved after it is seen below
        saved = self._saved_all({s.name: keys[s.name] for s in servers if s.name not in undialled}, saved_at)
        unsaved = [name for name, catalogue in saved.items() if catalogue is None]
        for name, catalogue in saved.items():
            if catalogue is not None:  # its dials open in the saved era: no probe (issue 11)
                applied.handles[name].use_saved_era(catalogue.era)
        # The session's future first: with every catalogue saved it resolves at once,
        # before any of the background dials below competes for the interpreter.
        ready = {n: c for n, c in saved.items() if c is not None}
        off = frozenset(s.name for s in config.servers if not s.enabled)
        if unsaved:
            self._start(self._foreground, applied, unsaved, keys, ready, result, undialled, off, saved_at, policies, loaded)
        else:
            # Nothing to dial: the composition is built here (one bounded moment: the
            # trust review reads the store once), without a helper thread and the
            # hand-offs it would cost.
            self._foreground(applied, unsaved, keys, ready, result, undialled, off, saved_at, policies, loaded)
        background = [(name, applied.handles[name], keys[name]) for name, catalogue in saved.items() if catalogue is not None]
        if background and self._background_dials:
            self._background_pending += len(background)
            self._start(self._background_all, background)

    # -- messages from helper threads ------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Prepare):
            try:
                self._prepare(message.config, message.reply)
            except Exception as exc:  # noqa: BLE001 - one failed preparation, never a hung session
                logger.error("preparing the MCP servers failed: %s: %s", type(exc).__name__, exc)
                fail(message.reply, exc if isinstance(exc, AlbedoError) else
                     SessionError(f"preparing the MCP servers failed ({type(exc).__name__}); the previous servers stay in use"))
            return None
        if isinstance(message, BackgroundSettled):
            if self._background_pending == 0:
                resolve(message.reply, None)
            else:
                self._settled.append(message.reply)
            return None
        if isinstance(message, CatalogueChanged):
            # A live client re-discovered after a list_changed: save it and tell.
            key = self._keys.get(message.server)
            if key is not None and self._save_and_review(message.server, key, message.catalogue):
                for subscriber in list(self._subscribers):
                    _tell(subscriber, CatalogueSaved(message.server, message.catalogue))
            return None
        if isinstance(message, (Subscribe, Unsubscribe)):
            (self.subscribe if isinstance(message, Subscribe) else self.unsubscribe)(message.ref)
            return None
        if isinstance(message, ServerLost):
            # The client logged it and re-dials on its next call; the composition keeps
            # the client and its catalogue, so there is nothing to change here.
            logger.debug("server %r: connection lost (%s)", message.server, message.reason)
            return None
        if isinstance(message, _BackgroundDone):
            self._threads = [t for t in self._threads if t.is_alive()]
            if message.catalogue is not None:
                if self._save_and_review(message.server, message.key, message.catalogue):
                    for subscriber in list(self._subscribers):
                        _tell(subscriber, CatalogueSaved(message.server, message.catalogue))
            else:
                logger.info("server %r: background dial failed: %s", message.server, message.error)
            self._background_pending -= 1
            if self._background_pending == 0:
                settled, self._settled = self._settled, []
                for future in settled:
                    resolve(future, None)
            return None
        return super().on_receive(message)

    # -- lifecycle ---------------------------------------------------------------------------

    def on_start(self) -> None:
        self._registry.actor_ref.tell(SetOwner(self.actor_ref))

    def on_stop(self) -> None:
        fail_queued(self, lambda message: SessionClosed("the MCP runtime stopped; start a new session to use MCP again"))
        # The helper threads wait on dials of the registry's clients only; a runtime
        # that stops tells those clients to close first (runtime.py), so each dial ends
        # at once and these joins are short.
        for thread in self._threads:
            thread.join(30)
            if thread.is_alive():
                logger.warning("a preparing thread (%s) did not end within 30 s of the stop; it ends on its own", thread.name)
        settled, self._settled = self._settled, []
        for future in settled:
            resolve(future, None)

    # -- internals ---------------------------------------------------------------------------

    def _start(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name="mcp-prepare", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _foreground(self, applied: Any, unsaved: list[str], keys: dict[str, str], ready: dict[str, Catalogue], result: Any,
                    undialled: dict[str, str | StoreError | ConfigError] | None = None, off: frozenset[str] = frozenset(),
                    saved_at: dict[str, float] | None = None, policies: Mapping[str, trusting.Policy] | None = None,
                    loaded: int | None = None) -> None:
        """Dial the servers without a usable saved catalogue, all at once; then resolve.

        ``result`` always resolves: whatever goes wrong here fails this preparation at
        once (DESIGN rule 3), so no session waits for a future nobody will set.
        """
        outcome: concurrent.futures.Future = concurrent.futures.Future()
        try:
            self._prepare_foreground(applied, unsaved, keys, ready, outcome, undialled, off, saved_at, policies, loaded)
        except Exception as exc:  # noqa: BLE001 - a bug must fail one preparation, not hang its session
            logger.error("preparing servers %s failed: %s: %s", ", ".join(sorted(unsaved)) or "(none)", type(exc).__name__, exc)
            if not outcome.done():
                outcome.set_exception(exc if isinstance(exc, AlbedoError) else
                                      SessionError(f"preparing the MCP servers failed ({type(exc).__name__}); the previous servers stay in use"))
        if not outcome.done():  # every path sets it; never leave a session waiting if one does not
            outcome.set_exception(SessionError("preparing the MCP servers ended without an outcome; the previous servers stay in use"))
        error = outcome.exception(timeout=0)
        if error is not None:
            # A failed preparation lets go of what apply() held for it, and nothing else,
            # before its caller hears of the failure.
            _tell(self._registry.actor_ref, Release(tuple(applied.handles.values())))
            fail(result, error)
        elif not resolve(result, outcome.result(timeout=0)):
            # Nobody waits for it any more (its session closed and cancelled it): let go
            # of what apply() held for it, as its session would have.
            _tell(self._registry.actor_ref, Release(tuple(applied.handles.values())))

    def _prepare_foreground(self, applied: Any, unsaved: list[str], keys: dict[str, str], ready: dict[str, Catalogue],
                            result: Any, undialled: dict[str, str | StoreError | ConfigError] | None,
                            off: frozenset[str] = frozenset(), saved_at: dict[str, float] | None = None,
                            policies: Mapping[str, trusting.Policy] | None = None, loaded: int | None = None) -> None:
        # ``undialled``: the servers left out without a dial, with why: a sign-in needed,
        # their stored credentials unreadable (the StoreError, whose line says what to do),
        # or their configuration unusable here (the ConfigError: a variable it names is not set).
        # ``loaded``: the count of saves (_saves) when ``ready`` was loaded from the store.
        catalogues, left_out, warnings, too_large = dict(ready), {}, [], []
        dialled: dict[str, Catalogue] = {}
        misconfigured = set()
        for name, why in (undialled or {}).items():
            if isinstance(why, ConfigError):
                prefix = f"server {name!r}: "
                text = str(why)
                left_out[name] = text[len(prefix):] if text.startswith(prefix) else text
                misconfigured.add(name)
                warnings.append(f"{prefix}{left_out[name]}; left out")
                continue
            if isinstance(why, StoreError):
                left_out[name] = str(why)
                warnings.append(f"server {name!r}: {why}; left out")
                continue
            error = NeedsSignIn(name, why)
            left_out[name] = error.detail
            warnings.append(f"{error}; left out")
        for name, catalogue in connect_all({name: applied.handles[name] for name in unsaved}).items():
            if isinstance(catalogue, ServerError):
                left_out[name] = catalogue.detail
                warnings.append(f"{catalogue}; left out")
            elif isinstance(catalogue, AlbedoError):
                left_out[name] = str(catalogue)
                warnings.append(f"server {name!r}: {catalogue}; left out")
            else:
                try:
                    size = size_of(catalogue)
                except (ValueError, TypeError) as exc:  # not JSON text: the server's fault, and its alone
                    left_out[name] = f"its catalogue cannot be saved ({type(exc).__name__})"
                    warnings.append(f"server {name!r}: its catalogue cannot be saved ({type(exc).__name__}); left out")
                    continue
                if size > MAX_CATALOGUE_BYTES:
                    limit = f"{MAX_CATALOGUE_BYTES >> 20} MiB" if MAX_CATALOGUE_BYTES >= 1 << 20 else f"{MAX_CATALOGUE_BYTES}-byte"
                    too_large.append(f"server {name!r}: its catalogue is {size} bytes, over the {limit} limit")
                    continue
                catalogues[name] = dialled[name] = catalogue
                warnings.extend(catalogue.warnings)
        if too_large:
            # The reference: a catalogue over the size limit fails the whole preparation.
            if not result.cancelled():
                result.set_exception(ConfigError(too_large[0]))
            return
        global _saves
        with _REVIEWS:
            stale = []
            for name, catalogue in dialled.items():
                saving = self._save(name, keys[name], catalogue)
                if saving == SAVED:
                    _saves += 1
                elif saving == STALE:
                    stale.append(name)  # a newer discovery was saved (and reviewed) meanwhile
            again = list(stale)
            if ready and loaded is not None and _saves != loaded:
                # A catalogue was saved (and reviewed) since ``ready`` was loaded (a
                # background dial, a list_changed, the doctor's check): review what is
                # saved now, never the stale one after it.
                again.extend(ready)
            if again:
                for name, now in self._saved_all({name: keys[name] for name in again}, saved_at).items():
                    if now is not None:
                        catalogues[name] = now
            catalogues, on_hold = self._review(catalogues, policies or {}, left_out, warnings)
        handles = {name: handle for name, handle in applied.handles.items() if name in catalogues}
        # Counted per preparation: operators watch how often servers are left out or hold tools.
        for name in left_out:
            telemetry.count("mcp.client.servers_left_out", name)
        for name, holds in on_hold.items():
            telemetry.count("mcp.client.tools_held", name, len(holds))
        composition = Composition(handles, catalogues, left_out, tuple(warnings), applied.retired,
                                  held=tuple(applied.handles.values()), switched_off=off, on_hold=on_hold,
                                  misconfigured=frozenset(misconfigured),
                                  saved_at={name: when for name, when in (saved_at or {}).items() if name in ready})
        if not result.cancelled():
            result.set_result(composition)

    def _background_all(self, items: list[tuple[str, ServerHandle, str]]) -> None:
        """Dial every server advertised from its saved catalogue, at most BACKGROUND_DIALS
        at a time (a host with hundreds of servers does not start them all at once)."""
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(BACKGROUND_DIALS, len(items)),
                                                   thread_name_prefix="mcp-refresh") as pool:
            for item in items:
                pool.submit(self._background, *item)
        # Leaving the block waits for every dial; each is bounded by its startupTimeoutMs.

    def _background(self, name: str, handle: ServerHandle, key: str) -> None:
        """Dial a server advertised from its saved catalogue; report what was found."""
        try:
            catalogue, error = handle.connect(), None
        except AlbedoError as exc:
            catalogue, error = None, str(exc)
        except Exception as exc:  # noqa: BLE001 - a bug: still reported, so BackgroundSettled resolves
            catalogue, error = None, f"{type(exc).__name__}: {exc}"
        _tell(self.actor_ref, _BackgroundDone(name, key, catalogue, error))

    def _credentials_of(self, names: list[str]) -> dict[str, Any]:
        """Each server's stored credentials (None without a store), read at once; a
        server whose row cannot be read is its StoreError.

        Raises:
            StoreError: the database failed.
        """
        if self._store is None:
            return dict.fromkeys(names)
        many = getattr(self._store, "get_credentials_of", None)
        if many is not None:
            return dict(many(names))
        found: dict[str, Any] = {}
        for name in names:  # a store that reads one server at a time
            try:
                found[name] = self._store.get_credentials(name)
            except StoreError as exc:
                found[name] = exc
        return found

    def _saved_all(self, keys: dict[str, str], saved_at: dict[str, float] | None = None) -> dict[str, Catalogue | None]:
        """Each server's catalogue saved under its current key, or None; read at once
        (and into ``saved_at``, when each one was saved)."""
        if self._store is None:
            return dict.fromkeys(keys)
        try:
            found = load_current_all(self._store, keys, saved_at)
        except StoreError as exc:
            logger.warning("the saved catalogues cannot be used (%s); dialling every server", exc)
            return dict.fromkeys(keys)
        saved: dict[str, Catalogue | None] = {}
        for name in keys:
            catalogue = found.get(name)
            if isinstance(catalogue, (StoreError, ValueError)):
                logger.warning("server %r: its saved catalogue cannot be used (%s)", name, catalogue)
                catalogue = None
            saved[name] = catalogue
        return saved

    def _review(self, catalogues: dict[str, Catalogue], policies: Mapping[str, trusting.Policy],
                left_out: dict[str, str] | None = None, warnings: list[str] | None = None,
                ) -> tuple[dict[str, Catalogue], dict[str, tuple[trusting.HeldTool, ...]]]:
        """Each catalogue as offered (held tools and instructions taken out) and what is
        held, by server (catalogue/trust.py); first uses are trusted and new holds
        recorded (and told to ``on_held``). Without a store, nothing is reviewed. A
        server whose trust cannot be read or written is left out (into ``left_out``)."""
        if self._store is None or not catalogues:
            return catalogues, {}
        offered: dict[str, Catalogue] = {}
        on_hold: dict[str, tuple[trusting.HeldTool, ...]] = {}
        try:
            stored = self._store.load_trust(list(catalogues), definitions=False)
        except StoreError as exc:
            stored = {name: exc for name in catalogues}  # type: ignore[misc]
        for name, catalogue in catalogues.items():
            try:
                found = stored.get(name, ([], []))
                if isinstance(found, StoreError):
                    raise found
                outcome = self._review_one(name, catalogue, policies.get(name, trusting.Policy()), found)
            except StoreError as exc:
                reason = f"its trusted tools cannot be checked ({exc})"
                if left_out is not None:
                    left_out[name] = reason
                if warnings is not None:
                    warnings.append(f"server {name!r}: {reason}; left out")
                logger.warning("server %r: %s; left out", name, reason)
                continue
            offered[name] = outcome.catalogue
            if outcome.holds:
                on_hold[name] = outcome.holds
        return offered, on_hold

    def _review_one(self, name: str, catalogue: Catalogue, policy: trusting.Policy, found: Any) -> trusting.Review:
        """Review one catalogue against its stored trust (``found``: the trusted rows, then
        the holds) and record what changed. Raises StoreError."""
        assert self._store is not None
        return _record_review(self._store, name, catalogue, policy, found, self._on_held)

    def _save_and_review(self, name: str, key: str, catalogue: Catalogue) -> bool:
        """A catalogue found by a background discovery or after a list_changed: save it and,
        if it differs, record what it holds now, as one step (see _REVIEWS; the sessions
        see it once they are prepared again). True if saved."""
        global _saves
        with _REVIEWS:
            saving = self._save(name, key, catalogue)
            if saving == STALE:
                # Discovered before the one saved now (a connected client's own catalogue,
                # reported by a background dial after the doctor's check saw a change):
                # neither saved nor reviewed, so what the newer one holds stays held.
                logger.debug("server %r: a catalogue discovered before the saved one is not saved", name)
            if saving != SAVED:
                return False
            _saves += 1
            policy = self._policies.get(name)
            if policy is not None and self._store is not None:
                try:
                    self._review({name: catalogue}, {name: policy})
                except Exception:  # noqa: BLE001 - the next preparation reviews it again
                    logger.exception("server %r: its new catalogue could not be reviewed", name)
        return True

    def _save(self, name: str, key: str, catalogue: Catalogue) -> str | None:
        """Save ``catalogue`` under ``key`` (:func:`~albedo_actors.catalogue.saved.save_discovered`:
        SAVED, SAME or STALE); None when there is no store or it failed."""
        if self._store is None:
            return None
        try:
            return save_discovered(self._store, name, key, catalogue)
        except (StoreError, ValueError) as exc:
            logger.warning("server %r: its catalogue was not saved (%s)", name, exc)
            return None


def save_and_review(store: Store, name: str, key: str, catalogue: Catalogue, policy: trusting.Policy) -> bool:
    """Save what a dial outside a session discovered (``albedo-mcp add``, the settings
    service's saves, the doctor's check) under ``key`` unless the same listing is saved
    there, and review it as a session's preparation would (catalogue/trust.py): a first
    use is trusted, a change is held. One step under this process's review lock, so a
    preparation that loaded an older catalogue reviews this one instead. One discovered
    before the catalogue saved there now is neither saved nor reviewed (what the newer
    one holds stays held). True if saved.

    Raises:
        StoreError: the store failed (ValueError: the catalogue is refused), whether
        saving or reviewing.
    """
    global _saves
    with _REVIEWS:
        saving = save_discovered(store, name, key, catalogue)
        if saving == STALE:
            return False
        saved = saving == SAVED
        if saved:
            _saves += 1
        found = store.load_trust([name], definitions=False).get(name, ([], []))
        _record_review(store, name, catalogue, policy, found, None)
    return saved


def _record_review(store: Store, name: str, catalogue: Catalogue, policy: trusting.Policy, found: Any,
                   on_held: Callable[[str, tuple[trusting.HeldTool, ...]], None] | None) -> trusting.Review:
    """Review one catalogue against its stored trust (``found``: the trusted rows, then
    the holds), record what changed, and tell ``on_held`` the new holds. Raises StoreError."""
    trusted = trusting.trusted_from(found[0])
    outcome = trusting.review(trusted, catalogue, policy)
    if any(hold.kind == "changed" for hold in outcome.holds):
        # The diff needs the trusted definitions: read them (this server's alone).
        found = store.load_trust([name]).get(name, ([], []))
        trusted = trusting.trusted_from(found[0])
        outcome = trusting.review(trusted, catalogue, policy)
    stored = {(row.kind, row.name): (row.digest, row.whole) for row in found[1]}
    holds = {trusting.key_of(hold): hold for hold in outcome.holds}
    digests = {key: trusting.store_digests(hold) for key, hold in holds.items()}
    if outcome.trust or outcome.trust_instructions is not None or digests != stored:
        from ..store.records import HeldDefinition, TrustedDefinition

        trust = [TrustedDefinition(name, "tool", tool, entry.digest, entry.whole, dict(entry.definition))
                 for tool, entry in outcome.trust.items()]
        if outcome.trust_instructions is not None:
            entry = outcome.trust_instructions
            trust.append(TrustedDefinition(name, "instructions", "", entry.digest, entry.whole, dict(entry.definition)))
        rows = [HeldDefinition(name, key[0], key[1], hold.kind, hold.changes, digests[key][0], digests[key][1], dict(hold.new))
                for key, hold in holds.items()]
        fresh = store.record_trust(name, trust, rows, keep=list(holds))
        if fresh and on_held is not None:
            keys = {(row.kind, row.name) for row in fresh}
            try:
                on_held(name, tuple(hold for key, hold in holds.items() if key in keys))
            except Exception:  # noqa: BLE001 - the host's prompt must not break a preparation
                logger.exception("server %r: the host's on_held failed", name)
    return outcome


def sign_in_needed(server: ServerConfig, credentials: Credentials | None) -> str | None:
    """:func:`albedo_actors.auth.server_auth.sign_in_needed`, which only an HTTP server
    needs: OAuth's modules load with the first one (a stdio-only host never loads them)."""
    if server.type != "http":
        return None
    from ..auth.server_auth import sign_in_needed as needed

    return needed(server, credentials)


def _named_problem(server: ServerConfig, environ: Mapping[str, str], credentials: Credentials | None) -> ConfigError | None:
    """Why ``server`` cannot be started with this environment (a variable it names is not
    set, or holds what cannot be sent), or None."""
    try:
        if server.type == "http":
            http_headers(server, environ, credentials=credentials)
        else:
            for key, variable in server.env.items():
                if variable not in environ:
                    raise ConfigError(f"server {server.name!r}: env {key} names ${variable}, which is not set in the host's environment")
    except ConfigError as exc:
        return exc
    return None


def _tell(ref: pykka.ActorRef, message: Any) -> None:
    try:
        ref.tell(message)
    except pykka.ActorDeadError:
        pass


__all__ = ["OFF", "BackgroundSettled", "Composition", "CatalogueSaved", "Prepare", "RuntimePreparer", "Usage",
           "save_and_review"]
