"""A simple session over configured servers: open them in parallel, list, call, close.

A plain alternative to :class:`albedo_actors.runtime.Runtime` (which the command line
uses): every enabled server gets its own ServerClient, all dial at once, a server
that cannot start is left out with a warning, and closing stops every client (and so
every stdio server) in parallel.
"""

from __future__ import annotations

import concurrent.futures
import os
from typing import TYPE_CHECKING, Any, Callable

from .actors.client import ServerHandle
from .catalogue import Catalogue
from .config import McpConfig, ServerConfig
from .errors import ConfigError, ServerError, StoreError, Unavailable
from .catalogue.naming import Advertised, advertise, advertised_name, server_prefix
from .catalogue.saved import fingerprint, load_current, save_if_changed

if TYPE_CHECKING:
    from .store import Store


# The advertised operations and their names live in albedo_actors.catalogue.naming.
AdvertisedTool = Advertised

__all__ = ["Advertised", "AdvertisedTool", "Session", "advertise", "advertised_name", "server_prefix"]


class Session:
    """Clients for some servers of one configuration. Use as a context manager."""

    def __init__(
        self,
        config: McpConfig,
        servers: list[ServerConfig],
        warn: Callable[[str], None],
        credentials: Callable[[str], Any] | None = None,
        *,
        store: Store | None = None,
        prefer_saved: bool = False,
    ) -> None:
        # ``credentials(name)`` gives a server's stored credentials (a plain record, see
        # albedo_actors.store.Credentials), read once per open; None: none stored.
        # ``store`` (an albedo_actors.store.Store) also keeps catalogues: each one
        # discovered is saved under the server's fingerprint, and with ``prefer_saved``
        # a server whose saved catalogue has the current fingerprint is not dialled
        # to open the session (its first call dials it).
        # With the store's own reader, every server's row is read in one query, and one
        # that cannot be read is that server's failure alone (a failed database fails all).
        self._many = store.get_credentials_of if credentials is None and store is not None else None
        if credentials is None and store is not None:
            credentials = store.get_credentials
        self._credentials = credentials
        self._store = store
        self._prefer_saved = prefer_saved
        self.config = config
        self._warn = warn
        self.handles: dict[str, ServerHandle] = {}
        self.catalogues: dict[str, Catalogue] = {}
        self.failures: dict[str, ServerError] = {}  # servers left out, and why
        self._servers = servers
        self._operations: tuple[Advertised, ...] = ()  # built once, at the end of open()

    def __enter__(self) -> Session:
        self.open()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def open(self) -> None:
        """Start a client per server and connect all at once.

        A server that cannot be reached is left out; ``failures`` says why.

        Raises:
            ConfigError: the configuration of a server is unusable (e.g. a named
                variable is not set); all clients are stopped first.
        """
        if self._many is not None:
            stored: dict[str, Any] = dict(self._many([s.name for s in self._servers]))
        else:
            stored = {s.name: self._credentials(s.name) for s in self._servers} if self._credentials is not None else {}
        servers = []
        for server in self._servers:
            unreadable = stored.get(server.name)
            if isinstance(unreadable, StoreError):  # its credentials cannot be read: it alone is left out
                self.failures[server.name] = Unavailable(server.name, f"its stored credentials cannot be read ({unreadable})")
                self._warn(f"server {server.name!r}: {unreadable}; left out")
                continue
            servers.append(server)
        digest_key = getattr(self._store, "digest_key", None)
        fingerprints = {s.name: fingerprint(s, stored.get(s.name), os.environ, digest_key) for s in servers}
        for server in servers:
            self.handles[server.name] = ServerHandle.start(server, self.config.home, credentials=stored.get(server.name))
            if self._prefer_saved:
                saved = self._saved(server.name, fingerprints[server.name])
                if saved is not None:
                    self.catalogues[server.name] = saved
        dial = [name for name in self.handles if name not in self.catalogues]
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(16, len(dial)))) as pool:
            futures = {name: pool.submit(self.handles[name].connect) for name in dial}
        config_errors = []
        for name, future in futures.items():
            try:
                catalogue = future.result()
            except ConfigError as exc:
                config_errors.append(exc)
            except ServerError as exc:
                self.failures[name] = exc
            else:
                self.catalogues[name] = catalogue
                for warning in catalogue.warnings:
                    self._warn(warning)
                self._save(name, fingerprints[name], catalogue)
        if config_errors:
            self.close()
            raise config_errors[0]
        # What they advertise, built once (its warnings given once, here).
        configs = {name: self.handles[name].config for name in self.catalogues if name in self.handles}
        self._operations = tuple(advertise(self.catalogues, configs, self._warn))

    def _saved(self, name: str, current: str) -> Catalogue | None:
        """The saved catalogue of ``name`` if it was saved under ``current``."""
        if self._store is None:
            return None
        try:
            return load_current(self._store, name, current)
        except (StoreError, ValueError) as exc:
            self._warn(f"server {name!r}: its saved catalogue cannot be used ({exc}); dialling it")
            return None

    def _save(self, name: str, current: str, catalogue: Catalogue) -> None:
        """Save a discovered catalogue unless the same one is saved already."""
        if self._store is None:
            return
        try:
            save_if_changed(self._store, name, current, catalogue)
        except (StoreError, ValueError) as exc:
            self._warn(f"server {name!r}: its catalogue was not saved ({exc})")

    def tools(self) -> list[Advertised]:
        """Every operation the connected servers advertise (see albedo_actors.catalogue.naming).

        Tools left out (disabled, or with an invalid or oversized schema) are not
        listed; the latter, and ``enabledTools`` entries naming nothing, were warned
        when the session opened (the list is built once, by :meth:`open`).
        """
        return list(self._operations)

    def close(self) -> None:
        """Stop every client at once; each ends its server process."""
        handles = list(self.handles.values())
        self.handles = {}
        if handles:
            with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(handles))) as pool:
                list(pool.map(lambda handle: handle.stop(), handles))
