"""A negotiated connection to one server, and the blocking steps that make one.

Everything here blocks, within deadlines, and runs on helper threads of a
ServerClient (its dialer and its discovery thread) or on a caller's thread (a tool
call). No actor state lives here.

- :func:`open_stdio` launches a stdio server and finds out its era exactly as
  2026-07-28 basic/transports/stdio says, as the reference ports it: ``server/discover``
  first; after one second without an answer ``initialize`` follows on the same
  connection while the probe stays open, and whichever is answered first as its era
  expects decides. Beyond the reference: an old server that *exits* on the probe is
  relaunched once and opened with ``initialize`` directly.
- :class:`Connection` sends era-correct requests: modern ones carry ``_meta``, and a
  state-only ``input_required`` result is retried with its ``requestState``.
- :func:`discover` reads the catalogue, following ``nextCursor`` for at most 100 pages.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from .catalogue import Catalogue
from .errors import Incompatible, ProtocolViolation, RemoteError, ServerError, TimedOut, Unavailable, UnknownOutcome
from .rpc import Pending, RpcChannel, StdioLink
from .transport.stdio import LaunchFailed, LaunchSpec, StdioTransport, TransportClosed, WriteTimeout
from .wire import jsonrpc, mcp
from .wire.mcp import Verdict

logger = logging.getLogger(__name__)

PROBE_GRACE = 1.0  # seconds the stdio probe has before initialize follows
MAX_PAGES = 100
MAX_STATE_ROUNDS = 3

NotificationSink = Callable[[str, dict[str, Any]], None]
ClosedSink = Callable[[str], None]


class Connection:
    """One open connection whose era is known. Thread-safe; used by any caller thread."""

    def __init__(self, channel: RpcChannel, transport: StdioTransport, era: str, version: str, opened: dict[str, Any]) -> None:
        self.channel = channel
        self.transport = transport
        self.server = channel.server
        self.era = era
        self.version = version
        capabilities = opened.get("capabilities")
        self.capabilities: dict[str, Any] = capabilities if isinstance(capabilities, dict) else {}
        instructions = opened.get("instructions")
        self.instructions = instructions if isinstance(instructions, str) else None
        self.server_info = mcp.server_info_of(opened, era)

    @property
    def modern(self) -> bool:
        return self.era == "modern"

    @property
    def alive(self) -> bool:
        return self.channel.closed_reason is None

    def params(self, params: dict[str, Any] | None) -> dict[str, Any] | None:
        """Era-correct params: modern requests carry the per-request ``_meta``."""
        return mcp.modern_params(params, self.version) if self.modern else params

    def request(self, method: str, params: dict[str, Any] | None, timeout: float) -> dict[str, Any]:
        """Send one request and return its complete result.

        A modern ``input_required`` result with only a ``requestState`` is retried with
        that state under a new id, at most MAX_STATE_ROUNDS times (2026-07-28
        basic/patterns/mrtr); one that asks for input is an error, since we declare
        no client capabilities.

        Raises:
            TimedOut, UnknownOutcome, Unavailable, RemoteError, ProtocolViolation.
        """
        deadline = time.monotonic() + timeout
        params = self.params(params)
        for _round in range(MAX_STATE_ROUNDS + 1):
            try:
                result = self.channel.request(method, params, max(0.0, deadline - time.monotonic()))
            except TimedOut:
                raise TimedOut(self.server, f"{method} got no answer within {timeout:g} s; it was cancelled") from None
            if not self.modern:
                return result
            kind = result.get("resultType", "complete")
            if kind == "complete":
                return result
            if kind != "input_required":
                raise ProtocolViolation(self.server, f"{method} returned an unknown resultType {str(kind)[:40]!r}")
            if result.get("inputRequests"):
                kinds = sorted({str(r.get("method")) for r in result["inputRequests"].values() if isinstance(r, dict)})
                raise ProtocolViolation(
                    self.server,
                    f"{method} asked for client input ({', '.join(kinds) or 'unknown'}), but this client declares no client capabilities",
                )
            state = result.get("requestState")
            if not isinstance(state, str):
                raise ProtocolViolation(self.server, f"{method} returned input_required without inputRequests or requestState")
            params = {**params, "requestState": state}
        raise ProtocolViolation(self.server, f"{method} still returned input_required after {MAX_STATE_ROUNDS} retries")

    def start_listen(self) -> Pending | None:
        """Open ``subscriptions/listen`` for the lists a modern server says can change.

        2026-07-28 basic/patterns/subscriptions. The request stays open until the
        server ends it or the connection closes; returns None when nothing can change.
        """
        filters = {
            field: True
            for capability, field in mcp.LISTEN_FILTERS.items()
            if isinstance(self.capabilities.get(capability), dict) and self.capabilities[capability].get("listChanged")
        }
        if not self.modern or not filters:
            return None
        return self.channel.start("subscriptions/listen", self.params({"notifications": filters}))

    def close(self, reason: str = "closed") -> None:
        self.channel.close(reason)


# -- opening a stdio connection --------------------------------------------------------


class _ProbeLost(Exception):
    """The server's process ended before it answered the probe."""


def open_stdio(
    server: str,
    spec: LaunchSpec,
    on_notification: NotificationSink,
    on_closed: ClosedSink,
    timeout: float,
    *,
    track: Callable[[StdioTransport], None] = lambda transport: None,
) -> Connection:
    """Launch a stdio server and negotiate its era within ``timeout`` seconds.

    ``track`` is told every transport as soon as it exists, so that an owner that is
    stopping can close a connection that is still being opened.

    Raises:
        Unavailable: it could not be started, did not answer in time, or refused to open.
        Incompatible: it speaks no protocol revision we speak.
    """
    deadline = time.monotonic() + timeout
    try:
        return _open_once(server, spec, on_notification, on_closed, deadline, probe=True, track=track)
    except _ProbeLost as exc:
        logger.info("server %r exited on the server/discover probe (%s); relaunching it with initialize", server, exc)
    try:
        return _open_once(server, spec, on_notification, on_closed, deadline, probe=False, track=track)
    except _ProbeLost as exc:
        raise Unavailable(server, f"cannot start: it {exc}") from None


def _open_once(
    server: str,
    spec: LaunchSpec,
    on_notification: NotificationSink,
    on_closed: ClosedSink,
    deadline: float,
    *,
    probe: bool,
    track: Callable[[StdioTransport], None],
) -> Connection:
    opening = threading.Event()  # set once negotiated: from then on closures go to the owner
    lost: list[str] = []

    def closed(reason: str) -> None:
        if opening.is_set():
            on_closed(reason)
        else:
            lost.append(reason)

    channel = RpcChannel(server, on_notification, closed)
    transport = StdioTransport(spec, channel.feed_line, channel.connection_lost, name=server)
    channel.attach(StdioLink(channel, transport, (TransportClosed, WriteTimeout)))
    track(transport)
    try:
        transport.start()
    except LaunchFailed as exc:
        raise Unavailable(server, f"cannot start: {exc}") from None
    try:
        era, version, opened = _negotiate(channel, server, deadline, probe)
    except _ProbeLost:
        transport.close()
        transport.wait_closed()
        raise _ProbeLost(lost[0] if lost else "closed its output") from None
    except BaseException:
        transport.close()
        transport.wait_closed()
        raise
    connection = Connection(channel, transport, era, version, opened)
    opening.set()
    if lost:  # it died between answering and now
        on_closed(lost[0])
    return connection


def _negotiate(channel: RpcChannel, server: str, deadline: float, probe: bool) -> tuple[str, str, dict[str, Any]]:
    """Return (era, version, DiscoverResult or InitializeResult)."""
    waker = threading.Event()
    probe_p = channel.start("server/discover", mcp.modern_params(None), waker) if probe else None
    init_p = None if probe else channel.start("initialize", mcp.initialize_params(), waker)
    grace_end = time.monotonic() + PROBE_GRACE
    try:
        while True:
            waker.clear()
            if probe_p is not None and probe_p.done:
                verdict, opened = _judge_probe(probe_p, server, init_p is None)
                probe_p = None
                if verdict is Verdict.MODERN:
                    return "modern", mcp.MODERN_VERSION, _discover_result(channel, server, opened, deadline)
                if init_p is None:
                    init_p = channel.start("initialize", mcp.initialize_params(), waker)
            if init_p is not None and init_p.done:
                try:
                    result = init_p.outcome()
                except RemoteError as exc:
                    if mcp.judge_error(_error_dict(exc)) is Verdict.MODERN:
                        # It had locked itself modern before initialize arrived.
                        return "modern", mcp.MODERN_VERSION, _discover_result(channel, server, None, deadline)
                    raise Unavailable(server, f"refused initialize: {exc.detail}") from None
                except UnknownOutcome:
                    raise _ProbeLost() from None
                return "legacy", _accept_initialize(channel, server, result), result
            now = time.monotonic()
            if now >= deadline:
                waited = "server/discover or initialize" if probe else "initialize"
                raise Unavailable(server, f"did not answer {waited} in time (startupTimeoutMs)")
            if init_p is None and now >= grace_end:
                # 2026-07-28 basic/transports/stdio: no answer in reasonable time means an
                # older server; the probe stays open and the first fitting answer decides.
                init_p = channel.start("initialize", mcp.initialize_params(), waker)
                continue
            wake_at = deadline if init_p is not None else min(deadline, grace_end)
            waker.wait(max(0.0, wake_at - now))
    finally:
        for pending in (probe_p, init_p):
            if pending is not None:
                channel.drop(pending)


def _judge_probe(pending: Pending, server: str, alone: bool) -> tuple[Verdict, dict[str, Any] | None]:
    try:
        result = pending.outcome()
    except RemoteError as exc:
        verdict, opened, versions = mcp.judge_error(_error_dict(exc)), None, mcp.supported_versions(_error_dict(exc))
    except UnknownOutcome:
        if alone:
            raise _ProbeLost() from None
        return Verdict.HANDSHAKE, None  # initialize is pending; its own outcome will tell
    except ProtocolViolation:
        return Verdict.HANDSHAKE, None
    else:
        verdict, opened, versions = mcp.judge_discover_result(result), result, mcp.supported_versions(result)
    if verdict is Verdict.REFUSE:
        raise Incompatible(
            server,
            f"it supports protocol versions {', '.join(versions) or '(none named)'}; this client speaks "
            f"{', '.join(mcp.MODERN_VERSIONS + mcp.LEGACY_VERSIONS)}",
        )
    return verdict, opened if verdict is Verdict.MODERN else None


def _discover_result(channel: RpcChannel, server: str, opened: dict[str, Any] | None, deadline: float) -> dict[str, Any]:
    """The DiscoverResult; asked again when the verdict came from a -32022 error."""
    if opened is not None:
        return opened
    try:
        return channel.request("server/discover", mcp.modern_params(None), max(0.0, deadline - time.monotonic()))
    except ServerError as exc:
        raise Unavailable(server, f"server/discover failed: {exc.detail}") from None


def _accept_initialize(channel: RpcChannel, server: str, result: dict[str, Any]) -> str:
    version = result.get("protocolVersion")
    if version not in mcp.LEGACY_VERSIONS:
        # 2025-11-25 basic/lifecycle: a client that does not support the version disconnects.
        raise Incompatible(
            server, f"it answered initialize with protocol version {str(version)[:40]!r}; this client speaks {', '.join(mcp.LEGACY_VERSIONS)}"
        )
    if not isinstance(result.get("capabilities"), dict):
        raise ProtocolViolation(server, "its initialize result has no capabilities object")
    channel.notify("notifications/initialized")
    return version


def _error_dict(exc: RemoteError) -> dict[str, Any]:
    return {"code": exc.code, "message": exc.remote_message, "data": exc.data}


# -- discovery ----------------------------------------------------------------------------


def discover(connection: Connection, timeout: float) -> Catalogue:
    """Read tools, resources, resource templates and prompts the server offers.

    Each list is asked only when the capabilities offer it. Pagination stops after
    MAX_PAGES pages or at a repeated cursor; what was read is kept, with a warning.

    Raises:
        ServerError: a list failed (the server's error, a timeout, a lost connection).
    """
    deadline = time.monotonic() + timeout
    caps = connection.capabilities
    warnings: list[str] = []
    lists: dict[str, tuple[dict[str, Any], ...]] = {}
    wanted = [
        ("tools", "tools/list", "tools"),
        ("resources", "resources/list", "resources"),
        ("resources", "resources/templates/list", "resourceTemplates"),
        ("prompts", "prompts/list", "prompts"),
    ]
    for capability, method, key in wanted:
        if not isinstance(caps.get(capability), dict):
            continue
        try:
            items = _list_all(connection, method, key, deadline, warnings)
        except RemoteError as exc:
            if method == "resources/templates/list" and exc.code == jsonrpc.METHOD_NOT_FOUND:
                continue  # offering resources does not oblige a server to have templates
            raise
        lists[key] = tuple(_valid_items(connection.server, key, items, warnings))
    return Catalogue(
        server=connection.server,
        era=connection.era,
        protocol_version=connection.version,
        server_info=connection.server_info,
        instructions=connection.instructions,
        capabilities=caps,
        tools=lists.get("tools", ()),
        resources=lists.get("resources", ()),
        resource_templates=lists.get("resourceTemplates", ()),
        prompts=lists.get("prompts", ()),
        warnings=tuple(warnings),
    )


def _list_all(connection: Connection, method: str, key: str, deadline: float, warnings: list[str]) -> list[Any]:
    items: list[Any] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _page in range(MAX_PAGES):
        params = {"cursor": cursor} if cursor is not None else None
        result = connection.request(method, params, max(0.0, deadline - time.monotonic()))
        page = result.get(key)
        if not isinstance(page, list):
            raise ProtocolViolation(connection.server, f"{method} returned no {key} list")
        items.extend(page)
        cursor = result.get("nextCursor")
        # 2026-07-28 server/utilities/pagination: any non-null cursor continues.
        if cursor is None or (cursor == "" and not connection.modern):
            return items
        if not isinstance(cursor, str):
            raise ProtocolViolation(connection.server, f"{method} returned a nextCursor that is not a string")
        if cursor in seen:
            warnings.append(f"server {connection.server!r}: {method} repeated a cursor; kept the {len(items)} {key} read so far")
            return items
        seen.add(cursor)
    warnings.append(f"server {connection.server!r}: {method} had more than {MAX_PAGES} pages; kept the {len(items)} {key} of the first {MAX_PAGES}")
    return items


_REQUIRED = {"tools": "name", "resources": "uri", "resourceTemplates": "uriTemplate", "prompts": "name"}


def _valid_items(server: str, key: str, items: list[Any], warnings: list[str]):
    field = _REQUIRED[key]
    seen: set[str] = set()
    for item in items:
        ident = item.get(field) if isinstance(item, dict) else None
        if not isinstance(ident, str) or not ident:
            warnings.append(f"server {server!r}: left out an entry of {key} without a {field}")
            continue
        if key == "tools" and not (isinstance(item.get("inputSchema"), dict) and item["inputSchema"].get("type") == "object"):
            warnings.append(f"server {server!r}: left out tool {ident[:80]!r}: its inputSchema is not an object schema")
            continue
        if ident in seen:
            warnings.append(f"server {server!r}: left out a second {key} entry named {ident[:80]!r}")
            continue
        seen.add(ident)
        yield item
