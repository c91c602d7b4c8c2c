"""TokenRefresher: the only code that talks to a token endpoint for a running server.

One actor per daemon. A :class:`Refresh` request (told; reply.py's pattern) resolves
its ``reply`` with the server's new :class:`OAuthRecord`; :func:`refresh_by` adapts the
actor to the ``(server, seen) -> Future`` seam ServerAuth declares. Refreshes are
keyed by server name *and URL*: while a refresh of that server at that URL is in
flight every caller's reply follows the same refresh (single-flight in this process), and a caller
for another URL (the server was edited meanwhile) never joins it, so one URL's token
never reaches the client of another. The refresh runs on a worker thread the actor
owns, never in its mailbox (:func:`refresh_held`).

The refresh itself, under the row's refresh lease, is
:func:`albedo_actors.auth.refresh.refresh_held`; the per-server face an HTTP link
uses is :class:`albedo_actors.auth.server_auth.ServerAuth`.

Stopping never waits for a hung token endpoint: ``on_stop`` abandons every token
request in flight (its socket is shut down, :meth:`AuthHttp.abort`), fails their waiters
with "the token refresher has stopped", and waits for the worker threads at most
:data:`STOP_JOIN_S` in all (they are daemon threads, and end once their request does).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping

import pykka

from ..auth.discovery import Challenge
from ..auth.http import AuthHttp
from ..auth.refresh import default_http, refresh_held
from ..auth.server_auth import RefreshFn, ServerAuth
from ..config import ServerConfig
from ..errors import AuthError
from .reply import Reply, Request, chain, fail, fail_queued, set_field

if TYPE_CHECKING:
    from ..auth.refresh import RefreshStore
    from ..store import Store
    from ..auth.grants import IdTokenProvider

STOPPED = "the token refresher has stopped"
STOP_JOIN_S = 2.0  # for every refresh thread in all, once their token requests were abandoned

__all__ = ["Refresh", "TokenRefresher", "oauth_for", "refresh_by"]


class TokenRefresher(pykka.ThreadingActor):
    """Single-flight refreshes per server name and URL; see the module docstring."""

    def __init__(self, store: RefreshStore, environ: Mapping[str, str] | None = None,
                 http_factory: Callable[[ServerConfig], AuthHttp] | None = None) -> None:
        super().__init__()
        self._store = store
        self._environ = dict(os.environ) if environ is None else dict(environ)
        self._http_factory = http_factory or default_http
        self._inflight: dict[tuple[str, str | None], concurrent.futures.Future] = {}
        self._threads: set[threading.Thread] = set()
        self._clients_lock = threading.Lock()  # the worker threads add and drop their clients
        self._clients: dict[threading.Thread, AuthHttp] = {}  # the HTTP client of each refresh in flight
        self._stopping = False
        self.requests = 0  # token requests made (tests and benchmarks read it)

    def _refresh(self, server: ServerConfig, seen: str | None, reply: concurrent.futures.Future) -> None:
        key = (server.name, server.url)
        future = self._inflight.get(key)
        if future is None or future.done():  # a finished one (its _Finished not handled yet) is not in flight
            future = concurrent.futures.Future()
            self._inflight[key] = future
            thread = threading.Thread(target=self._work, args=(server, seen, future), name=f"oauth-refresh-{server.name}",
                                      daemon=True)
            self._threads.add(thread)
            thread.start()
        chain(future, reply)

    def token_requests(self) -> int:
        return self.requests

    def _finished(self, key: tuple[str, str | None], future: concurrent.futures.Future, thread: threading.Thread,
                  requested: bool) -> None:
        if self._inflight.get(key) is future:
            del self._inflight[key]
        self._threads.discard(thread)
        if requested:
            self.requests += 1

    def on_stop(self) -> None:
        fail_queued(self, lambda message: AuthError(message.server.name if isinstance(message, Refresh) else "?", STOPPED))
        with self._clients_lock:
            self._stopping = True
            clients = list(self._clients.values())
        for client in clients:
            client.abort()  # a hung token endpoint: its read returns now
        for key, future in list(self._inflight.items()):
            if not future.done():  # its waiters hear now; the thread's own result comes too late
                try:
                    future.set_exception(AuthError(key[0], STOPPED))
                except concurrent.futures.InvalidStateError:
                    pass  # it finished just now
        until = time.monotonic() + STOP_JOIN_S
        for thread in list(self._threads):
            thread.join(max(0.0, until - time.monotonic()))

    # -- the worker thread ------------------------------------------------------------------

    def _work(self, server: ServerConfig, seen: str | None, future: concurrent.futures.Future) -> None:
        requested = False
        try:
            record, requested = refresh_held(self._store, server, seen, self._environ, self._tracked_http)
            _settle(future, result=record)
        except BaseException as exc:  # delivered to every waiter; nothing escapes the thread
            _settle(future, error=exc if isinstance(exc, Exception) else AuthError(server.name, "the refresh was interrupted"))
        finally:
            with self._clients_lock:
                self._clients.pop(threading.current_thread(), None)
            try:
                self.actor_ref.tell(_Finished((server.name, server.url), future, threading.current_thread(), requested))
            except pykka.ActorDeadError:
                pass

    def _tracked_http(self, server: ServerConfig) -> AuthHttp:
        """The refresh's HTTP client (worker thread), known to ``on_stop`` until the refresh ends."""
        client = self._http_factory(server)
        with self._clients_lock:
            self._clients[threading.current_thread()] = client
            stopping = self._stopping
        if stopping:
            client.abort()
        return client

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Refresh):
            self._refresh(message.server, message.seen, message.reply)
            return None
        if isinstance(message, _Finished):
            self._finished(message.key, message.future, message.thread, message.requested)
            return None
        return super().on_receive(message)


class Refresh(Request):
    """Refresh ``server``'s token ``seen``; ``reply`` resolves with its new
    :class:`OAuthRecord` (None: nothing stored for this URL), or fails with the
    :class:`AuthError`, :class:`RefreshDeferred` or :class:`StoreError` that kept it."""

    __slots__ = ("server", "seen")
    server: ServerConfig
    seen: str | None

    def __init__(self, server: ServerConfig, seen: str | None, *, reply: Reply | None = None) -> None:
        super().__init__(reply=reply)
        set_field(self, "server", server)
        set_field(self, "seen", seen)


@dataclasses.dataclass(frozen=True)
class _Finished:
    key: tuple[str, str | None]
    future: concurrent.futures.Future
    thread: threading.Thread
    requested: bool


def _settle(future: concurrent.futures.Future, *, result: Any = None, error: BaseException | None = None) -> None:
    """Resolve ``future`` unless a stop failed it first."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass


def refresh_by(refresher: pykka.ActorRef) -> RefreshFn:
    """The refresher as the seam :class:`ServerAuth` declares: ``(server, seen) -> Future``.

    A stopped refresher answers with a future failed with :class:`AuthError` ("the token
    refresher has stopped"), which ServerAuth turns into a one-line NeedsSignIn."""

    def refresh(server: ServerConfig, seen: str | None) -> concurrent.futures.Future:
        asked = Refresh(server, seen)
        try:
            refresher.tell(asked)
        except pykka.ActorDeadError:
            fail(asked.reply, AuthError(server.name, STOPPED))
        return asked.reply

    return refresh


def oauth_for(store: Store, refresher: pykka.ActorRef,
              authorize: Callable[[ServerConfig, Challenge | None], Any] | None = None) -> Callable[[ServerConfig], Any]:
    """The factory a registry gives each HTTP client: its :class:`ServerAuth`."""
    refresh = refresh_by(refresher)

    def make(server: ServerConfig) -> ServerAuth | None:
        if server.type != "http":
            return None
        return ServerAuth(server, store, refresh, authorize=authorize)

    return make


def server_auth_factory(store: Store, refresher: pykka.ActorRef,
                        id_token: IdTokenProvider | None = None) -> Callable[[ServerConfig], Any]:
    """The auth factory a daemon's registry gives its clients: a server whose grant needs
    no browser (jwt-bearer, enterprise: the machine grants) signs in by itself when it
    asks (401); the others wait for ``albedo-mcp sign-in``. ``id_token(server) -> str``
    is the host's source of the signed-in user's id_token for the enterprise grant. The
    sign-in code loads with the first machine-grant server (a stdio host loads none of it)."""
    plain = oauth_for(store, refresher)
    machine: list[Callable[[ServerConfig], Any]] = []  # made once, on the registry's thread (its only caller)

    def make(server: ServerConfig) -> Any:
        if server.oauth is None or server.oauth.grant not in ("jwt-bearer", "enterprise"):
            return plain(server)
        if not machine:
            from ..auth.signin import authorizer

            machine.append(oauth_for(store, refresher, authorize=authorizer(store, id_token=id_token)))
        return machine[0](server)

    return make
