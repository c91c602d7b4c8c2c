"""One deadline per call (issue 24): a token refresh, a sign-in round or a dial on the call
path ends at the call's deadline, against the real loopback authorization server whose
token endpoint hangs (``/admin/hold-refresh``) until the test lets it go.

- The call ends with ``TimedOut`` saying the request was not sent (never "cancelled"),
  while the refresh is still held: it did not wait for it.
- The refresh goes on in the TokenRefresher; once the endpoint answers, the next call
  gets its token without another token request.
- Stopping a runtime whose refresher is stuck on that endpoint returns promptly.

Every wait is on an event or the server's counters, bounded; the only timing asserted
is that stopping is prompt, which is the behaviour itself.
"""

from __future__ import annotations

import json
import time

import pytest

from albedo_actors.config import ServerConfig, load
from albedo_actors.errors import TimedOut
from albedo_actors.runtime import Runtime
from albedo_actors.wire.deadline import Deadline

from auth.kit import Kit
from helpers import text_of

NAME = "guarded"
WAIT_S = 60.0  # a bound on every wait, never an expected duration
HELD_REFRESH_S = 10.0  # AuthHttp's own bound on a token request (auth/http.py TIMEOUT_S)


@pytest.fixture
def kit(tmp_path, oauth_server):
    # After oauth_server: the handles stop before the server does.
    kit = Kit(str(tmp_path), NAME)
    yield kit
    kit.close()


@pytest.fixture
def served(oauth_server):
    """The authorization + MCP server; a refresh it holds is let go at the end, whatever happened."""
    server = oauth_server()
    yield server
    server.release_refresh()


def config_of(server, **timeouts: int) -> ServerConfig:
    return ServerConfig(name=NAME, type="http", url=server.url, **{"startup_timeout_ms": 15000, "call_timeout_ms": 15000,
                                                                   **timeouts})


def wait_until(condition, what: str) -> None:
    """Poll ``condition`` (the server's counters), bounded by WAIT_S."""
    until = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < until, f"{what} did not happen within {WAIT_S:g} s"
        time.sleep(0.02)


def refreshes(server) -> int:
    return server.stats()["token_requests"]["refresh_token"]


def assert_not_sent(error: TimedOut, seconds: float = 1) -> None:
    message = str(error)
    assert error.sent is False, message
    assert "cancelled" not in message and "\n" not in message
    assert f"server {NAME!r}" in message and f"within {seconds:g} s; try again" in message
    assert "tools/call was not sent" in message or "tools/call did not run" in message


def test_a_call_whose_token_refresh_hangs_ends_at_its_deadline_unsent_and_the_next_call_gets_the_token(served, kit):
    # Every token answer says it expires at once: each request refreshes first, on the
    # caller's thread (ServerAuth.headers), the path where the deadline was lost.
    served.advertise_lifetime(0)
    config = config_of(served)
    kit.sign_in(config)
    handle = kit.handle(config)
    handle.connect()  # the dial refreshes as it goes (the endpoint answers)
    served.hold_refresh()
    served.advertise_lifetime(None)  # the held refresh, once let go, brings a lasting token
    before = refreshes(served)

    with pytest.raises(TimedOut) as raised:
        handle.call_tool("echo", {"text": "x"}, timeout=1)
    assert_not_sent(raised.value)
    assert "refreshing the token" in str(raised.value)
    # It returned while the token endpoint held the refresh (until the release below): it
    # never waited for it.
    wait_until(lambda: served.stats()["refresh_held"] == 1, "the held refresh")
    assert refreshes(served) == before + 1

    served.release_refresh()
    # The refresh went on in the refresher: the next call gets its token, with no new request.
    assert text_of(handle.call_tool("echo", {"text": "again"}, timeout=WAIT_S)) == "again"
    assert refreshes(served) == before + 1


def test_a_refused_token_whose_refresh_hangs_ends_the_call_at_its_deadline_saying_it_did_not_run(served, kit):
    config = config_of(served)
    kit.sign_in(config)
    handle = kit.handle(config)
    handle.connect()
    served.hold_refresh()
    served.expire()  # the token is refused now: a 401, then the refresh (on a worker of the link)
    before = refreshes(served)

    with pytest.raises(TimedOut) as raised:
        handle.call_tool("echo", {"text": "x"}, deadline=Deadline.after(1))
    assert_not_sent(raised.value)
    wait_until(lambda: served.stats()["refresh_held"] == 1, "the held refresh")

    served.release_refresh()
    assert text_of(handle.call_tool("echo", {"text": "again"}, timeout=WAIT_S)) == "again"
    assert refreshes(served) == before + 1


def test_a_dial_that_outlasts_the_calls_deadline_ends_at_it_and_goes_on_for_the_next_call(served, kit):
    served.advertise_lifetime(0)
    config = config_of(served)
    kit.sign_in(config)  # its token expires at once: the dial must refresh it first
    served.hold_refresh()
    served.advertise_lifetime(None)
    handle = kit.handle(config)

    with pytest.raises(TimedOut) as raised:
        handle.call_tool("echo", {"text": "x"}, timeout=1)
    assert_not_sent(raised.value)
    assert "connecting to the server" in str(raised.value)
    wait_until(lambda: served.stats()["refresh_held"] == 1, "the dial's refresh")

    served.release_refresh()
    assert text_of(handle.call_tool("echo", {"text": "again"}, timeout=WAIT_S)) == "again"


def signed_in_home(served, tmp_path, call_timeout_ms: int):
    """A home whose extensions.json has the guarded server (MCP on), signed in with tokens
    that expire at once (every request refreshes first); its kit (the store) to close."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    entry = {"type": "http", "url": served.url, "startupTimeoutMs": 15000, "callTimeoutMs": call_timeout_ms}
    (home / "extensions.json").write_text(json.dumps({"enabled": {"mcp": True}, "mcp": {"servers": {NAME: entry}}}))
    served.advertise_lifetime(0)
    kit = Kit(str(home), NAME)
    try:
        kit.sign_in(config_of(served))
    except BaseException:
        kit.close()
        raise
    return home, kit


def test_stopping_a_runtime_never_waits_for_a_hung_token_request(served, tmp_path):
    home, kit = signed_in_home(served, tmp_path, call_timeout_ms=2000)
    try:
        runtime = Runtime(str(home), kit.store, config=load(str(home)))
        runtime.start()
        try:
            mcp = runtime.mcp()
            assert text_of(mcp.call(f"{NAME}/echo", text="open").as_dict()) == "open"
            served.hold_refresh()
            with pytest.raises(TimedOut) as raised:
                mcp.call(f"{NAME}/echo", text="x")
            assert_not_sent(raised.value, 2)
            wait_until(lambda: served.stats()["refresh_held"] == 1, "the held refresh")  # the refresher's request hangs
        finally:
            started = time.monotonic()
            runtime.stop()
            stopped = time.monotonic() - started
        # Prompt: the hung request was abandoned, not waited out (it would end by itself
        # only after HELD_REFRESH_S, and the refresher used to wait up to REFRESH_WAIT_S).
        assert stopped < HELD_REFRESH_S / 2, f"stopping took {stopped:.1f} s"
        assert served.stats()["refresh_held"] == 1
    finally:
        kit.close()


def test_the_bindings_deadline_reaches_the_token_refresh_sync_and_async(served, tmp_path):
    """The deadline travels from the binding (``deadline=``) down to the auth step."""
    import asyncio

    home, kit = signed_in_home(served, tmp_path, call_timeout_ms=15000)
    try:
        with Runtime(str(home), kit.store, config=load(str(home))) as runtime:
            mcp, amcp = runtime.mcp(), runtime.amcp()
            assert text_of(mcp.call(f"{NAME}/echo", text="open").as_dict()) == "open"
            served.hold_refresh()
            served.advertise_lifetime(None)
            with pytest.raises(TimedOut) as raised:
                mcp.call(f"{NAME}/echo", text="x", deadline=1)  # callTimeoutMs is 15 s: the deadline wins
            assert_not_sent(raised.value)
            with pytest.raises(TimedOut) as raised:
                asyncio.run(amcp.call(f"{NAME}/echo", text="x", deadline=Deadline.after(1)))
            assert_not_sent(raised.value)
            served.release_refresh()
            assert text_of(mcp.call(f"{NAME}/echo", text="again", deadline=WAIT_S).as_dict()) == "again"
    finally:
        kit.close()
