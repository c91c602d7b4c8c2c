"""The listening stream's pace, and header values a server gave us (issue 10, item 8).

Against the real FaultHTTPServer on 127.0.0.1 (tests/servers/fault_http_server.py):
``listen_sends`` makes every listening stream carry one block and end, ``retry`` adds a
``retry:`` field, ``event_id_prefix`` and ``session_id_value`` put hostile text into
SSE ids and ``Mcp-Session-Id``. Reconnections are counted from the server's own
records of when each stream was asked for; every wait is bounded, none is a sleep.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from albedo_actors.connection.http import listen as http_listen
from albedo_actors.config import ServerConfig
from albedo_actors.errors import ProtocolViolation
from albedo_actors.transport.http import Exchange, HttpFailed, HttpTransport
from helpers import text_of

WAIT = 15.0  # bound on every wait for something the server or client does
RUN_TIMEOUT = 60


def http_config(server, **overrides) -> ServerConfig:
    return ServerConfig(name="f", type="http", url=server.url, **overrides)


@pytest.fixture
def fault(http_fault):
    return http_fault


def openings(server, era: str) -> list[float]:
    """When each listening stream was asked for (the server's clock, in order)."""
    if era == "legacy":
        return [r.time for r in server.requests if r.method == "GET" and r.header("Last-Event-ID") is None]
    return [r.time for r in server.requests
            if r.method == "POST" and r.body and json.loads(r.body).get("method") == "subscriptions/listen"]


def listener_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "mcp-listen-f"]


def wait_listener_gone() -> None:
    for thread in listener_threads():
        thread.join(WAIT)
    assert listener_threads() == [], "the listening stream is still being reopened"


def fast_waits(monkeypatch) -> None:
    """Tiny waits, so that counting attempts takes milliseconds (the 1 s floor has its own test)."""
    monkeypatch.setattr(http_listen, "LISTEN_FIRST_WAIT", 0.01)
    monkeypatch.setattr(http_listen, "LISTEN_MAX_WAIT", 0.04)


# -- the pace of the listening stream ------------------------------------------------------------------


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_retry_0_and_a_notification_per_stream_still_wait_a_second_between_openings(fault, clients, era):
    server = fault(era=era, listen_sends="notification", retry="0")
    handle = clients.start(http_config(server))
    handle.connect()

    server.wait_for_event("listen_sent", count=4, timeout=WAIT)
    times = openings(server, era)[:4]
    assert len(times) == 4
    gaps = [later - earlier for earlier, later in zip(times, times[1:])]
    assert all(gap >= 1.0 for gap in gaps), gaps
    # So any 3 s hold at most 4 openings (47 in 2 s before).
    assert times[3] - times[0] >= 3.0
    assert handle.status()["connected"]


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_a_stream_that_hears_a_notification_every_time_is_never_given_up(fault, clients, monkeypatch, era):
    fast_waits(monkeypatch)
    server = fault(era=era, listen_sends="notification", retry="0")
    handle = clients.start(http_config(server))
    handle.connect()

    beyond = http_listen.LISTEN_LIMIT + 4
    server.wait_for_event("listen_sent", count=beyond, timeout=WAIT)
    assert len(openings(server, era)) >= beyond
    assert listener_threads(), "a stream that keeps delivering was given up"


@pytest.mark.parametrize("kind", ["comment", "retry", "empty", "priming", "response"])
@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_a_stream_that_brings_no_real_notification_is_given_up_after_eight_attempts(fault, clients, monkeypatch, era, kind):
    fast_waits(monkeypatch)
    server = fault(era=era, listen_sends=kind, retry="0")
    handle = clients.start(http_config(server))
    handle.connect()

    wait_listener_gone()
    assert len(openings(server, era)) == http_listen.LISTEN_LIMIT
    assert len([e for e in server.events if e["event"] == "listen_sent"]) == http_listen.LISTEN_LIMIT
    assert text_of(handle.call_tool("echo", {"text": "still here"})) == "still here"


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_a_server_that_hangs_up_after_every_notification_is_held_to_the_window_rate(fault, clients, monkeypatch, era):
    fast_waits(monkeypatch)
    monkeypatch.setattr(http_listen, "LISTEN_WINDOW", 1.0)
    monkeypatch.setattr(http_listen, "LISTEN_WINDOW_OPENINGS", 3)
    server = fault(era=era, listen_sends="notification", retry="0")
    handle = clients.start(http_config(server))
    handle.connect()

    server.wait_for_event("listen_sent", count=7, timeout=WAIT)
    times = openings(server, era)[:7]
    assert len(times) == 7
    slack = 0.05  # the client stamps an opening just before the server records it
    spans = [times[i + 3] - times[i] for i in range(len(times) - 3)]
    assert all(span >= 1.0 - slack for span in spans), spans  # never 4 openings in one window
    assert times[6] - times[0] >= 2.0 - slack
    assert listener_threads(), "a rate-held stream must not be given up"


# -- header values from the server -----------------------------------------------------------------


def test_a_non_ascii_event_id_goes_back_in_utf8_and_the_stream_resumes(fault, clients):
    server = fault(era="legacy", event_ids=True, cut_stream=20, event_id_prefix="流é-")
    handle = clients.start(http_config(server))
    handle.connect()

    assert text_of(handle.call_tool("echo", {"text": "resumed"})) == "resumed"
    resume = server.wait_for_request(lambda r: r.method == "GET" and r.header("Last-Event-ID") is not None, timeout=WAIT)
    sent = resume.header("Last-Event-ID").encode("latin-1")  # the header's bytes as they arrived
    assert sent.decode("utf-8").startswith("流é-")
    assert server.wait_for_event("resumed", timeout=WAIT)["last_event_id"] == sent.decode("utf-8")


@pytest.mark.parametrize("prefix", ["a\x01b-", "\x7f-", "\x1b[2J-"])
def test_an_event_id_that_cannot_go_into_a_header_is_the_servers_protocol_violation_in_one_line(fault, clients, prefix):
    server = fault(era="legacy", event_ids=True, cut_stream=20, cut_times=1, event_id_prefix=prefix)
    handle = clients.start(http_config(server))
    handle.connect()

    with pytest.raises(ProtocolViolation) as caught:
        handle.call_tool("echo", {"text": "lost"})
    message = str(caught.value)
    assert message.startswith("server 'f': sent an SSE event id that holds a control character")
    assert "may or may not have run" in message and "\n" not in message and prefix not in message
    assert [r for r in server.requests if r.header("Last-Event-ID") is not None] == []  # nothing sent with it
    assert text_of(handle.call_tool("echo", {"text": "next"})) == "next"  # and the next call is served


@pytest.mark.parametrize("value,why", [
    ("s\xe9ss", "not visible ASCII"),                      # a Latin-1 byte
    ("流".encode().decode("latin-1"), "not visible ASCII"),  # UTF-8 bytes
    ("a\x01b", "not visible ASCII"),
    ("a b", "not visible ASCII"),
])
def test_a_session_id_that_cannot_be_sent_back_is_refused_in_one_line(fault, clients, value, why):
    server = fault(era="legacy", session_id_value=value)
    handle = clients.start(http_config(server))

    with pytest.raises(ProtocolViolation) as caught:
        handle.connect()
    message = str(caught.value)
    assert message.startswith("server 'f': sent an Mcp-Session-Id that holds a character that is")
    assert why in message and "\n" not in message and value not in message
    # Nothing was sent with it: every request after initialize would have carried it.
    assert [r for r in server.requests if r.header("Mcp-Session-Id") is not None] == []


def test_the_cli_reports_a_bad_session_id_as_one_line_and_no_traceback(fault, tmp_path):
    server = fault(era="legacy", session_id_value="流".encode().decode("latin-1"))
    config = {"mcp": {"servers": {"h": {"type": "http", "url": server.url}}}}
    (tmp_path / "extensions.json").write_text(json.dumps(config), encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "albedo_actors", "--home", str(tmp_path), "call", "h/echo",
                          "--args", '{"text": "x"}'], capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert run.returncode == 3, run.stderr
    assert "Traceback" not in run.stderr and "UnicodeEncodeError" not in run.stderr
    [line] = run.stderr.splitlines()
    assert line.startswith("albedo-mcp: server 'h': sent an Mcp-Session-Id that holds a character that is not visible ASCII")


@pytest.mark.parametrize("value,why", [
    ("流", "a character outside Latin-1"),
    ("a\r\nInjected: yes", "CR, LF or NUL"),
    ("a\x00b", "CR, LF or NUL"),
    (b"a\nb", "CR, LF or NUL"),
    ("a\x1bb", "a control character"),
])
def test_a_header_value_that_cannot_be_sent_is_refused_before_anything_leaves(fault, value, why):
    server = fault(era="legacy")
    transport = HttpTransport(server.url)
    try:
        with pytest.raises(HttpFailed) as caught:
            transport.send("GET", {"Accept": "text/event-stream", "X-Test": value}, Exchange())
    finally:
        transport.close()
    assert caught.value.sent is False
    assert str(caught.value) == f"the X-Test header value holds {why}, so it cannot be sent"
    assert server.requests == []


# -- the listening stream is open before the connection is used -----------------------------------


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_the_listening_stream_is_asked_for_before_discovery_and_connect_returns_with_it_open(fault, clients, era):
    # A server may send its requests (an elicitation) only on that stream and drop them
    # while none is open: the conformance server does, and a call racing the stream lost
    # its elicitation under load.
    server = fault(era=era)
    handle = clients.start(http_config(server))
    handle.connect()
    assert len(openings(server, era)) >= 1  # asked for (and answered) before connect returned
    methods = [("GET" if r.method == "GET" else json.loads(r.body).get("method")) for r in server.requests
               if r.method == "GET" or (r.method == "POST" and r.body)]
    listen = "GET" if era == "legacy" else "subscriptions/listen"
    assert methods.index(listen) < methods.index("tools/list"), methods
