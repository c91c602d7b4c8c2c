#!/usr/bin/env python3
"""What a progress token costs a tool call that hears no progress (issue 16).

One stdio connection to the bundled demo server (``albedo_actors/demo/server.py``), one
``ServerHandle``. Each round times, in turn (the order alternates between rounds),
``--calls`` sequential ``tools/call echo {"text": "x"}`` three ways:

plain   ``Connection.request("tools/call", ...)`` without progress: the call as it was
        before issue 16 (no token, a fixed deadline);
token   the same with a :class:`~albedo_actors.connection.progress.CallProgress`: the
        token in ``_meta``, the moving deadline, its registration with the channel;
handle  ``ServerHandle.call_tool("echo", ...)``: what a host calls (it adds the token).

Printed: the median latency of each (medians of the rounds' medians) and the ratio
token/plain (goal: about 1.0x; the token is a few dictionary operations).

Run: ``.venv/bin/python benchmarks/bench_progress_token.py [--quick]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import threading
import time

from _common import REPO, processes_running, progress, ratio, report_leftovers, timed_calls

from albedo_actors.actors.client import ServerHandle
from albedo_actors.config import ServerConfig
from albedo_actors.connection.progress import CallProgress, new_token

DEMO = os.path.join(REPO, "albedo_actors", "demo", "server.py")
TIMEOUT = 10.0  # each call's deadline: a bound, never an expected duration


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=None, help="sequential calls per way and round (default 1000)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 6)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 200 calls, 2 rounds")
    opts = parser.parse_args(argv)
    opts.calls = opts.calls or (200 if opts.quick else 1000)
    opts.rounds = opts.rounds or (2 if opts.quick else 6)
    servers = lambda: processes_running(DEMO)  # noqa: E731
    before, threads_before = servers(), set(threading.enumerate())
    started = time.perf_counter()
    figures: dict[str, list[float]] = {"plain": [], "token": [], "handle": []}
    with tempfile.TemporaryDirectory(prefix="bench-token-") as home:
        handle = ServerHandle.start(ServerConfig(name="demo", type="stdio", command=sys.executable, args=("-I", DEMO)), home)
        try:
            handle.connect(TIMEOUT)
            connection = handle._connection(TIMEOUT)
            params = {"name": "echo", "arguments": {"text": "x"}}
            ways = {
                "plain": lambda: connection.request("tools/call", params, TIMEOUT),
                "token": lambda: connection.request("tools/call", params, TIMEOUT,
                                                    progress=CallProgress(new_token(), TIMEOUT, 10 * TIMEOUT)),
                "handle": lambda: handle.call_tool("echo", {"text": "x"}),
            }
            for way in ways.values():
                timed_calls(way, opts.calls // 4)  # warm-up
            for r in range(opts.rounds):
                progress(f"round {r + 1} of {opts.rounds}")
                for name in (list(ways) if r % 2 == 0 else list(reversed(ways))):
                    gc.collect()
                    figures[name].append(statistics.median(timed_calls(ways[name], opts.calls)) / 1000)
        finally:
            handle.stop()
    median = {name: statistics.median(values) for name, values in figures.items()}
    print()
    print(f"progress token on a call that hears none: demo server over stdio; rounds={opts.rounds} "
          f"calls={opts.calls}{' (quick)' if opts.quick else ''}; {os.cpu_count()} cpus")
    for name in figures:
        print(f"{name:7s} {median[name]:8.1f} us   rounds: {', '.join(f'{v:.0f}' for v in figures[name])}")
    print(f"RATIOS token/plain={ratio(median['token'], median['plain'])} handle/plain={ratio(median['handle'], median['plain'])}")
    print(f"(run took {time.perf_counter() - started:.1f} s)")
    return report_leftovers(before, servers, threads_before)


if __name__ == "__main__":
    sys.exit(main())
