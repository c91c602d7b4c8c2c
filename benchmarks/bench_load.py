#!/usr/bin/env python3
"""The load run of issue 23: one host, 8 callers, 8 servers, kill -9s, crashes and HTTP outages.

One process embeds albedo_actors as docs/python-api.rst says: an SQLite store, a
``Runtime`` (registry, preparer, token refresher, one session composer) and its binding,
``mcp.call("server/echo", text=...)``. It has 8 servers:

``s1`` .. ``s6``
    stdio: ``tests/servers/fault_server.py`` (the demo server plus the ``die`` tool, which
    exits the server without answering), each in a working directory of its own (which
    is how the chaos thread finds its process).
``web``
    streamable HTTP: ``benchmarks/_fast_http_server.py`` on a loopback port below the
    ephemeral range, which the outages stop and start again on the same port.
``auth``
    streamable HTTP behind the real loopback OAuth authorization server
    (``tests/servers/oauth_server.py --dpop --token-lifetime 30``): signed in once,
    before the runtime starts, with a DPoP-bound token that expires every 30 s, so the
    runtime's refresher renews it about every 30 s under the callers' load.

``--callers`` (8) threads call ``echo`` on a server picked at random, in a loop, for
``--seconds`` (240), and check each answer. A chaos thread, meanwhile, at random times
whose gaps average their periods: kills a running stdio server with SIGKILL
(``--kill-every``, 1.9 s; one kill in four hits the server's launcher instead), calls
``die`` on one (``--crash-every``, 1.9 s), and stops ``web`` for ``--outage-seconds`` (3)
then starts it again on the same port (``--outage-every``, 24 s): about the review's 125
kills, 125 crashes and 10 outages in 240 s. The main thread ends a turn every
``--turn-every`` (5) s as a host does (``turn_started()``, ``TurnEnded``) and prints a
line every ``--every`` (10) s. ``--no-chaos``: the same load without kills, crashes or
outages; ``--seed`` seeds every choice but the port.

Every error must be expected: a ``TimedOut``, ``Unavailable`` or ``UnknownOutcome`` (the
classes exactly, not their subclasses) of a call that overlapped a disturbance of its
server, from the moment the kill, crash or outage began until the end of the first good
call on that server that started after it ended. Anything else (another class, an error
with no disturbance, a wrong answer, an exception outside albedo's tree, a ``die`` that
answered, a failed turn, an ERROR logged by albedo_actors) is listed and makes the exit
status 1, as do a server that does not answer after the chaos, a bad OAuth server count,
and threads, descriptors or child processes that do not return to their start once the
runtime, the store and the servers are closed. albedo_actors' log records are counted,
not printed.

Memory: each line shows RSS, ``sys.getallocatedblocks()`` (live Python blocks) and, from
glibc's ``mallinfo2()``, the bytes malloc has handed out and holds free. The end shows the
RSS over the run (plateau: the slope of its second half), where it is by kind of mapping
(``/proc/self/smaps``: glibc's main heap, its per-thread arenas, thread stacks, other
anonymous memory), the object types that grew in each half, and RSS before and after
``malloc_trim(0)`` (what drops was free memory glibc kept). ``--tracemalloc`` adds
Python-level traces (slower) and their growth per source line in each half;
``--arena-max N`` limits glibc to N arenas, as ``MALLOC_ARENA_MAX=N`` does.

Run: ``.venv/bin/python benchmarks/bench_load.py [--seconds 240] [--callers 8] [--seed 23]
[--no-chaos] [--tracemalloc] [--arena-max 2]``. Linux with glibc (``/proc``,
``mallinfo2``, ``pidfd_open``).
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import gc
import logging
import math
import os
import random
import re
import select
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
import urllib.parse
from dataclasses import dataclass
from typing import Any

import _common  # benchmarks/_common.py; it also puts the checkout first on sys.path

sys.path.insert(0, os.path.join(_common.REPO, "tests"))
from helpers import FAULT_SERVER, OAuthServer, _ServerProcess, text_of  # noqa: E402  (tests/helpers.py)

import albedo_actors  # noqa: E402
from albedo_actors.actors.composer import TurnEnded  # noqa: E402
from albedo_actors.auth.signin import SignIn, follow_redirect_agent  # noqa: E402
from albedo_actors.config import McpConfig, OAuthSettings, ServerConfig  # noqa: E402
from albedo_actors.errors import AlbedoError  # noqa: E402
from albedo_actors.runtime import Runtime  # noqa: E402
from albedo_actors.store import open_store  # noqa: E402

FAST_SERVER = os.path.join(_common.HERE, "_fast_http_server.py")
STDIO = tuple(f"s{n}" for n in range(1, 7))
WEB, AUTH = "web", "auth"
SERVERS = (*STDIO, WEB, AUTH)
EXPECTED = ("TimedOut", "Unavailable", "UnknownOutcome")  # the classes exactly
CALL_TIMEOUT_MS = 10_000
STARTUP_TIMEOUT_MS = 10_000
TOKEN_LIFETIME = 30
KEEP_UNEXPECTED = 50  # the first so many unexpected errors are listed whole
MIB = 1024 * 1024
M_ARENA_MAX = -8  # mallopt(3): the most arenas glibc makes (MALLOC_ARENA_MAX)


# -- what the process holds -------------------------------------------------------------


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, state) of every process now."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue  # it just ended
            table[int(entry)] = (int(fields[1]), fields[0].decode())
    return table


def descendants(table: dict[int, tuple[int, str]] | None = None) -> dict[int, str]:
    """Every process below this one (children, their children, ...): pid -> state."""
    table = _processes() if table is None else table
    below: dict[int, list[int]] = collections.defaultdict(list)
    for pid, (ppid, _state) in table.items():
        below[ppid].append(pid)
    found, todo = {}, [os.getpid()]
    while todo:
        for pid in below.get(todo.pop(), ()):
            found[pid] = table[pid][1]
            todo.append(pid)
    return found


def stalls() -> dict[str, float]:
    """Seconds the whole machine has stalled since boot (Linux PSI, ``full``: every task
    waiting at once) on memory and on I/O; {} without PSI. A stall of seconds starves
    every process, servers included: it shows why a call timed out with no disturbance."""
    found = {}
    for resource in ("memory", "io"):
        try:
            with open(f"/proc/pressure/{resource}") as f:
                full = next(line for line in f if line.startswith("full"))
        except (OSError, StopIteration):
            continue
        found[resource] = int(full.rsplit("total=", 1)[1]) / 1e6
    return found


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


try:
    _LIBC: Any = ctypes.CDLL("libc.so.6")
    _LIBC.mallinfo2.restype = _Mallinfo2
    _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
    _LIBC.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
except (OSError, AttributeError):  # not glibc, or older than 2.33
    _LIBC = None


@dataclass(frozen=True)
class Probe:
    """What the process holds at one moment."""

    at: float
    threads: int  # OS threads (/proc/self/task)
    py_threads: int  # threading.active_count()
    fds: int
    children: int  # every process below this one, zombies included
    zombies: int
    rss: float  # MiB
    anon: float  # MiB of it anonymous (RssAnon): what the kernel cannot drop and read again
    blocks: int  # sys.getallocatedblocks()
    malloc_used: float  # MiB malloc handed out (mallinfo2 uordblks + hblkhd), -1 without glibc
    malloc_free: float  # MiB free inside malloc's heaps (fordblks)

    @classmethod
    def take(cls) -> Probe:
        below = descendants()
        with open("/proc/self/status") as f:
            status = {line.split(":", 1)[0]: line.split()[1] for line in f if line.startswith(("VmRSS:", "RssAnon:"))}
        rss, anon = int(status["VmRSS"]) / 1024, int(status["RssAnon"]) / 1024
        used = free = -1.0
        if _LIBC is not None:
            info = _LIBC.mallinfo2()
            used, free = (info.uordblks + info.hblkhd) / MIB, info.fordblks / MIB
        return cls(time.monotonic(), len(os.listdir("/proc/self/task")), threading.active_count(),
                   len(os.listdir("/proc/self/fd")) - 1,  # less the listing's own descriptor
                   len(below), sum(1 for s in below.values() if s == "Z"), rss, anon, sys.getallocatedblocks(), used, free)

    def line(self) -> str:
        zombies = f" ({self.zombies} zombie)" if self.zombies else ""
        heap = f" malloc {self.malloc_used:.1f} used {self.malloc_free:.1f} free" if self.malloc_used >= 0 else ""
        return (f"threads {self.threads} fds {self.fds} children {self.children}{zombies} "
                f"rss {self.rss:.1f} MiB (anon {self.anon:.1f}) blocks {self.blocks}{heap}")


ARENA_HEAP = 64 * MIB  # glibc's HEAP_MAX_SIZE on 64-bit: a thread arena's heap is aligned to it


def rss_map() -> dict[str, float]:
    """Where this process's RSS is (MiB), from /proc/self/smaps: ``files`` (mapped
    libraries), ``heap`` (glibc's main arena, brk), ``arenas`` (the heaps of glibc's
    per-thread arenas: anonymous, 64 MiB-aligned), ``stacks`` (anonymous right after a
    guard page: thread stacks, which glibc caches after a thread ends) and ``anon`` (the
    rest: Python's obmalloc arenas, malloc's large mmaps)."""
    # glibc: malloc/arena.c (heaps of HEAP_MAX_SIZE, aligned), nptl/allocatestack.c (the
    # guard below the stack, and the cache of the stacks of ended threads).
    rss: collections.Counter[str] = collections.Counter()
    previous_guard_end = -1
    kind = ""
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5:  # a mapping's first line
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                perms, path = head[1], head[5] if len(head) > 5 else ""
                if path == "[heap]":
                    kind = "heap"
                elif path:
                    kind = "files"
                elif perms.startswith("---"):
                    kind = "guard"
                elif lo % ARENA_HEAP == 0:
                    kind = "arenas"
                elif lo == previous_guard_end:
                    kind = "stacks"
                else:
                    kind = "anon"
                # a thread stack's guard is a page or a few (an arena heap's unused tail is MiBs)
                previous_guard_end = hi if kind == "guard" and hi - lo <= 64 * 1024 else -1
            elif head[0] == "Rss:":
                rss[kind] += int(head[1])
    return {k: v / 1024 for k, v in rss.items() if k != "guard"}


def map_line(before: dict[str, float], after: dict[str, float]) -> str:
    return ", ".join(f"{k} {before.get(k, 0):.1f} -> {after.get(k, 0):.1f}"
                     for k in ("files", "heap", "arenas", "stacks", "anon"))


def fd_kinds() -> collections.Counter[str]:
    """This process's descriptors by kind: socket, pipe, anon_inode:[...], or a file's name."""
    kinds: collections.Counter[str] = collections.Counter()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own descriptor, closed by now
        kinds[target.split(":[", 1)[0] if ":[" in target else target if target.startswith("anon_inode:") else os.path.basename(target)] += 1
    return kinds


def thread_kinds() -> collections.Counter[str]:
    """Python threads by name, numbers left out (mcp-stdio-s1 -> mcp-stdio-s)."""
    return collections.Counter(t.name.rstrip("0123456789").rstrip("-_") or "?" for t in threading.enumerate())


def kinds_line(counts: collections.Counter[str]) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


class LogTally(logging.Handler):
    """albedo_actors' log records, counted by level and message (a host would log them;
    here the connection-lost warnings of the chaos would fill the screen). An ERROR is
    the library's own bug report (``logger.exception``): the run lists it and fails."""

    def __init__(self, tally: Tally) -> None:
        super().__init__(logging.INFO)
        self.tally = tally
        self.counts: collections.Counter[str] = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[f"{record.levelname} {str(record.msg)[:60]}"] += 1
        if record.levelno >= logging.ERROR:
            self.tally.wrong(f"logged {record.levelname}: {record.getMessage()[:300]}")


# -- disturbances and the tally ---------------------------------------------------------


_NUMBERS = re.compile(r"\d+(\.\d+)?")


class Histogram:
    """Latencies in log-spaced bins (8 a doubling, from 1 us): quantiles within 9 %, in the
    same few hundred integers however many calls, so the benchmark's own memory does not
    grow with the calls it counts."""

    BINS = 8 * 28  # 1 us .. 2^28 us (4.5 minutes)

    def __init__(self) -> None:
        self.bins = [0] * self.BINS
        self.count = 0

    def add(self, seconds: float) -> None:
        self.bins[min(self.BINS - 1, max(0, int(8 * math.log2(max(seconds, 1e-6) * 1e6))))] += 1
        self.count += 1

    def quantile(self, q: float) -> float:
        """The upper edge of the bin holding the ``q`` quantile, in seconds."""
        rank, seen = q * self.count, 0
        for i, n in enumerate(self.bins):
            seen += n
            if seen >= rank and n:
                return 2 ** ((i + 1) / 8) / 1e6
        return 0.0


@dataclass
class Disturbance:
    """A kill, crash or outage of one server: from ``start`` until the first good call on
    it that started after ``end`` (``recovered``, the end of that call)."""

    kind: str
    start: float
    end: float | None = None
    recovered: float | None = None


class Tally:
    """Good calls, errors (expected or not) and disturbances, for every thread. The
    disturbances kept per server are the last 64: older ones ended long before any call
    still running began (a call lasts at most its timeouts)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.began = time.monotonic()  # the run's start, for the times in the lists
        self.good = 0
        self.good_by_server: collections.Counter[str] = collections.Counter()
        self.latencies = Histogram()  # of the good calls since the last line
        self.all_latencies = Histogram()  # of every good call
        self.errors: collections.Counter[str] = collections.Counter()  # class -> count
        self.errors_by_server: collections.Counter[str] = collections.Counter()
        self.unexpected: list[str] = []
        self.unexpected_count = 0
        self.disturbances = {name: collections.deque[Disturbance](maxlen=64) for name in SERVERS}
        self.chaos: collections.Counter[str] = collections.Counter()
        self.recoveries: dict[str, list[float]] = collections.defaultdict(list)  # kind -> s from end to recovered
        self.slowest: dict[str, tuple[float, str, float]] = {}  # kind -> (s, server, when) of the slowest recovery
        self.error_kinds: collections.Counter[str] = collections.Counter()  # class and message, numbers left out

    def begin(self, server: str, kind: str) -> Disturbance:
        d = Disturbance(kind, time.monotonic())
        with self.lock:
            self.disturbances[server].append(d)
        return d

    def finish(self, d: Disturbance, counted: str | None = None) -> None:
        with self.lock:
            d.end = time.monotonic()
            if counted:
                self.chaos[counted] += 1

    def good_call(self, server: str, t0: float, t1: float) -> None:
        with self.lock:
            self.good += 1
            self.good_by_server[server] += 1
            self.latencies.add(t1 - t0)
            self.all_latencies.add(t1 - t0)
            for d in self.disturbances[server]:
                if d.recovered is None and d.end is not None and d.end <= t0:
                    d.recovered = t1
                    self.recoveries[d.kind].append(t1 - d.end)
                    if t1 - d.end > self.slowest.get(d.kind, (0.0, "", 0.0))[0]:
                        self.slowest[d.kind] = (t1 - d.end, server, d.start - self.began)

    def error(self, server: str, exc: BaseException, t0: float, t1: float, what: str = "echo") -> None:
        name = type(exc).__name__
        kind = f"{name}: " + _NUMBERS.sub("N", str(exc).replace(f"server {server!r}: ", "", 1))[:100]
        with self.lock:
            self.errors[name] += 1
            if kind in self.error_kinds or len(self.error_kinds) < 100:
                self.error_kinds[kind] += 1
            self.errors_by_server[server] += 1
            overlaps = any(d.start <= t1 and (d.recovered is None or t0 <= d.recovered) for d in self.disturbances[server])
            if name in EXPECTED and overlaps:
                return
            why = "no disturbance of the server overlapped the call" if name in EXPECTED else "not an expected class"
            self._unexpected(f"{server}/{what}: {name}: {exc} ({why})")

    def wrong(self, what: str) -> None:
        with self.lock:
            self.errors["WrongAnswer"] += 1
            self._unexpected(what)

    def _unexpected(self, what: str) -> None:
        self.unexpected_count += 1
        if len(self.unexpected) < KEEP_UNEXPECTED:
            self.unexpected.append(f"[{time.monotonic() - self.began:7.1f}s] {what}")

    def expected_errors(self) -> int:
        return sum(self.errors.values()) - self.unexpected_count

    def take_latencies(self) -> Histogram:
        with self.lock:
            taken, self.latencies = self.latencies, Histogram()
        return taken

    def unrecovered(self) -> list[str]:
        with self.lock:
            return [f"{server} ({d.kind} at {d.start - self.began:.1f}s)" for server, ds in self.disturbances.items()
                    for d in ds if d.recovered is None]


# -- the servers ---------------------------------------------------------------------------


class WebServer(_ServerProcess):
    """``_fast_http_server.py`` on a loopback port; it starts again on the same one.

    The port is below the kernel's ephemeral range, so no other program's outgoing
    connection or ``bind(0)`` takes it while the server is down; only an explicit bind
    of that very port could."""

    WHAT = "the HTTP server"

    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self.port = _port_below_ephemeral(rng)

    def command(self) -> list[str]:
        return [sys.executable, FAST_SERVER, "--port", str(self.port)]

    def start(self) -> str:
        url = super().start()
        self.port = urllib.parse.urlsplit(url).port or 0
        return url


def _port_below_ephemeral(rng: random.Random) -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(100):
        port = rng.randrange(max(1024, low - 12000), low)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue  # in use
    raise RuntimeError(f"no free port below {low} on 127.0.0.1")


def stdio_server(root: str, name: str) -> ServerConfig:
    cwd = os.path.join(root, name)
    os.mkdir(cwd)
    return ServerConfig(name=name, type="stdio", command=sys.executable, args=(FAULT_SERVER,), cwd=cwd,
                        startup_timeout_ms=STARTUP_TIMEOUT_MS, call_timeout_ms=CALL_TIMEOUT_MS)


def server_process(root: str, name: str) -> tuple[int, int] | None:
    """(server pid, launcher pid) of stdio server ``name`` while it runs, else None."""
    table = _processes()
    cwd = os.path.join(root, name)
    needle = FAULT_SERVER.encode()
    for pid, state in descendants(table).items():
        if state == "Z":
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if needle not in f.read():
                    continue
            if os.readlink(f"/proc/{pid}/cwd") != cwd:
                continue
        except OSError:
            continue  # it just ended
        return pid, table[pid][0]
    return None


# -- the threads -----------------------------------------------------------------------------


def caller(index: int, mcp: Any, tally: Tally, stop: threading.Event, seed: int) -> None:
    rng = random.Random(f"{seed}/caller/{index}")
    n = 0
    while not stop.is_set():
        server = rng.choice(SERVERS)
        n += 1
        text = f"c{index}.{n}"
        t0 = time.monotonic()
        try:
            result = mcp.call(f"{server}/echo", text=text)
        except AlbedoError as exc:
            tally.error(server, exc, t0, time.monotonic())
            continue
        except Exception as exc:  # noqa: BLE001 - outside albedo's tree: a bug, listed
            tally.wrong(f"{server}/echo: {type(exc).__name__} outside albedo's errors: {exc}")
            continue
        t1 = time.monotonic()
        answer = text_of(result.as_dict()) if not result.isError else None
        if answer != text:
            tally.wrong(f"{server}/echo answered {answer!r} (isError {result.isError}) to {text!r}")
        else:
            tally.good_call(server, t0, t1)


class Chaos:
    """Kills, crashes and outages at random times whose gaps average their periods (drawn
    0.5 .. 1.5 times the period from the previous time, so one that had to wait for an
    outage catches up and the counts follow the periods)."""

    def __init__(self, opts: argparse.Namespace, root: str, mcp: Any, web: WebServer, tally: Tally,
                 stop: threading.Event) -> None:
        self.opts, self.root, self.mcp, self.web, self.tally, self.stop = opts, root, mcp, web, tally, stop
        self.rng = random.Random(f"{opts.seed}/chaos")
        self.failure: str | None = None  # the web server could not start again: the run fails

    def run(self) -> None:
        periods = {"kill": self.opts.kill_every, "crash": self.opts.crash_every, "outage": self.opts.outage_every}
        now = time.monotonic()
        due = {kind: now + self.rng.uniform(0.5, 1.5) * period for kind, period in periods.items() if period > 0}
        while due and not self.stop.is_set():
            kind = min(due, key=due.__getitem__)
            if self.stop.wait(max(0.0, due[kind] - time.monotonic())):  # the chaos schedule itself
                break
            getattr(self, kind)()
            due[kind] += self.rng.uniform(0.5, 1.5) * periods[kind]
            if self.failure:
                break

    def kill(self) -> None:
        launcher = self.rng.random() < 0.25
        for server in self.rng.sample(STDIO, len(STDIO)):  # the first one that runs now
            found = server_process(self.root, server)
            if found is None:
                continue  # between a kill and its next dial
            d = self.tally.begin(server, "kill")
            try:
                # The disturbance ends when the server has ended: at once for its own kill,
                # after the host ended its group for its launcher's (docs/configuration.rst: "if the
                # launcher itself dies, the host ends the server's group").
                pidfd = os.pidfd_open(found[0])
            except ProcessLookupError:
                pidfd = None  # it ended meanwhile: a disturbance all the same
            try:
                os.kill(found[1] if launcher else found[0], signal.SIGKILL)
                if pidfd is not None and not select.select([pidfd], [], [], 10.0)[0]:
                    self.tally.wrong(f"{server}: its server process {found[0]} still ran 10 s after its "
                                     f"{'launcher' if launcher else 'own'} kill -9")
            except ProcessLookupError:
                pass
            finally:
                if pidfd is not None:
                    os.close(pidfd)
            self.tally.finish(d, "kill launcher" if launcher else "kill server")
            return
        with self.tally.lock:
            self.tally.chaos["kill skipped (no stdio server running)"] += 1

    def crash(self) -> None:
        server = self.rng.choice(STDIO)
        d = self.tally.begin(server, "crash")
        t0 = time.monotonic()
        try:
            result = self.mcp.call(f"{server}/die")
        except AlbedoError as exc:
            self.tally.error(server, exc, t0, time.monotonic(), what="die")
        except Exception as exc:  # noqa: BLE001 - outside albedo's tree: a bug, listed
            self.tally.wrong(f"{server}/die: {type(exc).__name__} outside albedo's errors: {exc}")
        else:
            self.tally.wrong(f"{server}/die answered: {result!r}")
        self.tally.finish(d, "crash")

    def outage(self) -> None:
        d = self.tally.begin(WEB, "outage")
        self.web.stop()
        self.stop.wait(self.opts.outage_seconds)  # the outage itself; it ends early at the run's end
        try:
            self.web.start()
        except RuntimeError as exc:  # the server failed, or someone bound its port meanwhile
            self.failure = f"the HTTP server did not start again on port {self.web.port}: {exc}"
            self.tally.wrong(self.failure)
            return
        self.tally.finish(d, "outage")


# -- memory: what grew -----------------------------------------------------------------------


def type_counts() -> collections.Counter[str]:
    gc.collect()
    return collections.Counter(type(o).__qualname__ for o in gc.get_objects())


def grown(before: collections.Counter[str], after: collections.Counter[str], top: int = 8) -> str:
    diff = [(name, after[name] - before[name]) for name in after.keys() | before.keys()]
    diff = sorted((d for d in diff if d[1] > 0), key=lambda d: -d[1])[:top]
    total = sum(after.values()) - sum(before.values())
    return f"{total:+d} objects; grew most: " + (", ".join(f"{name} {n:+d}" for name, n in diff) or "none")


def traced_growth(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, top: int = 10) -> list[str]:
    here = os.path.dirname(_common.REPO)
    stats = [s for s in after.compare_to(before, "lineno") if s.size_diff > 0][:top]
    return [f"    {s.size_diff / 1024:+9.1f} KiB {s.count_diff:+7d} blocks  "
            f"{os.path.relpath(s.traceback[0].filename, here) if s.traceback[0].filename.startswith(here) else s.traceback[0].filename}"
            f":{s.traceback[0].lineno}" for s in stats]


def slope_mib_per_min(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB), per minute."""
    if len(samples) < 2:
        return 0.0
    xs, ys = [s[0] for s in samples], [s[1] for s in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return 60 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0


# -- the run -------------------------------------------------------------------------------


def say(line: str) -> None:
    print(line, flush=True)


@dataclass
class Moment:
    """What the process holds at a point of the run, in more detail than a line's Probe."""

    probe: Probe
    fds: collections.Counter[str]
    threads: collections.Counter[str]
    mapping: dict[str, float]

    @classmethod
    def take(cls) -> Moment:
        return cls(Probe.take(), fd_kinds(), thread_kinds(), rss_map())


class LoadRun:
    """One run: the servers and the host (:meth:`open`), the load and the chaos
    (:meth:`run`), every server answering afterwards (:meth:`settle`), the figures
    (:meth:`report`), and everything closed (:meth:`close`), in that order."""

    # set by run() and measure_end()
    start: Moment
    end: Moment
    trimmed: Moment
    before_trim: Probe
    traced: tuple[int, int]
    oauth_stats: dict[str, Any]

    def __init__(self, opts: argparse.Namespace, root: str, tally: Tally, logs: LogTally) -> None:
        self.opts, self.root, self.tally, self.logs = opts, root, tally, logs
        self.stop = threading.Event()
        self.web = WebServer(random.Random())  # not the seed's: the port is this machine's business
        self.web_log = os.path.join(root, "web.stderr")
        self.oauth = OAuthServer("--dpop", "--token-lifetime", str(TOKEN_LIFETIME))
        self.store: Any = None
        self.runtime: Runtime | None = None
        self.mcp: Any = None
        self.threads: list[threading.Thread] = []
        self.chaos: Chaos | None = None
        self.stuck: list[str] = []
        # the figures, filled in as the run goes
        self.probes: list[Probe] = []
        self.samples: list[tuple[float, float, float]] = []  # (s since the start, RSS MiB, anonymous RSS MiB)
        self.loads: list[float] = []
        self.stalled = stalls()  # at the last line
        self.stall_total: collections.Counter[str] = collections.Counter()
        self.counts: list[collections.Counter[str]] = []  # object types at the start, the half, the end
        self.snaps: list[tracemalloc.Snapshot] = []
        self.turns = 0
        self.elapsed = 0.0
        self.cpu = 0.0  # CPU seconds of this process (every thread) during the run
        self.settled: dict[str, float] = {}
        self.settle_bound = 3 * (CALL_TIMEOUT_MS + STARTUP_TIMEOUT_MS) / 1000

    def open(self) -> None:
        """Start the two HTTP servers, sign in to the OAuth one, start the runtime and
        make a few good calls to every server."""
        home = os.path.join(self.root, "home")
        os.mkdir(home)
        self.web.stderr = open(self.web_log, "ab")  # its tracebacks when a connection breaks under it
        self.web.start()
        self.oauth.start()
        self.store = open_store(home)
        auth = ServerConfig(name=AUTH, type="http", url=self.oauth.url, oauth=OAuthSettings(),
                            startup_timeout_ms=STARTUP_TIMEOUT_MS, call_timeout_ms=CALL_TIMEOUT_MS)
        record = SignIn(auth, self.store, environ={}, agent=follow_redirect_agent(), port=0, lifetime=30).run()
        if record.token_type != "DPoP":
            raise RuntimeError(f"signed in with a {record.token_type} token, not a DPoP-bound one")
        web = ServerConfig(name=WEB, type="http", url=self.web.url,
                           startup_timeout_ms=STARTUP_TIMEOUT_MS, call_timeout_ms=CALL_TIMEOUT_MS)
        servers = (*(stdio_server(self.root, name) for name in STDIO), web, auth)
        self.runtime = Runtime(home, self.store, config=McpConfig(home=home, servers=servers), enabled=True)
        self.runtime.start()
        composition = self.runtime.composition()
        if composition.left_out or set(composition.handles) != set(SERVERS):
            raise RuntimeError(f"the session left servers out: {dict(composition.left_out)}")
        self.mcp = self.runtime.mcp()
        for _ in range(6):
            for server in SERVERS:
                if text_of(self.mcp.call(f"{server}/echo", text="warm").as_dict()) != "warm":
                    raise RuntimeError(f"{server} did not echo")

    def run(self) -> None:
        """The callers and the chaos for ``--seconds``; a turn every ``--turn-every`` s and a
        line every ``--every`` s on this thread; then the callers and the chaos stop."""
        opts, tally, runtime = self.opts, self.tally, self.runtime
        assert runtime is not None
        self.start = Moment.take()
        self.counts.append(type_counts())
        if opts.tracemalloc:
            tracemalloc.start(1)
            self.snaps.append(tracemalloc.take_snapshot())
        say(f"start (runtime up, every server answered): {self.start.probe.line()}")
        began = tally.began = time.monotonic()
        cpu0 = time.process_time()
        for i in range(opts.callers):
            self.threads.append(threading.Thread(target=caller, args=(i, self.mcp, tally, self.stop, opts.seed),
                                                 name=f"load-caller-{i}"))
        if not opts.no_chaos:
            self.chaos = Chaos(opts, self.root, self.mcp, self.web, tally, self.stop)
            self.threads.append(threading.Thread(target=self.chaos.run, name="load-chaos"))
        for thread in self.threads:
            thread.start()
        p = self.start.probe
        self.probes, self.samples, self.loads = [p], [(0.0, p.rss, p.anon)], [os.getloadavg()[0]]
        end = began + opts.seconds
        next_line = began + opts.every
        next_turn = began + opts.turn_every if opts.turn_every > 0 else float("inf")
        last_good, last_at = 0, began
        while not self.stop.wait(max(0.0, min(end, next_line, next_turn) - time.monotonic())):  # the lines' and turns' schedule
            now = time.monotonic()
            if now >= end:
                break
            if now >= next_turn:
                next_turn += opts.turn_every
                try:  # docs/python-api.rst: the host tells the composer about turns
                    runtime.composer.turn_started()
                    runtime.request(TurnEnded(), timeout=60)
                    self.turns += 1
                except AlbedoError as exc:
                    tally.wrong(f"a turn failed: {type(exc).__name__}: {exc}")
            if now >= next_line:
                next_line += opts.every
                last_good, last_at = self._line(now, began, last_good, last_at)
        self.stop.set()
        self.elapsed = time.monotonic() - began
        self.cpu = time.process_time() - cpu0
        bound = (CALL_TIMEOUT_MS + STARTUP_TIMEOUT_MS) / 1000 + opts.outage_seconds + 30
        for thread in self.threads:
            thread.join(bound)
        self.stuck = [t.name for t in self.threads if t.is_alive()]
        for name in self.stuck:
            tally.wrong(f"{name} did not end within {bound:g} s of the stop")
        if self.chaos is not None and self.chaos.failure:
            raise RuntimeError(self.chaos.failure)

    def _line(self, now: float, began: float, last_good: int, last_at: float) -> tuple[int, float]:
        tally = self.tally
        probe = Probe.take()
        self.probes.append(probe)
        self.loads.append(os.getloadavg()[0])
        self.samples.append((now - began, probe.rss, probe.anon))
        latencies = tally.take_latencies()
        with tally.lock:
            good, errors, unexpected, done = tally.good, sum(tally.errors.values()), tally.unexpected_count, dict(tally.chaos)
        rate = (good - last_good) / (now - last_at)
        lat = (f"p50 {1000 * latencies.quantile(0.5):.1f} ms p99 {1000 * latencies.quantile(0.99):.0f} ms"
               if latencies.count else "no good call")
        traced = f" traced {tracemalloc.get_traced_memory()[0] / MIB:.1f} MiB" if self.opts.tracemalloc else ""
        stalled = stalls()
        grown = {k: v - self.stalled.get(k, v) for k, v in stalled.items()}
        self.stalled = stalled
        self.stall_total.update(grown)
        stall = "".join(f" | machine stalled {v:.1f} s on {k}" for k, v in grown.items() if v >= 0.1)
        say(f"[{now - began:5.0f}s] good {good} ({rate:.0f}/s, {lat}) errors {errors} ({unexpected} unexpected)"
            f" | kills {done.get('kill server', 0) + done.get('kill launcher', 0)} crashes {done.get('crash', 0)}"
            f" outages {done.get('outage', 0)} | {probe.line()}{traced}{stall}")
        if len(self.counts) == 1 and now - began >= self.opts.seconds / 2:
            self.counts.append(type_counts())
            if self.opts.tracemalloc:
                self.snaps.append(tracemalloc.take_snapshot())
        return good, now

    def settle(self) -> None:
        """After the chaos every server answers again, within the bounds of a dial and a call."""
        if not self.web.running:  # the run ended inside an outage
            self.web.start()
        t_settle = time.monotonic()
        for server in SERVERS:
            while server not in self.settled and time.monotonic() - t_settle < self.settle_bound:
                t0 = time.monotonic()
                try:
                    ok = text_of(self.mcp.call(f"{server}/echo", text="after").as_dict()) == "after"
                except AlbedoError as exc:
                    self.tally.error(server, exc, t0, time.monotonic())
                    continue
                if ok:
                    self.tally.good_call(server, t0, time.monotonic())
                    self.settled[server] = time.monotonic() - t_settle

    def measure_end(self) -> None:
        """The end's figures while the runtime still runs: then malloc_trim(0)."""
        self.end = Moment.take()
        self.counts.append(type_counts())
        if self.opts.tracemalloc:
            self.snaps.append(tracemalloc.take_snapshot())
            self.traced = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        gc.collect()
        self.before_trim = Probe.take()
        self.trimmed = Moment(self.before_trim, self.end.fds, self.end.threads, self.end.mapping)
        if _LIBC is not None:
            _LIBC.malloc_trim(0)
            self.trimmed = Moment.take()
        self.oauth_stats = self.oauth.stats()

    def report(self) -> tuple[int, dict[str, Any]]:
        """Print the summary; the exit status so far and the FIGURES."""
        opts, tally, elapsed = self.opts, self.tally, self.elapsed
        start, end, trimmed = self.start, self.end, self.trimmed
        s, e = start.probe, end.probe
        with tally.lock:
            good, errors, unexpected = tally.good, dict(tally.errors), list(tally.unexpected)
            unexpected_count, done = tally.unexpected_count, dict(tally.chaos)
            recoveries = {k: sorted(v) for k, v in tally.recoveries.items()}
            slowest, error_kinds = dict(tally.slowest), tally.error_kinds.most_common(8)
            by_server = dict(tally.good_by_server)
            overall = tally.all_latencies
        unrecovered = tally.unrecovered()
        not_back = [server for server in SERVERS if server not in self.settled]
        during = self.probes[1:] or self.probes
        say("")
        say(f"summary ({elapsed:.0f} s, {opts.callers} callers; 1-minute load average {min(self.loads):.1f}..{max(self.loads):.1f} "
            f"on {os.cpu_count()} cpus during the run)")
        say(f"  good calls     {good} ({good / elapsed:.1f}/s, latency p50 {1000 * overall.quantile(0.5):.1f} ms, "
            f"p99 {1000 * overall.quantile(0.99):.0f} ms); per server: "
            + " ".join(f"{server} {by_server.get(server, 0)}" for server in SERVERS))
        say(f"  host CPU       {self.cpu:.0f} s in {elapsed:.0f} s ({self.cpu / elapsed:.2f} cpus), "
            f"{good / max(self.cpu, 1e-9):.0f} good calls per CPU-second (steadier than calls/s when others share the cpus)")
        say(f"  errors         {sum(errors.values())}: " + (", ".join(f"{k} {v}" for k, v in sorted(errors.items())) or "none")
            + f"; {sum(errors.values()) - unexpected_count} expected, {unexpected_count} unexpected")
        kills = done.get("kill server", 0) + done.get("kill launcher", 0)
        skipped = done.get("kill skipped (no stdio server running)", 0)
        say(f"  chaos          {kills} kill -9s ({done.get('kill server', 0)} of a server, {done.get('kill launcher', 0)} of its launcher"
            f"{f', {skipped} skipped: none running' if skipped else ''}), {done.get('crash', 0)} crashes, "
            f"{done.get('outage', 0)} HTTP outages of {opts.outage_seconds:g} s; {self.turns} turns")
        for kind, n in error_kinds:
            say(f"    {n:7d}  {kind}")
        for kind, values in sorted(recoveries.items()):
            worst = slowest[kind]
            say(f"  back after {kind:<6} median {1000 * statistics.median(values):.0f} ms, max {1000 * values[-1]:.0f} ms "
                f"({worst[1]}, at {worst[2]:.0f}s; from its end to the end of the first good call that started after it; {len(values)})")
        say(f"  after chaos    every server answered within {max(self.settled.values(), default=0):.1f} s" if not not_back
            else f"  after chaos    NOT BACK within {self.settle_bound:g} s: {', '.join(not_back)}")
        ours = len(self.threads)
        say(f"  threads        {s.threads} at start, {min(p.threads for p in during)}..{max(p.threads for p in during)} "
            f"during (the benchmark's {ours} callers and chaos included), {e.threads} at the end")
        say(f"                 at start: {kinds_line(start.threads)}")
        say(f"                 at the end: {kinds_line(end.threads)}")
        say(f"  descriptors    {s.fds} at start, {min(p.fds for p in during)}..{max(p.fds for p in during)} during, {e.fds} at the end")
        say(f"                 at start: {kinds_line(start.fds)}")
        say(f"                 at the end: {kinds_line(end.fds)}")
        say(f"  children       {s.children} at start, {min(p.children for p in during)}..{max(p.children for p in during)} "
            f"during, {e.children} at the end")
        quarters = [min(self.samples, key=lambda x: abs(x[0] - f * elapsed)) for f in (0.25, 0.5, 0.75)]
        second_half = [x for x in self.samples if x[0] >= elapsed / 2]
        for label, k, first, last in (("rss MiB       ", 1, s.rss, e.rss), ("  of it anon  ", 2, s.anon, e.anon)):
            say(f"  {label} {first:.1f} at start, " + ", ".join(f"{x[k]:.1f} at {x[0]:.0f}s" for x in quarters)
                + f", {last:.1f} at the end; max {max(last, *(x[k] for x in self.samples)):.1f}; "
                f"slope {slope_mib_per_min([(x[0], x[k]) for x in self.samples]):+.2f} MiB/min overall, "
                f"{slope_mib_per_min([(x[0], x[k]) for x in second_half]):+.2f} over the second half")
        if s.malloc_used >= 0:
            say(f"  malloc MiB     in use {s.malloc_used:.1f} -> {e.malloc_used:.1f}, held free {s.malloc_free:.1f} -> {e.malloc_free:.1f}; "
                f"python blocks {s.blocks} -> {e.blocks} ({e.blocks - s.blocks:+d})")
            t = trimmed.probe
            say(f"  malloc_trim(0) rss {self.before_trim.rss:.1f} -> {t.rss:.1f} MiB ({self.before_trim.rss - t.rss:.1f} returned); "
                f"over its start after the trim: rss {t.rss - s.rss:+.1f} MiB, anon {t.anon - s.anon:+.1f} MiB")
        say(f"  rss by mapping start -> end: {map_line(start.mapping, end.mapping)}")
        say(f"                 after the trim: {map_line(start.mapping, trimmed.mapping)}")
        half = self.counts[1] if len(self.counts) > 2 else self.counts[0]
        say(f"  objects        first half {grown(self.counts[0], half)}")
        say(f"                 second half {grown(half, self.counts[-1])}")
        if opts.tracemalloc:
            say(f"  traced         now {self.traced[0] / MIB:.1f} MiB, peak {self.traced[1] / MIB:.1f} MiB; growth by line, first half:")
            for line in traced_growth(self.snaps[0], self.snaps[1] if len(self.snaps) > 2 else self.snaps[-1]):
                say(line)
            if len(self.snaps) > 2:
                say("                 second half:")
                for line in traced_growth(self.snaps[1], self.snaps[2]):
                    say(line)
        logs = self.logs.counts
        say("  machine stall  " + (", ".join(f"{v:.1f} s on {k}" for k, v in self.stall_total.items()) or "not measured (no PSI)")
            + " in all (Linux PSI 'full': every task of the machine waiting at once)")
        say(f"  log records    {sum(logs.values())}: " + ("; ".join(f"{k} ({n})" for k, n in logs.most_common(6)) or "none"))
        stats = self.oauth_stats
        refreshes = stats["token_requests"]["refresh_token"]
        bad_oauth = {k: stats[k] for k in ("bearer_with_bound_token", "dpop_proofs_refused", "dpop_replays") if stats[k]}
        say(f"  oauth server   {refreshes} refreshes (one per {elapsed / max(refreshes, 1):.0f} s), "
            f"{stats['mcp_requests_dpop']} DPoP requests, {stats['mcp_requests_unauthorized']} answered 401, "
            + (f"BAD: {bad_oauth}" if bad_oauth else "no refused proof, replay or bound token sent as Bearer"))
        few_refreshes = refreshes < int(elapsed // TOKEN_LIFETIME) - 1
        for line in unexpected:
            say(f"  UNEXPECTED {line}")
        if unexpected_count > len(unexpected):
            say(f"  UNEXPECTED ... and {unexpected_count - len(unexpected)} more")
        if unrecovered:
            say(f"  NOT RECOVERED: {', '.join(unrecovered)}")
        if few_refreshes:
            say(f"  TOO FEW REFRESHES: {refreshes} in {elapsed:.0f} s of {TOKEN_LIFETIME} s tokens")
        status = int(bool(unexpected_count or not_back or unrecovered or bad_oauth or self.stuck or few_refreshes))
        figures = {"seconds": round(elapsed), "good": good, "good_per_s": round(good / elapsed, 1),
                   "cpu_s": round(self.cpu, 1), "good_per_cpu_s": round(good / max(self.cpu, 1e-9)),
                   "errors": sum(errors.values()), "unexpected": unexpected_count, "kills": kills,
                   "crashes": done.get("crash", 0), "outages": done.get("outage", 0), "refreshes": refreshes,
                   "threads": f"{s.threads}/{max(p.threads for p in during)}/{e.threads}",
                   "fds": f"{s.fds}/{max(p.fds for p in during)}/{e.fds}",
                   "rss_mib": f"{s.rss:.1f}/{e.rss:.1f}/{trimmed.probe.rss:.1f}",
                   "anon_mib": f"{s.anon:.1f}/{e.anon:.1f}/{trimmed.probe.anon:.1f}",
                   "malloc_in_use_mib": f"{s.malloc_used:.1f}/{e.malloc_used:.1f}",
                   "load": f"{min(self.loads):.1f}..{max(self.loads):.1f}"}
        return status, figures

    def close(self) -> None:
        """Stop everything this run started (each step bounded), whatever happened."""
        self.stop.set()
        for thread in self.threads:
            thread.join(60)
        if self.runtime is not None:
            self.runtime.stop()
        if self.store is not None:
            self.store.close()
        self.web.stop()
        self.oauth.stop()
        if self.web.stderr is not None:
            self.web.stderr.close()
            self.web.stderr = None
            with open(self.web_log, "rb") as f:
                failures = collections.Counter(line.split(b":", 1)[0].decode(errors="replace") for line in f
                                               if line[:1].isalpha() and b"Error" in line.split(b":", 1)[0])
            say(f"web server stderr: {kinds_line(failures) or 'nothing'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=240.0, help="how long the callers call (default 240)")
    parser.add_argument("--callers", type=int, default=8, help="caller threads (default 8)")
    parser.add_argument("--seed", type=int, default=23, help="seeds the callers' and the chaos' choices (default 23)")
    parser.add_argument("--no-chaos", action="store_true", help="no kills, crashes or outages: the same load alone")
    parser.add_argument("--kill-every", type=float, default=1.9, help="mean seconds between kill -9s (default 1.9; 0: none)")
    parser.add_argument("--crash-every", type=float, default=1.9, help="mean seconds between die calls (default 1.9; 0: none)")
    parser.add_argument("--outage-every", type=float, default=24.0, help="mean seconds between HTTP outages (default 24; 0: none)")
    parser.add_argument("--outage-seconds", type=float, default=3.0, help="how long the HTTP server is down (default 3)")
    parser.add_argument("--turn-every", type=float, default=5.0, help="seconds between the host's turns (default 5; 0: none)")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between progress lines (default 10)")
    parser.add_argument("--tracemalloc", action="store_true", help="trace Python allocations (slower): growth per line")
    parser.add_argument("--arena-max", type=int, default=0, metavar="N",
                        help="mallopt(M_ARENA_MAX, N) before any thread starts, as MALLOC_ARENA_MAX=N does "
                             "(default: glibc's, 8 per cpu)")
    opts = parser.parse_args()
    if opts.seconds <= 0 or opts.callers < 1 or opts.every <= 0:
        parser.error("--seconds, --callers and --every must be positive")
    if opts.no_chaos:
        opts.kill_every = opts.crash_every = opts.outage_every = 0.0
    if opts.arena_max and (_LIBC is None or _LIBC.mallopt(M_ARENA_MAX, opts.arena_max) != 1):
        parser.error("--arena-max needs glibc's mallopt")

    load = os.getloadavg()
    say(f"bench_load: {opts.callers} callers for {opts.seconds:g} s over {len(STDIO)} stdio and 2 HTTP servers "
        f"(one with OAuth, DPoP and {TOKEN_LIFETIME} s tokens); "
        + ("no chaos" if opts.no_chaos else
           f"kill -9 every {opts.kill_every:g} s, crash every {opts.crash_every:g} s, "
           f"outage of {opts.outage_seconds:g} s every {opts.outage_every:g} s")
        + f"; seed {opts.seed}")
    say(f"python {sys.version.split()[0]}, albedo_actors {albedo_actors.__version__}, {os.cpu_count()} cpus, "
        f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, MALLOC_ARENA_MAX={os.environ.get('MALLOC_ARENA_MAX', 'unset')}"
        f"{f', arena max {opts.arena_max} (mallopt)' if opts.arena_max else ''}"
        f"{', tracemalloc on' if opts.tracemalloc else ''}")
    base = Probe.take()
    base_threads = set(threading.enumerate())
    say(f"start (nothing running): {base.line()}")

    tally = Tally()
    logs = LogTally(tally)
    library = logging.getLogger("albedo_actors")
    library.addHandler(logs)
    library.setLevel(logging.INFO)
    library.propagate = False  # counted, not printed: the chaos makes a warning a second
    status, figures = 1, {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-load-") as root:
            run = LoadRun(opts, root, tally, logs)
            try:
                run.open()
                run.run()
                run.settle()
                run.measure_end()
                status, figures = run.report()
            except Exception as exc:  # noqa: BLE001 - one line, then everything is closed and checked
                say(f"FAILED: {type(exc).__name__}: {exc}")
            finally:
                run.close()
    finally:
        library.removeHandler(logs)
        library.propagate = True
    status = max(status, report_closed(base, base_threads))
    if figures:  # threads, fds: start/max/end of the run; rss, anon: start/end/after malloc_trim
        say("FIGURES " + " ".join(f"{k}={v}" for k, v in figures.items()))
    return status


def report_closed(base: Probe, base_threads: set[threading.Thread], wait: float = 10.0) -> int:
    """Threads, descriptors and child processes back to their start once everything is
    closed (threads joined and processes waited for, within ``wait`` s in all); the exit
    status (1 if not)."""
    deadline = time.monotonic() + wait
    for thread in threading.enumerate():  # an actor's thread may still be returning from its stop
        if thread not in base_threads:
            thread.join(max(0.0, deadline - time.monotonic()))
    for pid in descendants():
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            select.select([pidfd], [], [], max(0.0, deadline - time.monotonic()))
        finally:
            os.close(pidfd)
    probe = Probe.take()
    back = (probe.threads, probe.fds, probe.children) == (base.threads, base.fds, base.children)
    say(f"closed: {probe.line()}")
    if back:
        say(f"closed: threads {probe.threads}, descriptors {probe.fds}, child processes {probe.children}: back to their start")
        return 0
    left = [t.name for t in threading.enumerate() if t not in base_threads]
    say(f"LEFTOVER after close: threads {base.threads} -> {probe.threads} ({', '.join(left) or 'not Python threads'}), "
        f"descriptors {base.fds} -> {probe.fds}, child processes {base.children} -> {probe.children} "
        f"({sorted(descendants())})")
    return 1


if __name__ == "__main__":
    sys.exit(main())
