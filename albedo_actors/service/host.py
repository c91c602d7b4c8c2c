"""What ``albedo-mcp serve`` runs: a Runtime with one session, and the settings service beside it.

::

    with Host(home, store) as host:          # the service listens, then the runtime starts
        print(host.service.open_url())
        ...                                  # until the user stops it

A save through the service (a PATCH, an approval, an import, a sign-in that ended, a
Check that found a server the session had left out now working) tells the session to
reload once, between turns; a save that lands while the runtime is still starting is
reloaded once it has started. The service's ``GET /api/mcp`` shows the session's view
of each server (:class:`~albedo_actors.service.live.LiveSource`: asked within a short
bound, so a busy or starting runtime never holds a request thread).

Stopping ends the service (service.json removed), then the runtime (every server
process ends); the store is the caller's.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..errors import AlbedoError
from ..runtime import Runtime
from .live import LIVE_BOUND, LiveSource
from .server import Service
from ..wire import telemetry

if TYPE_CHECKING:
    from ..store import Store

logger = telemetry.logger(__name__)  # records carry the server and trace ids

__all__ = ["Host"]


class Host:
    """A Runtime and the Service of one home (see the module docstring).

    ``port``, ``agent`` and ``signin_port`` are the Service's; ``live_bound`` how long a
    request waits for the session's composition; ``runtime`` further Runtime arguments.
    """

    def __init__(self, home: str, store: Store, *, port: int = 0, agent: Any = None, signin_port: int | None = None,
                 live_bound: float = LIVE_BOUND, **runtime: Any) -> None:
        self.home = home
        self.store = store
        self._runtime_kwargs = runtime
        self._runtime: Runtime | None = None
        self._lock = threading.Lock()
        self._early = threading.Event()  # a save landed while the runtime was still starting
        self.live = LiveSource(lambda: self._runtime, live_bound)
        self.service = Service(home, store, port=port, on_saved=self.reload, agent=agent, signin_port=signin_port,
                               live=self.live)

    def __enter__(self) -> Host:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    @property
    def runtime(self) -> Runtime | None:
        """The runtime once it has started (None before, and once stopped)."""
        return self._runtime

    def start(self) -> None:
        """Start the service, then the runtime (its first preparation, each server bounded
        by its startupTimeoutMs); the service answers meanwhile, every server ``starting``.

        Raises:
            ConfigError: the service cannot start (see :meth:`Service.start`), or the
                configuration is unusable.
            SessionTimedOut, SessionError: the runtime's session could not open.
        """
        self.service.start()
        runtime = Runtime(self.home, self.store, **self._runtime_kwargs)
        try:
            runtime.start()
        except BaseException:
            runtime.stop()
            raise
        with self._lock:
            self._runtime = runtime
        if self._early.is_set():  # it may have read the settings before that save
            self.reload()

    def stop(self) -> None:
        """Stop the service, then the runtime. Idempotent."""
        self.service.stop()
        with self._lock:
            runtime, self._runtime = self._runtime, None
        if runtime is not None:
            runtime.stop()

    def reload(self) -> None:
        """Tell the session to prepare again from the settings (the reply is not waited on:
        the swap lands between turns)."""
        from ..actors.composer import Reload

        with self._lock:
            runtime = self._runtime
            if runtime is None:
                self._early.set()
                return
        try:
            runtime.send(Reload())
        except AlbedoError as exc:
            logger.info("the session was not reloaded: %s", exc)
