"""Token requests and responses (RFC 6749, RFC 7636, RFC 8707)."""

import base64
import json
from urllib.parse import unquote_plus

import pytest

from albedo_actors.auth.tokens import (
    MAX_BODY,
    TokenError,
    TokenSet,
    client_auth,
    code_grant,
    merge_refreshed,
    needs_refresh,
    parse_token_response,
    refresh_grant,
)

ACCESS = "at-SECRET-abcdef"
REFRESH = "rt-SECRET-123456"
CLIENT_SECRET = "cs-SECRET-:/+ &x"
RESOURCE = "https://mcp.example.com/mcp"
NOW = 1_000_000.0


def ok(**fields) -> bytes:
    base = {"access_token": ACCESS, "token_type": "Bearer"}
    base.update(fields)
    return json.dumps(base).encode()


# --- requests ---------------------------------------------------------------

def test_code_grant_fields():
    assert code_grant("the-code", "http://127.0.0.1:33418/callback", "v" * 43,
                      "cid", RESOURCE) == {
        "grant_type": "authorization_code",
        "code": "the-code",
        "redirect_uri": "http://127.0.0.1:33418/callback",
        "code_verifier": "v" * 43,
        "client_id": "cid",
        "resource": RESOURCE,
    }
    with pytest.raises(ValueError):
        code_grant("", "http://127.0.0.1/cb", "v" * 43, "cid", RESOURCE)
    # A 2025-03-26 server has no resource metadata: no resource parameter at all.
    assert "resource" not in code_grant("c", "http://127.0.0.1/cb", "v" * 43, "cid", None)
    assert "resource" not in refresh_grant(REFRESH, "cid", None)


def test_refresh_grant_fields():
    assert refresh_grant(REFRESH, "cid", RESOURCE) == {
        "grant_type": "refresh_token", "refresh_token": REFRESH,
        "client_id": "cid", "resource": RESOURCE}
    assert refresh_grant(REFRESH, "cid", RESOURCE, scope="a b")["scope"] == "a b"
    with pytest.raises(ValueError):
        refresh_grant("", "cid", RESOURCE)


def test_client_auth_none():
    assert client_auth("cid", None, "none") == ({}, {"client_id": "cid"})


def test_client_auth_post():
    assert client_auth("cid", CLIENT_SECRET, "client_secret_post") == (
        {}, {"client_id": "cid", "client_secret": CLIENT_SECRET})


def test_client_auth_basic_form_encodes_before_base64():
    headers, form = client_auth("id:with space", CLIENT_SECRET,
                                "client_secret_basic")
    assert form == {}
    scheme, _, value = headers["Authorization"].partition(" ")
    assert scheme == "Basic"
    decoded = base64.b64decode(value).decode("ascii")
    user, sep, password = decoded.partition(":")
    assert sep == ":"
    assert user == "id%3Awith+space"
    assert password == "cs-SECRET-%3A%2F%2B+%26x"
    assert unquote_plus(user) == "id:with space"
    assert unquote_plus(password) == CLIENT_SECRET


def test_client_auth_basic_plain_values():
    headers, _ = client_auth("abc", "def", "client_secret_basic")
    assert headers == {"Authorization": "Basic "
                       + base64.b64encode(b"abc:def").decode()}


def test_client_auth_refusals_do_not_leak_secret():
    for method in ("client_secret_basic", "client_secret_post"):
        with pytest.raises(ValueError, match="secret"):
            client_auth("cid", None, method)
    with pytest.raises(ValueError) as info:
        client_auth("cid", CLIENT_SECRET, "private_key_jwt")
    assert CLIENT_SECRET not in str(info.value)


# --- responses --------------------------------------------------------------

def test_parse_full_response():
    tokens = parse_token_response(
        ok(token_type="bearer", expires_in=3600, refresh_token=REFRESH,
           scope="read write"), 200, NOW)
    assert tokens == TokenSet(access_token=ACCESS, token_type="Bearer",
                              expires_at=NOW + 3600, refresh_token=REFRESH,
                              scope="read write")


def test_parse_minimal_response():
    tokens = parse_token_response(ok(), 200, NOW)
    assert tokens.access_token == ACCESS
    assert tokens.expires_at is None
    assert tokens.refresh_token is None
    assert tokens.scope is None


def test_expires_in_as_digit_string_is_accepted():
    assert parse_token_response(ok(expires_in="60"), 200, NOW).expires_at \
        == NOW + 60


def test_repr_hides_tokens_and_is_frozen():
    tokens = parse_token_response(ok(refresh_token=REFRESH), 200, NOW)
    for text in (repr(tokens), str(tokens)):
        assert ACCESS not in text
        assert REFRESH not in text
    assert "has_refresh_token=True" in repr(tokens)
    with pytest.raises(Exception):
        tokens.access_token = "x"


@pytest.mark.parametrize("token_type", ["mac", "DPoP ", "", None, 5, "Bearer "])
def test_wrong_token_type_is_refused(token_type):
    fields = {"access_token": ACCESS}
    if token_type is not None:
        fields["token_type"] = token_type
    with pytest.raises(TokenError) as info:
        parse_token_response(json.dumps(fields).encode(), 200, NOW)
    assert info.value.error == "invalid_response"
    assert info.value.transient is False
    assert ACCESS not in str(info.value)


@pytest.mark.parametrize("fields", [
    {"token_type": "Bearer"},
    {"token_type": "Bearer", "access_token": ""},
    {"token_type": "Bearer", "access_token": 12},
    {"token_type": "Bearer", "access_token": "abc\r\nX-Evil: 1"},
    {"token_type": "Bearer", "access_token": "abc def"},
    {"token_type": "Bearer", "access_token": "abc", "expires_in": -5},
    {"token_type": "Bearer", "access_token": "abc", "expires_in": "soon"},
    {"token_type": "Bearer", "access_token": "abc", "expires_in": True},
    {"token_type": "Bearer", "access_token": "abc", "refresh_token": 7},
    {"token_type": "Bearer", "access_token": "abc", "refresh_token": "a\nb"},
    {"token_type": "Bearer", "access_token": "abc", "scope": ["a"]},
])
def test_missing_or_malformed_fields_are_refused(fields):
    with pytest.raises(TokenError) as info:
        parse_token_response(json.dumps(fields).encode(), 200, NOW)
    assert info.value.transient is False


def test_huge_body_is_refused():
    body = ok(pad="x" * MAX_BODY)
    assert len(body) > MAX_BODY
    with pytest.raises(TokenError, match="larger"):
        parse_token_response(body, 200, NOW)
    with pytest.raises(TokenError) as info:
        parse_token_response(b"x" * (MAX_BODY + 1), 503, NOW)
    assert info.value.transient is True


@pytest.mark.parametrize("body", [
    b"<html>ok</html>", b"", b"\xff\xfe", b"[1, 2]", b'"token"', b"null",
    b'{"access_token": NaN}', b"[" * 100000,
])
def test_non_json_or_non_object_success_is_refused(body):
    with pytest.raises(TokenError) as info:
        parse_token_response(body, 200, NOW)
    assert info.value.error == "invalid_response"
    assert info.value.transient is False


@pytest.mark.parametrize("code", ["invalid_grant", "invalid_client",
                                  "unauthorized_client", "invalid_scope"])
def test_oauth_error_is_permanent(code):
    body = json.dumps({"error": code,
                       "error_description": "nope\x1b[31m"}).encode()
    with pytest.raises(TokenError) as info:
        parse_token_response(body, 400 if code != "invalid_client" else 401,
                             NOW)
    assert info.value.error == code
    assert info.value.transient is False
    assert info.value.description == "nope[31m"
    assert "\x1b" not in str(info.value)


@pytest.mark.parametrize("status", [500, 502, 503, 504, 429])
def test_server_failures_are_transient(status):
    with pytest.raises(TokenError) as info:
        parse_token_response(b"<html>Bad Gateway</html>", status, NOW)
    assert info.value.transient is True
    assert info.value.status == status


def test_5xx_with_oauth_error_is_still_transient():
    with pytest.raises(TokenError) as info:
        parse_token_response(b'{"error": "temporarily_unavailable"}', 503, NOW)
    assert info.value.error == "temporarily_unavailable"
    assert info.value.transient is True


def test_4xx_without_json_is_permanent_with_status_code():
    with pytest.raises(TokenError) as info:
        parse_token_response(b"Forbidden", 403, NOW)
    assert info.value.error == "http_403"
    assert info.value.transient is False


def test_error_in_200_body_is_an_error():
    with pytest.raises(TokenError) as info:
        parse_token_response(b'{"error": "invalid_grant"}', 200, NOW)
    assert info.value.error == "invalid_grant"


def test_hostile_error_code_is_not_echoed():
    body = json.dumps({"error": "x" * 500 + ACCESS}).encode()
    with pytest.raises(TokenError) as info:
        parse_token_response(body, 400, NOW)
    assert info.value.error == "http_400"
    assert ACCESS not in str(info.value)


# --- refresh policy ---------------------------------------------------------

def test_needs_refresh_within_a_minute_of_expiry():
    tokens = TokenSet(access_token="a", expires_at=NOW + 3600)
    assert not needs_refresh(tokens, NOW)
    assert not needs_refresh(tokens, NOW + 3600 - 61)
    assert needs_refresh(tokens, NOW + 3600 - 60)
    assert needs_refresh(tokens, NOW + 3600 - 30)
    assert needs_refresh(tokens, NOW + 4000)
    assert needs_refresh(tokens, NOW + 3000, margin=600)
    assert not needs_refresh(TokenSet(access_token="a"), NOW + 10**9)


def test_merge_keeps_old_refresh_token_when_none_returned():
    old = TokenSet(access_token="a1", expires_at=NOW, refresh_token="r1",
                   scope="read")
    new = TokenSet(access_token="a2", expires_at=NOW + 3600)
    merged = merge_refreshed(old, new)
    assert merged.access_token == "a2"
    assert merged.expires_at == NOW + 3600
    assert merged.refresh_token == "r1"
    assert merged.scope == "read"


def test_merge_takes_rotated_refresh_token_and_new_scope():
    old = TokenSet(access_token="a1", refresh_token="r1", scope="read")
    new = TokenSet(access_token="a2", refresh_token="r2", scope="read write")
    assert merge_refreshed(old, new) == new


def test_merge_after_parse_round_trip():
    old = parse_token_response(ok(refresh_token=REFRESH, expires_in=10), 200,
                               NOW)
    new = parse_token_response(ok(access_token="fresh", expires_in=3600), 200,
                               NOW + 5)
    merged = merge_refreshed(old, new)
    assert merged.access_token == "fresh"
    assert merged.refresh_token == REFRESH
    assert merged.expires_at == NOW + 3605
    assert not needs_refresh(merged, NOW + 5)


def test_the_account_comes_from_an_id_token_and_is_display_only():
    import jwt

    id_token = jwt.encode({"sub": "u-1", "email": "ada@example.com"}, "k" * 32, algorithm="HS256")
    body = json.dumps({"access_token": "AT", "token_type": "Bearer", "id_token": id_token}).encode()
    assert parse_token_response(body, 200, 0.0).account == "ada@example.com"
    only_sub = jwt.encode({"sub": "u-1\n\x1b[31m"}, "k" * 32, algorithm="HS256")
    body = json.dumps({"access_token": "AT", "token_type": "Bearer", "id_token": only_sub}).encode()
    assert parse_token_response(body, 200, 0.0).account == "u-1[31m"  # one printable line
    for junk in ("not-a-jwt", 42, "x" * 20000):
        body = json.dumps({"access_token": "AT", "token_type": "Bearer", "id_token": junk}).encode()
        assert parse_token_response(body, 200, 0.0).account is None


@pytest.mark.parametrize("field", ["access_token", "refresh_token", "token_type"])
def test_a_token_answer_holding_a_lone_surrogate_is_refused_as_not_json(field):
    # A token goes into an Authorization header and the store: it must be text.
    fields = {"access_token": "a", "refresh_token": "r", "token_type": "Bearer", "expires_in": 60}
    body = json.dumps(fields).replace(f'"{fields[field]}"', '"x\\ud800"', 1).encode()
    with pytest.raises(TokenError) as caught:
        parse_token_response(body, 200, 0.0)
    assert not caught.value.transient
