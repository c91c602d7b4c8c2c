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

Then (issue 23):

patterns  ordinary patterns (server-everything-like ``^[a-z]+$``, email-ish, date-ish,
          a UUID) matched by RE2 as a check does (``schemas._matches``: encoded, its cost
          bounded) against Python's ``re.search`` (what jsonschema ran) on the same
          strings, per match and per checked result (``check_result`` with ``_matches``
          swapped for ``re.search``)
unique    ``uniqueItems`` over 10,000 distinct one-member objects: jsonschema's own
          keyword (before) against ours, the same array; and 9,999 through
          ``check_result`` (the most MAX_CONTENT_VALUES lets in)
re2       RE2's slowest path, its NFA (``[ab]*a[ab]{100}c`` over 1 MiB of random a/b):
          ns per text byte per program instruction, against the 20 ns that
          ``patterns.WORK_PER_SECOND`` assumes; the worst compile near MAX_MEM
          (``\\p{L}{1000}``, refused, and ``^[\\p{L}\\p{N}_-]{1,64}$``, 86,000
          instructions); and what ``import re2`` costs a fresh interpreter

Printed: medians (µs) and the ratios. Targets: ``none`` about 1.0x (a tool without a
schema pays one dictionary lookup); ready with/without at most 1.2x. ``small`` and
``medium`` show jsonschema's own cost (about one descent per JSON value checked), which
the check does not add to beyond its bounds.

Run: ``.venv/bin/python benchmarks/bench_schemas.py [--quick]`` (the "before" of
``unique`` takes about two minutes; ``--quick`` measures it on 2,000 objects).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from _common import REPO, processes_running, progress, ratio, report_leftovers, timed_calls  # it also puts the checkout first on sys.path

import albedo_actors.binding as binding
from albedo_actors.catalogue import Catalogue
from albedo_actors.catalogue import naming, patterns, schemas
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
            checked, unchecked = check_result, (lambda *args, **kwargs: NOTHING)
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


ORDINARY = {  # pattern -> a string it matches, as servers send them
    "^[a-z]+$": "structured",
    "^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$": "someone@example.com",
    "^\\d{4}-\\d{2}-\\d{2}$": "2026-05-01",
    "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$": "123e4567-e89b-12d3-a456-426614174000",
}


def pattern_cost(opts: argparse.Namespace) -> dict[str, tuple[float, float, float, float]]:
    """Per pattern: median ns of one match (RE2 as checked, re.search) and µs of one
    checked result (``{"s": text}`` against ``{"properties": {"s": {"pattern": p}}}``)."""
    out: dict[str, tuple[float, float, float, float]] = {}
    matches = schemas._matches
    python_re = (lambda pattern, text: re.search(pattern, text) is not None)  # jsonschema's own, with re's cache
    budget = schemas._Budget(None, time.monotonic() + 3600, server=True)
    for index, (pattern, text) in enumerate(ORDINARY.items()):
        tools = ({"name": "t", "inputSchema": {"type": "object"}, "outputSchema": {"properties": {"s": {"pattern": pattern}}}},)
        catalogue = Catalogue(server=f"p{index}", era="modern", protocol_version="2026-07-28", tools=tools)
        value = {"content": [], "structuredContent": {"s": text}}
        if check_result(catalogue, "t", value).errors or not matches(pattern, text) or not python_re(pattern, text):
            raise RuntimeError(f"{pattern!r} does not match {text!r}")
        match_ns: dict[str, list[float]] = {"re2": [], "re": []}
        check_us: dict[str, list[float]] = {"re2": [], "re": []}
        for r in range(opts.rounds):
            order = [("re2", matches), ("re", python_re)]
            for kind, match in order if r % 2 == 0 else reversed(order):
                schemas._STATE.budget = budget  # as inside a check: the cost bound is read
                try:
                    t0 = time.perf_counter_ns()
                    for _ in range(opts.matches):
                        match(pattern, text)
                    match_ns[kind].append((time.perf_counter_ns() - t0) / opts.matches)
                finally:
                    schemas._STATE.budget = None
                schemas._matches = match
                try:
                    t0 = time.perf_counter_ns()
                    for _ in range(opts.calls):
                        check_result(catalogue, "t", value)
                    check_us[kind].append((time.perf_counter_ns() - t0) / opts.calls / 1000)
                finally:
                    schemas._matches = matches
        out[pattern] = (statistics.median(match_ns["re2"]), statistics.median(match_ns["re"]),
                        statistics.median(check_us["re2"]), statistics.median(check_us["re"]))
    return out


def unique_cost(opts: argparse.Namespace) -> tuple[int, float, float, float]:
    """Objects, seconds of jsonschema's uniqueItems and of ours over them, and seconds of
    check_result over 9,999 of them."""
    import jsonschema

    n = 2000 if opts.quick else 10_000
    items = [{"i": k} for k in range(n)]
    schema = {"type": "array", "uniqueItems": True}
    theirs = jsonschema.Draft202012Validator(schema)
    ours = schemas._checking_class("Draft202012Validator")(schema)
    t0 = time.perf_counter()
    if next(theirs.iter_errors(items), None) is not None:
        raise RuntimeError("jsonschema found equal items")
    before = time.perf_counter() - t0
    t0 = time.perf_counter()
    if next(ours.iter_errors(items), None) is not None:
        raise RuntimeError("ours found equal items")
    after = time.perf_counter() - t0
    tools = ({"name": "t", "inputSchema": {"type": "object"}, "outputSchema": schema},)
    catalogue = Catalogue(server="unique", era="modern", protocol_version="2026-07-28", tools=tools)
    content = {"content": [], "structuredContent": [{"i": k} for k in range(schemas.MAX_CONTENT_VALUES // 2 - 1)]}
    t0 = time.perf_counter()
    if check_result(catalogue, "t", content).errors:
        raise RuntimeError("check_result found equal items")
    return n, before, after, time.perf_counter() - t0


def re2_cost() -> tuple[float, float, float, float]:
    """RE2's NFA ns per byte per instruction, the worst compile (ms), and ``import re2``
    in a fresh interpreter: ms and KiB of resident memory."""
    regex = patterns.compiled("[ab]*a[ab]{100}c")
    assert regex is not None
    data = random.Random(23).randbytes(1 << 20).translate(bytes(97 + i % 2 for i in range(256)))
    runs = []
    for _ in range(3):
        t0 = time.perf_counter_ns()
        regex.search(data)
        runs.append(time.perf_counter_ns() - t0)
    rate = min(runs) / regex.work(data)
    compiles: dict[str, list[float]] = {}
    for i in range(3):  # a new source each time: compiled, not read from the cache
        for heavy in ("\\p{L}{1000}", "^[\\p{L}\\p{N}_-]{1,64}$"):  # refused at MAX_MEM, and compiled just under it
            t0 = time.perf_counter()
            patterns.compiled(heavy + "x" * i)
            compiles.setdefault(heavy, []).append(time.perf_counter() - t0)
    worst = max(min(runs) for runs in compiles.values())
    child = ("import json, os, time\n"
             "def rss(): return int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE')\n"
             "before = rss(); t0 = time.perf_counter(); import re2\n"
             "print(json.dumps([time.perf_counter() - t0, rss() - before]))")
    took, grew = json.loads(subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60, check=True).stdout)
    return rate, worst * 1000, took * 1000, grew / 1024


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
    opts.matches = 2000 if opts.quick else 20_000
    servers = lambda: processes_running(DEMO) | processes_running(SCHEMA_SERVER)  # noqa: E731
    before, threads_before = servers(), set(threading.enumerate())
    started = time.perf_counter()
    progress("calls")
    medians = calls(opts)
    progress("compile")
    first, later = compile_cost(opts)
    progress("ready path")
    with_schemas, without = ready_cost(opts)
    progress("patterns")
    matched = pattern_cost(opts)
    progress("uniqueItems (jsonschema's own: minutes)")
    unique = unique_cost(opts)
    rate, compile_ms, import_ms, import_kib = re2_cost()
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
    print()
    for pattern, (m2, m1, c2, c1) in matched.items():
        print(f"pattern {pattern[:34]:<34}  match: re2 {m2:7.0f} ns  re {m1:6.0f} ns  {ratio(m2, m1):>6}   "
              f"checked result: re2 {c2:6.1f} us  re {c1:6.1f} us  {ratio(c2, c1):>6}")
    n, theirs, ours, checked = unique
    print(f" unique: {n:,} objects: jsonschema {theirs:8.2f} s   ours {ours * 1000:7.1f} ms   before/after "
          f"{ratio(theirs, ours)}   check_result of 9,999: {checked * 1000:.1f} ms")
    print(f"    re2: NFA {rate:.2f} ns per byte-instruction (WORK_PER_SECOND assumes {1e9 / patterns.WORK_PER_SECOND:g})   worst compile "
          f"{compile_ms:.1f} ms   import re2 {import_ms:.1f} ms, {import_kib:,.0f} KiB resident")
    print("RATIOS " + " ".join(f"re2/re[{p[:12]}]={ratio(m2, m1)}" for p, (m2, m1, _, _) in matched.items())
          + f" unique_before/after={ratio(theirs, ours)}")
    print(f"(targets: none ~1.0x, ready <= 1.2x; small and medium: jsonschema's cost; run took {time.perf_counter() - started:.1f} s)")
    return report_leftovers(before, servers, threads_before)


def _version() -> str:
    from importlib.metadata import version

    return version("jsonschema")


if __name__ == "__main__":
    sys.exit(main())
