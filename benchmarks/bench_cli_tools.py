#!/usr/bin/env python3
"""The second ``albedo-mcp tools`` with many stdio servers, some hanging and some slow (issue 11).

``--servers`` (30) stdio servers are written into a throwaway home's ``extensions.json``;
``--hang`` (10) of them never answer once the faults are on (they sleep before reading
their input) and ``--slow`` (10) sleep ``--delay`` (3 s) before serving. The others are
the bundled demo server. As in ``bench_ready.py`` every server runs through one wrapper
script that misbehaves only once a marker file exists beside it, so the configuration
(and with it the fingerprint of the saved catalogues) is the same before and after.

ours  the command line as a user runs it: a first ``albedo-mcp tools --json`` (all
      servers reachable) creates the default store (HOME/albedo.db) and saves the
      catalogues; the marker is then written, and each round times the wall time of a
      fresh ``albedo-mcp tools --json`` process (interpreter start included) until it
      exits, then of ``albedo-mcp call OK/echo``.
sdk   the official Python SDK (``mcp``) connecting the same servers (``bench_ready``'s
      ``sdk_round``: one task per server, each bounded by ``--timeout``, 10 s): listed
      once every connect has settled, then the same call.

Figures are medians of ``--rounds`` (3); ratios are ours/sdk (lower is better).
Run: ``.venv/bin/python benchmarks/bench_cli_tools.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

import _common  # benchmarks/_common.py; it also puts the checkout first on sys.path
from _common import REPO, ratio
from bench_ready import sdk_round

from albedo_actors.config import ServerConfig

SERVER = os.path.join(REPO, "albedo_actors", "demo", "server.py")
MARKER = "faults-on"

WRAPPER = textwrap.dedent(
    """
    import os, runpy, sys, time
    here = os.path.dirname(os.path.abspath(__file__))
    role = sys.argv[1]
    if os.path.exists(os.path.join(here, {marker!r})):
        if role == "hang":
            time.sleep(3600)  # never reads its input: the handshake is never answered
        if role == "slow":
            time.sleep({delay!r})
    sys.argv = [{server!r}, "--era", "dual"]
    runpy.run_path({server!r}, run_name="__main__")
    """
)


def albedo(home: str, *argv: str) -> tuple[float, subprocess.CompletedProcess]:
    environ = {k: v for k, v in os.environ.items() if k != "ALBEDO_DATABASE_URL"}
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "albedo_actors", "--home", home, *argv],
                         capture_output=True, text=True, timeout=600, env=environ, cwd=REPO)
    elapsed = time.perf_counter() - t0
    if run.returncode != 0:
        raise RuntimeError(f"albedo-mcp {' '.join(argv)} exited {run.returncode}: {run.stderr.strip()}")
    return elapsed, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", type=int, default=30)
    parser.add_argument("--hang", type=int, default=10)
    parser.add_argument("--slow", type=int, default=10)
    parser.add_argument("--delay", type=float, default=3.0, help="how long a slow server sleeps, s (default 3)")
    parser.add_argument("--timeout", type=float, default=10.0, help="startup timeout per server, s (default 10)")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds per client (default 3)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 10 servers (3 hang, 3 slow), 1 round")
    opts = parser.parse_args(argv)
    if opts.quick:
        opts.servers, opts.hang, opts.slow, opts.rounds = 10, 3, 3, opts.rounds or 1
    opts.rounds = opts.rounds or 3
    if opts.hang + opts.slow >= opts.servers:
        parser.error("need at least one healthy server")

    roles = ["hang"] * opts.hang + ["slow"] * opts.slow + ["ok"] * (opts.servers - opts.hang - opts.slow)
    figs: dict[str, list[dict[str, float]]] = {"ours": [], "sdk": []}
    leftover: set[int] = set()
    with tempfile.TemporaryDirectory(prefix="albedo-bench-cli-") as tmp:
        before = _common.processes_running(tmp)
        wrapper = os.path.join(tmp, "server.py")
        with open(wrapper, "w") as f:
            f.write(WRAPPER.format(marker=MARKER, delay=opts.delay, server=SERVER))
        servers = [ServerConfig(name=f"{role}-{i:02d}", type="stdio", command=sys.executable, args=("-I", wrapper, role),
                                startup_timeout_ms=int(opts.timeout * 1000)) for i, role in enumerate(roles)]
        healthy = servers[-1].name
        home = os.path.join(tmp, "home")
        os.makedirs(home, mode=0o700)
        entries = {s.name: {"type": "stdio", "command": s.command, "args": list(s.args), "startupTimeoutMs": s.startup_timeout_ms}
                   for s in servers}
        with open(os.path.join(home, "extensions.json"), "w") as f:
            json.dump({"mcp": {"servers": entries}}, f)

        _common.progress(f"first tools: {len(servers)} servers, all reachable")
        warm, run = albedo(home, "tools", "--json")
        listed = len(json.loads(run.stdout))
        print(f"  first tools {warm:.2f} s, {listed} operations", file=sys.stderr)
        open(os.path.join(tmp, MARKER), "w").close()  # from now on: hang ones hang, slow ones sleep

        for r in range(opts.rounds):
            for name in ("ours", "sdk") if r % 2 == 0 else ("sdk", "ours"):
                _common.progress(f"round {r + 1}/{opts.rounds} {name}")
                if name == "ours":
                    ready, run = albedo(home, "tools", "--json")
                    if len(json.loads(run.stdout)) != listed:
                        raise RuntimeError("the second tools listed something else")
                    call, _ = albedo(home, "call", f"{healthy}/echo", "--args", '{"text": "x"}')
                    fig = {"ready": ready, "first": call}
                else:
                    sdk = asyncio.run(sdk_round(servers, healthy, opts.timeout))
                    fig = {"ready": sdk["ready"], "first": sdk["first"]}
                figs[name].append(fig)
                print(f"  ready {fig['ready'] * 1000:.1f} ms", file=sys.stderr)
                # one client's server processes gone before the next client starts
                leftover |= _common.leftover_processes(before, lambda: _common.processes_running(tmp), 30.0)

    def med(name: str, key: str) -> float:
        return statistics.median(f[key] for f in figs[name]) * 1000

    print(f"bench_cli_tools: {opts.servers} stdio servers ({opts.hang} hang, {opts.slow} slow by {opts.delay:g} s), "
          f"startup timeout {opts.timeout:g} s, median of {opts.rounds}; {os.cpu_count()} cpus, mcp {_common.sdk_version()}")
    print(f"  ours: second `albedo-mcp tools --json` {med('ours', 'ready'):.0f} ms (process wall time); "
          f"`albedo-mcp call {healthy}/echo` {med('ours', 'first'):.0f} ms")
    print(f"  sdk:  every connect settled {med('sdk', 'ready'):.0f} ms; to the first call answered {med('sdk', 'first'):.0f} ms")
    print(f"RATIOS tools ours/sdk={ratio(med('ours', 'ready'), med('sdk', 'ready'))} "
          f"call ours(separate process)/sdk(to first call)={ratio(med('ours', 'first'), med('sdk', 'first'))}")
    if leftover:
        print(f"LEFTOVER server processes: {sorted(leftover)}")
        return 1
    print("leftover processes: none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
