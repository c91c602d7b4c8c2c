"""Leak checks for the test suite, wired in by conftest.py.

A test must not leave behind running pykka actors, threads, or processes,
and no actor may be told a message it does not handle (pykka logs "Unexpected
message received by ..." for each: an event sent to the wrong receiver).
``snapshot()`` records what exists before a test; ``check(before)`` waits a
bounded time for anything new to finish, then returns a description of each
leftover (and stops, or SIGKILLs, it so later tests start clean) and of each
unexpected message logged since.

Processes: the pytest process is made a child subreaper
(``prctl(PR_SET_CHILD_SUBREAPER)``), so a grandchild whose parent exits is
re-parented to pytest instead of init and still shows up as a descendant.
Descendants are found by walking the ppid links in /proc/*/stat.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field

PR_SET_CHILD_SUBREAPER = 36

# How long new threads get to finish after the test (bounded joins).
THREAD_GRACE_S = 2.0
# How long new processes get to exit after the test. The client gives a stdio
# server up to 4 s to exit before killing it; this leaves room for that.
PROCESS_GRACE_S = 6.0
# How long killed processes get to disappear after SIGKILL.
KILL_GRACE_S = 2.0
ACTOR_STOP_TIMEOUT_S = 2.0
POLL_S = 0.05


def become_subreaper() -> bool:
    """Make this process the child subreaper of its descendants (Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


# --- processes -------------------------------------------------------------


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    state: str  # R, S, D, Z (zombie), ...
    start: int  # start time in clock ticks after boot; (pid, start) is unique

    @property
    def key(self) -> tuple[int, int]:
        return (self.pid, self.start)


def _stat(pid: int) -> Proc | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain ") ".
    rest = data[data.rindex(b")") + 2 :].split()
    # rest[0] is field 3 (state), rest[1] field 4 (ppid), rest[19] field 22.
    return Proc(pid, int(rest[1]), rest[0].decode(), int(rest[19]))


def descendants(root: int | None = None) -> dict[int, Proc]:
    """All live-or-zombie descendants of ``root`` (default: this process)."""
    root = os.getpid() if root is None else root
    children: dict[int, list[Proc]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return {}
    for name in names:
        if name.isdigit():
            proc = _stat(int(name))
            if proc is not None:
                children.setdefault(proc.ppid, []).append(proc)
    found: dict[int, Proc] = {}
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child.pid not in found:
                found[child.pid] = child
                stack.append(child.pid)
    return found


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().rstrip(b"\0").split(b"\0")
        text = " ".join(a.decode(errors="replace") for a in argv)
        if text:
            return text
        with open(f"/proc/{pid}/comm", "rb") as f:
            return "[" + f.read().decode(errors="replace").strip() + "]"
    except OSError:
        return "?"


def reap_zombies(before: set[tuple[int, int]]) -> None:
    """Reap new zombie children of this process.

    Only zombies that did not exist before are reaped, each by its own pid:
    ``waitpid(-1)`` would also take the exit status of children that a
    longer-lived fixture's ``Popen`` (or asyncio's child watcher) is waiting
    for. Orphans re-parented to us through the subreaper land here.
    """
    me = os.getpid()
    for proc in descendants().values():
        if proc.ppid == me and proc.state == "Z" and proc.key not in before:
            try:
                os.waitpid(proc.pid, os.WNOHANG)
            except ChildProcessError:
                pass


def _new_live(before: set[tuple[int, int]]) -> dict[int, Proc]:
    return {
        pid: proc
        for pid, proc in descendants().items()
        if proc.key not in before and proc.state not in ("Z", "X", "x")
    }


def check_processes(before: set[tuple[int, int]]) -> list[str]:
    deadline = time.monotonic() + PROCESS_GRACE_S
    while True:
        reap_zombies(before)
        live = _new_live(before)
        if not live or time.monotonic() >= deadline:
            break
        time.sleep(POLL_S)
    problems = [
        f"process still running: pid {pid} (parent {proc.ppid}): {command_line(pid)}"
        for pid, proc in sorted(live.items())
    ]
    for pid, proc in live.items():
        now = _stat(pid)
        if now is not None and now.key == proc.key:  # not a reused pid
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + KILL_GRACE_S
    while live and time.monotonic() < deadline:
        time.sleep(POLL_S)
        reap_zombies(before)
        live = _new_live(before)
    return problems


# --- threads ---------------------------------------------------------------


def _describe_thread(thread: threading.Thread) -> str:
    kind = "daemon" if thread.daemon else "non-daemon"
    target = getattr(thread, "_target", None)
    where = getattr(target, "__qualname__", None) or type(thread).__qualname__
    return f"thread still running: {thread.name!r} ({kind}, {where})"


def check_threads(before: set[threading.Thread]) -> list[str]:
    me = threading.current_thread()

    def new() -> list[threading.Thread]:
        return [
            t
            for t in threading.enumerate()
            # A _DummyThread (a thread not started by `threading`) can be
            # neither joined nor seen to end, so it is not checked.
            if t not in before and t is not me and not isinstance(t, threading._DummyThread)
        ]

    # Short bounded joins, re-listing in between, until nothing new is
    # alive or the grace period is over.
    deadline = time.monotonic() + THREAD_GRACE_S
    while True:
        alive = [t for t in new() if t.is_alive()]
        remaining = deadline - time.monotonic()
        if not alive or remaining <= 0:
            break
        alive[0].join(min(remaining, POLL_S))
    return [_describe_thread(t) for t in new() if t.is_alive()]


# --- pykka actors ----------------------------------------------------------


def _actor_refs() -> list:
    import pykka

    return pykka.ActorRegistry.get_all()


def check_actors(before: set[str]) -> list[str]:
    """Report, then stop, actors started since ``before`` (newest first)."""
    problems = []
    for ref in reversed([r for r in _actor_refs() if r.actor_urn not in before]):
        problems.append(f"pykka actor still running: {ref}")
        try:
            ref.stop(block=True, timeout=ACTOR_STOP_TIMEOUT_S)
        except Exception as exc:  # pykka.Timeout, or an on_stop that raised
            problems.append(f"pykka actor {ref} did not stop: {exc!r}")
    return problems


# --- messages nobody handles ------------------------------------------------


class UnexpectedMessages(logging.Handler):
    """Records pykka's "Unexpected message received by <actor>: <message>" warnings
    (pykka's default ``on_receive`` logs one for a message its actor does not handle)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad record is not ours to judge
            return
        if text.startswith("Unexpected message"):
            self.seen.append(text if len(text) <= 300 else text[:300] + "...")


_unexpected = UnexpectedMessages()


def watch_messages() -> None:
    """Listen on the "pykka" logger (once); records propagate to it from its children."""
    logger = logging.getLogger("pykka")
    if _unexpected not in logger.handlers:
        logger.addHandler(_unexpected)


def check_messages(before: int) -> list[str]:
    return [f"pykka logged: {text}" for text in _unexpected.seen[before:]]


# --- together --------------------------------------------------------------


@dataclass
class Snapshot:
    actors: set[str] = field(default_factory=set)
    threads: set[threading.Thread] = field(default_factory=set)
    processes: set[tuple[int, int]] = field(default_factory=set)
    messages: int = 0  # unexpected messages logged before


def snapshot() -> Snapshot:
    return Snapshot(
        actors={ref.actor_urn for ref in _actor_refs()},
        threads=set(threading.enumerate()),
        processes={proc.key for proc in descendants().values()},
        messages=len(_unexpected.seen),
    )


def check(before: Snapshot) -> list[str]:
    """Describe (and clean up) what was started since ``before`` and is
    still running. Actors go first: stopping them ends their threads (and
    lets them handle what they were told before, so unexpected messages come last)."""
    return (
        check_actors(before.actors)
        + check_threads(before.threads)
        + check_processes(before.processes)
        + check_messages(before.messages)
    )
