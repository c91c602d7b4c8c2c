#!/usr/bin/env python3
"""Why the demo server answers our stdio client slower than a raw pipe client (issue 24).

bench_stdio.py's raw client, with one thing at a time changed towards how ours starts
and speaks to the server, all in one run, rounds taking turns (rotating order):

raw        bench_stdio.py's raw client (Popen, the host's environment).
ours       bench_stdio.py's ours (ServerHandle; the server behind our launcher).
ourbytes   raw sending ours's exact request bytes (progress token, clientInfo).
env        raw with the reduced environment ours gives a server (HOME, PATH, TMPDIR).
launcher   the server started through our launcher exactly as StdioTransport starts it
           (spec pipe, reduced environment, setsid, stderr to the launcher), the raw
           client writing to the stdin pipe (blocking) and reading the launcher's stdout.
nonblock   launcher, with our side of the server's stdin O_NONBLOCK as StdioTransport sets it.
fullenv    launcher, with the host's whole environment (not in the default set).
busy       raw, then ``--busy`` µs of Python work per call on the same thread: ours's
           extra CPU without ours's threads, launcher or bytes.

Per client: median latency per round, and CPU µs per call in this process and in the
server. Results and findings: docs/operations.rst
("Async hosts, the binding and tool lists") and benchmarks/README.rst.
Run: ``.venv/bin/python benchmarks/bench_stdio_server_side.py [--calls N] [--rounds N] [--only a,b]``.
"""

from __future__ import annotations

import argparse
import json
import marshal
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import _common
from bench_stdio import SERVER_ARGS, RawClient, _demo_servers
from _common import ARGS

from albedo_actors.config import ServerConfig
from albedo_actors.connection.stdio_link import launch_spec
from albedo_actors.transport import stdio as stdio_transport


def reduced_env() -> dict[str, str]:
    spec = launch_spec(ServerConfig(name="bench", type="stdio", command=sys.executable, args=SERVER_ARGS), os.getcwd())
    return dict(spec.env)


class EnvClient(RawClient):
    def __init__(self, era: str, env: dict[str, str] | None = None) -> None:
        self.modern = era == "modern"
        self.proc = subprocess.Popen([sys.executable, *SERVER_ARGS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     bufsize=-1, env=reduced_env() if env is None else env)
        self._fd = self.proc.stdin.fileno()
        self._readline = self.proc.stdout.readline
        self._next_id = 0


class LauncherClient(RawClient):
    """The server behind our launcher, started as StdioTransport.start does."""

    nonblock = False
    env: dict[str, str] | None = None

    def __init__(self, era: str) -> None:
        self.modern = era == "modern"
        data_r, data_w = os.pipe()
        spec_r, spec_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", stdio_transport.LAUNCHER, str(spec_r)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(data_r, spec_r), env=stdio_transport.LAUNCHER_ENV, bufsize=0,
        )
        os.close(data_r)
        os.close(spec_r)
        spec = {"argv": [sys.executable, *SERVER_ARGS], "cwd": os.getcwd(),
                "env": self.env if self.env is not None else reduced_env(), "secrets": [],
                "stdin_fd": data_r, "term_grace": 2.0, "kill_grace": 2.0}
        os.write(spec_w, marshal.dumps(spec))
        os.close(spec_w)
        status = self.proc.stderr.readline()
        if b'"pid"' not in status:
            raise RuntimeError(f"launcher: {status!r}")
        self.server_pid = json.loads(status)["pid"]
        if self.nonblock:
            os.set_blocking(data_w, False)
        self._fd = data_w
        self._out = os.fdopen(os.dup(self.proc.stdout.fileno()), "rb", buffering=-1)
        self._readline = self._out.readline
        self._next_id = 0

    def close(self) -> None:
        os.close(self._fd)
        self.proc.stdin.close()
        self.proc.wait(10)
        self._out.close()
        self.proc.stdout.close()
        self.proc.stderr.close()


class OurBytesClient(RawClient):
    """raw, sending the request ours sends: its progress token and clientInfo in ``_meta``."""

    def _message(self, method: str, params: dict[str, Any] | None) -> tuple[int, bytes]:
        self._next_id += 1
        params = dict(params or {})
        meta = {"io.modelcontextprotocol/protocolVersion": _common.MODERN_VERSION,
                "io.modelcontextprotocol/clientInfo": {"name": "albedo_actors", "version": "0.1.0"},
                "io.modelcontextprotocol/clientCapabilities": {}}
        if method == "tools/call":
            meta = {"progressToken": f"albedo-{self._next_id}", **meta}
        params["_meta"] = meta
        message = {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}
        return self._next_id, json.dumps(message, separators=(",", ":")).encode() + b"\n"


BUSY = [dict(a=i, b=str(i)) for i in range(2000)]  # a working set the size of a small client's


class BusyClient(RawClient):
    """raw, then about as much Python work per call as ours does beyond raw (``--busy`` µs),
    on the same thread, touching a working set: is our latency simply our CPU added?"""

    busy_us = 18.0

    def call(self) -> dict[str, Any]:
        result = self.request("tools/call", {"name": "echo", "arguments": ARGS})
        end = time.perf_counter_ns() + int(self.busy_us * 1000)
        i = 0
        while time.perf_counter_ns() < end:
            BUSY[i % 2000]["a"] += 1
            i += 37
        return result


class NonblockClient(LauncherClient):
    nonblock = True


class FullEnvLauncherClient(LauncherClient):
    env = dict(os.environ)


class OursClient:
    """albedo_actors' ServerHandle (bench_stdio.py's ours), for the same-run ratio."""

    def __init__(self, era: str) -> None:
        import tempfile

        from albedo_actors.actors.client import ServerHandle

        self._home = tempfile.TemporaryDirectory(prefix="albedo-bench-")
        before = _demo_servers()
        self.handle = ServerHandle.start(ServerConfig(name="bench", type="stdio", command=sys.executable, args=SERVER_ARGS),
                                         self._home.name)
        self.handle.connect()
        (self.server_pid,) = _demo_servers() - before

    def open(self) -> str:
        return "modern"

    def call(self) -> Any:
        return self.handle.call_tool("echo", ARGS)

    def close(self) -> None:
        self.handle.stop()
        self._home.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--busy", type=float, default=18.0, help="µs of extra work per call for 'busy'")
    parser.add_argument("--only", default="raw,ours,ourbytes,env,launcher,nonblock,busy")
    opts = parser.parse_args(argv)
    known: dict[str, Any] = {"ours": OursClient, "raw": RawClient, "ourbytes": OurBytesClient, "busy": BusyClient, "env": EnvClient, "launcher": LauncherClient,
                             "nonblock": NonblockClient, "fullenv": FullEnvLauncherClient}
    BusyClient.busy_us = opts.busy
    kinds = {name: known[name] for name in opts.only.split(",")}
    figures: dict[str, list[tuple[float, float, float]]] = {name: [] for name in kinds}

    def measure(client: Any) -> tuple[float, float, float]:
        """Median µs of sequential calls; CPU µs per call in this process and in the server."""
        pid = client.server_pid if hasattr(client, "server_pid") else client.proc.pid
        _common.timed_calls(client.call, opts.warmup)
        ours0, server0 = _common.cpu_ns(os.getpid()), _common.cpu_ns(pid)
        latencies = _common.timed_calls(client.call, opts.calls)
        ours1, server1 = _common.cpu_ns(os.getpid()), _common.cpu_ns(pid)
        return (statistics.median(latencies) / 1000, (ours1 - ours0) / opts.calls / 1000,  # type: ignore[operator]
                (server1 - server0) / opts.calls / 1000)  # type: ignore[operator]
    for r in range(opts.rounds):
        _common.progress(f"round {r + 1}/{opts.rounds}")
        names = list(kinds)
        k = r % len(names)
        for name in names[k:] + names[:k]:
            client = kinds[name]("modern")
            try:
                client.open()
                figures[name].append(measure(client))
            finally:
                client.close()
    print(f"stdio server-side benchmark: demo server --era dual, tools/call echo; {opts.rounds} rounds x {opts.calls} calls")
    for name, rows in figures.items():
        lat = " ".join(f"{m:6.1f}" for m, _, _ in rows)
        cpu = " ".join(f"{c:5.1f}" for _, c, _ in rows)
        server = " ".join(f"{c:5.1f}" for _, _, c in rows)
        print(f"  {name:9s} median us: {lat}   cpu us/call client: {cpu}  server: {server}")
    for name in figures:
        if name != "raw" and "raw" in figures:
            ratios = [x[0] / y[0] for x, y in zip(figures[name], figures["raw"])]
            print(f"  {name}/raw per round: " + " ".join(f"{q:.2f}x" for q in ratios) + f"  (median {statistics.median(ratios):.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
