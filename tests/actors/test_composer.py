"""SessionComposer: swaps after preparing, refreshes after turns, probes servers that come back."""

import sys

import pytest

from albedo_actors.actors.composer import Open, ProbesSettled, Reload, SessionComposer, SetEnabled, SetOverlays, SetOverlaysEnabled, TurnEnded
from albedo_actors.actors.preparer import RuntimePreparer
from albedo_actors.actors.registry import ServerRegistry
from albedo_actors.config import McpConfig, ServerConfig
from albedo_actors.errors import ConfigError
from albedo_actors.store import open_store
from helpers import Owner, fault_config, request, sent, text_of


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def session(tmp_path):
    """``session(config_source)`` starts a daemon (store, registry, preparer) and one composer."""
    started = []

    def start(source, clock=None):
        home = str(tmp_path / "home")
        store = open_store(home)
        registry = ServerRegistry.start(home)
        preparer = RuntimePreparer.start(registry, store)
        composer = SessionComposer.start(preparer, registry, source, enabled=True, clock=clock or Clock())
        started.append((store, registry, preparer, composer))
        start.preparers.append(preparer)
        return composer.proxy()

    start.preparers = []
    yield start
    for store, registry, preparer, composer in started:
        composer.stop(timeout=30)
        preparer.stop(timeout=30)
        registry.stop(timeout=30)
        store.close()


def test_the_extension_is_off_unless_the_session_or_the_configuration_turns_it_on(tmp_path):
    home = str(tmp_path / "home")
    store = open_store(home)
    registry = ServerRegistry.start(home)
    preparer = RuntimePreparer.start(registry, store)
    composer = SessionComposer.start(preparer, registry, lambda: McpConfig(home=home, servers=(fault_config("f"),)))
    try:
        assert request(composer.proxy(), Open()).catalogues == {}
        assert set(request(composer.proxy(), SetEnabled(True)).catalogues) == {"f"}
        assert request(composer.proxy(), SetEnabled(False)).handles == {}
    finally:
        composer.stop(timeout=30)
        preparer.stop(timeout=30)
        registry.stop(timeout=30)
        store.close()


def test_a_failed_reload_keeps_the_previous_composition(tmp_path, session, monkeypatch):
    import albedo_actors.actors.preparer as preparer_module

    configs = [McpConfig(home=str(tmp_path / "home"), servers=(fault_config("f"),))]
    composer = session(lambda: configs[-1])
    first = request(composer, Open())  # f's catalogue is saved now: not size-checked again
    monkeypatch.setattr(preparer_module, "MAX_CATALOGUE_BYTES", 1000)
    configs.append(McpConfig(home=str(tmp_path / "home"), servers=(fault_config("f"), fault_config("g"))))
    with pytest.raises(ConfigError, match="over the 1000-byte limit"):
        request(composer, Reload())  # g's catalogue is over the limit: the whole preparation fails
    assert composer.composition().get(timeout=10) is first
    assert text_of(first.handles["f"].call_tool("echo", {"text": "still"})) == "still"


def test_a_reload_leaves_out_a_server_naming_an_unset_variable_and_keeps_the_others(tmp_path, session):
    configs = [McpConfig(home=str(tmp_path / "home"), servers=(fault_config("f"),))]
    composer = session(lambda: configs[-1])
    request(composer, Open())
    broken = ServerConfig(name="b", type="stdio", command=sys.executable, env={"T": "NOT_SET_ANYWHERE"})
    configs.append(McpConfig(home=str(tmp_path / "home"), servers=(fault_config("f"), broken)))
    reloaded = request(composer, Reload())
    assert set(reloaded.catalogues) == {"f"} and reloaded.misconfigured == frozenset({"b"})
    assert reloaded.left_out["b"] == "env T names $NOT_SET_ANYWHERE, which is not set in the host's environment"
    assert text_of(reloaded.handles["f"].call_tool("echo", {"text": "still"})) == "still"


def test_a_changed_catalogue_refreshes_after_the_turn_not_during_it(tmp_path, session):
    from albedo_actors.actors.preparer import CatalogueSaved

    # New tools are trusted as they come (tool integrity would hold "fresh": tests/test_trust.py).
    composer = session(lambda: McpConfig(home=str(tmp_path / "home"), servers=(fault_config("f", "--era", "legacy", "--probe", "error"),),
                                         new_tools="allow"))
    first = request(composer, Open())
    watcher = Owner.start()
    try:
        preparer = session.preparers[-1]
        preparer.proxy().subscribe(watcher).get(timeout=10)
        events = watcher.proxy().events.get(timeout=10)
        composer.turn_started().get(timeout=10)
        first.handles["f"].call_tool("add_tool", {"name": "fresh"})  # the server's list changes mid-turn
        saved = events.get(timeout=30)  # the client re-discovered, the preparer saved and told
        assert isinstance(saved, CatalogueSaved) and "fresh" in {t["name"] for t in saved.catalogue.tools}
        assert composer.composition().get(timeout=10) is first  # not swapped mid-turn
        current = request(composer, TurnEnded())  # the one reply: the refreshed composition itself
        assert current is not first and composer.composition().get(timeout=10) is current
        assert "fresh" in {t["name"] for t in current.catalogues["f"].tools}
        assert composer.take_changes().get(timeout=10) is True
        assert composer.take_changes().get(timeout=10) is False
    finally:
        watcher.stop()


def test_a_server_that_comes_back_joins_after_the_turn_that_follows_its_return(tmp_path, session):
    from test_preparer import switchable

    (tmp_path / "down").write_text("")
    clock = Clock()
    config = McpConfig(home=str(tmp_path / "home"), servers=(fault_config("good"), switchable(tmp_path, "back")), retry_ms=30_000)
    composer = session(lambda: config, clock)
    first = request(composer, Open())
    assert set(first.catalogues) == {"good"} and "back" in first.left_out
    (tmp_path / "down").unlink()  # it comes back, but nothing happens without activity
    composer.turn_started().get(timeout=10)
    request(composer, ProbesSettled(), 30)
    assert composer.composition().get(timeout=10) is first  # too early: retryMs has not passed
    clock.now += 30  # retryMs later, the next activity probes it
    sent(composer, TurnEnded())
    composer.turn_started().get(timeout=10)
    request(composer, ProbesSettled(), 30)
    assert composer.composition().get(timeout=10) is first  # found up mid-turn: waits
    current = request(composer, TurnEnded())
    assert set(current.catalogues) == {"good", "back"} and current.left_out == {}
    assert composer.take_changes().get(timeout=10) is True


def test_disabling_closes_every_connection(tmp_path, session):
    import _leaks

    composer = session(lambda: McpConfig(home=str(tmp_path / "home"), servers=(fault_config("a"), fault_config("b"))))
    first = request(composer, Open())
    for handle in first.handles.values():
        handle.call_tool("echo", {"text": "x"})
    assert any("fault_server.py" in _leaks.command_line(pid) for pid in _leaks.descendants())
    off = request(composer, SetEnabled(False))
    assert off.handles == {} and off.catalogues == {}
    for handle in first.handles.values():
        assert handle.wait_closed(30)  # released after the swap: stopped, its server ended
    left = [pid for pid in _leaks.descendants() if "fault_server.py" in _leaks.command_line(pid)]
    assert left == []


def test_editor_overlays_join_the_session_in_memory_only_and_follow_the_editor_default(tmp_path):
    from albedo_actors.binding import Mcp
    from albedo_actors.store import Credentials

    home = str(tmp_path / "home")
    store = open_store(home)
    registry = ServerRegistry.start(home)
    preparer = RuntimePreparer.start(registry, store)
    configs = [McpConfig(home=home, servers=(fault_config("f"),))]
    composer = SessionComposer.start(preparer, registry, lambda: configs[-1], enabled=True)
    try:
        proxy = composer.proxy()
        request(proxy, Open())
        overlay = fault_config("editor")
        with_overlay = request(proxy, SetOverlays((overlay,), {"editor": Credentials(env={"SECRET": "in-memory-only"})}))
        assert set(with_overlay.overlays) == {"editor"} and set(with_overlay.catalogues) == {"f"}
        names = {op.server for op in with_overlay.model_operations()}
        assert names == {"f", "editor-editor"}
        assert {t["server"] for t in Mcp(composer).tools()} == {"f"}  # not in the Python binding
        assert store.load_catalogue("editor") is None and store.get_credentials("editor").empty
        env = text_of(with_overlay.overlay_handles["editor"].call_tool("env"))
        assert "in-memory-only" in env
        # "editor-mcp": false turns overlays off by default; the session's choice wins.
        configs.append(McpConfig(home=home, servers=(fault_config("f"),), extensions={"mcp": True, "editor-mcp": False}))
        off = request(proxy, Reload())
        # Off: still discovered, but hidden from the model (issue 11; tests/actors/test_overlays.py).
        assert set(off.overlays) == {"editor"} and not off.overlays_shown
        assert {op.server for op in off.model_operations()} == {"f"}
        on_again = request(proxy, SetOverlaysEnabled(True))
        assert set(on_again.overlays) == {"editor"}
    finally:
        composer.stop(timeout=30)
        preparer.stop(timeout=30)
        registry.stop(timeout=30)
        store.close()
