"""The client rules of SEP-1932 (tests/rules/rules.json; docs/rules.rst): DPoP (RFC 9449).
Through the client's real sign-in, refresh and :class:`ServerHandle` against
``servers/oauth_server.py --dpop``, which checks every proof on its side (one proof per
request, ``typ`` ``dpop+jwt``, ES256 only, ``htm``/``htu`` of the request, ``ath`` of the
token, the token's key, a ``jti`` never seen, ``iat`` within 5 minutes) and counts what it
saw (``/stats``).
"""

from __future__ import annotations

import json
import logging
import os
import stat

import pytest

from albedo_actors.auth import dpop
from albedo_actors.config import OAuthSettings
from albedo_actors.errors import AuthError, NeedsSignIn
from albedo_actors.store.sealing import new_key

from helpers import text_of
from authrules import NAME, Kit, config_of

DECLINED = {
    "sep-1932-browser-based-use-web-crypto-api":
        "albedo_actors is no browser-based client: it runs in a host process, where no Web Crypto API exists; its "
        "DPoP key is protected as sep-1932-protect-dpop-private-keys-using-appropriate's test shows.",
}


@pytest.fixture
def kit(tmp_path, oauth_server):
    kit = Kit(str(tmp_path), NAME)  # after oauth_server: the handles stop before the servers
    yield kit
    kit.close()


def echo(handle, text: str = "hi") -> str:
    return text_of(handle.call_tool("echo", {"text": text}))


def thumbprint(record) -> str:
    return dpop.prover(record.dpop_key).thumbprint


@pytest.mark.rule("sep-1932-client-dpop-auth-scheme")
def test_a_bound_token_goes_in_the_dpop_authorization_scheme(kit, oauth_server):
    """A DPoP-bound access token is sent as ``Authorization: DPoP <token>`` on every request
    to the MCP server, never as ``Bearer``."""
    server = oauth_server("--dpop")
    config = config_of(server.url)
    record = kit.sign_in(config)
    assert record.token_type == "DPoP"
    before = server.stats()
    handle = kit.handle(config)
    handle.connect()
    assert echo(handle) == "hi"
    stats = server.stats()
    assert stats["mcp_requests_dpop"] >= 3 and stats["bearer_with_bound_token"] == 0
    assert stats["mcp_requests_unauthorized"] == before["mcp_requests_unauthorized"]  # every one was taken


@pytest.mark.rule("sep-1932-client-fresh-proof")
def test_every_request_carries_a_fresh_proof(kit, oauth_server):
    """Every request to the MCP server carries its own new proof in the ``DPoP`` header (a new
    ``jti``, the request's method and URL, the token's hash, the current time): the server
    refuses none and sees no proof twice."""
    server = oauth_server("--dpop")
    config = config_of(server.url)
    kit.sign_in(config)
    handle = kit.handle(config)
    handle.connect()
    for n in range(4):
        assert echo(handle, f"n{n}") == f"n{n}"
    stats = server.stats()
    assert stats["mcp_requests_dpop"] >= 6
    assert stats["dpop_replays"] == 0 and stats["dpop_proofs_refused"] == 0


@pytest.mark.rule("sep-1932-client-token-request-proof")
def test_every_token_request_carries_a_proof_of_the_kept_key(kit, oauth_server):
    """The code exchange and every refresh carry a DPoP proof of the server's one key, so the
    tokens issued are bound to it."""
    server = oauth_server("--dpop")
    config = config_of(server.url)
    record = kit.sign_in(config)
    handle = kit.handle(config)
    handle.connect()
    server.expire()
    assert echo(handle, "after expiry") == "after expiry"  # refreshed
    stats = server.stats()
    grants = stats["token_requests"]
    assert grants["authorization_code"] == 1 and grants["refresh_token"] == 1
    assert stats["dpop_token_requests"] == 2 and stats["token_jkts"] == [thumbprint(record)] * 2


@pytest.mark.rule("sep-1932-client-as-nonce")
def test_the_authorization_servers_nonce_is_sent_in_a_new_proof(kit, oauth_server):
    """A token request answered ``use_dpop_nonce`` is sent once more with a new proof carrying
    the nonce given (a second demand is one error line)."""
    server = oauth_server("--dpop", "--dpop-nonce-as")
    assert kit.sign_in(config_of(server.url)).token_type == "DPoP"
    stats = server.stats()
    assert stats["dpop_nonce_challenges_as"] == 1 and stats["token_requests"]["authorization_code"] == 2
    assert stats["dpop_token_requests"] == 1 and stats["dpop_replays"] == 0


@pytest.mark.rule("sep-1932-client-rs-nonce")
def test_the_mcp_servers_nonce_is_sent_in_a_new_proof_and_kept(kit, oauth_server):
    """A request the MCP server answers ``401 use_dpop_nonce`` is sent once more with a new
    proof carrying the nonce given, and later requests carry it from the start."""
    server = oauth_server("--dpop", "--dpop-nonce-rs")
    config = config_of(server.url)
    kit.sign_in(config)
    handle = kit.handle(config)
    handle.connect()
    assert echo(handle) == "hi" and echo(handle, "again") == "again"
    stats = server.stats()
    assert stats["dpop_nonce_challenges_rs"] == 1
    assert stats["dpop_replays"] == 0 and stats["bearer_with_bound_token"] == 0


@pytest.mark.rule("sep-1932-asymmetric-alg-only")
def test_proofs_are_es256_only_and_a_server_offering_only_other_algorithms_gets_none(kit, oauth_server):
    """Proofs are signed with ES256 (an asymmetric P-256 key) only; never with a symmetric
    algorithm or ``none``. An authorization server that lists only such algorithms gets no
    proof: the sign-in is a plain Bearer one, or stops before the browser when the server's
    entry says ``"dpop": true``."""
    server = oauth_server("--dpop")
    config = config_of(server.url)
    record = kit.sign_in(config)
    proof = dpop.prover(record.dpop_key).proof("POST", server.url, record.access_token)
    assert json.loads(dpop_header(proof))["alg"] == "ES256"
    handle = kit.handle(config)
    handle.connect()
    assert echo(handle) == "hi"
    assert server.stats()["dpop_proofs_refused"] == 0  # the server takes ES256 only

    weak = oauth_server("--dpop", "--dpop-algs", "HS256 none")
    assert kit.sign_in(config_of(weak.url, name="weak")).token_type == "Bearer"
    assert weak.stats()["dpop_token_requests"] == 0
    with pytest.raises(AuthError) as caught:
        kit.sign_in(config_of(weak.url, name="weak", oauth=OAuthSettings(dpop=True)))
    assert "ES256" in str(caught.value) and "\n" not in str(caught.value)


def dpop_header(proof: str) -> str:
    import base64

    head = proof.split(".")[0]
    return base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)).decode()


@pytest.mark.rule("sep-1932-implementations-also-conform-baseline-authorization")
def test_a_dpop_sign_in_keeps_every_baseline_step(kit, oauth_server):
    """A DPoP sign-in is the baseline sign-in with proofs added: resource metadata and
    authorization server discovery, PKCE S256, the ``iss`` check, the MCP URL as ``resource``
    in the authorization and token requests, ``offline_access`` when offered, refresh with
    the same client."""
    server = oauth_server("--dpop")
    config = config_of(server.url)
    record = kit.sign_in(config)
    stats = server.stats()
    assert stats["last_authorize_resource"] == server.url and stats["last_token_resource"] == server.url
    assert "offline_access" in stats["last_authorize_scope"].split()
    assert record.issuer == server.base and record.refresh_token
    handle = kit.handle(config)
    handle.connect()
    server.expire()
    assert echo(handle) == "hi"
    assert server.stats()["refresh_client_ids"] == [record.client_id]


@pytest.mark.rule("sep-1932-implementations-adopting-extension-follow-security")
def test_a_bound_token_is_never_sent_without_its_proof(kit, oauth_server, caplog):
    """RFC 9449's security considerations are followed: a proof is bound to one request
    (``htm``, ``htu``, ``ath``, ``iat``, a new ``jti``: none is replayed), and a bound token
    whose key is lost is never sent as Bearer: the server is asked nothing and the user
    signs in again; neither the token nor the key reaches a log."""
    caplog.set_level(logging.DEBUG)
    server = oauth_server("--dpop")
    config = config_of(server.url)
    record = kit.sign_in(config)
    kit.edit(dpop_key=None)  # the key is lost
    handle = kit.handle(config)
    with pytest.raises(NeedsSignIn) as caught:
        handle.connect()
    assert "DPoP key" in str(caught.value) and "\n" not in str(caught.value)
    stats = server.stats()
    assert stats["bearer_with_bound_token"] == 0 and stats["mcp_requests_with_token"] == 0
    assert stats["dpop_replays"] == 0
    logged = "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert record.access_token not in logged and json.loads(record.dpop_key)["d"] not in logged


@pytest.mark.rule("sep-1932-protect-dpop-private-keys-using-appropriate")
def test_the_private_key_is_sealed_at_rest_and_never_shown(oauth_server, tmp_path, monkeypatch, caplog):
    """The DPoP private key is kept with the server's sign-in in the database only: encrypted
    with AES-256-GCM when the store has a key (``ALBEDO_STORE_KEY``), else in files only their
    owner may read (0600); never in a log, a ``repr`` or a proof (proofs carry the public
    key). No hardware module or enclave is used."""
    caplog.set_level(logging.DEBUG)
    server = oauth_server("--dpop")
    monkeypatch.setenv("ALBEDO_STORE_KEY", new_key())
    sealed = Kit(str(tmp_path / "sealed"), NAME)
    try:
        record = sealed.sign_in(config_of(server.url))
    finally:
        sealed.close()
    private = json.loads(record.dpop_key)["d"]
    files = [p for p in (tmp_path / "sealed").rglob("*") if p.is_file()]
    assert files and not any(private.encode() in p.read_bytes() for p in files)
    assert private not in repr(record)
    proof = dpop.prover(record.dpop_key).proof("POST", server.url, record.access_token)
    assert "d" not in json.loads(dpop_header(proof))["jwk"]

    monkeypatch.delenv("ALBEDO_STORE_KEY")
    plain = Kit(str(tmp_path / "plain"), NAME)
    try:
        again = plain.sign_in(config_of(server.url))
    finally:
        plain.close()
    mine = json.loads(again.dpop_key)["d"].encode()
    holding = [p for p in (tmp_path / "plain").rglob("*") if p.is_file() and mine in p.read_bytes()]
    assert holding and all(stat.S_IMODE(os.stat(p).st_mode) & 0o077 == 0 for p in holding)
    logged = "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert private not in logged and mine.decode() not in logged
