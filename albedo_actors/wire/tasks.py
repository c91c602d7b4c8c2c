"""MCP tasks on the wire, both forms: what is sent, and what comes back made safe.

- 2025-11-25 (in core, SEP-1686): a tool says ``execution.taskSupport`` (``forbidden``,
  ``optional``, ``required``); a server that runs tool calls as tasks declares
  ``capabilities.tasks.requests.tools.call``. A ``tools/call`` carrying ``params.task``
  (``{"ttl": ms}``) is answered with ``{"task": Task}`` (a CreateTaskResult); the client
  polls ``tasks/get`` and reads the tool's result with ``tasks/result``, which also
  carries the server's own requests (an elicitation) while the task waits for input.
- 2026-07-28 (the ``io.modelcontextprotocol/tasks`` extension, SEP-2663): the client
  opts in per request by naming the extension in the request's client capabilities; a
  task is answered flat, ``resultType: "task"``; ``tasks/get`` carries the result (or
  the error, or the ``inputRequests`` of an ``input_required`` round) inline;
  ``tasks/update`` answers input; times are ``ttlMs`` and ``pollIntervalMs``.

Everything a server says of a task is server text: a task id is checked before it is
kept, sent in a header or printed (:func:`task_id`), a poll interval is clamped
(:func:`poll_seconds`), a status message is escaped and bounded. Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from typing import Any, NamedTuple

from .text import printable

EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"

WORKING, INPUT_REQUIRED, COMPLETED, FAILED, CANCELLED = "working", "input_required", "completed", "failed", "cancelled"
LOST = "lost"  # ours: the server no longer knows the task (its session or process ended)
STATUSES = frozenset({WORKING, INPUT_REQUIRED, COMPLETED, FAILED, CANCELLED})
TERMINAL = frozenset({COMPLETED, FAILED, CANCELLED, LOST})

MIN_POLL = 0.25  # seconds: a pollInterval below this (0 among them) is raised to it
MAX_POLL = 15.0  # seconds: one above it (hours) is lowered to it
DEFAULT_POLL = 1.0  # seconds, when the server names none
MAX_TASK_ID = 256  # characters
MESSAGE_LIMIT = 200  # characters of a status message, escaped
REQUESTED_TTL_MS = 60 * 60 * 1000  # the TTL asked for in 2025-11-25: one hour

# A task id: printable ASCII without spaces (it travels in the Mcp-Name header and in
# terminal lines as it is), 1 to MAX_TASK_ID characters.
_TASK_ID = re.compile(r"[\x21-\x7e]{1,%d}" % MAX_TASK_ID)


class BadTask(ValueError):
    """What a server said of a task is not a task (the connection makes it a ProtocolViolation)."""


class TaskState(NamedTuple):
    """One view of a task, as a CreateTaskResult, tasks/get or a status notification gave it."""

    task_id: str
    status: str
    message: str | None  # escaped, bounded
    poll: float  # seconds, clamped
    ttl_ms: int | None
    result: dict[str, Any] | None = None  # 2026: the tool's result, inline when completed
    error: dict[str, Any] | None = None  # 2026: the JSON-RPC error of a failed task
    input_requests: dict[str, Any] | None = None  # 2026: an input_required round's requests

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


def support(tool: dict[str, Any]) -> str:
    """A tool's task support: ``forbidden`` (the default), ``optional`` or ``required``."""
    execution = tool.get("execution")
    value = execution.get("taskSupport") if isinstance(execution, dict) else None
    return value if value in ("optional", "required") else "forbidden"


def server_runs_tool_tasks(capabilities: dict[str, Any], modern: bool) -> bool:
    """Whether the server declared that it runs tool calls as tasks, in its era's words."""
    if modern:
        extensions = capabilities.get("extensions")
        return isinstance(extensions, dict) and isinstance(extensions.get(EXTENSION), dict)
    tasks = capabilities.get("tasks")
    requests = tasks.get("requests") if isinstance(tasks, dict) else None
    tools = requests.get("tools") if isinstance(requests, dict) else None
    return isinstance(tools, dict) and isinstance(tools.get("call"), dict)


def server_cancels(capabilities: dict[str, Any], modern: bool) -> bool:
    """Whether ``tasks/cancel`` may be sent (2025-11-25 ``tasks.cancel``; always in 2026)."""
    if modern:
        return True
    tasks = capabilities.get("tasks")
    return isinstance(tasks, dict) and isinstance(tasks.get("cancel"), dict)


MISSING_CAPABILITY = -32021  # 2026: the request needs a client capability it did not declare


def needs_extension(code: int, data: Any) -> bool:
    """Whether a 2026 error refuses a request for want of the tasks extension."""
    if code != MISSING_CAPABILITY:
        return False
    required = data.get("requiredCapabilities") if isinstance(data, dict) else None
    extensions = required.get("extensions") if isinstance(required, dict) else None
    return isinstance(extensions, dict) and EXTENSION in extensions


def augment(params: dict[str, Any], modern: bool) -> dict[str, Any]:
    """``tools/call`` params asking for a task (2025-11-25: ``params.task``). In 2026 the
    ask is the extension in the request's client capabilities (:func:`opt_in`)."""
    if modern:
        return params
    return {**params, "task": {"ttl": REQUESTED_TTL_MS}}


def opt_in(capabilities: dict[str, Any]) -> dict[str, Any]:
    """2026 client capabilities for one request that opts in to the tasks extension."""
    extensions = capabilities.get("extensions")
    merged = dict(extensions) if isinstance(extensions, dict) else {}
    merged[EXTENSION] = {}
    return {**capabilities, "extensions": merged}


def is_created(result: dict[str, Any], modern: bool) -> bool:
    """Whether a ``tools/call`` result is a CreateTaskResult rather than the tool's result."""
    if modern:
        return result.get("resultType") == "task"
    return isinstance(result.get("task"), dict) and "content" not in result


def task_id(value: Any) -> str:
    """A server's task id, checked: printable ASCII, no spaces, at most MAX_TASK_ID characters.

    Raises:
        BadTask: anything else (it is never stored, sent or printed).
    """
    if isinstance(value, str) and _TASK_ID.fullmatch(value):
        return value
    shown = printable(value if isinstance(value, str) else type(value).__name__, one_line=True, limit=40)
    raise BadTask(f"sent a task id that is not 1-{MAX_TASK_ID} printable ASCII characters without spaces ({shown})")


def _number(value: Any) -> int | float | None:
    """A JSON number, finite; None for anything else. An integer is kept as it is: JSON
    allows ones (thousands of digits) that no float holds, so it is compared, never
    converted, until it is bounded."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def poll_seconds(value: Any) -> float:
    """A poll interval in milliseconds as seconds, clamped to [MIN_POLL, MAX_POLL]."""
    number = _number(value)
    if number is None:
        return DEFAULT_POLL
    return min(MAX_POLL, max(MIN_POLL, min(number, MAX_POLL * 1000) / 1000))


def _ttl(value: Any) -> int | None:
    number = _number(value)
    if number is None or number < 0:
        return None
    return int(min(number, 10 * 365 * 24 * 3600 * 1000))


def parse(value: Any, modern: bool, what: str) -> TaskState:
    """The task a result or notification describes (``value``: the Task object itself;
    a 2025-11-25 CreateTaskResult's ``task``).

    Raises:
        BadTask: it is not a task: no valid id, or an unknown status.
    """
    if not isinstance(value, dict):
        raise BadTask(f"sent {what} that is not a task object")
    tid = task_id(value.get("taskId"))
    status = value.get("status")
    if not isinstance(status, str) or status not in STATUSES:  # a list or an object is not hashable
        raise BadTask(f"sent {what} giving task {tid} an unknown status {printable(str(status), one_line=True, limit=40)!r}")
    message = value.get("statusMessage")
    text = printable(message, one_line=True, limit=MESSAGE_LIMIT) if isinstance(message, str) and message else None
    poll = poll_seconds(value.get("pollIntervalMs" if modern else "pollInterval"))
    ttl = _ttl(value.get("ttlMs" if modern else "ttl"))
    result = error = requests = None
    if modern:
        found = value.get("result")
        result = found if isinstance(found, dict) else None
        found = value.get("error")
        error = found if isinstance(found, dict) else None
        found = value.get("inputRequests")
        requests = found if isinstance(found, dict) else None
    return TaskState(tid, status, text, poll, ttl, result, error, requests)


def created(result: dict[str, Any], modern: bool) -> TaskState:
    """The task a CreateTaskResult names (2026: flat; 2025-11-25: under ``task``)."""
    return parse(result if modern else result.get("task"), modern, "a CreateTaskResult")


def status_line(state: TaskState) -> str:
    """The progress line of a task's status: ``working: message``."""
    word = state.status.replace("_", " ")
    return f"task {word}: {state.message}" if state.message else f"task {word}"


__all__ = [
    "BadTask", "CANCELLED", "COMPLETED", "EXTENSION", "FAILED", "INPUT_REQUIRED", "LOST", "MAX_POLL", "MIN_POLL", "RELATED_TASK",
    "STATUSES", "TERMINAL", "TaskState", "WORKING", "augment", "created", "is_created", "needs_extension", "opt_in", "parse",
    "poll_seconds", "server_cancels", "server_runs_tool_tasks", "status_line", "support", "task_id",
]
