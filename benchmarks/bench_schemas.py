#!/usr/bin/env python3
"""Output schemas (issue 16): a checked call against the same call unchecked, in one run.

A :class:`albedo_actors.runtime.Runtime` (no store) runs two stdio servers: ``demo``
(the bundled demo server: ``add`` declares a small outputSchema) and ``s``
(tests/servers/schema_server.py: ``v2020`` declares a 2020-12 schema with
``prefixItems``, ``dependentRequired``, a ``$ref`` and ``additionalProperties``).
Each round times ``--calls`` sequential binding calls of each case, checked (as
shipped) and unchecked (the binding's ``check_result`` swapped for a no-op), in
alternating order so drift hits both alike:

none    ``mcp.call("demo/echo", text="x")``: no outputSchema (what every other tool pays)
small   ``mcp.call("demo/add", a=1, b=2)``: ``{"sum": 3}``
medium  ``mcp.call("s/v2020", value=...)``: a pair and 1,000 integer properties

Then, without servers:

compile  the first checked call of a tool (the metaschema check and the validator
         built), per schema, against a later (cached) check of the same result
ready    ``advertise`` of 200 servers x 10 tools that each declare an outputSchema,
         against the same catalogues without one (the saved-catalogue ready path:
         only the cheap load checks run, no schema is compiled)

Printed: medians (µs) and the ratios. Targets: ``none`` about 1.0x (a tool without a
schema pays one dictionary lookup); ready with/without at most 1.2x. ``small`` and
``medium`` show jsonschema's own cost (about one descent per JSON value checked), which
the check does not add to beyond its bounds.

Run: ``.venv/bin/python benchmarks/bench_schemas.py [--quick]``.
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

from _common import REPO, processes_running, progress, ratio, report_leftovers, timed_calls  # it also puts the checkout first on sys.path

import albedo_actors.binding as binding
from albedo_actors.catalogue import Catalogue
from albedo_actors.catalogue import naming
from albedo_actors.catalogue.schemas import NOTHING, check_result
from albedo_actors.config import McpConfig, ServerConfig
from albedo_actors.runtime import Runtime

DEMO = os.path.join(REPO, "albedo_actors", "demo", "server.py")
SCHEMA_SERVER = os.path.join(REPO, "tests", "servers", "schema_server.py")
MEDIUM = {"pair": ["x", 1], "id": "k", "a": 1, "b": 2, **{f"n{i}": i for i in range(1000)}}


def calls(opts: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-schemas-") as home:
        config = McpConfig(home=home, servers=(
            ServerConfig(name="demo", type="stdio", command=sys.executable, args=("-I", DEMO)),
            ServerConfig(name="s", type="stdio", command=sys.executable, args=(SCHEMA_SERVER,)),
        ))
        with Runtime(home, None, config=config, enabled=True) as runtime:
            mcp = runtime.mcp()
            cases = {"none": lambda: mcp.call("demo/echo", text="x"), "small": lambda: mcp.call("demo/add", a=1, b=2),
                     "medium": lambda: mcp.call("s/v2020", value=MEDIUM)}
            checked, unchecked = check_result, (lambda *args: NOTHING)
            for name, call in cases.items():
                errors = call().schemaErrors
                if errors != ():
                    raise RuntimeError(f"{name}: the result does not match its outputSchema: {errors}")
            timed: dict[str, list[int]] = {f"{c} {k}": [] for c in cases for k in ("checked", "unchecked")}
            for case, call in cases.items():
                timed_calls(call, opts.warmup)
                for r in range(opts.rounds):
                    order = [("checked", checked), ("unchecked", unchecked)]
                    for kind, check in order if r % 2 == 0 else reversed(order):
                        binding.check_result = check  # the binding reads it at each call
                        try:
                            gc.collect()
                            timed[f"{case} {kind}"].extend(timed_calls(call, opts.calls))
                        finally:
                            binding.check_result = checked
    return {name: statistics.median(ns) / 1000 for name, ns in timed.items()}


def compile_cost(opts: argparse.Namespace) -> tuple[float, float]:
    """Median µs of a first checked call (compile included) and of a cached one."""
    schema = json_schema()
    first, later = [], []
    for _ in range(opts.compiles):
        fresh = Catalogue(server="bench", era="modern", protocol_version="2026-07-28",
                          tools=({"name": "t", "inputSchema": {"type": "object"}, "outputSchema": schema},))
        value = {"content": [], "structuredContent": {"pair": ["x", 1], "id": "k"}}
        t0 = time.perf_counter_ns()
        check_result(fresh, "t", value)
        t1 = time.perf_counter_ns()
        check_result(fresh, "t", value)
        first.append(t1 - t0)
        later.append(time.perf_counter_ns() - t1)
    return statistics.median(first) / 1000, statistics.median(later) / 1000


def json_schema() -> dict:
    sys.path.insert(0, os.path.dirname(SCHEMA_SERVER))
    from schema_server import V2020  # type: ignore[import-not-found]

    return V2020


def ready_cost(opts: argparse.Namespace) -> tuple[float, float]:
    """Median ms of advertise() over 200 servers x 10 tools, with and without outputSchemas."""
    def catalogues(with_schema: bool) -> dict[str, Catalogue]:
        out = {}
        for s in range(200):
            tools = []
            for t in range(10):
                tool = {"name": f"tool{t}", "description": "A tool.", "inputSchema": {
                    "type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}, "required": ["q"]}}
                if with_schema:
                    tool["outputSchema"] = {"type": "object", "properties": {"items": {"type": "array", "items": {
                        "type": "object", "properties": {"id": {"type": "string"}, "score": {"type": "number"}}}}},
                        "required": ["items"]}
                tools.append(tool)
            out[f"server{s}"] = Catalogue(server=f"server{s}", era="modern", protocol_version="2026-07-28", tools=tuple(tools))
        return out

    runs: dict[bool, list[int]] = {True: [], False: []}
    for r in range(opts.ready):
        for with_schema in (True, False) if r % 2 == 0 else (False, True):  # alternating: drift hits both
            built = catalogues(with_schema)  # new catalogue objects: nothing cached from the last run
            naming._BUILT.clear()
            gc.collect()
            t0 = time.perf_counter_ns()
            naming.advertise(built, {}, lambda warning: None)
            runs[with_schema].append(time.perf_counter_ns() - t0)
    return statistics.median(runs[True]) / 1e6, statistics.median(runs[False]) / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=None, help="sequential calls per case, kind and round (default 300)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 6)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up calls per case (default 100)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 50 calls, 2 rounds, 20 warm-up calls")
    opts = parser.parse_args(argv)
    for key, full, quick in (("calls", 300, 50), ("rounds", 6, 2), ("warmup", 100, 20)):
        if getattr(opts, key) is None:
            setattr(opts, key, quick if opts.quick else full)
    opts.compiles, opts.ready = (20, 4) if opts.quick else (100, 20)
    servers = lambda: processes_running(DEMO) | processes_running(SCHEMA_SERVER)  # noqa: E731
    before, threads_before = servers(), set(threading.enumerate())
    started = time.perf_counter()
    progress("calls")
    medians = calls(opts)
    progress("compile")
    first, later = compile_cost(opts)
    progress("ready path")
    with_schemas, without = ready_cost(opts)
    print()
    print(f"output schemas: calls={opts.calls} rounds={opts.rounds} warmup={opts.warmup}"
          f"{' (quick)' if opts.quick else ''}; {os.cpu_count()} cpus; jsonschema {_version()}")
    print()
    for case in ("none", "small", "medium"):
        c, u = medians[f"{case} checked"], medians[f"{case} unchecked"]
        print(f"{case:>7}: checked {c:8.1f} us   unchecked {u:8.1f} us   checked/unchecked {ratio(c, u):>6}   added {c - u:6.1f} us")
    print(f"compile: first checked call {first:8.1f} us   cached check {later:6.1f} us   first/cached {ratio(first, later)}")
    print(f"  ready: advertise 2,000 tools with outputSchemas {with_schemas:.2f} ms   without {without:.2f} ms   "
          f"with/without {ratio(with_schemas, without)}")
    print("RATIOS " + " ".join(f"{case}={ratio(medians[f'{case} checked'], medians[f'{case} unchecked'])}" for case in ("none", "small", "medium"))
          + f" ready={ratio(with_schemas, without)} compile/cached={ratio(first, later)}")
    print(f"(targets: none ~1.0x, ready <= 1.2x; small and medium: jsonschema's cost; run took {time.perf_counter() - started:.1f} s)")
    return report_leftovers(before, servers, threads_before)


def _version() -> str:
    from importlib.metadata import version

    return version("jsonschema")


if __name__ == "__main__":
    sys.exit(main())
