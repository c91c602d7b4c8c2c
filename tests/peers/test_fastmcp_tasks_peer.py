"""The fastmcp-tasks peer (tests/servers/tasks_fastmcp_server.py) starts and runs tasks.

These tests speak raw JSON-RPC with ``requests`` (and a pipe for stdio) to prove only
that the peer works as the client's task tests expect: the tasks extension
``io.modelcontextprotocol/tasks`` at 2026-07-28, opted in per request in
``_meta``; a tasked ``tools/call`` answers a task handle (``resultType: "task"``) and
``tasks/get`` is polled until the task ends, its result inlined.

The peer runs on ``$ALBEDO_FASTMCP_TASKS_PY`` (scripts/test makes .venv-fastmcp-tasks and
sets it); without it the tests skip, and fail under CI=true.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import pytest
import requests

from helpers import FASTMCP_TASKS_SERVER, HERE, FastMCPTasksServer

VERSION = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
DEADLINE = 20.0  # seconds any one task may take to reach the status a test waits for
TERMINAL = {"completed", "failed", "cancelled"}


def tasks_python() -> str:
    python = os.environ.get("ALBEDO_FASTMCP_TASKS_PY") or os.path.join(
        os.path.dirname(HERE), ".venv-fastmcp-tasks", "bin", "python"
    )
    if not os.access(python, os.X_OK):
        message = (
            f"the fastmcp-tasks venv is missing ({python}); run scripts/test, which makes "
            ".venv-fastmcp-tasks and sets ALBEDO_FASTMCP_TASKS_PY"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return python


@pytest.fixture(scope="module")
def peer():
    server = FastMCPTasksServer(tasks_python())
    server.start()
    yield server.url
    server.stop()  # SIGTERM, then SIGKILL after STOP_TIMEOUT


def meta(opt_in: bool = True) -> dict:
    capabilities = {"extensions": {TASKS: {}}} if opt_in else {}
    return {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "albedo-tests", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }


_ids = iter(range(1, 1 << 30))


def rpc(url: str, method: str, params: dict, *, name: str | None = None, opt_in: bool = True) -> dict:
    """POST one modern request; the JSON-RPC response (the peer answers these with JSON)."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": method,
    }
    if name is not None:
        headers["Mcp-Name"] = name
    body = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": {**params, "_meta": meta(opt_in)}}
    response = requests.post(url, json=body, headers=headers, timeout=10)
    assert response.headers["content-type"].startswith("application/json"), response.text
    return response.json()


def poll(send, task_id: str, until: set[str], interval_ms: int) -> list[dict]:
    """``tasks/get`` every ``interval_ms`` (the peer's pollIntervalMs) until the status is in
    ``until``; every result seen, in order. Fails after DEADLINE seconds."""
    seen = []
    deadline = time.monotonic() + DEADLINE
    while True:
        result = send("tasks/get", {"taskId": task_id}, name=task_id)["result"]
        seen.append(result)
        assert result["taskId"] == task_id
        if result["status"] in until:
            return seen
        assert result["status"] not in TERMINAL, result
        assert time.monotonic() < deadline, f"task still {result['status']} after {DEADLINE:g} s"
        time.sleep(interval_ms / 1000)  # the interval the peer asks for between polls


def created(response: dict) -> dict:
    task = response["result"]
    assert task["resultType"] == "task"
    assert task["status"] == "working"
    assert isinstance(task["pollIntervalMs"], int) and isinstance(task["ttlMs"], int)
    return task


def test_the_peer_advertises_the_tasks_extension(peer):
    discovered = rpc(peer, "server/discover", {})["result"]
    assert VERSION in discovered["supportedVersions"]
    assert TASKS in discovered["capabilities"]["extensions"]
    names = [tool["name"] for tool in rpc(peer, "tools/list", {})["result"]["tools"]]
    assert names == ["quick", "slow", "ask", "fail", "forever"]


def test_an_optional_tool_answers_inline_without_the_opt_in_and_as_a_task_with_it(peer):
    inline = rpc(peer, "tools/call", {"name": "quick", "arguments": {"x": "a"}}, name="quick", opt_in=False)["result"]
    assert inline["resultType"] == "complete"
    assert inline["content"] == [{"type": "text", "text": "quick a"}]
    assert inline["structuredContent"] == {"x": "a"}

    send = lambda *args, **kwargs: rpc(peer, *args, **kwargs)  # noqa: E731
    task = created(send("tools/call", {"name": "quick", "arguments": {"x": "b"}}, name="quick"))
    done = poll(send, task["taskId"], {"completed"}, task["pollIntervalMs"])[-1]
    assert done["resultType"] == "complete"
    assert done["result"]["content"] == [{"type": "text", "text": "quick b"}]
    assert done["result"]["structuredContent"] == {"x": "b"}


def test_a_required_tool_without_the_opt_in_is_refused(peer):
    error = rpc(peer, "tools/call", {"name": "slow", "arguments": {"seconds": 0}}, name="slow", opt_in=False)["error"]
    assert error["code"] == -32021
    assert error["data"] == {"requiredCapabilities": {"extensions": {TASKS: {}}}}


def test_a_slow_task_reports_its_steps_and_completes(peer):
    send = lambda *args, **kwargs: rpc(peer, *args, **kwargs)  # noqa: E731
    task = created(send("tools/call", {"name": "slow", "arguments": {"seconds": 1.5}}, name="slow"))
    seen = poll(send, task["taskId"], {"completed"}, task["pollIntervalMs"])
    messages = [result["statusMessage"] for result in seen if "statusMessage" in result]
    assert messages and all(message.startswith("step ") for message in messages)
    assert seen[-1]["result"]["structuredContent"] == {"result": "slept 1.5"}


def test_a_task_asks_for_input_and_resumes_with_the_answer(peer):
    send = lambda *args, **kwargs: rpc(peer, *args, **kwargs)  # noqa: E731
    task = created(send("tools/call", {"name": "ask", "arguments": {"question": "colour?"}}, name="ask"))
    waiting = poll(send, task["taskId"], {"input_required"}, task["pollIntervalMs"])[-1]
    [(key, request)] = waiting["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    assert request["params"]["message"] == "colour?"
    answer = {"action": "accept", "content": {"answer": "blue"}}
    ack = send("tasks/update", {"taskId": task["taskId"], "inputResponses": {key: answer}}, name=task["taskId"])
    assert ack["result"]["resultType"] == "complete"
    done = poll(send, task["taskId"], {"completed"}, task["pollIntervalMs"])[-1]
    assert done["result"]["content"] == [{"type": "text", "text": "answer: blue"}]


def test_a_failing_task_fails_and_a_cancelled_one_is_cancelled(peer):
    send = lambda *args, **kwargs: rpc(peer, *args, **kwargs)  # noqa: E731
    failing = created(send("tools/call", {"name": "fail", "arguments": {}}, name="fail"))
    failed = poll(send, failing["taskId"], TERMINAL, failing["pollIntervalMs"])[-1]
    assert failed["status"] == "failed"
    assert failed["error"]["code"] == -32603

    endless = created(send("tools/call", {"name": "forever", "arguments": {}}, name="forever"))
    ack = send("tasks/cancel", {"taskId": endless["taskId"]}, name=endless["taskId"])
    assert ack["result"]["resultType"] == "complete"
    assert poll(send, endless["taskId"], TERMINAL, endless["pollIntervalMs"])[-1]["status"] == "cancelled"

    unknown = send("tasks/get", {"taskId": "no-such-task"}, name="no-such-task")
    assert unknown["error"]["code"] == -32602


def test_the_tasks_extension_works_over_stdio():
    proc = subprocess.Popen(
        [tasks_python(), FASTMCP_TASKS_SERVER, "stdio"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    # A bounded read: a watchdog kills the peer if it stays silent, which ends readline().
    watchdog = threading.Timer(DEADLINE, proc.kill)
    watchdog.start()
    try:

        def send(method: str, params: dict, *, name: str | None = None) -> dict:
            request_id = next(_ids)
            message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**params, "_meta": meta()}}
            proc.stdin.write(json.dumps(message) + "\n")
            proc.stdin.flush()
            while True:
                line = proc.stdout.readline()
                assert line, "the stdio peer closed its output"
                answer = json.loads(line)
                if answer.get("id") == request_id and "method" not in answer:
                    return answer

        assert TASKS in send("server/discover", {})["result"]["capabilities"]["extensions"]
        task = created(send("tools/call", {"name": "quick", "arguments": {"x": "s"}}))
        done = poll(send, task["taskId"], {"completed"}, task["pollIntervalMs"])[-1]
        assert done["result"]["structuredContent"] == {"x": "s"}
    finally:
        watchdog.cancel()
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
