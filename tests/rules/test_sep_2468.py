"""The client rules of SEP-2468 (tests/rules/rules.json; docs/rules.rst): the issuer of the
authorization server's metadata and the ``iss`` of the authorization response (RFC 8414
3.3, RFC 9207 2.4), through the client's real sign-in against
``servers/fault_auth_server.py``, which can name another issuer in its metadata and send
any ``iss`` (or none) in its redirect.
"""

from __future__ import annotations

import pytest

from albedo_actors.errors import AuthError

import authrules
from authrules import config_of, free_port, one_line, sign_in, stored

home, store = authrules.home, authrules.store  # the fixtures (fault: tests/conftest.py)


def assert_not_used(server, store) -> None:
    """The authorization response was dropped: no code reached a token endpoint, nothing stored."""
    assert server.hits("/token") == 0
    record = stored(store)
    assert record is None or record.access_token is None


@pytest.mark.rule("sep-2468-client-validate-metadata-issuer")
@pytest.mark.parametrize("issuer", ["https://evil.example", "{base}/", "{base}/tenant"])
def test_metadata_naming_another_issuer_is_not_used(fault, store, issuer):
    """Authorization server metadata whose ``issuer`` is not exactly the issuer its well-known
    URL was built from is not used: the sign-in stops with one line, before any registration,
    authorization or token request."""
    server = fault()
    server.as_issuer = issuer.replace("{base}", server.base)
    with pytest.raises(AuthError) as caught:
        sign_in(config_of(server.url), store)
    one_line(caught.value, "another issuer", "no authorization request was made")
    assert server.hits("/.well-known/oauth-authorization-server") >= 1
    assert server.hits("/register") == 0 and server.hits("/authorize") == 0
    assert_not_used(server, store)


@pytest.mark.rule("sep-2468-client-compare-iss-supported")
@pytest.mark.parametrize("iss, accepted", [("issuer", True), ("https://evil.example", False)])
def test_a_promised_iss_is_compared_with_the_issuer_recorded_for_the_request(fault, store, iss, accepted):
    """When the metadata promises ``iss`` (``authorization_response_iss_parameter_supported``),
    the ``iss`` of the authorization response is compared, as a plain string, with the issuer
    of the validated metadata recorded for that authorization request: equal, the code is
    exchanged; different, the response is dropped before any token request."""
    server = fault(iss_supported=True, iss=iss)
    if accepted:
        record = sign_in(config_of(server.url), store)
        assert record.issuer == server.issuer and server.hits("/token") == 1
        assert record.access_token in server.issued_tokens()
        return
    with pytest.raises(AuthError) as caught:
        sign_in(config_of(server.url), store)
    one_line(caught.value, "does not match the issuer", "the response was not used")
    assert server.hits("/authorize") == 1
    assert_not_used(server, store)


@pytest.mark.rule("sep-2468-client-reject-missing-iss")
def test_a_promised_iss_that_is_missing_is_refused(fault, store):
    """When the metadata promises ``iss`` and the authorization response has none, the response
    is refused: its code never reaches the token endpoint."""
    server = fault(iss_supported=True, iss="none")
    with pytest.raises(AuthError) as caught:
        sign_in(config_of(server.url), store)
    message = one_line(caught.value, "lacks the promised iss", "the response was not used")
    assert "code-" not in message
    assert_not_used(server, store)


@pytest.mark.rule("sep-2468-client-compare-iss-unadvertised")
@pytest.mark.parametrize("iss, accepted", [("issuer", True), ("https://evil.example", False)])
def test_an_unpromised_iss_is_still_compared(fault, store, iss, accepted):
    """When the metadata does not promise ``iss`` but the response carries one, it is compared
    all the same: equal to the recorded issuer, the sign-in goes on; different, the response
    is dropped before any token request."""
    server = fault(iss_supported=False, iss=iss)
    if accepted:
        assert sign_in(config_of(server.url), store).issuer == server.issuer
        assert server.hits("/token") == 1
        return
    with pytest.raises(AuthError) as caught:
        sign_in(config_of(server.url), store)
    one_line(caught.value, "does not match the issuer")
    assert_not_used(server, store)


@pytest.mark.rule("sep-2468-client-proceed-no-iss")
def test_no_iss_without_a_promise_proceeds(fault, store):
    """When the metadata does not promise ``iss`` and the response has none, the sign-in
    proceeds: the code is exchanged and the tokens kept."""
    server = fault(iss_supported=False, iss="none")
    record = sign_in(config_of(server.url), store)
    assert record.state == "signed_in" and server.hits("/token") == 1
    assert stored(store).access_token == record.access_token


@pytest.mark.rule("sep-2468-client-no-normalization")
@pytest.mark.parametrize("variant", ["trailing slash", "scheme case", "host name", "percent-encoded", "explicit path"])
def test_an_iss_equal_only_after_normalisation_is_refused(fault, store, variant):
    """An ``iss`` that would equal the issuer only after normalisation (a trailing slash, the
    scheme's case, another name for the host, percent-encoding, an empty path made ``/``)
    is a mismatch: the response is dropped before any token request."""
    server = fault(iss_supported=True)
    port = server.base.rsplit(":", 1)[1]
    server.iss = {
        "trailing slash": server.base + "/",
        "scheme case": server.base.replace("http://", "HTTP://"),
        "host name": f"http://localhost:{port}",
        "percent-encoded": server.base.replace("127.0.0.1", "%31%32%37.0.0.1"),
        "explicit path": server.base + "/.",
    }[variant]
    with pytest.raises(AuthError) as caught:
        sign_in(config_of(server.url), store)
    one_line(caught.value, "does not match the issuer")
    assert_not_used(server, store)


MARKER = "MARKER-2468-description"


@pytest.mark.rule("sep-2468-validation-applies-equally-error-responses-mismatch")
@pytest.mark.parametrize("error", ["access_denied", "invalid_client"])
def test_an_error_response_with_a_wrong_iss_is_neither_acted_on_nor_shown(fault, store, error):
    """An error response whose ``iss`` does not match is checked first and dropped: its
    ``error``, ``error_description`` and ``error_uri`` are not shown, and not acted on (an
    ``invalid_client`` that would make albedo forget its registered client and register
    another forgets and registers nothing)."""
    port = free_port()  # one redirect URI: the first sign-in's registration is the one kept
    server = fault()
    first = sign_in(config_of(server.url), store, port=port)
    server.iss = "https://evil.example"
    server.authorize_error, server.error_description = error, MARKER
    with pytest.raises(AuthError) as caught:
        sign_in(config_of(server.url), store, port=port)
    message = one_line(caught.value, "does not match the issuer", "the response was not used")
    assert error not in message and MARKER not in message and "refused" not in message
    assert server.hits("/register") == 1  # nothing acted on: the kept client was not replaced
    (kept,) = [r for r in server.matching("/authorize")][-1:]
    assert kept.query["client_id"] == first.client_id
    assert stored(store).access_token == first.access_token  # the sign-in before is kept
    assert server.hits("/token") == 1
