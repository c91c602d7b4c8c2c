"""Every descendant of a stdio server ends with it, not only its process group (issue 23
hole 9: "a grandchild that calls setsid() outlives its server's close").

Through the real client (ServerHandle, a Runtime, the ``albedo-mcp call`` CLI) against
tests/servers/fault_process_server.py ``--escape``: a helper that calls setsid(), one
that calls setpgid(0, 0), and one that double-forks and calls setsid() (an orphan the
launcher adopts as child subreaper), each also ignoring SIGTERM; under a server that
exits on EOF and one that ignores EOF and SIGTERM; and with the launcher SIGKILLed, for
what the host can still end. A process counts as ended when no process has its pid and
start time, not even a zombie: one merely re-parented (to pytest, itself a subreaper,
tests/_leaks.py, or to init) would still be there. Waits are bounded polls of /proc,
never sleeps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from albedo_actors.config import McpConfig, ServerConfig
from albedo_actors.runtime import Runtime
from helpers import HERE, text_of

PROCESS_SERVER = os.path.join(HERE, "servers", "fault_process_server.py")
POLL = 0.02
BOUND = 10.0  # a bound on every wait, never an expected duration
ESCAPES = ("setsid", "setpgid", "daemon")


def process_config(name: str, *flags: str) -> ServerConfig:
    return ServerConfig(name=name, type="stdio", command=sys.executable, args=(PROCESS_SERVER, *flags))


def escape_flags(*hows: str, ignore_term: bool = True) -> tuple[str, ...]:
    flags = tuple(flag for how in hows for flag in ("--escape", how))
    return (*flags, "--escape-ignore-term") if ignore_term else flags


def stat(pid: int) -> dict | None:
    """/proc/<pid>/stat's fields we look at (proc(5)), or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()
    return {"state": fields[0].decode(), "ppid": int(fields[1]), "pgrp": int(fields[2]), "session": int(fields[3]),
            "start": int(fields[19])}


def start_of(pid: int) -> int:
    found = stat(pid)
    assert found is not None, f"process {pid} is not there"
    return found["start"]


def ended(pid: int, start: int) -> bool:
    """No process with this pid and start time is left, not even a zombie."""
    found = stat(pid)
    return found is None or found["start"] != start


def dead(pid: int, start: int) -> bool:
    """It ended; a zombie counts (its parent, not ours to be, reaps it)."""
    found = stat(pid)
    return found is None or found["start"] != start or found["state"] in ("Z", "X")


def within(timeout: float, condition) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL)
    return True


def zombie_children(parent: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            proc = stat(int(name))
            if proc is not None and proc["ppid"] == parent and proc["state"] == "Z":
                found.append(int(name))
    return found


def pids_of(handle) -> dict:
    return json.loads(text_of(handle.call_tool("pids")))


def escaped_of(pids: dict, hows: tuple[str, ...]) -> dict[int, int]:
    """The helpers, checked to have left the server's group as their flag says: pid -> start time."""
    server, launcher = pids["pid"], pids["ppid"]
    helpers = {}
    for how, pid in zip(hows, pids["escaped"], strict=True):
        helpers[pid] = start_of(pid)
        if how == "daemon":
            # Its parents exited: re-parented to the launcher, the nearest subreaper (not init, nor pytest).
            assert within(BOUND, lambda pid=pid: (stat(pid) or {}).get("ppid") == launcher), f"the launcher did not adopt {pid}: {stat(pid)}"
        found = stat(pid)
        assert found is not None and found["pgrp"] != server, f"{how}: {found}"
        assert (found["session"] == server) is (how == "setpgid"), f"{how}: {found}"
    return helpers


# -- the launcher ends them -------------------------------------------------------------------


@pytest.mark.parametrize("ignore_term", [False, True], ids=["polite", "ignores-sigterm"])
@pytest.mark.parametrize("how", ESCAPES)
def test_a_helper_that_left_the_group_ends_with_its_server(clients, how, ignore_term):
    handle = clients.start(process_config("escaper", *escape_flags(how, ignore_term=ignore_term)))
    pids = pids_of(handle)
    helpers = escaped_of(pids, (how,))
    handle.stop()
    for pid, start in helpers.items():
        assert ended(pid, start), f"{how}: {pid} outlived its server's close: {stat(pid)}"
    assert stat(pids["pid"]) is None and stat(pids["ppid"]) is None, "the server or its launcher was left"


def test_a_stubborn_server_and_every_helper_of_it_end(clients):
    # EOF and SIGTERM ignored by all of them: SIGTERM after 2 s, SIGKILL 2 s later, to
    # the group and to every descendant that left it.
    hows = ESCAPES
    handle = clients.start(process_config("stubborn", "--ignore-eof-and-term", "--spawn-child", *escape_flags(*hows)))
    pids = pids_of(handle)
    helpers = escaped_of(pids, hows)
    helpers[pids["child"]] = start_of(pids["child"])
    server = (pids["pid"], start_of(pids["pid"]))
    handle.stop()
    assert ended(*server), "the server outlived its close"
    left = {pid: stat(pid) for pid, start in helpers.items() if not ended(pid, start)}
    assert not left, f"helpers outlived their server's close: {left}"
    assert stat(pids["ppid"]) is None, "the launcher was left a zombie"


def test_the_launcher_reaps_the_orphans_it_adopts_while_the_server_runs(clients):
    handle = clients.start(process_config("daemons", *escape_flags("daemon", "daemon", ignore_term=False)))
    pids = pids_of(handle)
    helpers = escaped_of(pids, ("daemon", "daemon"))  # their parents, adopted before them, have exited
    launcher = pids["ppid"]
    assert within(BOUND, lambda: not zombie_children(launcher)), f"zombies under the launcher: {zombie_children(launcher)}"
    first, second = helpers
    os.kill(first, signal.SIGKILL)  # an adopted orphan ends while the server runs
    assert within(BOUND, lambda: ended(first, helpers[first])), f"the launcher left {first} a zombie: {stat(first)}"
    assert not ended(second, helpers[second])
    assert pids_of(handle)["pid"] == pids["pid"], "the server was disturbed"
    handle.stop()
    assert ended(second, helpers[second])


# -- the launcher gone: what the host can still end ----------------------------------------------


@pytest.mark.parametrize("server_flags", [(), ("--ignore-eof-and-term",)], ids=["polite", "stubborn"])
def test_a_sigkilled_launcher_leaves_the_host_to_end_the_helpers_it_can_still_find(clients, server_flags):
    # The helper that called setsid() is the server's child, and the one that called
    # setpgid() is in its session: the host finds both once the launcher is gone (the
    # server gets its EOF only after that). A double-forked orphan adopted by the
    # launcher is re-parented past it when it dies: the host cannot find it (docs/configuration.rst).
    hows = ("setsid", "setpgid")
    handle = clients.start(process_config("orphaned", *server_flags, *escape_flags(*hows)))
    pids = pids_of(handle)
    helpers = escaped_of(pids, hows)
    os.kill(pids["ppid"], signal.SIGKILL)
    # "Once the launcher is gone": the kill has landed (a zombie until the host reaps it)
    # before the stop. A stop racing the signal's delivery would give the server its EOF
    # first, and a server that exits on it orphans its setsid() helper past every parent
    # chain the host could follow (under load, 1 run in 3 did).
    assert within(BOUND, lambda: (stat(pids["ppid"]) or {"state": "X"})["state"] in ("Z", "X")), "the launcher outlived SIGKILL"
    handle.stop()
    # Dead, but maybe a zombie: re-parented to pytest, which reaps (in life, init does).
    left = {pid: stat(pid) for pid, start in helpers.items() if not within(BOUND, lambda pid=pid, start=start: dead(pid, start))}
    assert not left, f"helpers outlived their server once its launcher was killed: {left}"
    assert stat(pids["pid"]) is None or stat(pids["pid"])["state"] == "Z"


# -- the whole client ------------------------------------------------------------------------------


def test_a_runtime_stop_leaves_no_descendant_of_its_servers(tmp_path):
    home = str(tmp_path / "home")
    servers = (process_config("a", *escape_flags("setsid", "daemon")), process_config("b", "--ignore-eof-and-term", *escape_flags("setpgid", "daemon")))
    with Runtime(home, None, config=McpConfig(home=home, servers=servers), enabled=True) as runtime:
        handles = runtime.composition().handles
        helpers = escaped_of(pids_of(handles["a"]), ("setsid", "daemon")) | escaped_of(pids_of(handles["b"]), ("setpgid", "daemon"))
    left = {pid: stat(pid) for pid, start in helpers.items() if not ended(pid, start)}
    assert not left, f"helpers outlived the runtime's stop: {left}"


def test_albedo_mcp_call_leaves_no_descendant_of_its_server(tmp_path):
    hows = ESCAPES
    (tmp_path / "extensions.json").write_text(json.dumps({"mcp": {"servers": {
        "escaper": {"command": sys.executable, "args": [PROCESS_SERVER, *escape_flags(*hows)]},
    }}}), encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "albedo_actors", "--home", str(tmp_path), "call", "escaper/pids"],
                         capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stderr) == (0, ""), run.stderr
    escaped = json.loads(run.stdout)["escaped"]
    assert len(escaped) == len(hows)
    # The CLI has exited; its launcher ends the helpers (within its 2 s grace for SIGTERM).
    left = [pid for pid in escaped if not within(BOUND, lambda pid=pid: stat(pid) is None or stat(pid)["state"] in ("Z", "X"))]
    assert not left, f"helpers outlived albedo-mcp call: {[stat(pid) for pid in left]}"
