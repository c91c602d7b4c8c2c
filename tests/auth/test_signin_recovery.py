"""A refused client recovers within the sign-in (issue 25, item 6), through the real
``albedo-mcp`` and the real loopback authorization server (tests/servers/oauth_server.py).

The authorization server refuses a client albedo registered with ``invalid_client`` or
``unauthorized_client`` (its ``/admin/refuse-client`` control): at the redirect back to
albedo (RFC 6749 4.1.2.1, a known client) or at the code exchange (RFC 6749 5.2). The
sign-in forgets that registration, registers a new client and sends the user once more,
to a new URL, after a line that says why; a second refusal is one error line that says
what to do. The test plays the browser as test_signin_registrations does: it GETs each
authorization URL the command prints and pastes the callback URL it is sent to.

Also here: ``sign-in --new-client`` whose fresh client is refused recovers the same way;
``remove`` forgets a registration only when no other server still uses it; ``sign-out``
of a server whose sign-in never produced a token lets the next sign-in register anew.
Every wait is bounded (each command within RUN_TIMEOUT, see kit.py).
"""

from __future__ import annotations

import pytest
import requests

from albedo_actors.auth.signin import FORGOTTEN
from kit import Cli
from test_signin_registrations import (ASK, RUN_OUT, approve, client_of, echo, ended_one_line, free_port, kept, record,
                                       sign_in, start_sign_in)

NOTICE = ("server 'g': the authorization server refused the client albedo registered ({error}), so albedo forgot it "
          "and registered a new one: sign in once more at the new URL")


@pytest.fixture
def cli(home):
    runner = Cli(home)
    yield runner
    runner.stop_all()


@pytest.fixture
def port() -> int:
    """The callback port of this test's sign-ins: fixed, so that a next sign-in finds the kept registration."""
    return free_port()


def redirected(url: str) -> str:
    """The browser's part: where the authorization server sends it back (a code, or an error)."""
    response = requests.get(url, allow_redirects=False, timeout=ASK)
    assert response.status_code in (302, 303), (response.status_code, response.text)
    location = response.headers["Location"]
    assert "state=" in location and ("code=" in location or "error=" in location), location
    return location


def next_url(running) -> str:
    """After a refusal: the notice is read by the caller; then the new URL and the waiting line."""
    assert running.line(running.proc.stdout) == "Open this URL to sign in to g:"
    url = running.line(running.proc.stdout).strip()
    assert running.line(running.proc.stdout).startswith("Waiting for the browser")
    return url


@pytest.mark.parametrize("error", ["invalid_client", "unauthorized_client"])
@pytest.mark.parametrize("at", ["redirect", "token"])
def test_a_refused_client_is_forgotten_and_a_new_one_signs_in_at_once(home, cli, oauth_server, port, at, error):
    server = oauth_server()
    assert cli.run("add", server.url, "--name", "g").returncode == 0
    first = sign_in(cli, "g", port)
    server.refuse_client(at, error)

    running, url = start_sign_in(cli, "g", port)
    assert client_of(url) == first  # the kept one
    assert running.line(running.proc.stdout).startswith("Waiting for the browser")
    running.write_line(redirected(url))  # the callback: error=... (redirect), or a code the exchange refuses (token)
    assert running.line(running.proc.stdout) == NOTICE.format(error=error)
    again = next_url(running)
    fresh = client_of(again)
    assert fresh != first and kept(home, server, port)["client_id"] == fresh  # the dead one forgotten, the new one kept
    running.write_line(approve(again))
    code, stdout, stderr = running.finish()
    assert code == 0 and stdout.splitlines()[-1].startswith("signed in to g") and stderr == "", (code, stdout, stderr)

    stats = server.stats()
    assert stats["refused_client_ids"] == [first] and stats["registrations"] == 2
    assert record(home).client_id == fresh and record(home).state == "signed_in"
    echo(cli)
    assert sign_in(cli, "g", port) == fresh  # kept and reused from now on


@pytest.mark.parametrize("at", ["redirect", "token"])
def test_a_second_refusal_is_one_line_that_says_what_to_do(home, cli, oauth_server, port, at):
    server = oauth_server()
    assert cli.run("add", server.url, "--name", "g").returncode == 0
    first = sign_in(cli, "g", port)
    server.refuse_client(at, "invalid_client", times=2)

    running, url = start_sign_in(cli, "g", port)
    assert running.line(running.proc.stdout).startswith("Waiting for the browser")
    running.write_line(redirected(url))
    assert running.line(running.proc.stdout) == NOTICE.format(error="invalid_client")
    again = next_url(running)
    running.write_line(redirected(again))
    line = ended_one_line(running, 3)
    assert line == ("albedo-mcp: server 'g': sign-in failed: the authorization server refused the client albedo "
                    "registered (invalid_client), and the new one registered in its place too (invalid_client): it "
                    "does not accept the clients albedo registers; ask its administrator for a client and give it "
                    "with `albedo-mcp edit g --oauth-client-id ID`")
    stats = server.stats()
    assert stats["refused_client_ids"] == [first, client_of(again)] and stats["registrations"] == 2  # once, not more
    assert kept(home, server, port) is None  # both forgotten


def test_a_configured_client_that_is_refused_is_never_replaced(home, cli, oauth_server, port):
    server = oauth_server("--client", f"handmade:http://127.0.0.1:{port}/callback")
    assert cli.run("add", server.url, "--name", "g", "--oauth-client-id", "handmade").returncode == 0
    server.refuse_client("redirect", "unauthorized_client")
    running, url = start_sign_in(cli, "g", port)
    assert client_of(url) == "handmade"
    running.write_line(redirected(url))
    line = ended_one_line(running, 3)
    assert line == "albedo-mcp: server 'g': sign-in failed: the authorization server refused: unauthorized_client"
    assert server.stats()["registrations"] == 0


def test_new_client_whose_fresh_client_is_refused_recovers_once(home, cli, oauth_server, port):
    server = oauth_server()
    assert cli.run("add", server.url, "--name", "g").returncode == 0
    first = sign_in(cli, "g", port)
    server.refuse_client("token", "invalid_client")
    running, url = start_sign_in(cli, "g", port, "--new-client")
    second = client_of(url)
    assert second != first and server.stats()["registrations"] == 2  # --new-client registered at once
    assert running.line(running.proc.stdout).startswith("Waiting for the browser")
    running.write_line(approve(url))
    assert running.line(running.proc.stdout) == NOTICE.format(error="invalid_client")
    again = next_url(running)
    assert client_of(again) not in (first, second)
    running.write_line(approve(again))
    code, stdout, stderr = running.finish()
    assert code == 0 and "signed in to g" in stdout and stderr == "", stderr
    assert server.stats()["registrations"] == 3 and record(home).client_id == client_of(again)


# -- remove and sign-out ---------------------------------------------------------------------------------


def test_remove_forgets_a_registration_only_another_signed_out_server_named(home, cli, oauth_server, port):
    """A server that signed out does not use the registration any more: removing the last
    server that does forgets it."""
    server = oauth_server()
    for name in ("g", "h"):
        assert cli.run("add", server.url, "--name", name).returncode == 0
    shared = sign_in(cli, "g", port)
    assert sign_in(cli, "h", port) == shared
    assert cli.run("sign-out", "h").returncode == 0
    assert cli.run("remove", "g").returncode == 0
    assert kept(home, server, port) is None
    assert sign_in(cli, "h", port) != shared and server.stats()["registrations"] == 2


def test_remove_keeps_a_registration_another_server_uses_and_a_dead_one_still_recovers(home, cli, oauth_server, port):
    server = oauth_server()
    for name in ("g", "h"):
        assert cli.run("add", server.url, "--name", name).returncode == 0
    shared = sign_in(cli, "g", port)
    assert sign_in(cli, "h", port) == shared
    assert cli.run("remove", "g").returncode == 0
    assert kept(home, server, port)["client_id"] == shared  # h still uses it
    assert cli.run("add", server.url, "--name", "g").returncode == 0
    assert sign_in(cli, "g", port) == shared and server.stats()["registrations"] == 1  # reused while it lives

    server.forget_client()  # now the authorization server forgets it: the added-again g recovers at its timeout
    running, url = start_sign_in(cli, "g", port, "--timeout", RUN_OUT)
    assert client_of(url) == shared
    assert ended_one_line(running, 3).endswith(f"; {FORGOTTEN}")
    assert sign_in(cli, "g", port) != shared


def test_sign_out_after_a_sign_in_that_never_produced_a_token_registers_anew(home, cli, oauth_server, port):
    server = oauth_server()
    assert cli.run("add", server.url, "--name", "g").returncode == 0
    running, url = start_sign_in(cli, "g", port, "--timeout", RUN_OUT)  # registered; nobody completes it
    ended_one_line(running, 3)
    assert kept(home, server, port)["client_id"] == client_of(url)
    never = record(home)
    assert never is None or never.access_token is None  # no token was ever produced
    server.forget_client()
    out = cli.run("sign-out", "g")
    assert out.returncode == 0 and out.stdout == "signed out of g\n", out.stderr
    running, again = start_sign_in(cli, "g", port)
    assert client_of(again) != client_of(url)  # never sent to the dead client
    running.write_line(approve(again))
    code, stdout, _ = running.finish()
    assert code == 0 and server.stats()["unknown_client_authorizations"] == 0


def test_ctrl_c_on_a_kept_client_forgets_it_and_says_so(home, cli, oauth_server, port):
    """The browser shows the authorization server's error page: Ctrl-C need not wait for the timeout."""
    import signal

    server = oauth_server()
    assert cli.run("add", server.url, "--name", "g").returncode == 0
    first = sign_in(cli, "g", port)
    server.forget_client()
    running, url = start_sign_in(cli, "g", port)
    assert client_of(url) == first
    assert running.line(running.proc.stdout).startswith("Waiting for the browser")
    running.proc.send_signal(signal.SIGINT)
    assert ended_one_line(running, 130) == f"albedo-mcp: server 'g': sign-in cancelled; {FORGOTTEN}"
    assert kept(home, server, port) is None
    assert sign_in(cli, "g", port) != first


# -- a pushed authorization request finds a forgotten client before the browser opens -------------------


def test_a_pushed_authorization_request_finds_a_forgotten_client_before_anyone_is_sent_to_it(home, cli, oauth_server,
                                                                                              port):
    """An authorization server that takes pushed authorization requests (RFC 9126) but has
    no RFC 7592 read: albedo pushes one for a kept client; a 401 invalid_client means it is
    gone, so a new client is registered and the user never sees the error page."""
    server = oauth_server("--par")
    assert cli.run("add", server.url, "--name", "g").returncode == 0
    first = sign_in(cli, "g", port)
    assert server.stats()["par_requests"] == 0  # a registration made by this sign-in is not checked
    assert sign_in(cli, "g", port) == first  # pushed, known: reused
    assert server.stats()["par_requests"] == 1 and server.stats()["par_refused"] == 0

    server.forget_client()
    running, url = start_sign_in(cli, "g", port)
    assert client_of(url) != first and kept(home, server, port)["client_id"] == client_of(url)
    running.write_line(approve(url))
    code, stdout, stderr = running.finish()
    assert code == 0 and "signed in to g" in stdout and stderr == "", (code, stderr)
    stats = server.stats()
    assert stats["par_requests"] == 2 and stats["par_refused"] == 1 and stats["registrations"] == 2
    assert stats["unknown_client_authorizations"] == 0 and first not in stats["authorize_client_ids"][2:]
    echo(cli)
