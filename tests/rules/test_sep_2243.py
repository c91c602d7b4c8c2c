"""The client rules of SEP-2243 (tests/rules/rules.json; docs/rules.rst): the HTTP
headers of 2026-07-28, through the real client (ServerHandle) against raw servers of our
own that record every request's headers as received (tests/servers/fault_http_server.py,
and its tasks sibling tests/servers/tasks_http_server.py).
"""

from __future__ import annotations

import logging
import os
import sys

import pytest

from albedo_actors.actors.client import ServerHandle
from albedo_actors.config import ServerConfig
from albedo_actors.demo.server import text_result
from helpers import HERE, text_of

sys.path.insert(0, os.path.join(HERE, "servers"))
import fault_http_server  # noqa: E402  (tests/servers; the module tasks_http_server builds on)
from fault_http_server import FaultHTTPServer  # noqa: E402
from tasks_http_server import TasksHTTPServer  # noqa: E402

WAIT = 20.0
VERSION = "2026-07-28"
NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri",
         "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}


@pytest.fixture
def start(tmp_path):
    """``start(url, **config)``: a ServerHandle to an HTTP server, stopped afterwards."""
    started: list[ServerHandle] = []

    def make(url: str, **overrides) -> ServerHandle:
        handle = ServerHandle.start(ServerConfig(name="h", type="http", url=url, **overrides), str(tmp_path))
        started.append(handle)
        return handle

    yield make
    for handle in started:
        handle.stop()


@pytest.mark.rule("sep-2243-client-includes-standard-headers")
def test_every_post_carries_the_standard_headers(start):
    """Every POST of a 2026-07-28 HTTP connection (discovery, the lists, listening, tool
    calls, a task's polls, resources/read, prompts/get) carries MCP-Protocol-Version, and
    Mcp-Method equal to its method, each exactly once; tools/call, prompts/get,
    resources/read and tasks/* carry Mcp-Name equal to the name, URI or task id."""
    with TasksHTTPServer() as server:
        server.script = [{"status": "working"}, {"status": "completed", "result": text_result("done")}]
        handle = start(server.url, tasks="always")
        handle.connect(WAIT)
        assert text_of(handle.call_tool("echo", {"text": "hi"}, timeout=WAIT)) == "hi"
        assert text_of(handle.call_tool_and_deadline("job", {}, timeout=WAIT, task="required")[0]) == "done"
        handle.read_resource("demo://readme", timeout=WAIT)
        handle.get_prompt("greet", {"name": "Ada"}, timeout=WAIT)
        posts = server.posts()
    methods = {post.json()["method"] for post in posts}
    assert {"server/discover", "tools/list", "tools/call", "tasks/get", "resources/read", "prompts/get"} <= methods, methods
    for post in posts:
        body = post.json()
        method = body["method"]
        assert post.header_all("MCP-Protocol-Version") == [VERSION], (method, post.headers)
        assert post.header_all("Mcp-Method") == [method], (method, post.headers)
        if method in NAMED:
            assert post.header_all("Mcp-Name") == [body["params"][NAMED[method]]], (method, post.headers)
        else:
            assert post.header_all("Mcp-Name") == [], (method, post.headers)


def mangled(name: str) -> str:
    """``Content-Type`` as ``cONTENT-tYPE``: the same header name in another case."""
    return name.swapcase()


@pytest.mark.rule("sep-2243-header-name-case-insensitive")
@pytest.mark.parametrize("era, sse", [("legacy", False), ("legacy", True), ("modern", False), ("modern", True)])
def test_header_names_are_compared_case_insensitively(start, monkeypatch, caplog, era, sse):
    """Header names are compared case-insensitively: a server's response headers are
    understood in any case (Content-Type naming JSON or an event stream, a 2025-11-25
    session's Mcp-Session-Id), and two x-mcp-header names of one tool that differ only in
    case are a repeated header: that tool is left out, the others are kept."""
    original = fault_http_server._Handler.start_response

    def start_response(self, status, headers):
        original(self, status, [(mangled(name), value) for name, value in headers])

    monkeypatch.setattr(fault_http_server._Handler, "start_response", start_response)
    with FaultHTTPServer(era=era, sse=sse) as server:
        server._modern.add_tool("twice", lambda request, args: text_result("twice"), properties={
            "region": {"type": "string", "x-mcp-header": "Region"},
            "zone": {"type": "string", "x-mcp-header": "REGION"}})
        handle = start(server.url)
        catalogue = handle.connect(WAIT)
        assert text_of(handle.call_tool("echo", {"text": "in any case"}, timeout=WAIT)) == "in any case"
        sent = [r for r in server.requests if r.method == "POST"]
        if era == "legacy":
            session = next(v for k, v in sent[-1].headers if k.lower() == "mcp-session-id")
            assert session in server.sessions
        names = {tool["name"] for tool in catalogue.tools}
    assert "echo" in names
    if era == "modern":  # x-mcp-header is of the modern era (the legacy sessions' engines do not list "twice")
        assert "twice" not in names
        assert any("'twice'" in r.getMessage() and "repeats" in r.getMessage() for r in caplog.records)


@pytest.mark.rule("sep-2243-log-warning-rejecting-tool-definition-due")
def test_a_tool_left_out_for_its_x_mcp_header_is_logged_with_its_name_and_reason(start, caplog):
    """A tool left out for an invalid x-mcp-header is logged as a warning naming the server,
    the tool and the broken rule, in one line; the other tools are kept."""
    caplog.set_level(logging.WARNING)
    with FaultHTTPServer(era="modern") as server:
        server._modern.add_tool("bad\nname", lambda request, args: text_result("x"), properties={
            "where": {"type": "string", "x-mcp-header": "Bad Header"}})
        catalogue = start(server.url).connect(WAIT)
    names = {tool["name"] for tool in catalogue.tools}
    assert "echo" in names and "bad_header" not in names and "bad\nname" not in names
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "x-mcp-header" in r.getMessage()]
    number = [line for line in lines if "'bad_header'" in line]
    assert number and "type 'number', not string, integer or boolean" in number[0], lines
    assert number[0].startswith("server 'h': left out tool 'bad_header'")
    spaced = [line for line in lines if "'Bad Header'" in line]
    assert spaced and "is not an HTTP token" in spaced[0] and "bad\\nname" in spaced[0], lines
    assert all("\n" not in line for line in lines)
