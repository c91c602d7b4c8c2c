#!/usr/bin/env python3
"""Benchmark the command line's client of the settings service (issue 23): the same
requests to one running service, through our client over the home's Unix socket, and
through ``requests`` over the service's TCP port (how the command line talked to it
before), in the same run, printed as ratios.

One real :class:`~albedo_actors.service.server.Service` over a temporary home with three
stdio servers configured (switched off: nothing is dialled), so ``GET /api/mcp`` reads
the settings and the store as a command does. Rounds alternate the two clients (ours
first on even rounds). Each round times:

find     ``ServiceClient.find(home)``: read service.json, connect to the socket, check
         its peer (SO_PEERCRED) and the health check: what every command pays before it
         sends anything (``requests``: none of it; its figure is a bare connection)
health   ``GET /api/health``, the cheapest request
get      ``GET /api/mcp``, what ``add`` and ``edit`` read first

Run: ``.venv/bin/python benchmarks/bench_service_client.py [--rounds 7] [--requests 200]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:
    sys.path.insert(0, REPO)

import requests  # noqa: E402  (a test dependency: the runtime does not use it)

from albedo_actors.service.client import ServiceClient  # noqa: E402
from albedo_actors.service.server import Service  # noqa: E402
from albedo_actors.store import open_store  # noqa: E402


def per_request(fn, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="albedo-bench-service-") as tmp:
        home = os.path.join(tmp, "home")
        os.mkdir(home, 0o700)
        servers = {f"s{i}": {"type": "stdio", "command": sys.executable, "args": ["-c", "pass"], "enabled": False}
                   for i in range(3)}
        with open(os.path.join(home, "extensions.json"), "w") as f:
            json.dump({"mcp": {"servers": servers}}, f)
        store = open_store(home)
        try:
            with Service(home, store) as service:
                ours = ServiceClient.find(home)
                assert ours is not None
                http = requests.Session()
                http.trust_env = False
                headers = {"Authorization": f"Bearer {service.token}", "Accept": "application/json"}

                def theirs(path: str) -> None:
                    reply = http.get(service.url + path, headers=headers, timeout=30)
                    reply.raise_for_status()
                    reply.json()

                def bare_connection() -> None:
                    reply = requests.get(service.url + "/api/health", headers=headers, timeout=30)
                    reply.raise_for_status()

                cases = {
                    "find": (lambda: ServiceClient.find(home), bare_connection),
                    "health": (lambda: ours._json("GET", "/api/health"), lambda: theirs("/api/health")),
                    "get": (ours.get, lambda: theirs("/api/mcp")),
                }
                for fn_ours, fn_theirs in cases.values():  # warm both
                    fn_ours()
                    fn_theirs()
                figures: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in cases}
                for round_ in range(args.rounds):
                    for name, (fn_ours, fn_theirs) in cases.items():
                        n = args.requests if name != "find" else max(20, args.requests // 4)
                        pair = [(fn_ours, figures[name][0]), (fn_theirs, figures[name][1])]
                        for fn, into in pair if round_ % 2 == 0 else reversed(pair):
                            into.append(per_request(fn, n))
                http.close()
        finally:
            store.close()
    print(f"service client: {args.rounds} rounds, {args.requests} requests each (median µs per request)")
    print(f"{'':8}{'ours (unix socket)':>20}{'requests (tcp)':>18}{'ratio':>10}")
    for name, (ours_us, theirs_us) in figures.items():
        a, b = statistics.median(ours_us), statistics.median(theirs_us)
        print(f"{name:8}{a:20.0f}{b:18.0f}{a / b:9.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
