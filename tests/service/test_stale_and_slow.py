"""Issue 23, holes 4 and 7: the command line proves it talks to our service before it
sends anything, and slow clients stall neither the command line nor the page.

- A ``service.json`` left by an unclean stop, naming a live process of another user and
  a port that user listens on: ``add`` and ``edit`` act on the home directly, and the
  listener (run as ``nobody`` when the test runs as root) is sent nothing at all.
- A socket in the home served by another user is not trusted (``SO_PEERCRED``).
- A service of ours that accepts but never answers is passed by within its 2 s bound,
  with one warning line, and the command acts directly.
- 300 half-sent requests to the page's port stall neither ``albedo-mcp`` (it talks on
  the home's socket) nor the port itself (1000 connections), and the service closes
  them once they are idle.

Every command is a real ``albedo-mcp`` subprocess; the service is the real one.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
import requests

from albedo_actors.service import local
from albedo_actors.service.client import ServiceClient
from albedo_actors.service.server import CHANNEL_TIMEOUT_S, CLEANUP_INTERVAL_S, Service
from albedo_actors.store import open_store
from helpers import FAULT_SERVER

RUN_TIMEOUT = 90  # a bound on each command, never an expected duration
WAIT = 30


def albedo(home, *argv: str, stdin: str = "") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("ALBEDO_DATABASE_URL", "ALBEDO_HOME")}
    env["ALBEDO_NO_BROWSER"] = "1"
    return subprocess.run([sys.executable, "-m", "albedo_actors", *argv, "--home", str(home)], input=stdin,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env)


def fault_line() -> str:
    return shlex.join([sys.executable, FAULT_SERVER])


def stale_file(home, url: str, pid: int, token: str) -> None:
    path = os.path.join(str(home), "service.json")
    with open(path, "w") as f:
        json.dump({"url": url, "token": token, "pid": pid}, f)
    os.chmod(path, 0o600)


def test_a_stale_file_naming_another_users_live_listener_sends_it_nothing(tmp_path, other_listener):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    token = "stale-token-" + "x" * 31
    stale_file(home, other_listener.url, other_listener.pid, token)  # its pid is alive, its port listens
    added = albedo(home, "add", "--transport", "stdio", fault_line(), "--name", "tool", "--env", "API_KEY",
                   stdin="sekrit-env-value\n")
    assert added.returncode == 0, added.stderr
    edited = albedo(home, "edit", "tool", "--env", "API_KEY", stdin="sekrit-second-value\n")
    assert edited.returncode == 0, edited.stderr
    assert albedo(home, "extension", "mcp", "on").returncode == 0
    got = other_listener.requests()
    assert got == [], f"the stale file's listener was sent: {got}"
    store = open_store(str(home))
    try:
        assert store.get_credentials("tool").env == {"API_KEY": "sekrit-second-value"}  # acted directly
    finally:
        store.close()
    # `serve` (here the same Service in this process) then replaces the stale file.
    store = open_store(str(home))
    try:
        with Service(str(home), store) as service:
            with open(os.path.join(str(home), "service.json")) as f:
                assert json.load(f)["token"] == service.token
    finally:
        store.close()


_FOREIGN_SOCKET = textwrap.dedent("""
    import os, select, socket, sys
    path = sys.argv[1]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    os.chmod(path, 0o666)
    sock.listen(8)
    sys.stdout.write("listening\\n"); sys.stdout.flush()
    got = 0
    while True:  # until our stdin closes
        ready, _, _ = select.select([sock, sys.stdin], [], [])
        if sys.stdin in ready:
            break
        conn, _ = sock.accept()
        conn.settimeout(3)
        try:
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                got += len(chunk)
        except OSError:
            pass
        conn.close()
        sys.stdout.write(f"{got}\\n"); sys.stdout.flush()
""")


def _line(proc) -> str:
    import select

    ready, _, _ = select.select([proc.stdout], [], [], WAIT)
    assert ready, "the socket's listener printed nothing in time"
    return proc.stdout.readline().strip()


def test_a_socket_in_the_home_served_by_another_user_is_not_trusted(tmp_path, monkeypatch):
    # In this process: our own listener, with our uid made to look like someone else's.
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    stale_file(home, "http://127.0.0.1:1", os.getpid(), "t" * 43)
    listening = local.bind(str(home))
    try:
        monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 12345)
        assert ServiceClient.find(str(home)) is None
    finally:
        listening.close()
    monkeypatch.undo()
    if os.geteuid() != 0:
        return  # another user's socket needs a second uid: only root can run one
    # As root: a real socket of `nobody` in a home it may write to.
    shared = tempfile.mkdtemp(prefix="albedo-shared-home-", dir="/tmp")
    try:
        os.chmod(shared, 0o777)
        stale_file(shared, "http://127.0.0.1:1", os.getpid(), "t" * 43)
        proc = subprocess.Popen(["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-I", "-c", _FOREIGN_SOCKET,
                                 os.path.join(shared, local.SOCKET_FILE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, cwd="/")
        try:
            assert _line(proc) == "listening"
            os.chmod(shared, 0o700)
            run = albedo(shared, "extension", "mcp", "on")
            assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
            assert _line(proc) == "0", "another user's socket was sent bytes"
            with open(os.path.join(shared, "extensions.json")) as f:
                assert json.load(f)["enabled"] == {"mcp": True}
        finally:
            proc.stdin.close()
            proc.wait(WAIT)
            proc.stdout.close()
    finally:
        subprocess.run(["rm", "-rf", shared], check=True)


def test_a_service_of_ours_that_never_answers_is_passed_by(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    stale_file(home, "http://127.0.0.1:1", os.getpid(), "t" * 43)
    silent = local.bind(str(home))  # accepts (the kernel's backlog), never answers
    try:
        run = albedo(home, "extension", "mcp", "on")
    finally:
        silent.close()
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stderr.splitlines() if line]
    assert len(lines) == 1 and "did not answer within 2 s" in lines[0] and "acting on the home directly" in lines[0], run.stderr
    assert json.loads((home / "extensions.json").read_text())["enabled"] == {"mcp": True}


def test_half_sent_requests_stall_neither_the_cli_nor_the_page_and_are_closed_when_idle(svc):
    stalled = []
    try:
        for _ in range(300):
            sock = socket.create_connection(("127.0.0.1", svc.port), timeout=WAIT)
            sock.sendall(f"GET /api/mcp HTTP/1.1\r\nHost: 127.0.0.1:{svc.port}\r\nX-Slow: ".encode())
            stalled.append(sock)
        run = albedo(svc.home, "extension", "mcp", "on")
        assert run.returncode == 0, run.stderr
        svc.saved.wait(1)  # it went through the service, on the home's socket
        assert requests.get(f"{svc.url}/api/mcp", headers=svc.headers(), timeout=WAIT).status_code == 200
        # The service closes each idle connection (CHANNEL_TIMEOUT_S, checked every
        # CLEANUP_INTERVAL_S): each half-sent request ends with EOF, within a generous bound.
        bound = time.monotonic() + 4 * (CHANNEL_TIMEOUT_S + CLEANUP_INTERVAL_S) + WAIT
        for sock in stalled:
            sock.settimeout(max(0.1, bound - time.monotonic()))
            try:
                assert sock.recv(65536) == b""
            except ConnectionResetError:
                pass  # closed: as good as EOF
    finally:
        for sock in stalled:
            sock.close()


@pytest.fixture
def long_home(tmp_path):
    """A home whose socket path is longer than sun_path's 108 bytes."""
    path = tmp_path / ("h" * 60) / ("o" * 60)
    path.mkdir(parents=True, mode=0o700)
    return path


def test_a_long_home_works_through_its_socket(long_home):
    assert len(os.fsencode(os.path.join(str(long_home), local.SOCKET_FILE))) > 108
    store = open_store(str(long_home))
    saved = []
    try:
        with Service(str(long_home), store, on_saved=lambda: saved.append(1)):
            run = albedo(long_home, "extension", "mcp", "on")
            assert run.returncode == 0, run.stderr
            assert saved == [1]
    finally:
        store.close()


def test_open_never_puts_the_link_on_a_command_line(svc, tmp_path):
    """`albedo-mcp open` with a browser: a process's argv is readable by every local user
    (/proc/PID/cmdline), so the browser is given a page of the user's own that forwards
    to the link, never the link itself (a review of issue 23's change found it passed)."""
    argv_file = tmp_path / "browser-argv"
    browser = tmp_path / "browser"
    browser.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {shlex.quote(str(argv_file))}\n")
    browser.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("ALBEDO_DATABASE_URL", "ALBEDO_HOME", "ALBEDO_NO_BROWSER")}
    env["BROWSER"] = str(browser)
    run = subprocess.run([sys.executable, "-m", "albedo_actors", "open", "--home", svc.home], capture_output=True,
                         text=True, timeout=RUN_TIMEOUT, env=env)
    assert run.returncode == 0, run.stderr
    link = run.stdout.strip().rpartition(" ")[2]
    secret = link.partition("#open=")[2]
    assert link.startswith(f"{svc.url}/#open=") and len(secret) > 30
    given = argv_file.read_text().split()
    page = os.path.join(svc.home, local.PAGE_LINK_FILE)
    assert given == [f"file://{page}"] and secret not in argv_file.read_text()
    assert os.stat(page).st_mode & 0o777 == 0o600
    with open(page, encoding="utf-8") as f:
        assert f'content="0;url={link}"' in f.read()
    opened = requests.post(f"{svc.url}/api/session", json={"open": secret}, timeout=WAIT)
    assert opened.status_code == 201  # the page's link is the live, single-use one
    svc.service.stop()
    assert not os.path.exists(page)  # its link died with the service


def test_the_token_goes_only_to_a_socket_of_ours_at_every_request(svc, monkeypatch):
    client = ServiceClient.find(svc.home)
    assert client is not None and client.get()["servers"] == []
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 12345)  # the socket now looks another user's
    from albedo_actors.service.client import ServiceGone

    with pytest.raises(ServiceGone):
        client.get()
