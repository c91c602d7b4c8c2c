"""The channel over an in-memory link: numbering, matching, timeouts, cancellation and a
lost connection, with no subprocess and no socket (memory_link.py)."""

from __future__ import annotations

import concurrent.futures
import time

import pytest

from albedo_actors.errors import RemoteError, TimedOut, Unavailable, UnknownOutcome
from albedo_actors.wire import jsonrpc
from memory_link import MemoryLink

WAIT = 5.0


def echo(message: dict) -> list[dict]:
    return [jsonrpc.result_response(message["id"], {"echo": message.get("params")})]


def test_requests_are_numbered_in_order_and_answers_are_matched_in_any_order():
    channel, link = MemoryLink.attached()
    pendings = [channel.start("tools/call", {"name": f"t{i}"}) for i in range(3)]
    assert [m["id"] for m in link.requests] == [1, 2, 3]
    for request_id in (3, 1, 2):
        link.result(request_id, {"n": request_id})
    assert [channel.wait(p, WAIT) for p in pendings] == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert channel.in_flight == 0


def test_an_answer_arriving_while_the_request_is_sent_is_not_lost():
    channel, link = MemoryLink.attached(echo)
    assert channel.request("ping", {"x": 1}, timeout=WAIT) == {"echo": {"x": 1}}
    assert link.deadlines[0] is not None and link.deadlines[0].seconds == WAIT  # the call's deadline reached the link


def test_the_servers_error_reaches_its_request():
    channel, _ = MemoryLink.attached(lambda m: [jsonrpc.error_response(m["id"], -32602, "bad arguments")])
    with pytest.raises(RemoteError) as caught:
        channel.request("tools/call", {"name": "x"}, timeout=WAIT)
    assert caught.value.code == -32602


def test_an_answer_for_no_pending_request_changes_nothing():
    channel, link = MemoryLink.attached()
    link.result(99, {"stray": True})
    link.answer({"jsonrpc": "2.0", "id": "not-ours", "result": {}})
    pending = channel.start("ping", None)
    link.result(pending.id, {})
    assert channel.wait(pending, WAIT) == {}


def test_a_request_without_an_answer_times_out_and_is_cancelled_and_a_late_answer_is_dropped():
    channel, link = MemoryLink.attached()
    started = time.monotonic()
    with pytest.raises(TimedOut, match="got no answer within 0.05 s; it was cancelled"):
        channel.request("tools/call", {"name": "slow"}, timeout=0.05)
    assert time.monotonic() - started < WAIT
    assert link.cancelled == [1]
    assert link.others == [jsonrpc.notification("notifications/cancelled", {"requestId": 1, "reason": "timed out"})]
    link.result(1, {"late": True})  # nobody waits for it any more
    assert channel.in_flight == 0


def test_a_caller_that_gives_a_request_up_ends_its_wait_at_once():
    channel, link = MemoryLink.attached()
    pending = channel.start("tools/call", {"name": "slow"})
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(channel.wait, pending, 60.0)
        channel.interrupt(pending)
        with pytest.raises(TimedOut, match="given up by its caller"):
            waiting.result(timeout=WAIT)
    assert link.forgotten == [pending.id]


def test_a_lost_connection_fails_every_pending_request_and_refuses_new_ones():
    channel, link = MemoryLink.attached()
    pendings = [channel.start("tools/call", {"name": f"t{i}"}) for i in range(2)]
    link.lose("the server went away")
    for pending in pendings:
        with pytest.raises(UnknownOutcome, match="the server went away"):
            channel.wait(pending, WAIT)
    with pytest.raises(Unavailable, match="not connected"):
        channel.start("ping", None)


def test_a_closed_link_sends_nothing():
    channel, link = MemoryLink.attached()
    link.close("done")
    with pytest.raises(Unavailable):
        channel.request("ping", None, timeout=WAIT)
    assert link.requests == []
