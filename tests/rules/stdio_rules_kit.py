"""What the rules tests of tests/rules/ share: tests/servers/rules_stdio_server.py, run
through a real ServerHandle, and its record of every message it read."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any, Callable, Iterator

from albedo_actors.actors.client import ServerHandle
from albedo_actors.config import ServerConfig

import helpers

RULES_SERVER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "servers", "rules_stdio_server.py")
WAIT = 15.0  # a bound on every wait for a server's record, never an expected duration


def rules_config(log: str, *flags: str, name: str = "r", **overrides: Any) -> ServerConfig:
    """A stdio entry running the rules server, recording to ``log``."""
    return ServerConfig(name=name, type="stdio", command=sys.executable, args=(RULES_SERVER, log, *flags), **overrides)


def launches(log: str) -> list[list[dict]]:
    """The messages the server read, one list per launch (first launch first)."""
    lives: list[list[dict]] = []
    if not os.path.exists(log):
        return lives
    with open(log, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            record = json.loads(line)
            if "launch" in record:
                lives.append([])
            else:
                lives[-1].append(record)
    return lives


def sent(log: str, method: str) -> list[dict]:
    """Every message named ``method`` the server read, over all its launches."""
    return [m for life in launches(log) for m in life if m.get("method") == method]


def until(condition: Callable[[], Any], what: str) -> Any:
    """Poll ``condition`` (a server's record, a client's state) until it holds, bounded by WAIT."""
    return helpers.until(condition, what, WAIT)


@contextlib.contextmanager
def started(config: ServerConfig, home: str, **kwargs: Any) -> Iterator[ServerHandle]:
    """A ServerHandle of ``config``, stopped at the end."""
    handle = ServerHandle.start(config, home, None, **kwargs)
    try:
        yield handle
    finally:
        handle.stop()
