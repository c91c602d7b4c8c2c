"""Issue 24: the embedded host's face. One Daemon, many Sessions, each with plain turn
methods, its own choice of servers, change notices, async calls on per-server lanes,
tool lists that are the host's, and a namespace for every server name.

Servers are real stdio processes: the fault server, and ``mode_file_server.py`` (which
logs each start, so a test sees which servers were dialled at all).
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
import threading

import pytest

from albedo_actors.binding import Lanes, python_name
from albedo_actors.config import McpConfig
from albedo_actors.errors import ConfigError, SessionClosed, TimedOut
from albedo_actors.runtime import Daemon, Runtime

from helpers import FAULT_SERVER, fault_config, text_of

HERE = os.path.dirname(os.path.abspath(__file__))
MODE_SERVER = os.path.join(HERE, "servers", "mode_file_server.py")
WAIT = 60


# ``home``: conftest.py's fixture (an empty private home, no ALBEDO_DATABASE_URL).


def logged_entry(tmp_path, name: str, **extra) -> dict:
    """A stdio entry of a server that logs its start to tmp_path/started.log."""
    return {"type": "stdio", "command": sys.executable,
            "args": [MODE_SERVER, name, str(tmp_path / f"mode-{name}"), str(tmp_path / "started.log")], **extra}


def started(tmp_path) -> list[str]:
    log = tmp_path / "started.log"
    return log.read_text().split() if log.exists() else []


def write_config(home, servers: dict, mcp_on: bool = True) -> None:
    document = {"mcp": {"servers": servers}}
    if mcp_on:
        document["enabled"] = {"mcp": True}
    (home / "extensions.json").write_text(json.dumps(document))


def servers_of(composition) -> set[str]:
    return set(composition.catalogues)


# -- sessions and their own choices -------------------------------------------------------------


def test_two_sessions_share_a_daemon_and_one_switches_a_server_off_for_itself(home, tmp_path):
    write_config(home, {"f": logged_entry(tmp_path, "f"), "g": logged_entry(tmp_path, "g"),
                        "h": logged_entry(tmp_path, "h", enabled=False)})
    with Daemon(str(home)) as daemon:
        a, b = daemon.open_session(), daemon.open_session()
        assert servers_of(a.composition()) == servers_of(b.composition()) == {"f", "g"}
        assert sorted(started(tmp_path)) == ["f", "g"]  # one client per server, shared by both sessions
        a.set_server_enabled("g", False)  # applied from a's next turn: prepared now, swapped between turns
        a.set_server_enabled("h", True)  # off in extensions.json, on for a alone
        landed = a.reload(WAIT)  # told after them: the composition once both are in
        assert servers_of(landed) == {"f", "h"}
        assert servers_of(b.composition()) == {"f", "g"}  # b is untouched, and g still answers it
        assert text_of(b.mcp().call("g/echo", text="still").as_dict()) == "still"
        assert text_of(a.mcp().call("h/echo", text="mine").as_dict()) == "mine"
        with pytest.raises(ConfigError, match="'g'"):
            a.mcp().call("g/echo", text="off for a")
        assert a.server_choices() == {"g": False, "h": True}
        a.set_server_enabled("g", None)  # back to the configuration's choice
        assert servers_of(a.reload(WAIT)) == {"f", "g", "h"}
        assert sorted(started(tmp_path)) == ["f", "g", "h"]  # g was never dialled again, nor h for b
        with pytest.raises(ConfigError, match="no MCP server 'nope'"):
            a.set_server_enabled("nope", False)
        a.close()
        assert [s for s in daemon.sessions] == [b]
        with pytest.raises(SessionClosed):
            a.composition()


def test_a_server_switched_off_for_a_session_is_never_dialled_for_it(home, tmp_path):
    write_config(home, {"f": logged_entry(tmp_path, "f"), "g": logged_entry(tmp_path, "g", enabled=False)})
    with Daemon(str(home)) as daemon:
        session = daemon.open_session()
        session.turn_started()
        session.set_server_enabled("f", False)  # mid-turn: the swap waits for the turn's end
        assert servers_of(session.turn_ended(WAIT)) == set()
        session.reload(WAIT)
        assert started(tmp_path) == ["f"]  # only the first preparation's dial, never after the choice


def test_turn_methods_return_values_and_on_changed_runs_off_the_actors(home, tmp_path):
    write_config(home, {"f": logged_entry(tmp_path, "f"), "g": logged_entry(tmp_path, "g")})
    heard: list[tuple[str, set[str]]] = []
    done = threading.Event()

    def on_changed(session):
        # A callback may call back into its session: it runs on the daemon's event thread.
        heard.append((threading.current_thread().name, servers_of(session.composition())))
        done.set()

    with Daemon(str(home)) as daemon:
        session = daemon.open_session(on_changed=on_changed)
        during = session.turn_started()
        assert servers_of(during) == {"f", "g"}
        assert session.turn_ended(WAIT) is None  # nothing waited for this turn
        session.turn_started()
        session.set_server_enabled("g", False)
        assert servers_of(session.turn_ended(WAIT)) == {"f"}
        assert done.wait(WAIT)
        assert session.take_changes() is True and session.take_changes() is False
        session.turn_started()
        assert session.turn_ended(WAIT) is None  # no change: no notice
    assert heard == [("mcp-events", {"f"})]


# -- a running host hears every change -------------------------------------------------------------


def test_a_server_added_by_the_command_line_reaches_a_running_session(home, tmp_path):
    """The issue's reproduction: `albedo-mcp add` with no service running."""
    write_config(home, {"f": logged_entry(tmp_path, "f")})
    heard = threading.Event()
    with Runtime(str(home), on_changed=lambda session: heard.set()) as runtime:
        assert servers_of(runtime.composition()) == {"f"}
        added = subprocess.run(
            [sys.executable, "-m", "albedo_actors", "add", "--home", str(home), "--transport", "stdio",
             "--name", "late", shlex.join([sys.executable, FAULT_SERVER])],
            capture_output=True, text=True, timeout=WAIT, stdin=subprocess.DEVNULL)
        assert added.returncode == 0, added.stderr
        runtime.turn_started()
        runtime.turn_ended(WAIT)
        assert "late" in servers_of(runtime.composition())
        assert any(tool["server"] == "late" for tool in runtime.mcp().tools())
        assert runtime.take_changes() is True
        assert heard.wait(WAIT)
        assert text_of(runtime.mcp().call("late/echo", text="heard").as_dict()) == "heard"


def test_a_change_made_while_idle_is_picked_up_by_the_next_turn(home, tmp_path):
    write_config(home, {"f": logged_entry(tmp_path, "f")})
    with Runtime(str(home)) as runtime:
        write_config(home, {"f": logged_entry(tmp_path, "f"), "g": logged_entry(tmp_path, "g")})
        runtime.turn_started()  # the change is seen here; its swap lands when this turn ends
        assert servers_of(runtime.turn_ended(WAIT)) == {"f", "g"}


# -- tool lists are the host's ----------------------------------------------------------------------


def test_tool_lists_are_copies_the_host_may_change(home, tmp_path):
    write_config(home, {"f": logged_entry(tmp_path, "f")})
    with Daemon(str(home)) as daemon:
        a, b = daemon.open_session(), daemon.open_session()
        mcp = a.mcp()
        echo = next(tool for tool in mcp.tools() if tool["operation"] == "echo")
        pristine = json.loads(json.dumps(echo))
        echo["inputSchema"]["properties"].clear()  # a host converting it in place for a provider
        echo["inputSchema"]["type"] = "changed"
        described = mcp.describe("f/echo")
        described["inputSchema"]["required"] = ["nothing"]
        operations = a.composition().model_operations()
        operations[0].input_schema["x-provider"] = True
        assert mcp.describe("f/echo") == pristine
        assert next(tool for tool in b.mcp().tools() if tool["operation"] == "echo") == pristine
        assert all("x-provider" not in item.input_schema for item in b.composition().model_operations())
        assert text_of(mcp.call("f/echo", text="unchanged").as_dict()) == "unchanged"


# -- names ----------------------------------------------------------------------------------------------


def test_every_server_name_gets_a_namespace(tmp_path):
    home = str(tmp_path / "home")
    servers = (fault_config("server-everything"), fault_config("a-b"), fault_config("a_b"), fault_config("class"),
               fault_config("9lives"))
    with Runtime(home, config=McpConfig(home=home, servers=servers), enabled=True) as runtime:
        mcp = runtime.mcp()
        assert text_of(mcp.server_everything.echo(text="dot").as_dict()) == "dot"
        assert text_of(mcp["server-everything"].echo(text="key").as_dict()) == "key"
        assert mcp.a_b._server == "a_b"  # the server whose own name is the identifier keeps it
        assert mcp["a-b"]._server == "a-b"
        assert text_of(mcp.class_.echo(text="kw").as_dict()) == "kw"
        assert text_of(mcp.s_9lives.echo(text="digit").as_dict()) == "digit"
        assert {"server_everything", "a_b", "class_", "s_9lives"} <= set(dir(mcp))
        with pytest.raises(ConfigError, match="no MCP server 'nope'"):
            mcp["nope"]
        with pytest.raises(AttributeError, match="mcp\\['name'\\]"):
            mcp.nope  # noqa: B018

        async def main():
            amcp = runtime.amcp()
            return await amcp.server_everything.echo(text="async"), await amcp["a-b"].echo(text="key")

        first, second = asyncio.run(main())
        assert text_of(first.as_dict()) == "async" and text_of(second.as_dict()) == "key"


def test_a_tool_is_reached_by_its_own_name_or_its_python_name(tmp_path):
    from albedo_actors.config import ServerConfig

    home = str(tmp_path / "home")
    everything = os.path.join(os.environ.get("ALBEDO_PEERS", ""), ".bin", "mcp-server-everything")
    if not os.path.exists(everything):
        pytest.fail(f"the npm peer is missing: {everything} (scripts/test installs it)")
    servers = (ServerConfig(name="server-everything", type="stdio", command=everything),)
    with Runtime(home, config=McpConfig(home=home, servers=servers), enabled=True) as runtime:
        mcp = runtime.mcp()
        by_own = mcp["server-everything"]["get-sum"](a=2, b=3)
        by_python = mcp.server_everything.get_sum(a=2, b=3)
        assert by_own.isError is False and by_own.as_dict() == by_python.as_dict()
        with pytest.raises(ConfigError, match="no MCP operation 'server-everything/get_nothing'"):
            mcp.server_everything.get_nothing()


def test_python_names_by_rule():
    assert python_name("server-everything") == "server_everything"
    assert python_name("docs.v2") == "docs_v2"
    assert python_name("class") == "class_"
    assert python_name("9lives") == "s_9lives"
    assert python_name("café") == "café"


# -- async calls never wait on another server --------------------------------------------------------


def test_async_calls_to_a_slow_server_never_delay_another_server(tmp_path):
    home = str(tmp_path / "home")
    servers = (fault_config("slow", call_timeout_ms=60_000), fault_config("fast"))
    with Runtime(home, config=McpConfig(home=home, servers=servers), enabled=True) as runtime:
        amcp = runtime.amcp()

        async def main():
            slow = [asyncio.ensure_future(amcp.call("slow/sleep", seconds=30)) for _ in range(24)]
            await asyncio.sleep(0)  # one pass of the loop (no time): every slow call is handed over first
            fast = await amcp.call("fast/echo", text="never waits")
            pending = sum(not task.done() for task in slow)
            for task in slow:
                task.cancel()  # unstarted ones are dropped; the rest end with the session
            await asyncio.gather(*slow, return_exceptions=True)
            return fast, pending

        fast, pending = asyncio.run(main())
        assert text_of(fast.as_dict()) == "never waits"
        assert pending == 24  # every slow call was still running when the fast one answered


def test_a_call_that_waits_in_its_lane_past_its_timeout_is_not_sent():
    lanes = Lanes(size=1, linger=0.1)
    gate = threading.Event()
    try:
        first = lanes.submit("s", float("inf"), gate.wait, WAIT)
        late = lanes.submit("s", 0.0, lambda: "ran")  # its bound has passed before the lane frees
        gate.set()
        assert first.result(WAIT) is True
        with pytest.raises(TimedOut, match="was not sent"):
            late.result(WAIT)
        again = lanes.submit("s", float("inf"), gate.wait, WAIT)
        assert again.result(WAIT) is True
    finally:
        lanes.close()
    with pytest.raises(SessionClosed):
        lanes.submit("s", float("inf"), lambda: None)


def test_closing_the_lanes_fails_what_still_waits_and_ends_their_threads():
    lanes = Lanes(size=1, linger=30)
    gate, started = threading.Event(), threading.Event()

    def first() -> bool:
        started.set()
        return gate.wait(WAIT)

    running = lanes.submit("s", float("inf"), first)
    waiting = lanes.submit("s", float("inf"), lambda: "never")
    assert started.wait(WAIT)  # running now: what close() fails is only what still waits
    closer = threading.Thread(target=lanes.close)
    closer.start()
    with pytest.raises(SessionClosed):
        waiting.result(WAIT)
    gate.set()
    assert running.result(WAIT) is True
    closer.join(WAIT)


# -- over streamable HTTP too (the official SDK's server, both eras) -------------------------------------


@pytest.mark.parametrize("flags", [(), ("--legacy-only",)], ids=["modern", "legacy"])
def test_an_http_server_beside_a_slow_stdio_one_sessions_and_lanes(tmp_path, flags):
    from albedo_actors.config import ServerConfig
    from helpers import SdkHttpServer

    server = SdkHttpServer(*flags, record=str(tmp_path / "record.jsonl"))
    url = server.start()
    try:
        home = str(tmp_path / "home")
        servers = (fault_config("slow", call_timeout_ms=60_000), ServerConfig(name="sdk-web", type="http", url=url))
        with Daemon(home, config=McpConfig(home=home, servers=servers)) as daemon:
            a, b = daemon.open_session(enabled=True), daemon.open_session(enabled=True)
            a.set_server_enabled("sdk-web", False)
            assert servers_of(a.reload(WAIT)) == {"slow"}
            with pytest.raises(ConfigError, match="'sdk-web' is switched off for this session"):
                a.mcp().call("sdk-web/echo", text="off")
            amcp = b.amcp()

            async def main():
                slow = [asyncio.ensure_future(amcp.call("slow/sleep", seconds=30)) for _ in range(8)]
                await asyncio.sleep(0)  # one pass of the loop (no time): every slow call is handed over first
                fast = await amcp.sdk_web.echo(text="over http")
                pending = sum(not task.done() for task in slow)
                for task in slow:
                    task.cancel()
                await asyncio.gather(*slow, return_exceptions=True)
                return fast, pending

            fast, pending = asyncio.run(main())
            assert text_of(fast.as_dict()) == "over http" and pending == 8
    finally:
        server.stop()


# -- cancelling an awaited call ---------------------------------------------------------------------------


def wait_for(condition, what: str) -> None:
    """Poll ``condition`` (a server's record file), bounded by WAIT."""
    import time

    until = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < until, f"{what} did not happen within {WAIT} s"
        time.sleep(0.02)


def test_cancelling_an_awaited_call_cancels_its_request_as_a_timeout_does(tmp_path, caplog):
    from albedo_actors.binding import AsyncMcp
    from helpers import read_record

    record = tmp_path / "record.jsonl"
    home = str(tmp_path / "home")
    servers = (fault_config("slow", "--record", str(record), call_timeout_ms=60_000),)
    with Runtime(home, config=McpConfig(home=home, servers=servers), enabled=True) as runtime:
        amcp = AsyncMcp(runtime._composer, calls_per_server=1)  # one call in flight: the next waits in the lane

        def calls() -> list[dict]:
            return [m for m in read_record(record) if m.get("method") == "tools/call"]

        async def main():
            running = asyncio.ensure_future(amcp.call("slow/sleep", seconds=30))
            waiting = asyncio.ensure_future(amcp.call("slow/sleep", seconds=30))
            await asyncio.sleep(0)  # one pass of the loop (no time): both are handed over
            await asyncio.to_thread(wait_for, lambda: len(calls()) == 1, "the first call reaching the server")
            waiting.cancel()
            running.cancel()
            outcomes = await asyncio.gather(running, waiting, return_exceptions=True)
            return outcomes, await amcp.call("slow/echo", text="the lane is free")

        try:
            outcomes, after = asyncio.run(main())
        finally:
            amcp.close()
        assert all(isinstance(outcome, asyncio.CancelledError) for outcome in outcomes)
        (sent,) = calls()[:1]
        wait_for(lambda: any(m.get("method") == "notifications/cancelled" for m in read_record(record)),
                 "notifications/cancelled")
        cancelled = [m for m in read_record(record) if m.get("method") == "notifications/cancelled"]
        assert [m["params"]["requestId"] for m in cancelled] == [sent["id"]]
        assert [m["params"]["arguments"] for m in calls()] == [{"seconds": 30}, {"text": "the lane is free"}]  # the waiting one never went
        assert text_of(after.as_dict()) == "the lane is free"
    # The given-up calls' outcomes are nobody's: asyncio logs none of them as unretrieved
    # (such a log, from a garbage collection inside pytest's ast.parse, broke a CI run).
    import gc

    gc.collect()
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []


def test_a_sessions_own_budget_and_progress_through_its_methods(tmp_path):
    from albedo_actors.catalogue.search import SEARCH_TOOL

    home = str(tmp_path / "home")
    with Runtime(home, config=McpConfig(home=home, servers=(fault_config("f"),)), enabled=True) as runtime:
        session = runtime.session
        everything = runtime.composition().model_operations()
        assert len(everything) > 3 and SEARCH_TOOL not in {item.name for item in everything}
        session.set_budget(3)
        budgeted = runtime.composition().model_operations()
        assert len(budgeted) == 3 and budgeted[-1].name == SEARCH_TOOL
        session.set_budget(None, configured=True)
        assert len(runtime.composition().model_operations()) == len(everything)
        with pytest.raises(ConfigError, match="at least 2"):
            session.set_budget(1)
        assert session.progress() == []
