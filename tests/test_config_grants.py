"""The ``oauth`` keys of the grants with no browser: jwt-bearer (workload identity) and
enterprise (SEP-990). Parsing only; the grants themselves are in tests/auth/test_grants.py."""

from __future__ import annotations

import os

import pytest

from albedo_actors.config import parse
from albedo_actors.errors import ConfigError


def _http(oauth):
    return {"mcp": {"servers": {"guarded": {"type": "http", "url": "https://mcp.example.com/mcp", "oauth": oauth}}}}


def test_a_jwt_bearer_grant_reads_its_assertion_from_a_file_under_home_or_a_variable(tmp_path):
    oauth = parse(_http({"grant": "jwt-bearer", "assertionFile": "tokens/workload.jwt"}), str(tmp_path)).server("guarded").oauth
    assert oauth.grant == "jwt-bearer" and oauth.client_id is None
    assert oauth.assertion_file == os.path.join(str(tmp_path), "tokens/workload.jwt")
    absolute = parse(_http({"grant": "jwt-bearer", "assertionFile": "/var/run/secrets/tokens/mcp"}),
                     str(tmp_path)).server("guarded").oauth
    assert absolute.assertion_file == "/var/run/secrets/tokens/mcp"
    named = parse(_http({"grant": "jwt-bearer", "assertionEnvVar": "WORKLOAD_JWT", "clientId": "wl",
                         "scope": "mcp"}), str(tmp_path)).server("guarded").oauth
    assert (named.assertion_env_var, named.assertion_file, named.client_id, named.scope) == ("WORKLOAD_JWT", None, "wl", "mcp")


def test_an_enterprise_grant_names_its_identity_provider_and_secrets_by_variable(tmp_path):
    oauth = parse(_http({"grant": "enterprise", "clientId": "mcp-client", "clientSecretEnvVar": "MCP_SECRET",
                         "idpIssuer": "https://idp.example.com", "idpClientId": "albedo",
                         "idpClientSecretEnvVar": "IDP_SECRET", "idTokenEnvVar": "ID_TOKEN",
                         "idpTokenEndpoint": "https://idp.example.com/oauth2/token"}), str(tmp_path)).server("guarded").oauth
    assert (oauth.grant, oauth.client_id, oauth.client_secret_env_var) == ("enterprise", "mcp-client", "MCP_SECRET")
    assert (oauth.idp_issuer, oauth.idp_client_id, oauth.idp_client_secret_env_var, oauth.id_token_env_var) == (
        "https://idp.example.com", "albedo", "IDP_SECRET", "ID_TOKEN")
    assert oauth.idp_token_endpoint == "https://idp.example.com/oauth2/token"
    loopback = parse(_http({"grant": "enterprise", "clientId": "c", "idpIssuer": "http://127.0.0.1:8080",
                            "idpClientId": "albedo"}), str(tmp_path)).server("guarded").oauth
    assert loopback.idp_issuer == "http://127.0.0.1:8080" and loopback.id_token_env_var is None


@pytest.mark.parametrize(
    "oauth, message",
    [
        ({"grant": "jwt-bearer"}, 'needs exactly one of "assertionFile" or "assertionEnvVar"'),
        ({"grant": "jwt-bearer", "assertionFile": "a", "assertionEnvVar": "B"}, "needs exactly one of"),
        ({"grant": "jwt-bearer", "assertionEnvVar": "not a variable"}, '"assertionEnvVar" must name an environment variable'),
        ({"grant": "jwt-bearer", "assertionFile": ""}, '"assertionFile" must be the path'),
        ({"grant": "jwt-bearer", "assertion": "eyJ..."}, "unknown key(s): assertion"),
        ({"assertionFile": "a"}, 'assertionFile only go with "grant": "jwt-bearer"'),
        ({"grant": "jwt-bearer", "assertionFile": "a", "idpIssuer": "https://idp.example.com"},
         'idpIssuer only go with "grant": "enterprise"'),
        ({"grant": "enterprise", "idpIssuer": "https://idp.example.com", "idpClientId": "a"}, 'needs a "clientId"'),
        ({"grant": "enterprise", "clientId": "c", "idpClientId": "a"}, 'needs "idpIssuer" and "idpClientId"'),
        ({"grant": "enterprise", "clientId": "c", "idpIssuer": "https://idp.example.com"}, 'needs "idpIssuer" and "idpClientId"'),
        ({"grant": "enterprise", "clientId": "c", "idpClientId": "a", "idpIssuer": "http://idp.example.com"},
         '"idpIssuer" must be an https URL'),
        ({"grant": "enterprise", "clientId": "c", "idpClientId": "a", "idpIssuer": "https://idp.example.com",
          "idpTokenEndpoint": "https://idp.example.com/token?x=1"}, '"idpTokenEndpoint" must be an https URL'),
        ({"grant": "enterprise", "clientId": "c", "idpClientId": "a", "idpIssuer": "https://idp.example.com",
          "idTokenEnvVar": "1BAD"}, '"idTokenEnvVar" must name an environment variable'),
        ({"grant": "enterprise", "clientId": "c", "idpClientId": "a", "idpIssuer": "https://idp.example.com",
          "idpClientSecret": "inline"}, "unknown key(s): idpClientSecret"),
        ({"grant": "enterprise", "clientId": "c", "idpClientId": "a", "idpIssuer": "https://idp.example.com",
          "idToken": "eyJ..."}, "unknown key(s): idToken"),
    ],
)
def test_bad_grant_keys_are_refused_naming_the_server(tmp_path, oauth, message):
    with pytest.raises(ConfigError) as caught:
        parse(_http(oauth), str(tmp_path))
    assert "guarded" in str(caught.value) and message in str(caught.value) and "\n" not in str(caught.value)
