"""The Python binding: what a session's code calls, synchronously or with asyncio.

::

    mcp = Mcp(composer)                      # a SessionComposer ref, already opened
    mcp.tools()                              # advertised operations
    mcp.describe("mcp_docs_search_1a2b3c")   # one operation and its parameter schema
    r = mcp.call("docs/search", query="pykka")
    r = mcp.call("docs/search", {"query": "pykka"})   # or as one mapping, ``arguments=``
    if r.isError: ...                        # a tool-reported error does not raise
    mcp.docs.search(query="pykka")           # a server's namespace: mcp.<server>.<tool>(...)
    mcp["server-everything"].echo(message="hi")   # any server name; mcp.server_everything too

    amcp = AsyncMcp(composer)
    await amcp.tools(); await amcp.describe("docs/search")
    await amcp.docs.search(query="pykka")
    results = await asyncio.gather(amcp.call("a/x"), amcp.call("b/y"), return_exceptions=True)

Names: every server of the session is a namespace, ``mcp.<python name>.<tool>(...)`` or
``mcp["<server name>"].<tool>(...)``. The Python name is the server's name with every
character that cannot be in an identifier made ``_`` (``server-everything`` →
``server_everything``), ``_`` after a keyword (``class_``), and ``s_`` before a leading
digit. When two servers get the same Python name, a server whose own name is that
identifier keeps it and the others are reached by ``mcp["name"]`` only (so are names
that start with ``_`` or clash with the binding's own methods).

What :meth:`Mcp.tools` and :meth:`Mcp.describe` return is the host's: fresh copies
(the schemas too), so converting them in place for a provider changes nothing another
call or session sees.

Async calls never wait on another server: each :class:`AsyncMcp` runs a call on a
thread of its own lane for the call's server, at most ``calls_per_server`` in flight
per server (more wait, in order, within their call's timeout), so a slow or stuck
server fills only its own lane.

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

import collections
import concurrent.futures
import itertools
import keyword
import re
import threading
import time
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping

import pykka

from .actors.composer import SignInNeeded, ToolProgress
from .actors.reply import CLOSED, ask
from .catalogue.composition import Composition, perform
from .catalogue.naming import Advertised
from .errors import ConfigError, NeedsSignIn, SessionClosed, TimedOut, Unavailable
from .connection.progress import Cancel
from .wire.deadline import Deadline
from .wire import telemetry

if TYPE_CHECKING:
    from .connection.progress import ProgressReport

SEARCH_TOOL = "mcp_search_tools"  # catalogue/search.py's, named here so a call loads nothing for it

logger = telemetry.logger(__name__)  # records carry the server and trace ids
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


def _record(data: dict[str, Any], schema_errors: tuple[str, ...]) -> Record:
    """A Record of ``data`` without copying it: a result the connection parsed for this
    call, which nobody else holds (the call path's; ``Record(data)`` copies)."""
    record = object.__new__(Record)
    _set_data(record, MappingProxyType(data))
    _set_errors(record, schema_errors)
    return record


_set_data, _set_errors = Record._data.__set__, Record.schemaErrors.__set__  # type: ignore[attr-defined]  # slot descriptors


class Mcp:
    """Synchronous binding over one session's composition (read when each call starts).

    The composer is asked once, here, for where it publishes its composition; every
    call then reads the current one without asking (a call never waits behind the
    composer) and takes the operation and the client from that one composition. The
    warnings of a composition's operations go to ``warn`` once per composition.
    """

    def __init__(self, composer: pykka.ActorRef, warn: Any = None, *, session: Any = None) -> None:
        # ``session``: the runtime's Session, which keeps tasks (None: a binding without them).
        try:
            self._composer = composer.proxy()
        except pykka.ActorDeadError:
            raise SessionClosed(CLOSED) from None
        self._session = session
        self._ref = composer
        self._warn = warn or (lambda message: None)
        self._warned: Composition | None = None
        self._published = ask(self._composer.published)
        self._composition()  # its warnings, once, now

    def tools(self) -> list[dict[str, Any]]:
        """The advertised operations: name, server, kind, operation, description,
        inputSchema; fresh copies the host may change."""
        composition = self._composition()
        return [_describe(item, composition) for item in composition.operations]

    def describe(self, name: str) -> dict[str, Any]:
        """One operation by advertised name or ``server/tool`` (a fresh copy).

        Raises:
            ConfigError: no such operation.
        """
        composition = self._composition()
        return _describe(composition.resolve(name)[0], composition)

    def tasks(self, pending_only: bool = True) -> list[dict[str, Any]]:
        """The tool calls that ran as tasks and are kept in the store, those not ended by
        default, newest first (see README "Long tool calls as tasks"); each a dict with
        ``id``, ``server``, ``tool``, ``state``, ``message``, ``age``, ``expiresIn``."""
        return self._tasks().tasks(pending_only)

    def task_result(self, task_id: str, /, *, timeout: float | None = None,
                    on_progress: Callable[[ProgressReport], None] | None = None) -> Record:
        """The result of a stored task (an id from :meth:`tasks`, or ``SERVER/ID``), polled
        from here until it ends; within ``timeout`` seconds (None: the server's
        callTimeoutMs, moved by each change of status up to maxCallTimeoutMs). A task
        still running then goes on (TimedOut says so; ask again).

        Raises:
            ConfigError: no such task; no store; its server is off for this session.
            TimedOut, UnknownOutcome (lost, cancelled, expired), RemoteError (it failed).
        """
        return Record(self._tasks().task_result(task_id, timeout, on_progress))

    def cancel_task(self, task_id: str, /) -> str:
        """Cancel a stored task (``tasks/cancel``); one line saying what happened."""
        return self._tasks().cancel_task(task_id)

    def _tasks(self) -> Any:
        if self._session is None:
            raise ConfigError("this binding was made without a session, so it keeps no tasks; use session.mcp()")
        return self._session

    def __getitem__(self, server: str) -> _ServerNamespace:
        """``mcp["server-everything"].echo(...)``: the namespace of any server name.

        Raises:
            ConfigError: this session has no server of that name.
        """
        composition = self._composition()
        if not isinstance(server, str) or not _in_session(composition, server):
            raise ConfigError(f"this session has no MCP server {server!r}; mcp.tools() lists what it offers")
        return _ServerNamespace(self, server)

    def __getattr__(self, name: str) -> _ServerNamespace:
        # Only names that are not the binding's own: a server's Python name (module docstring).
        if name.startswith("_"):
            raise AttributeError(name)
        server = python_names(self._composition()).get(name)
        if server is None:
            raise AttributeError(f"this session has no MCP server whose Python name is {name!r}; "
                                 f"mcp.tools() lists what it offers, mcp['name'] reaches any server name")
        return _ServerNamespace(self, server)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *python_names(self._composition())})

    def call(self, name: str, /, arguments: Mapping[str, Any] | None = None, *,
             on_progress: Callable[[ProgressReport], None] | None = None, deadline: Deadline | float | None = None,
             **kwargs: Any) -> Record:
        """Call an operation by advertised name or ``server/tool``; return its result record.

        ``arguments``: the operation's arguments as one mapping; ``kwargs`` are merged in
        (a tool argument named ``on_progress`` or ``deadline`` goes in ``arguments``).
        ``deadline``: the call's one deadline, a :class:`~albedo_actors.wire.deadline.Deadline`
        or seconds from now: the dial, a token refresh or sign-in, the exchange and the
        output check all end at it (one still signing in at it raises TimedOut saying
        nothing was sent). None: the server's own bounds (startupTimeoutMs for a dial,
        then callTimeoutMs, which its progress may extend).
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
        args = kwargs if arguments is None else _arguments(name, arguments, kwargs)  # kwargs: a fresh dict of this call's own
        return self._perform(composition, item, handle, args, on_progress, _deadline(deadline))

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
        composition = self._composition()
        return [_describe(item, composition) for item in composition.search(query, limit)]

    # -- internals ---------------------------------------------------------------------------

    def _perform(self, composition: Composition, item: Advertised, handle: Any, args: dict[str, Any],
                 on_progress: Callable[[ProgressReport], None] | None, deadline: Deadline | None = None,
                 cancel: Cancel | None = None) -> Record:
        """The one call pipeline (catalogue/composition.py's perform), with the session's
        progress events and its sign-in notice around it."""
        report = _Reporter(self._ref, item.name, on_progress) if item.kind == "tool" else None
        try:
            done = perform(composition, item, handle, args, on_progress=report, deadline=deadline, cancel=cancel)
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
        finally:
            if report is not None and report._call:  # a report came: tell the composer it ended
                report.end()
        if done.warning is not None:
            self._warn(done.warning)
        return _record(done.result, done.schema_errors)

    def _composition(self) -> Composition:
        """The session's current composition, read from where the composer publishes it."""
        if self._ref.actor_stopped.is_set():  # not ref.is_alive(): one call fewer on every call
            raise SessionClosed(CLOSED)
        composition = self._published.composition
        if composition is not self._warned:
            self._warned = composition  # two threads may both warn for a new one: harmless
            for warning in composition.operation_warnings:
                self._warn(warning)
        return composition


class _Reporter:
    """A tool call's progress, told to the session's composer (its owner's event) and
    handed to the caller's ``on_progress``; :meth:`end` tells the composer it ended.
    The call's number is taken at its first report (a call without progress, the most,
    costs this object only)."""

    __slots__ = ("_composer", "_call", "_name", "_on_progress")

    def __init__(self, composer: pykka.ActorRef, name: str, on_progress: Callable[[ProgressReport], None] | None) -> None:
        self._composer, self._name, self._on_progress = composer, name, on_progress
        self._call = 0  # none yet: no report came

    def __call__(self, progress: ProgressReport) -> None:
        if not self._call:
            self._call = next(_calls)  # one reporter thread calls this (connection/progress.py)
        try:
            self._composer.tell(ToolProgress(self._call, self._name, progress))
        except pykka.ActorDeadError:
            pass  # the session closed meanwhile
        if self._on_progress is not None:
            self._on_progress(progress)

    def end(self) -> None:
        if self._call:  # the call path checks it first (one call fewer for a call without progress)
            try:
                self._composer.tell(ToolProgress(self._call, self._name, None))
            except pykka.ActorDeadError:
                pass


class _ServerNamespace:
    """``mcp.<server>.<tool>(**arguments)``; on :class:`AsyncMcp` the same call is a
    coroutine (``await amcp.<server>.<tool>(**arguments)``)."""

    def __init__(self, mcp: Any, server: str) -> None:
        self._mcp = mcp
        self._server = server

    def __getattr__(self, tool: str) -> Any:
        # A tool by its own name, or by its Python name (``trigger_long_running_operation``
        # for ``trigger-long-running-operation``) when that names one tool of the server.
        if tool.startswith("_"):
            raise AttributeError(tool)
        return lambda **arguments: self._mcp.call(f"{self._server}/{self._tool(tool)}", arguments)

    def __getitem__(self, tool: str) -> Any:
        """``mcp["docs"]["search-v2"](...)``: a tool by its own name, whatever it is."""
        return lambda **arguments: self._mcp.call(f"{self._server}/{tool}", arguments)

    def _tool(self, attribute: str) -> str:
        composition = (self._mcp._sync if isinstance(self._mcp, AsyncMcp) else self._mcp)._composition()
        catalogue = composition.catalogues.get(self._server)
        if catalogue is None or catalogue.tool(attribute):
            return attribute
        named = [tool["name"] for tool in catalogue.tools if isinstance(tool.get("name"), str) and python_name(tool["name"]) == attribute]
        return named[0] if len(named) == 1 else attribute

    def __repr__(self) -> str:
        return f"<MCP server {self._server!r}>"


CALLS_PER_SERVER = 32  # an AsyncMcp's calls in flight per server; more wait in its lane
LINGER_S = 1.0  # a lane's idle thread waits this long for the next call, then ends


class AsyncMcp:
    """The same binding for asyncio. The event loop never blocks, and a call never
    waits on another server: each runs on a thread of its server's own lane (at most
    ``calls_per_server`` in flight; more wait in order, within their call's timeout).
    ``asyncio.gather(..., return_exceptions=True)`` keeps what succeeded. Cancelling an
    awaited call drops it when it still waits in its lane (it is never sent), and
    cancels its MCP request the way a timeout does when it runs (stdio and 2025-11-25
    HTTP: ``notifications/cancelled``; modern HTTP: its stream is closed).
    :meth:`close` (a Session does it) ends the lanes' threads."""

    def __init__(self, composer: pykka.ActorRef, warn: Any = None, *, calls_per_server: int = CALLS_PER_SERVER,
                 session: Any = None) -> None:
        self._sync = Mcp(composer, warn, session=session)
        self._lanes = Lanes(calls_per_server)

    async def tools(self) -> list[dict[str, Any]]:
        """The advertised operations (see :meth:`Mcp.tools`): no I/O, answered at once."""
        return self._sync.tools()

    async def describe(self, name: str) -> dict[str, Any]:
        """One operation and its parameter schema (see :meth:`Mcp.describe`)."""
        return self._sync.describe(name)

    async def tasks(self, pending_only: bool = True) -> list[dict[str, Any]]:
        """The stored tasks (see :meth:`Mcp.tasks`), read on a worker thread."""
        import asyncio  # only an async host gets here: it has asyncio loaded

        return await asyncio.to_thread(self._sync.tasks, pending_only)

    async def task_result(self, task_id: str, /, *, timeout: float | None = None,
                          on_progress: Callable[[ProgressReport], None] | None = None) -> Record:
        """A stored task's result (see :meth:`Mcp.task_result`), awaited off the event loop."""
        import asyncio

        return await asyncio.to_thread(self._sync.task_result, task_id, timeout=timeout, on_progress=on_progress)

    async def cancel_task(self, task_id: str, /) -> str:
        """Cancel a stored task (see :meth:`Mcp.cancel_task`)."""
        import asyncio

        return await asyncio.to_thread(self._sync.cancel_task, task_id)

    def __getitem__(self, server: str) -> _ServerNamespace:
        """``await amcp["server-everything"].echo(...)`` (see :meth:`Mcp.__getitem__`)."""
        self._sync[server]
        return _ServerNamespace(self, server)

    def __getattr__(self, name: str) -> _ServerNamespace:
        if name.startswith("_"):
            raise AttributeError(name)
        server = python_names(self._sync._composition()).get(name)
        if server is None:
            raise AttributeError(f"this session has no MCP server whose Python name is {name!r}; "
                                 f"amcp['name'] reaches any server name")
        return _ServerNamespace(self, server)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *python_names(self._sync._composition())})

    async def call(self, name: str, /, arguments: Mapping[str, Any] | None = None, *,
                   on_progress: Callable[[ProgressReport], None] | None = None, deadline: Deadline | float | None = None,
                   **kwargs: Any) -> Record:
        """Call an operation; its result record (see :meth:`Mcp.call`). ``on_progress`` is
        called as there, on the call's own thread, not the event loop's (use
        ``loop.call_soon_threadsafe`` in it to reach the loop). A call waiting in its lane
        waits no longer than its deadline (or the server's callTimeoutMs)."""
        import asyncio  # loaded already under a running loop; a sync-only host never loads it

        sync = self._sync
        composition = sync._composition()
        if name == SEARCH_TOOL:
            return Record(composition.call_search(_arguments(name, arguments, kwargs)))
        item, handle = composition.resolve(name)
        args = kwargs if arguments is None else _arguments(name, arguments, kwargs)
        ends = _deadline(deadline)
        # A call waiting in its lane waits no longer than it would for its answer.
        not_after = ends.at if ends is not None else time.monotonic() + handle.config.call_timeout
        cancel = Cancel()
        future = self._lanes.submit(item.server, not_after, sync._perform, composition, item, handle, args, on_progress, ends, cancel)
        # The answer comes back to the loop only while the caller still waits for it: a
        # call given up is never left holding an outcome that asyncio would log as
        # unretrieved (from a garbage collection, in the middle of whatever runs then).
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        future.add_done_callback(lambda done: _hand_back(loop, waiter, done))
        try:
            return await waiter
        except asyncio.CancelledError:
            # The awaiting task was cancelled: a call still waiting in its lane is dropped
            # (never sent); one running is cancelled the way a timeout cancels it.
            if not future.cancel():
                cancel.cancel()
            raise

    async def search(self, query: str, limit: int = 10) -> list[dict[str, Any]]:
        """The operations that best match ``query`` (see :meth:`Mcp.search`)."""
        return self._sync.search(query, limit)

    def close(self) -> None:
        """End the lanes: calls still waiting in them fail with SessionClosed; calls
        running end on their own; idle threads end now."""
        self._lanes.close()


class Lanes:
    """One lane of worker threads per key (a server): at most ``size`` tasks of a key run
    at once, the rest wait in order. A thread is started when a task finds none idle
    and ends after LINGER_S without work, so an idle binding holds no thread for long.

    A task waiting past its ``not_after`` (``time.monotonic()``) is failed with
    :class:`TimedOut` without running: it was never sent.
    """

    def __init__(self, size: int = CALLS_PER_SERVER, linger: float = LINGER_S) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(f"calls_per_server must be a whole number of at least 1, not {size!r}")
        self._size = size
        self._linger = linger
        self._lock = threading.Lock()
        self._work: dict[str, threading.Condition] = {}  # per lane, all on the one lock: a call wakes its own lane only
        self._queues: dict[str, collections.deque] = {}
        self._running: dict[str, int] = {}  # threads of each lane (busy or idle)
        self._idle: dict[str, int] = {}
        self._threads: set[threading.Thread] = set()
        self._closed = False

    def submit(self, key: str, not_after: float, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
        """Run ``fn(*args)`` in ``key``'s lane; its future (cancel it to drop it unstarted).

        Raises:
            SessionClosed: the lanes are closed.
        """
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise SessionClosed(CLOSED)
            queue = self._queues.setdefault(key, collections.deque())
            queue.append((future, not_after, fn, args))
            if self._idle.get(key, 0) >= len(queue):  # an idle thread for every call waiting: wake one
                self._work[key].notify()
            elif self._running.get(key, 0) < self._size:  # room in the lane: a thread of its own
                self._running[key] = self._running.get(key, 0) + 1
                thread = threading.Thread(target=self._serve, args=(key,), name=f"mcp-lane-{key}", daemon=True)
                self._threads.add(thread)
                thread.start()
        return future

    def close(self) -> None:
        with self._lock:
            self._closed = True
            waiting = [task for queue in self._queues.values() for task in queue]
            self._queues.clear()
            for work in self._work.values():
                work.notify_all()
            threads = list(self._threads)
        for future, _not_after, _fn, _args in waiting:
            if future.set_running_or_notify_cancel():
                future.set_exception(SessionClosed(CLOSED))
        until = time.monotonic() + 0.5  # one bound for all: an idle thread ends now, a busy one with its call
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, until - time.monotonic()))

    def _serve(self, key: str) -> None:
        try:
            while True:
                with self._lock:
                    queue = self._queues.get(key)
                    if not queue and not self._closed:
                        self._idle[key] = self._idle.get(key, 0) + 1
                        work = self._work.get(key)
                        if work is None:
                            work = self._work[key] = threading.Condition(self._lock)
                        work.wait_for(lambda: bool(self._queues.get(key)) or self._closed, timeout=self._linger)
                        self._idle[key] -= 1
                        queue = self._queues.get(key)
                    if not queue:
                        return  # lingered without work, or closed
                    future, not_after, fn, args = queue.popleft()
                    if not queue:
                        del self._queues[key]
                if not future.set_running_or_notify_cancel():
                    continue  # cancelled while it waited: dropped, never sent
                if time.monotonic() > not_after:
                    future.set_exception(TimedOut(key, f"the call was not sent: it waited in this session's lane behind "
                                                       f"{self._size} calls to the server for longer than its timeout; try again"))
                    continue
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:  # noqa: BLE001 - the caller's, delivered through its future
                    future.set_exception(exc)
        finally:
            with self._lock:
                self._running[key] -= 1
                if not self._running[key]:
                    del self._running[key]
                    self._idle.pop(key, None)
                    self._work.pop(key, None)
                self._threads.discard(threading.current_thread())


_IDENTIFIER_TAIL = re.compile(r"\W")
_OWN = frozenset(name for cls in (Mcp, AsyncMcp) for name in dir(cls))


def python_name(server: str) -> str:
    """The identifier a server is reached by as ``mcp.<name>`` (module docstring)."""
    name = _IDENTIFIER_TAIL.sub("_", server)
    if not name:
        return "_"
    if name[0].isdigit():
        name = f"s_{name}"
    if keyword.iskeyword(name):
        name += "_"
    return name


def python_names(composition: Composition) -> dict[str, str]:
    """Python name → server of ``composition`` (cached on it: built once): every server
    whose Python name is unambiguous, not private and not one of the binding's own."""
    cached = composition.python_names
    if cached is not None:
        return cached
    by_name: dict[str, list[str]] = {}
    for server in sorted({*composition.handles, *composition.left_out}):
        by_name.setdefault(python_name(server), []).append(server)
    names = {}
    for name, servers in by_name.items():
        if name.startswith("_") or name in _OWN:
            continue
        exact = [server for server in servers if server == name]
        if exact or len(servers) == 1:
            names[name] = exact[0] if exact else servers[0]
    object.__setattr__(composition, "python_names", names)  # frozen: set once, as its search index is
    return names


def _in_session(composition: Composition, server: str) -> bool:
    return server in composition.handles or server in composition.left_out or composition.mcp_off


def _hand_back(loop: Any, waiter: Any, done: concurrent.futures.Future) -> None:
    """On the lane's thread: hand ``done``'s outcome to the caller's ``waiter``, on its loop."""
    def deliver() -> None:
        if waiter.done() or done.cancelled():
            return  # the caller gave up: the outcome is nobody's
        error = done.exception()
        if error is not None:
            waiter.set_exception(error)
        else:
            waiter.set_result(done.result())

    try:
        loop.call_soon_threadsafe(deliver)
    except RuntimeError:
        pass  # the loop has closed: nobody waits any more


def _deadline(deadline: Deadline | float | None) -> Deadline | None:
    if deadline is None or isinstance(deadline, Deadline):
        return deadline
    if isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or not deadline > 0:
        raise ConfigError(f"a call's deadline is a Deadline or a number of seconds above 0, not {deadline!r}")
    return Deadline.after(deadline)


def _arguments(name: str, arguments: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    if arguments is None:
        return dict(kwargs)
    if not isinstance(arguments, Mapping):
        raise ConfigError(f"the arguments of {name!r} must be a mapping, not {type(arguments).__name__}; pass a dict or keywords")
    twice = sorted(set(arguments) & set(kwargs))
    if twice:
        raise ConfigError(f"argument {twice[0]!r} of {name!r} was given twice (in arguments and as a keyword); give it once")
    return {**arguments, **kwargs}


def _describe(item: Advertised, composition: Composition) -> dict[str, Any]:
    """An operation as the host's own dictionary (Advertised.as_json's keys): a fresh
    copy, schema included."""
    described = item.as_json()
    described["inputSchema"] = composition.schema_copy(item)
    return described
