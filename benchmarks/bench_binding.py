#!/usr/bin/env python3
"""A binding call against the same server handle's call, at 10, 150 and 1,000 operations (issue 12).

For each size a fresh :class:`albedo_actors.runtime.Runtime` (registry, preparer, one
session composer; no store) runs two stdio servers: ``demo`` (the bundled demo server,
5 operations: ``echo``, ``add``, ``time``, ``read_resource``, ``get_prompt``) and
``many`` (``benchmarks/_tools_server.py --tools N-5``: realistic tools, each with a
schema the advertised list checks). The session therefore advertises N operations.
Each round times ``--calls`` sequential calls of each client, in turn (the order
alternates between rounds so drift hits both alike):

binding  ``mcp.call("demo/echo", text="x")`` on ``runtime.mcp()``: the name resolved
         in the session's composition, then the call on its client.
handle   ``handle.call_tool("echo", {"text": "x"})`` on the same composition's
         ``ServerHandle`` of ``demo``: the floor the binding adds to.

Printed per size: both medians (µs, over every timed call), the ratio binding/handle
(target: at most 1.1x at every size) and what the binding adds in µs; then the
binding's median at the largest size over the smallest (target: flat, about 1.0x).

Then, at the largest size (issue 24: tool lists are the host's), what handing out the
tool list costs per turn, copies against the shared objects, ``--copies`` (30) times
each in turn, medians in ms:

tools()           ``mcp.tools()``: a dictionary per operation with a copy of its schema
tools, shared     the same dictionaries sharing the composition's schemas (tools()
                  before issue 24, written out here), and ``composition.operations``
model_operations  ``composition.model_operations()``: Advertised copies, schemas copied,
                  against ``composition.model_operations_shared()``
copy strategies   the N schemas copied by ``marshal.loads`` of bytes marshalled once
                  (``Composition.schema_copy``, as shipped), ``pickle.loads`` of bytes
                  pickled once, ``copy.deepcopy`` and a ``json`` round trip

Run: ``.venv/bin/python benchmarks/bench_binding.py [--quick]``. See docs/operations.rst ("Speed").
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import marshal
import pickle
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable

import _common  # benchmarks/_common.py; it also puts the checkout first on sys.path
from _common import ARGS, REPO, check_echo, processes_running, progress, ratio, report_leftovers, timed_calls

import albedo_actors
from albedo_actors.binding import Mcp
from albedo_actors.catalogue.composition import Composition
from albedo_actors.catalogue.naming import Advertised
from albedo_actors.config import McpConfig, ServerConfig
from albedo_actors.runtime import Runtime

DEMO = os.path.join(REPO, "albedo_actors", "demo", "server.py")
TOOLS_SERVER = os.path.join(_common.HERE, "_tools_server.py")
DEMO_OPERATIONS = 5
SIZES = (10, 150, 1000)


def config(home: str, operations: int) -> McpConfig:
    many = operations - DEMO_OPERATIONS
    return McpConfig(home=home, servers=(
        ServerConfig(name="demo", type="stdio", command=sys.executable, args=("-I", DEMO)),
        ServerConfig(name="many", type="stdio", command=sys.executable, args=("-I", TOOLS_SERVER, "--tools", str(many))),
    ))


def copies(mcp: Mcp, composition: Composition, opts: argparse.Namespace) -> dict[str, float]:
    """Median ms of each way of handing out (or copying) the tool list, taking turns."""
    items = composition.operations
    schemas = [item.input_schema for item in items]
    marshalled = [marshal.dumps(schema) for schema in schemas]
    pickled = [pickle.dumps(schema, pickle.HIGHEST_PROTOCOL) for schema in schemas]
    ways: dict[str, Callable[[], Any]] = {
        "tools()": mcp.tools,
        "tools, shared schemas": lambda: [_shared_tool(item) for item in items],
        "composition.operations": lambda: composition.operations,
        "model_operations()": composition.model_operations,
        "model_operations_shared()": composition.model_operations_shared,
        "marshal.loads (shipped)": lambda: [marshal.loads(blob) for blob in marshalled],
        "pickle.loads": lambda: [pickle.loads(blob) for blob in pickled],
        "copy.deepcopy": lambda: [copy.deepcopy(schema) for schema in schemas],
        "json round trip": lambda: [json.loads(json.dumps(schema)) for schema in schemas],
    }
    listed = mcp.tools()  # copies that are equal and not the same objects
    if [t["inputSchema"] for t in listed] != schemas or any(t["inputSchema"] is s for t, s in zip(listed, schemas)):
        raise RuntimeError("mcp.tools() does not hand out equal copies of the schemas")
    for way in ways.values():
        way()  # the first copy marshals each schema once (Composition.schema_copy)
    timed: dict[str, list[int]] = {name: [] for name in ways}
    for r in range(opts.copies):
        for name in (ways if r % 2 == 0 else reversed(list(ways))):
            t0 = time.perf_counter_ns()
            ways[name]()
            timed[name].append(time.perf_counter_ns() - t0)
    return {name: statistics.median(ns) / 1e6 for name, ns in timed.items()}


def _shared_tool(item: Advertised) -> dict[str, Any]:
    """tools() before issue 24: the composition's own schema object in each dictionary."""
    return {"name": item.name, "server": item.server, "kind": item.kind, "operation": item.operation,
            "description": item.description, "inputSchema": item.input_schema}


def measure(home: str, operations: int, opts: argparse.Namespace) -> tuple[list[int], list[int], dict[str, float]]:
    """Timed calls (ns) of the binding and of the handle, at ``operations`` advertised,
    and at the largest size what handing out the tool list costs (:func:`copies`)."""
    with Runtime(home, None, config=config(home, operations), enabled=True) as runtime:
        composition = runtime.composition()
        if len(composition.operations) != operations or composition.left_out:
            raise RuntimeError(f"the session advertises {len(composition.operations)} operations "
                               f"(left out: {dict(composition.left_out)}), not {operations}")
        mcp, handle = runtime.mcp(), composition.handles["demo"]
        clients = {
            "binding": lambda: mcp.call("demo/echo", text="x"),
            "handle": lambda: handle.call_tool("echo", ARGS),
        }
        for call in clients.values():
            check_echo(call().as_dict() if call is clients["binding"] else call())
            timed_calls(call, opts.warmup)
        timed: dict[str, list[int]] = {name: [] for name in clients}
        for r in range(opts.rounds):
            order = list(clients) if r % 2 == 0 else list(reversed(clients))
            for name in order:
                gc.collect()
                timed[name].extend(timed_calls(clients[name], opts.calls))
        listing = copies(mcp, composition, opts) if operations == SIZES[-1] and not opts.child else {}
        return timed["binding"], timed["handle"], listing


def same_run(opts: argparse.Namespace) -> dict[int, dict[str, float]]:
    """binding/handle of this checkout (ours) and of ``--baseline`` (before), each
    measured in a fresh child process per size and round, the two taking turns; printed
    as a table, and returned as the median of each one's per-child ratios by size."""
    print()
    print(f"before/after in the same run: ours = {REPO}, before = {opts.baseline}; {opts.rounds} child runs each per size,"
          f" alternating, each {opts.calls * 2} calls per client")
    ratios: dict[int, dict[str, list[float]]] = {size: {"ours": [], "before": []} for size in SIZES}
    added: dict[int, dict[str, list[float]]] = {size: {"ours": [], "before": []} for size in SIZES}
    for r in range(opts.rounds):
        for size in SIZES:
            for who in (("ours", "before") if r % 2 == 0 else ("before", "ours")):
                progress(f"same run: round {r + 1}, {size} operations, {who}")
                env = dict(os.environ, ALBEDO_BENCH_PACKAGE=opts.baseline if who == "before" else REPO)
                out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", str(size), "--calls", str(opts.calls),
                                      "--rounds", "2", "--warmup", str(opts.warmup)],
                                     env=env, capture_output=True, text=True, check=True, timeout=300)
                got = json.loads(out.stdout.strip().splitlines()[-1])
                expected = os.path.join(opts.baseline if who == "before" else REPO, "albedo_actors")
                if os.path.realpath(got["package"]) != os.path.realpath(expected):
                    raise RuntimeError(f"the {who} child measured {got['package']}, not {expected}")
                ratios[size][who].append(got["binding"] / got["handle"])
                added[size][who].append(got["binding"] - got["handle"])
    header = f"{'operations':>10} {'before b/h':>11} {'ours b/h':>9} {'before added us':>16} {'ours added us':>14}"
    print(header)
    print("-" * len(header))
    medians = {}
    for size in SIZES:
        m = {who: statistics.median(ratios[size][who]) for who in ("before", "ours")}
        a = {who: statistics.median(added[size][who]) for who in ("before", "ours")}
        medians[size] = m
        print(f"{size:>10} {m['before']:>10.2f}x {m['ours']:>8.2f}x {a['before']:>16.1f} {a['ours']:>14.1f}")
    print("(b/h: binding/handle, the median over the child runs of each run's own ratio)")
    print()
    return medians


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=None, help="sequential calls per client and round (default 500)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per size, the clients taking turns (default 6)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up calls per client (default 200)")
    parser.add_argument("--copies", type=int, default=None, help="times each way of handing out the tool list is timed (default 30)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 100 calls, 2 rounds, 50 warm-up calls, 6 copies")
    parser.add_argument("--baseline", metavar="DIR", default=None,
                        help="also measure binding/handle of the checkout in DIR, in the same run (see docs/operations.rst)")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)  # one --baseline measurement
    opts = parser.parse_args(argv)
    for key, full, quick in (("calls", 500, 100), ("rounds", 6, 2), ("warmup", 200, 50), ("copies", 30, 6)):
        if getattr(opts, key) is None:
            setattr(opts, key, quick if opts.quick else full)
    if min(opts.calls, opts.rounds, opts.copies) < 1 or opts.warmup < 0:
        parser.error("--calls, --rounds and --copies must be positive")
    if opts.child is not None:
        with tempfile.TemporaryDirectory(prefix="bench-binding-") as home:
            binding, handle, _ = measure(home, opts.child, opts)
        print(json.dumps({"package": os.path.dirname(albedo_actors.__file__),
                          "binding": statistics.median(binding) / 1000, "handle": statistics.median(handle) / 1000}))
        return 0
    if opts.baseline is not None:
        opts.baseline = os.path.abspath(opts.baseline)
        if not os.path.isfile(os.path.join(opts.baseline, "albedo_actors", "__init__.py")):
            parser.error(f"--baseline {opts.baseline}: no albedo_actors package there")
    servers = lambda: processes_running(DEMO) | processes_running(TOOLS_SERVER)  # noqa: E731
    before, threads_before = servers(), set(threading.enumerate())
    started = time.perf_counter()
    rows = []
    listing: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-binding-") as home:
        for operations in SIZES:
            progress(f"{operations} operations")
            binding, handle, found = measure(home, operations, opts)
            rows.append((operations, statistics.median(binding) / 1000, statistics.median(handle) / 1000))
            listing = found or listing
    print()
    print(f"binding call vs the same handle's call_tool; calls={opts.calls} rounds={opts.rounds} warmup={opts.warmup}"
          f"{' (quick)' if opts.quick else ''}; {os.cpu_count()} cpus")
    print()
    header = f"{'operations':>10} {'binding us':>11} {'handle us':>10} {'binding/handle':>15} {'added us':>9}"
    print(header)
    print("-" * len(header))
    for operations, b, h in rows:
        print(f"{operations:>10} {b:>11.1f} {h:>10.1f} {ratio(b, h):>15} {b - h:>9.1f}")
    print()
    first, last = rows[0], rows[-1]
    print(f"flat: binding at {last[0]} / binding at {first[0]} operations = {ratio(last[1], first[1])}"
          f"   (targets: binding/handle <= 1.1x at every size; flat ~1.0x)")
    print()
    print(f"the tool list at {SIZES[-1]} operations, per turn: median ms of {opts.copies} each")
    for name, ms in listing.items():
        print(f"   {name:<26} {ms:9.3f}")
    shared_ms = max(listing["tools, shared schemas"], 1e-6)
    cost = {
        "tools/shared": ratio(listing["tools()"], shared_ms),
        "deepcopy/marshal": ratio(listing["copy.deepcopy"], listing["marshal.loads (shipped)"]),
        "pickle/marshal": ratio(listing["pickle.loads"], listing["marshal.loads (shipped)"]),
        "json/marshal": ratio(listing["json round trip"], listing["marshal.loads (shipped)"]),
    }
    print(f"   tools()/tools-shared={cost['tools/shared']} (copies add {listing['tools()'] - listing['tools, shared schemas']:.3f} ms); "
          f"model_operations() {listing['model_operations()']:.3f} ms against {listing['model_operations_shared()'] * 1000:.1f} us shared")
    print(f"   copying {SIZES[-1]} schemas: deepcopy/marshal={cost['deepcopy/marshal']} pickle/marshal={cost['pickle/marshal']} "
          f"json/marshal={cost['json/marshal']}")
    print()
    paired = same_run(opts) if opts.baseline else {}
    print("RATIOS " + " ".join(f"binding/handle@{o}={ratio(b, h)}" for o, b, h in rows) + f" flat={ratio(last[1], first[1])} "
          + "".join(f"before_binding/handle@{o}={p['before']:.2f}x ours_binding/handle@{o}={p['ours']:.2f}x " for o, p in paired.items())
          + " ".join(f"{k}={v}" for k, v in cost.items())
          + f" tools_ms={listing['tools()']:.3f} model_operations_ms={listing['model_operations()']:.3f}")
    print(f"(medians over {opts.calls * opts.rounds} timed calls per client and size; run took {time.perf_counter() - started:.1f} s)")
    return report_leftovers(before, servers, threads_before)


if __name__ == "__main__":
    sys.exit(main())
