#!/usr/bin/env python3
"""The async binding against the sync one, and against asyncio's default executor (issue 24).

One :class:`albedo_actors.runtime.Runtime` (no store) runs three stdio servers: ``demo``
(the bundled demo server) and ``slow`` and ``fast`` (``tests/servers/fault_server.py``,
the demo server plus a ``sleep {seconds}`` tool that answers from a timer, so calls
sleep side by side; ``slow`` with a 60 s call timeout). Three clients take turns in
every part, in the same run:

async    ``await amcp.call(...)`` on ``runtime.amcp()``: each call on a thread of its
         server's own lane (binding.py's ``Lanes``), what this checkout ships.
executor ``await asyncio.to_thread(mcp.call, ...)``: the async binding before issue 24,
         every call on the event loop's default executor (``min(32, cpus + 4)``
         threads, 6 on a 2-cpu machine), written out here as the baseline.
sync     ``mcp.call(...)`` on ``runtime.mcp()``, from as many threads as calls in flight.

The parts:

1. sequential latency: ``demo/echo`` one call after another, ``--calls`` per client and
   round, ``--rounds`` rounds (the order rotating); medians in µs and the ratios
   async/sync and executor/sync (what a call costs for going through the event loop),
   beside the floor of any call made off the loop, ``await asyncio.to_thread(int)``.
2. concurrency: ``--concurrent`` (24) calls of ``slow/sleep`` of ``--seconds`` (1 s)
   at once; the wall time from the first call to the last answer: async (one
   ``gather``), executor (one ``gather``) and sync (one thread per call); the ratios
   async/sync (target about 1.0x) and executor/sync.
3. a fast call beside slow ones: ``--concurrent`` slow calls started first, then, once
   they are all in flight, one ``fast/echo``; its latency with the async binding and
   with the executor, and executor/async. Before issue 24 the fast call waited for the
   executor's threads to come free (the issue measured 4.88 s behind six 5 s calls).

Parts 2 and 3 take the median over ``--slow-rounds`` rounds. ``--quick``: fewer calls
and rounds, and 0.25 s sleeps. Run: ``.venv/bin/python benchmarks/bench_async.py
[--quick]``. See docs/operations.rst ("Async hosts, the binding and tool lists").
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import tempfile
import threading
import time
from typing import Any, Awaitable, Callable

import _common  # noqa: F401  (benchmarks/_common.py; it also puts the checkout first on sys.path)
from _common import ARGS, REPO, check_echo, processes_running, progress, ratio, report_leftovers

from albedo_actors.binding import CALLS_PER_SERVER, AsyncMcp, Mcp
from albedo_actors.config import McpConfig, ServerConfig
from albedo_actors.runtime import Runtime

DEMO = os.path.join(REPO, "albedo_actors", "demo", "server.py")
FAULT_SERVER = os.path.join(REPO, "tests", "servers", "fault_server.py")  # as bench_load.py uses it
CLIENTS = ("async", "executor", "sync")


def config(home: str) -> McpConfig:
    return McpConfig(home=home, servers=(
        ServerConfig(name="demo", type="stdio", command=sys.executable, args=("-I", DEMO)),
        ServerConfig(name="slow", type="stdio", command=sys.executable, args=(FAULT_SERVER,), call_timeout_ms=60_000),
        ServerConfig(name="fast", type="stdio", command=sys.executable, args=(FAULT_SERVER,)),
    ))


def async_calls(amcp: AsyncMcp, mcp: Mcp) -> dict[str, Callable[..., Awaitable[Any]]]:
    """The two async clients: ``call(name, **arguments)`` as a coroutine."""
    return {
        "async": lambda name, **arguments: amcp.call(name, **arguments),
        # issue 24's "before": AsyncMcp.call was exactly this
        "executor": lambda name, **arguments: asyncio.to_thread(mcp.call, name, **arguments),
    }


# -- 1. sequential latency ----------------------------------------------------------------


async def _timed_async(call: Callable[..., Awaitable[Any]], n: int) -> list[int]:
    clock = time.perf_counter_ns
    out = []
    for _ in range(n):
        t0 = clock()
        await call("demo/echo", **ARGS)
        out.append(clock() - t0)
    return out


def _timed_sync(mcp: Mcp, n: int) -> list[int]:
    clock = time.perf_counter_ns
    out = []
    for _ in range(n):
        t0 = clock()
        mcp.call("demo/echo", **ARGS)
        out.append(clock() - t0)
    return out


def sequential(amcp: AsyncMcp, mcp: Mcp, opts: argparse.Namespace) -> dict[str, list[int]]:
    """Timed sequential calls (ns) of each client; every async round on a fresh loop."""
    timed: dict[str, list[int]] = {name: [] for name in CLIENTS}

    def run(name: str, n: int) -> list[int]:
        if name == "sync":
            return _timed_sync(mcp, n)
        call = async_calls(amcp, mcp)[name]
        return asyncio.run(_timed_async(call, n))

    for name in CLIENTS:
        check_echo(mcp.call("demo/echo", **ARGS).as_dict())
        run(name, opts.warmup)
    for r in range(opts.rounds):
        order = CLIENTS[r % 3:] + CLIENTS[:r % 3]
        for name in order:
            gc.collect()
            timed[name].extend(run(name, opts.calls))
    return timed


async def _handoffs(n: int) -> list[int]:
    """``await asyncio.to_thread(int)``: a call that does nothing, off the loop and back."""
    clock = time.perf_counter_ns
    out = []
    for _ in range(n):
        t0 = clock()
        await asyncio.to_thread(int)
        out.append(clock() - t0)
    return out


# -- 2. concurrency and 3. a fast call beside slow ones --------------------------------------


async def _gather(call: Callable[..., Awaitable[Any]], n: int, seconds: float) -> float:
    t0 = time.perf_counter()
    results = await asyncio.gather(*(call("slow/sleep", seconds=seconds) for _ in range(n)))
    elapsed = time.perf_counter() - t0
    _check_slept(results, n)
    return elapsed


def _threads(mcp: Mcp, n: int, seconds: float) -> float:
    results: list[Any] = []
    start = threading.Barrier(n + 1)

    def one() -> None:
        start.wait()
        results.append(mcp.call("slow/sleep", seconds=seconds))

    threads = [threading.Thread(target=one, name=f"bench-sync-{i}") for i in range(n)]
    for thread in threads:
        thread.start()
    start.wait()
    t0 = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - t0
    _check_slept(results, n)
    return elapsed


def _check_slept(results: list[Any], n: int) -> None:
    if len(results) != n or any(r.isError or not r.content[0]["text"].startswith("slept") for r in results):
        raise RuntimeError(f"the sleep calls did not all answer: {results[:3]!r}")


async def _beside(call: Callable[..., Awaitable[Any]], n: int, seconds: float) -> float:
    """The latency (s) of one fast call made while ``n`` slow ones are in flight."""
    slow = [asyncio.ensure_future(call("slow/sleep", seconds=seconds)) for _ in range(n)]
    await asyncio.sleep(min(0.05, seconds / 5))  # every slow call handed over (to its lane or the executor)
    t0 = time.perf_counter()
    fast = await call("fast/echo", **ARGS)
    elapsed = time.perf_counter() - t0
    check_echo(fast.as_dict())
    _check_slept(await asyncio.gather(*slow), n)
    return elapsed


def slow_parts(amcp: AsyncMcp, mcp: Mcp, opts: argparse.Namespace) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall times (s) of part 2 per client, and the fast call's latency (s) of part 3
    for the two async clients; one list entry per round."""
    n, seconds = opts.concurrent, opts.seconds
    calls = async_calls(amcp, mcp)
    mcp.call("slow/sleep", seconds=0)  # both servers dialled before anything is timed
    check_echo(mcp.call("fast/echo", **ARGS).as_dict())
    together: dict[str, list[float]] = {name: [] for name in CLIENTS}
    beside: dict[str, list[float]] = {name: [] for name in calls}
    for r in range(opts.slow_rounds):
        order = CLIENTS[r % 3:] + CLIENTS[:r % 3]
        for name in order:
            progress(f"round {r + 1}: {n} concurrent {seconds:g} s calls, {name}")
            if name == "sync":
                together[name].append(_threads(mcp, n, seconds))
            else:
                together[name].append(asyncio.run(_gather(calls[name], n, seconds)))
        for name in [c for c in order if c in calls]:
            progress(f"round {r + 1}: a fast call beside {n} slow ones, {name}")
            beside[name].append(asyncio.run(_beside(calls[name], n, seconds)))
    return together, beside


# -- the run ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=None, help="sequential calls per client and round (default 500)")
    parser.add_argument("--rounds", type=int, default=None, help="sequential rounds, the clients taking turns (default 6)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up calls per client (default 200)")
    parser.add_argument("--concurrent", type=int, default=24, help="slow calls in flight at once (default 24)")
    parser.add_argument("--seconds", type=float, default=None, help="how long each slow call sleeps (default 1)")
    parser.add_argument("--slow-rounds", type=int, default=None, help="rounds of parts 2 and 3 (default 3)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 100 calls, 2 rounds, 50 warm-up calls, one round of 0.25 s sleeps")
    opts = parser.parse_args(argv)
    for key, full, quick in (("calls", 500, 100), ("rounds", 6, 2), ("warmup", 200, 50),
                             ("seconds", 1.0, 0.25), ("slow_rounds", 3, 1)):
        if getattr(opts, key) is None:
            setattr(opts, key, quick if opts.quick else full)
    if min(opts.calls, opts.rounds, opts.concurrent, opts.slow_rounds) < 1 or opts.warmup < 0 or opts.seconds <= 0:
        parser.error("--calls, --rounds, --concurrent, --slow-rounds and --seconds must be positive")
    if opts.concurrent > CALLS_PER_SERVER:
        parser.error(f"--concurrent is at most {CALLS_PER_SERVER}, the async binding's calls in flight per server")
    servers = lambda: processes_running(DEMO) | processes_running(FAULT_SERVER)  # noqa: E731
    before, threads_before = servers(), set(threading.enumerate())
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-async-") as home:
        with Runtime(home, None, config=config(home), enabled=True) as runtime:
            mcp, amcp = runtime.mcp(), runtime.amcp()
            progress("sequential latency")
            timed = sequential(amcp, mcp, opts)
            asyncio.run(_handoffs(opts.warmup))
            floor = statistics.median(asyncio.run(_handoffs(opts.calls * opts.rounds))) / 1000
            together, beside = slow_parts(amcp, mcp, opts)
    lat = {name: statistics.median(timed[name]) / 1000 for name in CLIENTS}
    wall = {name: statistics.median(together[name]) for name in CLIENTS}
    fast = {name: statistics.median(beside[name]) for name in beside}
    executor_threads = min(32, (os.cpu_count() or 1) + 4)
    print()
    print(f"async binding (lanes) vs asyncio's default executor (the binding before issue 24) vs the sync binding; "
          f"{os.cpu_count()} cpus (default executor: {executor_threads} threads){' (quick)' if opts.quick else ''}")
    print()
    print(f"1. sequential demo/echo latency: median us over {opts.calls * opts.rounds} calls each "
          f"(calls={opts.calls} rounds={opts.rounds} warmup={opts.warmup})")
    for name in CLIENTS:
        print(f"   {name:<9} {lat[name]:9.1f}")
    print(f"   async/sync={ratio(lat['async'], lat['sync'])}  executor/sync={ratio(lat['executor'], lat['sync'])}  "
          f"async/executor={ratio(lat['async'], lat['executor'])}")
    print(f"   (the floor of any call made off the loop, await asyncio.to_thread(int): {floor:.1f} us;"
          f" async - sync = {lat['async'] - lat['sync']:.1f} us)")
    print()
    print(f"2. {opts.concurrent} concurrent slow/sleep {opts.seconds:g} s calls: wall time s, median of {opts.slow_rounds} round(s)")
    for name in CLIENTS:
        how = "one gather" if name != "sync" else f"{opts.concurrent} threads"
        spread = f"{min(together[name]):.2f}..{max(together[name]):.2f}"
        print(f"   {name:<9} {wall[name]:9.2f}   ({how}; spread {spread})")
    print(f"   async/sync={ratio(wall['async'], wall['sync'])} (target ~1.0x)  executor/sync={ratio(wall['executor'], wall['sync'])}")
    print()
    print(f"3. one fast/echo while {opts.concurrent} slow/sleep {opts.seconds:g} s calls run: its latency ms, "
          f"median of {opts.slow_rounds} round(s)")
    for name in beside:
        spread = f"{min(beside[name]) * 1000:.1f}..{max(beside[name]) * 1000:.1f}"
        print(f"   {name:<9} {fast[name] * 1000:9.1f}   (spread {spread})")
    print(f"   executor/async={ratio(fast['executor'], fast['async'])}")
    print()
    print(f"RATIOS seq_async/sync={ratio(lat['async'], lat['sync'])} seq_executor/sync={ratio(lat['executor'], lat['sync'])} "
          f"conc_async/sync={ratio(wall['async'], wall['sync'])} conc_executor/sync={ratio(wall['executor'], wall['sync'])} "
          f"fast_executor/async={ratio(fast['executor'], fast['async'])} fast_async_ms={fast['async'] * 1000:.1f} "
          f"fast_executor_ms={fast['executor'] * 1000:.1f}")
    print(f"(run took {time.perf_counter() - started:.1f} s)")
    return report_leftovers(before, servers, threads_before, wait=max(3.0, opts.seconds + 2.0))


if __name__ == "__main__":
    sys.exit(main())
