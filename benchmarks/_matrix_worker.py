"""One measurement of the benchmark matrix, in a fresh process: prints one JSON object.

Run by matrix.py (never needs to be run by hand)::

    python benchmarks/_matrix_worker.py calls  --client C --transport stdio|http [--url U] [--ca F]
                                               [--calls N --total N --inflight N --warmup N]
    python benchmarks/_matrix_worker.py import --client C [--runs N]
    python benchmarks/_matrix_worker.py rss    --client C [--more N]
    python benchmarks/_matrix_worker.py stop   --client C [--servers N]

The process pins itself to CPU 0 and every process it starts (stdio servers, our
launcher) to CPU 1, when the machine has two CPUs or more. ``before`` is ``ours`` run
with another PYTHONPATH: nothing here puts the checkout on sys.path, so the
``albedo_actors`` imported is the first one on PYTHONPATH, else the installed one; the
JSON names the file it came from (``module``).

Only the standard library at the top level (it also runs in the FastMCP venv, and the
``rss`` and ``import`` measurements must not count this file's own imports).
"""

from __future__ import annotations

import os
import sys
import time
TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time: the rss measurement counts modules
    from typing import Any

from _plain import descendants  # noqa: E402

# json, argparse and tempfile are imported where used: the rss measurement must count the
# client's modules, not this file's (it parses its own few options, see main()).

CLIENT_CPU, SERVER_CPU = 0, 1


def pin_self() -> bool:
    try:
        if len(os.sched_getaffinity(0)) >= 2 and (os.cpu_count() or 1) >= 2:
            os.sched_setaffinity(0, {CLIENT_CPU})
            return True
    except (AttributeError, OSError):
        pass
    return False


def pin_servers(pinned: bool) -> int:
    """Move every process below this one to the server CPU; how many."""
    if not pinned:
        return 0
    count = 0
    for pid in descendants():
        try:
            os.sched_setaffinity(pid, {SERVER_CPU})
            count += 1
        except OSError:
            pass  # it just ended
    return count


def status_field(name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {name} in /proc/self/status")


def module_of(client: str) -> str:
    if client in ("ours", "before"):
        mod = sys.modules.get("albedo_actors")
        return os.path.dirname(getattr(mod, "__file__", "") or "?") if mod else "?"
    if client in ("sdk", "fastmcp"):
        try:
            from importlib.metadata import version

            return f"{client} {version('mcp' if client == 'sdk' else 'fastmcp')}"
        except Exception:
            return "?"
    return "stdlib" if client == "http.client" or client == "raw" and "requests" not in sys.modules else "requests"


def percentile(sorted_values: list[int], q: float) -> int:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


# -- calls: latency and throughput --------------------------------------------------------------


def run_calls(opts: Any) -> dict[str, Any]:
    import gc
    import statistics
    import tempfile

    import _matrix_clients as mc

    pinned = pin_self()
    out: dict[str, Any] = {"client": opts.client, "transport": opts.transport}
    with tempfile.TemporaryDirectory(prefix="albedo-matrix-") as home:
        client = mc.make(opts.client, opts.transport, home, opts.url, opts.ca)
        clock = time.perf_counter_ns
        if opts.client in mc.ASYNC_CLIENTS:
            import asyncio

            async def measure() -> tuple[list[int], float, float, float]:
                t0 = time.perf_counter()
                try:
                    await client.open()
                    connect = time.perf_counter() - t0
                    pin_servers(pinned)
                    mc.check_echo(await client.call())
                    for _ in range(opts.warmup):
                        await client.call()
                    if opts.total:
                        await client.throughput(max(4 * opts.inflight, opts.warmup), opts.inflight)
                    gc.collect()
                    lat = []
                    call = client.call
                    for _ in range(opts.calls):
                        t = clock()
                        await call()
                        lat.append(clock() - t)
                    gc.collect()
                    tp = await client.throughput(opts.total, opts.inflight) if opts.total else 0.0
                finally:
                    t1 = time.perf_counter()
                    await client.close()
                return lat, tp, connect, time.perf_counter() - t1

            latencies, throughput, connect, close = asyncio.run(measure())
        else:
            t0 = time.perf_counter()
            try:
                client.open()
                connect = time.perf_counter() - t0
                pin_servers(pinned)
                mc.check_echo(client.call())
                for _ in range(opts.warmup):
                    client.call()
                if opts.total:
                    client.throughput(max(4 * opts.inflight, opts.warmup), opts.inflight)
                gc.collect()
                latencies = []
                call = client.call
                for _ in range(opts.calls):
                    t = clock()
                    call()
                    latencies.append(clock() - t)
                gc.collect()
                throughput = client.throughput(opts.total, opts.inflight) if opts.total else 0.0
            finally:
                t1 = time.perf_counter()
                client.close()
            close = time.perf_counter() - t1
        ordered = sorted(latencies)
        out.update(
            era=client.era,
            median_us=statistics.median(ordered) / 1000,
            p99_us=percentile(ordered, 0.99) / 1000,
            calls_per_s=throughput,
            connect_ms=connect * 1000,
            close_ms=close * 1000,
            calls=opts.calls,
            total=opts.total,
            inflight=opts.inflight,
            pinned=pinned,
            module=module_of(opts.client),
        )
    return out


# -- import time ------------------------------------------------------------------------------

IMPORTS = {
    "ours": "import albedo_actors.runtime, albedo_actors.binding",
    "before": "import albedo_actors.runtime, albedo_actors.binding",
    "sdk": "import mcp; from mcp.client.session import ClientSession; from mcp.client.stdio import stdio_client; "
           "from mcp.client.streamable_http import streamable_http_client",
    "fastmcp": "import fastmcp",
    "raw": "import json, subprocess, select",  # the raw stdio client: stdlib only
    "requests": "import requests",
    "http.client": "import json, http.client, ssl",
}


def run_import(opts: Any) -> dict[str, Any]:
    """Median wall time of ``python -c STATEMENT`` minus that of ``python -c pass``,
    alternating, in a temporary directory (so that the checkout is not on sys.path)."""
    import statistics
    import subprocess
    import tempfile

    pinned = pin_self()
    statement = IMPORTS[opts.client]
    bare: list[float] = []
    full: list[float] = []
    with tempfile.TemporaryDirectory(prefix="albedo-matrix-import-") as cwd:
        for i in range(opts.runs + 1):
            for code, into in (("pass", bare), (statement, full)) if i % 2 == 0 else ((statement, full), ("pass", bare)):
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-c", code], cwd=cwd, check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                elapsed = time.perf_counter() - t0
                if i:  # the first pair warms the file cache
                    into.append(elapsed)
        where = subprocess.run(
            [sys.executable, "-c", f"{statement}; import sys; m = sys.modules.get('albedo_actors'); "
                                   "print(getattr(m, '__file__', '') or '')"],
            cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()
    b, f = statistics.median(bare), statistics.median(full)
    return {"client": opts.client, "statement": statement, "bare_ms": b * 1000, "full_ms": f * 1000,
            "net_ms": (f - b) * 1000, "runs": opts.runs, "pinned": pinned,
            "module": os.path.dirname(where) if where else module_of(opts.client)}


# -- idle RSS ---------------------------------------------------------------------------------

HEAVY = ("requests", "urllib3", "peewee", "jwt", "cryptography")


def run_rss(opts: Any) -> dict[str, Any]:
    """VmRSS of this process holding one idle connected stdio connection after one call;
    for ours/before with ``--more N``: RSS and threads added by N more idle servers."""
    import gc

    import _matrix_clients as mc

    pinned = pin_self()
    out: dict[str, Any] = {"client": opts.client}
    home = os.path.join(os.environ.get("TMPDIR") or "/tmp", f"albedo-matrix-rss-{os.getpid()}")
    os.mkdir(home, 0o700)
    try:
        if opts.client in mc.ASYNC_CLIENTS:
            import asyncio

            async def hold() -> None:
                client = mc.make(opts.client, "stdio", home)
                try:
                    await client.open()
                    mc.check_echo(await client.call())
                    gc.collect()
                    await asyncio.sleep(0.2)  # let the connection settle idle (not a synchronisation)
                    out["era"] = client.era
                    out["rss_mib"] = status_field("VmRSS") / 1024
                    out["threads"] = status_field("Threads")
                finally:
                    await client.close()

            asyncio.run(hold())
        else:
            clients = [mc.make(opts.client, "stdio", home)]
            if opts.client in ("ours", "before"):
                clients[0].config = _renamed(clients[0].config, "bench00")
            try:
                clients[0].open()
                mc.check_echo(clients[0].call())
                gc.collect()
                time.sleep(0.2)  # let the connection settle idle (not a synchronisation)
                out["era"] = clients[0].era
                out["rss_mib"] = rss1 = status_field("VmRSS") / 1024
                out["threads"] = threads1 = status_field("Threads")
                out["heavy_modules"] = [name for name in HEAVY if name in sys.modules]
                if opts.more and opts.client in ("ours", "before"):
                    for i in range(opts.more):
                        client = mc.make(opts.client, "stdio", home)
                        client.config = _renamed(client.config, f"bench{i + 1:02d}")
                        clients.append(client)
                        client.open()
                        mc.check_echo(client.call())
                    gc.collect()
                    time.sleep(0.2)
                    rss_n, threads_n = status_field("VmRSS") / 1024, status_field("Threads")
                    out.update(more=opts.more, rss_more_mib=rss_n, threads_more=threads_n,
                               rss_per_server_kib=(rss_n - rss1) * 1024 / opts.more,
                               threads_per_server=(threads_n - threads1) / opts.more)
            finally:
                for client in clients:
                    client.close()
    finally:
        import shutil

        shutil.rmtree(home, ignore_errors=True)
    out["pinned"] = pinned
    out["module"] = module_of(opts.client)
    return out


def _renamed(config: Any, name: str) -> Any:
    import dataclasses

    return dataclasses.replace(config, name=name)


# -- stop time --------------------------------------------------------------------------------


def run_stop(opts: Any) -> dict[str, Any]:
    """bench_stop.py's measurement of one client: start ``--servers`` stdio servers that
    exit on EOF, then the time from the close to every process gone."""
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(here)
    # _common.py puts the checkout first on sys.path unless it is on it already: put it
    # last, so that PYTHONPATH (the baseline) still comes first.
    if repo not in sys.path:
        sys.path.append(repo)
    pinned = pin_self()
    import bench_stop

    if opts.client in ("ours", "before"):
        import tempfile

        with tempfile.TemporaryDirectory(prefix="albedo-matrix-stop-") as home:
            seconds = bench_stop.ours(opts.servers, home)
    elif opts.client == "sdk":
        import asyncio

        seconds = asyncio.run(bench_stop.sdk(opts.servers))
    elif opts.client == "raw":
        seconds = bench_stop.floor(opts.servers)
    else:
        raise ValueError(f"no stop measurement for {opts.client!r}")
    left = bench_stop.descendants()
    if left:
        raise RuntimeError(f"processes left after the stop: {sorted(left)}")
    return {"client": opts.client, "servers": opts.servers, "stop_ms": seconds * 1000, "pinned": pinned,
            "module": module_of(opts.client)}


class _RssOptions:
    """``rss --client C [--more N]``, parsed without argparse (see run_rss)."""

    def __init__(self, argv: list[str]) -> None:
        self.client, self.more = "", 0
        it = iter(argv)
        for arg in it:
            if arg == "--client":
                self.client = next(it)
            elif arg == "--more":
                self.more = int(next(it))
            else:
                raise SystemExit(f"rss: unknown option {arg!r}")
        if not self.client:
            raise SystemExit("rss: --client is required")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["rss"]:
        opts: Any = _RssOptions(argv[1:])
        return _emit(opts, run_rss)
    import argparse

    parser = argparse.ArgumentParser(description="one measurement of the benchmark matrix")
    parser.add_argument("kind", choices=("calls", "import", "rss", "stop"))
    parser.add_argument("--client", required=True)
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--url", default="")
    parser.add_argument("--ca", default=None)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--total", type=int, default=500)
    parser.add_argument("--inflight", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--more", type=int, default=0)
    parser.add_argument("--servers", type=int, default=30)
    opts = parser.parse_args(argv)
    return _emit(opts, {"calls": run_calls, "import": run_import, "rss": run_rss, "stop": run_stop}[opts.kind])


def _emit(opts: Any, run: Any) -> int:
    """Run one measurement and print its JSON object (or one with the error: never a traceback)."""
    try:
        result = run(opts)
    except Exception as exc:
        result = {"client": opts.client, "error": f"{type(exc).__name__}: {exc}"[:500]}
    import json

    print(json.dumps(result), flush=True)
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())
