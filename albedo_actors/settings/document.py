"""The ``extensions.json`` document of one home: read, locked, written.

::

    document = Document(home, store)
    with document.lock():                  # HOME/.extensions.lock: one writer at a time
        text = document.read_text()        # None: no file yet
        data = document.read()             # {} when there is none
        entry = document.existing(document.servers(data), "docs")
        document.write(data)               # atomic, mode 0600; bumps the store's revision
        document.restore(text)             # the file as it was (or none)

Every write (and every undoing) bumps the store's revision, so running hosts hear of
it (:class:`albedo_actors.settings_watch.ChangeWatch`). File errors are one-line
:class:`~albedo_actors.errors.ConfigError` naming the file. The store may be None for a
reader (nothing is written then).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from typing import TYPE_CHECKING, Iterator

from ..errors import ConfigError, StoreError
from ..safefiles import FileRefused, make_private_dirs, open_private, replace_private
from ..safefiles import read_text as read_private_text
from ..wire import telemetry

if TYPE_CHECKING:
    from ..store import Store

logger = telemetry.logger(__name__)  # records carry the server and trace ids

FILE_NAME = "extensions.json"
LOCK_NAME = ".extensions.lock"


class Document:
    """One home's ``extensions.json`` (see the module docstring)."""

    def __init__(self, home: str, store: Store | None) -> None:
        self.home = os.path.abspath(home)
        self.store = store
        self.path = os.path.join(self.home, FILE_NAME)

    def existing(self, servers: dict, name: str) -> dict:
        entry = servers.get(name)
        if not isinstance(entry, dict):
            raise ConfigError(f"no server named {name!r} in {self.path}")
        return entry

    def servers(self, document: dict) -> dict:
        mcp = document.setdefault("mcp", {})
        if not isinstance(mcp, dict):
            raise ConfigError(f'{self.path}: "mcp" must be an object')
        servers = mcp.setdefault("servers", {})
        if not isinstance(servers, dict):
            raise ConfigError(f'{self.path}: "mcp.servers" must be an object of name → server')
        return servers

    def read_text(self) -> str | None:
        try:
            return read_private_text(self.path)  # never through a symbolic link
        except FileNotFoundError:
            return None
        except FileRefused as exc:
            raise ConfigError(str(exc)) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read {self.path}: {exc}") from None

    def read(self) -> dict:
        text = self.read_text()
        if text is None:
            return {}
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{self.path} is not valid JSON: {exc}") from None
        if not isinstance(document, dict):
            raise ConfigError(f"{self.path}: the top level must be a JSON object")
        return document

    def write(self, document: dict) -> None:
        with self.file_errors("cannot write the settings"):
            self._write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")

    def restore(self, text: str | None) -> None:
        with self.file_errors("cannot restore the previous settings"):
            if text is None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
                self.bump_revision()
            else:
                self._write_text(text)

    @contextlib.contextmanager
    def file_errors(self, what: str, path: str | None = None) -> Iterator[None]:
        """An OSError of the settings files is a ConfigError naming the file (one line)."""
        try:
            yield
        except FileRefused as exc:  # its message names the file and says what to do
            raise ConfigError(f"{what}: {exc}") from None
        except OSError as exc:
            raise ConfigError(f"{what}: {exc.filename or path or self.path}: {exc.strerror or type(exc).__name__}; "
                              f"check that {self.home} is a directory albedo can write") from None

    def _write_text(self, text: str) -> None:
        make_private_dirs(self.home)  # only what we create is 0700; an existing home keeps its mode
        replace_private(self.path, text)
        self.bump_revision()

    def bump_revision(self) -> None:
        """Tell running hosts that extensions.json changed, through the store's revision.

        After the file is in place (a host that sees the new revision reads the new
        file). A failure keeps the save: a host on this machine still sees the file
        change (``ChangeWatch`` stats it); one that shares only the database hears of it
        with the next change that bumps."""
        bump = getattr(self.store, "bump_revision", None)
        if bump is None:  # a store without a revision (a test's stand-in)
            return
        try:
            bump()
        except StoreError as exc:
            logger.warning("the settings were saved, but running hosts that share the store may not hear of it "
                           "until they see %s change: %s", self.path, exc)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        lock = os.path.join(self.home, LOCK_NAME)
        with self.file_errors("cannot lock the settings", lock):
            make_private_dirs(self.home)
            fd = open_private(lock)  # 0600, never through a link
        try:
            with self.file_errors("cannot lock the settings", lock):
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)
