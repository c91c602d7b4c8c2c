"""``albedo-mcp demo``: what albedo_actors does, shown on the bundled demo server.

It configures copies of :mod:`albedo_actors.demo.server` in a throwaway home with a
throwaway SQLite store, and shows three stages, each on a fresh runtime (registry,
preparer, one session composer; see :mod:`albedo_actors.runtime`):

1. First start: two servers, one speaking both eras (found modern) and one speaking
   only the handshake era, are dialled at once; their catalogues are saved. It lists
   what they advertise and calls a tool on each.
2. Second start: the same servers are advertised at once from the saved catalogues
   (and dialled in the background, which finds nothing new).
3. A server that is down at the start is left out with a warning; once it is back,
   the next activity of the session (a turn, after ``retryMs``) probes it and it
   joins after that turn.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import textwrap
import time
from typing import TYPE_CHECKING, Callable, TextIO

from ..actors.composer import ProbesSettled
from ..config import McpConfig, ServerConfig
from ..runtime import Runtime

if TYPE_CHECKING:
    from ..store import Store

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "server.py")
RETRY_MS = 30_000  # the default retryMs; the demo clock moves it forward at once
JOIN_TIMEOUT = 30.0  # a bound on stage 3, never an expected duration

# Runs the demo server, unless a file named "down" sits beside this script: then it
# fails to start, like a server that is down for maintenance.
SWITCH = textwrap.dedent(
    """
    import os, sys
    here = os.path.dirname(os.path.abspath(__file__))
    if os.path.exists(os.path.join(here, "down")):
        sys.exit("down for maintenance")
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
    """
)


def _server(name: str, era: str) -> ServerConfig:
    return ServerConfig(name=name, type="stdio", command=sys.executable, args=("-I", SERVER, "--era", era))


def demo_config(home: str) -> McpConfig:
    """Two demo servers: ``modern`` (dual-era) and ``classic`` (2025-11-25 only)."""
    return McpConfig(home=home, servers=(_server("modern", "dual"), _server("classic", "legacy")), retry_ms=RETRY_MS)


def _switchable(home: str, name: str) -> ServerConfig:
    """A demo server that cannot start while HOME/switch/down exists."""
    folder = os.path.join(home, "switch")
    os.makedirs(folder, exist_ok=True)
    script = os.path.join(folder, "switch.py")
    with open(script, "w", encoding="utf-8") as handle:
        handle.write(SWITCH)
    return ServerConfig(name=name, type="stdio", command=sys.executable, args=("-I", script, "-I", SERVER))


def run_demo(out: TextIO = sys.stdout) -> int:
    from ..store import open_store

    say: Callable[..., None] = lambda text="": print(text, file=out)  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="albedo-demo-") as home:
        store = open_store(home)  # SQLite at HOME/albedo.db
        try:
            config = demo_config(home)
            ok = _first_start(config, store, say)
            ok = _second_start(config, store, say) and ok
            ok = _comes_back(home, config, store, say) and ok
        finally:
            store.close()
        say("Next: add your own servers (`albedo-mcp add URL`, `albedo-mcp add 'COMMAND LINE'`, or")
        say("`albedo-mcp import FILE` for another client's configuration), check them with `albedo-mcp doctor`,")
        say("and run `albedo-mcp tools` and `albedo-mcp call SERVER/TOOL key=value`.")
    return 0 if ok else 3


def _first_start(config: McpConfig, store: Store, say: Callable[..., None]) -> bool:
    say("albedo_actors demo: two bundled MCP servers over stdio, one per protocol era.")
    say()
    say("1. First start: nothing is saved yet, so every server is dialled (all at once).")
    started = time.monotonic()
    with Runtime(config.home, store, config=config, enabled=True) as runtime:  # the demo session chooses MCP on
        composition = runtime.composition()
        say(f"   Dialled {len(composition.catalogues)} servers in {time.monotonic() - started:.2f} s; their catalogues are saved.\n")
        for name, reason in composition.left_out.items():
            say(f"  left out: server {name!r}: {reason}")
        warnings = (*composition.warnings, *composition.operation_warnings)
        tools = composition.operations  # built once, with the composition
        for name, catalogue in composition.catalogues.items():
            info = catalogue.server_info
            say(f"server {name!r} ({info.get('name', '?')} {info.get('version', '')}):")
            how = "server/discover" if catalogue.era == "modern" else "the initialize handshake"
            say(f"  era found: {catalogue.era}, protocol {catalogue.protocol_version} (opened with {how})")
            say(f"  advertises {len(catalogue.tools)} tools, {len(catalogue.resources)} resources, {len(catalogue.prompts)} prompts:")
            for tool in tools:
                if tool.server == name:
                    say(f"    {tool.name:<34} {' '.join(tool.description.split())[:100]}")
            result = runtime.mcp().call(f"{name}/add", a=2, b=40).as_dict()
            text = " ".join(b.get("text", "") for b in result.get("content", []) if b.get("type") == "text")
            say(f"  called {name}/add with {{\"a\": 2, \"b\": 40}} -> {text!r}")
            if "structuredContent" in result:
                say(f"    structured: {json.dumps(result['structuredContent'])}")
            say()
        for warning in warnings:
            say(f"  warning: {warning}")
        found = len(composition.catalogues)
    say("   Closed both connections; the server processes have ended.\n")
    return found == len(config.servers)


def _second_start(config: McpConfig, store: Store, say: Callable[..., None]) -> bool:
    say("2. Second start (a fresh runtime on the same store): advertised from the saved catalogues.")
    started = time.monotonic()
    with Runtime(config.home, store, config=config, enabled=True) as runtime:  # the demo session chooses MCP on
        composition = runtime.composition()
        elapsed = time.monotonic() - started
        names = ", ".join(sorted(composition.catalogues))
        say(f"   Ready in {elapsed:.2f} s with {names}, without waiting on any server;")
        settled = runtime.wait_background(JOIN_TIMEOUT)
        say(f"   the background dials {'have settled' if settled else 'were still running at exit'}.\n")
        return set(composition.catalogues) == {s.name for s in config.servers}


class _TurnClock:
    """The demo's clock: it moves only when the demo says time has passed."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _comes_back(home: str, config: McpConfig, store: Store, say: Callable[..., None]) -> bool:
    say(f"3. A server that is down at the start (retryMs {config.retry_ms}) joins once it is back.")
    late = _switchable(home, "late")
    down = os.path.join(home, "switch", "down")
    open(down, "w").close()
    with_late = McpConfig(home=home, servers=(*config.servers, late), retry_ms=config.retry_ms)
    clock = _TurnClock()  # the demo's time: the next turn comes retryMs later
    with Runtime(home, store, config=with_late, clock=clock, enabled=True) as runtime:
        first = runtime.composition()
        for name, reason in first.left_out.items():
            say(f"   left out at the start: server {name!r}: {reason}")
        os.remove(down)
        say("   It is back now; nothing happens until the session is active.")
        mcp = runtime.mcp()
        # The next turn, retryMs later, is activity: the left-out server is probed,
        # found back, and joins after that turn (never in the middle of it).
        clock.now += with_late.retry_ms / 1000
        runtime.turn_started()
        mcp.call("modern/echo", text="a turn")
        runtime.request(ProbesSettled(), timeout=JOIN_TIMEOUT)
        during = "late" in runtime.composition().catalogues
        runtime.turn_ended(JOIN_TIMEOUT)  # the refresh it started, if any, has landed
        current = runtime.composition()
        joined = "late" in current.catalogues and not during
        if joined:
            names = ", ".join(sorted(current.catalogues))
            say(f"   On the next turn ({with_late.retry_ms / 1000:g} s later) it was probed; it joined after that turn: the session now has {names}.")
            say(f"   The model is told its tools changed: {runtime.take_changes()}.")
        else:
            say("   It did not join after the next turn.")
    say("   Closed; every server process has ended.\n")
    return joined
