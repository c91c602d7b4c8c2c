"""Hostile peers against the whole OAuth sign-in, over real HTTP on 127.0.0.1.

The unit tests (test_discovery, test_callback, test_browser, test_registration,
test_tokens) check the pure pieces one by one; here ``SignIn.run`` and a
``ServerHandle`` with a ``ServerAuth`` talk to ``servers/fault_auth_server.py``, an
authorization server + MCP server that misbehaves on purpose, and each test checks
both the error (one line, naming the server, no traceback) and that nothing harmful
happened: no authorization or token request after a refusal, no token or client kept
from a bad answer, other credentials untouched, no redirect followed, no browser.
"""

from __future__ import annotations

import webbrowser
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import pytest
import requests

from albedo_actors.actors.client import ServerHandle
from albedo_actors.auth.server_auth import MAX_AUTHORIZATIONS, ServerAuth
from albedo_actors.actors.refresher import TokenRefresher, refresh_by
from albedo_actors.auth.record import from_credentials
from albedo_actors.auth.signin import SignIn, authorizer, follow_redirect_agent
from albedo_actors.config import ServerConfig
from albedo_actors.errors import AuthError, HttpRefused, NeedsSignIn, Unavailable
from albedo_actors.store import open_store
from albedo_actors.store.records import Credentials
from servers.fault_auth_server import FaultAuthServer
from servers.fault_http_server import CanaryServer

NAME = "hostile"
OTHER = "bystander"
HTTP_TIMEOUT = 10  # every request the tests make themselves
OTHER_CREDENTIALS = Credentials(
    bearer_token="bystander-token",
    oauth={"url": "http://127.0.0.1:9/mcp", "state": "signed_in", "access_token": "bystander-access",
           "refresh_token": "bystander-refresh", "client_id": "bystander-client"},
)
NO_BROWSER = {"ALBEDO_NO_BROWSER": "1"}


# -- fixtures -----------------------------------------------------------------------------


@pytest.fixture
def canary():
    server = CanaryServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def store(tmp_path):
    """A store already holding another server's credentials (which must never change)."""
    opened = open_store(str(tmp_path))
    opened.put_credentials(OTHER, OTHER_CREDENTIALS)
    yield opened
    opened.close()


@pytest.fixture
def refresher(store):
    ref = TokenRefresher.start(store, environ=NO_BROWSER)
    yield ref
    ref.stop()


@pytest.fixture
def handles():
    started: list[ServerHandle] = []
    yield started
    for handle in started:
        handle.stop()


class RecordingAgent:
    """An agent (the browser) that only records that it was asked; it must never be."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, url, listener) -> None:
        self.calls.append(url)
        listener.cancel()


@pytest.fixture
def no_browser(monkeypatch):
    """webbrowser.open replaced by a recorder: no real browser may ever start in a test."""
    opened: list = []

    def record(url, *args, **kwargs):
        opened.append(url)
        return True

    monkeypatch.setattr(webbrowser, "open", record)
    return opened


# -- helpers ------------------------------------------------------------------------------


def config(server: FaultAuthServer, **overrides) -> ServerConfig:
    return ServerConfig(name=NAME, type="http", url=server.url, startup_timeout_ms=20_000, call_timeout_ms=20_000,
                        **overrides)


def sign_in(server: FaultAuthServer, store, agent=None, environ=NO_BROWSER, holder=None):
    attempt = SignIn(config(server), store, environ=environ, agent=agent or follow_redirect_agent(), port=0, lifetime=15)
    if holder is not None:
        holder.append(attempt)
    return attempt.run()


def assert_one_line(exc: BaseException, *words: str) -> str:
    text = str(exc)
    assert f"server {NAME!r}" in text
    assert "\n" not in text and "\r" not in text
    assert "Traceback" not in text and 'File "' not in text
    for word in words:
        assert word in text, f"{word!r} not in {text!r}"
    return text


def assert_no_token_stored(store) -> None:
    record = from_credentials(store.get_credentials(NAME))
    assert record is None or not record.access_token
    assert store.get_credentials(OTHER) == OTHER_CREDENTIALS


def assert_nothing_after_discovery(server: FaultAuthServer) -> None:
    assert server.hits("/register") == 0
    assert server.hits("/authorize") == 0
    assert server.hits("/token") == 0


def registered_redirect(server: FaultAuthServer) -> str:
    (request,) = server.matching("/register")
    return request.json()["redirect_uris"][0]


# -- 1, 2: discovery documents that must not be used ----------------------------------------


def test_as_metadata_naming_another_issuer_is_not_used(fault, store):
    server = fault(as_issuer="https://evil.example")
    with pytest.raises(AuthError) as caught:
        sign_in(server, store)
    assert_one_line(caught.value, "another issuer", "no authorization request was made")
    assert server.hits("/.well-known/oauth-authorization-server") == 1
    assert_nothing_after_discovery(server)
    assert_no_token_stored(store)


def test_prm_for_another_resource_aborts_before_authorization(fault, store):
    server = fault(prm_resource="https://evil.example/mcp")
    with pytest.raises(AuthError) as caught:
        sign_in(server, store)
    assert_one_line(caught.value, "evil.example", "not this server", "no authorization request was made")
    assert server.hits("/.well-known/oauth-authorization-server") == 0
    assert_nothing_after_discovery(server)
    assert_no_token_stored(store)


# -- 3: the iss of the authorization response (RFC 9207) -------------------------------------


@pytest.mark.parametrize("promised, iss, why", [
    (True, "none", "lacks the promised iss"),
    (True, "https://evil.example", "does not match"),
    (True, "slash", "does not match"),
    (False, "https://evil.example", "does not match"),
    (False, "slash", "does not match"),
])
def test_bad_iss_is_refused_before_the_token_request(fault, store, promised, iss, why):
    server = fault(iss_supported=promised, iss=iss)
    with pytest.raises(AuthError) as caught:
        sign_in(server, store)
    assert_one_line(caught.value, why, "the response was not used")
    assert "code-" not in str(caught.value)
    assert server.hits("/authorize") == 1
    assert server.hits("/token") == 0
    assert_no_token_stored(store)


@pytest.mark.parametrize("promised, iss", [(False, "none"), (True, "issuer"), (False, "issuer")])
def test_good_or_unpromised_missing_iss_is_accepted(fault, store, promised, iss):
    server = fault(iss_supported=promised, iss=iss)
    record = sign_in(server, store)
    assert record.state == "signed_in" and record.issuer == server.issuer
    assert record.access_token in server.issued_tokens()
    assert server.hits("/token") == 1
    assert from_credentials(store.get_credentials(NAME)).access_token == record.access_token
    assert store.get_credentials(OTHER) == OTHER_CREDENTIALS


# -- 4: forged callbacks -------------------------------------------------------------------------


def _with_query(url: str, **changes) -> str:
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    for key, value in changes.items():
        if value is None:
            query.pop(key, None)
        else:
            query[key] = value
    return urlunsplit(parts._replace(query=urlencode(query)))


def test_forged_callbacks_are_ignored_and_the_real_one_signs_in(fault, store):
    server = fault()
    seen: dict = {}
    marker = "<script>MARKER-7731</script>"

    def agent(url, listener):
        # What an attacker's page (or another local process) could send the listener
        # before the real redirect arrives.
        authorize = requests.get(url, allow_redirects=False, timeout=HTTP_TIMEOUT)
        real = authorize.headers["Location"]
        forged_code = "code-forged"
        attempts = {
            "wrong state": requests.get(_with_query(real, state="forged-state", code=forged_code), timeout=HTTP_TIMEOUT),
            "missing state": requests.get(_with_query(real, state=None, code=forged_code), timeout=HTTP_TIMEOUT),
            "empty state": requests.get(_with_query(real, state="", code=forged_code), timeout=HTTP_TIMEOUT),
            "reflection": requests.get(_with_query(real, state=marker, code=marker, error_description=marker),
                                       timeout=HTTP_TIMEOUT),
            "POST": requests.post(real, data={"code": forged_code}, timeout=HTTP_TIMEOUT),
            "other path": requests.get(real.replace("/callback", "/callback2"), timeout=HTTP_TIMEOUT),
        }
        seen["statuses"] = {what: reply.status_code for what, reply in attempts.items()}
        seen["reflected"] = [what for what, reply in attempts.items()
                             if "MARKER-7731" in reply.text or any("MARKER-7731" in v for v in reply.headers.values())]
        seen["result before the real one"] = listener.result
        real_reply = requests.get(real, timeout=HTTP_TIMEOUT)
        seen["real"] = real_reply.status_code
        seen["real code"] = parse_qs(urlsplit(real).query)["code"][0]

    record = sign_in(server, store, agent=agent)
    assert seen["statuses"] == {"wrong state": 400, "missing state": 400, "empty state": 400, "reflection": 400,
                                "POST": 405, "other path": 404}
    assert seen["reflected"] == []
    assert seen["result before the real one"] is None  # the listener kept waiting
    assert seen["real"] == 200
    assert record.state == "signed_in" and record.access_token in server.issued_tokens()
    (token_request,) = server.matching("/token")
    assert token_request.form()["code"] == seen["real code"]  # the forged code never went anywhere


def test_pasted_url_with_a_wrong_state_is_not_taken_and_the_right_one_wins(fault, store):
    server = fault()
    holder: list[SignIn] = []
    taken: dict = {}

    def agent(url, listener):
        # The browser is elsewhere: the user pastes what it shows.
        real = requests.get(url, allow_redirects=False, timeout=HTTP_TIMEOUT).headers["Location"]
        attempt = holder[0]
        taken["wrong state"] = attempt.offer(_with_query(real, state="forged-state", code="code-forged"))
        taken["no state"] = attempt.offer(_with_query(real, state=None, code="code-forged"))
        taken["only a query"] = attempt.offer("code=code-forged&state=forged-state")
        taken["garbage"] = attempt.offer("open -a Calculator")
        taken["right"] = attempt.offer(real)
        taken["again"] = attempt.offer(real)

    record = sign_in(server, store, agent=agent, holder=holder)
    assert taken == {"wrong state": False, "no state": False, "only a query": False, "garbage": False,
                     "right": True, "again": False}
    assert record.state == "signed_in" and record.access_token in server.issued_tokens()
    assert server.hits("/token") == 1
    (token_request,) = server.matching("/token")
    assert token_request.form()["code"] != "code-forged"


# -- 5: authorization endpoints that are not web pages ---------------------------------------------


HOSTILE_ENDPOINTS = [
    "open -a Calculator",
    "file:///etc/passwd",
    "-oProxyCommand=touch /tmp/albedo-pwned",
    "javascript:alert(document.cookie)",
]


@pytest.mark.parametrize("endpoint", HOSTILE_ENDPOINTS)
def test_hostile_authorization_endpoint_never_reaches_the_agent(fault, store, no_browser, endpoint):
    server = fault(authorization_endpoint=endpoint)
    agent = RecordingAgent()
    with pytest.raises(AuthError) as caught:
        sign_in(server, store, agent=agent)
    assert_one_line(caught.value, "authorization_endpoint")
    assert agent.calls == [] and no_browser == []
    assert_nothing_after_discovery(server)
    assert_no_token_stored(store)


@pytest.mark.parametrize("endpoint", HOSTILE_ENDPOINTS)
def test_hostile_authorization_endpoint_never_opens_a_browser(fault, store, no_browser, endpoint):
    server = fault(authorization_endpoint=endpoint)
    with pytest.raises(AuthError) as caught:
        sign_in(server, store, agent=None, environ={})  # the default: the browser, allowed by the environment
    assert_one_line(caught.value, "authorization_endpoint")
    assert no_browser == []
    assert_nothing_after_discovery(server)


@pytest.mark.parametrize("endpoint", ["{base}/authorize\x0b--new-window", "{base}/author\x7fize", "{base}/authorize\x85"])
def test_http_endpoint_with_control_characters_is_refused_before_the_browser(fault, store, no_browser, endpoint):
    # These pass the metadata's URL check; the authorization URL's own check stops them.
    server = fault(authorization_endpoint=endpoint)
    agent = RecordingAgent()
    with pytest.raises(AuthError) as caught:
        sign_in(server, store, agent=agent)
    assert_one_line(caught.value, "the authorization URL cannot be opened")
    assert agent.calls == [] and no_browser == []
    assert server.hits("/authorize") == 0 and server.hits("/token") == 0
    assert_no_token_stored(store)


# -- 6: registration answers that must not be kept ------------------------------------------------


@pytest.mark.parametrize("mode, why", [
    ("huge_length", "more than 65536 bytes"),
    ("huge_chunked", "more than 65536 bytes"),
    ("not_json", "not JSON"),
    ("array", "not a JSON object"),
    ("no_client_id", "no client_id"),
])
def test_bad_registration_answer_keeps_nothing(fault, store, mode, why):
    server = fault(register=mode)
    agent = RecordingAgent()
    with pytest.raises(AuthError) as caught:
        sign_in(server, store, agent=agent)
    text = assert_one_line(caught.value, "client registration", why)
    assert "client-" not in text and "padding" not in text
    assert store.get_oauth_client(server.issuer, registered_redirect(server)) is None
    assert agent.calls == []
    assert server.hits("/authorize") == 0 and server.hits("/token") == 0
    assert_no_token_stored(store)


# -- 7: token answers that must not be stored ----------------------------------------------------


@pytest.mark.parametrize("mode, why", [
    ("huge_length", "more than 65536 bytes"),
    ("huge_chunked", "more than 65536 bytes"),
    ("not_json", "not a JSON object"),
    ("not_bearer", "not Bearer"),
    ("newline", "invalid access_token"),
])
def test_bad_token_answer_stores_nothing(fault, store, mode, why):
    server = fault(token=mode)
    with pytest.raises(AuthError) as caught:
        sign_in(server, store)
    text = assert_one_line(caught.value, why)
    assert "at-" not in text and "rt-" not in text and "X-Injected" not in text
    assert server.hits("/authorize") == 1 and server.hits("/token") == 1
    assert_no_token_stored(store)
    assert store.get_credentials(NAME) == Credentials()


# -- 8: redirects are answers, never followed ------------------------------------------------------


@pytest.mark.parametrize("endpoint, why", [
    ("prm", "the protected resource metadata its challenge names could not be read"),
    ("as_metadata", "no metadata was found"),
    ("register", "client registration was refused (HTTP 307)"),
    ("token", "HTTP 307"),
])
def test_redirects_to_a_canary_are_not_followed(fault, store, canary, endpoint, why):
    server = fault(redirects={endpoint: canary.url})
    with pytest.raises(AuthError) as caught:
        sign_in(server, store)
    assert_one_line(caught.value, why)
    assert canary.requests == []  # no code, verifier or metadata request went there
    assert_no_token_stored(store)
    if endpoint == "token":
        assert server.hits("/authorize") == 1 and server.hits("/token") == 1
    else:
        assert server.hits("/authorize") == 0 and server.hits("/token") == 0


# -- 9: a server that is never satisfied ----------------------------------------------------------


def _connect_with_authorizer(server, store, refresher, handles, tmp_path):
    auth = ServerAuth(config(server), store, refresh_by(refresher),
                      authorize=authorizer(store, environ=NO_BROWSER, agent=follow_redirect_agent(), port=0,
                                           lifetime=15))
    handle = ServerHandle.start(config(server), str(tmp_path), auth=auth)
    handles.append(handle)
    with pytest.raises(NeedsSignIn) as caught:
        handle.connect(timeout=60)
    handle.stop()
    return caught.value


def test_endless_401_gives_up_after_three_authorizations(fault, store, refresher, handles, tmp_path):
    server = fault(mcp="always_401")
    error = _connect_with_authorizer(server, store, refresher, handles, tmp_path)
    assert_one_line(error, "needs the user to sign in", "did not run", f"gave up after {MAX_AUTHORIZATIONS} sign-ins")
    authorizations = server.hits("/authorize")
    assert 1 <= authorizations <= MAX_AUTHORIZATIONS
    assert server.hits("/token") == authorizations  # each sign-in itself completed
    after = len(server.requests)
    assert handles[0].wait_closed(10)
    assert len(server.requests) == after  # nothing keeps asking once the request failed
    assert store.get_credentials(OTHER) == OTHER_CREDENTIALS


def test_endless_403_insufficient_scope_gives_up_after_three_authorizations(fault, store, refresher, handles, tmp_path):
    server = fault(mcp="always_403_scope", challenge_scope="mcp admin")
    error = _connect_with_authorizer(server, store, refresher, handles, tmp_path)
    assert_one_line(error, "needs the user to sign in", "did not run", f"gave up after {MAX_AUTHORIZATIONS} sign-ins")
    authorizations = server.hits("/authorize")
    assert 1 <= authorizations <= MAX_AUTHORIZATIONS
    assert server.hits("/token") == authorizations
    # The step-up asked for the challenged scope.
    assert "admin" in server.matching("/authorize")[-1].query.get("scope", "").split()
    after = len(server.requests)
    assert handles[0].wait_closed(10)
    assert len(server.requests) == after
    assert store.get_credentials(OTHER) == OTHER_CREDENTIALS


# -- 10: a 401 with a JSON-RPC error body is still "sign in" ---------------------------------------


def test_401_with_a_jsonrpc_error_body_needs_sign_in_without_oauth(fault, store, handles, tmp_path):
    server = fault(mcp="always_401", jsonrpc_401_body=True)
    handle = ServerHandle.start(config(server), str(tmp_path))
    handles.append(handle)
    with pytest.raises(NeedsSignIn) as caught:
        handle.connect(timeout=30)
    assert_one_line(caught.value, "needs the user to sign in", "did not run")
    assert server.discovery_hits() == 0 and server.hits("/authorize") == 0


def test_401_with_a_jsonrpc_error_body_needs_sign_in_with_server_auth(fault, store, refresher, handles, tmp_path):
    server = fault(mcp="always_401", jsonrpc_401_body=True)
    auth = ServerAuth(config(server), store, refresh_by(refresher))  # no interactive sign-in
    handle = ServerHandle.start(config(server), str(tmp_path), auth=auth)
    handles.append(handle)
    with pytest.raises(NeedsSignIn) as caught:
        handle.connect(timeout=30)
    assert_one_line(caught.value, "needs the user to sign in", "did not run")
    assert server.hits("/authorize") == 0 and server.hits("/token") == 0
    record = from_credentials(store.get_credentials(NAME))
    assert record is not None and record.state == "needs_sign_in" and not record.access_token
    assert store.get_credentials(OTHER) == OTHER_CREDENTIALS


def test_tool_call_answered_401_with_a_jsonrpc_error_did_not_run(fault, store, handles, tmp_path):
    server = fault(mcp="tools_401", jsonrpc_401_body=True)
    handle = ServerHandle.start(config(server), str(tmp_path))
    handles.append(handle)
    handle.connect(timeout=30)
    with pytest.raises(NeedsSignIn) as caught:
        handle.call_tool("echo", {})
    assert_one_line(caught.value, "needs the user to sign in", "tools/call did not run")


# -- 11: configured credentials are not an OAuth sign-in --------------------------------------------


def test_configured_bearer_refused_on_a_call_is_http_refused(fault, store, refresher, handles, tmp_path, monkeypatch):
    monkeypatch.setenv("HOSTILE_AUTH_TOKEN", "configured-secret")
    server = fault(mcp="tools_401")
    cfg = config(server, bearer_token_env_var="HOSTILE_AUTH_TOKEN")
    auth = ServerAuth(cfg, store, refresh_by(refresher),
                      authorize=authorizer(store, environ=NO_BROWSER, agent=RecordingAgent(), port=0, lifetime=15))
    handle = ServerHandle.start(cfg, str(tmp_path), auth=auth)
    handles.append(handle)
    handle.connect(timeout=30)
    with pytest.raises(HttpRefused) as caught:
        handle.call_tool("echo", {})
    assert not isinstance(caught.value, NeedsSignIn)
    text = assert_one_line(caught.value, "refused the configured credentials", "401")
    assert "configured-secret" not in text
    (call,) = [r for r in server.matching("/mcp") if r.body and b'"tools/call"' in r.body]
    assert call.headers["authorization"] == "Bearer configured-secret"
    assert server.discovery_hits() == 0
    assert_nothing_after_discovery(server)
    assert from_credentials(store.get_credentials(NAME)) is None


def test_configured_bearer_refused_everywhere_makes_no_oauth_requests(fault, store, refresher, handles, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setenv("HOSTILE_AUTH_TOKEN", "configured-secret")
    server = fault(mcp="always_401")
    cfg = config(server, bearer_token_env_var="HOSTILE_AUTH_TOKEN")
    auth = ServerAuth(cfg, store, refresh_by(refresher),
                      authorize=authorizer(store, environ=NO_BROWSER, agent=RecordingAgent(), port=0, lifetime=15))
    handle = ServerHandle.start(cfg, str(tmp_path), auth=auth)
    handles.append(handle)
    with pytest.raises(Unavailable) as caught:
        handle.connect(timeout=30)
    assert not isinstance(caught.value, NeedsSignIn)
    text = assert_one_line(caught.value, "401")
    assert "configured-secret" not in text
    assert server.discovery_hits() == 0
    assert_nothing_after_discovery(server)
    assert from_credentials(store.get_credentials(NAME)) is None


# -- extra: a hostile authorization error response ------------------------------------------------


@pytest.mark.parametrize("error, description", [
    ("access_denied", "Traceback (most recent call last):\n  File \"evil.py\", line 1\r\nX-Injected: 1"),
    ("access_denied\nTraceback (most recent call last):", None),
    ("access_denied", "\x1b[31mred\x1b[0m \u2028 next"),
])
def test_hostile_error_response_gives_a_one_line_error(fault, store, error, description):
    server = fault(authorize_error=error, error_description=description)
    with pytest.raises(AuthError) as caught:
        sign_in(server, store)
    assert_one_line(caught.value, "the authorization server refused")
    assert "\x1b" not in str(caught.value) and "\u2028" not in str(caught.value)
    assert server.hits("/token") == 0
    assert_no_token_stored(store)


def test_configured_bearer_refused_at_connect_says_the_credentials_were_refused(fault, store, handles, tmp_path,
                                                                                monkeypatch):
    monkeypatch.setenv("HOSTILE_AUTH_TOKEN", "configured-secret")
    server = fault(mcp="always_401")
    handle = ServerHandle.start(config(server, bearer_token_env_var="HOSTILE_AUTH_TOKEN"), str(tmp_path))
    handles.append(handle)
    with pytest.raises(HttpRefused) as caught:
        handle.connect(timeout=30)
    assert_one_line(caught.value, "refused the configured credentials")


# -- a 2025-03-26 server: no resource metadata, its origin is the authorization server ------------


def test_a_server_without_resource_metadata_signs_in_at_its_own_origin(fault, store):
    server = fault(no_prm=True)
    record = sign_in(server, store)
    assert record.state == "signed_in" and record.issuer == server.base and record.resource is None
    token = server.matching("/token")[0]
    authorize = server.matching("/authorize")[0]
    assert "resource" not in authorize.query and b"resource=" not in token.body  # that revision has no resource parameter
    assert store.get_credentials(OTHER) == OTHER_CREDENTIALS


def test_a_server_without_resource_metadata_whose_origin_names_another_issuer_is_refused(fault, store):
    server = fault(no_prm=True, as_issuer="https://evil.example")
    with pytest.raises(AuthError) as caught:
        sign_in(server, store)
    assert_one_line(caught.value, "not usable")
    assert server.hits("/register") == 0 and server.hits("/authorize") == 0 and server.hits("/token") == 0
    assert_no_token_stored(store)
