"""The sign-in API's engine: one OAuth sign-in in flight per server, run on threads it owns.

::

    signins = SignIns(lambda: Settings(home, store), on_change=lambda name: ...)
    signins.start("docs")     # {"state": "pending", "authorizationUrl": "https://..."}
    signins.start("docs", new_client=True)  # the same, registering a new client first
    signins.status("docs")    # {"state": "pending" | "signed_in" | "failed" | ..., "reason": ...}
    signins.offer("docs", pasted_callback_url)
    signins.cancel("docs")
    signins.close()           # cancels every sign-in in flight and joins its thread (bounded)

Each sign-in is :meth:`albedo_actors.settings.Settings.begin_sign_in`'s
:class:`~albedo_actors.auth.signin.SignIn`: ``start`` returns as soon as it announces
its authorization URL (or ends first, as a client credentials sign-in does: then the
state is ``signed_in``, or ``failed``); the loopback callback listener, or a callback
URL the user pastes (``offer``), completes it on its own thread, which stores the
tokens. The service never opens a browser itself: the page opens the authorization
URL it is given (a test passes an agent that plays the browser).

What leaves here is a state and a one-line reason (the sign-in's own error, which
never carries a token, a secret or a code); nothing is logged but the server's name and
the state it reached.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

from ..auth.callback import DEFAULT_LIFETIME_S, DEFAULT_PORT, CallbackListener
from ..errors import AlbedoError, ClientRefused, ConfigError
from ..wire import telemetry

if TYPE_CHECKING:
    from ..auth.signin import SignIn

logger = telemetry.logger(__name__)  # records carry the server and trace ids

__all__ = ["SignIns", "SignInSettings", "ANNOUNCE_TIMEOUT_S", "JOIN_TIMEOUT_S"]

# How long start() waits for the authorization URL (discovery and registration are a few
# bounded HTTP exchanges of 10 s each at most).
ANNOUNCE_TIMEOUT_S = 60.0
# How long offer() waits for the code exchange a taken callback URL starts.
OFFER_WAIT_S = 30.0
# How long cancel() waits for the sign-in's thread to end.
CANCEL_WAIT_S = 5.0
# How long close() waits, in all, for every sign-in thread.
JOIN_TIMEOUT_S = 5.0
# The longest callback URL offer() accepts.
MAX_URL_CHARS = 8192

PENDING, SIGNED_IN, FAILED, CANCELLED, NONE = "pending", "signed_in", "failed", "cancelled", "none"


class SignInSettings(Protocol):
    """What SignIns uses of :class:`albedo_actors.settings.Settings` (a face above this
    layer, so it is named by this seam only)."""

    def begin_sign_in(self, name: str, *, agent: Any = None, announce: Callable[[str], None] | None = None,
                      port: int = DEFAULT_PORT, lifetime: float = DEFAULT_LIFETIME_S,
                      new_client: bool = False) -> SignIn: ...


def _page_opens_it(url: str, listener: CallbackListener) -> None:
    """The agent of the service: nothing. The page opens the authorization URL."""


@dataclass(eq=False)
class _Attempt:
    """One sign-in of one server; its fields change under SignIns' lock only."""

    name: str
    flow: SignIn | None = None
    url: str | None = None
    # Why the user is sent to a second URL (the sign-in registered a new client after a
    # refusal); None until then.
    notice: str | None = None
    state: str = PENDING
    reason: str | None = None
    cancel_requested: bool = False
    # It failed because the authorization server refused the client (or its registration):
    # the page offers a sign-in with a new client.
    new_client: bool = False
    thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def done(self) -> bool:
        return self.state != PENDING


class SignIns:
    """The sign-ins of one service: at most one in flight per server.

    Args:
        settings_factory: a :class:`Settings` over the service's home and store.
        on_change: called with the server's name, from the sign-in's thread (or
            ``close``'s), when a sign-in ends: signed in, failed or cancelled.
        agent: what takes the user to the authorization URL (``agent(url, listener)``,
            see :mod:`albedo_actors.auth.signin`); ``None``: nothing (the page does).
        port: the loopback callback listener's port (0: an ephemeral one).
        lifetime: how long a sign-in waits for its callback, in seconds.
    """

    def __init__(self, settings_factory: Callable[[], SignInSettings], on_change: Callable[[str], None], *,
                 agent: Any = None, port: int = DEFAULT_PORT, lifetime: float = DEFAULT_LIFETIME_S,
                 announce_timeout: float = ANNOUNCE_TIMEOUT_S) -> None:
        self._settings_factory = settings_factory
        self._on_change = on_change
        self._agent = agent if agent is not None else _page_opens_it
        self._port = port
        self._lifetime = lifetime
        self._announce_timeout = announce_timeout
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._attempts: dict[str, _Attempt] = {}  # the latest sign-in of each server
        self._threads: list[threading.Thread] = []  # every sign-in thread not known to have ended
        self._closed = False

    # -- the API ----------------------------------------------------------------------------------

    def start(self, name: str, *, new_client: bool = False) -> dict:
        """Start a sign-in to ``name``, or join the one in flight.

        Returns ``{"state": "pending", "authorizationUrl": url}`` once the URL is known;
        when the sign-in ended before it had one (a client credentials grant, or a
        failure during discovery) its final ``status`` instead. ``new_client``: the
        sign-in registers a new client instead of reusing the kept one; it never joins
        one in flight (that one chose its client already).

        Raises:
            ConfigError: no such server, it is a stdio server, the service is stopping,
                or ``new_client`` while a sign-in is in flight or for a server whose
                client the user configured.
        """
        with self._lock:
            if self._closed:
                raise ConfigError(f"server {name!r}: the settings service is stopping; sign in again once it runs")
            attempt = self._attempts.get(name)
            if new_client and attempt is not None and not attempt.done:
                raise ConfigError(f"server {name!r}: a sign-in is already in progress with the client it chose; "
                                  f"cancel it (DELETE /api/auth/logins/mcp:{name}), then ask for a new client")
            if attempt is None or attempt.done:
                attempt = self._begin(name, new_client)
            self._changed.wait_for(lambda: attempt.url is not None or attempt.done, self._announce_timeout)
            if attempt.url is not None and not attempt.done:
                return {"state": PENDING, "authorizationUrl": attempt.url}
        if not attempt.done:  # no URL in time: this attempt fails (the first end wins) and is stopped
            self._finish(attempt, FAILED, f"server {name!r}: sign-in failed: its authorization server did not answer "
                                          f"within {self._announce_timeout:g} s; try again later")
            if attempt.flow is not None:
                attempt.flow.cancel()
        with self._lock:
            return self._status_of(attempt)  # this attempt's, even if another has started since

    def status(self, name: str) -> dict:
        """``{"state": "none"|"pending"|"signed_in"|"failed"|"cancelled", "reason": str|None}``:
        the latest sign-in of ``name`` this service ran (``none``: none yet). A sign-in that
        failed because the authorization server refused the client (or its registration)
        adds ``"newClient": true``: signing in again with a new client is the way on. A pending
        sign-in that registered a new client after the authorization server refused the
        first one adds ``"authorizationUrl"`` (the new URL to open) and ``"notice"`` (why,
        in one line)."""
        with self._lock:
            attempt = self._attempts.get(name)
            if attempt is None:
                return {"state": NONE, "reason": None}
            return self._status_of(attempt)

    def offer(self, name: str, url: str) -> dict:
        """A callback URL the user pasted, for the sign-in to ``name`` in flight; its status
        once the code exchange it starts has ended (bounded: ``pending`` if still going).

        Raises:
            ConfigError: none is in flight, or the URL is not its callback (wrong or
                missing ``state``); the sign-in goes on waiting.
        """
        if not isinstance(url, str) or not url.strip() or len(url) > MAX_URL_CHARS:
            raise ConfigError(f"server {name!r}: the callback URL must be a non-empty string of at most "
                              f"{MAX_URL_CHARS} characters")
        with self._lock:
            attempt = self._attempts.get(name)
            flow = attempt.flow if attempt is not None and not attempt.done else None
        if attempt is None or flow is None:
            raise ConfigError(f"server {name!r}: no sign-in is in progress; start one first")
        if not flow.offer(url.strip()):
            raise ConfigError(f"server {name!r}: that URL is not this sign-in's callback (wrong or missing state); "
                              "the sign-in is still waiting")
        with self._lock:
            sent_to = attempt.url
            # Ended, or sent the user to a new URL (a refused client was replaced).
            self._changed.wait_for(lambda: attempt.done or attempt.url != sent_to, OFFER_WAIT_S)
            return self._status_of(attempt)

    def cancel(self, name: str) -> None:
        """Cancel the sign-in to ``name`` in flight (nothing when none is); waits, bounded,
        for it to end, so that ``status`` then says ``cancelled``."""
        with self._lock:
            attempt = self._attempts.get(name)
            if attempt is None or attempt.done:
                return
            attempt.cancel_requested = True
            flow = attempt.flow
        if flow is not None:
            flow.cancel()
        with self._lock:
            self._changed.wait_for(lambda: attempt.done, CANCEL_WAIT_S)

    def close(self) -> None:
        """Cancel every sign-in in flight and join the threads (bounded in all by
        :data:`JOIN_TIMEOUT_S`; the threads are daemons, so one stuck in an HTTP exchange
        cannot hold the process). No sign-in starts afterwards."""
        with self._lock:
            self._closed = True
            attempts = list(self._attempts.values())
            threads = list(self._threads)
            for attempt in attempts:
                if not attempt.done:
                    attempt.cancel_requested = True
        for attempt in attempts:
            if attempt.flow is not None and not attempt.done:
                attempt.flow.cancel()
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        for thread in threads:
            if thread.is_alive():
                logger.warning("a sign-in thread (%s) did not end within %g s of the service stopping",
                               thread.name, JOIN_TIMEOUT_S)

    # -- internals -------------------------------------------------------------------------------

    def _begin(self, name: str, new_client: bool = False) -> _Attempt:
        """A new attempt for ``name``, its thread started (called with the lock held).

        Raises:
            ConfigError: from ``Settings.begin_sign_in`` (no such server, stdio server).
        """
        attempt = _Attempt(name)

        def announce(url: str) -> None:
            with self._lock:
                attempt.url = url
                attempt.notice = attempt.flow.notice if attempt.flow is not None else None
                self._changed.notify_all()

        try:
            flow = self._settings_factory().begin_sign_in(name, agent=self._agent, announce=announce,
                                                          port=self._port, lifetime=self._lifetime,
                                                          new_client=new_client)
        except ConfigError:
            raise
        except AlbedoError as exc:  # the file or the store could not be read
            raise ConfigError(f"server {name!r}: the sign-in could not start: {exc}") from None
        attempt.flow = flow
        attempt.thread = threading.Thread(target=self._run, args=(attempt,), name=f"sign-in-{name}"[:64], daemon=True)
        self._attempts[name] = attempt
        self._threads = [thread for thread in self._threads if thread.is_alive()]
        self._threads.append(attempt.thread)
        attempt.thread.start()
        logger.info("sign-in to server %r started", name)
        return attempt

    def _run(self, attempt: _Attempt) -> None:
        flow = attempt.flow
        assert flow is not None
        try:
            flow.run()
        except AlbedoError as exc:
            with self._lock:
                cancelled = attempt.cancel_requested
            if cancelled:
                # The cancel ended it; a kept registration it forgot on the way is still said.
                forgot = f"; {flow.forgot_registration}" if flow.forgot_registration else ""
                self._finish(attempt, CANCELLED, f"server {attempt.name!r}: the sign-in was cancelled{forgot}")
            else:
                attempt.new_client = isinstance(exc, ClientRefused)  # read once it is done, under the lock
                self._finish(attempt, FAILED, str(exc))
        except Exception as exc:  # a bug: said in one line, never a traceback or its locals
            self._finish(attempt, FAILED, f"server {attempt.name!r}: sign-in failed: an unexpected "
                                          f"{type(exc).__name__}; see the service's log")
            logger.error("the sign-in to server %r failed unexpectedly (%s)", attempt.name, type(exc).__name__)
        else:
            self._finish(attempt, SIGNED_IN, None)

    def _finish(self, attempt: _Attempt, state: str, reason: str | None) -> None:
        """End ``attempt`` (the first end wins) and tell ``on_change``."""
        with self._lock:
            if attempt.done:
                return
            attempt.state, attempt.reason = state, reason
            self._changed.notify_all()
        logger.info("sign-in to server %r ended: %s", attempt.name, state)
        try:
            self._on_change(attempt.name)
        except Exception as exc:  # the listener's bug must not end the sign-in thread noisily
            logger.error("the sign-in change callback for server %r failed (%s)", attempt.name, type(exc).__name__)

    @staticmethod
    def _status_of(attempt: _Attempt) -> dict:
        status: dict[str, Any] = {"state": attempt.state, "reason": attempt.reason}
        if attempt.state == FAILED and attempt.new_client:  # the page offers "Sign in again with a new client"
            status["newClient"] = True
        if attempt.notice and not attempt.done:  # the second URL, and why the user goes there
            status.update(authorizationUrl=attempt.url, notice=attempt.notice)
        return status

