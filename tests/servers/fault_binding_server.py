"""The stdio fault server (tests/servers/fault_server.py) with two more switches, for the
binding and context-line tests of issue 11.

Flags (besides every flag of fault_server.py):

--instructions-json TEXT   the ``instructions`` the server sends (initialize and
                           ``server/discover``), given as a JSON string so that a test
                           can pass control codes and line breaks through argv
--bad-schema TOOL          ``tools/list`` gives TOOL an object ``inputSchema`` of more
                           than 64 KiB (a long description), which discovery keeps and
                           the advertised list leaves out: a tool hidden from the model
                           whose calls still work (issue 12's ``--hidden``)

Tools (besides fault_server.py's):

asks_anyway   modern: an ``input_required`` result asking for an ``elicitation/create``
              whatever the client declared (a server that does not check the
              request's client capabilities first); legacy: an error result
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fault_server import FaultServer, parse_args  # noqa: E402

from albedo_actors.demo.server import Request, text_result  # noqa: E402


class FaultBindingServer(FaultServer):
    def __init__(self, options, instructions: str | None, bad_schema: str | None = None) -> None:
        super().__init__(options)
        self.bad_schema = bad_schema
        if instructions is not None:
            self.instructions = instructions
        self.add_tool("asks_anyway", self.tool_asks_anyway, description="Modern: input_required whatever the client can do.")

    def handle_tools_list(self, request: Request) -> dict:
        listed = super().handle_tools_list(request)
        if self.bad_schema is None:
            return listed
        tools = [{**tool, "inputSchema": {**tool["inputSchema"], "description": "x" * 70_000}}
                 if tool.get("name") == self.bad_schema else tool for tool in listed["tools"]]
        return {**listed, "tools": tools}

    def tool_asks_anyway(self, request: Request, args: dict) -> dict:
        if not request.modern:
            return text_result("asks_anyway is modern-only", is_error=True)
        return {
            "resultType": "input_required",
            "inputRequests": {
                "confirm": {
                    "method": "elicitation/create",
                    "params": {"mode": "form", "message": "Proceed?",
                               "requestedSchema": {"type": "object", "properties": {}}},
                }
            },
        }


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    instructions = bad_schema = None
    if "--instructions-json" in argv:
        at = argv.index("--instructions-json")
        instructions = json.loads(argv[at + 1])
        del argv[at : at + 2]
    if "--bad-schema" in argv:
        at = argv.index("--bad-schema")
        bad_schema = argv[at + 1]
        del argv[at : at + 2]
    FaultBindingServer(parse_args(argv), instructions, bad_schema).run()


if __name__ == "__main__":
    main()
