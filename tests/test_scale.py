"""Many configured stdio servers in one host (issue 14, goal 6), with real processes.

- A session opens from saved catalogues without starting any process or any client
  actor (a ServerHandle starts its ServerClient on first use), and the binding's call
  reaches the one server it names among many: only that server is started and only
  it receives the call.
- Stopping a runtime whose servers are all connected leaves no process and no thread
  (conftest's leak check), and every client has ended when ``stop()`` returns.
- Background dials of servers advertised from saved catalogues run a bounded number
  at a time, and all of them still settle.
- A handle closed or stopped before its actor ever started never starts one; many
  threads using a fresh handle at once start exactly one actor.

The figures (ready time, call cost, stop time, memory) are benchmarks/bench_scale.py's;
nothing here is timed.
"""

from __future__ import annotations

import threading

import pykka
import pytest

from albedo_actors.actors import preparer as preparer_module
from albedo_actors.actors.client import ServerClient, ServerHandle
from albedo_actors.config import McpConfig
from albedo_actors.errors import Unavailable
from albedo_actors.runtime import Runtime
from helpers import fault_config, read_record, text_of

import _leaks

N = 20  # more than the store's FEW (one query for every row) and than BACKGROUND_DIALS


def many(home: str, records, n: int = N) -> McpConfig:
    servers = tuple(fault_config(f"srv-{i:02d}", "--record", str(records / f"srv-{i:02d}.jsonl")) for i in range(n))
    return McpConfig(home=home, servers=servers)


def clients() -> list[pykka.ActorRef]:
    return [ref for ref in pykka.ActorRegistry.get_all() if issubclass(ref.actor_class, ServerClient)]


def calls_of(records, name: str) -> list[dict]:
    path = records / f"{name}.jsonl"
    return [m for m in read_record(path) if m.get("method") == "tools/call"] if path.exists() else []


@pytest.fixture
def saved(tmp_path, store):
    """A home whose N servers' catalogues were saved by an earlier session."""
    home, records = str(tmp_path / "home"), tmp_path / "records"
    records.mkdir()
    config = many(home, records)
    with Runtime(home, store, config=config, enabled=True, background=False) as first:
        assert set(first.composition().catalogues) == {s.name for s in config.servers}
    return home, records, config


def test_a_session_of_many_servers_opens_from_saved_catalogues_and_calls_the_one_named(saved, store):
    home, records, config = saved
    before = set(_leaks.descendants())
    with Runtime(home, store, config=config, enabled=True, background=False) as runtime:
        composition = runtime.composition()
        assert set(composition.catalogues) == {s.name for s in config.servers} and not composition.left_out
        assert set(_leaks.descendants()) == before  # nothing was dialled to get ready
        assert clients() == [] and not any(h.started for h in composition.handles.values())
        mcp = runtime.mcp()
        assert text_of(mcp.call("srv-13/echo", text="the one")) == "the one"
        started = {name for name, h in composition.handles.items() if h.started}
        assert started == {"srv-13"} and len(clients()) == 1
        assert [m["params"]["arguments"] for m in calls_of(records, "srv-13")] == [{"text": "the one"}]
        assert all(calls_of(records, s.name) == [] for s in config.servers if s.name != "srv-13")
        # By its advertised name too, and a second server: each call goes to its own.
        advertised = next(t["name"] for t in mcp.tools() if t["server"] == "srv-04" and t["operation"] == "echo")
        assert text_of(mcp.call(advertised, text="four")) == "four"
        assert [m["params"]["arguments"] for m in calls_of(records, "srv-04")] == [{"text": "four"}]
        assert len(calls_of(records, "srv-13")) == 1


def test_stopping_many_connected_servers_leaves_no_process_or_client(saved, store):
    home, records, config = saved
    runtime = Runtime(home, store, config=config, enabled=True, background=False)
    try:
        runtime.start()
        handles = runtime.composition().handles
        for handle in handles.values():
            handle.connect()
        assert all(h.status()["connected"] for h in handles.values())
        assert len(_leaks.descendants()) >= N
    finally:
        runtime.stop()
    assert all(h.wait_closed(0) and not h.alive for h in handles.values())  # ended before stop() returned
    assert clients() == []


def test_background_dials_run_a_bounded_number_at_a_time(saved, store, monkeypatch):
    home, records, config = saved
    monkeypatch.setattr(preparer_module, "BACKGROUND_DIALS", 4)
    most, done = 0, threading.Event()

    def count() -> None:
        nonlocal most
        while not done.is_set():
            most = max(most, sum(1 for t in threading.enumerate() if t.name.startswith("mcp-refresh")))
            done.wait(0.005)  # sampling, not synchronisation: the bound holds at every sample

    sampler = threading.Thread(target=count, name="test-sampler")
    sampler.start()
    try:
        with Runtime(home, store, config=config, enabled=True) as runtime:
            assert runtime.wait_background(120)
            handles = runtime.composition().handles
            assert all(h.status()["connected"] for h in handles.values())  # every one was dialled
    finally:
        done.set()
        sampler.join(10)
    assert 1 <= most <= 4


def test_a_handle_ended_before_its_actor_started_never_starts_one(tmp_path):
    handle = ServerHandle.start(fault_config("idle"), str(tmp_path))
    assert handle.alive and not handle.started
    assert handle.catalogue() is None and handle.status()["connected"] is False
    handle.close()
    with pytest.raises(Unavailable, match="closing"):
        handle.connect()
    assert handle.alive  # closed, not stopped: as a closing client actor is
    assert handle.stop_async().get(timeout=0) is True
    assert not handle.alive and handle.wait_closed(0)
    with pytest.raises(Unavailable, match="stopped"):
        handle.call_tool("echo", {"text": "x"})
    handle.stop()  # again: nothing to do
    assert clients() == [] and not handle.started


def test_many_threads_on_a_fresh_handle_start_one_actor(tmp_path):
    handle = ServerHandle.start(fault_config("shared"), str(tmp_path))
    barrier, results, errors = threading.Barrier(8), [], []

    def use() -> None:
        try:
            barrier.wait(10)
            results.append(text_of(handle.call_tool("echo", {"text": "x"})))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=use) for _ in range(8)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == [] and results == ["x"] * 8
        assert len(clients()) == 1 and handle.status()["attempt"] == 1  # one actor, one dial
    finally:
        handle.stop()
