"""Issue 12, Deliver 4: one future per request, and a stop that closes every server at once."""

from __future__ import annotations

import concurrent.futures
import inspect
import os
import sys
import threading

import pykka
import pytest

from albedo_actors.actors.client import Connect, ServerClient, ServerHandle
from albedo_actors.actors.composer import Open, ProbesSettled, Reload, SessionComposer, TurnEnded
from albedo_actors.actors.preparer import BackgroundSettled, Composition, Prepare, RuntimePreparer
from albedo_actors.actors.refresher import TokenRefresher
from albedo_actors.actors.registry import Release, ServerRegistry
from albedo_actors.config import McpConfig, ServerConfig
from albedo_actors.connection import Connection
from albedo_actors.errors import AlbedoError
from albedo_actors.runtime import Runtime
from helpers import fault_config, request, sent, text_of

RENDEZVOUS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "servers", "eof_rendezvous_server.py")


@pytest.mark.parametrize("actor", [SessionComposer, RuntimePreparer, ServerClient, ServerRegistry, TokenRefresher])
def test_no_actor_method_answers_with_a_future(actor):
    # A proxy call's pykka future holds the answer itself; what answers later is a
    # request message whose one reply future the caller made (actors/reply.py).
    for name, method in inspect.getmembers(actor, inspect.isfunction):
        if name.startswith("_") or name.startswith("on_") or method.__module__.startswith("pykka"):
            continue
        answer = str(inspect.signature(method).return_annotation)
        assert "Future" not in answer, f"{actor.__name__}.{name} answers with {answer}"


def test_each_request_answers_with_its_value_on_one_future(tmp_path):
    home = str(tmp_path / "home")
    config = McpConfig(home=home, servers=(fault_config("f"),))
    with Runtime(home, None, config=config, enabled=True) as runtime:
        assert type(runtime.request(Reload(), timeout=60)) is Composition
        assert runtime.request(TurnEnded(), timeout=60) is None  # nothing waited for the turn's end
        told = runtime.send(TurnEnded())  # a host that does not wait: the reply is still the one future
        assert told.result(timeout=60) is None
        assert runtime.request(ProbesSettled(), timeout=60) is None
        prepared = request(runtime._preparer, Prepare(config))
        assert type(prepared) is Composition and set(prepared.catalogues) == {"f"}
        runtime._registry.tell(Release(prepared.held))  # what this extra preparation held
        assert request(runtime._preparer, BackgroundSettled()) is None
        handle = runtime.composition().handles["f"]
        assert text_of(handle.call_tool("echo", {"text": "one future"})) == "one future"
    standalone = ServerHandle.start(fault_config("g"), home)
    try:
        assert isinstance(request(standalone._ref, Connect()), Connection)
    finally:
        standalone.stop()


def test_a_request_still_queued_when_the_session_stops_is_answered(tmp_path):
    home = str(tmp_path / "home")
    config = McpConfig(home=home, servers=(fault_config("f"),))
    block, entered, gate = threading.Event(), threading.Event(), threading.Event()

    def source():
        if block.is_set():
            entered.set()
            gate.wait(30)  # the composer's own thread is busy reading the configuration
        return config

    registry = ServerRegistry.start(home)
    preparer = RuntimePreparer.start(registry, None)
    composer = SessionComposer.start(preparer, registry, source, enabled=True)
    try:
        request(composer, Open())
        block.set()
        busy = sent(composer, Reload())
        assert entered.wait(10)
        stopping = composer.stop(block=False)  # queued behind the busy Reload
        queued = sent(composer, Reload())  # queued behind the stop: pykka would drop it
        gate.set()
        for reply in (busy, queued):
            error = reply.exception(timeout=10)  # answered, not left to its caller's bound
            assert isinstance(error, AlbedoError) and "closed" in str(error)
        stopping.get(timeout=30)
    finally:
        gate.set()
        for ref in (composer, preparer, registry):
            try:
                ref.stop(timeout=30)
            except pykka.ActorDeadError:
                pass


def test_a_request_to_a_stopped_session_is_our_error_at_once(tmp_path):
    home = str(tmp_path / "home")
    runtime = Runtime(home, None, config=McpConfig(home=home, servers=()), enabled=True)
    runtime.start()
    composer = runtime._composer
    runtime.stop()
    with pytest.raises(pykka.ActorDeadError):
        composer.tell(Reload())
    with pytest.raises(AlbedoError, match="not running"):
        runtime.request(Reload())


def rendezvous_servers(directory, n):
    return tuple(
        ServerConfig(name=f"r{i:02d}", type="stdio", command=sys.executable, args=(RENDEZVOUS, str(directory), str(n), f"r{i:02d}"))
        for i in range(n)
    )


@pytest.mark.timeout(240)
def test_stopping_a_runtime_gives_every_server_eof_before_it_waits_on_any(tmp_path):
    # Each server, once its stdin ends, waits (bounded) for the EOF of all the others
    # before it exits, and records how many it saw. A stop that waited on one server's
    # end before the next got EOF leaves counts below 30; the leak fixture then checks
    # that no process, thread or actor is left.
    n = 30
    marks = tmp_path / "marks"
    marks.mkdir()
    home = str(tmp_path / "home")
    config = McpConfig(home=home, servers=rendezvous_servers(marks, n))
    with Runtime(home, None, config=config, enabled=True) as runtime:
        composition = runtime.composition()
        assert len(composition.catalogues) == n, dict(composition.left_out)
    seen = {path.name: path.read_text() for path in marks.glob("*.seen")}
    assert len(seen) == n, f"{n - len(seen)} servers did not record their end (killed before it?)"
    assert set(seen.values()) == {str(n)}, f"servers saw fewer EOFs than {n} before exiting: {sorted(seen.items())}"


def test_a_runtime_stopping_while_a_server_dials_does_not_wait_for_the_dial(tmp_path, caplog):
    # A server that never answers its opening (60 s startup timeout): the runtime stops
    # while its session prepares, the preparer's helper thread waiting on that dial.
    # The stop closes the clients first, so the dial ends at once and no on_stop gives
    # up on a helper thread (each would log it after its 30 s bound). The outcome is
    # checked, not the time; pytest-timeout is the backstop.
    home = str(tmp_path / "home")
    slow = fault_config("slow", "--delay-start", "3600", startup_timeout_ms=60_000)
    config = McpConfig(home=home, servers=(slow,))
    asked = threading.Event()

    def source():
        asked.set()
        return config

    runtime = Runtime(home, None, config=source, enabled=True)
    opened: concurrent.futures.Future = concurrent.futures.Future()

    def start():
        try:
            opened.set_result(runtime.start())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            opened.set_exception(exc)

    opener = threading.Thread(target=start, name="test-open")
    opener.start()
    try:
        assert asked.wait(20)
        runtime.stop()
        error = opened.exception(timeout=20)
        assert error is None or isinstance(error, AlbedoError)
    finally:
        opener.join(30)
        runtime.stop()
    assert not opener.is_alive()
    assert [r.getMessage() for r in caplog.records if "did not end" in r.getMessage()] == []
