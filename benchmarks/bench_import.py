#!/usr/bin/env python3
"""Import time and idle RSS of a host, ours against another checkout (the code before).

::

    git worktree add --detach ../before <older commit>
    .venv/bin/python benchmarks/bench_import.py --before ../before
    .venv/bin/python benchmarks/bench_import.py --before ../before --runs 15
    .venv/bin/python benchmarks/bench_import.py --before ../before --quick

Every figure is taken in a fresh child process, the two checkouts alternating run by
run (A, B, A, B, ...), so that load on the machine falls on both alike; medians are
printed. The children run with bytecode caching on (a private ``PYTHONPYCACHEPREFIX``,
warmed first), as an installed package runs, and from a scratch directory, so that
``PYTHONPATH`` decides which checkout is imported.

``import ms``
    ``import albedo_actors.runtime, albedo_actors.binding`` timed inside the child
    (``perf_counter`` around the import statement: net of the interpreter's own start).
``import CPU ms``
    The CPU time of that import (``process_time``): less sensitive to a loaded machine.
``wall ms``
    The child's wall time for that import minus that of a child that imports nothing
    (the issue's "net of the bare interpreter start", exit included).
``idle RSS MiB``
    VmRSS of a process holding one idle stdio connection: ``ServerHandle.start`` +
    ``connect()`` + one ``call_tool("echo")``, then idle (the server is the bundled
    demo server, which runs behind our launcher: neither is counted).
``host RSS MiB``
    The same for what a host does: ``Runtime`` with one stdio server and no store,
    ``runtime.mcp().call("demo/echo")``, then idle.
``+store RSS MiB``
    The same with the host's SQLite store (``open_store(home)``, the host of docs/python-api.rst):
    peewee, sqlite3, and psycopg2 when it is installed (peewee imports it).
``bare RSS MiB``
    A child that imports nothing, for scale.

The last line is machine-readable: ``RATIOS {"import": ours/before, ...}``.
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

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

IMPORT = """
import time
t, c = time.perf_counter(), time.process_time()
import albedo_actors.runtime, albedo_actors.binding
print(time.perf_counter() - t, time.process_time() - c)
"""

BARE = "print(0)"

RSS = r"""
import sys, time
def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
mode, server, home = sys.argv[1:4]
if mode == "bare":
    print(rss()); raise SystemExit
from albedo_actors.config import McpConfig, ServerConfig
config = ServerConfig(name="demo", type="stdio", command=sys.executable, args=(server, "--era", "dual"))
if mode == "handle":
    from albedo_actors.actors.client import ServerHandle
    handle = ServerHandle.start(config, home)
    try:
        handle.connect()
        handle.call_tool("echo", {"text": "x"})
        time.sleep(0.3)  # idle: whatever settles after a call has settled
        print(rss())
    finally:
        handle.stop()
else:
    from albedo_actors.runtime import Runtime
    store = None
    if mode == "store":
        from albedo_actors.store import open_store
        store = open_store(home)
    with Runtime(home, store, config=McpConfig(home=home, servers=(config,)), enabled=True) as runtime:
        runtime.mcp().call("demo/echo", text="x")
        time.sleep(0.3)
        print(rss())
    if store is not None:
        store.close()
"""


def _child(code: str, path: str, scratch: str, *args: str) -> tuple[float, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    env["PYTHONPATH"] = path
    env["PYTHONPYCACHEPREFIX"] = os.path.join(scratch, "pycache")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=scratch, env=env, capture_output=True,
                          text=True, timeout=120)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"a child under {path} failed: {done.stderr.strip().splitlines()[-1:]}")
    return wall, done.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, metavar="DIR",
                        help="a checkout of the code to compare with (e.g. a git worktree of an older commit)")
    parser.add_argument("--runs", type=int, default=11, help="runs of each import figure (default: %(default)s)")
    parser.add_argument("--rss-runs", type=int, default=3, help="runs of each RSS figure (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="5 import runs, 1 RSS run")
    opts = parser.parse_args(argv)
    if opts.quick:
        opts.runs, opts.rss_runs = 5, 1
    trees = {"ours": REPO, "before": os.path.abspath(opts.before)}
    figures: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
    with tempfile.TemporaryDirectory(prefix="bench-import-") as scratch:
        for path in trees.values():  # warm the bytecode caches (compiling a module costs memory too)
            _child(IMPORT, path, scratch)
            server = os.path.join(path, "albedo_actors", "demo", "server.py")
            _child(RSS, path, scratch, "store", server, tempfile.mkdtemp(dir=scratch))
        for _ in range(opts.runs):
            for name, path in trees.items():
                bare, _ = _child(BARE, path, scratch)
                wall, inside = _child(IMPORT, path, scratch)
                elapsed, cpu = inside.split()
                figures[name].setdefault("import", []).append(float(elapsed) * 1000)
                figures[name].setdefault("cpu", []).append(float(cpu) * 1000)
                figures[name].setdefault("wall", []).append((wall - bare) * 1000)
        for _ in range(opts.rss_runs):
            for name, path in trees.items():
                server = os.path.join(path, "albedo_actors", "demo", "server.py")
                for mode in ("bare", "handle", "host", "store"):
                    home = tempfile.mkdtemp(dir=scratch)
                    _, out = _child(RSS, path, scratch, mode, server, home)
                    figures[name].setdefault(mode, []).append(float(out))
    rows = (("import", "import ms"), ("cpu", "import CPU ms"), ("wall", "wall ms"), ("handle", "idle RSS MiB"), ("host", "host RSS MiB"),
            ("store", "+store RSS MiB"), ("bare", "bare RSS MiB"))
    median = {name: {key: statistics.median(values) for key, values in figs.items()} for name, figs in figures.items()}
    print(f"{'':14}{'ours':>10}{'before':>10}{'ratio':>8}   (medians; import x{opts.runs}, RSS x{opts.rss_runs})")
    ratios = {}
    for key, label in rows:
        ours, before = median["ours"][key], median["before"][key]
        ratios[key] = round(ours / before, 3) if before else None
        print(f"{label:14}{ours:10.1f}{before:10.1f}{ratios[key]:8.2f}")
    spread = {name: f"{min(f['import']):.0f}..{max(f['import']):.0f}" for name, f in figures.items()}
    print(f"import ms range over runs: ours {spread['ours']}, before {spread['before']}")
    print("RATIOS " + json.dumps({"import": ratios["import"], "import_cpu": ratios["cpu"], "import_wall": ratios["wall"],
                                  "idle_rss": ratios["handle"], "host_rss": ratios["host"], "store_host_rss": ratios["store"],
                                  "ours_import_ms": round(median["ours"]["import"], 1),
                                  "ours_idle_rss_mib": round(median["ours"]["handle"], 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
