"""ServerHandle over streamable HTTP against the fault-injecting server (both eras).

tests/servers/fault_http_server.py runs in this process on 127.0.0.1 and records every
request and what happened (``requests``, ``events``); tests wait on those records with
bounded timeouts. A CanaryServer is a second listener that must hear nothing.
"""

from __future__ import annotations

import json
import logging
import threading

import pytest

from albedo_actors.connection.http import exchange as http_exchange, link as http_link, listen as http_listen
from albedo_actors.actors.client import CatalogueChanged
from albedo_actors.config import ServerConfig
from albedo_actors.demo.server import text_result
from albedo_actors.errors import ConfigError, SessionExpired, TimedOut, Unavailable, UnknownOutcome
from helpers import Owner, schema_validate, text_of
from servers.fault_http_server import CanaryServer, FaultHTTPServer, decode_header_value

WAIT = 10.0  # bound on every wait for something the server or client does


def http_config(server, **overrides) -> ServerConfig:
    return ServerConfig(name="f", type="http", url=server.url, **overrides)


def rpc(record):
    """The JSON-RPC message a recorded POST carried (None for GET/DELETE)."""
    return record.json() if record.method == "POST" and record.body else None


def posts_of(server, method: str):
    return [r for r in server.requests if r.method == "POST" and (rpc(r) or {}).get("method") == method]


def listener_threads(name: str = "f") -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"mcp-listen-{name}"]


def wait_listener_gone(name: str = "f") -> None:
    """Wait (bounded) until the handle's listening thread has ended for good."""
    for thread in listener_threads(name):
        thread.join(WAIT)
    assert listener_threads(name) == [], "the listening stream is still being retried"


def _started(server):
    server.start()
    return server


@pytest.fixture
def fault(http_fault):
    return http_fault


@pytest.fixture
def canary():
    server = _started(CanaryServer())
    yield server
    assert server.stop()


# -- redirects ------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [307, 302])
def test_a_redirect_is_not_followed_and_the_token_never_reaches_the_other_origin(fault, clients, canary, monkeypatch, status):
    monkeypatch.setenv("MCP_TEST_TOKEN", "canary-token-8c1f")
    server = fault(redirect_to=canary.url + "/mcp", redirect_status=status)
    handle = clients.start(http_config(server, bearer_token_env_var="MCP_TEST_TOKEN"))

    with pytest.raises(Unavailable, match="redirects are not followed") as info:
        handle.connect()
    assert f"answered {status} redirecting to {canary.url}/mcp" in str(info.value)
    handle.stop()
    # The configured origin got the token; the origin it pointed to got nothing at all.
    probe = server.wait_for_request(lambda r: r.method == "POST")
    assert probe.header("Authorization") == "Bearer canary-token-8c1f"
    assert server.wait_for_event("redirected")["status"] == status
    assert canary.hits == []


def test_a_redirect_of_a_legacy_session_answers_nothing_to_the_other_origin_not_even_delete(fault, clients, canary, monkeypatch):
    monkeypatch.setenv("MCP_TEST_TOKEN", "canary-token-55aa")
    server = fault(era="legacy")
    handle = clients.start(http_config(server, bearer_token_env_var="MCP_TEST_TOKEN"))
    assert handle.connect().era == "legacy"

    server.configure(redirect_to=canary.url + "/mcp", redirect_status=308)
    with pytest.raises(UnknownOutcome, match="answered 308 redirecting to .*; redirects are not followed"):
        handle.call_tool("echo", {"text": "where to?"})
    handle.stop()  # DELETE, redirected too
    assert server.wait_for_request(lambda r: r.method == "DELETE").header("Authorization") == "Bearer canary-token-55aa"
    assert canary.hits == []


# -- oversized bodies --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["content-length", "chunked"])
def test_an_oversized_body_is_refused_at_16_mib_and_the_connection_stays_usable(fault, clients, mode):
    server = fault(oversized=mode)
    handle = clients.start(http_config(server))
    handle.connect()

    with pytest.raises(UnknownOutcome, match="16 MiB") as info:
        handle.call_tool("echo", {"text": "big"})
    assert "\n" not in str(info.value)
    assert server.wait_for_event("oversized", timeout=WAIT)["mode"] == mode

    server.configure(oversized=None)
    assert text_of(handle.call_tool("echo", {"text": "small again"})) == "small again"
    status = handle.status()
    assert status["connected"] and status["attempt"] == 1  # the same connection, not a new dial


# -- streams cut mid-event ----------------------------------------------------------------------------


def test_a_modern_stream_cut_mid_event_is_an_unknown_outcome_and_the_call_is_not_retried(fault, clients):
    server = fault(cut_stream=20)
    handle = clients.start(http_config(server))
    assert handle.connect().era == "modern"

    with pytest.raises(UnknownOutcome, match=r"2026-07-28 streams do not resume\); it may or may not have run"):
        handle.call_tool("echo", {"text": "cut"})
    assert server.wait_for_event("stream_cut", timeout=WAIT)["method"] == "tools/call"
    # Nothing after the cut: the next call is the next thing the server sees.
    server.configure(cut_stream=None)
    assert text_of(handle.call_tool("echo", {"text": "whole"})) == "whole"
    assert [rpc(r)["params"]["arguments"]["text"] for r in posts_of(server, "tools/call")] == ["cut", "whole"]
    assert [r for r in server.requests if r.method == "GET"] == []


def test_a_legacy_stream_without_event_ids_cut_mid_event_is_an_unknown_outcome(fault, clients):
    server = fault(era="legacy", cut_stream=20)
    handle = clients.start(http_config(server))
    assert handle.connect().era == "legacy"

    with pytest.raises(UnknownOutcome, match=r"could not be resumed \(no event ids\); it may or may not have run"):
        handle.call_tool("echo", {"text": "cut"})
    server.wait_for_event("stream_cut", timeout=WAIT)
    server.configure(cut_stream=None)
    assert text_of(handle.call_tool("echo", {"text": "whole"})) == "whole"
    assert [rpc(r)["params"]["arguments"]["text"] for r in posts_of(server, "tools/call")] == ["cut", "whole"]
    assert [r for r in server.requests if r.header("Last-Event-ID") is not None] == []


def test_a_legacy_stream_with_event_ids_cut_mid_event_is_resumed_and_the_call_succeeds(fault, clients):
    server = fault(era="legacy", event_ids=True, cut_stream=20)
    handle = clients.start(http_config(server))
    assert handle.connect().era == "legacy"

    result = handle.call_tool("echo", {"text": "resumed"})
    schema_validate("2025-11-25", "CallToolResult", result)
    assert text_of(result) == "resumed"
    assert len(posts_of(server, "tools/call")) == 1  # resumed, never sent again
    resume = server.wait_for_request(lambda r: r.method == "GET" and r.header("Last-Event-ID") is not None)
    session = server.sessions[0]
    assert resume.header("Mcp-Session-Id") == session
    assert resume.header("MCP-Protocol-Version") == "2025-11-25"
    resumed = server.wait_for_event("resumed")
    assert (resumed["session"], resumed["last_event_id"]) == (session, resume.header("Last-Event-ID"))
    assert resumed["replayed"] >= 1


@pytest.mark.parametrize("retry", ["0", "99999999999999999999999"])
def test_a_resumption_waits_the_clamped_retry_of_the_stream_and_resumes_once(fault, clients, monkeypatch, retry):
    # The ceiling is made tiny: were an absurd retry not clamped to it, the call
    # would wait far beyond its timeout.
    monkeypatch.setattr(http_exchange, "RESUME_MAX_MS", 20)
    server = fault(era="legacy", event_ids=True, cut_stream=20, retry=retry)
    handle = clients.start(http_config(server, call_timeout_ms=20_000))
    handle.connect()

    assert text_of(handle.call_tool("echo", {"text": f"retry {retry[:5]}"})) == f"retry {retry[:5]}"
    resumes = [r for r in server.requests if r.method == "GET" and r.header("Last-Event-ID") is not None]
    assert len(resumes) == 1


# -- sessions ----------------------------------------------------------------------------------------


def test_a_session_404_fails_the_call_and_the_next_call_opens_a_new_session_without_the_old_id(fault, clients):
    server = fault(era="legacy")
    handle = clients.start(http_config(server))
    handle.connect()
    [old] = server.sessions
    server.wait_for_event("get_opened", session=old, timeout=WAIT)

    server.expire_session(old)  # its GET stream ends too
    mark = len(server.requests)
    with pytest.raises(SessionExpired, match=r"its session ended \(HTTP 404\); tools/call did not run"):
        handle.call_tool("echo", {"text": "into the void"})

    assert text_of(handle.call_tool("echo", {"text": "new session"})) == "new session"
    [new] = server.sessions
    assert new != old
    after = server.requests[mark:]
    refused = [r for r in after if r.method == "POST" and r.header("Mcp-Session-Id") == old]
    assert [rpc(r)["method"] for r in refused] == ["tools/call"]
    later = after[after.index(refused[0]) + 1 :]
    # A new dial: the handshake without a session (the era found is cached per origin,
    # so no probe: issue 11), then only the new id.
    assert [rpc(r)["method"] for r in later[:1]] == ["initialize"]
    assert [r.header("Mcp-Session-Id") for r in later[:1]] == [None]
    assert {r.header("Mcp-Session-Id") for r in later[1:]} == {new}
    assert handle.status()["attempt"] == 2


def test_a_session_404_during_discovery_redials_once_at_once_and_connect_succeeds(fault, clients):
    # The first session expires on its third POST (resources/list); later sessions do not.
    server = fault(era="legacy", session_404_after=2)

    def first_only(kind, entry):
        if kind == "event" and entry["event"] == "session_expired":
            server.configure(session_404_after=None)

    server.on_record = first_only
    handle = clients.start(http_config(server))
    catalogue = handle.connect()

    assert catalogue.era == "legacy" and {"echo", "add"} <= {tool["name"] for tool in catalogue.tools}
    created = [e["session"] for e in server.events if e["event"] == "session_created"]
    expired = [e["session"] for e in server.events if e["event"] == "session_expired"]
    assert len(created) == 2 and expired == created[:1]
    requests = server.requests
    refused = [r for r in requests if r.header("Mcp-Session-Id") == created[0]]
    assert rpc(refused[-1])["method"] == "resources/list"
    after = requests[requests.index(refused[-1]) + 1 :]
    # The new dial: probe, then the handshake of the second session.
    assert [rpc(r)["method"] for r in after[:2]] == ["server/discover", "initialize"]
    assert created[0] not in {r.header("Mcp-Session-Id") for r in after}
    assert text_of(handle.call_tool("echo", {"text": "second session"})) == "second session"


# -- the listening stream ------------------------------------------------------------------------------


def test_a_listening_stream_refused_with_405_is_not_retried(fault, clients):
    server = fault(era="legacy", no_get=True)
    handle = clients.start(http_config(server))
    handle.connect()

    server.wait_for_request(lambda r: r.method == "GET", timeout=WAIT)
    wait_listener_gone()
    assert text_of(handle.call_tool("echo", {"text": "still fine"})) == "still fine"
    assert len([r for r in server.requests if r.method == "GET"]) == 1
    assert handle.status()["connected"]


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_a_listening_stream_that_ends_at_once_is_reopened_and_given_up_after_eight_quiet_attempts(
    fault, clients, monkeypatch, era
):
    monkeypatch.setattr(http_listen, "LISTEN_FIRST_WAIT", 0.001)
    monkeypatch.setattr(http_listen, "LISTEN_MAX_WAIT", 0.004)
    server = fault(era=era, listen_ends_at_once=True)
    handle = clients.start(http_config(server))
    handle.connect()

    wait_listener_gone()
    if era == "legacy":
        attempts = [r for r in server.requests if r.method == "GET"]
        assert len([e for e in server.events if e["event"] == "get_closed_at_once"]) == 8
    else:
        attempts = posts_of(server, "subscriptions/listen")
        assert len([e for e in server.events if e["event"] == "listen_opened"]) == 8
    assert len(attempts) == 8
    assert text_of(handle.call_tool("echo", {"text": "quiet"})) == "quiet"
    assert handle.status()["connected"]


@pytest.mark.parametrize("retry", ["0", "99999999999999999999999", "-5", "soon"])
def test_the_retry_of_a_listening_stream_is_validated_and_clamped_and_never_makes_a_busy_loop(
    fault, clients, monkeypatch, retry
):
    # Tiny waits keep the test fast; an absurd retry not clamped to LISTEN_MAX_WAIT would
    # stall the reopening far beyond the bounded wait below.
    monkeypatch.setattr(http_listen, "LISTEN_FIRST_WAIT", 0.001)
    monkeypatch.setattr(http_listen, "LISTEN_MAX_WAIT", 0.004)
    server = fault(era="legacy", listen_ends_at_once=True, retry=retry)
    handle = clients.start(http_config(server))
    handle.connect()

    wait_listener_gone()
    assert len([r for r in server.requests if r.method == "GET"]) == 8


# -- timeouts and cancellation ------------------------------------------------------------------------


class SilentServer(FaultHTTPServer):
    """With ``no_headers``, also notices when the client leaves (event ``client_closed``)."""

    def _handle_http(self, h, record):
        if not self.options.no_headers:
            super()._handle_http(h, record)
            return
        self._record_event("no_headers", method=h.command)
        if self._wait_or_gone(h, None) == "gone":
            self._record_event("client_closed", method=h.command, body=record.body.decode())
        h.close_connection = True


def test_a_server_that_never_sends_headers_times_out_the_call_and_its_exchange_is_closed(fault, clients):
    server = fault(cls=SilentServer)
    handle = clients.start(http_config(server, call_timeout_ms=300))
    handle.connect()

    server.configure(no_headers=True)
    with pytest.raises(TimedOut, match=r"tools/call got no answer within 0.3 s; it was cancelled"):
        handle.call_tool("echo", {"text": "anyone?"})
    closed = server.wait_for_event("client_closed", timeout=WAIT)
    assert json.loads(closed["body"])["params"]["name"] == "echo"
    server.configure(no_headers=False)
    assert text_of(handle.call_tool("echo", {"text": "there you are"})) == "there you are"


def test_stopping_the_client_interrupts_a_notification_the_server_never_answers(fault, clients, monkeypatch):
    # A legacy timeout sends notifications/cancelled; here the server never answers that
    # POST either. Stopping the client must interrupt it rather than wait for its read
    # timeout (made an hour here, so that waiting for it cannot pass the bounded join).
    monkeypatch.setattr(http_link, "NOTIFY_TIMEOUT", 3600.0)
    monkeypatch.setattr(http_link, "DELETE_TIMEOUT", 0.2)  # the DELETE is not answered either
    server = fault(cls=SilentServer, era="legacy")
    handle = clients.start(http_config(server, call_timeout_ms=300))
    handle.connect()

    server.configure(no_headers=True)
    with pytest.raises(TimedOut):
        handle.call_tool("echo", {"text": "anyone?"})
    server.wait_for_request(lambda r: (rpc(r) or {}).get("method") == "notifications/cancelled", timeout=WAIT)
    stopper = threading.Thread(target=handle.stop, name="test-stopper")
    stopper.start()
    stopper.join(WAIT)
    assert not stopper.is_alive(), "stop() is still waiting for the unanswered notifications/cancelled"
    server.wait_for_event(
        lambda e: e["event"] == "client_closed" and '"notifications/cancelled"' in e.get("body", ""), timeout=WAIT
    )


def test_a_modern_call_that_times_out_is_cancelled_by_closing_its_stream(fault, clients):
    server = fault()
    handle = clients.start(http_config(server, call_timeout_ms=300))
    assert handle.connect().era == "modern"

    with pytest.raises(TimedOut, match="it was cancelled"):
        handle.call_tool("hang")
    [hang] = [r for r in posts_of(server, "tools/call") if rpc(r)["params"]["name"] == "hang"]
    closed = server.wait_for_event("client_closed", request_id=rpc(hang)["id"], timeout=WAIT)
    assert closed["era"] == "modern"
    assert text_of(handle.call_tool("echo", {"text": "after"})) == "after"
    assert posts_of(server, "notifications/cancelled") == []
    assert [e for e in server.events if e["event"] == "cancelled"] == []


def test_a_legacy_call_that_times_out_is_cancelled_with_notifications_cancelled(fault, clients):
    server = fault(era="legacy")
    handle = clients.start(http_config(server, call_timeout_ms=300))
    assert handle.connect().era == "legacy"

    with pytest.raises(TimedOut, match="it was cancelled"):
        handle.call_tool("hang")
    [hang] = [r for r in posts_of(server, "tools/call") if rpc(r)["params"]["name"] == "hang"]
    request_id = rpc(hang)["id"]
    server.wait_for_event("cancelled", request_id=request_id, timeout=WAIT)
    [notice] = posts_of(server, "notifications/cancelled")
    schema_validate("2025-11-25", "CancelledNotification", rpc(notice))
    assert rpc(notice)["params"]["requestId"] == request_id
    assert notice.header("Mcp-Session-Id") == server.sessions[0]
    assert text_of(handle.call_tool("echo", {"text": "after"})) == "after"


# -- headers ----------------------------------------------------------------------------------------------


def test_an_older_session_keeps_a_tool_whose_x_mcp_header_is_invalid(fault, clients):
    # Only a modern HTTP link sends Mcp-Param headers (2026-07-28 server/tools), so only
    # it leaves such a tool out; a 2025-11-25 session lists it and can call it.
    server = fault(era="legacy")
    handle = clients.start(http_config(server))
    catalogue = handle.connect()
    assert catalogue.era == "legacy" and "bad_header" in {tool["name"] for tool in catalogue.tools}
    assert not any("x-mcp-header" in warning for warning in catalogue.warnings)
    assert json.loads(text_of(handle.call_tool("bad_header", {"amount": 3}))) == {"amount": 3}
    assert not any(name.lower().startswith("mcp-param-") for post in posts_of(server, "tools/call") for name, _ in post.headers)


def test_every_modern_post_carries_the_standard_and_parameter_headers(fault, clients, caplog):
    caplog.set_level(logging.WARNING, logger="albedo_actors")
    server = fault()
    handle = clients.start(http_config(server))
    catalogue = handle.connect()

    # The tool with an invalid x-mcp-header is left out, with a warning naming it.
    names = {tool["name"] for tool in catalogue.tools}
    assert "bad_header" not in names and {"echo", "region", "hang"} <= names
    assert any("'bad_header'" in warning and "x-mcp-header" in warning for warning in catalogue.warnings)
    assert any("'bad_header'" in record.getMessage() for record in caplog.records if record.levelno == logging.WARNING)

    handle.call_tool("echo", {"text": "plain"})
    handle.call_tool("add", {"a": 1, "b": 2})
    values = ("eu-west-1", "Zürich", "eu\r\nX-Injected: 1")
    regions = {value: json.loads(text_of(handle.call_tool("region", {"region": value}))) for value in values}
    assert regions["eu-west-1"] == {"region": "eu-west-1", "header": "eu-west-1", "decoded": "eu-west-1"}
    for value in ("Zürich", "eu\r\nX-Injected: 1"):
        assert regions[value]["header"].startswith("=?base64?") and regions[value]["header"].endswith("?=")
        assert regions[value]["decoded"] == value
    assert json.loads(text_of(handle.call_tool("region", {})))["header"] is None
    handle.read_resource("demo://readme")
    handle.read_resource("demo://greeting/Zoë")
    handle.get_prompt("greet", {"name": "Ada"})

    posts = [r for r in server.requests if r.method == "POST"]
    assert {rpc(r)["method"] for r in posts} >= {"server/discover", "tools/list", "tools/call", "resources/read", "prompts/get"}
    for post in posts:
        message = rpc(post)
        assert post.header("MCP-Protocol-Version") == "2026-07-28"
        assert post.header("Mcp-Method") == message["method"]
        key = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}.get(message["method"])
        if key is not None:
            assert decode_header_value(post.header("Mcp-Name")) == message["params"][key]
        else:
            assert post.header("Mcp-Name") is None
    greeting = next(r for r in posts_of(server, "resources/read") if rpc(r)["params"]["uri"].endswith("Zoë"))
    assert greeting.header("Mcp-Name").startswith("=?base64?")
    # No header anywhere was split or smuggled in by a line break.
    for record in server.requests:
        for name, value in record.headers:
            assert "\r" not in value and "\n" not in value and "\r" not in name and "\n" not in name
        assert record.header("X-Injected") is None


def test_a_legacy_session_sends_its_id_and_version_on_every_request_after_initialize(fault, clients):
    server = fault(era="legacy")
    handle = clients.start(http_config(server))
    assert handle.connect().protocol_version == "2025-11-25"
    handle.call_tool("echo", {"text": "legacy"})
    server.wait_for_request(lambda r: r.method == "GET", timeout=WAIT)
    handle.stop()

    [session] = [e["session"] for e in server.events if e["event"] == "session_created"]
    requests = server.requests
    methods = [(r.method, (rpc(r) or {}).get("method")) for r in requests]
    start = methods.index(("POST", "initialize"))
    assert requests[start].header("Mcp-Session-Id") is None
    later = requests[start + 1 :]
    assert {r.header("Mcp-Session-Id") for r in later} == {session}
    assert {r.header("MCP-Protocol-Version") for r in later} == {"2025-11-25"}
    assert {r.method for r in later} == {"POST", "GET", "DELETE"}
    # notifications/initialized comes right after initialize, before any other request.
    assert methods[start + 1] == ("POST", "notifications/initialized")
    assert methods.index(("POST", "notifications/initialized")) < methods.index(("POST", "tools/list"))
    assert methods[-1] == ("DELETE", None)
    assert server.wait_for_event("session_deleted")["session"] == session


class GrowingServer(FaultHTTPServer):
    """Each list_changed it announces to a legacy session comes with one more tool."""

    def _push_to_get(self, session, message):
        if message.get("method") == "notifications/tools/list_changed":
            with session.engine.lock:
                name = f"grown_{len(session.engine.tools)}"
                session.engine.add_tool(name, lambda request, args, name=name: text_result(name))
        super()._push_to_get(session, message)


def test_a_list_changed_on_the_legacy_get_stream_rediscovers_the_catalogue(fault, clients):
    server = fault(cls=GrowingServer, era="legacy")
    owner = Owner.start()
    try:
        handle = clients.start(http_config(server), owner=owner)
        first = handle.connect()
        events = owner.proxy().events.get(timeout=WAIT)
        assert events.get(timeout=WAIT) == CatalogueChanged("f", first)
        [session] = server.sessions
        server.wait_for_event("get_opened", session=session, timeout=WAIT)
        # list_changed after the next request of the session (its discovery made the others).
        done = len([r for r in server.requests if r.method == "POST" and "id" in (rpc(r) or {}) and r.header("Mcp-Session-Id")])
        server.configure(list_changed_every=done + 1)

        handle.call_tool("echo", {"text": "change it"})
        event = events.get(timeout=WAIT)
        assert isinstance(event, CatalogueChanged) and event.server == "f"
        server.configure(list_changed_every=None)
        added = {tool["name"] for tool in event.catalogue.tools} - {tool["name"] for tool in first.tools}
        assert len(added) == 1
        assert server.wait_for_event("list_changed", session=session)["target"] == "get"
        assert len(posts_of(server, "tools/list")) == 2
        assert handle.catalogue() == event.catalogue
        assert text_of(handle.call_tool(added.pop(), {})).startswith("grown_")
    finally:
        owner.stop()


# -- credentials and the environment ---------------------------------------------------------------------


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_the_bearer_token_and_named_headers_arrive_on_every_request(fault, clients, monkeypatch, era):
    monkeypatch.setenv("MCP_TEST_TOKEN", "tok-123")
    monkeypatch.setenv("MCP_TEST_KEY", "key-456")
    server = fault(era=era)
    config = http_config(server, bearer_token_env_var="MCP_TEST_TOKEN", headers={"X-Api-Key": "MCP_TEST_KEY"})
    handle = clients.start(config)
    handle.connect()
    handle.call_tool("echo", {"text": "with credentials"})
    if era == "legacy":
        server.wait_for_request(lambda r: r.method == "GET", timeout=WAIT)
    else:
        server.wait_for_event("listen_opened", timeout=WAIT)
    handle.stop()

    requests = server.requests
    kinds = {r.method for r in requests}
    assert kinds == ({"POST", "GET", "DELETE"} if era == "legacy" else {"POST"})
    assert {r.header("Authorization") for r in requests} == {"Bearer tok-123"}
    assert {r.header("X-Api-Key") for r in requests} == {"key-456"}


def test_a_missing_bearer_variable_is_a_config_error_naming_it(fault, clients, monkeypatch):
    monkeypatch.delenv("MCP_TEST_MISSING_TOKEN", raising=False)
    server = fault()
    handle = clients.start(http_config(server, bearer_token_env_var="MCP_TEST_MISSING_TOKEN"))
    with pytest.raises(ConfigError, match=r"\$MCP_TEST_MISSING_TOKEN, which is not set"):
        handle.connect()
    assert server.requests == []


def test_the_environments_proxy_settings_are_ignored(fault, clients, canary, monkeypatch):
    proxy = canary.url
    for variable in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(variable, proxy)
    for variable in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(variable, raising=False)
    server = fault()
    handle = clients.start(http_config(server))
    handle.connect()
    assert text_of(handle.call_tool("echo", {"text": "direct"})) == "direct"
    assert canary.hits == []


def test_a_netrc_file_is_not_read(fault, clients, monkeypatch, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    netrc = home / ".netrc"
    netrc.write_text("machine 127.0.0.1 login someone password netrc-secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("NETRC", str(netrc))
    server = fault(era="legacy")
    handle = clients.start(http_config(server))
    handle.connect()
    handle.call_tool("echo", {"text": "no netrc"})
    server.wait_for_request(lambda r: r.method == "GET", timeout=WAIT)
    handle.stop()
    assert {r.method for r in server.requests} == {"POST", "GET", "DELETE"}
    assert [r.header("Authorization") for r in server.requests if r.header("Authorization")] == []


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_a_call_its_caller_gives_up_is_cancelled_as_a_timeout_cancels_it(fault, clients, era):
    """Issue 24: an awaited call that is cancelled (here its Cancel, from another thread)
    ends at once and is cancelled the way a timeout does: the modern stream is closed,
    a legacy session is sent notifications/cancelled."""
    from albedo_actors.connection.progress import Cancel

    server = fault(era=era)
    handle = clients.start(http_config(server, call_timeout_ms=60_000))
    assert handle.connect().era == era
    cancel, outcome = Cancel(), []

    def call() -> None:
        try:
            handle.call_tool("hang", cancel=cancel)
        except TimedOut as exc:
            outcome.append(exc)

    caller = threading.Thread(target=call, name="test-caller")
    caller.start()
    try:
        server.wait_for_request(lambda r: (rpc(r) or {}).get("method") == "tools/call", timeout=WAIT)
        cancel.cancel()
    finally:
        caller.join(WAIT)
    assert not caller.is_alive() and len(outcome) == 1 and "given up by its caller" in str(outcome[0])
    [hang] = [r for r in posts_of(server, "tools/call") if rpc(r)["params"]["name"] == "hang"]
    request_id = rpc(hang)["id"]
    if era == "modern":
        assert server.wait_for_event("client_closed", request_id=request_id, timeout=WAIT)["era"] == "modern"
        assert posts_of(server, "notifications/cancelled") == []
    else:
        server.wait_for_event("cancelled", request_id=request_id, timeout=WAIT)
        [notice] = posts_of(server, "notifications/cancelled")
        assert rpc(notice)["params"]["requestId"] == request_id
    assert text_of(handle.call_tool("echo", {"text": "after"})) == "after"
