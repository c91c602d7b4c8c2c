"""The Python binding: what a session's code calls, synchronously or with asyncio.

::

    mcp = Mcp(composer)                      # a SessionComposer ref, already opened
    mcp.tools()                              # advertised operations
    mcp.describe("mcp_docs_search_1a2b3c")   # one operation and its parameter schema
    r = mcp.call("docs/search", query="pykka")
    r = mcp.call("docs/search", {"query": "pykka"})   # or as one mapping, ``arguments=``
    if r.isError: ...                        # a tool-reported error does not raise
    mcp.docs.search(query="pykka")           # minted from the composition at start

    amcp = AsyncMcp(composer)
    await amcp.tools(); await amcp.describe("docs/search")
    await amcp.docs.search(query="pykka")
    results = await asyncio.gather(amcp.call("a/x"), amcp.call("b/y"), return_exceptions=True)

The reference's "From Python": ``call(name, arguments=None, **kwargs)``. ``name`` is
positional-only, so an operation whose own argument is called ``name`` (a prompt's
``get_prompt``) still takes it as a keyword; ``arguments`` is the tool's arguments as one
mapping, never a tool argument itself (a tool argument called ``arguments`` goes inside
that mapping). Keyword arguments are merged into it; one given both ways is an error.

A transport loss raises :class:`~albedo_actors.errors.UnknownOutcome`; a server that is
unreachable raises :class:`~albedo_actors.errors.Unavailable`; a server the session left
out for a sign-in raises :class:`~albedo_actors.errors.NeedsSignIn` ("needs the user to
sign in ... did not run"). Only errors of albedo_actors/errors.py's tree reach a caller:
the session's actor timing out or having stopped (``pykka.Timeout``,
``ActorDeadError``) is :class:`~albedo_actors.errors.SessionTimedOut` or
:class:`~albedo_actors.errors.SessionClosed`, and a server's client that stopped or did
not answer is :class:`~albedo_actors.errors.Unavailable` naming the server.
MCP responses are untrusted data: results are plain records of what the server sent.
"""

from __future__ import annotations

import concurrent.futures
import itertools
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping

import pykka

from .actors.composer import SignInNeeded, ToolProgress
from .actors.preparer import Composition
from .actors.reply import Request
from .actors.reply import request as send_request
from .errors import ConfigError, NeedsSignIn, SessionClosed, SessionTimedOut, Unavailable
from .catalogue.naming import GET_PROMPT, READ_RESOURCE, Advertised
from .catalogue.schemas import check_result

if TYPE_CHECKING:
    from .connection.progress import ProgressReport

SEARCH_TOOL = "mcp_search_tools"  # catalogue/search.py's, named here so a call loads nothing for it

ASK_TIMEOUT = 10.0
_calls = itertools.count(1)  # tool calls of this process, as the composer's progress events name them


class Record:
    """A result: its fields as attributes (``r.isError``, ``r.content``) and by key.

    ``r.schemaErrors`` is ours, not the server's: the problems of a tool result's
    ``structuredContent`` against the tool's ``outputSchema`` (catalogue/schemas.py),
    at most 5 one-line strings naming the JSON path; empty when it matches or is not
    checked. It is not among the keys: ``as_dict()`` is exactly what the server sent.
    """

    __slots__ = ("_data", "schemaErrors")

    def __init__(self, data: Mapping[str, Any], schema_errors: tuple[str, ...] = ()) -> None:
        object.__setattr__(self, "_data", MappingProxyType(dict(data)))
        object.__setattr__(self, "schemaErrors", schema_errors)

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
        errors = f", schemaErrors={self.schemaErrors!r}" if self.schemaErrors else ""
        return f"Record({dict(self._data)!r}{errors})"

    def as_dict(self) -> dict[str, Any]:
        return dict(self._data)


class Mcp:
    """Synchronous binding over one session's composition (read when each call starts).

    The composer is asked once, here, for where it publishes its composition; every
    call then reads the current one without asking (a call never waits behind the
    composer) and takes the operation and the client from that one composition. The
    warnings of a composition's operations go to ``warn`` once per composition.
    """

    def __init__(self, composer: pykka.ActorRef, warn: Any = None) -> None:
        try:
            self._composer = composer.proxy()
        except pykka.ActorDeadError:
            raise SessionClosed(CLOSED) from None
        self._ref = composer
        self._warn = warn or (lambda message: None)
        self._warned: Composition | None = None
        self._published = ask(self._composer.published)
        self._minted: tuple[str, ...] = _mint(self, self._composition(), _ServerNamespace)

    def tools(self) -> list[dict[str, Any]]:
        """The advertised operations: name, server, kind, description, inputSchema."""
        return [_describe(item) for item in self._composition().operations]

    def describe(self, name: str) -> dict[str, Any]:
        """One operation by advertised name or ``server/tool``.

        Raises:
            ConfigError: no such operation.
        """
        return _describe(self._composition().resolve(name)[0])

    def call(self, name: str, /, arguments: Mapping[str, Any] | None = None, *,
             on_progress: Callable[[ProgressReport], None] | None = None, **kwargs: Any) -> Record:
        """Call an operation by advertised name or ``server/tool``; return its result record.

        ``arguments``: the operation's arguments as one mapping; ``kwargs`` are merged in.
        ``on_progress(report)``: a tool's progress (``report.progress``, ``.total``,
        ``.message`` escaped and bounded, ``.line()``), the latest at most ten times a
        second, on a thread of the call's own (never the caller's); what it raises is
        logged once and never breaks the call. The session's composer hears the same
        (``SessionComposer.progress()``).

        Raises:
            ConfigError: no such operation, or arguments that cannot be sent.
            NeedsSignIn: the session left the server out until the user signs in.
            Unavailable, TimedOut, UnknownOutcome, RemoteError, ProtocolViolation: as the
            server connection reports (Unavailable too when its client stopped).
            SessionClosed, SessionTimedOut: the session closed, or did not answer in time.
        """
        composition = self._composition()
        if name == SEARCH_TOOL:  # the model's tool search: answered here, never sent to a server
            return Record(composition.call_search(_arguments(name, arguments, kwargs)))
        item, handle = composition.resolve(name)
        args = _arguments(name, arguments, kwargs)
        composition.used(item)  # recently used: in the next turn's set when over budget
        try:
            if item.kind == READ_RESOURCE:
                if not isinstance(args.get("uri"), str):
                    raise ConfigError(f"{name!r} needs a 'uri' argument (a string); mcp.describe({name!r}) shows its schema")
                return Record(handle.read_resource(args["uri"]))
            if item.kind == GET_PROMPT:
                if not isinstance(args.get("name"), str):
                    raise ConfigError(f"{name!r} needs a 'name' argument (a string); mcp.describe({name!r}) shows its schema")
                return Record(handle.get_prompt(args["name"], args.get("arguments")))
            result, deadline = self._call_tool(item, handle, args, on_progress)
            # issue 16: checked against its outputSchema, never blocked (catalogue/schemas.py),
            # and (issue 23) never past the call's deadline
            checked = check_result(composition.catalogues.get(item.server), item.operation, result, deadline)
            if checked.warning is not None:
                self._warn(checked.warning)
            return Record(result, checked.errors)
        except (pykka.ActorDeadError, pykka.Timeout):  # the server's client, never pykka's error
            raise Unavailable(item.server, "its client stopped or did not answer; nothing was sent: try again") from None
        except NeedsSignIn as exc:
            if not exc.step_up:
                # The session leaves it out after this turn (it joins again once signed in).
                try:
                    self._composer.actor_ref.tell(SignInNeeded(item.server))  # a tell: nothing to wait for
                except pykka.ActorDeadError:
                    pass  # the session closed meanwhile: nothing to leave it out of
            raise

    def search(self, query: str, limit: int = 10) -> list[dict[str, Any]]:
        """The ``limit`` operations that best match ``query`` (BM25 over names,
        descriptions and parameter names), advertised or not; each is callable by its name.

        Raises:
            ConfigError: ``query`` is not a non-empty string of at most 1000 characters.
        """
        from .catalogue.search import search_arguments

        try:
            query, limit = search_arguments({"query": query, "limit": limit})
        except ValueError as exc:
            raise ConfigError(str(exc).replace(SEARCH_TOOL, "mcp.search", 1)) from None
        return [_describe(item) for item in self._composition().search(query, limit)]

    # -- internals ---------------------------------------------------------------------------

    def _call_tool(self, item: Any, handle: Any, args: dict[str, Any],
                   on_progress: Callable[[ProgressReport], None] | None) -> tuple[dict[str, Any], float]:
        call = next(_calls)
        composer = self._composer.actor_ref
        told = False

        def report(progress: ProgressReport) -> None:
            nonlocal told
            told = True
            try:
                composer.tell(ToolProgress(call, item.name, progress))  # the owner's event
            except pykka.ActorDeadError:
                pass  # the session closed meanwhile
            if on_progress is not None:
                on_progress(progress)

        try:
            answered: tuple[dict[str, Any], float] = handle.call_tool_and_deadline(item.operation, args, on_progress=report)
            return answered
        finally:
            if told:
                try:
                    composer.tell(ToolProgress(call, item.name, None))
                except pykka.ActorDeadError:
                    pass

    def _composition(self) -> Composition:
        """The session's current composition, read from where the composer publishes it."""
        if not self._ref.is_alive():
            raise SessionClosed(CLOSED)
        composition = self._published.composition
        if composition is not self._warned:
            self._warned = composition  # two threads may both warn for a new one: harmless
            for warning in composition.operation_warnings:
                self._warn(warning)
        return composition


class _ServerNamespace:
    """``mcp.<server>.<tool>(**arguments)``; on :class:`AsyncMcp` the same call is a
    coroutine (``await amcp.<server>.<tool>(**arguments)``)."""

    def __init__(self, mcp: Any, server: str) -> None:
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
        self._minted: tuple[str, ...] = _mint(self, self._sync._composition(), _ServerNamespace)

    async def tools(self) -> list[dict[str, Any]]:
        """The advertised operations (see :meth:`Mcp.tools`)."""
        import asyncio  # loaded already under a running loop; a sync-only host never loads it

        return await asyncio.to_thread(self._sync.tools)

    async def describe(self, name: str) -> dict[str, Any]:
        """One operation and its parameter schema (see :meth:`Mcp.describe`)."""
        import asyncio

        return await asyncio.to_thread(self._sync.describe, name)

    async def call(self, name: str, /, arguments: Mapping[str, Any] | None = None, *,
                   on_progress: Callable[[ProgressReport], None] | None = None, **kwargs: Any) -> Record:
        """Call an operation; its result record (see :meth:`Mcp.call`). ``on_progress`` is
        called as there, on the call's own thread, not the event loop's (use
        ``loop.call_soon_threadsafe`` in it to reach the loop)."""
        import asyncio

        return await asyncio.to_thread(self._sync.call, name, arguments, on_progress=on_progress, **kwargs)

    async def search(self, query: str, limit: int = 10) -> list[dict[str, Any]]:
        """The operations that best match ``query`` (see :meth:`Mcp.search`)."""
        import asyncio

        return await asyncio.to_thread(self._sync.search, query, limit)


CLOSED = "the MCP session has closed; start a new session to use MCP again"


def ask(method: Any, *args: Any, timeout: float | None = None) -> Any:
    """Call an actor's proxy ``method`` and wait (bounded) for its answer.

    pykka's own exceptions never reach a caller of the binding (errors.py's rule):
    an actor that has stopped is :class:`SessionClosed`, one that does not answer within
    the bound :class:`SessionTimedOut`; each says what to do.
    """
    limit = ASK_TIMEOUT if timeout is None else timeout
    try:
        return method(*args).get(timeout=limit)
    except pykka.ActorDeadError:
        raise SessionClosed(CLOSED) from None
    except pykka.Timeout:
        raise SessionTimedOut(f"the MCP session did not answer within {limit:g} s; try again after the current operation") from None


def request(ref: pykka.ActorRef, message: Request, *, timeout: float, late: str | None = None) -> Any:
    """Tell an actor ``message`` (a request, see actors/reply.py) and wait at most
    ``timeout`` s on its one reply: the caller's single future, single bound.

    Raises:
        SessionClosed: the actor has stopped (the session closed).
        SessionTimedOut: no reply came in time (``late`` says so, if given).
        Whatever the request failed with (an AlbedoError).
    """
    try:
        return send_request(ref, message, timeout)
    except pykka.ActorDeadError:
        raise SessionClosed(CLOSED) from None
    except concurrent.futures.TimeoutError:
        raise SessionTimedOut(late or f"the MCP session did not answer within {timeout:g} s; try again after the current operation") from None
    except concurrent.futures.CancelledError:
        raise SessionClosed(CLOSED) from None


def _mint(target: Any, composition: Composition, namespace: type) -> tuple[str, ...]:
    """Set ``target.<server>`` for every server of ``composition`` (the reference: methods
    minted at kernel boot). Left-out servers too: their calls say why they cannot run."""
    minted = []
    for server in sorted({*composition.handles, *composition.left_out}):
        if server.isidentifier() and not server.startswith("_") and not hasattr(type(target), server):
            object.__setattr__(target, server, namespace(target, server))
            minted.append(server)
    return tuple(minted)


def _arguments(name: str, arguments: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    if arguments is None:
        return dict(kwargs)
    if not isinstance(arguments, Mapping):
        raise ConfigError(f"the arguments of {name!r} must be a mapping, not {type(arguments).__name__}; pass a dict or keywords")
    twice = sorted(set(arguments) & set(kwargs))
    if twice:
        raise ConfigError(f"argument {twice[0]!r} of {name!r} was given twice (in arguments and as a keyword); give it once")
    return {**arguments, **kwargs}


def _describe(item: Advertised) -> dict[str, Any]:
    return {
        "name": item.name,
        "server": item.server,
        "kind": item.kind,
        "operation": item.operation,
        "description": item.description,
        "inputSchema": item.input_schema,
    }
