"""ChangeWatch: has anything a session is offered changed since the last look?

::

    watch = ChangeWatch(home, store)      # store None: extensions.json alone
    seen = watch.stamp()                  # on session activity (a turn starts or ends)
    ...
    if watch.stamp() != seen:             # someone changed the settings: reload, between turns
        ...
    watch.close()                         # or: with ChangeWatch(home, store) as watch: ...

A running host hears every change this way, whoever made it: ``albedo-mcp`` writing
directly or through the settings service, another process's ``Settings``, another host
sharing the PostgreSQL database, or a hand edit of the file. A :class:`Stamp` is two
parts, and it is different whenever either moved:

- ``config``: a count of the changes seen in ``HOME/extensions.json``. Each call
  ``lstat``s it (device, inode, size, mtime, ctime, mode); when that changed, the bytes
  are read and hashed, and only different bytes count (a rewrite of the same settings,
  or a ``touch``, reloads nothing). The settings replace the file by rename, so every
  write gives it a new inode, but an inode number is reused once the old file is gone
  and two writes of the same size within one tick of the file system's clock can leave
  an identical stat. So, as git does for its index ("racy git"), a stat is trusted only
  once it was taken at least :data:`RACY_S` after the file's mtime; until then every
  call hashes the bytes again (a few microseconds for a settings file).
- ``store``: the store's revision (:meth:`albedo_actors.store.Store.revision`, one
  primary-key SELECT), which every write of the settings and every change of a server's
  secrets or sign-in bumps in its own transaction (a routine token refresh does not).
  It carries a change to hosts that share only the database, and one the file's stat is
  slow to show (a home on a network file system caches attributes for up to a minute).

**Owns** one reader thread, started by the first :meth:`ChangeWatch.stamp` that reads
the store and stopped by :meth:`ChangeWatch.close`: the store's reads run there, on one
connection, so a caller waits at most ``timeout`` seconds however the database behaves
(locked, a PostgreSQL that stopped answering). A read that fails or is late keeps the
revision last read: the stamp does not flap, one warning says the store cannot be read,
and one line says when it can again. Callers that ask at once share one read, which
always starts after they asked (a change committed before a call is never missed for a
read that began before it).

No throttle: each call reads the revision afresh (a few tens of microseconds on SQLite,
see ``benchmarks/bench_settings_watch.py``), so a change made while no session runs is
heard by the next turn's first call, never a moment later. The host calls it on session
activity only (a turn starts or ends), not per tool call.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from types import TracebackType
from typing import NamedTuple, Protocol
from .wire import telemetry

__all__ = ["ChangeWatch", "Stamp", "RevisionStore", "RACY_S", "READ_TIMEOUT_S"]

logger = telemetry.logger(__name__)  # records carry the server and trace ids

FILE_NAME = "extensions.json"  # as settings.FILE_NAME and config.load read it
# A stat taken less than this after the file's mtime is not trusted: another write in
# the same tick of the file system's clock could leave the same stat (FAT counts 2 s).
RACY_S = 2.0
# The longest a stamp() waits for the store's revision.
READ_TIMEOUT_S = 0.5
# The longest close() waits for the reader thread (it may be inside a database call).
CLOSE_TIMEOUT_S = 5.0


class RevisionStore(Protocol):
    """The store as the watch reads it (:class:`albedo_actors.store.Store` is one)."""

    def revision(self) -> int:
        """The store's revision; raises StoreError (or any error) when it cannot be read."""
        ...


class Stamp(NamedTuple):
    """What a session is offered, as of one look: compare two with ``!=``.

    ``config`` counts the changes of extensions.json this watch has seen; ``store`` is
    the store's revision (None: no store, or none read yet). Only stamps of the same
    :class:`ChangeWatch` compare.
    """

    config: int
    store: int | None


_UNSEEN = object()


class ChangeWatch:
    """Tells a host whether anything its sessions are offered changed; thread-safe."""

    def __init__(self, home: str, store: RevisionStore | None = None, *, timeout: float = READ_TIMEOUT_S) -> None:
        self.path = os.path.join(os.path.abspath(home), FILE_NAME)
        self._store = store
        self._timeout = float(timeout)
        # extensions.json (under _file_lock)
        self._file_lock = threading.Lock()
        self._stat: object = _UNSEEN
        self._digest: object = _UNSEEN
        self._settled = False
        self._generation = 0
        # the store's revision (under _cond)
        self._cond = threading.Condition(threading.Lock())
        self._revision: int | None = None
        self._wanted = 0  # reads asked for
        self._done = 0  # reads asked for that have ended (well or not)
        self._late = False  # a caller gave up on the read running now: the next ones do not wait on it
        self._failing = False
        self._closed = False
        self._thread: threading.Thread | None = None

    # -- public API ---------------------------------------------------------------------------

    def stamp(self) -> Stamp:
        """What sessions are offered now, as a value that differs from every earlier
        stamp of this watch whenever something changed since. Never raises for a file or
        a store that cannot be read (that counts as a state of its own, or keeps the
        last revision read); waits at most ``timeout`` seconds for the store."""
        return Stamp(self._config(), self._store_revision())

    def close(self) -> None:
        """Stop the reader thread (waiting for it at most a few seconds). Idempotent; a
        stamp() after it reads the file only and keeps the last revision read. Close the
        watch before the store it reads (the other way round, its last reads fail)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(CLOSE_TIMEOUT_S)
            if thread.is_alive():  # inside a database call that does not end: it ends with the store
                logger.warning("the settings watch's store read did not end within %.0f s; it stops when the "
                               "store is closed", CLOSE_TIMEOUT_S)

    def __enter__(self) -> "ChangeWatch":
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    # -- extensions.json ----------------------------------------------------------------------

    def _config(self) -> int:
        now = time.time_ns()  # before the stat: a write after it gets an mtime no earlier
        stat, mtime = _look(self.path)
        with self._file_lock:
            if stat == self._stat and self._settled:
                return self._generation
            digest = _content(self.path)
            if digest != self._digest:
                self._digest = digest
                self._generation += 1
            self._stat = stat
            # Trusted from now on only if no later write can fall in the tick of this one.
            self._settled = mtime is None or now - mtime >= RACY_S * 1e9
            return self._generation

    # -- the store's revision -----------------------------------------------------------------

    def _store_revision(self) -> int | None:
        if self._store is None:
            return None
        with self._cond:
            if self._closed:
                return self._revision
            if self._late:
                return self._revision  # the read running now is stuck (said once): nobody waits on it again
            self._wanted += 1
            mine = self._wanted
            if self._thread is None:
                self._thread = threading.Thread(target=self._reader, name="albedo-settings-watch", daemon=True)
                self._thread.start()
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: self._done >= mine or self._closed, self._timeout):
                self._late = True  # until the read running now ends
                self._failed(f"it did not answer within {self._timeout:g} s")
            return self._revision

    def _reader(self) -> None:
        """The reader thread: one read per batch of callers, until close()."""
        store = self._store
        assert store is not None
        while True:
            with self._cond:
                # Idle until asked; close() wakes it (the wait is ended by its owner).
                self._cond.wait_for(lambda: self._wanted > self._done or self._closed)
                if self._closed:
                    return
                target = self._wanted  # callers asking from here on wait for the next read
            try:
                value: int | None = int(store.revision())
                problem = ""
            except Exception as exc:  # a StoreError says what happened in one line; anything else, its type
                value = None
                problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            with self._cond:
                self._late = False
                if value is not None:
                    self._revision = value
                    if self._failing:
                        self._failing = False
                        logger.info("the store's revision can be read again: changes made elsewhere are heard again")
                else:
                    self._failed(problem)
                self._done = target
                self._cond.notify_all()

    def _failed(self, why: str) -> None:
        """Say once (under _cond) that the store's revision cannot be read now."""
        if not self._failing:
            self._failing = True
            logger.warning("the settings watch cannot read the store's revision (%s): changes made by other "
                           "processes are heard again once it can; check the database", why)


def _look(path: str) -> tuple[tuple[object, ...], int | None]:
    """The file's stat as a comparable tuple, and its mtime (ns; None when there is no file)."""
    try:
        st = os.lstat(path)  # a link put in its place is a change (config.load refuses it)
    except FileNotFoundError:
        return ("missing",), None
    except OSError as exc:
        return ("unreadable", exc.errno), None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode), st.st_mtime_ns


def _content(path: str) -> object:
    """A digest of the file's bytes, or what kept them from being read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
                     | getattr(os, "O_NONBLOCK", 0))  # a FIFO put there never blocks the caller
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return ("unreadable", exc.errno or errno.EIO)
    try:
        import hashlib  # at the first file to hash: a host with no extensions.json never loads it

        digest = hashlib.blake2b(digest_size=20)
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return digest.digest()
            digest.update(chunk)
    except OSError as exc:
        return ("unreadable", exc.errno or errno.EIO)
    finally:
        os.close(fd)
