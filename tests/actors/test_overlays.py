"""Editor overlays with ``editor-mcp`` off (issue 11, item 5).

The reference ("Editor servers over ACP"): with the extension off, creation and
attachment still validate and discover the editor's servers, their tools are hidden,
and missing editor state does not block execution after a restart. Through the real
store, registry, preparer and session composer, against the stdio fault server.
"""

from __future__ import annotations

import time

import pytest

from albedo_actors.actors.composer import Open, SessionComposer, SetOverlays, SetOverlaysEnabled
from albedo_actors.actors.preparer import RuntimePreparer
from albedo_actors.actors.registry import ServerRegistry
from albedo_actors.binding import Mcp
from albedo_actors.config import McpConfig, ServerConfig
from albedo_actors.store import open_store
from helpers import fault_config, read_record, request, text_of

OFF = {"mcp": True, "editor-mcp": False}


@pytest.fixture
def daemon(tmp_path):
    """``daemon()`` starts (store, registry, preparer) on one home; ``session`` a composer.
    Everything is stopped afterwards, newest first."""
    home = str(tmp_path / "home")
    started = []

    class Daemon:
        def __init__(self):
            self.store = open_store(home)
            self.registry = ServerRegistry.start(home)
            self.preparer = RuntimePreparer.start(self.registry, self.store)
            started.append(self)
            self.composers = []

        def session(self, config, **choice):
            composer = SessionComposer.start(self.preparer, self.registry, lambda: config, **choice)
            self.composers.append(composer)
            return composer

        def stop(self):
            for composer in self.composers:
                composer.stop(timeout=30)
            self.composers = []
            self.preparer.stop(timeout=30)
            self.registry.stop(timeout=30)
            self.store.close()

    Daemon.home = home
    yield Daemon
    for one in reversed(started):
        if one.preparer.is_alive():
            one.stop()


def missing_editor_server(name: str) -> ServerConfig:
    # What an overlay looks like when the editor state it pointed at is gone.
    return ServerConfig(name=name, type="stdio", command="/nonexistent/editor-state/mcp-server")


def test_with_editor_mcp_off_overlays_are_validated_and_discovered_but_hidden(tmp_path, daemon):
    record = tmp_path / "record"
    one = daemon()
    config = McpConfig(home=daemon.home, servers=(fault_config("f"),), extensions=OFF)
    composer = one.session(config)
    proxy = composer.proxy()
    request(proxy, Open())
    good = fault_config("good", "--record", str(record))
    composition = request(proxy, SetOverlays((good, missing_editor_server("gone"))))

    # Discovered: its catalogue is there, read from the server itself.
    assert not composition.overlays_shown
    assert "echo" in {t["name"] for t in composition.overlays["good"].tools}
    assert "tools/list" in [line.get("method") for line in read_record(record)]
    # Validated: the broken one is left out with a reason that names what failed.
    assert set(composition.overlays_left_out) == {"gone"}
    assert "/nonexistent/editor-state/mcp-server" in composition.overlays_left_out["gone"]
    # Hidden: nothing of the overlays reaches the model or the binding.
    assert {op.server for op in composition.model_operations()} == {"f"}
    assert not any("editor" in line for line in composition.context_lines())
    assert {t["server"] for t in Mcp(composer).tools()} == {"f"}

    # The session turning editor-mcp on shows the same, already discovered client.
    handle = composition.overlay_handles["good"]
    shown = request(proxy, SetOverlaysEnabled(True))
    assert shown.overlays_shown and shown.overlay_handles["good"] is handle
    assert handle.status()["attempt"] == 1  # not dialled again
    assert {op.server for op in shown.model_operations()} == {"f", "editor-good"}
    assert any("'gone'" in line for line in shown.context_lines())
    assert "in" in text_of(handle.call_tool("echo", {"text": "in"}))


def test_missing_editor_state_does_not_block_execution_after_a_restart(tmp_path, daemon):
    config = McpConfig(home=daemon.home, servers=(fault_config("f"),), extensions=OFF)
    first = daemon()
    proxy = first.session(config).proxy()
    request(proxy, Open())
    request(proxy, SetOverlays((fault_config("editor"),)))
    first.stop()

    # The restart: overlays lived in memory only, so the editor's state is gone.
    again = daemon()
    proxy = again.session(config).proxy()
    began = time.monotonic()
    composition = request(proxy, Open())
    assert time.monotonic() - began < 5, "opening waited for editor state"
    assert composition.overlays == {} and composition.overlays_left_out == {}
    assert "x" in text_of(composition.handles["f"].call_tool("echo", {"text": "x"}))
    # The editor attaching again with a server whose state is gone changes nothing else.
    attached = request(proxy, SetOverlays((missing_editor_server("editor"),)))
    assert set(attached.overlays_left_out) == {"editor"}
    assert {op.server for op in attached.model_operations()} == {"f"}
    assert not any("editor" in line for line in attached.context_lines())
    assert "y" in text_of(attached.handles["f"].call_tool("echo", {"text": "y"}))
