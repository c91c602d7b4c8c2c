"""The task book over the store (actors/tasks.py's StoreTaskBook), on a clock of its own.

A task's row expires its TTL after the last news of it, so a task that runs longer than
its TTL is never deleted under its poller (2026's ttlMs counts from the task's end), and
an ended task's result is kept a TTL after the end. The lease is taken at the start,
renewed while the task is polled, and let go at the end.
"""

from __future__ import annotations

import time

from albedo_actors.actors.tasks import LEASE, RENEW_AFTER, StoreTaskBook, arguments_digest
from albedo_actors.connection.tasks import TaskStart
from albedo_actors.wire.tasks import TaskState


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def start(task_id: str = "t-1", ttl_ms: int | None = 10_000, arguments: dict | None = None, keep: bool = False) -> TaskStart:
    state = TaskState(task_id, "working", "started", 1.0, ttl_ms)
    return TaskStart("srv", "build", "modern", "2026-07-28", "http", None, arguments or {"n": 1}, keep, state)


def test_a_task_running_past_its_ttl_keeps_its_row_until_a_ttl_after_the_last_news(store):
    # Started 25 s ago by the wall clock the store's listing uses: its first expiry (a TTL
    # of 10 s from the start) has passed, the expiry its later news gave it has not.
    clock = Clock(time.time() - 25)
    book = StoreTaskBook(store, owner="me", clock=clock)
    t0 = clock.now
    book.begin(start())
    row = store.get_task("srv", "t-1")
    assert row.expires_at == t0 + 10 and row.lease_owner == "me" and row.lease_until == t0 + LEASE

    clock.now = t0 + 8  # news: the row lives on, a TTL from now
    book.note("srv", TaskState("t-1", "working", "half way", 1.0, 10_000), ())
    assert store.get_task("srv", "t-1").expires_at == t0 + 18

    clock.now = t0 + 8 + RENEW_AFTER + 1  # polls with no news: the lease's renewal moves the expiry too
    book.alive("srv", "t-1")
    row = store.get_task("srv", "t-1")
    assert row.expires_at == clock.now + 10 and row.lease_until == clock.now + LEASE
    assert [r.task_id for r in store.list_tasks(pending_only=True)] == ["t-1"]  # the listing deletes expired rows

    clock.now += 100  # the end: the result kept a TTL after it, the lease let go
    book.end("srv", "t-1", "completed", {"content": [{"type": "text", "text": "done"}]}, None)
    row = store.get_task("srv", "t-1")
    assert (row.state, row.expires_at, row.lease_owner, row.delivered) == ("completed", clock.now + 10, None, True)
    assert row.result["content"][0]["text"] == "done"


def test_a_resumed_task_learns_its_ttl_from_its_row(store):
    clock = Clock()
    StoreTaskBook(store, owner="gone", clock=clock).begin(start(ttl_ms=5_000))
    resumer = StoreTaskBook(store, owner="me", clock=clock)
    clock.now += 3
    resumer.follows("srv", "t-1", 5_000)
    resumer.end("srv", "t-1", "completed", {"content": []}, None)
    assert store.get_task("srv", "t-1").expires_at == clock.now + 5


def test_the_arguments_are_a_digest_unless_the_host_keeps_them(store):
    book = StoreTaskBook(store, owner="me")
    book.begin(start("a", arguments={"secret": "s3"}))
    book.begin(start("b", arguments={"secret": "s3"}, keep=True))
    plain, kept = store.get_task("srv", "a"), store.get_task("srv", "b")
    assert plain.arguments is None and dict(kept.arguments) == {"secret": "s3"}
    assert plain.arguments_digest == kept.arguments_digest == arguments_digest({"secret": "s3"}, store.digest_key)
    assert "s3" not in plain.arguments_digest
