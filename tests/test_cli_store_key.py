"""The command line over a store encrypted at rest (issue 15 item 4), SQLite and PostgreSQL.

A server of the real loopback authorization + MCP server (servers/oauth_server.py) is
signed in with the store key set; then every command that reads or writes its
credentials is run as a real process with the key missing and with another key: each
prints one line naming what to set, exits 7 (the store failed), and the row's bytes
are as they were. With the key, ``tools`` lists the server's tools from the sealed
tokens. The ``store`` commands' own lines are checked too.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from albedo_actors.auth.signin import SignIn, follow_redirect_agent
from albedo_actors.config import ServerConfig
from albedo_actors.store import open_store
from albedo_actors.store.models import CredentialRow, OAuthClientRow
from albedo_actors.store.sealing import NEEDS_KEY, StoreKeys, key_id, new_key, parse_key
from helpers import store_cli as albedo, store_cli_env as env_with

NAME = "guarded"


def raw(backend) -> list[tuple]:
    _kind, home, url = backend
    store = open_store(home, url, keys=None)
    try:
        return (list(CredentialRow.select().order_by(CredentialRow.server).tuples().execute(store._db))
                + list(OAuthClientRow.select().order_by(OAuthClientRow.issuer).tuples().execute(store._db)))
    finally:
        store.close()


@pytest.fixture
def signed_in(oauth_server, backend):
    """A home configuring the loopback server as ``guarded``, signed in under a fresh key; (key, server)."""
    _kind, home, url = backend
    server = oauth_server()
    key = new_key()
    os.makedirs(home, mode=0o700, exist_ok=True)
    with open(os.path.join(home, "extensions.json"), "w") as f:
        json.dump({"mcp": {"servers": {NAME: {"type": "http", "url": server.url}}}}, f)
    store = open_store(home, url, keys=StoreKeys(parse_key(key, "k")))
    try:
        record = SignIn(ServerConfig(name=NAME, type="http", url=server.url), store,
                        agent=follow_redirect_agent(), port=0, lifetime=3600).run()
        assert record.state == "signed_in" and record.access_token
    finally:
        store.close()
    return key, server


COMMANDS = [
    ("call", f"{NAME}/echo", "--args", '{"text": "hi"}'),
    ("sign-out", NAME),
    ("sign-in", NAME, "--timeout", "30", "--no-browser", "--port", "0"),
    ("edit", NAME, "--bearer-token-env", "SOME_TOKEN"),
    ("enable", NAME),
    ("disable", NAME),
]


@pytest.mark.parametrize("given", ["missing", "wrong"])
def test_every_command_without_the_right_key_is_one_line_exit_7_and_the_row_is_untouched(backend, signed_in, given):
    key, _server = signed_in
    before = raw(backend)
    other = new_key()
    env = env_with(SOME_TOKEN="replacement-token") if given == "missing" else \
        env_with(ALBEDO_STORE_KEY=other, SOME_TOKEN="replacement-token")
    for argv in COMMANDS:
        run = albedo(backend, *argv, env=env)
        lines = run.stderr.splitlines()
        assert run.returncode == 7, (argv, run.returncode, run.stderr)
        assert len(lines) == 1 and lines[0].endswith(NEEDS_KEY), (argv, run.stderr)
        assert key_id(parse_key(key, "k")) in lines[0], argv
        if given == "wrong":
            assert key_id(parse_key(other, "k")) in lines[0], argv
        assert "Traceback" not in run.stderr and run.stdout == "", argv
        assert raw(backend) == before, argv  # never overwritten, never signed out
    # The listings list the server with that line, and exit 0 (issue 23 hole 10: the
    # server's own error, not the home's).
    listed = albedo(backend, "servers", env=env)
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr
    [line] = listed.stdout.splitlines()
    assert line.startswith(f"{NAME}\thttp\tcredentials unreadable\t") and NEEDS_KEY in line, line
    tools = albedo(backend, "tools", env=env)
    assert tools.returncode == 0 and tools.stdout == "", tools.stderr
    [warning] = tools.stderr.splitlines()
    assert f"server {NAME!r}: store: the saved credentials of {NAME!r}" in warning and NEEDS_KEY in warning, warning
    assert raw(backend) == before


def test_with_the_key_the_host_reads_the_sealed_tokens_and_calls(backend, signed_in):
    key, _server = signed_in
    listed = albedo(backend, "tools", env=env_with(ALBEDO_STORE_KEY=key))
    assert listed.returncode == 0, listed.stderr
    assert "echo" in listed.stdout
    called = albedo(backend, "call", f"{NAME}/echo", "--args", '{"text": "hello"}', env=env_with(ALBEDO_STORE_KEY=key))
    assert called.returncode == 0, called.stderr
    assert "hello" in called.stdout
    servers = albedo(backend, "servers", env=env_with(ALBEDO_STORE_KEY=key))
    assert servers.returncode == 0 and "auth: signed_in" in servers.stdout, servers.stdout + servers.stderr
    status = albedo(backend, "store", "status", env=env_with(ALBEDO_STORE_KEY=key))
    kid = key_id(parse_key(key, "k"))
    assert status.stdout.strip().startswith("0 rows in clear, ") and f"encrypted under key {kid}" in status.stdout


def test_add_with_a_key_seals_the_secrets_it_reads(backend, tmp_path):
    key = new_key()
    env = env_with(ALBEDO_STORE_KEY=key, API_SECRET="env-secret-value-123")
    added = albedo(backend, "add", f"{sys.executable} -c pass", "--transport", "stdio", "--name", "tool",
                   "--disabled", "--env-from", "API=API_SECRET", env=env)
    assert added.returncode == 0, added.stderr
    assert "env-secret-value-123" not in repr(raw(backend))
    shown = albedo(backend, "servers", env=env)
    assert shown.returncode == 0 and "env API" in shown.stdout, shown.stdout + shown.stderr


def test_the_store_commands_lines_and_exit_codes(backend, tmp_path):
    made = albedo(backend, "store", "new-key", env=env_with())
    assert made.returncode == 0 and len(made.stdout.strip()) == 43
    parse_key(made.stdout, "printed")
    path = str(tmp_path / "store.key")
    assert albedo(backend, "store", "new-key", "--file", path, env=env_with()).returncode == 0
    assert os.stat(path).st_mode & 0o777 == 0o600
    again = albedo(backend, "store", "new-key", "--file", path, env=env_with())
    assert again.returncode == 2 and "File exists" in again.stderr  # an existing key is never replaced
    bad = albedo(backend, "store", "status", env=env_with(ALBEDO_STORE_KEY="not-a-key"))
    assert bad.returncode == 7 and len(bad.stderr.splitlines()) == 1 and "not-a-key" not in bad.stderr
    os.chmod(path, 0o644)
    loose = albedo(backend, "store", "status", env=env_with(ALBEDO_STORE_KEY_FILE=path))
    assert loose.returncode == 7 and "chmod 600" in loose.stderr
    os.chmod(path, 0o600)
    nokey = albedo(backend, "store", "encrypt", env=env_with())
    assert nokey.returncode == 7 and "no key is set" in nokey.stderr
    nonew = albedo(backend, "store", "rotate-key", env=env_with(ALBEDO_STORE_KEY_FILE=path))
    assert nonew.returncode == 2 and "--new-key-file" in nonew.stderr
    empty = albedo(backend, "store", env=env_with())
    assert empty.returncode == 2
    status = albedo(backend, "store", "status", env=env_with(ALBEDO_STORE_KEY_FILE=path))
    assert status.returncode == 0, status.stderr
    assert status.stdout.strip() == f"0 rows in clear (the key given is {key_id(parse_key(open(path).read(), 'k'))})"
