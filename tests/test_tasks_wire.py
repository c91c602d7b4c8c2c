"""wire/tasks.py: every function, in both shapes (2025-11-25 in core, the 2026 extension)."""

from __future__ import annotations

import math

import pytest

from albedo_actors.wire import tasks
from albedo_actors.wire.tasks import BadTask, TaskState


# -- support and capabilities ----------------------------------------------------------------------


@pytest.mark.parametrize(("tool", "expected"), [
    ({"name": "a"}, "forbidden"),
    ({"name": "a", "execution": {"taskSupport": "required"}}, "required"),
    ({"name": "a", "execution": {"taskSupport": "optional"}}, "optional"),
    ({"name": "a", "execution": {"taskSupport": "forbidden"}}, "forbidden"),
    ({"name": "a", "execution": {"taskSupport": "REQUIRED"}}, "forbidden"),
    ({"name": "a", "execution": {"taskSupport": ["required"]}}, "forbidden"),
    ({"name": "a", "execution": "required"}, "forbidden"),
    ({"name": "a", "execution": None}, "forbidden"),
])
def test_support(tool, expected):
    assert tasks.support(tool) == expected


@pytest.mark.parametrize(("capabilities", "expected"), [
    ({"tasks": {"requests": {"tools": {"call": {}}}}}, True),
    ({"tasks": {"requests": {"tools": {"call": {}}}, "cancel": {}, "list": {}}}, True),
    ({"tasks": {"requests": {"tools": {"call": True}}}}, False),
    ({"tasks": {"requests": {"tools": {}}}}, False),
    ({"tasks": {"requests": {"sampling": {"createMessage": {}}}}}, False),
    ({"tasks": {"requests": []}}, False),
    ({"tasks": {}}, False),
    ({"tasks": "yes"}, False),
    ({}, False),
    ({"extensions": {tasks.EXTENSION: {}}}, False),  # the 2026 word means nothing in 2025-11-25
])
def test_server_runs_tool_tasks_2025(capabilities, expected):
    assert tasks.server_runs_tool_tasks(capabilities, modern=False) is expected


@pytest.mark.parametrize(("capabilities", "expected"), [
    ({"extensions": {tasks.EXTENSION: {}}}, True),
    ({"extensions": {tasks.EXTENSION: {"x": 1}}}, True),
    ({"extensions": {tasks.EXTENSION: True}}, False),
    ({"extensions": {"io.modelcontextprotocol/other": {}}}, False),
    ({"extensions": [tasks.EXTENSION]}, False),
    ({}, False),
    ({"tasks": {"requests": {"tools": {"call": {}}}}}, False),  # the 2025-11-25 word means nothing in 2026
])
def test_server_runs_tool_tasks_2026(capabilities, expected):
    assert tasks.server_runs_tool_tasks(capabilities, modern=True) is expected


def test_server_cancels():
    assert tasks.server_cancels({"tasks": {"cancel": {}}}, modern=False) is True
    assert tasks.server_cancels({"tasks": {"requests": {"tools": {"call": {}}}}}, modern=False) is False
    assert tasks.server_cancels({"tasks": {"cancel": True}}, modern=False) is False
    assert tasks.server_cancels({"tasks": []}, modern=False) is False
    assert tasks.server_cancels({}, modern=False) is False
    assert tasks.server_cancels({}, modern=True) is True


# -- asking for a task -------------------------------------------------------------------------------


def test_augment_2025_adds_the_task_and_keeps_the_params():
    params = {"name": "t", "arguments": {"a": 1}}
    augmented = tasks.augment(params, modern=False)
    assert augmented == {"name": "t", "arguments": {"a": 1}, "task": {"ttl": tasks.REQUESTED_TTL_MS}}
    assert params == {"name": "t", "arguments": {"a": 1}}  # not changed


def test_augment_2026_is_the_params_themselves():
    params = {"name": "t"}
    assert tasks.augment(params, modern=True) is params


def test_opt_in_names_the_extension_and_keeps_the_rest():
    capabilities = {"elicitation": {}, "extensions": {"other": {"v": 1}}}
    merged = tasks.opt_in(capabilities)
    assert merged == {"elicitation": {}, "extensions": {"other": {"v": 1}, tasks.EXTENSION: {}}}
    assert capabilities == {"elicitation": {}, "extensions": {"other": {"v": 1}}}  # not changed
    assert tasks.opt_in({}) == {"extensions": {tasks.EXTENSION: {}}}
    assert tasks.opt_in({"extensions": "bad"}) == {"extensions": {tasks.EXTENSION: {}}}


@pytest.mark.parametrize(("result", "modern", "expected"), [
    ({"task": {"taskId": "a", "status": "working"}}, False, True),
    ({"task": {"taskId": "a"}, "content": []}, False, False),  # a tool result that has a "task" field
    ({"task": "a"}, False, False),
    ({"content": []}, False, False),
    ({"resultType": "task", "taskId": "a", "status": "working"}, True, True),
    ({"resultType": "complete", "content": []}, True, False),
    ({"content": []}, True, False),
    ({"task": {"taskId": "a", "status": "working"}}, True, False),  # the 2025-11-25 shape means nothing in 2026
    ({"resultType": "task", "taskId": "a"}, False, False),  # and the 2026 one nothing in 2025-11-25
])
def test_is_created(result, modern, expected):
    assert tasks.is_created(result, modern) is expected


# -- the task id rule --------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["a", "!", "~", "task-1", "x" * 256, "Ab0-_.:/@+=~!#$%^&*()[]{}|;'\",<>?`\\"])
def test_a_task_id_that_passes(value):
    assert tasks.task_id(value) == value


@pytest.mark.parametrize("value", [
    "", "x" * 257, "x" * 10_000, "a b", " a", "a ", "a\tb", "a\x7fb", "a\x00b", "a\nb", "a\rb", "\x1b[31m",
    "caf\u00e9", "\u202eevil", "\ud800", "a\u0085b", 1, 1.5, True, None, ["a"], {"a": 1},
])
def test_a_task_id_that_is_refused(value):
    with pytest.raises(BadTask) as info:
        tasks.task_id(value)
    message = str(info.value)
    for ch in "\x1b\x07\r\n\t\x00\x7f\u202e\u0085":
        assert ch not in message
    assert "\ud800" not in message
    assert len(message) < 200


def test_a_refused_id_is_shown_bounded_and_escaped():
    with pytest.raises(BadTask, match=r"\\x1b") as info:
        tasks.task_id("\x1b[2J" + "y" * 10_000)
    assert "y" * 50 not in str(info.value)
    with pytest.raises(BadTask, match=r"\(int\)"):
        tasks.task_id(12345)


# -- the poll clamp ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [
    (0, tasks.MIN_POLL),
    (-5, tasks.MIN_POLL),
    (1, tasks.MIN_POLL),
    (tasks.MIN_POLL * 1000, tasks.MIN_POLL),
    (500, 0.5),
    (1500.0, 1.5),
    (tasks.MAX_POLL * 1000, tasks.MAX_POLL),
    (3_600_000, tasks.MAX_POLL),
    (10**400, tasks.MAX_POLL),  # an int too large for a float
    (None, tasks.DEFAULT_POLL),
    ("500", tasks.DEFAULT_POLL),
    (True, tasks.DEFAULT_POLL),
    (False, tasks.DEFAULT_POLL),
    (math.nan, tasks.DEFAULT_POLL),
    (math.inf, tasks.DEFAULT_POLL),
    (-math.inf, tasks.DEFAULT_POLL),
    ([500], tasks.DEFAULT_POLL),
])
def test_poll_seconds(value, expected):
    assert tasks.poll_seconds(value) == expected


def test_the_clamp_bounds():
    assert 0 < tasks.MIN_POLL <= tasks.DEFAULT_POLL <= tasks.MAX_POLL


# -- parsing both shapes -----------------------------------------------------------------------------


def legacy_task(**fields) -> dict:
    return {"taskId": "t-1", "status": "working", "createdAt": "2026-01-01T00:00:00Z",
            "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttl": 60_000, "pollInterval": 500, **fields}


def modern_task(**fields) -> dict:
    return {"taskId": "t-1", "status": "working", "ttlMs": 60_000, "pollIntervalMs": 500, **fields}


def test_parse_2025():
    state = tasks.parse(legacy_task(statusMessage="half way"), False, "a tasks/get result")
    assert state == TaskState("t-1", "working", "half way", 0.5, 60_000)
    assert state.result is None and state.error is None and state.input_requests is None
    assert not state.terminal


def test_parse_2025_ignores_the_2026_words_and_the_2026_inline_fields():
    state = tasks.parse(legacy_task(ttl=None, pollInterval=None, ttlMs=5, pollIntervalMs=5000,
                                    result={"content": []}, error={"code": 1}), False, "x")
    assert state.poll == tasks.DEFAULT_POLL and state.ttl_ms is None
    assert state.result is None and state.error is None


def test_parse_2026_with_its_inline_fields():
    result = {"content": [{"type": "text", "text": "done"}]}
    state = tasks.parse(modern_task(status="completed", result=result), True, "x")
    assert state.status == "completed" and state.result == result and state.terminal
    assert state.poll == 0.5 and state.ttl_ms == 60_000
    failed = tasks.parse(modern_task(status="failed", error={"code": -32000, "message": "no"}), True, "x")
    assert failed.error == {"code": -32000, "message": "no"} and failed.result is None
    asking = tasks.parse(modern_task(status="input_required", inputRequests={"k": {"method": "elicitation/create"}}),
                         True, "x")
    assert asking.input_requests == {"k": {"method": "elicitation/create"}} and not asking.terminal
    odd = tasks.parse(modern_task(result="text", error=[1], inputRequests=[]), True, "x")
    assert odd.result is None and odd.error is None and odd.input_requests is None


def test_parse_2026_ignores_the_2025_words():
    state = tasks.parse({"taskId": "t-1", "status": "working", "ttl": 5, "pollInterval": 5000}, True, "x")
    assert state.poll == tasks.DEFAULT_POLL and state.ttl_ms is None


@pytest.mark.parametrize("status", sorted(tasks.STATUSES))
def test_parse_every_status(status):
    assert tasks.parse(legacy_task(status=status), False, "x").status == status
    assert tasks.parse(legacy_task(status=status), False, "x").terminal is (status in tasks.TERMINAL)


def test_lost_is_ours_and_never_a_servers():
    assert tasks.LOST in tasks.TERMINAL and tasks.LOST not in tasks.STATUSES
    with pytest.raises(BadTask, match="unknown status"):
        tasks.parse(legacy_task(status="lost"), False, "x")


@pytest.mark.parametrize("status", ["exploded", "WORKING", "", None, 1, ["working"], "exploded\x1b[2J\nline" + "z" * 500])
def test_parse_refuses_an_unknown_status_in_one_bounded_line(status):
    with pytest.raises(BadTask, match="unknown status") as info:
        tasks.parse(legacy_task(status=status), False, "a tasks/get result")
    message = str(info.value)
    assert "\x1b" not in message and "\n" not in message and "z" * 100 not in message
    assert "task t-1" in message and "a tasks/get result" in message


@pytest.mark.parametrize("value", [None, "t-1", ["t-1"], 3])
def test_parse_refuses_what_is_not_an_object(value):
    with pytest.raises(BadTask, match="not a task object"):
        tasks.parse(value, False, "a CreateTaskResult")


@pytest.mark.parametrize("task_id", ["", "x" * 257, "a b", None, 7])
def test_parse_refuses_a_bad_id(task_id):
    with pytest.raises(BadTask, match="task id"):
        tasks.parse(legacy_task(taskId=task_id), False, "x")
    with pytest.raises(BadTask, match="task id"):
        tasks.parse(modern_task(taskId=task_id), True, "x")


def test_parse_escapes_and_bounds_the_status_message():
    state = tasks.parse(legacy_task(statusMessage="\x1b]0;pwned\x07\u202eevil\r\nnext" + "m" * 10_000), False, "x")
    message = state.message or ""
    for ch in "\x1b\x07\u202e\r\n":
        assert ch not in message
    assert len(message) <= tasks.MESSAGE_LIMIT
    assert tasks.parse(legacy_task(statusMessage=""), False, "x").message is None
    assert tasks.parse(legacy_task(statusMessage=42), False, "x").message is None


@pytest.mark.parametrize(("ttl", "expected"), [
    (60_000, 60_000), (0, 0), (1.9, 1), (-1, None), (None, None), ("60000", None), (True, None),
    (math.nan, None), (math.inf, None), (10**30, 10 * 365 * 24 * 3600 * 1000),
])
def test_the_ttl(ttl, expected):
    assert tasks.parse(legacy_task(ttl=ttl), False, "x").ttl_ms == expected
    assert tasks.parse(modern_task(ttlMs=ttl), True, "x").ttl_ms == expected


def test_created_in_both_shapes():
    legacy = tasks.created({"task": legacy_task()}, False)
    assert legacy.task_id == "t-1" and legacy.status == "working"
    modern = tasks.created({"resultType": "task", **modern_task()}, True)
    assert modern.task_id == "t-1" and modern.poll == 0.5
    with pytest.raises(BadTask, match="a CreateTaskResult that is not a task object"):
        tasks.created({"content": []}, False)
    with pytest.raises(BadTask, match="task id"):
        tasks.created({"resultType": "task"}, True)


def test_status_line():
    assert tasks.status_line(TaskState("t", "working", "half way", 1.0, None)) == "task working: half way"
    assert tasks.status_line(TaskState("t", "input_required", None, 1.0, None)) == "task input required"
    assert tasks.status_line(TaskState("t", "completed", None, 1.0, None)) == "task completed"


def test_needs_extension():
    needs = {"requiredCapabilities": {"extensions": {tasks.EXTENSION: {}}}}
    assert tasks.needs_extension(tasks.MISSING_CAPABILITY, needs) is True
    assert tasks.needs_extension(-32602, needs) is False
    assert tasks.needs_extension(tasks.MISSING_CAPABILITY, {"requiredCapabilities": {"extensions": {"other": {}}}}) is False
    assert tasks.needs_extension(tasks.MISSING_CAPABILITY, {"requiredCapabilities": {"elicitation": {}}}) is False
    assert tasks.needs_extension(tasks.MISSING_CAPABILITY, {"requiredCapabilities": {"extensions": [tasks.EXTENSION]}}) is False
    assert tasks.needs_extension(tasks.MISSING_CAPABILITY, {"requiredCapabilities": "extensions"}) is False
    assert tasks.needs_extension(tasks.MISSING_CAPABILITY, None) is False
    assert tasks.needs_extension(tasks.MISSING_CAPABILITY, "tasks") is False
