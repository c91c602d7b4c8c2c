"""A stdio MCP server whose every text carries terminal control sequences.

The bundled demo server (``albedo_actors.demo.server.DemoServer``) with the
:data:`HOSTILE` text put into everything a client might print: tool names and
descriptions, results, resource and prompt listings, JSON-RPC error messages, a
refused ``initialize``, a log message (``notifications/message`` after
``notifications/initialized``) and its stderr. Standard library and the demo server only.

:data:`HOSTILE` holds an OSC window-title sequence (``ESC ] 0 ; ... BEL``), a clear
screen (``ESC [ 2 J``), BEL, a C1 CSI (U+009B), DEL, NUL, backspace, CR, a bidi
override (U+202E) and a bidi isolate (U+2066 ... U+2069): what a terminal would obey
or a reader would be misled by if it were printed raw.

Flags:

--era dual|legacy|modern   as the demo server (default legacy: initialize, then the tools)
--refuse-initialize        answer ``initialize`` and ``server/discover`` with a JSON-RPC
                           error whose message is hostile (the server is left out)
--stderr-and-exit N        write hostile lines to stderr and exit with code N at once
--hostile-schema           also list ``find`` + HOSTILE, whose inputSchema holds HOSTILE in a
                           property name, its title and description, an enum value and a
                           default (for the search tool's escaping)

Tools: ``HOSTILE_TOOL`` (its name is hostile; answers hostile text), ``shout`` (a text
block of several hostile lines, a resource_link and an embedded resource, hostile
too), ``fail`` (a JSON-RPC error with a hostile message and data), ``tool_error``
(``isError`` with hostile text), ``echo`` (the demo's); ``twice`` is listed twice and
``bad_schema`` has an invalid schema (both with hostile text in their names, so the
warnings about them quote it).
"""

from __future__ import annotations

import argparse
import sys

from albedo_actors.demo.server import INVALID_PARAMS, DemoServer, Request, RpcError, text_result

HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x07\x9b31m\x7f\x00\x08\rX\u202eevil\u2066iso\u2069"
HOSTILE_TOOL = "t" + HOSTILE
TWICE = "twice" + HOSTILE
BAD_SCHEMA = "bad_schema" + HOSTILE
RESOURCE_URI = "text://r/" + HOSTILE
PROMPT = "p" + HOSTILE
FIND_TOOL = "find" + HOSTILE
SERVER_ERROR_CODE = -32000


class TextServer(DemoServer):
    name = "albedo-fault-text" + HOSTILE
    instructions = "Instructions " + HOSTILE

    def __init__(self, options: argparse.Namespace) -> None:
        super().__init__(era=options.era)
        self.refuse = options.refuse_initialize
        self.tools.clear()
        described = f"Description {HOSTILE} end."
        self.add_tool(HOSTILE_TOOL, lambda request, args: text_result("result " + HOSTILE), description=described)
        self.add_tool("shout", self.tool_shout, description=described)
        self.add_tool("fail", self.tool_fail, description=described)
        self.add_tool("tool_error", lambda request, args: text_result("failed " + HOSTILE, is_error=True),
                      description=described)
        self.add_tool("echo", lambda request, args: text_result(args["text"]), description=described,
                      properties={"text": {"type": "string"}}, required=("text",))
        if options.hostile_schema:
            self.add_tool(FIND_TOOL, lambda request, args: text_result("found " + HOSTILE),
                          description=f"Find things {HOSTILE} by name.",
                          properties={"q" + HOSTILE: {"type": "string", "title": "t" + HOSTILE, "description": "d" + HOSTILE,
                                                      "enum": ["e" + HOSTILE], "default": "e" + HOSTILE}})

    def handle_request(self, id: str | int, method: str, params: dict) -> dict | None:
        if self.refuse and method in ("initialize", "server/discover"):
            return self.error_message(id, SERVER_ERROR_CODE, "refused " + HOSTILE)
        return super().handle_request(id, method, params)

    def handle_notification(self, method: str, params: dict) -> None:
        if method == "notifications/initialized":  # a log message the client may log
            self.send({"jsonrpc": "2.0", "method": "notifications/message",
                       "params": {"level": "info", "data": "log " + HOSTILE}})
        super().handle_notification(method, params)

    def handle_tools_list(self, request: Request) -> dict:
        tools = [tool.definition for tool in self.tools.values()]
        twice = {"name": TWICE, "description": HOSTILE, "inputSchema": {"type": "object"}}
        bad = {"name": BAD_SCHEMA, "description": HOSTILE, "inputSchema": {"type": "string"}}
        return {"tools": [*tools, twice, twice, bad]}

    @staticmethod
    def tool_shout(request: Request, args: dict) -> dict:
        return {
            "content": [
                {"type": "text", "text": f"line one {HOSTILE}\nline two {HOSTILE}\ttabbed"},
                {"type": "resource_link", "uri": RESOURCE_URI, "name": HOSTILE},
                {"type": "resource", "resource": {"uri": RESOURCE_URI, "text": "embedded " + HOSTILE}},
                {"type": "image", "data": "AAAA", "mimeType": "image/" + HOSTILE},
            ]
        }

    @staticmethod
    def tool_fail(request: Request, args: dict) -> dict:
        raise RpcError(SERVER_ERROR_CODE, "boom " + HOSTILE, {"why": HOSTILE})

    def handle_resources_list(self, request: Request) -> dict:
        return {"resources": [{"uri": RESOURCE_URI, "name": "r " + HOSTILE, "mimeType": "text/" + HOSTILE}]}

    def handle_templates_list(self, request: Request) -> dict:
        return {"resourceTemplates": []}

    def handle_resources_read(self, request: Request) -> dict:
        if request.params.get("uri") != RESOURCE_URI:
            raise RpcError(INVALID_PARAMS, "not found " + HOSTILE)
        return {"contents": [{"uri": RESOURCE_URI, "mimeType": "text/plain", "text": "read " + HOSTILE}]}

    def handle_prompts_list(self, request: Request) -> dict:
        return {"prompts": [{"name": PROMPT, "description": HOSTILE, "arguments": [{"name": "a" + HOSTILE}]}]}

    def handle_prompts_get(self, request: Request) -> dict:
        return {"messages": [{"role": "user", "content": {"type": "text", "text": "prompt " + HOSTILE}}]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--era", choices=("dual", "legacy", "modern"), default="legacy")
    parser.add_argument("--refuse-initialize", action="store_true")
    parser.add_argument("--stderr-and-exit", type=int, metavar="N")
    parser.add_argument("--hostile-schema", action="store_true")
    options = parser.parse_args(argv)
    if options.stderr_and_exit is not None:
        sys.stderr.write(f"starting {HOSTILE}\nfatal: {HOSTILE}\n")
        sys.stderr.flush()
        sys.exit(options.stderr_and_exit)
    TextServer(options).run()


if __name__ == "__main__":
    main()
