#!/usr/bin/env python3
"""Tool search (issue 16): the BM25 index against a linear scan, and the call path with search on and off.

Part 1, in memory: one composition of 10,000 operations from 50 servers (200 tools
each; names, descriptions and parameter names drawn from a fixed vocabulary of
ordinary tool words, seeded, so every run sees the same operations).

build    ``ToolIndex(composition.model_operations())``: the index the first search of a
         composition builds, over catalogues some composition has indexed before (each
         server's part reused: what every new session pays; goal: under 100 ms).
cold     the same with no part built yet: the first search after the daemon starts or
         after every catalogue changed (each server's part is built once, then shared).
query    ``index.search(q, 10)`` for each of the fixed queries (goal: under 5 ms).
scan     the same queries answered by a linear scan: every operation's words tokenised
         and matched at each query (what a search without an index costs).
turn     ``composition.model_operations()`` over a budget of 64 (pinned, recent, search
         tool): what a host pays each turn.
calibration  300,000 dict increments: the interpreter's speed in this run (the
         goals are absolute; on a shared or slow machine read them against this).

Part 2, a real session (the bundled demo server over stdio, no store): ``--calls``
sequential ``mcp.call("demo/echo", text="x")`` per round with search enabled
(``maxTools`` 2, the index built, the call recorded as recently used) and disabled
(no budget), the two taking turns; the ratio enabled/disabled (goal: ~1.0x, no growth).

Run: ``.venv/bin/python benchmarks/bench_search.py [--quick]``. See docs/operations.rst ("Budgets, pinning and tool search").
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import tempfile
import threading
import time

from _common import REPO, processes_running, progress, ratio, report_leftovers, timed_calls

from albedo_actors.catalogue.composition import Composition, Usage
from albedo_actors.catalogue import Catalogue
from albedo_actors.catalogue import search as search_module
from albedo_actors.catalogue.search import ToolIndex, _words, tokens
from albedo_actors.config import Advertise, McpConfig, ServerConfig
from albedo_actors.runtime import Runtime

DEMO = os.path.join(REPO, "albedo_actors", "demo", "server.py")
SERVERS, TOOLS = 50, 200
VERBS = "read write list create delete update search get set move copy rename send fetch run start stop query export import".split()
NOUNS = ("file directory issue pull_request branch commit user group message channel ticket invoice customer order "
         "payment record table row column document page image video event calendar task project repository").split()
WORDS = ("the a an from to with by in on of for all new old each given current selected remote local matching "
         "named recent first last every its their this that into as about using over under").split()
QUERIES = ("read a file", "create a new issue", "send a message to a channel", "list all users in a group",
           "delete an old branch", "search invoices by customer", "export a table as rows", "rename a document page",
           "start a task in a project", "fetch the calendar events")


def catalogues() -> dict[str, Catalogue]:
    rng = random.Random(16)
    out = {}
    for s in range(SERVERS):
        name = f"server{s:02d}"
        tools = []
        for t in range(TOOLS):
            verb, noun = rng.choice(VERBS), rng.choice(NOUNS)
            words = [rng.choice(VERBS + NOUNS + WORDS * 3) for _ in range(rng.randint(8, 30))]
            description = f"{verb.capitalize()} {noun.replace('_', ' ')}: " + " ".join(words) + "."
            properties = {p: {"type": "string", "description": f"The {p}."} for p in rng.sample(NOUNS, rng.randint(1, 4))}
            tools.append({"name": f"{verb}_{noun}_{t}", "description": description,
                          "inputSchema": {"type": "object", "properties": properties}})
        out[name] = Catalogue(server=name, era="modern", protocol_version="2026-07-28", tools=tuple(tools))
    return out


def scan(operations, query: str, limit: int = 10):
    """A linear scan: each operation's words matched against the query's, every time."""
    wanted = set(tokens(query))
    scored = []
    for number, item in enumerate(operations):
        words = _words(item)
        score = sum(1 for word in words if word in wanted)
        if score:
            scored.append((-score / (len(words) or 1), number))
    scored.sort()
    return [operations[number] for _, number in scored[:limit]]


def calibration() -> float:
    """ms for 300,000 dict increments: this machine's interpreter speed at the moment of
    the run, so that figures from a loaded or slow machine can be read against others."""
    samples = []
    for _ in range(3):
        start = time.perf_counter_ns()
        d: dict[int, int] = {}
        for k in range(300_000):
            d[k % 5000] = d.get(k % 5000, 0) + 1
        samples.append(time.perf_counter_ns() - start)
    return min(samples) / 1e6


def ms(samples: list[int]) -> float:
    return statistics.median(samples) / 1e6


def in_memory(opts: argparse.Namespace) -> dict[str, float]:
    composition = Composition(catalogues=catalogues())
    operations = composition.model_operations()
    if len(operations) != SERVERS * TOOLS:
        raise RuntimeError(f"{len(operations)} operations, not {SERVERS * TOOLS}")
    builds, colds = [], []
    for _ in range(opts.builds):
        search_module._PARTS.clear()  # no server indexed yet
        gc.collect()
        start = time.perf_counter_ns()
        ToolIndex(operations)
        colds.append(time.perf_counter_ns() - start)
        gc.collect()
        start = time.perf_counter_ns()
        index = ToolIndex(Composition(catalogues=composition.catalogues).model_operations())  # a new session's
        builds.append(time.perf_counter_ns() - start)
    queries, scans = [], []
    for r in range(opts.rounds):
        for query in QUERIES:
            start = time.perf_counter_ns()
            found = index.search(query, 10)
            queries.append(time.perf_counter_ns() - start)
            if not found:
                raise RuntimeError(f"nothing found for {query!r}")
        if r < 2:  # the scan is slow: two rounds are enough for its median
            for query in QUERIES:
                start = time.perf_counter_ns()
                scan(operations, query)
                scans.append(time.perf_counter_ns() - start)
    usage = Usage()
    usage.configured = Advertise(64, (f"server00/{operations[0].operation}",))
    budgeted = Composition(catalogues=composition.catalogues, usage=usage)
    for item in operations[:: len(operations) // 200]:
        budgeted.used(item)
    turns = timed_calls(budgeted.model_operations, opts.rounds * 50)
    return {"build": ms(builds), "cold": ms(colds), "query": ms(queries), "scan": ms(scans), "turn": ms(turns), "calibration": calibration()}


def call_path(home: str, opts: argparse.Namespace) -> tuple[float, float]:
    state: dict = {"advertise": None}
    server = ServerConfig(name="demo", type="stdio", command=sys.executable, args=("-I", DEMO))
    with Runtime(home, None, config=lambda: McpConfig(home=home, servers=(server,), advertising=state["advertise"]),
                 enabled=True) as runtime:
        mcp = runtime.mcp()
        runtime.composer.set_budget(2).get(timeout=10)
        enabled = runtime.composition()
        if len(enabled.model_operations()) != 2 or not mcp.search("echo text"):
            raise RuntimeError("the budget of 2 did not hold")
        call = lambda: mcp.call("demo/echo", text="x")  # noqa: E731
        timed_calls(call, opts.warmup)
        timed: dict[str, list[int]] = {"enabled": [], "disabled": []}
        for r in range(opts.rounds):
            order = ["enabled", "disabled"] if r % 2 == 0 else ["disabled", "enabled"]
            for name in order:
                runtime.composer.set_budget(2 if name == "enabled" else None).get(timeout=10)
                gc.collect()
                timed[name].extend(timed_calls(call, opts.calls))
        return statistics.median(timed["enabled"]) / 1000, statistics.median(timed["disabled"]) / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=None, help="sequential calls per mode and round (default 500)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 6)")
    parser.add_argument("--builds", type=int, default=None, help="index builds timed (default 7)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up calls (default 200)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 100 calls, 2 rounds, 3 builds, 50 warm-up calls")
    opts = parser.parse_args(argv)
    for key, full, quick in (("calls", 500, 100), ("rounds", 6, 2), ("builds", 7, 3), ("warmup", 200, 50)):
        if getattr(opts, key) is None:
            setattr(opts, key, quick if opts.quick else full)
    servers = lambda: processes_running(DEMO)  # noqa: E731
    before, threads_before = servers(), set(threading.enumerate())
    started = time.perf_counter()
    progress(f"{SERVERS * TOOLS} operations in memory")
    figures = in_memory(opts)
    progress("the call path")
    with tempfile.TemporaryDirectory(prefix="bench-search-") as home:
        enabled, disabled = call_path(home, opts)
    print()
    print(f"tool search: {SERVERS * TOOLS} operations from {SERVERS} servers; rounds={opts.rounds} calls={opts.calls}"
          f"{' (quick)' if opts.quick else ''}; {os.cpu_count()} cpus")
    print()
    print(f"index build      {figures['build']:9.2f} ms   (goal < 100 ms; a new composition, parts reused)")
    print(f"index build cold {figures['cold']:9.2f} ms   (every server's part built: once per catalogue)")
    print(f"query (indexed)  {figures['query']:9.3f} ms   (goal < 5 ms)")
    print(f"query (scan)     {figures['scan']:9.2f} ms   scan/indexed = {ratio(figures['scan'], figures['query'])}")
    print(f"turn set (64)    {figures['turn']:9.3f} ms")
    print(f"calibration      {figures['calibration']:9.1f} ms   (300,000 dict increments, this run): "
          f"build = {figures['build'] / figures['calibration']:.1f}x, query = {figures['query'] / figures['calibration']:.3f}x of it")
    print(f"call, search on  {enabled:9.1f} us")
    print(f"call, search off {disabled:9.1f} us   on/off = {ratio(enabled, disabled)}   (goal ~1.0x)")
    print("RATIOS " + f"scan/indexed={ratio(figures['scan'], figures['query'])} call_on/off={ratio(enabled, disabled)} "
          f"build_ms={figures['build']:.1f} cold_ms={figures['cold']:.1f} query_ms={figures['query']:.3f}")
    print(f"(run took {time.perf_counter() - started:.1f} s)")
    return report_leftovers(before, servers, threads_before)


if __name__ == "__main__":
    sys.exit(main())
