"""The client rules of SEP-837 (tests/rules/rules.json; docs/rules.rst): dynamic client
registration's ``application_type`` and what a refused registration tells the user,
through the client's real sign-in against ``servers/fault_auth_server.py``.
"""

from __future__ import annotations

import pytest

from albedo_actors.errors import AuthError, ClientRefused

import authrules
from authrules import Cli, config_of, free_port, one_line, sign_in, stored

home, store = authrules.home, authrules.store  # the fixtures (fault: tests/conftest.py)


@pytest.mark.rule("sep-837-application-type-present")
def test_registration_names_a_native_application(fault, store):
    """A dynamic client registration says ``application_type: native``: albedo is a local
    application whose redirect URI is a loopback ``http://127.0.0.1:PORT/callback``."""
    server = fault()
    record = sign_in(config_of(server.url), store)
    (request,) = server.matching("/register")
    asked = request.json()
    assert asked["application_type"] == "native"
    assert all(uri.startswith("http://127.0.0.1:") for uri in asked["redirect_uris"])
    assert record.client_id and record.state == "signed_in"


DESCRIPTION = "redirect_uri must use https for web clients"


@pytest.mark.rule("sep-837-prepared-handle-registration-failures-due-redirect")
def test_a_registration_refused_for_its_redirect_uri_ends_in_one_line_with_the_way_on(fault, store):
    """A registration refused with ``invalid_redirect_uri`` (an OpenID provider that does not
    take loopback redirect URIs) ends the sign-in with one line naming the redirect URI
    refused and the way on (a client registered there by hand, given with ``albedo-mcp edit
    NAME --oauth-client-id ID``); the user is sent nowhere and nothing is kept."""
    server = fault(register="invalid_redirect_uri", register_description=DESCRIPTION)
    with pytest.raises(ClientRefused) as caught:
        sign_in(config_of(server.url), store)
    (request,) = server.matching("/register")
    refused_uri = request.json()["redirect_uris"][0]
    one_line(caught.value, "client registration was refused (HTTP 400, invalid_redirect_uri", refused_uri,
             "albedo-mcp edit guarded --oauth-client-id ID")
    assert server.hits("/authorize") == 0 and server.hits("/token") == 0
    assert stored(store) is None or stored(store).access_token is None


@pytest.mark.rule("sep-837-registration-request-rejected-surface-meaningful-err")
@pytest.mark.parametrize("description, shown", [
    ("grant_types refresh_token is not allowed", "grant_types refresh_token is not allowed"),
    ("\x1b[31mred\x1b[0m\nX-Injected: 1 " + "y" * 400, "[31mred [0m X-Injected: 1 yyy"),
], ids=["plain", "hostile"])
def test_a_refused_registration_says_the_servers_error_and_description(fault, store, description, shown):
    """A refused registration is one error line with the HTTP status, the RFC 7591 error code
    and the server's ``error_description`` (control characters dropped, cut to 200
    characters), and for ``invalid_client_metadata`` the way on; never only a status."""
    server = fault(register="invalid_client_metadata", register_description=description)
    with pytest.raises(AuthError) as caught:
        sign_in(config_of(server.url), store)
    message = one_line(caught.value, "client registration was refused (HTTP 400, invalid_client_metadata: ", shown,
                       "--oauth-client-id ID")
    assert "\x1b" not in message and "y" * 200 not in message
    assert server.hits("/authorize") == 0


@pytest.mark.rule("sep-837-prepared-handle-registration-failures-due-redirect",
                  "sep-837-registration-request-rejected-surface-meaningful-err")
def test_the_command_line_shows_the_refused_registration_in_one_line(fault, tmp_path):
    """``albedo-mcp sign-in`` of a server whose authorization server refuses the registration
    exits non-zero with that one line on standard error (the status, the server's error and
    description, the redirect URI refused and the way on), and opens no browser."""
    server = fault(register="invalid_redirect_uri", register_description=DESCRIPTION)
    cli = Cli(tmp_path / "home")
    try:
        assert cli.run("add", server.url, "--name", "g").returncode == 0
        port = free_port()
        done = cli.run("sign-in", "g", "--port", str(port))
    finally:
        cli.stop_all()
    assert done.returncode != 0 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    for part in ("server 'g'", "invalid_redirect_uri", DESCRIPTION, f"http://127.0.0.1:{port}/callback",
                 "albedo-mcp edit g --oauth-client-id ID"):
        assert part in line, (part, line)
    assert server.hits("/authorize") == 0 and "Open this URL" not in done.stdout
