#!/usr/bin/env python3
"""Benchmark the store: save and load a 1,000-tool catalogue, and open the store.

On SQLite (a fresh ``albedo.db`` in a temporary home: WAL, ``synchronous=FULL``) and,
when a URL is given (``--postgres URL`` or ``$ALBEDO_TEST_POSTGRES_URL``), on
PostgreSQL (the tables are dropped at the end). Prints the median and p90 of
``--rounds`` repetitions, in milliseconds::

    .venv/bin/python benchmarks/bench_store.py [--rounds 30] [--tools 1000] [--postgres URL]

open     ``open_store()`` on an existing, migrated database, then ``close()``
         (a new connection each time, plus the migration check)
save     ``save_catalogue()`` of the catalogue (JSON encoding, size check, one
         upsert in its own transaction, fsync'd commit)
load     ``load_catalogue()`` (one select, JSON decoding)
update   ``update_credentials()`` (an immediate / FOR UPDATE read-modify-write)
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

from albedo_actors.store import Credentials, open_store  # noqa: E402


def catalogue(n: int) -> dict:
    """A catalogue of ``n`` tools shaped like a real server's (name, description, schema)."""
    return {"tools": [{
        "name": f"tool_{i:04d}",
        "title": f"Tool number {i}",
        "description": f"Does thing {i} to the workspace; returns a summary of what changed. " * 2,
        "inputSchema": {"type": "object", "properties": {
            "path": {"type": "string", "description": "file or directory"},
            "recursive": {"type": "boolean", "default": False},
            "limit": {"type": "integer", "minimum": 1, "maximum": 1000}},
            "required": ["path"]},
        "annotations": {"readOnlyHint": i % 2 == 0},
    } for i in range(n)], "resources": [], "prompts": []}


def timed(fn, rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def report(name: str, label: str, samples: list[float]) -> None:
    samples = sorted(samples)
    p90 = samples[min(len(samples) - 1, int(len(samples) * 0.9))]
    print(f"{name:<11} {label:<7} median {statistics.median(samples):8.2f} ms   p90 {p90:8.2f} ms")


def bench(name: str, home: str, url: str | None, cat: dict, rounds: int) -> None:
    first = time.perf_counter()
    store = open_store(home, url)
    print(f"{name:<11} first open (create + migrate) {(time.perf_counter() - first) * 1000:.2f} ms")
    try:
        report(name, "open", timed(lambda: open_store(home, url).close(), rounds))
        report(name, "save", timed(lambda: store.save_catalogue("bench", "fp", "2026-07-28", cat), rounds))
        loaded = store.load_catalogue("bench")
        assert loaded is not None and loaded.catalogue == cat
        report(name, "load", timed(lambda: store.load_catalogue("bench"), rounds))
        report(name, "update", timed(lambda: store.update_credentials(
            "bench", lambda c: Credentials(bearer_token="t", env={"N": str(len(c.env))})), rounds))
    finally:
        store.close()


def drop_tables(url: str) -> None:
    import psycopg2

    conn = psycopg2.connect(url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS credentials, catalogues, oauth_clients, albedo_schema_version")
    conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--tools", type=int, default=1000)
    parser.add_argument("--postgres", default=os.environ.get("ALBEDO_TEST_POSTGRES_URL"),
                        help="a PostgreSQL URL to benchmark too (its albedo tables are dropped)")
    args = parser.parse_args()
    cat = catalogue(args.tools)
    size = len(json.dumps(cat, separators=(",", ":")).encode())
    print(f"catalogue: {args.tools} tools, {size / 1024:.0f} KiB of JSON; {args.rounds} rounds")
    with tempfile.TemporaryDirectory() as tmp:
        bench("sqlite", os.path.join(tmp, "home"), None, cat, args.rounds)
    if args.postgres:
        drop_tables(args.postgres)
        try:
            bench("postgresql", tempfile.gettempdir(), args.postgres, cat, args.rounds)
        finally:
            drop_tables(args.postgres)
    else:
        print("postgresql  skipped: give --postgres URL or $ALBEDO_TEST_POSTGRES_URL")


if __name__ == "__main__":
    main()
