#!/usr/bin/env python3
"""``albedo-mcp doctor`` on 30 stdio servers of which 10 hang: wall time, against the naive peer.

``--servers`` (30) stdio servers are configured, each with ``startupTimeoutMs``
``--timeout-ms`` (2000); ``--hung`` (10) of them read their input and never answer
(``initialize`` nor ``server/discover``), the others are the bundled demo server
(``albedo_actors/demo/server.py``, standard library only). Three runs, each timed from
the call to the last report, every server process gone (all figures in seconds):

doctor   :func:`albedo_actors.cli.doctor.examine` on every server: all dialled at once,
         each bounded by its startupTimeoutMs, every client closed and stopped.
naive    the same servers checked one after another (``examine`` of one name at a
         time): what a health check that dials in turn costs.
healthy  ``examine`` on ``--servers`` demo servers, none hung: the floor doctor pays
         for starting that many processes on this machine.

Then ``albedo-mcp doctor`` itself once, as a subprocess on the same home (interpreter
start included). Figures are medians of ``--rounds`` (3; the naive run once, it is
long). Each run has its own SQLite store in a throwaway home.

Run: ``.venv/bin/python benchmarks/bench_doctor.py [--quick]``. The last line is
machine-readable::

    RATIOS doctor naive/doctor=9.1x doctor/healthy=1.6x doctor/timeout=1.4x doctor=2.9s naive=26.4s healthy=1.8s
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import _common  # benchmarks/_common.py; it also puts the checkout first on sys.path
from _common import REPO, ratio

from albedo_actors.cli.doctor import examine
from albedo_actors.config import load
from albedo_actors.store import open_store

DEMO = os.path.join(REPO, "albedo_actors", "demo", "server.py")
# Reads its input until EOF (then exits) and never answers anything.
HANG = "import sys\nfor _line in sys.stdin:\n    pass\n"


def write_home(home: str, servers: int, hung: int, timeout_ms: int) -> None:
    os.makedirs(home, mode=0o700, exist_ok=True)
    hang = os.path.join(home, "hang.py")
    with open(hang, "w", encoding="utf-8") as f:
        f.write(HANG)
    entries = {}
    for i in range(servers):
        script = hang if i < hung else DEMO
        entries[f"s{i:02d}"] = {"command": sys.executable, "args": [script], "startupTimeoutMs": timeout_ms}
    with open(os.path.join(home, "extensions.json"), "w", encoding="utf-8") as f:
        json.dump({"mcp": {"servers": entries}}, f)


def timed(home: str, names_one_by_one: bool, expect_ok: int) -> float:
    config = load(home)
    store = open_store(home)
    try:
        started = time.perf_counter()
        if names_one_by_one:
            reports = [report for server in config.servers for report in examine(config, store, [server.name])]
        else:
            reports = examine(config, store)
        elapsed = time.perf_counter() - started
    finally:
        store.close()
    ok = sum(1 for report in reports if report.state == "ok")
    if ok != expect_ok:
        raise RuntimeError(f"{ok} servers ok, expected {expect_ok}: "
                           + "; ".join(f"{r.name} {r.state} {r.error}" for r in reports if r.state != "ok")[:600])
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=30)
    parser.add_argument("--hung", type=int, default=10)
    parser.add_argument("--timeout-ms", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round of each")
    opts = parser.parse_args()
    rounds = 1 if opts.quick else opts.rounds
    healthy_ok = opts.servers
    mixed_ok = opts.servers - opts.hung
    with tempfile.TemporaryDirectory(prefix="bench-doctor-") as tmp:
        mixed, healthy = os.path.join(tmp, "mixed"), os.path.join(tmp, "healthy")
        write_home(mixed, opts.servers, opts.hung, opts.timeout_ms)
        write_home(healthy, opts.servers, 0, opts.timeout_ms)
        timed(healthy, False, healthy_ok)  # warm-up: the page cache, the first imports
        doctor, all_ok, naive = [], [], []
        for i in range(rounds):
            _common.progress(f"round {i + 1}/{rounds}")
            doctor.append(timed(mixed, False, mixed_ok))
            all_ok.append(timed(healthy, False, healthy_ok))
        _common.progress("naive: one server after another")
        naive.append(timed(mixed, True, mixed_ok))
        started = time.perf_counter()
        run = subprocess.run([sys.executable, "-m", "albedo_actors", "--home", mixed, "doctor", "--json"],
                             capture_output=True, text=True, timeout=600, cwd=REPO)
        cli = time.perf_counter() - started
        if run.returncode != 3:
            raise RuntimeError(f"albedo-mcp doctor exited {run.returncode}: {run.stderr[-400:]}")
    d, n, h = statistics.median(doctor), statistics.median(naive), statistics.median(all_ok)
    timeout = opts.timeout_ms / 1000
    load1 = os.getloadavg()[0]
    print(f"{opts.servers} stdio servers, {opts.hung} hung, startupTimeoutMs {opts.timeout_ms}; "
          f"{os.cpu_count()} CPUs, load {load1:.1f}")
    print(f"doctor  (all at once)        {d:7.2f} s   rounds: {', '.join(f'{x:.2f}' for x in doctor)}")
    print(f"naive   (one after another)  {n:7.2f} s")
    print(f"healthy ({opts.servers} ok, none hung)    {h:7.2f} s   rounds: {', '.join(f'{x:.2f}' for x in all_ok)}")
    print(f"albedo-mcp doctor (subprocess, once)  {cli:.2f} s")
    print(f"naive/doctor {ratio(n, d)}   doctor/healthy {ratio(d, h)}   doctor/timeout {ratio(d, timeout)}")
    print(f"RATIOS doctor naive/doctor={ratio(n, d)} doctor/healthy={ratio(d, h)} doctor/timeout={ratio(d, timeout)} "
          f"doctor={d:.2f}s naive={n:.2f}s healthy={h:.2f}s cli={cli:.2f}s load={load1:.1f}")


if __name__ == "__main__":
    main()
