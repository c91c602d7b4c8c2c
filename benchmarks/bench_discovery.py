#!/usr/bin/env python3
"""Benchmark discovery: the time of a normal 1,000-tool discovery and the peak memory of
one discovery at the byte budget, ours after and before issue 10, against two peers.

The server is ``benchmarks/_tools_server.py`` (standard library only, legacy era,
precomputed answers). The clients, each in a process of its own (this script run again
with ``--worker NAME``; it prints its figures as JSON lines):

ours    ``albedo_actors`` of this checkout: ``config.launch_spec`` for a
        ``ServerConfig``, ``connection.open_stdio(...)``, then
        ``connection.discover(conn, timeout)`` (every page of ``tools/list``, each page
        checked as it arrives within the 8 MiB ``DISCOVERY_BUDGET``).
before  the same calls on the tree of commit 85631dc (the last commit before issue 10:
        every page kept, then checked; a warning per left-out entry), extracted with
        ``git archive`` to a temporary directory that is the worker's PYTHONPATH.
sdk     the official SDK (``mcp``): ``stdio_client`` + ``ClientSession``,
        ``initialize()``, then ``list_tools(params=PaginatedRequestParams(cursor=...))``
        over every page (pydantic models for every tool).
raw     a minimal pipe client written here: ``subprocess.Popen``, ``initialize``,
        ``notifications/initialized``, then one ``tools/list`` line out and one answer
        line in per page, ``json.loads``, the tools kept in a list. The floor.

Measured:

1. discovery time: each client opens once (one server process each), warms up, then
   ``--rounds`` rounds, the clients taking turns in a rotating order, one at a time;
   in each round a client does ``--repeat`` full discoveries of the ``--tools`` (1000)
   tools server. Median and p90 in ms over every discovery, and the spread of the
   round medians. Ratios: after/before (target: within noise, <= ~1.05x), ours/sdk,
   ours/raw.
2. peak memory of one discovery: every client in a fresh process per case; the
   process's RSS after its imports and the connect (baseline; the high-water mark is
   then reset to it) and its peak RSS after one discovery (``VmHWM``, which is
   ``ru_maxrss`` without the image replaced at exec); the delta is what the
   discovery needed. Cases: ``fill`` realistic
   tools just under the 8 MiB budget; ``flood`` just under 8 MiB of ``{}`` entries in
   1 MiB pages; ``over`` ``--over-mib`` (40) MiB of ``{}``, which ours refuses at the
   budget. ``before`` takes ``over`` only up to ``--before-flood-mib`` (16) MiB, since
   it keeps everything (issue 10 saw 4.3 GB of peak RSS for 40 pages of 2 MB).

Run: ``.venv/bin/python benchmarks/bench_discovery.py [--quick]``. See docs/security.rst ("What a server sends is data").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import resource
import selectors
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

# Nothing of albedo_actors or _common is imported at module level: a "before" worker
# must import the package from its own tree (its PYTHONPATH), and _common puts this
# checkout first on sys.path.

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BENCH = os.path.abspath(__file__)
TOOLS_SERVER = os.path.join(HERE, "_tools_server.py")
BEFORE_REV = "85631dc"
CLIENTS = ("ours", "before", "sdk", "raw")
MIB = 1 << 20
BUDGET = 8 * MIB  # albedo_actors.connection.DISCOVERY_BUDGET; checked against it in main()
MAX_PAGES = 100  # as ours: the peers stop after as many pages
FILL_PAGE_SIZE = 500  # tools per page in the fill case: about 640 KB a page, 14 pages
LEGACY_VERSION = "2025-11-25"


# == the workers ==========================================================================
#
# Each client has the same async face (open, discover, close); the blocking ones simply
# block the event loop, which has nothing else to do. discover() returns (tools kept,
# warnings) or raises; the worker turns an exception into a one-line outcome.


class AlbedoClient:
    """ours or before: whichever albedo_actors the worker's PYTHONPATH holds."""

    blocking = True

    def __init__(self, server_args: list[str], home: str, timeout: float) -> None:
        import albedo_actors
        from albedo_actors import connection
        from albedo_actors.config import ServerConfig

        try:
            from albedo_actors.connection.stdio_link import launch_spec
        except ImportError:  # the 85631dc tree: launch_spec was in config, connection a module
            from albedo_actors.config import launch_spec  # type: ignore[attr-defined,no-redef]

        self.connection_module = connection
        self.module = os.path.dirname(os.path.abspath(albedo_actors.__file__))
        self.timeout = timeout
        config = ServerConfig(name="bench", type="stdio", command=sys.executable, args=tuple(server_args))
        self.spec = launch_spec(config, home)
        self.conn: Any = None

    async def open(self) -> None:
        self.conn = self.connection_module.open_stdio("bench", self.spec, lambda method, params: None, lambda reason: None, self.timeout)

    async def discover(self) -> tuple[int, int]:
        catalogue = self.connection_module.discover(self.conn, self.timeout)
        return len(catalogue.tools), len(catalogue.warnings)

    async def close(self) -> None:
        if self.conn is not None:
            conn, self.conn = self.conn, None
            conn.close("benchmark done")
            conn.wait_closed()


class SdkClient:
    """The official SDK: stdio_client + ClientSession, initialize, list_tools by cursor."""

    blocking = False

    def __init__(self, server_args: list[str], home: str, timeout: float) -> None:
        import mcp

        self.module = os.path.dirname(os.path.abspath(mcp.__file__))
        self.server_args = server_args
        self.home = home
        self.timeout = timeout
        self.stack: contextlib.AsyncExitStack | None = None
        self.session: Any = None

    async def open(self) -> None:
        import anyio
        from mcp.client.session import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client

        self.stack = contextlib.AsyncExitStack()
        params = StdioServerParameters(command=sys.executable, args=list(self.server_args), cwd=self.home)
        read, write = await self.stack.enter_async_context(stdio_client(params))
        self.session = await self.stack.enter_async_context(ClientSession(read, write))
        with anyio.fail_after(self.timeout):
            await self.session.initialize()

    async def discover(self) -> tuple[int, int]:
        import anyio
        from mcp.types import PaginatedRequestParams

        tools: list[Any] = []
        cursor = None
        with anyio.fail_after(self.timeout):
            for _ in range(MAX_PAGES):
                result = await self.session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor is not None else None)
                tools.extend(result.tools)
                cursor = result.next_cursor
                if cursor is None:
                    break
        return len(tools), 0

    async def close(self) -> None:
        if self.stack is not None:
            stack, self.stack, self.session = self.stack, None, None
            await stack.aclose()


class RawClient:
    """The least a Python client can do: a pipe, one JSON line out and one in per page."""

    blocking = True
    module = "(this file)"

    def __init__(self, server_args: list[str], home: str, timeout: float) -> None:
        self.server_args = server_args
        self.home = home
        self.proc: subprocess.Popen | None = None
        self.next_id = 0

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.proc.stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the server closed its output")
        answer = json.loads(line)
        if answer.get("id") != self.next_id or "result" not in answer:
            raise RuntimeError(f"unexpected answer {str(answer)[:200]}")
        return answer["result"]

    async def open(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, *self.server_args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=self.home
        )
        self.request(
            "initialize",
            {"protocolVersion": LEGACY_VERSION, "capabilities": {}, "clientInfo": {"name": "raw-bench", "version": "0"}},
        )
        self.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        self.proc.stdin.flush()

    async def discover(self) -> tuple[int, int]:
        tools: list[Any] = []
        cursor = None
        for _ in range(MAX_PAGES):
            result = self.request("tools/list", {"cursor": cursor} if cursor is not None else None)
            tools.extend(result["tools"])
            cursor = result.get("nextCursor")
            if cursor is None:
                break
        return len(tools), 0

    async def close(self) -> None:
        if self.proc is not None:
            proc, self.proc = self.proc, None
            proc.stdin.close()  # end of input: the server exits
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stdout.close()


WORKERS = {"ours": AlbedoClient, "before": AlbedoClient, "sdk": SdkClient, "raw": RawClient}


def peak_rss_kib() -> int:
    """This process's peak RSS in KiB: ``VmHWM`` of /proc/self/status, else ``ru_maxrss``.

    The two are the same high-water mark of the process's memory, except that Linux's
    ``ru_maxrss`` is also at least the RSS of the image replaced at exec (the forking
    parent's, which is large here), so a small process can never show a peak below
    its parent's size; ``VmHWM`` is the process's own and is what ``reset_peak``
    lowers (proc(5)).
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def reset_peak() -> bool:
    """Lower this process's high-water mark (VmHWM) to its current RSS (Linux 4.0+, proc(5)
    clear_refs "5"), so that the peak after a discovery is the discovery's own, not
    what the imports once reached. False where that cannot be done."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160] if text else ''}"


async def _attempt(client: Any) -> dict[str, Any]:
    """One discovery, timed; an exception becomes its one-line outcome."""
    t0 = time.perf_counter()
    try:
        tools, warnings = await client.discover()
    except Exception as exc:  # noqa: BLE001 - a refused discovery is a figure here, not a failure
        return {"seconds": time.perf_counter() - t0, "tools": 0, "warnings": 0, "error": one_line(exc)}
    return {"seconds": time.perf_counter() - t0, "tools": tools, "warnings": warnings, "error": None}


async def worker(opts: argparse.Namespace, out: Any) -> int:
    def emit(value: dict[str, Any]) -> None:
        out.write(json.dumps(value) + "\n")
        out.flush()

    client = WORKERS[opts.worker](json.loads(opts.server_args), opts.home, opts.timeout)
    await client.open()
    if opts.mode == "memory":
        gc.collect()
        reset = reset_peak()
        baseline = peak_rss_kib()
        outcome = await _attempt(client)
        emit({"baseline_kib": baseline, "peak_kib": peak_rss_kib(), "reset": reset, "module": client.module, **outcome})
    else:
        for _ in range(opts.warmup):
            first = await _attempt(client)
            if first["error"]:
                raise RuntimeError(f"{opts.worker}: warm-up discovery failed: {first['error']}")
        emit({"ready": True, "module": client.module, "tools": first["tools"] if opts.warmup else None})
        while True:
            line = sys.stdin.readline() if client.blocking else await asyncio.to_thread(sys.stdin.readline)
            command = json.loads(line) if line.strip() else {"op": "quit"}
            if command["op"] != "time":
                break
            gc.collect()  # every round starts clean; collections during it are part of the work
            times, tools = [], set()
            for _ in range(command["repeat"]):
                outcome = await _attempt(client)
                if outcome["error"]:
                    raise RuntimeError(f"{opts.worker}: discovery failed: {outcome['error']}")
                times.append(outcome["seconds"] * 1000)
                tools.add(outcome["tools"])
            emit({"ms": times, "tools": sorted(tools)})
    await client.close()
    emit({"closed": True})
    return 0


def worker_main(opts: argparse.Namespace) -> int:
    # The figures go out on a private copy of stdout; fd 1 becomes stderr, so that
    # nothing else printed by a library (or inherited by a child) can garble them.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        return asyncio.run(worker(opts, out))
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
        out.write(json.dumps({"failed": one_line(exc)}) + "\n")
        out.flush()
        return 1


# == the parent ===========================================================================


class Worker:
    """One worker process; its JSON lines are read within deadlines."""

    def __init__(self, name: str, mode: str, server_args: list[str], run: "Run", opts: argparse.Namespace) -> None:
        self.name = name
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        if name == "ours":
            env["PYTHONPATH"] = REPO
        elif name == "before":
            env["PYTHONPATH"] = run.before_tree
        home = os.path.join(run.root, f"home-{name}")
        os.makedirs(home, exist_ok=True)
        command = [
            sys.executable, BENCH, "--worker", name, "--mode", mode, "--server-args", json.dumps(server_args),
            "--home", home, "--timeout", str(opts.timeout), "--warmup", str(opts.warmup),
        ]
        # The worker's directory is the run's: every process it starts can be found by it.
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=run.root, env=env)
        self._buffer = b""

    def send(self, command: dict[str, Any]) -> None:
        self.proc.stdin.write(json.dumps(command).encode() + b"\n")
        self.proc.stdin.flush()

    def receive(self, timeout: float) -> dict[str, Any]:
        """The next JSON line, within ``timeout`` seconds (else the worker is killed)."""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.kill()
                    raise RuntimeError(f"{self.name}: no answer within {timeout:g} s; the worker was killed")
                if selector.select(left):
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        status = self.proc.wait(10)
                        raise RuntimeError(f"{self.name}: the worker ended (exit status {status}) without an answer")
                    self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        message = json.loads(line)
        if "failed" in message:
            raise RuntimeError(f"{self.name}: {message['failed']}")
        return message

    def stop(self, timeout: float = 30.0) -> None:
        """Ask it to close its connection and exit; kill it if it does not in time."""
        try:
            if self.proc.poll() is None:
                self.send({"op": "quit"})
                self.receive(timeout)
        except (OSError, RuntimeError, ValueError):
            pass
        finally:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
            for pipe in (self.proc.stdin, self.proc.stdout):
                with contextlib.suppress(OSError):
                    pipe.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Run:
    """The run's temporary directory: the 85631dc tree and every worker's home."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.before_tree = os.path.join(root, f"tree-{BEFORE_REV}")
        os.makedirs(self.before_tree)
        archive = subprocess.run(
            ["git", "-C", REPO, "archive", BEFORE_REV, "albedo_actors"], capture_output=True, check=True, timeout=60
        )
        subprocess.run(["tar", "-x", "-C", self.before_tree], input=archive.stdout, check=True, timeout=60)

    def processes(self) -> set[int]:
        """Live processes of this run: any whose directory is in the run's (workers, our
        launchers and servers, the peers' servers), or that runs the tools server."""
        found = set()
        needle = TOOLS_SERVER.encode()
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                cwd = os.readlink(f"/proc/{entry}/cwd")
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read()
                with open(f"/proc/{entry}/stat", "rb") as f:
                    state = f.read().rsplit(b")", 1)[1].split()[0]
            except OSError:
                continue
            if state != b"Z" and (cwd == self.root or cwd.startswith(self.root + os.sep) or needle in cmdline):
                found.add(int(entry))
        return found


def check_tree(name: str, module: str, run: Run) -> None:
    """ours must run this checkout's package and before the 85631dc tree's, not each other's."""
    expected = {"ours": os.path.join(REPO, "albedo_actors"), "before": os.path.join(run.before_tree, "albedo_actors")}.get(name)
    if expected is not None and os.path.realpath(module) != os.path.realpath(expected):
        raise RuntimeError(f"{name} imported albedo_actors from {module}, not {expected}")


def progress(what: str) -> None:
    print(f"[bench] {what} ...", file=sys.stderr, flush=True)


# -- 1. discovery time --------------------------------------------------------------------


def time_discoveries(opts: argparse.Namespace, run: Run, wanted: list[str]) -> dict[str, dict[str, Any]]:
    server_args = ["-I", TOOLS_SERVER, "--tools", str(opts.tools), "--page-size", str(opts.page_size)]
    figs: dict[str, dict[str, Any]] = {}
    workers: dict[str, Worker] = {}
    try:
        for name in wanted:  # opened one at a time, so that the starts do not overlap
            progress(f"opening {name}")
            workers[name] = Worker(name, "time", server_args, run, opts)
            ready = workers[name].receive(opts.timeout + 60)
            check_tree(name, ready["module"], run)
            if ready["tools"] != opts.tools:
                raise RuntimeError(f"{name} discovered {ready['tools']} tools, not {opts.tools}")
            figs[name] = {"module": ready["module"], "ms": [], "round_medians": []}
        for r in range(opts.rounds):
            progress(f"round {r + 1}/{opts.rounds}")
            k = r % len(wanted)
            for name in wanted[k:] + wanted[:k]:
                workers[name].send({"op": "time", "repeat": opts.repeat})
                answer = workers[name].receive(opts.timeout * opts.repeat + 60)
                if answer["tools"] != [opts.tools]:
                    raise RuntimeError(f"{name} discovered {answer['tools']} tools, not {opts.tools}")
                figs[name]["ms"].extend(answer["ms"])
                figs[name]["round_medians"].append(statistics.median(answer["ms"]))
    finally:
        for w in workers.values():
            w.stop()
    return figs


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def report_time(figs: dict[str, dict[str, Any]], opts: argparse.Namespace, wire: dict[str, int]) -> list[str]:
    print()
    print(
        f"1. discovery time: {opts.tools} tools in {wire['pages']} pages of {opts.page_size} "
        f"({wire['wire_bytes'] / MIB:.2f} MiB on the wire); rounds={opts.rounds} repeat={opts.repeat} warmup={opts.warmup}"
        f"{' pinned to cpu ' + str(opts.pin) if opts.pin is not None else ''}"
    )
    print()
    header = f"{'client':<7} {'median ms':>10} {'p90 ms':>8} {'min ms':>8} {'round medians ms (min..max)':>28}"
    print(header)
    print("-" * len(header))
    med = {}
    for name in CLIENTS:
        if name not in figs:
            continue
        f = figs[name]
        med[name] = statistics.median(f["ms"])
        spread = f"{min(f['round_medians']):.2f}..{max(f['round_medians']):.2f}"
        print(f"{name:<7} {med[name]:>10.2f} {percentile(f['ms'], 0.9):>8.2f} {min(f['ms']):>8.2f} {spread:>28}")
    print(f"(median and p90 over all {opts.rounds * opts.repeat} timed discoveries per client)")
    parts = []
    print()
    print("ratios (median discovery time; lower is better)")
    if "ours" in med and "before" in med:
        paired = [a / b for a, b in zip(figs["ours"]["round_medians"], figs["before"]["round_medians"])]
        noise = [
            (max(f["round_medians"]) - min(f["round_medians"])) / statistics.median(f["round_medians"])
            for f in (figs["ours"], figs["before"])
        ]
        print(
            f"  after/before = {ratio(med['ours'], med['before'])}   (target <= ~1.05x, within noise; per round "
            f"{min(paired):.2f}x..{max(paired):.2f}x; round-median spread ours {noise[0]:.0%}, before {noise[1]:.0%})"
        )
        parts.append(f"after/before={ratio(med['ours'], med['before'])}")
    for peer in ("sdk", "raw"):
        if "ours" in med and peer in med:
            print(f"  ours/{peer}     = {ratio(med['ours'], med[peer])}")
            parts.append(f"ours/{peer}={ratio(med['ours'], med[peer])}")
    return parts


# -- 2. peak memory -----------------------------------------------------------------------


def memory_cases(opts: argparse.Namespace) -> list[dict[str, Any]]:
    budget_mib = BUDGET / MIB
    fill = min(int(opts.fill_mib * MIB), BUDGET)
    flood = min(int(opts.flood_mib * MIB), BUDGET)
    before_over = min(opts.before_flood_mib, opts.over_mib)

    def at(size: int, option: str) -> str:
        return f"just under the {budget_mib:g} MiB budget" if size == BUDGET else f"just under {size / MIB:g} MiB ({option})"

    return [
        {
            "case": "fill",
            "what": f"realistic tools {at(fill, '--fill-mib')}, pages of {FILL_PAGE_SIZE}",
            "args": ["--fill", str(fill), "--page-size", str(FILL_PAGE_SIZE)],
        },
        {
            "case": "flood",
            "what": f"{{}} entries {at(flood, '--flood-mib')}, 1 MiB pages",
            "args": ["--flood", str(flood)],
        },
        {
            "case": "over",
            "what": f"{opts.over_mib:g} MiB of {{}} in 1 MiB pages (before: only {before_over:g} MiB, --before-flood-mib)",
            "args": ["--flood", str(int(opts.over_mib * MIB))],
            "before_args": ["--flood", str(int(before_over * MIB))],
            # The SDK refuses a flood at its first page, as in "flood": --quick spares it.
            "skip": {"sdk"} if opts.quick else set(),
        },
    ]


def measure_memory(opts: argparse.Namespace, run: Run, wanted: list[str]) -> list[dict[str, Any]]:
    rows = []
    for case in memory_cases(opts):
        for name in wanted:
            if name in case.get("skip", ()):
                continue
            progress(f"memory {case['case']} {name}")
            args = case["before_args"] if name == "before" and "before_args" in case else case["args"]
            server_args = ["-I", TOOLS_SERVER, *args]
            w = Worker(name, "memory", server_args, run, opts)
            try:
                figure = w.receive(opts.timeout + 120)
            finally:
                w.stop()
            check_tree(name, figure["module"], run)
            figure.update(case=case["case"], client=name, mib=int(args[1]) / MIB)
            rows.append(figure)
    return rows


def outcome_text(row: dict[str, Any]) -> str:
    if row["error"]:
        return f"refused: {row['error']}"
    return f"{row['tools']} tools kept, {row['warnings']} warnings"


def report_memory(rows: list[dict[str, Any]], opts: argparse.Namespace) -> list[str]:
    print()
    print("2. peak memory of one discovery (a fresh process per client and case; peak RSS, VmHWM, MiB)")
    for case in memory_cases(opts):
        skipped = f" (not run for {', '.join(sorted(case['skip']))} with --quick)" if case.get("skip") else ""
        print(f"   {case['case']:<6} {case['what']}{skipped}")
    print()
    header = f"{'case':<6} {'client':<7} {'offered':>8} {'baseline':>9} {'peak':>8} {'delta':>8} {'seconds':>8}  outcome"
    print(header)
    print("-" * (len(header) + 40))
    by = {}
    for row in rows:
        delta = (row["peak_kib"] - row["baseline_kib"]) / 1024
        by[(row["case"], row["client"])] = delta
        print(
            f"{row['case']:<6} {row['client']:<7} {row['mib']:>8.1f} {row['baseline_kib'] / 1024:>9.1f} "
            f"{row['peak_kib'] / 1024:>8.1f} {delta:>8.1f} {row['seconds']:>8.2f}  {outcome_text(row)}"
        )
    reset = all(row["reset"] for row in rows)
    print("(offered: MiB of answers the server had for the client; baseline: RSS after imports and connect;"
          " peak: VmHWM after the discovery;\n delta: what the discovery added"
          + ("; the high-water mark was reset to the baseline before each discovery)" if reset else
             "; the high-water mark could NOT be reset: a delta is what the discovery reached beyond the imports' peak)"))
    print()
    print("ratios (delta of peak memory; lower is better)")
    parts = []
    for case in ("fill", "flood", "over"):
        pieces = []
        for peer in ("before", "sdk", "raw"):
            ours, other = by.get((case, "ours")), by.get((case, peer))
            sdk_row = next((r for r in rows if r["case"] == case and r["client"] == peer), None)
            if ours is None or other is None or (peer == "sdk" and sdk_row and sdk_row["error"]):
                continue  # the SDK could not do it: no ratio
            pieces.append(f"ours/{peer}={ratio(max(ours, 0.1), max(other, 0.1))}")
        if pieces:
            print(f"  {case:<6} {'  '.join(pieces)}")
            parts.append(f"{case} " + " ".join(pieces))
    print("  (a delta under 0.1 MiB counts as 0.1 in a ratio; no sdk ratio where the sdk refused the listing)")
    return parts


def wire_stats(opts: argparse.Namespace) -> dict[str, int]:
    """Pages and wire bytes of the time benchmark's listing, as the server counts them."""
    done = subprocess.run(
        [sys.executable, "-I", TOOLS_SERVER, "--tools", str(opts.tools), "--page-size", str(opts.page_size), "--stats"],
        stdin=subprocess.DEVNULL, capture_output=True, timeout=60, check=True,
    )
    return json.loads(done.stderr.decode().strip().splitlines()[-1])


def tree_note() -> str:
    head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=30)
    dirty = subprocess.run(
        ["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no", "--", "albedo_actors"],
        capture_output=True, text=True, timeout=30,
    )
    changed = len([line for line in dirty.stdout.splitlines() if line.strip()])
    return f"HEAD {head.stdout.strip()}" + (f" + {changed} uncommitted file(s) in albedo_actors/" if changed else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", type=int, default=1000, help="tools of the timed server (default 1000)")
    parser.add_argument("--page-size", type=int, default=100, help="tools per page of the timed server (default 100)")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds, clients taking turns (default 5)")
    parser.add_argument("--repeat", type=int, default=None, help="discoveries per client and round (default 20)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed discoveries per client first (default 3)")
    parser.add_argument("--fill-mib", type=float, default=None,
                        help="the realistic tools at the budget, MiB (default 8: just under the budget; at most 8)")
    parser.add_argument("--flood-mib", type=float, default=None,
                        help="the flood at the budget, MiB (default 8: just under the budget; at most 8)")
    parser.add_argument("--over-mib", type=float, default=None, help="the over-budget flood in MiB (default 40)")
    parser.add_argument("--before-flood-mib", type=float, default=None,
                        help="what 'before' reads of the over-budget flood, MiB (default 16: it keeps everything)")
    parser.add_argument("--clients", default=",".join(CLIENTS), help="comma-separated subset of ours,before,sdk,raw")
    parser.add_argument("--only", choices=("time", "memory"), default=None, help="one part of the benchmark")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds one open or discovery may take (default 120)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 rounds of 3; 2 MiB fill and flood, 10 MiB over the budget (before: 2)")
    parser.add_argument("--pin", type=int, default=None, metavar="CPU", help="pin this process and all it starts to one cpu")
    # The worker side (this script run again by the parent):
    parser.add_argument("--worker", choices=CLIENTS, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=("time", "memory"), default="time", help=argparse.SUPPRESS)
    parser.add_argument("--server-args", default="[]", help=argparse.SUPPRESS)
    parser.add_argument("--home", default=None, help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.worker is not None:
        return worker_main(opts)

    for key, full, quick in (
        ("rounds", 5, 2), ("repeat", 20, 3), ("warmup", 3, 1),
        ("fill_mib", 8, 2), ("flood_mib", 8, 2), ("over_mib", 40, 10), ("before_flood_mib", 16, 2),
    ):
        if getattr(opts, key) is None:
            setattr(opts, key, quick if opts.quick else full)
    if min(opts.tools, opts.page_size, opts.rounds, opts.repeat, opts.warmup) < 1:
        parser.error("--tools, --page-size, --rounds, --repeat and --warmup must be positive")
    if opts.over_mib * MIB <= BUDGET or min(opts.fill_mib, opts.flood_mib, opts.before_flood_mib) <= 0:
        parser.error("--over-mib must be over 8; --fill-mib, --flood-mib and --before-flood-mib positive")
    wanted = [c.strip() for c in opts.clients.split(",") if c.strip()]
    if not wanted or set(wanted) - set(CLIENTS):
        parser.error("--clients takes a comma-separated subset of ours,before,sdk,raw")
    if opts.pin is not None:
        os.sched_setaffinity(0, {opts.pin})  # inherited by every process started from here

    import _common  # the shared leftover report (it also puts this checkout on sys.path)
    from albedo_actors import connection

    if connection.DISCOVERY_BUDGET != BUDGET:
        parser.error(f"this benchmark is written for an 8 MiB budget; DISCOVERY_BUDGET is {connection.DISCOVERY_BUDGET}")

    started = time.perf_counter()
    status = 0
    with tempfile.TemporaryDirectory(prefix="albedo-bench-discovery-") as root:
        try:
            run = Run(os.path.realpath(root))
        except (OSError, subprocess.SubprocessError) as exc:
            print(f"bench_discovery: cannot extract {BEFORE_REV} with git archive: {exc}", file=sys.stderr)
            return 1
        before = run.processes()
        try:
            print(
                f"discovery benchmark: legacy stdio server benchmarks/_tools_server.py; python {platform.python_version()}, "
                f"{os.cpu_count()} cpus, mcp {_common.sdk_version()}{' (quick)' if opts.quick else ''}"
            )
            print(f"ours: albedo_actors of this checkout ({tree_note()}); before: git archive {BEFORE_REV}")
            parts = []
            if opts.only in (None, "time"):
                wire = wire_stats(opts)
                figs = time_discoveries(opts, run, wanted)
                for name in ("ours", "before"):
                    if name in figs:
                        print(f"{name} imported from {figs[name]['module']}")
                parts += ["time", *report_time(figs, opts, wire)]
            if opts.only in (None, "memory"):
                rows = measure_memory(opts, run, wanted)
                parts += ["memory", *report_memory(rows, opts)]
            print()
            print("RATIOS " + " ".join(parts))
            print(f"(run took {time.perf_counter() - started:.1f} s)")
        except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as exc:
            print(f"bench_discovery: {exc}", file=sys.stderr)  # one line, no traceback
            status = 1
        finally:
            sys.stdout.flush()
            status = _common.report_leftovers(before, run.processes) or status
    return status


if __name__ == "__main__":
    sys.exit(main())
