"""OAuth end to end: sign-in, tokens on requests, expiry, refusal, step-up, machine
clients, configured clients and tokens bound to their URL.

Every test runs against the real loopback authorization server + MCP server
(``tests/servers/oauth_server.py``, the ``oauth_server`` fixture) and the client's
real code paths: :class:`SignIn`, :class:`ServerHandle` with :class:`ServerAuth`
and a :class:`TokenRefresher`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket

import pytest

from albedo_actors import config as albedo_config
from albedo_actors.actors.client import ServerHandle
from albedo_actors.errors import RefreshDeferred
from albedo_actors.actors.refresher import refresh_by
from albedo_actors.auth.refresh import refresh_held
from albedo_actors.auth.http import AuthHttp
from albedo_actors.auth.signin import SignIn
from albedo_actors.config import OAuthSettings, ServerConfig
from albedo_actors.errors import AuthError, NeedsSignIn
from albedo_actors.settings import ServerSpec, Settings
from albedo_actors.wire import mcp

from helpers import text_of
from kit import Kit

NAME = "guarded"


# -- fixtures and helpers --------------------------------------------------------------------


@pytest.fixture
def kit(tmp_path, oauth_server):
    # Depends on oauth_server so the handles stop before the servers do (a server stopping
    # under an open stream waits out its graceful shutdown).
    kit = Kit(str(tmp_path), NAME)
    yield kit
    kit.close()


def http_config(url: str, name: str = NAME, oauth: OAuthSettings | None = None) -> ServerConfig:
    return ServerConfig(name=name, type="http", url=url, oauth=oauth, startup_timeout_ms=15000, call_timeout_ms=15000)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def echo(handle: ServerHandle, text: str = "hi") -> str:
    return text_of(handle.call_tool("echo", {"text": text}))


# -- 1. sign-in ------------------------------------------------------------------------------


def test_sign_in_sends_the_mcp_url_as_resource_and_asks_for_offline_access(kit, oauth_server):
    server = oauth_server("--scopes", "mcp files")
    record = kit.sign_in(http_config(server.url))
    stats = server.stats()
    assert stats["last_authorize_resource"] == server.url
    assert stats["last_token_resource"] == server.url
    assert stats["last_authorize_scope"].split() == ["mcp", "files", "offline_access"]
    assert stats["token_requests"]["authorization_code"] == 1
    stored = kit.record()
    assert stored.state == "signed_in" and stored.url == server.url and stored.resource == server.url
    assert stored.issuer == server.base and stored.client_kind == "registered"
    assert stored.access_token == record.access_token and stored.refresh_token


def test_sign_in_asks_no_offline_access_when_the_server_does_not_list_it(kit, oauth_server):
    server = oauth_server("--no-offline-access")
    record = kit.sign_in(http_config(server.url))
    assert record.state == "signed_in"
    scope = server.stats()["last_authorize_scope"].split()
    assert scope == ["mcp"] and "offline_access" not in scope


def test_a_registration_is_kept_per_issuer_and_redirect_and_reused(kit, oauth_server):
    server = oauth_server()
    port = free_port()
    config = http_config(server.url)
    first = kit.sign_in(config, port=port)
    second = kit.sign_in(config, port=port)
    redirect = f"http://127.0.0.1:{port}/callback"
    assert kit.redirects == [redirect, redirect]
    stats = server.stats()
    assert stats["registrations"] == 1
    assert stats["token_requests"]["authorization_code"] == 2
    assert second.client_id == first.client_id
    kept = kit.store.get_oauth_client(server.base, redirect)
    assert kept is not None and kept["client_id"] == first.client_id
    assert kit.store.get_oauth_client(server.base, "http://127.0.0.1:1/callback") is None
    assert second.access_token != first.access_token


def test_sign_in_to_an_issuer_with_a_path(kit, oauth_server):
    server = oauth_server("--issuer-path", "/tenant")
    record = kit.sign_in(http_config(server.url))
    assert record.state == "signed_in"
    assert record.issuer == server.base + "/tenant"
    assert record.token_endpoint.startswith(server.base + "/tenant/")
    assert kit.store.get_oauth_client(server.base + "/tenant", kit.redirects[0]) is not None
    assert server.stats()["token_requests"]["authorization_code"] == 1


def test_sign_in_without_an_iss_promise_accepts_a_response_without_iss(kit, oauth_server):
    server = oauth_server("--no-iss")
    record = kit.sign_in(http_config(server.url))
    assert record.state == "signed_in" and record.access_token
    assert server.stats()["token_requests"]["authorization_code"] == 1


def _signed_in_through_settings_and_refreshed(tmp_path, kit, server):
    """Add the server through Settings, sign in, call, expire, call (refresh): every token of a life cycle."""
    settings = Settings(str(tmp_path), kit.store)
    view = settings.add(ServerSpec(name=NAME, transport="http", url=server.url))
    assert view.state == "needs sign-in"
    settings.begin_sign_in(NAME, environ={}, agent=kit.agent(), port=0, lifetime=10).run()
    first = kit.record()
    assert first.state == "signed_in"
    handle = kit.handle(albedo_config.load(str(tmp_path)).server(NAME))
    handle.connect()
    assert echo(handle, "one") == "one"
    server.expire()
    assert echo(handle, "two") == "two"  # 401, refresh, post again
    second = kit.record()
    assert server.stats()["token_requests"]["refresh_token"] == 1
    assert second.access_token != first.access_token and second.refresh_token != first.refresh_token
    return settings, [first.access_token, first.refresh_token, second.access_token, second.refresh_token]


def test_no_token_reaches_extensions_json_the_settings_view_or_the_logs(tmp_path, kit, oauth_server, caplog):
    caplog.set_level(logging.DEBUG)
    server = oauth_server()
    settings, secrets = _signed_in_through_settings_and_refreshed(tmp_path, kit, server)
    with open(os.path.join(str(tmp_path), "extensions.json"), encoding="utf-8") as f:
        document = f.read()
    assert server.url in document and NAME in document  # the entry is there, with no token
    shown = json.dumps([v.as_json() for v in settings.servers()])
    records = list(caplog.records)
    assert any(r.name.startswith("albedo_actors") for r in records)
    assert any(r.name.startswith("urllib3") for r in records)  # the HTTP client's DEBUG log was captured
    logged = "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in records)
    for secret in secrets:
        assert secret not in document
        assert secret not in shown
        assert secret not in logged


def test_no_token_reaches_any_debug_log_record(tmp_path, kit, oauth_server, caplog):
    caplog.set_level(logging.DEBUG)
    server = oauth_server()
    _, secrets = _signed_in_through_settings_and_refreshed(tmp_path, kit, server)
    logged = "\n".join(f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    leaked = [i for i, secret in enumerate(secrets) if secret in logged]
    assert leaked == []


# -- 2. using tokens ---------------------------------------------------------------------------


def test_requests_carry_the_bearer_in_the_modern_era(kit, oauth_server):
    server = oauth_server()
    config = http_config(server.url)
    kit.sign_in(config)
    before = server.stats()
    handle = kit.handle(config)
    catalogue = handle.connect()
    assert catalogue.era == "modern" and handle.status()["era"] == "modern"
    assert "echo" in {tool["name"] for tool in catalogue.tools}
    assert echo(handle, "modern") == "modern"
    after = server.stats()
    assert after["mcp_requests_authorized"] >= before["mcp_requests_authorized"] + 2
    assert after["mcp_requests_unauthorized"] == before["mcp_requests_unauthorized"]
    assert after["token_requests"]["refresh_token"] == 0


def test_requests_carry_the_bearer_in_the_legacy_era(kit, oauth_server, monkeypatch):
    # The loopback server speaks both eras on one endpoint; the client is made to take
    # its legacy path (initialize + session) by treating every server/discover
    # answer as an older server's. Everything else is the real flow.
    monkeypatch.setattr(mcp, "judge_discover_result", lambda result: mcp.Verdict.HANDSHAKE)
    server = oauth_server()
    config = http_config(server.url)
    kit.sign_in(config)
    before = server.stats()
    handle = kit.handle(config)
    catalogue = handle.connect()
    assert catalogue.era == "legacy" and handle.status()["era"] == "legacy"
    assert echo(handle, "legacy") == "legacy"
    after = server.stats()
    # server/discover, initialize, notifications/initialized, tools/list..., tools/call
    assert after["mcp_requests_authorized"] >= before["mcp_requests_authorized"] + 4
    assert after["mcp_requests_unauthorized"] == before["mcp_requests_unauthorized"]


# -- 3. expiry -------------------------------------------------------------------------------------


def test_an_expired_token_is_refreshed_once_and_the_call_succeeds(kit, oauth_server):
    server = oauth_server()
    config = http_config(server.url)
    kit.sign_in(config)
    handle = kit.handle(config)
    handle.connect()
    before = kit.record()
    server.expire()
    unauthorized = server.stats()["mcp_requests_unauthorized"]
    assert echo(handle, "after expiry") == "after expiry"
    stats = server.stats()
    assert stats["token_requests"]["refresh_token"] == 1
    assert stats["mcp_requests_unauthorized"] == unauthorized + 1  # the one 401 that caused the refresh
    after = kit.record()
    assert after.state == "signed_in"
    assert after.access_token != before.access_token
    assert after.refresh_token and after.refresh_token != before.refresh_token  # rotated
    assert echo(handle, "again") == "again"
    assert server.stats()["token_requests"]["refresh_token"] == 1


def test_a_short_lived_token_is_used_for_the_first_half_of_its_life(kit, oauth_server):
    # A 30 s token is within the one-minute margin from the start: refreshing it before
    # every request would be absurd, so it is refreshed once half its life has passed.
    server = oauth_server("--token-lifetime", "30")
    config = http_config(server.url)
    signed = kit.sign_in(config)
    assert not signed.expiring()
    assert signed.expiring(now=signed.obtained_at + 16)
    before = server.stats()
    handle = kit.handle(config)
    handle.connect()
    assert echo(handle) == "hi"
    stats = server.stats()
    assert stats["token_requests"]["refresh_token"] == 0
    assert stats["mcp_requests_unauthorized"] == before["mcp_requests_unauthorized"]
    assert kit.record().access_token == signed.access_token


def test_a_short_lived_token_past_half_its_life_is_refreshed_once_before_it_is_sent(kit, oauth_server):
    server = oauth_server("--token-lifetime", "30")
    config = http_config(server.url)
    signed = kit.sign_in(config)
    aged = signed.replace(obtained_at=signed.obtained_at - 20, expires_at=signed.expires_at - 20)
    kit.store.update_credentials(NAME, lambda c: dataclasses.replace(c, oauth=aged.to_json()))
    before = server.stats()
    handle = kit.handle(config)
    handle.connect()
    assert echo(handle) == "hi"
    stats = server.stats()
    assert stats["token_requests"]["refresh_token"] == 1  # the fresh 30 s token is then used
    assert stats["mcp_requests_unauthorized"] == before["mcp_requests_unauthorized"]  # no request was refused
    assert kit.record().refresh_token != signed.refresh_token


def test_a_stored_token_expiring_within_a_minute_is_refreshed_exactly_once(kit, oauth_server):
    # The same rule with a server whose new tokens live an hour: only the first request refreshes.
    server = oauth_server()
    config = http_config(server.url)
    signed = kit.sign_in(config)
    expiring = signed.replace(expires_at=signed.updated_at + 30, obtained_at=signed.updated_at - 3570)
    kit.store.update_credentials(NAME, lambda c: dataclasses.replace(c, oauth=expiring.to_json()))
    before = server.stats()
    handle = kit.handle(config)
    handle.connect()
    assert echo(handle) == "hi"
    stats = server.stats()
    assert stats["token_requests"]["refresh_token"] == 1
    assert stats["mcp_requests_unauthorized"] == before["mcp_requests_unauthorized"]
    assert stats["mcp_requests_with_token"] == stats["mcp_requests_authorized"]
    assert kit.record().access_token != signed.access_token


# -- 4. refusal and transient failures ----------------------------------------------------------


def test_a_refused_refresh_needs_a_sign_in_and_keeps_the_registration(kit, oauth_server):
    server = oauth_server()
    config = http_config(server.url)
    signed = kit.sign_in(config)
    handle = kit.handle(config)
    handle.connect()
    server.expire()
    server.revoke_refresh()
    with pytest.raises(NeedsSignIn) as caught:
        handle.call_tool("echo", {"text": "x"})
    message = str(caught.value)
    assert "needs the user to sign in" in message and "did not run" in message
    assert f"sign-in {NAME}" in message and "\n" not in message
    assert server.stats()["token_requests"]["refresh_token"] == 1
    record = kit.record()
    assert record.state == "needs_sign_in"
    assert record.access_token is None and record.refresh_token is None
    assert record.client_id == signed.client_id
    kept = kit.store.get_oauth_client(server.base, kit.redirects[0])
    assert kept is not None and kept["client_id"] == signed.client_id


def test_an_unreachable_token_endpoint_keeps_the_tokens(kit, oauth_server):
    server = oauth_server("--token-lifetime", "30")
    config = http_config(server.url)
    signed = kit.sign_in(config)
    signed = signed.replace(obtained_at=signed.obtained_at - 20, expires_at=signed.expires_at - 20)  # past half its life
    kit.store.update_credentials(NAME, lambda c: dataclasses.replace(c, oauth=signed.to_json()))
    assert signed.expiring()
    server.stop()
    with pytest.raises(RefreshDeferred):
        refresh_held(kit.store, config, signed.access_token, {}, lambda s: AuthHttp(timeout=5))
    future = refresh_by(kit.refresher())(config, signed.access_token)
    with pytest.raises(RefreshDeferred):
        future.result(timeout=30)
    record = kit.record()
    assert record.state == "signed_in"
    assert record.access_token == signed.access_token and record.refresh_token == signed.refresh_token


# -- 5. step-up -------------------------------------------------------------------------------


STEP_UP_FLAGS = ("--scopes", "mcp admin", "--tool-scope", "add=admin", "--challenge-scope", "mcp")


def test_insufficient_scope_records_a_step_up_and_the_next_sign_in_asks_for_the_union(kit, oauth_server):
    server = oauth_server(*STEP_UP_FLAGS)
    config = http_config(server.url)
    signed = kit.sign_in(config)
    assert "admin" not in signed.requested_scope.split()
    handle = kit.handle(config)
    handle.connect()
    with pytest.raises(NeedsSignIn) as caught:
        handle.call_tool("add", {"a": 1, "b": 2})
    assert "did not run" in str(caught.value)
    assert server.stats()["mcp_requests_forbidden"] == 1
    record = kit.record()
    assert {"mcp", "admin"} <= set(record.step_up.split())
    assert record.state == "signed_in" and record.access_token == signed.access_token  # tokens kept
    assert echo(handle, "still") == "still"

    again = kit.sign_in(config)
    assert {"mcp", "admin"} <= set(server.stats()["last_authorize_scope"].split())
    assert again.step_up is None and "admin" in again.scope.split()
    fresh = kit.handle(config)
    fresh.connect()
    assert fresh.call_tool("add", {"a": 1, "b": 2})["structuredContent"]["sum"] == 3


def test_a_running_handle_uses_the_tokens_of_a_step_up_sign_in_made_elsewhere(kit, oauth_server):
    server = oauth_server(*STEP_UP_FLAGS)
    config = http_config(server.url)
    kit.sign_in(config)
    handle = kit.handle(config)
    handle.connect()
    with pytest.raises(NeedsSignIn):
        handle.call_tool("add", {"a": 1, "b": 2})
    kit.sign_in(config)  # as `albedo-mcp sign-in` would, in another process
    assert kit.record().step_up is None
    assert handle.call_tool("add", {"a": 1, "b": 2})["structuredContent"]["sum"] == 3


def test_a_step_up_runs_inline_with_an_authorizer(kit, oauth_server):
    server = oauth_server(*STEP_UP_FLAGS)
    config = http_config(server.url)
    handle = kit.handle(config, authorize=kit.authorizer())
    handle.connect()  # 401: the first sign-in runs inline
    first = kit.record()
    assert first.state == "signed_in" and "admin" not in first.scope.split()
    result = handle.call_tool("add", {"a": 2, "b": 3})  # 403: the step-up sign-in runs inline
    assert result["structuredContent"]["sum"] == 5
    stats = server.stats()
    assert stats["mcp_requests_forbidden"] == 1
    assert stats["token_requests"]["authorization_code"] == 2
    assert {"mcp", "admin"} <= set(stats["last_authorize_scope"].split())
    assert "admin" in kit.record().scope.split() and kit.record().step_up is None


# -- 6. machine-to-machine clients --------------------------------------------------------------


def test_client_credentials_connects_with_no_user(kit, oauth_server):
    server = oauth_server("--client-credentials", "svc:s3cret")
    environ = {"SVC_SECRET": "s3cret"}
    config = http_config(server.url, oauth=OAuthSettings(grant="client_credentials", client_id="svc",
                                                         client_secret_env_var="SVC_SECRET"))
    handle = kit.handle(config, authorize=kit.authorizer(environ), environ=environ)
    handle.connect()
    assert echo(handle, "machine") == "machine"
    stats = server.stats()
    assert stats["token_requests"]["client_credentials"] == 1
    assert stats["token_requests"]["authorization_code"] == 0
    assert stats["authorize_requests"] == 0 and stats["registrations"] == 0
    assert kit.redirects == []  # nobody was sent to a browser
    record = kit.record()
    assert record.state == "signed_in" and record.client_kind == "client_credentials"
    assert record.client_id == "svc" and record.access_token and record.refresh_token is None


def _pem_keys(kind: str) -> tuple[str, str]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    key = ec.generate_private_key(ec.SECP256R1()) if kind == "ec" else rsa.generate_private_key(65537, 2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return private, public


@pytest.mark.parametrize("kind, algorithm", [("ec", "ES256"), ("rsa", "RS256")])
def test_client_credentials_with_private_key_jwt(tmp_path, kit, oauth_server, kind, algorithm):
    private, public = _pem_keys(kind)
    pem = tmp_path / f"{kind}.pub.pem"
    pem.write_text(public)
    server = oauth_server("--jwt-client", f"jwt-{kind}:{pem}")
    environ = {"SVC_KEY": private}
    config = http_config(server.url, oauth=OAuthSettings(grant="client_credentials", client_id=f"jwt-{kind}",
                                                         private_key_env_var="SVC_KEY", signing_algorithm=algorithm))
    handle = kit.handle(config, authorize=kit.authorizer(environ), environ=environ)
    handle.connect()
    assert echo(handle, algorithm) == algorithm
    assert server.stats()["token_requests"]["client_credentials"] == 1
    record = kit.record()
    assert record.client_kind == "client_credentials" and record.auth_method == "private_key_jwt"
    assert record.state == "signed_in" and record.access_token


def test_client_credentials_with_a_wrong_secret_fails_in_one_line_and_stores_nothing(kit, oauth_server):
    server = oauth_server("--client-credentials", "svc:s3cret")
    config = http_config(server.url, oauth=OAuthSettings(grant="client_credentials", client_id="svc",
                                                         client_secret_env_var="SVC_SECRET"))
    with pytest.raises(AuthError) as caught:
        SignIn(config, kit.store, environ={"SVC_SECRET": "not-the-secret-42"}, port=0, lifetime=10).run()
    message = str(caught.value)
    assert message.startswith(f"server '{NAME}': sign-in failed: ") and "\n" not in message
    assert "not-the-secret-42" not in message and "s3cret" not in message
    assert server.stats()["token_requests"]["client_credentials"] == 1
    record = kit.record()
    assert record is None or not record.access_token


# -- 7. a configured client ---------------------------------------------------------------------


def test_a_configured_confidential_client_needs_no_registration(kit, oauth_server):
    port = free_port()
    server = oauth_server("--client", f"myid:mysecret:http://127.0.0.1:{port}/callback")
    environ = {"MY_SECRET": "mysecret"}
    config = http_config(server.url, oauth=OAuthSettings(client_id="myid", client_secret_env_var="MY_SECRET"))
    record = kit.sign_in(config, port=port, environ=environ)
    assert kit.redirects == [f"http://127.0.0.1:{port}/callback"]
    stats = server.stats()
    assert stats["registrations"] == 0 and stats["token_requests"]["authorization_code"] == 1
    assert record.client_kind == "configured" and record.client_id == "myid"
    assert record.auth_method == "client_secret_basic" and record.client_secret is None
    # the refresh authenticates the same way, with the secret from the environment
    handle = kit.handle(config, environ=environ)
    handle.connect()
    server.expire()
    assert echo(handle, "configured") == "configured"
    assert server.stats()["token_requests"]["refresh_token"] == 1
    assert kit.record().state == "signed_in"


# -- 8. tokens stay with their URL ------------------------------------------------------------------


def test_a_record_for_another_url_is_never_sent(kit, oauth_server):
    a = oauth_server()
    b = oauth_server()
    signed = kit.sign_in(http_config(a.url))
    assert signed.state == "signed_in"
    handle = kit.handle(http_config(b.url))  # the same server name, now pointing elsewhere
    with pytest.raises(NeedsSignIn) as caught:
        handle.connect()
    assert "needs the user to sign in" in str(caught.value)
    stats_b = b.stats()
    assert stats_b["mcp_requests_with_token"] == 0
    assert stats_b["mcp_requests_unauthorized"] >= 1
    assert sum(stats_b["token_requests"].values()) == 0
    assert a.stats()["mcp_requests_with_token"] == 0
    assert a.stats()["token_requests"]["refresh_token"] == 0
