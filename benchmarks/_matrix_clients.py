"""The clients of the benchmark matrix (see matrix.py), one measurement each.

Only the standard library at the top: this module also runs in the FastMCP venv
(``.venv-fastmcp``) and in processes whose memory or imports are measured; each client
imports its own library when it opens.

Every client has one face, blocking (``ours``, ``before``, ``raw``, ``http.client``)
or async (``sdk``, ``fastmcp``)::

    era: str                      # "modern 2026-07-28", "legacy 2025-11-25", ...
    open()                        # connect, up to the first tools/list answered
    call() -> Any                 # one tools/call echo {"text": "x"}, its result
    throughput(total, inflight)   # calls/s with `inflight` calls outstanding
    close()
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time: the rss measurement counts modules
    from typing import Any, Callable

from _plain import shares, threaded_throughput  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEMO = os.path.join(REPO, "albedo_actors", "demo", "server.py")
DEMO_ARGS = (DEMO, "--era", "dual")

ARGS = {"text": "x"}
MODERN_VERSION = "2026-07-28"
LEGACY_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
    "io.modelcontextprotocol/clientInfo": {"name": "raw-bench", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}

ASYNC_CLIENTS = ("sdk", "fastmcp")


def check_echo(result: Any) -> None:
    if isinstance(result, dict):
        text = result["content"][0]["text"]
    elif hasattr(result, "content"):
        text = result.content[0].text
    else:
        text = result
    if text != ARGS["text"]:
        raise RuntimeError(f"echo answered {text!r:.200}")


# -- ours (and before: the same code, another PYTHONPATH) -------------------------------------


class Ours:
    """albedo_actors: ServerHandle.start + connect(), blocking call_tool from any thread."""

    def __init__(self, transport: str, home: str, url: str = "", ca: str | None = None, name: str = "bench") -> None:
        from albedo_actors.config import ServerConfig

        if transport == "stdio":
            self.config = ServerConfig(name=name, type="stdio", command=sys.executable, args=DEMO_ARGS)
        else:
            self.config = ServerConfig(name=name, type="http", url=url, ca_file=ca)
        self.home = home
        self.handle: Any = None
        self.era = "?"

    def open(self) -> None:
        from albedo_actors.actors.client import ServerHandle

        self.handle = ServerHandle.start(self.config, self.home)
        self.handle.connect()
        status = self.handle.status()
        self.era = f"{status['era']} {status['version']}"

    def call(self) -> Any:
        return self.handle.call_tool("echo", ARGS)

    def throughput(self, total: int, inflight: int) -> float:
        return threaded_throughput([self.call] * inflight, total)

    def close(self) -> None:
        if self.handle is not None:
            handle, self.handle = self.handle, None
            handle.stop()


# -- raw stdio: a pipe -------------------------------------------------------------------------


class RawStdio:
    """The least a Python client can do: one JSON line out, one line in; 64 in flight pipelined."""

    def __init__(self) -> None:
        self.proc: Any = None
        self._next_id = 0
        self.era = "?"

    def _message(self, method: str, params: dict[str, Any] | None) -> tuple[int, bytes]:
        self._next_id += 1
        message = {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": {**(params or {}), "_meta": META}}
        return self._next_id, json.dumps(message, separators=(",", ":")).encode() + b"\n"

    def _read(self, id_: int) -> dict[str, Any]:
        line = self._readline()
        if not line:
            raise RuntimeError("the server closed its output")
        message = json.loads(line)
        if message.get("id") != id_ or "result" not in message:
            raise RuntimeError(f"expected the result of {id_}, got {message!r:.200}")
        return message["result"]

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        id_, data = self._message(method, params)
        os.write(self._fd, data)
        return self._read(id_)

    def open(self) -> None:
        import subprocess

        self.proc = subprocess.Popen([sys.executable, *DEMO_ARGS], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._fd = self.proc.stdin.fileno()
        self._readline = self.proc.stdout.readline
        if MODERN_VERSION not in self.request("server/discover").get("supportedVersions", ()):
            raise RuntimeError("the server is not modern")
        self.request("tools/list")
        self.era = f"modern {MODERN_VERSION}"

    def call(self) -> Any:
        return self.request("tools/call", {"name": "echo", "arguments": ARGS})

    def throughput(self, total: int, inflight: int) -> float:
        """Pipelined: ``inflight`` requests written at once, then their answers read, matched by id."""
        t0 = time.perf_counter()
        done = 0
        while done < total:
            batch = [self._message("tools/call", {"name": "echo", "arguments": ARGS}) for _ in range(min(inflight, total - done))]
            os.write(self._fd, b"".join(data for _, data in batch))  # a window is far below the pipe buffer
            waiting = {id_ for id_, _ in batch}
            for _ in batch:
                message = json.loads(self._readline())
                if "result" not in message:
                    raise RuntimeError(f"error: {message.get('error')!r}")
                waiting.remove(message["id"])  # KeyError on an unknown or repeated id
            done += len(batch)
        return total / (time.perf_counter() - t0)

    def close(self) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        proc.stdin.close()  # EOF: the demo server exits
        try:
            proc.wait(5)
        except Exception:
            proc.kill()
            proc.wait(5)
        proc.stdout.close()


# -- raw HTTP: requests.Session, or http.client -------------------------------------------------

_ids = itertools.count(1)  # next() on a count is atomic: ids unique across threads
_BASE_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": MODERN_VERSION,
}
_CALL_HEADERS = {**_BASE_HEADERS, "Mcp-Method": "tools/call", "Mcp-Name": "echo"}


def _body(method: str, params: dict[str, Any]) -> tuple[int, bytes]:
    id_ = next(_ids)
    message = {"jsonrpc": "2.0", "id": id_, "method": method, "params": {**params, "_meta": META}}
    return id_, json.dumps(message, separators=(",", ":")).encode()


def _result(method: str, id_: int, status: int, content_type: str, body: bytes) -> dict[str, Any]:
    if status != 200:
        raise RuntimeError(f"{method}: HTTP {status} {body[:200]!r}")
    if content_type.startswith("text/event-stream"):
        for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
            data = b"\n".join(line[5:].lstrip(b" ") for line in block.split(b"\n") if line.startswith(b"data:"))
            if data and json.loads(data).get("id") == id_:
                body = data
                break
    answer = json.loads(body)
    if answer.get("id") != id_ or "result" not in answer:
        raise RuntimeError(f"{method}: expected the result of {id_}, got {answer!r:.200}")
    return answer["result"]


class _RequestsConn:
    def __init__(self, url: str, ca: str | None) -> None:
        import requests

        self.url = url
        self.session = requests.Session()
        self.session.trust_env = False  # as ours: no proxy or .netrc look-ups per request
        self.session.verify = ca if ca else True

    def post(self, method: str, params: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        id_, data = _body(method, params)
        # No timeout, as bench_http.py's raw client: a socket timeout makes every send and
        # receive wait in poll() first (measurably slower under load); the matrix bounds
        # the worker process instead.
        response = self.session.post(self.url, data=data, headers=headers)
        return _result(method, id_, response.status_code, response.headers.get("content-type", ""), response.content)

    def close(self) -> None:
        self.session.close()


class _HttpClientConn:
    def __init__(self, url: str, ca: str | None) -> None:
        import http.client
        import urllib.parse

        parts = urllib.parse.urlsplit(url)
        self.path = parts.path or "/"
        if parts.scheme == "https":
            import ssl

            context = ssl.create_default_context(cafile=ca)
            self.conn: Any = http.client.HTTPSConnection(parts.hostname, parts.port, context=context)
        else:
            self.conn = http.client.HTTPConnection(parts.hostname, parts.port)  # no timeout: as requests above

    def post(self, method: str, params: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        id_, data = _body(method, params)
        self.conn.request("POST", self.path, body=data, headers=headers)  # bytes body: one send with the headers
        response = self.conn.getresponse()
        body = response.read()
        return _result(method, id_, response.status, response.getheader("content-type", ""), body)

    def close(self) -> None:
        self.conn.close()


class RawHttp:
    """``raw`` (requests.Session) or ``http.client``: server/discover, then one POST per call."""

    def __init__(self, url: str, ca: str | None, kind: str) -> None:
        self.url, self.ca = url, ca
        self.make = _RequestsConn if kind == "requests" else _HttpClientConn
        self.conn: Any = None
        self.workers: list[Any] = []
        self.era = "?"

    def open(self) -> None:
        self.conn = self.make(self.url, self.ca)
        result = self.conn.post("server/discover", {}, {**_BASE_HEADERS, "Mcp-Method": "server/discover"})
        if MODERN_VERSION not in result.get("supportedVersions", ()):
            raise RuntimeError("the server is not modern")
        self.conn.post("tools/list", {}, {**_BASE_HEADERS, "Mcp-Method": "tools/list"})
        self.era = f"modern {MODERN_VERSION}"

    def call(self) -> Any:
        return self.conn.post("tools/call", {"name": "echo", "arguments": ARGS}, _CALL_HEADERS)

    def throughput(self, total: int, inflight: int) -> float:
        """``inflight`` threads, each with its own connection (kept between runs)."""
        while len(self.workers) < inflight:
            self.workers.append(self.make(self.url, self.ca))
        calls = [
            (lambda conn=conn: conn.post("tools/call", {"name": "echo", "arguments": ARGS}, _CALL_HEADERS))
            for conn in self.workers[:inflight]
        ]
        return threaded_throughput(calls, total)

    def close(self) -> None:
        for conn in ([self.conn] if self.conn is not None else []) + self.workers:
            conn.close()
        self.conn, self.workers = None, []


# -- the SDK and FastMCP (async) -----------------------------------------------------------------


async def _gather_throughput(call: Callable[[], Any], total: int, inflight: int) -> float:
    import asyncio

    async def worker(n: int) -> None:
        for _ in range(n):
            await call()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(n) for n in shares(total, inflight)))
    return total / (time.perf_counter() - t0)


class Sdk:
    """The official SDK (mcp 2.3.0): a transport + ClientSession, opened like Client(mode="auto")."""

    def __init__(self, transport: str, url: str = "", ca: str | None = None) -> None:
        self.transport, self.url, self.ca = transport, url, ca
        self.stack: Any = None
        self.session: Any = None
        self.era = "?"

    async def open(self) -> None:
        import contextlib

        from mcp.client.session import ClientSession
        from mcp.shared.exceptions import MCPError

        self.stack = contextlib.AsyncExitStack()
        if self.transport == "stdio":
            from mcp.client.stdio import StdioServerParameters, stdio_client

            streams = stdio_client(StdioServerParameters(command=sys.executable, args=list(DEMO_ARGS)))
        else:
            from mcp.client.streamable_http import streamable_http_client

            http_client = None
            if self.ca:
                import ssl

                import httpx2
                from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

                http_client = await self.stack.enter_async_context(httpx2.AsyncClient(
                    timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
                    verify=ssl.create_default_context(cafile=self.ca)))
            streams = streamable_http_client(self.url, http_client=http_client)
        read, write = await self.stack.enter_async_context(streams)
        self.session = await self.stack.enter_async_context(ClientSession(read, write))
        try:
            await self.session.discover()
        except MCPError:
            await self.session.initialize()
        era = "modern" if self.session.discover_result is not None else "legacy"
        self.era = f"{era} {self.session.protocol_version}"
        await self.session.list_tools()

    async def call(self) -> Any:
        return await self.session.call_tool("echo", ARGS)

    async def throughput(self, total: int, inflight: int) -> float:
        return await _gather_throughput(self.call, total, inflight)

    async def close(self) -> None:
        if self.stack is not None:
            stack, self.stack, self.session = self.stack, None, None
            await stack.aclose()


class FastMcp:
    """FastMCP's client (``fastmcp.Client``), run in its own venv."""

    def __init__(self, transport: str, url: str = "", ca: str | None = None) -> None:
        self.transport, self.url, self.ca = transport, url, ca
        self.client: Any = None
        self.era = "?"

    async def open(self) -> None:
        import fastmcp
        from fastmcp.client.transports import StdioTransport, StreamableHttpTransport

        if self.transport == "stdio":
            transport: Any = StdioTransport(command=sys.executable, args=list(DEMO_ARGS))
        else:
            transport = StreamableHttpTransport(self.url, verify=self.ca if self.ca else None)
        self.client = fastmcp.Client(transport)
        await self.client.__aenter__()
        version = getattr(self.client, "protocol_version", None)
        version = version() if callable(version) else version
        era = "modern" if str(version) == MODERN_VERSION else "legacy"
        self.era = f"{era} {version}"
        await self.client.list_tools()

    async def call(self) -> Any:
        return await self.client.call_tool("echo", ARGS)

    async def throughput(self, total: int, inflight: int) -> float:
        return await _gather_throughput(self.call, total, inflight)

    async def close(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            await client.__aexit__(None, None, None)


def make(client: str, transport: str, home: str, url: str = "", ca: str | None = None) -> Any:
    """The client named ``client`` (matrix column) for ``transport`` ("stdio", "http")."""
    if client in ("ours", "before"):
        return Ours(transport, home, url, ca)
    if client == "sdk":
        return Sdk(transport, url, ca)
    if client == "fastmcp":
        return FastMcp(transport, url, ca)
    if client == "raw":
        return RawStdio() if transport == "stdio" else RawHttp(url, ca, "requests")
    if client == "http.client":
        if transport == "stdio":
            raise ValueError("http.client has no stdio")
        return RawHttp(url, ca, "http.client")
    raise ValueError(f"unknown client {client!r}")
