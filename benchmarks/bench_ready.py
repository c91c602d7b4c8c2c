#!/usr/bin/env python3
"""Session ready time with many stdio servers, some unreachable and some slow to start.

``--servers`` (50) stdio servers are configured; ``--down`` (10) of them cannot start
(they exit at once with status 3) and ``--slow`` (10) sleep ``--delay`` (3 s) before
serving. The others are the bundled demo server (``albedo_actors/demo/server.py``,
standard library only). Every server runs through one small wrapper script written to
a temporary directory: the wrapper misbehaves only once a marker file exists beside it,
so the configuration (and therefore the fingerprint the saved catalogues are keyed by)
is the same for the warm-up and for the timed sessions.

ours  ``albedo_actors``: a warm-up session (all servers reachable, no marker yet) saves
      the catalogues in a throwaway home (SQLite store); the marker is then written.
      Each round starts a fresh runtime on that store (store, ServerRegistry,
      RuntimePreparer, SessionComposer) and times ``SessionComposer.open()`` until the
      Composition is ready, then the first ``tools/call echo`` to a healthy server, and
      (for information) until every background dial has settled.
sdk   the official Python SDK (``mcp``), which has no saved catalogues: one asyncio
      task per server (``stdio_client`` + ``ClientSession``, ``discover`` with an
      ``initialize`` fallback, then ``tools/list``), all run with ``asyncio.gather``,
      each bounded by the same startup timeout (``--timeout``, 10 s). Ready is when
      every connect has settled (answered, failed or timed out); then the same first
      call.

Figures are medians of ``--rounds`` (3) rounds; ratios are ours/sdk (lower is better).
Run: ``.venv/bin/python benchmarks/bench_ready.py [--quick]``. See docs/operations.rst ("Speed").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import textwrap
import time
from typing import Any

import _common  # benchmarks/_common.py; it also puts the checkout first on sys.path
from _common import ARGS, REPO, check_echo, ratio

from albedo_actors.config import McpConfig, ServerConfig

SERVER = os.path.join(REPO, "albedo_actors", "demo", "server.py")
MARKER = "faults-on"

# Serves the demo server in-process (no second interpreter start). Once the marker
# file exists beside it, "down" exits at once and "slow" sleeps first.
WRAPPER = textwrap.dedent(
    """
    import os, runpy, sys, time
    here = os.path.dirname(os.path.abspath(__file__))
    role = sys.argv[1]
    if os.path.exists(os.path.join(here, {marker!r})):
        if role == "down":
            sys.stderr.write("down for the benchmark\\n")
            sys.exit(3)
        if role == "slow":
            time.sleep({delay!r})
    sys.argv = [{server!r}, "--era", "dual"]
    runpy.run_path({server!r}, run_name="__main__")
    """
)


def make_servers(opts: argparse.Namespace, wrapper: str) -> tuple[list[ServerConfig], str]:
    """The configured servers, roles interleaved; and the name of the healthy one to call
    (the last healthy one in the list)."""
    # Faulty servers spread evenly through the list, alternately down and slow while both last.
    faulty = ["down", "slow"] * min(opts.down, opts.slow)
    faulty += ["down"] * (opts.down - min(opts.down, opts.slow)) + ["slow"] * (opts.slow - min(opts.down, opts.slow))
    roles = ["ok"] * opts.servers
    step = opts.servers / max(1, len(faulty))
    for j, role in enumerate(faulty):
        roles[int(j * step)] = role
    servers = [
        ServerConfig(
            name=f"{role}-{i:02d}",
            type="stdio",
            command=sys.executable,
            args=("-I", wrapper, role),
            startup_timeout_ms=int(opts.timeout * 1000),
        )
        for i, role in enumerate(roles)
    ]
    healthy = [s.name for s in servers if s.name.startswith("ok-")]
    return servers, healthy[-1]


# -- ours ---------------------------------------------------------------------------------


class Runtime:
    """A daemon's worth of actors on ``home``'s store, and one session composer."""

    def __init__(self, home: str, config: McpConfig) -> None:
        from albedo_actors.actors.composer import SessionComposer
        from albedo_actors.actors.preparer import RuntimePreparer
        from albedo_actors.actors.registry import ServerRegistry
        from albedo_actors.store import open_store

        self.store = open_store(home)
        self.registry = ServerRegistry.start(home)
        self.preparer = RuntimePreparer.start(self.registry, self.store)
        self.composer = SessionComposer.start(self.preparer, self.registry, lambda: config, enabled=True)

    def open(self) -> Any:
        from albedo_actors.actors.composer import Open
        from albedo_actors.actors.reply import request

        return request(self.composer, Open(), 120)

    def settled(self) -> None:
        from albedo_actors.actors.preparer import BackgroundSettled
        from albedo_actors.actors.reply import request

        request(self.preparer, BackgroundSettled(), 120)

    def stop(self) -> None:
        self.composer.stop(timeout=60)
        self.preparer.stop(timeout=60)
        self.registry.stop(timeout=60)
        self.store.close()


def warm_up(home: str, config: McpConfig) -> float:
    """Every server reachable: the first session dials them all and saves their catalogues."""
    t0 = time.perf_counter()
    runtime = Runtime(home, config)
    try:
        composition = runtime.open()
        if composition.left_out or len(composition.catalogues) != len(config.servers):
            raise RuntimeError(f"warm-up left out {sorted(composition.left_out)}")
        runtime.settled()
    finally:
        runtime.stop()
    return time.perf_counter() - t0


def ours_round(home: str, config: McpConfig, healthy: str) -> dict[str, float]:
    runtime = Runtime(home, config)
    try:
        t0 = time.perf_counter()
        composition = runtime.open()
        ready = time.perf_counter() - t0
        check_echo(composition.handles[healthy].call_tool("echo", ARGS))
        first = time.perf_counter() - t0
        if composition.left_out or len(composition.catalogues) != len(config.servers):
            raise RuntimeError(f"not every saved catalogue was advertised; left out: {sorted(composition.left_out)}")
        runtime.settled()
        settled = time.perf_counter() - t0
    finally:
        t1 = time.perf_counter()
        runtime.stop()
        stop = time.perf_counter() - t1
    return {"ready": ready, "first": first, "settled": settled, "stop": stop, "servers": len(composition.catalogues)}


# -- sdk ----------------------------------------------------------------------------------


async def sdk_round(servers: list[ServerConfig], healthy: str, timeout: float) -> dict[str, float]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    devnull = open(os.devnull, "w")  # the unreachable ones write to stderr

    async def one(server: ServerConfig, connected: asyncio.Future) -> None:
        params = StdioServerParameters(command=server.command, args=list(server.args))
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(stdio_client(params, errlog=devnull))
                session = await stack.enter_async_context(ClientSession(read, write))
                try:
                    await asyncio.wait_for(_open(session), timeout)
                except Exception as exc:  # noqa: BLE001 - failed or timed out (TimeoutError): settled, left out
                    connected.set_result(exc)
                    return
                connected.set_result(session)
                await stop.wait()
        except Exception as exc:  # noqa: BLE001 - e.g. closing a dead server's streams
            if not connected.done():
                connected.set_result(exc)

    async def _open(session: Any) -> None:
        await _common.sdk_negotiate(session)
        await session.list_tools()

    t0 = time.perf_counter()
    futures = [loop.create_future() for _ in servers]
    tasks = [asyncio.ensure_future(one(server, future)) for server, future in zip(servers, futures)]
    outcomes = await asyncio.gather(*futures)
    ready = time.perf_counter() - t0
    sessions = {s.name: o for s, o in zip(servers, outcomes) if not isinstance(o, BaseException)}
    if healthy not in sessions:
        raise RuntimeError(f"the sdk could not connect {healthy}: {outcomes[[s.name for s in servers].index(healthy)]!r}")
    check_echo(await sessions[healthy].call_tool("echo", ARGS))
    first = time.perf_counter() - t0
    t1 = time.perf_counter()
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    stop_s = time.perf_counter() - t1
    devnull.close()
    return {"ready": ready, "first": first, "settled": ready, "stop": stop_s, "servers": len(sessions)}


# -- driver -------------------------------------------------------------------------------


def wait_gone(before: set[int], directory: str, wait: float = 30.0) -> set[int]:
    return _common.leftover_processes(before, lambda: _common.processes_running(directory), wait)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", type=int, default=50, help="configured stdio servers (default 50)")
    parser.add_argument("--down", type=int, default=10, help="of which unreachable (default 10)")
    parser.add_argument("--slow", type=int, default=10, help="of which slow to start (default 10)")
    parser.add_argument("--delay", type=float, default=3.0, help="how long a slow server sleeps, s (default 3)")
    parser.add_argument("--timeout", type=float, default=10.0, help="startup timeout per server, s (default 10)")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds per client (default 3)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 10 servers (2 down, 2 slow), 1 round")
    opts = parser.parse_args(argv)
    if opts.quick:
        opts.servers, opts.down, opts.slow = 10, 2, 2
        opts.rounds = opts.rounds or 1
    opts.rounds = opts.rounds or 3
    if opts.down + opts.slow >= opts.servers or min(opts.down, opts.slow) < 0 or opts.rounds < 1:
        parser.error("need at least one healthy server, and non-negative --down, --slow")

    started = time.perf_counter()
    leftover: set[int] = set()
    with tempfile.TemporaryDirectory(prefix="albedo-bench-ready-") as tmp:
        before = _common.processes_running(tmp)
        wrapper = os.path.join(tmp, "server.py")
        with open(wrapper, "w") as f:
            f.write(WRAPPER.format(marker=MARKER, delay=opts.delay, server=SERVER))
        servers, healthy = make_servers(opts, wrapper)
        home = os.path.join(tmp, "home")
        config = McpConfig(home=home, servers=tuple(servers))

        _common.progress(f"warm-up: {len(servers)} servers, all reachable")
        warm = warm_up(home, config)
        print(f"  warm-up {warm:.1f} s", file=sys.stderr)
        leftover |= wait_gone(before, tmp)
        with open(os.path.join(tmp, MARKER), "w"):
            pass  # from now on: down ones exit, slow ones sleep

        figs: dict[str, list[dict[str, float]]] = {"ours": [], "sdk": []}
        for r in range(opts.rounds):
            for name in ("ours", "sdk") if r % 2 == 0 else ("sdk", "ours"):
                _common.progress(f"round {r + 1}/{opts.rounds} {name}")
                if name == "ours":
                    fig = ours_round(home, config, healthy)
                else:
                    fig = asyncio.run(sdk_round(servers, healthy, opts.timeout))
                figs[name].append(fig)
                print(f"  ready {fig['ready'] * 1000:.1f} ms", file=sys.stderr)
                leftover |= wait_gone(before, tmp)  # one client's processes gone before the next
        leftover |= wait_gone(before, tmp, wait=3.0)
    elapsed = time.perf_counter() - started
    report(figs, opts, healthy, elapsed, warm)
    if leftover:
        print(f"LEFTOVER server processes: {sorted(leftover)}")
        return 1
    print("leftover processes: none")
    return 0


def report(figs: dict[str, list[dict[str, float]]], opts: argparse.Namespace, healthy: str, elapsed: float, warm: float) -> None:
    import platform

    import albedo_actors

    def med(name: str, key: str) -> float:
        return statistics.median(f[key] for f in figs[name]) * 1000

    def spread(name: str, key: str) -> str:
        values = [f[key] * 1000 for f in figs[name]]
        return f"{min(values):.1f}..{max(values):.1f}"

    healthy_n = opts.servers - opts.down - opts.slow
    print()
    print(
        f"ready benchmark: {opts.servers} stdio servers ({opts.down} unreachable, {opts.slow} slow by {opts.delay:g} s, "
        f"{healthy_n} healthy), startup timeout {opts.timeout:g} s; python {platform.python_version()}, "
        f"{os.cpu_count()} cpus, albedo_actors {albedo_actors.__version__}, mcp {_common.sdk_version()}"
    )
    print(f"rounds={opts.rounds}{' (quick)' if opts.quick else ''}; warm-up session (ours, saves catalogues) took {warm:.1f} s")
    print()
    header = f"{'client':<6} {'ready ms':>10} {'first call ms':>14} {'settled ms':>11} {'stop ms':>9} {'servers':>8}  ready min..max"
    print(header)
    print("-" * len(header))
    for name in ("ours", "sdk"):
        servers = min(int(f["servers"]) for f in figs[name])
        print(
            f"{name:<6} {med(name, 'ready'):>10.1f} {med(name, 'first'):>14.1f} {med(name, 'settled'):>11.1f} "
            f"{med(name, 'stop'):>9.1f} {servers:>8}  {spread(name, 'ready')}"
        )
    print(
        "ready: open() to the session's tool list ready (ours: saved catalogues, dials in the background;"
        "\n  sdk: every connect settled); first call ms: from the same start to tools/call echo answered by"
        f"\n  {healthy!r}; settled: every dial done (ours: background dials; sdk: = ready); servers: advertised"
    )
    print()
    o_ready, s_ready = med("ours", "ready"), med("sdk", "ready")
    o_first, s_first = med("ours", "first"), med("sdk", "first")
    print("ratios ours/sdk (lower is better)")
    print(f"  ready      {ratio(o_ready, s_ready)}   (aim: ours well under 100 ms: {'met' if o_ready < 100 else 'NOT met'})")
    print(f"  first call {ratio(o_first, s_first)}")
    print()
    print(f"RATIOS ready ours/sdk={ratio(o_ready, s_ready)} first_call ours/sdk={ratio(o_first, s_first)} "
          f"ours_ready_ms={o_ready:.1f} sdk_ready_ms={s_ready:.1f}")
    print(f"(medians of {opts.rounds} rounds; run took {elapsed:.1f} s)")


if __name__ == "__main__":
    sys.exit(main())
