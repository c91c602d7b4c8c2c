"""A hostile MCP server (2025-11-25 era) whose text is not text, for test_hostile_text.py.

Stdlib only. It writes its answers as raw JSON text, so that it can send what a
well-behaved encoder never would: lone UTF-16 surrogate escapes, a million empty
objects, pages of empty objects. Over stdio by default; with ``--http PORT`` it is a
streamable HTTP server on 127.0.0.1 (JSON answers, no session).

Usage: hostile_text_server.py FAULT [--pages N] [--page-bytes B] [--http PORT]

Faults (every other message is answered normally; ``server/discover`` gets -32601, so
the client opens with ``initialize``):

surrogate-description  tools/list: a tool whose description is ``"x\\ud800y"``
surrogate-key          tools/list: a tool whose inputSchema has a key ``"k\\udfff"``
surrogate-result       tools/call: a result whose text holds ``\\udc00``
surrogate-error        tools/call: an error whose message holds ``\\ud800``
surrogate-request-id   tools/call: first a request ``ping`` with id ``"x\\ud800y"``; the
                       call itself is never answered
surrogate-method       tools/call: first a notification whose method holds ``\\ud800``;
                       the call itself is never answered
million-objects        tools/list: one page holding 1,000,000 empty objects
empty-pages            tools/list: ``--pages`` pages (default 40) of ``--page-bytes``
                       bytes (default 1 MiB) of empty objects, each with a next cursor
flood-requests         tools/call ``flood`` {count}: send ``count`` ``elicitation/create``
                       requests at once, wait for every answer, then answer the call
                       with ``{"results": R, "errors": E}`` as JSON text
huge-schema            tools/list: besides ``echo``, ``huge`` (an inputSchema of about 60 KiB,
                       nearly all of it prose with control sequences and bidi overrides in
                       its property descriptions, titles, ``$comment`` and ``examples``) and
                       ``wide`` (60 KiB: 40 parameters with 1,100-character descriptions);
                       tools/call of either answers its arguments as JSON text
markup                 tools/list: besides ``echo``, a tool whose name, title and description
                       are HTML markup (:data:`MARKUP`: an element that would change the
                       page's title), and ``initialize`` names the server with it too: for
                       the settings page, which must show it as text
markup-exit            write :data:`MARKUP` to stderr and exit with code 3 at once (a
                       server that is down, whose error and stderr are markup)
none                   a normal server with one tool ``echo``
"""

from __future__ import annotations

import argparse
import http.server
import json
import sys
import threading

ECHO = '{"name":"echo","description":"Echo the text.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}}}}'
SURROGATE_DESCRIPTION = '{"name":"bad","description":"x\\ud800y","inputSchema":{"type":"object"}}'
SURROGATE_KEY = '{"name":"bad","inputSchema":{"type":"object","properties":{"k\\udfff":{"type":"string"}}}}'
# Prose with terminal control sequences and bidi controls, repeated to any length.
PROSE = "Describe \x1b]0;pwned\x07the path\x1b[2J \u202eevil\u2066iso\u2069 and \x9b31m more; "

# HTML that, if a page ever used it as markup, would add an element and change the title.
MARKUP = '<img id="injected" src="x" onerror="document.title=\'pwned\'"><b id="injected-b">bold</b>'
MARKUP_TOOL = {"name": MARKUP, "title": "Title " + MARKUP, "description": "Description " + MARKUP,
               "inputSchema": {"type": "object", "properties": {"q": {"type": "string", "description": MARKUP}}}}


def prose(length: int) -> str:
    return (PROSE * (length // len(PROSE) + 1))[:length]


HUGE = {"name": "huge", "description": "A tool whose inputSchema is mostly prose.", "inputSchema": {
    "type": "object", "title": prose(1_500), "$comment": prose(3_000),
    "properties": {
        "path": {"type": "string", "description": prose(15_000), "examples": [prose(2_250), "/tmp/x"]},
        "mode": {"type": "string", "enum": ["fast", "slow"], "title": prose(750), "description": prose(7_500),
                 "x-enumDescriptions": [prose(1_500), prose(1_500)]},
        "options": {"type": "object", "description": prose(1_500),
                    "properties": {"depth": {"type": "integer", "minimum": 0, "description": prose(9_000)}}},
    },
    "required": ["path"],
}}
WIDE = {"name": "wide", "description": "A tool of forty parameters.", "inputSchema": {
    "type": "object", "properties": {f"p{i}": {"type": "string", "description": prose(1_100)} for i in range(40)},
    "required": ["p0"],
}}


class Hostile:
    def __init__(self, options: argparse.Namespace, write) -> None:
        self.fault = options.fault
        self.pages = options.pages
        self.page_bytes = options.page_bytes
        self.write = write  # one raw JSON text (a str) per message
        self.next_id = 0
        self.asked: dict[int, threading.Event] = {}
        self.answers = {"results": 0, "errors": 0}
        self.lock = threading.Lock()

    def handle(self, message: dict) -> str | None:
        """The raw JSON text answering ``message``, or None (no answer, or written already)."""
        method, id_ = message.get("method"), message.get("id")
        if method is None:
            self._on_response(message)
            return None
        if id_ is None:
            return None  # a notification
        raw_id = json.dumps(id_)
        if method == "initialize":
            name = json.dumps(MARKUP if self.fault == "markup" else "hostile")
            return ('{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},'
                    '"serverInfo":{"name":%s,"version":"1"}}}' % (raw_id, name))
        if method == "ping":
            return '{"jsonrpc":"2.0","id":%s,"result":{}}' % raw_id
        if method == "tools/list":
            return self._tools_list(raw_id, message.get("params") or {})
        if method == "tools/call":
            return self._tools_call(raw_id, message.get("params") or {})
        return '{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"Method not found"}}' % raw_id

    def _tools_list(self, raw_id: str, params: dict) -> str:
        if self.fault == "surrogate-description":
            tools = f"[{ECHO},{SURROGATE_DESCRIPTION}]"
        elif self.fault == "surrogate-key":
            tools = f"[{ECHO},{SURROGATE_KEY}]"
        elif self.fault == "million-objects":
            tools = "[" + ",".join(["{}"] * 1_000_000) + "]"
        elif self.fault == "empty-pages":
            page = int(str(params.get("cursor") or "p0")[1:])
            count = max(1, self.page_bytes // 3)
            tools = "[" + ",".join(["{}"] * count) + "]"
            more = f',"nextCursor":"p{page + 1}"' if page + 1 < self.pages else ""
            return '{"jsonrpc":"2.0","id":%s,"result":{"tools":%s%s}}' % (raw_id, tools, more)
        elif self.fault == "huge-schema":
            tools = f"[{ECHO},{json.dumps(HUGE)},{json.dumps(WIDE)}]"
        elif self.fault == "markup":
            tools = f"[{ECHO},{json.dumps(MARKUP_TOOL)}]"
        else:
            tools = f"[{ECHO}]"
        return '{"jsonrpc":"2.0","id":%s,"result":{"tools":%s}}' % (raw_id, tools)

    def _tools_call(self, raw_id: str, params: dict) -> str | None:
        arguments = params.get("arguments") or {}
        if self.fault == "surrogate-result":
            return '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"a\\udc00b"}]}}' % raw_id
        if self.fault == "surrogate-error":
            return '{"jsonrpc":"2.0","id":%s,"error":{"code":-32000,"message":"bad \\ud800 news"}}' % raw_id
        if self.fault == "surrogate-request-id":
            self.write('{"jsonrpc":"2.0","id":"x\\ud800y","method":"ping"}')
            return None
        if self.fault == "surrogate-method":
            self.write('{"jsonrpc":"2.0","method":"notifications/x\\ud800"}')
            return None
        if self.fault == "flood-requests" and params.get("name") == "flood":
            threading.Thread(target=self._flood, args=(raw_id, int(arguments.get("count", 1))), daemon=True).start()
            return None
        if self.fault == "huge-schema" and params.get("name") in ("huge", "wide"):
            text = json.dumps(json.dumps(arguments, sort_keys=True))
            return '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":%s}]}}' % (raw_id, text)
        text = json.dumps(str(arguments.get("text", "")))
        return '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":%s}]}}' % (raw_id, text)

    def _flood(self, raw_id: str, count: int) -> None:
        events = []
        for _ in range(count):
            with self.lock:
                self.next_id += 1
                asked = self.next_id
                self.asked[asked] = event = threading.Event()
            events.append(event)
            self.write(json.dumps({"jsonrpc": "2.0", "id": asked, "method": "elicitation/create",
                                   "params": {"mode": "form", "message": "ok?", "requestedSchema": {"type": "object", "properties": {}}}}))
        for event in events:
            event.wait(60)
        self.write('{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":%s}]}}'
                   % (raw_id, json.dumps(json.dumps(self.answers))))

    def _on_response(self, message: dict) -> None:
        with self.lock:
            event = self.asked.pop(message.get("id"), None) if type(message.get("id")) is int else None
            if event is None:
                return
            self.answers["errors" if "error" in message else "results"] += 1
        event.set()


def serve_stdio(options: argparse.Namespace) -> None:
    out = sys.stdout.buffer
    lock = threading.Lock()

    def write(text: str) -> None:
        with lock:
            out.write(text.encode("utf-8") + b"\n")
            out.flush()

    server = Hostile(options, write)
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        answer = server.handle(json.loads(line))
        if answer is not None:
            write(answer)


def serve_http(options: argparse.Namespace) -> None:
    def write(text: str) -> None:
        raise RuntimeError("the HTTP server sends nothing outside a response")

    hostile = Hostile(options, write)

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            answer = hostile.handle(json.loads(body))
            if answer is None:
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = answer.encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_DELETE = do_GET

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", options.http), Handler)
    print(f"listening {httpd.server_address[1]}", flush=True)
    httpd.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("fault")
    parser.add_argument("--pages", type=int, default=40)
    parser.add_argument("--page-bytes", type=int, default=1 << 20)
    parser.add_argument("--http", type=int, metavar="PORT")
    options = parser.parse_args(argv)
    if options.fault == "markup-exit":
        sys.stderr.write(f"hostile: {MARKUP}\n")
        sys.stderr.flush()
        sys.exit(3)
    if options.http is not None:
        serve_http(options)
    else:
        serve_stdio(options)


if __name__ == "__main__":
    main()
