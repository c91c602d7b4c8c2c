"""A peer server built with the official MCP Python SDK (``mcp`` 2.x).

It offers the same things as the bundled demo server so the client can be
tested against an independent implementation: tools ``echo``, ``add`` (with
structured output) and ``time``, the resource ``demo://readme``, the resource
template ``demo://greeting/{name}`` and the prompt ``greet``.

Usage:
    python tests/servers/sdk_server.py stdio [--legacy-only]
    python tests/servers/sdk_server.py http [--port P] [--stateless] [--json-response]
                                            [--event-store] [--retry-interval MS]
                                            [--legacy-only] [--record FILE]

HTTP listens on 127.0.0.1 only, at the path ``/mcp``, and prints the endpoint URL
(``http://127.0.0.1:PORT/mcp``) as the first line of stdout once the port is bound
(``--port 0``, the default, picks a free port). It serves both eras on that one
endpoint: a POST whose ``MCP-Protocol-Version`` header is not a handshake
revision (e.g. ``2026-07-28``) is handled statelessly as a modern request;
``initialize`` (no header, or a legacy one) opens a legacy session with an
``Mcp-Session-Id``. ``--event-store`` keeps every SSE event in memory so
2025-11-25 sessions get priming events and can resume a stream with GET +
``Last-Event-ID``; ``--retry-interval`` adds ``retry:`` to those priming events.

``--legacy-only`` makes the stdio server behave like a pre-2026 one: it is served
by the SDK's handshake-only loop (``mcp.server.runner.serve_loop``) instead of the
dual-era loop, so ``server/discover`` is answered with -32601 (Method not found),
as a 2025-11-25 server answers any method it does not know, and the connection is
opened with ``initialize``.

Over HTTP, ``--legacy-only`` puts a small ASGI middleware in front of the SDK's app:
any request whose ``MCP-Protocol-Version`` header is not a handshake (pre-2026)
revision is answered HTTP 400 with the JSON-RPC error -32600 "Bad Request" (id
null), as a 2025-11-25 server answers a version it does not know; everything else
is the SDK's own legacy (session) handling.

Over HTTP the tool ``echo_with_progress {text}`` is added: it reports progress once
(when the request's ``_meta`` has a ``progressToken``) and then answers ``text``. A
notification makes the SDK answer a modern request with an SSE stream (unless
``--json-response``); a request that emits nothing gets a JSON body either way.

With ``--event-store`` the tool ``echo_after_reconnect {text}`` is added: it closes
its own SSE stream (the SDK's ``Context.close_sse_stream``, SEP-1699) and then
answers ``text``, so a 2025-11-25 client must resume the stream with GET +
``Last-Event-ID`` to get its answer.

``--record FILE`` appends one JSON line per HTTP request when its response starts:
``{"method", "headers" (request, lower-case names), "rpc" (the JSON-RPC
``method``/``id`` of a POSTed body, else null), "status", "type" (the response's
``content-type``, or null), "session" (the ``mcp-session-id`` response header, or
null)}``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import socket

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCMessage
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
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


class MemoryEventStore(EventStore):
    """Every SSE event of the process, kept in memory for resumption.

    Event ids are a process-wide counter; a replay sends the events stored
    after the given id on the same stream (priming events carry no message and
    are not replayed).
    """

    def __init__(self) -> None:
        self._events: list[tuple[StreamId, JSONRPCMessage | None]] = []

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        self._events.append((stream_id, message))
        return str(len(self._events))

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        if not last_event_id.isdigit() or not 1 <= int(last_event_id) <= len(self._events):
            return None
        position = int(last_event_id)
        stream_id = self._events[position - 1][0]
        for number, (event_stream, message) in enumerate(self._events[position:], start=position + 1):
            if event_stream == stream_id and message is not None:
                await send_callback(EventMessage(message, str(number)))
        return stream_id


async def echo_with_progress(text: str, ctx: Context) -> str:
    """Report progress (if asked to), then answer: in SSE mode the answer is streamed."""
    await ctx.report_progress(1, 1)
    return text


async def echo_after_reconnect(text: str, ctx: Context) -> str:
    """Close this request's SSE stream, then answer: the client must resume to hear it."""
    await ctx.close_sse_stream()
    return text


class LegacyOnly:
    """ASGI middleware: refuse every modern request the way a pre-2026 server does."""

    BODY = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Bad Request"}}).encode()

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            version = dict(scope["headers"]).get(b"mcp-protocol-version")
            if version is not None and version.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS:
                while (await receive()).get("more_body"):  # read the body, as a real server would
                    pass
                await send({
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(self.BODY)).encode())],
                })
                await send({"type": "http.response.body", "body": self.BODY})
                return
        await self.app(scope, receive, send)


class Recorder:
    """ASGI middleware: one JSON line per HTTP request, written when its response starts."""

    def __init__(self, app, path: str) -> None:
        self.app = app
        self.file = open(path, "a", encoding="utf-8")

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = bytearray()

        async def receiving():
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
            return message

        async def sending(message) -> None:
            if message["type"] == "http.response.start":
                rpc = None
                try:
                    decoded = json.loads(body) if body else None
                    if isinstance(decoded, dict):
                        rpc = {"method": decoded.get("method"), "id": decoded.get("id")}
                except ValueError:
                    pass
                response_headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in message.get("headers", [])}
                line = {
                    "method": scope["method"],
                    "headers": {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]},
                    "rpc": rpc,
                    "status": message["status"],
                    "type": response_headers.get("content-type"),
                    "session": response_headers.get("mcp-session-id"),
                }
                self.file.write(json.dumps(line) + "\n")
                self.file.flush()
            await send(message)

        await self.app(scope, receiving, sending)


def serve_http(args: argparse.Namespace) -> None:
    """Bind 127.0.0.1:port first (0 picks a free one), print the URL, then serve."""
    import uvicorn

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # asyncio then sets TCP_NODELAY
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(128)
    port = listener.getsockname()[1]
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        json_response=args.json_response,
        stateless_http=args.stateless,
        event_store=MemoryEventStore() if args.event_store else None,
        retry_interval=args.retry_interval,
        host="127.0.0.1",  # also turns on the SDK's Host/Origin checks for localhost
    )
    server.tool(description="Report progress, then return the text.", structured_output=False)(echo_with_progress)
    if args.event_store:
        server.tool(description="Close this request's SSE stream, then answer the text.", structured_output=False)(
            echo_after_reconnect
        )
    if args.legacy_only:
        app = LegacyOnly(app)
    if args.record:
        app = Recorder(app, args.record)
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=2)
    print(f"http://127.0.0.1:{port}/mcp", flush=True)
    anyio.run(uvicorn.Server(config).serve, [listener])


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
    http.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default 0: any free port)")
    http.add_argument("--stateless", action="store_true", help="no sessions (stateless_http)")
    http.add_argument("--json-response", action="store_true", help="answer with JSON instead of SSE")
    http.add_argument("--event-store", action="store_true",
                      help="keep SSE events in memory so 2025-11-25 sessions can resume (Last-Event-ID)")
    http.add_argument("--retry-interval", type=int, metavar="MS",
                      help="retry: field of the priming events (with --event-store)")
    http.add_argument("--legacy-only", action="store_true",
                      help="answer modern requests 400/-32600 as a pre-2026 server does; serve only legacy sessions")
    http.add_argument("--record", metavar="FILE", help="append one JSON line per HTTP request to FILE")
    args = parser.parse_args()
    if args.transport == "stdio" and args.legacy_only:
        anyio.run(serve_legacy_stdio)
    elif args.transport == "stdio":
        server.run("stdio")
    else:
        serve_http(args)


if __name__ == "__main__":
    main()
