"""A peer server built with the official MCP Python SDK (``mcp`` 2.x).

It offers the same things as the bundled demo server so the client can be
tested against an independent implementation: tools ``echo``, ``add`` (with
structured output) and ``time``, the resource ``demo://readme``, the resource
template ``demo://greeting/{name}`` and the prompt ``greet``.

Usage:
    python tests/servers/sdk_server.py stdio [--legacy-only]
    python tests/servers/sdk_server.py http --port P [--stateless] [--json-response]

HTTP listens on 127.0.0.1 only, at the path ``/mcp``.

``--legacy-only`` makes the stdio server behave like a pre-2026 one: it is served
by the SDK's handshake-only loop (``mcp.server.runner.serve_loop``) instead of the
dual-era loop, so ``server/discover`` is answered with -32601 (Method not found),
as a 2025-11-25 server answers any method it does not know, and the connection is
opened with ``initialize``.
"""

from __future__ import annotations

import argparse
import datetime

import anyio
from mcp.server import MCPServer
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server
from pydantic import BaseModel

server = MCPServer(
    "albedo-sdk-peer",
    version="1.0.0",
    instructions="SDK peer: echo repeats text, add sums two integers, time gives the UTC time.",
    log_level="WARNING",
)


class Sum(BaseModel):
    sum: int


@server.tool(description="Return the given text unchanged.", structured_output=False)
def echo(text: str) -> str:
    return text


@server.tool(description="Add two integers.")
def add(a: int, b: int) -> Sum:
    return Sum(sum=a + b)


@server.tool(description="Current UTC time in ISO 8601.", structured_output=False)
def time() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


@server.resource("demo://readme", name="readme", description="What this server offers.", mime_type="text/markdown")
def readme() -> str:
    return "# albedo SDK peer\n\nThe demo server's features, served by the official Python SDK.\n"


@server.resource("demo://greeting/{name}", name="greeting", description="A greeting for the given name.",
                 mime_type="text/plain")
def greeting(name: str) -> str:
    return f"Hello, {name}!"


@server.prompt(description="Ask the model to greet someone.")
def greet(name: str) -> str:
    return f"Please greet {name} warmly."


async def serve_legacy_stdio() -> None:
    """Serve stdio with the SDK's handshake-only (2025-11-25) loop."""
    lowlevel = server._lowlevel_server  # MCPServer has no public accessor for it
    async with stdio_server() as (read_stream, write_stream):
        async with lowlevel.lifespan(lowlevel) as lifespan_state:
            await serve_loop(
                lowlevel,
                read_stream,
                write_stream,
                lifespan_state=lifespan_state,
                init_options=lowlevel.create_initialization_options(),
            )


def main() -> None:
    parser = argparse.ArgumentParser(description="MCP SDK peer server")
    transports = parser.add_subparsers(dest="transport", required=True)
    stdio = transports.add_parser("stdio", help="serve over stdin/stdout")
    stdio.add_argument(
        "--legacy-only",
        action="store_true",
        help="serve only the initialize handshake era; server/discover gets -32601",
    )
    http = transports.add_parser("http", help="serve streamable HTTP on 127.0.0.1")
    http.add_argument("--port", type=int, required=True)
    http.add_argument("--stateless", action="store_true", help="no sessions (stateless_http)")
    http.add_argument("--json-response", action="store_true", help="answer with JSON instead of SSE")
    args = parser.parse_args()
    if args.transport == "stdio" and args.legacy_only:
        anyio.run(serve_legacy_stdio)
    elif args.transport == "stdio":
        server.run("stdio")
    else:
        server.run(
            "streamable-http",
            host="127.0.0.1",
            port=args.port,
            stateless_http=args.stateless,
            json_response=args.json_response,
        )


if __name__ == "__main__":
    main()
