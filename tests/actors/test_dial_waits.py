"""A call that arrives during the background dial waits up to startupTimeoutMs +
callTimeoutMs (issue 11, item 9).

A server advertised from its saved catalogue is dialled in the background; a call made
meanwhile shares that dial (no second one), waits for it within the server's
``startupTimeoutMs`` (plus a second of slack for the actor's answer), then for its own
answer within ``callTimeoutMs``. Through the real store, registry and preparer, against
the stdio fault server started through a launcher that reads its flags from a file, so
the configuration (and the saved catalogue's fingerprint) stays the same.
"""

from __future__ import annotations

import sys
import time

import pytest

from albedo_actors.actors.preparer import Prepare, RuntimePreparer
from albedo_actors.actors.registry import ServerRegistry
from albedo_actors.config import McpConfig, ServerConfig
from albedo_actors.errors import TimedOut, Unavailable
from albedo_actors.store import open_store
from helpers import FAULT_SERVER, flags_launcher, request, set_flags, text_of

STARTUP_S = 3.0
CALL_S = 2.0
DELAY_S = 1.5  # the server's slow start on the restart, inside STARTUP_S


@pytest.fixture
def restarted(tmp_path):
    """A daemon that saved the server's catalogue, then a second one on the same store
    (background dials on) whose server starts with ``flags``; returns its composition."""
    started = []
    home = str(tmp_path / "home")
    server = ServerConfig(name="f", type="stdio", command=sys.executable, args=(flags_launcher(tmp_path), FAULT_SERVER),
                          startup_timeout_ms=int(STARTUP_S * 1000), call_timeout_ms=int(CALL_S * 1000))
    config = McpConfig(home=home, servers=(server,))

    def daemon():
        store = open_store(home)
        registry = ServerRegistry.start(home)
        preparer = RuntimePreparer.start(registry, store, environ={"PATH": "/usr/bin:/bin"})
        started.append((store, registry, preparer))
        return preparer.proxy()

    def start(*flags):
        set_flags(tmp_path)
        request(daemon(), Prepare(config), 60)  # dials and saves
        set_flags(tmp_path, *flags)
        began = time.monotonic()
        composition = request(daemon(), Prepare(config), 60)
        assert time.monotonic() - began < 1.0, "the saved catalogue was not used at once"
        assert "hang" in {t["name"] for t in composition.catalogues["f"].tools}
        return composition

    yield start
    for store, registry, preparer in reversed(started):
        preparer.stop(timeout=30)
        registry.stop(timeout=30)
        store.close()


def test_a_call_during_the_background_dial_shares_it_and_then_has_its_own_call_timeout(restarted):
    composition = restarted("--delay-start", str(DELAY_S))
    handle = composition.handles["f"]
    began = time.monotonic()
    with pytest.raises(TimedOut, match=r"tools/call got no answer within 2 s"):
        handle.call_tool("hang")
    took = time.monotonic() - began
    # It waited for the slow start, then its own full call timeout; no longer than both bounds.
    assert CALL_S + DELAY_S * 0.5 <= took < STARTUP_S + 1.0 + CALL_S + 2.0, f"took {took:.2f} s"
    assert handle.status()["attempt"] == 1  # the background dial's connection, not a second dial
    assert "ok" in text_of(handle.call_tool("echo", {"text": "ok"}))


def test_a_call_during_a_background_dial_that_never_ends_fails_within_the_startup_timeout(restarted):
    composition = restarted("--delay-start", "60")  # never answers within startupTimeoutMs
    handle = composition.handles["f"]
    began = time.monotonic()
    with pytest.raises(Unavailable):
        handle.call_tool("echo", {"text": "never"})
    took = time.monotonic() - began
    assert took < STARTUP_S + 1.0 + 2.0, f"took {took:.2f} s: longer than startupTimeoutMs allows"
    assert handle.status()["attempt"] == 1
