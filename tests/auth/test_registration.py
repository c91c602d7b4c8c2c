"""Dynamic Client Registration request and answer checks (RFC 7591)."""

import json

import pytest

from albedo_actors.auth.registration import (
    ALIVE,
    GONE,
    MAX_BODY,
    UNKNOWN,
    ClientRegistration,
    RegistrationError,
    parse_registration,
    read_outcome,
    registration_request,
)

REDIRECT = "http://127.0.0.1:33418/callback"
SECRET = "s3cr3t-value-never-shown"


def answer(**fields) -> bytes:
    return json.dumps(fields).encode()


def test_request_is_a_native_public_code_client():
    req = registration_request("albedo", REDIRECT, offline_access=False)
    assert req == {
        "client_name": "albedo",
        "redirect_uris": [REDIRECT],
        "grant_types": ["authorization_code"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "application_type": "native",
    }
    json.dumps(req)  # must be serialisable as the POST body


def test_request_asks_for_refresh_token_only_with_offline_access():
    req = registration_request("albedo", REDIRECT, offline_access=True)
    assert req["grant_types"] == ["authorization_code", "refresh_token"]


def test_request_with_other_auth_method_and_bad_inputs():
    req = registration_request("albedo", REDIRECT, offline_access=False,
                               auth_method="client_secret_basic")
    assert req["token_endpoint_auth_method"] == "client_secret_basic"
    with pytest.raises(RegistrationError):
        registration_request("albedo", REDIRECT, offline_access=False,
                             auth_method="private_key_jwt")
    with pytest.raises(RegistrationError):
        registration_request("", REDIRECT, offline_access=False)
    with pytest.raises(RegistrationError):
        registration_request("albedo", "", offline_access=False)


def test_parse_public_client():
    reg = parse_registration(
        answer(client_id="abc", token_endpoint_auth_method="none",
               redirect_uris=[REDIRECT]),
        "application/json; charset=utf-8", redirect_uri=REDIRECT)
    assert reg == ClientRegistration(client_id="abc", client_secret=None,
                                     token_endpoint_auth_method="none",
                                     redirect_uris=(REDIRECT,))


def test_parse_confidential_client_hides_secret_in_repr():
    reg = parse_registration(
        answer(client_id="abc", client_secret=SECRET,
               token_endpoint_auth_method="client_secret_post",
               redirect_uris=[REDIRECT, "http://localhost/cb"]),
        "application/json")
    assert reg.client_secret == SECRET
    assert reg.token_endpoint_auth_method == "client_secret_post"
    assert reg.redirect_uris == (REDIRECT, "http://localhost/cb")
    assert SECRET not in repr(reg)
    assert SECRET not in str(reg)
    assert "abc" in repr(reg)


def test_parse_is_frozen():
    reg = parse_registration(answer(client_id="abc"), "application/json")
    with pytest.raises(Exception):
        reg.client_id = "other"


def test_missing_auth_method_defaults_by_secret():
    assert parse_registration(answer(client_id="a"), "application/json") \
        .token_endpoint_auth_method == "none"
    assert parse_registration(answer(client_id="a", client_secret=SECRET),
                              "application/json") \
        .token_endpoint_auth_method == "client_secret_basic"


def test_missing_redirect_uris_assumes_requested():
    reg = parse_registration(answer(client_id="a"), "application/json",
                             redirect_uri=REDIRECT)
    assert reg.redirect_uris == (REDIRECT,)


def test_huge_body_is_refused():
    body = answer(client_id="a", pad="x" * MAX_BODY)
    assert len(body) > MAX_BODY
    with pytest.raises(RegistrationError, match="larger"):
        parse_registration(body, "application/json")


@pytest.mark.parametrize("body", [
    b"<html>nope</html>", b"", b"\xff\xfe garbage", b'{"client_id": "a"',
    b'{"client_id": NaN}', b"[" * 100000 + b"]" * 100000,
])
def test_non_json_is_refused(body):
    with pytest.raises(RegistrationError):
        parse_registration(body, "application/json")


@pytest.mark.parametrize("body", [b"[]", b'"abc"', b"42", b"null"])
def test_non_object_is_refused(body):
    with pytest.raises(RegistrationError, match="not a JSON object"):
        parse_registration(body, "application/json")


def test_non_json_content_type_is_refused():
    with pytest.raises(RegistrationError, match="content type"):
        parse_registration(answer(client_id="a"), "text/html")
    # +json media types are JSON
    assert parse_registration(answer(client_id="a"),
                              "application/problem+json").client_id == "a"


@pytest.mark.parametrize("fields", [
    {}, {"client_id": ""}, {"client_id": "  "}, {"client_id": 5},
    {"client_id": None}, {"client_id": ["a"]},
])
def test_missing_client_id_is_refused(fields):
    with pytest.raises(RegistrationError, match="client_id"):
        parse_registration(answer(**fields), "application/json")


def test_redirect_not_registered_is_refused():
    with pytest.raises(RegistrationError, match="redirect"):
        parse_registration(
            answer(client_id="a", redirect_uris=["https://evil.example/cb"]),
            "application/json", redirect_uri=REDIRECT)
    with pytest.raises(RegistrationError, match="redirect"):
        parse_registration(answer(client_id="a", redirect_uris=REDIRECT),
                           "application/json", redirect_uri=REDIRECT)


def test_unusable_auth_methods_are_refused_without_leaking_secret():
    with pytest.raises(RegistrationError) as info:
        parse_registration(
            answer(client_id="a", client_secret=SECRET,
                   token_endpoint_auth_method="private_key_jwt"),
            "application/json")
    assert SECRET not in str(info.value)
    with pytest.raises(RegistrationError, match="needs a client_secret"):
        parse_registration(
            answer(client_id="a", token_endpoint_auth_method="client_secret_basic"),
            "application/json")
    with pytest.raises(RegistrationError):
        parse_registration(answer(client_id="a", client_secret=12),
                           "application/json")


# -- RFC 7592: the client configuration endpoint --------------------------------------------------

CONFIG_URI = "https://auth.example.com/register/abc"
ACCESS = "reg-access.token_9f~+/=="


def test_the_configuration_endpoint_and_its_token_are_kept_and_the_token_never_shown():
    reg = parse_registration(answer(client_id="abc", registration_client_uri=CONFIG_URI,
                                    registration_access_token=ACCESS), "application/json")
    assert (reg.registration_client_uri, reg.registration_access_token) == (CONFIG_URI, ACCESS)
    assert ACCESS not in repr(reg) and CONFIG_URI in repr(reg)


@pytest.mark.parametrize("uri, token, allow_http", [
    ("http://auth.example.com/register/abc", ACCESS, False),  # http for an https server
    ("https://auth.example.com/register/abc#x", ACCESS, False),
    ("ftp://auth.example.com/r", ACCESS, False),
    ("/register/abc", ACCESS, False),
    ("https://auth.example.com:99999/r", ACCESS, False),
    (CONFIG_URI, "a token\r\nX-Injected: 1", False),  # not an RFC 6750 b64token
    (CONFIG_URI, "", False),
    (CONFIG_URI, None, False),  # one without the other
    (None, ACCESS, False),
    (CONFIG_URI, 42, False),
])
def test_an_unusable_configuration_endpoint_is_dropped_and_the_registration_kept(uri, token, allow_http):
    fields = {"client_id": "abc"}
    fields.update({k: v for k, v in (("registration_client_uri", uri), ("registration_access_token", token))
                   if v is not None})
    reg = parse_registration(answer(**fields), "application/json", allow_http=allow_http)
    assert reg.client_id == "abc"
    assert reg.registration_client_uri is None and reg.registration_access_token is None


def test_a_plain_http_configuration_endpoint_is_kept_for_a_plain_http_server():
    uri = "http://127.0.0.1:8080/register/abc"
    reg = parse_registration(answer(client_id="abc", registration_client_uri=uri, registration_access_token=ACCESS),
                             "application/json", allow_http=True)
    assert reg.registration_client_uri == uri


@pytest.mark.parametrize("status, body, outcome", [
    (401, b'{"error": "invalid_token"}', GONE),  # RFC 7592 2.1: the client does not exist
    (403, b"", GONE),
    (404, b"<html>gone</html>", GONE),
    (400, b'{"error": "invalid_client"}', GONE),
    (400, b'{"error": "invalid_request"}', UNKNOWN),
    (500, b'{"error": "server_error"}', UNKNOWN),
    (503, b"busy", UNKNOWN),
    (200, b"not json", UNKNOWN),
    (200, answer(client_id="someone-else"), UNKNOWN),
    (200, answer(client_id="abc", redirect_uris=["https://elsewhere.example/cb"]), UNKNOWN),
    (200, answer(client_id="abc"), ALIVE),
])
def test_what_a_read_of_a_kept_registration_means(status, body, outcome):
    assert read_outcome(status, body, "application/json", "abc", redirect_uri=REDIRECT)[0] == outcome


def test_a_read_may_renew_the_secret_and_the_access_token():
    outcome, found = read_outcome(200, answer(client_id="abc", client_secret="new-secret",
                                              token_endpoint_auth_method="client_secret_basic",
                                              registration_client_uri=CONFIG_URI, registration_access_token="renewed"),
                                  "application/json", "abc", requested_method="client_secret_basic")
    assert outcome == ALIVE and found is not None
    assert (found.client_secret, found.registration_access_token) == ("new-secret", "renewed")
