"""Runtime: the actor runtime for one process, as a context manager.

::

    with Runtime(home, store, config=config) as runtime:   # the configured default for "mcp"
        composition = runtime.composition()   # handles, catalogues, left_out, warnings
        mcp = runtime.mcp()                   # the Python binding over it
        runtime.wait_background(10)           # let background dials save what they found

It starts a :class:`~albedo_actors.actors.registry.ServerRegistry`, a
:class:`~albedo_actors.actors.preparer.RuntimePreparer` (with the store, if any: saved
catalogues and credentials) and one :class:`~albedo_actors.actors.composer.SessionComposer`,
opens the composer, and on the way out, whatever happened, closes every server at once
and then stops the actors in reverse order (see :meth:`Runtime.stop`).

The session follows the configured default of the ``mcp`` extension (the top-level
``enabled`` object of ``extensions.json``: off unless it says ``{"mcp": true}``) and of
``editor-mcp`` (on unless set), unless it chooses for itself alone: ``enabled=True`` or
``False`` (``overlays_enabled=`` for editor overlays), or later
``runtime.request(SetEnabled(choice))`` (the composer's requests). Off means no server is dialled and the binding
says MCP is off. The command line chooses ``enabled=True``: it is an admin tool and
works whatever the default says.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import TYPE_CHECKING, Any, Callable

import pykka

from .actors.composer import Open, SessionComposer
from .actors.preparer import BackgroundSettled, Composition, RuntimePreparer
from .actors.registry import CloseAll, ServerRegistry
from .binding import CLOSED, Mcp, ask, request
from .config import McpConfig, ServerConfig, load
from .actors.reply import Request
from .errors import SessionClosed

if TYPE_CHECKING:
    from .auth.grants import IdTokenProvider
    from .store import Store

ASK_TIMEOUT = 10.0
OPEN_TIMEOUT = 600.0  # a bound only: each server's dial is bounded by its startupTimeoutMs
STOP_TIMEOUT = 30.0
NOT_RUNNING = "the runtime is not running; use it inside `with Runtime(...)`, or start() it first"


class Runtime:
    """Registry, preparer and one session composer for ``home``; see the module docstring."""

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
    ) -> None:
        # ``config``: the configuration (or a source read at every preparation); default:
        # HOME/extensions.json. ``background=False``: servers advertised from a saved
        # catalogue are not dialled in the background (their first use dials them).
        # ``enabled`` / ``overlays_enabled``: this session's own choice for the "mcp" /
        # "editor-mcp" extension; None follows the configured default. ``id_token``: the
        # host's source of the signed-in user's id_token, ``id_token(server) -> str``, for
        # the servers with the enterprise grant (auth/grants.py).
        self.home = home
        self._id_token = id_token
        self._enabled = enabled
        self._overlays_enabled = overlays_enabled
        self._store = store
        if config is None:
            self._source: Callable[[], McpConfig] = lambda: load(home)
        elif isinstance(config, McpConfig):
            self._source = lambda: config
        else:
            self._source = config
        self._background = background
        self._clock = clock
        self._registry: pykka.ActorRef | None = None
        self._refresher: pykka.ActorRef | None = None
        self._preparer: pykka.ActorRef | None = None
        self._composer: pykka.ActorRef | None = None

    def __enter__(self) -> Runtime:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def start(self) -> Composition:
        """Start the actors and open the session; its first composition.

        Raises:
            ConfigError: the configuration is unusable (e.g. a named variable is unset).
            SessionTimedOut: the servers did not open within ``OPEN_TIMEOUT``.
            SessionError: preparing the servers failed (``SessionClosed``: it closed meanwhile).
        """
        auth = None
        if self._store is not None:
            # OAuth needs somewhere to keep tokens: without a store a 401 server stays
            # left out (needs a sign-in), with one its tokens are sent and refreshed.
            from .actors.refresher import TokenRefresher, oauth_for  # OAuth's modules: only with a store

            self._refresher = TokenRefresher.start(self._store)
            auth = _machine_sign_in(oauth_for, self._store, self._refresher, self._id_token)
        self._registry = ServerRegistry.start(self.home, auth=auth)
        self._preparer = RuntimePreparer.start(self._registry, self._store, background=self._background)
        self._composer = SessionComposer.start(
            self._preparer, self._registry, self._source, enabled=self._enabled, overlays_enabled=self._overlays_enabled, clock=self._clock
        )
        # One request, one future, one bound (binding.request translates pykka's errors).
        return request(self._composer, Open(), timeout=OPEN_TIMEOUT,
                       late=f"the MCP servers did not open within {OPEN_TIMEOUT:g} s; "
                            "check each server's startupTimeoutMs, then start a new session")

    def stop(self) -> None:
        """Close every server at once, then stop the composer, the preparer, the registry
        and the token refresher, in that order (each bounded).

        The registry first tells every client to close (EOF: the servers exit in
        parallel), so nothing the upper actors' helper threads wait on is still
        dialling when those actors stop; the registry's stop then waits for the
        processes to be gone.
        """
        if self._registry is not None:
            try:
                self._registry.tell(CloseAll())
            except pykka.ActorDeadError:
                pass
        for ref in (self._composer, self._preparer, self._registry, self._refresher):
            if ref is not None:
                try:
                    ref.stop(timeout=STOP_TIMEOUT)
                except (pykka.ActorDeadError, pykka.Timeout):
                    pass
        self._composer = self._preparer = self._registry = self._refresher = None

    def send(self, message: Request) -> concurrent.futures.Future:
        """Tell the session composer one of its requests without waiting (a host ending a
        turn: ``runtime.send(TurnEnded())``); its reply, the one future to wait on.

        Raises:
            SessionClosed: the session has closed, or the runtime is not running.
        """
        if self._composer is None:
            raise SessionClosed(NOT_RUNNING)
        try:
            self._composer.tell(message)
        except pykka.ActorDeadError:
            raise SessionClosed(CLOSED) from None
        return message.reply

    def request(self, message: Request, timeout: float = OPEN_TIMEOUT) -> Any:
        """Tell the session composer one of its requests (``Reload()``, ``SetEnabled(on)``,
        ``TurnEnded()``, ``ProbesSettled()``, ...) and wait, bounded, for its reply.

        Raises:
            SessionClosed, SessionTimedOut: the session has closed (or the runtime is
                not running), or did not answer in time.
            SessionError, ConfigError: the request failed (a failed preparation keeps
                the previous composition).
        """
        if self._composer is None:
            raise SessionClosed(NOT_RUNNING)
        return request(self._composer, message, timeout=timeout)

    @property
    def composer(self) -> Any:
        """The session composer's proxy, for what answers at once (composition,
        turn_started, take_changes); requests go through :meth:`request`."""
        if self._composer is None:
            raise SessionClosed(NOT_RUNNING)
        try:
            return self._composer.proxy()
        except pykka.ActorDeadError:
            raise SessionClosed(CLOSED) from None

    def composition(self) -> Composition:
        """What the session sees now.

        Raises:
            SessionClosed: the runtime is not running or its session has closed.
            SessionTimedOut: the session did not answer in time.
        """
        return ask(self.composer.composition)

    def mcp(self, warn: Any = None) -> Mcp:
        """The synchronous Python binding over this runtime's session.

        Raises:
            SessionClosed: the runtime is not running or its session has closed.
        """
        if self._composer is None:
            raise SessionClosed(NOT_RUNNING)
        return Mcp(self._composer, warn)

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


__all__ = ["Runtime"]


def _machine_sign_in(oauth_for: Callable[..., Any], store: Store, refresher: pykka.ActorRef,
                     id_token: IdTokenProvider | None) -> Callable[[ServerConfig], Any]:
    """The auth factory of the registry: a server whose grant needs no browser (jwt-bearer,
    enterprise) signs in by itself when it asks (401); the others wait for ``albedo-mcp sign-in``.
    The sign-in code loads with the first such server (a stdio host loads none of it)."""
    plain = oauth_for(store, refresher)
    machine: list[Callable[[ServerConfig], Any]] = []  # made once, on the registry's thread (its only caller)

    def make(server: ServerConfig) -> Any:
        if server.oauth is None or server.oauth.grant not in ("jwt-bearer", "enterprise"):
            return plain(server)
        if not machine:
            from .auth.signin import authorizer

            machine.append(oauth_for(store, refresher, authorize=authorizer(store, id_token=id_token)))
        return machine[0](server)

    return make
