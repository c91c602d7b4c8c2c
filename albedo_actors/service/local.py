"""The settings service's local channel: a Unix-domain socket inside the home, and the
home's one-service lock.

::

    sock = bind(home)                      # the service: HOME/service.sock, mode 0600
    sock = connect(home, timeout=2.0)      # the command line; Gone: no service listens
    uid, pid = peer(sock)                  # who is listening (SO_PEERCRED)

Why a socket in the home and not the TCP port: only the home's owner can reach a file in
a 0700 directory, and the kernel tells the command line which user and process listen on
it (``SO_PEERCRED``), so a stale ``service.json`` can never make ``albedo-mcp`` send the
service token or a secret to another user's listener on a reused port. A socket path
longer than ``sun_path`` allows (108 bytes) is reached through ``/proc/self/fd`` of the
home directory, so any home works.

:func:`hold_lock` takes ``HOME/service.lock`` with an exclusive ``flock`` for the
service's whole life: two services for one home cannot both run, whichever starts first,
and a lock held by nobody means that ``service.json`` and ``service.sock`` are stale,
whatever pid the file names.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import struct
from typing import Iterator

from ..safefiles import make_private_dirs, open_private

__all__ = ["SOCKET_FILE", "LOCK_FILE", "PAGE_LINK_FILE", "Gone", "bind", "connect", "peer", "hold_lock", "remove_socket"]

SOCKET_FILE = "service.sock"
LOCK_FILE = "service.lock"
# `albedo-mcp open`'s page of the user's own that forwards to a new link (so the link is
# never on a browser's command line); the service removes it when it stops.
PAGE_LINK_FILE = "open-page.html"
_SUN_PATH = 107  # bytes of sun_path a path may use (108 with its NUL)


class Gone(Exception):
    """No service listens on the home's socket (missing, or nothing accepts on it): nothing was sent."""


def bind(home: str, backlog: int = 64) -> socket.socket:
    """A listening socket at ``HOME/service.sock`` (mode 0600), replacing a stale one.

    Only call it holding :func:`hold_lock`: the socket file it replaces is then no live
    service's.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with _path(home) as path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            sock.bind(path)
            os.chmod(path, 0o600)
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


def connect(home: str, timeout: float) -> socket.socket:
    """A connected socket to the home's service, within ``timeout`` seconds.

    Raises:
        Gone: no socket file, or nothing accepts on it (a stale file); nothing was sent.
        TimeoutError: a listener that did not accept in time.
        OSError: anything else.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        with _path(home) as path:
            sock.connect(path)
    except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
        sock.close()
        raise Gone(home) from None
    except BaseException:
        sock.close()
        raise
    return sock


def peer(sock: socket.socket) -> tuple[int, int]:
    """``(uid, pid)`` of the process at the other end of a connected Unix socket."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", raw)
    return uid, pid


def remove_socket(home: str) -> None:
    with contextlib.suppress(OSError), _path(home) as path:
        os.unlink(path)


@contextlib.contextmanager
def hold_lock(home: str) -> Iterator[int | None]:
    """Yield the fd of ``HOME/service.lock`` held with an exclusive ``flock``, or None when
    another process (or another service of this one) holds it. The lock ends with the
    block, or with the process: a killed service leaves no lock behind."""
    make_private_dirs(home)
    fd = open_private(os.path.join(home, LOCK_FILE))
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            yield None
            return
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _path(home: str) -> Iterator[str]:
    path = os.path.join(os.path.abspath(home), SOCKET_FILE)
    if len(os.fsencode(path)) <= _SUN_PATH:
        yield path
        return
    # A long home: the same directory through this process's descriptor of it.
    fd = os.open(os.path.abspath(home), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{SOCKET_FILE}"
    finally:
        os.close(fd)
