"""ServerHandle against ``@modelcontextprotocol/server-everything`` from npm.

The reference "everything" server (TypeScript SDK) predates the 2026 era: it answers
``server/discover`` with -32601, so the client opens it with ``initialize``. Right
after ``notifications/initialized`` it registers more tools and sends
``notifications/tools/list_changed``.

scripts/test installs it under .peers/peers/node_modules and sets ALBEDO_PEERS.
"""

import os

import pytest

import _leaks
from albedo_actors.config import ServerConfig
from helpers import HERE, schema_validate, schema_validate_each, text_of

PEERS = os.environ.get("ALBEDO_PEERS") or os.path.join(os.path.dirname(HERE), ".peers", "peers", "node_modules")
EVERYTHING = os.path.join(PEERS, "@modelcontextprotocol", "server-everything", "dist", "index.js")


@pytest.fixture
def everything() -> ServerConfig:
    if not os.path.isfile(EVERYTHING):
        pytest.fail(
            f"the npm test peer is not installed: {EVERYTHING} is missing; run scripts/test, "
            "which installs .peers/peers/node_modules and sets ALBEDO_PEERS",
            pytrace=False,
        )
    return ServerConfig(name="everything", type="stdio", command="node", args=(EVERYTHING, "stdio"))


def server_processes() -> set[int]:
    """Live descendants of this process running ``node EVERYTHING ...`` (not its launcher)."""
    found = set()
    for pid, proc in _leaks.descendants().items():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue  # it ended meanwhile
        if proc.state not in ("Z", "X", "x") and argv[1:2] == [os.fsencode(EVERYTHING)]:
            found.add(pid)
    return found


def test_server_everything_is_opened_with_initialize_and_its_tools_resources_and_prompts_work(clients, everything):
    handle = clients.start(everything)
    catalogue = handle.connect()

    assert (catalogue.era, catalogue.protocol_version) == ("legacy", "2025-11-25")
    assert catalogue.server_info.get("name") == "mcp-servers/everything"
    names = [tool["name"] for tool in catalogue.tools]
    assert {"echo", "get-sum", "get-tiny-image", "get-structured-content"} <= set(names)
    assert len(names) == len(set(names)) >= 10
    schema_validate_each("2025-11-25", "Tool", catalogue.tools)
    assert len(catalogue.resources) >= 1
    assert len(catalogue.resource_templates) == 2
    assert len(catalogue.prompts) == 4
    assert "simple-prompt" in {prompt["name"] for prompt in catalogue.prompts}
    schema_validate_each("2025-11-25", "Resource", catalogue.resources)
    schema_validate_each("2025-11-25", "ResourceTemplate", catalogue.resource_templates)
    schema_validate_each("2025-11-25", "Prompt", catalogue.prompts)

    # Its list_changed right after initialized must not disturb anything that follows.
    echoed = handle.call_tool("echo", {"message": "from albedo"})
    schema_validate("2025-11-25", "CallToolResult", echoed)
    assert text_of(echoed) == "Echo: from albedo"
    assert echoed.get("isError", False) is False

    summed = handle.call_tool("get-sum", {"a": 2, "b": 40})
    schema_validate("2025-11-25", "CallToolResult", summed)
    assert "42" in text_of(summed)

    image = handle.call_tool("get-tiny-image", {})
    schema_validate("2025-11-25", "CallToolResult", image)
    images = [block for block in image["content"] if block["type"] == "image"]
    assert len(images) == 1
    assert images[0]["mimeType"] == "image/png"
    assert images[0]["data"].startswith("iVBORw0KGgo")  # base64 of the PNG signature

    weather = handle.call_tool("get-structured-content", {"location": "Chicago"})
    schema_validate("2025-11-25", "CallToolResult", weather)
    assert set(weather["structuredContent"]) == {"temperature", "conditions", "humidity"}
    output_schema = catalogue.tool("get-structured-content").get("outputSchema")
    assert output_schema is not None and set(output_schema["properties"]) >= set(weather["structuredContent"])

    resource = catalogue.resources[0]
    read = handle.read_resource(resource["uri"])
    schema_validate("2025-11-25", "ReadResourceResult", read)
    assert read["contents"] and read["contents"][0]["uri"] == resource["uri"]

    prompt = handle.get_prompt("simple-prompt")
    schema_validate("2025-11-25", "GetPromptResult", prompt)
    assert prompt["messages"][0]["role"] == "user"
    assert prompt["messages"][0]["content"]["type"] == "text"

    # The client is still on its first connection and still the same era.
    status = handle.status()
    assert (status["connected"], status["era"], status["version"]) == (True, "legacy", "2025-11-25")


def test_stopping_the_handle_ends_the_server_everything_process(clients, everything):
    handle = clients.start(everything)
    handle.connect()
    running = server_processes()
    assert len(running) == 1
    handle.stop()
    assert server_processes().isdisjoint(running)


# -- a list_changed during the first discovery ---------------------------------------------

# What server-everything does, with a listing that really changes: a tool is added
# just after tools/list was answered and announced at once, while the client is still
# reading the rest of the catalogue (prompts/list) during its first dial.
