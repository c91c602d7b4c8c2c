"""A 2026-07-28 stdio MCP server whose list pages carry chosen ``ttlMs`` (SEP-2549's tests).

::

    caching_server.py PLAN RECORD

It speaks the modern era only (the bundled demo server's dispatch). Each list request
reads ``PLAN`` (JSON) afresh, so a test changes what the next process or the next
request sees; every request is appended to ``RECORD`` as one JSON line
``{"method", "cursor", "state"}`` (flushed at once). The plan::

    {"tools/list": [PAGE, ...], "prompts/list": [PAGE, ...],
     "invalid": ["c1", ...],            # cursors answered -32602 (a cursor gone stale)
     "cursor_prefix": "d",              # the cursors are d1, d2, ... (default c)
     "state_first": ["tools/list", ...]}  # first answer input_required + requestState

A PAGE is ``{"names": [...], "ttlMs": N}`` (``ttlMs`` left out when absent from the
page); page K (from 0) answers the request with cursor ``cK`` (none for page 0) and names
``c{K+1}`` as its ``nextCursor`` unless it is the last (``c`` is ``cursor_prefix``). A method absent from the plan is
not offered.

Tools (never listed): ``quit`` answers, then the process exits (the client sees its
connection end and dials again on its next use); ``change`` announces a tools
list_changed on the open listen streams.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from albedo_actors.demo.server import INVALID_PARAMS, DemoServer, Request, RpcError, text_result  # noqa: E402


class CachingServer(DemoServer):
    def __init__(self, plan_path: str, record_path: str) -> None:
        super().__init__(era="modern")
        self.plan_path = plan_path
        self.record = open(record_path, "a", encoding="utf-8")  # noqa: SIM115 - open for the process's life
        self.tools.clear()
        self.add_tool("quit", self.tool_quit)
        self.add_tool("change", self.tool_change)
        self.methods["tools/list"] = lambda request: self.page(request, "tools/list", "tools")
        self.methods["prompts/list"] = lambda request: self.page(request, "prompts/list", "prompts")

    def plan(self) -> dict:
        with open(self.plan_path, encoding="utf-8") as handle:
            return json.load(handle)

    def capabilities(self) -> dict:
        plan = self.plan()
        caps: dict = {}
        if "tools/list" in plan:
            caps["tools"] = {"listChanged": True}
        if "prompts/list" in plan:
            caps["prompts"] = {}
        return caps

    def handle_request(self, id, method: str, params: dict):
        self.record.write(json.dumps({"method": method, "cursor": params.get("cursor"),
                                      "state": params.get("requestState")}) + "\n")
        self.record.flush()
        return super().handle_request(id, method, params)

    def page(self, request: Request, method: str, key: str) -> dict:
        plan = self.plan()
        cursor = request.params.get("cursor")
        if cursor in plan.get("invalid", ()):
            raise RpcError(INVALID_PARAMS, f"invalid cursor {cursor!r}")
        if method in plan.get("state_first", ()) and request.params.get("requestState") is None:
            return {"resultType": "input_required", "requestState": "again"}
        pages = plan[method]
        prefix = plan.get("cursor_prefix", "c")
        number = 0 if cursor is None else int(str(cursor)[len(prefix):])
        page = pages[number]
        if key == "tools":
            items = [{"name": name, "inputSchema": {"type": "object"}} for name in page["names"]]
        else:
            items = [{"name": name} for name in page["names"]]
        result: dict = {key: items}
        if "ttlMs" in page:
            result["ttlMs"] = page["ttlMs"]
        else:
            result["ttlMs"] = None  # removed below: the demo would add ttlMs 0
        if number + 1 < len(pages):
            result["nextCursor"] = f"{prefix}{number + 1}"
        return result

    def result_message(self, request: Request, result: dict) -> dict:
        message = super().result_message(request, result)
        if message["result"].get("ttlMs", 0) is None:
            del message["result"]["ttlMs"]  # the page has no ttlMs at all
        return message

    def tool_quit(self, request: Request, args: dict) -> None:
        self.reply(request, text_result("bye"))
        os._exit(0)

    def tool_change(self, request: Request, args: dict) -> dict:
        self.announce_tools_changed()
        return text_result("changed")


if __name__ == "__main__":
    CachingServer(sys.argv[1], sys.argv[2]).run()
