"""A raw 2026-07-28 streamable-HTTP server of the tasks extension (SEP-2663), scripted by
the test that runs it in-process (tests/rules/test_sep_2663.py).

It is tests/servers/fault_http_server.py's plumbing (every POST is recorded with its
headers: ``server.requests``) with an engine that declares the
``io.modelcontextprotocol/tasks`` extension in ``server/discover`` and serves:

- ``job``: answered ``resultType: "task"`` (task ``job-N``) when the call opted in to
  the extension, else ``-32021`` naming the extension (as a task-only tool does). Each
  ``tasks/get`` of the task answers the next step of ``server.script`` (the last one
  repeats); a step is a partial Task (``{"status": "working", "pollIntervalMs": 300}``,
  ``{"status": "input_required", "inputRequests": {...}}``, ``{"status": "completed",
  "result": {...}}``), or ``"hold"``: ``working`` until ``server.release`` is set.
- ``inline``: a plain CallToolResult, even to a call that opted in (a server may run
  an optional tool inline).
- ``rogue``: ``resultType: "task"`` whether or not the call opted in.
- ``ask``: ``input_required`` (a standalone MRTR round) with ``server.asks`` as its
  ``inputRequests``, then the text of the answers it was retried with.
- ``resources/read`` of ``task://rogue``: ``resultType: "task"`` (resources/read is no
  request the extension augments).
- ``tasks/update``: recorded in ``server.updates``; ``tasks/cancel``: the task ends
  ``cancelled``, recorded in ``server.cancels``.

Standard library and the repository only; bound to 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, HERE)

from albedo_actors.demo.server import Request, RpcError, text_result  # noqa: E402
from fault_http_server import FaultHTTPServer, _Engine  # noqa: E402

EXTENSION = "io.modelcontextprotocol/tasks"
CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"


def opted_in(request: Request) -> bool:
    meta = request.params.get("_meta")
    capabilities = meta.get(CAPABILITIES) if isinstance(meta, dict) else None
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and EXTENSION in extensions


class _TasksEngine(_Engine):
    name = "albedo-tasks-http"
    owner: "TasksHTTPServer"

    def __init__(self, owner: Any, era: str) -> None:
        super().__init__(owner, era)
        self.methods.update({
            "tasks/get": self.tasks_get,
            "tasks/update": self.tasks_update,
            "tasks/cancel": self.tasks_cancel,
        })
        read = self.methods["resources/read"]
        self.methods["resources/read"] = lambda request: (
            {"resultType": "task", "taskId": "rogue-read", "status": "working"}
            if request.params.get("uri") == "task://rogue" else read(request))
        self.add_tool("job", self.tool_job, description="Runs as a task only.")
        self.add_tool("inline", lambda request, args: text_result("inline result"),
                      description="May run as a task; this server runs it inline.")
        self.add_tool("rogue", lambda request, args: {"resultType": "task", "taskId": "rogue-call", "status": "working"},
                      description="Answers with a task whether asked or not.")
        self.add_tool("ask", self.tool_ask, description="Asks the host for input (MRTR), then says what it got.")

    def capabilities(self) -> dict:
        return {**super().capabilities(), "extensions": {EXTENSION: {}}}

    # -- tools

    def tool_job(self, request: Request, args: dict) -> dict:
        if not opted_in(request):
            raise RpcError(-32021, "job runs only as a task",
                           {"requiredCapabilities": {"extensions": {EXTENSION: {}}}})
        with self.owner.lock:
            self.owner.created += 1
            task_id = f"job-{self.owner.created}"
            self.owner.tasks[task_id] = {"gets": 0, "step": 0, "cancelled": False}
        return {"resultType": "task", "taskId": task_id, "status": "working", "ttlMs": 600_000,
                "pollIntervalMs": self.owner.poll_ms}

    def tool_ask(self, request: Request, args: dict) -> dict:
        answers = request.params.get("inputResponses")
        if answers is None:
            return {"resultType": "input_required", "inputRequests": self.owner.asks}
        return text_result(json.dumps(answers, sort_keys=True))

    # -- tasks/*

    def _task(self, request: Request) -> tuple[str, dict]:
        task_id = request.params.get("taskId")
        task = self.owner.tasks.get(task_id) if isinstance(task_id, str) else None
        if task is None:
            raise RpcError(-32602, f"unknown task {task_id!r}")
        return task_id, task

    def tasks_get(self, request: Request) -> dict:
        with self.owner.lock:
            task_id, task = self._task(request)
            task["gets"] += 1
            if task["cancelled"]:
                return {"taskId": task_id, "status": "cancelled"}
            script = self.owner.script
            step = script[min(task["step"], len(script) - 1)]
            if step == "hold":
                if not self.owner.release.is_set():
                    return {"taskId": task_id, "status": "working", "pollIntervalMs": self.owner.poll_ms}
                task["step"] += 1
                step = script[min(task["step"], len(script) - 1)]
            else:
                task["step"] += 1
            return {"taskId": task_id, "pollIntervalMs": self.owner.poll_ms, **step}

    def tasks_update(self, request: Request) -> dict:
        with self.owner.lock:
            task_id, _task = self._task(request)
            self.owner.updates.append((task_id, request.params.get("inputResponses")))
        return {}

    def tasks_cancel(self, request: Request) -> dict:
        with self.owner.lock:
            task_id, task = self._task(request)
            task["cancelled"] = True
            self.owner.cancels.append(task_id)
        return {"taskId": task_id, "status": "cancelled"}


class TasksHTTPServer(FaultHTTPServer):
    """FaultHTTPServer (modern era) serving the tasks engine above; scripted by attributes."""

    engine_class = _TasksEngine

    def __init__(self, **options: Any) -> None:
        self.lock = threading.Lock()
        self.script: list[Any] = [{"status": "completed", "result": text_result("done")}]
        self.poll_ms = 300
        self.release = threading.Event()
        self.asks: dict[str, Any] = {}
        self.created = 0
        self.tasks: dict[str, dict] = {}
        self.updates: list[tuple[str, Any]] = []
        self.cancels: list[str] = []
        super().__init__(era="modern", **options)

    def posts(self, method: str | None = None) -> list[Any]:
        """The recorded POSTs (of ``method``), in order."""
        found = []
        for record in self.requests:
            if record.method != "POST":
                continue
            try:
                body = record.json()
            except ValueError:
                continue
            if method is None or (isinstance(body, dict) and body.get("method") == method):
                found.append(record)
        return found
