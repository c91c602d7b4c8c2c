#!/usr/bin/env python3
"""The benchmark matrix of issue 14: every client, every row, one run, one table.

Run::

    .venv/bin/python benchmarks/matrix.py [--quick] [--baseline DIR] [--only ROWS] [--json FILE]

Columns (clients): ``ours`` (this checkout: ServerHandle), ``before`` (the same code
run with ``PYTHONPATH=DIR``, only with ``--baseline DIR``), ``sdk`` (mcp 2.3.0 on
asyncio), ``fastmcp`` (``fastmcp.Client``, in its own venv ``.venv-fastmcp``, made by
``benchmarks/setup_peers`` on first use), ``raw`` (a pipe for stdio, pipelined for 64
in flight; a ``requests.Session`` for HTTP) and ``http.client`` (the stdlib floor).

Rows: stdio latency and 64 in flight (demo server), HTTP latency and 64 in flight (the
fast stdlib server, ``_fast_http_server.py``; and the official SDK server, in both eras:
``--legacy-only`` gives a legacy session with its listening GET stream), TLS latency,
import time, idle RSS, the 200-server host (``bench_scale.py``) and the stop of 30
stdio servers (``bench_stop.py``). Each client measurement runs in a fresh process
(``_matrix_worker.py``, one JSON object), client on CPU 0 and servers on CPU 1; rounds
rotate the client order; figures are medians of the rounds.

Output: the table, one line per goal of the issue (ratio, goal, PASS/MISS, and the
before figure with ``--baseline``), then one machine-readable ``RATIOS`` line. See
benchmarks/README.rst.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import _matrix_servers  # noqa: E402

WORKER = os.path.join(HERE, "_matrix_worker.py")
SCALE = os.path.join(HERE, "bench_scale.py")
SETUP_PEERS = os.path.join(HERE, "setup_peers")
FASTMCP_PYTHON = os.path.join(REPO, ".venv-fastmcp", "bin", "python")
WORKER_TIMEOUT = 300.0

ALL_CLIENTS = ("ours", "before", "sdk", "fastmcp", "raw", "http.client")
ROWS = ("stdio", "http", "http_sdk", "http_legacy", "tls", "import", "rss", "scale", "stop")
ROW_NUMBERS = {"1": "stdio", "2": "stdio", "3": "http", "4": "http", "5": "tls", "6": "import", "7": "rss",
               "8": "scale", "9": "stop"}
# Which clients each row has.
ROW_CLIENTS = {
    "stdio": ("ours", "before", "sdk", "fastmcp", "raw"),
    "http": ALL_CLIENTS,
    "http_sdk": ALL_CLIENTS,
    # The SDK server with --legacy-only: a legacy session (initialize, Mcp-Session-Id,
    # the listening GET stream open). raw and http.client speak only the modern era.
    "http_legacy": ("ours", "before", "sdk", "fastmcp"),
    "tls": ALL_CLIENTS,
    "import": ALL_CLIENTS,
    "rss": ("ours", "before", "sdk", "fastmcp", "raw"),
    "scale": ("ours", "before"),
    "stop": ("ours", "before", "sdk", "raw"),
}


class Sizes:
    def __init__(self, quick: bool) -> None:
        self.rounds = 1 if quick else 3
        self.stdio = dict(calls=200, total=640, warmup=20) if quick else dict(calls=1000, total=3000, warmup=100)
        self.http = dict(calls=100, total=320, warmup=20) if quick else dict(calls=500, total=1000, warmup=50)
        self.http_sdk = dict(calls=50, total=192, warmup=10) if quick else dict(calls=300, total=640, warmup=30)
        self.http_legacy = self.http_sdk
        self.tls = dict(calls=100, total=0, warmup=20) if quick else dict(calls=500, total=0, warmup=50)
        self.import_runs = 2 if quick else 5
        self.rss_more = 5 if quick else 20
        self.scale_servers = 50 if quick else 200
        self.scale_rounds = 1
        self.stop_servers = 30


def progress(what: str) -> None:
    print(f"[matrix] {what}", file=sys.stderr, flush=True)


# -- running workers --------------------------------------------------------------------------


class Runner:
    def __init__(self, opts: argparse.Namespace, cwd: str) -> None:
        self.opts = opts
        self.cwd = cwd
        self.fastmcp_problem: str | None = None

    def python(self, client: str) -> str:
        return FASTMCP_PYTHON if client == "fastmcp" else sys.executable

    def env(self, client: str) -> dict[str, str]:
        """The worker's environment. Bytecode caches on, in a prefix of this run's own: an
        installed package has its .pyc files, and PYTHONDONTWRITEBYTECODE (set on some
        machines) would make every fresh process compile the checkouts from source, which
        the import row would count; the prefix keeps both checkouts free of __pycache__."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
        env["PYTHONPYCACHEPREFIX"] = os.path.join(self.cwd, "pycache")
        if client == "before":
            env["PYTHONPATH"] = self.opts.baseline
        return env

    def prime(self, clients: list[str]) -> None:
        """Fill the bytecode cache once for each client's imports, so that no round pays for it."""
        import _matrix_worker

        for client in clients:
            if client == "fastmcp" and self.ensure_fastmcp():
                continue
            statement = _matrix_worker.IMPORTS.get(client)
            if statement:
                subprocess.run([self.python(client), "-c", statement], cwd=self.cwd, env=self.env(client),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)

    def ensure_fastmcp(self) -> str | None:
        """None when FastMCP's venv is there (made on first use), else why not."""
        if os.path.exists(FASTMCP_PYTHON) or self.fastmcp_problem is not None:
            return self.fastmcp_problem
        if self.opts.no_setup:
            self.fastmcp_problem = "no .venv-fastmcp: run benchmarks/setup_peers"
            return self.fastmcp_problem
        progress("making .venv-fastmcp (benchmarks/setup_peers), once ...")
        try:
            done = subprocess.run(["bash", SETUP_PEERS], cwd=REPO, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            done = None
        if done is None or done.returncode != 0 or not os.path.exists(FASTMCP_PYTHON):
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] if done is not None else ["timed out"]
            self.fastmcp_problem = f"setup_peers failed: {' '.join(tail)[:80]}"
        return self.fastmcp_problem

    def run(self, client: str, args: list[str], script: str | None = WORKER,
            timeout: float = WORKER_TIMEOUT) -> dict[str, Any]:
        """Run ``script`` (a worker) with ``args``, or the interpreter with ``args`` alone when
        ``script`` is None; the last JSON object it printed, or {"error": ...}."""
        if client == "fastmcp":
            problem = self.ensure_fastmcp()
            if problem:
                return {"client": client, "na": problem}
        command = [self.python(client), *([script] if script else []), *args]
        try:
            done = subprocess.run(command, cwd=self.cwd, env=self.env(client), capture_output=True, text=True,
                                  timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return {"client": client, "error": f"timed out after {timeout:g} s"}
        result = last_json_object(done.stdout)
        if result is not None:
            result.setdefault("client", client)
            return result
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"client": client, "error": f"exit {done.returncode}: {last[:200]}"}


def last_json_object(text: str) -> dict[str, Any] | None:
    """The last JSON object in ``text``: on its own line, or spread over the last lines."""
    lines = text.strip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].lstrip().startswith("{"):
            for candidate in (lines[i], "\n".join(lines[i:])):
                try:
                    value = json.loads(candidate)
                except ValueError:
                    continue
                if isinstance(value, dict):
                    return value
    return None


SERVER_SCRIPTS = (os.path.join(REPO, "albedo_actors", "demo", "server.py"), _matrix_servers.FAST_SERVER,
                  _matrix_servers.SDK_SERVER)


def server_processes() -> set[int]:
    """Pids of live (not zombie) processes running one of the matrix's servers."""
    found = set()
    needles = [path.encode() for path in SERVER_SCRIPTS]
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != b"Z" and any(needle in cmdline for needle in needles):
            found.add(int(entry))
    return found


def leftovers(before: set[int], wait: float = 5.0) -> set[int]:
    """Server processes that this run started and that are still there after ``wait`` s."""
    deadline = time.monotonic() + wait
    left = server_processes() - before
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = server_processes() - before
    return left


def rotated(clients: list[str], r: int) -> list[str]:
    k = r % len(clients) if clients else 0
    return clients[k:] + clients[:k]


# -- the rows ---------------------------------------------------------------------------------


def row_calls(runner: Runner, clients: list[str], rounds: int, transport: str, sizes: dict[str, int],
              url: str, ca: str | None, row: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {c: [] for c in clients}
    for r in range(rounds):
        for client in rotated(clients, r):
            args = ["calls", "--client", client, "--transport", transport,
                    "--calls", str(sizes["calls"]), "--total", str(sizes["total"]),
                    "--warmup", str(sizes["warmup"]), "--inflight", "64"]
            if url:
                args += ["--url", url]
            if ca:
                args += ["--ca", ca]
            result = runner.run(client, args)
            out[client].append(result)
            progress(f"  {row} {client} round {r + 1}: " + brief(result, "median_us", "calls_per_s"))
    return out


def brief(result: dict[str, Any], *keys: str) -> str:
    if "error" in result or "na" in result:
        return result.get("error") or f"n/a ({result['na']})"
    return " ".join(f"{k}={result[k]:.1f}" for k in keys if isinstance(result.get(k), (int, float)))


def row_import(runner: Runner, clients: list[str], rounds: int, runs: int) -> dict[str, list[dict[str, Any]]]:
    names = [c for c in clients if c != "raw"] + (["raw", "requests"] if "raw" in clients else [])
    out: dict[str, list[dict[str, Any]]] = {c: [] for c in names}
    for r in range(rounds):
        for name in rotated(names, r):
            client = "raw" if name == "requests" else name
            result = runner.run(client, ["import", "--client", name, "--runs", str(runs)])
            out[name].append(result)
            progress(f"  import {name} round {r + 1}: " + brief(result, "net_ms"))
    return out


def row_rss(runner: Runner, clients: list[str], rounds: int, more: int) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {c: [] for c in clients}
    for r in range(rounds):
        for client in rotated(clients, r):
            args = ["rss", "--client", client]
            if client in ("ours", "before"):
                args += ["--more", str(more)]
            result = runner.run(client, args)
            out[client].append(result)
            progress(f"  rss {client} round {r + 1}: " + brief(result, "rss_mib", "rss_per_server_kib"))
    return out


SCALE_KEYS = ("ready_ms", "call_us_1", "call_us_n", "stop_ms", "stop_connected_ms", "rss_mib", "threads",
              "rss_per_server_kib", "threads_per_server")
# bench_scale.py imports _common, which puts the checkout first on sys.path unless it is on
# it already: put it (and benchmarks/) last, so that PYTHONPATH (the baseline) comes first.
SCALE_LAUNCH = (
    "import runpy, sys; sys.path.append({here!r}); sys.path.append({repo!r}); "
    "sys.argv = [{script!r}, *sys.argv[1:]]; runpy.run_path({script!r}, run_name='__main__')"
)


def row_scale(runner: Runner, clients: list[str], rounds: int, servers: int) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {c: [] for c in clients}
    if not os.path.exists(SCALE):
        for client in clients:
            out[client].append({"client": client, "na": "bench_scale.py missing"})
        return out
    code = SCALE_LAUNCH.format(here=HERE, repo=REPO, script=SCALE)
    for r in range(rounds):
        for client in rotated(clients, r):
            result = runner.run(client, ["-c", code, "--servers", str(servers), "--json"], script=None, timeout=600)
            out[client].append(result)
            progress(f"  scale {client} round {r + 1}: " + brief(result, "ready_ms", "stop_ms"))
    return out


def row_stop(runner: Runner, clients: list[str], rounds: int, servers: int) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {c: [] for c in clients}
    for r in range(rounds):
        for client in rotated(clients, r):
            result = runner.run(client, ["stop", "--client", client, "--servers", str(servers)])
            out[client].append(result)
            progress(f"  stop {client} round {r + 1}: " + brief(result, "stop_ms"))
    return out


# -- medians ----------------------------------------------------------------------------------


def med(results: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in results if isinstance(r.get(key), (int, float))]
    return statistics.median(values) if values else None


def why_not(results: list[dict[str, Any]]) -> str | None:
    """None when some round has figures, else the reason shown in the cell."""
    if any("error" not in r and "na" not in r for r in results):
        return None
    for r in results:
        if "na" in r:
            return f"n/a ({r['na']})"
    return f"error ({results[0].get('error', '?')[:60]})" if results else "n/a (not run)"


def errors_of(results: dict[str, dict[str, list[dict[str, Any]]]]) -> list[str]:
    found = []
    for row, per_client in results.items():
        for client, runs in per_client.items():
            for r in runs:
                if "error" in r:
                    found.append(f"{row}/{client}: {r['error']}")
    return found


# -- the report -------------------------------------------------------------------------------


def fmt(value: float | None, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def cell(results: dict[str, list[dict[str, Any]]], client: str, key: str, spec: str = ".0f",
         second: str | None = None) -> str:
    runs = results.get(client)
    if runs is None:
        return ""
    reason = why_not(runs)
    if reason:
        return reason
    text = fmt(med(runs, key), spec)
    if second:
        text += "/" + fmt(med(runs, second), spec)
    return text


def era_cell(results: dict[str, list[dict[str, Any]]], client: str) -> str:
    runs = results.get(client)
    if not runs or why_not(runs):
        return ""
    eras = sorted({str(r.get("era", "?")) for r in runs if "era" in r})
    return ",".join(eras)


def print_table(results: dict[str, dict[str, list[dict[str, Any]]]], clients: list[str], sizes: Sizes) -> None:
    lines: list[tuple[str, list[str]]] = []

    def add(label: str, row: str, fn: Any) -> None:
        if row in results:
            lines.append((label, [fn(results[row], c) for c in clients]))

    add("1 stdio latency us (median/p99)", "stdio", lambda r, c: cell(r, c, "median_us", ".0f", "p99_us"))
    add("2 stdio 64 in flight calls/s", "stdio", lambda r, c: cell(r, c, "calls_per_s"))
    add("  stdio era", "stdio", era_cell)
    add("3 HTTP latency us (fast server)", "http", lambda r, c: cell(r, c, "median_us", ".0f", "p99_us"))
    add("4 HTTP 64 in flight calls/s (fast)", "http", lambda r, c: cell(r, c, "calls_per_s"))
    add("  HTTP era", "http", era_cell)
    add("3b HTTP latency us (SDK server)", "http_sdk", lambda r, c: cell(r, c, "median_us", ".0f", "p99_us"))
    add("4b HTTP 64 in flight (SDK server)", "http_sdk", lambda r, c: cell(r, c, "calls_per_s"))
    add("  HTTP era (SDK server)", "http_sdk", era_cell)
    add("3c HTTP latency us (SDK, legacy era)", "http_legacy", lambda r, c: cell(r, c, "median_us", ".0f", "p99_us"))
    add("4c HTTP 64 in flight (SDK, legacy)", "http_legacy", lambda r, c: cell(r, c, "calls_per_s"))
    add("  HTTP era (SDK server, legacy only)", "http_legacy", era_cell)
    add("5 TLS latency us (fast server)", "tls", lambda r, c: cell(r, c, "median_us", ".0f", "p99_us"))
    add("  TLS era", "tls", era_cell)

    def import_cell(r: dict[str, list[dict[str, Any]]], c: str) -> str:
        if c == "raw" and "raw" in r:
            return f"{cell(r, 'raw', 'net_ms')} / {cell(r, 'requests', 'net_ms')}"
        return cell(r, c, "net_ms")

    add("6 import net ms (raw: stdio/requests)", "import", import_cell)
    add("7 idle RSS MiB, one stdio conn", "rss", lambda r, c: cell(r, c, "rss_mib", ".1f"))
    add("  threads, one stdio conn", "rss", lambda r, c: cell(r, c, "threads"))
    add(f"7b per further idle server KiB ({sizes.rss_more})", "rss",
        lambda r, c: cell(r, c, "rss_per_server_kib") if c in ("ours", "before") else "")
    add("   threads per further server", "rss",
        lambda r, c: cell(r, c, "threads_per_server", ".2f") if c in ("ours", "before") else "")
    label = f"{sizes.scale_servers}-server host"
    scale = results.get("scale", {})
    if scale and all(why_not(runs) for runs in scale.values()):
        add(f"8 {label}", "scale", lambda r, c: cell(r, c, "ready_ms") if c in r else "")
    for key, spec in (("ready_ms", ".1f"), ("call_us_1", ".0f"), ("call_us_n", ".0f"), ("stop_ms", ".0f"),
                      ("stop_connected_ms", ".0f"), ("rss_mib", ".1f"), ("threads", ".0f"),
                      ("rss_per_server_kib", ".0f"), ("threads_per_server", ".2f")):
        if scale and not all(why_not(runs) for runs in scale.values()):
            add(f"8 {label}: {key}", "scale", lambda r, c, key=key, spec=spec: cell(r, c, key, spec) if c in r else "")
    add(f"9 stop {sizes.stop_servers} stdio servers ms (raw: floor)", "stop", lambda r, c: cell(r, c, "stop_ms"))

    width = max(len(label) for label, _ in lines) if lines else 10
    widths = [max(len(c), *(len(vals[i]) for _, vals in lines)) if lines else len(c) for i, c in enumerate(clients)]
    widths = [min(w, 40) for w in widths]
    header = f"{'row':<{width}} | " + " | ".join(f"{c:>{w}}" for c, w in zip(clients, widths))
    print(header)
    print("-" * len(header))
    for label, vals in lines:
        print(f"{label:<{width}} | " + " | ".join(f"{v[:40]:>{w}}" for v, w in zip(vals, widths)))
    if "rss" in results:
        heavy = []
        for c in ("ours", "before"):
            runs = results["rss"].get(c)
            if runs and not why_not(runs):
                mods = next((r["heavy_modules"] for r in runs if "heavy_modules" in r), None)
                heavy.append(f"{c}: {', '.join(mods) if mods else 'none'}")
        if heavy:
            print(f"stdio-only host, after one call, has loaded (of requests, urllib3, peewee, jwt, cryptography): "
                  f"{'; '.join(heavy)}")


def print_spread(results: dict[str, dict[str, list[dict[str, Any]]]], clients: list[str]) -> None:
    """How far the rounds were apart (min..max of the per-round figures): the noise of the run."""
    print()
    print("spread over rounds (min..max): latency median us | calls/s | import ms")
    for row, key in (("stdio", "median_us"), ("stdio", "calls_per_s"), ("http", "median_us"), ("http", "calls_per_s"),
                     ("http_sdk", "median_us"), ("http_sdk", "calls_per_s"), ("http_legacy", "median_us"),
                     ("http_legacy", "calls_per_s"), ("tls", "median_us"), ("import", "net_ms")):
        parts = []
        for client in clients + ["requests"]:
            values = [r[key] for r in results.get(row, {}).get(client, []) if isinstance(r.get(key), (int, float))]
            if len(values) > 1 and any(values):
                parts.append(f"{client} {min(values):.0f}..{max(values):.0f}")
        if parts:
            print(f"  {row:<8} {key:<12} " + "  ".join(parts))


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def paired(results: dict[str, dict[str, list[dict[str, Any]]]], row: str, a: str, b: str, key: str) -> float | None:
    """The ratio a/b of ``key`` in ``row``: the median over the rounds of each round's own
    ratio (the two clients ran back to back in it, so drift in the machine's load hits
    both alike), or None when no round has both."""
    runs_a, runs_b = results.get(row, {}).get(a) or [], results.get(row, {}).get(b) or []
    ratios = [ra[key] / rb[key] for ra, rb in zip(runs_a, runs_b)
              if isinstance(ra.get(key), (int, float)) and isinstance(rb.get(key), (int, float)) and rb[key]]
    return statistics.median(ratios) if ratios else None


def goals(results: dict[str, dict[str, list[dict[str, Any]]]], who: str) -> list[tuple[str, str, float | None, str, bool | None, str]]:
    """(key, what, value, goal text, passed, unit) for client ``who`` (ours or before)."""
    def m(row: str, client: str, key: str) -> float | None:
        runs = results.get(row, {}).get(client)
        return med(runs, key) if runs and not why_not(runs) else None

    out: list[tuple[str, str, float | None, str, bool | None, str]] = []

    def check(key: str, what: str, value: float | None, op: str, limit: float, unit: str = "x") -> None:
        passed = None if value is None else (value <= limit if op == "<=" else value >= limit if op == ">=" else value < limit)
        out.append((key, what, value, f"{op}{limit:g}{unit if unit != 'x' else 'x'}", passed, unit))

    if "http" in results:
        check("http_lat_{w}/sdk", "HTTP latency", paired(results, "http", who, "sdk", "median_us"), "<=", 0.5)
        check("http_lat_{w}/httpclient", "HTTP latency",
              paired(results, "http", who, "http.client", "median_us"), "<=", 1.5)
    if "tls" in results:
        check("tls_lat_{w}/raw", "TLS latency", paired(results, "tls", who, "raw", "median_us"), "<=", 1.3)
    if "http" in results:
        check("http_tp_{w}/sdk", "HTTP 64 in flight", paired(results, "http", who, "sdk", "calls_per_s"),
              ">=", 3)
    if "stdio" in results:
        check("stdio_tp_{w}/raw", "stdio 64 in flight (raw pipelined)",
              paired(results, "stdio", who, "raw", "calls_per_s"), ">=", 0.8)
        check("stdio_lat_{w}/raw", "stdio latency", paired(results, "stdio", who, "raw", "median_us"),
              "<=", 1.1)
    if "import" in results:
        check("import_{w}_ms", "import net", m("import", who, "net_ms"), "<=", 100, " ms")
    if "rss" in results:
        runs = results["rss"].get(who) or []
        mods = next((r["heavy_modules"] for r in runs if "heavy_modules" in r), None)
        out.append(("stdio_heavy_{w}", "stdio-only host loads none of requests/urllib3/peewee/jwt/cryptography",
                    None if mods is None else float(len(mods)), "=0 modules", None if mods is None else not mods, " modules"))
        check("rss_{w}_mib", "idle RSS, one stdio connection", m("rss", who, "rss_mib"), "<=", 20, " MiB")
        check("rss_per_server_{w}_kib", "RSS per further idle server", m("rss", who, "rss_per_server_kib"), "<=", 512, " KiB")
        check("threads_per_server_{w}", "threads per further idle server", m("rss", who, "threads_per_server"), "<=", 2, "")
    if "scale" in results:
        check("scale_ready_{w}_ms", "scale: ready from saved catalogues", m("scale", who, "ready_ms"), "<", 50, " ms")
        check("scale_call_{w}_n/1", "scale: call with N servers / with 1",
              ratio(m("scale", who, "call_us_n"), m("scale", who, "call_us_1")), "<=", 1.2)
        check("scale_stop_{w}_ms", "scale: stop", m("scale", who, "stop_ms"), "<", 1000, " ms")
        check("scale_stop_connected_{w}_ms", "scale: stop, all connected", m("scale", who, "stop_connected_ms"), "<", 1000, " ms")
    return out


def informational(results: dict[str, dict[str, list[dict[str, Any]]]], who: str) -> dict[str, float | None]:
    def m(row: str, client: str, key: str) -> float | None:
        runs = results.get(row, {}).get(client)
        return med(runs, key) if runs and not why_not(runs) else None

    info: dict[str, float | None] = {}
    for row, key, unit in (("stdio", "median_us", "lat"), ("stdio", "calls_per_s", "tp"), ("http", "median_us", "lat"),
                           ("http", "calls_per_s", "tp"), ("http_sdk", "median_us", "lat"),
                           ("http_sdk", "calls_per_s", "tp"), ("http_legacy", "median_us", "lat"),
                           ("http_legacy", "calls_per_s", "tp"), ("tls", "median_us", "lat")):
        if row not in results:
            continue
        for peer in (("before",) if who == "ours" else ()) + ("sdk", "fastmcp", "raw", "http.client"):
            if peer in results[row]:
                info[f"{row}_{unit}_{who}/{peer.replace('.', '')}"] = paired(results, row, who, peer, key)
    if "stop" in results:
        if who == "ours" and "before" in results["stop"]:
            info["stop30_ours/before"] = paired(results, "stop", "ours", "before", "stop_ms")
        info[f"stop30_{who}/sdk"] = paired(results, "stop", who, "sdk", "stop_ms")
        info[f"stop30_{who}_ms"] = m("stop", who, "stop_ms")
    return info


def verdict(passed: bool | None) -> str:
    return "n/a" if passed is None else "PASS" if passed else "MISS"


def show(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:.1f}{unit}" if unit.strip() in ("ms", "MiB") else f"{value:.2f}{unit}" if unit == "" else f"{value:.0f}{unit}"


def print_goals(results: dict[str, dict[str, list[dict[str, Any]]]], baseline: bool) -> dict[str, Any]:
    ours = goals(results, "ours")
    before = goals(results, "before") if baseline else []
    ratios: dict[str, Any] = {}
    print()
    print("goals of issue 14 (ours; before in brackets with --baseline):")
    for i, (key, what, value, goal, passed, unit) in enumerate(ours):
        name = key.format(w="ours")
        line = f"{what}: {name}={show(value, unit)} (goal {goal}) {verdict(passed)}"
        ratios[name] = value
        if before:
            bkey, _, bvalue, _, bpassed, _ = before[i]
            bname = bkey.format(w="before")
            line += f"   [{bname}={show(bvalue, unit)} {verdict(bpassed)}]"
            ratios[bname] = bvalue
        print("  " + line)
    for who in (("ours", "before") if baseline else ("ours",)):
        ratios.update({k: v for k, v in informational(results, who).items() if k not in ratios})
    return ratios


def ratios_line(ratios: dict[str, Any]) -> str:
    parts = []
    for key, value in ratios.items():
        if value is None:
            parts.append(f"{key}=n/a")
        elif "/" in key:
            parts.append(f"{key}={value:.2f}x")
        else:
            parts.append(f"{key}={value:.2f}")
    return "RATIOS " + " ".join(parts)


# -- main -------------------------------------------------------------------------------------


def parse_rows(text: str | None, parser: argparse.ArgumentParser) -> list[str]:
    if not text:
        return list(ROWS)
    wanted = []
    for part in text.split(","):
        part = part.strip()
        row = ROW_NUMBERS.get(part, part)
        if row not in ROWS:
            parser.error(f"--only: unknown row {part!r} (rows: {', '.join(ROWS)} or 1-9)")
        if row not in wanted:
            wanted.append(row)
    return [r for r in ROWS if r in wanted]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one round (under ~2 minutes)")
    parser.add_argument("--baseline", metavar="DIR", default=None,
                        help="also run the 'before' column: the same client code with PYTHONPATH=DIR")
    parser.add_argument("--only", metavar="ROWS", default=None,
                        help=f"comma-separated rows: {', '.join(ROWS)} (or the issue's numbers 1-9)")
    parser.add_argument("--clients", default=None, help=f"comma-separated subset of {', '.join(ALL_CLIENTS)}")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per row (default 3, --quick 1)")
    parser.add_argument("--json", metavar="FILE", default=None, help="write every figure to FILE")
    parser.add_argument("--no-setup", action="store_true", help="do not make .venv-fastmcp when it is missing")
    parser.add_argument("--from-json", metavar="FILE", default=None,
                        help="measure nothing: print the report of a run saved with --json")
    opts = parser.parse_args(argv)
    rows = parse_rows(opts.only, parser)
    sizes = Sizes(opts.quick)
    if opts.rounds is not None:
        if opts.rounds < 1:
            parser.error("--rounds must be positive")
        sizes.rounds = opts.rounds
    if opts.baseline is not None:
        opts.baseline = os.path.abspath(opts.baseline)
        if not os.path.isfile(os.path.join(opts.baseline, "albedo_actors", "__init__.py")):
            parser.error(f"--baseline {opts.baseline}: no albedo_actors package there")
    clients = [c.strip() for c in (opts.clients or ",".join(ALL_CLIENTS)).split(",") if c.strip()]
    if set(clients) - set(ALL_CLIENTS):
        parser.error(f"--clients takes a subset of {', '.join(ALL_CLIENTS)}")
    if opts.baseline is None:
        clients = [c for c in clients if c != "before"]
    elif "before" not in clients:
        clients.insert(1, "before")

    servers_before = server_processes()
    started = time.perf_counter()
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    if opts.from_json:
        with open(opts.from_json) as f:
            saved = json.load(f)
        results, clients, opts.baseline = saved["results"], saved["clients"], saved["baseline"]
        opts.quick = saved["quick"]
        sizes = Sizes(opts.quick)
        sizes.rounds = saved["rounds"]
        rows = []
    with tempfile.TemporaryDirectory(prefix="albedo-matrix-") as tmp:
        runner = Runner(opts, tmp)
        if rows:
            progress("filling the bytecode cache ...")
            runner.prime([c for c in clients if c != "raw"] + (["requests"] if "raw" in clients else []))
        for row in rows:
            row_clients = [c for c in clients if c in ROW_CLIENTS[row]]
            if not row_clients:
                continue
            progress(f"row {row} ({', '.join(row_clients)}) ...")
            if row == "stdio":
                results[row] = row_calls(runner, row_clients, sizes.rounds, "stdio", sizes.stdio, "", None, row)
            elif row in ("http", "http_sdk", "http_legacy", "tls"):
                ca = key = None
                if row == "tls":
                    ca, key = _matrix_servers.make_certificate(tmp)
                kind = {"http_sdk": "sdk", "http_legacy": "sdk_legacy"}.get(row, "fast")
                try:
                    with _matrix_servers.HttpServerProcess(kind, ca, key) as server:
                        row_sizes = {"http": sizes.http, "http_sdk": sizes.http_sdk, "http_legacy": sizes.http_legacy,
                                     "tls": sizes.tls}[row]
                        results[row] = row_calls(runner, row_clients, sizes.rounds, "http", row_sizes, server.url, ca, row)
                except RuntimeError as exc:
                    results[row] = {c: [{"client": c, "error": str(exc)}] for c in row_clients}
            elif row == "import":
                results[row] = row_import(runner, row_clients, sizes.rounds, sizes.import_runs)
            elif row == "rss":
                results[row] = row_rss(runner, row_clients, sizes.rounds, sizes.rss_more)
            elif row == "scale":
                results[row] = row_scale(runner, row_clients, sizes.scale_rounds, sizes.scale_servers)
            elif row == "stop":
                results[row] = row_stop(runner, row_clients, sizes.rounds, sizes.stop_servers)
    elapsed = time.perf_counter() - started

    load = tuple(saved["load"]) if opts.from_json else os.getloadavg()
    print()
    print(f"benchmark matrix, issue 14: tools/call echo {{\"text\":\"x\"}}; python {platform.python_version()}, "
          f"{os.cpu_count()} cpus (client on cpu 0, servers on cpu 1); rounds={sizes.rounds}"
          f"{' (quick)' if opts.quick else ''}; medians over rounds; load {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}")
    if opts.baseline:
        print(f"before = ours with PYTHONPATH={opts.baseline}")
    print()
    print_table(results, clients, sizes)
    print("latency cells: median/p99 us; raw: a pipe (64 in flight pipelined) or a requests.Session; "
          "http.client: the stdlib floor; 9 raw: no client (Popen, every stdin closed)")
    if sizes.rounds > 1:
        print_spread(results, clients)
    ratios = print_goals(results, opts.baseline is not None)
    for problem in errors_of(results):
        print(f"error: {problem}")
    left = leftovers(servers_before)
    print(f"LEFTOVER server processes: {sorted(left)}" if left else "leftover server processes: none")
    print(f"(run took {elapsed:.0f} s)")
    print(ratios_line(ratios))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"rows": rows, "clients": clients, "quick": opts.quick, "rounds": sizes.rounds,
                       "baseline": opts.baseline, "load": load, "elapsed_s": elapsed, "results": results,
                       "ratios": ratios}, f, indent=1)
    return 1 if errors_of(results) or left else 0


if __name__ == "__main__":
    sys.exit(main())
