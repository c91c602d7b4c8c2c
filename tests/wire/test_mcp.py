"""Era verdicts and per-request metadata, checked against the official schemas."""

import pytest

from albedo_actors.wire import jsonrpc, mcp
from albedo_actors.wire.mcp import Verdict

from helpers import schema_validate as validate


def test_modern_requests_carry_the_required_meta_and_validate():
    params = mcp.modern_params({"name": "echo", "arguments": {"text": "hi"}, "_meta": {"progressToken": 7}})
    validate("2026-07-28", "CallToolRequest", jsonrpc.request(1, "tools/call", params))
    assert params["_meta"]["progressToken"] == 7
    assert params["_meta"][mcp.META_CLIENT_CAPABILITIES] == {}
    validate("2026-07-28", "DiscoverRequest", jsonrpc.request(2, "server/discover", mcp.modern_params(None)))
    validate("2026-07-28", "ListToolsRequest", jsonrpc.request(3, "tools/list", mcp.modern_params({"cursor": ""})))


def test_initialize_request_validates_against_2025_11_25():
    validate("2025-11-25", "InitializeRequest", jsonrpc.request(0, "initialize", mcp.initialize_params()))
    validate("2025-11-25", "InitializedNotification", jsonrpc.notification("notifications/initialized"))


@pytest.mark.parametrize(
    "versions, verdict",
    [
        (["2026-07-28"], Verdict.MODERN),
        (["2026-07-28", "2025-11-25"], Verdict.MODERN),
        (["2025-06-18"], Verdict.HANDSHAKE),
        (["2099-01-01"], Verdict.REFUSE),
        ([], Verdict.REFUSE),
    ],
)
def test_discover_result_and_unsupported_version_error_decide_alike(versions, verdict):
    assert mcp.judge_discover_result({"supportedVersions": versions, "capabilities": {}}) is verdict
    error = {"code": jsonrpc.UNSUPPORTED_PROTOCOL_VERSION, "message": "no", "data": {"supported": versions, "requested": "x"}}
    assert mcp.judge_error(error) is verdict


@pytest.mark.parametrize(
    "error",
    [
        {"code": jsonrpc.METHOD_NOT_FOUND, "message": "Method not found"},
        {"code": jsonrpc.INVALID_PARAMS, "message": "not initialized"},
        {"code": jsonrpc.UNSUPPORTED_PROTOCOL_VERSION, "message": "no data"},
        {"code": -32000, "message": "Server not initialized"},
    ],
)
def test_any_other_error_means_an_older_server(error):
    assert mcp.judge_error(error) is Verdict.HANDSHAKE


def test_a_result_that_is_not_a_discover_result_means_an_older_server():
    assert mcp.judge_discover_result({"tools": []}) is Verdict.HANDSHAKE
