"""Issue 13, Deliver 4: while a settings service runs for a home, the admin commands go
through its API (it is the one writer), with the output and exit codes of direct mode.

The service is the real one (:class:`albedo_actors.service.server.Service`, in this process,
on 127.0.0.1); the CLI runs as real subprocesses. That a command went through the API is
shown by the service's ``on_saved`` counter (it counts the 200s of PATCH /api/mcp); that the
output is the same is shown by running every command in a second home without a service.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import select
import shlex
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest
import requests

from helpers import FAULT_SERVER

pytest.importorskip("albedo_actors.service.server")

from albedo_actors.service.client import ServiceClient  # noqa: E402
from albedo_actors.service.server import Service  # noqa: E402
from albedo_actors.store import open_store  # noqa: E402

RUN_TIMEOUT = 90  # seconds: a bound on every command, never an expected duration
ASK = 10


def fault_line(*flags: str) -> str:
    return shlex.join([sys.executable, FAULT_SERVER, *flags])


def environ(home) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ALBEDO_DATABASE_URL", "ALBEDO_HOME")}
    env.update(ALBEDO_NO_BROWSER="1", PYTHONFAULTHANDLER="1")  # a hung command shows its stacks (Running.dump)
    return env


def albedo(home, *argv: str, stdin: str = "") -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "albedo_actors", *argv, "--home", str(home)]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=RUN_TIMEOUT, env=environ(home))


class Running:
    """A running command: whole lines of stdout/stderr within a bound; stdin lines."""

    def __init__(self, home, *argv: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "albedo_actors", *argv, "--home", str(home)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environ(home))
        self.out_fd, self.err_fd = self.proc.stdout.fileno(), self.proc.stderr.fileno()
        self.buffers = {self.out_fd: b"", self.err_fd: b""}
        self.seen = dict(self.buffers)

    def line(self, pipe, timeout: float = RUN_TIMEOUT) -> str:
        fd = pipe.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffers[fd]:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise AssertionError(f"no line within {timeout} s; so far: {self.seen[fd]!r}; {self.dump()}")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"the stream ended; so far: {self.seen[fd]!r}")
            self.buffers[fd] += chunk
            self.seen[fd] += chunk
        line, self.buffers[fd] = self.buffers[fd].split(b"\n", 1)
        return line.decode()

    def dump(self) -> str:
        """A command that hangs: its threads' stacks (faulthandler, on SIGABRT), for the failure's message."""
        if self.proc.poll() is not None:
            return f"it exited {self.proc.returncode}"
        self.proc.send_signal(signal.SIGABRT)
        try:
            _, err = self.proc.communicate(timeout=ASK)
        except subprocess.TimeoutExpired:
            return "it did not end on SIGABRT"
        return "its threads: " + (self.seen[self.err_fd] + err).decode(errors="replace")[-4000:]

    def write_line(self, text: str) -> None:
        self.proc.stdin.write(text.encode() + b"\n")
        self.proc.stdin.flush()

    def finish(self) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=RUN_TIMEOUT)
        return self.proc.returncode, (self.seen[self.out_fd] + out).decode(), (self.seen[self.err_fd] + err).decode()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(ValueError):  # finished already: its pipes are closed
            self.proc.communicate(timeout=RUN_TIMEOUT)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(OSError):
                pipe.close()


class Served:
    """A home with a running service, and the count of its saves."""

    def __init__(self, home, *, agent=None, signin_port: int | None = None) -> None:
        self.home = home
        self.saves = 0
        self._lock = threading.Lock()
        self.store = open_store(str(home))
        self.service = Service(str(home), self.store, on_saved=self._saved, agent=agent, signin_port=signin_port)

    def _saved(self) -> None:
        with self._lock:
            self.saves += 1

    def client(self) -> ServiceClient:
        client = ServiceClient.find(str(self.home))
        assert client is not None, "service.json names no live service"
        return client

    def get(self) -> dict:
        with self.client() as client:
            return client.get()


@pytest.fixture
def served(tmp_path):
    started: list[Served] = []

    def start(name: str = "served", **kwargs) -> Served:
        home = tmp_path / name
        home.mkdir(mode=0o700)
        one = Served(home, **kwargs)
        one.service.start()
        started.append(one)
        return one

    yield start
    for one in started:
        one.service.stop()
        one.store.close()


@pytest.fixture
def running():
    """``running(home, *argv)``: a Running command; each is killed (if need be) and reaped afterwards."""
    started: list[Running] = []

    def start(home, *argv: str) -> Running:
        one = Running(home, *argv)
        started.append(one)
        return one

    yield start
    for one in started:
        one.kill()


@pytest.fixture
def direct_home(tmp_path):
    home = tmp_path / "direct"
    home.mkdir(mode=0o700)
    return home


def same(run_served: subprocess.CompletedProcess, served_home, run_direct: subprocess.CompletedProcess, direct_home) -> None:
    """The same exit code and output, the homes' paths apart."""
    def text(value: str, home) -> str:
        return value.replace(str(home), "HOME")

    got = (run_served.returncode, text(run_served.stdout, served_home), text(run_served.stderr, served_home))
    want = (run_direct.returncode, text(run_direct.stdout, direct_home), text(run_direct.stderr, direct_home))
    assert got == want, f"through the service {got!r}, directly {want!r}"
    assert "Traceback" not in run_served.stderr


# Each step: argv, stdin, and whether it changes the settings (a PATCH that answers 200).
STEPS = [
    (("add", "--transport", "stdio", fault_line(), "--name", "files", "--env", "API_KEY"), "canary-env-1\n", True),
    (("add", "--transport", "stdio", fault_line(), "--name", "files"), "", False),  # taken: exit 2
    (("edit", "files", "--env", "API_KEY"), "canary-env-2\n", True),
    (("edit", "files", "--url", "http://127.0.0.1:9/mcp"), "", False),  # a stdio server: exit 2
    (("edit", "nosuch", "--env", "K"), "v\n", False),  # no such server: exit 2
    (("disable", "files"), "", True),
    (("enable", "files"), "", True),
    (("add", "--transport", "stdio", shlex.join([sys.executable, "-c", "import sys; sys.exit(3)"]), "--name", "bad"), "", False),  # exit 3
    (("add", "http://127.0.0.1:9/mcp", "--name", "off", "--disabled", "--bearer-token"), "canary-token-3\n", True),
    (("edit", "off", "--bearer-token"), "-\n", True),  # "-" removes it
    (("extension", "mcp", "on"), "", True),
    (("extension",), "", False),
    (("extension", "--json"), "", False),
    (("extension", "nosuch", "on"), "", False),  # exit 2
    (("edit", "files", "--env", "NEW_KEY"), "\n", False),  # blank keeps, but nothing is stored: exit 2
    (("edit", "files", "--env", "API_KEY"), "\n", True),  # blank keeps the stored value
    (("add", "http://127.0.0.1:9/mcp", "--name", "hdr", "--disabled", "--header", "X-Key"), "\n", False),  # exit 2
    (("add", "http://127.0.0.1:9/mcp", "--name", "hdr", "--disabled", "--header", "X-Key"), "canary-header-4\n", True),
    (("edit", "hdr", "--header", "X-Other"), "\n", True),  # renamed, its value kept
    (("edit", "hdr", "--header", "bad header"), "v\n", False),  # exit 2
    (("remove", "off"), "", True),
    (("remove", "off"), "", False),  # gone: exit 2
    (("sign-in", "files"), "", False),  # a stdio server: exit 2
]


def test_every_admin_command_goes_through_the_service_with_the_output_of_direct_mode(served, direct_home):
    one = served()
    codes = []
    for argv, stdin, saves in STEPS:
        before = one.saves
        through = albedo(one.home, *argv, stdin=stdin)
        assert one.saves == before + (1 if saves else 0), f"{argv}: {one.saves - before} saves through the service"
        same(through, one.home, albedo(direct_home, *argv, stdin=stdin), direct_home)
        codes.append(through.returncode)
        assert "canary" not in through.stdout + through.stderr  # a secret read is never shown
    assert codes == [0, 2, 0, 2, 2, 0, 0, 3, 0, 0, 0, 0, 0, 2, 2, 0, 2, 0, 0, 2, 0, 2, 2]
    # The same settings came out of both, and no secret is in extensions.json.
    for name in ("extensions.json",):
        assert json.loads((one.home / name).read_text()) == json.loads((direct_home / name).read_text())
    assert "canary" not in (one.home / "extensions.json").read_text()
    same(albedo(one.home, "servers", "--json"), one.home, albedo(direct_home, "servers", "--json"), direct_home)
    listed = {server["name"]: server for server in one.get()["servers"]}
    assert set(listed) == {"files", "hdr"} and listed["files"]["credentials"] == ["env API_KEY"]
    assert listed["hdr"]["credentials"] == ["header X-Other"]
    assert listed["files"]["state"] == "catalogue saved"
    assert one.get()["enabled"]["mcp"] is True
    store = open_store(str(one.home))
    try:
        assert store.get_credentials("files").env == {"API_KEY": "canary-env-2"}
        assert store.get_credentials("hdr").header == ("X-Other", "canary-header-4")
        assert store.get_credentials("off") is None or not store.get_credentials("off").bearer_token
    finally:
        store.close()


def test_a_stale_service_file_falls_back_to_direct_mode(served, tmp_path):
    home = tmp_path / "stale"
    home.mkdir(mode=0o700)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(ASK)
    import socket

    with socket.socket() as probe:  # a port nothing listens on (closed again at once)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for pid in (gone.pid, os.getpid()):  # a dead pid; a live pid whose port refuses the connection
        (home / "service.json").write_text(json.dumps({"url": f"http://127.0.0.1:{port}", "token": "t" * 43, "pid": pid}))
        os.chmod(home / "service.json", 0o600)
        name = f"s{pid}"
        run = albedo(home, "add", "--transport", "stdio", fault_line(), "--name", name)
        assert run.returncode == 0 and run.stdout == f"added {name} (stdio, catalogue saved)\n", run.stderr
        assert name in json.loads((home / "extensions.json").read_text())["mcp"]["servers"]
    assert albedo(home, "extension", "mcp", "on").returncode == 0
    assert json.loads((home / "extensions.json").read_text())["enabled"] == {"mcp": True}


def test_a_service_file_with_no_service_on_the_homes_socket_is_stale_and_the_command_acts_directly(tmp_path):
    home = tmp_path / "foreign"
    home.mkdir(mode=0o700)
    # Its pid is alive (this test) and its URL is not even loopback: neither is ever used.
    (home / "service.json").write_text(json.dumps({"url": "http://192.0.2.1:80", "token": "t" * 43, "pid": os.getpid()}))
    os.chmod(home / "service.json", 0o600)
    run = albedo(home, "extension", "mcp", "on")
    assert run.returncode == 0 and "Traceback" not in run.stderr and "t" * 43 not in run.stderr + run.stdout
    assert json.loads((home / "extensions.json").read_text())["enabled"] == {"mcp": True}


def test_two_clis_at_once_lose_nothing_and_every_change_is_a_save_of_the_service(served):
    one = served()
    commands = [("add", "--transport", "stdio", fault_line(), "--name", f"c{i}", "--env", "K") for i in range(4)]
    commands += [("extension", "mcp", "on"), ("extension", "editor-mcp", "off")]
    procs = [subprocess.Popen([sys.executable, "-m", "albedo_actors", *argv, "--home", str(one.home)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ(one.home))
             for argv in commands]
    results = [proc.communicate(f"v{i}\n", timeout=RUN_TIMEOUT) for i, proc in enumerate(procs)]
    for proc, (out, err) in zip(procs, results):
        assert proc.returncode == 0 and "Traceback" not in err, err
    assert one.saves == len(commands)
    body = one.get()
    assert sorted(server["name"] for server in body["servers"]) == ["c0", "c1", "c2", "c3"]
    assert body["enabled"] == {"mcp": True, "editor-mcp": False}
    document = json.loads((one.home / "extensions.json").read_text())
    assert sorted(document["mcp"]["servers"]) == ["c0", "c1", "c2", "c3"] and document["enabled"] == {"mcp": True, "editor-mcp": False}
    store = open_store(str(one.home))
    try:
        assert {f"c{i}": store.get_credentials(f"c{i}").env for i in range(4)} == {f"c{i}": {"K": f"v{i}"} for i in range(4)}
    finally:
        store.close()


# -- sign-in and sign-out through the service ------------------------------------------------------


def approve(url: str) -> str:
    """The browser's part: the auto-approving authorization server redirects to the callback."""
    response = requests.get(url, allow_redirects=False, timeout=ASK)
    assert response.status_code in (302, 303), response.status_code
    return response.headers["Location"]


def start_sign_in(start, home, name: str, *extra: str) -> tuple[Running, str]:
    running = start(home, "sign-in", name, "--no-browser", *extra)
    assert running.line(running.proc.stdout) == f"Open this URL to sign in to {name}:"
    url = running.line(running.proc.stdout).strip()
    assert url.startswith("http://127.0.0.1:") and "code_challenge=" in url, url
    assert running.line(running.proc.stdout).startswith("Waiting for the browser; or paste the URL")
    return running, url


def auth_state(one: Served, name: str) -> str:
    return next(server for server in one.get()["servers"] if server["name"] == name)["auth"]["state"]


def test_sign_in_and_sign_out_go_through_the_service(served, oauth_server, running):
    server = oauth_server()
    one = served()
    run = albedo(one.home, "add", server.url, "--name", "g")
    assert run.returncode == 0 and run.stdout == "added g (http, needs sign-in)\n", run.stderr
    assert one.saves == 1

    # A pasted callback URL: POST .../callback. A wrong one first: the direct mode's complaint.
    cli, url = start_sign_in(running, one.home, "g")
    with one.client() as client:
        assert client.sign_in_status("g")["state"] == "pending"  # the service runs it
    location = approve(url)
    parts = urllib.parse.urlsplit(location)
    wrong = [(k, "not-the-state" if k == "state" else v) for k, v in urllib.parse.parse_qsl(parts.query)]
    cli.write_line(urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(wrong))))
    complaint = cli.line(cli.proc.stderr)
    assert complaint == "That URL is not this sign-in's callback (wrong or missing state); still waiting."
    cli.write_line(location)
    code, stdout, stderr = cli.finish()
    assert code == 0 and stdout.splitlines()[-1].startswith("signed in to g"), (stdout, stderr)
    assert stderr.splitlines() == [complaint]
    assert auth_state(one, "g") == "signed_in"
    assert server.stats()["token_requests"]["authorization_code"] == 1

    before = one.saves
    run = albedo(one.home, "sign-out", "g")
    assert run.returncode == 0 and run.stdout == "signed out of g\n", run.stderr
    assert one.saves == before + 1 and auth_state(one, "g") == "signed_out"

    # The browser's way: the redirect reaches the service's loopback listener; the CLI's poll sees it.
    cli, url = start_sign_in(running, one.home, "g")
    delivered = requests.get(approve(url), timeout=ASK)
    assert delivered.status_code == 200
    code, stdout, stderr = cli.finish()
    assert code == 0 and stdout.splitlines()[-1].startswith("signed in to g"), (stdout, stderr)
    assert auth_state(one, "g") == "signed_in"

    store = open_store(str(one.home))
    try:
        oauth = store.get_credentials("g").oauth
    finally:
        store.close()
    tokens = [oauth["access_token"], oauth["refresh_token"]]
    # What a direct sign-in prints: the record's scope.
    assert stdout.splitlines()[-1] == "signed in to g" + (f" (scope {oauth['scope']})" if oauth.get("scope") else "")
    assert all(token and token not in stdout + stderr for token in tokens)


def test_a_sign_in_through_the_service_times_out_or_is_cancelled_with_one_line(served, oauth_server, running):
    server = oauth_server()
    one = served(signin_port=free_port())  # one redirect URI: the second sign-in finds the first one's registration
    assert albedo(one.home, "add", server.url, "--name", "g").returncode == 0
    run = albedo(one.home, "sign-in", "g", "--no-browser", "--timeout", "1")  # nothing pasted, no browser
    assert run.returncode == 3 and "Traceback" not in run.stderr, run.stderr
    lines = run.stderr.splitlines()
    assert lines == ["albedo-mcp: server 'g': sign-in failed: the sign-in was not completed in time"], run.stderr  # as directly
    assert "Open this URL to sign in to g:" in run.stdout
    with one.client() as client:
        assert client.sign_in_status("g")["state"] == "cancelled"  # the CLI cancelled the service's sign-in
    assert auth_state(one, "g") == "needs_sign_in"
    assert server.stats()["token_requests"]["authorization_code"] == 0

    # Ctrl-C: the service's sign-in is cancelled too. It reused the registration the first
    # one kept, so the cancel forgot it, and the line says so (as directly).
    cli, _ = start_sign_in(running, one.home, "g")
    cli.proc.send_signal(signal.SIGINT)
    code, stdout, stderr = cli.finish()
    assert code == 130 and stderr == f"albedo-mcp: server 'g': sign-in cancelled{FORGOTTEN_LINE}\n", stderr
    with one.client() as client:
        assert client.sign_in_status("g")["state"] == "cancelled"


def test_through_albedo_mcp_serve_and_directly_once_it_has_stopped(tmp_path, running):
    home = tmp_path / "host"
    home.mkdir(mode=0o700)
    serve = running(home, "serve", "--verbose")
    line = serve.line(serve.proc.stdout)
    assert "open http://127.0.0.1:" in line and (home / "service.json").exists(), line
    run = albedo(home, "add", "--transport", "stdio", fault_line(), "--name", "files")
    assert run.returncode == 0 and run.stdout == "added files (stdio, catalogue saved)\n", run.stderr
    # The host wrote it (its log says so), and told its session to reload.
    deadline = time.monotonic() + RUN_TIMEOUT
    while "settings saved through the service: files" not in serve.line(serve.proc.stderr):
        assert time.monotonic() < deadline, "the host never logged the save"
    serve.proc.send_signal(signal.SIGTERM)
    code, _, stderr = serve.finish()
    assert code == 0 and "Traceback" not in stderr
    assert not (home / "service.json").exists()
    run = albedo(home, "remove", "files")  # no service now: directly
    assert run.returncode == 0 and run.stdout == "removed files\n", run.stderr
    assert json.loads((home / "extensions.json").read_text())["mcp"]["servers"] == {}


# -- the kept client registration through the service (issue 23, hole 5) ------------------------------

FORGOTTEN_LINE = ("; the kept client registration was forgotten (the authorization server may no longer know it): "
                  "sign in again to register a new client")


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def client_of(url: str) -> str:
    return urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["client_id"][0]


def signed_in_through(start, home, name: str, *extra: str) -> str:
    """A whole sign-in through the service (approved, the callback pasted); its client id."""
    cli, url = start_sign_in(start, home, name, *extra)
    cli.write_line(approve(url))
    code, stdout, stderr = cli.finish()
    assert code == 0 and stdout.splitlines()[-1].startswith(f"signed in to {name}"), (stdout, stderr)
    return client_of(url)


def test_a_forgotten_client_recovers_through_the_service(served, oauth_server, running):
    server = oauth_server()
    port = free_port()  # the service's callback port: its kept registration is found again
    one = served(signin_port=port)

    def kept():
        return one.store.get_oauth_client(server.base, f"http://127.0.0.1:{port}/callback")

    assert albedo(one.home, "add", server.url, "--name", "g").returncode == 0
    first = signed_in_through(running, one.home, "g")
    assert server.forget_client() == 1

    # No callback: the CLI's --timeout cancels the service's sign-in, which forgets the client.
    cli, url = start_sign_in(running, one.home, "g", "--timeout", "3")
    assert client_of(url) == first
    assert requests.get(url, allow_redirects=False, timeout=ASK).status_code == 400  # the error page
    code, _, stderr = cli.finish()
    assert code == 3 and stderr.splitlines() == [
        f"albedo-mcp: server 'g': sign-in failed: the sign-in was not completed in time{FORGOTTEN_LINE}"], stderr
    with one.client() as client:
        assert client.sign_in_status("g")["reason"].endswith(FORGOTTEN_LINE)
    assert kept() is None
    second = signed_in_through(running, one.home, "g")
    assert second != first

    # sign-out through the service unbinds it: the next sign-in registers anew.
    server.forget_client()
    assert albedo(one.home, "sign-out", "g").returncode == 0
    third = signed_in_through(running, one.home, "g")
    assert third not in (first, second) and server.stats()["unknown_client_authorizations"] == 1  # the error page above

    # --new-client through the service.
    fourth = signed_in_through(running, one.home, "g", "--new-client")
    assert fourth not in (first, second, third) and kept()["client_id"] == fourth
    assert server.stats()["registrations"] == 4

    # remove through the service forgets it.
    assert albedo(one.home, "remove", "g").returncode == 0
    assert kept() is None


def test_new_client_through_albedo_mcp_serve(tmp_path, oauth_server, running, direct_home):
    server = oauth_server()
    home = tmp_path / "host"
    home.mkdir(mode=0o700)
    serve = running(home, "serve")
    assert "open http://127.0.0.1:" in serve.line(serve.proc.stdout)
    for where in (home, direct_home):
        assert albedo(where, "add", server.url, "--name", "hand", "--oauth-client-id", "handmade").returncode == 0
        assert albedo(where, "add", server.url, "--name", "g").returncode == 0
    # A configured client is never replaced: refused with the line of direct mode, before anything is sent.
    same(albedo(home, "sign-in", "hand", "--new-client", "--no-browser"), home,
         albedo(direct_home, "sign-in", "hand", "--new-client", "--no-browser"), direct_home)
    refused = albedo(home, "sign-in", "hand", "--new-client", "--no-browser")
    assert refused.returncode == 2 and "--new-client replaces only a client albedo registered itself" in refused.stderr
    assert server.stats()["authorize_requests"] == 0 and server.stats()["registrations"] == 0

    first = signed_in_through(running, home, "g")
    fresh = signed_in_through(running, home, "g", "--new-client")
    assert fresh != first and server.stats()["registrations"] == 2
    listed = albedo(home, "servers", "--json")
    assert next(s for s in json.loads(listed.stdout) if s["name"] == "g")["auth"]["client"]["id"] == fresh
    serve.proc.send_signal(signal.SIGTERM)
    code, _, stderr = serve.finish()
    assert code == 0 and "Traceback" not in stderr


# -- a refused client recovers through the service (issue 25, item 6) ----------------------------------

NOTICE = ("server 'g': the authorization server refused the client albedo registered (invalid_client), so albedo forgot it "
          "and registered a new one: sign in once more at the new URL")


def redirected(url: str) -> str:
    """The browser's part: where the authorization server sends it back (a code, or an error)."""
    response = requests.get(url, allow_redirects=False, timeout=ASK)
    assert response.status_code in (302, 303), response.status_code
    return response.headers["Location"]


def second_url(cli: Running) -> str:
    """What the CLI prints when the service registered a new client: the notice, the new URL."""
    assert cli.line(cli.proc.stdout) == NOTICE
    assert cli.line(cli.proc.stdout) == "Open this URL to sign in to g:"
    url = cli.line(cli.proc.stdout).strip()
    assert cli.line(cli.proc.stdout).startswith("Waiting for the browser; or paste the URL")
    return url


def test_a_refused_client_recovers_through_the_service(served, oauth_server, running):
    server = oauth_server()
    port = free_port()
    one = served(signin_port=port)

    def kept():
        return one.store.get_oauth_client(server.base, f"http://127.0.0.1:{port}/callback")

    assert albedo(one.home, "add", server.url, "--name", "g").returncode == 0
    first = signed_in_through(running, one.home, "g")

    # Refused at the redirect: the pasted callback; the service registers anew, the CLI shows the new URL.
    server.refuse_client("redirect", "invalid_client")
    cli, url = start_sign_in(running, one.home, "g")
    assert client_of(url) == first
    cli.write_line(redirected(url))
    again = second_url(cli)
    assert client_of(again) != first and kept()["client_id"] == client_of(again)
    with one.client() as client:
        status = client.sign_in_status("g")
    assert status == {"state": "pending", "reason": None, "authorizationUrl": again, "notice": NOTICE}
    assert requests.get(approve(again), timeout=ASK).status_code == 200  # the browser's way: the service's listener
    code, stdout, stderr = cli.finish()
    assert code == 0 and stdout.splitlines()[-1].startswith("signed in to g") and stderr == "", (stdout, stderr)
    assert server.stats()["refused_client_ids"] == [first] and server.stats()["registrations"] == 2

    # Refused at the code exchange twice: one line, and both registrations forgotten.
    server.refuse_client("token", "invalid_client", times=2)
    cli, url = start_sign_in(running, one.home, "g")
    cli.write_line(approve(url))
    third = second_url(cli)
    cli.write_line(approve(third))
    code, _, stderr = cli.finish()
    assert code == 3 and stderr.splitlines() == [
        "albedo-mcp: server 'g': sign-in failed: the authorization server refused the client albedo registered "
        "(invalid_client), and the new one registered in its place too (invalid_client): it does not accept the clients "
        "albedo registers; ask its administrator for a client and give it with `albedo-mcp edit g --oauth-client-id ID`"
    ], stderr
    assert server.stats()["refused_client_ids"] == [first, client_of(again), client_of(third)]
    assert server.stats()["registrations"] == 3 and kept() is None


def test_sign_out_through_the_service_after_a_sign_in_that_produced_no_token(served, oauth_server, running):
    server = oauth_server()
    port = free_port()
    one = served(signin_port=port)
    assert albedo(one.home, "add", server.url, "--name", "g").returncode == 0
    run = albedo(one.home, "sign-in", "g", "--no-browser", "--timeout", "1")  # registered; nobody completes it
    assert run.returncode == 3
    url = run.stdout.splitlines()[1].strip()
    server.forget_client()
    assert albedo(one.home, "sign-out", "g").returncode == 0
    fresh = signed_in_through(running, one.home, "g")
    assert fresh != client_of(url) and server.stats()["unknown_client_authorizations"] == 0
