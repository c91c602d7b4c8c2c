"""Tool calls run as MCP tasks (2025-11-25) against a hostile task server
(tests/servers/task_fault_server.py): poll intervals of zero and of an hour, tasks that
never end, a flood of status notifications, bad task ids and statuses, a server that
crashes, forgets, fails or cancels a task, the per-server "tasks" setting, and a caller
that gives up.

Calls go through ``ServerHandle.call_tool_and_deadline(..., task=...)`` (what the binding
calls with the catalogue's task support), with a recording TaskBook in the store's place
(connection/tasks.py's seam); the advertised tool list through a Runtime. No timed
assertions but loose ones, read from the server's own log (its monotonic clock, the
machine's); every wait is bounded.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import pytest

from albedo_actors.config import McpConfig, ServerConfig
from albedo_actors.connection import tasks as task_follower
from albedo_actors.connection.progress import REPORTS_PER_SECOND, Cancel, ProgressReport
from albedo_actors.errors import ProtocolViolation, RemoteError, TimedOut, UnknownOutcome
from albedo_actors.runtime import Runtime
from albedo_actors.wire import tasks as wire_tasks
from helpers import HERE, text_of

TASK_SERVER = f"{HERE}/servers/task_fault_server.py"
WAIT = 30.0
CONTROLS = "\x1b\x07\r\n\x00\x9b"


def task_config(tmp_path, *flags: str, **overrides) -> ServerConfig:
    return ServerConfig(name="t", type="stdio", command=sys.executable,
                        args=(TASK_SERVER, "--log", str(tmp_path / "log"), *flags), **overrides)


def server_log(tmp_path) -> list[dict]:
    path = tmp_path / "log"
    if not path.exists():
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def received(tmp_path, method: str) -> list[dict]:
    """The requests for ``method`` the server received, each with its arrival ``at``."""
    return [{"at": e["at"], **e["message"]} for e in server_log(tmp_path)
            if isinstance(e.get("message"), dict) and e["message"].get("method") == method]


class Book:
    """A TaskBook (connection/tasks.py) that records every step it is told."""

    def __init__(self) -> None:
        self.steps: list[tuple] = []

    def begin(self, start) -> None:
        self.steps.append(("begin", start.state.task_id, start.tool))

    def note(self, server, state, answered) -> None:
        self.steps.append(("note", state.task_id, state.status))

    def end(self, server, task_id, status, result, error) -> None:
        self.steps.append(("end", task_id, status, error))

    def alive(self, server, task_id) -> None:
        self.steps.append(("alive", task_id))

    def release(self, server, task_id) -> None:
        self.steps.append(("release", task_id))

    def kinds(self) -> list[str]:
        return [step[0] for step in self.steps]


@pytest.fixture
def start(clients, tmp_path):
    """``start(*flags, **config)``: a ServerHandle to the task server, its book at ``handle.book``."""

    def make(*flags: str, **overrides):
        handle = clients.start(task_config(tmp_path, *flags, **overrides))
        handle.task_book = handle.book = Book()
        return handle

    return make


def call(handle, tool: str, arguments: dict | None = None, support: str = "required", **kw) -> dict:
    return handle.call_tool_and_deadline(tool, arguments or {}, task=support, **kw)[0]


def one_line(text: str) -> None:
    for ch in CONTROLS:
        assert ch not in text, f"{ch!r} in {text[:200]!r}"


# -- poll intervals -------------------------------------------------------------------------------


def ramp_polls() -> int:
    """The first polls of a new task that come sooner than MIN_POLL (connection/tasks.py's
    ramp: at once, then FIRST_STEP, each wait RAMP times the last)."""
    steps, wait = 0, 0.0
    while wait < wire_tasks.MIN_POLL:
        steps, wait = steps + 1, max(task_follower.FIRST_STEP, wait * task_follower.RAMP)
    return steps


def test_a_poll_interval_of_zero_is_raised_to_the_minimum(start, tmp_path):
    handle = start()
    began = time.monotonic()
    result = call(handle, "poll_zero", {"polls": 8})
    elapsed = time.monotonic() - began
    assert text_of(result) == "polled 8"
    gets = received(tmp_path, "tasks/get")
    assert len(gets) == 8
    ramp = ramp_polls()
    # Loosely: no more polls than the ramp and MIN_POLL allow in the time the call took,
    # and once the ramp is over, polls at least MIN_POLL apart (a little less: two clocks' reads).
    assert len(gets) <= elapsed / wire_tasks.MIN_POLL + ramp + 1
    steady = [b["at"] - a["at"] for a, b in zip(gets[ramp - 1:], gets[ramp:])]
    assert len(steady) >= 4 and min(steady) >= wire_tasks.MIN_POLL * 0.9, steady
    assert handle.book.kinds()[0] == "begin" and handle.book.steps[-1][:3] == ("end", "task-1", "completed")


def test_a_poll_interval_of_an_hour_is_not_waited_when_the_task_says_it_ended(start, tmp_path):
    handle = start(call_timeout_ms=8000)
    reports: list[ProgressReport] = []
    began = time.monotonic()
    result = call(handle, "poll_hours", on_progress=reports.append)
    elapsed = time.monotonic() - began
    assert text_of(result) == "an hour was not waited"
    assert elapsed < 6.0  # it completes at 2 s; the hour (and even MAX_POLL) was not waited
    assert received(tmp_path, "tasks/result")


def test_a_poll_interval_and_ttl_no_float_holds_are_clamped_too(start, tmp_path):
    handle = start(call_timeout_ms=8000)
    result = call(handle, "poll_hours", {"huge": True})
    assert text_of(result) == "an hour was not waited"
    begun = handle.book.steps[0]
    assert begun[:2] == ("begin", "task-1")


def test_a_poll_interval_of_an_hour_is_lowered_to_the_maximum(start, tmp_path, monkeypatch):
    # MAX_POLL lowered so that the test runs in seconds; the clamp is poll_seconds' own.
    monkeypatch.setattr(wire_tasks, "MAX_POLL", 0.5)
    handle = start(call_timeout_ms=6000)
    result = call(handle, "poll_hours", {"notify": False})
    assert text_of(result) == "an hour was not waited"
    gets = received(tmp_path, "tasks/get")
    assert gets, "the task was polled"
    completed = next(e["at"] for e in server_log(tmp_path) if e.get("event") == "completed")
    first = next(e["at"] for e in received(tmp_path, "tools/call"))
    times = [first] + [g["at"] for g in gets]
    assert max(b - a for a, b in zip(times, times[1:])) < 0.5 + 1.0  # polls at most MAX_POLL apart (loosely)
    assert gets[-1]["at"] >= completed


def test_a_task_that_takes_more_polls_than_the_cap_is_given_up_and_cancelled(start, tmp_path, monkeypatch):
    monkeypatch.setattr(task_follower, "MAX_ROUNDS", 3)
    handle = start(call_timeout_ms=WAIT * 1000)
    with pytest.raises(TimedOut, match="task task-1 did not end after 3 polls"):
        call(handle, "poll_zero", {"polls": 10})
    assert len(received(tmp_path, "tasks/get")) == 3
    assert [c["params"]["taskId"] for c in received(tmp_path, "tasks/cancel")] == ["task-1"]


# -- deadlines and cancellation ----------------------------------------------------------------------


def test_a_task_that_never_changes_times_out_at_call_timeout_and_is_cancelled(start, tmp_path):
    handle = start(call_timeout_ms=1000, max_call_timeout_ms=20000)
    reports: list[ProgressReport] = []
    began = time.monotonic()
    with pytest.raises(TimedOut) as info:
        call(handle, "never_ends", on_progress=reports.append)
    elapsed = time.monotonic() - began
    message = str(info.value)
    assert "task task-1" in message and "cancelled" in message and "\n" not in message
    assert elapsed < 5.0
    cancels = received(tmp_path, "tasks/cancel")
    assert [c["params"]["taskId"] for c in cancels] == ["task-1"]
    assert handle.book.steps[-2][:3] == ("end", "task-1", "cancelled") or handle.book.steps[-1][:3] == ("end", "task-1", "cancelled")
    # The connection still serves.
    assert text_of(call(handle, "echo", {"text": "after"}, support=None)) == "after"


def test_a_task_whose_message_keeps_changing_ends_at_the_cap(start, tmp_path):
    handle = start(call_timeout_ms=1000, max_call_timeout_ms=2500)
    reports: list[ProgressReport] = []
    began = time.monotonic()
    with pytest.raises(TimedOut, match=r"cap of 2\.5 s \(maxCallTimeoutMs\)") as info:
        call(handle, "never_ends", {"changing": True}, on_progress=reports.append)
    elapsed = time.monotonic() - began
    assert "\n" not in str(info.value)
    assert 2.0 < elapsed < 6.0
    gets = received(tmp_path, "tasks/get")
    assert gets[-1]["at"] - received(tmp_path, "tools/call")[0]["at"] > 1.0  # it ran past callTimeoutMs
    assert [c["params"]["taskId"] for c in received(tmp_path, "tasks/cancel")] == ["task-1"]
    assert reports and all(r.message and r.message.startswith("task working") for r in reports)
    assert any("poll " in (r.message or "") for r in reports)
    for report in reports:  # the server's status message, escaped and bounded
        one_line(report.message or "")
        assert "\u202e" not in (report.message or "") and len(report.message or "") <= wire_tasks.MESSAGE_LIMIT + 20


def test_a_caller_that_gives_up_gets_timed_out_at_once_and_the_task_is_cancelled(start, tmp_path):
    handle = start(call_timeout_ms=20000)
    cancel = Cancel()
    first = threading.Event()
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            call(handle, "never_ends", on_progress=lambda report: first.set(), cancel=cancel)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        assert first.wait(WAIT), "the task's status never reached the caller"
        gave_up = time.monotonic()
        cancel.cancel()
    finally:
        worker.join(WAIT)
    assert not worker.is_alive()
    assert time.monotonic() - gave_up < 5.0  # at once, not at callTimeoutMs (20 s)
    assert len(outcome) == 1 and isinstance(outcome[0], TimedOut), outcome
    assert "gave up" in str(outcome[0]) and "\n" not in str(outcome[0])
    assert [c["params"]["taskId"] for c in received(tmp_path, "tasks/cancel")] == ["task-1"]


# -- a flood of status notifications ---------------------------------------------------------------


def test_a_flood_of_status_notifications_is_coalesced_and_others_calls_still_answer(start, tmp_path, monkeypatch):
    # Notifications heard are not polls: a flood of 100,000 never uses up even 100 polls.
    monkeypatch.setattr(task_follower, "MAX_ROUNDS", 100)
    handle = start(call_timeout_ms=WAIT * 1000)
    reports: list[ProgressReport] = []
    first = threading.Event()
    outcome: list = []

    def heard(report: ProgressReport) -> None:
        reports.append(report)
        if (report.message or "").startswith("task working: flood"):
            first.set()

    def run() -> None:
        try:
            outcome.append(call(handle, "flood", {"count": 100_000}, on_progress=heard))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)

    began = time.monotonic()
    worker = threading.Thread(target=run)
    worker.start()
    try:
        assert first.wait(WAIT)
        # Another call on the same connection while the flood runs (the host heard the
        # flood, and the server holds it half way until this call has arrived).
        assert text_of(handle.call_tool("echo", {"text": "still here"}, timeout=WAIT)) == "still here"
    finally:
        worker.join(WAIT * 2)
    elapsed = time.monotonic() - began
    assert not worker.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], dict), outcome
    assert text_of(outcome[0]) == "flooded 100000"
    events = [e.get("event") for e in server_log(tmp_path)]
    assert events.index("flood-start") < events.index("answered") < events.index("flood-done")
    # Coalesced: at most ~REPORTS_PER_SECOND a second reached the host, not 100,000.
    assert len(reports) <= elapsed * REPORTS_PER_SECOND + 5
    for report in reports:
        one_line(report.message or "")
    # A handful of polls, not one per notification, and the book (the store's, a write
    # each) told of a changing message no more often than the minimum poll interval.
    assert len(received(tmp_path, "tasks/get")) < 100
    notes = handle.book.kinds().count("note")
    assert notes <= elapsed / wire_tasks.MIN_POLL + 5, notes


# -- what the server says of a task is not a task --------------------------------------------------


@pytest.mark.parametrize("kind", ["long", "control", "number", "empty", "surrogate"])
def test_a_bad_task_id_is_a_protocol_violation_and_is_never_kept_or_sent(start, tmp_path, kind):
    handle = start(call_timeout_ms=5000)
    refused = (ProtocolViolation, UnknownOutcome) if kind == "surrogate" else ProtocolViolation
    with pytest.raises(refused) as info:
        call(handle, "bad_id", {"kind": kind})
    message = str(info.value)
    one_line(message)
    assert "\ud800" not in message and "x" * 100 not in message and len(message) < 600
    if kind == "surrogate":
        # Not text at all: the whole message is invalid (wire/jsonrpc.py), before any task
        # id is looked at; the connection ends with the call (tests/test_hostile_text.py).
        assert "lone UTF-16 surrogate" in message
    else:
        assert "task id" in message
    assert handle.book.steps == []  # nothing kept
    later = [m for m in (e.get("message") for e in server_log(tmp_path))
             if isinstance(m, dict) and str(m.get("method", "")).startswith("tasks/")]
    assert later == []  # nothing sent with it
    # The server still serves (after the surrogate, on a new connection).
    assert text_of(call(handle, "echo", {"text": "after"}, support=None)) == "after"


@pytest.mark.parametrize("where", ["create", "get"])
@pytest.mark.parametrize("as_list", [False, True], ids=["exploded", "list"])
def test_an_unknown_status_is_a_protocol_violation_in_one_line(start, where, as_list):
    handle = start(call_timeout_ms=5000)
    with pytest.raises(ProtocolViolation, match="unknown status") as info:
        call(handle, "bad_status", {"where": where, "list": as_list})
    one_line(str(info.value))
    if where == "create":
        assert handle.book.steps == []


# -- a server that loses, fails or cancels the task ------------------------------------------------


def test_a_server_that_crashes_mid_task_loses_it(start, tmp_path):
    handle = start(call_timeout_ms=5000)
    with pytest.raises(UnknownOutcome, match="task task-1 is lost: the server process it ran in has ended") as info:
        call(handle, "crash")
    one_line(str(info.value))
    assert any(e.get("event") == "crash" for e in server_log(tmp_path))
    assert handle.book.steps[-1][:3] == ("end", "task-1", "lost")


def test_a_server_that_forgets_the_task_loses_it(start):
    handle = start(call_timeout_ms=5000)
    with pytest.raises(UnknownOutcome, match=r"task task-1 is lost: the server no longer knows it \(unknown task\)"):
        call(handle, "forget")
    assert handle.book.steps[-1][:3] == ("end", "task-1", "lost")


def test_a_failed_task_is_the_servers_error(start):
    handle = start(call_timeout_ms=5000)
    with pytest.raises(RemoteError) as info:
        call(handle, "fail")
    assert info.value.code == -32000
    one_line(str(info.value))
    assert "disk on fire" in str(info.value)
    assert handle.book.steps[-1][:3] == ("end", "task-1", "failed")


def test_a_task_the_server_cancelled_is_an_unknown_outcome_with_its_message(start):
    handle = start(call_timeout_ms=5000)
    with pytest.raises(UnknownOutcome, match="task task-1 was cancelled by the server: an operator stopped it"):
        call(handle, "server_cancel")
    assert handle.book.steps[-1][:3] == ("end", "task-1", "cancelled")


# -- the "tasks" setting ---------------------------------------------------------------------------


def tool_calls(tmp_path) -> list[dict]:
    return [m["params"] for m in received(tmp_path, "tools/call")]


def test_an_optional_tool_under_never_is_called_plainly(start, tmp_path):
    handle = start(tasks="never")
    assert text_of(call(handle, "maybe", {"text": "plain"}, support="optional")) == "plain"
    params = tool_calls(tmp_path)
    assert len(params) == 1 and "task" not in params[0]
    assert handle.book.steps == []


def test_a_required_tool_under_never_is_never_sent_as_a_task(start, tmp_path):
    # Not advertised under "never" (below); called by its handle all the same, it goes plain.
    handle = start(tasks="never")
    with pytest.raises(RemoteError, match="runs only as a task"):
        call(handle, "poll_zero", {"polls": 1})
    params = tool_calls(tmp_path)
    assert len(params) == 1 and "task" not in params[0]
    assert received(tmp_path, "tasks/get") == [] and handle.book.steps == []


def test_an_optional_tool_under_always_is_called_as_a_task(start, tmp_path):
    handle = start(tasks="always")
    assert text_of(call(handle, "maybe", {"text": "as a task"}, support="optional")) == "as a task"
    params = tool_calls(tmp_path)
    assert len(params) == 1 and params[0]["task"] == {"ttl": wire_tasks.REQUESTED_TTL_MS}
    assert received(tmp_path, "tasks/get") and handle.book.kinds()[0] == "begin"


def test_an_optional_tool_under_auto_is_called_plainly_first(start, tmp_path):
    handle = start()
    assert text_of(call(handle, "maybe", {"text": "auto"}, support="optional")) == "auto"
    assert "task" not in tool_calls(tmp_path)[0]


@pytest.mark.parametrize("case", ["never", "no-capability"])
def test_a_required_tool_is_not_advertised_where_it_cannot_run_as_a_task(home, tmp_path, case):
    flags = ("--no-task-capability",) if case == "no-capability" else ()
    overrides = {"tasks": "never"} if case == "never" else {}
    config = McpConfig(home=str(home), servers=(task_config(tmp_path, *flags, **overrides),))
    with Runtime(str(home), config=config, enabled=True, watch=False) as runtime:
        composition = runtime.composition()
        names = {tool["name"] for tool in runtime.mcp().tools()}
        assert any("echo" in name for name in names) and any("maybe" in name for name in names)
        assert not any("poll_zero" in name or "never_ends" in name for name in names)
        warned = [w for w in composition.operation_warnings if "'poll_zero'" in w]
        assert len(warned) == 1 and "runs only as a task" in warned[0]
        assert ('"never"' in warned[0]) if case == "never" else ("tasks.requests.tools.call" in warned[0])
        # The optional tool is called plainly.
        assert text_of(runtime.mcp().call("t/maybe", {"text": "plain"}).as_dict()) == "plain"
    assert all("task" not in params for params in tool_calls(tmp_path))


def test_a_required_tool_runs_as_a_task_through_the_binding(home, tmp_path):
    config = McpConfig(home=str(home), servers=(task_config(tmp_path),))
    reports: list[ProgressReport] = []
    with Runtime(str(home), config=config, enabled=True, watch=False) as runtime:
        record = runtime.mcp().call("t/poll_zero", {"polls": 2}, on_progress=reports.append)
        assert text_of(record.as_dict()) == "polled 2"
    assert tool_calls(tmp_path)[0]["task"] == {"ttl": wire_tasks.REQUESTED_TTL_MS}
    assert reports and reports[0].message.startswith("task ")
