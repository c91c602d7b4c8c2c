"""The client rules of SEP-2575 (tests/rules/rules.json; docs/rules.rst), through a real
ServerHandle against tests/servers/rules_stdio_server.py."""

from __future__ import annotations

import logging

import pytest

from albedo_actors.errors import TimedOut, UnknownOutcome
from albedo_actors.wire.mcp import MODERN_VERSION
from stdio_rules_kit import launches, rules_config, sent, started, until

CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
VERSION = "io.modelcontextprotocol/protocolVersion"


def _requests(log: str) -> list[dict]:
    return [m for life in launches(log) for m in life if "method" in m and "id" in m]


@pytest.mark.rule("sep-2575-client-declares-roots-capability", "sep-2575-client-declares-sampling-capability")
def test_roots_and_sampling_are_declared_on_every_request_when_the_host_answers_them(tmp_path):
    """A host that registers roots and sampling handlers has both capabilities declared in
    the _meta clientCapabilities of every 2026-07-28 request (the opening probe, the
    listen, the lists, each call); a host without them declares neither."""
    log = str(tmp_path / "with.jsonl")
    handlers = {"roots": lambda params: {"roots": []}, "sampling": lambda params: {"role": "assistant"}}
    with started(rules_config(log), str(tmp_path), handlers=handlers) as handle:
        handle.call_tool("echo", {"text": "hi"}, 10)
    requests = _requests(log)
    assert {"server/discover", "subscriptions/listen", "tools/list", "tools/call"} <= {m["method"] for m in requests}
    for message in requests:
        declared = message["params"]["_meta"][CAPABILITIES]
        assert "roots" in declared and "sampling" in declared, message
    bare = str(tmp_path / "without.jsonl")
    with started(rules_config(bare, name="bare"), str(tmp_path)) as handle:
        handle.call_tool("echo", {"text": "hi"}, 10)
    for message in _requests(bare):
        declared = message["params"]["_meta"][CAPABILITIES]
        assert "roots" not in declared and "sampling" not in declared, message


@pytest.mark.rule("sep-2575-because-there-no-per-request-status")
def test_a_stdio_server_of_unknown_era_is_probed_with_server_discover_first(tmp_path):
    """A stdio server of unknown era is sent server/discover as its very first message;
    a server that answers it as a 2026-07-28 server is never sent initialize, even when
    it could speak both eras."""
    log = str(tmp_path / "log.jsonl")
    with started(rules_config(log, "legacy"), str(tmp_path)) as handle:
        handle.call_tool("echo", {"text": "hi"}, 10)
        assert handle.status()["era"] == "modern"
    (life,) = launches(log)
    assert life[0]["method"] == "server/discover"
    assert not sent(log, "initialize")


@pytest.mark.rule("sep-2575-cancel-flight-request-stdio-send-notifications")
def test_a_stdio_request_given_up_is_cancelled_with_notifications_cancelled(tmp_path):
    """A stdio request that times out is cancelled with notifications/cancelled naming its
    request id."""
    log = str(tmp_path / "log.jsonl")
    with started(rules_config(log), str(tmp_path)) as handle:
        with pytest.raises(TimedOut):
            handle.call_tool("hang", {}, 0.5)
        (call,) = [m for m in sent(log, "tools/call") if m["params"]["name"] == "hang"]
        cancelled = until(lambda: sent(log, "notifications/cancelled"), "the cancellation")
    assert [m["params"]["requestId"] for m in cancelled] == [call["id"]]


@pytest.mark.rule("sep-2575-server-returns-unsupportedprotocolversionerror-stdi")
def test_unsupported_protocol_version_on_stdio_is_retried_with_a_listed_version_not_initialize(tmp_path):
    """A stdio server that refuses server/discover with UnsupportedProtocolVersionError
    listing 2026-07-28 is sent server/discover again at that version, not initialize."""
    log = str(tmp_path / "log.jsonl")
    with started(rules_config(log, "upv-once"), str(tmp_path)) as handle:
        handle.call_tool("echo", {"text": "hi"}, 10)
        assert handle.status()["era"] == "modern"
    probes = sent(log, "server/discover")
    assert len(probes) == 2 and probes[1]["params"]["_meta"][VERSION] == MODERN_VERSION
    assert probes[0]["id"] != probes[1]["id"]
    assert not sent(log, "initialize")


@pytest.mark.rule("sep-2575-server-process-exits-unexpectedly-restart",
                  "sep-2575-stdio-connection-terminated-then-re-established")
def test_a_stdio_server_that_exits_is_restarted_at_once_and_listened_to_again(tmp_path):
    """A stdio server whose process exits unexpectedly is started again by itself, after a
    short backoff and without waiting for a call, and the new connection sends
    subscriptions/listen again before it reads the lists."""
    log = str(tmp_path / "log.jsonl")
    with started(rules_config(log), str(tmp_path)) as handle:
        with pytest.raises(UnknownOutcome):
            handle.call_tool("exit", {}, 10)
        until(lambda: len(launches(log)) == 2 and any(m.get("method") == "tools/list" for m in launches(log)[1]),
              "the restart")
        first, second = launches(log)
        listens = [m for m in first + second if m.get("method") == "subscriptions/listen"]
        assert [m["params"]["notifications"] for m in listens] == [{"toolsListChanged": True}] * 2
        assert listens[0] in first and listens[1] in second
        methods = [m.get("method") for m in second]
        assert methods.index("subscriptions/listen") < methods.index("tools/list")
        # The server has read the restarted dial's tools/list; the dial ends when its answer is read.
        until(lambda: handle.status()["connected"], "the restarted connection")
        assert handle.call_tool("echo", {"text": "back"}, 10)["content"][0]["text"] == "back"
    assert len(launches(log)) == 2  # the call used the restarted server


@pytest.mark.rule("sep-2575-distinguish-notifications-belonging-different-concu")
def test_subscription_notifications_are_correlated_by_subscription_id(tmp_path):
    """On a 2026-07-28 stdio connection a list-change notification counts only when its
    _meta subscriptionId is the id of the client's own subscriptions/listen: one naming
    another subscription, or none, is dropped; one naming ours re-reads the list."""
    log = str(tmp_path / "log.jsonl")
    with started(rules_config(log), str(tmp_path)) as handle:
        for sid in ("foreign", "none"):
            handle.call_tool("announce", {"sid": sid}, 10)
            handle.call_tool("echo", {"text": "sync"}, 10)  # the notification was read before this answer
            assert not handle.status()["discovering"]
        assert len(sent(log, "tools/list")) == 1  # the dial's own
        assert handle.catalogue().tool("added") is None
        handle.call_tool("announce", {"sid": "own"}, 10)
        until(lambda: handle.catalogue().tool("added") is not None, "the re-read list")
        assert len(sent(log, "tools/list")) == 2


@pytest.mark.rule("sep-2575-check-acknowledged-filter-against-what-requested")
def test_an_acknowledgement_that_leaves_a_filter_out_is_noted_and_the_rest_goes_on(tmp_path, caplog):
    """The acknowledgement of a stdio subscriptions/listen is compared with the filters
    asked for: the change types it leaves out are reported (the client status's
    "unannounced", one log line) and those lists are re-read at each new connection,
    while the types it kept go on working."""
    log = str(tmp_path / "log.jsonl")
    caplog.set_level(logging.INFO, logger="albedo_actors")
    with started(rules_config(log, "prompts", "ack-tools-only"), str(tmp_path)) as handle:
        handle.call_tool("echo", {"text": "sync"}, 10)
        (listen,) = sent(log, "subscriptions/listen")
        assert listen["params"]["notifications"] == {"toolsListChanged": True, "promptsListChanged": True}
        assert handle.status()["unannounced"] == ("promptsListChanged",)
        assert any("will not announce promptsListChanged" in r.getMessage() for r in caplog.records)
        handle.call_tool("announce", {"sid": "own"}, 10)
        until(lambda: handle.catalogue().tool("added") is not None, "the re-read list")
        assert handle.status()["connected"]
