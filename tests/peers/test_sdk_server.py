"""ServerHandle against the official MCP Python SDK's server, in both protocol eras.

tests/servers/sdk_server.py is a real ``mcp`` 2.x server. By default it serves both
eras and answers ``server/discover``; with ``--legacy-only`` it is served by the SDK's
handshake-only loop and answers ``server/discover`` with -32601, as a pre-2026 server
does, so the client must open it with ``initialize``.
"""

import sys

import pytest

from albedo_actors.config import ServerConfig
from helpers import SDK_SERVER, schema_validate, schema_validate_each, text_of

ERAS = {
    # flags -> (era, protocol version, schema version)
    "modern": ((), "modern", "2026-07-28"),
    "legacy": (("--legacy-only",), "legacy", "2025-11-25"),
}


def sdk_config(*flags: str) -> ServerConfig:
    return ServerConfig(name="sdk", type="stdio", command=sys.executable, args=(SDK_SERVER, "stdio", *flags))


@pytest.mark.parametrize("era_name", list(ERAS))
def test_the_sdk_server_is_opened_in_its_era_and_everything_it_offers_works(clients, era_name):
    flags, era, version = ERAS[era_name]
    handle = clients.start(sdk_config(*flags))
    catalogue = handle.connect()

    assert (catalogue.era, catalogue.protocol_version) == (era, version)
    assert handle.status()["version"] == version
    assert catalogue.server_info.get("name") == "albedo-sdk-peer"
    assert catalogue.warnings == ()

    # The listing: every entry is valid for the era's schema.
    assert [tool["name"] for tool in catalogue.tools] == ["echo", "add", "time"]
    assert all(tool["inputSchema"]["type"] == "object" for tool in catalogue.tools)
    schema_validate_each(version, "Tool", catalogue.tools)
    assert catalogue.tool("echo")["inputSchema"]["required"] == ["text"]
    assert set(catalogue.tool("add")["inputSchema"]["properties"]) == {"a", "b"}
    assert [r["uri"] for r in catalogue.resources] == ["demo://readme"]
    assert [t["uriTemplate"] for t in catalogue.resource_templates] == ["demo://greeting/{name}"]
    assert [p["name"] for p in catalogue.prompts] == ["greet"]
    schema_validate_each(version, "Resource", catalogue.resources)
    schema_validate_each(version, "ResourceTemplate", catalogue.resource_templates)
    schema_validate_each(version, "Prompt", catalogue.prompts)

    # Tool calls.
    echoed = handle.call_tool("echo", {"text": "from albedo"})
    schema_validate(version, "CallToolResult", echoed)
    assert text_of(echoed) == "from albedo"
    assert echoed.get("isError", False) is False

    added = handle.call_tool("add", {"a": 2, "b": 40})
    schema_validate(version, "CallToolResult", added)
    assert added["structuredContent"] == {"sum": 42}
    assert added.get("isError", False) is False

    # A resource, a resource made from the template, and the prompt.
    readme = handle.read_resource("demo://readme")
    schema_validate(version, "ReadResourceResult", readme)
    assert [c["uri"] for c in readme["contents"]] == ["demo://readme"]
    assert readme["contents"][0]["text"].startswith("# albedo SDK peer")

    greeting = handle.read_resource("demo://greeting/Ada")
    schema_validate(version, "ReadResourceResult", greeting)
    assert greeting["contents"][0]["text"] == "Hello, Ada!"

    prompt = handle.get_prompt("greet", {"name": "Ada"})
    schema_validate(version, "GetPromptResult", prompt)
    assert [m["role"] for m in prompt["messages"]] == ["user"]
    assert prompt["messages"][0]["content"] == {"type": "text", "text": "Please greet Ada warmly."}

    # The modern era marks every result complete; the legacy era has no such field.
    if era == "modern":
        assert {echoed.get("resultType"), readme.get("resultType"), prompt.get("resultType")} == {"complete"}
    else:
        assert "resultType" not in echoed and "resultType" not in readme and "resultType" not in prompt


def test_the_sdk_server_reports_an_unknown_tool_and_bad_arguments_as_tool_errors(clients):
    handle = clients.start(sdk_config())
    assert handle.connect().era == "modern"

    unknown = handle.call_tool("no_such_tool", {})
    schema_validate("2026-07-28", "CallToolResult", unknown)
    assert unknown["isError"] is True
    assert text_of(unknown) == "Unknown tool: no_such_tool"

    bad = handle.call_tool("add", {"a": "two", "b": 1})
    schema_validate("2026-07-28", "CallToolResult", bad)
    assert bad["isError"] is True
    assert "Error executing tool add" in text_of(bad)

    # Neither error hurt the connection.
    assert handle.call_tool("add", {"a": 1, "b": 1})["structuredContent"] == {"sum": 2}
