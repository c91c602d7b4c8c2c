"""Progress keeps a tool call alive: stdio, modern HTTP and legacy HTTP (SSE answers and
the session's listening stream), against the fault servers' progress tools
(tests/servers/progress_tools.py).

No timed assertions: what ran past the original deadline is read from the server's own
log (its monotonic clock, the machine's), loosely.
"""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest

from albedo_actors.config import ServerConfig
from albedo_actors.connection.progress import ProgressReport
from albedo_actors.errors import TimedOut
from helpers import fault_config, read_record, text_of

WAIT = 30.0


def server_log(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(params=["stdio-modern", "stdio-legacy", "http-modern", "http-legacy"])
def transport(request, http_fault):
    """A ServerConfig factory for one transport and era, all with the progress tools."""
    kind = request.param

    def make(**overrides) -> ServerConfig:
        if kind == "stdio-modern":
            return fault_config("p", **overrides)
        if kind == "stdio-legacy":
            return fault_config("p", "--era", "legacy", "--probe", "error", **overrides)
        server = http_fault(era="modern" if kind == "http-modern" else "legacy")
        return ServerConfig(name="p", type="http", url=server.url, **overrides)

    make.kind = kind  # type: ignore[attr-defined]
    return make


def test_every_tools_call_carries_its_own_progress_token(clients, tmp_path):
    record = tmp_path / "record"
    handle = clients.start(fault_config("p", "--record", str(record)))
    handle.call_tool("echo", {"text": "a"})
    handle.call_tool("echo", {"text": "b"})
    calls = [m for m in read_record(record) if m.get("method") == "tools/call"]
    tokens = [m["params"]["_meta"]["progressToken"] for m in calls]
    assert len(tokens) == 2 and len(set(tokens)) == 2 and all(isinstance(t, str) for t in tokens)


def test_progress_every_half_second_for_three_seconds_keeps_a_one_second_call_alive(clients, transport, tmp_path):
    log = tmp_path / "log"
    reports: list[ProgressReport] = []
    handle = clients.start(transport(call_timeout_ms=1000))
    result = handle.call_tool("p_tick", {"interval_ms": 500, "count": 6, "log": str(log)}, on_progress=reports.append)
    assert text_of(result) == "ticked 6"
    events = server_log(log)
    assert events[-1]["event"] == "answer"
    assert events[-1]["at"] - events[0]["at"] > 1.0  # it answered past the original deadline
    assert reports and reports[-1].total == 6 and reports[-1].message.startswith("step ")


def test_a_call_whose_progress_stops_times_out_after_its_last_progress(clients, transport, tmp_path):
    log = tmp_path / "log"
    handle = clients.start(transport(call_timeout_ms=1000))
    with pytest.raises(TimedOut) as info:
        handle.call_tool("p_tick", {"interval_ms": 400, "count": 5, "then": "hang", "log": str(log)})
    ended = time.monotonic()
    message = str(info.value)
    assert "of its last progress" in message and "extended by progress" in message and "cancelled" in message
    assert "\n" not in message
    events = server_log(log)
    progress = [e for e in events if e["event"] == "progress"]
    assert len(progress) == 5
    # It ran past the original deadline (the server sent for 1.6 s) and ended after the last progress.
    assert progress[-1]["at"] - progress[0]["at"] > 1.0
    assert ended > progress[-1]["at"]
    # The connection is still good for the next call.
    assert text_of(handle.call_tool("echo", {"text": "after"})) == "after"


def test_the_hard_cap_ends_a_call_that_keeps_reporting_progress(clients, transport, tmp_path):
    log = tmp_path / "log"
    handle = clients.start(transport(call_timeout_ms=1000, max_call_timeout_ms=2000))
    with pytest.raises(TimedOut, match=r"within its cap of 2 s \(maxCallTimeoutMs\)"):
        handle.call_tool("p_tick", {"interval_ms": 300, "count": 40, "log": str(log)})
    # The server was still sending when the cap ended the call.
    assert not any(e["event"] == "answer" for e in server_log(log))


def test_a_flood_of_progress_ends_and_the_answer_still_arrives(clients, transport):
    calls: list[ProgressReport] = []
    handle = clients.start(transport(call_timeout_ms=WAIT * 1000))
    result = handle.call_tool("p_flood", {"count": 100_000}, on_progress=calls.append)
    assert text_of(result) == "flooded 100000"
    # Coalesced: the host heard a handful of reports, not 100,000.
    assert len(calls) < 1000


def test_hostile_progress_is_escaped_and_bounded_and_others_tokens_change_nothing(clients, transport):
    reports: list[ProgressReport] = []
    handle = clients.start(transport())
    assert text_of(handle.call_tool("p_hostile", {}, on_progress=reports.append)) == "hostile sent"
    for report in reports:
        assert report.server == "p"
        assert isinstance(report.progress, float)
        for ch in "\x1b\x07\r\n\u202e\x9b":
            assert ch not in (report.message or "") and ch not in report.line()
        assert len(report.message or "") <= 200
        assert "not yours" not in (report.message or "")  # another token's report never arrives
    assert all(report.progress in (1.0, 2.0) for report in reports)


def test_progress_for_another_token_does_not_keep_a_call_alive(clients, transport):
    reports: list[ProgressReport] = []
    handle = clients.start(transport(call_timeout_ms=1000))
    with pytest.raises(TimedOut, match=r"tools/call got no answer within 1 s; it was cancelled"):
        handle.call_tool("p_tick", {"interval_ms": 200, "count": 15, "token": "other"}, on_progress=reports.append)
    assert reports == []


def test_a_progress_callback_that_raises_is_logged_once_and_never_breaks_the_call(clients, caplog):
    handle = clients.start(fault_config("p"))
    calls = []

    def broken(report):
        calls.append(report)
        raise RuntimeError("host bug")

    with caplog.at_level(logging.WARNING, logger="albedo_actors.connection.progress"):
        result = handle.call_tool("p_tick", {"interval_ms": 150, "count": 4}, on_progress=broken)
    assert text_of(result) == "ticked 4"
    assert len(calls) >= 2
    failures = [r for r in caplog.records if "progress callback failed" in r.getMessage()]
    assert len(failures) == 1 and "host bug" in failures[0].getMessage()


def test_progress_callbacks_run_on_a_thread_that_serves_nobody_else(clients):
    handle = clients.start(fault_config("p"))
    names = set()
    caller = threading.current_thread().name
    handle.call_tool("p_tick", {"interval_ms": 150, "count": 3}, on_progress=lambda r: names.add(threading.current_thread().name))
    assert names == {"mcp-progress-p"} and caller not in names


def test_legacy_progress_on_the_listening_stream_keeps_a_json_answered_call_alive(clients, http_fault, tmp_path):
    log = tmp_path / "log"
    server = http_fault(era="legacy")
    handle = clients.start(ServerConfig(name="p", type="http", url=server.url, call_timeout_ms=1000))
    reports: list[ProgressReport] = []
    result = handle.call_tool("p_tick", {"interval_ms": 500, "count": 6, "via": "listen", "log": str(log)},
                              on_progress=reports.append)
    assert text_of(result) == "ticked 6"
    events = server_log(log)
    assert events[-1]["at"] - events[0]["at"] > 1.0
    assert reports


def test_without_progress_the_timeout_is_as_before(clients, transport):
    handle = clients.start(transport(call_timeout_ms=500))
    with pytest.raises(TimedOut, match=r"tools/call got no answer within 0\.5 s; it was cancelled"):
        handle.call_tool("hang", {})


@pytest.mark.parametrize("flags", [(), ("--legacy-only", "--event-store")], ids=["modern", "legacy"])
def test_the_sdk_servers_progress_reaches_the_host(clients, tmp_path, flags):
    from helpers import SdkHttpServer

    server = SdkHttpServer(*flags, record=str(tmp_path / "record.jsonl"))
    url = server.start()
    try:
        reports: list[ProgressReport] = []
        handle = clients.start(ServerConfig(name="sdk", type="http", url=url))
        result = handle.call_tool("echo_with_progress", {"text": "hi"}, on_progress=reports.append)
        assert text_of(result) == "hi"
        assert [(r.server, r.progress, r.total) for r in reports] == [("sdk", 1.0, 1.0)]
        handle.stop()
    finally:
        server.stop()
