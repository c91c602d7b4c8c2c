"""The Python binding, sync and asyncio, over a real session composer."""

import asyncio

import pytest

from albedo_actors.binding import AsyncMcp, Mcp
from albedo_actors.errors import ConfigError, UnknownOutcome
from helpers import composed, fault_config


@pytest.fixture
def composer(tmp_path):
    with composed(str(tmp_path / "home"), fault_config("f", call_timeout_ms=30_000), fault_config("g")) as ref:
        yield ref


def test_tools_describe_and_call_by_name_or_server_slash_tool(composer):
    mcp = Mcp(composer)
    tools = mcp.tools()
    echo = next(t for t in tools if t["server"] == "f" and t["operation"] == "echo")
    assert echo["name"].startswith("mcp_f_echo_") and echo["inputSchema"]["type"] == "object"
    assert mcp.describe(echo["name"]) == echo == mcp.describe("f/echo")
    assert mcp.call(echo["name"], {"text": "by name"}).content[0]["text"] == "by name"
    assert mcp.call("f/echo", text="by kwargs").content[0]["text"] == "by kwargs"
    assert mcp.f.echo(text="minted").content[0]["text"] == "minted"
    with pytest.raises(ConfigError, match="no MCP operation 'f/nope'"):
        mcp.call("f/nope")


def test_a_tool_error_is_a_result_and_resources_and_prompts_are_operations(composer):
    mcp = Mcp(composer)
    result = mcp.call("f/add", a="two", b=1)
    assert result.isError is True
    assert mcp.call("f/read_resource", uri="demo://readme").contents[0]["uri"] == "demo://readme"
    # arguments= is the operation's arguments as one mapping (here: the prompt's name and its arguments)
    assert mcp.call("f/get_prompt", arguments={"name": "greet", "arguments": {"name": "Ada"}}).messages


def test_asyncio_gather_keeps_the_results_that_succeeded(composer):
    amcp = AsyncMcp(composer)

    async def main():
        return await asyncio.gather(
            amcp.call("g/echo", text="fine"), amcp.call("f/die"), amcp.call("g/echo", text="also"), return_exceptions=True
        )

    ok, lost, also = asyncio.run(main())
    assert ok.content[0]["text"] == "fine" and also.content[0]["text"] == "also"
    assert isinstance(lost, UnknownOutcome)
