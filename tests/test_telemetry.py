"""OpenTelemetry (issue 28): spans, trace context on every request, metrics, log fields.

Against real servers that record what arrives: the stdio fault server (``--record``,
every line it reads) and the HTTP fault server (every request, headers and body). The
SDK's in-memory span exporter and metric reader are installed once for this process
(the API allows one global provider).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
from opentelemetry import baggage, context, trace
from opentelemetry.trace import SpanKind, StatusCode

import albedo_actors
from albedo_actors.config import ServerConfig
from albedo_actors.wire import telemetry
from helpers import fault_config, read_record, text_of
from otel_kit import EXPORTER, counted, points_of, recording


@pytest.fixture
def otel():
    """The SDK with in-memory export (tests/otel_kit.py); each test starts with no spans."""
    with recording() as exporter:
        yield exporter


def spans(name: str) -> list:
    return [span for span in EXPORTER.get_finished_spans() if span.name == name]


def traceparent_of(span) -> str:
    context_ = span.get_span_context()
    return f"00-{context_.trace_id:032x}-{context_.span_id:016x}-{context_.trace_flags:02x}"


def host_span():
    return trace.get_tracer("host").start_as_current_span("host work")


def test_a_stdio_tool_call_is_one_client_span_under_the_hosts_and_its_context_reaches_the_server(otel, clients, tmp_path):
    record = tmp_path / "received.jsonl"
    handle = clients.start(fault_config("f", "--record", str(record)))
    assert handle.connect().era == "modern"
    with host_span() as parent:
        assert text_of(handle.call_tool("echo", {"text": "hi"})) == "hi"
    [span] = spans("tools/call echo")
    assert span.kind is SpanKind.CLIENT
    assert span.parent is not None and span.parent.span_id == parent.get_span_context().span_id
    assert span.context.trace_id == parent.get_span_context().trace_id
    attributes = dict(span.attributes)
    assert attributes["mcp.method.name"] == "tools/call"
    assert attributes["gen_ai.tool.name"] == "echo"
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["network.transport"] == "pipe"
    assert attributes["mcp.protocol.version"] == handle.status()["version"]
    assert "mcp.session.id" not in attributes
    assert "error.type" not in attributes and span.status.status_code is not StatusCode.ERROR
    assert "gen_ai.tool.call.arguments" not in attributes, "arguments recorded without the host's opt-in"
    received = {message["method"]: message for message in read_record(record) if "id" in message}
    call = received["tools/call"]
    assert attributes["jsonrpc.request.id"] == str(call["id"])
    assert call["params"]["_meta"]["traceparent"] == traceparent_of(span)
    # The opening and the list methods carry trace context too (of their own spans).
    for method in ("server/discover", "tools/list"):
        meta = received[method]["params"]["_meta"]
        assert meta["traceparent"].startswith("00-") and len(meta["traceparent"]) == 55, method
        assert spans(method), f"no span for {method}"


def test_a_legacy_stdio_session_carries_trace_context_on_initialize_and_baggage(otel, clients, tmp_path):
    record = tmp_path / "received.jsonl"
    handle = clients.start(fault_config("f", "--era", "legacy", "--record", str(record)))
    assert handle.connect().era == "legacy"
    token = context.attach(baggage.set_baggage("tenant", "blue"))
    try:
        with host_span():
            handle.call_tool("echo", {"text": "hi"})
    finally:
        context.detach(token)
    received = {message["method"]: message for message in read_record(record) if "id" in message}
    assert received["initialize"]["params"]["_meta"]["traceparent"].startswith("00-")
    meta = received["tools/call"]["params"]["_meta"]
    assert meta["baggage"] == "tenant=blue"
    [span] = spans("tools/call echo")
    assert meta["traceparent"] == traceparent_of(span)


def test_an_is_error_result_is_a_tool_error_and_a_json_rpc_error_is_its_code(otel, clients):
    handle = clients.start(fault_config("f"))
    handle.connect()
    result = handle.call_tool("echo", {"text": 5})
    assert result.get("isError") is True
    [span] = spans("tools/call echo")
    assert span.attributes["error.type"] == "tool_error"
    assert span.status.status_code is StatusCode.ERROR
    with pytest.raises(albedo_actors.errors.RemoteError) as raised:
        handle.get_prompt("no-such-prompt")
    handle.read_resource("demo://readme")
    [span] = spans("resources/read")
    assert span.attributes["mcp.resource.uri"] == "demo://readme"
    [span] = spans("prompts/get no-such-prompt")
    assert span.attributes["gen_ai.prompt.name"] == "no-such-prompt"
    assert span.attributes["error.type"] == str(raised.value.code)
    assert span.attributes["rpc.response.status_code"] == str(raised.value.code)
    assert span.status.status_code is StatusCode.ERROR


def test_arguments_and_results_are_recorded_only_when_the_host_opts_in(otel, clients):
    handle = clients.start(fault_config("f"))
    handle.connect()
    telemetry.configure(record_content=True)
    handle.call_tool("echo", {"text": "\x1b[2Jshown"})
    [span] = spans("tools/call echo")
    assert span.attributes["gen_ai.tool.call.arguments"] == '{"text": "\\u001b[2Jshown"}'
    assert "shown" in span.attributes["gen_ai.tool.call.result"]
    assert "\x1b" not in span.attributes["gen_ai.tool.call.result"], "a control character reached an attribute"


def test_recorded_arguments_and_results_never_hold_the_servers_secret_values(otel, clients, monkeypatch):
    secret = "otel-env-secret-7d1c2e"
    monkeypatch.setenv("OTEL_TEST_TOKEN_VAR", secret)
    handle = clients.start(fault_config("f", env={"TOKEN": "OTEL_TEST_TOKEN_VAR"}))
    handle.connect()
    telemetry.configure(record_content=True)
    assert secret in text_of(handle.call_tool("echo", {"text": f"the token is {secret}"}))  # it did reach the server
    [span] = spans("tools/call echo")
    for key in ("gen_ai.tool.call.arguments", "gen_ai.tool.call.result"):
        assert secret not in span.attributes[key] and "***" in span.attributes[key], key
    handle.call_tool("env")  # the server's environment, its TOKEN included
    [span] = spans("tools/call env")
    assert secret not in span.attributes["gen_ai.tool.call.result"]


def test_an_http_servers_header_values_are_its_secrets():
    assert telemetry.header_secrets({"Authorization": "Bearer tok-123", "X-Key": "k-456"}) == (
        "Bearer tok-123", "tok-123", "k-456")


def test_the_merge_option_puts_our_attributes_on_the_hosts_tool_span(otel, clients, tmp_path):
    record = tmp_path / "received.jsonl"
    handle = clients.start(fault_config("f", "--record", str(record)))
    handle.connect()
    telemetry.configure(merge_tool_span=True)
    with trace.get_tracer("host").start_as_current_span("execute_tool echo") as host:
        handle.call_tool("echo", {"text": "hi"})
    assert spans("tools/call echo") == [], "a second span was made"
    [merged] = spans("execute_tool echo")
    assert merged.attributes["gen_ai.tool.name"] == "echo"
    assert merged.attributes["mcp.method.name"] == "tools/call"
    call = [m for m in read_record(record) if m.get("method") == "tools/call"][0]
    assert call["params"]["_meta"]["traceparent"] == traceparent_of(host)


def test_disabled_nothing_is_recorded_nor_sent(otel, clients, tmp_path):
    record = tmp_path / "received.jsonl"
    handle = clients.start(fault_config("f", "--record", str(record)))
    handle.connect()
    telemetry.configure(enabled=False)
    with host_span():
        handle.call_tool("echo", {"text": "hi"})
    assert spans("tools/call echo") == []
    call = [m for m in read_record(record) if m.get("method") == "tools/call"][0]
    assert "traceparent" not in call["params"].get("_meta", {})


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_over_http_the_trace_context_is_in_meta_and_in_the_headers(otel, clients, http_fault, era):
    server = http_fault(era=era)
    handle = clients.start(ServerConfig(name="h", type="http", url=server.url))
    assert handle.connect().era == era
    with host_span():
        handle.call_tool("echo", {"text": "hi"})
    [span] = spans("tools/call echo")
    expected = traceparent_of(span)
    [request] = [r for r in server.requests if r.method == "POST" and r.body and r.json().get("method") == "tools/call"]
    assert request.header("traceparent") == expected
    assert request.json()["params"]["_meta"]["traceparent"] == expected
    opening = [r for r in server.requests if r.method == "POST" and r.body
               and r.json().get("method") in ("server/discover", "initialize")]
    assert opening and all(r.header("traceparent", "").startswith("00-") for r in opening)
    attributes = dict(span.attributes)
    assert attributes["network.transport"] == "tcp"
    assert attributes["server.address"] == "127.0.0.1"
    assert attributes["server.port"] == int(server.url.split(":")[2].split("/")[0])
    if era == "legacy":
        assert attributes["mcp.session.id"], "a session-era call without its session id"
    else:
        assert "mcp.session.id" not in attributes
        # The held-open listen (sent by the link's listener thread) carries it too.
        [listen] = [r for r in server.requests if r.method == "POST" and r.body
                    and r.json().get("method") == "subscriptions/listen"]
        assert listen.header("traceparent", "").startswith("00-")
        assert listen.json()["params"]["_meta"]["traceparent"] == listen.header("traceparent")


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_nothing_a_server_sends_is_ever_read_as_a_trace_carrier(otel, clients, http_fault, tmp_path, era):
    """Our trace context only goes out: no header, ``_meta`` or ``Mcp-Param-*`` value of a
    server's is ever extracted (the global propagator's extract is never called)."""
    from opentelemetry import propagate
    from opentelemetry.propagators.textmap import TextMapPropagator

    kept = propagate.get_global_textmap()
    calls = {"inject": 0, "extract": 0}

    class Watching(TextMapPropagator):
        def inject(self, carrier, context=None, setter=None):
            calls["inject"] += 1
            kept.inject(carrier, context=context)

        def extract(self, carrier, context=None, getter=None):
            calls["extract"] += 1
            return kept.extract(carrier, context=context)

        @property
        def fields(self):
            return kept.fields

    propagate.set_global_textmap(Watching())
    try:
        server = http_fault(era=era)
        over_http = clients.start(ServerConfig(name="h", type="http", url=server.url))
        over_stdio = clients.start(fault_config("f", "--era", era))
        for handle in (over_http, over_stdio):
            assert handle.connect().era == era
            with host_span():
                assert text_of(handle.call_tool("echo", {"text": "hi"})) == "hi"
    finally:
        propagate.set_global_textmap(kept)
    assert calls["inject"] >= 4 and calls["extract"] == 0, calls


def test_the_operation_duration_histogram_has_data_points(otel, clients):
    handle = clients.start(fault_config("f"))
    handle.connect()
    handle.call_tool("echo", {"text": "hi"})
    points = points_of("mcp.client.operation.duration")
    calls = [p for p in points if p.attributes.get("gen_ai.tool.name") == "echo"]
    assert calls and calls[0].count >= 1
    assert tuple(calls[0].explicit_bounds) == telemetry.DURATION_BUCKETS
    assert all("jsonrpc.request.id" not in p.attributes and "mcp.session.id" not in p.attributes for p in points)


def test_log_records_carry_the_server_and_the_trace_ids(otel, clients, caplog):
    handle = clients.start(fault_config("f"))
    handle.connect()
    caplog.set_level(logging.DEBUG, logger="albedo_actors")
    with host_span() as parent:
        logging.getLogger("albedo_actors.connection.channel").warning("server %r: a test line", "f")
        telemetry.log_ids()
    [record] = [r for r in caplog.records if r.getMessage() == "server 'f': a test line"]
    assert record.mcp_server == "f"
    assert record.trace_id == f"{parent.get_span_context().trace_id:032x}"
    assert record.span_id == f"{parent.get_span_context().span_id:016x}"


def test_a_dial_made_for_the_hosts_call_is_traced_under_the_hosts_span(otel, clients):
    handle = clients.start(fault_config("f"))
    with host_span() as parent:
        handle.call_tool("echo", {"text": "hi"})  # dials first, on the client's helper thread
    [connect] = spans("connect f")
    assert connect.parent is not None and connect.parent.span_id == parent.get_span_context().span_id
    [listing] = spans("tools/list")
    assert listing.parent is not None and listing.parent.span_id == connect.context.span_id
    [call] = spans("tools/call echo")
    assert call.parent.span_id == parent.get_span_context().span_id


def test_a_sign_in_has_its_span_and_no_secret_in_any_attribute(otel, oauth_server, tmp_path):
    from albedo_actors.auth.signin import SignIn, follow_redirect_agent
    from albedo_actors.store import open_store

    served = oauth_server()
    config = ServerConfig(name="guarded", type="http", url=served.url)
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    store = open_store(str(home))
    try:
        record = SignIn(config, store, agent=follow_redirect_agent(), port=0, lifetime=10).run()
    finally:
        store.close()
    [span] = spans("sign-in guarded")
    assert span.attributes["mcp.server.name"] == "guarded"
    assert span.status.status_code is not StatusCode.ERROR
    secrets = [value for value in (record.access_token, record.refresh_token, record.client_secret) if value]
    assert secrets
    for each in EXPORTER.get_finished_spans():
        for value in each.attributes.values():
            assert not any(secret in str(value) for secret in secrets), f"a secret in {each.name}"


def test_a_session_era_connection_records_its_duration_and_a_reconnect_is_counted(otel, clients):
    handle = clients.start(fault_config("legacy-f", "--era", "legacy"))
    handle.connect()
    with pytest.raises(albedo_actors.errors.UnknownOutcome):
        handle.call_tool("die")  # the server exits: the session ends
    assert text_of(handle.call_tool("echo", {"text": "again"})) == "again"  # dialled again
    assert counted("mcp.client.reconnects", "legacy-f") == 1
    sessions = [p for p in points_of("mcp.client.session.duration") if p.attributes.get("network.transport") == "pipe"]
    assert sessions and sum(p.count for p in sessions) >= 1
    assert tuple(sessions[0].explicit_bounds) == telemetry.DURATION_BUCKETS
    # The server ended the first session: its duration says so.
    assert any(p.attributes.get("error.type") == "connection_lost" for p in sessions)


def test_a_server_left_out_of_a_session_is_counted(otel, tmp_path):
    from albedo_actors.binding import Mcp
    from helpers import composed

    before = counted("mcp.client.servers_left_out", "broken")
    with composed(str(tmp_path / "home"), fault_config("f"), fault_config("broken", "--stderr-and-exit", "2")) as ref:
        assert any(t["server"] == "f" for t in Mcp(ref).tools())
    assert counted("mcp.client.servers_left_out", "broken") == before + 1


NO_SDK = r"""
import json, sys
from opentelemetry import context, propagate
from albedo_actors.config import ServerConfig
from albedo_actors.actors.client import ServerHandle
handle = ServerHandle.start(ServerConfig(name="f", type="stdio", command=sys.executable, args=tuple(sys.argv[3:])), sys.argv[1])
try:
    handle.connect(60)
    handle.call_tool("echo", {"text": "no context"}, timeout=60)
    token = context.attach(propagate.extract({"traceparent": sys.argv[2]}))  # a host's incoming request
    try:
        handle.call_tool("echo", {"text": "remote parent"}, timeout=60)
    finally:
        context.detach(token)
finally:
    handle.stop()
print(json.dumps(sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk"))))
"""


def test_with_the_api_and_no_sdk_no_span_is_made_and_a_hosts_own_context_still_reaches_the_server(tmp_path):
    from helpers import FAULT_SERVER

    record = tmp_path / "received.jsonl"
    remote = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(albedo_actors.__file__)))}
    done = subprocess.run([sys.executable, "-c", NO_SDK, str(tmp_path), remote, FAULT_SERVER, "--record", str(record)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == []
    calls = [m for m in read_record(record) if m.get("method") == "tools/call"]
    assert [c["params"]["arguments"]["text"] for c in calls] == ["no context", "remote parent"]
    assert "traceparent" not in calls[0]["params"].get("_meta", {})
    assert calls[1]["params"]["_meta"]["traceparent"] == remote


def test_a_token_refresh_has_its_span_and_is_counted_with_no_secret_in_any_attribute(otel, oauth_server, tmp_path):
    from albedo_actors.auth.signin import SignIn, follow_redirect_agent
    from albedo_actors.config import McpConfig
    from albedo_actors.runtime import Runtime
    from albedo_actors.store import open_store

    served = oauth_server()
    config = ServerConfig(name="guarded", type="http", url=served.url, startup_timeout_ms=15000, call_timeout_ms=15000)
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    store = open_store(str(home))
    try:
        first = SignIn(config, store, agent=follow_redirect_agent(), port=0, lifetime=10).run()
        served.expire()  # the stored access token is refused from now on: the call refreshes it
        before = counted("mcp.client.token_refreshes", "guarded")
        with Runtime(str(home), store, config=McpConfig(home=str(home), servers=(config,)), enabled=True) as runtime:
            record = runtime.mcp().call("guarded/echo", text="refreshed")
            assert not record.isError
        from albedo_actors.auth.record import from_credentials
        now = from_credentials(store.get_credentials("guarded"))
    finally:
        store.close()
    assert served.stats()["token_requests"]["refresh_token"] == 1
    [span] = spans("token refresh guarded")
    assert span.attributes["mcp.server.name"] == "guarded"
    assert counted("mcp.client.token_refreshes", "guarded") == before + 1
    secrets = [value for value in (first.access_token, first.refresh_token, now.access_token, now.refresh_token) if value]
    for each in EXPORTER.get_finished_spans():
        for value in each.attributes.values():
            assert not any(secret in str(value) for secret in secrets), f"a secret in {each.name}"


def test_a_failing_propagator_costs_the_request_its_span_never_the_request(otel, clients):
    from opentelemetry import propagate
    from opentelemetry.propagators.textmap import TextMapPropagator

    class Broken(TextMapPropagator):
        def inject(self, carrier, context=None, setter=None):
            raise RuntimeError("broken propagator")

        def extract(self, carrier, context=None, getter=None):
            return context

        @property
        def fields(self):
            return set()

    handle = clients.start(fault_config("f"))
    handle.connect()
    kept = propagate.get_global_textmap()
    propagate.set_global_textmap(Broken())
    try:
        assert text_of(handle.call_tool("echo", {"text": "still"})) == "still"
    finally:
        propagate.set_global_textmap(kept)
    assert spans("tools/call echo"), "the span started before the propagator failed was never ended"
