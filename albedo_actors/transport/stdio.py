"""A stdio MCP server behind the launcher: pipes, one thread, bounded coalesced writes.

Owns: the launcher process, the server's stdin pipe (written by callers, with a
deadline), and one thread that waits on the server's stdout and the launcher's
status channel together (``poll``): it splits the output into lines and hands each to
``on_line``, reads the status lines, and reaps the launcher. When the stream ends, for
whatever reason, ``on_closed(reason)`` is called exactly once, from that thread, with a
one-line reason that includes the server's exit status and the tail of its stderr.
An idle server costs the host this one thread (issue 14: at most two per server, its
client actor's included).

Writes are coalesced: a caller that finds another writing leaves its bytes in the
outbox and returns; the writer flushes the outbox, in one ``write``, before it lets
go. A caller is told "not written" (TransportClosed, WriteTimeout) only when its own
bytes were not all written; the others' requests end with the connection (their
outcome unknown, never "not sent" for what may have been sent).

Every process started ends:

- the end of the server's output (or any other end of the stream) closes the
  connection at once, so the launcher runs the shutdown sequence (EOF, TERM_GRACE,
  SIGTERM, KILL_GRACE, SIGKILL) then, not when the host stops;
- the thread reaps the launcher when it exits, so nothing is left as a zombie and
  redials do not pile up processes;
- the host knows the server's process group (the server leads it): when the
  launcher is gone without having reported the server's end (killed by any signal,
  or crashed), the thread runs the same sequence on the group itself;
- the launcher is a child subreaper and ends every descendant, also those that left
  the group (see launcher.py). When the launcher is gone, the host can no longer find
  the orphans it had adopted (they are re-parented past it, to init or to the
  nearest subreaper); it still ends, with the group, every process in the server's
  session (the server leads one: a helper that only called ``setpgid()`` is in it)
  and every descendant of the server it finds in /proc when it learns the launcher
  is gone (while the server lives, a helper that called ``setsid()`` is still its
  child). A helper that called ``setsid()`` and whose parent has ended is not found.

Knows nothing of actors or JSON-RPC: the owner parses lines.
"""

from __future__ import annotations

import collections
import json
import marshal
import os
import select
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Callable

from ..wire.framing import FrameTooLarge, LineFramer
from ..wire import telemetry

if TYPE_CHECKING:
    import subprocess

# subprocess and signal (with selectors and their enums, some 4 ms of
# ``import albedo_actors.runtime``) are imported where a server is launched or ended.

logger = telemetry.logger(__name__)  # records carry the server and trace ids

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
_IN = select.POLLIN | select.POLLHUP | select.POLLERR
# What comes before the redacted tail of the server's stderr in an ending reason (its last
# lines joined by TAIL_JOIN); ``albedo-mcp doctor`` shows the tail apart from the error.
STDERR_TAIL = "; its stderr ended with: "
TAIL_JOIN = " | "


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
        self._outbox: collections.deque[bytes] = collections.deque()  # left by writers who found the lock taken
        self._launcher: subprocess.Popen[bytes] | None = None
        self._stdin_fd = -1
        self._closing = False
        self._local_reason: str | None = None
        self._thread: threading.Thread | None = None
        self._status_buffer = b""  # what followed the first status line
        self._exit_status: dict[str, Any] | None = None  # the launcher's {"exit": ...} line
        self._pidfd: int | None = None
        # The orphaned group's sequence (the launcher gone without reporting the end):
        # its next step and when it is due.
        self._orphan_step = 0  # 0 none; 1 SIGTERM due; 2 SIGKILL due; 3 done
        self._orphan_due = 0.0
        self._strays: dict[int, int] = {}  # the orphaned server's session and descendants: pid -> start time
        self.server_pid: int | None = None  # also the server's process group id

    # -- public API --------------------------------------------------------------

    def start(self) -> None:
        """Launch the server; return once it is running.

        Raises:
            LaunchFailed: the executable could not be started (its reason, e.g. not
                found or not executable), or the launcher did not come up.
        """
        import subprocess

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
            # marshal: the launcher runs on this interpreter, and json would double its start.
            launcher_spec = {
                "argv": [self._spec.executable, *self._spec.args],
                "cwd": self._spec.cwd,
                "env": dict(self._spec.env),
                "secrets": list(self._spec.secrets),
                "stdin_fd": data_r,
                "term_grace": TERM_GRACE,
                "kill_grace": KILL_GRACE,
            }
            sent = _write_all(spec_w, marshal.dumps(launcher_spec), deadline)
            status = self._read_status(deadline) if sent else {}
            if "pid" not in status:
                self._close_locked("it did not start")
                self._kill()
                self._release(self._launcher.stdout, self._launcher.stderr)
                raise LaunchFailed(status.get("error") or "the launcher did not start")
            self.server_pid = status["pid"]
            self._pidfd = _open_pidfd(self.server_pid)
        self._thread = threading.Thread(target=self._run, name=f"mcp-stdio-{self._name}", daemon=True)
        self._thread.start()

    def send(self, data: bytes, timeout: float) -> None:
        """Write ``data`` (whole lines) to the server's stdin within ``timeout`` seconds.

        Concurrent callers' lines are written together (module docstring); each line
        stays whole.

        Raises:
            TransportClosed: the connection was already closed (nothing was written).
            WriteTimeout: the server stopped reading its input; the connection is closed.
        """
        if self._stdin_fd < 0:
            raise TransportClosed()
        outbox, lock = self._outbox, self._write_lock
        outbox.append(data)
        mine: bytes | None = data
        while lock.acquire(blocking=False):
            try:
                self._flush_locked(mine, timeout)
            finally:
                lock.release()
            mine = None
            if not outbox:
                return
            # More came while we wrote, from callers who found the lock taken: whoever
            # takes the lock next writes them (we, unless another caller is quicker).
        # Another caller holds the lock: it flushes the outbox before it lets go.

    def close(self, reason: str = "closed") -> None:
        """Begin closing: the launcher ends the server (EOF, then SIGTERM, then SIGKILL).

        Returns at once; ``wait_closed()`` waits for the end.
        """
        with self._write_lock:
            self._close_locked(reason)

    def wait_closed(self, timeout: float = TERM_GRACE + KILL_GRACE + 2.0) -> bool:
        """Wait until the server and the launcher are gone and the thread has ended.

        If the launcher does not finish in time it is killed, with the server's group.
        Returns True when everything ended within ``timeout``.
        """
        deadline = time.monotonic() + timeout
        launcher, thread = self._launcher, self._thread
        if thread is not None:
            if thread is threading.current_thread():
                return False  # on_closed's own thread: it cannot wait for itself
            # The thread reaps the launcher (and ends the group if the launcher could not).
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                self._abandon()
                thread.join(KILL_GRACE)
                return False
            return True
        if launcher is not None:
            import subprocess

            try:
                launcher.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._abandon()
                return False
        return True

    @property
    def closed(self) -> bool:
        return self._closing

    # -- internals: writing ------------------------------------------------------

    def _flush_locked(self, mine: bytes | None, timeout: float) -> None:
        """Write everything in the outbox in one go (the write lock is held).

        Raises TransportClosed or WriteTimeout when ``mine`` (the caller's own bytes, if
        still in the outbox) was not all written; the others' requests end with the
        connection.
        """
        outbox = self._outbox
        parts = []
        while outbox:  # popleft one by one: callers may append meanwhile
            parts.append(outbox.popleft())
        if not parts:
            return  # a writer before us took ours too
        end = -1  # where mine ends in what is written; -1: not in it
        if mine is not None:
            offset = 0
            for part in parts:
                offset += len(part)
                if part is mine:
                    end = offset
                    break
        fd = self._stdin_fd
        if fd < 0:
            if end >= 0:
                raise TransportClosed()
            return
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        view = memoryview(data)
        total, sent = len(data), 0
        deadline = None
        while sent < total:
            try:
                sent += os.write(fd, view[sent:] if sent else view)
            except BlockingIOError:
                if deadline is None:
                    deadline = time.monotonic() + timeout
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not _ready(fd, select.POLLOUT, remaining):
                    self._close_locked("the server stopped reading its input")
                    if sent < end:
                        raise WriteTimeout() from None
                    return
            except OSError:  # BrokenPipeError and the like
                # The server's doing (it ended, or closed its stdin): the end is reported
                # as the server's, with its exit status and stderr once the launcher tells
                # them, never as "closed its input" (which raced that report under load).
                self._close_locked(None)
                if sent < end:
                    raise TransportClosed() from None
                return

    # -- internals: closing ------------------------------------------------------

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
        self._outbox.clear()  # never written: those requests end with the connection
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
        import signal

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
        """Close our ends of launcher pipes (by the one thread that reads them)."""
        for stream in streams:
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass

    # -- internals: the thread ---------------------------------------------------

    def _read_status(self, deadline: float) -> dict[str, Any]:
        """Read the first JSON status line from the launcher's stderr, by ``deadline``.

        What follows it is kept for the thread.
        """
        fd = self._started().stderr_fd
        buffer = b""
        while b"\n" not in buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not _ready(fd, select.POLLIN, remaining):
                return {}
            chunk = os.read(fd, 65536)
            if not chunk:
                return {}
            buffer += chunk
        line, self._status_buffer = buffer.split(b"\n", 1)
        return _status_of(line)

    def _run(self) -> None:
        """The one thread: the server's output and the launcher's status, then the end.

        Until the server's stdout ends, its lines go to ``on_line`` and status lines are
        handled as they come. Then the connection is closed (the launcher runs the
        shutdown), ``on_closed`` is called once the reason is known (the exit status,
        within STATUS_WAIT), and the thread stays to reap the launcher and, if the
        launcher could not, end the server's group.
        """
        started = self._started()
        launcher, out_fd, status_fd = started.launcher, started.stdout_fd, started.stderr_fd
        on_line = self._on_line
        framer = LineFramer()
        poller = select.poll()
        poller.register(out_fd, _IN)
        poller.register(status_fd, _IN)
        poll = poller.poll
        status_buffer, self._status_buffer = self._status_buffer, b""
        out_open = status_open = True
        reported = False
        report_by: float | None = None  # stdout ended: report by then, exit status or not
        problem: str | None = None
        local = False
        pidfd_watched = False
        try:
            status_buffer = self._status_lines(status_buffer)
            while out_open or status_open or not reported or 0 < self._orphan_step < 3:
                # Nothing is due while the server talks (the hot path): wait without a timeout.
                timeout = None if out_open and not self._orphan_step else self._poll_timeout(None if reported else report_by, pidfd_watched)
                for fd, _event in poll(timeout):
                    if fd == out_fd:
                        try:
                            chunk = os.read(out_fd, READ_CHUNK)
                            if chunk:
                                for line in framer.feed(chunk):
                                    on_line(line)
                                continue
                        except FrameTooLarge as exc:
                            problem = f"sent {exc}"
                        except OSError as exc:
                            problem = f"could not be read ({exc.strerror})"
                        except Exception as exc:  # noqa: BLE001 - on_line's bug: the thread must live to reap
                            logger.error("server %r: handling its output failed (%s)", self._name, type(exc).__name__, exc_info=True)
                            problem = f"sent output this client could not handle ({type(exc).__name__})"
                        # The server's output ended (or is unusable).
                        out_open = False
                        poller.unregister(out_fd)
                        self._release(launcher.stdout)
                        local = self._local_reason is not None and problem is None
                        if problem is not None:
                            self.close(problem)
                        else:
                            # The process may live on: end it now (EOF, then SIGTERM, then
                            # SIGKILL), not when the host stops.
                            with self._write_lock:
                                self._close_locked(None)
                        report_by = time.monotonic() + STATUS_WAIT
                    elif fd == status_fd:
                        try:
                            chunk = os.read(status_fd, 65536)
                        except OSError:
                            chunk = b""
                        if chunk:
                            status_buffer = self._status_lines((status_buffer + chunk)[-STATUS_LIMIT:])
                            continue
                        # The launcher has exited (or was killed): nobody else holds this pipe.
                        status_open = False
                        poller.unregister(status_fd)
                        self._reap(launcher)
                        if self._orphan_step and self._pidfd is not None:
                            poller.register(self._pidfd, _IN)
                            pidfd_watched = True
                    elif fd == self._pidfd:
                        # The server (leader of its group) has ended: its helpers go now.
                        poller.unregister(fd)
                        pidfd_watched = False
                        self._orphan_advance(leader_gone=True)
                if not out_open and not reported and (
                    local or problem is not None or self._exit_status is not None or not status_open
                    or time.monotonic() >= (report_by or 0.0)
                ):
                    reported = True
                    try:
                        self._on_closed(self._ending_reason(problem), local)
                    except Exception:  # noqa: BLE001 - the owner's bug: the thread must live to reap
                        logger.error("server %r: the end of its connection could not be reported", self._name, exc_info=True)
                if 0 < self._orphan_step < 3:
                    if not pidfd_watched and not _leader_alive(self.server_pid):
                        self._orphan_advance(leader_gone=True)
                    elif time.monotonic() >= self._orphan_due:
                        self._orphan_advance(leader_gone=False)
                    if self._orphan_step == 3 and pidfd_watched and self._pidfd is not None:
                        poller.unregister(self._pidfd)
                        pidfd_watched = False
            if self.server_pid is not None:
                # SIGKILLed helpers take a moment to die: closed is closed when they are gone.
                _wait_group_gone(self.server_pid, GROUP_WAIT)
        finally:
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
            self._release(launcher.stdout, launcher.stderr)

    def _poll_timeout(self, report_by: float | None, pidfd_watched: bool) -> float | None:
        """Milliseconds until the next thing due (None: nothing is)."""
        due = report_by
        if 0 < self._orphan_step < 3:
            # Without a pidfd the leader's end is polled for.
            step_due = self._orphan_due if pidfd_watched else min(self._orphan_due, time.monotonic() + POLL)
            due = step_due if due is None else min(due, step_due)
        if due is None:
            return None
        return max(0.0, (due - time.monotonic()) * 1000)

    def _status_lines(self, buffer: bytes) -> bytes:
        """Handle the complete status lines in ``buffer``; return what is left of it."""
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            self._on_status(_status_of(line))
        return buffer

    def _on_status(self, status: dict[str, Any]) -> None:
        if "exit" in status:
            self._exit_status = status
        elif "closing" in status:
            # The launcher was asked to end (SIGTERM, SIGHUP): the EOF is ours to give.
            self.close(f"its launcher got {str(status['closing'])[:20]}")

    def _reap(self, launcher: subprocess.Popen[bytes]) -> None:
        """The launcher closed its status channel: reap it; end the group if it could not."""
        import subprocess

        try:
            launcher.wait(KILL_GRACE)
        except subprocess.TimeoutExpired:  # it closed its stderr and lives on: not ours to trust
            launcher.kill()
            launcher.wait()
        if self._exit_status is None or launcher.returncode != 0:
            self._end_group(launcher.returncode)

    def _end_group(self, launcher_status: int | None) -> None:
        """The launcher is gone without having seen the server end: end its group here.

        The same sequence the launcher runs: EOF (the server's stdin closes now), then
        SIGTERM to the group after TERM_GRACE, then SIGKILL after KILL_GRACE, and
        SIGKILL for helpers left in the group once its leader is gone. The steps are
        run by the thread's loop (:meth:`_orphan_advance`), which keeps reading the
        server's output meanwhile.
        """
        if launcher_status is not None and launcher_status < 0:
            how = f"was killed by signal {-launcher_status}"
        else:
            how = f"exited with status {launcher_status}"
        if self.server_pid is not None:
            # Before the EOF: a server that exits on it orphans its children at once.
            self._strays = _strays(self.server_pid)
        self.close(f"its launcher {how}; the server was ended")
        if self.server_pid is None:
            return
        self._orphan_step, self._orphan_due = 1, time.monotonic() + TERM_GRACE

    def _orphan_advance(self, leader_gone: bool) -> None:
        """The orphaned group's next step: SIGTERM, then SIGKILL; once its leader is
        gone (or after SIGKILL), SIGKILL for the helpers left in it, and done."""
        import signal

        pid = self.server_pid
        if pid is not None and self._orphan_step == 1 and not leader_gone:
            _signal_group(pid, signal.SIGTERM)
            self._signal_strays(pid, signal.SIGTERM)
            self._orphan_step, self._orphan_due = 2, time.monotonic() + KILL_GRACE
            return
        if pid is not None:
            _signal_group(pid, signal.SIGKILL)
            self._signal_strays(pid, signal.SIGKILL)
        self._orphan_step = 3

    def _signal_strays(self, pid: int, sig: int) -> None:
        """Signal the orphaned server's session and descendants outside its group: those
        found when the launcher was gone and those found now, each only if it is still
        the process found (the same start time)."""
        for stray, start in _strays(pid, set(self._strays)).items():
            if self._strays.setdefault(stray, start) == start:
                try:
                    os.kill(stray, sig)
                except OSError:
                    pass  # gone since, or one we may not signal

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
            reason += STDERR_TAIL + TAIL_JOIN.join(lines[-3:])[-400:]
        return reason

    def _redact(self, text: str) -> str:
        for secret in self._spec.secrets:
            if len(secret) >= 4:
                text = text.replace(secret, "***")
        return "".join(ch if ch.isprintable() or ch in "\n\t" else "?" for ch in text)


@dataclass(frozen=True, eq=False)
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
                if remaining <= 0 or not _ready(fd, select.POLLOUT, remaining):
                    return False
        return True
    except OSError:  # the launcher is gone
        return False
    finally:
        os.close(fd)


def _ready(fd: int, events: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``fd`` to be ready (or in error, or hung up).

    ``poll``, not ``select``: a host with a few hundred servers has descriptors past
    select's FD_SETSIZE (1024), which select refuses.
    """
    poller = select.poll()
    poller.register(fd, events)
    return bool(poller.poll(timeout * 1000))


def _open_pidfd(pid: int) -> int | None:
    """A pidfd for the server (Linux 5.3+), so waiting for it cannot be fooled by pid reuse."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _leader_alive(pid: int | None) -> bool:
    """Without a pidfd: is the server (its group's leader) still there (a zombie counts)?"""
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass  # none of it is left (or a member we may not signal)


def _strays(leader: int, known: set[int] | frozenset[int] = frozenset()) -> dict[int, int]:
    """Outside ``leader``'s process group: the processes of its session, the live
    descendants of ``leader``, and those of ``known`` still there; pid -> start time
    (clock ticks after boot: with the pid, it names one process). Linux /proc only.

    ``leader`` leads a session of its own (the launcher starts it with ``setsid``),
    and a session's id is not reused while a member lives, so its members are its
    descendants; one that called ``setsid()`` itself is found only through a living
    parent.
    """
    try:
        names = os.listdir("/proc")
    except OSError:
        return {}
    found: dict[int, int] = {}
    children: dict[int, list[int]] = {}
    starts: dict[int, tuple[int, bool]] = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            # proc(5), after the command: state, ppid, pgrp, session, ... starttime (field 22).
            pid, ppid, pgrp, session, start = int(name), int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])
        except (OSError, IndexError, ValueError):
            continue
        if fields[0] in (b"Z", b"X"):
            continue  # ended: nothing to signal
        outside = pgrp != leader
        starts[pid] = (start, outside)
        children.setdefault(ppid, []).append(pid)
        if outside and (session == leader or pid in known):
            found[pid] = start
    stack = [leader]
    while stack:
        for child in children.get(stack.pop(), ()):
            start, outside = starts[child]
            if outside:
                found[child] = start
            stack.append(child)
    return found


def _wait_group_gone(pgid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` until no live (non-zombie) process is in group ``pgid``.

    First one ``killpg(pgid, 0)``: an empty group is the usual case, and scanning /proc
    for every server of a host stopping 200 of them costs each a pass over 400
    processes. Then Linux /proc only (elsewhere it returns at once): the members are
    not our children, so there is nothing to wait on but their state.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass
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
