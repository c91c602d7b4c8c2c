#!/usr/bin/env python3
"""What OpenTelemetry costs a tool call (issue 28).

One stdio connection to the bundled demo server (``albedo_actors/demo/server.py``), one
``ServerHandle``; every call is ``handle.call_tool("echo", {"text": "x"})``. Each round
times ``--calls`` sequential calls each way (the order alternates between rounds):

off     telemetry turned off (``telemetry.configure(enabled=False)``): the path of a host
        without the ``otel`` extra, where the API is missing (one attribute read per
        request more than before issue 28);
noop    the API installed, no SDK configured: its no-op tracer and meter, nothing sent;
sdk     the SDK configured, spans to an in-memory exporter (a simple processor, so each
        span is exported on the call's path) and metrics to an in-memory reader, trace
        context in every request's ``_meta``. Measured after off and noop, with off again
        beside it (the API's global providers cannot be unset).

Printed: the median latency of each (medians of the rounds' medians) and the ratios
noop/off (goal: at most 1.05x) and sdk/off.

Run: ``.venv/bin/python benchmarks/bench_otel.py [--quick]`` (needs the test extra's
``opentelemetry-sdk``).
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
from typing import Callable

from _common import REPO, processes_running, progress, ratio, report_leftovers, timed_calls

from albedo_actors.actors.client import ServerHandle
from albedo_actors.config import ServerConfig
from albedo_actors.wire import telemetry

DEMO = os.path.join(REPO, "albedo_actors", "demo", "server.py")
TIMEOUT = 10.0  # each call's deadline: a bound, never an expected duration


def install_sdk() -> Callable[[], int]:
    """Configure the SDK with in-memory export; return a count of the spans exported."""
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))

    def exported() -> int:
        count = len(exporter.get_finished_spans())
        exporter.clear()  # the exporter keeps every span: cleared between rounds
        return count

    return exported


def measure(ways: dict[str, Callable[[], object]], switch: dict[str, bool], calls: int, rounds: int,
            figures: dict[str, list[float]], after: Callable[[], object] = lambda: None) -> None:
    for name, call in ways.items():
        telemetry.configure(enabled=switch[name])
        timed_calls(call, calls // 4)  # warm-up
    for r in range(rounds):
        progress(f"round {r + 1} of {rounds}")
        for name in (list(ways) if r % 2 == 0 else list(reversed(ways))):
            telemetry.configure(enabled=switch[name])
            gc.collect()
            figures[name].append(statistics.median(timed_calls(ways[name], calls)) / 1000)
            after()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=None, help="sequential calls per way and round (default 1000)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 6)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 200 calls, 2 rounds")
    opts = parser.parse_args(argv)
    opts.calls = opts.calls or (200 if opts.quick else 1000)
    opts.rounds = opts.rounds or (2 if opts.quick else 6)
    servers = lambda: processes_running(DEMO)  # noqa: E731
    before, threads_before = servers(), set(threading.enumerate())
    started = time.perf_counter()
    figures: dict[str, list[float]] = {"off": [], "noop": [], "off again": [], "sdk": []}
    spans = 0
    with tempfile.TemporaryDirectory(prefix="bench-otel-") as home:
        handle = ServerHandle.start(ServerConfig(name="demo", type="stdio", command=sys.executable, args=("-I", DEMO)), home)
        try:
            handle.connect(TIMEOUT)

            def call() -> object:
                return handle.call_tool("echo", {"text": "x"}, TIMEOUT)

            measure({"off": call, "noop": call}, {"off": False, "noop": True}, opts.calls, opts.rounds, figures)
            exported = install_sdk()
            measure({"off again": call, "sdk": call}, {"off again": False, "sdk": True}, opts.calls, opts.rounds, figures,
                    after=exported)
            telemetry.configure(enabled=True)
            call()
            spans = exported()
        finally:
            handle.stop()
    median = {name: statistics.median(values) for name, values in figures.items()}
    print()
    print(f"OpenTelemetry on a tool call: demo server over stdio; rounds={opts.rounds} "
          f"calls={opts.calls}{' (quick)' if opts.quick else ''}; {os.cpu_count()} cpus")
    for name in figures:
        print(f"{name:9s} {median[name]:8.1f} us   rounds: {', '.join(f'{v:.0f}' for v in figures[name])}")
    print(f"RATIOS noop/off={ratio(median['noop'], median['off'])} (goal <= 1.05x) "
          f"sdk/off={ratio(median['sdk'], median['off again'])}")
    print(f"(spans of the last call exported: {spans}; run took {time.perf_counter() - started:.1f} s)")
    return report_leftovers(before, servers, threads_before)


if __name__ == "__main__":
    sys.exit(main())
