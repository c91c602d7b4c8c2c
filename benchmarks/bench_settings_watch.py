#!/usr/bin/env python3
"""Benchmark ChangeWatch.stamp(): what a host pays on session activity to hear every change.

Per call, in microseconds (the median of each round's median, rounds alternating the
measurements so a change in the machine's load hits them alike), against a plain
``os.stat`` of ``extensions.json`` as the baseline::

    .venv/bin/python benchmarks/bench_settings_watch.py [--rounds 5] [--calls 5000] [--postgres URL]

os.stat        ``os.stat(HOME/extensions.json)``: the floor of any change detection
file only     ``stamp()`` of a watch without a store (a settled stat: no hashing)
file racy     the same within ``RACY_S`` of the file's last write (its bytes hashed each call)
revision      ``store.revision()`` on the caller's thread: the one primary-key SELECT
stamp         ``stamp()`` with the store: the stat, plus the revision read on the
              watch's reader thread and handed back (the hand-over bounds the wait)

On SQLite (a fresh ``albedo.db``) and on PostgreSQL when a URL is given
(``--postgres`` or ``$ALBEDO_TEST_POSTGRES_URL``: a throwaway database is created in
it and dropped). Prints one ``RATIOS`` line (each against ``os.stat``) and exits 1 if a
thread of the watch is left behind.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from albedo_actors.safefiles import replace_private  # noqa: E402
from albedo_actors.settings_watch import ChangeWatch  # noqa: E402
from albedo_actors.store import open_store  # noqa: E402

DOCUMENT = '{\n  "enabled": {"mcp": true},\n  "mcp": {"servers": {"docs": {"type": "http", "url": "https://docs.example/mcp"}}}\n}\n'


def per_call_us(fn: Callable[[], Any], calls: int) -> float:
    """The mean cost of one call of ``fn`` over ``calls`` calls, in microseconds."""
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - start) / calls / 1000


def settle(path: str) -> None:
    """Date the file's mtime back, so that a watch trusts its stat (no racy hashing)."""
    past = time.time() - 60
    os.utime(path, (past, past))


def bench(name: str, home: str, url: str | None, rounds: int, calls: int) -> dict[str, float]:
    path = os.path.join(home, "extensions.json")
    os.makedirs(home, mode=0o700, exist_ok=True)
    replace_private(path, DOCUMENT)
    settle(path)
    store = open_store(home, url)
    with ChangeWatch(home, store) as watch, ChangeWatch(home) as file_only, ChangeWatch(home) as racy:
        ahead = time.time() + 3600  # an mtime ahead of now: every look within RACY_S of it, so hashed
        measures: dict[str, Callable[[], Any]] = {
            "os.stat": lambda: os.stat(path),
            "file only": file_only.stamp,
            "revision": store.revision,
            "stamp": watch.stamp,
        }
        for fn in measures.values():
            fn()  # warm: the reader thread started, each thread's connection open
        samples: dict[str, list[float]] = {key: [] for key in [*measures, "file racy"]}
        for r in range(rounds):
            order = list(measures)
            order = order[r % len(order):] + order[:r % len(order)]
            for key in order:
                samples[key].append(per_call_us(measures[key], calls))
            os.utime(path, (ahead, ahead))
            racy.stamp()  # the new stat, seen once; from here on each call hashes the bytes
            samples["file racy"].append(per_call_us(racy.stamp, max(calls // 10, 1)))
            settle(path)
    store.close()
    figures = {key: statistics.median(values) for key, values in samples.items()}
    base = samples["os.stat"]
    for key in ["os.stat", "file only", "file racy", "revision", "stamp"]:
        ratios = [v / b for v, b in zip(samples[key], base)]
        print(f"{name:<11} {key:<10} {figures[key]:8.2f} µs/call   {statistics.median(ratios):6.1f}x os.stat   "
              f"(rounds {min(samples[key]):.2f}..{max(samples[key]):.2f})")
    return {key: statistics.median(v / b for v, b in zip(samples[key], base)) for key in samples}


def throwaway_database(url: str) -> tuple[str, Callable[[], None]]:
    import psycopg2

    name = "albedo_bench_" + uuid.uuid4().hex[:12]
    admin = psycopg2.connect(url, connect_timeout=10)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    parts = urllib.parse.urlsplit(url)

    def drop() -> None:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()

    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment)), drop


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--postgres", default=os.environ.get("ALBEDO_TEST_POSTGRES_URL"),
                        help="a PostgreSQL URL to benchmark too (a throwaway database is made in it)")
    args = parser.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{args.rounds} rounds of {args.calls} calls; load {load:.1f}")
    ratios: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for key, value in bench("sqlite", os.path.join(tmp, "home"), None, args.rounds, args.calls).items():
            ratios[f"sqlite_{key.replace(' ', '_').replace('.', '_')}"] = value
        if args.postgres:
            url, drop = throwaway_database(args.postgres)
            try:
                for key, value in bench("postgresql", os.path.join(tmp, "pg"), url, args.rounds,
                                        max(args.calls // 5, 1)).items():
                    ratios[f"pg_{key.replace(' ', '_').replace('.', '_')}"] = value
            finally:
                drop()
        else:
            print("postgresql  skipped: give --postgres URL or $ALBEDO_TEST_POSTGRES_URL")
    print("RATIOS " + " ".join(f"{key}={value:.1f}" for key, value in ratios.items() if not key.endswith("os_stat")))
    left = [t.name for t in threading.enumerate() if t.name == "albedo-settings-watch" and t.is_alive()]
    if left:
        print(f"left behind: {left}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
