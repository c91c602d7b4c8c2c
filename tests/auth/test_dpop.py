"""DPoP (RFC 9449): proofs, the nonce cache, and the whole flow against a real DPoP server.

The pure parts (a proof's shape and signature, the thumbprint, the nonce cache's
bounds) are checked directly; everything else runs against the loopback authorization +
MCP server (``tests/servers/oauth_server.py --dpop ...``), which checks every proof
with pyjwt/cryptography on its side and counts what it saw (``/stats``): requests
that presented a bound token as Bearer (must stay 0), refused and replayed proofs, nonce
challenges, and the key thumbprint of every bound token it issued.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import logging
import threading

import pytest
import requests

from albedo_actors.actors.client import ServerHandle
from albedo_actors.auth import dpop
from albedo_actors.auth.record import OAuthRecord, from_credentials
from albedo_actors.config import OAuthSettings, ServerConfig, parse
from albedo_actors.errors import AlbedoError, AuthError, ConfigError, HttpRefused, NeedsSignIn
from albedo_actors.wire import mcp

from helpers import text_of
from kit import Kit

NAME = "bound"


@pytest.fixture
def kit(tmp_path, oauth_server):
    kit = Kit(str(tmp_path), NAME)  # after oauth_server: the handles stop before the servers
    yield kit
    kit.close()


def config_for(url: str, oauth: OAuthSettings | None = None) -> ServerConfig:
    return ServerConfig(name=NAME, type="http", url=url, oauth=oauth, startup_timeout_ms=15000, call_timeout_ms=15000)


def echo(handle: ServerHandle, text: str = "hi") -> str:
    return text_of(handle.call_tool("echo", {"text": text}))


def b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def decode_proof(proof: str) -> tuple[dict, dict]:
    head, body, _ = proof.split(".")
    return json.loads(b64decode(head)), json.loads(b64decode(body))


def thumbprint(record: OAuthRecord) -> str:
    assert record.dpop_key
    return dpop.prover(record.dpop_key).thumbprint


# -- 1. proofs and the key (no network) ----------------------------------------------------------


def test_a_proof_is_an_es256_dpop_jwt_with_the_public_key_only_and_verifies():
    import jwt
    from jwt.algorithms import ECAlgorithm

    prover = dpop.prover(dpop.new_key())
    proof = prover.proof("POST", "https://mcp.example.com:8443/v1/mcp?tenant=a#frag", access_token="tok-123")
    header, claims = decode_proof(proof)
    assert header["typ"] == "dpop+jwt" and header["alg"] == "ES256"
    assert set(header["jwk"]) == {"kty", "crv", "x", "y"}  # never "d": the private key stays here
    assert claims["htm"] == "POST"
    assert claims["htu"] == "https://mcp.example.com:8443/v1/mcp"  # RFC 9449 4.2: no query, no fragment
    assert claims["ath"] == base64.urlsafe_b64encode(hashlib.sha256(b"tok-123").digest()).rstrip(b"=").decode()
    assert "nonce" not in claims and isinstance(claims["iat"], int) and len(b64decode(claims["jti"])) == 16
    verified = jwt.decode(proof, ECAlgorithm.from_jwk(json.dumps(header["jwk"])), algorithms=["ES256"])
    assert verified == claims
    # RFC 7638: the thumbprint a bound token's cnf.jkt names
    members = json.dumps({k: header["jwk"][k] for k in ("crv", "kty", "x", "y")}, separators=(",", ":"), sort_keys=True)
    assert prover.thumbprint == base64.urlsafe_b64encode(hashlib.sha256(members.encode()).digest()).rstrip(b"=").decode()


def test_every_proof_has_its_own_jti_and_no_ath_without_a_token():
    prover = dpop.prover(dpop.new_key())
    proofs = [prover.proof("POST", "http://127.0.0.1:1/token") for _ in range(200)]
    claims = [decode_proof(p)[1] for p in proofs]
    assert len({c["jti"] for c in claims}) == 200
    assert all("ath" not in c for c in claims)


def test_the_key_never_shows_in_a_repr_or_the_settings_view():
    key = dpop.new_key()
    secret = json.loads(key)["d"]
    record = OAuthRecord(url="http://x/mcp", state="signed_in", access_token="t", token_type="DPoP", dpop_key=key)
    assert secret not in repr(record) and secret not in json.dumps(record.view())
    assert secret not in repr(dpop.prover(key))
    assert OAuthRecord.from_json(record.to_json()) == record  # it is kept with the record


@pytest.mark.parametrize("damaged", ["", "{", '{"kty":"EC","crv":"P-256"}', '{"kty":"RSA","n":"x","e":"AQAB","d":"x"}',
                                     json.dumps({"kty": "EC", "crv": "P-256", "x": "AAAA", "y": "AAAA", "d": "AQ"})])
def test_a_damaged_key_is_refused_in_one_error(damaged):
    with pytest.raises(dpop.DpopKeyError):
        dpop.prover(damaged)


@pytest.mark.parametrize("hostile", ["x" * (dpop.MAX_NONCE + 1), "a b", 'a"b', "a\\b", "a\x01b", "a\r\nX-Injected: 1", "",
                                     "caf\u00e9", None, 42])
def test_a_hostile_nonce_is_not_kept(hostile):
    cache = dpop.NonceCache()
    assert cache.put("https://as.example/token", hostile) is False
    assert cache.get(dpop.origin("https://as.example/token")) is None


def test_the_nonce_cache_is_per_origin_bounded_and_thread_safe():
    cache = dpop.NonceCache(max_origins=8)
    assert cache.put("https://as.example/token", "n-1")
    assert cache.get(dpop.origin("https://AS.example:443/other")) == "n-1"  # same origin
    assert cache.get(dpop.origin("http://as.example/token")) is None  # another scheme, another origin
    assert cache.get(dpop.origin("https://as.example:8443/token")) is None  # another port

    def fill(n: int) -> None:
        for i in range(200):
            assert cache.put(f"https://h{n}-{i}.example/", f"v{i}")

    threads = [threading.Thread(target=fill, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(cache) == 8


def test_a_proof_carries_the_origins_nonce():
    prover = dpop.prover(dpop.new_key())
    url = "http://127.0.0.1:9/mcp-nonce-test"
    dpop.NONCES.put(url, "server-nonce-1")
    try:
        assert decode_proof(prover.proof("GET", url))[1]["nonce"] == "server-nonce-1"
        assert "nonce" not in decode_proof(prover.proof("GET", "http://127.0.0.1:10/mcp"))[1]
    finally:
        dpop.NONCES.forget(url)


def test_the_dpop_setting_is_a_boolean(tmp_path):
    entry = {"mcp": {"servers": {"s": {"type": "http", "url": "https://x.example/mcp", "oauth": {"dpop": True}}}}}
    assert parse(entry, str(tmp_path)).servers[0].oauth.dpop is True
    entry["mcp"]["servers"]["s"]["oauth"]["dpop"] = "yes"
    with pytest.raises(ConfigError, match='"dpop" must be true or false'):
        parse(entry, str(tmp_path))


# -- 2. against a DPoP server ----------------------------------------------------------------------


def test_sign_in_gets_a_dpop_bound_token_and_every_request_carries_a_fresh_proof(kit, oauth_server):
    server = oauth_server("--dpop")
    config = config_for(server.url)
    record = kit.sign_in(config)
    assert record.token_type == "DPoP" and record.dpop_key
    before = server.stats()  # the sign-in's unauthenticated probe is one 401
    handle = kit.handle(config)
    catalogue = handle.connect()
    assert catalogue.era == "modern"
    assert echo(handle, "bound") == "bound"
    stats = server.stats()
    stats["mcp_requests_unauthorized"] -= before["mcp_requests_unauthorized"]
    assert stats["token_jkts"] == [thumbprint(record)]  # the token is bound to the stored key
    assert stats["mcp_jkts"] == [thumbprint(record)]
    assert stats["mcp_requests_dpop"] >= 3 and stats["mcp_requests_unauthorized"] == 0
    assert stats["bearer_with_bound_token"] == 0
    assert stats["dpop_proofs_refused"] == 0 and stats["dpop_replays"] == 0  # no proof was ever reused


def test_the_legacy_era_sends_proofs_for_post_get_and_delete(kit, oauth_server, monkeypatch):
    # As in test_oauth_flow: every server/discover answer is taken as an older server's.
    monkeypatch.setattr(mcp, "judge_discover_result", lambda result: mcp.Verdict.HANDSHAKE)
    server = oauth_server("--dpop")
    config = config_for(server.url)
    kit.sign_in(config)
    handle = kit.handle(config)
    assert handle.connect().era == "legacy"
    assert echo(handle, "legacy") == "legacy"
    handle.stop()  # ends the session: a DELETE with its own proof
    stats = server.stats()
    assert stats["dpop_methods"].get("POST", 0) >= 4 and stats["dpop_methods"].get("DELETE") == 1
    assert stats["dpop_methods"].get("GET", 0) >= 1  # the listening stream
    assert stats["bearer_with_bound_token"] == 0 and stats["dpop_replays"] == 0 and stats["dpop_proofs_refused"] == 0


def test_a_refresh_keeps_the_key_and_a_restart_from_the_store_uses_it(kit, oauth_server, caplog):
    caplog.set_level(logging.DEBUG)
    server = oauth_server("--dpop")
    config = config_for(server.url)
    before = kit.sign_in(config)
    handle = kit.handle(config)
    handle.connect()
    server.expire()
    assert echo(handle, "after expiry") == "after expiry"
    after = kit.stored()
    assert after.access_token != before.access_token and after.token_type == "DPoP"
    assert after.dpop_key == before.dpop_key  # the same key: the thumbprint is the same
    handle.stop()
    again = kit.handle(config)  # a new link and ServerAuth, from the store only
    again.connect()
    assert echo(again, "restarted") == "restarted"
    stats = server.stats()
    assert stats["token_requests"]["refresh_token"] == 1 and stats["dpop_token_requests"] == 2
    assert stats["token_jkts"] == [thumbprint(before)] * 2 and stats["mcp_jkts"] == [thumbprint(before)]
    assert stats["bearer_with_bound_token"] == 0
    logged = "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert json.loads(before.dpop_key)["d"] not in logged  # the private key is never logged
    assert before.access_token not in logged and after.access_token not in logged


def test_the_authorization_servers_nonce_is_answered_once(kit, oauth_server):
    server = oauth_server("--dpop", "--dpop-nonce-as")
    config = config_for(server.url)
    assert kit.sign_in(config).token_type == "DPoP"
    stats = server.stats()
    assert stats["dpop_nonce_challenges_as"] == 1 and stats["token_requests"]["authorization_code"] == 2
    assert stats["dpop_replays"] == 0  # the retry carried a new proof


def test_the_resource_servers_nonce_is_answered_once_and_kept_for_the_next_requests(kit, oauth_server):
    server = oauth_server("--dpop", "--dpop-nonce-rs")
    config = config_for(server.url)
    kit.sign_in(config)
    handle = kit.handle(config)
    handle.connect()
    assert echo(handle) == "hi" and echo(handle, "again") == "again"
    stats = server.stats()
    assert stats["dpop_nonce_challenges_rs"] == 1  # later requests carry the kept nonce
    assert stats["mcp_requests_dpop"] >= 4 and stats["dpop_replays"] == 0 and stats["bearer_with_bound_token"] == 0


@pytest.mark.parametrize("flag, refused, said, challenges, tokens", [
    # the token endpoint: the code is sent once more with the new nonce, then one error
    ("--dpop-nonce-as", AuthError, [NAME], {"dpop_nonce_challenges_as": 2}, {"authorization_code": 2}),
    # the MCP server: the opening's two requests (server/discover, refused, then initialize),
    # each with its one retry; no refresh, no sign-in
    ("--dpop-nonce-rs", HttpRefused, ["asks once"], {"dpop_nonce_challenges_rs": 4}, {"refresh_token": 0}),
], ids=["token_endpoint", "mcp_server"])
def test_a_server_whose_nonce_loops_gets_one_retry_then_one_error(kit, oauth_server, flag, refused, said, challenges,
                                                                  tokens):
    server = oauth_server("--dpop", flag, "--dpop-nonce-loop")
    config = config_for(server.url)
    if flag == "--dpop-nonce-rs":  # signed in first: only the connection is refused
        kit.sign_in(config)
        step = kit.handle(config).connect
    else:
        step = functools.partial(kit.sign_in, config)
    with pytest.raises(refused) as caught:
        step()
    message = str(caught.value)
    assert "\n" not in message and "use_dpop_nonce" in message and all(text in message for text in said)
    stats = server.stats()
    assert {name: stats[name] for name in challenges} == challenges
    assert {grant: stats["token_requests"][grant] for grant in tokens} == tokens
    assert stats["dpop_replays"] == 0


@pytest.mark.parametrize("nonce", ["n" * 4000, 'a"b', "a b"])
def test_a_hostile_resource_server_nonce_is_refused_in_one_line(kit, oauth_server, nonce):
    server = oauth_server("--dpop", "--dpop-nonce-rs", "--dpop-nonce-value", nonce)
    config = config_for(server.url)
    kit.sign_in(config)
    handle = kit.handle(config)
    with pytest.raises(HttpRefused) as caught:
        handle.connect()
    message = str(caught.value)
    assert "\n" not in message and "without giving a usable one" in message and nonce not in message
    assert server.stats()["dpop_nonce_challenges_rs"] == 2  # server/discover, then initialize: no retry
    assert dpop.NONCES.get(dpop.origin(server.url)) is None


def test_the_server_refuses_a_replayed_proof(kit, oauth_server):
    server = oauth_server("--dpop")
    config = config_for(server.url)
    record = kit.sign_in(config)
    prover = dpop.prover(record.dpop_key)
    proof = prover.proof("POST", server.url, record.access_token)
    headers = {"Authorization": f"DPoP {record.access_token}", "DPoP": proof, "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    first = requests.post(server.url, json=body, headers=headers, timeout=10)
    replayed = requests.post(server.url, json=body, headers=headers, timeout=10)
    assert first.status_code != 401
    assert replayed.status_code == 401 and 'error="invalid_dpop_proof"' in replayed.headers["WWW-Authenticate"]
    assert server.stats()["dpop_replays"] == 1


def test_a_bound_token_without_its_key_is_never_sent_as_bearer(kit, oauth_server, caplog):
    caplog.set_level(logging.DEBUG)
    server = oauth_server("--dpop")
    config = config_for(server.url)
    record = kit.sign_in(config)
    kit.edit(dpop_key=None)  # lost (or, below, damaged)
    handle = kit.handle(config)
    with pytest.raises(NeedsSignIn) as caught:
        handle.connect()
    assert "\n" not in str(caught.value) and "DPoP key" in str(caught.value)
    stats = server.stats()
    assert stats["bearer_with_bound_token"] == 0 and stats["mcp_requests_with_token"] == 0
    assert kit.stored().state == "needs_sign_in" and kit.stored().access_token is None
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert record.access_token not in logged and json.loads(record.dpop_key)["d"] not in logged


def test_a_damaged_key_makes_a_refresh_need_a_sign_in_not_a_bearer_request(kit, oauth_server):
    server = oauth_server("--dpop")
    config = config_for(server.url)
    kit.sign_in(config)
    kit.edit(dpop_key='{"kty":"EC","crv":"P-256","x":"A","y":"A","d":"A"}')
    server.expire()
    handle = kit.handle(config)
    with pytest.raises(AlbedoError):
        handle.connect()
    stats = server.stats()
    assert stats["bearer_with_bound_token"] == 0 and stats["token_requests"]["refresh_token"] == 0
    assert kit.stored().state == "needs_sign_in"


def test_an_interactive_sign_in_after_a_lost_key_makes_a_new_key_and_goes_on(kit, oauth_server):
    server = oauth_server("--dpop")
    config = config_for(server.url)
    kit.sign_in(config)
    kit.edit(dpop_key="not a key")
    handle = kit.handle(config, authorize=kit.authorizer())
    handle.connect()
    assert echo(handle) == "hi"
    stats = server.stats()
    assert stats["token_requests"]["authorization_code"] == 2 and stats["bearer_with_bound_token"] == 0
    assert stats["token_jkts"][-1] == thumbprint(kit.stored()) != stats["token_jkts"][0]


def test_a_bearer_answer_to_a_dpop_request_is_used_as_bearer(kit, oauth_server):
    # RFC 9449 5: the authorization server may issue a Bearer token; it is used as one.
    server = oauth_server("--dpop", "--dpop-bearer")
    config = config_for(server.url)
    record = kit.sign_in(config)
    assert record.token_type == "Bearer"
    handle = kit.handle(config)
    handle.connect()
    assert echo(handle) == "hi"
    stats = server.stats()
    assert stats["dpop_token_requests"] == 1 and stats["mcp_requests_dpop"] == 0 and stats["mcp_requests_authorized"] >= 2


def test_dpop_false_sends_no_proof_even_to_a_server_that_lists_it(kit, oauth_server):
    server = oauth_server("--dpop")
    config = config_for(server.url, OAuthSettings(dpop=False))
    record = kit.sign_in(config)
    assert record.token_type == "Bearer" and record.dpop_key is None
    handle = kit.handle(config)
    handle.connect()
    assert echo(handle) == "hi"
    stats = server.stats()
    assert stats["dpop_token_requests"] == 0 and stats["token_jkts"] == [] and stats["mcp_requests_dpop"] == 0


def test_without_es256_listed_dpop_is_not_used_and_with_dpop_true_the_sign_in_stops(kit, oauth_server):
    server = oauth_server("--dpop", "--dpop-algs", "RS256 PS256")
    assert kit.sign_in(config_for(server.url)).token_type == "Bearer"
    before = server.stats()
    assert before["dpop_token_requests"] == 0
    with pytest.raises(AuthError) as caught:
        kit.sign_in(config_for(server.url, OAuthSettings(dpop=True)))
    assert "\n" not in str(caught.value) and "ES256" in str(caught.value) and '"dpop": false' in str(caught.value)
    assert server.stats()["authorize_requests"] == before["authorize_requests"]  # stopped before the browser


def test_dpop_true_uses_dpop_with_a_server_that_lists_no_algorithms(kit, oauth_server):
    server = oauth_server("--dpop", "--dpop-algs", "")
    record = kit.sign_in(config_for(server.url, OAuthSettings(dpop=True)))
    assert record.token_type == "DPoP" and server.stats()["token_jkts"] == [thumbprint(record)]


def test_client_credentials_tokens_are_bound_and_refreshed_with_the_same_key(kit, oauth_server):
    server = oauth_server("--dpop", "--client-credentials", "svc:s3cret")
    config = config_for(server.url, OAuthSettings(grant="client_credentials", client_id="svc", client_secret_env_var="SVC"))
    environ = {"SVC": "s3cret"}
    handle = kit.handle(config, environ, authorize=kit.authorizer(environ))
    handle.connect()
    server.expire()
    assert echo(handle, "machine") == "machine"
    stats = server.stats()
    assert stats["token_requests"]["client_credentials"] == 2 and len(stats["token_jkts"]) == 2
    assert len(set(stats["token_jkts"])) == 1 and stats["bearer_with_bound_token"] == 0


@pytest.mark.parametrize("sent, kept", [("DPoP", "DPoP"), ("dpop", "DPoP"), ("Bearer", "Bearer"), ("bearer", "Bearer")])
def test_a_token_response_says_whether_the_token_is_dpop_bound(sent, kept):
    from albedo_actors.auth.tokens import parse_token_response

    body = json.dumps({"access_token": "a", "token_type": sent, "expires_in": 60}).encode()
    assert parse_token_response(body, 200, 0.0).token_type == kept


def test_a_dpop_challenge_is_read_like_a_bearer_one():
    from albedo_actors.auth.discovery import bearer_challenge, dpop_challenge

    first = bearer_challenge({"www-authenticate": 'DPoP resource_metadata="https://rs.example/.well-known/x"'})
    assert first is not None and first.scheme == "dpop" and first.resource_metadata == "https://rs.example/.well-known/x"
    both = 'Bearer realm="a", DPoP error="use_dpop_nonce", algs="ES256"'
    assert bearer_challenge(both).scheme == "bearer"  # the first of either scheme
    assert dpop_challenge(both).error == "use_dpop_nonce"
    assert dpop_challenge('Bearer error="invalid_token"') is None


def test_a_refresh_writes_the_token_type_and_key_with_the_tokens():
    from albedo_actors.auth.refresh import _carry_tokens

    key = dpop.new_key()
    stored = OAuthRecord(url="http://x/mcp", state="signed_in", access_token="old", token_type="Bearer", scope="s")
    fresh = stored.replace(access_token="new", token_type="DPoP", dpop_key=key)
    carried = _carry_tokens(stored, fresh)
    assert (carried.access_token, carried.token_type, carried.dpop_key) == ("new", "DPoP", key)


def test_a_dpop_token_type_to_a_request_without_a_proof_is_refused_in_one_line(kit, oauth_server):
    server = oauth_server("--dpop", "--dpop-mislabel")
    with pytest.raises(AuthError) as caught:
        kit.sign_in(config_for(server.url, OAuthSettings(dpop=False)))
    assert "\n" not in str(caught.value) and "without a DPoP proof" in str(caught.value)
    assert from_credentials(kit.store.get_credentials(NAME)) is None  # nothing stored


def test_a_hostile_authorization_server_nonce_is_refused_in_one_line(kit, oauth_server):
    server = oauth_server("--dpop", "--dpop-nonce-as", "--dpop-nonce-value", "x" * 3000)
    with pytest.raises(AuthError) as caught:
        kit.sign_in(config_for(server.url))
    message = str(caught.value)
    assert "\n" not in message and "without giving a usable one" in message and "x" * 100 not in message
    assert server.stats()["token_requests"]["authorization_code"] == 1  # no retry with a nonce it cannot use


def test_a_sign_out_forgets_the_key_and_the_next_sign_in_binds_a_new_one(kit, oauth_server):
    from albedo_actors.settings import signed_out  # what `albedo-mcp sign-out` writes

    server = oauth_server("--dpop")
    config = config_for(server.url)
    first = kit.sign_in(config)
    assert first.dpop_key
    kit.store.update_credentials(NAME, lambda c: signed_out(config, c))
    assert kit.stored().dpop_key is None and kit.stored().access_token is None
    second = kit.sign_in(config)
    assert second.dpop_key and thumbprint(second) != thumbprint(first)
    assert server.stats()["token_jkts"] == [thumbprint(first), thumbprint(second)]
