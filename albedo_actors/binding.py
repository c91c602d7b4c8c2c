"""The Python binding: what a session's code calls, synchronously or with asyncio.

::

    mcp = Mcp(composer)                      # a SessionComposer ref, already opened
    mcp.tools()                              # advertised operations
    mcp.describe("mcp_docs_search_1a2b3c")   # one operation and its parameter schema
    r = mcp.call("docs/search", query="pykka")
    if r.isError: ...                        # a tool-reported error does not raise
    mcp.docs.search(query="pykka")           # minted from the composition at start

    amcp = AsyncMcp(composer)
    results = await asyncio.gather(amcp.call("a/x"), amcp.call("b/y"), return_exceptions=True)

A transport loss raises :class:`~albedo_actors.errors.UnknownOutcome`; a server that is
unreachable raises :class:`~albedo_actors.errors.Unavailable`. MCP responses are
untrusted data: results are plain records of what the server sent.
"""

from __future__ import annotations

import asyncio
from types import MappingProxyType
from typing import Any, Mapping

import pykka

from .actors.preparer import Composition
from .errors import ConfigError, NeedsSignIn, Unavailable
from .naming import Advertised, advertise

ASK_TIMEOUT = 10.0


class Record:
    """A result: its fields as attributes (``r.isError``, ``r.content``) and by key."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_data", MappingProxyType(dict(data)))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._data[name]
        except KeyError:
            if name == "isError":
                return False  # CallToolResult.isError defaults to false
            raise AttributeError(name) from None

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a result is read-only")

    def __repr__(self) -> str:
        return f"Record({dict(self._data)!r})"

    def as_dict(self) -> dict[str, Any]:
        return dict(self._data)


class Mcp:
    """Synchronous binding over one session's composition (read when each call starts)."""

    def __init__(self, composer: pykka.ActorRef, warn: Any = None) -> None:
        self._composer = composer.proxy()
        self._warn = warn or (lambda message: None)
        for server in self._composition().handles:
            if server.isidentifier() and not hasattr(type(self), server):
                object.__setattr__(self, server, _ServerNamespace(self, server))

    def tools(self) -> list[dict[str, Any]]:
        """The advertised operations: name, server, kind, description, inputSchema."""
        return [_describe(item) for item in self._advertised()]

    def describe(self, name: str) -> dict[str, Any]:
        """One operation by advertised name or ``server/tool``.

        Raises:
            ConfigError: no such operation.
        """
        return _describe(self._find(name))

    def call(self, name: str, arguments: Mapping[str, Any] | None = None, /, **kwargs: Any) -> Record:
        """Call an operation by advertised name or ``server/tool``; return its result record.

        Raises:
            ConfigError: no such operation. Unavailable, TimedOut, UnknownOutcome,
            RemoteError, ProtocolViolation: as the server connection reports.
        """
        item = self._find(name)
        args = {**(arguments or {}), **kwargs}
        handle = self._composition().handles.get(item.server)
        if handle is None:
            raise Unavailable(item.server, "is not part of this session any more")
        try:
            if item.kind == "read_resource":
                return Record(handle.read_resource(args["uri"]))
            if item.kind == "get_prompt":
                return Record(handle.get_prompt(args["name"], args.get("arguments")))
            return Record(handle.call_tool(item.operation, args))
        except NeedsSignIn as exc:
            if not exc.step_up:
                # The session leaves it out after this turn (it joins again once signed in).
                self._composer.server_needs_sign_in(item.server)
            raise

    # -- internals ---------------------------------------------------------------------------

    def _composition(self) -> Composition:
        return self._composer.composition().get(timeout=ASK_TIMEOUT)

    def _advertised(self) -> list[Advertised]:
        composition = self._composition()
        configs = {name: handle.config for name, handle in composition.handles.items()}
        return advertise(composition.catalogues, configs, self._warn)

    def _find(self, name: str) -> Advertised:
        items = self._advertised()
        if "/" in name:
            server, _, operation = name.partition("/")
            found = [i for i in items if i.server == server and i.operation == operation]
        else:
            found = [i for i in items if i.name == name]
        if not found:
            raise ConfigError(f"no MCP operation {name!r} in this session; mcp.tools() lists them")
        return found[0]


class _ServerNamespace:
    """``mcp.<server>.<tool>(**arguments)``."""

    def __init__(self, mcp: Mcp, server: str) -> None:
        self._mcp = mcp
        self._server = server

    def __getattr__(self, tool: str) -> Any:
        if tool.startswith("_"):
            raise AttributeError(tool)
        return lambda **arguments: self._mcp.call(f"{self._server}/{tool}", arguments)


class AsyncMcp:
    """The same binding for asyncio: each call runs on a worker thread, so the event loop
    never blocks, and ``asyncio.gather(..., return_exceptions=True)`` keeps what succeeded."""

    def __init__(self, composer: pykka.ActorRef, warn: Any = None) -> None:
        self._sync = Mcp(composer, warn)

    async def tools(self) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._sync.tools)

    async def describe(self, name: str) -> dict[str, Any]:
        return await asyncio.to_thread(self._sync.describe, name)

    async def call(self, name: str, arguments: Mapping[str, Any] | None = None, /, **kwargs: Any) -> Record:
        return await asyncio.to_thread(self._sync.call, name, arguments, **kwargs)


def _describe(item: Advertised) -> dict[str, Any]:
    return {
        "name": item.name,
        "server": item.server,
        "kind": item.kind,
        "operation": item.operation,
        "description": item.description,
        "inputSchema": item.input_schema,
    }
