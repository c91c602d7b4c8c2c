#!/usr/bin/env python3
"""A tool call now, with OpenTelemetry's API installed and no SDK, against the same call
on the code before issue 28 (goal: at most 1.05x).

The code before is checked out from git (``--before COMMIT``; default: the parent of
the commit that added ``albedo_actors/wire/telemetry.py``) into a temporary worktree.
Three child processes run at once, each with one ``ServerHandle`` on its own checkout's
bundled demo server over stdio:

before  the code before issue 28;
noop    this checkout, the API installed, no SDK configured (a host with the ``otel``
        extra that set up no SDK);
absent  this checkout with the API made unimportable (a host without the extra).

Each round asks each child (in a rotating order) to time ``--calls`` sequential
``call_tool("echo", {"text": "x"})`` calls and report their median; printed are the
medians of the rounds' medians and the ratios noop/before and absent/before.

Run: ``.venv/bin/python benchmarks/bench_otel_before.py [--quick] [--before COMMIT]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from _common import REPO, progress, ratio

REPLY_TIMEOUT = 300.0  # a bound on one round of one child, never an expected duration

CHILD = r"""
import os, statistics, sys, tempfile, time
if os.environ.get("BENCH_BLOCK_OTEL"):
    sys.modules["opentelemetry"] = None  # the API cannot be imported: as without the extra
from albedo_actors.actors.client import ServerHandle
from albedo_actors.config import ServerConfig
import albedo_actors
demo = os.path.join(os.path.dirname(albedo_actors.__file__), "demo", "server.py")
with tempfile.TemporaryDirectory() as home:
    handle = ServerHandle.start(ServerConfig(name="demo", type="stdio", command=sys.executable, args=("-I", demo)), home)
    try:
        handle.connect(30)
        call = lambda: handle.call_tool("echo", {"text": "x"}, 10)
        print("ready", albedo_actors.__file__, flush=True)
        for line in sys.stdin:
            n = int(line)
            clock, times = time.perf_counter_ns, []
            for _ in range(n):
                t0 = clock(); call(); times.append(clock() - t0)
            print(statistics.median(times) / 1000, flush=True)
    finally:
        handle.stop()
"""


def default_before() -> str:
    added = subprocess.run(["git", "-C", REPO, "log", "--diff-filter=A", "--format=%H", "--",
                            "albedo_actors/wire/telemetry.py"], capture_output=True, text=True, check=True).stdout.split()
    if not added:
        raise SystemExit("albedo_actors/wire/telemetry.py was never added in this repository's history; give --before")
    return added[-1] + "^"


class Child:
    def __init__(self, name: str, path: str, block: bool) -> None:
        self.name = name
        env = {**os.environ, "PYTHONPATH": path}
        if block:
            env["BENCH_BLOCK_OTEL"] = "1"
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env, cwd=path)
        ready = self._line()
        if not ready.startswith("ready") or not ready.split()[1].startswith(path):
            raise SystemExit(f"{name}: the child did not start on {path}: {ready!r}")

    def _line(self) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + REPLY_TIMEOUT
        line = self.proc.stdout.readline()  # the child answers each request with one line
        if not line or time.monotonic() > deadline:
            raise SystemExit(f"{self.name}: the child stopped answering")
        return line.strip()

    def time(self, calls: int) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{calls}\n")
        self.proc.stdin.flush()
        return float(self._line())

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default=None, help="the commit of the code before (default: before telemetry.py)")
    parser.add_argument("--calls", type=int, default=None, help="sequential calls per child and round (default 1000)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 9)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 200 calls, 3 rounds")
    opts = parser.parse_args(argv)
    calls = opts.calls or (200 if opts.quick else 1000)
    rounds = opts.rounds or (3 if opts.quick else 9)
    before = opts.before or default_before()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-otel-before-") as tmp:
        checkout = os.path.join(tmp, "before")
        subprocess.run(["git", "-C", REPO, "worktree", "add", "--detach", "--quiet", checkout, before], check=True)
        children: list[Child] = []
        try:
            children = [Child("before", checkout, False), Child("noop", REPO, False), Child("absent", REPO, True)]
            figures: dict[str, list[float]] = {child.name: [] for child in children}
            for child in children:
                child.time(calls // 4)  # warm-up
            for r in range(rounds):
                progress(f"round {r + 1} of {rounds}")
                order = children[r % 3:] + children[:r % 3]
                for child in order:
                    figures[child.name].append(child.time(calls))
        finally:
            for child in children:
                child.stop()
            subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", checkout], check=False)
    median = {name: statistics.median(values) for name, values in figures.items()}
    print()
    print(f"A tool call now against the code before issue 28 ({before}): demo server over stdio; "
          f"rounds={rounds} calls={calls}{' (quick)' if opts.quick else ''}; {os.cpu_count()} cpus")
    for name, values in figures.items():
        print(f"{name:7s} {median[name]:8.1f} us   rounds: {', '.join(f'{v:.0f}' for v in values)}")
    print(f"RATIOS noop/before={ratio(median['noop'], median['before'])} (goal <= 1.05x) "
          f"absent/before={ratio(median['absent'], median['before'])}")
    print(f"(run took {time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
