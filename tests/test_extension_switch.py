"""Issue 11 item 2: the extension switch.

A host's session (``Runtime``) follows the configured default of the ``mcp`` extension
(off unless the top-level ``enabled`` object says so) unless it chooses for itself; the
settings API and ``albedo-mcp extension`` turn ``mcp`` and ``editor-mcp`` on or off for
every session; off means no server is dialled and the binding says MCP is off. Servers
are real stdio processes (``servers/mode_file_server.py``) that log that they started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from albedo_actors.actors.composer import SetEnabled
from albedo_actors.config import load
from albedo_actors.errors import ConfigError
from albedo_actors.runtime import Runtime
from albedo_actors.settings import Settings

from helpers import request

store_module = pytest.importorskip("albedo_actors.store")

HERE = os.path.dirname(os.path.abspath(__file__))
MODE_SERVER = os.path.join(HERE, "servers", "mode_file_server.py")
RUN_TIMEOUT = 60


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.delenv("ALBEDO_DATABASE_URL", raising=False)
    path = tmp_path / "home"
    path.mkdir(mode=0o700)
    log = tmp_path / "started.log"
    entry = {"type": "stdio", "command": sys.executable, "args": [MODE_SERVER, "f", str(tmp_path / "mode"), str(log)]}
    (path / "extensions.json").write_text(json.dumps({"mcp": {"servers": {"f": entry}}}))
    return path


@pytest.fixture
def store(home):
    opened = store_module.open_store(str(home))
    yield opened
    opened.close()


def started(home) -> list[str]:
    log = home.parent / "started.log"
    return log.read_text().split() if log.exists() else []


def document(home) -> dict:
    return json.loads((home / "extensions.json").read_text())


def test_a_host_session_follows_the_default_mcp_off_and_the_binding_says_so(home, store):
    with Runtime(str(home), store) as runtime:
        composition = runtime.composition()
        mcp = runtime.mcp()
        assert composition.mcp_off and not composition.handles and not composition.catalogues
        assert mcp.tools() == []
        with pytest.raises(ConfigError) as caught:
            mcp.call("f/echo", text="hi")
    assert "MCP is off for this session" in str(caught.value) and "albedo-mcp extension mcp on" in str(caught.value)
    assert "\n" not in str(caught.value)
    assert started(home) == []  # no server was dialled


def test_the_settings_api_turns_mcp_on_for_every_session_and_off_again(home, store):
    settings = Settings(str(home), store)
    assert settings.extensions() == {"mcp": False, "editor-mcp": True}
    assert settings.set_extension("mcp", True) == {"mcp": True, "editor-mcp": True}
    assert document(home)["enabled"] == {"mcp": True}
    assert "f" in document(home)["mcp"]["servers"]  # the servers are kept
    for _ in range(2):  # every session that does not choose
        with Runtime(str(home), store) as runtime:
            assert not runtime.composition().mcp_off
            assert runtime.mcp().call("f/echo", text="on").content[0]["text"] == "on"
    assert started(home) == ["f", "f"]
    settings.set_extension("mcp", False)
    with Runtime(str(home), store) as runtime:
        assert runtime.composition().mcp_off and runtime.mcp().tools() == []
    assert started(home) == ["f", "f"]


def test_a_session_chooses_for_itself_alone(home, store):
    with Runtime(str(home), store, enabled=True) as runtime:  # default off; this session on
        assert [t["operation"] for t in runtime.mcp().tools() if t["operation"] == "echo"] == ["echo"]
    assert started(home) == ["f"]
    Settings(str(home), store).set_extension("mcp", True)
    with Runtime(str(home), store, enabled=False) as off, Runtime(str(home), store) as on:
        assert off.composition().mcp_off and off.mcp().tools() == []
        assert not on.composition().mcp_off and on.mcp().tools()
        # A session's choice can change during the session, each for itself alone.
        request(off.composer, SetEnabled(True), 30)
        assert off.mcp().call("f/echo", text="late").content[0]["text"] == "late"
        request(on.composer, SetEnabled(False), 30)
        assert on.composition().mcp_off and on.mcp().tools() == []


def test_editor_mcp_is_switched_the_same_way_and_bad_names_are_refused(home, store):
    settings = Settings(str(home), store)
    assert settings.set_extension("editor-mcp", False) == {"mcp": False, "editor-mcp": False}
    assert load(str(home)).extension_enabled("editor-mcp") is False
    with pytest.raises(ConfigError, match="no extension named 'mpc'"):
        settings.set_extension("mpc", True)
    (home / "extensions.json").write_text(json.dumps({"enabled": ["mcp"]}))
    with pytest.raises(ConfigError, match='"enabled" must map extension names'):
        settings.set_extension("mcp", True)
    assert document(home) == {"enabled": ["mcp"]}  # a bad file is never rewritten


def albedo(home, *argv: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "ALBEDO_DATABASE_URL"}
    return subprocess.run([sys.executable, "-m", "albedo_actors", "--home", str(home), *argv],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT, env=environ)


def test_the_extension_command_lists_and_switches(home):
    run = albedo(home, "extension")
    assert (run.returncode, run.stdout, run.stderr) == (0, "editor-mcp\ton\nmcp\toff\n", "")
    run = albedo(home, "extension", "mcp", "on")
    assert run.returncode == 0 and run.stdout == "mcp is on for every session that does not choose for itself\n"
    assert document(home)["enabled"] == {"mcp": True}
    run = albedo(home, "extension", "editor-mcp", "off")
    assert run.returncode == 0, run.stderr
    run = albedo(home, "extension", "--json")
    assert json.loads(run.stdout) == {"mcp": True, "editor-mcp": False}
    for argv, message in (
        (("extension", "mcpx", "on"), "albedo-mcp: no extension named 'mcpx'; the extensions are editor-mcp, mcp\n"),
        (("extension", "mcp"), "albedo-mcp: say on or off: albedo-mcp extension mcp on|off\n"),
    ):
        run = albedo(home, *argv)
        assert (run.returncode, run.stderr) == (2, message)
    assert started(home) == []  # switching dials nothing
    # The command line's own session chooses MCP on: tools lists whatever the default says.
    albedo(home, "extension", "mcp", "off")
    run = albedo(home, "tools", "--json")
    assert run.returncode == 0 and any(t["name"].startswith("mcp_f_echo") for t in json.loads(run.stdout)), run.stderr
