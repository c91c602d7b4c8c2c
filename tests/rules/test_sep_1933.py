"""The client rules of SEP-1933 (tests/rules/rules.json; docs/rules.rst): workload identity
federation, the RFC 7523 jwt-bearer grant. Through a real :class:`ServerHandle` whose
:class:`ServerAuth` signs in by itself, against ``servers/oauth_server.py
--jwt-bearer-issuer``, which checks each assertion (a trusted issuer's ES256 signature, its
``aud``, ``exp``, ``sub``, ``jti``) and counts every jwt-bearer request and every other
grant, registration and authorization request (``/stats``).
"""

from __future__ import annotations

import time
import uuid

import pytest

from albedo_actors.config import OAuthSettings
from albedo_actors.errors import AlbedoError, NeedsSignIn

from helpers import text_of
from authrules import NAME, Kit, config_of

WORKLOAD_ISSUER = "https://workload-issuer.example"


class Workload:
    """An ES256 issuer key the authorization server trusts, and the workload's JWTs."""

    def __init__(self, directory) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        self.key = ec.generate_private_key(ec.SECP256R1())
        self.other = ec.generate_private_key(ec.SECP256R1())  # a key nobody trusts
        self.public = directory / "workload.pub.pem"
        self.public.write_bytes(self.key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))

    def flags(self) -> tuple[str, str]:
        return ("--jwt-bearer-issuer", f"{WORKLOAD_ISSUER}={self.public}")

    def assertion(self, audience: str, *, lifetime: int = 600, signer=None, drop: tuple = ()) -> tuple[str, str]:
        import jwt

        now, jti = int(time.time()), uuid.uuid4().hex
        claims = {"iss": WORKLOAD_ISSUER, "sub": "system:serviceaccount:ns:agent", "aud": audience,
                  "iat": now - 5, "exp": now + lifetime, "jti": jti}
        for name in drop:
            del claims[name]
        return jwt.encode(claims, signer or self.key, algorithm="ES256"), jti


@pytest.fixture
def workload(tmp_path):
    return Workload(tmp_path)


@pytest.fixture
def kit(tmp_path, oauth_server):
    # A browser is there (on_demand with an agent): falling back to a user's sign-in would be possible.
    kit = Kit(str(tmp_path), NAME, on_demand=True)
    yield kit
    kit.close()


def workload_config(url: str, variable: str = "WORKLOAD_JWT", name: str = NAME):
    return config_of(url, name=name, oauth=OAuthSettings(grant="jwt-bearer", assertion_env_var=variable))


def no_other_grant(stats: dict) -> None:
    """Nothing but jwt-bearer was tried: no other grant, registration or authorization request."""
    assert sum(stats["token_requests"].values()) == 0
    assert stats["registrations"] == 0 and stats["authorize_requests"] == 0


def refused(kit, server, assertion: str) -> str:
    """Connect with ``assertion``; the one-line error (the server refused it)."""
    handle = kit.handle(workload_config(server.url), {"WORKLOAD_JWT": assertion})
    with pytest.raises(NeedsSignIn) as caught:
        handle.connect()
    message = str(caught.value)
    assert "\n" not in message and f"'{NAME}'" in message and assertion not in message
    return message


@pytest.mark.rule("sep-1933-wif-grant-type", "sep-1933-wif-assertion-missing", "sep-1933-wif-assertion-verified")
def test_the_workload_signs_in_with_the_jwt_bearer_grant_and_its_assertion(kit, oauth_server, workload):
    """A server set to ``"grant": "jwt-bearer"`` gets one token request with ``grant_type``
    ``urn:ietf:params:oauth:grant-type:jwt-bearer`` and the workload's JWT as ``assertion``
    (a token request is never made without one), and the token it answers authorises the
    calls."""
    server = oauth_server(*workload.flags())
    assertion, jti = workload.assertion(server.base)
    handle = kit.handle(workload_config(server.url), {"WORKLOAD_JWT": assertion})
    handle.connect()
    assert text_of(handle.call_tool("echo", {"text": "workload"})) == "workload"
    stats = server.stats()
    assert stats["jwt_bearer_requests"] == 1 and stats["jwt_bearer_accepted"] == 1
    assert stats["jwt_bearer_jtis"] == [jti]  # the assertion sent is the workload's JWT
    no_other_grant(stats)

    unset = kit.handle(workload_config(server.url, "UNSET_WORKLOAD_JWT", name="unset"), {})  # no token kept
    with pytest.raises(AlbedoError) as caught:
        unset.connect()
    assert "$UNSET_WORKLOAD_JWT" in str(caught.value)
    assert server.stats()["jwt_bearer_requests"] == 1  # no request without an assertion


@pytest.mark.rule("sep-1933-wif-assertion-expired")
def test_an_expired_assertion_is_an_error_line_and_never_sent(kit, oauth_server, workload):
    """An assertion whose ``exp`` has passed is reported in one line naming its source and
    when it expired, and is never sent: the server gets no request."""
    server = oauth_server(*workload.flags())
    assertion, _ = workload.assertion(server.base, lifetime=-60)
    handle = kit.handle(workload_config(server.url), {"WORKLOAD_JWT": assertion})
    with pytest.raises(AlbedoError) as caught:
        handle.connect()
    message = str(caught.value)
    assert "\n" not in message and "expired at" in message and "$WORKLOAD_JWT" in message
    assert "nothing was sent" in message
    assert server.stats()["jwt_bearer_requests"] == 0


@pytest.mark.rule("sep-1933-wif-assertion-audience")
def test_an_audience_refusal_is_surfaced(kit, oauth_server, workload):
    """An assertion the authorization server refuses for its audience is one error line
    with the server's ``invalid_grant`` and its description, naming the assertion's source
    (never the assertion)."""
    server = oauth_server(*workload.flags())
    message = refused(kit, server, workload.assertion("https://another-server.example")[0])
    assert "invalid_grant" in message and "another audience" in message and "$WORKLOAD_JWT" in message
    assert server.stats()["jwt_bearer_refused"] == {"invalid_grant": 1}


@pytest.mark.rule("sep-1933-wif-assertion-malformed")
@pytest.mark.parametrize("case", ["signature", "no exp"])
def test_a_verification_failure_is_surfaced(kit, oauth_server, workload, case):
    """An assertion the authorization server cannot verify (signed by a key it does not
    trust, or missing a required claim) is one error line with the server's
    ``invalid_grant``."""
    server = oauth_server(*workload.flags())
    assertion = (workload.assertion(server.base, signer=workload.other)[0] if case == "signature"
                 else workload.assertion(server.base, drop=("exp",))[0])
    message = refused(kit, server, assertion)
    assert "invalid_grant" in message and "the authorization server refused" in message
    assert server.stats()["jwt_bearer_refused"] == {"invalid_grant": 1}


@pytest.mark.rule("sep-1933-wif-no-retry")
@pytest.mark.parametrize("flags, error", [((), "invalid_grant"), (("--challenge-scope", "mcp forbidden"), "invalid_scope")],
                         ids=["invalid_grant", "invalid_scope"])
def test_a_refused_assertion_is_not_sent_again(kit, oauth_server, workload, flags, error):
    """A jwt-bearer request the authorization server refuses (``invalid_grant``,
    ``invalid_scope`` ...) is not retried: one request, and the error line says nothing is
    retried."""
    server = oauth_server(*workload.flags(), *flags)
    audience = "https://another-server.example" if error == "invalid_grant" else server.base
    message = refused(kit, server, workload.assertion(audience)[0])
    assert error in message and "nothing is retried" in message
    stats = server.stats()
    assert stats["jwt_bearer_requests"] == 1 and stats["jwt_bearer_refused"] == {error: 1}


@pytest.mark.rule("sep-1933-wif-grant-fallback")
def test_unauthorized_client_is_not_followed_by_another_grant(kit, oauth_server, workload):
    """A jwt-bearer request answered ``unauthorized_client`` is the error: no other grant is
    tried (no client registration, authorization in a browser, client credentials or
    refresh), though a browser is at hand."""
    server = oauth_server(*workload.flags(), "--jwt-bearer-error", "unauthorized_client")
    message = refused(kit, server, workload.assertion(server.base)[0])
    assert "unauthorized_client" in message
    stats = server.stats()
    assert stats["jwt_bearer_requests"] == 1
    no_other_grant(stats)
    assert kit.redirects == []  # no browser was sent anywhere
