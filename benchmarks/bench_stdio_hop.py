#!/usr/bin/env python3
"""What a thread hop costs a stdio call, apart from any client's own code (issue 24).

Three minimal pipe clients of the same demo server (``demo/server.py --era dual``), each
``tools/call echo {"text": "x"}`` with bench_stdio.py's raw request, measured in one run,
taking turns each round:

raw       bench_stdio.py's raw client: one line written, ``readline()`` on the same thread.
pollread  the same, but the caller reads the way our transport's thread does:
          ``poll()`` then ``os.read()`` and a split into lines, on the caller's thread.
hop       the same reading on a reader thread, which hands the answer to the waiting
          caller through a lock (as ``RpcChannel``'s pending entries do): the one
          difference from ``pollread`` is the hand-over between two threads.

So ``pollread/raw`` is the cost of reading as our transport does, and ``hop/pollread``
the cost of the hand-over alone; ours/raw in bench_stdio.py, set beside them, tells
how much of our latency is the hop and how much our own call path.
Run: ``.venv/bin/python benchmarks/bench_stdio_hop.py [--calls N] [--rounds N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import sys
import threading
from typing import Any, Callable

import _common  # benchmarks/_common.py; it also puts the checkout first on sys.path
from bench_stdio import RawClient


class PollReadClient(RawClient):
    """The raw client reading with poll + os.read on the caller's thread."""

    def __init__(self, era: str) -> None:
        super().__init__(era)
        self._out = self.proc.stdout.fileno()
        self._poll = select.poll()
        self._poll.register(self._out, select.POLLIN)

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        id_, data = self._message(method, params)
        os.write(self._fd, data)
        while True:
            self._poll.poll(None)
            chunk = os.read(self._out, 1 << 16)
            if not chunk:
                raise RuntimeError("the server closed its output")
            for line in chunk.split(b"\n")[:-1]:  # one answer per request: a read holds it whole
                message = json.loads(line)
                if message.get("id") == id_:
                    return message["result"]  # type: ignore[no-any-return]


class HopClient(RawClient):
    """The raw client whose answers a reader thread reads and hands to the caller."""

    def __init__(self, era: str) -> None:
        super().__init__(era)
        self._out = self.proc.stdout.fileno()
        self._waiting: dict[int, list[Any]] = {}  # id -> [lock, answer]
        self._thread = threading.Thread(target=self._run, name="bench-hop-reader", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._out, select.POLLIN)
        while True:
            poller.poll(None)
            chunk = os.read(self._out, 1 << 16)
            if not chunk:
                return
            for line in chunk.split(b"\n")[:-1]:
                message = json.loads(line)
                entry = self._waiting.pop(message.get("id"), None)
                if entry is not None:
                    entry[1] = message
                    entry[0].release()

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        id_, data = self._message(method, params)
        lock = threading.Lock()
        lock.acquire()
        entry = self._waiting[id_] = [lock, None]
        os.write(self._fd, data)
        if not lock.acquire(timeout=30):
            raise RuntimeError("no answer within 30 s")
        return entry[1]["result"]  # type: ignore[no-any-return]


def measure(call: Callable[[], Any], calls: int, warmup: int) -> tuple[float, float]:
    """Median latency (µs) of ``calls`` sequential calls, and CPU µs per call in this process."""
    _common.timed_calls(call, warmup)
    cpu0 = _common.cpu_ns(os.getpid())
    latencies = _common.timed_calls(call, calls)
    cpu1 = _common.cpu_ns(os.getpid())
    cpu = (cpu1 - cpu0) / calls / 1000 if cpu0 is not None and cpu1 is not None else float("nan")
    return statistics.median(latencies) / 1000, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=300)
    opts = parser.parse_args(argv)
    kinds = {"raw": RawClient, "pollread": PollReadClient, "hop": HopClient}
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in kinds}
    for r in range(opts.rounds):
        _common.progress(f"round {r + 1}/{opts.rounds}")
        names = list(kinds)
        for name in names[r % 3:] + names[:r % 3]:
            client = kinds[name]("modern")
            try:
                client.open()
                figures[name].append(measure(client.call, opts.calls, opts.warmup))
            finally:
                client.close()
    print(f"stdio hop benchmark: demo server --era dual, tools/call echo; {opts.rounds} rounds x {opts.calls} calls")
    for name, rows in figures.items():
        lat = " ".join(f"{m:6.1f}" for m, _ in rows)
        cpu = " ".join(f"{c:5.1f}" for _, c in rows)
        print(f"  {name:9s} median us: {lat}   cpu us/call: {cpu}")
    for a, b in (("pollread", "raw"), ("hop", "pollread"), ("hop", "raw")):
        ratios = [x[0] / y[0] for x, y in zip(figures[a], figures[b])]
        print(f"  {a}/{b} per round: " + " ".join(f"{q:.2f}x" for q in ratios) + f"  (median {statistics.median(ratios):.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
