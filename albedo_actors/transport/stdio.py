"""A stdio MCP server behind the launcher: pipes, one reader thread, bounded writes.

Owns: the launcher process, the server's stdin pipe (written by callers under a
lock, with a deadline), and one reader thread that splits the server's stdout into
lines and hands each to ``on_line``. When the stream ends, for whatever reason,
``on_closed(reason)`` is called exactly once, from the reader thread, with a one-line
reason that includes the server's exit status and the tail of its stderr.

Knows nothing of actors or JSON-RPC: the owner parses lines.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from ..wire.framing import FrameTooLarge, LineFramer

LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launcher.py")
READ_CHUNK = 1 << 16  # under malloc's mmap threshold: a larger buffer costs an mmap per read
START_TIMEOUT = 10.0  # the launcher itself (a bare Python) starting
TERM_GRACE = 2.0
KILL_GRACE = 2.0
STATUS_WAIT = 1.0  # for the launcher's exit status after the server's stdout closed


class TransportClosed(Exception):
    """The connection is closed; nothing was written."""


class WriteTimeout(Exception):
    """The server did not read its input in time; the connection was closed."""


class LaunchFailed(Exception):
    """The server could not be started; ``str()`` says why."""


@dataclass(frozen=True)
class LaunchSpec:
    """What to run: an exact executable, its arguments, a directory and an environment."""

    executable: str
    args: tuple[str, ...]
    cwd: str
    env: dict[str, str] = field(repr=False)  # holds named secrets: never printed
    secrets: tuple[str, ...] = field(default=(), repr=False)  # values to redact from stderr


class StdioTransport:
    """One server process. ``start()`` once, ``send()`` from any thread, ``close()`` once."""

    def __init__(
        self,
        spec: LaunchSpec,
        on_line: Callable[[bytes], None],
        on_closed: Callable[[str, bool], None],
        *,
        name: str = "server",
    ) -> None:
        self._spec = spec
        self._on_line = on_line
        self._on_closed = on_closed
        self._name = name
        self._write_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._launcher: subprocess.Popen | None = None
        self._stdin_fd = -1
        self._closing = False
        self._local_reason: str | None = None
        self._reader: threading.Thread | None = None
        self.server_pid: int | None = None

    # -- public API --------------------------------------------------------------

    def start(self) -> None:
        """Launch the server; return once it is running.

        Raises:
            LaunchFailed: the executable could not be started (its reason, e.g. not
                found or not executable), or the launcher did not come up.
        """
        with self._write_lock:
            if self._closing:
                raise LaunchFailed("the connection was closed before it started")
            data_r, data_w = os.pipe()
            try:
                launcher_spec = {
                    "argv": [self._spec.executable, *self._spec.args],
                    "cwd": self._spec.cwd,
                    "stdin_fd": data_r,
                    "term_grace": TERM_GRACE,
                    "kill_grace": KILL_GRACE,
                }
                self._launcher = subprocess.Popen(
                    [sys.executable, "-I", "-S", LAUNCHER, json.dumps(launcher_spec)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    pass_fds=(data_r,),
                    env=self._spec.env,
                    cwd=self._spec.cwd,
                    bufsize=0,
                )
            except OSError as exc:
                os.close(data_w)
                raise LaunchFailed(f"cannot run the launcher: {exc}") from None
            finally:
                os.close(data_r)
            self._stdin_fd = data_w
            os.set_blocking(data_w, False)
            status = self._read_status(START_TIMEOUT)
            if "pid" not in status:
                self._close_locked("it did not start")
                self._kill()
                self._release()
                raise LaunchFailed(status.get("error") or "the launcher did not start")
            self.server_pid = status["pid"]
        self._reader = threading.Thread(target=self._read_loop, name=f"mcp-stdio-{self._name}", daemon=True)
        self._reader.start()

    def send(self, data: bytes, timeout: float) -> None:
        """Write ``data`` (whole lines) to the server's stdin within ``timeout`` seconds.

        Raises:
            TransportClosed: the connection was already closed (nothing was written).
            WriteTimeout: the server stopped reading its input; the connection is closed.
        """
        with self._write_lock:
            fd = self._stdin_fd
            if fd < 0:
                raise TransportClosed()
            view = memoryview(data)
            deadline = None
            while view:
                try:
                    written = os.write(fd, view)
                except BlockingIOError:
                    if deadline is None:
                        deadline = time.monotonic() + timeout
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or not select.select([], [fd], [], remaining)[1]:
                        self._close_locked("the server stopped reading its input")
                        raise WriteTimeout() from None
                    continue
                except (BrokenPipeError, OSError):
                    self._close_locked("the server closed its input")
                    raise TransportClosed() from None
                view = view[written:]

    def close(self, reason: str = "closed") -> None:
        """Begin closing: the launcher ends the server (EOF, then SIGTERM, then SIGKILL).

        Returns at once; ``wait_closed()`` waits for the end.
        """
        with self._write_lock:
            self._close_locked(reason)

    def wait_closed(self, timeout: float = TERM_GRACE + KILL_GRACE + 2.0) -> bool:
        """Wait until the server and the launcher are gone and the reader has ended.

        If the launcher does not finish in time it is killed, with the server's group.
        Returns True when everything ended within ``timeout``.
        """
        deadline = time.monotonic() + timeout
        launcher = self._launcher
        clean = True
        if launcher is not None:
            try:
                launcher.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                clean = False
                self._abandon()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(max(0.1, deadline - time.monotonic()))
            clean = clean and not self._reader.is_alive()
        return clean

    @property
    def closed(self) -> bool:
        return self._closing

    # -- internals ---------------------------------------------------------------

    def _close_locked(self, reason: str) -> None:
        with self._state_lock:
            if self._closing:
                return
            self._closing = True
            self._local_reason = reason
        if self._stdin_fd >= 0:
            os.close(self._stdin_fd)  # the server's stdin: EOF
            self._stdin_fd = -1
        if self._launcher is not None and self._launcher.stdin is not None:
            try:
                self._launcher.stdin.close()  # the control pipe: "close"
            except OSError:
                pass

    def _abandon(self) -> None:
        """Last resort: kill the launcher and the server's group outright."""
        with self._write_lock:
            self._close_locked("killed")
        self._kill()

    def _kill(self) -> None:
        if self.server_pid is not None:
            try:
                os.killpg(self.server_pid, signal.SIGKILL)
            except OSError:
                pass
        if self._launcher is not None:
            self._launcher.kill()
            self._launcher.wait()

    def _release(self) -> None:
        """Close our ends of the launcher's output pipes."""
        for stream in (self._launcher.stdout, self._launcher.stderr):
            try:
                stream.close()
            except OSError:
                pass

    def _read_status(self, timeout: float) -> dict:
        """Read one JSON status line from the launcher's stderr, within ``timeout``."""
        stream = self._launcher.stderr
        fd = stream.fileno()
        deadline = time.monotonic() + timeout
        buffer = b""
        while b"\n" not in buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return {}
            chunk = os.read(fd, 65536)
            if not chunk:
                return {}
            buffer += chunk
        try:
            status = json.loads(buffer.split(b"\n", 1)[0])
        except ValueError:
            return {}
        return status if isinstance(status, dict) else {}

    def _read_loop(self) -> None:
        fd = self._launcher.stdout.fileno()
        framer = LineFramer()
        problem = None
        try:
            while True:
                chunk = os.read(fd, READ_CHUNK)
                if not chunk:
                    break
                for line in framer.feed(chunk):
                    self._on_line(line)
        except FrameTooLarge as exc:
            problem = f"sent {exc}"
        except OSError as exc:
            problem = f"could not be read ({exc.strerror})"
        if problem is not None:
            self.close(problem)
        try:
            self._on_closed(self._ending_reason(problem), self._local_reason is not None and problem is None)
        finally:
            self._release()

    def _ending_reason(self, problem: str | None) -> str:
        if problem is not None:
            return problem
        if self._local_reason is not None:
            return self._local_reason
        status = self._read_status(STATUS_WAIT)
        code = status.get("exit")
        if code is None:
            reason = "closed its output"
        elif code < 0:
            reason = f"was killed by signal {-code}"
        else:
            reason = f"exited with status {code}"
        tail = self._redact(status.get("stderr") or "")
        if tail:
            lines = [line.strip() for line in tail.strip().splitlines() if line.strip()]
            reason += "; its stderr ended with: " + " | ".join(lines[-3:])[-400:]
        return reason

    def _redact(self, text: str) -> str:
        for secret in self._spec.secrets:
            if len(secret) >= 4:
                text = text.replace(secret, "***")
        return "".join(ch if ch.isprintable() or ch in "\n\t" else "?" for ch in text)
