"""``albedo-mcp demo``: what albedo_actors does, shown on the bundled demo server.

It configures two copies of :mod:`albedo_actors.demo.server` in a throwaway home, one
speaking both eras (so it is found modern) and one speaking only the handshake era,
connects to both at once, lists what they advertise and calls a tool on each.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from typing import TextIO

from ..config import McpConfig, ServerConfig
from ..session import Session

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "server.py")


def demo_config(home: str) -> McpConfig:
    """Two demo servers: ``modern`` (dual-era) and ``classic`` (2025-11-25 only)."""

    def server(name: str, era: str) -> ServerConfig:
        return ServerConfig(name=name, type="stdio", command=sys.executable, args=("-I", SERVER, "--era", era))

    return McpConfig(home=home, servers=(server("modern", "dual"), server("classic", "legacy")))


def run_demo(out: TextIO = sys.stdout) -> int:
    with tempfile.TemporaryDirectory(prefix="albedo-demo-") as home:
        config = demo_config(home)
        say = lambda text="": print(text, file=out)  # noqa: E731
        say("albedo_actors demo: two bundled MCP servers over stdio, one per protocol era.")
        started = time.monotonic()
        warnings: list[str] = []
        with Session(config, list(config.servers), warnings.append) as session:
            say(f"Connected to {len(session.catalogues)} servers in parallel in {time.monotonic() - started:.2f} s.\n")
            for failure in session.failures.values():
                say(f"  left out: {failure}")
            tools = session.tools()
            for name, catalogue in session.catalogues.items():
                info = catalogue.server_info
                say(f"server {name!r} ({info.get('name', '?')} {info.get('version', '')}):")
                how = "server/discover" if catalogue.era == "modern" else "the initialize handshake"
                say(f"  era found: {catalogue.era}, protocol {catalogue.protocol_version} (opened with {how})")
                say(f"  advertises {len(catalogue.tools)} tools, {len(catalogue.resources)} resources, {len(catalogue.prompts)} prompts:")
                for tool in tools:
                    if tool.server == name:
                        say(f"    {tool.name:<34} {' '.join(tool.description.split())[:100]}")
                result = session.handles[name].call_tool("add", {"a": 2, "b": 40})
                text = " ".join(b.get("text", "") for b in result.get("content", []) if b.get("type") == "text")
                say(f"  called {name}/add with {{\"a\": 2, \"b\": 40}} -> {text!r}")
                if "structuredContent" in result:
                    say(f"    structured: {json.dumps(result['structuredContent'])}")
                say()
            for warning in warnings:
                say(f"  warning: {warning}")
        say("Closed both connections; the server processes have ended.")
        say("Next: put your own servers in $ALBEDO_HOME/extensions.json (see config/extensions.json)")
        say("and run `albedo-mcp tools` and `albedo-mcp call SERVER/TOOL --args '{...}'`.")
    return 0 if len(session.catalogues) == len(config.servers) else 3
