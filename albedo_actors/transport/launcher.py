"""The stdio launcher: parent of one MCP server process, in a process group of its own.

Run by :mod:`albedo_actors.transport.stdio` as ``python -I -S launcher.py SPEC_FD``
(stdlib only, so it runs isolated from the host's ``PYTHON*`` variables and site
packages, and starts without the cost of site processing). SPEC_FD is a pipe the host
writes one :mod:`marshal`-ed dict to and closes: ``{"argv": [...], "cwd": "...",
"env": {...}, "secrets": [...], "stdin_fd": N, "term_grace": 2.0, "kill_grace": 2.0}``.

It is one process per server, so what it costs counts once per server: it is one
thread, imports nothing but ``os``, ``select`` and the C ``_signal`` and ``_ctypes``
(``json`` alone, through ``re`` and ``enum``, doubled its start; ``marshal`` is built
in and the host runs it on its own interpreter; ``_ctypes`` makes it a subreaper for
0.3 ms of its start, where the ``ctypes`` package would cost 2 ms: see
benchmarks/bench_launcher.py), starts the server with ``posix_spawn``, and waits
for nothing by polling: the server's end (SIGCHLD), the control pipe, signals and
the server's stderr all wake one ``select``.

Why a pipe and not argv or the launcher's own environment: the environment holds
secrets, and a process's argv is readable by every user in /proc. And the server gets
exactly ``env`` as given, never the launcher's own environment, because this
interpreter changes its own: with a C locale it adds ``LC_CTYPE`` (PEP 538 locale
coercion, which ``-I`` does not turn off).

Pipes:

- the server's stdin is ``stdin_fd``, a pipe the host writes requests to directly;
- the server's stdout is the launcher's stdout (the host reads responses directly),
  which the launcher then lets go of, so the host sees EOF when the server is gone;
- the server's stderr goes to the launcher, which keeps a small tail of it, with
  ``secrets`` redacted before it is cut (see :func:`redacted_tail`);
- the launcher's stdin is the control pipe: EOF on it means "close" (the host closed
  it, or the host died);
- the launcher's stderr is the status channel back to the host: one JSON line
  ``{"pid": N}`` (or ``{"error": "..."}``) at start, ``{"closing": "SIGTERM"}`` when
  a signal asks the launcher to end, and ``{"exit": code, "stderr": tail}`` when the
  server ends.

Shutdown (2025-11-25 basic/lifecycle "Shutdown", 2026-07-28 basic/transports/stdio
"Shutdown"): once the control pipe closes, the server's stdin has been closed by the
host; the server gets ``term_grace`` seconds to exit, then its group gets SIGTERM, and
``kill_grace`` seconds later SIGKILL. A server that ignores EOF and SIGTERM still ends.
SIGTERM or SIGHUP to the launcher runs the same sequence (the host is told first, so
that it closes the server's stdin). If the launcher itself is killed, the host sees
its status channel close without an exit status and ends the server's group itself.

Every descendant ends, not only the group (issue 23): a helper that calls
``setsid()`` or ``setpgid()``, or double-forks, leaves the server's group. So the
launcher is a child subreaper (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``, see
PR_SET_CHILD_SUBREAPER in prctl(2)): a descendant whose parent ends is re-parented
to it, not to init, so its parent chain in /proc still leads here. The SIGTERM and
the SIGKILL of the sequence go to every descendant as well as to the group. Once the
server has ended, the group's leftovers get SIGKILL at once (as before), and every
other descendant gets SIGTERM, ``kill_grace`` seconds (counted from an earlier SIGTERM
of the sequence if it had one), then SIGKILL, in rounds until the launcher has no
child left, at most KILL_ROUNDS of them. Adopted children are reaped as they end,
for the server's whole life, so no zombie stays. The fast path pays nothing: once
the server is reaped, ``waitpid`` saying "no child" means no descendant is left
(every orphan of ours would be our child), and /proc is read only when there is one.
"""

from __future__ import annotations

import marshal
import os
import select
import sys
import time

TYPE_CHECKING = False  # typing's own import would cost the launcher's start
if TYPE_CHECKING:
    import signal
    from typing import Any
else:
    try:  # the C module itself: the ``signal`` wrapper imports ``enum``, a third of our start
        import _signal as signal
    except ImportError:  # not CPython
        import signal

TAIL_BYTES = 2048
TAIL_WAIT = 0.5  # for the rest of the server's stderr once it ended (a helper may hold it open)
MIN_SECRET = 4  # shorter values are not redacted: they would blank ordinary text
PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
KILL_ROUNDS = 10  # SIGKILL rounds for descendants that fork while they are ended
ROUND_WAIT = 0.1  # between those rounds, for the SIGKILLed to end
CLOSING_SIGNALS: dict[int, str] = {signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}
# JSON string escapes (RFC 8259 section 7) for the status lines, written without ``json``.
_ESCAPES = {i: f"\\u{i:04x}" for i in range(0x20)} | {ord('"'): '\\"', ord("\\"): "\\\\", 0x7F: "\\u007f"}


def _json(value: Any) -> str:
    """The few JSON values a status line holds: str, int, float, bool, None, a dict of them."""
    if isinstance(value, str):
        return '"' + value.translate(_ESCAPES) + '"'
    if isinstance(value, dict):
        return "{" + ",".join(f"{_json(str(k))}:{_json(v)}" for k, v in value.items()) + "}"
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, (int, float)):
        return repr(value)
    return _json(str(value))


def _status(obj: dict[str, Any]) -> None:
    try:
        os.write(2, _json(obj).encode("utf-8", "replace") + b"\n")
    except OSError:
        pass  # the host is gone; nothing to tell


def _read_spec(fd: int) -> dict[str, Any]:
    chunks = []
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    spec: dict[str, Any] = marshal.loads(b"".join(chunks))  # the host wrote it: a dict
    return spec


class Tail:
    """The last bytes of the server's stderr, with secrets redacted before any cut.

    ``margin`` (the longest secret) more bytes are kept than are shown, so that a
    secret near the front of what is shown is still whole when it is redacted.
    Used by the launcher's one thread only.
    """

    def __init__(self, secrets: list[bytes], limit: int = TAIL_BYTES) -> None:
        # Longest first: a secret that contains another is replaced whole.
        self.secrets = sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len, reverse=True)
        self.limit = limit
        self.margin = max((len(s) for s in self.secrets), default=0)
        self.chunks: list[bytes] = []
        self.size = 0
        self.cut = False

    def add(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self.size += len(chunk)
        keep = self.limit + self.margin
        drop = 0
        while self.size - len(self.chunks[drop]) >= keep:
            self.size -= len(self.chunks[drop])
            drop += 1
        if drop:
            del self.chunks[:drop]
            self.cut = True

    def text(self) -> str:
        return redacted_tail(b"".join(self.chunks), self.cut, self.secrets, self.limit + self.margin, self.limit)


def redacted_tail(data: bytes, cut: bool, secrets: list[bytes], keep: int, limit: int) -> str:
    """The last ``limit`` bytes of ``data`` (of which at most ``keep`` are looked at), as
    text, with every secret redacted before any cut.

    ``cut``: bytes before ``data`` were dropped, so a secret may straddle its start and
    show only its end there: the longest end of a secret that ``data`` starts with is
    redacted too (a false match hides a few bytes of noise, never a secret).
    """
    if len(data) > keep:
        data, cut = data[-keep:], True
    if cut:
        front = max((next((j for j in range(len(s) - 1, 0, -1) if data.startswith(s[-j:])), 0) for s in secrets), default=0)
        if front:
            data = b"***" + data[front:]
    for secret in secrets:
        data = data.replace(secret, b"***")
    return data[-limit:].decode("utf-8", "replace")


def _signal_group(pgid: int, sig: int) -> bool:
    """Signal the server's group; False when no process of it is left."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a member we cannot signal (zombie or setuid); still there


def _become_subreaper() -> bool:
    """Make this process the child subreaper of its descendants (Linux); False where it
    cannot be.

    Through the C ``_ctypes`` and this process's own symbols (``dlopen(NULL)``), not the
    ``ctypes`` package, whose import (``struct``, its endian and type classes) costs this
    start 2 ms against 0.3 ms (benchmarks/bench_launcher.py).
    """
    try:
        import _ctypes

        class ULong(_ctypes._SimpleCData):  # type: ignore[type-arg]  # unsigned long: prctl(2)'s arguments
            _type_ = "L"

        class Function(_ctypes.CFuncPtr):  # returns a C int, the default
            _flags_ = _ctypes.FUNCFLAG_CDECL

        class Process:  # what CFuncPtr looks a symbol up in: anything with a handle
            _handle = _ctypes.dlopen(None)  # type: ignore[arg-type]  # dlopen(3): NULL, the program's own

        prctl = Function(("prctl", Process))  # type: ignore[arg-type]  # typeshed wants a CDLL
        return bool(prctl(PR_SET_CHILD_SUBREAPER, ULong(1), ULong(0), ULong(0), ULong(0)) == 0)
    except (ImportError, AttributeError, OSError):  # no _ctypes, or no prctl: not Linux
        return False


def _reap(server: int = 0) -> tuple[int | None, bool]:
    """Reap every child that has ended: the server, and orphans adopted as subreaper
    (nobody else will: each would stay a zombie).

    Returns the server's wait status if it was reaped now (None if not), and whether
    any child is left.
    """
    status = None
    while True:
        try:
            pid, code = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status, False
        if pid == 0:
            return status, True
        if pid == server:
            status = code


def _descendants(group: int) -> list[int]:
    """Every process whose parent chain in /proc leads here, but for the members of
    process group ``group`` (the server's: they are signalled as one). Empty without /proc.

    One pass over /proc: a process that starts or ends during it may be missed, so
    callers repeat until no child is left.
    """
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    children: dict[int, list[tuple[int, bool]]] = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{name}/stat", os.O_RDONLY)
        except OSError:
            continue
        try:
            # proc(5): "pid (comm) state ppid pgrp ..."; comm may hold ") ": split at the last.
            fields = os.read(fd, 4096).rsplit(b")", 1)[1].split()
            ppid, pgrp = int(fields[1]), int(fields[2])
        except (OSError, IndexError, ValueError):
            continue
        finally:
            os.close(fd)
        children.setdefault(ppid, []).append((int(name), pgrp != group))
    found: list[int] = []
    stack = [os.getpid()]
    while stack:
        for pid, outside in children.get(stack.pop(), ()):
            if outside:
                found.append(pid)
            stack.append(pid)  # a member's own children may have left the group
    return found


def _signal_descendants(group: int, sig: int) -> None:
    """Signal every descendant outside the server's ``group``."""
    for pid in _descendants(group):
        try:
            os.kill(pid, sig)
        except OSError:
            pass  # gone since, or one we may not signal (setuid)


def _end_descendants(group: int, wake_r: int, kill_at: float | None, kill_grace: float) -> None:
    """End every descendant left once the server has ended (module docstring), bounded.

    ``kill_at``: when SIGKILL is due for those the sequence has already sent SIGTERM
    (None: it has not).
    """
    rounds = 0
    while _reap()[1]:  # no child left: no descendant either (every orphan is our child)
        now = time.monotonic()
        if kill_at is None:
            _signal_descendants(group, signal.SIGTERM)
            kill_at = now + kill_grace
        elif now >= kill_at:
            if rounds == KILL_ROUNDS:
                return  # they were SIGKILLed and still are not gone (a dying giant, or D state)
            _signal_group(group, signal.SIGKILL)  # a member that outlived the first
            _signal_descendants(group, signal.SIGKILL)
            rounds, kill_at = rounds + 1, now + ROUND_WAIT
        # SIGCHLD (one ended) wakes us, or the next round is due.
        if select.select([wake_r], [], [], max(0.0, kill_at - time.monotonic()))[0]:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass


def _noop(signum: int, frame: object) -> None:
    """A handled signal: the wake-up fd tells the loop (and exec resets it in the server)."""


def _spawn(spec: dict[str, Any], stdin_fd: int, stderr_fd: int) -> int:
    """Start the server in a session and process group of its own; return its pid.

    stdin: ``stdin_fd``; stdout: ours (the host's pipe); stderr: ``stderr_fd``. Every
    other descriptor of ours is close-on-exec except ``stdin_fd``, which is closed.
    SIGPIPE and SIGXFSZ, which Python ignores, are reset as ``subprocess`` resets them.

    Raises:
        OSError: the executable could not be run.
    """
    argv = spec["argv"]
    env = spec["env"]  # exactly this: never what this interpreter added to its own
    try:
        return os.posix_spawn(
            argv[0], argv, env,
            file_actions=[(os.POSIX_SPAWN_DUP2, stdin_fd, 0), (os.POSIX_SPAWN_DUP2, stderr_fd, 2), (os.POSIX_SPAWN_CLOSE, stdin_fd)],
            setsid=True,
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
        )
    except NotImplementedError:  # pragma: no cover - a libc without POSIX_SPAWN_SETSID
        import subprocess

        return subprocess.Popen(argv, stdin=stdin_fd, stdout=1, stderr=stderr_fd, env=env, start_new_session=True).pid


def main(argv: list[str]) -> int:
    spec = _read_spec(int(argv[1]))
    try:
        os.chdir(spec["cwd"])  # the host started us there; the server starts there too
    except OSError as exc:
        _status({"error": f"{exc.strerror or exc}: {spec['cwd']}"})
        return 127
    # Ctrl-C in the host's terminal is for the host; we end when the control pipe closes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # SIGTERM and SIGHUP (a service manager stopping us, a closed terminal) run the
    # shutdown sequence, SIGCHLD says the server ended: the handler does nothing, the
    # wake-up fd tells the loop below. Installed before the server starts, so that no
    # SIGCHLD is missed.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)  # a warning would go to the status channel
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, _noop)
    # Before the server starts: a helper it orphans at once is ours too. Where it cannot
    # be (not Linux), descendants that left the group are not found once orphaned.
    _become_subreaper()
    stdin_fd = spec["stdin_fd"]
    err_r, err_w = os.pipe()
    try:
        pid = _spawn(spec, stdin_fd, err_w)
    except OSError as exc:
        _status({"error": f"{exc.strerror or exc}: {spec['argv'][0]}"})
        return 127
    finally:
        os.close(err_w)
        os.close(stdin_fd)
    # Let go of stdout so that the host sees EOF exactly when the server's side closes.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)

    _status({"pid": pid})

    tail = Tail([os.fsencode(s) for s in spec.get("secrets", ())])
    term_grace = spec.get("term_grace", 2.0)
    kill_grace = spec.get("kill_grace", 2.0)
    watched = [0, wake_r, err_r]
    told = False
    stage = 0  # 0 running; 1 closing (EOF given); 2 SIGTERM sent; 3 SIGKILL sent
    deadline: float | None = None
    kill_at: float | None = None  # SIGTERM sent to every descendant: SIGKILL due then
    status = None
    while status is None:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready = select.select(watched, [], [], timeout)[0]
        closing = False
        if err_r in ready:
            chunk = os.read(err_r, 65536)
            if chunk:
                tail.add(chunk)
            else:
                watched.remove(err_r)
        if 0 in ready and not os.read(0, 4096):
            watched.remove(0)
            closing = True  # the control pipe closed: "close"
        if wake_r in ready:
            for number in os.read(wake_r, 256):
                if number in CLOSING_SIGNALS and not told:
                    told = True
                    _status({"closing": CLOSING_SIGNALS[number]})  # the host closes the server's stdin
                    closing = True
        status = _reap(pid)[0]  # adopted orphans too, as they end
        if status is not None:
            break
        if closing and stage == 0:
            # Closing: the host has closed the server's stdin; give it time, then end it.
            stage, deadline = 1, time.monotonic() + term_grace
        elif deadline is not None and time.monotonic() >= deadline:
            if stage == 1:
                _signal_group(pid, signal.SIGTERM)
                _signal_descendants(pid, signal.SIGTERM)  # those that left the group too
                stage, deadline = 2, time.monotonic() + kill_grace
                kill_at = deadline
            else:
                _signal_group(pid, signal.SIGKILL)
                _signal_descendants(pid, signal.SIGKILL)
                stage, deadline = 3, None  # SIGKILL cannot be refused: SIGCHLD comes

    # Helpers the server left in its group (its leader is gone) end with it; those that
    # left the group are told to end. Then the rest of its stderr is theirs no longer
    # to hold open.
    _signal_group(pid, signal.SIGKILL)
    if kill_at is None and _reap()[1]:  # no child left: no descendant either
        _signal_descendants(pid, signal.SIGTERM)
        kill_at = time.monotonic() + kill_grace
    until = time.monotonic() + TAIL_WAIT
    while err_r in watched:
        remaining = until - time.monotonic()
        if remaining <= 0 or not select.select([err_r], [], [], remaining)[0]:
            break
        chunk = os.read(err_r, 65536)
        if not chunk:
            break
        tail.add(chunk)
    _status({"exit": os.waitstatus_to_exitcode(status), "stderr": tail.text()})
    _end_descendants(pid, wake_r, kill_at, kill_grace)
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    os._exit(code)  # everything is written (os.write): skip the interpreter's teardown
