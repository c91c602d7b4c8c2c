"""benchmarks/_tools_server.py serves what bench_discovery.py says it measures.

Its "just under the budget" listing must be one our discovery reads whole (were it
counted short, the benchmark's at-budget case would measure a refusal), and its
realistic tools must be valid 2025-11-25 Tool objects. No timing here: figures are
the benchmark's business.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from albedo_actors import connection
from albedo_actors.config import ServerConfig
from albedo_actors.connection.stdio_link import launch_spec

from helpers import schema_validate_each

TOOLS_SERVER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "_tools_server.py")


def _stats(*args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-I", TOOLS_SERVER, *args, "--stats"], stdin=subprocess.DEVNULL, capture_output=True, timeout=60, check=True
    )
    return json.loads(done.stderr.decode().strip().splitlines()[-1])


def _wire_lines(pages: int, *args: str) -> list[bytes]:
    """Every tools/list answer line as sent, newline included, read through a plain pipe."""
    requests = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}]
    for n in range(pages):
        params = {"cursor": f"p{n}"} if n else {}
        requests.append({"jsonrpc": "2.0", "id": n + 2, "method": "tools/list", "params": params})
    data = b"".join(json.dumps(r).encode() + b"\n" for r in requests)
    done = subprocess.run([sys.executable, "-I", TOOLS_SERVER, *args], input=data, capture_output=True, timeout=60, check=True)
    lines = done.stdout.splitlines(keepends=True)
    assert len(lines) == pages + 1 and all(b'"error"' not in line[:60] for line in lines)
    return lines[1:]


def _discover(tmp_path, *args: str):
    config = ServerConfig(name="tools", type="stdio", command=sys.executable, args=("-I", TOOLS_SERVER, *args))
    conn = connection.open_stdio("tools", launch_spec(config, str(tmp_path)), lambda method, params: None, lambda reason: None, 30)
    try:
        return conn, connection.discover(conn, 30)
    finally:
        conn.close("test done")
        conn.wait_closed()


def test_fill_just_under_the_budget_is_read_whole(tmp_path):
    args = ("--fill", str(connection.DISCOVERY_BUDGET), "--page-size", "500")
    stats = _stats(*args)
    # Counted here from the bytes themselves, not from the server's own arithmetic.
    wire = sum(len(line) for line in _wire_lines(stats["pages"], *args))
    assert connection.DISCOVERY_BUDGET - 16 * 1024 < wire <= stats["wire_bytes"] < connection.DISCOVERY_BUDGET
    conn, catalogue = _discover(tmp_path, *args)
    assert conn.era == "legacy" and conn.version == "2025-11-25"
    assert len(catalogue.tools) == stats["entries"] > 6000
    assert catalogue.warnings == ()


def test_the_thousand_tools_are_valid_and_paginated(tmp_path):
    stats = _stats("--tools", "1000")
    assert (stats["pages"], stats["entries"]) == (10, 1000)
    _conn, catalogue = _discover(tmp_path, "--tools", "1000")
    tools = list(catalogue.tools)
    assert len({tool["name"] for tool in tools}) == 1000
    schema_validate_each("2025-11-25", "Tool", tools[:160])  # every variant: nouns x verbs, i % 3, i % 4
    assert all(190 <= len(tool["description"]) <= 220 for tool in tools)
    assert all(3 <= len(tool["inputSchema"]["properties"]) <= 5 for tool in tools)
