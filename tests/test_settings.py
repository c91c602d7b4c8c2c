"""The settings API (albedo_actors.settings): the one writer of extensions.json and the credentials.

Servers are the fault server (stdio) and FaultHTTPServer (HTTP, in process, records
every request's headers). The store is the real one (SQLite in the test's home).
"""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest

from albedo_actors.config import McpConfig, load
from albedo_actors.errors import ConfigError, SettingsConflict
from albedo_actors.runtime import Runtime
from albedo_actors.settings import SecretInput, ServerChanges, ServerSpec, Settings, suggest_name
from helpers import FAULT_SERVER
from servers.fault_http_server import FaultHTTPServer

store_module = pytest.importorskip("albedo_actors.store")
Credentials = store_module.Credentials

PY = sys.executable


def fault_spec(name: str, *flags: str, enabled: bool = True) -> ServerSpec:
    return ServerSpec(name=name, transport="stdio", command=PY, args=(FAULT_SERVER, *flags), enabled=enabled)


@pytest.fixture
def home(tmp_path):
    path = tmp_path / "home"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def store(home, monkeypatch):
    monkeypatch.delenv("ALBEDO_DATABASE_URL", raising=False)  # SQLite in the home, always
    opened = store_module.open_store(str(home))
    yield opened
    opened.close()


@pytest.fixture
def settings(home, store):
    return Settings(str(home), store)


@pytest.fixture
def http_server():
    server = FaultHTTPServer()
    server.start()
    yield server
    assert server.stop(), "the fault server's threads did not end"


def document(home) -> dict:
    return json.loads((home / "extensions.json").read_text(encoding="utf-8"))


def server_env(home, store, name: str) -> dict:
    """Open the server as the service does (credentials from the store) and call its env tool."""
    config = load(str(home))
    only = McpConfig(home=str(home), servers=(config.server(name),))
    with Runtime(str(home), store, config=only, enabled=True, watch=False) as runtime:
        result = runtime.composition().handles[name].call_tool("env", {})
    return json.loads(result["content"][0]["text"])


# -- add --------------------------------------------------------------------------------------


def test_add_saves_the_entry_and_the_secrets_apart_and_stored_env_reaches_the_server(home, store, settings):
    view = settings.add(fault_spec("files"), SecretInput(env={"API_KEY": "stored-secret-1"}))
    assert view.name == "files" and view.transport == "stdio" and view.enabled
    assert view.credentials == ("env API_KEY",)
    text = (home / "extensions.json").read_text(encoding="utf-8")
    assert "stored-secret-1" not in text
    assert document(home)["mcp"]["servers"]["files"] == {"type": "stdio", "command": PY, "args": [FAULT_SERVER]}
    assert stat.S_IMODE(os.stat(home / "extensions.json").st_mode) == 0o600
    assert dict(store.get_credentials("files").env) == {"API_KEY": "stored-secret-1"}
    assert server_env(home, store, "files")["API_KEY"] == "stored-secret-1"


def test_named_variables_in_extensions_json_keep_working_beside_stored_entries(home, store, settings, monkeypatch):
    monkeypatch.setenv("MY_NAMED", "named-value")
    (home / "extensions.json").write_text(json.dumps({"mcp": {"servers": {"files": {
        "command": PY, "args": [FAULT_SERVER], "env": {"NAMED": {"env": "MY_NAMED"}}}}}}))
    settings.edit("files", secrets=SecretInput(env={"STORED": "stored-value"}))
    env = server_env(home, store, "files")
    assert env["NAMED"] == "named-value" and env["STORED"] == "stored-value"


def test_add_keeps_the_other_sections_of_the_document(home, settings):
    (home / "extensions.json").write_text(json.dumps({"enabled": {"editor-mcp": False}, "mcp": {"retryMs": 5000}}))
    settings.add(fault_spec("files"))
    saved = document(home)
    assert saved["enabled"] == {"editor-mcp": False}
    assert saved["mcp"]["retryMs"] == 5000


def test_add_refuses_a_taken_name_and_a_bad_name(home, settings):
    settings.add(fault_spec("files"))
    with pytest.raises(ConfigError, match="exists already"):
        settings.add(fault_spec("files"))
    with pytest.raises(ConfigError, match="not a valid server name"):
        settings.add(fault_spec("bad name"))


def test_add_that_cannot_connect_restores_the_file_and_credentials(home, store, settings):
    before = json.dumps({"mcp": {"servers": {}}}, indent=4)
    (home / "extensions.json").write_text(before)
    store.put_credentials("broken", Credentials(env={"OLD": "old-value"}))  # left from before
    with pytest.raises(SettingsConflict) as caught:
        settings.add(fault_spec("broken", "--stderr-and-exit", "3"), SecretInput(env={"NEW": "new-value"}))
    assert caught.value.server == "broken"
    assert "broken" in str(caught.value) and "\n" not in str(caught.value)
    assert (home / "extensions.json").read_text() == before
    assert dict(store.get_credentials("broken").env) == {"OLD": "old-value"}


def test_add_that_cannot_connect_to_a_fresh_home_leaves_no_file(home, store, settings):
    with pytest.raises(SettingsConflict):
        settings.add(fault_spec("broken", "--stderr-and-exit", "3"), SecretInput(env={"NEW": "new-value"}))
    assert not (home / "extensions.json").exists()
    assert store.get_credentials("broken").empty
    assert [p.name for p in home.iterdir() if p.name.startswith(".extensions.json")] == []


def test_a_disabled_server_is_not_tried(home, settings):
    view = settings.add(fault_spec("off", "--stderr-and-exit", "3", enabled=False))
    assert not view.enabled and view.state == "disabled"
    assert document(home)["mcp"]["servers"]["off"]["enabled"] is False
    settings.edit("off", ServerChanges(args=(FAULT_SERVER, "--stderr-and-exit", "4")))  # still not tried


def test_enable_tries_the_server_and_leaves_it_off_when_it_cannot_connect(home, settings):
    settings.add(fault_spec("off", "--stderr-and-exit", "3", enabled=False))
    before = (home / "extensions.json").read_text()
    with pytest.raises(SettingsConflict):
        settings.enable("off")
    assert (home / "extensions.json").read_text() == before
    settings.edit("off", ServerChanges(args=(FAULT_SERVER,)))
    assert settings.enable("off").enabled
    assert "enabled" not in document(home)["mcp"]["servers"]["off"]


def test_disable_then_enable(home, settings):
    settings.add(fault_spec("files"))
    assert not settings.disable("files").enabled
    assert load(str(home)).server("files").enabled is False
    assert settings.enable("files").enabled
    assert load(str(home)).server("files").enabled is True


# -- edit -------------------------------------------------------------------------------------


def test_edit_blank_keeps_a_secret_and_dash_removes_it(home, store, settings):
    settings.add(fault_spec("files"), SecretInput(env={"A": "a-1", "B": "b-1"}))
    settings.edit("files", secrets=SecretInput(env={"A": "", "B": "-", "C": "c-1"}))
    assert dict(store.get_credentials("files").env) == {"A": "a-1", "C": "c-1"}
    settings.edit("files", secrets=SecretInput(env={"A": "-", "C": "-"}))
    assert store.get_credentials("files").empty


def test_edit_http_secrets_blank_keeps_dash_removes(home, store, settings, http_server):
    settings.add(ServerSpec("web", url=http_server.url), SecretInput(bearer_token="tok-1", header=("X-Api-Key", "key-1")))
    settings.edit("web", secrets=SecretInput(bearer_token="", header=("X-Api-Key", "")))
    creds = store.get_credentials("web")
    assert creds.bearer_token == "tok-1" and creds.header == ("X-Api-Key", "key-1")
    settings.edit("web", secrets=SecretInput(bearer_token="-", header=("X-Other", "")))
    creds = store.get_credentials("web")
    assert creds.bearer_token is None and creds.header == ("X-Other", "key-1")
    settings.edit("web", secrets=SecretInput(header=("X-Other", "-")))
    assert store.get_credentials("web").empty


def test_edit_that_cannot_connect_restores_both_file_and_credentials(home, store, settings):
    settings.add(fault_spec("files"), SecretInput(env={"KEY": "good"}))
    before = (home / "extensions.json").read_bytes()
    with pytest.raises(SettingsConflict):
        settings.edit("files", ServerChanges(args=(FAULT_SERVER, "--stderr-and-exit", "3")), SecretInput(env={"KEY": "bad"}))
    assert (home / "extensions.json").read_bytes() == before
    assert dict(store.get_credentials("files").env) == {"KEY": "good"}


def test_edit_refuses_secrets_of_the_wrong_transport_and_unknown_servers(settings):
    settings.add(fault_spec("files"))
    with pytest.raises(ConfigError, match="HTTP"):
        settings.edit("files", secrets=SecretInput(bearer_token="x"))
    with pytest.raises(ConfigError, match="no server named"):
        settings.edit("nothere", secrets=SecretInput())


# -- HTTP credentials -------------------------------------------------------------------------


def test_stored_bearer_token_and_header_reach_an_http_server(home, store, settings, http_server):
    settings.add(ServerSpec("web", url=http_server.url), SecretInput(bearer_token="bearer-77", header=("X-Api-Key", "key-77")))
    assert "bearer-77" not in (home / "extensions.json").read_text()
    posts = [r for r in http_server.requests if r.method == "POST"]
    assert posts, "the save did not try the server"
    assert all(r.header("Authorization") == "Bearer bearer-77" for r in posts)
    assert all(r.header("X-Api-Key") == "key-77" for r in posts)
    http_server.clear_records()
    config = load(str(home))
    only = McpConfig(home=str(home), servers=(config.server("web"),))
    with Runtime(str(home), store, config=only, enabled=True, watch=False) as runtime:
        assert "web" in runtime.composition().catalogues
        assert runtime.wait_background(30)  # advertised from its saved catalogue, dialled in the background
    assert any(r.header("Authorization") == "Bearer bearer-77" for r in http_server.requests)


# -- remove, listing, the file ----------------------------------------------------------------


def test_remove_deletes_the_entry_and_its_credentials(home, store, settings):
    settings.add(fault_spec("files"), SecretInput(env={"KEY": "v"}))
    settings.add(fault_spec("other"))
    settings.remove("files")
    assert list(document(home)["mcp"]["servers"]) == ["other"]
    assert store.get_credentials("files").empty
    with pytest.raises(ConfigError, match="no server named"):
        settings.remove("files")


def test_servers_lists_without_secrets(home, settings, http_server):
    settings.add(ServerSpec("web", url=http_server.url), SecretInput(bearer_token="listed-secret"))
    settings.add(fault_spec("files", enabled=False), SecretInput(env={"KEY": "listed-secret-2"}))
    views = {v.name: v.as_json() for v in settings.servers()}
    assert set(views) == {"web", "files"}
    assert views["web"]["transport"] == "http" and views["web"]["target"] == http_server.url
    assert views["files"]["state"] == "disabled" and views["files"]["credentials"] == ["env KEY"]
    assert "listed-secret" not in json.dumps(views)


def test_the_file_is_replaced_atomically(home, settings, monkeypatch):
    settings.add(fault_spec("files"))
    replaced = []
    real_replace = os.replace

    def spy(src, dst):
        replaced.append((os.path.dirname(os.path.abspath(src)), os.stat(src).st_mode, dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    inode = os.stat(home / "extensions.json").st_ino
    settings.disable("files")
    assert replaced and replaced[0][0] == str(home) and stat.S_IMODE(replaced[0][1]) == 0o600
    assert replaced[0][2] == str(home / "extensions.json")
    assert os.stat(home / "extensions.json").st_ino != inode  # a new file, renamed over
    assert [p.name for p in home.iterdir() if p.name.endswith(".tmp")] == []


def test_an_invalid_entry_writes_nothing(home, settings):
    with pytest.raises(ConfigError):
        settings.add(ServerSpec("web", url="ftp://example.com/"))
    with pytest.raises(ConfigError):
        settings.add(ServerSpec("web", url="https://user:pw@example.com/"))
    assert not (home / "extensions.json").exists()


# -- name suggestion --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("transport", "target", "name"),
    [
        ("http", "https://mcp.example.com/mcp", "example"),
        ("http", "https://docs.acme.io/mcp", "acme"),
        ("http", "http://localhost:8080/mcp", "localhost"),
        ("http", "http://127.0.0.1:9/mcp", "127-0-0-1"),
        ("stdio", 'npx -y @modelcontextprotocol/server-filesystem "/srv/my docs"', "server-filesystem"),
        ("stdio", "uvx mcp-server-fetch", "mcp-server-fetch"),
        ("stdio", "/usr/local/bin/docs-mcp --root /srv/docs", "docs-mcp"),
        ("stdio", "python3 /opt/servers/weather.py", "weather"),
        ("stdio", "npx @scope/pkg@1.2.3", "pkg"),
    ],
)
def test_suggest_name(transport, target, name):
    assert suggest_name(transport, target) == name


def test_suggest_name_avoids_taken_names():
    assert suggest_name("http", "https://mcp.example.com/", {"example"}) == "example-2"
    assert suggest_name("http", "https://mcp.example.com/", {"example", "example-2"}) == "example-3"
