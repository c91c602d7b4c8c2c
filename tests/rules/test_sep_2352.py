"""The client rules of SEP-2352 (tests/rules/rules.json; docs/rules.rst): client credentials
belong to the authorization server that issued them. Through the client's real sign-in and
refresh against two ``servers/fault_auth_server.py`` authorization servers (each also an
MCP server), where one's resource metadata can name the other.
"""

from __future__ import annotations

import base64
import dataclasses

import pytest

from albedo_actors.auth.http import AuthHttp
from albedo_actors.auth.refresh import refresh_held
from albedo_actors.errors import AuthError
from albedo_actors.store.records import Credentials

import authrules
from authrules import NO_BROWSER, OAuthSettings, config_of, free_port, one_line, sign_in, stored

home, store = authrules.home, authrules.store  # the fixtures (fault: tests/conftest.py)

HAND_ID, HAND_SECRET = "hand-client", "hand-secret-2352"


def seen_by(server) -> str:
    """Everything ``server`` was sent: headers, bodies and queries."""
    return "\n".join(repr(r.headers) + r.body.decode("utf-8", "replace") + repr(r.query) for r in server.requests)


def client_ids_asked(server) -> list[str]:
    return [r.query.get("client_id") for r in server.matching("/authorize")]


@pytest.mark.rule("sep-2352-no-cross-as-credential-reuse")
def test_a_client_registered_at_one_authorization_server_is_never_offered_to_another(fault, store):
    """A client registered at one authorization server is never offered to another, even for
    the same redirect URI: the second server gets its own registration, and never sees the
    first one's client id."""
    port = free_port()  # one redirect URI for both sign-ins
    first, second = fault(), fault(first_id=500)
    at_first = sign_in(config_of(first.url, name="first"), store, port=port)
    at_second = sign_in(config_of(second.url, name="second"), store, port=port)
    assert first.hits("/register") == 1 and second.hits("/register") == 1
    assert at_second.client_id != at_first.client_id
    assert client_ids_asked(second) == [at_second.client_id]
    assert at_first.client_id not in seen_by(second)


@pytest.mark.rule("sep-2352-no-reuse-on-as-change", "sep-2352-reregister-on-as-change")
def test_when_the_resource_metadata_names_another_authorization_server_albedo_registers_there(fault, store):
    """When the resource metadata names another authorization server, the next sign-in
    registers a new client with it and uses that one: the client of the former server is not
    sent to the new one, and the former server is asked nothing more."""
    port = free_port()
    former, new = fault(), fault(first_id=500)
    config = config_of(former.url)
    before = sign_in(config, store, port=port)
    assert before.issuer == former.issuer
    seen_before = len(former.requests)

    former.authorization_servers = [new.base]  # updated protected resource metadata
    after = sign_in(config, store, port=port)

    assert new.hits("/register") == 1 and new.hits("/token") == 1
    assert after.issuer == new.issuer and after.client_id != before.client_id
    assert client_ids_asked(new) == [after.client_id]
    assert before.client_id not in seen_by(new)
    later = former.requests[seen_before:]
    assert {r.path for r in later} <= {"/mcp", "/.well-known/oauth-protected-resource/mcp",
                                       "/.well-known/oauth-protected-resource"}  # discovery of the move only


@pytest.mark.rule("sep-2352-maintain-separate-registration-state-credentials-to")
def test_registrations_and_tokens_are_kept_per_authorization_server(fault, store):
    """Registrations are kept per authorization server (and redirect URI), and a server's
    tokens with the issuer and token endpoint that issued them: after a move, its refresh goes
    to the new authorization server with the new client only, the former server's
    registration stays its own, and moving back reuses it without registering again."""
    port = free_port()
    former, new = fault(), fault(first_id=500)
    config = config_of(former.url)
    before = sign_in(config, store, port=port)
    redirect = former.matching("/register")[0].json()["redirect_uris"][0]
    former.authorization_servers = [new.base]
    after = sign_in(config, store, port=port)

    assert store.get_oauth_client(former.issuer, redirect)["client_id"] == before.client_id
    assert store.get_oauth_client(new.issuer, redirect)["client_id"] == after.client_id
    record = stored(store)
    assert (record.issuer, record.token_endpoint, record.client_id) == (new.issuer, new.base + "/token", after.client_id)

    refreshed, _ = refresh_held(store, config, after.access_token, {}, lambda s: AuthHttp())
    assert refreshed.access_token != after.access_token and refreshed.issuer == new.issuer
    assert new.grants("refresh_token") == 1 and former.grants("refresh_token") == 0
    (refresh,) = [r for r in new.matching("/token") if r.form().get("grant_type") == "refresh_token"]
    assert refresh.form()["client_id"] == after.client_id

    former.authorization_servers = None  # back to the former server: its kept client is used again
    back = sign_in(config, store, port=port)
    assert back.client_id == before.client_id and former.hits("/register") == 1


@pytest.mark.rule("sep-2352-use-pre-registered-credentials-persist-credentials")
def test_kept_and_configured_clients_are_keyed_by_the_issuer(fault, store):
    """A client albedo registered is kept under the issuer identifier of the authorization
    server that issued it (with the redirect URI); a configured client is bound to the issuer
    of its first sign-in, recorded with the server's sign-in."""
    port = free_port()
    registering = fault()
    sign_in(config_of(registering.url, name="registered"), store, port=port)
    redirect = registering.matching("/register")[0].json()["redirect_uris"][0]
    kept = store.get_oauth_client(registering.issuer, redirect)
    assert kept is not None and kept["client_id"] == stored(store, "registered").client_id
    assert store.get_oauth_client(registering.issuer + "/", redirect) is None  # the issuer exactly, no other

    configured = fault(clients={HAND_ID: HAND_SECRET}, auth_methods=("client_secret_basic",))
    config = config_of(configured.url, oauth=OAuthSettings(client_id=HAND_ID, client_secret_env_var="HAND_SECRET"))
    record = sign_in(config, store, environ={**NO_BROWSER, "HAND_SECRET": HAND_SECRET})
    assert record.client_kind == "configured"
    assert (record.bound_client_id, record.bound_issuer) == (HAND_ID, configured.issuer)
    assert stored(store).bound_issuer == configured.issuer


@pytest.mark.rule("sep-2352-authorization-server-indicated-protected-resource-m")
def test_a_configured_client_at_another_authorization_server_is_an_error_and_nothing_is_sent(fault, store):
    """When the resource metadata names another authorization server than the one a
    configured client belongs to, the sign-in stops with one line naming both (and
    ``sign-out`` as the way to accept the move) before the client id or secret is sent to the
    new one; a refresh of a record whose token endpoint is not its client's issuer's is
    refused (``issuer_mismatch``: sign in again) without any request."""
    clients = {HAND_ID: HAND_SECRET}
    good = fault(clients=clients, auth_methods=("client_secret_basic",))
    other = fault(clients=clients, auth_methods=("client_secret_basic",), first_id=500)  # it would take the secret gladly
    environ = {**NO_BROWSER, "HAND_SECRET": HAND_SECRET}
    config = config_of(good.url, oauth=OAuthSettings(client_id=HAND_ID, client_secret_env_var="HAND_SECRET"))
    first = sign_in(config, store, environ=environ)

    good.authorization_servers = [other.base]
    with pytest.raises(AuthError) as caught:
        sign_in(config, store, environ=environ)
    message = one_line(caught.value, other.base, good.issuer, "sign-out")
    assert HAND_SECRET not in message
    basic = base64.b64encode(f"{HAND_ID}:{HAND_SECRET}".encode()).decode()
    sent = seen_by(other)
    assert HAND_ID not in sent and HAND_SECRET not in sent and basic not in sent
    assert stored(store).access_token == first.access_token  # the sign-in before is kept

    moved = dataclasses.replace(first, issuer=other.issuer, token_endpoint=other.base + "/token")
    store.put_credentials("guarded", Credentials(oauth=moved.to_json()))
    record, _ = refresh_held(store, config, first.access_token, environ, lambda s: AuthHttp())
    assert record.state == "needs_sign_in" and "issuer_mismatch" in record.reason
    assert other.hits("/token") == 0 and good.grants("refresh_token") == 0
