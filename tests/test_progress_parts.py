"""The parts of progress on their own: the report's bounds, the moving deadline and its
cap, the coalescing reporter, maxCallTimeoutMs in the configuration."""

from __future__ import annotations

import threading

import pytest

from albedo_actors.config import ServerConfig, parse
from albedo_actors.connection.progress import CallProgress, ProgressReport, Reporter, new_token, parse_report
from albedo_actors.errors import ConfigError
from albedo_actors.wire.deadline import Deadline


def test_a_report_keeps_finite_numbers_and_escapes_and_bounds_its_message():
    report = parse_report("s", {"progressToken": "t", "progress": 3, "total": 4, "message": "\x1b[2J\u202e" + "x" * 10_000})
    assert report == ProgressReport("s", 3.0, 4.0, report.message)
    assert "\x1b" not in report.message and "\u202e" not in report.message and len(report.message) <= 200
    assert report.line().startswith("3/4 (75%) \\x1b[2J")
    for bad in ("3", None, True, float("nan"), float("inf"), 10**400, [1]):
        assert parse_report("s", {"progress": bad}) is None
    assert parse_report("s", {"progress": 1, "total": "many"}).total is None
    assert parse_report("s", {"progress": 1, "message": 7}).message is None


def test_progress_moves_the_deadline_never_past_the_cap():
    progress = CallProgress(new_token(), timeout=1000.0, cap=1500.0)
    first = progress.deadline
    progress.note(ProgressReport("s", 1.0, None, None))
    assert progress.deadline > first and progress.extensions == 1 and not progress.capped
    assert "of its last progress" in progress.timed_out("s", "tools/call")
    progress.cap, progress.timeout = progress.deadline + 1.0, 2000.0  # 2000 s from now is past the cap
    progress.note(ProgressReport("s", 2.0, None, None))
    assert progress.deadline == progress.cap and progress.capped and progress.extensions == 2
    progress.note(ProgressReport("s", 3.0, None, None))
    assert progress.deadline == progress.cap and progress.extensions == 2  # no further
    assert "within its cap" in progress.timed_out("s", "tools/call")
    untouched = CallProgress(new_token(), timeout=5.0, cap=50.0)
    assert untouched.timed_out("s", "tools/call") == "tools/call got no answer within 5 s; it was cancelled"


def test_a_call_progress_is_a_bound_that_progress_moves():
    start = Deadline.after(10.0)
    progress = CallProgress(new_token(), timeout=10.0, cap=100.0, start=start)
    assert progress.at == start.at and progress.seconds == 10.0 and not progress.expired
    assert 0 < progress.remaining() <= 10.0
    progress.note(ProgressReport("s", 1.0, None, None))
    assert progress.at == progress.deadline >= start.at
    assert Deadline.after(1000.0).min(progress) == Deadline(progress.at, 10.0)  # taken as it stands


def test_a_deadline_is_an_immutable_instant():
    deadline = Deadline.after(5.0)
    assert deadline.seconds == 5.0 and 0 < deadline.remaining() <= 5.0 and not deadline.expired
    with pytest.raises(AttributeError):
        deadline.at = 0.0  # type: ignore[misc]
    passed = Deadline.after(-1.0)
    assert passed.expired and passed.remaining() == 0.0 and passed.seconds == 0.0
    assert deadline.min(passed) is passed and passed.min(deadline) is passed and deadline.min(None) is deadline
    assert deadline.within(1000.0) is deadline and deadline.within(0.5).seconds == 0.5


def test_tokens_are_unique():
    assert len({new_token() for _ in range(1000)}) == 1000


def test_the_reporter_coalesces_to_the_latest_and_delivers_the_last_before_close_returns():
    got = []
    entered = threading.Event()
    release = threading.Event()

    def slow(report):
        got.append(report.progress)
        entered.set()
        release.wait(10)

    reporter = Reporter([slow])
    progress = CallProgress(new_token(), 60.0, 600.0, reporter)
    reporter.progress = progress
    progress.note(ProgressReport("s", 1.0, None, None))
    assert entered.wait(10)
    for n in range(2, 10_002):  # while the callback runs: only the latest is kept
        progress.note(ProgressReport("s", float(n), None, None))
    release.set()
    reporter.close()
    assert got[0] == 1.0 and got[-1] == 10_001.0 and len(got) <= 3


def test_a_reporter_without_reports_starts_no_thread():
    before = threading.active_count()
    reporter = Reporter([lambda report: None])
    reporter.close()
    reporter.poke()  # after the end: still no thread
    assert threading.active_count() == before


def test_a_call_makes_its_reporter_at_its_first_report_and_none_after_it_ended():
    from albedo_actors.actors.client import FirstReport

    got, delivered = [], threading.Event()
    first = FirstReport(lambda report: (got.append(report.progress), delivered.set()), "s")
    progress = CallProgress(new_token(), 60.0, 600.0, first)  # type: ignore[arg-type]
    first.progress = progress
    assert first._made is None  # a call without progress: no Reporter, no lock, no thread
    progress.note(ProgressReport("s", 1.0, None, None))
    assert delivered.wait(10) and got == [1.0]
    made = first._made
    progress.note(ProgressReport("s", 2.0, None, None))
    first.close()  # delivers the latest before it returns, as a Reporter does
    assert first._made is made and got[-1] == 2.0

    before = threading.active_count()
    late = FirstReport(got.append, "s")
    late.progress = CallProgress(new_token(), 60.0, 600.0, late)  # type: ignore[arg-type]
    late.close()
    late.progress.note(ProgressReport("s", 3.0, None, None))  # after the answer: dropped
    assert late._made is None and threading.active_count() == before and got[-1] == 2.0


def _server(entry):
    return parse({"mcp": {"servers": {"s": entry}}}, "/tmp/home").servers[0]


def test_max_call_timeout_defaults_to_ten_call_timeouts_and_is_validated():
    assert _server({"command": "x", "callTimeoutMs": 2000}).max_call_timeout == 20.0
    assert _server({"command": "x", "callTimeoutMs": 2000, "maxCallTimeoutMs": 5000}).max_call_timeout == 5.0
    with pytest.raises(ConfigError, match='"maxCallTimeoutMs" \\(500\\) must be at least "callTimeoutMs" \\(2000\\)'):
        _server({"command": "x", "callTimeoutMs": 2000, "maxCallTimeoutMs": 500})
    for bad in (0, -1, "10", True, 1.5):
        with pytest.raises(ConfigError, match="maxCallTimeoutMs"):
            _server({"command": "x", "maxCallTimeoutMs": bad})
    assert ServerConfig(name="s", type="stdio", call_timeout_ms=3000).max_call_timeout == 30.0
