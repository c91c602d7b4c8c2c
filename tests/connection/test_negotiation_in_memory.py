"""The era a connection speaks, chosen over an in-memory link (memory_link.py): the stdio
opening's probe and its fallback to ``initialize``, with no subprocess."""

from __future__ import annotations

import time

import pytest

from albedo_actors.connection.negotiation import _negotiate
from albedo_actors.errors import Incompatible
from albedo_actors.wire import jsonrpc, mcp
from memory_link import MemoryLink

WAIT = 5.0
METHOD_NOT_FOUND = -32601


def server(discover=None, initialize=None):
    """A server answering server/discover and initialize with these (None: no answer)."""

    def serve(message: dict) -> list[dict]:
        answer = {"server/discover": discover, "initialize": initialize}.get(message["method"])
        if answer is None:
            return []
        if "code" in answer:
            return [jsonrpc.error_response(message["id"], answer["code"], answer["message"], answer.get("data"))]
        return [jsonrpc.result_response(message["id"], answer)]

    return serve


def initialize_result(version: str) -> dict:
    return {"protocolVersion": version, "capabilities": {}, "serverInfo": {"name": "mem", "version": "1"}}


def negotiate(serve, grace: float = 1.0):
    channel, link = MemoryLink.attached(serve)
    era, result = _negotiate(channel, "mem", time.monotonic() + WAIT, probe=True, grace=grace)
    return era, result, link


def test_a_server_that_answers_discover_with_the_modern_version_is_modern():
    discovered = {"supportedVersions": [mcp.MODERN_VERSION], "capabilities": {}}
    era, result, link = negotiate(server(discover=discovered))
    assert era == mcp.MODERN and result == discovered
    assert [m["method"] for m in link.requests] == ["server/discover"]


@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"])
def test_a_server_that_does_not_know_discover_speaks_the_version_its_initialize_names(version):
    era, result, link = negotiate(server(discover={"code": METHOD_NOT_FOUND, "message": "no such method"},
                                         initialize=initialize_result(version)))
    assert era == mcp.Negotiated("legacy", version)
    assert [m["method"] for m in link.requests] == ["server/discover", "initialize"]
    assert [m["method"] for m in link.others] == ["notifications/initialized"]


def test_a_server_silent_on_discover_is_sent_initialize_after_the_grace_and_the_probe_is_dropped():
    era, _, link = negotiate(server(initialize=initialize_result("2025-11-25")), grace=0.05)
    assert era == mcp.Negotiated("legacy", "2025-11-25")
    assert link.forgotten == [1]  # the probe's answer no longer matters; it is not cancelled
    assert link.cancelled == []


def test_a_server_whose_initialize_names_an_unknown_version_is_incompatible():
    with pytest.raises(Incompatible, match="1999-01-01"):
        negotiate(server(discover={"code": METHOD_NOT_FOUND, "message": "no such method"},
                         initialize=initialize_result("1999-01-01")))


def test_a_server_whose_discover_names_only_unknown_versions_is_incompatible():
    with pytest.raises(Incompatible, match="2099-01-01"):
        negotiate(server(discover={"supportedVersions": ["2099-01-01"], "capabilities": {}}))
