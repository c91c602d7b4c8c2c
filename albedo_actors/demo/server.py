"""A small dual-era MCP server over stdio, bundled for newcomers and tests.

Run it with ``python -m albedo_actors.demo.server [--era dual|legacy|modern]``
or directly by path (``python path/to/server.py``); it uses only the standard
library, so it works without the package being importable.

Wire format: newline-delimited JSON-RPC 2.0 on stdin/stdout, one compact UTF-8
message per line. The process exits when stdin reaches EOF.

Eras (see the protocol digest, sections 1 and 2):

* modern (2026-07-28): no handshake. Every request carries
  ``params._meta["io.modelcontextprotocol/protocolVersion"]`` and is judged on
  its own; an unsupported version gets ``-32022``. ``server/discover`` returns a
  ``DiscoverResult``; every result carries ``resultType`` and the server info in
  ``_meta``; list/read results also carry the cache hints ``ttlMs``/``cacheScope``.
  List-changed notifications travel only on an open ``subscriptions/listen``.
  With ``--era modern``, ``initialize`` gets ``-32022`` listing the modern versions.
* legacy (2024-11-05 .. 2025-11-25): ``initialize`` opens a session; requests
  before it are refused (``-32600``); ``notifications/tools/list_changed`` is
  sent plainly. With ``--era legacy``, ``server/discover`` is an unknown method.
* dual: the connection becomes modern or legacy by how the client opens it.
  Until then a request is modern when it is ``server/discover`` or carries the
  modern protocol-version ``_meta``, and anything else needs ``initialize``
  first. The first modern request served other than ``server/discover`` makes
  the connection modern (``initialize`` then gets ``-32022``); a successful
  ``initialize`` makes it legacy (from then on it behaves like a legacy-only
  server: ``server/discover`` is unknown and ``_meta`` is ignored). The probe
  alone commits nothing, so a client may still fall back to ``initialize`` on
  the same process after ``server/discover``.

Features: tools ``echo``, ``add`` (with ``outputSchema``/``structuredContent``)
and ``time``; resource ``demo://readme``; resource template
``demo://greeting/{name}``; prompt ``greet``.

Extending: subclass :class:`DemoServer`, register tools with
:meth:`DemoServer.add_tool`, override :meth:`DemoServer.handle` (or the
``handle_*`` hooks) and use :meth:`DemoServer.send` / :meth:`DemoServer.reply`
to write messages. A tool handler may return ``None`` to answer later with
:meth:`DemoServer.reply`, or never.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import threading
import urllib.parse
from typing import Any, Callable

MODERN_VERSIONS = ("2026-07-28",)
LEGACY_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
LATEST_LEGACY = LEGACY_VERSIONS[0]

META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"

# JSON-RPC and MCP error codes used here.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
LEGACY_RESOURCE_NOT_FOUND = -32002
MISSING_CLIENT_CAPABILITY = -32021
UNSUPPORTED_VERSION = -32022

# Modern results that must carry the cache hints ttlMs/cacheScope (digest 5.8).
CACHEABLE_METHODS = frozenset(
    {
        "server/discover",
        "tools/list",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "prompts/list",
    }
)
# Methods that exist only in the modern era.
MODERN_ONLY_METHODS = frozenset({"server/discover", "subscriptions/listen"})

README_URI = "demo://readme"
GREETING_PREFIX = "demo://greeting/"
README_TEXT = (
    "# albedo demo server\n\n"
    "A tiny MCP server speaking both protocol eras over stdio.\n"
    "Tools: echo, add, time. Resource template: demo://greeting/{name}. Prompt: greet.\n"
)

ToolHandler = Callable[["Request", dict], "dict | None"]


class RpcError(Exception):
    """Raised by handlers to answer the current request with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


class Request:
    """One incoming JSON-RPC request.

    ``version`` is the modern protocol version the request was made with, or
    ``None`` for a legacy request (one that relies on the ``initialize`` session).
    """

    __slots__ = ("id", "method", "params", "version")

    def __init__(self, id: str | int, method: str, params: dict, version: str | None) -> None:
        self.id = id
        self.method = method
        self.params = params
        self.version = version

    @property
    def modern(self) -> bool:
        return self.version is not None


def text_result(text: str, *, is_error: bool = False, structured: Any = None) -> dict:
    """A ``CallToolResult`` with one text block."""
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if structured is not None:
        result["structuredContent"] = structured
    if is_error:
        result["isError"] = True
    return result


_JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "object": dict,
    "array": list,
}


def argument_problems(schema: dict, arguments: dict) -> list[str]:
    """Check ``arguments`` against the simple object schemas the tools use.

    Only ``required`` and the ``type`` of each listed property are checked;
    that is all the tools here declare.
    """
    problems = [f"missing argument {name!r}" for name in schema.get("required", ()) if name not in arguments]
    for name, prop in schema.get("properties", {}).items():
        if name not in arguments or "type" not in prop:
            continue
        value = arguments[name]
        # bool is an int subclass in Python but not a JSON number.
        ok = isinstance(value, _JSON_TYPES[prop["type"]]) and not (
            isinstance(value, bool) and prop["type"] != "boolean"
        )
        if not ok:
            problems.append(f"argument {name!r} must be of type {prop['type']}")
    return problems


class Tool:
    """A registered tool: its ``tools/list`` definition and its handler."""

    __slots__ = ("definition", "handler")

    def __init__(self, definition: dict, handler: ToolHandler) -> None:
        self.definition = definition
        self.handler = handler


class DemoServer:
    """The demo server. One instance serves one stdio connection."""

    name = "albedo-demo"
    version = "1.0.0"
    instructions = "Demo server: call echo to repeat text, add to sum two integers, time for the UTC time."

    def __init__(self, era: str = "dual", stdin: Any = None, stdout: Any = None) -> None:
        if era not in ("dual", "legacy", "modern"):
            raise ValueError(f"unknown era {era!r}")
        self.era = era
        self.stdin = stdin if stdin is not None else sys.stdin.buffer
        self.stdout = stdout if stdout is not None else sys.stdout.buffer
        # Tool handlers may answer from other threads; one line at a time.
        self._write_lock = threading.Lock()
        # What server/discover advertises. A legacy version listed here can only
        # be used through initialize, never in a modern request's _meta.
        self.supported_versions: list[str] = {
            "dual": [*MODERN_VERSIONS, LATEST_LEGACY],
            "modern": list(MODERN_VERSIONS),
            "legacy": [],
        }[era]
        # None until the connection is committed to "modern" or "legacy".
        self.opened_as: str | None = "modern" if era == "modern" else None
        # Open subscriptions/listen requests: request id -> honoured filter.
        self.listeners: dict[str | int, dict] = {}
        self.tools: dict[str, Tool] = {}
        self.methods: dict[str, Callable[[Request], dict | None]] = {
            "ping": lambda request: {},
            "server/discover": self.handle_discover,
            "subscriptions/listen": self.handle_listen,
            "tools/list": self.handle_tools_list,
            "tools/call": self.handle_tools_call,
            "resources/list": self.handle_resources_list,
            "resources/templates/list": self.handle_templates_list,
            "resources/read": self.handle_resources_read,
            "prompts/list": self.handle_prompts_list,
            "prompts/get": self.handle_prompts_get,
        }
        self._add_demo_tools()

    # ------------------------------------------------------------------ I/O

    def run(self) -> None:
        """Serve until stdin reaches EOF."""
        readline = self.stdin.readline
        while True:
            line = readline()
            if not line:
                return
            self.handle_line(line)

    def handle_line(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):  # bad JSON, bad UTF-8, absurd nesting
            self.send(self.error_message(None, PARSE_ERROR, "Parse error"))
            return
        response = self.handle(message)
        if response is not None:
            self.send(response)

    def send(self, message: Any) -> None:
        """Write one message as a compact JSON line."""
        data = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"
        self.write_raw(data)

    def write_raw(self, data: bytes) -> None:
        with self._write_lock:
            self.stdout.write(data)
            self.stdout.flush()

    # ------------------------------------------------------------ messages

    @property
    def server_info(self) -> dict:
        return {"name": self.name, "version": self.version}

    def capabilities(self) -> dict:
        return {"tools": {"listChanged": True}, "resources": {}, "prompts": {}}

    @property
    def modern_versions(self) -> list[str]:
        """Versions accepted in a modern request's ``_meta``."""
        return [v for v in self.supported_versions if v not in LEGACY_VERSIONS]

    def error_message(self, id: Any, code: int, message: str, data: Any = None) -> dict:
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        return {"jsonrpc": "2.0", "id": id, "error": error}

    def result_message(self, request: Request, result: dict) -> dict:
        """Wrap a result, adding the modern-era fields for modern requests."""
        if request.modern:
            result = {"resultType": "complete", **result}
            if request.method in CACHEABLE_METHODS and result["resultType"] == "complete":
                result.setdefault("ttlMs", 0)
                result.setdefault("cacheScope", "public")
            result["_meta"] = {META_SERVER_INFO: self.server_info, **result.get("_meta", {})}
        return {"jsonrpc": "2.0", "id": request.id, "result": result}

    def reply(self, request: Request, result: dict) -> None:
        """Answer ``request`` later (for handlers that returned ``None``)."""
        self.send(self.result_message(request, result))

    def reply_error(self, request: Request, code: int, message: str, data: Any = None) -> None:
        self.send(self.error_message(request.id, code, message, data))

    def unsupported_version(self, id: Any, requested: Any) -> dict:
        return self.error_message(
            id,
            UNSUPPORTED_VERSION,
            "Unsupported protocol version",
            {"supported": self.supported_versions, "requested": requested},
        )

    # ------------------------------------------------------------ dispatch

    def handle(self, message: Any) -> dict | None:
        """Handle one decoded message; return the response to send, if any."""
        if not isinstance(message, dict):
            return self.error_message(None, INVALID_REQUEST, "Invalid Request: expected a JSON object")
        method = message.get("method")
        if method is None:
            if "id" in message and ("result" in message or "error" in message):
                self.handle_response(message)
                return None
            return self.error_message(message.get("id"), INVALID_REQUEST, "Invalid Request")
        params = message.get("params", {})
        if not isinstance(method, str) or not isinstance(params, dict):
            return self.error_message(message.get("id"), INVALID_REQUEST, "Invalid Request")
        if "id" not in message:
            self.handle_notification(method, params)
            return None
        id = message["id"]
        if isinstance(id, bool) or not isinstance(id, (str, int)):
            return self.error_message(None, INVALID_REQUEST, "Invalid Request: bad id")
        return self.handle_request(id, method, params)

    def handle_request(self, id: str | int, method: str, params: dict) -> dict | None:
        if method == "initialize":
            return self.handle_initialize(id, params)
        meta = params.get("_meta")
        meta = meta if isinstance(meta, dict) else {}
        if self.era == "legacy" or self.opened_as is not None:
            modern = self.opened_as == "modern"
        else:
            modern = method == "server/discover" or META_VERSION in meta
        handler = self.methods.get(method)
        if handler is None or (method in MODERN_ONLY_METHODS and not modern):
            return self.error_message(id, METHOD_NOT_FOUND, f"Method not found: {method}")
        version = None
        if modern and method != "ping":  # ping predates the modern era; accept it bare
            version = meta.get(META_VERSION)
            if version is None:
                return self.error_message(id, INVALID_PARAMS, f"Missing _meta field {META_VERSION}")
            if version not in self.modern_versions:
                return self.unsupported_version(id, version)
            if not isinstance(meta.get(META_CAPABILITIES), dict):
                return self.error_message(id, INVALID_PARAMS, f"Missing _meta field {META_CAPABILITIES}")
            if method != "server/discover":
                self.opened_as = "modern"
        elif not modern and self.opened_as != "legacy" and method != "ping":
            return self.error_message(id, INVALID_REQUEST, "Invalid Request: server not initialized")
        request = Request(id, method, params, version)
        try:
            result = handler(request)
        except RpcError as exc:
            return self.error_message(id, exc.code, exc.message, exc.data)
        except Exception as exc:  # a bug in a handler must not kill the connection
            return self.error_message(id, INTERNAL_ERROR, f"Internal error: {exc!r}")
        return None if result is None else self.result_message(request, result)

    def handle_notification(self, method: str, params: dict) -> None:
        """Only cancellation of a listen stream matters; the rest is ignored
        (``notifications/initialized`` included: requests are accepted as soon
        as ``initialize`` has been answered)."""
        request_id = params.get("requestId")
        if method == "notifications/cancelled" and isinstance(request_id, (str, int)):
            self.listeners.pop(request_id, None)

    def handle_response(self, message: dict) -> None:
        """A client's answer to a server request; the demo sends none."""

    # -------------------------------------------------------- legacy session

    def handle_initialize(self, id: str | int, params: dict) -> dict:
        requested = params.get("protocolVersion")
        if self.opened_as == "modern":
            return self.error_message(
                id,
                UNSUPPORTED_VERSION,
                "Unsupported protocol version: this connection speaks the modern era",
                {"supported": self.modern_versions, "requested": requested},
            )
        if not isinstance(requested, str):
            return self.error_message(id, INVALID_PARAMS, "initialize needs a protocolVersion string")
        if self.opened_as == "legacy":
            return self.error_message(id, INVALID_REQUEST, "Invalid Request: already initialized")
        self.opened_as = "legacy"
        result = {
            "protocolVersion": requested if requested in LEGACY_VERSIONS else LATEST_LEGACY,
            "capabilities": self.capabilities(),
            "serverInfo": self.server_info,
            "instructions": self.instructions,
        }
        return {"jsonrpc": "2.0", "id": id, "result": result}

    # ------------------------------------------------------------- modern

    def handle_discover(self, request: Request) -> dict:
        return {
            "supportedVersions": self.supported_versions,
            "capabilities": self.capabilities(),
            "instructions": self.instructions,
        }

    def handle_listen(self, request: Request) -> None:
        """Open a listen stream: acknowledge it and keep the request open.

        It is never answered; it ends when the client cancels it. Only tool
        list changes are ever announced, so only that type is honoured.
        """
        wanted = request.params.get("notifications")
        if not isinstance(wanted, dict):
            raise RpcError(INVALID_PARAMS, "subscriptions/listen needs a notifications object")
        honoured = {"toolsListChanged": True} if wanted.get("toolsListChanged") is True else {}
        self.listeners[request.id] = honoured
        self.send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/subscriptions/acknowledged",
                "params": {"notifications": honoured, "_meta": {META_SUBSCRIPTION: request.id}},
            }
        )

    def announce_tools_changed(self) -> None:
        """Tell clients the tool list changed, in each era's way."""
        if self.opened_as == "legacy":
            self.send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        for subscription_id, honoured in list(self.listeners.items()):
            if honoured.get("toolsListChanged"):
                self.send(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/tools/list_changed",
                        "params": {"_meta": {META_SUBSCRIPTION: subscription_id}},
                    }
                )

    # -------------------------------------------------------------- tools

    def add_tool(self, name: str, handler: ToolHandler, *, description: str = "",
                 properties: dict | None = None, required: tuple[str, ...] = (),
                 output_schema: dict | None = None) -> None:
        """Register (or replace) a tool whose arguments form a flat object."""
        definition: dict[str, Any] = {
            "name": name,
            "description": description,
            "inputSchema": {"type": "object", "properties": properties or {}, "required": list(required)},
        }
        if output_schema is not None:
            definition["outputSchema"] = output_schema
        self.tools[name] = Tool(definition, handler)

    def _add_demo_tools(self) -> None:
        self.add_tool(
            "echo",
            lambda request, args: text_result(args["text"]),
            description="Return the given text unchanged.",
            properties={"text": {"type": "string", "description": "Text to echo."}},
            required=("text",),
        )
        self.add_tool(
            "add",
            self.tool_add,
            description="Add two integers.",
            properties={"a": {"type": "integer"}, "b": {"type": "integer"}},
            required=("a", "b"),
            output_schema={
                "type": "object",
                "properties": {"sum": {"type": "integer"}},
                "required": ["sum"],
            },
        )
        self.add_tool(
            "time",
            lambda request, args: text_result(
                datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
            ),
            description="Current UTC time in ISO 8601.",
        )

    @staticmethod
    def tool_add(request: Request, args: dict) -> dict:
        total = args["a"] + args["b"]
        # Structured output plus its JSON text for clients that ignore it.
        return text_result(json.dumps({"sum": total}, separators=(",", ":")), structured={"sum": total})

    def handle_tools_list(self, request: Request) -> dict:
        self.reject_cursor(request)
        return {"tools": [tool.definition for tool in self.tools.values()]}

    def handle_tools_call(self, request: Request) -> dict | None:
        name = request.params.get("name")
        tool = self.tools.get(name) if isinstance(name, str) else None
        if tool is None:
            raise RpcError(INVALID_PARAMS, f"Unknown tool: {name!r}")
        arguments = request.params.get("arguments", {})
        if not isinstance(arguments, dict):
            return text_result("arguments must be an object", is_error=True)
        problems = argument_problems(tool.definition["inputSchema"], arguments)
        if problems:
            # Bad argument values are tool execution errors, reported in-band.
            return text_result("; ".join(problems), is_error=True)
        return tool.handler(request, arguments)

    # ---------------------------------------------------------- resources

    @staticmethod
    def reject_cursor(request: Request) -> None:
        """Every list here fits on one page, so any cursor is invalid."""
        if "cursor" in request.params:
            raise RpcError(INVALID_PARAMS, "Invalid cursor")

    def handle_resources_list(self, request: Request) -> dict:
        self.reject_cursor(request)
        return {
            "resources": [
                {
                    "uri": README_URI,
                    "name": "readme",
                    "title": "Demo README",
                    "description": "What this server offers.",
                    "mimeType": "text/markdown",
                }
            ]
        }

    def handle_templates_list(self, request: Request) -> dict:
        self.reject_cursor(request)
        return {
            "resourceTemplates": [
                {
                    "uriTemplate": GREETING_PREFIX + "{name}",
                    "name": "greeting",
                    "description": "A greeting for the given name.",
                    "mimeType": "text/plain",
                }
            ]
        }

    def handle_resources_read(self, request: Request) -> dict:
        uri = request.params.get("uri")
        if not isinstance(uri, str):
            raise RpcError(INVALID_PARAMS, "resources/read needs a uri string")
        if uri == README_URI:
            return {"contents": [{"uri": uri, "mimeType": "text/markdown", "text": README_TEXT}]}
        name = uri[len(GREETING_PREFIX):] if uri.startswith(GREETING_PREFIX) else ""
        if name and "/" not in name:
            text = f"Hello, {urllib.parse.unquote(name)}!"
            return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": text}]}
        # The not-found code changed between eras (digest 1.3).
        code = INVALID_PARAMS if request.modern else LEGACY_RESOURCE_NOT_FOUND
        raise RpcError(code, "Resource not found", {"uri": uri})

    # ------------------------------------------------------------ prompts

    def handle_prompts_list(self, request: Request) -> dict:
        self.reject_cursor(request)
        return {
            "prompts": [
                {
                    "name": "greet",
                    "description": "Ask the model to greet someone.",
                    "arguments": [{"name": "name", "description": "Who to greet.", "required": True}],
                }
            ]
        }

    def handle_prompts_get(self, request: Request) -> dict:
        if request.params.get("name") != "greet":
            raise RpcError(INVALID_PARAMS, f"Unknown prompt: {request.params.get('name')!r}")
        arguments = request.params.get("arguments") or {}
        who = arguments.get("name") if isinstance(arguments, dict) else None
        if not isinstance(who, str):
            raise RpcError(INVALID_PARAMS, "Missing required argument 'name'")
        return {
            "description": "Greet someone.",
            "messages": [{"role": "user", "content": {"type": "text", "text": f"Please greet {who} warmly."}}],
        }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="albedo demo MCP server (stdio)")
    parser.add_argument("--era", choices=("dual", "legacy", "modern"), default="dual")
    args = parser.parse_args(argv)
    DemoServer(era=args.era).run()


if __name__ == "__main__":
    main()
