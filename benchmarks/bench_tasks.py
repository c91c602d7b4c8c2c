#!/usr/bin/env python3
"""What a tool call run as an MCP task costs over the same call made plain (issue 29).

The peer is the fastmcp-tasks server, ``tests/servers/tasks_fastmcp_server.py``, on its own
interpreter (``.venv-fastmcp-tasks``, made by ``albedo_fastmcp_tasks`` in
scripts/_bootstrap.sh; ``$ALBEDO_FASTMCP_TASKS_PY`` names another). Its ``quick`` tool is
task-optional and answers at once, with ``pollIntervalMs`` 200: every call is
``tools/call quick {"x": "a"}``, made plain (inline result) and as a task (the 2026-07-28
extension ``io.modelcontextprotocol/tasks``: a ``CreateTaskResult``, then ``tasks/get``
until the task has ended, the result inlined in the last one). Over streamable HTTP one
server serves the whole run (started through bench_http.py's TCP_NODELAY shim, as uvicorn
otherwise delays every answer ~40 ms); over stdio each client starts its own.

The ways (columns), each through its own connection:

ours-plain    ``albedo_actors``: ``ServerHandle.start`` + ``connect()``, then blocking
              ``call_tool()``; the server's ``"tasks": "never"``;
ours-task     the same with ``"tasks": "always"``: every call opts in and is followed
              to its result (connection/tasks.py);
raw-plain     a minimal client written here: over HTTP one ``requests.Session`` and one
              POST per call (bench_http.py's raw), over stdio one JSON line out and one in;
raw-task      the same, opting in: ``tools/call`` answers a ``CreateTaskResult``, then
              ``tasks/get`` at once and again every ``pollIntervalMs`` until the task ends;
fastmcp-plain FastMCP's own ``Client`` without its internal extensions (nothing
              advertised, so the server answers inline), in the fastmcp-tasks venv
              (``_tasks_fastmcp_worker.py``, a subprocess printing JSON);
fastmcp-task  FastMCP's ``Client`` with ``fastmcp_tasks`` imported: its tasks extension
              opts in and its result claim polls ``tasks/get`` to the end (first poll at
              once, then a backoff from 20 ms doubling up to ``pollIntervalMs``).

Each way: ``--warmup`` calls, then ``--calls`` sequential calls timed one by one (median
and p90, ms), then ``--total`` calls with ``--inflight`` outstanding, in calls/s (ours:
threads sharing the handle; raw over HTTP: threads with a session each; FastMCP: asyncio
tasks; raw over stdio is sequential only). ours-task makes at most ``--task-calls``
sequential calls (each polls at once, then after 25, 100, 400 ms: README).

Printed: a table, the ratios ours-task/ours-plain, ours-task/raw-task,
ours-task/fastmcp-task and ours-plain/fastmcp-plain (medians, lower is better), the
same for the concurrent run (calls/s, higher is better), what the peer answered (the
status of each ``CreateTaskResult``, ``tasks/get`` per call), and a machine-readable
``RATIOS`` line per transport.

Run: ``.venv/bin/python benchmarks/bench_tasks.py [--calls N] [--transports http,stdio]``
(about 1.5 minutes with the defaults).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable

from _common import META, MODERN_VERSION, REPO, processes_running, progress, ratio, report_leftovers, timed_calls  # first: puts the checkout on sys.path
from _plain import threaded_throughput
from bench_http import NODELAY_SHIM

import requests

from albedo_actors.actors.client import ServerHandle
from albedo_actors.config import ServerConfig

SERVER = os.path.join(REPO, "tests", "servers", "tasks_fastmcp_server.py")
WORKER = os.path.join(REPO, "benchmarks", "_tasks_fastmcp_worker.py")
TASKS_PY = os.environ.get("ALBEDO_FASTMCP_TASKS_PY") or os.path.join(REPO, ".venv-fastmcp-tasks", "bin", "python")
ARGS = {"x": "a"}
EXTENSION = "io.modelcontextprotocol/tasks"
TASK_META = {**META, "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}}}
TIMEOUT = 30.0  # each call's deadline: a bound, never an expected duration
SERVER_START_TIMEOUT = 30.0
STOP_TIMEOUT = 5.0
WORKER_TIMEOUT = 120.0
WAYS = ("ours-plain", "ours-task", "raw-plain", "raw-task", "fastmcp-plain", "fastmcp-task")


def check(result: dict[str, Any]) -> None:
    text = result["content"][0]["text"]
    if text != "quick a":
        raise RuntimeError(f"quick answered {text!r}")


class Figures:
    def __init__(self) -> None:
        self.latencies_ns: list[int] = []
        self.throughput = 0.0
        self.note = ""

    def median_ms(self) -> float:
        return statistics.median(self.latencies_ns) / 1e6

    def p90_ms(self) -> float:
        ordered = sorted(self.latencies_ns)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))] / 1e6


class PeerTally:
    """What the peer answered the raw task client: the status of each CreateTaskResult,
    and how many tasks/get each call took."""

    def __init__(self) -> None:
        self.created: dict[str, int] = {}
        self.gets = 0
        self.calls = 0
        self.lock = threading.Lock()

    def add(self, status: str, gets: int) -> None:
        with self.lock:
            self.created[status] = self.created.get(status, 0) + 1
            self.gets += gets
            self.calls += 1

    def line(self) -> str:
        made = ", ".join(f"{status} {count}" for status, count in sorted(self.created.items()))
        return f"CreateTaskResult status: {made}; tasks/get per call {self.gets / max(1, self.calls):.2f}"


# -- the server ------------------------------------------------------------------------------


class HttpServer:
    """One fastmcp-tasks server for the run, behind the TCP_NODELAY shim."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self) -> None:
        self.proc = subprocess.Popen([TASKS_PY, "-c", NODELAY_SHIM, SERVER, "http", "--port", "0"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        ready: list[bytes] = []
        reader = threading.Thread(target=lambda: ready.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(SERVER_START_TIMEOUT)
        if not ready or not ready[0].startswith(b"http"):
            raise RuntimeError(f"the fastmcp-tasks server did not start within {SERVER_START_TIMEOUT:g} s")
        self.url = ready[0].decode().strip()

    def stop(self) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        stop_process(proc)


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(STOP_TIMEOUT)
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            stream.close()


# -- the raw clients -----------------------------------------------------------------------------


class RawHttp:
    """One requests.Session; plain: one POST a call; task: the call, then tasks/get until done."""

    def __init__(self, url: str, tally: PeerTally) -> None:
        self.url = url
        self.tally = tally
        self.ids = iter(range(1, 1 << 62))
        self.lock = threading.Lock()

    def session(self) -> requests.Session:
        session = requests.Session()
        session.trust_env = False
        return session

    def post(self, session: requests.Session, method: str, params: dict[str, Any], name: str, meta: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            id_ = next(self.ids)
        body = json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": {**params, "_meta": meta}},
                          separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": MODERN_VERSION, "Mcp-Method": method, "Mcp-Name": name}
        response = session.post(self.url, data=body, headers=headers)
        if response.status_code != 200 or not response.headers.get("content-type", "").startswith("application/json"):
            raise RuntimeError(f"{method}: HTTP {response.status_code} {response.content[:200]!r}")
        answer = json.loads(response.content)
        if answer.get("id") != id_ or "result" not in answer:
            raise RuntimeError(f"{method}: {answer!r:.200}")
        return answer["result"]

    def plain(self, session: requests.Session) -> dict[str, Any]:
        return self.post(session, "tools/call", {"name": "quick", "arguments": ARGS}, "quick", META)

    def task(self, session: requests.Session) -> dict[str, Any]:
        created = self.post(session, "tools/call", {"name": "quick", "arguments": ARGS}, "quick", TASK_META)
        return follow_raw(created, lambda tid: self.post(session, "tasks/get", {"taskId": tid}, tid, TASK_META), self.tally)


class RawStdio:
    """A pipe to a server of its own: one JSON line out, lines in until the answer's id."""

    def __init__(self, tally: PeerTally) -> None:
        self.tally = tally
        self.proc: subprocess.Popen | None = None
        self.next_id = 0

    def open(self) -> None:
        self.proc = subprocess.Popen([TASKS_PY, SERVER, "stdio"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)  # FastMCP logs its start there
        self.fd = self.proc.stdin.fileno()
        self.readline = self.proc.stdout.readline
        if MODERN_VERSION not in self.request("server/discover", {}, META).get("supportedVersions", ()):
            raise RuntimeError("the server is not modern")

    def request(self, method: str, params: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        id_ = self.next_id
        os.write(self.fd, json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": {**params, "_meta": meta}},
                                     separators=(",", ":")).encode() + b"\n")
        while True:
            line = self.readline()
            if not line:
                raise RuntimeError("the server closed its output")
            message = json.loads(line)
            if message.get("id") == id_ and "method" not in message:
                if "result" not in message:
                    raise RuntimeError(f"{method}: {message!r:.200}")
                return message["result"]

    def plain(self) -> dict[str, Any]:
        return self.request("tools/call", {"name": "quick", "arguments": ARGS}, META)

    def task(self) -> dict[str, Any]:
        created = self.request("tools/call", {"name": "quick", "arguments": ARGS}, TASK_META)
        return follow_raw(created, lambda tid: self.request("tasks/get", {"taskId": tid}, TASK_META), self.tally)

    def close(self) -> None:
        if self.proc is not None:
            proc, self.proc = self.proc, None
            proc.stdin.close()
            stop_process(proc)


def follow_raw(created: dict[str, Any], get: Callable[[str], dict[str, Any]], tally: PeerTally) -> dict[str, Any]:
    """The least a task client does: tasks/get at once, then every pollIntervalMs until it ends."""
    if created.get("resultType") != "task":
        raise RuntimeError(f"the call did not run as a task: {created!r:.200}")
    tid, state, gets = created["taskId"], created, 0
    while state["status"] not in ("completed", "failed", "cancelled"):
        if gets:
            time.sleep(state.get("pollIntervalMs", 1000) / 1000)
        state = get(tid)
        gets += 1
    tally.add(created["status"], gets)
    if state["status"] != "completed":
        raise RuntimeError(f"task {tid} ended {state['status']}")
    return state["result"]


# -- measuring -----------------------------------------------------------------------------------


def measure(fig: Figures, call: Callable[[], Any], calls: int, warmup: int, concurrent: Callable[[], float]) -> None:
    check(call())
    timed_calls(call, warmup)
    gc.collect()
    fig.latencies_ns = timed_calls(call, calls)
    gc.collect()
    fig.throughput = concurrent()


def measure_ours(figs: dict[str, Figures], config: ServerConfig, home: str, way: str, opts: argparse.Namespace) -> None:
    calls = min(opts.calls, opts.task_calls) if way == "ours-task" else opts.calls
    progress(f"{way}: {calls} calls, then {opts.total} with {opts.inflight} in flight")
    handle = ServerHandle.start(config, home)
    try:
        handle.connect(TIMEOUT)
        heard: list[Any] = []
        check(handle.call_tool("quick", ARGS, TIMEOUT, on_progress=heard.append))
        time.sleep(0.2)  # reports reach on_progress on a thread of their own
        tasked = any("task" in str(getattr(report, "message", "") or "") for report in heard)
        figs[way].note = f"progress heard on the first call: {'task status' if tasked else 'none'}"

        def call() -> dict[str, Any]:
            return handle.call_tool("quick", ARGS, TIMEOUT)

        measure(figs[way], call, calls, opts.warmup if way == "ours-plain" else min(opts.warmup, 3),
                lambda: threaded_throughput([call] * opts.inflight, opts.total))
    finally:
        handle.stop()


def measure_raw_http(figs: dict[str, Figures], url: str, opts: argparse.Namespace, tally: PeerTally) -> None:
    raw = RawHttp(url, tally)
    sessions = [raw.session() for _ in range(opts.inflight)]
    try:
        for way, method in (("raw-plain", raw.plain), ("raw-task", raw.task)):
            progress(f"{way}: {opts.calls} calls, then {opts.total} with {opts.inflight} in flight")
            measure(figs[way], lambda method=method: method(sessions[0]), opts.calls, opts.warmup,
                    lambda method=method: threaded_throughput([lambda s=s: method(s) for s in sessions], opts.total))
    finally:
        for session in sessions:
            session.close()


def measure_raw_stdio(figs: dict[str, Figures], opts: argparse.Namespace, tally: PeerTally) -> None:
    raw = RawStdio(tally)
    try:
        raw.open()
        for way, method in (("raw-plain", raw.plain), ("raw-task", raw.task)):
            progress(f"{way}: {opts.calls} calls (sequential only)")
            measure(figs[way], method, opts.calls, opts.warmup, lambda: 0.0)
    finally:
        raw.close()


def measure_fastmcp(figs: dict[str, Figures], transport: str, url: str, opts: argparse.Namespace) -> str:
    progress(f"fastmcp-plain, fastmcp-task: {opts.calls} calls each, then {opts.total} with {opts.inflight} in flight")
    args = [TASKS_PY, WORKER, "--transport", transport, "--calls", str(opts.calls), "--total", str(opts.total),
            "--inflight", str(opts.inflight), "--warmup", str(opts.warmup)]
    args += ["--url", url] if transport == "http" else ["--server", SERVER]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=WORKER_TIMEOUT)
    finally:
        if proc.poll() is None:
            stop_process(proc)
    if proc.returncode != 0:
        raise RuntimeError(f"the FastMCP worker failed: {err.decode(errors='replace')[-400:]}")
    data = json.loads(out)
    for part in ("plain", "task"):
        got = data[part]
        fig = figs[f"fastmcp-{part}"]
        fig.latencies_ns = got["latencies_ns"]
        fig.throughput = got["throughput"]
        fig.note = f"ran as a task: {got['ran_as_task']}; tasks/get per call {got['gets_per_call']:.2f}"
    return f"fastmcp {data['fastmcp']}, fastmcp-tasks {data['fastmcp_tasks']}"


def run_transport(transport: str, opts: argparse.Namespace, home: str) -> tuple[dict[str, Figures], PeerTally, str]:
    figs = {way: Figures() for way in WAYS}
    tally = PeerTally()
    server = HttpServer() if transport == "http" else None
    try:
        if server is not None:
            server.start()
        for way, mode in (("ours-plain", "never"), ("ours-task", "always")):
            if transport == "http":
                config = ServerConfig(name=f"t-{mode}", type="http", url=server.url, tasks=mode, call_timeout_ms=30_000)
            else:
                config = ServerConfig(name=f"t-{mode}", type="stdio", command=TASKS_PY, args=(SERVER, "stdio"), tasks=mode,
                                      call_timeout_ms=30_000, startup_timeout_ms=30_000)
            measure_ours(figs, config, home, way, opts)
        if transport == "http":
            measure_raw_http(figs, server.url, opts, tally)
        else:
            measure_raw_stdio(figs, opts, tally)
        versions = measure_fastmcp(figs, transport, server.url if server else "", opts)
    finally:
        if server is not None:
            server.stop()
    return figs, tally, versions


# -- report --------------------------------------------------------------------------------------


def report(transport: str, figs: dict[str, Figures], tally: PeerTally, versions: str) -> str:
    print()
    print(f"{transport}: tools/call quick, plain and as a task, against tasks_fastmcp_server.py ({versions})")
    header = f"  {'way':<14} {'calls':>5} {'median ms':>10} {'p90 ms':>9} {'calls/s':>9}  note"
    print(header)
    print("  " + "-" * (len(header) - 2))
    for way in WAYS:
        f = figs[way]
        tp = f"{f.throughput:9.0f}" if f.throughput else f"{'n/a':>9}"
        print(f"  {way:<14} {len(f.latencies_ns):>5} {f.median_ms():>10.2f} {f.p90_ms():>9.2f} {tp}  {f.note}")
    print(f"  peer (raw-task): {tally.line()}")
    m = {way: figs[way].median_ms() for way in WAYS}
    pairs = (("ours-task", "ours-plain"), ("ours-task", "raw-task"), ("ours-task", "fastmcp-task"), ("ours-plain", "fastmcp-plain"))
    lat = " ".join(f"{a}/{b}={ratio(m[a], m[b])}" for a, b in pairs)
    tput = " ".join(f"{a}/{b}={ratio(figs[a].throughput, figs[b].throughput)}" for a, b in pairs
                    if figs[a].throughput and figs[b].throughput)
    print(f"  latency (median, lower is better): {lat}")
    if tput:
        print(f"  concurrent (calls/s, higher is better): {tput}")
    return f"RATIOS {transport} latency {lat}" + (f" calls/s {tput}" if tput else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("calls", type=int, nargs="?", default=200, help="sequential calls per way (default 200)")
    parser.add_argument("--task-calls", type=int, default=50,
                        help="at most this many sequential calls for ours-task (default 50)")
    parser.add_argument("--total", type=int, default=None, help="calls of the concurrent run (default: calls)")
    parser.add_argument("--inflight", type=int, default=16, help="calls outstanding in the concurrent run (default 16)")
    parser.add_argument("--warmup", type=int, default=20, help="warm-up calls per way (default 20; ours-task 3)")
    parser.add_argument("--transports", default="http,stdio", help="http, stdio or both (default http,stdio)")
    opts = parser.parse_args(argv)
    opts.total = opts.total or opts.calls
    transports = [t.strip() for t in opts.transports.split(",") if t.strip()]
    if min(opts.calls, opts.task_calls, opts.total, opts.inflight) < 1 or set(transports) - {"http", "stdio"}:
        parser.error("counts must be positive; --transports takes http and/or stdio")
    if not os.path.exists(TASKS_PY):
        print(f"no {TASKS_PY}: run scripts/test once (albedo_fastmcp_tasks makes it) or set ALBEDO_FASTMCP_TASKS_PY")
        return 2
    servers = lambda: processes_running(SERVER)  # noqa: E731
    before, threads_before = servers(), set(threading.enumerate())
    started = time.perf_counter()
    lines = []
    with tempfile.TemporaryDirectory(prefix="bench-tasks-") as home:
        for transport in transports:
            figs, tally, versions = run_transport(transport, opts, home)
            lines.append(report(transport, figs, tally, versions))
    print()
    for line in lines:
        print(line)
    print(f"(calls={opts.calls} task-calls={opts.task_calls} total={opts.total} inflight={opts.inflight}; "
          f"{os.cpu_count()} cpus; run took {time.perf_counter() - started:.1f} s)")
    return report_leftovers(before, servers, threads_before)


if __name__ == "__main__":
    sys.exit(main())
