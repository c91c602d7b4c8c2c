"""The settings service: the WSGI app of :mod:`.app` served by waitress on 127.0.0.1.

::

    with Service(home, store, on_saved=reload_sessions) as service:
        print(service.browser_url)     # http://127.0.0.1:PORT/?token=...

**Owns** the listening socket and waitress's threads (its loop on one thread of ours,
its request workers), the :class:`~albedo_actors.service.signins.SignIns` of the
service, and ``HOME/service.json`` while it runs. A host embeds this same object;
``albedo-mcp serve`` runs it beside a :class:`~albedo_actors.runtime.Runtime`.

``service.json`` (mode 0600, written atomically once the port is bound) holds
``{"url": "http://127.0.0.1:PORT", "token": "...", "pid": N}``: what the command line
needs to find the one writer of the home. A file whose pid is gone is stale: ignored by
:func:`read_service_file` and replaced by the next service. A file naming a live
service makes :meth:`Service.start` refuse (one writer per home). ``stop`` removes the
file only if it is still ours.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import threading
from typing import TYPE_CHECKING, Any, Callable

from ..errors import ConfigError
from ..safefiles import FileRefused, make_private_dirs, read_text, replace_private
from .app import MAX_BODY, make_app
from .signins import SignIns

if TYPE_CHECKING:
    from ..store import Store

logger = logging.getLogger(__name__)

__all__ = ["Service", "read_service_file", "SERVICE_FILE", "STATIC_DIR"]

SERVICE_FILE = "service.json"
STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
STOP_TIMEOUT = 5.0  # waitress's loop notices an empty socket map within its 1 s poll


def read_service_file(home: str) -> dict | None:
    """``HOME/service.json`` as a dict, or None when it is missing, malformed, a link,
    or its pid is no longer alive (a stale file)."""
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
                 agent: Any = None, signin_port: int | None = None) -> None:
        # ``agent``: what plays the browser for a sign-in (tests); None: the page opens it.
        # ``signin_port``: the loopback callback listener's port (default: auth.callback's).
        self.home = os.path.abspath(home)
        self.store = store
        self._port = port
        self._on_saved = on_saved or (lambda: None)
        self._agent = agent
        self._signin_port = signin_port
        self.token = secrets.token_urlsafe(32)  # 256 bits
        self.url = ""
        self.port = 0
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._signins: SignIns | None = None
        self._wrote_file = False

    def __repr__(self) -> str:  # never the token
        return f"<Service {self.url or 'not started'} home={self.home}>"

    @property
    def browser_url(self) -> str:
        """The URL that logs a browser in (it carries the token: show it to the user only)."""
        return f"{self.url}/?token={self.token}"

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
        """Listen on 127.0.0.1, serve on a thread of ours, then write ``service.json``.

        Raises:
            ConfigError: a live service already runs for this home, the port is taken,
                or service.json cannot be written.
        """
        import waitress.server

        from ..settings import Settings

        running = read_service_file(self.home)
        if running is not None and running.get("pid") != os.getpid():
            raise ConfigError(f"a settings service already runs for {self.home} at {running.get('url')} "
                              f"(pid {running.get('pid')}); stop it first, or use that one")

        def settings_factory() -> Settings:
            return Settings(self.home, self.store)

        def on_change(name: str) -> None:  # a sign-in ended: its tokens are in the store
            self._saved()

        kwargs: dict[str, Any] = {} if self._signin_port is None else {"port": self._signin_port}
        self._signins = SignIns(settings_factory, on_change, agent=self._agent, **kwargs)
        app = make_app(settings_factory=settings_factory, signins=self._signins, token=self.token,
                       port=lambda: self.port, on_saved=self._saved, static_dir=STATIC_DIR)
        try:
            server = waitress.server.create_server(
                app, host="127.0.0.1", port=self._port, threads=4, ident="albedo-mcp",
                # waitress's own cap is a backstop only: the app answers 413 above 1 MiB in JSON.
                max_request_body_size=2 * MAX_BODY, expose_tracebacks=False, clear_untrusted_proxy_headers=True)
        except OSError as exc:
            raise ConfigError(f"the settings service cannot listen on 127.0.0.1:{self._port}: "
                              f"{exc.strerror or exc}; choose another --port") from None
        self._server = server
        self.port = int(server.effective_port)
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._serve, name=f"settings-service-{self.port}", daemon=True)
        self._thread.start()
        self._write_service_file()
        logger.info("settings service listening on %s", self.url)

    def stop(self) -> None:
        """Stop listening (open connections closed, waitress's threads joined), cancel the
        sign-ins in flight, and remove ``service.json`` if it is still ours. Idempotent."""
        server, self._server = self._server, None
        if server is not None:
            with contextlib.suppress(Exception):
                server.task_dispatcher.shutdown(cancel_pending=True, timeout=STOP_TIMEOUT)
            # Closing every channel empties waitress's socket map: its loop then returns.
            for channel in list(server._map.values()):
                with contextlib.suppress(Exception):
                    channel.close()
            with contextlib.suppress(Exception):
                server.close()
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT)
            if self._thread.is_alive():
                logger.warning("the settings service's loop did not end within %g s", STOP_TIMEOUT)
            self._thread = None
        if self._signins is not None:
            self._signins.close()
            self._signins = None
        if self._wrote_file:
            self._remove_service_file()
        if server is not None:
            logger.info("settings service on %s stopped", self.url)

    # -- internals ------------------------------------------------------------------------------

    def _serve(self) -> None:
        server = self._server
        if server is None:
            return
        try:
            server.run()
        except Exception as exc:  # closing the map under the loop may end it with an error: it is done
            if self._server is not None:
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
