"""Recoverable client registrations (issue 23, hole 5; issue 25, item 6), through the real
``albedo-mcp`` and the real loopback authorization server (tests/servers/oauth_server.py).

An authorization server that forgot a client albedo registered refuses it at its
authorization endpoint, in the browser ("Client ID '...' not found"), and never
redirects back (RFC 6749 4.1.2.1). Here the test plays the browser: it GETs the
authorization URL the command prints and, like a user, pastes the callback URL it was
sent to, or, when the browser shows the error page, does nothing. The server forgets a
client through its ``/admin/forget-client`` control.

- a sign-in that reused the kept registration and got no callback forgets it, and says so;
  the next one registers a new client and signs in;
- ``sign-out``, ``remove`` + ``add`` and ``sign-in --new-client`` reset it; a client the
  user configured is never replaced;
- ``invalid_client`` at the token endpoint, and ``invalid_client``/``unauthorized_client``
  at the callback, forget it and register anew, once (tests/auth/test_signin_recovery.py
  has the rest of that recovery);
- an RFC 7592 read finds a forgotten client before anyone is sent to it; a read that
  cannot be made blocks nothing;
- another server that shares the registration goes on refreshing whatever resets it.

Every wait is bounded: a command runs within RUN_TIMEOUT, a sign-in left to run out
within its own ``--timeout``.
"""

from __future__ import annotations

import json
import logging
import socket
import sqlite3
import urllib.parse

import pytest
import requests

from albedo_actors.auth.record import from_credentials
from albedo_actors.auth.signin import FORGOTTEN, SignIn, follow_redirect_agent
from albedo_actors.config import ServerConfig
from albedo_actors.errors import AuthError
from albedo_actors.store import open_store
from albedo_actors.store.sealing import new_key
from kit import Cli, Running

ASK = 10  # seconds: a bound on each request of the test's own, never an expected duration
RUN_OUT = "3"  # the --timeout of a sign-in the test lets run out (the command's own bound)
NO_BROWSER = {"ALBEDO_NO_BROWSER": "1"}
TIMED_OUT = "albedo-mcp: server 'g': sign-in failed: the sign-in was not completed in time"


# -- fixtures and helpers ------------------------------------------------------------------------


@pytest.fixture
def cli(home):
    runner = Cli(home)
    yield runner
    runner.stop_all()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def port() -> int:
    """The callback port of this test's sign-ins: fixed, so that the kept registration (per
    issuer and redirect URI) is the one a next sign-in finds, as with the default 33418."""
    return free_port()


def start_sign_in(cli: Cli, name: str, port: int, *extra: str) -> tuple[Running, str]:
    running = cli.start("sign-in", name, "--port", str(port), *extra)
    assert running.line(running.proc.stdout) == f"Open this URL to sign in to {name}:"
    url = running.line(running.proc.stdout).strip()
    assert url.startswith("http://127.0.0.1:") and "code_challenge=" in url, url
    return running, url


def client_of(url: str) -> str:
    return urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["client_id"][0]


def approve(url: str) -> str:
    """The browser's part when the authorization server knows the client: its redirect."""
    response = requests.get(url, allow_redirects=False, timeout=ASK)
    assert response.status_code in (302, 303), (response.status_code, response.text)
    location = response.headers["Location"]
    assert "code=" in location and "state=" in location
    return location


def error_page(url: str) -> None:
    """The browser's part when the server forgot the client: its error page, no redirect."""
    response = requests.get(url, allow_redirects=False, timeout=ASK)
    assert response.status_code == 400 and "Location" not in response.headers, response.status_code
    assert f"Client ID '{client_of(url)}' not found" in response.text


def sign_in(cli: Cli, name: str, port: int, *extra: str) -> str:
    """A whole sign-in (the test approves and pastes the callback); the client id it used."""
    running, url = start_sign_in(cli, name, port, *extra)
    running.write_line(approve(url))
    code, stdout, stderr = running.finish()
    assert code == 0 and f"signed in to {name}" in stdout, (code, stdout, stderr)
    return client_of(url)


def ended_one_line(running: Running, code: int) -> str:
    got, _, stderr = running.finish()
    assert got == code, (got, stderr)
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def kept(home, server, port: int, environ: dict | None = None) -> dict | None:
    """The registration the store keeps for the server's issuer and the test's redirect URI."""
    store = open_store(str(home), environ=environ or {})
    try:
        return store.get_oauth_client(server.base, f"http://127.0.0.1:{port}/callback")
    finally:
        store.close()


def record(home, name: str = "g", environ: dict | None = None):
    store = open_store(str(home), environ=environ or {})
    try:
        return from_credentials(store.get_credentials(name))
    finally:
        store.close()


def echo(cli: Cli, name: str = "g") -> None:
    called = cli.run("call", f"{name}/echo", "--args", '{"text": "hi"}')
    assert called.returncode == 0 and called.stdout.strip() == "hi", called.stderr


# -- 1: no callback --------------------------------------------------------------------------------


def test_a_forgotten_client_ends_at_the_timeout_forgotten_and_the_next_sign_in_registers_anew(home, cli, oauth_server,
                                                                                              port):
    server = oauth_server()
    assert cli.run("add", server.url, "--name", "g").returncode == 0
    first = sign_in(cli, "g", port)
    assert sign_in(cli, "g", port) == first  # kept and reused while the server knows it
    assert kept(home, server, port)["client_id"] == first
    assert server.stats()["registrations"] == 1
    assert server.forget_client() == 1

    running, url = start_sign_in(cli, "g", port, "--timeout", RUN_OUT)
    assert client_of(url) == first
    error_page(url)  # the user sees "Client ID ... not found"; nothing comes back
    assert ended_one_line(running, 3) == f"{TIMED_OUT}; {FORGOTTEN}"
    assert kept(home, server, port) is None

    again = sign_in(cli, "g", port)
    assert again != first and server.stats()["registrations"] == 2
    assert kept(home, server, port)["client_id"] == again
    echo(cli)


def test_a_sign_in_that_registered_its_client_keeps_it_when_nobody_completes_it(home, cli, oauth_server, port):
    """Only a registration kept from before is suspect: a fresh one that timed out is kept."""
    server = oauth_server()
    assert cli.run("add", server.url, "--name", "g").returncode == 0
    running, url = start_sign_in(cli, "g", port, "--timeout", RUN_OUT)
    assert ended_one_line(running, 3) == TIMED_OUT
    assert kept(home, server, port)["client_id"] == client_of(url)
    assert sign_in(cli, "g", port) == client_of(url) and server.stats()["registrations"] == 1


# -- 2: sign-out, remove + add, --new-client ------------------------------------------------------------


def test_sign_out_lets_the_next_sign_in_register_anew(home, cli, oauth_server, port):
    server = oauth_server()
    assert cli.run("add", server.url, "--name", "g").returncode == 0
    first = sign_in(cli, "g", port)
    server.forget_client()
    out = cli.run("sign-out", "g")
    assert out.returncode == 0 and out.stdout == "signed out of g\n", out.stderr
    assert record(home).reuse_registrations_after is not None

    running, url = start_sign_in(cli, "g", port)
    assert client_of(url) != first  # never sent to the dead client
    running.write_line(approve(url))
    code, stdout, stderr = running.finish()
    assert code == 0 and "signed in to g" in stdout, stderr
    assert server.stats()["registrations"] == 2 and server.stats()["unknown_client_authorizations"] == 0
    assert sign_in(cli, "g", port) == client_of(url)  # the new one is kept and reused
    echo(cli)


def test_sign_out_resets_a_registration_that_never_produced_a_token(home, cli, oauth_server, port):
    server = oauth_server()
    assert cli.run("add", server.url, "--name", "g").returncode == 0
    running, url = start_sign_in(cli, "g", port, "--timeout", RUN_OUT)  # registered; nobody completes it
    ended_one_line(running, 3)
    server.forget_client()
    assert cli.run("sign-out", "g").returncode == 0
    again = sign_in(cli, "g", port)
    assert again != client_of(url) and server.stats()["unknown_client_authorizations"] == 0


def test_remove_and_add_register_anew(home, cli, oauth_server, port):
    server = oauth_server()
    assert cli.run("add", server.url, "--name", "g").returncode == 0
    first = sign_in(cli, "g", port)
    server.forget_client()
    assert cli.run("remove", "g").returncode == 0
    assert kept(home, server, port) is None
    assert cli.run("add", server.url, "--name", "g").returncode == 0
    again = sign_in(cli, "g", port)
    assert again != first and server.stats()["unknown_client_authorizations"] == 0
    echo(cli)


def test_new_client_registers_anew_and_keeps_the_new_one(home, cli, oauth_server, port):
    server = oauth_server()
    assert cli.run("add", server.url, "--name", "g").returncode == 0
    first = sign_in(cli, "g", port)
    second = sign_in(cli, "g", port, "--new-client")
    assert second != first and server.stats()["registrations"] == 2
    assert kept(home, server, port)["client_id"] == second
    assert record(home).client_id == second
    server.expire()  # the refresh authenticates as the new client
    echo(cli)
    assert server.stats()["refresh_client_ids"] == [second]
    assert sign_in(cli, "g", port) == second


@pytest.mark.parametrize("given", ["extensions.json", "settings"])
def test_new_client_never_replaces_a_configured_client(home, cli, oauth_server, port, given):
    server = oauth_server()
    if given == "settings":
        assert cli.run("add", server.url, "--name", "g", "--oauth-client-id", "handmade").returncode == 0
    else:
        entry = {"type": "http", "url": server.url, "oauth": {"clientId": "handmade"}}
        (home / "extensions.json").write_text(json.dumps({"mcp": {"servers": {"g": entry}}}))
    run = cli.run("sign-in", "g", "--port", str(port), "--new-client")
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.count("\n") == 1 and run.stdout == "", (run.stdout, run.stderr)
    line = run.stderr.strip()
    assert line.startswith("albedo-mcp: server 'g': --new-client replaces only a client albedo registered itself")
    assert "handmade" in line and "which albedo never replaces" in line
    stats = server.stats()
    assert stats["registrations"] == 0 and stats["authorize_requests"] == 0  # nothing was sent


# -- 3: refused at the token endpoint or the callback --------------------------------------------------


def test_invalid_client_at_the_token_endpoint_forgets_the_kept_registration_and_registers_anew(home, cli, oauth_server,
                                                                                               port):
    server = oauth_server()
    assert cli.run("add", server.url, "--name", "g").returncode == 0
    first = sign_in(cli, "g", port)
    running, url = start_sign_in(cli, "g", port)
    assert client_of(url) == first
    location = approve(url)  # it still knew the client at its authorization endpoint...
    assert server.forget_client(first) == 1  # ... and forgets it before the code is exchanged
    running.write_line(location)
    assert running.line(running.proc.stdout).startswith("Waiting for the browser")  # the first URL's
    assert running.line(running.proc.stdout) == (
        "server 'g': the authorization server refused the client albedo registered (invalid_client), so albedo forgot "
        "it and registered a new one: sign in once more at the new URL")
    assert running.line(running.proc.stdout) == "Open this URL to sign in to g:"
    again = running.line(running.proc.stdout).strip()
    running.line(running.proc.stdout)  # "Waiting for the browser; ..."
    assert client_of(again) != first and kept(home, server, port)["client_id"] == client_of(again)
    running.write_line(approve(again))
    code, stdout, stderr = running.finish()
    assert code == 0 and "signed in to g" in stdout and stderr == "", (code, stderr)
    assert record(home).client_id == client_of(again) and server.stats()["registrations"] == 2
    echo(cli)


@pytest.mark.parametrize("error, forgets", [("invalid_client", True), ("unauthorized_client", True),
                                            ("access_denied", False)])
def test_a_client_refused_at_the_callback_is_forgotten(fault, store, error, forgets):
    server = fault()
    config = ServerConfig(name="g", type="http", url=server.url, startup_timeout_ms=10000, call_timeout_ms=10000)
    port = free_port()
    redirect = f"http://127.0.0.1:{port}/callback"

    def run():
        return SignIn(config, store, environ=NO_BROWSER, agent=follow_redirect_agent(), port=port, lifetime=10).run()

    first = run()
    server.authorize_error = error  # the authorization server redirects back with this error
    with pytest.raises(AuthError) as caught:
        run()
    said = str(caught.value)
    assert "\n" not in said
    if forgets:  # forgotten, a new client registered and refused too: the second refusal is the error
        assert said.startswith(f"server 'g': sign-in failed: the authorization server refused the client albedo "
                               f"registered ({error}), and the new one registered in its place too ({error})")
    else:
        assert said == f"server 'g': sign-in failed: the authorization server refused: {error}"
    assert (store.get_oauth_client(server.issuer, redirect) is None) == forgets
    server.authorize_error = None
    again = run()
    assert (again.client_id != first.client_id) == forgets
    assert server.hits("/register") == (3 if forgets else 1)


# -- 4: RFC 7592 -------------------------------------------------------------------------------------


def test_a_kept_registration_read_back_as_gone_is_replaced_before_anyone_is_sent_to_it(home, cli, oauth_server, port):
    server = oauth_server("--rfc7592")
    key = {"ALBEDO_STORE_KEY": new_key()}
    cli.env.update(key)
    assert cli.run("add", server.url, "--name", "g").returncode == 0
    first = sign_in(cli, "g", port)
    row = kept(home, server, port, key)
    assert row["registration_client_uri"] == f"{server.base}/register/{first}" and row["registration_access_token"]
    with sqlite3.connect(str(home / "albedo.db")) as db:  # sealed like every other secret
        (text,) = db.execute("SELECT client FROM oauth_clients").fetchone()
    assert text.startswith("enc:v1:") and row["registration_access_token"] not in text

    assert sign_in(cli, "g", port) == first  # read back alive: reused
    assert server.stats()["registration_reads"] == 1 and server.stats()["registrations"] == 1

    server.forget_client()
    seen = len(server.stats()["authorize_client_ids"])
    running, url = start_sign_in(cli, "g", port)
    assert client_of(url) != first  # the read found it gone before the URL was made
    running.write_line(approve(url))
    code, stdout, stderr = running.finish()
    assert code == 0 and "signed in to g" in stdout and stderr == "", stderr
    stats = server.stats()
    assert stats["registration_reads"] == 2 and stats["registrations"] == 2
    assert first not in stats["authorize_client_ids"][seen:] and stats["unknown_client_authorizations"] == 0
    assert kept(home, server, port, key)["registration_client_uri"] == f"{server.base}/register/{client_of(url)}"


def test_a_registration_read_that_cannot_be_made_blocks_nothing(home, cli, oauth_server, port):
    server = oauth_server("--rfc7592")
    assert cli.run("add", server.url, "--name", "g").returncode == 0
    first = sign_in(cli, "g", port)
    store = open_store(str(home), environ={})
    try:  # its configuration endpoint now at a port nothing listens on
        row = store.get_oauth_client(server.base, f"http://127.0.0.1:{port}/callback")
        row["registration_client_uri"] = f"http://127.0.0.1:{free_port()}/register/{first}"
        store.put_oauth_client(server.base, f"http://127.0.0.1:{port}/callback", row)
    finally:
        store.close()
    assert sign_in(cli, "g", port) == first
    assert server.stats()["registrations"] == 1 and server.stats()["registration_reads"] == 0


def test_the_registration_read_goes_through_the_address_guard(fault, store, caplog):
    """A loopback server's registration may not send albedo to a private address."""
    server = fault()
    config = ServerConfig(name="g", type="http", url=server.url, startup_timeout_ms=10000, call_timeout_ms=10000)
    port = free_port()
    redirect = f"http://127.0.0.1:{port}/callback"

    def run():
        return SignIn(config, store, environ=NO_BROWSER, agent=follow_redirect_agent(), port=port, lifetime=10).run()

    first = run()
    row = store.get_oauth_client(server.issuer, redirect)
    row.update(registration_client_uri="http://10.20.30.40/register/x", registration_access_token="t0ken")
    store.put_oauth_client(server.issuer, redirect, row)
    with caplog.at_level(logging.INFO, logger="albedo_actors.auth.signin"):
        assert run().client_id == first.client_id
    said = [r.getMessage() for r in caplog.records if "could not be read" in r.getMessage()]
    assert len(said) == 1 and "10.20.30.40 is" in said[0] and "the MCP server is not at one" in said[0], said
    assert "t0ken" not in caplog.text


# -- 5: another server sharing the registration ------------------------------------------------------


@pytest.mark.parametrize("reset", ["sign-out", "remove", "new-client", "timeout"])
def test_another_server_sharing_the_registration_keeps_refreshing(home, cli, oauth_server, port, reset):
    server = oauth_server()
    for name in ("g", "h"):
        assert cli.run("add", server.url, "--name", name).returncode == 0
    shared = sign_in(cli, "g", port)
    assert sign_in(cli, "h", port) == shared and server.stats()["registrations"] == 1
    if reset == "sign-out":
        assert cli.run("sign-out", "g").returncode == 0
        assert kept(home, server, port)["client_id"] == shared  # only g is unbound from it
    elif reset == "remove":
        assert cli.run("remove", "g").returncode == 0
        assert kept(home, server, port)["client_id"] == shared  # h still uses it: kept
    elif reset == "new-client":
        assert sign_in(cli, "g", port, "--new-client") != shared
    else:
        running, url = start_sign_in(cli, "g", port, "--timeout", RUN_OUT)
        assert client_of(url) == shared
        assert ended_one_line(running, 3) == f"{TIMED_OUT}; {FORGOTTEN}"
        assert kept(home, server, port) is None
    before = record(home, "h")
    server.expire()  # h's next call is refused once, and h refreshes with the client of its tokens
    echo(cli, "h")
    after = record(home, "h")
    assert after.client_id == shared and after.state == "signed_in" and after.access_token != before.access_token
    assert server.stats()["refresh_client_ids"] == [shared]
