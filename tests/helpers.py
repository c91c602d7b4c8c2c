"""Shared helpers for tests: servers to run, clients to start, schemas to check."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import queue
import select
import subprocess
import sys
import time

import jsonschema
import pykka

from albedo_actors.actors.client import ServerHandle
from albedo_actors.config import ServerConfig

HERE = os.path.dirname(os.path.abspath(__file__))
FAULT_SERVER = os.path.join(HERE, "servers", "fault_server.py")
SDK_SERVER = os.path.join(HERE, "servers", "sdk_server.py")
FASTMCP_TASKS_SERVER = os.path.join(HERE, "servers", "tasks_fastmcp_server.py")
OAUTH_SERVER = os.path.join(HERE, "servers", "oauth_server.py")
# The official schemas of both eras, copied into the repository (origin and licence: spec/README.rst).
SPEC_DIR = os.path.join(HERE, "spec")


def fault_config(name: str, *flags: str, **overrides) -> ServerConfig:
    """A stdio server entry running the fault server with ``flags``."""
    return ServerConfig(name=name, type="stdio", command=sys.executable, args=(FAULT_SERVER, *flags), **overrides)


def until(check, what: str, wait: float):
    """``check()``'s first truthy value, asked again every 50 ms until ``wait`` seconds
    have passed (a bound on what is proven to happen, never an expected duration)."""
    deadline = time.monotonic() + wait
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"{what}: not within {wait:g} s"
        time.sleep(0.05)  # a bounded poll of a condition


def schema_validate(version: str, definition: str, instance) -> None:
    """Validate ``instance`` against ``$defs/definition`` of the official schema."""
    error = jsonschema.exceptions.best_match(_validator(version, definition).iter_errors(instance))
    if error is not None:
        raise error


def schema_validate_each(version: str, definition: str, instances) -> None:
    """:func:`schema_validate` for every item of a list."""
    for instance in instances:
        schema_validate(version, definition, instance)


def text_of(result: dict) -> str:
    """The text blocks of a CallToolResult, joined."""
    return "".join(block.get("text", "") for block in result["content"] if block.get("type") == "text")


@functools.lru_cache(maxsize=None)
def _validator(version: str, definition: str):
    # What jsonschema.validate does, with the schema checked and the validator built
    # once per definition (checking the schema costs a third of a second each time).
    with open(os.path.join(SPEC_DIR, f"schema-{version}.json"), encoding="utf-8") as f:
        schema = {"$ref": f"#/$defs/{definition}", "$defs": json.load(f)["$defs"]}
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def read_record(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class Owner(pykka.ThreadingActor):
    """Stands in for a ServerClient's owner: puts every event it is told in a queue."""

    def __init__(self) -> None:
        super().__init__()
        self.events: queue.Queue = queue.Queue()

    def on_receive(self, message):
        self.events.put(message)


class Clients:
    """Starts ServerHandles for a test and stops every one at the end."""

    def __init__(self, home: str) -> None:
        self.home = home
        self.handles: list[ServerHandle] = []

    def start(self, config: ServerConfig, owner=None) -> ServerHandle:
        handle = ServerHandle.start(config, self.home, owner)
        self.handles.append(handle)
        return handle

    def stop_all(self) -> None:
        for handle in self.handles:
            handle.stop()


class _ServerProcess:
    """A test server run as ``command()``: it prints its URL as the first line of stdout
    once its port is bound. ``start()`` returns that URL (within START_TIMEOUT);
    ``stop()`` terminates the process and waits for it (SIGKILL after STOP_TIMEOUT)."""

    START_TIMEOUT = 30.0
    STOP_TIMEOUT = 10.0
    WHAT = "the server"

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.stderr = None  # where the server's stderr goes (None: this process's)

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> str:
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.stderr)
        deadline = time.monotonic() + self.START_TIMEOUT
        line = b""
        try:
            while not line.endswith(b"\n"):
                if not select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                    raise RuntimeError(f"{self.WHAT} printed no URL within {self.START_TIMEOUT:g} s")
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    raise RuntimeError(f"{self.WHAT} exited (status {self.proc.wait()}) before printing its URL")
                line += chunk
        except BaseException:
            self.stop()
            raise
        self.url = line.split(b"\n", 1)[0].decode().strip()
        return self.url

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()  # uvicorn shuts down gracefully on SIGTERM
            try:
                proc.wait(self.STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        proc.stdout.close()


class OAuthServer(_ServerProcess):
    """``tests/servers/oauth_server.py`` (a real authorization server + protected MCP
    server) with ``flags``, on a free port of 127.0.0.1. ``start()`` returns the MCP URL."""

    WHAT = "the OAuth server"

    def __init__(self, *flags: str) -> None:
        super().__init__()
        self.flags = flags

    def command(self) -> list[str]:
        return [sys.executable, OAUTH_SERVER, "--port", "0", *self.flags]

    @property
    def base(self) -> str:
        return self.url.rsplit("/mcp", 1)[0]

    def stats(self) -> dict:
        import requests

        return requests.get(self.base + "/stats", timeout=10).json()

    def expire(self) -> None:
        """Every access token issued so far is expired from now on."""
        import requests

        requests.post(self.base + "/admin/expire", timeout=10).raise_for_status()

    def revoke_refresh(self) -> None:
        """Every refresh token is dead from now on (a refresh gets invalid_grant)."""
        import requests

        requests.post(self.base + "/admin/revoke-refresh", timeout=10).raise_for_status()

    def advertise_lifetime(self, seconds: int | None) -> None:
        """Token answers from now on say ``expires_in`` ``seconds`` (None: the real lifetime);
        the tokens stay valid as long as ever."""
        import requests

        params = {"seconds": str(seconds)} if seconds is not None else {}
        requests.post(self.base + "/admin/advertise-lifetime", params=params, timeout=10).raise_for_status()

    def hold_refresh(self) -> None:
        """From now on every refresh_token request hangs (a token endpoint that does not
        answer) until :meth:`release_refresh`."""
        import requests

        requests.post(self.base + "/admin/hold-refresh", timeout=10).raise_for_status()

    def release_refresh(self) -> None:
        """Every held refresh (and every later one) goes on as usual."""
        import requests

        requests.post(self.base + "/admin/release-refresh", timeout=10).raise_for_status()

    def forget_client(self, client_id: str | None = None) -> int:
        """The server forgets ``client_id`` (default: every client registered through
        /register), as one restarted with an in-memory client store would; how many."""
        import requests

        params = {"client_id": client_id} if client_id is not None else {}
        response = requests.post(self.base + "/admin/forget-client", params=params, timeout=10)
        response.raise_for_status()
        return response.json()["forgotten"]

    def refuse_client(self, at: str, error: str = "invalid_client", times: int = 1) -> None:
        """The next ``times`` authorizations of a known client are refused with ``error``:
        at the redirect back to it (``at="redirect"``) or at the code exchange
        (``at="token"``); their client ids land in ``refused_client_ids``."""
        import requests

        params = {"at": at, "error": error, "times": str(times)}
        requests.post(self.base + "/admin/refuse-client", params=params, timeout=10).raise_for_status()


class SdkHttpServer(_ServerProcess):
    """``tests/servers/sdk_server.py http`` with ``flags`` on a free port of 127.0.0.1.

    Every HTTP request it answers is appended to ``record`` (see the server's
    ``--record``); :meth:`records` reads them. ``start()`` returns the endpoint URL
    once the port is bound (requests made before uvicorn serves wait in the listen
    backlog); ``stop()`` terminates the process and waits for it.
    """

    WHAT = "the SDK server"

    def __init__(self, *flags: str, record: str) -> None:
        super().__init__()
        self.flags = flags
        self.record = record

    def command(self) -> list[str]:
        return [sys.executable, SDK_SERVER, "http", "--port", "0", "--record", self.record, *self.flags]

    def records(self) -> list[dict]:
        return read_record(self.record) if os.path.exists(self.record) else []


class FastMCPTasksServer(_ServerProcess):
    """``tests/servers/tasks_fastmcp_server.py http`` on a free port of 127.0.0.1, run by
    ``python`` (the interpreter of .venv-fastmcp-tasks, ``$ALBEDO_FASTMCP_TASKS_PY``).
    ``start()`` returns the endpoint URL, printed once the task backend is up."""

    WHAT = "the fastmcp-tasks server"

    def __init__(self, python: str) -> None:
        super().__init__()
        self.python = python

    def command(self) -> list[str]:
        return [self.python, FASTMCP_TASKS_SERVER, "http", "--port", "0"]


# A stdio command whose server flags live in a file beside it, so that a test can change
# how the server behaves while its configuration (and so its fingerprint) stays the same.
_FLAGS_LAUNCHER = """\
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "flags.json")) as f:
    flags = json.load(f)
os.execv(sys.executable, [sys.executable, *sys.argv[1:], *flags])
"""


def flags_launcher(directory, *flags) -> str:
    """Write the launcher (and ``flags``) into ``directory``; its path, to run before the server's argv."""
    path = os.path.join(str(directory), "launcher.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(_FLAGS_LAUNCHER)
    set_flags(directory, *flags)
    return path


def set_flags(directory, *flags) -> None:
    """The flags the server started by :func:`flags_launcher` gets from its next start on."""
    with open(os.path.join(str(directory), "flags.json"), "w", encoding="utf-8") as f:
        json.dump(list(flags), f)


def request(target, message, timeout: float = 60):
    """Tell ``target`` (an actor ref or proxy) the request ``message`` and wait on its one reply."""
    from albedo_actors.actors.reply import request as send

    return send(getattr(target, "actor_ref", target), message, timeout)


def sent(target, message):
    """Tell ``target`` the request ``message``; its reply future, to wait on later."""
    getattr(target, "actor_ref", target).tell(message)
    return message.reply


@contextlib.contextmanager
def composed(home: str, *servers: ServerConfig):
    """A session's composer ref (opened) of a Daemon over its own store in ``home``,
    configured with ``servers``; everything is stopped on leaving."""
    from albedo_actors.config import McpConfig
    from albedo_actors.runtime import Daemon
    from albedo_actors.store import open_store

    store = open_store(home)
    try:
        with Daemon(home, store, config=McpConfig(home=home, servers=servers), watch=False) as daemon:
            yield daemon.open_session(enabled=True, timeout=60)._ref
    finally:
        store.close()


# -- albedo-mcp against a store backend (the ``backend`` fixture: kind, home, URL) ----------

STORE_CLI_TIMEOUT = 120  # a bound on each command, never an expected duration


def store_cli_env(**extra: str) -> dict[str, str]:
    """This environment without a store key or database URL of its own, browsers off, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALBEDO_STORE_") and k != "ALBEDO_DATABASE_URL"}
    env["ALBEDO_NO_BROWSER"] = "1"
    env.update(extra)
    return env


def store_cli(backend, *argv: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess:
    """``albedo-mcp --home HOME [--database URL] ARGV...`` as a subprocess, bounded."""
    _kind, home, url = backend
    where = ["--database", url] if url else []
    return subprocess.run([sys.executable, "-m", "albedo_actors", "--home", home, *where, *argv], env=env,
                          input=stdin, capture_output=True, text=True, timeout=STORE_CLI_TIMEOUT)


# -- the rug-pull server (tests/servers/rug_server.py): tools that change after they were trusted --

RUG_SERVER = os.path.join(HERE, "servers", "rug_server.py")


def rug_spec() -> dict:
    """The rug server's first catalogue: three tools and instructions (a fresh copy)."""
    return {
        "instructions": "Rug server: lookup finds a word, fetch reads a page, notes keeps a note.",
        "tools": [
            {"name": "lookup", "description": "Look a word up in the dictionary.",
             "inputSchema": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}},
            {"name": "fetch", "description": "Fetch a web page and return its text.",
             "inputSchema": {"type": "object", "properties": {"url": {"type": "string"},
                                                              "limit": {"type": "integer"}},
                             "required": ["url"]}},
            {"name": "notes", "description": "Keep a short note for later.",
             "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
        ],
    }


class _Rug:
    """What both faces of the rug server share: the spec file the server reads, the
    record of the calls it received, and the changes a test makes (each written to the
    file, then announced with :meth:`pull`)."""

    def __init__(self, directory) -> None:
        self.directory = str(directory)
        self.spec_path = os.path.join(self.directory, "rug-spec.json")
        self.calls_path = os.path.join(self.directory, "rug-calls.jsonl")
        os.makedirs(self.directory, exist_ok=True)
        self.spec = rug_spec()
        self.write()

    def write(self) -> None:
        """The spec as it is now, for the server's next read (a restart, or :meth:`pull`)."""
        with open(self.spec_path + ".new", "w", encoding="utf-8") as f:
            json.dump(self.spec, f)
        os.replace(self.spec_path + ".new", self.spec_path)

    def tool(self, name: str) -> dict:
        return next(tool for tool in self.spec["tools"] if tool["name"] == name)

    def calls(self) -> list[dict]:
        """Every tools/call the server received so far, in order."""
        return read_record(self.calls_path) if os.path.exists(self.calls_path) else []

    def pid(self) -> int:
        raise NotImplementedError

    def publish(self) -> None:
        """What the server's next discovery gets is the spec as it is now."""
        raise NotImplementedError

    def pull(self) -> None:
        """Write the spec and tell the running server to read it again and announce it."""
        import signal

        self.write()
        os.kill(self.pid(), signal.SIGUSR1)

    # The changes of issue 26, each to the spec (call pull() or restart afterwards).

    def change_description(self, name: str, description: str) -> None:
        self.tool(name)["description"] = description

    def widen_type(self, name: str, parameter: str, to=("string", "object")) -> None:
        self.tool(name)["inputSchema"]["properties"][parameter]["type"] = list(to)

    def add_required(self, name: str, parameter: str, schema: dict | None = None) -> None:
        input_schema = self.tool(name)["inputSchema"]
        input_schema["properties"][parameter] = schema or {"type": "string"}
        input_schema.setdefault("required", []).append(parameter)

    def add_tool(self, name: str, description: str) -> None:
        self.spec["tools"].append({"name": name, "description": description,
                                   "inputSchema": {"type": "object", "properties": {}}})

    def remove_tool(self, name: str) -> None:
        self.spec["tools"] = [tool for tool in self.spec["tools"] if tool["name"] != name]

    def change_instructions(self, text: str | None) -> None:
        self.spec["instructions"] = text


class RugStdio(_Rug):
    """The rug server over stdio, started by the client under test (one process per
    connection): :meth:`entry` is its extensions.json entry, :meth:`config` its
    ServerConfig. The client stops it, so nothing here does."""

    def __init__(self, directory, era: str = "dual") -> None:
        super().__init__(directory)
        self.era = era
        self.pid_path = os.path.join(self.directory, "rug.pid")

    def args(self) -> list[str]:
        return [RUG_SERVER, "stdio", "--spec", self.spec_path, "--calls", self.calls_path,
                "--pid-file", self.pid_path, "--era", self.era]

    def entry(self, **extra) -> dict:
        return {"type": "stdio", "command": sys.executable, "args": self.args(), **extra}

    def config(self, name: str, **overrides) -> ServerConfig:
        return ServerConfig(name=name, type="stdio", command=sys.executable, args=tuple(self.args()), **overrides)

    def publish(self) -> None:
        """The next process the client starts serves the spec as it is now."""
        self.write()

    def pid(self) -> int:
        """The process the client runs now (it writes its id before it reads a request)."""
        with open(self.pid_path, encoding="utf-8") as f:
            return int(f.read())


class RugHttpServer(_Rug, _ServerProcess):
    """The rug server over streamable HTTP, a process of the test's own: ``start()``
    returns its URL, ``stop()`` ends it (bounded); :meth:`entry` and :meth:`config`."""

    WHAT = "the rug server"

    def __init__(self, directory, era: str = "dual") -> None:
        _ServerProcess.__init__(self)
        _Rug.__init__(self, directory)
        self.era = era

    def command(self) -> list[str]:
        return [sys.executable, RUG_SERVER, "http", "--spec", self.spec_path, "--calls", self.calls_path,
                "--port", "0", "--era", self.era]

    def entry(self, **extra) -> dict:
        return {"type": "http", "url": self.url, **extra}

    def config(self, name: str, **overrides) -> ServerConfig:
        return ServerConfig(name=name, type="http", url=self.url, **overrides)

    def pid(self) -> int:
        assert self.proc is not None, "the rug server is not running"
        return self.proc.pid

    def pull(self) -> None:
        """:meth:`_Rug.pull`, and wait (bounded) until the server says it serves the change."""
        super().pull()
        assert self.proc is not None and self.proc.stdout is not None
        line = b""
        deadline = time.monotonic() + self.START_TIMEOUT
        while not line.endswith(b"\n"):
            if not select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise RuntimeError(f"{self.WHAT} did not read its spec again within {self.START_TIMEOUT:g} s")
            chunk = os.read(self.proc.stdout.fileno(), 1)
            if not chunk:
                raise RuntimeError(f"{self.WHAT} exited (status {self.proc.wait()}) instead of reading its spec")
            line += chunk
        assert line == b"reloaded\n", line

    def publish(self) -> None:
        """The running server serves the spec as it is now (and announces it)."""
        self.pull()


PEERS = os.environ.get("ALBEDO_PEERS") or os.path.join(os.path.dirname(HERE), ".peers", "peers", "node_modules")
EVERYTHING = os.path.join(PEERS, "@modelcontextprotocol", "server-everything", "dist", "index.js")


def require_everything() -> str:
    """The path of server-everything's ``dist/index.js``; the test fails when it is missing."""
    import pytest

    if not os.path.isfile(EVERYTHING):
        pytest.fail(
            f"the npm test peer is not installed: {EVERYTHING} is missing; run scripts/test, "
            "which installs .peers/peers/node_modules and sets ALBEDO_PEERS",
            pytrace=False,
        )
    return EVERYTHING


@contextlib.contextmanager
def everything_http_server(log_path):
    """server-everything's streamableHttp transport on a free port; yields its URL. Its
    stdout (it logs every request and session) goes to ``log_path``."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            ["node", require_everything(), "streamableHttp"],
            env={**os.environ, "PORT": str(port)},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.PIPE,
        )
    try:
        # It says on stderr when it listens.
        deadline = time.monotonic() + 30
        seen = b""
        while b"listening on port" not in seen:
            if not select.select([proc.stderr], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise RuntimeError("server-everything did not start listening within 30 s")
            chunk = os.read(proc.stderr.fileno(), 4096)
            if not chunk:
                raise RuntimeError(f"server-everything exited ({proc.wait()}): {seen.decode(errors='replace')}")
            seen += chunk
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr.close()
