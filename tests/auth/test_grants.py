"""Grants with no browser, end to end: workload identity (RFC 7523 jwt-bearer) and
enterprise-managed authorization (SEP-990: RFC 8693 token exchange, then jwt-bearer).

Real peers only: ``tests/servers/oauth_server.py`` (the MCP server and its authorization
server, with ``--jwt-bearer-issuer`` / ``--id-jag-issuer``) and
``tests/servers/idp_server.py`` (the company's identity provider), each in its own
process on 127.0.0.1; the client's real paths (:class:`SignIn`, :class:`ServerHandle`
with :class:`ServerAuth`, a :class:`TokenRefresher`).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import time
import uuid

import pytest

from albedo_actors.actors.client import ServerHandle
from albedo_actors.auth.record import OAuthRecord, from_credentials
from albedo_actors.auth.server_auth import sign_in_needed
from albedo_actors.auth.signin import SignIn
from albedo_actors.config import McpConfig, OAuthSettings, ServerConfig
from albedo_actors.runtime import Runtime
from albedo_actors.errors import AlbedoError, ConfigError, NeedsSignIn
from albedo_actors.store import open_store
from albedo_actors.store.records import Credentials

from helpers import HERE, _ServerProcess, text_of
from kit import Kit

NAME = "workload"
WORKLOAD_ISSUER = "https://workload-issuer.example"
IDP_SERVER = os.path.join(HERE, "servers", "idp_server.py")
MCP_CLIENT, MCP_SECRET = "mcp-client", "mcp-s3cret-value"
IDP_CLIENT, IDP_SECRET = "albedo-at-idp", "idp-s3cret-value"


# -- peers, keys and tokens ----------------------------------------------------------------------


class IdpServer(_ServerProcess):
    """``tests/servers/idp_server.py`` with ``flags``; ``start()`` returns its issuer URL."""

    WHAT = "the identity provider"

    def __init__(self, *flags: str) -> None:
        super().__init__()
        self.flags = flags

    def command(self) -> list[str]:
        return [sys.executable, IDP_SERVER, "--port", "0", *self.flags]

    def stats(self) -> dict:
        import requests

        return requests.get(self.url + "/stats", timeout=10).json()


@pytest.fixture
def idp_server(server_processes):
    """``idp_server(*flags)`` starts an IdpServer; all are stopped afterwards (tests/conftest.py)."""
    return functools.partial(server_processes, IdpServer)


def _key_pair(directory, name: str) -> tuple[bytes, str, str]:
    """An ES256 key: (private PEM, path of the private PEM, path of the public PEM)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    private_path, public_path = directory / f"{name}.pem", directory / f"{name}.pub.pem"
    private_path.write_bytes(private)
    public_path.write_bytes(public)
    return private, str(private_path), str(public_path)


def _jwt(key: bytes, claims: dict, **header) -> str:
    import jwt

    return jwt.encode(claims, key, algorithm="ES256", headers=header or None)


class Workload:
    """The workload's identity: an issuer key the authorization server trusts, and its JWTs."""

    def __init__(self, directory) -> None:
        self.key, _, self.public = _key_pair(directory, "workload")

    def flags(self) -> tuple[str, str]:
        return ("--jwt-bearer-issuer", f"{WORKLOAD_ISSUER}={self.public}")

    def assertion(self, audience: str, lifetime: int = 600) -> tuple[str, str]:
        jti = uuid.uuid4().hex
        now = int(time.time())
        token = _jwt(self.key, {"iss": WORKLOAD_ISSUER, "sub": "system:serviceaccount:ns:agent", "aud": audience,
                                "iat": now - 5, "exp": now + lifetime, "jti": jti})
        return token, jti


@pytest.fixture
def kit(tmp_path, oauth_server, idp_server):
    kit = Kit(str(tmp_path), NAME, agent=False, on_demand=True)  # no browser: these grants need none
    yield kit
    kit.close()


def http_config(url: str, oauth: OAuthSettings) -> ServerConfig:
    return ServerConfig(name=NAME, type="http", url=url, oauth=oauth, startup_timeout_ms=15000, call_timeout_ms=15000)


def echo(handle: ServerHandle, text: str) -> str:
    return text_of(handle.call_tool("echo", {"text": text}))


def _one_line(error: BaseException) -> str:
    message = str(error)
    assert "\n" not in message and f"'{NAME}'" in message and "Traceback" not in message
    return message


# -- workload identity (jwt-bearer) ----------------------------------------------------------------


@pytest.fixture
def workload(tmp_path):
    return Workload(tmp_path)


def test_jwt_bearer_signs_in_with_the_workload_file_and_calls_work(tmp_path, kit, oauth_server, workload):
    server = oauth_server(*workload.flags())
    assertion, jti = workload.assertion(server.base)
    path = tmp_path / "token"
    path.write_text(assertion + "\n")  # as a projected service-account token is written
    config = http_config(server.url, OAuthSettings(grant="jwt-bearer", assertion_file=str(path)))
    handle = kit.handle(config, {})
    handle.connect()
    assert echo(handle, "workload") == "workload"
    stats = server.stats()
    assert stats["jwt_bearer_accepted"] == 1 and stats["jwt_bearer_jtis"] == [jti]
    assert stats["authorize_requests"] == 0 and stats["registrations"] == 0
    assert sum(stats["token_requests"].values()) == 0  # no other grant was tried
    record = kit.record()
    assert record.state == "signed_in" and record.client_kind == "jwt-bearer"
    assert record.access_token and record.refresh_token is None


def test_an_expired_token_is_granted_again_with_the_rotated_file(tmp_path, kit, oauth_server, workload):
    server = oauth_server(*workload.flags())
    first, first_jti = workload.assertion(server.base)
    path = tmp_path / "token"
    path.write_text(first)
    handle = kit.handle(http_config(server.url, OAuthSettings(grant="jwt-bearer", assertion_file=str(path))), {})
    handle.connect()
    assert echo(handle, "one") == "one"
    old = kit.record().access_token
    second, second_jti = workload.assertion(server.base)
    path.write_text(second)  # the kubelet rotated the token
    server.expire()
    assert echo(handle, "two") == "two"
    stats = server.stats()
    assert stats["jwt_bearer_jtis"] == [first_jti, second_jti]  # the file was read again
    assert stats["jwt_bearer_accepted"] == 2 and stats["jwt_bearer_refused"] == {}
    assert kit.record().access_token not in (None, old)


def test_a_rotated_assertion_that_has_expired_is_not_sent_at_the_re_grant(tmp_path, kit, oauth_server, workload):
    server = oauth_server(*workload.flags())
    path = tmp_path / "token"
    path.write_text(workload.assertion(server.base)[0])
    handle = kit.handle(http_config(server.url, OAuthSettings(grant="jwt-bearer", assertion_file=str(path))), {})
    handle.connect()
    path.write_text(workload.assertion(server.base, lifetime=-5)[0])  # the workload's token ran out
    server.expire()
    with pytest.raises(NeedsSignIn) as caught:
        echo(handle, "late")
    assert "expired at" in _one_line(caught.value)
    assert server.stats()["jwt_bearer_requests"] == 1  # the first grant only: nothing was sent at the re-grant


def test_an_assertion_for_another_audience_is_one_line_and_one_request(tmp_path, kit, oauth_server, workload):
    server = oauth_server(*workload.flags())
    assertion, _ = workload.assertion("https://wrong.example")
    environ = {"WORKLOAD_JWT": assertion}
    handle = kit.handle(http_config(server.url, OAuthSettings(grant="jwt-bearer", assertion_env_var="WORKLOAD_JWT")),
                        environ)
    with pytest.raises(NeedsSignIn) as caught:
        handle.connect()
    message = _one_line(caught.value)
    assert "invalid_grant" in message and "$WORKLOAD_JWT" in message and "nothing is retried" in message
    assert assertion not in message
    # A workload has no user: the remedy is its configuration, not `albedo-mcp sign-in`.
    assert "could not sign in by itself" in message and 'check its "oauth" settings' in message
    assert "albedo-mcp sign-in" not in message and "needs the user" not in message
    stats = server.stats()
    assert stats["jwt_bearer_requests"] == 1 and stats["jwt_bearer_refused"] == {"invalid_grant": 1}
    assert sum(stats["token_requests"].values()) == 0 and stats["registrations"] == 0  # no fallback to another grant


def test_an_expired_assertion_is_refused_before_any_request(tmp_path, kit, oauth_server, workload):
    server = oauth_server(*workload.flags())
    assertion, _ = workload.assertion(server.base, lifetime=-60)
    path = tmp_path / "token"
    path.write_text(assertion)
    config = http_config(server.url, OAuthSettings(grant="jwt-bearer", assertion_file=str(path)))
    with pytest.raises(AlbedoError) as caught:
        kit.sign_in(config, {})
    message = _one_line(caught.value)
    assert "expired at" in message and str(path) in message and "nothing was sent" in message
    assert server.stats()["jwt_bearer_requests"] == 0


@pytest.mark.parametrize("case", ["missing", "directory", "too big", "not a jwt", "unset variable"])
def test_an_unusable_assertion_source_is_one_line_and_no_request(tmp_path, kit, oauth_server, workload, case):
    server = oauth_server(*workload.flags())
    path = tmp_path / "token"
    if case == "directory":
        path.mkdir()
    elif case == "too big":
        path.write_text("a" * (64 * 1024))
    elif case == "not a jwt":
        path.write_text("this-is-not-a-jwt")
    oauth = (OAuthSettings(grant="jwt-bearer", assertion_env_var="UNSET_WORKLOAD_JWT") if case == "unset variable"
             else OAuthSettings(grant="jwt-bearer", assertion_file=str(path)))
    with pytest.raises((ConfigError, AlbedoError)) as caught:
        kit.sign_in(http_config(server.url, oauth), {})
    message = str(caught.value)
    assert "\n" not in message and NAME in message
    assert ("$UNSET_WORKLOAD_JWT" if case == "unset variable" else str(path)) in message
    assert server.stats()["jwt_bearer_requests"] == 0


def test_a_jwt_bearer_server_never_waits_for_a_user():
    config = http_config("https://mcp.example.com/mcp", OAuthSettings(grant="jwt-bearer", assertion_env_var="X"))
    stale = OAuthRecord(url=config.url, state="needs_sign_in", reason="the refresh was refused")
    assert sign_in_needed(config, Credentials(oauth=stale.to_json())) is None
    enterprise = http_config(config.url, OAuthSettings(grant="enterprise", client_id="c", idp_issuer="https://i",
                                                       idp_client_id="a"))
    assert sign_in_needed(enterprise, Credentials(oauth=stale.to_json())) is None


# -- enterprise-managed authorization (SEP-990) -------------------------------------------------------


class Enterprise:
    """An identity provider and an MCP server whose authorization server trusts its ID-JAGs."""

    def __init__(self, tmp_path, oauth_server, idp_server, *idp_flags: str) -> None:
        self.key, private_path, public_path = _key_pair(tmp_path, "idp")
        self.idp = idp_server("--key", private_path, "--client", f"{IDP_CLIENT}:{IDP_SECRET}",
                              "--jag-client-id", MCP_CLIENT, *idp_flags)
        self.server = oauth_server("--id-jag-issuer", f"{self.idp.url}={public_path}",
                                   "--client-credentials", f"{MCP_CLIENT}:{MCP_SECRET}")
        self.id_token = self.user_id_token()
        self.environ = {"MCP_SECRET": MCP_SECRET, "IDP_SECRET": IDP_SECRET, "USER_ID_TOKEN": self.id_token}

    def user_id_token(self, key: bytes | None = None, audience: str = IDP_CLIENT) -> str:
        now = int(time.time())
        return _jwt(key or self.key, {"iss": self.idp.url, "sub": "alice", "email": "alice@example.com", "aud": audience,
                                      "iat": now, "exp": now + 600})

    def config(self, *, id_token_env_var: str | None = "USER_ID_TOKEN", **changes) -> ServerConfig:
        oauth = OAuthSettings(**{"grant": "enterprise", "client_id": MCP_CLIENT, "client_secret_env_var": "MCP_SECRET",
                                 "idp_issuer": self.idp.url, "idp_client_id": IDP_CLIENT,
                                 "idp_client_secret_env_var": "IDP_SECRET", "id_token_env_var": id_token_env_var,
                                 **changes})
        return http_config(self.server.url, oauth)


def test_enterprise_exchanges_the_id_token_for_an_id_jag_and_calls_work(tmp_path, kit, oauth_server, idp_server):
    company = Enterprise(tmp_path, oauth_server, idp_server)
    handle = kit.handle(company.config(), company.environ)
    handle.connect()
    assert echo(handle, "enterprise") == "enterprise"
    idp = company.idp.stats()
    assert idp["exchanges_issued"] == 1 and idp["refused"] == {} and idp["last_client"] == IDP_CLIENT
    assert idp["last_audience"] == company.server.base  # the MCP server's authorization server (its issuer)
    assert idp["last_resource"] == company.server.url
    stats = company.server.stats()
    assert stats["id_jag_requests"] == 1 and stats["jwt_bearer_accepted"] == 1
    assert stats["jwt_bearer_subjects"] == ["alice"]
    record = kit.record()
    assert record.state == "signed_in" and record.client_kind == "enterprise" and record.client_id == MCP_CLIENT
    assert record.auth_method == "client_secret_basic"


def test_the_hosts_id_token_provider_is_asked_for_each_grant(tmp_path, kit, oauth_server, idp_server):
    company = Enterprise(tmp_path, oauth_server, idp_server)
    asked: list[str] = []

    def provider(server: ServerConfig) -> str:
        asked.append(server.name)
        return company.user_id_token()

    environ = {k: v for k, v in company.environ.items() if k != "USER_ID_TOKEN"}
    handle = kit.handle(company.config(id_token_env_var=None), environ, id_token=provider)
    handle.connect()
    assert echo(handle, "one") == "one"
    assert asked == [NAME]
    company.server.expire()
    # The refresher cannot ask the host; the server needs a sign-in, which the host's
    # provider answers at once (no user is waited for).
    assert echo(handle, "two") == "two"
    assert asked == [NAME, NAME]
    assert company.idp.stats()["exchanges_issued"] == 2
    assert company.server.stats()["jwt_bearer_accepted"] == 2


def test_an_expired_enterprise_token_is_granted_again_from_the_variable(tmp_path, kit, oauth_server, idp_server):
    company = Enterprise(tmp_path, oauth_server, idp_server)
    handle = kit.handle(company.config(), company.environ)
    handle.connect()
    company.server.expire()
    assert echo(handle, "again") == "again"
    assert company.idp.stats()["exchanges_issued"] == 2
    stats = company.server.stats()
    assert stats["jwt_bearer_accepted"] == 2 and stats["token_requests"]["refresh_token"] == 0


@pytest.mark.parametrize("flag, value, what", [
    ("--jag-resource", "https://other.example/mcp", "another resource"),
    ("--jag-audience", "https://other.example", "another authorization server"),
    ("--jag-client-id", "someone-else", "another client"),
    ("--jag-typ", "JWT", "has the type"),
])
def test_an_id_jag_for_another_resource_is_never_sent(tmp_path, kit, oauth_server, idp_server, flag, value, what):
    company = Enterprise(tmp_path, oauth_server, idp_server, flag, value)
    handle = kit.handle(company.config(), company.environ)
    with pytest.raises(NeedsSignIn) as caught:
        handle.connect()
    message = _one_line(caught.value)
    assert what in message and "it was not sent" in message
    assert company.idp.stats()["exchanges_issued"] == 1  # one exchange: no loop
    assert company.server.stats()["jwt_bearer_requests"] == 0  # never presented


def test_a_wrong_idp_secret_is_one_line_and_reaches_no_authorization_server(tmp_path, kit, oauth_server, idp_server):
    company = Enterprise(tmp_path, oauth_server, idp_server)
    environ = {**company.environ, "IDP_SECRET": "not-the-idp-secret-77"}
    with pytest.raises(AlbedoError) as caught:
        kit.sign_in(company.config(), environ)
    message = _one_line(caught.value)
    assert "refused the token exchange" in message and "invalid_client" in message
    assert "not-the-idp-secret-77" not in message and IDP_SECRET not in message
    assert company.idp.stats()["refused"] == {"invalid_client": 1}
    assert company.server.stats()["jwt_bearer_requests"] == 0


@pytest.mark.parametrize("case", ["another key", "another audience"])
def test_an_id_token_the_idp_refuses_is_one_line(tmp_path, kit, oauth_server, idp_server, case):
    company = Enterprise(tmp_path, oauth_server, idp_server)
    stranger, _, _ = _key_pair(tmp_path, "stranger")
    token = company.user_id_token(key=stranger) if case == "another key" else company.user_id_token(audience="someone")
    handle = kit.handle(company.config(), {**company.environ, "USER_ID_TOKEN": token})
    with pytest.raises(NeedsSignIn) as caught:
        handle.connect()
    message = _one_line(caught.value)
    assert "refused the token exchange" in message and "invalid_grant" in message and token not in message
    assert company.idp.stats()["refused"] == {"invalid_grant": 1}  # once: no retry
    assert company.server.stats()["jwt_bearer_requests"] == 0


def test_an_expired_id_token_is_refused_before_any_request(tmp_path, kit, oauth_server, idp_server):
    company = Enterprise(tmp_path, oauth_server, idp_server)
    now = int(time.time())
    expired = _jwt(company.key, {"iss": company.idp.url, "sub": "alice", "aud": IDP_CLIENT, "exp": now - 30})
    with pytest.raises(AlbedoError) as caught:
        kit.sign_in(company.config(), {**company.environ, "USER_ID_TOKEN": expired})
    message = _one_line(caught.value)
    assert "id_token in $USER_ID_TOKEN expired at" in message
    assert company.idp.stats()["exchange_requests"] == 0


def test_a_failing_id_token_provider_is_one_line(tmp_path, kit, oauth_server, idp_server):
    company = Enterprise(tmp_path, oauth_server, idp_server)

    def provider(server: ServerConfig) -> str:
        raise RuntimeError("secret-bearing detail that must not be shown")

    with pytest.raises(AlbedoError) as caught:
        kit.sign_in(company.config(id_token_env_var=None), company.environ, id_token=provider)
    message = _one_line(caught.value)
    assert "id_token provider gave no id_token (RuntimeError)" in message and "secret-bearing" not in message
    assert company.idp.stats()["exchange_requests"] == 0


def test_an_unreachable_identity_provider_is_one_line(tmp_path, kit, oauth_server, idp_server):
    import socket

    company = Enterprise(tmp_path, oauth_server, idp_server)
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(AlbedoError) as caught:
        kit.sign_in(company.config(idp_issuer=closed), company.environ)
    assert f"the identity provider {closed} could not be asked" in _one_line(caught.value)
    assert company.server.stats()["jwt_bearer_requests"] == 0


def test_the_idp_token_endpoint_is_found_by_discovery_or_configured(tmp_path, kit, oauth_server, idp_server):
    company = Enterprise(tmp_path, oauth_server, idp_server, "--no-discovery")
    with pytest.raises(AlbedoError) as caught:
        kit.sign_in(company.config(), company.environ)
    assert "publishes no metadata for its issuer" in _one_line(caught.value)
    record = kit.sign_in(company.config(idp_token_endpoint=company.idp.url + "/token"), company.environ)
    assert record.state == "signed_in"


# -- a host's runtime: no sign-in beforehand, no user ---------------------------------------------------


def test_a_runtime_signs_in_as_the_workload_and_through_the_idp_when_the_servers_ask(tmp_path, oauth_server, idp_server,
                                                                                    workload, monkeypatch):
    wl_server = oauth_server(*workload.flags())
    assertion, jti = workload.assertion(wl_server.base)
    path = tmp_path / "token"
    path.write_text(assertion)
    company = Enterprise(tmp_path, oauth_server, idp_server)
    for key in ("MCP_SECRET", "IDP_SECRET"):
        monkeypatch.setenv(key, company.environ[key])
    asked: list[str] = []

    def provider(server: ServerConfig) -> str:
        asked.append(server.name)
        return company.user_id_token()

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    servers = (ServerConfig(name="wl", type="http", url=wl_server.url, startup_timeout_ms=15000, call_timeout_ms=15000,
                            oauth=OAuthSettings(grant="jwt-bearer", assertion_file=str(path))),
               ServerConfig(name="corp", type="http", url=company.server.url, startup_timeout_ms=15000,
                            call_timeout_ms=15000, oauth=company.config(id_token_env_var=None).oauth))
    store = open_store(str(home))
    try:
        with Runtime(str(home), store, config=McpConfig(home=str(home), servers=servers), enabled=True,
                     id_token=provider) as runtime:
            assert runtime.composition().left_out == {}
            mcp = runtime.mcp()
            assert text_of(mcp.call("wl/echo", text="as the workload").as_dict()) == "as the workload"
            assert text_of(mcp.call("corp/echo", text="as alice").as_dict()) == "as alice"
    finally:
        store.close()
    assert wl_server.stats()["jwt_bearer_jtis"] == [jti]
    assert asked == ["corp"] and company.server.stats()["jwt_bearer_subjects"] == ["alice"]


# -- secrets stay out of logs, messages and the settings view -----------------------------------------


def test_no_assertion_id_token_id_jag_or_secret_reaches_a_log(tmp_path, kit, oauth_server, idp_server, workload, caplog,
                                                              capfd):
    caplog.set_level(logging.DEBUG)
    company = Enterprise(tmp_path, oauth_server, idp_server)
    handle = kit.handle(company.config(), company.environ)
    handle.connect()
    company.server.expire()
    assert echo(handle, "x") == "x"
    enterprise_token = kit.record().access_token
    wl_server = oauth_server(*workload.flags())
    assertion, _ = workload.assertion(wl_server.base)
    wrong, _ = workload.assertion("https://wrong.example")
    wl_config = ServerConfig(name="wl", type="http", url=wl_server.url, call_timeout_ms=15000, startup_timeout_ms=15000,
                             oauth=OAuthSettings(grant="jwt-bearer", assertion_env_var="WL"))
    SignIn(wl_config, kit.store, environ={"WL": assertion}, port=0, lifetime=10).run()
    with pytest.raises(AlbedoError) as caught:
        SignIn(wl_config, kit.store, environ={"WL": wrong}, port=0, lifetime=10).run()
    wl_token = from_credentials(kit.store.get_credentials("wl")).access_token
    out, err = capfd.readouterr()
    seen = "\n".join([caplog.text, out, err, str(caught.value), repr(kit.record()),
                      json.dumps(kit.record().view())])
    for secret in (company.id_token, MCP_SECRET, IDP_SECRET, assertion, wrong, enterprise_token, wl_token):
        assert secret and secret not in seen
    # an ID-JAG is a JWT: no JWT at all (three base64url parts beginning "eyJ") appears
    assert "eyJ" not in seen


# -- the grants with DPoP (issue 15: every token request of every grant carries a proof) ------------


def test_a_workload_token_is_dpop_bound_through_the_nonce_and_regranted_with_the_same_key(tmp_path, kit, oauth_server,
                                                                                       workload):
    server = oauth_server(*workload.flags(), "--dpop", "--dpop-nonce-as")
    path = tmp_path / "token"
    path.write_text(workload.assertion(server.base)[0])
    handle = kit.handle(http_config(server.url, OAuthSettings(grant="jwt-bearer", assertion_file=str(path))), {})
    handle.connect()
    assert echo(handle, "bound") == "bound"
    first = kit.record()
    assert first.token_type == "DPoP" and first.dpop_key
    path.write_text(workload.assertion(server.base)[0])  # rotated
    server.expire()
    assert echo(handle, "again") == "again"
    stats = server.stats()
    assert stats["jwt_bearer_accepted"] == 2 and stats["dpop_nonce_challenges_as"] >= 1
    assert len(stats["token_jkts"]) == 2 and len(set(stats["token_jkts"])) == 1  # the same key both times
    assert stats["bearer_with_bound_token"] == 0 and stats["mcp_requests_dpop"] >= 2
    assert kit.record().dpop_key == first.dpop_key


def test_a_nonce_retry_signs_a_new_client_assertion(tmp_path, kit, oauth_server):
    # The server takes a client assertion's jti once: the retry after use_dpop_nonce must
    # carry a new assertion, not the refused request's.
    private, _, public = _key_pair(tmp_path, "client")
    server = oauth_server("--jwt-client", f"jwt-ec:{public}", "--dpop", "--dpop-nonce-as")
    environ = {"SVC_KEY": private.decode()}
    config = http_config(server.url, OAuthSettings(grant="client_credentials", client_id="jwt-ec",
                                                   private_key_env_var="SVC_KEY", signing_algorithm="ES256"))
    handle = kit.handle(config, environ)
    handle.connect()
    assert echo(handle, "renewed") == "renewed"
    stats = server.stats()
    assert stats["dpop_nonce_challenges_as"] >= 1 and stats["token_requests"]["client_credentials"] == 2
    jtis = stats["client_assertion_jtis"]
    assert len(jtis) == 2 and None not in jtis and len(set(jtis)) == 2
    assert kit.record().token_type == "DPoP"


def test_a_machine_refresh_whose_secret_variable_is_gone_is_one_line(tmp_path, kit, oauth_server):
    # The client credentials grant runs again at expiry; its secret's variable unset then
    # is a refused refresh in one line (never a ConfigError out of the refresher).
    server = oauth_server("--client-credentials", "svc:s3cret")
    config = http_config(server.url, OAuthSettings(grant="client_credentials", client_id="svc", client_secret_env_var="SVC"))
    kit.sign_in(config, {"SVC": "s3cret"})
    handle = kit.handle(config, {})  # this host's environment lacks $SVC
    handle.connect()
    server.expire()
    with pytest.raises(NeedsSignIn) as caught:
        handle.call_tool("echo", {"text": "x"})
    message = _one_line(caught.value)
    assert "$SVC" in message and "s3cret" not in message
    assert "could not sign in by itself" in message
