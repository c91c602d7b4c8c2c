#!/usr/bin/env python3
"""Benchmark three MCP clients doing the same work against the same stdio server.

The server is the bundled demo server (``albedo_actors/demo/server.py --era dual``,
standard library only); every call is ``tools/call echo {"text": "x"}``. The clients:

ours  ``albedo_actors`` :class:`ServerHandle` (actor front, blocking calls from any
      thread; the server runs behind our launcher process). Modern era.
sdk   the official Python SDK (``mcp``): ``stdio_client`` + ``ClientSession`` on
      asyncio, opened with ``session.discover()`` (``initialize`` as a fallback),
      which is what ``mcp.Client(mode="auto")`` does. Modern era on this server.
raw   a minimal pipe client written here: ``subprocess.Popen``, one JSON line out
      and one line in per call, the same per-request ``_meta`` as ours (modern
      era by default, ``--raw-era legacy`` for the ``initialize`` handshake).
      It is the floor: what any Python client has to pay at least.

The run has ``--rounds`` rounds; in each, every client in turn (rotating order)
connects to a fresh server, warms up, is measured and disconnects, one client at a
time. Measured:

1. sequential latency: ``--calls`` calls one after another; median and p99 in µs
   over the calls of all rounds, and the CPU time each call costs in this process
   (all its threads) and in the server (Linux ``/proc/*/task/*/schedstat``);
2. throughput: ``--total`` calls with ``--inflight`` outstanding at any time, in
   calls per second, median of the rounds (ours: that many threads; sdk: that many
   asyncio tasks; raw: pipelined, writing a window of requests at once, then
   reading its responses and matching their ids);
3. connect time: from starting the process to the first ``tools/list`` answered,
   median of the rounds (ours: ``ServerHandle.start`` + ``connect()``, which starts
   the launcher, then the server, and also reads resources, templates and prompts
   and opens the listen stream); and the time to disconnect (``stop``).

Ratios compare ours with the peers: latency by the median, throughput by calls/s.
Run: ``.venv/bin/python benchmarks/bench_stdio.py [--quick]``. See docs/operations.rst ("Speed").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import _common  # benchmarks/_common.py; it also puts the checkout first on sys.path
from _common import ARGS, LEGACY_VERSION, META, MODERN_VERSION, REPO, Figures, check_echo, timed_calls

from albedo_actors.config import ServerConfig

SERVER = os.path.join(REPO, "albedo_actors", "demo", "server.py")
SERVER_ARGS = ("-I", SERVER, "--era", "dual")
DEFAULTS = (2000, 5000, 5, 300)  # calls, total, rounds, warmup
QUICK = (200, 500, 2, 50)


# -- the raw client ------------------------------------------------------------------------
#
# ours and sdk are _common.OursBench and _common.SdkBench (see run_benches). Each bench
# has the same async face so that one driver can interleave them; the blocking ones
# (ours, raw) simply block the event loop, which is idle meanwhile.


class RawClient:
    """The least a Python client can do: one JSON line out, one line in."""

    def __init__(self, era: str) -> None:
        self.modern = era == "modern"
        self.proc = subprocess.Popen(
            [sys.executable, *SERVER_ARGS], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=-1
        )
        self._fd = self.proc.stdin.fileno()
        self._readline = self.proc.stdout.readline
        self._next_id = 0

    def _message(self, method: str, params: dict[str, Any] | None) -> tuple[int, bytes]:
        self._next_id += 1
        params = dict(params or {})
        if self.modern:
            params["_meta"] = META
        message = {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}
        return self._next_id, json.dumps(message, separators=(",", ":")).encode() + b"\n"

    def _read(self, id_: int) -> dict[str, Any]:
        line = self._readline()
        if not line:
            raise RuntimeError("the server closed its output")
        message = json.loads(line)
        if message.get("id") != id_:
            raise RuntimeError(f"expected the answer to {id_}, got {message!r:.200}")
        if "result" not in message:
            raise RuntimeError(f"error: {message.get('error')!r}")
        return message["result"]

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        id_, data = self._message(method, params)
        os.write(self._fd, data)
        return self._read(id_)

    def open(self) -> str:
        if self.modern:
            result = self.request("server/discover")
            if MODERN_VERSION not in result.get("supportedVersions", ()):
                raise RuntimeError("the server is not modern")
            return f"modern {MODERN_VERSION}"
        result = self.request(
            "initialize",
            {"protocolVersion": LEGACY_VERSION, "capabilities": {}, "clientInfo": {"name": "raw-bench", "version": "0"}},
        )
        os.write(self._fd, b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        return f"legacy {result['protocolVersion']}"

    def call(self) -> dict[str, Any]:
        return self.request("tools/call", {"name": "echo", "arguments": ARGS})

    def pipelined(self, count: int, window: int) -> None:
        """``count`` calls: ``window`` requests written at once, then their answers read."""
        done = 0
        while done < count:
            batch = [self._message("tools/call", {"name": "echo", "arguments": ARGS}) for _ in range(min(window, count - done))]
            os.write(self._fd, b"".join(data for _, data in batch))  # a window is far below the pipe buffer
            waiting = {id_ for id_, _ in batch}
            for _ in batch:
                message = json.loads(self._readline())
                if "result" not in message:
                    raise RuntimeError(f"error: {message.get('error')!r}")
                waiting.remove(message["id"])  # KeyError on an unknown or repeated id
            done += len(batch)

    def close(self) -> None:
        self.proc.stdin.close()  # EOF: the demo server exits
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


class RawBench:
    name = "raw"

    def __init__(self, opts: argparse.Namespace) -> None:
        self.era = opts.raw_era
        self.client: RawClient | None = None

    async def open(self) -> None:
        self.client = RawClient(self.era)
        self.opened_as = self.client.open()
        self.client.request("tools/list")

    async def describe(self) -> str:
        check_echo(self.client.call())
        return self.opened_as

    async def latency(self, n: int) -> list[int]:
        return timed_calls(self.client.call, n)

    async def throughput(self, total: int, inflight: int) -> float:
        t0 = time.perf_counter()
        self.client.pipelined(total, inflight)
        return total / (time.perf_counter() - t0)

    async def close(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            client.close()


async def run_benches(opts: argparse.Namespace, home: str, wanted: list[str]) -> dict[str, Figures]:
    """``--rounds`` rounds; in each, every client in turn (rotating order) connects to
    a fresh server, warms up, is measured and disconnects (see ``_common.run_rounds``).
    A fresh server per round samples how the processes happen to be scheduled, which
    varies from one connection to the next."""
    from mcp.client.stdio import StdioServerParameters, stdio_client

    ours_config = ServerConfig(name="bench", type="stdio", command=sys.executable, args=SERVER_ARGS)
    sdk_params = StdioServerParameters(command=sys.executable, args=list(SERVER_ARGS))
    makers = {
        "raw": lambda: RawBench(opts),
        "ours": lambda: _common.OursBench(ours_config, home),  # the server runs behind our launcher
        "sdk": lambda: _common.SdkBench(lambda: stdio_client(sdk_params)),
    }
    benches = [makers[name]() for name in ("raw", "ours", "sdk") if name in wanted]
    return await _common.run_rounds(opts, benches, servers=_demo_servers)


# -- leftovers ------------------------------------------------------------------------------


def _demo_servers() -> set[int]:
    """Pids of live demo servers (not launchers) started as ``python -I SERVER ...``."""
    found = set()
    for pid in _server_processes():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv[1:3] == [b"-I", SERVER.encode()]:
            found.add(pid)
    return found


def _server_processes() -> set[int]:
    """Pids of live processes running the demo server or our launcher for it."""
    return _common.processes_running(SERVER)


def report(figs: dict[str, Figures], opts: argparse.Namespace, elapsed: float) -> None:
    _common.report(figs, opts, elapsed, title="stdio benchmark: demo server --era dual, tools/call echo",
                   targets="ours/raw <= 1.1x (issue 24), ours/sdk < 1x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _common.add_options(parser, DEFAULTS)
    parser.add_argument("--raw-era", choices=("modern", "legacy"), default="modern", help="how the raw client opens")
    _common.add_pin_option(parser)
    opts = parser.parse_args(argv)
    wanted = _common.finish_options(parser, opts, DEFAULTS, QUICK)

    before = _server_processes()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="albedo-bench-") as home:
        figs = asyncio.run(run_benches(opts, home, wanted))
    elapsed = time.perf_counter() - started
    report(figs, opts, elapsed)

    return _common.report_leftovers(before, _server_processes)


if __name__ == "__main__":
    sys.exit(main())
