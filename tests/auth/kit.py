"""The kit of the OAuth flow tests (test_oauth_flow, test_dpop, test_grants): a store, the
token refreshers and the server handles of one test, and the client's real sign-in paths;
and the admin command line as a subprocess (``Cli``, ``Running``: test_signin_sessions,
test_signin_registrations).

Each file makes its own ``kit`` fixture after ``oauth_server``, so that the handles stop
before the servers do (a server stopping under an open stream waits out its graceful
shutdown).
"""

from __future__ import annotations

import dataclasses
import os
import select
import subprocess
import sys
import time
import urllib.parse

from albedo_actors.actors.client import ServerHandle
from albedo_actors.actors.refresher import TokenRefresher, refresh_by
from albedo_actors.auth.record import OAuthRecord, from_credentials
from albedo_actors.auth.server_auth import ServerAuth
from albedo_actors.auth.signin import SignIn, authorizer, follow_redirect_agent
from albedo_actors.config import ServerConfig
from albedo_actors.store import open_store

RUN_TIMEOUT = 60  # seconds: a bound on every command, never an expected duration


class Kit:
    """A store, token refreshers and the handles of one test; everything is stopped at the end.

    ``name`` is the server whose credentials :meth:`record` reads. With ``agent`` (the
    default) a sign-in follows the authorization URL's redirect as a browser would, and
    ``redirects`` keeps the redirect_uri of every URL it opened; without it, sign-ins get no
    agent, as a host with only browser-free grants has none. With ``on_demand`` a handle
    signs in by itself when it is given no ``authorize``.
    """

    def __init__(self, home: str, name: str, *, agent: bool = True, on_demand: bool = False) -> None:
        self.home = home
        self.name = name
        self.store = open_store(home)
        self.refreshers: list = []
        self.handles: list[ServerHandle] = []
        self.redirects: list[str] = []
        self.follows = agent
        self.on_demand = on_demand

    def agent(self):
        """An agent that follows the authorization URL and notes its redirect_uri."""
        follow = follow_redirect_agent()

        def agent(url, listener):
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
            self.redirects.append(query["redirect_uri"][0])
            follow(url, listener)

        return agent

    def sign_in(self, config: ServerConfig, environ: dict | None = None, *, port: int = 0, id_token=None) -> OAuthRecord:
        return SignIn(config, self.store, environ=environ or {}, agent=self.agent() if self.follows else None,
                      port=port, lifetime=10, id_token=id_token).run()

    def authorizer(self, environ: dict | None = None, *, id_token=None):
        return authorizer(self.store, environ=environ or {}, agent=self.agent() if self.follows else None,
                          port=0, lifetime=10, id_token=id_token)

    def refresher(self, environ: dict | None = None):
        ref = TokenRefresher.start(self.store, environ=environ or {})
        self.refreshers.append(ref)
        return ref

    def handle(self, config: ServerConfig, environ: dict | None = None, *, authorize=None, id_token=None) -> ServerHandle:
        if authorize is None and self.on_demand:
            authorize = self.authorizer(environ, id_token=id_token)
        auth = ServerAuth(config, self.store, refresh_by(self.refresher(environ)), authorize=authorize)
        handle = ServerHandle.start(config, self.home, auth=auth)
        self.handles.append(handle)
        return handle

    def record(self, name: str | None = None) -> OAuthRecord | None:
        return from_credentials(self.store.get_credentials(name or self.name))

    def stored(self) -> OAuthRecord:
        """The record kept for ``name``, which must be there."""
        record = self.record()
        assert record is not None
        return record

    def edit(self, **changes) -> None:
        """Changes the fields of the record kept for ``name``."""
        self.store.update_credentials(self.name, lambda c: dataclasses.replace(
            c, oauth=dataclasses.replace(from_credentials(c), **changes).to_json()))

    def close(self) -> None:
        for handle in self.handles:
            handle.stop()
        for ref in self.refreshers:
            ref.stop(timeout=10)
        self.store.close()


class Cli:
    """``python -m albedo_actors`` with ALBEDO_HOME=home and no browser; keeps every output."""

    def __init__(self, home) -> None:
        self.home = str(home)
        self.env = {k: v for k, v in os.environ.items() if k != "ALBEDO_DATABASE_URL"}
        self.env.update(ALBEDO_HOME=self.home, ALBEDO_NO_BROWSER="1")
        self.outputs: list[str] = []
        self.procs: list[subprocess.Popen] = []

    def run(self, *argv: str, stdin: str = "") -> subprocess.CompletedProcess:
        result = subprocess.run([sys.executable, "-m", "albedo_actors", *argv], input=stdin, capture_output=True, text=True,
                                timeout=RUN_TIMEOUT, env=self.env)
        self.outputs += [result.stdout, result.stderr]
        return result

    def start(self, *argv: str) -> "Running":
        proc = subprocess.Popen([sys.executable, "-m", "albedo_actors", *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=self.env)
        self.procs.append(proc)
        return Running(proc, self.outputs)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(RUN_TIMEOUT)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                try:
                    pipe.close()
                except OSError:
                    pass


class Running:
    """A running command: read whole lines of stdout/stderr within a bound, write stdin lines."""

    def __init__(self, proc: subprocess.Popen, outputs: list[str]) -> None:
        self.proc = proc
        self.outputs = outputs
        self.out_fd, self.err_fd = proc.stdout.fileno(), proc.stderr.fileno()
        self.buffers = {self.out_fd: b"", self.err_fd: b""}
        self.seen = {self.out_fd: b"", self.err_fd: b""}

    def line(self, pipe, timeout: float = RUN_TIMEOUT) -> str:
        fd = pipe.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffers[fd]:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise AssertionError(f"no line within {timeout} s; so far: {self.seen[fd]!r}")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"the stream ended; so far: {self.seen[fd]!r}")
            self.buffers[fd] += chunk
            self.seen[fd] += chunk
        line, self.buffers[fd] = self.buffers[fd].split(b"\n", 1)
        return line.decode()

    def write_line(self, text: str) -> None:
        self.proc.stdin.write(text.encode() + b"\n")
        self.proc.stdin.flush()

    def finish(self) -> tuple[int, str, str]:
        """Close stdin, wait (bounded) and return (code, all stdout, all stderr)."""
        out, err = self.proc.communicate(timeout=RUN_TIMEOUT)
        stdout = (self.seen[self.out_fd] + out).decode()
        stderr = (self.seen[self.err_fd] + err).decode()
        self.outputs += [stdout, stderr]
        return self.proc.returncode, stdout, stderr
