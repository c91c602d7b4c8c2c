"""Progress reaching the host: the binding's ``on_progress`` (sync and asyncio), the
composer's event, and ``albedo-mcp call``'s line on a terminal's stderr (a pty)."""

from __future__ import annotations

import asyncio
import json
import os
import select
import subprocess
import sys
import threading
import time

import pytest

from albedo_actors.binding import AsyncMcp, Mcp, ask
from helpers import composed, FAULT_SERVER, fault_config

RUN_TIMEOUT = 60


@pytest.fixture
def composer(tmp_path):
    with composed(str(tmp_path / "home"), fault_config("f", call_timeout_ms=1000)) as ref:
        yield ref


def test_the_binding_hands_progress_to_the_host_and_the_composer(composer):
    mcp = Mcp(composer)
    seen, during = [], []
    caller = threading.current_thread()

    def on_progress(report):
        assert threading.current_thread() is not caller
        seen.append(report)
        during.append(ask(composer.proxy().progress))  # the composer heard it first

    result = mcp.call("f/p_tick", {"interval_ms": 400, "count": 5}, on_progress=on_progress)
    assert result.content[0]["text"] == "ticked 5"  # 2 s of progress with callTimeoutMs 1000
    assert seen and seen[-1].progress == 5.0
    assert all(len(events) == 1 and events[0]["server"] == "f" and events[0]["operation"].startswith("mcp_f_p_tick")
               for events in during)
    assert ask(composer.proxy().progress) == []  # the call ended: the composer forgot it


def test_the_async_binding_takes_on_progress_too(composer):
    amcp = AsyncMcp(composer)
    seen = []

    async def main():
        return await amcp.call("f/p_tick", {"interval_ms": 100, "count": 3}, on_progress=seen.append)

    assert asyncio.run(main()).content[0]["text"] == "ticked 3"
    assert seen and seen[-1].progress == 3.0


# -- albedo-mcp call -----------------------------------------------------------------------------


def _home(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    entry = {"command": sys.executable, "args": [FAULT_SERVER], "callTimeoutMs": 1000}
    (home / "extensions.json").write_text(json.dumps({"mcp": {"servers": {"p": entry}}}), encoding="utf-8")
    return home


def _environ():
    return {k: v for k, v in os.environ.items() if k != "ALBEDO_DATABASE_URL"}


ARGS = json.dumps({"interval_ms": 300, "count": 5})


def _call_with_stderr_on_a_pty(home, *extra):
    import pty

    master, slave = pty.openpty()
    command = [sys.executable, "-m", "albedo_actors", "--home", str(home), "call", "p/p_tick", "--args", ARGS, *extra]
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, env=_environ())
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    break  # the child closed its end
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
        out, _ = proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return proc.returncode, out.decode(), seen.decode(errors="replace")


def test_call_shows_a_progress_line_on_a_terminal(tmp_path):
    code, out, err = _call_with_stderr_on_a_pty(_home(tmp_path))
    assert code == 0, err
    assert "ticked 5" in out
    assert "p/p_tick: " in err and "step " in err and "\x1b[K" in err
    assert err.endswith("\r\x1b[K")  # the line is cleared before the result


def test_call_shows_no_progress_line_with_json_or_when_piped(tmp_path):
    home = _home(tmp_path)
    code, out, err = _call_with_stderr_on_a_pty(home, "--json")
    assert code == 0, err
    assert json.loads(out)["content"][0]["text"] == "ticked 5"
    assert "p/p_tick" not in err and "\x1b" not in err
    piped = subprocess.run([sys.executable, "-m", "albedo_actors", "--home", str(home), "call", "p/p_tick", "--args", ARGS],
                           capture_output=True, text=True, timeout=RUN_TIMEOUT, env=_environ())
    assert piped.returncode == 0 and "ticked 5" in piped.stdout
    assert piped.stderr == ""
