"""MCP tasks in the store (issue 29): a row per task, found again from another process,
polled by one holder of its lease at a time; on SQLite and on PostgreSQL (``backend``).

The rows are read raw (through the store's model, on its own connection) to see what
the database holds: the session id, the arguments and the result sealed under a key.
"""

from __future__ import annotations

import dataclasses
import glob
import threading
import time

import pytest

from albedo_actors.errors import StoreError
from albedo_actors.store import TaskRecord, open_store
from albedo_actors.store.models import TaskRow
from albedo_actors.store.sealing import NEEDS_KEY, StoreKeys, new_key, parse_key

SESSION = "sid-0123456789-secret-session"
ARGUMENT = "arg-0123456789-secret-argument"
RESULT = "res-0123456789-secret-result"
SECRETS = (SESSION, ARGUMENT, RESULT)
T0 = time.time()  # the tasks' times: a test runs well within the hour they expire in


def a_key() -> StoreKeys:
    return StoreKeys(parse_key(new_key(), "test key"))


def task(server: str = "docs", task_id: str = "t-1", **changes) -> TaskRecord:
    """A task with every field set (None nowhere), the same at every call; ``changes`` replace some."""
    now = T0
    values = dict(
        server=server, task_id=task_id, tool="long_report", era="modern", version="2025-11-25", transport="http",
        session_id=SESSION, arguments_digest="sha256:abcd", arguments={"query": ARGUMENT, "depth": [1, {"n": 2}]},
        state="completed", message="done: 3 pages", poll_ms=1500, ttl_ms=3_600_000_000,  # over 2**31 ms
        created_at=now - 10, updated_at=now - 1, expires_at=now + 3600, answered=("ask-1", "ask-2"),
        result={"content": [{"type": "text", "text": RESULT}], "isError": False}, error="one line",
        delivered=True, lease_owner="host-a:123", lease_until=now + 30)
    values.update(changes)
    return TaskRecord(**values)


@pytest.fixture
def open_(backend):
    """``open_(keys)`` opens a store on this test's backend with ``keys``; all closed afterwards."""
    _kind, home, url = backend
    opened = []

    def opener(keys=None):
        store = open_store(home, url, keys=keys)
        opened.append(store)
        return store

    yield opener
    for store in opened:
        store.close()


def raw(store, server: str = "docs", task_id: str = "t-1") -> dict:
    """The task's row as the database holds it, column by column."""
    [row] = TaskRow.select().where((TaskRow.server == server) & (TaskRow.task_id == task_id)).dicts().execute(store._db)
    return row


# --- the record -------------------------------------------------------------------


def test_the_record_is_frozen_and_its_values_read_only():
    record = task()
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.state = "failed"
    with pytest.raises(TypeError):
        record.arguments["query"] = "other"
    with pytest.raises(TypeError):
        record.result["content"][0]["text"] = "other"
    assert isinstance(record.arguments["depth"], tuple)
    assert record.answered == ("ask-1", "ask-2")


def test_the_repr_never_shows_the_session_id_the_arguments_or_the_result():
    record = task()
    text = repr(record)
    for secret in SECRETS:
        assert secret not in text
    assert "session_id=<secret>" in text and "arguments=<secret>" in text and "result=<set>" in text
    bare = repr(task(session_id=None, arguments=None, result=None))
    assert "session_id" not in bare and "arguments=" not in bare and "result=None" in bare
    assert SESSION not in str(record) and ARGUMENT not in f"{record}"


def test_pending_terminal_and_expired():
    assert task(state="working", delivered=False).pending
    assert task(state="input_required", delivered=True).pending  # still running: delivered means nothing yet
    assert task(state="completed", delivered=False).pending  # ended, the outcome not had by a caller
    assert task(state="lost", result=None, delivered=False).pending
    assert not task(state="failed", delivered=True).pending
    assert task(state="cancelled").terminal and not task(state="working").terminal
    record = task(expires_at=1000.0)
    assert record.expired(1000.5) and not record.expired(1000.0) and not record.expired(999.0)
    assert not task(expires_at=None).expired()
    assert task(expires_at=time.time() - 1).expired()


def test_the_record_refuses_what_is_not_a_task():
    with pytest.raises(ValueError):
        task(state="running")
    with pytest.raises(ValueError):
        task(era="middle")
    with pytest.raises(ValueError):
        task(transport="ws")
    with pytest.raises(TypeError):
        task(poll_ms=1.5)
    with pytest.raises(TypeError):
        task(answered="ask-1")
    with pytest.raises(TypeError):
        task(result=["not", "a", "mapping"])


# --- round trip, sealing ---------------------------------------------------------------


@pytest.mark.parametrize("keyed", [False, True], ids=["no-key", "key"])
def test_every_field_round_trips(open_, keyed):
    store = open_(a_key() if keyed else None)
    record = task()
    store.add_task(record)
    got = store.get_task("docs", "t-1")
    assert got == record
    for field in dataclasses.fields(TaskRecord):
        assert getattr(got, field.name) == getattr(record, field.name), field.name
    assert type(got.poll_ms) is int and type(got.ttl_ms) is int and type(got.delivered) is bool
    # And the Nones and empties of a fresh task, too.
    fresh = task(task_id="t-2", session_id=None, arguments=None, message=None, ttl_ms=None, expires_at=None,
                 answered=(), result=None, error=None, delivered=False, lease_owner=None, lease_until=None,
                 state="working", transport="stdio", era="legacy", version="2024-11-05")
    store.add_task(fresh)
    assert store.get_task("docs", "t-2") == fresh
    assert store.get_task("docs", "nope") is None and store.get_task("other", "t-1") is None
    assert 6 in store.schema_versions()
    indexed = [index.columns for index in store._db.get_indexes("tasks")]
    assert ["task_id"] in indexed  # the CLI finds a task by its id alone


def test_with_a_key_the_secret_columns_are_sealed_at_rest_and_open_again(open_, backend):
    keys = a_key()
    store = open_(keys)
    store.add_task(task())
    row = raw(store)
    for column in ("session_id", "arguments", "result"):
        assert row[column].startswith(f"enc:v1:{keys.kid}:"), column
    text = repr(row)
    for secret in SECRETS:
        assert secret not in text
    assert row["state"] == "completed" and row["arguments_digest"] == "sha256:abcd"  # the rest stays in the clear
    assert store.get_task("docs", "t-1") == task()
    # update_task seals what it writes too
    store.update_task("docs", "t-1", session_id=SESSION + "-2", result={"content": [], "note": RESULT + "-2"})
    row = raw(store)
    assert row["session_id"].startswith("enc:v1:") and row["result"].startswith("enc:v1:")
    assert SESSION not in repr(row) and RESULT not in repr(row)
    got = open_(keys).get_task("docs", "t-1")  # another store (connection), the same key
    assert got.session_id == SESSION + "-2" and got.result["note"] == RESULT + "-2"
    if backend[0] == "sqlite":
        store.close()
        data = b"".join(open(path, "rb").read() for path in glob.glob(f"{backend[1]}/albedo.db*"))
        assert data  # the file and its -wal
        for secret in SECRETS:
            assert secret.encode() not in data


def test_without_a_key_they_are_plaintext_and_a_prefixed_session_id_is_refused(open_):
    store = open_(None)
    store.add_task(task())
    row = raw(store)
    assert row["session_id"] == SESSION and ARGUMENT in row["arguments"] and RESULT in row["result"]
    with pytest.raises(StoreError, match="session id"):
        store.add_task(task(task_id="t-2", session_id="enc:v1:abcdef12:xyz"))
    assert store.get_task("docs", "t-2") is None


def test_a_sealed_value_moved_to_another_task_does_not_open(open_):
    keys = a_key()
    store = open_(keys)
    store.add_task(task())
    store.add_task(task(task_id="t-2", result=None))
    sealed = raw(store)["result"]
    TaskRow.update(result=sealed).where(TaskRow.task_id == "t-2").execute(store._db)
    assert store.get_task("docs", "t-1") == task()  # where it was sealed, it opens
    with pytest.raises(StoreError, match="do not decrypt"):
        store.get_task("docs", "t-2")
    # nor in another column of its own row
    TaskRow.update(session_id=sealed).where(TaskRow.task_id == "t-1").execute(store._db)
    with pytest.raises(StoreError, match="do not decrypt"):
        store.get_task("docs", "t-1")


def test_a_row_sealed_under_another_key_does_not_break_the_listing(open_):
    first = open_(a_key())
    first.add_task(task(task_id="t-sealed", created_at=T0 - 20))
    first.add_task(task(task_id="t-plain", session_id=None, arguments=None, result=None, delivered=False))
    for keys in (a_key(), None):  # another key, and no key at all
        store = open_(keys)
        listed = store.list_tasks(pending_only=False)
        assert [r.task_id for r in listed] == ["t-plain", "t-sealed"]
        unreadable = listed[1]
        assert unreadable.session_id is None and unreadable.arguments is None and unreadable.result is None
        assert NEEDS_KEY in unreadable.error and "\n" not in unreadable.error
        assert unreadable.state == "completed" and unreadable.arguments_digest == "sha256:abcd"
        assert [r.task_id for r in store.find_tasks("t-sealed")] == ["t-sealed"]
        assert store.find_tasks("t-sealed")[0].result is None
        with pytest.raises(StoreError) as caught:
            store.get_task("docs", "t-sealed")
        assert NEEDS_KEY in str(caught.value) and "'docs/t-sealed'" in str(caught.value)
        assert SESSION not in str(caught.value)
        # it can still be deleted without the key (and listed fine meanwhile)
    assert open_(None).delete_task("docs", "t-sealed")
    assert [r.task_id for r in open_(None).list_tasks(pending_only=False)] == ["t-plain"]


def test_a_damaged_sealed_value_says_to_delete_the_task(open_):
    keys = a_key()
    store = open_(keys)
    store.add_task(task())
    TaskRow.update(result="enc:v1:nothex!:xx").where(TaskRow.task_id == "t-1").execute(store._db)
    with pytest.raises(StoreError, match="delete the task"):
        store.get_task("docs", "t-1")
    [listed] = store.list_tasks(pending_only=False)
    assert listed.result is None and "delete the task" in listed.error


# --- update, find, list, delete ----------------------------------------------------------


def test_update_changes_only_the_given_fields(open_):
    store = open_(a_key())
    store.add_task(task(state="working", result=None, error=None, delivered=False, message=None))
    before = store.get_task("docs", "t-1")
    sealed = raw(store)
    later = time.time() + 5
    got = store.update_task("docs", "t-1", state="input_required", message="need a date", updated_at=later,
                            answered=("ask-1",))
    assert got == dataclasses.replace(before, state="input_required", message="need a date", updated_at=later,
                                      answered=("ask-1",))
    assert store.get_task("docs", "t-1") == got
    after = raw(store)
    assert after["session_id"] == sealed["session_id"] and after["arguments"] == sealed["arguments"]  # not rewritten
    assert store.update_task("docs", "t-1") == got  # nothing given: nothing changes
    with pytest.raises(TypeError):
        store.update_task("docs", "t-1", owner="x")
    with pytest.raises(TypeError):
        store.update_task("docs", "t-1", lease_owner="x")  # the lease: take/drop only
    with pytest.raises(ValueError):
        store.update_task("docs", "t-1", state="bogus")
    assert store.get_task("docs", "t-1") == got
    assert store.update_task("docs", "gone", state="failed") is None
    assert store.update_task("other", "t-1", state="failed") is None


def test_add_replaces_a_row_with_the_same_key(open_):
    store = open_()
    store.add_task(task(tool="first"))
    store.add_task(task(tool="second", lease_owner=None, lease_until=None, result=None))
    got = store.get_task("docs", "t-1")
    assert got.tool == "second" and got.lease_owner is None and got.result is None
    assert len(store.list_tasks(pending_only=False)) == 1


def test_find_tasks_across_servers(open_):
    store = open_()
    now = time.time()
    store.add_task(task("docs", "shared", created_at=now - 20))
    store.add_task(task("mail", "shared", created_at=now - 10))
    store.add_task(task("mail", "own"))
    found = store.find_tasks("shared")
    assert [(r.server, r.task_id) for r in found] == [("mail", "shared"), ("docs", "shared")]  # newest first
    assert [r.server for r in store.find_tasks("own")] == ["mail"]
    assert store.find_tasks("none") == []


def test_list_tasks_newest_first_pending_and_by_server(open_):
    store = open_()
    now = time.time()
    store.add_task(task("docs", "a", state="working", delivered=False, created_at=now - 30))
    store.add_task(task("docs", "b", state="completed", delivered=True, created_at=now - 20))
    store.add_task(task("mail", "c", state="failed", delivered=False, created_at=now - 10))
    store.add_task(task("mail", "d", state="input_required", delivered=False, created_at=now))
    assert [r.task_id for r in store.list_tasks()] == ["d", "c", "a"]
    assert [r.task_id for r in store.list_tasks(pending_only=False)] == ["d", "c", "b", "a"]
    assert [r.task_id for r in store.list_tasks(server="docs")] == ["a"]
    assert [r.task_id for r in store.list_tasks(pending_only=False, server="docs")] == ["b", "a"]
    assert all(r.pending for r in store.list_tasks())


def test_expired_tasks_are_deleted_by_add_and_list(open_):
    store = open_()
    now = time.time()
    for server, task_id in (("docs", "old"), ("mail", "older"), ("docs", "forever")):
        store.add_task(task(server, task_id, expires_at=now + 100))
    expire(store, "old", now - 1)
    expire(store, "older", now - 100)
    TaskRow.update(expires_at=None).where(TaskRow.task_id == "forever").execute(store._db)
    # get_task (and find_tasks) still give an expired row not deleted yet
    assert store.get_task("mail", "older").expired() and store.find_tasks("old")[0].expired()
    store.add_task(task("docs", "new", expires_at=now + 100))  # deletes every server's expired rows
    assert raw_ids(store) == ["forever", "new"]
    assert store.get_task("docs", "forever").expires_at is None  # no TTL: never expires
    expire(store, "forever", now - 1)
    assert [r.task_id for r in store.list_tasks(pending_only=False)] == ["new"]
    assert raw_ids(store) == ["new"]  # deleted, not only left out
    store.add_task(task("docs", "later", expires_at=now + 50))
    assert store.delete_expired_tasks(now + 75) == 1
    assert store.delete_expired_tasks() == 0
    assert raw_ids(store) == ["new"]


def expire(store, task_id: str, at: float) -> None:
    TaskRow.update(expires_at=at).where(TaskRow.task_id == task_id).execute(store._db)


def raw_ids(store) -> list[str]:
    return sorted(task_id for (task_id,) in TaskRow.select(TaskRow.task_id).tuples().execute(store._db))


def test_delete_task_and_a_removed_servers_tasks(open_):
    store = open_()
    store.add_task(task("docs", "a"))
    store.add_task(task("docs", "b"))
    store.add_task(task("mail", "a"))
    assert store.delete_task("docs", "a") is True
    assert store.delete_task("docs", "a") is False
    assert store.delete_server_tasks("docs") == 1
    assert raw_ids(store) == ["a"] and store.get_task("mail", "a") is not None


def test_removing_a_server_deletes_its_tasks(tmp_path):
    """``albedo-mcp remove`` (Settings.remove) deletes the server's tasks with its other rows."""
    import sys

    from helpers import FAULT_SERVER

    from albedo_actors.settings import Change, Settings

    store = open_store(str(tmp_path))
    try:
        settings = Settings(str(tmp_path), store)
        entry = {"type": "stdio", "command": sys.executable, "args": [FAULT_SERVER]}
        assert settings.apply(Change(servers={"one": entry, "two": entry}, added=frozenset({"one", "two"})))
        store.add_task(task("one", "a"))
        store.add_task(task("two", "a"))
        settings.remove("one")
        assert store.get_task("one", "a") is None
        assert store.get_task("two", "a") is not None
    finally:
        store.close()


# --- the lease ---------------------------------------------------------------------------


def test_two_stores_racing_for_the_lease_one_wins(open_):
    """Two Store objects (two processes' worth of connections), four threads each, race
    take_task_lease of each of several tasks: exactly one wins each."""
    stores = [open_(), open_()]
    rounds, per_store = 8, 4
    for n in range(rounds):
        stores[0].add_task(task("docs", f"race-{n}", lease_owner=None, lease_until=None))
    results: dict[tuple[int, str], object] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(stores) * per_store)

    def racer(store, owner):
        try:
            for n in range(rounds):
                barrier.wait(timeout=60)
                results[(n, owner)] = store.take_task_lease("docs", f"race-{n}", owner, time.time() + 60)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=racer, args=(store, f"host-{i}-{j}"))
               for i, store in enumerate(stores) for j in range(per_store)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert not errors, errors
    for n in range(rounds):
        winners = [owner for (m, owner), got in results.items() if m == n and got is not None]
        assert len(winners) == 1, (n, winners)
        held = stores[1].get_task("docs", f"race-{n}")
        assert held.lease_owner == winners[0]
        assert results[(n, winners[0])] == held


def test_the_lease_renewal_takeover_and_drop(open_):
    a, b = open_(), open_()
    a.add_task(task(lease_owner=None, lease_until=None))
    now = time.time()
    got = a.take_task_lease("docs", "t-1", "host-a", now + 30)
    assert got.lease_owner == "host-a" and got.lease_until == pytest.approx(now + 30)
    assert b.take_task_lease("docs", "t-1", "host-b", now + 30) is None  # held
    renewed = a.take_task_lease("docs", "t-1", "host-a", now + 60)  # renewal by the owner
    assert renewed.lease_until == pytest.approx(now + 60)
    assert b.get_task("docs", "t-1").lease_until == pytest.approx(now + 60)
    b.drop_task_lease("docs", "t-1", "host-b")  # not the owner: nothing happens
    assert b.get_task("docs", "t-1").lease_owner == "host-a"
    # it runs out (the row says so): another takes it over
    TaskRow.update(lease_until=time.time() - 0.5).where(TaskRow.task_id == "t-1").execute(a._db)
    taken = b.take_task_lease("docs", "t-1", "host-b", now + 30)
    assert taken is not None and taken.lease_owner == "host-b"
    a.drop_task_lease("docs", "t-1", "host-a")  # the former owner's drop leaves the new lease
    assert a.get_task("docs", "t-1").lease_owner == "host-b"
    assert a.take_task_lease("docs", "t-1", "host-a", now + 30) is None
    b.drop_task_lease("docs", "t-1", "host-b")
    dropped = a.get_task("docs", "t-1")
    assert dropped.lease_owner is None and dropped.lease_until is None
    assert a.take_task_lease("docs", "t-1", "host-a", now + 30).lease_owner == "host-a"
    # a missing row: None, and get_task tells it from a held one
    assert a.take_task_lease("docs", "gone", "host-a", now + 30) is None
    assert a.get_task("docs", "gone") is None
    a.drop_task_lease("docs", "gone", "host-a")  # nothing to drop: no error


def test_the_lease_keeps_the_rest_of_the_record(open_):
    store = open_(a_key())
    store.add_task(task(lease_owner=None, lease_until=None))
    taken = store.take_task_lease("docs", "t-1", "me", time.time() + 10)
    assert dataclasses.replace(taken, lease_owner=None, lease_until=None) == task(lease_owner=None, lease_until=None)
    assert store.get_task("docs", "t-1") == taken


# --- key rotation and status -------------------------------------------------------------


def test_reseal_and_status_count_the_tasks(open_, caplog):
    plain = open_(None)
    saved = task("docs", "secret")
    plain.add_task(saved)
    plain.add_task(task("docs", "bare", session_id=None, arguments=None, result=None))  # no secret: not counted
    assert plain.sealing_status() == {"plaintext": 1}
    keys = a_key()
    store = open_(keys)
    seen = []
    assert store.reseal(progress=lambda table, key: seen.append((table, key))) == {"rewritten": 1, "kept": 0}
    assert seen == [("tasks", ("docs", "secret"))]
    assert store.sealing_status() == {"plaintext": 0, f"key {keys.kid}": 1}
    row = raw(store, "docs", "secret")
    assert all(row[c].startswith(f"enc:v1:{keys.kid}:") for c in ("session_id", "arguments", "result"))
    assert store.get_task("docs", "secret") == saved
    # rotate: the new key, the old one to open
    new = StoreKeys(parse_key(new_key(), "new"), (keys.key,))
    rotated = open_(new)
    assert rotated.reseal() == {"rewritten": 1, "kept": 0}
    assert rotated.sealing_status() == {"plaintext": 0, f"key {new.kid}": 1}
    assert open_(StoreKeys(new.key)).get_task("docs", "secret").result["content"][0]["text"] == RESULT
    # back in clear
    assert open_(StoreKeys(new.key)).reseal(to_plaintext=True) == {"rewritten": 1, "kept": 0}
    assert raw(store, "docs", "secret")["session_id"] == SESSION
    # each run compacted the tables, though the stores of the runs before were still open
    # (a compaction once left its connection out of autocommit, holding locks after every read)
    assert "not compacted" not in caplog.text


def test_reseal_leaves_a_task_it_cannot_read_and_goes_on(open_):
    other = open_(a_key())
    other.add_task(task("docs", "foreign"))
    keys = a_key()
    store = open_(keys)
    store.add_task(task("mail", "mine"))
    lines = []
    assert store.reseal(unreadable=lines.append) == {"rewritten": 0, "kept": 1}
    assert len(lines) == 1 and "'docs/foreign'" in lines[0]
