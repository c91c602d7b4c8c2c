#!/usr/bin/env python3
"""Benchmark DPoP: the cost of a proof per request, against the same calls with Bearer.

One real ``tests/servers/oauth_server.py --dpop --json-response`` process serves the
whole run. Two clients of ours sign in to it, each with its own SQLite store:

   dpop    the default: the server lists ``dpop_signing_alg_values_supported``, so the
           token is DPoP-bound and every request carries ``Authorization: DPoP`` and a
           fresh ES256 proof (the server checks it with pyjwt/cryptography);
   bearer  ``"oauth": {"dpop": false}``: a Bearer token from the same server, no proof.

In each of ``--rounds`` rounds the two take turns (rotating order) at ``--calls``
sequential ``tools/call echo`` over HTTP (the 2026-07-28 era, JSON answers) after
``--warmup`` untimed ones. Printed: the median latency of each, the client CPU per call
(this process, all threads) and the server's, the ratios dpop/bearer, and the cost of
one proof alone (``Prover.proof`` with ``ath`` and a nonce, ``--proofs`` times).

Run: ``.venv/bin/python benchmarks/bench_dpop.py [--rounds N] [--calls N]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time

import _common  # benchmarks/_common.py; it also puts the checkout first on sys.path
from _common import ARGS, check_echo, cpu_ns, progress, ratio, timed_calls

sys.path.insert(0, os.path.join(_common.REPO, "tests"))
from helpers import OAuthServer  # noqa: E402  (tests/helpers.py)

from albedo_actors.actors.client import ServerHandle  # noqa: E402
from albedo_actors.actors.refresher import TokenRefresher, refresh_by  # noqa: E402
from albedo_actors.auth import dpop  # noqa: E402
from albedo_actors.auth.server_auth import ServerAuth  # noqa: E402
from albedo_actors.auth.signin import SignIn, follow_redirect_agent  # noqa: E402
from albedo_actors.config import OAuthSettings, ServerConfig  # noqa: E402
from albedo_actors.store import open_store  # noqa: E402


class Client:
    """One of ours, signed in to the server with or without DPoP."""

    def __init__(self, name: str, url: str, home: str, use_dpop: bool) -> None:
        self.name = name
        self.config = ServerConfig(name=name, type="http", url=url, oauth=OAuthSettings(dpop=use_dpop),
                                   startup_timeout_ms=30000, call_timeout_ms=30000)
        self.home = home
        self.store = open_store(home)
        record = SignIn(self.config, self.store, environ={}, agent=follow_redirect_agent(), port=0, lifetime=30).run()
        if record.token_type != ("DPoP" if use_dpop else "Bearer"):
            raise RuntimeError(f"{name}: signed in with a {record.token_type} token")
        self.refresher = TokenRefresher.start(self.store, environ={})
        auth = ServerAuth(self.config, self.store, refresh_by(self.refresher))
        self.handle = ServerHandle.start(self.config, home, auth=auth)
        self.handle.connect()
        self.latencies: list[int] = []
        self.client_cpu = self.server_cpu = self.calls = 0

    def call(self) -> None:
        check_echo(self.handle.call_tool("echo", ARGS))

    def close(self) -> None:
        self.handle.stop()
        self.refresher.stop(timeout=10)
        self.store.close()


def proof_us(n: int) -> float:
    prover = dpop.prover(dpop.new_key())
    url = "http://127.0.0.1:9/mcp"
    dpop.NONCES.put(url, "bench-nonce-0123456789")
    token = "t" * 43
    for _ in range(200):
        prover.proof("POST", url, token)
    start = time.perf_counter_ns()
    for _ in range(n):
        prover.proof("POST", url, token)
    dpop.NONCES.forget(url)
    return (time.perf_counter_ns() - start) / n / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--proofs", type=int, default=5000)
    opts = parser.parse_args()
    began = time.perf_counter()
    server = OAuthServer("--dpop", "--json-response")
    server.start()
    pid = server.proc.pid if server.proc is not None else None
    clients: list[Client] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-dpop-") as root:
            progress("signing in (dpop, bearer)")
            for name, use in (("dpop", True), ("bearer", False)):
                os.mkdir(os.path.join(root, name))
                clients.append(Client(name, server.url, os.path.join(root, name), use))
            for r in range(opts.rounds):
                progress(f"round {r + 1}/{opts.rounds}")
                for client in clients[r % 2:] + clients[:r % 2]:
                    for _ in range(opts.warmup):
                        client.call()
                    gc.collect()
                    cpu0, srv0 = cpu_ns(os.getpid()), cpu_ns(pid)
                    client.latencies += timed_calls(client.call, opts.calls)
                    cpu1, srv1 = cpu_ns(os.getpid()), cpu_ns(pid)
                    client.client_cpu += (cpu1 or 0) - (cpu0 or 0)
                    client.server_cpu += (srv1 or 0) - (srv0 or 0)
                    client.calls += opts.calls
            stats = server.stats()
            figures = {c.name: c for c in clients}
            for client in clients:
                client.close()
            clients = []
    finally:
        for client in clients:
            client.close()
        server.stop()
    if stats["bearer_with_bound_token"] or stats["dpop_proofs_refused"] or stats["dpop_replays"]:
        raise SystemExit(f"the server saw a bad request: {stats}")
    if stats["mcp_requests_dpop"] < opts.rounds * opts.calls:
        raise SystemExit(f"the dpop client did not send its calls with DPoP: {stats}")
    proof = proof_us(opts.proofs)

    def median_us(c: Client) -> float:
        return statistics.median(c.latencies) / 1000

    def p99_us(c: Client) -> float:
        ordered = sorted(c.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] / 1000

    print()
    print(f"DPoP per request; {opts.rounds} rounds x {opts.calls} sequential tools/call echo per client "
          f"(2026-07-28 era, JSON answers, one server), {os.cpu_count()} cpus")
    print(f"{'client':<8} {'median us':>10} {'p99 us':>10} {'cpu us cli':>11} {'cpu us srv':>11}")
    for name in ("dpop", "bearer"):
        c = figures[name]
        print(f"{name:<8} {median_us(c):>10.1f} {p99_us(c):>10.1f} {c.client_cpu / c.calls / 1000:>11.1f} "
              f"{c.server_cpu / c.calls / 1000:>11.1f}")
    d, b = figures["dpop"], figures["bearer"]
    print(f"proof alone: {proof:.1f} us (ES256 with ath and nonce, {opts.proofs} proofs)")
    print()
    print(f"RATIOS latency dpop/bearer={ratio(median_us(d), median_us(b))} "
          f"client-cpu dpop/bearer={ratio(d.client_cpu, b.client_cpu)} "
          f"server-cpu dpop/bearer={ratio(d.server_cpu, b.server_cpu)}")
    print("(the server checks every proof in Python with pyjwt: its share is the test server's, not ours;"
          f" run took {time.perf_counter() - began:.1f} s)")


if __name__ == "__main__":
    main()
