"""ServerHandle over streamable HTTP against real peers on 127.0.0.1: the official SDK's
server in both eras (with and without an event store) and ``server-everything``.

Each peer process is started once per module; the leak check is per test, and a
module's processes are started before its first test takes its snapshot.

tests/servers/sdk_server.py records every HTTP request it answers (``--record``), so
the tests can check what went over the wire: the session id, the DELETE, the GET
that resumed a stream. With ``--legacy-only`` it answers modern requests as a
pre-2026 server does (HTTP 400, -32600), so the client must open a legacy session.
"""

from __future__ import annotations

import json

import pytest
import requests

from albedo_actors.config import ServerConfig
from helpers import SdkHttpServer, schema_validate, text_of

def http_config(url: str, name: str = "peer", **overrides) -> ServerConfig:
    return ServerConfig(name=name, type="http", url=url, **overrides)


def _sdk_server(tmp_path_factory, name: str, *flags: str):
    server = SdkHttpServer(*flags, record=str(tmp_path_factory.mktemp(name) / "record.jsonl"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


# Module-scoped and parametrized (not getfixturevalue): a module's processes must be
# started before a test's leak snapshot is taken.
MODERN_MODES = {"sse": (), "json": ("--json-response",)}
LEGACY_MODES = {"plain": ("--legacy-only",), "event-store": ("--legacy-only", "--event-store", "--retry-interval", "50")}


@pytest.fixture(scope="module", params=list(MODERN_MODES))
def sdk_modern(request, tmp_path_factory):
    yield from _sdk_server(tmp_path_factory, f"sdk-{request.param}", *MODERN_MODES[request.param])


@pytest.fixture(scope="module", params=list(LEGACY_MODES))
def sdk_legacy(request, tmp_path_factory):
    yield from _sdk_server(tmp_path_factory, f"sdk-legacy-{request.param}", *LEGACY_MODES[request.param])


def new_records(server: SdkHttpServer, since: int) -> list[dict]:
    return server.records()[since:]


def rpc_method(record: dict) -> str | None:
    return (record.get("rpc") or {}).get("method")


# -- the official SDK's server, modern era ----------------------------------------------------


def test_the_sdk_server_over_http_is_modern_and_everything_it_offers_works(clients, sdk_modern):
    server = sdk_modern
    json_mode = "--json-response" in server.flags
    since = len(server.records())
    handle = clients.start(http_config(server.url))
    catalogue = handle.connect()

    assert (catalogue.era, catalogue.protocol_version) == ("modern", "2026-07-28")
    assert catalogue.server_info.get("name") == "albedo-sdk-peer"
    assert catalogue.warnings == ()
    assert [tool["name"] for tool in catalogue.tools] == ["echo", "add", "time", "echo_with_progress"]
    for tool in catalogue.tools:
        schema_validate("2026-07-28", "Tool", tool)

    echoed = handle.call_tool("echo", {"text": "over http"})
    schema_validate("2026-07-28", "CallToolResult", echoed)
    assert text_of(echoed) == "over http"
    added = handle.call_tool("add", {"a": 2, "b": 40})
    schema_validate("2026-07-28", "CallToolResult", added)
    assert added["structuredContent"] == {"sum": 42}
    readme = handle.read_resource("demo://readme")
    schema_validate("2026-07-28", "ReadResourceResult", readme)
    assert readme["contents"][0]["text"].startswith("# albedo SDK peer")
    prompt = handle.get_prompt("greet", {"name": "Ada"})
    schema_validate("2026-07-28", "GetPromptResult", prompt)
    assert prompt["messages"][0]["content"] == {"type": "text", "text": "Please greet Ada warmly."}
    # A notification before the answer: the SDK streams it (SSE) unless in JSON mode.
    streamed = handle.request(
        "tools/call", {"name": "echo_with_progress", "arguments": {"text": "streamed"}, "_meta": {"progressToken": "p1"}}
    )
    schema_validate("2026-07-28", "CallToolResult", streamed)
    assert text_of(streamed) == "streamed"
    results = [echoed, added, readme, prompt, streamed]
    assert {result["resultType"] for result in results} == {"complete"}

    records = new_records(server, since)
    # Modern: no handshake and no session; every request was answered 200 (or 202).
    assert "initialize" not in [rpc_method(r) for r in records]
    assert all("mcp-session-id" not in r["headers"] and r["session"] is None for r in records)
    assert {r["status"] for r in records} <= {200, 202}
    calls = {r["headers"]["mcp-name"]: r for r in records if rpc_method(r) == "tools/call"}
    assert set(calls) == {"echo", "add", "echo_with_progress"}
    assert calls["echo"]["type"].startswith("application/json")
    wanted = "application/json" if json_mode else "text/event-stream"
    assert calls["echo_with_progress"]["type"].startswith(wanted)


# -- the official SDK's server, legacy era ------------------------------------------------------


def test_a_pre_2026_sdk_server_gets_a_session_that_is_used_throughout_and_deleted_on_stop(clients, sdk_legacy):
    server = sdk_legacy
    since = len(server.records())
    handle = clients.start(http_config(server.url))
    catalogue = handle.connect()

    assert (catalogue.era, catalogue.protocol_version) == ("legacy", "2025-11-25")
    assert catalogue.warnings == ()
    assert {"echo", "add", "time"} <= {tool["name"] for tool in catalogue.tools}
    for tool in catalogue.tools:
        schema_validate("2025-11-25", "Tool", tool)
    echoed = handle.call_tool("echo", {"text": "legacy"})
    schema_validate("2025-11-25", "CallToolResult", echoed)
    assert text_of(echoed) == "legacy"
    added = handle.call_tool("add", {"a": 1, "b": 2})
    schema_validate("2025-11-25", "CallToolResult", added)
    assert added["structuredContent"] == {"sum": 3}
    readme = handle.read_resource("demo://readme")
    schema_validate("2025-11-25", "ReadResourceResult", readme)
    prompt = handle.get_prompt("greet", {"name": "Ada"})
    schema_validate("2025-11-25", "GetPromptResult", prompt)
    assert "resultType" not in echoed and "resultType" not in prompt

    handle.stop()
    records = new_records(server, since)
    # The modern probe was refused as a pre-2026 server refuses it; then the handshake.
    assert rpc_method(records[0]) == "server/discover" and records[0]["status"] == 400
    initialize = records[1]
    assert rpc_method(initialize) == "initialize" and initialize["status"] == 200
    session = initialize["session"]
    assert session
    later = records[2:]
    assert rpc_method(later[0]) == "notifications/initialized" and later[0]["status"] == 202
    # Every later request carries the session and the negotiated version, and the
    # handle's stop ended the session with DELETE.
    assert {r["headers"].get("mcp-session-id") for r in later} == {session}
    assert {r["headers"].get("mcp-protocol-version") for r in later} == {"2025-11-25"}
    deletes = [r for r in later if r["method"] == "DELETE"]
    assert [(d["status"], d["headers"]["mcp-session-id"]) for d in deletes] == [(200, session)]
    assert later[-1]["method"] == "DELETE"

    # The server is still up and a new handle gets a new session.
    assert server.running
    again = clients.start(http_config(server.url, name="again"))
    assert text_of(again.call_tool("echo", {"text": "once more"})) == "once more"
    sessions = {r["session"] for r in new_records(server, since) if r["session"]}
    assert len(sessions) == 2 and session in sessions


@pytest.mark.parametrize("sdk_legacy", ["event-store"], indirect=True)
def test_a_tool_call_whose_stream_the_sdk_server_closes_is_resumed_with_last_event_id(clients, sdk_legacy):
    server = sdk_legacy
    handle = clients.start(http_config(server.url))
    assert handle.connect().era == "legacy"
    since = len(server.records())

    # The tool closes its own SSE stream (SEP-1699) before it answers.
    result = handle.call_tool("echo_after_reconnect", {"text": "heard after resuming"})
    schema_validate("2025-11-25", "CallToolResult", result)
    assert text_of(result) == "heard after resuming"

    records = new_records(server, since)
    calls = [r for r in records if rpc_method(r) == "tools/call"]
    assert len(calls) == 1  # resumed, not sent again
    resumes = [r for r in records if r["method"] == "GET" and "last-event-id" in r["headers"]]
    assert len(resumes) == 1
    resume = resumes[0]
    assert resume["status"] == 200 and resume["type"].startswith("text/event-stream")
    assert resume["headers"]["mcp-session-id"] == calls[0]["headers"]["mcp-session-id"]
    assert resume["headers"]["last-event-id"].isdigit()
    # The connection is intact afterwards.
    assert text_of(handle.call_tool("echo", {"text": "still here"})) == "still here"


# -- server-everything over HTTP ---------------------------------------------------------------


# ``everything_http`` (tests/conftest.py): server-everything's streamableHttp transport.


def test_server_everything_over_http_is_legacy_with_a_session_that_stop_ends(clients, everything_http):
    url, log_path = everything_http
    before = log_path.read_text()
    handle = clients.start(http_config(url, name="everything"))
    catalogue = handle.connect()

    assert (catalogue.era, catalogue.protocol_version) == ("legacy", "2025-11-25")
    assert {"echo", "get-sum"} <= {tool["name"] for tool in catalogue.tools}
    echoed = handle.call_tool("echo", {"message": "from albedo"})
    schema_validate("2025-11-25", "CallToolResult", echoed)
    assert text_of(echoed) == "Echo: from albedo"
    summed = handle.call_tool("get-sum", {"a": 2, "b": 40})
    schema_validate("2025-11-25", "CallToolResult", summed)
    assert "42" in text_of(summed)

    logged = log_path.read_text()[len(before):]
    sessions = [line.rsplit(" ", 1)[1] for line in logged.splitlines() if line.startswith("Session initialized with ID:")]
    assert len(sessions) == 1
    session = sessions[0]

    handle.stop()
    logged = log_path.read_text()[len(before):]
    assert f"Received session termination request for session {session}" in logged
    # The session is gone: the server no longer knows its id.
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {
        "Accept": "application/json, text/event-stream",
        "Mcp-Session-Id": session,
        "MCP-Protocol-Version": "2025-11-25",
    }
    with requests.Session() as raw:
        raw.trust_env = False
        refused = raw.post(url, json=body, headers=headers, timeout=10)
    assert refused.status_code == 400
    assert "No valid session ID" in json.loads(refused.text)["error"]["message"]
