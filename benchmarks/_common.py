"""What the benchmarks share: figures, the round driver, CPU accounting, options, the report.

``bench_stdio.py`` and ``bench_http.py`` each define their three clients (``ours``,
``sdk``, ``raw``) with the same async face::

    name: str
    era: str                       # set by the SDK bench when it opens
    async open() -> None           # connect, up to the first tools/list answered
    async describe() -> str        # one checked echo call; returns "era version"
    async latency(n) -> list[int]  # n sequential calls, ns each
    async throughput(total, inflight) -> float  # calls/s
    async close() -> None

and hand them to :func:`run_rounds`; the blocking ones simply block the event loop,
which is idle meanwhile. :class:`OursBench` and :class:`SdkBench` serve both
benchmarks; only their configuration or transport differs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import platform
import statistics
import sys
import threading
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# The package measured: this checkout's, or another's for a benchmark's --baseline child.
PACKAGE = os.path.abspath(os.environ.get("ALBEDO_BENCH_PACKAGE") or REPO)
if PACKAGE not in sys.path:
    sys.path.insert(0, PACKAGE)  # run from a checkout even when the package is not installed

import albedo_actors  # noqa: E402
from _plain import shares, threaded_throughput  # noqa: E402,F401 - the benchmarks import them from here

ARGS = {"text": "x"}

MODERN_VERSION = "2026-07-28"
LEGACY_VERSION = "2025-11-25"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
    "io.modelcontextprotocol/clientInfo": {"name": "raw-bench", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
CLIENTS = ("ours", "sdk", "raw")


def check_echo(result: Any) -> None:
    text = result["content"][0]["text"] if isinstance(result, dict) else result.content[0].text
    if text != ARGS["text"]:
        raise RuntimeError(f"echo answered {text!r}")


class Figures:
    """What one client measured."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.era = "?"
        self.latencies_ns: list[int] = []  # every timed call of every round
        self.round_medians: list[float] = []  # µs
        self.throughputs: list[float] = []  # calls/s, one per round
        self.connects: list[float] = []  # s
        self.stops: list[float] = []  # s
        self.client_cpu_ns = 0  # CPU used during the timed sequential calls: this process (all threads)
        self.server_cpu_ns = 0  # ... and the server process
        self.cpu_calls = 0

    def cpu_us(self, ns: int) -> str:
        return f"{ns / self.cpu_calls / 1000:.1f}" if self.cpu_calls else "n/a"

    def median_us(self) -> float:
        return statistics.median(self.latencies_ns) / 1000

    def p99_us(self) -> float:
        ordered = sorted(self.latencies_ns)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] / 1000

    @property
    def throughput(self) -> float:
        return statistics.median(self.throughputs)

    def connect_ms(self) -> float:
        return statistics.median(self.connects) * 1000

    def stop_ms(self) -> float:
        return statistics.median(self.stops) * 1000


def timed_calls(call: Callable[[], Any], n: int) -> list[int]:
    clock = time.perf_counter_ns
    out = []
    for _ in range(n):
        t0 = clock()
        call()
        out.append(clock() - t0)
    return out


async def sdk_negotiate(session: Any) -> str:
    """Open an SDK ClientSession the way ``mcp.Client(mode="auto")`` does."""
    from mcp.shared.exceptions import MCPError

    try:
        await session.discover()
    except MCPError:
        await session.initialize()
    era = "modern" if session.discover_result is not None else "legacy"
    return f"{era} {session.protocol_version}"


# -- the clients shared by the benchmarks ----------------------------------------------------


class OursBench:
    """``albedo_actors``: ServerHandle.start + connect(), blocking call_tool from any thread."""

    name = "ours"

    def __init__(self, config: Any, home: str) -> None:
        self.config = config
        self.home = home
        self.handle: Any = None

    async def open(self) -> None:
        from albedo_actors.actors.client import ServerHandle

        self.handle = ServerHandle.start(self.config, self.home)
        self.handle.connect()

    async def describe(self) -> str:
        status = self.handle.status()
        check_echo(self.call())
        return f"{status['era']} {status['version']}"

    def call(self) -> Any:
        return self.handle.call_tool("echo", ARGS)

    async def latency(self, n: int) -> list[int]:
        return timed_calls(self.call, n)

    async def throughput(self, total: int, inflight: int) -> float:
        """``inflight`` threads, each calling in a loop, ``total`` calls in all."""
        return threaded_throughput([self.call] * inflight, total)

    async def close(self) -> None:
        if self.handle is not None:
            self.handle.stop()
            self.handle = None


class SdkBench:
    """The official SDK: a transport + ClientSession, opened like Client(mode="auto").

    ``transport`` makes the SDK transport's async context manager (``stdio_client(...)``,
    ``streamable_http_client(url)``), which yields the read and write streams.
    """

    name = "sdk"

    def __init__(self, transport: Callable[[], Any]) -> None:
        self.transport = transport
        self.stack: contextlib.AsyncExitStack | None = None
        self.session: Any = None
        self.era = "?"

    async def open(self) -> None:
        from mcp.client.session import ClientSession

        self.stack = contextlib.AsyncExitStack()
        read, write = await self.stack.enter_async_context(self.transport())
        self.session = await self.stack.enter_async_context(ClientSession(read, write))
        self.era = await sdk_negotiate(self.session)
        await self.session.list_tools()

    async def describe(self) -> str:
        check_echo(await self.session.call_tool("echo", ARGS))
        return self.era

    async def latency(self, n: int) -> list[int]:
        clock = time.perf_counter_ns
        call_tool = self.session.call_tool
        out = []
        for _ in range(n):
            t0 = clock()
            await call_tool("echo", ARGS)
            out.append(clock() - t0)
        return out

    async def throughput(self, total: int, inflight: int) -> float:
        """``inflight`` asyncio tasks, each calling in a loop, ``total`` calls in all."""
        call_tool = self.session.call_tool

        async def worker(n: int) -> None:
            for _ in range(n):
                await call_tool("echo", ARGS)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(n) for n in shares(total, inflight)))
        return total / (time.perf_counter() - t0)

    async def close(self) -> None:
        if self.stack is not None:
            stack, self.stack, self.session = self.stack, None, None
            await stack.aclose()


# -- the rounds ---------------------------------------------------------------------------


async def run_rounds(
    opts: argparse.Namespace,
    benches: list[Any],
    *,
    servers: Callable[[], set[int]] | None = None,
    server_pid: int | None = None,
) -> dict[str, Figures]:
    """``--rounds`` rounds; in each, every client in turn (in a rotating order, so that
    drift in the machine hits them alike) connects afresh, warms up, runs the latency
    and throughput measurements and disconnects. Fresh connections each round also
    sample how the processes and threads happen to be scheduled, which varies from
    one connection to the next.

    The server whose CPU time is counted is ``server_pid``, or else the one process
    that ``servers()`` lists after the client opened and did not list before.
    """
    figs = {bench.name: Figures(bench.name) for bench in benches}
    for r in range(opts.rounds):
        progress(f"round {r + 1}/{opts.rounds}")
        k = r % len(benches)
        for bench in benches[k:] + benches[:k]:
            await run_round(bench, figs[bench.name], opts, servers=servers, server_pid=server_pid)
    return figs


async def run_round(
    bench: Any,
    fig: Figures,
    opts: argparse.Namespace,
    *,
    servers: Callable[[], set[int]] | None = None,
    server_pid: int | None = None,
) -> None:
    gc.collect()
    servers_before = servers() if servers is not None else set()
    t0 = time.perf_counter()
    try:
        await bench.open()
        fig.connects.append(time.perf_counter() - t0)
        if servers is not None:
            new = servers() - servers_before
            server_pid = new.pop() if len(new) == 1 else None
        fig.era = await bench.describe()
        await bench.latency(opts.warmup)
        await bench.throughput(max(opts.warmup, 4 * opts.inflight), opts.inflight)
        gc.collect()
        client0, server0 = cpu_ns(os.getpid()), cpu_ns(server_pid)
        latencies = await bench.latency(opts.calls)
        client1, server1 = cpu_ns(os.getpid()), cpu_ns(server_pid)
        if None not in (client0, server0, client1, server1):
            fig.client_cpu_ns += client1 - client0
            fig.server_cpu_ns += server1 - server0
            fig.cpu_calls += opts.calls
        fig.latencies_ns.extend(latencies)
        fig.round_medians.append(statistics.median(latencies) / 1000)
        gc.collect()
        fig.throughputs.append(await bench.throughput(opts.total, opts.inflight))
    finally:
        t1 = time.perf_counter()
        await bench.close()
        fig.stops.append(time.perf_counter() - t1)


def progress(what: str) -> None:
    print(f"[bench] {what} ...", file=sys.stderr, flush=True)


# -- processes ------------------------------------------------------------------------------


def cpu_ns(pid: int | None) -> int | None:
    """CPU time used so far by every thread of ``pid`` (Linux schedstat), or None."""
    if pid is None:
        return None
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass  # a thread that just ended
    except OSError:
        return None
    return total


def processes_running(path: str) -> set[int]:
    """Pids of live (not zombie) processes whose command line contains ``path``."""
    found = set()
    needle = path.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state != b"Z" and needle in cmdline:
            found.add(int(entry))
    return found


def leftover_processes(before: set[int], processes: Callable[[], set[int]], wait: float = 3.0) -> set[int]:
    """What ``processes()`` lists now and did not before, after waiting up to ``wait`` s for it to go."""
    deadline = time.monotonic() + wait
    leftover = processes() - before
    while leftover and time.monotonic() < deadline:
        time.sleep(0.1)
        leftover = processes() - before
    return leftover


def report_leftovers(before: set[int], processes: Callable[[], set[int]],
                     threads_before: set[threading.Thread] | None = None, wait: float = 3.0) -> int:
    """Print what the run left behind (server processes; threads when ``threads_before``
    is given), waiting up to ``wait`` s for each to go; the exit status (1 if anything)."""
    status = 0
    leftover = leftover_processes(before, processes, wait)
    if leftover:
        print(f"LEFTOVER server processes: {sorted(leftover)}")
        status = 1
    if threads_before is not None:
        deadline = time.monotonic() + wait
        threads = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()]
        while threads and time.monotonic() < deadline:
            time.sleep(0.1)
            threads = [t for t in threads if t.is_alive()]
        if threads:
            print(f"LEFTOVER threads: {', '.join(sorted(t.name for t in threads))}")
            status = 1
    if not status:
        print("leftover processes: none" + ("; leftover threads: none" if threads_before is not None else ""))
    return status


# -- options ------------------------------------------------------------------------------


def add_options(parser: argparse.ArgumentParser, defaults: tuple[int, int, int, int]) -> None:
    """The options every benchmark has; ``defaults`` are calls, total, rounds, warmup."""
    calls, total, rounds, warmup = defaults
    parser.add_argument("--calls", type=int, default=None, help=f"sequential calls per client and round (default {calls})")
    parser.add_argument("--total", type=int, default=None, help=f"calls per throughput round (default {total})")
    parser.add_argument("--inflight", type=int, default=64, help="calls outstanding in the throughput run (default 64)")
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"rounds, each on a fresh connection per client, clients taking turns (default {rounds})")
    parser.add_argument("--warmup", type=int, default=None, help=f"warm-up calls per client (default {warmup})")
    parser.add_argument("--quick", action="store_true", help="small numbers for a smoke run")
    parser.add_argument("--clients", default="ours,sdk,raw", help="comma-separated subset of ours,sdk,raw")


def add_pin_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pin", type=int, default=None, metavar="CPU",
                        help="pin this process and every server to one cpu (takes scheduling out of the figures)")


def finish_options(
    parser: argparse.ArgumentParser,
    opts: argparse.Namespace,
    defaults: tuple[int, int, int, int],
    quick: tuple[int, int, int, int],
) -> list[str]:
    """Fill in the defaults (``quick`` ones with ``--quick``), check, pin; return the clients wanted."""
    for key, value in zip(("calls", "total", "rounds", "warmup"), quick if opts.quick else defaults):
        if getattr(opts, key) is None:
            setattr(opts, key, value)
    if min(opts.calls, opts.total, opts.inflight, opts.rounds) < 1 or opts.warmup < 0:
        parser.error("--calls, --total, --inflight and --rounds must be positive")
    wanted = [c.strip() for c in opts.clients.split(",") if c.strip()]
    if not wanted or set(wanted) - set(CLIENTS):
        parser.error("--clients takes a comma-separated subset of ours,sdk,raw")
    if opts.pin is not None:
        os.sched_setaffinity(0, {opts.pin})  # inherited by every process started from here
    return wanted


# -- report ---------------------------------------------------------------------------------


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def report(
    figs: dict[str, Figures],
    opts: argparse.Namespace,
    elapsed: float,
    *,
    title: str,
    connect_note: str = "process start to tools/list answered",
    targets: str = "ours/raw <= 1.5x, ours/sdk < 1x",
) -> None:
    names = [n for n in CLIENTS if n in figs]
    print()
    print(
        f"{title}; python {platform.python_version()}, "
        f"{os.cpu_count()} cpus, albedo_actors {albedo_actors.__version__}, mcp {sdk_version()}"
    )
    print(
        f"per client and round: calls={opts.calls} total={opts.total} inflight={opts.inflight} warmup={opts.warmup}; "
        f"rounds={opts.rounds}{' pinned to cpu ' + str(opts.pin) if opts.pin is not None else ''}"
        f"{' (quick)' if opts.quick else ''}"
    )
    print()
    header = (
        f"{'client':<6} {'era':<18} {'median us':>10} {'p99 us':>10} {'calls/s':>10} {'connect ms':>11} {'stop ms':>9}"
        f" {'cpu us cli':>10} {'cpu us srv':>10}"
    )
    print(header)
    print("-" * len(header))
    for name in names:
        f = figs[name]
        print(
            f"{name:<6} {f.era:<18} {f.median_us():>10.1f} {f.p99_us():>10.1f} {f.throughput:>10.0f} "
            f"{f.connect_ms():>11.1f} {f.stop_ms():>9.1f} {f.cpu_us(f.client_cpu_ns):>10} {f.cpu_us(f.server_cpu_ns):>10}"
        )
    print(
        f"median/p99: one sequential call; calls/s: with --inflight outstanding; connect: {connect_note};"
        "\ncpu us: CPU time per sequential call, in this process (all its threads) and in the server"
    )
    print()
    print("spread over rounds (min..max): median latency us | throughput calls/s")
    for name in names:
        f = figs[name]
        print(
            f"  {name:<6} {min(f.round_medians):7.1f}..{max(f.round_medians):<7.1f} | "
            f"{min(f.throughputs):7.0f}..{max(f.throughputs):<7.0f}"
        )
    print()
    if "ours" in figs:
        o = figs["ours"]
        parts_lat, parts_tp, parts_conn = [], [], []
        for peer in ("raw", "sdk"):
            if peer in figs:
                p = figs[peer]
                parts_lat.append(f"ours/{peer}={ratio(o.median_us(), p.median_us())}")
                parts_tp.append(f"ours/{peer}={ratio(o.throughput, p.throughput)}")
                parts_conn.append(f"ours/{peer}={ratio(o.connect_ms(), p.connect_ms())}")
        print("ratios (latency: median, lower is better; throughput: higher is better; connect: lower is better)")
        print(f"  latency    {'  '.join(parts_lat)}   (targets: {targets})")
        parts_p99 = [f"ours/{peer}={ratio(o.p99_us(), figs[peer].p99_us())}" for peer in ("raw", "sdk") if peer in figs]
        print(f"  p99        {'  '.join(parts_p99)}")
        print(f"  throughput {'  '.join(parts_tp)}")
        print(f"  connect    {'  '.join(parts_conn)}")
        print()
        print(f"RATIOS latency {' '.join(parts_lat)} throughput {' '.join(parts_tp)}")
    print(f"(latency and p99 over all {len(figs[names[0]].latencies_ns)} timed calls per client; throughput and"
          f" connect/stop are medians; run took {elapsed:.1f} s)")


def sdk_version() -> str:
    try:
        from importlib.metadata import version

        return version("mcp")
    except Exception:
        return "?"
