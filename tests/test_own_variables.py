"""albedo's own variables are not routable (issue 23 hole 12).

A configuration could name ``ALBEDO_STORE_KEY`` as a server's env, header, bearer or
OAuth variable, and that server was then given the store key; ``add --bearer-token-env
ALBEDO_STORE_KEY`` stored it as the server's secret. Every name starting with
``ALBEDO_`` (albedo's namespace, any case) is now refused in one line naming the server
and the key: in extensions.json (parse time, and again for a ServerConfig built in
code) and as the source of a CLI secret option. The attacks run through the real
command line against a real stdio server (its ``env`` tool shows what it was given)
and a real loopback HTTP server (which records every header it received).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from albedo_actors.config import OAuthSettings, ServerConfig, parse
from albedo_actors.errors import ConfigError
from albedo_actors.store import open_store
from albedo_actors.store.models import CredentialRow
from albedo_actors.store.sealing import new_key
from helpers import FAULT_SERVER
from servers.fault_http_server import FaultHTTPServer

RUN_TIMEOUT = 120  # a bound on each command, never an expected duration
KEY = new_key()
OWN = ["ALBEDO_STORE_KEY", "ALBEDO_STORE_KEY_FILE", "ALBEDO_STORE_OLD_KEY", "ALBEDO_STORE_NEW_KEY",
       "ALBEDO_DATABASE_URL", "ALBEDO_HOME", "ALBEDO_NO_BROWSER", "ALBEDO_SOMETHING_ADDED_LATER",
       "albedo_store_key", "Albedo_Store_Key"]


def oauth_entry(**oauth) -> dict:
    return {"type": "http", "url": "https://mcp.example.com/mcp", "oauth": oauth}


# Every place extensions.json names a variable, as (entry, the key the message names).
ROUTES = {
    "env": (lambda v: {"command": "x", "env": {"TOKEN": {"env": v}}}, '"env.TOKEN.env"'),
    "header": (lambda v: {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"X-Key": {"env": v}}},
               '"headers.X-Key.env"'),
    "bearer": (lambda v: {"type": "http", "url": "https://mcp.example.com/mcp", "bearerTokenEnvVar": v},
               '"bearerTokenEnvVar"'),
    "client secret": (lambda v: oauth_entry(clientId="c", clientSecretEnvVar=v), '"clientSecretEnvVar"'),
    "private key": (lambda v: oauth_entry(clientId="c", privateKeyEnvVar=v), '"privateKeyEnvVar"'),
    "assertion": (lambda v: oauth_entry(grant="jwt-bearer", assertionEnvVar=v), '"assertionEnvVar"'),
    "idp client secret": (lambda v: oauth_entry(grant="enterprise", clientId="c", idpIssuer="https://idp.example",
                                                idpClientId="i", idpClientSecretEnvVar=v), '"idpClientSecretEnvVar"'),
    "id token": (lambda v: oauth_entry(grant="enterprise", clientId="c", idpIssuer="https://idp.example",
                                       idpClientId="i", idTokenEnvVar=v), '"idTokenEnvVar"'),
}


@pytest.mark.parametrize("variable", OWN)
@pytest.mark.parametrize("route", list(ROUTES))
def test_extensions_json_naming_an_own_variable_is_one_line_naming_the_server_and_key(tmp_path, route, variable):
    entry, key = ROUTES[route]
    with pytest.raises(ConfigError) as caught:
        parse({"mcp": {"servers": {"leaky": entry(variable)}}}, str(tmp_path))
    message = str(caught.value)
    assert "\n" not in message
    assert "server 'leaky'" in message and key in message and f"${variable}" in message
    assert "albedo's own variables" in message and "name another variable" in message


@pytest.mark.parametrize("route", list(ROUTES))
def test_the_same_entries_naming_another_variable_parse(tmp_path, route):
    entry, _key = ROUTES[route]
    parse({"mcp": {"servers": {"fine": entry("MY_ALBEDO_TOKEN")}}}, str(tmp_path))  # only the prefix is albedo's


@pytest.mark.parametrize("build", [
    lambda: ServerConfig(name="coded", type="stdio", command="x", env={"K": "ALBEDO_STORE_KEY"}),
    lambda: ServerConfig(name="coded", type="http", url="https://e.example/mcp", headers={"X": "ALBEDO_STORE_KEY"}),
    lambda: ServerConfig(name="coded", type="http", url="https://e.example/mcp", bearer_token_env_var="ALBEDO_STORE_KEY"),
    lambda: ServerConfig(name="coded", type="http", url="https://e.example/mcp",
                         oauth=OAuthSettings(client_id="c", client_secret_env_var="ALBEDO_STORE_KEY")),
    lambda: ServerConfig(name="coded", type="http", url="https://e.example/mcp",
                         oauth=OAuthSettings(grant="jwt-bearer", assertion_env_var="ALBEDO_DATABASE_URL")),
], ids=["env", "header", "bearer", "oauth secret", "oauth assertion"])
def test_a_configuration_built_in_code_is_refused_the_same_way(build):
    with pytest.raises(ConfigError, match=r"server 'coded': .* names \$ALBEDO_\w+, one of albedo's own variables"):
        build()


# --- through the real command line ----------------------------------------------------------


def albedo(home, *argv: str, stdin: str = "", **extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALBEDO_STORE_") and k != "ALBEDO_DATABASE_URL"}
    env.update({"ALBEDO_STORE_KEY": KEY, "ALBEDO_NO_BROWSER": "1", **extra})
    return subprocess.run([sys.executable, "-m", "albedo_actors", "--home", str(home), *argv], env=env,
                          input=stdin, capture_output=True, text=True, timeout=RUN_TIMEOUT)


def stored_rows(home) -> list[tuple]:
    store = open_store(str(home), keys=None)
    try:
        return list(CredentialRow.select().tuples().execute(store._db))
    finally:
        store.close()


def one_line(run: subprocess.CompletedProcess) -> str:
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    return lines[0]


@pytest.fixture
def mcp_http():
    with FaultHTTPServer() as server:
        yield server


SOURCES = [
    (["--bearer-token-env", "ALBEDO_STORE_KEY"], "--bearer-token-env"),
    (["--header", "X-Key", "--header-env", "ALBEDO_STORE_KEY"], "--header-env"),
    (["--oauth-client-id", "c", "--oauth-client-secret-env", "ALBEDO_STORE_KEY"], "--oauth-client-secret-env"),
    (["--bearer-token-env", "albedo_store_key"], "--bearer-token-env"),
]


@pytest.mark.parametrize("options, option", SOURCES, ids=["bearer", "header", "oauth secret", "lower case"])
def test_add_and_edit_refuse_an_own_variable_as_an_http_secrets_source(tmp_path, mcp_http, options, option):
    home = tmp_path / "home"
    run = albedo(home, "add", mcp_http.url, "--name", "leaky", *options, albedo_store_key=KEY)
    assert run.returncode == 2, run.stderr
    line = one_line(run)
    assert option in line and "albedo's own variables" in line and KEY not in line
    assert not (home / "extensions.json").exists() or "leaky" not in (home / "extensions.json").read_text()
    assert mcp_http.requests == []  # nothing was sent anywhere

    added = albedo(home, "add", mcp_http.url, "--name", "leaky")  # a server to edit
    assert added.returncode == 0, added.stderr
    before = stored_rows(home)
    mcp_http.clear_records()
    run = albedo(home, "edit", "leaky", *options, albedo_store_key=KEY)
    assert run.returncode == 2 and option in one_line(run), run.stderr
    assert stored_rows(home) == before and mcp_http.requests == []


def test_add_refuses_an_own_variable_as_a_stdio_env_source_and_the_server_never_sees_the_key(tmp_path):
    home = tmp_path / "home"
    line = f"{sys.executable} {FAULT_SERVER}"
    run = albedo(home, "add", "--transport", "stdio", line, "--name", "leaky", "--env-from", "K=ALBEDO_STORE_KEY")
    assert run.returncode == 2 and "--env-from" in one_line(run), run.stderr
    # The same server added with another variable gets that variable's value, as ever.
    run = albedo(home, "add", "--transport", "stdio", line, "--name", "fine", "--env-from", "K=SOME_TOKEN",
                 SOME_TOKEN="token-4711")
    assert run.returncode == 0, run.stderr
    called = albedo(home, "call", "fine/env", "--json")
    assert called.returncode == 0, called.stderr
    given = json.loads(json.loads(called.stdout)["content"][0]["text"])
    assert given.get("K") == "token-4711" and KEY not in called.stdout


def write_config(home, servers: dict) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "extensions.json").write_text(json.dumps({"mcp": {"servers": servers}}))


def test_a_hand_written_bearer_variable_naming_the_store_key_is_refused_and_never_sent(tmp_path, mcp_http):
    home = tmp_path / "home"
    write_config(home, {"leaky": {"type": "http", "url": mcp_http.url, "bearerTokenEnvVar": "ALBEDO_STORE_KEY"},
                        "fine": {"command": sys.executable, "args": [FAULT_SERVER]}})
    for argv in (["tools"], ["call", "leaky/echo", "--args", '{"text": "hi"}'], ["servers"]):
        run = albedo(home, *argv)
        assert run.returncode == 2, (argv, run.stderr)
        line = one_line(run)
        assert "server 'leaky'" in line and '"bearerTokenEnvVar"' in line and "$ALBEDO_STORE_KEY" in line, line
    assert mcp_http.requests == []  # the key never went out (before the fix: Authorization: Bearer <key>)


def test_a_hand_written_env_naming_the_store_key_is_refused_and_the_server_never_runs(tmp_path):
    home = tmp_path / "home"
    started = tmp_path / "started"
    write_config(home, {"leaky": {"command": sys.executable, "args": ["-c", f"open({str(started)!r}, 'w')"],
                                  "env": {"K": {"env": "ALBEDO_STORE_KEY"}}}})
    run = albedo(home, "call", "leaky/env", "--json")
    assert run.returncode == 2 and '"env.K.env"' in one_line(run), run.stderr
    assert KEY not in run.stdout + run.stderr and not started.exists()
