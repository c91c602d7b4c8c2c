#!/usr/bin/env python3
"""One host with many configured stdio servers: ready, call, stop, memory, threads.

``--servers`` (200) stdio servers, each the bundled demo server
(``albedo_actors/demo/server.py --era dual``, standard library only) under its own
name, are written to one ``extensions.json`` in a temporary home (SQLite store). A
first process (the warm-up) opens a :class:`~albedo_actors.runtime.Runtime` there,
which dials every server and saves its catalogue, and stops. Then fresh processes
measure, each printing one JSON object to this one:

ready      ``Runtime(home, store, background=False).start()`` until the session's
           first composition is there, from the saved catalogues (no server is
           dialled: ``background=False``); the store is open before the clock starts,
           as a daemon's is. ``--ready-rounds`` (3) runtimes one after another in the
           same process, the median (the first, cold one is shown in the table too).
calls      the binding's call (``runtime.mcp().call("<last server>/echo", text="x")``)
           to one server, connected beforehand, with N servers configured and, in the
           same process, with a runtime of a home that configures only that one
           server; batches of ``--calls`` alternate between the two, ``--rounds`` each;
           medians in microseconds.
stop       ``Runtime.stop()`` of that N-server runtime (only the called server dialled).
connected  a fresh process with the N-server home: every server connected (then idle),
           VmRSS and ``threading.active_count()``, then ``Runtime.stop()`` timed;
           another fresh process does the same with the one-server home, and the
           per-server costs are the differences divided by N-1 (so they count all a
           further idle server costs: its client actor, its connection, its catalogue).

Every stop is checked: no server or launcher process of the worker may be left once
it returned (a bounded wait), else the run fails.

Run: ``.venv/bin/python benchmarks/bench_scale.py [--servers N] [--json] [--quick]``.
With ``--json`` it prints one JSON object (keys: ready_ms, call_us_1, call_us_n,
stop_ms, stop_connected_ms, rss_mib, threads, rss_per_server_kib, threads_per_server).
It uses only the public API that the package had before issue 14 too, so it also runs
with ``PYTHONPATH=<an older checkout>`` (the workers inherit the environment).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from _plain import descendants

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SERVER = os.path.join(REPO, "albedo_actors", "demo", "server.py")  # the same servers whatever code is measured
try:
    import albedo_actors  # noqa: F401 - PYTHONPATH (an older checkout) or the installed package
except ImportError:  # a bare checkout
    sys.path.insert(0, REPO)

KEYS = ("ready_ms", "call_us_1", "call_us_n", "stop_ms", "stop_connected_ms", "rss_mib", "threads",
        "rss_per_server_kib", "threads_per_server")
ARGS = {"text": "x"}
GONE_LIMIT = 30.0  # a bound only


def server_name(i: int) -> str:
    return f"srv-{i:03d}"


def write_home(home: str, names: list[str]) -> None:
    os.makedirs(home, mode=0o700, exist_ok=True)
    servers = {name: {"type": "stdio", "command": sys.executable, "args": ["-I", SERVER, "--era", "dual"]} for name in names}
    with open(os.path.join(home, "extensions.json"), "w") as f:
        json.dump({"enabled": {"mcp": True}, "mcp": {"servers": servers}}, f, indent=1)


# -- the workers (each in a fresh process) --------------------------------------------------


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def leftover(wait: float = 5.0) -> int:
    deadline = time.monotonic() + wait
    left = descendants()
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = descendants()
    return len(left)


def start_runtime(home: str, store: Any) -> Any:
    from albedo_actors.runtime import Runtime  # imported by the worker before any clock starts

    runtime = Runtime(home, store, background=False)
    try:
        runtime.start()
    except BaseException:
        runtime.stop()
        raise
    return runtime


def worker_warm(home: str) -> dict[str, Any]:
    """Dial every server once, so that each catalogue is saved."""
    from albedo_actors.store import open_store

    store = open_store(home)
    t0 = time.perf_counter()
    runtime = start_runtime(home, store)
    try:
        composition = runtime.composition()
        if composition.left_out:
            raise RuntimeError(f"warm-up left out {sorted(composition.left_out)[:5]}: {list(composition.left_out.values())[:1]}")
        servers = len(composition.catalogues)
    finally:
        runtime.stop()
        store.close()
    return {"warm_s": time.perf_counter() - t0, "servers": servers, "leftover": leftover()}


def timed_calls(mcp: Any, name: str, n: int) -> list[int]:
    clock = time.perf_counter_ns
    out = []
    for _ in range(n):
        t0 = clock()
        mcp.call(name, ARGS)
        out.append(clock() - t0)
    return out


def check(result: Any) -> None:
    text = result["content"][0]["text"]
    if text != ARGS["text"]:
        raise RuntimeError(f"echo answered {text!r}")


def worker_measure(home_n: str, home_1: str, target: str, opts: argparse.Namespace) -> dict[str, Any]:
    import albedo_actors.binding  # noqa: F401 - what a host imports, before the clock
    import albedo_actors.runtime  # noqa: F401
    from albedo_actors.store import open_store

    store_n, store_1 = open_store(home_n), open_store(home_1)
    out: dict[str, Any] = {}
    try:
        readies, cpus = [], []
        for r in range(opts.ready_rounds):
            c0, t0 = time.process_time(), time.perf_counter()
            runtime_n = start_runtime(home_n, store_n)
            readies.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)  # every thread of this process: what load cannot inflate much
            composition = runtime_n.composition()
            if composition.left_out or len(composition.catalogues) != opts.servers:
                runtime_n.stop()
                raise RuntimeError(f"not ready from saved catalogues: {len(composition.catalogues)} of {opts.servers}, "
                                   f"left out {sorted(composition.left_out)[:5]}")
            if descendants():
                runtime_n.stop()
                raise RuntimeError("a server was dialled to get ready (a process was started)")
            if r < opts.ready_rounds - 1:
                runtime_n.stop()
        out["ready_ms"] = statistics.median(readies) * 1000
        out["ready_first_ms"] = readies[0] * 1000
        out["ready_cpu_ms"] = statistics.median(cpus) * 1000
        runtime_1 = start_runtime(home_1, store_1)
        try:
            mcps = {"n": runtime_n.mcp(), "1": runtime_1.mcp()}
            for mcp in mcps.values():
                check(mcp.call(f"{target}/echo", ARGS))  # dials it
                timed_calls(mcp, f"{target}/echo", opts.warmup)
            latencies: dict[str, list[int]] = {"n": [], "1": []}
            for r in range(opts.rounds):
                for key in ("n", "1") if r % 2 == 0 else ("1", "n"):
                    gc.collect()
                    latencies[key].extend(timed_calls(mcps[key], f"{target}/echo", opts.calls))
            out["call_us_n"] = statistics.median(latencies["n"]) / 1000
            out["call_us_1"] = statistics.median(latencies["1"]) / 1000
        finally:
            runtime_1.stop()
        c0, t0 = time.process_time(), time.perf_counter()
        runtime_n.stop()
        out["stop_ms"] = (time.perf_counter() - t0) * 1000
        out["stop_cpu_ms"] = (time.process_time() - c0) * 1000
        out["leftover"] = leftover()
    finally:
        store_n.close()
        store_1.close()
    return out


def worker_connected(home: str, target: str) -> dict[str, Any]:
    """Every server of ``home`` connected and idle: RSS, threads; then the stop."""
    import concurrent.futures

    from albedo_actors.store import open_store

    store = open_store(home)
    try:
        runtime = start_runtime(home, store)
        try:
            mcp = runtime.mcp()
            check(mcp.call(f"{target}/echo", ARGS))
            handles = runtime.composition().handles
            t0 = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(lambda handle: handle.connect(), handles.values()))
            connect_s = time.perf_counter() - t0
            for _ in range(3):
                check(mcp.call(f"{target}/echo", ARGS))
            connected = sum(1 for handle in handles.values() if handle.status()["connected"])
            gc.collect()
            rss, threads = rss_kib(), threading.active_count()
            processes = len(descendants())
        finally:
            c0, t0 = time.process_time(), time.perf_counter()
            runtime.stop()
            stop_s, stop_cpu = time.perf_counter() - t0, time.process_time() - c0
        return {"rss_kib": rss, "threads": threads, "connected": connected, "processes": processes, "connect_s": connect_s,
                "stop_ms": stop_s * 1000, "stop_cpu_ms": stop_cpu * 1000, "leftover": leftover()}
    finally:
        store.close()


def worker_floor(n: int) -> dict[str, Any]:
    """No client at all, for scale: ``n`` demo servers started with Popen (each answers
    one ping), then every stdin closed at once; the time until all have exited. It is
    what the servers' own exits cost on this machine (ours also ends a launcher each)."""
    procs = [subprocess.Popen([sys.executable, "-I", SERVER, "--era", "dual"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL) for _ in range(n)]
    try:
        for proc in procs:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
            proc.stdin.flush()
        for proc in procs:
            assert proc.stdout is not None
            proc.stdout.readline()
        t0 = time.perf_counter()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.close()
        for proc in procs:
            proc.wait(GONE_LIMIT)
        return {"stop_ms": (time.perf_counter() - t0) * 1000}
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


# -- the driver --------------------------------------------------------------------------------


def run_worker(args: list[str], timeout: float = 900.0) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), *args], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"worker {args[1]} failed: {tail[0]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def progress(what: str) -> None:
    print(f"[bench_scale] {what} ...", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", type=int, default=200, help="configured stdio servers (default 200)")
    parser.add_argument("--json", action="store_true", help="print one JSON object only")
    parser.add_argument("--quick", action="store_true", help="fewer calls and rounds (the same servers)")
    parser.add_argument("--calls", type=int, default=None, help="calls per batch (default 1000; quick 200)")
    parser.add_argument("--rounds", type=int, default=None, help="batches per configuration (default 6; quick 2)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up calls (default 200; quick 50)")
    parser.add_argument("--ready-rounds", type=int, default=None, help="runtimes started to time ready (default 3; quick 2)")
    parser.add_argument("--floor", action="store_true", help="also time N bare servers (no client) closed at once")
    parser.add_argument("--_worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--_home", action="append", default=[], help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    for key, full, quick in (("calls", 1000, 200), ("rounds", 6, 2), ("warmup", 200, 50), ("ready_rounds", 3, 2)):
        if getattr(opts, key) is None:
            setattr(opts, key, quick if opts.quick else full)
    if opts.servers < 2 or min(opts.calls, opts.rounds, opts.ready_rounds) < 1:
        parser.error("--servers must be at least 2; --calls, --rounds, --ready-rounds positive")
    target = server_name(opts.servers - 1)  # the last one configured

    if opts._worker is not None:
        if opts._worker == "warm":
            result = worker_warm(opts._home[0])
        elif opts._worker == "measure":
            result = worker_measure(opts._home[0], opts._home[1], target, opts)
        elif opts._worker == "floor":
            result = worker_floor(opts.servers)
        else:
            result = worker_connected(opts._home[0], target)
        print(json.dumps(result))
        return 0

    started = time.perf_counter()
    passed = [f"--servers={opts.servers}", f"--calls={opts.calls}", f"--rounds={opts.rounds}", f"--warmup={opts.warmup}",
              f"--ready-rounds={opts.ready_rounds}"]
    with tempfile.TemporaryDirectory(prefix="albedo-bench-scale-") as tmp:
        home_n, home_1 = os.path.join(tmp, "home-n"), os.path.join(tmp, "home-1")
        write_home(home_n, [server_name(i) for i in range(opts.servers)])
        write_home(home_1, [target])
        progress(f"warm-up: {opts.servers} servers dialled once, catalogues saved")
        warm = run_worker(["--_worker", "warm", "--_home", home_n, *passed])
        run_worker(["--_worker", "warm", "--_home", home_1, *passed])
        progress("ready, calls, stop (nothing dialled but the one called)")
        measured = run_worker(["--_worker", "measure", "--_home", home_n, "--_home", home_1, *passed])
        progress("one server connected")
        one = run_worker(["--_worker", "connected", "--_home", home_1, *passed])
        progress(f"{opts.servers} servers connected")
        many = run_worker(["--_worker", "connected", "--_home", home_n, *passed])
        floor = None
        if opts.floor:
            progress(f"floor: {opts.servers} bare servers closed at once")
            floor = run_worker(["--_worker", "floor", *passed])
    elapsed = time.perf_counter() - started
    figures = {
        "ready_ms": round(measured["ready_ms"], 2),
        "call_us_1": round(measured["call_us_1"], 1),
        "call_us_n": round(measured["call_us_n"], 1),
        "stop_ms": round(measured["stop_ms"], 1),
        "stop_connected_ms": round(many["stop_ms"], 1),
        "rss_mib": round(many["rss_kib"] / 1024, 1),
        "threads": many["threads"],
        "rss_per_server_kib": round((many["rss_kib"] - one["rss_kib"]) / (opts.servers - 1), 1),
        "threads_per_server": round((many["threads"] - one["threads"]) / (opts.servers - 1), 2),
    }
    left = {"warm-up": warm["leftover"], "measure": measured["leftover"], "one": one["leftover"], "many": many["leftover"]}
    if many["connected"] != opts.servers:
        print(f"only {many['connected']} of {opts.servers} servers connected", file=sys.stderr)
        return 1
    if opts.json:
        print(json.dumps(figures))
    else:
        report(figures, measured, one, many, warm, floor, opts, elapsed)
    if any(left.values()):
        print(f"LEFTOVER processes after a stop: {left}", file=sys.stderr)
        return 1
    return 0


def report(figures: dict[str, Any], measured: dict[str, Any], one: dict[str, Any], many: dict[str, Any], warm: dict[str, Any],
           floor: dict[str, Any] | None, opts: argparse.Namespace, elapsed: float) -> None:
    import platform

    import albedo_actors as package

    n = opts.servers
    print()
    print(f"scale benchmark: {n} stdio servers (demo server, --era dual) in one host; python {platform.python_version()}, "
          f"{os.cpu_count()} cpus; albedo_actors from {os.path.dirname(os.path.dirname(os.path.abspath(package.__file__)))}")
    print(f"calls={opts.calls} x rounds={opts.rounds} per configuration, warmup={opts.warmup}, ready rounds={opts.ready_rounds}"
          f"{' (quick)' if opts.quick else ''}; warm-up (dial all, save catalogues) {warm['warm_s']:.1f} s")
    print()
    rows = [
        ("ready from saved catalogues, ms (median)", f"{figures['ready_ms']:.1f}", "goal < 50"),
        ("  the first, cold, ms", f"{measured['ready_first_ms']:.1f}", ""),
        ("  CPU of this process meanwhile, ms (median)", f"{measured['ready_cpu_ms']:.1f}", "all its threads"),
        ("binding call, 1 server configured, us", f"{figures['call_us_1']:.1f}", ""),
        (f"binding call, {n} servers configured, us", f"{figures['call_us_n']:.1f}",
         f"{figures['call_us_n'] / figures['call_us_1']:.2f}x of 1 (goal ~1x)"),
        ("stop, one server dialled, ms", f"{figures['stop_ms']:.1f}", "goal < 1000"),
        (f"stop, {many['connected']} connected and idle, ms", f"{figures['stop_connected_ms']:.1f}", "goal < 1000"),
        ("  CPU of this process meanwhile, ms", f"{many['stop_cpu_ms']:.1f}", "the rest is the processes' own exits"),
        ("stop, 1 connected (1-server home), ms", f"{one['stop_ms']:.1f}", ""),
        *([(f"floor: {n} bare servers closed at once, ms", f"{floor['stop_ms']:.1f}",
            f"ours {figures['stop_connected_ms'] / floor['stop_ms']:.2f}x of it")] if floor else []),
        (f"RSS with {n} connected, MiB", f"{figures['rss_mib']:.1f}", f"1-server home: {one['rss_kib'] / 1024:.1f}"),
        (f"threads with {n} connected", f"{figures['threads']}", f"1-server home: {one['threads']}"),
        ("RSS per further server, KiB", f"{figures['rss_per_server_kib']:.1f}", "goal <= 512"),
        ("threads per further server", f"{figures['threads_per_server']:.2f}", "goal <= 2"),
        (f"connecting all {n} (8 at a time), s", f"{many['connect_s']:.1f}", f"{many['processes']} processes"),
    ]
    width = max(len(r[0]) for r in rows)
    for label, value, note in rows:
        print(f"{label:<{width}}  {value:>9}  {note}")
    print()
    print("JSON " + json.dumps(figures))
    print(f"(run took {elapsed:.1f} s; load average at the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus: "
          "wall times on a loaded machine are mostly waiting for a cpu)")


if __name__ == "__main__":
    sys.exit(main())
