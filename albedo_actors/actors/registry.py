"""ServerRegistry: the single writer of the name → ServerClient map.

**Owns** one :class:`~albedo_actors.actors.client.ServerHandle` per configured server,
keyed by name, each with the configuration and credentials it was made with (their
fingerprint is worked out only when a later configuration must be compared), and the
restart budget of each name.

**Asks** nobody; it makes and stops the handles, never waiting on a client inside a
message handler (stops are asynchronous; only ``on_stop`` waits, bounded). A handle
starts its ServerClient actor on first use (a dial, a call, a probe), so a configured
server nobody has used costs no thread, and stopping it costs nothing.

**Tells** its clients :class:`~albedo_actors.actors.client.Close` (on :class:`CloseAll`
and when it stops: every server gets EOF at once). Its callers (the runtime preparer)
ask it with timeouts, or tell it :class:`Release`, :class:`SetOwner` and
:class:`CloseAll` (nothing to wait for).

- :meth:`apply` makes the map match a configuration: new servers get a client, a server
  whose fingerprint changed gets a *new* client beside the old one, removed servers are
  retired. Every client it returns is *held* for its caller at once (one count each),
  so a preparation still in flight holds what it will swap in: another session letting
  go of a client meanwhile never stops it. The caller releases exactly what it was
  given (a stale or failed preparation at once, a composition once replaced), and a
  client is stopped when nobody holds it any more. So a session swaps to new clients
  first and the old ones close only after the swap (the reference's "prepares a
  replacement first"), and one session switching MCP off never closes another
  session's connections. A retired client nobody holds is stopped at once.
- :meth:`handle` returns the live client of a name, restarting a dead actor only within
  a small budget (RESTARTS within RESTART_WINDOW seconds).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Mapping

import pykka

from ..config import ServerConfig
from ..catalogue.saved import fingerprint
from .client import STOP_TIMEOUT, ServerHandle
from .reply import Message, set_field
from ..wire import telemetry

if TYPE_CHECKING:
    from ..connection.http.exchange import LinkAuth
    from ..store.records import Credentials

logger = telemetry.logger(__name__)  # records carry the server and trace ids

RESTARTS = 3
RESTART_WINDOW = 60.0


class Applied(Message):
    """What :meth:`ServerRegistry.apply` did: the current map and the clients it retired."""

    __slots__ = ("handles", "retired")
    handles: Mapping[str, ServerHandle]
    retired: tuple[ServerHandle, ...]

    def __init__(self, handles: Mapping[str, ServerHandle], retired: tuple[ServerHandle, ...]) -> None:
        set_field(self, "handles", handles)
        set_field(self, "retired", retired)


class Release(Message):
    """Told by a composition's owner: it no longer holds these clients (see :meth:`ServerRegistry.release`)."""

    __slots__ = ("handles",)
    handles: tuple[ServerHandle, ...]

    def __init__(self, handles: tuple[ServerHandle, ...]) -> None:
        set_field(self, "handles", handles)


class CloseAll(Message):
    """Told by the runtime that stops: tell every client to close now (each server gets
    EOF at once, all in parallel); the registry's own stop then waits for them."""

    __slots__ = ()


class SetOwner(Message):
    """Told by the preparer: clients started from now on tell ``owner`` their events."""

    __slots__ = ("owner",)
    owner: pykka.ActorRef

    def __init__(self, owner: pykka.ActorRef) -> None:
        set_field(self, "owner", owner)


class ServerRegistry(pykka.ThreadingActor):
    """One per daemon; see the module docstring."""

    def __init__(
        self,
        home: str,
        *,
        handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        auth: Callable[[ServerConfig], LinkAuth | None] | None = None,
        task_book: Any = None,
        keep_task_arguments: bool = False,
    ) -> None:
        # ``auth(server)``: the OAuth face of an HTTP server's client (refresher.oauth_for).
        # ``task_book``: where each client keeps the tasks its calls run (actors/tasks.py).
        super().__init__()
        self._task_book = task_book
        self._keep_task_arguments = keep_task_arguments
        self._home = home
        self._auth = auth
        self._handlers = handlers
        self._environ = environ
        self._clock = clock
        # name -> (fingerprint or None until needed, config, creds, handle)
        self._entries: dict[str, tuple[str | None, ServerConfig, Any, ServerHandle]] = {}
        self._restarts: dict[str, list[float]] = {}
        self._holders: dict[int, int] = {}  # id(handle) -> compositions holding it
        self._stopping: list[pykka.Future] = []
        self._owner: pykka.ActorRef | None = None  # told by every client (the preparer)
        self._closing = False  # told CloseAll: a client started from now on is closed at once

    # -- public API ---------------------------------------------------------------------

    def apply(self, servers: tuple[ServerConfig, ...], credentials: Mapping[str, Any] | None = None,
              keep: tuple[str, ...] = ()) -> Applied:
        """Make the map match ``servers`` (with their stored ``credentials`` by name).

        ``keep``: names that stay in the map although this caller does not want them
        (the configured servers another session may have switched on for itself); only
        a name neither wanted nor kept is retired. Every returned client (those of
        ``servers``) is held once for the caller, who must release it."""
        credentials = credentials or {}
        wanted = {server.name: server for server in servers}
        kept = set(keep)
        retired = []
        for name in list(self._entries):
            if name not in wanted and name not in kept:
                retired.append(self._entries.pop(name)[3])
        for name, server in wanted.items():
            creds = credentials.get(name)
            entry = self._entries.get(name)
            if entry is not None and entry[3].alive and self._same(entry, server, creds):
                continue
            if entry is not None:
                retired.append(entry[3])
            # The fingerprint is worked out only when a later apply must compare (a first
            # apply of hundreds of servers computes none).
            self._entries[name] = (None, server, creds, self._start(server, creds))
        handles = {name: self._entries[name][3] for name in wanted}
        self.acquire(tuple(handles.values()))
        for handle in retired:
            if self._holders.get(id(handle), 0) == 0:  # nobody holds it, nobody will: no entry has it
                self._stopping.append(handle.stop_async())
        return Applied(handles, tuple(retired))

    def acquire(self, handles: tuple[ServerHandle, ...]) -> None:
        """A composition now holds these clients."""
        for handle in handles:
            self._holders[id(handle)] = self._holders.get(id(handle), 0) + 1

    def release(self, handles: tuple[ServerHandle, ...]) -> None:
        """A composition no longer holds these clients; those nobody holds are stopped
        (asynchronously: their servers end) and forgotten.

        A client nobody holds is left alone: releasing what one never held would stop a
        client that someone else is about to hold."""
        for handle in {id(h): h for h in handles}.values():
            held = self._holders.get(id(handle), 0)
            if held == 0:
                logger.debug("server %r: released a client nobody held; ignored", handle.config.name)
                continue
            left = held - 1
            if left > 0:
                self._holders[id(handle)] = left
                continue
            self._holders.pop(id(handle), None)
            entry = self._entries.get(handle.name)  # a client is only ever entered under its own name
            if entry is not None and entry[3] is handle:
                del self._entries[handle.name]  # a later apply starts a fresh client
            self._stopping.append(handle.stop_async())
        self._stopping = [future for future in self._stopping if not _done(future)]

    def handle(self, name: str) -> ServerHandle | None:
        """The client of ``name``; a dead actor is restarted within the restart budget."""
        entry = self._entries.get(name)
        if entry is None:
            return None
        key, server, creds, handle = entry
        if handle.alive:
            return handle
        now = self._clock()
        recent = [t for t in self._restarts.get(name, []) if now - t < RESTART_WINDOW]
        if len(recent) >= RESTARTS:
            logger.warning("server %r: its client died %d times within %g s; not restarting it", name, len(recent), RESTART_WINDOW)
            self._restarts[name] = recent
            return None
        self._restarts[name] = recent + [now]
        logger.info("server %r: its client had stopped; restarting it", name)
        handle = self._start(server, creds)
        self._entries[name] = (key, server, creds, handle)
        return handle

    def set_owner(self, owner: pykka.ActorRef) -> None:
        """Clients started from now on tell ``owner`` their catalogue changes."""
        self._owner = owner

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def held(self, handle: ServerHandle) -> int:
        """How many compositions (or preparations in flight) hold ``handle``."""
        return self._holders.get(id(handle), 0)

    # -- messages ------------------------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Release):
            self.release(message.handles)
            return None
        if isinstance(message, SetOwner):
            self.set_owner(message.owner)
            return None
        if isinstance(message, CloseAll):
            self._close_all()
            return None
        return super().on_receive(message)

    # -- lifecycle ------------------------------------------------------------------------

    def on_stop(self) -> None:
        # Every client closes first (a tell each: all servers get EOF now), then each is
        # stopped; the waits below overlap, so N servers end in about the time of one.
        self._close_all()
        futures = [entry[3].stop_async() for entry in self._entries.values()] + self._stopping
        self._entries = {}
        deadline = self._clock() + STOP_TIMEOUT + 5.0
        for future in futures:
            try:
                future.get(timeout=max(0.0, deadline - self._clock()))
            except (pykka.Timeout, pykka.ActorDeadError):
                pass

    # -- internals ---------------------------------------------------------------------------

    def _close_all(self) -> None:
        self._closing = True
        for entry in self._entries.values():
            entry[3].close()

    def _same(self, entry: tuple[str | None, ServerConfig, Any, ServerHandle], server: ServerConfig, creds: Any) -> bool:
        """True if ``server`` with ``creds`` has the fingerprint ``entry``'s client was started with."""
        key, old_server, old_creds, _handle = entry
        if self._environ is None and (old_server is server or old_server == server) and (old_creds is creds or old_creds == creds):
            return True  # equal inputs, and no environment read: the same fingerprint, not computed
        return (key or fingerprint(old_server, old_creds, self._environ)) == fingerprint(server, creds, self._environ)

    def _start(self, server: ServerConfig, creds: Credentials | None) -> ServerHandle:
        auth = self._auth(server) if self._auth is not None else None
        handle = ServerHandle.start(server, self._home, self._owner, credentials=creds, handlers=self._handlers, auth=auth)
        handle.task_book = self._task_book
        handle.keep_task_arguments = self._keep_task_arguments
        if self._closing:
            handle.close()  # the runtime is stopping: its dials fail at once instead of running
        return handle


def _done(future: pykka.Future) -> bool:
    try:
        future.get(timeout=0)
        return True
    except pykka.Timeout:
        return False
    except Exception:  # noqa: BLE001 - a failed stop is done too
        return True
