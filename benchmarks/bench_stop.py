#!/usr/bin/env python3
"""Stopping a session with many stdio servers that exit on EOF: ours against the SDK.

``--servers`` (30) stdio servers, each the bundled demo server
(``albedo_actors/demo/server.py``, standard library only), which exits when its stdin
reaches EOF. Both clients open all of them, then close all of them; the time is from
the start of the close to every process the client started being gone (checked in
``/proc``: the client's child processes and theirs).

ours  ``albedo_actors.runtime.Runtime`` (registry, preparer, one session composer; no
      store) opened on the 30 servers, then ``Runtime.stop()``: every client is told
      to close first (EOF to every server at once), then the actors stop top-down.
      Each server runs behind our launcher, so 60 processes end.
sdk   the official Python SDK (``mcp``): one asyncio process, 30 ``stdio_client`` +
      ``ClientSession`` (``initialize``) in one ``contextlib.AsyncExitStack``, then
      ``await stack.aclose()``. 30 processes end.
floor no client at all, for scale: the same 30 servers started with ``subprocess.Popen``
      (one ping answered), then every stdin closed at once. It is what the servers'
      own exits cost on this machine; no client can stop them faster.

Each round runs both, in alternating order, on fresh servers; figures are medians of
``--rounds`` (5) rounds, and the ratio is ours/sdk (lower is better). Targets: ours
under 0.1 s and no slower than the SDK.

Run: ``.venv/bin/python benchmarks/bench_stop.py [--quick]``. See docs/operations.rst ("Speed").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time

import _common  # benchmarks/_common.py; it also puts the checkout first on sys.path
from _common import REPO, ratio
from _plain import descendants

from albedo_actors.config import McpConfig, ServerConfig
from albedo_actors.runtime import Runtime

SERVER = os.path.join(REPO, "albedo_actors", "demo", "server.py")
GONE_LIMIT = 30.0  # a bound only: no close in this benchmark should come near it


def alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (a zombie has ended)."""
    running = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] != "Z":
            running.add(pid)
    return running


def wait_gone(pids: set[int]) -> None:
    """Return once none of ``pids`` is running (bounded by GONE_LIMIT)."""
    deadline = time.monotonic() + GONE_LIMIT
    while left := alive(pids):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(left)} processes still alive {GONE_LIMIT:g} s after the close")
        time.sleep(0.002)


def ours(n: int, home: str) -> float:
    servers = tuple(ServerConfig(name=f"demo{i:02d}", type="stdio", command=sys.executable, args=(SERVER,))
                    for i in range(n))
    runtime = Runtime(home, None, config=McpConfig(home=home, servers=servers), enabled=True)
    try:
        composition = runtime.start()
        if len(composition.catalogues) != n:
            raise RuntimeError(f"ours opened {len(composition.catalogues)} of {n} servers: {dict(composition.left_out)}")
        started = descendants()
        t0 = time.perf_counter()
        runtime.stop()
        wait_gone(started)
        return time.perf_counter() - t0
    finally:
        runtime.stop()


def floor(n: int) -> float:
    """No client: the same servers started with Popen, every stdin closed at once."""
    hello = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
    processes = [subprocess.Popen([sys.executable, SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE) for _ in range(n)]
    try:
        for process in processes:
            process.stdin.write(hello)
            process.stdin.flush()
        for process in processes:
            process.stdout.readline()  # it serves (the ping's answer, or an error for it)
        started = {process.pid for process in processes}
        t0 = time.perf_counter()
        for process in processes:
            process.stdin.close()
        wait_gone(started)
        return time.perf_counter() - t0
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait(GONE_LIMIT)
            process.stdout.close()


async def sdk(n: int) -> float:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=[SERVER])
    stack = contextlib.AsyncExitStack()
    try:
        for _ in range(n):
            read, write = await stack.enter_async_context(stdio_client(params))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
        started = descendants()
        if len(started) != n:
            raise RuntimeError(f"the SDK started {len(started)} processes for {n} servers")
        t0 = time.perf_counter()
        await stack.aclose()
        wait_gone(started)
        return time.perf_counter() - t0
    finally:
        await stack.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2 rounds")
    opts = parser.parse_args()
    rounds = 2 if opts.quick else opts.rounds
    figures: dict[str, list[float]] = {"ours": [], "sdk": [], "floor": []}
    with tempfile.TemporaryDirectory(prefix="albedo-bench-stop-") as home:
        for r in range(rounds):
            order = ("ours", "sdk", "floor") if r % 2 == 0 else ("sdk", "ours", "floor")
            for name in order:
                if name == "ours":
                    seconds = ours(opts.servers, home)
                elif name == "sdk":
                    seconds = asyncio.run(sdk(opts.servers))
                else:
                    seconds = floor(opts.servers)
                figures[name].append(seconds)
                print(f"round {r + 1}: {name:4} stop {seconds * 1000:7.1f} ms", flush=True)
            if descendants():
                raise RuntimeError(f"processes left after round {r + 1}: {sorted(descendants())}")
    a, b = statistics.median(figures["ours"]), statistics.median(figures["sdk"])
    print()
    print(f"{opts.servers} stdio servers that exit on EOF, {rounds} rounds, medians ({_common.platform.python_implementation()} "
          f"{sys.version.split()[0]}, {os.cpu_count()} CPUs)")
    for name in ("ours", "sdk", "floor"):
        spread = ", ".join(f"{s * 1000:.0f}" for s in figures[name])
        print(f"  {name:4} stop  {statistics.median(figures[name]) * 1000:7.1f} ms   (rounds: {spread} ms)")
    c = statistics.median(figures["floor"])
    print(f"RATIOS stop ours/sdk={ratio(a, b)} ours/floor={ratio(a, c)} ours={a * 1000:.1f}ms sdk={b * 1000:.1f}ms "
          f"floor={c * 1000:.1f}ms load={os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
