"""``albedo-mcp serve`` as a real subprocess: service.json appears (0600) once it listens,
its browser URL is printed, a save reloads the running session, SIGTERM or SIGINT ends
it within 10 s with every server process gone and service.json removed; ``kill -9``
in the middle of saves leaves extensions.json old or new, never torn; a stale
service.json (its pid gone) is ignored and replaced, a live one is refused."""

from __future__ import annotations

import json
import os
import random
import select
import signal
import stat
import subprocess
import sys
import threading
import time

import pytest
import requests

from albedo_actors.errors import ConfigError
from albedo_actors.service.server import Service, read_service_file
from helpers import FAULT_SERVER

START_TIMEOUT = 60.0


def _entry() -> dict:
    return {"type": "stdio", "command": sys.executable, "args": [FAULT_SERVER]}


def _serve(home: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("ALBEDO_DATABASE_URL", "ALBEDO_HOME")}
    return subprocess.Popen([sys.executable, "-m", "albedo_actors", "--home", home, "serve"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _first_line(proc: subprocess.Popen, timeout: float = START_TIMEOUT) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "serve printed nothing in time"
    line = proc.stdout.readline()
    assert line, f"serve ended: {proc.stderr.read() if proc.poll() is not None else ''}"
    return line


def _children_of(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(entry)] = int(fields[1])
    found, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in found:
                found.add(child)
                todo.append(child)
    return found


def _servers_of(pid: int) -> set[int]:
    """The descendants of ``pid`` that are fault servers (a launcher may sit between)."""
    found = set()
    for child in _children_of(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                if FAULT_SERVER.encode() in f.read():
                    found.add(child)
        except OSError:
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _identity(path: str) -> tuple[int, int, int]:
    info = os.stat(path)
    return info.st_ino, info.st_mtime_ns, info.st_size


def _until(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, what
        time.sleep(0.05)  # polling a condition of another process, bounded by the deadline


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_writes_service_json_reloads_on_save_and_stops_cleanly_on_a_signal(tmp_path, sig):
    home = str(tmp_path / "home")
    os.makedirs(home, mode=0o700)
    with open(os.path.join(home, "extensions.json"), "w") as f:
        json.dump({"enabled": {"mcp": True}, "mcp": {"servers": {"one": _entry()}}}, f)
    proc = _serve(home)
    try:
        line = _first_line(proc)
        path = os.path.join(home, "service.json")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        info = read_service_file(home)
        assert info is not None and info["pid"] == proc.pid and len(info["token"]) >= 22  # >= 128 bits
        assert f"open {info['url']}/#open=" in line and info["url"].startswith("http://127.0.0.1:")
        assert info["token"] not in line  # the printed link is single use, never the service token
        headers = {"Authorization": f"Bearer {info['token']}"}
        everything = _children_of(proc.pid)
        assert len(_servers_of(proc.pid)) == 1, everything  # the session's server "one"
        # A save through the service reloads the running session: it starts "two".
        answer = requests.patch(info["url"] + "/api/mcp", json={"servers": {"two": _entry()}}, headers=headers, timeout=60)
        assert answer.status_code == 200, answer.text
        _until(lambda: len(_servers_of(proc.pid)) == 2, 30, "the session did not reload to start the saved server")
        everything = _children_of(proc.pid)
        proc.send_signal(sig)
        assert proc.wait(timeout=10) == 0, proc.stderr.read()
        assert not os.path.exists(path)
        assert not [pid for pid in everything if _alive(pid)]
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()


def test_kill_9_in_the_middle_of_saves_leaves_the_old_or_the_new_file(tmp_path):
    home = str(tmp_path / "home")
    os.makedirs(home, mode=0o700)
    extensions = os.path.join(home, "extensions.json")
    sent: set[str] = set()
    for round_ in range(5):  # each round's serve also replaces the stale service.json the last one left
        proc = _serve(home)
        stop = threading.Event()
        try:
            _first_line(proc)
            info = read_service_file(home)
            assert info is not None and info["pid"] == proc.pid

            def save(url=info["url"], token=info["token"]) -> None:
                http = requests.Session()
                i = 0
                while not stop.is_set():
                    version = f"r{round_}-{i}"
                    sent.add(version)
                    entry = {"type": "stdio", "command": "/bin/true", "args": [version, "x" * 400_000], "enabled": False}
                    try:
                        http.patch(url + "/api/mcp", json={"servers": {"big": entry}},
                                   headers={"Authorization": f"Bearer {token}"}, timeout=30)
                    except requests.RequestException:
                        return  # killed
                    i += 1
                http.close()

            writer = threading.Thread(target=save)
            writer.start()

            def changed() -> bool:
                try:
                    with open(extensions) as f:
                        return f"r{round_}-1" in f.read(64 * 1024)
                except (OSError, ValueError):
                    return False

            _until(changed, 60, "no save landed")
            if round_ % 2:
                time.sleep(random.uniform(0, 0.03))  # a random point of the saves that follow
            else:
                # The moment the file changes again: a write in place would be under way now.
                seen = _identity(extensions)
                deadline = time.monotonic() + 30
                while _identity(extensions) == seen and time.monotonic() < deadline:
                    pass
            proc.kill()
            proc.wait(10)
            stop.set()
            writer.join(30)
            with open(extensions, encoding="utf-8") as f:
                document = json.load(f)  # never torn
            assert document["mcp"]["servers"]["big"]["args"][0] in sent
            assert read_service_file(home) is None  # its pid is gone: stale
        finally:
            stop.set()
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            proc.stdout.close()
            proc.stderr.close()


def test_a_stale_service_json_is_replaced_whatever_pid_it_names_and_a_running_service_refuses_a_second(tmp_path):
    """Issue 23, holes 4 and 8: the home's lock decides who runs, never the pid in the
    file. A file left by an unclean stop whose pid now names a live process (here: this
    very test, and a process of ours) is replaced; a second service for the home, even in
    the same process, is refused while the first holds the lock."""
    from albedo_actors.store import open_store

    home = str(tmp_path / "home")
    os.makedirs(home, mode=0o700)
    path = os.path.join(home, "service.json")
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    store = open_store(home)
    try:
        for pid in (live.pid, os.getpid()):
            with open(path, "w") as f:
                json.dump({"url": "http://127.0.0.1:1", "token": "old", "pid": pid}, f)
            assert read_service_file(home) is not None  # its pid is alive: the file alone cannot tell
            with Service(home, store) as service:
                info = read_service_file(home)
                assert info == {"url": service.url, "token": service.token, "pid": os.getpid()}
                with pytest.raises(ConfigError, match="already runs") as refused:
                    Service(home, store).start()
                assert service.url in str(refused.value) and "Traceback" not in str(refused.value)
                assert read_service_file(home) == info  # the running service's file is left alone
            assert not os.path.exists(path)
    finally:
        live.stdin.close()
        live.wait(30)
        store.close()


def test_two_serves_started_together_leave_exactly_one_running(tmp_path):
    home = str(tmp_path / "home")
    os.makedirs(home, mode=0o700)
    procs = [_serve(home) for _ in range(2)]
    try:
        ended = _until(lambda: [p for p in procs if p.poll() is not None], START_TIMEOUT, "neither serve ended")
        assert len(ended) == 1, "both serves ended"
        loser = ended[0]
        winner = [p for p in procs if p is not loser]
        assert loser.returncode == 2
        error = loser.stderr.read()
        assert "already runs" in error and "Traceback" not in error, error
        assert "#open=" in _first_line(winner[0])
        assert read_service_file(home)["pid"] == winner[0].pid
        winner[0].send_signal(signal.SIGTERM)
        assert winner[0].wait(10) == 0
        assert not os.path.exists(os.path.join(home, "service.json"))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            proc.stdout.close()
            proc.stderr.close()
