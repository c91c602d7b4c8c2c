"""The client rules of SEP-2207 (tests/rules/rules.json; docs/rules.rst): refresh tokens.
Through the client's real sign-in, refresh and :class:`ServerHandle` against
``servers/fault_auth_server.py``, which can list ``offline_access``, leave refresh tokens
out of its answers, and records every request it gets.
"""

from __future__ import annotations

import logging
import os
import pathlib
import stat

import pytest

from albedo_actors.auth.http import AuthHttp
from albedo_actors.auth.refresh import refresh_held
from albedo_actors.errors import NeedsSignIn
from albedo_actors.store import open_store
from albedo_actors.store.sealing import new_key

from helpers import text_of
from authrules import NAME, Kit, config_of, sign_in


SUFFIX = "-Zq7Rk2Wm9Xc4Lp8Vt3"  # makes every token findable in the database's bytes


@pytest.mark.rule("sep-2207-client-metadata-grant-types")
def test_registration_asks_for_the_refresh_token_grant_when_offline_access_is_offered(fault, tmp_path):
    """When the authorization server offers ``offline_access``, the dynamic registration lists
    ``refresh_token`` among its ``grant_types`` (beside ``authorization_code``) and the
    authorization request asks for ``offline_access``; a server that does not offer it is
    asked for ``authorization_code`` only."""
    offering = fault(scopes_supported=("mcp", "offline_access"))
    plain = fault()
    store = open_store(str(tmp_path / "home"))
    try:
        sign_in(config_of(offering.url), store)
        sign_in(config_of(plain.url, name="plain"), store)
    finally:
        store.close()
    (offered,) = offering.matching("/register")
    assert offered.json()["grant_types"] == ["authorization_code", "refresh_token"]
    assert "offline_access" in offering.matching("/authorize")[0].query["scope"].split()
    (not_offered,) = plain.matching("/register")
    assert not_offered.json()["grant_types"] == ["authorization_code"]


@pytest.mark.rule("sep-2207-desire-refresh-tokens-keep-refresh-tokens")
def test_refresh_tokens_are_sealed_at_rest_and_sent_only_to_their_token_endpoint(fault, tmp_path, monkeypatch, caplog):
    """Refresh tokens are stored only in the database (never in ``extensions.json`` or a log),
    encrypted with AES-256-GCM when the store has a key (``ALBEDO_STORE_KEY``) and in a 0600
    file without one; they travel only in the body of a POST to the token endpoint of the
    authorization server that issued them, never to the MCP server."""
    caplog.set_level(logging.DEBUG)
    server = fault(token_suffix=SUFFIX)
    sealed_home, plain_home = tmp_path / "sealed", tmp_path / "plain"
    monkeypatch.setenv("ALBEDO_STORE_KEY", new_key())
    store = open_store(str(sealed_home))
    try:
        signed = sign_in(config_of(server.url), store)
        refreshed, _ = refresh_held(store, config_of(server.url), signed.access_token, {}, lambda s: AuthHttp())
    finally:
        store.close()
    assert signed.refresh_token and refreshed.refresh_token and refreshed.refresh_token != signed.refresh_token
    written = b"".join(p.read_bytes() for p in sealed_home.rglob("*") if p.is_file())
    assert SUFFIX.encode() not in written  # no token, refresh or access, in the clear at rest

    monkeypatch.delenv("ALBEDO_STORE_KEY")
    store = open_store(str(plain_home))
    try:
        sign_in(config_of(server.url), store)
    finally:
        store.close()
    holding = [p for p in plain_home.rglob("*") if p.is_file() and SUFFIX.encode() in p.read_bytes()]
    assert holding  # in the clear without a key ...
    for path in holding:
        assert stat.S_IMODE(os.stat(path).st_mode) & 0o077 == 0, path  # ... in files only their owner reads

    for request in server.requests:
        carried = repr(request.headers) + repr(request.query) + request.body.decode("utf-8", "replace")
        if "rt-" in carried:
            assert request.method == "POST" and request.path == "/token" and "rt-" not in repr(request.query)
    assert all("rt-" not in r.body.decode("utf-8", "replace") for r in server.matching("/mcp"))
    logged = "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert SUFFIX not in logged
    assert not any(SUFFIX in p.read_text("utf-8", "replace") for p in pathlib.Path(tmp_path).rglob("*.json"))


@pytest.fixture
def kit(tmp_path, fault):
    kit = Kit(str(tmp_path), NAME)  # after fault: the handles stop before the server does
    yield kit
    kit.close()


@pytest.mark.rule("sep-2207-desire-refresh-tokens-assume-refresh-tokens")
def test_a_sign_in_without_a_refresh_token_works_and_its_expiry_asks_for_a_sign_in(fault, kit):
    """A token answer without a refresh token is a complete sign-in: the calls work, and when
    the access token is refused later, no refresh is attempted: the call did not run and the
    user is asked to sign in again."""
    server = fault(issue_refresh=False)
    config = config_of(server.url)
    record = kit.sign_in(config)
    assert record.state == "signed_in" and record.access_token and record.refresh_token is None
    handle = kit.handle(config)
    handle.connect()
    assert text_of(handle.call_tool("echo", {"text": "hi"}))
    server.expire()
    with pytest.raises(NeedsSignIn) as caught:
        handle.call_tool("echo", {"text": "late"})
    assert "\n" not in str(caught.value) and NAME in str(caught.value)
    assert server.grants("refresh_token") == 0 and server.hits("/token") == 1
