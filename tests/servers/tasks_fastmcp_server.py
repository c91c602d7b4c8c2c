"""A FastMCP server with the tasks extension (PyPI ``fastmcp-tasks``), as a peer for task tests.

It runs on the interpreter in ``$ALBEDO_FASTMCP_TASKS_PY`` (``.venv-fastmcp-tasks``, made by
``albedo_fastmcp_tasks`` in scripts/_bootstrap.sh), never on the project's .venv: FastMCP
brings its own MCP SDK. The extension keeps its tasks in memory (Docket's ``memory://``
backend), so they live as long as the process.

Tools (``task`` is the tool's task mode; the extension answers a tasked call with a task
handle and the client polls ``tasks/get``):

- ``quick(x)``, optional: answers at once, ``"quick <x>"`` as text and ``{"x": x}`` as
  structured content, whether or not it runs as a task;
- ``slow(seconds)``, required: works for that long, reporting a status message per step;
- ``ask(question)``, required: asks the client (an elicitation of one string field
  ``answer``) through the task's ``input_required`` round, then answers ``"answer: ..."``;
- ``fail()``, required: ends ``failed`` (it raises a protocol error; an ordinary exception
  would end ``completed`` with ``isError``);
- ``forever()``, required: never ends until cancelled.

Usage:
    python tests/servers/tasks_fastmcp_server.py http [--port P]
    python tests/servers/tasks_fastmcp_server.py stdio

HTTP listens on 127.0.0.1 only, at ``/mcp``, and prints the endpoint URL
(``http://127.0.0.1:PORT/mcp``) as its first line of stdout once the port is bound and the
task backend has started (``--port 0``, the default, picks a free port). The tasks extension
exists only at protocol 2026-07-28: a client opts in per request with
``params._meta["io.modelcontextprotocol/clientCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"] = {}``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import threading
import types
from datetime import timedelta

import mcp_types
import uvicorn
from fastmcp import Context, FastMCP
from fastmcp.tools.base import ToolResult
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension
from mcp.shared.exceptions import MCPError

# Polls are cheap here (memory backend), so the tools suggest a short interval.
POLL = timedelta(milliseconds=200)

mcp = FastMCP("albedo-fastmcp-tasks-peer")
mcp.add_extension(TasksExtension(url="memory://"))


@mcp.tool(task=TaskConfig(mode="optional", poll_interval=POLL))
async def quick(x: str) -> ToolResult:
    """Answer at once, as a task or not."""
    return ToolResult(
        content=[mcp_types.TextContent(type="text", text=f"quick {x}")],
        structured_content={"x": x},
    )


@mcp.tool(task=TaskConfig(mode="required", poll_interval=POLL))
async def slow(seconds: float, ctx: Context) -> str:
    """Work for `seconds`, reporting a status message at each step."""
    steps = max(1, int(seconds / 0.1))
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step} of {steps}")
        await asyncio.sleep(seconds / steps)
    return f"slept {seconds}"


@mcp.tool(task=TaskConfig(mode="required", poll_interval=POLL))
async def ask(question: str, ctx: Context) -> str | mcp_types.InputRequiredResult:
    """Ask the client `question` mid-run and answer with what it said."""
    responses = ctx.input_responses or {}
    reply = responses.get("answer")
    if reply is None:
        return mcp_types.InputRequiredResult(
            input_requests={
                "answer": mcp_types.ElicitRequest(
                    params=mcp_types.ElicitRequestFormParams(
                        message=question,
                        requested_schema={
                            "type": "object",
                            "properties": {"answer": {"type": "string"}},
                            "required": ["answer"],
                        },
                    )
                )
            }
        )
    if isinstance(reply, mcp_types.ElicitResult) and reply.action == "accept" and reply.content:
        return f"answer: {reply.content.get('answer')}"
    return f"no answer ({getattr(reply, 'action', 'unknown')})"


@mcp.tool(task=TaskConfig(mode="required", poll_interval=POLL))
async def fail() -> str:
    """End the task failed."""
    raise MCPError(code=-32603, message="fail() always fails")


@mcp.tool(task=TaskConfig(mode="required", poll_interval=POLL))
async def forever(ctx: Context) -> str:
    """Run until cancelled."""
    await ctx.report_progress(0, None, "running until cancelled")
    await asyncio.Event().wait()
    return "unreachable"


class _Server(uvicorn.Server):
    """uvicorn, printing the endpoint once the socket is bound and the app has started.

    On SIGTERM/SIGINT it shuts down as usual but exits within EXIT_GRACE seconds
    regardless: the task worker's shutdown waits for running tasks, so with ``forever()``
    running a graceful exit would never come.
    """

    url = ""
    EXIT_GRACE = 2.0

    def handle_exit(self, sig: int, frame: types.FrameType | None) -> None:
        super().handle_exit(sig, frame)
        timer = threading.Timer(self.EXIT_GRACE, os._exit, args=(0,))
        timer.daemon = True
        timer.start()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if not self.should_exit:
            print(self.url, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=("http", "stdio"))
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if args.transport == "stdio":
        mcp.run(transport="stdio", show_banner=False)
        return
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    port = sock.getsockname()[1]
    config = uvicorn.Config(mcp.http_app(path="/mcp"), log_level="warning", lifespan="on")
    server = _Server(config)
    server.url = f"http://127.0.0.1:{port}/mcp"
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
