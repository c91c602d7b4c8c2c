"""ServerRegistry: the one writer of the name → client map."""

import pytest

from albedo_actors.actors.registry import RESTARTS, ServerRegistry
from albedo_actors.store import Credentials
from helpers import fault_config, text_of


@pytest.fixture
def registry(tmp_path):
    ref = ServerRegistry.start(str(tmp_path))
    proxy = ref.proxy()
    yield proxy
    ref.stop(timeout=30)


def test_apply_starts_a_client_per_server_and_keeps_unchanged_ones(registry):
    first = registry.apply((fault_config("a"), fault_config("b"))).get(timeout=10)
    assert set(first.handles) == {"a", "b"} and first.retired == ()
    assert text_of(first.handles["a"].call_tool("echo", {"text": "hi"})) == "hi"
    again = registry.apply((fault_config("a"), fault_config("b"))).get(timeout=10)
    assert again.handles["a"] is first.handles["a"] and again.retired == ()


def test_a_changed_server_gets_a_new_client_and_the_old_one_runs_until_retired(registry):
    old = registry.apply((fault_config("a"),)).get(timeout=10).handles["a"]
    old.connect()
    changed = registry.apply((fault_config("a", "--era", "legacy"),)).get(timeout=10)
    new = changed.handles["a"]
    assert new is not old and changed.retired == (old,)
    assert old.alive and text_of(old.call_tool("echo", {"text": "still"})) == "still"  # swap not done yet
    assert new.connect().era == "legacy"
    registry.release(changed.retired).get(timeout=10)  # nobody holds it: stopped
    assert old.wait_closed(30)


def test_changed_credentials_replace_the_client(registry):
    first = registry.apply((fault_config("a"),), {"a": Credentials(env={"K": "1"})}).get(timeout=10)
    second = registry.apply((fault_config("a"),), {"a": Credentials(env={"K": "2"})}).get(timeout=10)
    assert second.handles["a"] is not first.handles["a"]
    registry.release(second.retired).get(timeout=10)


def test_a_removed_server_is_retired(registry):
    first = registry.apply((fault_config("a"), fault_config("b"))).get(timeout=10)
    second = registry.apply((fault_config("a"),)).get(timeout=10)
    assert set(second.handles) == {"a"} and second.retired == (first.handles["b"],)
    registry.release(second.retired).get(timeout=10)


def test_a_dead_client_is_restarted_only_within_the_budget(registry):
    registry.apply((fault_config("a"),)).get(timeout=10)
    seen = []
    for _ in range(RESTARTS + 1):  # the first client, then RESTARTS restarts
        handle = registry.handle("a").get(timeout=10)
        assert handle is not None and handle.alive
        seen.append(handle)
        handle.stop_async().get(timeout=15)  # the client dies
    assert len({id(h) for h in seen}) == RESTARTS + 1  # each restart is a new client
    assert registry.handle("a").get(timeout=10) is None  # the budget is spent


def test_a_client_held_by_another_composition_survives_one_release(registry):
    handle = registry.apply((fault_config("a"),)).get(timeout=10).handles["a"]  # held for session 1
    registry.acquire((handle,)).get(timeout=10)  # session 2
    registry.release((handle,)).get(timeout=10)  # session 1 switches MCP off
    assert handle.alive and text_of(handle.call_tool("echo", {"text": "kept"})) == "kept"
    registry.release((handle,)).get(timeout=10)  # session 2 too
    assert handle.wait_closed(30)
    assert registry.apply((fault_config("a"),)).get(timeout=10).handles["a"] is not handle  # a fresh client


def test_apply_holds_what_it_returns_and_releasing_an_unheld_client_stops_nothing(registry):
    handle = registry.apply((fault_config("a"),)).get(timeout=10).handles["a"]
    assert registry.held(handle).get(timeout=10) == 1  # the caller's preparation holds it
    registry.release((handle,)).get(timeout=10)
    assert handle.wait_closed(30)  # nobody holds it now: stopped
    fresh = registry.apply((fault_config("a"),)).get(timeout=10).handles["a"]
    registry.release((fresh,)).get(timeout=10)  # its one holder lets go ...
    again = registry.apply((fault_config("a"),)).get(timeout=10).handles["a"]
    registry.release((again,)).get(timeout=10)
    registry.release((again,)).get(timeout=10)  # ... a second release of it is a no-op, not a negative count
    third = registry.apply((fault_config("a"),)).get(timeout=10).handles["a"]
    registry.release((third, third)).get(timeout=10)  # one composition, one count, however listed
    assert third.wait_closed(30)
    kept = registry.apply((fault_config("a"),)).get(timeout=10).handles["a"]
    registry.release((again,)).get(timeout=10)  # a client it never held: ignored
    assert kept.alive and text_of(kept.call_tool("echo", {"text": "kept"})) == "kept"
    registry.release((kept,)).get(timeout=10)


def test_a_retired_client_runs_while_held_and_stops_with_its_last_release(registry):
    held = registry.apply((fault_config("a"),)).get(timeout=10).handles["a"]
    held.connect()
    changed = registry.apply((fault_config("a", "--era", "legacy"),)).get(timeout=10)
    assert changed.retired == (held,) and held.alive  # a composition still holds it
    registry.release((held,)).get(timeout=10)
    assert held.wait_closed(30)
    registry.release(tuple(changed.handles.values())).get(timeout=10)
