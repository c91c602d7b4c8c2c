#!/usr/bin/env python3
"""What a flood of progress costs the client, against the same flood without progress (issue 16).

One stdio fault server (tests/servers/fault_server.py), one ServerHandle. Each round
calls, in turn (the order alternates between rounds):

progress  ``p_flood {count}``: ``count`` ``notifications/progress`` for the call's
          token (each moves the deadline and replaces the latest report; a callback
          ``on_progress`` hears the latest at most ten times a second), then the answer.
messages  ``notify_flood {count}``: ``count`` ``notifications/message`` (logged at
          debug, dropped on the reader thread), then the answer: the floor, the same
          number of lines through the same reader.

Printed: the client's CPU seconds (``time.process_time()``: every thread of this
process, the server excluded) and wall seconds of each, their medians over the rounds,
and the ratios progress/messages (target: CPU at most about 1.5x: a progress
notification is a line like any other plus O(1) work), and the callbacks the host got
(target: a few a second, however many notifications arrived).

Run: ``.venv/bin/python benchmarks/bench_progress.py [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import _common  # benchmarks/_common.py; it also puts the checkout first on sys.path

from albedo_actors.actors.client import ServerHandle
from albedo_actors.config import ServerConfig

FAULT_SERVER = os.path.join(_common.REPO, "tests", "servers", "fault_server.py")


def timed(fn) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer notifications and rounds")
    parser.add_argument("--count", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    count = args.count or (20_000 if args.quick else 100_000)
    rounds = args.rounds or (2 if args.quick else 5)
    with tempfile.TemporaryDirectory() as home:
        config = ServerConfig(name="f", type="stdio", command=sys.executable, args=(FAULT_SERVER,), call_timeout_ms=120_000)
        handle = ServerHandle.start(config, home)
        try:
            handle.connect()
            results: dict[str, list[tuple[float, float]]] = {"progress": [], "messages": []}
            callbacks: list[int] = []

            def with_progress() -> None:
                heard: list = []
                handle.call_tool("p_flood", {"count": count}, on_progress=heard.append)
                callbacks.append(len(heard))

            def with_messages() -> None:
                handle.call_tool("notify_flood", {"count": count})

            runs = {"progress": with_progress, "messages": with_messages}
            for round_ in range(rounds):
                order = ("progress", "messages") if round_ % 2 == 0 else ("messages", "progress")
                for name in order:
                    results[name].append(timed(runs[name]))
        finally:
            handle.stop()
    cpu = {name: statistics.median(c for c, _ in values) for name, values in results.items()}
    wall = {name: statistics.median(w for _, w in values) for name, values in results.items()}
    print(f"{count} notifications a call, {rounds} rounds, medians")
    for name in ("progress", "messages"):
        print(f"  {name:9s} cpu {cpu[name]:.3f} s   wall {wall[name]:.3f} s")
    print(f"  ratio progress/messages: cpu {cpu['progress'] / cpu['messages']:.2f}x  wall {wall['progress'] / wall['messages']:.2f}x")
    print(f"  callbacks heard per flood: {sorted(callbacks)} (of {count} notifications)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
