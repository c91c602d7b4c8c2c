"""Fixtures for the settings service's tests: a real Service on 127.0.0.1, and a client
that records every response it got (for the scan that no secret or token ever left).

``svc`` is a started :class:`albedo_actors.service.server.Service` over a fresh home and
SQLite store (stopped, and the store closed, afterwards); ``svc.api(method, path, ...)``
sends a request with its token through :class:`Recorder`; ``svc.saved`` counts
``on_saved`` calls.
"""

from __future__ import annotations

import contextlib
import http.cookiejar
import json
import os
import subprocess
import sys
import threading

import pytest
import requests

from albedo_actors.auth.signin import follow_redirect_agent
from albedo_actors.service.server import Service
from albedo_actors.store import open_store

WAIT = 30.0


class Recorder:
    """A requests session that keeps every response (status, headers, body) it received."""

    def __init__(self) -> None:
        self.http = requests.Session()
        self.http.trust_env = False
        # Keep no cookie between requests: each test passes the cookies it means to send.
        self.http.cookies.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
        self.seen: list[str] = []

    def request(self, method: str, url: str, **kwargs) -> requests.Response:
        kwargs.setdefault("timeout", 120)
        kwargs.setdefault("allow_redirects", False)
        response = self.http.request(method, url, **kwargs)
        self.seen.append(f"{response.status_code} {dict(response.headers)}\n{response.text}")
        return response

    def close(self) -> None:
        self.http.close()


class Saved:
    """on_saved: counts its calls; ``wait(n)`` blocks (bounded) until n came."""

    def __init__(self) -> None:
        self.count = 0
        self._cond = threading.Condition()

    def __call__(self) -> None:
        with self._cond:
            self.count += 1
            self._cond.notify_all()

    def wait(self, n: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.count >= n, WAIT), f"on_saved called {self.count} times, not {n}"


class Running:
    def __init__(self, service: Service, store, saved: Saved, recorder: Recorder) -> None:
        self.service = service
        self.store = store
        self.saved = saved
        self.recorder = recorder
        self.home = service.home
        self.url = service.url
        self.token = service.token
        self.port = service.port
        self.extensions = os.path.join(self.home, "extensions.json")

    def headers(self, **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", **extra}

    def api(self, method: str, path: str, *, token: bool = True, headers: dict | None = None, **kwargs) -> requests.Response:
        sent = {**(self.headers() if token else {}), **(headers or {})}
        return self.recorder.request(method, self.url + path, headers=sent, **kwargs)

    def patch(self, body: dict, **kwargs) -> requests.Response:
        return self.api("PATCH", "/api/mcp", json=body, **kwargs)

    @staticmethod
    def stdio_entry(*flags: str, enabled: bool = True) -> dict:
        return stdio_entry(*flags, enabled=enabled)

    @staticmethod
    def broken_entry() -> dict:
        return broken_entry()

    def file_bytes(self) -> bytes | None:
        try:
            with open(self.extensions, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None


@pytest.fixture
def svc_home(tmp_path, monkeypatch):
    monkeypatch.delenv("ALBEDO_DATABASE_URL", raising=False)
    path = tmp_path / "home"
    path.mkdir(mode=0o700)
    return str(path)


@pytest.fixture
def svc_store(svc_home):
    store = open_store(svc_home)
    yield store
    store.close()


@pytest.fixture
def svc(svc_home, svc_store):
    """A running service; its sign-ins are played by follow_redirect_agent (the loopback
    authorization server approves at once), on an ephemeral callback port."""
    saved, recorder = Saved(), Recorder()
    service = Service(svc_home, svc_store, on_saved=saved, agent=follow_redirect_agent(), signin_port=0)
    with service:
        running = Running(service, svc_store, saved, recorder)
        try:
            yield running
        finally:
            recorder.close()


def stdio_entry(*flags: str, enabled: bool = True) -> dict:
    """An extensions.json entry running tests/servers/fault_server.py (a working server by default)."""
    from helpers import FAULT_SERVER

    entry = {"type": "stdio", "command": sys.executable, "args": [FAULT_SERVER, *flags]}
    if not enabled:
        entry["enabled"] = False
    return entry


def broken_entry() -> dict:
    """A stdio entry that exits at once: it can never connect."""
    return {"type": "stdio", "command": sys.executable, "args": ["-c", "raise SystemExit(3)"]}


def dumps(value) -> str:
    return json.dumps(value, sort_keys=True)


# -- another local user's listener -------------------------------------------------------------

LISTENER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "servers", "recording_listener.py")
SYSTEM_PYTHON = "/usr/bin/python3"  # readable and runnable by another user, unlike a venv under /root


class OtherUserListener:
    """tests/servers/recording_listener.py on 127.0.0.1, run as ``nobody`` when this test
    runs as root (the attacker is another local user), else as ourselves. ``requests()``
    is every request it got up to now (a marker request of ours closes the list, so no
    wait is needed to know that nothing else came)."""

    def __init__(self, port: int = 0) -> None:
        import pwd
        import shutil

        with open(LISTENER, encoding="utf-8") as f:
            source = f.read()
        python = SYSTEM_PYTHON if os.path.exists(SYSTEM_PYTHON) else sys.executable
        command = [python, "-I", "-c", source, str(port)]
        self.other_user = False
        if os.geteuid() == 0 and shutil.which("runuser"):
            try:
                pwd.getpwnam("nobody")
                command = ["runuser", "-u", "nobody", "--", *command]
                self.other_user = True
            except KeyError:
                pass
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd="/")
        self._buffer = b""
        line = self._line()
        self.port = json.loads(line)["port"]
        self.url = f"http://127.0.0.1:{self.port}"
        self.pid = self.proc.pid
        self._marks = 0

    def _line(self) -> str:
        """One whole line of its stdout, within WAIT (our own buffer: select sees the pipe only)."""
        import select
        import time

        deadline = time.monotonic() + WAIT
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            assert left > 0 and select.select([fd], [], [], left)[0], "the recording listener printed nothing in time"
            chunk = os.read(fd, 65536)
            assert chunk, "the recording listener ended"
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def requests(self) -> list[dict]:
        self._marks += 1
        mark = f"/albedo-test-marker-{self._marks}"
        requests.get(self.url + mark, timeout=WAIT)
        got = []
        while True:
            record = json.loads(self._line())
            if record["path"] == mark:
                return got
            got.append(record)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(WAIT)
        self.proc.stdout.close()


@pytest.fixture
def other_listener():
    listener = OtherUserListener()
    yield listener
    listener.close()


# -- the settings pane's browser tests (test_pane_browser*.py) -----------------------------
# ``serve()``: ``albedo-mcp serve`` on the test module's ``home``; ``driver``: headless
# Chromium (tests/service/browser.py).

@pytest.fixture
def serve(home):
    """``serve()`` starts ``albedo-mcp serve`` on the home (set it up first); it is
    stopped afterwards with SIGTERM and must end cleanly."""
    import browser  # tests/service/browser.py: selenium, loaded by the browser tests only

    started: list = []

    def start():
        browser.mcp_on(home)  # the user turned MCP on (a fresh home has it off)
        running = browser.Serve(home)
        running.start()
        started.append(running)
        return running

    yield start
    for running in started:
        assert running.stop(), f"serve did not end cleanly on SIGTERM: {running.stderr()}"
        assert "Traceback" not in running.stderr(), running.stderr()


@pytest.fixture
def driver(tmp_path):
    import browser

    with browser.chromium(str(tmp_path / "chromium-profile")) as started:
        yield started
