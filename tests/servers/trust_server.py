"""A stdio MCP server whose tools and instructions come from a JSON file, for the tool
integrity tests (catalogue/trust.py).

Usage: ``trust_server.py STATE RECORD``. ``STATE`` holds ``{"tools": [definition, ...],
"instructions": text or null}`` and is read at every ``tools/list`` and every
``initialize``/``server/discover``: a test rewrites it to change what the server says.
The ``announce`` tool (always listed) sends ``notifications/tools/list_changed``. A
call of any listed tool appends its name to ``RECORD`` (one line) and answers
``"NAME called"``; a test reads it to see that a held tool's call never arrived.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from albedo_actors.demo.server import DemoServer, Request, text_result  # noqa: E402


class TrustServer(DemoServer):
    name = "trust-server"

    def __init__(self, state: str, record: str) -> None:
        self.state, self.record = state, record
        super().__init__(era="legacy")

    def _read(self) -> dict:
        with open(self.state, encoding="utf-8") as file:
            return json.load(file)

    @property  # type: ignore[override]
    def instructions(self) -> str | None:  # read at initialize and server/discover
        return self._read().get("instructions")

    def _add_demo_tools(self) -> None:
        self.add_tool("announce", self.tool_announce, description="Announce that the tool list changed.")

    def handle_tools_list(self, request: Request) -> dict:
        self.reject_cursor(request)
        listed = self._read().get("tools", [])
        return {"tools": [self.tools["announce"].definition, *listed]}

    def handle_tools_call(self, request: Request) -> dict | None:
        name = request.params.get("name")
        if name != "announce" and any(tool.get("name") == name for tool in self._read().get("tools", [])):
            with open(self.record, "a", encoding="utf-8") as file:
                file.write(f"{name}\n")
            return text_result(f"{name} called")
        return super().handle_tools_call(request)

    def tool_announce(self, request: Request, args: dict) -> dict:
        self.announce_tools_changed()
        return text_result("announced")


if __name__ == "__main__":
    TrustServer(sys.argv[1], sys.argv[2]).run()
