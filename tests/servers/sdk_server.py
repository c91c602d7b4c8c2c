"""A peer server built with the official MCP Python SDK (``mcp`` 2.x).

It offers the same things as the bundled demo server so the client can be
tested against an independent implementation: tools ``echo``, ``add`` (with
structured output) and ``time``, the resource ``demo://readme``, the resource
template ``demo://greeting/{name}`` and the prompt ``greet``.

Usage:
    python tests/servers/sdk_server.py stdio
    python tests/servers/sdk_server.py http --port P [--stateless] [--json-response]

HTTP listens on 127.0.0.1 only, at the path ``/mcp``.
"""

from __future__ import annotations

import argparse
import datetime

from mcp.server import MCPServer
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


def main() -> None:
    parser = argparse.ArgumentParser(description="MCP SDK peer server")
    transports = parser.add_subparsers(dest="transport", required=True)
    transports.add_parser("stdio", help="serve over stdin/stdout")
    http = transports.add_parser("http", help="serve streamable HTTP on 127.0.0.1")
    http.add_argument("--port", type=int, required=True)
    http.add_argument("--stateless", action="store_true", help="no sessions (stateless_http)")
    http.add_argument("--json-response", action="store_true", help="answer with JSON instead of SSE")
    args = parser.parse_args()
    if args.transport == "stdio":
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
