"""The settings service: the WSGI app of :mod:`.app` served by waitress on 127.0.0.1 (for
the page) and on the home's Unix socket (for the command line).

::

    with Service(home, store, on_saved=reload_sessions) as service:
        print(service.open_url())      # http://127.0.0.1:PORT/#open=... (single use)

**Owns** the home's service lock (``HOME/service.lock``, an exclusive ``flock`` for its
whole life), two listeners, each with its own waitress loop thread, request threads and
connection table: TCP ``127.0.0.1:PORT`` for the browser, and ``HOME/service.sock``
(mode 0600, inside the 0700 home) for ``albedo-mcp``, so that a flood of slow connections
to the port never stalls the command line. It also owns the
:class:`~albedo_actors.service.signins.SignIns` and the page's
:class:`~albedo_actors.service.pages.PageSessions`, and ``HOME/service.json`` while it
runs.

``service.json`` (mode 0600, written atomically once both listeners are bound) holds
``{"url": "http://127.0.0.1:PORT", "token": "...", "pid": N}``: the token the command
line sends on the socket, and the URL a new page link names. Who runs is decided by the
lock alone: a service that holds it replaces whatever ``service.json`` and
``service.sock`` it finds (an unclean stop left them; a pid reused since means nothing),
and a second service for the home refuses to start while the first holds it. ``stop``
removes both files if they are still ours, then lets go of the lock.

Slow clients: each TCP connection that sends nothing for :data:`CHANNEL_TIMEOUT_S` is
closed (checked every :data:`CLEANUP_INTERVAL_S`), and up to :data:`TCP_CONNECTIONS` may
be open at once; a request is only given to a request thread once it has arrived whole.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import threading
from typing import TYPE_CHECKING, Any, Callable

from ..errors import ConfigError
from ..safefiles import FileRefused, make_private_dirs, read_text, replace_private
from . import local
from .app import MAX_BODY, make_app
from .pages import LINK_LIFETIME_S, SESSION_LIFETIME_S, PageSessions
from .signins import SignIns
from ..wire import telemetry

if TYPE_CHECKING:
    from ..store import Store
    from .live import Snapshot

logger = telemetry.logger(__name__)  # records carry the server and trace ids

__all__ = ["Service", "read_service_file", "SERVICE_FILE", "STATIC_DIR"]

SERVICE_FILE = "service.json"
STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
STOP_TIMEOUT = 5.0  # waitress's loop notices an empty socket map within its 1 s poll
# Slow clients (issue 23, hole 7): waitress hands a request to a thread only once it has
# arrived whole, so a half-sent request holds a connection, never a thread. An idle
# connection is closed after CHANNEL_TIMEOUT_S, checked every CLEANUP_INTERVAL_S (waitress:
# 120 s and 30 s), and the port takes TCP_CONNECTIONS at once (waitress: 100). The socket's
# peers are the home's owner only.
CHANNEL_TIMEOUT_S = 10
CLEANUP_INTERVAL_S = 2
TCP_CONNECTIONS = 1000
SOCKET_CONNECTIONS = 100
# The port's request threads: two more than the requests that may wait on a server (a
# save, a Check, an import, a sign-in's start) may hold at once, so the page's polls
# always find one. The socket's commands are not capped: they wait their turn (each save
# is one at a time under the home's lock anyway).
TCP_THREADS = 6
SOCKET_THREADS = 4


def read_service_file(home: str) -> dict | None:
    """``HOME/service.json`` as a dict, or None when it is missing, malformed, a link,
    or its pid is no longer alive. A dict is no proof that a service runs: the command
    line proves it on the home's socket (:meth:`ServiceClient.find`)."""
    path = os.path.join(os.path.abspath(home), SERVICE_FILE)
    try:
        data = json.loads(read_text(path))
    except (OSError, ValueError):  # missing, refused (a link), unreadable, not JSON
        return None
    if not isinstance(data, dict) or not isinstance(data.get("url"), str) or not isinstance(data.get("token"), str):
        return None
    pid = data.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0 or not _alive(pid):
        return None
    return data


class Service:
    """The settings service of one home (see the module docstring)."""

    def __init__(self, home: str, store: Store, *, port: int = 0, on_saved: Callable[[], None] | None = None,
                 agent: Any = None, signin_port: int | None = None, link_lifetime: float = LINK_LIFETIME_S,
                 session_lifetime: float = SESSION_LIFETIME_S, live: Callable[[], Snapshot] | None = None) -> None:
        # ``agent``: what plays the browser for a sign-in (tests); None: the page opens it.
        # ``signin_port``: the loopback callback listener's port (default: auth.callback's).
        # ``live``: the daemon's view of the servers (live.LiveSource); None: no daemon.
        self.home = os.path.abspath(home)
        self.store = store
        self._port = port
        self._on_saved = on_saved or (lambda: None)
        self._agent = agent
        self._signin_port = signin_port
        self._live = live
        self.token = secrets.token_urlsafe(32)  # 256 bits
        self.pages = PageSessions(link_lifetime=link_lifetime, session_lifetime=session_lifetime)
        self.url = ""
        self.port = 0
        self._servers: list[Any] = []
        self._threads: list[threading.Thread] = []
        self._signins: SignIns | None = None
        self._lock: contextlib.ExitStack | None = None
        self._wrote_file = False

    def __repr__(self) -> str:  # never the token
        return f"<Service {self.url or 'not started'} home={self.home}>"

    def open_url(self) -> str:
        """A new single-use link that opens the page (show it to the user only): the
        secret is in the fragment, which the browser never sends to a server."""
        return f"{self.url}/#open={self.pages.new_link()}"

    def __enter__(self) -> Service:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def start(self) -> None:
        """Take the home's lock, listen on 127.0.0.1 and on the home's socket, serve each
        on a thread of ours, then write ``service.json``.

        Raises:
            ConfigError: another service holds this home's lock, the port is taken, or
                the home's files cannot be written.
        """
        import waitress.server

        from ..settings import Settings

        self._take_lock()

        def settings_factory() -> Settings:
            return Settings(self.home, self.store)

        def on_change(name: str) -> None:  # a sign-in ended: its tokens are in the store
            self._saved()

        kwargs: dict[str, Any] = {} if self._signin_port is None else {"port": self._signin_port}
        self._signins = SignIns(settings_factory, on_change, agent=self._agent, **kwargs)

        def app(is_local: bool) -> Any:
            assert self._signins is not None
            return make_app(settings_factory=settings_factory, signins=self._signins, token=self.token,
                            pages=self.pages, port=lambda: self.port, on_saved=self._saved, static_dir=STATIC_DIR,
                            open_url=self.open_url, local=is_local, live=self._live,
                            slow_at_once=None if is_local else TCP_THREADS - 2)

        common: dict[str, Any] = {
            "ident": "albedo-mcp", "expose_tracebacks": False, "clear_untrusted_proxy_headers": True,
            # waitress's own cap is a backstop only: the app answers 413 above 1 MiB in JSON.
            "max_request_body_size": 2 * MAX_BODY,
            "channel_timeout": CHANNEL_TIMEOUT_S, "cleanup_interval": CLEANUP_INTERVAL_S,
        }
        try:
            tcp = waitress.server.create_server(app(False), host="127.0.0.1", port=self._port, threads=TCP_THREADS,
                                                connection_limit=TCP_CONNECTIONS, **common)
        except OSError as exc:
            raise ConfigError(f"the settings service cannot listen on 127.0.0.1:{self._port}: "
                              f"{exc.strerror or exc}; choose another --port") from None
        self._servers.append(tcp)
        self.port = int(tcp.effective_port)
        self.url = f"http://127.0.0.1:{self.port}"
        try:
            sock = local.bind(self.home)
        except OSError as exc:
            raise ConfigError(f"the settings service cannot listen on {os.path.join(self.home, local.SOCKET_FILE)}: "
                              f"{exc.strerror or exc}; check that {self.home} is a directory albedo can write") from None
        try:
            unix = waitress.server.create_server(app(True), sockets=[sock], threads=SOCKET_THREADS,
                                                 connection_limit=SOCKET_CONNECTIONS, **common)
        except BaseException:
            sock.close()
            raise
        self._servers.append(unix)
        for server, what in ((tcp, self.port), (unix, "socket")):
            thread = threading.Thread(target=self._serve, args=(server,), name=f"settings-service-{what}", daemon=True)
            self._threads.append(thread)
            thread.start()
        self._write_service_file()
        logger.info("settings service listening on %s and %s", self.url, os.path.join(self.home, local.SOCKET_FILE))

    def stop(self) -> None:
        """Stop listening (open connections closed, waitress's threads joined), cancel the
        sign-ins in flight, end the page sessions, remove ``service.json`` and the socket
        if they are still ours, and let go of the home's lock. Idempotent."""
        servers, self._servers = self._servers, []
        for server in servers:
            with contextlib.suppress(Exception):
                server.task_dispatcher.shutdown(cancel_pending=True, timeout=STOP_TIMEOUT)
            # Closing every channel empties waitress's socket map: its loop then returns.
            for channel in list(server._map.values()):
                with contextlib.suppress(Exception):
                    channel.close()
            with contextlib.suppress(Exception):
                server.close()
        threads, self._threads = self._threads, []
        for thread in threads:
            thread.join(STOP_TIMEOUT)
            if thread.is_alive():
                logger.warning("a loop of the settings service did not end within %g s", STOP_TIMEOUT)
        if self._signins is not None:
            self._signins.close()
            self._signins = None
        self.pages.clear()
        if self._wrote_file:
            self._remove_service_file()
        if self._lock is not None:
            if servers:  # ours: this service bound it under the lock
                local.remove_socket(self.home)
                with contextlib.suppress(OSError):  # its link died with this service
                    os.unlink(os.path.join(self.home, local.PAGE_LINK_FILE))
            self._lock.close()
            self._lock = None
        if servers:
            logger.info("settings service on %s stopped", self.url)

    # -- internals ------------------------------------------------------------------------------

    def _take_lock(self) -> None:
        stack = contextlib.ExitStack()
        try:
            fd = stack.enter_context(local.hold_lock(self.home))
        except (OSError, FileRefused) as exc:
            stack.close()
            raise ConfigError(f"cannot lock {os.path.join(self.home, local.LOCK_FILE)}: {exc}; "
                              f"check that {self.home} is a directory albedo can write") from None
        if fd is None:
            stack.close()
            running = read_service_file(self.home) or {}
            where = f" at {running['url']} (pid {running.get('pid')})" if running.get("url") else ""
            raise ConfigError(f"a settings service already runs for {self.home}{where}; stop it first, or use that one")
        self._lock = stack

    def _serve(self, server: Any) -> None:
        try:
            server.run()
        except Exception as exc:  # closing the map under the loop may end it with an error: it is done
            if server in self._servers:
                logger.error("the settings service's loop failed (%s)", type(exc).__name__)

    def _saved(self) -> None:
        try:
            self._on_saved()
        except Exception as exc:
            logger.warning("the sessions could not be told to reload (%s)", type(exc).__name__)

    def _path(self) -> str:
        return os.path.join(self.home, SERVICE_FILE)

    def _write_service_file(self) -> None:
        """Atomic (temp file, fsync, rename) and 0600: the token is readable by the user only."""
        text = json.dumps({"url": self.url, "token": self.token, "pid": os.getpid()}) + "\n"
        try:
            make_private_dirs(self.home)
            replace_private(self._path(), text)  # replaces a stale file (or a link) instead of writing through it
        except OSError as exc:
            raise ConfigError(f"cannot write {self._path()}: {exc.strerror or exc}; "
                              f"check that {self.home} is a directory albedo can write") from None
        self._wrote_file = True

    def _remove_service_file(self) -> None:
        self._wrote_file = False
        try:
            data = json.loads(read_text(self._path()))
        except (OSError, ValueError, FileRefused):
            return
        if isinstance(data, dict) and data.get("token") == self.token:  # another service's file stays
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    except OSError:
        return False
    return True
