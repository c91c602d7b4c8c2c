"""A restart opens a server in the era its saved catalogue recorded (issue 11, item 7).

2026-07-28 basic/versioning lets a client persist a server's era across restarts of the
same configuration and re-probe when the assumption stops working. Through the real
store, registry, preparer and clients, against the fault servers: a stdio server saved
as legacy gets ``initialize`` at once (no ``server/discover``, no 1 s probe grace); a
server whose saved era is wrong still opens, through the fallback, and its new era is
saved. Over HTTP, a server saved as legacy is sent no ``server/discover`` POST.

The stdio fault server is started through a small launcher that reads its era flags from
a file beside it, so the configuration (and so the saved catalogue's fingerprint) stays
the same while the server behind it changes era.
"""

from __future__ import annotations

import json
import sys
import time

import pytest

from albedo_actors.actors.preparer import Prepare
from albedo_actors.connection import negotiation as connection_module
from albedo_actors.config import McpConfig, ServerConfig
from helpers import FAULT_SERVER, flags_launcher, read_record, request, set_flags, text_of

INIT_FAULT_SERVER = FAULT_SERVER.replace("fault_server.py", "init_fault_server.py")

# A longer probe grace than the real 1 s, so that "no grace was waited" is a generous
# bound that a loaded machine cannot break: a probed dial takes at least GRACE seconds.
GRACE = 3.0


@pytest.fixture
def long_grace(monkeypatch):
    monkeypatch.setattr(connection_module, "PROBE_GRACE", GRACE)


def switchable(tmp_path, record, *flags, startup_ms: int = 20_000) -> ServerConfig:
    return ServerConfig(name="f", type="stdio", command=sys.executable,
                        args=(flags_launcher(tmp_path, *flags), FAULT_SERVER, "--record", str(record)),
                        startup_timeout_ms=startup_ms)


def prepare(preparer, config):
    return request(preparer, Prepare(config), 60)


def methods(record) -> list[str]:
    return [line.get("method") for line in read_record(record) if "method" in line]


def saved_era(store) -> str:
    return store.load_catalogue("f").era


def wait_saved_era(store, era: str, within: float = 15.0) -> None:
    """The client tells the preparer what it found, which saves it: poll, bounded."""
    deadline = time.monotonic() + within
    while saved_era(store) != era:
        assert time.monotonic() < deadline, f"the saved era is still {saved_era(store)!r}, not {era!r}"
        time.sleep(0.02)


def timed_echo(composition) -> float:
    began = time.monotonic()
    result = composition.handles["f"].call_tool("echo", {"text": "hi"})
    took = time.monotonic() - began
    assert not result.get("isError") and "hi" in text_of(result)
    return took


def test_a_saved_legacy_stdio_server_gets_initialize_at_once_without_the_probe(tmp_path, runtime, long_grace):
    record = tmp_path / "record"
    # A legacy-only server that never answers server/discover: probing it costs the grace.
    config = McpConfig(home=str(tmp_path / "home"), servers=(switchable(tmp_path, record, "--era", "legacy", "--probe", "silent"),))
    store, preparer = runtime(background=False)
    began = time.monotonic()
    prepare(preparer, config)  # nothing saved yet: probed, then saved as legacy
    assert time.monotonic() - began >= GRACE
    assert methods(record)[:2] == ["server/discover", "initialize"]
    wait_saved_era(store, "legacy")

    record.unlink()
    _store2, preparer2 = runtime(background=False)  # a restart on the same store
    composition = prepare(preparer2, config)
    assert composition.catalogues["f"].era == "legacy" and composition.left_out == {}
    took = timed_echo(composition)  # this dials the server
    assert took < GRACE, f"the first call took {took:.2f} s: it waited for the probe grace"
    seen = methods(record)
    assert "server/discover" not in seen
    assert seen[:3] == ["initialize", "notifications/initialized", "tools/list"]


def test_a_server_saved_as_modern_that_is_now_legacy_only_opens_through_the_fallback(tmp_path, runtime):
    record = tmp_path / "record"
    server = switchable(tmp_path, record, "--era", "modern", startup_ms=4000)
    config = McpConfig(home=str(tmp_path / "home"), servers=(server,))
    store, preparer = runtime(background=False)
    prepare(preparer, config)
    assert saved_era(store) == "modern"

    set_flags(tmp_path, "--era", "legacy", "--probe", "silent")  # now legacy, silent on the probe
    record.unlink()
    _store2, preparer2 = runtime(background=False)
    composition = prepare(preparer2, config)
    assert composition.catalogues["f"].era == "modern"  # what was saved
    timed_echo(composition)  # initialize follows the unanswered probe (half the startup time)
    assert methods(record)[:2] == ["server/discover", "initialize"]
    assert composition.handles["f"].status()["era"] == "legacy"
    wait_saved_era(store, "legacy")  # the era found is saved for the next restart


def test_a_saved_modern_server_that_refuses_the_probe_falls_back_at_once(tmp_path, runtime):
    record = tmp_path / "record"
    config = McpConfig(home=str(tmp_path / "home"), servers=(switchable(tmp_path, record, "--era", "modern", startup_ms=20_000),))
    store, preparer = runtime(background=False)
    prepare(preparer, config)
    set_flags(tmp_path, "--era", "legacy", "--probe", "error")  # answers server/discover -32601
    record.unlink()
    _store2, preparer2 = runtime(background=False)
    composition = prepare(preparer2, config)
    took = timed_echo(composition)
    assert took < 10, f"took {took:.2f} s: the fallback waited instead of following the refusal"
    assert methods(record)[:2] == ["server/discover", "initialize"]
    wait_saved_era(store, "legacy")


def test_a_saved_modern_server_is_sent_no_initialize(tmp_path, runtime, long_grace):
    record = tmp_path / "record"
    # Slow to answer the probe: a normal probe would send initialize after the grace.
    config = McpConfig(home=str(tmp_path / "home"), servers=(switchable(tmp_path, record, "--era", "modern", startup_ms=20_000),))
    store, preparer = runtime(background=False)
    prepare(preparer, config)
    set_flags(tmp_path, "--era", "modern", "--delay-start", str(GRACE + 0.5))
    record.unlink()
    _store2, preparer2 = runtime(background=False)
    composition = prepare(preparer2, config)
    timed_echo(composition)
    seen = methods(record)
    assert seen[0] == "server/discover" and "initialize" not in seen


def test_a_server_saved_as_legacy_that_is_now_modern_only_opens_through_the_fallback(tmp_path, runtime):
    record = tmp_path / "record"
    config = McpConfig(home=str(tmp_path / "home"), servers=(switchable(tmp_path, record, "--era", "legacy"),))
    store, preparer = runtime(background=False)
    prepare(preparer, config)
    assert saved_era(store) == "legacy"

    set_flags(tmp_path, "--era", "modern")  # answers initialize with -32022
    record.unlink()
    _store2, preparer2 = runtime(background=False)
    composition = prepare(preparer2, config)
    timed_echo(composition)
    assert methods(record)[:2] == ["initialize", "server/discover"]
    assert composition.handles["f"].status()["era"] == "modern"
    wait_saved_era(store, "modern")


@pytest.mark.parametrize("initialize", ["error", "silent"])
def test_a_stdio_server_saved_as_legacy_that_refuses_or_ignores_initialize_is_probed(tmp_path, clients, initialize):
    # Now modern, and -32601 or silence on initialize proves no era: the probe follows
    # (at once on the refusal, after the grace on silence) and decides.
    record = tmp_path / "record"
    handle = clients.start(ServerConfig(
        name="f", type="stdio", command=sys.executable, startup_timeout_ms=20_000,
        args=(INIT_FAULT_SERVER, "--initialize", initialize, "--era", "modern", "--record", str(record))))
    handle.use_saved_era("legacy")
    assert handle.connect().era == "modern"
    assert methods(record)[:2] == ["initialize", "server/discover"]
    assert "hi" in text_of(handle.call_tool("echo", {"text": "hi"}))


# -- HTTP ------------------------------------------------------------------------------------------


@pytest.fixture
def fault(http_fault):
    return http_fault


def posted(server) -> list[str]:
    return [json.loads(r.body).get("method") for r in server.requests if r.method == "POST" and r.body]


def test_an_http_server_saved_as_legacy_is_sent_initialize_without_the_probe(fault, clients):
    server = fault(era="legacy")
    handle = clients.start(ServerConfig(name="f", type="http", url=server.url))
    handle.use_saved_era("legacy")
    assert handle.connect().era == "legacy"
    seen = posted(server)
    assert "server/discover" not in seen and seen[0] == "initialize"
    assert "hi" in text_of(handle.call_tool("echo", {"text": "hi"}))


def test_an_http_server_saved_as_legacy_that_is_now_modern_only_opens_through_the_fallback(fault, clients):
    server = fault(era="modern")
    handle = clients.start(ServerConfig(name="f", type="http", url=server.url))
    handle.use_saved_era("legacy")
    assert handle.connect().era == "modern"
    seen = posted(server)
    assert seen[:2] == ["initialize", "server/discover"]
    assert "hi" in text_of(handle.call_tool("echo", {"text": "hi"}))


def test_an_http_server_saved_as_modern_that_is_now_legacy_only_opens_through_the_fallback(fault, clients):
    server = fault(era="legacy")
    handle = clients.start(ServerConfig(name="f", type="http", url=server.url))
    handle.use_saved_era("modern")
    assert handle.connect().era == "legacy"
    assert posted(server)[:2] == ["server/discover", "initialize"]
    assert "hi" in text_of(handle.call_tool("echo", {"text": "hi"}))
