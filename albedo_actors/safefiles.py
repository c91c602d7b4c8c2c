"""Opening albedo's own files and making its own directories, safely.

Rules (whatever the umask, and whoever planted what):

- A directory albedo creates is 0700, each one of a path it creates. A directory that
  already exists keeps its mode: ``--database sqlite:///tmp/albedo.db`` must never
  chmod /tmp.
- A file albedo creates or writes (the database, its lock files) is 0600, set on the
  open descriptor (``fchmod``), so neither the umask nor an older mode widens it.
- Nothing in the home is opened through a symbolic link: ``O_NOFOLLOW`` makes the
  kernel refuse a link at the last component (ELOOP), and a non-regular file (a FIFO,
  a device) is refused too. A link planted at ``$ALBEDO_HOME/albedo.db`` could
  otherwise make albedo write its database, or chmod, somewhere else.

Errors are :class:`FileRefused` (an ``OSError`` subclass, so callers that already turn
``OSError`` into their own one-line error keep doing so) with a one-line message that
names the path and says what to do.
"""

from __future__ import annotations

import contextlib
import os
import stat

__all__ = ["FileRefused", "make_private_dirs", "open_private", "check_not_link", "read_text", "replace_private"]

FILE_MODE = 0o600
DIR_MODE = 0o700
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class FileRefused(OSError):
    """A file albedo would open is a symbolic link or not a regular file."""

    def __str__(self) -> str:
        return self.args[0] if self.args else "refused"


def make_private_dirs(path: str) -> list[str]:
    """Create ``path`` and any missing parents, each 0700; return those created.

    Directories that exist already are left exactly as they are.
    """
    missing = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    created = []
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise
            continue  # made by someone else meanwhile: not ours to change
        os.chmod(directory, DIR_MODE)  # mkdir's mode is cut by the umask
        created.append(directory)
    return created


def open_private(path: str, flags: int = os.O_RDWR | os.O_CREAT) -> int:
    """Open (creating) a regular file of ours, never through a symbolic link; mode 0600.

    Returns the descriptor (close-on-exec).

    Raises:
        FileRefused: ``path`` is a symbolic link or not a regular file.
        OSError: anything else the open failed with.
    """
    try:
        fd = os.open(path, flags | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0), FILE_MODE)
    except OSError:
        if os.path.islink(path):
            raise _refused(path) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refused(path, "is not a regular file")
        os.set_blocking(fd, True)  # O_NONBLOCK only kept a planted FIFO from blocking the open
        if stat.S_IMODE(info.st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_not_link(path: str) -> None:
    """Refuse ``path`` if it is a symbolic link (a file another program will open by name).

    Raises:
        FileRefused
    """
    if os.path.islink(path):
        raise _refused(path)


def read_text(path: str) -> str:
    """The UTF-8 text of a file of ours, read without following a symbolic link.

    Raises:
        FileNotFoundError: there is none.
        FileRefused: it is a symbolic link or not a regular file.
        OSError, UnicodeDecodeError: it could not be read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise
    except OSError:
        if os.path.islink(path):
            raise _refused(path) from None
        raise
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _refused(path, "is not a regular file")
        os.set_blocking(fd, True)
        return f.read().decode("utf-8")


def replace_private(path: str, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically, mode 0600: a temporary file in
    the same directory, fsync, rename, fsync the directory. A reader (or a crash) sees
    the old file or the new one, never a torn one.

    ``mkstemp`` creates with O_EXCL, so a link planted at the temporary name is refused,
    and the rename replaces a link at ``path`` instead of writing through it.

    Raises:
        OSError: it could not be written (the old file is then untouched).
    """
    import tempfile  # writers only (tempfile pulls in random and shutil): readers never load it

    directory = os.path.dirname(path) or "."
    fd, temp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)  # 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temp, 0o600)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def _refused(path: str, what: str = "is a symbolic link") -> FileRefused:
    return FileRefused(f"{path} {what}, and albedo opens its files only directly: remove it and retry")
