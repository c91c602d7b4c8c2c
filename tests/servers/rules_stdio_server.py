"""A raw stdio MCP server for the client-rules pack (tests/rules/), standard library only.

Run as ``python rules_stdio_server.py LOG [FLAG ...]``. Every launch appends
``{"launch": pid}`` to the JSON-lines file LOG, then every message it reads, as read.

It speaks 2026-07-28 (``server/discover``, ``_meta`` on every request, ``resultType`` on
every result) and, with the flag ``legacy``, 2025-11-25 too (``initialize``); without it
``initialize`` is refused with -32601. Flags:

- ``upv-once``: the first ``server/discover`` of each launch is refused with
  UnsupportedProtocolVersionError (-32022) listing 2026-07-28; later ones are answered.
- ``ack-tools-only``: a ``subscriptions/listen`` is acknowledged with only
  ``toolsListChanged``, whatever it asked for.
- ``prompts``: it lists prompts too, with ``listChanged``.

Tools:

- ``echo``: returns its arguments' ``text``.
- ``hang``: never answers (a ``notifications/cancelled`` for it is logged as read).
- ``exit``: the process exits at once, unanswered.
- ``ask``: sends the server request named by ``method`` (id ``"srv-1"``, with no
  request of the client's behind it: it is sent after the call is answered) and logs
  the client's answer as read.
- ``announce``: answers, then sends ``notifications/tools/list_changed`` whose
  ``_meta.subscriptionId`` is the listen request's id (``sid`` "own"), that id plus
  1000 ("foreign") or missing ("none"), and adds the tool ``added`` to its list.
- ``shape``: returns ``structuredContent`` ``arguments["content"]``; its outputSchema
  wants ``{"n": integer}``.
- ``deep``: an outputSchema 40 levels deep.
- ``typed``: its inputSchema wants ``{"count": integer}``; returns its arguments as JSON text.

``resources/read`` of ``missing://x`` is refused with -32002 (the older not-found code).
"""

from __future__ import annotations

import json
import os
import sys

MODERN = "2026-07-28"
SUB = "io.modelcontextprotocol/subscriptionId"


def main() -> None:
    log_path, flags = sys.argv[1], set(sys.argv[2:])
    log = open(log_path, "a", encoding="utf-8")

    def record(value: object) -> None:
        log.write(json.dumps(value) + "\n")
        log.flush()

    def send(message: dict) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    record({"launch": os.getpid()})
    state = {"discovered": 0, "listen": None, "added": False}
    deep: dict = {"type": "integer"}
    for _ in range(40):
        deep = {"type": "object", "properties": {"a": deep}}

    def tools() -> list:
        listed = [
            {"name": name, "inputSchema": {"type": "object"}} for name in ("echo", "hang", "exit", "ask", "announce")
        ]
        listed.append({"name": "shape", "inputSchema": {"type": "object"},
                       "outputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}})
        listed.append({"name": "deep", "inputSchema": {"type": "object"}, "outputSchema": deep})
        listed.append({"name": "typed", "inputSchema": {"type": "object", "properties": {"count": {"type": "integer"}},
                                                        "required": ["count"]}})
        if state["added"]:
            listed.append({"name": "added", "inputSchema": {"type": "object"}})
        return listed

    capabilities: dict = {"tools": {"listChanged": True}, "resources": {}}
    if "prompts" in flags:
        capabilities["prompts"] = {"listChanged": True}

    def result(id_, value: dict) -> None:
        send({"jsonrpc": "2.0", "id": id_, "result": {"resultType": "complete", **value}})

    def error(id_, code: int, text: str, data: object = None) -> None:
        body: dict = {"code": code, "message": text}
        if data is not None:
            body["data"] = data
        send({"jsonrpc": "2.0", "id": id_, "error": body})

    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        record(message)
        method, id_ = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if method is None or id_ is None:
            continue  # a response or a notification: logged above
        if method == "server/discover":
            state["discovered"] += 1
            if "upv-once" in flags and state["discovered"] == 1:
                error(id_, -32022, "Unsupported protocol version", {"supported": [MODERN], "requested": "x"})
                continue
            result(id_, {"supportedVersions": [MODERN], "capabilities": capabilities,
                         "serverInfo": {"name": "rules", "version": "1"}})
        elif method == "initialize":
            if "legacy" not in flags:
                error(id_, -32601, "Method not found: initialize")
                continue
            send({"jsonrpc": "2.0", "id": id_, "result": {"protocolVersion": "2025-11-25", "capabilities": capabilities,
                                                           "serverInfo": {"name": "rules", "version": "1"}}})
        elif method == "subscriptions/listen":
            state["listen"] = id_
            wanted = params.get("notifications") or {}
            honoured = {"toolsListChanged": True} if "ack-tools-only" in flags else dict(wanted)
            send({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                  "params": {"notifications": honoured, "_meta": {SUB: id_}}})
        elif method == "tools/list":
            result(id_, {"tools": tools()})
        elif method == "prompts/list":
            result(id_, {"prompts": []})
        elif method == "resources/list":
            result(id_, {"resources": []})
        elif method == "resources/templates/list":
            result(id_, {"resourceTemplates": []})
        elif method == "resources/read":
            if params.get("uri") == "missing://x":
                error(id_, -32002, "Resource not found", {"uri": "missing://x"})
            else:
                result(id_, {"contents": [{"uri": params.get("uri"), "text": "here"}]})
        elif method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments") or {}
            if name == "echo":
                result(id_, {"content": [{"type": "text", "text": str(arguments.get("text", ""))}]})
            elif name == "hang":
                pass
            elif name == "exit":
                os._exit(3)
            elif name == "ask":
                result(id_, {"content": [{"type": "text", "text": "asked"}]})
                send({"jsonrpc": "2.0", "id": "srv-1", "method": arguments["method"], "params": {}})
            elif name == "announce":
                result(id_, {"content": [{"type": "text", "text": "announced"}]})
                sid = {"own": state["listen"], "foreign": (state["listen"] or 0) + 1000}.get(arguments.get("sid"))
                state["added"] = True
                send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
                      "params": {"_meta": {SUB: sid}} if sid is not None else {}})
            elif name == "shape":
                result(id_, {"content": [{"type": "text", "text": "shaped"}], "structuredContent": arguments.get("content")})
            elif name == "typed":
                result(id_, {"content": [{"type": "text", "text": json.dumps(arguments)}]})
            elif name == "deep":
                result(id_, {"content": [{"type": "text", "text": "deep"}], "structuredContent": {"a": "not checked"}})
            else:
                error(id_, -32602, f"Unknown tool: {name}")
        else:
            error(id_, -32601, f"Method not found: {method}")


if __name__ == "__main__":
    main()
