#!/usr/bin/env python3
"""Benchmark three MCP clients doing the same work against the same streamable HTTP server.

The server is the official SDK's (``tests/servers/sdk_server.py http``, uvicorn on
127.0.0.1), one process for the whole run, answering with JSON bodies
(``--json-response``; ``--sse`` starts it in SSE mode, in which the SDK still answers
a quick modern call with a JSON body); every call is ``tools/call echo {"text": "x"}``.
It is started through a TCP_NODELAY shim (see ``NODELAY_SHIM``). The clients:

ours  ``albedo_actors`` :class:`ServerHandle` (actor front, blocking calls from any
      thread; each request is a POST on a worker of the HTTP link). Modern era.
sdk   the official Python SDK (``mcp``): ``streamable_http_client`` + ``ClientSession``
      on asyncio (httpx2), opened with ``session.discover()`` (``initialize`` as a
      fallback), which is what ``mcp.Client(mode="auto")`` does.
raw   a minimal client written here: one ``requests.Session``, ``server/discover``,
      then one POST per call with the modern headers and the same per-request
      ``_meta`` as ours, reading the whole body. It is the floor: what any Python
      client over ``requests`` has to pay at least.

The run has ``--rounds`` rounds; in each, every client in turn (rotating order)
connects afresh (new client, new TCP connections) to the one server, warms up, is
measured and disconnects, one client at a time. Measured:

1. sequential latency: ``--calls`` calls one after another; median and p99 in µs
   over the calls of all rounds, and the CPU time each call costs in this process
   (all its threads) and in the server (Linux ``/proc/*/task/*/schedstat``);
2. throughput: ``--total`` calls with ``--inflight`` outstanding at any time, in
   calls per second, median of the rounds (ours: that many threads sharing one
   handle; sdk: that many asyncio tasks sharing one session; raw: that many
   threads, each with its own ``requests.Session``);
3. connect time: from creating the client to the first ``tools/list`` answered,
   median of the rounds (ours: ``ServerHandle.start`` + ``connect()``, which also
   reads resources, templates and prompts); and the time to disconnect (``stop``).

Ratios compare ours with the peers: latency by the median, throughput by calls/s.
Run: ``.venv/bin/python benchmarks/bench_http.py [--quick] [--sse]``. See docs/operations.rst ("Speed").
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import _common  # benchmarks/_common.py; it also puts the checkout first on sys.path
from _common import ARGS, META, MODERN_VERSION, REPO, Figures, check_echo, timed_calls

import requests

from albedo_actors.config import ServerConfig

SERVER = os.path.join(REPO, "tests", "servers", "sdk_server.py")
DEFAULTS = (1000, 1500, 5, 150)  # calls, total, rounds, warmup
QUICK = (100, 300, 2, 30)
SERVER_START_TIMEOUT = 30.0
SERVER_STOP_TIMEOUT = 5.0

# sdk_server.py binds its listener as socket(AF_INET, SOCK_STREAM), whose proto is 0;
# asyncio sets TCP_NODELAY only on sockets whose proto is IPPROTO_TCP, so every
# accepted connection keeps Nagle on. uvicorn writes the status line and headers,
# then the body: the body waits for the ACK of the headers, which the client
# delays (~40 ms on Linux). Every call then takes ~44 ms whatever the client,
# which hides what the benchmark measures. This shim runs the server file
# unchanged with IPPROTO_TCP as the default proto of TCP sockets; once the server
# passes IPPROTO_TCP itself, it changes nothing. --server-as-is turns it off.
NODELAY_SHIM = """\
import os, runpy, socket, sys
class _TcpSocket(socket.socket):
    def __init__(self, family=-1, type=-1, proto=-1, fileno=None):
        if fileno is None and family in (socket.AF_INET, socket.AF_INET6) and type == socket.SOCK_STREAM and proto in (-1, 0):
            proto = socket.IPPROTO_TCP
        super().__init__(family, type, proto, fileno)
socket.socket = _TcpSocket
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))  # as `python sdk_server.py` has it
runpy.run_path(sys.argv[0], run_name="__main__")
"""


# -- the server -----------------------------------------------------------------------------


class HttpServer:
    """One SDK server process for the whole run; ``url`` once :meth:`start` returned."""

    def __init__(self, sse: bool, shim: bool = True) -> None:
        self.sse = sse
        self.shim = shim
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.ready_s = 0.0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        """Start the server and wait (bounded) until it answers ``server/discover``."""
        args = [sys.executable, *(("-c", NODELAY_SHIM) if self.shim else ()), SERVER, "http", "--port", "0"]
        args += [] if self.sse else ["--json-response"]
        t0 = time.monotonic()
        deadline = t0 + SERVER_START_TIMEOUT
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        # The first line of stdout is the URL, printed once the port is bound.
        line = b""
        while not line.endswith(b"\n"):
            if not select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise RuntimeError(f"the server printed no URL within {SERVER_START_TIMEOUT:g} s")
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                raise RuntimeError(f"the server exited (status {self.proc.wait()}) before printing its URL")
            line += chunk
        self.url = line.split(b"\n", 1)[0].decode().strip()
        if not self.url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"the server's first line is not its URL: {self.url!r:.200}")
        # Bound is not serving yet (uvicorn starts after the URL): wait for an answer.
        with RawHttpClient(self.url, self.sse) as probe:
            while True:
                try:
                    probe.open(timeout=max(0.1, min(2.0, deadline - time.monotonic())))
                    break
                except (requests.RequestException, RuntimeError):
                    if self.proc.poll() is not None:
                        raise RuntimeError(f"the server exited with status {self.proc.returncode}") from None
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the server did not answer within {SERVER_START_TIMEOUT:g} s") from None
                    time.sleep(0.05)
        self.ready_s = time.monotonic() - t0

    def stop(self) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.terminate()  # uvicorn shuts down gracefully on SIGTERM
            try:
                proc.wait(SERVER_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        proc.stdout.close()


# -- the raw client ---------------------------------------------------------------------------
#
# ours and sdk are _common.OursBench and _common.SdkBench (see run_benches). Each bench
# has the same async face so that one driver can interleave them; the blocking ones
# (ours, raw) simply block the event loop, which is idle meanwhile.

_ids = itertools.count(1)  # next() on a count is atomic: ids unique across the threads
content_types: set[str] = set()  # of the answers to tools/call the raw client read (for the report)


class RawHttpClient:
    """The least a Python client over ``requests`` can do: one POST, one body, per call."""

    BASE = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN_VERSION,
    }

    def __init__(self, url: str, sse: bool) -> None:
        self.url = url
        self.sse = sse
        self.session = requests.Session()
        self.session.trust_env = False  # as ours: no proxy or .netrc look-ups per request
        self._call_headers = {**self.BASE, "Mcp-Method": "tools/call", "Mcp-Name": "echo"}

    def __enter__(self) -> RawHttpClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _post(self, method: str, params: dict[str, Any], headers: dict[str, str], timeout: float | None = None) -> dict[str, Any]:
        id_ = next(_ids)
        message = {"jsonrpc": "2.0", "id": id_, "method": method, "params": {**params, "_meta": META}}
        response = self.session.post(
            self.url, data=json.dumps(message, separators=(",", ":")).encode(), headers=headers, timeout=timeout
        )
        if response.status_code != 200:
            raise RuntimeError(f"{method}: HTTP {response.status_code} {response.text[:200]!r}")
        content_type = response.headers.get("content-type", "")
        if method == "tools/call" and content_type not in content_types:
            content_types.add(content_type)
        if content_type.startswith("text/event-stream"):
            answer = self._from_sse(response.content, id_)
        else:
            answer = json.loads(response.content)
        if answer.get("id") != id_ or "result" not in answer:
            raise RuntimeError(f"{method}: expected the result of {id_}, got {answer!r:.200}")
        return answer["result"]

    @staticmethod
    def _from_sse(body: bytes, id_: int) -> dict[str, Any]:
        """The message answering ``id_`` among the events of a whole SSE body."""
        for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
            data = b"\n".join(line[5:].lstrip(b" ") for line in block.split(b"\n") if line.startswith(b"data:"))
            if data:
                message = json.loads(data)
                if message.get("id") == id_:
                    return message
        raise RuntimeError(f"the SSE stream ended without the answer to {id_}")

    def request(self, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> dict[str, Any]:
        return self._post(method, params or {}, {**self.BASE, "Mcp-Method": method}, timeout)

    def open(self, timeout: float | None = None) -> str:
        result = self.request("server/discover", timeout=timeout)
        if MODERN_VERSION not in result.get("supportedVersions", ()):
            raise RuntimeError("the server is not modern")
        return f"modern {MODERN_VERSION}"

    def call(self) -> dict[str, Any]:
        return self._post("tools/call", {"name": "echo", "arguments": ARGS}, self._call_headers)

    def close(self) -> None:
        self.session.close()


class RawBench:
    name = "raw"

    def __init__(self, url: str, sse: bool) -> None:
        self.url = url
        self.sse = sse
        self.client: RawHttpClient | None = None
        self.workers: list[RawHttpClient] = []  # one Session per thread of the throughput run

    async def open(self) -> None:
        self.client = RawHttpClient(self.url, self.sse)
        self.opened_as = self.client.open()
        self.client.request("tools/list")

    async def describe(self) -> str:
        check_echo(self.client.call())
        return self.opened_as

    async def latency(self, n: int) -> list[int]:
        return timed_calls(self.client.call, n)

    async def throughput(self, total: int, inflight: int) -> float:
        """``inflight`` threads, each with its own Session (kept for the round, so
        its connection is opened in the warm-up), ``total`` calls in all."""
        while len(self.workers) < inflight:
            self.workers.append(RawHttpClient(self.url, self.sse))
        return _common.threaded_throughput([worker.call for worker in self.workers[:inflight]], total)

    async def close(self) -> None:
        clients = ([self.client] if self.client is not None else []) + self.workers
        self.client, self.workers = None, []
        for client in clients:
            client.close()


# -- the run ----------------------------------------------------------------------------------


async def run_benches(opts: argparse.Namespace, home: str, wanted: list[str], server: HttpServer) -> dict[str, Figures]:
    """``--rounds`` rounds; in each, every client in turn (rotating order) connects
    afresh to the one server, warms up, is measured and disconnects (see
    ``_common.run_rounds``)."""
    from mcp.client.streamable_http import streamable_http_client

    url = server.url
    makers = {
        "raw": lambda: RawBench(url, opts.sse),
        "ours": lambda: _common.OursBench(ServerConfig(name="bench", type="http", url=url), home),
        "sdk": lambda: _common.SdkBench(lambda: streamable_http_client(url)),
    }
    benches = [makers[name]() for name in ("raw", "ours", "sdk") if name in wanted]
    return await _common.run_rounds(opts, benches, server_pid=server.pid)


def _server_processes() -> set[int]:
    """Pids of live processes running the SDK server."""
    return _common.processes_running(SERVER)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _common.add_options(parser, DEFAULTS)
    parser.add_argument("--sse", action="store_true",
                        help="start the server in SSE mode instead of --json-response (see benchmarks/README.rst: the SDK "
                             "server still answers a quick modern call with a JSON body)")
    parser.add_argument("--server-as-is", action="store_true",
                        help="start sdk_server.py without the TCP_NODELAY shim (then every call waits ~40 ms for a "
                             "delayed ACK)")
    _common.add_pin_option(parser)
    opts = parser.parse_args(argv)
    wanted = _common.finish_options(parser, opts, DEFAULTS, QUICK)

    before = _server_processes()
    threads_before = set(threading.enumerate())
    started = time.perf_counter()
    server = HttpServer(opts.sse, shim=not opts.server_as_is)
    try:
        server.start()
        _common.progress(f"server {server.url} ready in {server.ready_s:.2f} s")
        with tempfile.TemporaryDirectory(prefix="albedo-bench-") as home:
            figs = asyncio.run(run_benches(opts, home, wanted, server))
    finally:
        server.stop()
    elapsed = time.perf_counter() - started
    mode = "SSE mode" if opts.sse else "--json-response"
    shim = "" if server.shim else ", no TCP_NODELAY shim"
    seen = f", raw saw {'/'.join(sorted(t.split(';')[0] for t in content_types))}" if content_types else ""
    _common.report(
        figs,
        opts,
        elapsed,
        title=f"http benchmark: SDK server (uvicorn) {mode}{shim}{seen}, tools/call echo",
        connect_note="client start to tools/list answered",
    )

    return _common.report_leftovers(before, _server_processes, threads_before)


if __name__ == "__main__":
    sys.exit(main())
