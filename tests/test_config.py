"""extensions.json parsing and stdio launch resolution."""

import os
import sys

import pytest

from albedo_actors.config import DEFAULT_CALL_TIMEOUT_MS, load, parse, resolve_home
from albedo_actors.connection.stdio_link import launch_spec
from albedo_actors.errors import ConfigError, Unavailable


def servers(**entries):
    return {"mcp": {"servers": entries}}


def test_the_reference_example_parses(tmp_path):
    doc = {"mcp": {"servers": {
        "docs": {"type": "stdio", "command": "/usr/local/bin/docs-mcp", "args": ["--root", "/srv/docs"], "cwd": "/srv/docs",
                 "env": {"DOCS_TOKEN": {"env": "MY_DOCS_TOKEN"}}},
        "search": {"type": "http", "url": "https://mcp.example.com/mcp", "bearerTokenEnvVar": "MY_SEARCH_TOKEN",
                   "enabledTools": ["search"], "callTimeoutMs": 30000}}}}
    config = parse(doc, str(tmp_path))
    docs, search = config.servers
    assert (docs.type, docs.command, docs.args, docs.cwd, dict(docs.env)) == (
        "stdio", "/usr/local/bin/docs-mcp", ("--root", "/srv/docs"), "/srv/docs", {"DOCS_TOKEN": "MY_DOCS_TOKEN"})
    assert docs.call_timeout_ms == DEFAULT_CALL_TIMEOUT_MS
    assert (search.type, search.url, search.enabled_tools, search.call_timeout_ms) == (
        "http", "https://mcp.example.com/mcp", ("search",), 30000)
    assert search.tool_enabled("search") and not search.tool_enabled("other")


def test_the_shipped_example_configuration_is_valid():
    example = os.path.join(os.path.dirname(__file__), "..", "config")
    config = load(example)
    assert config.servers


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"command": "x", "env": {"TOKEN": "inline-secret"}}, r'"env.TOKEN" must be \{"env": "VARIABLE"\}: secrets are named'),
        ({"command": "x", "callTimeoutMS": 5}, "unknown key"),
        ({"command": ""}, '"command" must be the executable'),
        ({"command": "x", "args": "--flag"}, '"args" must be a list of strings'),
        ({"command": "x", "callTimeoutMs": 0}, "whole number of milliseconds"),
        ({"command": "x", "enabled": "yes"}, "true or false"),
        ({"type": "http", "url": "https://user:pw@example.com/mcp"}, "user name or password"),
        ({"type": "http", "url": "https://example.com/mcp#frag"}, "fragment"),
        ({"type": "http", "url": "ftp://example.com/"}, "http or https URL"),
        ({"type": "carrier-pigeon"}, '"type" must be'),
        ({"command": "x", "env": {"BAD=KEY": {"env": "V"}}}, "not an environment variable name"),
    ],
)
def test_invalid_entries_are_reported_naming_the_server(tmp_path, entry, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse(servers(broken=entry), str(tmp_path))
    assert "server 'broken'" in str(info.value)


@pytest.mark.parametrize("name", ["", "has space", "-dash-first", "x" * 49, "dot.ted"])
def test_invalid_server_names_are_refused(tmp_path, name):
    with pytest.raises(ConfigError, match="a name must be"):
        parse(servers(**{name: {"command": "x"}}), str(tmp_path))


def test_a_file_that_is_not_json_is_a_configuration_error(tmp_path):
    (tmp_path / "extensions.json").write_text("{nope")
    with pytest.raises(ConfigError, match="extensions.json is not valid JSON"):
        load(str(tmp_path))


def test_a_missing_file_means_no_servers(tmp_path):
    assert load(str(tmp_path)).servers == ()


def test_home_comes_from_the_flag_then_the_environment_then_the_user_home(tmp_path):
    assert resolve_home(str(tmp_path), {}) == str(tmp_path)
    assert resolve_home(None, {"ALBEDO_HOME": str(tmp_path)}) == str(tmp_path)
    assert resolve_home(None, {}) == os.path.join(os.path.expanduser("~"), ".albedo")


def test_launch_reads_named_variables_and_nothing_else(tmp_path):
    config = parse(servers(s={"command": sys.executable, "env": {"TOKEN": {"env": "MY_TOKEN"}}}), str(tmp_path))
    environ = {"MY_TOKEN": "t0k3n", "HOME": "/home/u", "PATH": "/usr/bin:/bin", "AWS_SECRET": "no"}
    spec = launch_spec(config.servers[0], str(tmp_path), environ)
    assert spec.env == {"HOME": "/home/u", "PATH": "/usr/bin:/bin", "TOKEN": "t0k3n"}
    assert spec.secrets == ("t0k3n",)
    assert "t0k3n" not in repr(spec)
    assert spec.cwd == os.path.join(str(tmp_path), "servers", "s") and os.path.isdir(spec.cwd)


def test_a_missing_named_variable_fails_preparation(tmp_path):
    config = parse(servers(s={"command": sys.executable, "env": {"TOKEN": {"env": "NOT_SET_ANYWHERE"}}}), str(tmp_path))
    with pytest.raises(ConfigError, match=r"env TOKEN names \$NOT_SET_ANYWHERE, which is not set"):
        launch_spec(config.servers[0], str(tmp_path), {"PATH": "/usr/bin"})


def test_a_command_not_on_path_makes_the_server_unavailable(tmp_path):
    config = parse(servers(s={"command": "no-such-mcp-server"}), str(tmp_path))
    with pytest.raises(Unavailable, match="command 'no-such-mcp-server' was not found on PATH"):
        launch_spec(config.servers[0], str(tmp_path), {"PATH": str(tmp_path)})


def test_a_relative_command_is_resolved_in_the_working_directory(tmp_path):
    tool = tmp_path / "bin" / "srv"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    config = parse(servers(s={"command": "./bin/srv", "cwd": str(tmp_path)}), str(tmp_path))
    assert launch_spec(config.servers[0], str(tmp_path), {"PATH": "/bin"}).executable == str(tool)


def test_a_missing_working_directory_is_a_configuration_error(tmp_path):
    config = parse(servers(s={"command": sys.executable, "cwd": "does/not/exist"}), str(tmp_path))
    with pytest.raises(ConfigError, match="is not a directory"):
        launch_spec(config.servers[0], str(tmp_path), {"PATH": "/bin"})


# -- stored credentials ---------------------------------------------------------------------


def test_launch_spec_adds_the_stored_env_entries_over_named_ones(tmp_path):
    from albedo_actors.store import Credentials

    config = parse({"mcp": {"servers": {"s": {"command": sys.executable, "env": {"A": {"env": "HOST_A"}, "B": {"env": "HOST_B"}}}}}}, str(tmp_path))
    creds = Credentials(env={"B": "stored-b", "C": "stored-c"})
    spec = launch_spec(config.server("s"), str(tmp_path), {"PATH": os.defpath, "HOST_A": "a", "HOST_B": "b"}, creds)
    assert (spec.env["A"], spec.env["B"], spec.env["C"]) == ("a", "stored-b", "stored-c")
    assert "stored-c" in spec.secrets


def test_http_headers_add_the_stored_bearer_and_header(tmp_path):
    from albedo_actors.config import http_headers
    from albedo_actors.store import Credentials

    config = parse({"mcp": {"servers": {"s": {"url": "https://x.example/mcp", "bearerTokenEnvVar": "TOK", "headers": {"x-key": {"env": "KEY"}}}}}}, str(tmp_path))
    server = config.server("s")
    environ = {"TOK": "named", "KEY": "named-key"}
    assert http_headers(server, environ) == {"Authorization": "Bearer named", "x-key": "named-key"}
    stored = http_headers(server, environ, Credentials(bearer_token="stored", header=("X-Key", "stored-key")))
    assert stored == {"Authorization": "Bearer stored", "X-Key": "stored-key"}
    with pytest.raises(ConfigError):
        http_headers(server, environ, Credentials(header=("X-Key", "bad\r\nvalue")))


def test_extension_defaults_are_mcp_off_and_editor_mcp_on(tmp_path):
    config = parse({}, str(tmp_path))
    assert (config.extension_enabled("mcp"), config.extension_enabled("editor-mcp")) == (False, True)
    config = parse({"enabled": {"mcp": True, "editor-mcp": False}}, str(tmp_path))
    assert (config.extension_enabled("mcp"), config.extension_enabled("editor-mcp")) == (True, False)


def test_an_invalid_enabled_section_is_reported(tmp_path):
    with pytest.raises(ConfigError, match='extensions.json: "enabled" must map extension names to true or false'):
        parse({"enabled": {"mcp": "yes"}}, str(tmp_path))


def _http(oauth):
    return {"mcp": {"servers": {"guarded": {"type": "http", "url": "https://mcp.example.com/mcp", "oauth": oauth}}}}


def test_an_oauth_object_names_its_client_and_secrets_by_variable(tmp_path):
    config = parse(_http({"clientId": "albedo", "clientSecretEnvVar": "GUARDED_SECRET", "scope": "mcp read"}), str(tmp_path))
    oauth = config.server("guarded").oauth
    assert (oauth.grant, oauth.client_id, oauth.client_secret_env_var, oauth.scope) == (
        "authorization_code", "albedo", "GUARDED_SECRET", "mcp read")
    machine = parse(_http({"grant": "client_credentials", "clientId": "svc", "privateKeyEnvVar": "SVC_KEY",
                           "signingAlgorithm": "ES256"}), str(tmp_path)).server("guarded").oauth
    assert (machine.grant, machine.private_key_env_var, machine.signing_algorithm) == ("client_credentials", "SVC_KEY", "ES256")


@pytest.mark.parametrize(
    "oauth, message",
    [
        ({"clientSecret": "inline"}, "unknown key(s): clientSecret"),
        ({"grant": "password"}, '"grant" must be one of'),
        ({"clientSecretEnvVar": "X"}, '"clientSecretEnvVar" needs a "clientId"'),
        ({"grant": "client_credentials", "clientId": "svc"}, 'needs "clientSecretEnvVar" or "privateKeyEnvVar"'),
        ({"grant": "client_credentials"}, 'needs a "clientId"'),
        ({"clientMetadataUrl": "http://example.com/meta.json"}, "must be an https URL"),
        ({"clientId": "a", "tokenEndpointAuthMethod": "private_key_jwt"}, 'needs "privateKeyEnvVar"'),
        ({"clientId": "a", "signingAlgorithm": "none", "privateKeyEnvVar": "K"}, '"signingAlgorithm" must be one of'),
        ({"clientId": "a\nb"}, '"clientId" must be a non-empty one-line string'),
        ("yes", '"oauth" must be an object'),
    ],
)
def test_bad_oauth_objects_are_refused_naming_the_server(tmp_path, oauth, message):
    with pytest.raises(ConfigError) as caught:
        parse(_http(oauth), str(tmp_path))
    assert "guarded" in str(caught.value) and message in str(caught.value)


def test_a_stdio_server_cannot_have_oauth(tmp_path):
    doc = {"mcp": {"servers": {"local": {"type": "stdio", "command": "true", "oauth": {}}}}}
    with pytest.raises(ConfigError, match="unknown key"):
        parse(doc, str(tmp_path))


# -- tool integrity (issue 26): "mcp": {"trust": {"newTools": ...}} and a server's "trust" --


def test_trust_settings_are_read_and_checked_strictly(tmp_path):
    import pytest as _pytest

    from albedo_actors.config import parse as _parse
    from albedo_actors.errors import ConfigError as _ConfigError

    home = str(tmp_path)
    entry = {"command": "x"}
    assert _parse({"mcp": {"servers": {"a": entry}}}, home).new_tools == "hold"
    config = _parse({"mcp": {"trust": {"newTools": "allow"}, "servers": {"a": {**entry, "trust": "pinned"}}}}, home)
    assert config.new_tools == "allow" and config.servers[0].trust == "pinned"
    assert _parse({"mcp": {"servers": {"a": entry}}}, home).servers[0].trust == "default"
    for bad, words in (({"trust": {"newTools": "maybe"}}, '"newTools" must be "hold" or "allow"'),
                       ({"trust": {"new": "hold"}}, "unknown key(s): new"),
                       ({"trust": "hold"}, "mcp.trust must be an object"),
                       ({"servers": {"a": {**entry, "trust": "always"}}}, '"trust" must be "pinned"')):
        with _pytest.raises(_ConfigError) as caught:
            _parse({"mcp": bad}, home)
        assert words in str(caught.value)


def test_a_servers_trust_does_not_change_its_fingerprint(tmp_path):
    import dataclasses as _dataclasses

    from albedo_actors.catalogue.saved import fingerprint
    from albedo_actors.config import parse as _parse

    server = _parse({"mcp": {"servers": {"a": {"command": "x"}}}}, str(tmp_path)).servers[0]
    assert fingerprint(server) == fingerprint(_dataclasses.replace(server, trust="pinned"))
