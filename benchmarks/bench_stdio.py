#!/usr/bin/env python3
"""Benchmark three MCP clients doing the same work against the same stdio server.

The server is the bundled demo server (``albedo_actors/demo/server.py --era dual``,
standard library only); every call is ``tools/call echo {"text": "x"}``. The clients:

ours  ``albedo_actors`` :class:`ServerHandle` (actor front, blocking calls from any
      thread; the server runs behind our launcher process). Modern era.
sdk   the official Python SDK (``mcp``): ``stdio_client`` + ``ClientSession`` on
      asyncio, opened with ``session.discover()`` (``initialize`` as a fallback),
      which is what ``mcp.Client(mode="auto")`` does. Modern era on this server.
raw   a minimal pipe client written here: ``subprocess.Popen``, one JSON line out
      and one line in per call, the same per-request ``_meta`` as ours (modern
      era by default, ``--raw-era legacy`` for the ``initialize`` handshake).
      It is the floor: what any Python client has to pay at least.

The run has ``--rounds`` rounds; in each, every client in turn (rotating order)
connects to a fresh server, warms up, is measured and disconnects, one client at a
time. Measured:

1. sequential latency: ``--calls`` calls one after another; median and p99 in µs
   over the calls of all rounds, and the CPU time each call costs in this process
   (all its threads) and in the server (Linux ``/proc/*/task/*/schedstat``);
2. throughput: ``--total`` calls with ``--inflight`` outstanding at any time, in
   calls per second, median of the rounds (ours: that many threads; sdk: that many
   asyncio tasks; raw: pipelined, writing a window of requests at once, then
   reading its responses and matching their ids);
3. connect time: from starting the process to the first ``tools/list`` answered,
   median of the rounds (ours: ``ServerHandle.start`` + ``connect()``, which starts
   the launcher, then the server, and also reads resources, templates and prompts
   and opens the listen stream); and the time to disconnect (``stop``).

Ratios compare ours with the peers: latency by the median, throughput by calls/s.
Run: ``.venv/bin/python benchmarks/bench_stdio.py [--quick]``. See README.rst.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)  # run from a checkout even when the package is not installed

import albedo_actors  # noqa: E402
from albedo_actors.actors.client import ServerHandle  # noqa: E402
from albedo_actors.config import ServerConfig  # noqa: E402

SERVER = os.path.join(REPO, "albedo_actors", "demo", "server.py")
SERVER_ARGS = ("-I", SERVER, "--era", "dual")
ARGS = {"text": "x"}

MODERN_VERSION = "2026-07-28"
LEGACY_VERSION = "2025-11-25"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
    "io.modelcontextprotocol/clientInfo": {"name": "raw-bench", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def _check_echo(result: Any) -> None:
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


def _timed_calls(call: Callable[[], Any], n: int) -> list[int]:
    clock = time.perf_counter_ns
    out = []
    for _ in range(n):
        t0 = clock()
        call()
        out.append(clock() - t0)
    return out


# -- the clients -----------------------------------------------------------------------
#
# Each bench has the same async face so that one driver can interleave them; the
# blocking ones (ours, raw) simply block the event loop, which is idle meanwhile.


class OursBench:
    name = "ours"

    def __init__(self, opts: argparse.Namespace, home: str) -> None:
        self.opts = opts
        self.home = home
        self.config = ServerConfig(name="bench", type="stdio", command=sys.executable, args=SERVER_ARGS)
        self.handle: ServerHandle | None = None

    async def open(self) -> None:
        self.handle = ServerHandle.start(self.config, self.home)
        self.handle.connect()

    async def describe(self) -> str:
        status = self.handle.status()
        _check_echo(self.call())
        return f"{status['era']} {status['version']}"

    def call(self) -> Any:
        return self.handle.call_tool("echo", ARGS)

    async def latency(self, n: int) -> list[int]:
        return _timed_calls(self.call, n)

    async def throughput(self, total: int, inflight: int) -> float:
        """``inflight`` threads, each calling in a loop, ``total`` calls in all."""
        start = threading.Barrier(inflight + 1)
        errors: list[BaseException] = []
        call = self.call

        def worker(n: int) -> None:
            start.wait()
            try:
                for _ in range(n):
                    call()
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(n,), daemon=True) for n in _shares(total, inflight)]
        for thread in threads:
            thread.start()
        start.wait()
        t0 = time.perf_counter()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - t0
        if errors:
            raise RuntimeError(f"{len(errors)} threaded calls failed, first: {errors[0]!r}")
        return total / elapsed

    async def close(self) -> None:
        if self.handle is not None:
            self.handle.stop()
            self.handle = None


class SdkBench:
    """The official SDK: stdio_client + ClientSession, opened like Client(mode="auto")."""

    name = "sdk"

    def __init__(self, opts: argparse.Namespace) -> None:
        from mcp.client.stdio import StdioServerParameters

        self.opts = opts
        self.params = StdioServerParameters(command=sys.executable, args=list(SERVER_ARGS))
        self.stack: contextlib.AsyncExitStack | None = None
        self.session: Any = None

    @staticmethod
    async def _negotiate(session: Any) -> str:
        from mcp.shared.exceptions import MCPError

        try:
            await session.discover()
        except MCPError:
            await session.initialize()
        era = "modern" if session.discover_result is not None else "legacy"
        return f"{era} {session.protocol_version}"

    async def _enter(self, stack: contextlib.AsyncExitStack) -> Any:
        from mcp.client.session import ClientSession
        from mcp.client.stdio import stdio_client

        read, write = await stack.enter_async_context(stdio_client(self.params))
        return await stack.enter_async_context(ClientSession(read, write))

    async def open(self) -> None:
        self.stack = contextlib.AsyncExitStack()
        self.session = await self._enter(self.stack)
        self.era = await self._negotiate(self.session)
        await self.session.list_tools()

    async def describe(self) -> str:
        _check_echo(await self.session.call_tool("echo", ARGS))
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
        call_tool = self.session.call_tool

        async def worker(n: int) -> None:
            for _ in range(n):
                await call_tool("echo", ARGS)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(n) for n in _shares(total, inflight)))
        return total / (time.perf_counter() - t0)

    async def close(self) -> None:
        if self.stack is not None:
            stack, self.stack, self.session = self.stack, None, None
            await stack.aclose()


class RawClient:
    """The least a Python client can do: one JSON line out, one line in."""

    def __init__(self, era: str) -> None:
        self.modern = era == "modern"
        self.proc = subprocess.Popen(
            [sys.executable, *SERVER_ARGS], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=-1
        )
        self._fd = self.proc.stdin.fileno()
        self._readline = self.proc.stdout.readline
        self._next_id = 0

    def _message(self, method: str, params: dict[str, Any] | None) -> tuple[int, bytes]:
        self._next_id += 1
        params = dict(params or {})
        if self.modern:
            params["_meta"] = META
        message = {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}
        return self._next_id, json.dumps(message, separators=(",", ":")).encode() + b"\n"

    def _read(self, id_: int) -> dict[str, Any]:
        line = self._readline()
        if not line:
            raise RuntimeError("the server closed its output")
        message = json.loads(line)
        if message.get("id") != id_:
            raise RuntimeError(f"expected the answer to {id_}, got {message!r:.200}")
        if "result" not in message:
            raise RuntimeError(f"error: {message.get('error')!r}")
        return message["result"]

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        id_, data = self._message(method, params)
        os.write(self._fd, data)
        return self._read(id_)

    def open(self) -> str:
        if self.modern:
            result = self.request("server/discover")
            if MODERN_VERSION not in result.get("supportedVersions", ()):
                raise RuntimeError("the server is not modern")
            return f"modern {MODERN_VERSION}"
        result = self.request(
            "initialize",
            {"protocolVersion": LEGACY_VERSION, "capabilities": {}, "clientInfo": {"name": "raw-bench", "version": "0"}},
        )
        os.write(self._fd, b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        return f"legacy {result['protocolVersion']}"

    def call(self) -> dict[str, Any]:
        return self.request("tools/call", {"name": "echo", "arguments": ARGS})

    def pipelined(self, count: int, window: int) -> None:
        """``count`` calls: ``window`` requests written at once, then their answers read."""
        done = 0
        while done < count:
            batch = [self._message("tools/call", {"name": "echo", "arguments": ARGS}) for _ in range(min(window, count - done))]
            os.write(self._fd, b"".join(data for _, data in batch))  # a window is far below the pipe buffer
            waiting = {id_ for id_, _ in batch}
            for _ in batch:
                message = json.loads(self._readline())
                if "result" not in message:
                    raise RuntimeError(f"error: {message.get('error')!r}")
                waiting.remove(message["id"])  # KeyError on an unknown or repeated id
            done += len(batch)

    def close(self) -> None:
        self.proc.stdin.close()  # EOF: the demo server exits
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


class RawBench:
    name = "raw"

    def __init__(self, opts: argparse.Namespace) -> None:
        self.era = opts.raw_era
        self.client: RawClient | None = None

    async def open(self) -> None:
        self.client = RawClient(self.era)
        self.opened_as = self.client.open()
        self.client.request("tools/list")

    async def describe(self) -> str:
        _check_echo(self.client.call())
        return self.opened_as

    async def latency(self, n: int) -> list[int]:
        return _timed_calls(self.client.call, n)

    async def throughput(self, total: int, inflight: int) -> float:
        t0 = time.perf_counter()
        self.client.pipelined(total, inflight)
        return total / (time.perf_counter() - t0)

    async def close(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            client.close()


def _shares(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


async def run_benches(opts: argparse.Namespace, home: str, wanted: list[str]) -> dict[str, Figures]:
    """``--rounds`` rounds; in each, every client in turn (in a rotating order, so that
    drift in the machine hits them alike) connects to a fresh server, warms up, runs
    the latency and throughput measurements and disconnects. A fresh server per round
    also samples how the processes happen to be scheduled, which varies from one
    connection to the next."""
    makers = {"raw": lambda: RawBench(opts), "ours": lambda: OursBench(opts, home), "sdk": lambda: SdkBench(opts)}
    benches = [makers[name]() for name in ("raw", "ours", "sdk") if name in wanted]
    figs = {bench.name: Figures(bench.name) for bench in benches}
    for r in range(opts.rounds):
        _progress(f"round {r + 1}/{opts.rounds}")
        k = r % len(benches)
        for bench in benches[k:] + benches[:k]:
            await _run_round(bench, figs[bench.name], opts)
    return figs


async def _run_round(bench: Any, fig: Figures, opts: argparse.Namespace) -> None:
    gc.collect()
    servers_before = _demo_servers()
    t0 = time.perf_counter()
    try:
        await bench.open()
        fig.connects.append(time.perf_counter() - t0)
        new = _demo_servers() - servers_before
        server_pid = new.pop() if len(new) == 1 else None
        fig.era = await bench.describe()
        await bench.latency(opts.warmup)
        await bench.throughput(max(opts.warmup, 4 * opts.inflight), opts.inflight)
        gc.collect()
        client0, server0 = _cpu_ns(os.getpid()), _cpu_ns(server_pid)
        latencies = await bench.latency(opts.calls)
        client1, server1 = _cpu_ns(os.getpid()), _cpu_ns(server_pid)
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


def _progress(what: str) -> None:
    print(f"[bench] {what} ...", file=sys.stderr, flush=True)


# -- leftovers ------------------------------------------------------------------------------


def _cpu_ns(pid: int | None) -> int | None:
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


def _demo_servers() -> set[int]:
    """Pids of live demo servers (not launchers) started as ``python -I SERVER ...``."""
    found = set()
    for pid in _server_processes():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv[1:3] == [b"-I", SERVER.encode()]:
            found.add(pid)
    return found


def _server_processes() -> set[int]:
    """Pids of live processes running the demo server or our launcher for it."""
    found = set()
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
        if state != b"Z" and SERVER.encode() in cmdline:
            found.add(int(entry))
    return found


# -- report ---------------------------------------------------------------------------------


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def report(figs: dict[str, Figures], opts: argparse.Namespace, elapsed: float) -> None:
    names = [n for n in ("ours", "sdk", "raw") if n in figs]
    print()
    print(
        f"stdio benchmark: demo server --era dual, tools/call echo; python {platform.python_version()}, "
        f"{os.cpu_count()} cpus, albedo_actors {albedo_actors.__version__}, mcp {_sdk_version()}"
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
        "median/p99: one sequential call; calls/s: with --inflight outstanding; connect: process start to tools/list"
        " answered;\ncpu us: CPU time per sequential call, in this process (all its threads) and in the server"
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
                parts_lat.append(f"ours/{peer}={_ratio(o.median_us(), p.median_us())}")
                parts_tp.append(f"ours/{peer}={_ratio(o.throughput, p.throughput)}")
                parts_conn.append(f"ours/{peer}={_ratio(o.connect_ms(), p.connect_ms())}")
        print("ratios (latency: median, lower is better; throughput: higher is better; connect: lower is better)")
        print(f"  latency    {'  '.join(parts_lat)}   (targets: ours/raw <= 1.5x, ours/sdk < 1x)")
        parts_p99 = [f"ours/{peer}={_ratio(o.p99_us(), figs[peer].p99_us())}" for peer in ("raw", "sdk") if peer in figs]
        print(f"  p99        {'  '.join(parts_p99)}")
        print(f"  throughput {'  '.join(parts_tp)}")
        print(f"  connect    {'  '.join(parts_conn)}")
        print()
        print(f"RATIOS latency {' '.join(parts_lat)} throughput {' '.join(parts_tp)}")
    print(f"(latency and p99 over all {len(figs[names[0]].latencies_ns)} timed calls per client; throughput and"
          f" connect/stop are medians; run took {elapsed:.1f} s)")


def _sdk_version() -> str:
    try:
        from importlib.metadata import version

        return version("mcp")
    except Exception:
        return "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=None, help="sequential calls per client and round (default 2000)")
    parser.add_argument("--total", type=int, default=None, help="calls per throughput round (default 5000)")
    parser.add_argument("--inflight", type=int, default=64, help="calls outstanding in the throughput run (default 64)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds, each on a fresh connection per client, clients taking turns (default 5)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up calls per client (default 300)")
    parser.add_argument("--quick", action="store_true", help="small numbers for a smoke run")
    parser.add_argument("--clients", default="ours,sdk,raw", help="comma-separated subset of ours,sdk,raw")
    parser.add_argument("--raw-era", choices=("modern", "legacy"), default="modern", help="how the raw client opens")
    parser.add_argument("--pin", type=int, default=None, metavar="CPU",
                        help="pin this process and every server to one cpu (takes scheduling out of the figures)")
    opts = parser.parse_args(argv)
    defaults = (200, 500, 2, 50) if opts.quick else (2000, 5000, 5, 300)
    for key, value in zip(("calls", "total", "rounds", "warmup"), defaults):
        if getattr(opts, key) is None:
            setattr(opts, key, value)
    if min(opts.calls, opts.total, opts.inflight, opts.rounds) < 1 or opts.warmup < 0:
        parser.error("--calls, --total, --inflight and --rounds must be positive")
    wanted = [c.strip() for c in opts.clients.split(",") if c.strip()]
    if not wanted or set(wanted) - {"ours", "sdk", "raw"}:
        parser.error("--clients takes a comma-separated subset of ours,sdk,raw")
    if opts.pin is not None:
        os.sched_setaffinity(0, {opts.pin})  # inherited by every process started from here

    before = _server_processes()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="albedo-bench-") as home:
        figs = asyncio.run(run_benches(opts, home, wanted))
    elapsed = time.perf_counter() - started
    report(figs, opts, elapsed)

    deadline = time.monotonic() + 3.0
    leftover = _server_processes() - before
    while leftover and time.monotonic() < deadline:
        time.sleep(0.1)
        leftover = _server_processes() - before
    if leftover:
        print(f"LEFTOVER server processes: {sorted(leftover)}")
        return 1
    print("leftover processes: none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
