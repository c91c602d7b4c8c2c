"""Five quiet resumptions give up (issue 11, item 9; docs/design.rst "A 2025-11-25-era stream ...").

A legacy stream with event ids that ends before its response is resumed with
``Last-Event-ID``; a resumption that brings no new event is quiet, and five in a row
end the request as an unknown outcome, never sent again. Against the real fault HTTP
server on 127.0.0.1, with resumed streams that end at once (tests/servers/quiet_resume_server.py).
"""

from __future__ import annotations

import time

import pytest

from albedo_actors.connection.http import exchange as http_exchange
from albedo_actors.config import ServerConfig
from albedo_actors.errors import UnknownOutcome
from servers.quiet_resume_server import QuietResumeServer


@pytest.fixture
def server():
    started = QuietResumeServer(era="legacy", event_ids=True, cut_stream=20)
    started.start()
    yield started
    assert started.stop(), "the fault server's threads did not end"


def test_five_quiet_resumptions_give_up_with_an_unknown_outcome(server, clients):
    handle = clients.start(ServerConfig(name="f", type="http", url=server.url, call_timeout_ms=30_000))
    assert handle.connect().era == "legacy"

    began = time.monotonic()
    with pytest.raises(UnknownOutcome, match=r"5 resumptions brought nothing new; it may or may not have run"):
        handle.call_tool("echo", {"text": "lost"})
    took = time.monotonic() - began
    # Given up by the limit, not by the 30 s call timeout: 5 waits of 250 ms, and the GETs.
    assert took < 15, f"took {took:.1f} s"
    resumptions = [r for r in server.requests if r.method == "GET" and r.header("Last-Event-ID") is not None]
    assert len(resumptions) == http_exchange.RESUME_LIMIT == 5
    calls = [r for r in server.requests if r.method == "POST" and r.body and b'"tools/call"' in r.body]
    assert len(calls) == 1  # never sent again
