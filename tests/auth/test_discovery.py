"""OAuth discovery checks (spec digest section 7): pure functions, hostile inputs."""

from urllib.parse import parse_qs, urlsplit

import pytest

from albedo_actors.auth.discovery import (
    AuthDiscoveryError,
    Challenge,
    authorization_server_metadata_urls,
    authorization_url,
    bearer_challenge,
    check_authorization_server_metadata,
    check_iss,
    check_resource_metadata,
    choose_scope,
    parse_www_authenticate,
    protected_resource_metadata_urls,
    step_up_scope,
)

# -- WWW-Authenticate -------------------------------------------------------


def test_bearer_challenge_gives_resource_metadata_and_scope():
    header = ('Bearer resource_metadata="https://mcp.example.com/.well-known/'
              'oauth-protected-resource", scope="files:read files:write"')
    [challenge] = parse_www_authenticate(header)
    assert challenge.scheme == "bearer"
    assert challenge.resource_metadata == (
        "https://mcp.example.com/.well-known/oauth-protected-resource")
    assert challenge.scope == "files:read files:write"
    assert challenge.error is None


def test_insufficient_scope_challenge_reads_error_and_description():
    header = ('Bearer error="insufficient_scope", scope="files:write", '
              'resource_metadata="https://m.example/prm", error_description="need write"')
    challenge = bearer_challenge({"WWW-Authenticate": header})
    assert challenge.error == "insufficient_scope"
    assert challenge.scope == "files:write"
    assert challenge.error_description == "need write"
    assert challenge.resource_metadata == "https://m.example/prm"


def test_several_challenges_with_commas_and_escapes_inside_quotes():
    header = ('Basic realm="a, b=c", Negotiate YWJj==, '
              'BEARER Realm="say \\"hi\\", ok", scope=tok')
    challenges = parse_www_authenticate(header)
    assert [c.scheme for c in challenges] == ["basic", "negotiate", "bearer"]
    assert challenges[0].params == {"realm": "a, b=c"}
    assert challenges[1].token68 == "YWJj=="
    assert challenges[1].params == {}
    assert challenges[2].params == {"realm": 'say "hi", ok', "scope": "tok"}


def test_parameter_names_are_lower_cased_and_first_occurrence_wins():
    [c] = parse_www_authenticate('Bearer SCOPE="a", Scope="b", Resource_Metadata=x')
    assert c.params == {"scope": "a", "resource_metadata": "x"}


def test_token68_alone():
    assert parse_www_authenticate("Basic dXNlcjpwYXNz") == [
        Challenge("basic", {}, "dXNlcjpwYXNz")]


@pytest.mark.parametrize("garbage", [
    "", "   ", ",,,", '"', '="=', "Bearer =", 'Bearer scope="unterminated',
    "\x00\x01\xff", "Bearer , , ,", "=====", "Bearer a=b=c=d", "(){}<>@",
    'Bearer scope="x" junk "more" , error=e', "Bearer " + "a=b, " * 10000,
    None, 42, b"Bearer scope=x",
])
def test_garbage_headers_never_raise(garbage):
    result = parse_www_authenticate(garbage)
    assert isinstance(result, list)
    assert all(isinstance(c, Challenge) for c in result)
    assert len(result) <= 32
    assert all(len(c.params) <= 32 for c in result)


def test_garbage_between_params_keeps_what_can_be_read():
    [c] = parse_www_authenticate('Bearer scope="x" junk "more" , error=e')
    assert c.scope == "x"
    assert c.error == "e"


def test_unterminated_quote_takes_the_rest():
    [c] = parse_www_authenticate('Bearer scope="a b')
    assert c.scope == "a b"


def test_bearer_challenge_finds_bearer_among_repeated_headers():
    headers = [("Content-Type", "text/plain"),
               ("www-authenticate", 'Basic realm="x"'),
               ("WWW-Authenticate", 'Bearer scope="s"')]
    assert bearer_challenge(headers).scope == "s"
    assert bearer_challenge({"www-authenticate": 'Basic realm="x"'}) is None
    assert bearer_challenge({}) is None
    assert bearer_challenge(None) is None
    assert bearer_challenge('Bearer error="invalid_token"').error == "invalid_token"


def test_bearer_challenge_with_case_insensitive_mapping():
    from requests.structures import CaseInsensitiveDict
    headers = CaseInsensitiveDict({"WWW-Authenticate": 'bearer scope="x y"'})
    assert bearer_challenge(headers).scope == "x y"


# -- Protected Resource Metadata (RFC 9728) ----------------------------------


def test_prm_urls_follow_the_spec_example():
    assert protected_resource_metadata_urls("https://example.com/public/mcp", None) == [
        "https://example.com/.well-known/oauth-protected-resource/public/mcp",
        "https://example.com/.well-known/oauth-protected-resource",
    ]


def test_prm_urls_use_the_challenge_url_when_given():
    assert protected_resource_metadata_urls(
        "https://example.com/public/mcp", "https://example.com/prm/x") == [
        "https://example.com/prm/x"]


def test_prm_urls_ignore_a_challenge_url_that_is_not_http():
    assert protected_resource_metadata_urls(
        "https://example.com/mcp", "file:///etc/passwd") == [
        "https://example.com/.well-known/oauth-protected-resource/mcp",
        "https://example.com/.well-known/oauth-protected-resource",
    ]


def test_prm_urls_for_a_root_server_and_with_port_and_query():
    assert protected_resource_metadata_urls("http://127.0.0.1:8080/", None) == [
        "http://127.0.0.1:8080/.well-known/oauth-protected-resource"]
    assert protected_resource_metadata_urls("https://a.com/mcp/?x=1#f", None) == [
        "https://a.com/.well-known/oauth-protected-resource/mcp",
        "https://a.com/.well-known/oauth-protected-resource",
    ]
    assert protected_resource_metadata_urls("not a url", None) == []


def _prm(**over):
    doc = {"resource": "https://a.com/mcp",
           "authorization_servers": ["https://auth.a.com"],
           "scopes_supported": ["read", "write"]}
    doc.update(over)
    return doc


def test_resource_metadata_accepted_for_exact_and_prefix_resource():
    meta = check_resource_metadata(_prm(), "https://a.com/mcp")
    assert meta.resource == "https://a.com/mcp"
    assert meta.authorization_servers == ("https://auth.a.com",)
    assert meta.scopes_supported == ("read", "write")
    assert check_resource_metadata(_prm(resource="https://a.com"), "https://a.com/mcp")
    assert check_resource_metadata(_prm(resource="https://a.com/"), "https://a.com/mcp")
    assert check_resource_metadata(_prm(resource="https://a.com/v1"), "https://a.com/v1/mcp")
    assert check_resource_metadata(_prm(resource="HTTPS://A.COM/mcp"), "https://a.com/mcp")
    assert check_resource_metadata(_prm(resource="https://a.com:443/mcp"), "https://a.com/mcp")
    assert check_resource_metadata(_prm(), "https://a.com/mcp/")


@pytest.mark.parametrize("resource,server", [
    ("https://a.com/mcpx", "https://a.com/mcp"),
    ("https://a.com/mcp", "https://a.com/mcpx"),
    ("https://a.com/mcp/deeper", "https://a.com/mcp"),
    ("https://evil.com/mcp", "https://a.com/mcp"),
    ("https://a.com.evil.com/mcp", "https://a.com/mcp"),
    ("http://a.com/mcp", "https://a.com/mcp"),
    ("https://a.com:8443/mcp", "https://a.com/mcp"),
    ("https://a.com/MCP", "https://a.com/mcp"),
    ("https://a.com/mcp#frag", "https://a.com/mcp"),
    ("https://user@a.com/mcp", "https://a.com/mcp"),
    ("ftp://a.com/mcp", "https://a.com/mcp"),
    ("", "https://a.com/mcp"),
    (None, "https://a.com/mcp"),
    (["https://a.com/mcp"], "https://a.com/mcp"),
    ("https://a.com/" + "x" * 5000, "https://a.com/" + "x" * 5000),
])
def test_resource_mismatch_is_refused(resource, server):
    with pytest.raises(AuthDiscoveryError):
        check_resource_metadata(_prm(resource=resource), server)


@pytest.mark.parametrize("servers", [
    None, [], "https://auth.a.com", [None, 3, ""], ["javascript:alert(1)"],
    ["https://" + "x" * 5000],
])
def test_resource_metadata_without_authorization_server_is_refused(servers):
    with pytest.raises(AuthDiscoveryError, match="authorization server"):
        check_resource_metadata(_prm(authorization_servers=servers), "https://a.com/mcp")


@pytest.mark.parametrize("doc", [None, [], "x", 3, {}])
def test_resource_metadata_that_is_not_an_object_is_refused(doc):
    with pytest.raises(AuthDiscoveryError):
        check_resource_metadata(doc, "https://a.com/mcp")


def test_resource_metadata_error_reason_is_one_line():
    with pytest.raises(AuthDiscoveryError) as info:
        check_resource_metadata(_prm(resource="https://a.com/mcpx\nforged"), "https://a.com/mcp")
    assert "\n" not in str(info.value)


def test_resource_metadata_bounds_absurd_lists():
    doc = _prm(authorization_servers=["https://auth%d.a.com" % i for i in range(100000)],
               scopes_supported=["s%d" % i for i in range(100000)] + ["x" * 100000])
    meta = check_resource_metadata(doc, "https://a.com/mcp")
    assert meta.authorization_servers[0] == "https://auth0.a.com"
    assert len(meta.authorization_servers) <= 64
    assert len(meta.scopes_supported) <= 128
    assert all(len(s) <= 256 for s in meta.scopes_supported)


# -- Authorization server metadata (RFC 8414 / OIDC) -------------------------


def test_as_metadata_urls_for_issuer_with_path_follow_the_spec():
    assert authorization_server_metadata_urls("https://auth.example.com/tenant1") == [
        "https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
        "https://auth.example.com/.well-known/openid-configuration/tenant1",
        "https://auth.example.com/tenant1/.well-known/openid-configuration",
    ]


def test_as_metadata_urls_for_issuer_without_path_follow_the_spec():
    expected = [
        "https://auth.example.com/.well-known/oauth-authorization-server",
        "https://auth.example.com/.well-known/openid-configuration",
    ]
    assert authorization_server_metadata_urls("https://auth.example.com") == expected
    assert authorization_server_metadata_urls("https://auth.example.com/") == expected
    assert authorization_server_metadata_urls("mailto:x@y") == []


def _asm(**over):
    doc = {
        "issuer": "https://auth.a.com",
        "authorization_endpoint": "https://auth.a.com/authorize",
        "token_endpoint": "https://auth.a.com/token",
        "registration_endpoint": "https://auth.a.com/register",
        "scopes_supported": ["read", "offline_access"],
        "code_challenge_methods_supported": ["plain", "S256"],
        "token_endpoint_auth_methods_supported": ["none", "client_secret_post"],
        "authorization_response_iss_parameter_supported": True,
    }
    doc.update(over)
    return {k: v for k, v in doc.items() if v is not None}


def test_as_metadata_accepted_and_read():
    meta = check_authorization_server_metadata(_asm(), "https://auth.a.com", "https://a.com/mcp")
    assert meta.issuer == "https://auth.a.com"
    assert meta.authorization_endpoint == "https://auth.a.com/authorize"
    assert meta.token_endpoint == "https://auth.a.com/token"
    assert meta.registration_endpoint == "https://auth.a.com/register"
    assert meta.scopes_supported == ("read", "offline_access")
    assert meta.code_challenge_methods_supported == ("plain", "S256")
    assert meta.token_endpoint_auth_methods_supported == ("none", "client_secret_post")
    assert meta.authorization_response_iss_parameter_supported is True
    assert meta.client_id_metadata_document_supported is False


@pytest.mark.parametrize("value, kept", [
    ("https://auth.a.com/par", "https://auth.a.com/par"),
    (None, None),
    ("http://auth.a.com/par", None),  # plain http for an https MCP server: left out, never an error
    ("javascript:alert(1)", None),
    (42, None),
])
def test_as_metadata_keeps_a_usable_pushed_authorization_request_endpoint_only(value, kept):
    meta = check_authorization_server_metadata(_asm(pushed_authorization_request_endpoint=value),
                                               "https://auth.a.com", "https://a.com/mcp")
    assert meta.pushed_authorization_request_endpoint == kept


def test_as_metadata_without_registration_endpoint_and_truthy_non_bool_flags():
    meta = check_authorization_server_metadata(
        _asm(registration_endpoint=None, authorization_response_iss_parameter_supported="yes",
             client_id_metadata_document_supported=1),
        "https://auth.a.com", "https://a.com/mcp")
    assert meta.registration_endpoint is None
    assert meta.authorization_response_iss_parameter_supported is False
    assert meta.client_id_metadata_document_supported is False


@pytest.mark.parametrize("got", [
    "https://auth.a.com/", "HTTPS://auth.a.com", "https://evil.com", "https://auth.a.com:443",
    "", None, ["https://auth.a.com"],
])
def test_issuer_mismatch_is_refused(got):
    doc = _asm()
    doc["issuer"] = got
    with pytest.raises(AuthDiscoveryError, match="issuer"):
        check_authorization_server_metadata(doc, "https://auth.a.com", "https://a.com/mcp")


@pytest.mark.parametrize("methods", [None, [], ["plain"], ["s256"], "S256", [["S256"]]])
def test_as_without_s256_is_refused(methods):
    with pytest.raises(AuthDiscoveryError, match="S256"):
        check_authorization_server_metadata(
            _asm(code_challenge_methods_supported=methods), "https://auth.a.com",
            "https://a.com/mcp")


@pytest.mark.parametrize("name", [
    "authorization_endpoint", "token_endpoint", "registration_endpoint"])
def test_http_endpoint_with_an_https_server_is_refused(name):
    with pytest.raises(AuthDiscoveryError, match=name):
        check_authorization_server_metadata(
            _asm(**{name: "http://auth.a.com/x"}), "https://auth.a.com", "https://a.com/mcp")


def test_http_endpoints_allowed_when_the_mcp_server_is_plain_http():
    doc = _asm(issuer="http://127.0.0.1:9000",
               authorization_endpoint="http://127.0.0.1:9000/authorize",
               token_endpoint="http://127.0.0.1:9000/token",
               registration_endpoint="http://127.0.0.1:9000/register")
    meta = check_authorization_server_metadata(
        doc, "http://127.0.0.1:9000", "http://127.0.0.1:8000/mcp")
    assert meta.token_endpoint == "http://127.0.0.1:9000/token"


@pytest.mark.parametrize("endpoint", [
    "javascript:alert(1)", "file:///etc/passwd", "/authorize", "", 3,
    "https://auth.a.com/authorize#frag", "https://" + "x" * 5000,
])
def test_unusable_endpoint_is_refused(endpoint):
    with pytest.raises(AuthDiscoveryError, match="authorization_endpoint"):
        check_authorization_server_metadata(
            _asm(authorization_endpoint=endpoint), "https://auth.a.com", "http://a.com/mcp")


def test_missing_token_endpoint_is_refused():
    with pytest.raises(AuthDiscoveryError, match="token_endpoint"):
        check_authorization_server_metadata(
            _asm(token_endpoint=None), "https://auth.a.com", "https://a.com/mcp")


@pytest.mark.parametrize("doc", [None, [], "x", 3])
def test_as_metadata_that_is_not_an_object_is_refused(doc):
    with pytest.raises(AuthDiscoveryError):
        check_authorization_server_metadata(doc, "https://auth.a.com", "https://a.com/mcp")


# -- Scope ------------------------------------------------------------------


def test_scope_prefers_step_up_then_challenge_then_supported():
    assert choose_scope("a b", "c", ("d",), ()) == "a b"
    assert choose_scope(None, "c", ("d",), ()) == "c"
    assert choose_scope("", "c", ("d",), ()) == "c"
    assert choose_scope(None, None, ("d", "e"), ()) == "d e"
    assert choose_scope(None, None, (), ()) is None
    assert choose_scope(None, "  ", (), ()) is None


def test_offline_access_added_only_when_the_as_lists_it():
    assert choose_scope(None, "read", (), ("read", "offline_access")) == "read offline_access"
    assert choose_scope(None, "read", (), ("read",)) == "read"
    assert choose_scope(None, "read offline_access", (), ("offline_access",)) == (
        "read offline_access")
    assert choose_scope(None, None, ("read", "offline_access"), ("offline_access",)) == (
        "read offline_access")
    assert choose_scope(None, None, (), ("offline_access",)) is None


def test_scope_has_no_duplicates():
    assert choose_scope("a a b", None, (), ()) == "a b"
    assert choose_scope(None, None, ("x", "x"), ()) == "x"


def test_step_up_scope_is_the_ordered_union():
    assert step_up_scope("read write", "write admin") == "read write admin"
    assert step_up_scope(None, "admin") == "admin"
    assert step_up_scope("read", None) == "read"
    assert step_up_scope(None, None) == ""
    assert step_up_scope("a  b", "b a c") == "a b c"


# -- iss (RFC 9207) ---------------------------------------------------------

ISSUER = "https://auth.a.com"


def test_iss_present_and_equal_is_accepted_promised_or_not():
    assert check_iss({"code": "c", "iss": ISSUER}, ISSUER, True) is None
    assert check_iss({"code": "c", "iss": ISSUER}, ISSUER, False) is None


def test_iss_missing_is_refused_only_when_promised():
    with pytest.raises(AuthDiscoveryError, match="iss"):
        check_iss({"code": "c"}, ISSUER, True)
    assert check_iss({"code": "c"}, ISSUER, False) is None


@pytest.mark.parametrize("iss", [
    "https://auth.a.com/", "HTTPS://auth.a.com", "https://auth.a.com:443",
    "https://AUTH.a.com", "https%3A%2F%2Fauth.a.com", "https://evil.com", "",
])
@pytest.mark.parametrize("promised", [True, False])
def test_wrong_iss_is_refused_whether_promised_or_not(iss, promised):
    with pytest.raises(AuthDiscoveryError):
        check_iss({"code": "c", "iss": iss}, ISSUER, promised)


def test_wrong_iss_refused_on_error_responses_too():
    with pytest.raises(AuthDiscoveryError):
        check_iss({"error": "access_denied", "iss": "https://evil.com"}, ISSUER, False)


def test_iss_from_parse_qs_lists():
    assert check_iss({"iss": [ISSUER]}, ISSUER, True) is None
    with pytest.raises(AuthDiscoveryError):
        check_iss({"iss": [ISSUER, "https://evil.com"]}, ISSUER, False)


# -- Authorization URL ------------------------------------------------------


def test_authorization_url_carries_every_parameter_encoded():
    url = authorization_url(
        "https://auth.a.com/authorize", "client 1", "http://127.0.0.1:33418/callback",
        "CHAL", "st&ate", "read write", "https://mcp.example.com")
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc, parts.path) == ("https", "auth.a.com", "/authorize")
    assert parse_qs(parts.query) == {
        "response_type": ["code"], "client_id": ["client 1"],
        "redirect_uri": ["http://127.0.0.1:33418/callback"],
        "code_challenge": ["CHAL"], "code_challenge_method": ["S256"],
        "state": ["st&ate"], "scope": ["read write"],
        "resource": ["https://mcp.example.com"],
    }
    assert "resource=https%3A%2F%2Fmcp.example.com" in url
    assert "scope=read%20write" in url


def test_authorization_url_keeps_existing_query_and_overrides_ours():
    url = authorization_url(
        "https://auth.a.com/oauth/authorize?tenant=t1&state=old#frag", "cid",
        "http://127.0.0.1:1/callback", "C", "S", None, None)
    query = parse_qs(urlsplit(url).query)
    assert query["tenant"] == ["t1"]
    assert query["state"] == ["S"]
    assert "scope" not in query and "resource" not in query
    assert url.startswith("https://auth.a.com/oauth/authorize?tenant=t1&")
    assert "#" not in url


@pytest.mark.parametrize("endpoint", ["javascript:alert(1)", "file:///x", "-rf", "", "calc.exe"])
def test_authorization_url_refuses_non_http_endpoint(endpoint):
    with pytest.raises(AuthDiscoveryError):
        authorization_url(endpoint, "c", "http://127.0.0.1/cb", "C", "S", None, None)
