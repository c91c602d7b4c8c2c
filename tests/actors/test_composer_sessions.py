"""SessionComposer with preparations in flight, sessions sharing clients, and turns.

Issue 11, item 3: a preparation releases only what it acquired, so no client that a
composition, a preparation in flight or another session holds is ever stopped; a swap
lands only between turns. Item 9: probe intervals double and are capped at 20 × retryMs.

Everything runs through the real actors and real fault servers. A preparation is held
in flight by an editor overlay behind a gate: its server starts only once the test
creates the gate file, so the order of events is set by the test, not by timing.
"""

import sys
import textwrap

import pytest

from albedo_actors.actors.composer import PROBE_CAP, Open, ProbesSettled, Reload, SessionComposer, SetEnabled, SetOverlays, TurnEnded
from albedo_actors.actors.preparer import RuntimePreparer
from albedo_actors.actors.registry import ServerRegistry
from albedo_actors.config import McpConfig, ServerConfig
from albedo_actors.store import open_store
from helpers import FAULT_SERVER, Owner, fault_config, request, sent, text_of

# A door in front of the fault server: counts its starts (one line per start in
# "starts-<name>"), refuses to start while "down-<name>" exists, and waits (bounded) for
# "gate-<name>" when started with --gated. Then it runs the fault server.
DOOR = textwrap.dedent(
    """
    import os, sys, time
    here = os.path.dirname(os.path.abspath(__file__))
    name, args = sys.argv[1], sys.argv[2:]
    with open(os.path.join(here, "starts-" + name), "a") as f:
        f.write("start\\n")
    if os.path.exists(os.path.join(here, "down-" + name)):
        sys.exit("down for maintenance")
    if args[:1] == ["--gated"]:
        args = args[1:]
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(here, "gate-" + name)) and time.monotonic() < deadline:
            time.sleep(0.02)
    os.execv(sys.executable, [sys.executable, *args])
    """
)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def door(tmp_path, name, *flags, gated=False):
    script = tmp_path / "door.py"
    script.write_text(DOOR)
    args = (str(script), name) + (("--gated",) if gated else ()) + (FAULT_SERVER, *flags)
    return ServerConfig(name=name, type="stdio", command=sys.executable, args=args)


def starts(tmp_path, name):
    path = tmp_path / f"starts-{name}"
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.fixture
def daemon(tmp_path):
    """One store, registry and preparer; ``daemon.session(source, **kw)`` starts a composer on them."""
    home = str(tmp_path / "home")
    store = open_store(home)
    registry = ServerRegistry.start(home)
    preparer = RuntimePreparer.start(registry, store)
    composers = []

    class Daemon:
        pass

    def session(source, *, enabled=True, clock=None):
        ref = SessionComposer.start(preparer, registry, source, enabled=enabled, overlays_enabled=True, clock=clock or Clock())
        composers.append(ref)
        return ref.proxy()

    d = Daemon()
    d.home, d.store, d.registry, d.preparer, d.session = home, store, registry, preparer, session
    d.stop = lambda ref: (composers.remove(ref.actor_ref), ref.actor_ref.stop(timeout=30))
    yield d
    for ref in composers:
        ref.stop(timeout=30)
    preparer.stop(timeout=30)
    registry.stop(timeout=30)
    store.close()


def works(handle, text="still"):
    return handle.alive and text_of(handle.call_tool("echo", {"text": text})) == text


def test_two_preparations_in_flight_stop_nothing_the_newer_one_holds(tmp_path, daemon):
    config = McpConfig(home=daemon.home, servers=(fault_config("f"),))
    composer = daemon.session(lambda: config)
    first = sent(composer, Open())  # preparation 1
    # Preparation 2, held in flight by its overlay until the gate opens.
    second = sent(composer, SetOverlays((door(tmp_path, "slow", gated=True),)))
    stale = first.result(timeout=60)  # preparation 1 landed, stale: nothing was shown yet
    assert stale.handles == {}
    (tmp_path / "gate-slow").write_text("")
    current = second.result(timeout=60)
    assert set(current.catalogues) == {"f"} and set(current.overlays) == {"slow"}
    assert works(current.handles["f"])  # the stale one stopped none of the clients it shared
    assert daemon.registry.proxy().held(current.handles["f"]).get(timeout=10) == 1


def test_two_sessions_share_clients_and_a_late_joiner_never_stops_the_others(tmp_path, daemon):
    configs = [McpConfig(home=daemon.home, servers=(fault_config("x"),))]
    a = daemon.session(lambda: configs[-1])
    b = daemon.session(lambda: configs[-1], enabled=False)
    shown_a = request(a, Open())
    assert request(b, Open()).handles == {}
    old = shown_a.handles["x"]
    assert works(old)
    # The configuration changes; B turns MCP on first: the registry retires A's client
    # (replaced), which A still holds, so it keeps running until A lets go.
    configs.append(McpConfig(home=daemon.home, servers=(fault_config("x", "--era", "legacy"),)))
    shown_b = request(b, SetEnabled(True))
    new = shown_b.handles["x"]
    assert new is not old and new.connect().era == "legacy"
    assert works(old)  # B released nothing it did not hold
    # A follows; both show the same new client, and the old one closes: nobody holds it.
    shown_a = request(a, Reload())
    assert shown_a.handles["x"] is new and old.wait_closed(30)
    assert daemon.registry.proxy().held(new).get(timeout=10) == 2
    request(a, SetEnabled(False))  # A off: B's connection stays
    assert works(new) and daemon.registry.proxy().held(new).get(timeout=10) == 1
    request(b, SetEnabled(False))
    assert new.wait_closed(30)  # nobody holds it any more


def test_one_session_switching_off_while_another_opens(tmp_path, daemon):
    import _leaks

    config = McpConfig(home=daemon.home, servers=(fault_config("x"),))
    a = daemon.session(lambda: config)
    shown_a = request(a, Open())
    assert works(shown_a.handles["x"])
    b = daemon.session(lambda: config)
    opening = sent(b, SetOverlays((door(tmp_path, "slow", gated=True),)))  # B opens, in flight
    # B's request is a tell: wait (on answers, not time) until B has told the preparer
    # Prepare and the preparer has handled it, so the registry holds x for B.
    b.composition().get(timeout=10)
    daemon.preparer.proxy().unsubscribe(None).get(timeout=10)
    assert daemon.registry.proxy().held(shown_a.handles["x"]).get(timeout=10) == 2
    assert request(a, SetEnabled(False)).handles == {}  # A switches off meanwhile
    (tmp_path / "gate-slow").write_text("")
    shown_b = opening.result(timeout=60)
    assert shown_b.handles["x"] is shown_a.handles["x"]
    assert works(shown_b.handles["x"], "b's now")  # the same client, never stopped
    servers = [pid for pid in _leaks.descendants() if FAULT_SERVER in _leaks.command_line(pid)]
    assert len(servers) == 2  # x's server and B's overlay, both still running


def test_a_refresh_found_while_idle_is_applied_after_the_next_turn(tmp_path, daemon):
    from albedo_actors.actors.preparer import CatalogueSaved

    # New tools are trusted as they come (tool integrity would hold "fresh": tests/test_trust.py).
    config = McpConfig(home=daemon.home, servers=(fault_config("f", "--era", "legacy", "--probe", "error"),), new_tools="allow")
    composer = daemon.session(lambda: config)
    first = request(composer, Open())
    watcher = Owner.start()
    try:
        # The composer subscribed first, so it is told before the watcher.
        daemon.preparer.proxy().subscribe(watcher).get(timeout=10)
        events = watcher.proxy().events.get(timeout=10)
        first.handles["f"].call_tool("add_tool", {"name": "fresh"})  # changes while idle
        saved = events.get(timeout=30)
        assert isinstance(saved, CatalogueSaved)
        assert composer.composition().get(timeout=10) is first  # idle: nothing swapped
        composer.turn_started().get(timeout=10)  # the next turn runs with what it had
        assert composer.composition().get(timeout=10) is first
        current = request(composer, TurnEnded())
        assert current is not None and current is not first  # the refresh ran after that turn, not before it
        assert "fresh" in {t["name"] for t in current.catalogues["f"].tools}
        assert composer.composition().get(timeout=10) is current
    finally:
        watcher.stop()


def test_a_preparation_ready_during_a_turn_waits_for_its_end(tmp_path, daemon):
    import time

    configs = [McpConfig(home=daemon.home, servers=(fault_config("f"),))]
    composer = daemon.session(lambda: configs[-1])
    first = request(composer, Open())
    composer.turn_started().get(timeout=10)
    configs.append(McpConfig(home=daemon.home, servers=(fault_config("f"), fault_config("g"))))
    reloading = sent(composer, Reload())
    deadline = time.monotonic() + 60
    while not composer.swap_waiting().get(timeout=10):  # bounded poll: ready, not swapped
        assert time.monotonic() < deadline, "the preparation never became ready"
        assert not reloading.done()
    assert composer.composition().get(timeout=10) is first and not reloading.done()
    assert works(first.handles["f"], "mid-turn")
    landed = request(composer, TurnEnded(), 10)
    current = reloading.result(timeout=10)
    assert landed is current and set(current.catalogues) == {"f", "g"}
    assert composer.composition().get(timeout=10) is current
    assert composer.swap_waiting().get(timeout=10) is False


def test_probe_intervals_double_and_are_capped_at_twenty_times_retry_ms(tmp_path, daemon):
    (tmp_path / "down-back").write_text("")
    clock = Clock()
    config = McpConfig(home=daemon.home, servers=(door(tmp_path, "back"),), retry_ms=1000)
    composer = daemon.session(lambda: config, clock=clock)
    first = request(composer, Open())
    assert "back" in first.left_out
    prepared_at = clock.now

    def activity_probes():
        before = starts(tmp_path, "back")
        composer.turn_started().get(timeout=10)
        request(composer, ProbesSettled(), 30)
        return starts(tmp_path, "back") > before

    expected = [1, 2, 4, 8, 16, 20, 20]  # seconds: doubling from retryMs, capped at 20 × retryMs
    assert expected[-1] == PROBE_CAP * 1
    due = prepared_at
    for interval in expected:
        due += interval
        clock.now = due - 0.01
        assert not activity_probes(), f"probed before {interval} s had passed"
        clock.now = due
        assert activity_probes(), f"no probe {interval} s after the last"
    sent(composer, TurnEnded())
    assert composer.composition().get(timeout=10) is first  # still down: nothing changed


def test_a_lost_connection_is_an_event_its_receiver_handles(tmp_path, daemon):
    import _leaks

    before = len(_leaks._unexpected.seen)
    config = McpConfig(home=daemon.home, servers=(fault_config("f"),))
    composer = daemon.session(lambda: config)
    handle = request(composer, Open()).handles["f"]
    with pytest.raises(Exception):
        handle.call_tool("die")  # the server exits: the client tells its owner ServerLost
    assert works(handle, "redialled")  # the next call dials it again
    daemon.stop(composer)
    daemon.preparer.stop(timeout=30)  # the preparer handles all it was told before it stops
    assert _leaks._unexpected.seen[before:] == []


def test_a_failed_preparation_lets_go_of_what_it_was_given_and_nothing_else(tmp_path, daemon, monkeypatch):
    import albedo_actors.actors.preparer as preparer_module
    from albedo_actors.errors import ConfigError

    configs = [McpConfig(home=daemon.home, servers=(fault_config("f"),))]
    composer = daemon.session(lambda: configs[-1])
    shown = request(composer, Open())  # f's catalogue is saved now: not size-checked again
    f = shown.handles["f"]
    monkeypatch.setattr(preparer_module, "MAX_CATALOGUE_BYTES", 1000)
    configs.append(McpConfig(home=daemon.home, servers=(fault_config("f"), fault_config("g"))))
    with pytest.raises(ConfigError, match="over the 1000-byte limit"):
        request(composer, Reload())  # g's catalogue is over the limit: the whole preparation fails
    registry = daemon.registry.proxy()
    # The registry handles the failed preparation's Release before this ask.
    assert registry.held(f).get(timeout=10) == 1  # only the shown composition holds f
    assert registry.names().get(timeout=10) == ("f",)  # g's client, held by nobody, is gone
    assert composer.composition().get(timeout=10) is shown and works(f)
