"""A hostile MCP task server (era 2025-11-25, stdio, raw Python) for tests/test_tasks_hostile.py.

It answers ``server/discover`` with -32601 (an older server), then the ``initialize``
handshake, declaring ``tasks.requests.tools.call``, ``tasks.cancel`` and ``tasks.list``
(``--no-task-capability``: no ``tasks`` at all). Every tool requires a task but ``maybe``
(optional) and ``echo`` (forbidden). Behaviour depends on the tool and its arguments.

Flags:

--log FILE               every message received, one JSON line each, flushed at once:
                         ``{"at": time.monotonic(), "message": ...}``; and what the
                         server did, ``{"at": ..., "event": ...}`` (the monotonic clock
                         is the machine's, so a test can compare it with its own, loosely)
--no-task-capability     leave ``tasks`` out of the capabilities

Tools (all but ``maybe`` and ``echo`` require a task; called without one: -32601):

poll_zero {polls}        pollInterval 0; completes at the ``polls``-th tasks/get
poll_hours {notify, huge}
                         pollInterval 3,600,000 (an hour); completes 2 s after it was
                         created; with ``notify`` (default true) it then sends
                         ``notifications/tasks/status`` saying so; ``huge``: pollInterval
                         and ttl are 10**400 (an integer JSON allows, no float holds)
never_ends {changing}    stays "working" forever; ``changing``: its statusMessage
                         changes at every tasks/get (pollInterval 250), and holds
                         terminal controls and 10,000 characters
flood {count}            after the CreateTaskResult, ``count`` (default 100,000)
                         ``notifications/tasks/status`` (working, a new message each)
                         as fast as they can be written; half way it waits (at most
                         10 s) for an ``echo`` call to have arrived; then completes and
                         says so in one last notification
bad_id {kind}            a CreateTaskResult whose taskId is bad: long (10,000 chars),
                         control (ESC sequences, BEL, CR, LF), number, empty,
                         surrogate (the JSON escape ``\\ud800``)
bad_status {where, list}
                         ``"status": "exploded\\x1b[2J\\n"`` (``list``: ``["working"]``):
                         in the CreateTaskResult (``where`` "create", the default) or in
                         the first tasks/get
crash                    the process exits at the first tasks/get, without answering
forget                   tasks/get answers -32602 "unknown task"
fail                     tasks/get says "failed"; tasks/result answers a JSON-RPC error
server_cancel            tasks/get says "cancelled", statusMessage "an operator stopped it"
maybe {text}             optional: as a task, completes at the first tasks/get; without
                         one, answers at once; either way the text is ``text``
echo {text}              forbidden: answers ``text`` at once

tasks/result of a completed task answers the tool's result; of one still working it
waits until the task ends (or is cancelled). tasks/cancel marks the task cancelled.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import threading
import time
from typing import Any

VERSION = "2025-11-25"
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602


def tool(name: str, support: str) -> dict:
    return {"name": name, "description": f"{name} (task fault server)",
            "inputSchema": {"type": "object", "additionalProperties": True},
            "execution": {"taskSupport": support}}


TOOLS = [tool(name, "required") for name in (
    "poll_zero", "poll_hours", "never_ends", "flood", "bad_id", "bad_status", "crash", "forget", "fail", "server_cancel")]
TOOLS += [tool("maybe", "optional"), tool("echo", "forbidden")]


def text_result(text: str) -> dict:
    return {"content": [{"type": "text", "text": text}], "isError": False}


class Task:
    def __init__(self, task_id: str, tool: str, args: dict, poll: int) -> None:
        self.id = task_id
        self.tool = tool
        self.args = args
        self.poll = poll
        self.status = "working"
        self.message: str | None = None
        self.polls = 0
        self.created = time.monotonic()
        self.result: dict | None = None
        self.ended = threading.Event()

    def view(self) -> dict:
        task: dict[str, Any] = {"taskId": self.id, "status": self.status, "createdAt": "2026-01-01T00:00:00Z",
                                "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttl": 10**400 if self.poll == 10**400 else 3_600_000,
                                "pollInterval": self.poll}
        if self.message is not None:
            task["statusMessage"] = self.message
        return task

    def end(self, status: str, result: dict | None = None, message: str | None = None) -> None:
        self.status = status
        self.result = result
        if message is not None:
            self.message = message
        self.ended.set()


class Server:
    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        self.log = open(options.log, "a", encoding="utf-8") if options.log else None
        self.log_lock = threading.Lock()
        self.write_lock = threading.Lock()
        self.tasks: dict[str, Task] = {}
        self.numbers = itertools.count(1)
        self.echo_seen = threading.Event()

    # -- I/O -----------------------------------------------------------------------------

    def note(self, **entry: Any) -> None:
        if self.log is None:
            return
        with self.log_lock:
            self.log.write(json.dumps({"at": time.monotonic(), **entry}) + "\n")
            self.log.flush()

    def send(self, message: dict) -> None:
        data = (json.dumps(message) + "\n").encode()  # ensure_ascii: a lone surrogate goes as its escape
        with self.write_lock:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()

    def answer(self, id: Any, result: dict) -> None:
        self.send({"jsonrpc": "2.0", "id": id, "result": result})

    def error(self, id: Any, code: int, message: str) -> None:
        self.send({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})

    def status(self, task: Task) -> None:
        self.send({"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": task.view()})

    def run(self) -> None:
        for line in sys.stdin.buffer:
            if not line.strip():
                continue
            message = json.loads(line)
            self.note(message=message)
            if not isinstance(message, dict) or "method" not in message:
                continue  # a response or a notification (notifications/initialized, cancelled)
            if "id" not in message:
                continue
            self.request(message["id"], message["method"], message.get("params") or {})

    # -- requests ------------------------------------------------------------------------

    def request(self, id: Any, method: str, params: dict) -> None:
        if method == "initialize":
            capabilities: dict[str, Any] = {"tools": {}}
            if not self.options.no_task_capability:
                capabilities["tasks"] = {"requests": {"tools": {"call": {}}}, "cancel": {}, "list": {}}
            self.answer(id, {"protocolVersion": VERSION, "capabilities": capabilities,
                             "serverInfo": {"name": "task-fault", "version": "1.0"}})
        elif method == "ping":
            self.answer(id, {})
        elif method == "tools/list":
            self.answer(id, {"tools": TOOLS})
        elif method == "tools/call":
            self.call(id, params)
        elif method == "tasks/get":
            self.get(id, params)
        elif method == "tasks/result":
            self.result(id, params)
        elif method == "tasks/cancel":
            task = self.tasks.get(params.get("taskId"))
            if task is None:
                self.error(id, INVALID_PARAMS, "unknown task")
                return
            if task.status == "working":
                task.end("cancelled", message="cancelled by the client")
            self.note(event="cancelled", task=task.id)
            self.answer(id, task.view())
        else:
            self.error(id, METHOD_NOT_FOUND, "Method not found")

    def call(self, id: Any, params: dict) -> None:
        name = params.get("name")
        args = params.get("arguments") or {}
        as_task = isinstance(params.get("task"), dict)
        if name == "echo" or (name == "maybe" and not as_task):
            if name == "echo":
                self.echo_seen.set()
            self.answer(id, text_result(str(args.get("text", ""))))
            self.note(event="answered", tool=name)
            return
        if not any(t["name"] == name for t in TOOLS):
            self.error(id, INVALID_PARAMS, f"no tool {name}")
            return
        if not as_task:
            self.error(id, METHOD_NOT_FOUND, f"{name} runs only as a task")
            return
        if name == "bad_id":
            self.bad_id(id, args.get("kind"))
            return
        task = Task(f"task-{next(self.numbers)}", name, args, 500)
        self.tasks[task.id] = task
        if name == "poll_zero":
            task.poll = 0
        elif name == "poll_hours":
            task.poll = 10**400 if args.get("huge") else 3_600_000
            threading.Thread(target=self.later, args=(task,), daemon=True).start()
        elif name == "never_ends":
            task.poll = 250
            task.message = "still at it"
        elif name == "bad_status" and args.get("where", "create") == "create":
            view = task.view()
            view["status"] = ["working"] if task.args.get("list") else "exploded\x1b[2J\n"
            self.answer(id, {"task": view})
            return
        self.answer(id, {"task": task.view()})
        if name == "flood":
            threading.Thread(target=self.flood, args=(task,), daemon=True).start()

    def bad_id(self, id: Any, kind: Any) -> None:
        bad = {"long": "x" * 10_000, "control": "evil\x1b]0;pwned\x07\x1b[2J\r\nline", "number": 12345,
               "empty": "", "surrogate": "task-\ud800"}[kind]
        self.note(event="bad_id", kind=kind)
        self.answer(id, {"task": {"taskId": bad, "status": "working", "createdAt": "2026-01-01T00:00:00Z",
                                  "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttl": 60_000, "pollInterval": 250}})

    def get(self, id: Any, params: dict) -> None:
        task = self.tasks.get(params.get("taskId"))
        if task is None:
            self.error(id, INVALID_PARAMS, "unknown task")
            return
        task.polls += 1
        name = task.tool
        if task.status == "working":
            if name == "poll_zero" and task.polls >= int(task.args.get("polls", 5)):
                task.end("completed", text_result(f"polled {task.polls}"))
            elif name == "never_ends" and task.args.get("changing"):
                task.message = f"poll {task.polls}\x1b]0;pwned\x07\u202e\r\n" + "A" * 10_000
            elif name == "bad_status":
                view = task.view()
                view["status"] = ["working"] if task.args.get("list") else "exploded\x1b[2J\n"
                self.answer(id, view)
                return
            elif name == "crash":
                self.note(event="crash")
                os._exit(3)
            elif name == "forget":
                self.error(id, INVALID_PARAMS, "unknown task")
                return
            elif name == "fail":
                task.end("failed", message="the tool broke")
            elif name == "server_cancel":
                task.end("cancelled", message="an operator stopped it")
            elif name == "maybe":
                task.end("completed", text_result(str(task.args.get("text", ""))))
        self.answer(id, task.view())

    def result(self, id: Any, params: dict) -> None:
        task = self.tasks.get(params.get("taskId"))
        if task is None:
            self.error(id, INVALID_PARAMS, "unknown task")
            return

        def reply() -> None:
            task.ended.wait(60)
            if task.status == "completed" and task.result is not None:
                self.answer(id, task.result)
            elif task.status == "failed":
                self.error(id, -32000, "the tool broke: \x1b[31mdisk on fire\x1b[0m")
            else:
                self.error(id, -32603, f"task {task.status}")

        threading.Thread(target=reply, daemon=True).start()

    # -- tasks that move by themselves -----------------------------------------------------

    def later(self, task: Task) -> None:
        task.ended.wait(2.0)
        if task.status != "working":
            return
        task.end("completed", text_result("an hour was not waited"))
        self.note(event="completed", task=task.id)
        if task.args.get("notify", True):
            self.status(task)

    def flood(self, task: Task) -> None:
        count = int(task.args.get("count", 100_000))
        self.note(event="flood-start", task=task.id)
        for i in range(count):
            if i == count // 2:
                self.note(event="flood-half", task=task.id)
                self.echo_seen.wait(10)
            task.message = f"flood {i}"
            self.status(task)
        task.end("completed", text_result(f"flooded {count}"))
        self.note(event="flood-done", task=task.id)
        self.status(task)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log")
    parser.add_argument("--no-task-capability", action="store_true")
    Server(parser.parse_args()).run()


if __name__ == "__main__":
    main()
