"""benchmarks/matrix.py's parts do what the matrix says they measure (no timing here).

The worker of one row and one client prints one JSON object with the figures the
matrix reads, all positive; the fast stdlib HTTP server (benchmarks/_fast_http_server.py)
answers a real call through our client over HTTP and over HTTPS (trusted through the
server config's caFile, as the matrix's TLS row does), and serves the legacy era's
session as well; a client that does not trust the run-time certificate is refused.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys

import pytest

from albedo_actors.actors.client import ServerHandle
from albedo_actors.config import ServerConfig

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
WORKER = os.path.join(BENCH, "_matrix_worker.py")
sys.path.append(BENCH)

import _fast_http_server  # noqa: E402
import _matrix_clients  # noqa: E402
import _matrix_servers  # noqa: E402
import matrix  # noqa: E402

ECHO = {"text": "x"}


def _worker(tmp_path, *args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, WORKER, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    result = matrix.last_json_object(done.stdout)
    assert result is not None, (done.returncode, done.stdout[-500:], done.stderr[-500:])
    assert "error" not in result, result
    assert done.returncode == 0, done.stderr[-500:]
    return result


def test_the_calls_worker_prints_the_figures_the_matrix_reads(tmp_path):
    result = _worker(tmp_path, "calls", "--client", "ours", "--transport", "stdio",
                     "--calls", "20", "--total", "64", "--inflight", "8", "--warmup", "2")
    assert result["client"] == "ours"
    assert result["era"] == "modern 2026-07-28"
    for key in ("median_us", "p99_us", "calls_per_s", "connect_ms", "close_ms"):
        assert isinstance(result[key], (int, float)) and result[key] > 0, (key, result)
    assert result["p99_us"] >= result["median_us"]
    # The albedo_actors measured is this checkout's (before's comes from PYTHONPATH alone).
    assert result["module"] == os.path.join(os.path.dirname(BENCH), "albedo_actors")


def test_the_rss_worker_counts_the_client_and_its_further_servers(tmp_path):
    result = _worker(tmp_path, "rss", "--client", "raw")
    assert result["rss_mib"] > 0 and result["threads"] >= 1
    assert result["heavy_modules"] == []  # the raw pipe client is stdlib only


def _call_through_ours(tmp_path, url: str, ca: str | None = None) -> dict:
    handle = ServerHandle.start(ServerConfig(name="fast", type="http", url=url, ca_file=ca), str(tmp_path))
    try:
        handle.connect()
        assert handle.status()["era"] == "modern"
        return handle.call_tool("echo", ECHO)
    finally:
        handle.stop()


def test_the_fast_server_answers_ours_over_http(tmp_path):
    with _fast_http_server.FastServer() as server:
        result = _call_through_ours(tmp_path, server.url)
    assert result["content"] == [{"type": "text", "text": "x"}]


def test_the_fast_server_answers_ours_over_tls_with_the_run_time_certificate(tmp_path):
    cert, key = _matrix_servers.make_certificate(str(tmp_path))
    with _fast_http_server.FastServer(cert=cert, key=key) as server:
        assert server.url.startswith("https://127.0.0.1:")
        result = _call_through_ours(tmp_path, server.url, ca=cert)
        assert result["content"] == [{"type": "text", "text": "x"}]
        # The raw clients verify against it too, and refuse a server they do not trust.
        for kind in ("requests", "http.client"):
            trusting = _matrix_clients.RawHttp(server.url, cert, kind)
            try:
                trusting.open()
                _matrix_clients.check_echo(trusting.call())
            finally:
                trusting.close()
            distrusting = _matrix_clients.RawHttp(server.url, None, kind)
            try:
                with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
                    distrusting.open()
            finally:
                distrusting.close()


def test_before_is_the_package_on_pythonpath_not_the_checkout(tmp_path):
    """The 'before' column is ours run with PYTHONPATH=DIR: the worker and the processes it
    times must import DIR's package, not this checkout's (nor the installed one)."""
    baseline = tmp_path / "baseline"
    shutil.copytree(os.path.join(os.path.dirname(BENCH), "albedo_actors"), baseline / "albedo_actors",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(baseline)}
    done = subprocess.run([sys.executable, WORKER, "import", "--client", "before", "--runs", "1"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    result = matrix.last_json_object(done.stdout)
    assert result is not None and "error" not in result, (done.stdout[-500:], done.stderr[-500:])
    assert result["module"] == str(baseline / "albedo_actors")
    assert result["bare_ms"] > 0 and result["full_ms"] > 0


def test_the_fast_server_serves_a_legacy_session(tmp_path):
    with _fast_http_server.FastServer() as server:
        port = int(server.url.rsplit(":", 1)[1].split("/")[0])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}

        def post(message: dict, extra: dict | None = None) -> http.client.HTTPResponse:
            conn.request("POST", "/mcp", body=json.dumps(message).encode(), headers={**headers, **(extra or {})})
            return conn.getresponse()

        try:
            answer = post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
            assert answer.status == 200
            sid = answer.getheader("Mcp-Session-Id")
            assert json.loads(answer.read())["result"]["protocolVersion"] == "2025-11-25"
            assert sid
            session = {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
            answer = post({"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
            assert answer.status == 202
            answer.read()
            answer = post({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                           "params": {"name": "echo", "arguments": ECHO}}, session)
            assert answer.status == 200
            assert json.loads(answer.read())["result"]["content"][0]["text"] == "x"
            # Without the session, a legacy request is refused.
            answer = post({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, {"MCP-Protocol-Version": "2025-11-25"})
            assert answer.status == 400
            answer.read()
            conn.request("DELETE", "/mcp", headers={"Mcp-Session-Id": sid})
            answer = conn.getresponse()
            assert answer.status == 200
            answer.read()
            answer = post({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}, session)
            assert answer.status == 404  # ended
            answer.read()
        finally:
            conn.close()
