"""ServerClient against the fault-injecting server: eras, calls, failures, changes."""

import gc
import json
import queue
import sys
import threading
import time

import pytest

from albedo_actors.actors.client import CatalogueChanged
from albedo_actors.config import ServerConfig
from albedo_actors.connection import Connection
from albedo_actors.errors import Incompatible, ProtocolViolation, RemoteError, TimedOut, Unavailable, UnknownOutcome
from helpers import Owner, fault_config, read_record, schema_validate, text_of


# -- era negotiation ------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags, era, version",
    [
        ((), "modern", "2026-07-28"),
        (("--era", "modern"), "modern", "2026-07-28"),
        (("--era", "legacy", "--probe", "error"), "legacy", "2025-11-25"),
        (("--era", "legacy", "--probe", "silent"), "legacy", "2025-11-25"),
        (("--discover-versions", "2025-06-18"), "legacy", "2025-11-25"),
    ],
    ids=["dual", "modern-only", "legacy-answers-error", "legacy-silent-probe", "modern-naming-only-legacy"],
)
def test_era_is_found_as_the_reference_says(clients, flags, era, version, tmp_path):
    record = tmp_path / "record"
    handle = clients.start(fault_config("f", *flags, "--record", str(record)))
    catalogue = handle.connect()
    assert (catalogue.era, catalogue.protocol_version) == (era, version)
    assert {"echo", "add", "hang"} <= {tool["name"] for tool in catalogue.tools}
    methods = [m.get("method") for m in read_record(record)]
    assert methods[0] == "server/discover"
    if era == "legacy":
        # The handshake comes before any other request, and is acknowledged.
        assert methods[1:3] == ["initialize", "notifications/initialized"]
        schema_validate("2025-11-25", "InitializeRequest", read_record(record)[1])
    else:
        assert "initialize" not in methods


def test_a_server_that_answers_initialize_before_the_probe_is_legacy(clients, tmp_path):
    # The probe is ignored; initialize follows after the grace second on the same process.
    record = tmp_path / "record"
    handle = clients.start(fault_config("f", "--era", "legacy", "--probe", "silent", "--record", str(record)))
    assert handle.connect().era == "legacy"
    assert [m.get("method") for m in read_record(record)][:2] == ["server/discover", "initialize"]


def test_an_old_server_that_exits_on_the_probe_is_relaunched_with_initialize(clients, tmp_path):
    record = tmp_path / "record"
    handle = clients.start(fault_config("f", "--era", "legacy", "--probe", "exit", "--record", str(record)))
    catalogue = handle.connect()
    assert catalogue.era == "legacy"
    methods = [m.get("method") for m in read_record(record)]
    # First process: the probe only. Second process: initialize first.
    assert methods[:3] == ["server/discover", "initialize", "notifications/initialized"]
    assert text_of(handle.call_tool("echo", {"text": "again"})) == "again"


def test_a_server_naming_no_version_we_speak_is_refused(clients):
    handle = clients.start(fault_config("f", "--unsupported-versions", "2099-01-01,2098-01-01"))
    with pytest.raises(Incompatible, match=r"server 'f': it supports protocol versions 2099-01-01, 2098-01-01; this client speaks 2026-07-28"):
        handle.connect()


def test_a_server_gone_before_its_first_request_is_written_is_lost_as_on_the_probe():
    """A server that exits at start can end before the host writes its first request
    (the link is closed by then): that is the probe lost, never "the connection closed
    before server/discover was sent", so the opening waits for the launcher's report and
    says why it cannot start (the test below, when its process wins the race)."""
    from albedo_actors.connection import negotiation
    from albedo_actors.connection.channel import LinkClosed, RpcChannel

    class Closed:
        def send_request(self, pending, message, deadline):
            raise LinkClosed()

    for probe, first in ((True, "discover"), (False, "initialize"), (True, "initialize")):
        channel = RpcChannel("f", lambda method, params: None, lambda reason: None)
        channel.attach(Closed())
        with pytest.raises(negotiation._ProbeLost):
            negotiation._negotiate(channel, "f", time.monotonic() + 10, probe, first)


def test_a_call_waiting_on_a_dial_whose_discovery_is_cut_short_hears_it_was_not_sent(clients):
    """The dial's own tools/list was lost with its connection: that is the dial failing,
    so the call that waited on it never left (Unavailable, safe to retry), never "it may
    or may not have run"."""
    handle = clients.start(fault_config("f", "--exit-on", "tools/list"))
    with pytest.raises(Unavailable) as info:
        handle.call_tool("echo", {"text": "x"})
    message = str(info.value)
    assert not isinstance(info.value, UnknownOutcome) and "may or may not" not in message, message
    assert message.startswith("server 'f': could not be discovered: ") and "nothing waiting on it was sent" in message


def test_a_server_that_fails_to_start_shows_its_stderr(clients):
    handle = clients.start(fault_config("f", "--stderr-and-exit", "3"))
    with pytest.raises(Unavailable) as info:
        handle.connect()
    message = str(info.value)
    assert message.startswith("server 'f': cannot start: it exited with status 3; its stderr ended with:")
    assert "\n" not in message


# -- calls -------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ["dual", "legacy"])
def test_tool_call_requests_validate_against_the_official_schema(clients, tmp_path, era):
    record = tmp_path / "record"
    probe = ("--probe", "error") if era == "legacy" else ()
    handle = clients.start(fault_config("f", "--era", era, *probe, "--record", str(record)))
    result = handle.call_tool("add", {"a": 2, "b": 40})
    assert result["structuredContent"] == {"sum": 42}
    call = next(m for m in read_record(record) if m.get("method") == "tools/call")
    if era == "dual":
        schema_validate("2026-07-28", "CallToolRequest", call)
        schema_validate("2026-07-28", "CallToolResult", result)
        assert call["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] == {}
    else:
        schema_validate("2025-11-25", "CallToolRequest", call)
        schema_validate("2025-11-25", "CallToolResult", result)
        # The only _meta of a legacy call: its progress token (issue 16).
        assert list(call["params"]["_meta"]) == ["progressToken"]


def test_a_tool_error_is_a_result_not_an_exception(clients):
    handle = clients.start(fault_config("f"))
    result = handle.call_tool("add", {"a": "two", "b": 1})
    assert result["isError"] is True


def test_many_calls_in_flight_are_matched_to_their_own_answers(clients):
    handle = clients.start(fault_config("f"))
    handle.connect()
    results = {}

    def call(i):
        results[i] = text_of(handle.call_tool("echo", {"text": f"call {i}"}))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == {i: f"call {i}" for i in range(64)}


def test_a_timed_out_call_is_cancelled_and_the_connection_stays_usable(clients, tmp_path):
    record = tmp_path / "record"
    handle = clients.start(fault_config("f", "--record", str(record), call_timeout_ms=300))
    with pytest.raises(TimedOut, match="tools/call got no answer within 0.3 s; it was cancelled"):
        handle.call_tool("hang")
    # The server reads in order: once echo is answered, the cancellation was received.
    assert text_of(handle.call_tool("echo", {"text": "still here"})) == "still here"
    messages = read_record(record)
    hang = next(m for m in messages if m.get("method") == "tools/call" and m["params"]["name"] == "hang")
    cancelled = [m for m in messages if m.get("method") == "notifications/cancelled"]
    assert [m["params"]["requestId"] for m in cancelled] == [hang["id"]]
    schema_validate("2026-07-28", "CancelledNotification", cancelled[0])


def test_a_server_dying_mid_call_fails_every_pending_call_with_unknown_outcome(clients):
    handle = clients.start(fault_config("f", call_timeout_ms=30_000))
    handle.connect()
    errors = []
    hung = threading.Thread(target=lambda: errors.append(_raises(lambda: handle.call_tool("hang"))))
    hung.start()
    with pytest.raises(UnknownOutcome, match="it may or may not have run"):
        handle.call_tool("die")
    hung.join(10)
    assert len(errors) == 1 and isinstance(errors[0], UnknownOutcome)
    assert "exited with status 3" in str(errors[0])
    # The next call dials again.
    assert text_of(handle.call_tool("echo", {"text": "back"})) == "back"


def test_a_server_that_dies_again_and_again_leaves_its_client_holding_no_lost_connection(clients):
    # Issue 23's load run: each lost connection (its channel, link, transport, closed
    # pipes, ended threads) stayed in its client until the client stopped, so a host's
    # memory grew with every kill -9 and crash of a server it kept using.
    handle = clients.start(fault_config("reaped", call_timeout_ms=30_000))
    handle.connect()
    for _ in range(6):
        with pytest.raises(UnknownOutcome):
            handle.call_tool("die")
        assert text_of(handle.call_tool("echo", {"text": "back"})) == "back"
    for thread in threading.enumerate():
        if thread.name == "mcp-reap-reaped":
            thread.join(10)  # each finishes its connection within the launcher's grace
    gc.collect()
    kept = [o for o in gc.get_objects() if isinstance(o, Connection) and o.server == "reaped"]
    assert len(kept) == 1 and kept[0].alive  # the live one only


def _raises(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - returned to the test to inspect
        return exc
    return None


def test_requests_from_the_server_are_answered_ping_only(clients):
    handle = clients.start(fault_config("f", "--era", "legacy", "--probe", "error"))
    answers = json.loads(text_of(handle.call_tool("ask")))
    assert answers["ping"] == {"result": {}}
    assert answers["roots/list"]["error"]["code"] == -32601
    assert answers["sampling/createMessage"]["error"]["code"] == -32601


def test_a_state_only_input_required_is_retried_with_its_state(clients, tmp_path):
    record = tmp_path / "record"
    handle = clients.start(fault_config("f", "--record", str(record)))
    assert text_of(handle.call_tool("state_only", {"rounds": 3})) == "complete after 3 rounds"
    calls = [m for m in read_record(record) if m.get("method") == "tools/call"]
    assert [c["params"].get("requestState") for c in calls] == [None, "s1", "s2", "s3"]
    assert len({c["id"] for c in calls}) == 4  # every retry has a new id
    with pytest.raises(ProtocolViolation, match="still returned input_required after 3 retries"):
        handle.call_tool("state_only", {"rounds": 4})


def test_a_server_needing_client_capabilities_is_reported(clients):
    handle = clients.start(fault_config("f"))
    with pytest.raises(RemoteError) as info:
        handle.call_tool("needs_input")
    assert info.value.code == -32021


def test_a_flood_of_notifications_does_not_disturb_a_call(clients):
    handle = clients.start(fault_config("f"))
    assert text_of(handle.call_tool("notify_flood", {"count": 20_000})) == "sent 20000 notifications"


def test_the_host_environment_does_not_reach_the_server(clients, monkeypatch):
    monkeypatch.setenv("ALBEDO_CANARY", "canary-value-31337")
    handle = clients.start(fault_config("f"))
    env = json.loads(text_of(handle.call_tool("env")))
    assert "canary-value-31337" not in json.dumps(env)
    assert set(env) - {"LC_CTYPE"} <= {"HOME", "PATH", "TMPDIR"}


# -- bad output ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, reason",
    [
        ("utf8", "invalid UTF-8"),
        ("json", "invalid JSON"),
        ("deep", "nested"),
        ("hugeint", "a number with too many digits"),
        ("notobject", "instead of a JSON-RPC object"),
    ],
)
def test_malformed_output_ends_the_connection_with_a_clear_error(clients, kind, reason):
    handle = clients.start(fault_config("f"))
    with pytest.raises(UnknownOutcome) as info:
        handle.call_tool("malformed", {"kind": kind})
    assert "it sent an invalid message" in str(info.value) and reason in str(info.value)
    assert text_of(handle.call_tool("echo", {"text": "fresh"})) == "fresh"


@pytest.mark.parametrize("kind", ["badid", "dupe", "unknownid"])
def test_answers_with_foreign_ids_are_dropped_never_cross_matched(clients, kind):
    handle = clients.start(fault_config("f"))
    assert text_of(handle.call_tool("malformed", {"kind": kind})) == f"after malformed {kind}"
    assert text_of(handle.call_tool("echo", {"text": "next"})) == "next"


@pytest.mark.parametrize("tool", ["big", "noline"])
def test_an_oversized_message_ends_the_connection(clients, tool):
    handle = clients.start(fault_config("f"))
    with pytest.raises(UnknownOutcome, match="16 MiB limit"):
        handle.call_tool(tool, {"mib": 17})
    assert text_of(handle.call_tool("echo", {"text": "ok"})) == "ok"


# -- pagination ------------------------------------------------------------------------------


def test_pagination_stops_after_100_pages_and_keeps_what_was_read(clients):
    catalogue = clients.start(fault_config("f", "--pages", "endless")).connect()
    assert [t["name"] for t in catalogue.tools] == [f"page_{i}" for i in range(1, 101)]
    assert any("more than 100 pages" in w for w in catalogue.warnings)


def test_a_repeated_cursor_stops_pagination(clients):
    catalogue = clients.start(fault_config("f", "--pages", "repeat")).connect()
    assert [t["name"] for t in catalogue.tools] == ["page_1"]
    assert any("repeated a cursor" in w for w in catalogue.warnings)


def test_all_pages_are_read(clients):
    catalogue = clients.start(fault_config("f", "--pages", "7")).connect()
    assert [t["name"] for t in catalogue.tools] == [f"page_{i}" for i in range(1, 8)]
    assert catalogue.warnings == ()


# -- changes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("flags", [(), ("--era", "legacy", "--probe", "error")], ids=["modern-listen", "legacy"])
def test_a_list_change_rediscovers_and_tells_the_owner_once(clients, flags, tmp_path):
    record = tmp_path / "record"
    owner = Owner.start()
    try:
        handle = clients.start(fault_config("f", *flags, "--record", str(record)), owner=owner)
        handle.connect()
        events = owner.proxy().events.get(timeout=5)
        assert isinstance(events.get(timeout=5), CatalogueChanged)  # the first catalogue
        handle.call_tool("add_tool", {"name": "fresh_tool"})
        event = events.get(timeout=10)
        assert isinstance(event, CatalogueChanged) and event.server == "f"
        assert "fresh_tool" in {t["name"] for t in event.catalogue.tools}
        assert handle.catalogue().tool("fresh_tool") is not None
        if not flags:
            listen = next(m for m in read_record(record) if m.get("method") == "subscriptions/listen")
            assert listen["params"]["notifications"] == {"toolsListChanged": True}
            schema_validate("2026-07-28", "SubscriptionsListenRequest", listen)
    finally:
        handle.stop()
        owner.stop()
    if not flags:
        # Closing ends the subscription with notifications/cancelled for its id.
        cancelled = [m for m in read_record(record) if m.get("method") == "notifications/cancelled"]
        assert [m["params"]["requestId"] for m in cancelled] == [listen["id"]]


def test_a_stubborn_server_is_ended_when_the_client_stops(clients):
    handle = clients.start(fault_config("f", "--ignore-eof-and-term"))
    handle.connect()
    handle.stop()  # the leak fixture fails the test if the process survived


def test_changes_during_a_discovery_run_it_exactly_once_more(clients, monkeypatch):
    import albedo_actors.actors.client as client_module

    owner = Owner.start()
    try:
        handle = clients.start(fault_config("f"), owner=owner)
        handle.connect()
        events = owner.proxy().events.get(timeout=5)
        events.get(timeout=5)  # the first catalogue
        gate, started, runs = threading.Event(), threading.Semaphore(0), []
        real = client_module.discover

        def gated(connection, timeout, cache=None):
            runs.append(1)
            started.release()
            assert gate.wait(10)
            return real(connection, timeout, cache)

        monkeypatch.setattr(client_module, "discover", gated)
        adopted = threading.Semaphore(0)
        real_adopt = client_module.ServerClient._adopt

        def adopt(self, catalogue):
            real_adopt(self, catalogue)
            adopted.release()

        monkeypatch.setattr(client_module.ServerClient, "_adopt", adopt)
        handle.call_tool("add_tool", {"name": "t1"})
        assert started.acquire(timeout=10)  # the first re-discovery is running (and held)
        # The server announces a change before it answers, so once each call returns,
        # and the actor has answered status(), it has seen that change.
        handle.call_tool("add_tool", {"name": "t2"})
        handle.call_tool("add_tool", {"name": "t3"})
        assert handle.status()["discovering"] is True
        gate.set()
        assert adopted.acquire(timeout=10) and adopted.acquire(timeout=10)  # two runs ended
        assert handle.status()["discovering"] is False
        assert {"t1", "t2", "t3"} <= {t["name"] for t in handle.catalogue().tools}
        assert len(runs) == 2  # one for t1, exactly one more for t2 and t3 together
    finally:
        owner.stop()


def test_a_change_notice_that_changes_nothing_is_not_reported(clients, monkeypatch):
    import albedo_actors.actors.client as client_module

    adopted = threading.Event()
    real_adopt = client_module.ServerClient._adopt

    def adopt(self, catalogue):
        real_adopt(self, catalogue)
        adopted.set()

    monkeypatch.setattr(client_module.ServerClient, "_adopt", adopt)
    owner = Owner.start()
    try:
        handle = clients.start(fault_config("f", "--era", "legacy", "--probe", "error"), owner=owner)
        handle.connect()
        events = owner.proxy().events.get(timeout=5)
        assert isinstance(events.get(timeout=5), CatalogueChanged)  # the first catalogue
        adopted.clear()
        # The server says its tools changed, but they did not.
        attempt = handle.status()["attempt"]
        handle._ref.tell(client_module._Notified(attempt, "notifications/tools/list_changed", {}))
        assert adopted.wait(10)  # re-discovery ran and its catalogue was compared
        owner.proxy().events.get(timeout=5)  # the owner has handled everything told before
        assert events.empty()
    finally:
        owner.stop()


def test_an_http_server_that_refuses_connections_is_unavailable(clients):
    handle = clients.start(ServerConfig(name="web", type="http", url="http://127.0.0.1:9/mcp"))
    with pytest.raises(Unavailable, match="server 'web': .*refused the connection"):
        handle.connect()


LATE_TOOL_SERVER = r'''
import json, sys
tools = [{"name": "first", "inputSchema": {"type": "object"}}]
def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    message = json.loads(line)
    method, id_ = message.get("method"), message.get("id")
    if id_ is None:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": id_, "result": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {"listChanged": True}, "prompts": {}},
            "serverInfo": {"name": "late-tool", "version": "1.0.0"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": id_, "result": {"tools": list(tools)}})
        if len(tools) == 1:
            tools.append({"name": "second", "inputSchema": {"type": "object"}})
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    elif method == "prompts/list":
        send({"jsonrpc": "2.0", "id": id_, "result": {"prompts": []}})
    else:
        send({"jsonrpc": "2.0", "id": id_, "error": {"code": -32601, "message": "Method not found"}})
'''


def test_a_tools_list_changed_received_during_the_first_discovery_is_not_lost(clients, tmp_path):
    # The change is announced while the dial is still reading the other lists.
    script = tmp_path / "late_tool_server.py"
    script.write_text(LATE_TOOL_SERVER, encoding="utf-8")
    owner = Owner.start()
    try:
        handle = clients.start(
            ServerConfig(name="late", type="stdio", command=sys.executable, args=(str(script),)), owner
        )
        catalogue = handle.connect()
        assert catalogue.era == "legacy"
        seen = [tool["name"] for tool in catalogue.tools]
        events = owner.proxy().events.get(timeout=5)
        deadline = time.monotonic() + 5
        while "second" not in seen:
            try:
                event = events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if isinstance(event, CatalogueChanged):
                seen = [tool["name"] for tool in event.catalogue.tools]
        assert seen == ["first", "second"], "the list_changed sent during the first discovery was dropped"
        assert [tool["name"] for tool in handle.catalogue().tools] == ["first", "second"]
    finally:
        owner.stop()


def test_a_host_handler_answers_elicitation_rounds_of_a_modern_server(tmp_path):
    from albedo_actors.actors.client import ServerHandle

    asked = []

    def elicit(params):
        asked.append(params["message"])
        return {"action": "accept", "content": {"proceed": True}}

    record = tmp_path / "record"
    handle = ServerHandle.start(fault_config("f", "--record", str(record)), str(tmp_path), handlers={"elicitation": elicit})
    try:
        result = handle.call_tool("needs_input")
    finally:
        handle.stop()
    assert json.loads(text_of(result)) == {"action": "accept", "content": {"proceed": True}}
    assert asked == ["Proceed?"]
    calls = [m for m in read_record(record) if m.get("method") == "tools/call"]
    assert calls[0]["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] == {"elicitation": {"form": {}}}
    assert calls[1]["params"]["inputResponses"] == {"confirm": {"action": "accept", "content": {"proceed": True}}}
    schema_validate("2026-07-28", "CallToolRequest", calls[1])


def test_a_host_handler_answers_the_requests_of_a_legacy_server(tmp_path):
    from albedo_actors.actors.client import ServerHandle

    record = tmp_path / "record"
    handle = ServerHandle.start(
        fault_config("f", "--era", "legacy", "--probe", "error", "--record", str(record)),
        str(tmp_path),
        handlers={"roots": lambda params: {"roots": [{"uri": "file:///srv", "name": "srv"}]}},
    )
    try:
        answers = json.loads(text_of(handle.call_tool("ask")))
    finally:
        handle.stop()
    assert answers["roots/list"] == {"result": {"roots": [{"uri": "file:///srv", "name": "srv"}]}}
    assert answers["sampling/createMessage"]["error"]["code"] == -32601  # no handler: not declared
    initialize = next(m for m in read_record(record) if m.get("method") == "initialize")
    assert initialize["params"]["capabilities"] == {"roots": {}}
