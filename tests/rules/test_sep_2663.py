"""The client rules of SEP-2663 (tests/rules/rules.json; docs/rules.rst): the tasks
extension of 2026-07-28, through the real client (ServerHandle, Runtime over a store)
against a raw scripted server of our own (tests/servers/tasks_http_server.py), whose
recorded POSTs (headers and bodies) are what the assertions read.

Every wait is bounded; nothing sleeps to synchronise: a task held ``working`` by the
server is released by the test once the client has shown what the test needs.
"""

from __future__ import annotations

import json
import os
import sys
import threading

import pytest

from albedo_actors.actors.client import ServerHandle
from albedo_actors.config import McpConfig, ServerConfig
from albedo_actors.connection.progress import Cancel
from albedo_actors.errors import ProtocolViolation, TimedOut
from albedo_actors.runtime import Runtime
from albedo_actors.wire import tasks as wire_tasks
from helpers import HERE, text_of

sys.path.insert(0, os.path.join(HERE, "servers"))
from tasks_http_server import TasksHTTPServer  # noqa: E402  (tests/servers)

from albedo_actors.demo.server import text_result  # noqa: E402

WAIT = 20.0
ELICIT = {"method": "elicitation/create",
          "params": {"message": "Which reading?", "requestedSchema": {"type": "object", "properties": {
              "reading": {"type": "string"}}}}}


@pytest.fixture
def server():
    with TasksHTTPServer() as running:
        yield running


@pytest.fixture
def clients(tmp_path):
    """``clients.start(config, handlers=...)``: ServerHandles, all stopped afterwards."""

    class Started(list):
        def start(self, config: ServerConfig, handlers: dict | None = None) -> ServerHandle:
            handle = ServerHandle.start(config, str(tmp_path), handlers=handlers)
            self.append(handle)
            return handle

    started = Started()
    yield started
    for handle in started:
        handle.stop()


def config(server, **overrides) -> ServerConfig:
    return ServerConfig(name="t", type="http", url=server.url, **{"call_timeout_ms": 10_000, **overrides})


def call(handle, tool: str, arguments: dict | None = None, **kw) -> dict:
    return handle.call_tool_and_deadline(tool, arguments or {}, **kw)[0]


def bodies(server, method: str) -> list[dict]:
    return [record.json() for record in server.posts(method)]


# -- the result of a request ---------------------------------------------------------------------


@pytest.mark.rule("sep-2663-client-handles-polymorphic-result")
def test_a_call_that_opted_in_takes_either_a_tool_result_or_a_task(server, clients):
    """A tools/call that opted in to the tasks extension gives the tool's result whether the
    server answered with a CallToolResult at once or with a CreateTaskResult (the task is
    then polled with tasks/get to its inline result)."""
    server.script = [{"status": "working"}, {"status": "completed", "result": text_result("the job's result")}]
    handle = clients.start(config(server, tasks="always"))
    assert text_of(call(handle, "inline")) == "inline result"
    assert text_of(call(handle, "job")) == "the job's result"
    calls = bodies(server, "tools/call")
    assert [c["params"]["name"] for c in calls] == ["inline", "job"]
    assert all(wire_tasks.EXTENSION in c["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]["extensions"]
               for c in calls)  # both opted in: the answer's form was the server's choice
    assert [b["params"]["taskId"] for b in bodies(server, "tasks/get")] == ["job-1", "job-1"]


@pytest.mark.rule("sep-2663-client-rejects-task-result-on-unsupported")
def test_a_task_answering_a_request_that_did_not_ask_for_one_is_a_protocol_violation(server, clients):
    """A CreateTaskResult (resultType "task") answering a request that did not opt in to a
    task (a resources/read, or a tools/call sent without the extension) is a
    ProtocolViolation, in one line; nothing is polled, and the connection still serves."""
    handle = clients.start(config(server, tasks="never"))
    with pytest.raises(ProtocolViolation) as read:
        handle.read_resource("task://rogue", timeout=WAIT)
    with pytest.raises(ProtocolViolation) as tool:
        call(handle, "rogue")
    for raised, method in ((read, "resources/read"), (tool, "tools/call")):
        line = str(raised.value)
        assert f"{method} returned a task (resultType 'task') though it did not ask for one" in line, line
        assert "\n" not in line
    assert "extensions" not in bodies(server, "tools/call")[0]["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
    assert not server.posts("tasks/get") and not server.posts("tasks/cancel")
    assert text_of(call(handle, "inline")) == "inline result"


# -- cancelling ------------------------------------------------------------------------------------


@pytest.mark.rule("sep-2663-cancel-not-via-cancelled-notification")
def test_a_task_given_up_is_cancelled_with_tasks_cancel_never_notifications_cancelled(server, clients):
    """A task whose caller gives up (a Cancel) or whose deadline passes is cancelled with
    tasks/cancel naming its id; no notifications/cancelled is sent for it."""
    server.script = ["hold"]
    server.poll_ms = 250
    handle = clients.start(config(server, tasks="always", call_timeout_ms=1500, max_call_timeout_ms=1500))
    with pytest.raises(TimedOut, match="the task was cancelled"):
        call(handle, "job")
    cancel = Cancel()

    def watch(report) -> None:
        if "task working" in (report.message or ""):
            cancel.cancel()

    with pytest.raises(TimedOut, match="its caller gave up"):
        call(handle, "job", on_progress=watch, cancel=cancel, timeout=WAIT)
    assert server.cancels == ["job-1", "job-2"]
    assert [b["params"]["taskId"] for b in bodies(server, "tasks/cancel")] == ["job-1", "job-2"]
    assert not server.posts("notifications/cancelled")


# -- HTTP headers ----------------------------------------------------------------------------------


@pytest.mark.rule("sep-2663-client-emits-mcp-name-on-tasks-methods")
def test_every_tasks_request_over_http_names_its_task_in_mcp_name(server, clients):
    """Over Streamable HTTP, every tasks/get, tasks/update and tasks/cancel carries
    Mcp-Name set to its params.taskId (and Mcp-Method set to its method)."""
    server.asks = {}
    server.script = [{"status": "input_required", "inputRequests": {"k1": ELICIT}}, "hold"]
    server.poll_ms = 250
    handle = clients.start(config(server, tasks="always", call_timeout_ms=2000, max_call_timeout_ms=2000),
                           handlers={"elicitation": lambda params: {"action": "accept", "content": {"reading": "x"}}})
    with pytest.raises(TimedOut):
        call(handle, "job")
    seen = set()
    for method in ("tasks/get", "tasks/update", "tasks/cancel"):
        records = server.posts(method)
        assert records, method
        for record in records:
            assert record.header("Mcp-Name") == record.json()["params"]["taskId"] == "job-1"
            assert record.header("Mcp-Method") == method
            seen.add(method)
    assert seen == {"tasks/get", "tasks/update", "tasks/cancel"}


# -- polling ----------------------------------------------------------------------------------------


@pytest.mark.rule("sep-2663-respect-pollintervalms-provided-responses-determini")
def test_polls_come_at_the_servers_poll_interval(server, clients):
    """After the first quick polls of a new task (at once, then 25, 100 and 400 ms), tasks/get
    comes at the pollIntervalMs the server last gave (clamped to 0.25-15 s), not faster."""
    server.poll_ms = 600
    server.script = [{"status": "working"}] * 7 + [{"status": "completed", "result": text_result("ok")}]
    handle = clients.start(config(server, tasks="always"))
    assert text_of(call(handle, "job")) == "ok"
    times = [record.time for record in server.posts("tasks/get")]
    assert len(times) == 8
    gaps = [b - a for a, b in zip(times, times[1:])]
    steady = gaps[4:]  # after the ramp's waits of 0, 25, 100 and 400 ms
    assert len(steady) >= 3 and min(steady) >= 0.6 * 0.9, gaps
    assert max(steady) < 0.6 + 1.0, gaps  # and it is followed: no slower schedule of our own


@pytest.mark.rule("sep-2663-continue-polling-until-task-reaches-terminal")
def test_a_task_is_polled_until_it_ends_and_not_after(server, clients):
    """A task is polled with tasks/get for as long as it is working or waiting for input,
    and no more once it is completed; one still working at the call's deadline is polled
    until then, cancelled, and not polled after."""
    server.poll_ms = 250
    server.script = [{"status": "working"}] * 5 + [{"status": "completed", "result": text_result("ended")}]
    handle = clients.start(config(server, tasks="always"))
    assert text_of(call(handle, "job")) == "ended"
    assert len(server.posts("tasks/get")) == 6  # five working, then the one that said completed
    assert server.tasks["job-1"]["gets"] == 6
    server.script = ["hold"]
    with pytest.raises(TimedOut, match="the task was cancelled"):
        call(handle, "job", timeout=1.5)
    assert server.cancels == ["job-2"]
    cancelled_at = server.posts("tasks/cancel")[0].time
    polls = [r.time for r in server.posts("tasks/get") if r.json()["params"]["taskId"] == "job-2"]
    assert polls and max(polls) <= cancelled_at  # polled while it ran, and not after it was cancelled


@pytest.mark.rule("sep-2663-persist-task-ids-durable-storage-so")
def test_a_task_id_is_kept_in_the_store_and_another_runtime_resumes_it(server, tmp_path, store):
    """Each task's id is written to the store when the server creates it; a host that closes
    (or dies) mid-task leaves the row, and a new Runtime on the same store lists the task
    and polls it to its result."""
    home = str(tmp_path)
    server.poll_ms = 250
    server.script = ["hold", {"status": "completed", "result": text_result("resumed result")}]
    servers = (config(server, tasks="always", call_timeout_ms=20_000),)
    working = threading.Event()
    outcome: list[str] = []
    with Runtime(home, store, config=McpConfig(home=home, servers=servers), enabled=True, background=False) as first:
        mcp = first.mcp()

        def run() -> None:
            try:
                mcp.call("t/job", on_progress=lambda report: working.set() if "working" in (report.message or "") else None)
                outcome.append("returned")
            except Exception as exc:  # noqa: BLE001 - reported to the test
                outcome.append(type(exc).__name__)

        caller = threading.Thread(target=run)
        caller.start()
        assert working.wait(WAIT)
        listed = mcp.tasks()
        assert [(t["id"], t["tool"], t["state"]) for t in listed] == [("job-1", "job", "working")]
    caller.join(WAIT)
    assert not caller.is_alive() and outcome and outcome != ["returned"], outcome  # it left while the task ran
    gets_before = server.tasks["job-1"]["gets"]
    server.release.set()
    with Runtime(home, store, config=McpConfig(home=home, servers=servers), enabled=True, background=False) as second:
        mcp = second.mcp()
        assert [t["id"] for t in mcp.tasks()] == ["job-1"]
        result = mcp.task_result("job-1", timeout=WAIT)
        assert "resumed result" in json.dumps(result.as_dict())
    assert server.tasks["job-1"]["gets"] > gets_before
    assert server.created == 1 and not server.cancels  # resumed, not started again nor cancelled


# -- input ------------------------------------------------------------------------------------------


def elicit_recorder():
    seen: list[dict] = []

    def elicit(params: dict) -> dict:
        seen.append(params)
        return {"action": "accept", "content": {"reading": f"answer {len(seen)}"}}

    return seen, elicit


@pytest.mark.rule("sep-2663-inspect-field-provide-responses-via-inputresponses")
def test_input_required_is_answered_with_tasks_update(server, clients):
    """The inputRequests of an input_required poll are handed to the host's handler, and its
    answers go back in one tasks/update's inputResponses, under the same keys; the task
    then goes on to its result."""
    seen, elicit = elicit_recorder()
    server.script = [{"status": "input_required", "inputRequests": {"which": ELICIT}},
                     {"status": "completed", "result": text_result("answered")}]
    handle = clients.start(config(server, tasks="always"), handlers={"elicitation": elicit})
    assert text_of(call(handle, "job")) == "answered"
    assert seen == [ELICIT["params"]]
    assert server.updates == [("job-1", {"which": {"action": "accept", "content": {"reading": "answer 1"}}})]


@pytest.mark.rule("sep-2663-treat-each-entry-inputrequests-would-equivalent", "sep-2663-hosts-apply-same-trust-model-these")
def test_a_tasks_input_request_meets_the_same_handler_and_rules_as_a_standalone_one(server, clients):
    """An inputRequests entry of a task is answered exactly as the same request outside a task
    (an MRTR input_required round): by the same host handler, with the same params; a kind
    of request the host has no handler for (and so did not declare) is refused in both, the
    call failing with a ProtocolViolation; nothing is answered for it, and the task, which
    nothing else would answer, is cancelled."""
    seen, elicit = elicit_recorder()
    server.asks = {"which": ELICIT}
    server.script = [{"status": "input_required", "inputRequests": {"which": ELICIT}},
                     {"status": "completed", "result": text_result("answered")}]
    handle = clients.start(config(server, tasks="always"), handlers={"elicitation": elicit})
    assert json.loads(text_of(call(handle, "ask"))) == {"which": {"action": "accept", "content": {"reading": "answer 1"}}}
    assert text_of(call(handle, "job")) == "answered"
    assert seen == [ELICIT["params"], ELICIT["params"]]
    # Sampling: no handler, so not declared, and refused alike in both channels.
    sampling = {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}
    server.asks = {"sample": sampling}
    server.script = [{"status": "input_required", "inputRequests": {"sample": sampling}}, "hold"]
    with pytest.raises(ProtocolViolation) as standalone:
        call(handle, "ask")
    with pytest.raises(ProtocolViolation) as in_task:
        call(handle, "job")
    for raised in (standalone, in_task):
        assert "sampling/createMessage" in str(raised.value) and "did not declare" in str(raised.value)
    assert server.cancels == ["job-2"]
    assert len(seen) == 2 and server.updates == [("job-1", {"which": {"action": "accept", "content": {"reading": "answer 2"}}})]
    for body in bodies(server, "tools/call") + bodies(server, "tasks/get"):
        assert "sampling" not in body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]


@pytest.mark.rule("sep-2663-deduplicate-inputrequests-keys-across-consecutive-p")
def test_an_input_request_repeated_across_polls_is_presented_once(server, clients):
    """An inputRequests key that later polls repeat (the server has not taken the answer in
    yet) reaches the host's handler once; a new key beside it reaches it once too."""
    seen, elicit = elicit_recorder()
    second = {"method": "elicitation/create", "params": {**ELICIT["params"], "message": "And the unit?"}}
    server.script = ([{"status": "input_required", "inputRequests": {"which": ELICIT}}] * 3
                     + [{"status": "input_required", "inputRequests": {"which": ELICIT, "unit": second}}] * 3
                     + [{"status": "completed", "result": text_result("both")}])
    handle = clients.start(config(server, tasks="always"), handlers={"elicitation": elicit})
    assert text_of(call(handle, "job")) == "both"
    assert len(server.posts("tasks/get")) == 7
    assert [params["message"] for params in seen] == ["Which reading?", "And the unit?"]


@pytest.mark.rule("sep-2663-track-inputrequests-keys-avoid-responding-requests")
def test_each_input_request_key_is_answered_once(server, clients):
    """Each inputRequests key is answered in exactly one tasks/update, however many polls
    repeat it."""
    seen, elicit = elicit_recorder()
    second = {"method": "elicitation/create", "params": {**ELICIT["params"], "message": "And the unit?"}}
    server.script = ([{"status": "input_required", "inputRequests": {"which": ELICIT}}] * 2
                     + [{"status": "input_required", "inputRequests": {"which": ELICIT, "unit": second}}] * 3
                     + [{"status": "completed", "result": text_result("both")}])
    handle = clients.start(config(server, tasks="always"), handlers={"elicitation": elicit})
    assert text_of(call(handle, "job")) == "both"
    answered = [key for _task, responses in server.updates for key in responses]
    assert answered == ["which", "unit"]
    assert [sorted(responses) for _task, responses in server.updates] == [["which"], ["unit"]]
