"""Fault-injecting stdio MCP server for the client's tests.

It is the bundled demo server (``albedo_actors.demo.server.DemoServer``) plus
switches that make it misbehave. Behaviour depends only on the flags and on
the messages received, never on timing (except the ``sleep`` tool and
``--delay-start``, which are about time).

Flags:

--era dual|legacy|modern     which protocol era(s) to speak (default dual)
--probe answer|silent|error|exit
                             how to treat ``server/discover``: answer it (default),
                             ignore it forever, answer -32601, or exit with code 1
                             when it is the very first message (a process whose first
                             message is ``initialize`` works normally)
--discover-versions V,V      the ``supportedVersions`` advertised; modern requests are
                             accepted with any non-legacy version in the list
--unsupported-versions V,V   answer every ``server/discover`` with -32022 and
                             ``data.supported`` = V,V; other modern requests are
                             accepted with any non-legacy version in the list
--ignore-eof-and-term        ignore SIGTERM and keep running after stdin EOF
                             (only SIGKILL ends it)
--pages endless|repeat|N     paginate ``tools/list`` with listing-only tools ``page_K``,
                             one per page: a new cursor forever, the same cursor
                             every time, or exactly N pages
--record FILE                append every received line to FILE, flushed at once
--stderr-and-exit N          print a few lines to stderr and exit with code N at once
--delay-start SECONDS        sleep before reading stdin
--exit-on METHOD             exit (status 1, no answer) when a request for METHOD
                             arrives, e.g. ``tools/list``: a discovery cut short
--initialize-version V       answer ``initialize`` with protocolVersion V whatever the
                             client asked for (an older revision, or one nobody knows);
                             the session then works as usual

Tools (besides the demo's echo, add, time):

die                   exit with code 3 without answering
hang                  never answer
sleep {seconds}       answer after that long (not at all if cancelled meanwhile)
ask                   legacy only: send the client ``roots/list``,
                      ``sampling/createMessage`` and ``ping``, then answer with a JSON
                      text ``{method: {"result": ...} or {"error": ...}}`` of its replies
big {mib}             answer with a single line of about that many MiB
noline {mib}          write that many MiB without a newline, then never write again
malformed {kind}      write a bad line, then the normal answer (see MALFORMED_KINDS)
env                   JSON text of the environment
argv                  JSON text ``{"argv": [...], "cwd": ...}``
add_tool {name}       add a tool ``name`` and announce it (legacy session:
                      ``notifications/tools/list_changed``; modern: on open listen streams)
state_only {rounds?}  modern: ``input_required`` with only ``requestState`` for
                      ``rounds`` rounds (default 1), then complete
needs_input           modern: ``input_required`` asking for an ``elicitation/create``
                      under the key ``confirm``; completes with the response as JSON
                      text; -32021 if the request lacks the elicitation capability
notify_flood {count}  send that many ``notifications/message`` and then answer
typed {text, ...}     answer the arguments it was sent, as JSON text; one parameter of
                      each JSON type (count integer, ratio number, on boolean, opts
                      object, tags array of strings, maybe integer or null, mode an
                      enum, level an integer from 1 to 5)
strict {text}         the same, with ``additionalProperties: false``
p_tick, p_flood, p_hostile  progress notifications (tests/servers/progress_tools.py)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from typing import Any

from albedo_actors.demo.server import (
    INVALID_PARAMS,
    META_CAPABILITIES,
    META_VERSION,
    METHOD_NOT_FOUND,
    MISSING_CLIENT_CAPABILITY,
    DemoServer,
    Request,
    RpcError,
    text_result,
)

try:
    import progress_tools  # run as a script: tests/servers is on sys.path
except ImportError:
    from servers import progress_tools

MIB = 1024 * 1024

# An id no request ever carries (malformed kind=unknownid).
UNKNOWN_RESPONSE_ID = "fault-server-unknown-id"

MALFORMED_KINDS = {
    "utf8": "a notification line containing invalid UTF-8 bytes",
    "json": "a line that is not JSON",
    "deep": "100000 nested JSON arrays",
    "hugeint": "a response for this request whose result holds a 100000-digit number",
    "notobject": "a JSON array line and a JSON number line",
    "badid": "a response whose id is the string form of the request id",
    "dupe": "no bad line: the normal answer is sent twice",
    "unknownid": "a response with an id the client never used",
}


def version_list(text: str) -> list[str]:
    return [v for v in text.split(",") if v]


class FaultServer(DemoServer):
    name = "albedo-fault"
    instructions = "Fault-injecting test server built on the albedo demo server."

    def __init__(self, options: argparse.Namespace) -> None:
        super().__init__(era=options.era)
        self.probe = options.probe
        self.pages = options.pages
        self.reject_discover = options.unsupported_versions is not None
        if options.discover_versions is not None:
            self.supported_versions = version_list(options.discover_versions)
        if options.unsupported_versions is not None:
            self.supported_versions = version_list(options.unsupported_versions)
        self.record = open(options.record, "ab", buffering=0) if options.record else None
        self.exit_on = options.exit_on
        self.initialize_version = options.initialize_version
        self.messages_seen = 0
        self.muted = False  # set by noline: the output stream is left stuck
        self.sleeping: dict[str | int, Request] = {}  # sleep calls still running
        # ask: ids of the server's own requests -> (tool call, method); answers so far
        self.next_server_id = 0
        self.asked: dict[int, tuple[Request, str]] = {}
        self.ask_answers: dict[str | int, dict] = {}
        self._add_fault_tools()

    # -------------------------------------------------------------- I/O

    def handle_line(self, line: bytes) -> None:
        if self.record is not None and line.strip():
            self.record.write(line.rstrip(b"\r\n") + b"\n")
        super().handle_line(line)

    def write_raw(self, data: bytes) -> None:
        if not self.muted:
            super().write_raw(data)

    # --------------------------------------------------------- dispatch

    def handle(self, message: Any) -> dict | None:
        self.messages_seen += 1
        if (
            self.probe == "exit"
            and self.messages_seen == 1
            and isinstance(message, dict)
            and message.get("method") == "server/discover"
        ):
            sys.exit(1)
        return super().handle(message)

    def handle_request(self, id: str | int, method: str, params: dict) -> dict | None:
        if method == self.exit_on:
            sys.exit(1)
        if method == "server/discover":
            if self.probe == "silent":
                return None
            if self.probe == "error":
                return self.error_message(id, METHOD_NOT_FOUND, "Method not found")
            if self.reject_discover:
                meta = params.get("_meta")
                requested = meta.get(META_VERSION) if isinstance(meta, dict) else None
                return self.unsupported_version(id, requested)
        return super().handle_request(id, method, params)

    def handle_initialize(self, id: str | int, params: dict) -> dict:
        response = super().handle_initialize(id, params)
        if self.initialize_version is not None and "result" in response:
            response["result"]["protocolVersion"] = self.initialize_version
        return response

    def handle_notification(self, method: str, params: dict) -> None:
        request_id = params.get("requestId")
        if method == "notifications/cancelled" and isinstance(request_id, (str, int)):
            self.sleeping.pop(request_id, None)
        super().handle_notification(method, params)

    def handle_response(self, message: dict) -> None:
        # The server's own request ids are plain ints (not bools, not strings).
        entry = self.asked.pop(message["id"], None) if type(message["id"]) is int else None
        if entry is None:
            return
        call, method = entry
        answers = self.ask_answers[call.id]
        answers[method] = {"error": message["error"]} if "error" in message else {"result": message["result"]}
        if len(answers) == 3:
            del self.ask_answers[call.id]
            self.reply(call, text_result(json.dumps(answers)))

    # ------------------------------------------------------- tools/list

    def handle_tools_list(self, request: Request) -> dict:
        if self.pages is None:
            return super().handle_tools_list(request)
        cursor = request.params.get("cursor")
        if self.pages == "repeat":
            return {"tools": [page_tool(1)], "nextCursor": "again"}
        if cursor is None:
            page = 1
        elif isinstance(cursor, str) and cursor.startswith("page-") and cursor[5:].isdigit():
            page = int(cursor[5:])
        else:
            raise RpcError(INVALID_PARAMS, "Invalid cursor")
        if self.pages == "endless":
            return {"tools": [page_tool(page)], "nextCursor": f"page-{page + 1}"}
        last = int(self.pages)
        if not 1 <= page <= last:
            raise RpcError(INVALID_PARAMS, "Invalid cursor")
        result = {"tools": [page_tool(page)]}
        if page < last:
            result["nextCursor"] = f"page-{page + 1}"
        return result

    # ------------------------------------------------------------ tools

    def _add_fault_tools(self) -> None:
        number = {"type": "number"}
        self.add_tool("die", lambda request, args: os._exit(3), description="Exit with code 3 without answering.")
        self.add_tool("hang", lambda request, args: None, description="Never answer.")
        self.add_tool("sleep", self.tool_sleep, description="Answer after some seconds.",
                      properties={"seconds": number}, required=("seconds",))
        self.add_tool("ask", self.tool_ask,
                      description="Legacy: ask the client roots/list, sampling/createMessage and ping.")
        self.add_tool("big", self.tool_big, description="Answer with one line of about mib MiB.",
                      properties={"mib": number}, required=("mib",))
        self.add_tool("noline", self.tool_noline, description="Write mib MiB with no newline, then go quiet.",
                      properties={"mib": number}, required=("mib",))
        self.add_tool("malformed", self.tool_malformed, description="Write a malformed line, then answer.",
                      properties={"kind": {"type": "string", "enum": list(MALFORMED_KINDS)}}, required=("kind",))
        self.add_tool("env", lambda request, args: text_result(json.dumps(dict(os.environ))),
                      description="The server's environment as JSON.")
        self.add_tool("argv", lambda request, args: text_result(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd()})),
                      description="The server's arguments and working directory as JSON.")
        self.add_tool("add_tool", self.tool_add_tool, description="Add a tool and announce the change.",
                      properties={"name": {"type": "string"}}, required=("name",))
        self.add_tool("state_only", self.tool_state_only, description="Modern: state-only input_required rounds.",
                      properties={"rounds": {"type": "integer"}})
        self.add_tool("needs_input", self.tool_needs_input, description="Modern: ask for an elicitation via MRTR.")
        for name, (tool, description, properties) in progress_tools.TOOLS.items():
            self.add_tool(f"p_{name}", self._progress_tool(tool), description=description, properties=properties)
        self.add_tool("notify_flood", self.tool_notify_flood, description="Send count log notifications, then answer.",
                      properties={"count": {"type": "integer"}}, required=("count",))
        self.add_tool("typed", lambda request, args: text_result(json.dumps(args, sort_keys=True)),
                      description="Answer the arguments it was sent, as JSON.",
                      properties={"text": {"type": "string"}, "count": {"type": "integer"}, "ratio": {"type": "number"},
                                  "on": {"type": "boolean"}, "opts": {"type": "object"},
                                  "tags": {"type": "array", "items": {"type": "string"}},
                                  "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}]}, "mode": {"enum": ["fast", "slow"]},
                                  "level": {"type": "integer", "minimum": 1, "maximum": 5}},
                      required=("text",))
        self.add_tool("strict", lambda request, args: text_result(json.dumps(args, sort_keys=True)),
                      description="Answer the arguments it was sent; it takes text and nothing else.",
                      properties={"text": {"type": "string"}}, required=("text",))
        self.tools["strict"].definition["inputSchema"]["additionalProperties"] = False

    def _progress_tool(self, tool: Any) -> Any:
        """A progress_tools tool, run on a thread of its own (the reader goes on reading)."""
        def handler(request: Request, args: dict) -> None:
            wire = progress_tools.Wire(self.send, lambda result: self.reply(request, result))
            progress_tools.in_thread(lambda: tool(request.params, args, wire, text_result), f"tool-{request.id}")
        return handler

    def tool_sleep(self, request: Request, args: dict) -> None:
        seconds = args["seconds"]
        self.sleeping[request.id] = request

        def wake() -> None:
            # Answer unless cancelled (the entry is gone then).
            if self.sleeping.get(request.id) is request:
                del self.sleeping[request.id]
                self.reply(request, text_result(f"slept {seconds}"))

        timer = threading.Timer(seconds, wake)
        timer.daemon = True  # stdin EOF ends the process even while sleeping
        timer.start()

    def tool_ask(self, request: Request, args: dict) -> dict | None:
        if request.modern:
            return text_result("ask needs a legacy session: modern servers send no requests", is_error=True)
        self.ask_answers[request.id] = {}
        for method, params in (
            ("roots/list", None),
            ("sampling/createMessage", {
                "messages": [{"role": "user", "content": {"type": "text", "text": "Say hello."}}],
                "maxTokens": 16,
            }),
            ("ping", None),
        ):
            server_id = self.next_server_id
            self.next_server_id += 1
            self.asked[server_id] = (request, method)
            message = {"jsonrpc": "2.0", "id": server_id, "method": method}
            if params is not None:
                message["params"] = params
            self.send(message)
        return None  # answered by handle_response once all three replies are in

    def tool_big(self, request: Request, args: dict) -> dict:
        return text_result("x" * int(args["mib"] * MIB))

    def tool_noline(self, request: Request, args: dict) -> None:
        self.write_raw(b"x" * int(args["mib"] * MIB))
        self.muted = True

    def tool_malformed(self, request: Request, args: dict) -> dict | None:
        kind = args["kind"]
        if kind not in MALFORMED_KINDS:
            return text_result(f"kind must be one of {', '.join(MALFORMED_KINDS)}", is_error=True)
        answer = self.result_message(request, text_result(f"after malformed {kind}"))
        if kind == "utf8":
            self.write_raw(b'{"jsonrpc":"2.0","method":"notifications/message",'
                           b'"params":{"level":"info","data":"bad \xff\xfe bytes"}}\n')
        elif kind == "json":
            self.write_raw(b'this is not JSON {"jsonrpc":"2.0",\n')
        elif kind == "deep":
            self.write_raw(b"[" * 100000 + b"]" * 100000 + b"\n")
        elif kind == "hugeint":
            # json.dumps refuses ints this long, so splice the digits in.
            huge = self.result_message(request, text_result("hugeint", structured={"n": "HUGE"}))
            line = json.dumps(huge, separators=(",", ":")).replace('"HUGE"', "9" * 100000)
            self.write_raw(line.encode() + b"\n")
        elif kind == "notobject":
            self.write_raw(b"[1,2,3]\n42\n")
        elif kind == "badid":
            wrong = str(request.id) if isinstance(request.id, int) else request.id + "-bad"
            self.send({**answer, "id": wrong})
        elif kind == "dupe":
            self.send(answer)
        elif kind == "unknownid":
            self.send({**answer, "id": UNKNOWN_RESPONSE_ID})
        self.send(answer)

    def tool_add_tool(self, request: Request, args: dict) -> dict:
        name = args["name"]
        self.add_tool(name, lambda call, call_args: text_result(f"{name} called"), description="Added at run time.")
        self.announce_tools_changed()
        return text_result(f"added {name}")

    def tool_state_only(self, request: Request, args: dict) -> dict:
        rounds = args.get("rounds", 1)
        if not request.modern:
            return text_result("complete (legacy era: no input_required)")
        state = request.params.get("requestState")
        if state is None:
            done = 0
        elif isinstance(state, str) and state.startswith("s") and state[1:].isdigit():
            done = int(state[1:])
        else:
            raise RpcError(INVALID_PARAMS, f"Unknown requestState {state!r}")
        if done >= rounds:
            return text_result(f"complete after {done} rounds")
        return {"resultType": "input_required", "requestState": f"s{done + 1}"}

    def tool_needs_input(self, request: Request, args: dict) -> dict:
        if not request.modern:
            return text_result("needs_input is modern-only", is_error=True)
        elicitation = request.params["_meta"][META_CAPABILITIES].get("elicitation")
        # An empty elicitation object means form mode only.
        if not isinstance(elicitation, dict) or (elicitation and "form" not in elicitation):
            raise RpcError(MISSING_CLIENT_CAPABILITY, "Elicitation capability required",
                           {"requiredCapabilities": {"elicitation": {"form": {}}}})
        responses = request.params.get("inputResponses")
        if isinstance(responses, dict) and "confirm" in responses:
            return text_result(json.dumps(responses["confirm"]))
        return {
            "resultType": "input_required",
            "inputRequests": {
                "confirm": {
                    "method": "elicitation/create",
                    "params": {
                        "mode": "form",
                        "message": "Proceed?",
                        "requestedSchema": {
                            "type": "object",
                            "properties": {"proceed": {"type": "boolean"}},
                            "required": ["proceed"],
                        },
                    },
                }
            },
        }

    def tool_notify_flood(self, request: Request, args: dict) -> dict:
        count = args["count"]
        for i in range(count):
            self.send({"jsonrpc": "2.0", "method": "notifications/message",
                       "params": {"level": "info", "logger": "fault", "data": f"flood {i}"}})
        return text_result(f"sent {count} notifications")


def page_tool(page: int) -> dict:
    """A listing-only tool standing for page ``page`` of a paginated tools/list."""
    return {"name": f"page_{page}", "inputSchema": {"type": "object", "properties": {}}}


def pages_flag(value: str) -> str:
    if value in ("endless", "repeat") or (value.isdigit() and int(value) >= 1):
        return value
    raise argparse.ArgumentTypeError("expected endless, repeat or a positive integer")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--era", choices=("dual", "legacy", "modern"), default="dual")
    parser.add_argument("--probe", choices=("answer", "silent", "error", "exit"), default="answer")
    parser.add_argument("--discover-versions", metavar="V,V")
    parser.add_argument("--unsupported-versions", metavar="V,V")
    parser.add_argument("--ignore-eof-and-term", action="store_true")
    parser.add_argument("--pages", type=pages_flag, metavar="endless|repeat|N")
    parser.add_argument("--record", metavar="FILE")
    parser.add_argument("--stderr-and-exit", type=int, metavar="N")
    parser.add_argument("--delay-start", type=float, metavar="SECONDS")
    parser.add_argument("--exit-on", metavar="METHOD")
    parser.add_argument("--initialize-version", metavar="V")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    options = parse_args(argv)
    if options.stderr_and_exit is not None:
        sys.stderr.write(
            "fault_server: starting up\n"
            "fatal: cannot open database /nope: No such file or directory\n"
            f"fault_server: exiting with code {options.stderr_and_exit}\n"
        )
        sys.stderr.flush()
        sys.exit(options.stderr_and_exit)
    if options.ignore_eof_and_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if options.delay_start:
        time.sleep(options.delay_start)
    FaultServer(options).run()
    while options.ignore_eof_and_term:
        time.sleep(3600)


if __name__ == "__main__":
    main()
