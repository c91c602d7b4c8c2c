"""A stdio MCP server behind the launcher: pipes, one reader thread, bounded writes.

Owns: the launcher process, the server's stdin pipe (written by callers under a
lock, with a deadline), one reader thread that splits the server's stdout into
lines and hands each to ``on_line``, and one watcher thread that reads the
launcher's status channel and reaps the launcher. When the stream ends, for whatever
reason, ``on_closed(reason)`` is called exactly once, from the reader thread, with a
one-line reason that includes the server's exit status and the tail of its stderr.

Every process started ends:

- the end of the server's output (or any other end of the stream) closes the
  connection at once, so the launcher runs the shutdown sequence (EOF, TERM_GRACE,
  SIGTERM, KILL_GRACE, SIGKILL) then, not when the host stops;
- the watcher reaps the launcher when it exits, so nothing is left as a zombie and
  redials do not pile up processes;
- the host knows the server's process group (the server leads it): when the
  launcher is gone without having reported the server's end (killed by any signal,
  or crashed), the watcher runs the same sequence on the group itself.

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
from typing import IO, Any, Callable

from ..wire.framing import FrameTooLarge, LineFramer

LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launcher.py")
READ_CHUNK = 1 << 16  # under malloc's mmap threshold: a larger buffer costs an mmap per read
START_TIMEOUT = 10.0  # the launcher itself (a bare Python) starting
TERM_GRACE = 2.0
KILL_GRACE = 2.0
STATUS_WAIT = 1.0  # for the launcher's exit status after the server's stdout closed
STATUS_LIMIT = 1 << 20  # status lines are small (the stderr tail is 2 KiB); more is not kept
POLL = 0.02  # how often the group is checked when no pidfd (or no /proc) tells at once
GROUP_WAIT = 1.0  # for killed members of the server's group to be gone
# The launcher's own environment: it needs nothing, and the server's environment goes
# to it through the spec pipe (see launcher.py), so no secret is in its environ.
LAUNCHER_ENV: dict[str, str] = {}


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
        self._launcher: subprocess.Popen[bytes] | None = None
        self._stdin_fd = -1
        self._closing = False
        self._local_reason: str | None = None
        self._reader: threading.Thread | None = None
        self._watcher: threading.Thread | None = None
        self._status_buffer = b""  # what followed the first status line
        self._exit_status: dict[str, Any] | None = None  # the launcher's {"exit": ...} line
        self._status_ready = threading.Event()  # set by that line, or when the launcher is gone
        self._pidfd: int | None = None
        self.server_pid: int | None = None  # also the server's process group id

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
            spec_r, spec_w = os.pipe()
            try:
                self._launcher = subprocess.Popen(
                    [sys.executable, "-I", "-S", LAUNCHER, str(spec_r)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    pass_fds=(data_r, spec_r),
                    env=LAUNCHER_ENV,
                    cwd=self._spec.cwd,
                    bufsize=0,
                )
            except OSError as exc:
                os.close(data_w)
                os.close(spec_w)
                raise LaunchFailed(f"cannot run the launcher: {exc}") from None
            finally:
                os.close(data_r)
                os.close(spec_r)
            self._stdin_fd = data_w
            os.set_blocking(data_w, False)
            deadline = time.monotonic() + START_TIMEOUT
            # The environment (secrets included) goes through a pipe: argv is readable
            # by every user in /proc, and the launcher's own environment is changed by
            # its interpreter (PEP 538 adds LC_CTYPE), so the server gets exactly this.
            launcher_spec = {
                "argv": [self._spec.executable, *self._spec.args],
                "cwd": self._spec.cwd,
                "env": dict(self._spec.env),
                "secrets": list(self._spec.secrets),
                "stdin_fd": data_r,
                "term_grace": TERM_GRACE,
                "kill_grace": KILL_GRACE,
            }
            sent = _write_all(spec_w, json.dumps(launcher_spec).encode(), deadline)
            status = self._read_status(deadline) if sent else {}
            if "pid" not in status:
                self._close_locked("it did not start")
                self._kill()
                self._release(self._launcher.stdout, self._launcher.stderr)
                raise LaunchFailed(status.get("error") or "the launcher did not start")
            self.server_pid = status["pid"]
            self._pidfd = _open_pidfd(self.server_pid)
        self._watcher = threading.Thread(target=self._watch_launcher, name=f"mcp-stdio-watch-{self._name}", daemon=True)
        self._watcher.start()
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
        if self._watcher is not None:
            # The watcher reaps the launcher (and ends the group if the launcher could not).
            self._watcher.join(max(0.0, deadline - time.monotonic()))
            if self._watcher.is_alive():
                clean = False
                self._abandon()
                self._watcher.join(KILL_GRACE)
        elif launcher is not None:
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

    def _close_locked(self, reason: str | None) -> None:
        """Close the server's stdin and the control pipe; ``reason`` None: the server's doing."""
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

    @staticmethod
    def _release(*streams: IO[bytes] | None) -> None:
        """Close our ends of launcher pipes (each by the one thread that reads it)."""
        for stream in streams:
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass

    def _read_status(self, deadline: float) -> dict[str, Any]:
        """Read the first JSON status line from the launcher's stderr, by ``deadline``.

        What follows it is kept for the watcher.
        """
        fd = self._started().stderr_fd
        buffer = b""
        while b"\n" not in buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return {}
            chunk = os.read(fd, 65536)
            if not chunk:
                return {}
            buffer += chunk
        line, self._status_buffer = buffer.split(b"\n", 1)
        return _status_of(line)

    def _watch_launcher(self) -> None:
        """Read the status channel to its end, reap the launcher, end an orphaned group."""
        started = self._started()
        launcher, fd = started.launcher, started.stderr_fd
        buffer, self._status_buffer = self._status_buffer, b""
        try:
            while True:
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    self._on_status(_status_of(line))
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    break  # the launcher has exited (or was killed): nobody else holds this pipe
                buffer = (buffer + chunk)[-STATUS_LIMIT:]
            try:
                launcher.wait(KILL_GRACE)
            except subprocess.TimeoutExpired:  # it closed its stderr and lives on: not ours to trust
                launcher.kill()
                launcher.wait()
            if self._exit_status is None or launcher.returncode != 0:
                self._end_group(launcher.returncode)
            if self.server_pid is not None:
                # SIGKILLed helpers take a moment to die: closed is closed when they are gone.
                _wait_group_gone(self.server_pid, GROUP_WAIT)
        finally:
            self._status_ready.set()
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
            self._release(launcher.stderr)

    def _on_status(self, status: dict[str, Any]) -> None:
        if "exit" in status:
            self._exit_status = status
            self._status_ready.set()
        elif "closing" in status:
            # The launcher was asked to end (SIGTERM, SIGHUP): the EOF is ours to give.
            self.close(f"its launcher got {str(status['closing'])[:20]}")

    def _end_group(self, launcher_status: int | None) -> None:
        """The launcher is gone without having seen the server end: end its group here.

        The same sequence the launcher runs: EOF (the server's stdin closes now), then
        SIGTERM to the group after TERM_GRACE, then SIGKILL after KILL_GRACE, and
        SIGKILL for helpers left in the group once its leader is gone.
        """
        if launcher_status is not None and launcher_status < 0:
            how = f"was killed by signal {-launcher_status}"
        else:
            how = f"exited with status {launcher_status}"
        self.close(f"its launcher {how}; the server was ended")
        pid = self.server_pid
        if pid is None:
            return
        if not self._leader_ends_within(pid, TERM_GRACE):
            _signal_group(pid, signal.SIGTERM)
            if not self._leader_ends_within(pid, KILL_GRACE):
                _signal_group(pid, signal.SIGKILL)
        _signal_group(pid, signal.SIGKILL)

    def _leader_ends_within(self, pid: int, timeout: float) -> bool:
        """Wait up to ``timeout`` for the server (leader of its group) to end; True if it did."""
        if self._pidfd is not None:
            # Readable once the process has ended (a zombie counts): no pid reuse can fool it.
            return bool(select.select([self._pidfd], [], [], timeout)[0])
        deadline = time.monotonic() + timeout
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            except PermissionError:
                pass
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL)

    def _read_loop(self) -> None:
        started = self._started()
        fd = started.stdout_fd
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
        local = self._local_reason is not None and problem is None
        if problem is not None:
            self.close(problem)
        else:
            # The server's output ended, but the process may live on: end it now (EOF,
            # then SIGTERM, then SIGKILL), not when the host stops.
            with self._write_lock:
                self._close_locked(None)
        try:
            self._on_closed(self._ending_reason(problem), local)
        finally:
            self._release(started.launcher.stdout)

    def _started(self) -> _Started:
        """The launcher and its pipes' descriptors, once :meth:`start` ran it."""
        launcher = self._launcher
        if launcher is None or launcher.stdout is None or launcher.stderr is None:
            raise RuntimeError("the launcher has not been started")  # our bug: start() runs it first
        return _Started(launcher, launcher.stdout.fileno(), launcher.stderr.fileno())

    def _ending_reason(self, problem: str | None) -> str:
        if problem is not None:
            return problem
        if self._local_reason is not None:
            return self._local_reason
        self._status_ready.wait(STATUS_WAIT)
        status = self._exit_status or {}
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


@dataclass(frozen=True)
class _Started:
    launcher: subprocess.Popen[bytes]
    stdout_fd: int
    stderr_fd: int


def _status_of(line: bytes) -> dict[str, Any]:
    try:
        status = json.loads(line)
    except ValueError:
        return {}
    return status if isinstance(status, dict) else {}


def _write_all(fd: int, data: bytes, deadline: float) -> bool:
    """Write ``data`` to the pipe ``fd`` by ``deadline`` and close it; False if not all went."""
    try:
        os.set_blocking(fd, False)
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not select.select([], [fd], [], remaining)[1]:
                    return False
        return True
    except OSError:  # the launcher is gone
        return False
    finally:
        os.close(fd)


def _open_pidfd(pid: int) -> int | None:
    """A pidfd for the server (Linux 5.3+), so waiting for it cannot be fooled by pid reuse."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass  # none of it is left (or a member we may not signal)


def _wait_group_gone(pgid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` until no live (non-zombie) process is in group ``pgid``.

    Linux /proc only (elsewhere it returns at once): the members are not our children,
    so there is nothing to wait on but their state.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            names = os.listdir("/proc")
        except OSError:
            return True
        alive = False
        for name in names:
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            # Fields after the command: state, ppid, pgrp (proc(5)).
            if len(fields) > 2 and fields[2] == str(pgid).encode() and fields[0] not in (b"Z", b"X"):
                alive = True
                break
        if not alive:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL)
