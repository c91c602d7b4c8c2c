#!/usr/bin/env python3
"""Benchmark the cost of encryption at rest per token refresh: the same flows with and
without ``$ALBEDO_STORE_KEY``, measured in the same run, printed as ratios.

Two stores side by side (SQLite in temporary homes; PostgreSQL too with ``--postgres
URL`` or ``$ALBEDO_TEST_POSTGRES_URL``), one opened with no key, one with a key; the
rounds alternate between them (plain first on even rounds, keyed first on odd):

store     one refresh round through the store alone, as ``auth/refresh.py`` makes it:
          ``holding_credentials`` (read, take the lease), then ``holding_credentials``
          (read, ``put`` the new OAuth record of ~1 KiB, drop the lease); two short
          transactions with fsync'd commits. The keyed store opens four sealed values
          and seals four per transaction.
seal      the sealing alone: seal and open one such OAuth record (no database).
refresh   the full refresher path: ``refresh_held`` against one real loopback
          authorization server (``tests/servers/oauth_server.py``): lease, a
          ``refresh_token`` request over HTTP, the result written. ``--refreshes`` per
          round and store.

The wall times of the store rounds are dominated by fsync'd commits, so on a shared
disk they vary by tens of percent between two stores without a key; the lines in
parentheses give this process's CPU time, and the sealing work of one round alone,
which is what the key adds.

Run: ``.venv/bin/python benchmarks/bench_store_crypto.py [--rounds 9] [--store-ops 200] [--refreshes 20]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
for path in (REPO, os.path.join(REPO, "tests")):
    if path not in sys.path:
        sys.path.insert(0, path)

from albedo_actors.store import Credentials, open_store  # noqa: E402
from albedo_actors.store.sealing import StoreKeys, new_key, parse_key  # noqa: E402


def record(n: int) -> dict:
    return {"url": "https://mcp.example/mcp", "state": "signed_in", "access_token": f"at-{n}-" + "a" * 300,
            "refresh_token": f"rt-{n}-" + "r" * 200, "expires_at": time.time() + 3600, "obtained_at": time.time(),
            "scope": "mcp offline_access", "issuer": "https://as.example", "client_id": "client-123",
            "client_secret": "s" * 40, "client_kind": "registered", "token_endpoint": "https://as.example/token"}


def store_round(store, n: int) -> None:
    with store.holding_credentials("bench") as (_old, put):
        put.take_lease("me", time.time() + 30)
    with store.holding_credentials("bench") as (old, put):
        put(dataclasses.replace(old, oauth=record(n)))
        put.drop_lease("me")


CPU: dict[str, list[float]] = {}
SEALING: list[float] = []


def per_op_us(fn, n: int, cpu_key: str | None = None) -> float:
    """Wall microseconds per call of ``fn``; this process's CPU time per call goes to CPU[cpu_key]."""
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(n):
        fn(i)
    if cpu_key is not None:
        CPU.setdefault(cpu_key, []).append((time.process_time() - cpu) / n * 1e6)
    return (time.perf_counter() - start) / n * 1e6


def line(name: str, plain: list[float], keyed: list[float], unit: str = "us") -> None:
    p, k = statistics.median(plain), statistics.median(keyed)
    print(f"{name:<26} plain {p:10.1f} {unit}   keyed {k:10.1f} {unit}   keyed/plain {k / p:5.2f}x   ({k - p:+.1f} {unit})")
    if f"{name}/plain" in CPU:
        p, k = statistics.median(CPU[f"{name}/plain"]), statistics.median(CPU[f"{name}/keyed"])
        if unit == "ms":
            p, k = p / 1000, k / 1000
        print(f"{'  (cpu of this process)':<26} plain {p:10.1f} {unit}   keyed {k:10.1f} {unit}   keyed/plain {k / p:5.2f}x   "
              f"({k - p:+.1f} {unit})")


def bench_store(label: str, plain, keyed, rounds: int, ops: int) -> None:
    for store in (plain, keyed):
        store.put_credentials("bench", Credentials(bearer_token="b" * 40, env={"K": "v" * 40}, oauth=record(0)))
        store_round(store, 0)  # warm: connections, the cipher
    results: dict[str, list[float]] = {"plain": [], "keyed": []}
    for r in range(rounds):
        order = [("plain", plain), ("keyed", keyed)] if r % 2 == 0 else [("keyed", keyed), ("plain", plain)]
        for name, store in order:
            results[name].append(per_op_us(lambda i, s=store: store_round(s, i), ops, f"{label} store round/{name}"))
    line(f"{label} store round", results["plain"], results["keyed"])
    if SEALING:
        print(f"{'  (sealing / plain round)':<26} {SEALING[0] / statistics.median(results['plain']):5.3f}: the part of "
              "the keyed round that is encryption; the rest of the difference is the disk's noise")


def bench_seal(rounds: int, ops: int) -> float:
    """The sealing work alone of one store round (two reads open the row's three sealed
    values, one write seals three): microseconds, no database."""
    keys = StoreKeys(parse_key(new_key(), "bench"))
    values = {"bearer_token": "b" * 40, "env": json.dumps({"K": "v" * 40}), "oauth": json.dumps(record(0), sort_keys=True)}
    sealed = {c: keys.seal(("credentials", "bench", c), v) for c, v in values.items()}

    def work(_i: int) -> None:
        for _read in range(2):
            for c, v in sealed.items():
                keys.open(("credentials", "bench", c), v, "bench")
        for c, v in values.items():
            keys.seal(("credentials", "bench", c), v)

    work(0)
    samples = [per_op_us(work, ops * 5) for _ in range(rounds)]
    cost = statistics.median(samples)
    print(f"{'sealing of 1 store round':<26} {cost:10.1f} us   (6 opens + 3 seals; the OAuth record is "
          f"{len(values['oauth'])} bytes of JSON)")
    return cost


def bench_refresh(label: str, plain, keyed, rounds: int, refreshes: int) -> None:
    from helpers import OAuthServer

    from albedo_actors.auth.http import AuthHttp
    from albedo_actors.auth.record import from_credentials
    from albedo_actors.auth.refresh import refresh_held
    from albedo_actors.auth.signin import SignIn, follow_redirect_agent
    from albedo_actors.config import ServerConfig

    server = OAuthServer("--json-response")
    url = server.start()
    try:
        config = ServerConfig(name="bench", type="http", url=url)
        for store in (plain, keyed):
            store.delete_credentials("bench")
            SignIn(config, store, agent=follow_redirect_agent(), port=0, lifetime=3600).run()

        def one(store) -> None:
            seen = from_credentials(store.get_credentials("bench")).access_token
            got, requested = refresh_held(store, config, seen, {}, lambda s: AuthHttp())
            assert requested and got is not None and got.access_token != seen

        for store in (plain, keyed):
            one(store)  # warm
        results: dict[str, list[float]] = {"plain": [], "keyed": []}
        for r in range(rounds):
            order = [("plain", plain), ("keyed", keyed)] if r % 2 == 0 else [("keyed", keyed), ("plain", plain)]
            for name, store in order:
                results[name].append(per_op_us(lambda i, s=store: one(s), refreshes, f"{label} refresh/{name}") / 1000)
        line(f"{label} refresh", results["plain"], results["keyed"], "ms")
    finally:
        server.stop()


def drop_tables(url: str) -> None:
    import psycopg2

    conn = psycopg2.connect(url, connect_timeout=10)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS credentials, catalogues, oauth_clients, albedo_schema_version")
    conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--store-ops", type=int, default=200, help="store rounds per measurement")
    parser.add_argument("--refreshes", type=int, default=20, help="token refreshes per measurement")
    parser.add_argument("--postgres", default=os.environ.get("ALBEDO_TEST_POSTGRES_URL"),
                        help="a PostgreSQL URL to benchmark too (two databases' worth of albedo tables are dropped)")
    args = parser.parse_args()
    print(f"{args.rounds} rounds; medians; plain = no key, keyed = $ALBEDO_STORE_KEY set")
    SEALING.append(bench_seal(args.rounds, args.store_ops))
    key = StoreKeys(parse_key(new_key(), "bench"))
    with tempfile.TemporaryDirectory() as tmp:
        plain = open_store(os.path.join(tmp, "plain"), keys=None)
        keyed = open_store(os.path.join(tmp, "keyed"), keys=key)
        try:
            bench_store("sqlite", plain, keyed, args.rounds, args.store_ops)
            bench_refresh("sqlite", plain, keyed, args.rounds, args.refreshes)
        finally:
            plain.close()
            keyed.close()
    if args.postgres:
        # One database: the plain and keyed rows under two server names would share the
        # table; two schemas are simpler as two stores over the same URL, one row each.
        drop_tables(args.postgres)
        try:
            plain = open_store(tempfile.gettempdir(), args.postgres, keys=None)
            keyed = open_store(tempfile.gettempdir(), args.postgres, keys=key)
            try:
                bench_store_pg(plain, keyed, args)
            finally:
                plain.close()
                keyed.close()
        finally:
            drop_tables(args.postgres)
    else:
        print("postgresql skipped: give --postgres URL or $ALBEDO_TEST_POSTGRES_URL")
    return 0


def bench_store_pg(plain, keyed, args) -> None:
    """On one PostgreSQL database the two stores share the table: each round puts back
    the row its store wrote, so neither reads the other's (sealed or clear) values."""
    results: dict[str, list[float]] = {"plain": [], "keyed": []}
    for r in range(args.rounds):
        order = [("plain", plain), ("keyed", keyed)] if r % 2 == 0 else [("keyed", keyed), ("plain", plain)]
        for name, store in order:
            store.delete_credentials("bench")
            store.put_credentials("bench", Credentials(bearer_token="b" * 40, env={"K": "v" * 40}, oauth=record(0)))
            store_round(store, 0)
            results[name].append(per_op_us(lambda i, s=store: store_round(s, i), args.store_ops,
                                           f"postgresql store round/{name}"))
    line("postgresql store round", results["plain"], results["keyed"])


if __name__ == "__main__":
    sys.exit(main())
