"""Tool calls that run as MCP tasks, through the public faces, against the real peers.

- ``@modelcontextprotocol/server-everything`` (2025-11-25 core tasks): its
  ``simulate-research-query`` requires a task; over stdio and streamable HTTP.
- the fastmcp-tasks peer (tests/servers/tasks_fastmcp_server.py, the 2026-07-28
  extension): ``quick`` (optional), ``slow``, ``ask``, ``fail``, ``forever`` (required),
  over stdio and HTTP.

Everything goes through ``Runtime`` and ``mcp.call`` / ``await amcp.call`` (and the CLI's
``albedo-mcp call``). What the peer received is proven on the peer: a stdio peer is run
behind ``tee`` (what it read and what it wrote, one JSON-RPC message a line, in files of
the test's own); an HTTP fastmcp-tasks peer is stateless, so a raw ``tasks/get`` reads the
task after the call. What the client sent is counted with its OpenTelemetry spans (one per
request; tests/otel_kit.py).

The peers come from scripts/test (ALBEDO_PEERS, ALBEDO_FASTMCP_TASKS_PY); a missing
server-everything fails, a missing fastmcp-tasks venv skips (and fails under CI=true).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import re
import shlex
import time

import pytest

import otel_kit
from albedo_actors.config import McpConfig, ServerConfig
from albedo_actors.errors import ConfigError, RemoteError, TimedOut
from albedo_actors.runtime import Runtime
import helpers
from helpers import FASTMCP_TASKS_SERVER, PEERS, FastMCPTasksServer, require_everything, schema_validate, text_of
from test_cli import albedo, write_config
from test_fastmcp_tasks_peer import rpc, tasks_python

RESEARCH = "simulate-research-query"
STAGES = ["Gathering sources...", "Analyzing content...", "Synthesizing findings...", "Generating report..."]
WAIT = 20.0  # seconds: a bound on waiting for what a peer is proven to do, never an expected duration


# -- peers and their records --------------------------------------------------------------


class Recorded:
    """A stdio server run behind ``tee``: every line it read and every line it wrote."""

    def __init__(self, directory, name: str) -> None:
        self.read_path = directory / f"{name}.read.jsonl"
        self.wrote_path = directory / f"{name}.wrote.jsonl"

    def config(self, name: str, argv: list[str], **overrides) -> ServerConfig:
        script = f'tee -a {shlex.quote(str(self.read_path))} | "$0" "$@" | tee -a {shlex.quote(str(self.wrote_path))}'
        return ServerConfig(name=name, type="stdio", command="sh", args=("-c", script, *argv), **overrides)

    @staticmethod
    def _lines(path) -> list[dict]:
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]

    def read(self, method: str | None = None) -> list[dict]:
        """The messages the server read (requests and notifications of ``method``)."""
        return [m for m in self._lines(self.read_path) if method is None or m.get("method") == method]

    def answer(self, request: dict) -> dict | None:
        """The server's response to one request it read (None: none yet)."""
        for message in self._lines(self.wrote_path):
            if message.get("id") == request["id"] and "method" not in message:
                return message
        return None


def until(check, what: str):
    """``check()``'s first truthy value, asked again until WAIT seconds have passed."""
    return helpers.until(check, what, WAIT)


def spans(exporter) -> list[str]:
    return [span.name for span in exporter.get_finished_spans()]


def reports_into(reports: list):
    return lambda report: reports.append(report)


def assert_increasing(reports) -> None:
    numbers = [report.progress for report in reports]
    assert numbers == sorted(set(numbers)), numbers


@pytest.fixture(scope="module")
def fastmcp_http():
    server = FastMCPTasksServer(tasks_python())
    server.start()
    yield server.url
    server.stop()


@pytest.fixture(params=["stdio", "http"])
def fastmcp(request, tmp_path, fastmcp_http):
    """``fastmcp(name, **overrides)``: a ServerConfig of the fastmcp-tasks peer, and
    ``fastmcp.record(name)`` (stdio: its Recorded; http: None)."""
    transport = request.param

    class Peer:
        url = fastmcp_http
        records: dict[str, Recorded] = {}

        def __call__(self, name: str, **overrides) -> ServerConfig:
            if transport == "http":
                return ServerConfig(name=name, type="http", url=fastmcp_http, **overrides)
            self.records[name] = Recorded(tmp_path, name)
            return self.records[name].config(name, [tasks_python(), FASTMCP_TASKS_SERVER, "stdio"], **overrides)

        def record(self, name: str) -> Recorded | None:
            return self.records.get(name)

    Peer.transport = transport
    return Peer()


@pytest.fixture(params=["stdio", "http"])
def everything(request, everything_http):
    """``everything(name, **overrides)``: a ServerConfig of server-everything."""
    path = require_everything()

    def config(name: str, **overrides) -> ServerConfig:
        if request.param == "http":
            return ServerConfig(name=name, type="http", url=everything_http[0], **overrides)
        return ServerConfig(name=name, type="stdio", command="node", args=(path, "stdio"), **overrides)

    return config


def runtime(tmp_path, *servers: ServerConfig, **options) -> Runtime:
    home = str(tmp_path)
    return Runtime(home, config=McpConfig(home=home, servers=servers), enabled=True, background=False, **options)


# -- server-everything (2025-11-25) ------------------------------------------------------------


def test_everything_research_query_runs_as_a_task_with_stages_as_progress_and_asks_the_host(tmp_path, everything):
    asked = []

    def elicit(params):
        asked.append(params)
        return {"action": "accept", "content": {"interpretation": "snake"}}

    plain_reports, ambiguous_reports = [], []
    with runtime(tmp_path, everything("every"), handlers={"elicitation": elicit}) as rt:
        mcp = rt.mcp()
        described = mcp.describe(f"every/{RESEARCH}")
        assert described["operation"] == RESEARCH and "topic" in described["inputSchema"]["properties"]
        # Both at once: two tasks of one server, each followed on its own caller's thread.
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            plain = pool.submit(mcp.call, f"every/{RESEARCH}", topic="tides", on_progress=reports_into(plain_reports))
            ambiguous = pool.submit(mcp.call, f"every/{RESEARCH}", topic="python", ambiguous=True,
                                    on_progress=reports_into(ambiguous_reports))
            plain, ambiguous = plain.result(WAIT * 3).as_dict(), ambiguous.result(WAIT * 3).as_dict()

    for result in (plain, ambiguous):
        schema_validate("2025-11-25", "CallToolResult", result)
        assert result.get("isError", False) is False
    assert "# Research Report: tides" in text_of(plain)
    assert "Clarification" not in text_of(plain)
    # The stages, as "task working: ..." in order, numbered upwards.
    lines = [report.message for report in plain_reports]
    assert [line for line in lines if line.startswith("task working: ")] == [f"task working: {stage}" for stage in STAGES]
    assert lines[-1].startswith("task completed")
    assert_increasing(plain_reports)
    assert {report.server for report in plain_reports} == {"every"}

    # The ambiguous one: the server's question reached the handler once, and the report
    # names the interpretation the handler chose.
    assert "# Research Report: python (snake)" in text_of(ambiguous)
    assert "**Clarification**: snake" in text_of(ambiguous)
    assert len(asked) == 1
    assert 'The research query "python" could have multiple interpretations' in asked[0]["message"]
    choices = asked[0]["requestedSchema"]["properties"]["interpretation"]["oneOf"]
    assert {choice["const"] for choice in choices} == {"programming", "snake", "comedy"}
    assert any(report.message.startswith("task input required: ") for report in ambiguous_reports)
    assert_increasing(ambiguous_reports)


def test_everything_without_a_handler_and_under_never(tmp_path, everything):
    reports = []
    with runtime(tmp_path, everything("every"), everything("nev", tasks="never")) as rt:
        composition = rt.composition()
        mcp = rt.mcp()
        # No elicitation declared: the server skips its question and reports anyway.
        result = mcp.call(f"every/{RESEARCH}", topic="python", ambiguous=True, on_progress=reports_into(reports)).as_dict()
        schema_validate("2025-11-25", "CallToolResult", result)
        assert "# Research Report: python" in text_of(result)
        assert "Clarification" not in text_of(result)
        assert not any("input required" in report.message for report in reports)
        assert [r.message for r in reports if r.message.startswith("task working")] == [f"task working: {s}" for s in STAGES]

        # "never": the tool is not offered, the composition says why, and a call is refused here.
        advertised = {(tool["server"], tool["operation"]) for tool in mcp.tools()}
        assert ("every", RESEARCH) in advertised and ("nev", RESEARCH) not in advertised
        assert ("nev", "echo") in advertised
        assert (f"server 'nev': tool '{RESEARCH}' left out: it runs only as a task, and the server's \"tasks\" "
                'setting is "never"') in composition.operation_warnings
        with pytest.raises(ConfigError, match="runs only as a task") as refused:
            mcp.call(f"nev/{RESEARCH}", topic="x")
        assert '"never"' in str(refused.value)


# -- fastmcp-tasks (2026-07-28) ------------------------------------------------------------------


def test_fastmcp_quick_runs_inline_under_auto_and_as_a_task_under_always(tmp_path, fastmcp):
    with otel_kit.recording() as exporter, runtime(tmp_path, fastmcp("auto"), fastmcp("always", tasks="always")) as rt:
        mcp = rt.mcp()
        inline_reports, task_reports = [], []
        exporter.clear()
        inline = mcp.call("auto/quick", x="a", on_progress=reports_into(inline_reports)).as_dict()
        inline_spans = spans(exporter)
        exporter.clear()
        tasked = mcp.call("always/quick", x="a", on_progress=reports_into(task_reports)).as_dict()
        tasked_spans = spans(exporter)

    # "auto": one plain tools/call, answered inline; no task, no poll, no task status.
    assert inline_spans == ["tools/call quick"]
    assert inline_reports == []
    # "always": opted in, the server made it a task, polled to its end.
    assert tasked_spans[0] == "tools/call quick" and tasked_spans.count("tools/call quick") == 1
    assert tasked_spans[1:] and set(tasked_spans[1:]) == {"tasks/get"}
    # (the latest report at most ten times a second, and always the last)
    assert task_reports[-1].message == "task completed"
    assert {report.message for report in task_reports} <= {"task working", "task completed"}
    # The same content either way.
    assert inline["content"] == tasked["content"] == [{"type": "text", "text": "quick a"}]
    assert inline["structuredContent"] == tasked["structuredContent"] == {"x": "a"}

    auto, always = fastmcp.record("auto"), fastmcp.record("always")
    if auto is not None:  # stdio: what the peers read
        assert auto.read("tasks/get") == []
        [call] = auto.read("tools/call")
        assert "io.modelcontextprotocol/tasks" not in json.dumps(call["params"].get("_meta", {}))
        assert auto.answer(call)["result"]["resultType"] == "complete"
        [call] = always.read("tools/call")
        assert always.answer(call)["result"]["resultType"] == "task"
        assert len(always.read("tasks/get")) == len(tasked_spans) - 1


def test_fastmcp_slow_is_refused_plain_then_sent_as_a_task_and_ask_asks_once(tmp_path, fastmcp):
    asked = []

    def elicit(params):
        asked.append(params)
        return {"action": "accept", "content": {"answer": "blue"}}

    reports = []
    with otel_kit.recording() as exporter, runtime(tmp_path, fastmcp("auto"), handlers={"elicitation": elicit}) as rt:
        mcp = rt.mcp()
        slow = mcp.call("auto/slow", seconds=1, on_progress=reports_into(reports)).as_dict()
        first = exporter.get_finished_spans()
        exporter.clear()
        again = mcp.call("auto/slow", seconds=0).as_dict()
        second = spans(exporter)
        exporter.clear()
        answered = mcp.call("auto/ask", question="colour?").as_dict()
        ask_spans = spans(exporter)

    # The first call went plain, was refused for want of the extension (-32021), and
    # was sent again at once as a task; the second is a task from the start.
    calls = [span for span in first if span.name == "tools/call slow"]
    assert len(calls) == 2
    assert calls[0].attributes.get("rpc.response.status_code") == "-32021"
    assert "rpc.response.status_code" not in calls[1].attributes
    assert second.count("tools/call slow") == 1 and "tasks/get" in second
    assert slow["structuredContent"] == {"result": "slept 1.0"}
    assert again["structuredContent"] == {"result": "slept 0.0"}
    # The tool's status messages reached on_progress, in order, numbered upwards.
    steps = [report.message for report in reports if report.message.startswith("task working: ")]
    assert steps and all(re.fullmatch(r"task working: step \d+ of 10", line) for line in steps)
    numbers = [int(line.split()[3]) for line in steps]
    assert numbers == sorted(set(numbers))
    assert reports[-1].message == "task completed"
    assert_increasing(reports)

    # ask: the handler was asked exactly once, and the answer made the result.
    assert answered["content"] == [{"type": "text", "text": "answer: blue"}]
    assert len(asked) == 1 and asked[0]["message"] == "colour?"
    assert ask_spans.count("tasks/update") == 1
    record = fastmcp.record("auto")
    if record is not None:  # stdio: one update, for the one key every input_required poll showed
        [update] = record.read("tasks/update")
        [key] = update["params"]["inputResponses"]
        shown = set()
        for get in record.read("tasks/get"):
            result = (record.answer(get) or {}).get("result", {})
            if result.get("taskId") == update["params"]["taskId"]:
                shown.update(result.get("inputRequests", {}))
        assert shown == {key}


def test_fastmcp_failed_timed_out_and_never(tmp_path, fastmcp):
    short = fastmcp("short", call_timeout_ms=1500, max_call_timeout_ms=3000)
    with runtime(tmp_path, fastmcp("auto"), short, fastmcp("never", tasks="never")) as rt:
        mcp = rt.mcp()
        with pytest.raises(RemoteError) as failed:
            mcp.call("auto/fail")
        started = time.monotonic()
        with pytest.raises(TimedOut) as timed_out:
            mcp.call("short/forever")
        took = time.monotonic() - started
        with pytest.raises(RemoteError) as never:
            mcp.call("never/slow", seconds=0.1)

    line = str(failed.value)
    assert "\n" not in line
    assert line.startswith("server 'auto': ") and line.endswith("failed: fail() always fails")
    assert failed.value.code == -32603

    assert 1.5 <= took < 3.0 + 1.5  # callTimeoutMs after its one status, never past the cap (and the cancel)
    message = str(timed_out.value)
    assert message.startswith("server 'short': ") and "the task was cancelled" in message
    task_id = re.search(r"\(task (\S+)\)", message).group(1)
    record = fastmcp.record("short")
    if record is None:  # HTTP is stateless: anyone may read the task
        status = rpc(fastmcp.url, "tasks/get", {"taskId": task_id}, name=task_id)["result"]["status"]
        assert status == "cancelled"
    else:
        [cancel] = record.read("tasks/cancel")
        assert cancel["params"]["taskId"] == task_id
        assert record.answer(cancel)["result"]["resultType"] == "complete"

    line = str(never.value)
    assert "\n" not in line and line.startswith("server 'never': ")
    assert 'tasks" setting is "never"' in line and "'slow' runs only as a task" in line
    assert never.value.code == -32021


# -- asyncio ---------------------------------------------------------------------------------


@pytest.mark.parametrize("peer", ["fastmcp", "everything"])
def test_an_awaited_task_call_returns_and_cancelling_it_cancels_the_task(tmp_path, peer):
    record = Recorded(tmp_path, "peer")
    if peer == "fastmcp":
        config = record.config("peer", [tasks_python(), FASTMCP_TASKS_SERVER, "stdio"])
        quick_call, quick_args, endless, endless_args = "peer/slow", {"seconds": 0.2}, "peer/forever", {}
    else:
        config = record.config("peer", ["node", require_everything(), "stdio"])
        quick_call, quick_args, endless, endless_args = f"peer/{RESEARCH}", {"topic": "tides"}, f"peer/{RESEARCH}", {"topic": "x"}

    async def main(rt):
        amcp = rt.amcp()
        done = await amcp.call(quick_call, quick_args)
        loop = asyncio.get_running_loop()
        working = asyncio.Event()

        def heard(report):
            if report.message.startswith("task working"):
                loop.call_soon_threadsafe(working.set)

        call = asyncio.create_task(amcp.call(endless, endless_args, on_progress=heard))
        await asyncio.wait_for(working.wait(), WAIT)
        started = time.monotonic()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        return done.as_dict(), started, time.monotonic() - started

    with runtime(tmp_path, config) as rt:
        done, started, took = asyncio.run(main(rt))
        # The peer hears tasks/cancel for the task (sent from the call's own thread, which
        # the cancel wakes from its wait between polls).
        cancel = until(lambda: record.read("tasks/cancel"), "tasks/cancel reaching the peer")[0]
        reached = time.monotonic() - started
        answer = until(lambda: record.answer(cancel), "the peer's answer to tasks/cancel")

    assert took < 1.0  # the awaiting task ends at once
    assert reached < 2.0  # and the task is cancelled on the peer promptly (a bound, not a measure)
    if peer == "fastmcp":
        assert done["structuredContent"] == {"result": "slept 0.2"}
        assert answer["result"]["resultType"] == "complete"
    else:
        assert "# Research Report: tides" in text_of(done)
        assert answer["result"]["status"] == "cancelled"  # 2025-11-25: the task, already cancelled
    # ... and it is the task the last tools/call created.
    created = record.answer(record.read("tools/call")[-1])["result"]
    assert cancel["params"]["taskId"] == (created["taskId"] if peer == "fastmcp" else created["task"]["taskId"])


# -- the CLI -------------------------------------------------------------------------------------


def test_the_cli_calls_a_task_tool_and_prints_its_report(tmp_path):
    require_everything()
    command = os.path.join(PEERS, ".bin", "mcp-server-everything")
    if not os.path.exists(command):
        pytest.fail(f"the npm peer is missing: {command} (scripts/test installs it)")
    write_config(tmp_path, {"every": {"command": command}})
    run = albedo(tmp_path, "call", f"every/{RESEARCH}", "topic=tides")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("# Research Report: tides\n")
    assert "Stage 4: Generating report" in run.stdout
