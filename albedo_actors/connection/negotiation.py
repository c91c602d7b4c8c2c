"""A negotiated connection to one server, and the blocking steps that make one.

Everything here blocks, within deadlines, and runs on helper threads of a
ServerClient (its dialer and its discovery thread) or on a caller's thread (a tool
call). No actor state lives here.

- :func:`open_stdio` launches a stdio server and finds out its era exactly as
  2026-07-28 basic/transports/stdio says, as the reference ports it: ``server/discover``
  first; after one second without an answer ``initialize`` follows on the same
  connection while the probe stays open, and whichever is answered first as its era
  expects decides. Beyond the reference: an old server that *exits* on the probe is
  relaunched once and opened with ``initialize`` directly. A known era (from a saved
  catalogue) opens in that era first; :func:`open_http` likewise.
- :class:`Connection` sends era-correct requests: modern ones carry ``_meta``, and a
  state-only ``input_required`` result is retried with its ``requestState``.
- Discovery (reading the catalogue) is :mod:`.discovery`.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..config import ServerConfig, http_headers
from ..errors import (
    ConfigError,
    HttpRefused,
    HttpServerFailed,
    Incompatible,
    ProtocolViolation,
    RemoteError,
    ServerError,
    TimedOut,
    Unavailable,
    UnknownOutcome,
)
from .channel import Link, Pending, RpcChannel
from .progress import CallProgress
from .stdio_link import StdioLink
from ..transport.stdio import LaunchFailed, LaunchSpec, StdioTransport
from ..wire import jsonrpc, mcp, tasks
from ..wire.deadline import Bound, Deadline
from ..wire.mcp import Negotiated, Verdict
from ..wire import telemetry

if TYPE_CHECKING:  # the record's type only: no layer below actors/ loads the store
    from ..store.records import Credentials
    # The HTTP link and transport load http.client and ssl: open_http imports them at
    # first use, so that a stdio-only host never loads them.
    from .http.exchange import LinkAuth
    from .http.link import HttpLink

logger = telemetry.logger(__name__)  # records carry the server and trace ids

PROBE_GRACE = 1.0  # seconds the stdio probe has before initialize follows
MAX_STATE_ROUNDS = 3

NotificationSink = Callable[[str, dict[str, Any]], None]
# A host's answers to server requests, by kind ("elicitation", "sampling", "roots").
Handlers = dict[str, Callable[[dict[str, Any]], dict[str, Any]]]
ClosedSink = Callable[[str], None]
# Told every link as soon as it exists, so that an owner that is stopping can close a
# connection still being opened.
LinkSink = Callable[[Link], None]


class Connection:
    """One open connection whose era is known. Thread-safe; used by any caller thread."""

    def __init__(self, channel: RpcChannel, link: Link, negotiated: Negotiated, opened: dict[str, Any]) -> None:
        self.channel = channel
        self.link = link
        self.server = channel.server
        self.negotiated = negotiated  # the one value of era and version; the link speaks it too
        channel.negotiated = negotiated
        channel.opened_at = time.monotonic()
        link.use(negotiated)
        capabilities = opened.get("capabilities")
        self.capabilities: dict[str, Any] = capabilities if isinstance(capabilities, dict) else {}
        instructions = opened.get("instructions")
        self.instructions = instructions if isinstance(instructions, str) else None
        self.server_info = mcp.server_info_of(opened, self.era)

    @property
    def era(self) -> str:
        return self.negotiated.era

    @property
    def version(self) -> str:
        return self.negotiated.version

    @property
    def modern(self) -> bool:
        return self.negotiated.modern

    @property
    def alive(self) -> bool:
        return self.channel.closed_reason is None

    @property
    def transport(self) -> str:
        """``"http"`` or ``"stdio"``."""
        return "http" if hasattr(self.link, "session_id") else "stdio"

    def params(self, params: dict[str, Any] | None, task: bool = False, method: str = "") -> dict[str, Any] | None:
        """Era-correct params: modern requests carry the per-request ``_meta``. ``task``:
        the request belongs to a task (wire/tasks.py): in 2026 every such request names
        the extension in its capabilities; in 2025-11-25 a ``tools/call`` asking for one
        carries ``params.task``."""
        if self.modern:
            capabilities = tasks.opt_in(self.channel.capabilities) if task else self.channel.capabilities
            return mcp.modern_params(params, self.version, capabilities)
        return tasks.augment(params or {}, False) if task and method == "tools/call" else params

    def request(self, method: str, params: dict[str, Any] | None, timeout: float | None = None, sizes: list[int] | None = None,
                progress: CallProgress | None = None, deadline: Bound | None = None, task: bool = False) -> dict[str, Any]:
        """Send one request and return its complete result.

        ``deadline``: the call's one deadline (else ``timeout`` seconds from now); every
        round of the request, the link's auth step and the exchange end at it.
        ``sizes``, when given, gets the wire size in bytes of every answer read.
        ``progress``: its token goes in ``_meta.progressToken``, and each progress
        notification for it moves the deadline (it is then the call's deadline).
        ``task``: the request belongs to a task: a ``tools/call`` asks to run as one (a
        CreateTaskResult is then returned as it came: connection/tasks.py follows it),
        and in 2026 every ``tasks/*`` request opts in to the extension too.

        A modern ``input_required`` result is retried under a new id with its
        ``requestState``, at most MAX_STATE_ROUNDS times (2026-07-28
        basic/patterns/mrtr). Input it asks for is answered by the host's handlers;
        a request for input no handler covers is an error (by default we declare no
        client capabilities).

        Raises:
            TimedOut, UnknownOutcome, Unavailable, RemoteError, ProtocolViolation.
        """
        if progress is not None:
            # Its token in every round's _meta (2025-11-25 basic/utilities/progress); the
            # channel moves ``progress.deadline`` with each notification for it.
            params = dict(params or {})
            params["_meta"] = {**(params.get("_meta") or {}), "progressToken": progress.token}
            self.channel.track(progress)
            try:
                return self._request(method, params, progress, sizes, progress, task)
            finally:
                self.channel.untrack(progress)
        if deadline is None:
            if timeout is None:
                raise TypeError("a request needs a timeout or a deadline")
            deadline = Deadline.after(timeout)
        return self._request(method, params, deadline, sizes, None, task)

    def _request(self, method: str, params: dict[str, Any] | None, deadline: Bound, sizes: list[int] | None,
                 progress: CallProgress | None, task: bool = False) -> dict[str, Any]:
        params = self.params(params, task, method)
        for _round in range(MAX_STATE_ROUNDS + 1):
            pending = self.channel.start(method, params, deadline=deadline, progress=progress)
            try:
                result = self.channel.wait(pending, deadline.remaining())
            except TimedOut as exc:
                if progress is not None or not exc.sent:
                    raise
                raise TimedOut(self.server, f"{method} got no answer within {deadline.seconds:g} s; it was cancelled") from None
            if sizes is not None:
                sizes.append(pending.size or len(jsonrpc.encode(result)))
            if not self.modern:
                return result
            kind = result.get("resultType", "complete")
            if kind == "complete" or (kind == "task" and task):
                return result
            if kind == "task":
                # SEP-2663: a CreateTaskResult to a request that did not opt in (any but a
                # tools/call asking for a task) is an invalid answer; nothing is polled.
                raise ProtocolViolation(self.server, f"{method} returned a task (resultType 'task') though it did not ask "
                                                     "for one")
            if kind != "input_required":
                raise ProtocolViolation(self.server, f"{method} returned an unknown resultType {str(kind)[:40]!r}")
            retry = {key: value for key, value in (params or {}).items() if key not in ("inputResponses", "requestState")}
            requests = result.get("inputRequests")
            if requests:
                retry["inputResponses"] = self._answer_inputs(method, requests)
            state = result.get("requestState")
            if state is not None:
                if not isinstance(state, str):
                    raise ProtocolViolation(self.server, f"{method} returned a requestState that is not a string")
                retry["requestState"] = state
            elif not requests:
                raise ProtocolViolation(self.server, f"{method} returned input_required without inputRequests or requestState")
            params = retry
        raise ProtocolViolation(self.server, f"{method} still returned input_required after {MAX_STATE_ROUNDS} retries")

    def _answer_inputs(self, method: str, requests: Any) -> dict[str, Any]:
        """Fulfil an ``input_required`` round's ``inputRequests`` with the host's handlers."""
        if not isinstance(requests, dict):
            raise ProtocolViolation(self.server, f"{method} returned inputRequests that are not an object")
        handlers = self.channel.handlers
        missing = sorted(
            {str(r.get("method")) if isinstance(r, dict) else "?" for r in requests.values()}
            - set(handlers)
        )
        if missing:
            raise ProtocolViolation(
                self.server, f"{method} asked for client input ({', '.join(missing)}) that this client did not declare it can give"
            )
        answers = {}
        for key, request in requests.items():
            params = request.get("params")
            try:
                answers[key] = handlers[request["method"]](params if isinstance(params, dict) else {})
            except Exception as exc:  # noqa: BLE001 - a host handler failing fails this call only
                raise ProtocolViolation(self.server, f"the host could not answer {request['method']} for {method}: {exc}") from None
        return answers

    def start_listen(self) -> Pending | None:
        """Start listening for the lists that can change, as the link and era want
        (:meth:`Link.listen`); the held-open request when the channel holds it."""
        filters = {
            field: True
            for capability, field in mcp.LISTEN_FILTERS.items()
            if isinstance(self.capabilities.get(capability), dict) and self.capabilities[capability].get("listChanged")
        }
        return self.link.listen(filters)

    def close(self, reason: str = "closed") -> None:
        self.channel.close(reason)

    def wait_closed(self, timeout: float | None = None) -> bool:
        """After :meth:`close`: wait (bounded) for the link's threads and process to end."""
        return self.link.wait_closed(timeout)


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
    track: LinkSink = lambda link: None,
    handlers: Handlers | None = None,
    era: str | None = None,
) -> Connection:
    """Launch a stdio server and negotiate its era within ``timeout`` seconds.

    ``track`` is told every link as soon as it exists, so that an owner that is
    stopping can close a connection that is still being opened.

    ``era`` is the era a saved catalogue of this configuration recorded ("legacy" or
    "modern"; None: unknown). 2026-07-28 basic/transports/stdio lets a client cache the
    era and persist it across restarts of the same configuration, re-probing when the
    assumption stops working. So a saved legacy server gets ``initialize`` at once, with
    no ``server/discover`` and no probe grace; a saved modern one gets ``server/discover``
    and no ``initialize`` unless the probe stays unanswered for half the startup time.
    Either way, an answer of the other era falls back to the other opening on the same
    connection (see :func:`_negotiate`).

    Raises:
        Unavailable: it could not be started, did not answer in time, or refused to open.
        Incompatible: it speaks no protocol revision we speak.
    """
    deadline = time.monotonic() + timeout
    first = "initialize" if era == "legacy" else "discover"
    grace = timeout / 2 if era == "modern" else PROBE_GRACE
    try:
        return _open_once(server, spec, on_notification, on_closed, deadline, probe=True, track=track, handlers=handlers,
                          first=first, grace=grace)
    except _ProbeLost as exc:
        logger.info("server %r exited on the server/discover probe (%s); relaunching it with initialize", server, exc)
    try:
        return _open_once(server, spec, on_notification, on_closed, deadline, probe=False, track=track, handlers=handlers)
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
    track: LinkSink,
    handlers: Handlers | None,
    first: str = "discover",
    grace: float = PROBE_GRACE,
) -> Connection:
    opening = threading.Event()  # set once negotiated: from then on closures go to the owner
    lost: list[str] = []

    def closed(reason: str) -> None:
        if opening.is_set():
            on_closed(reason)
        else:
            lost.append(reason)

    channel = RpcChannel(server, on_notification, closed, handlers)
    channel.telemetry = {"network.transport": "pipe"}
    channel.secrets = tuple(spec.secrets)
    transport = StdioTransport(spec, channel.feed_line, channel.connection_lost, name=server)
    link = StdioLink(channel, transport)
    channel.attach(link)
    track(link)
    try:
        transport.start()
    except LaunchFailed as exc:
        raise Unavailable(server, f"cannot start: {exc}") from None
    try:
        negotiated, opened = _negotiate(channel, server, deadline, probe, first, grace)
    except _ProbeLost:
        transport.close()
        transport.wait_closed()
        raise _ProbeLost(lost[0] if lost else "closed its output") from None
    except BaseException:
        transport.close()
        transport.wait_closed()
        raise
    connection = Connection(channel, link, negotiated, opened)
    opening.set()
    if lost:  # it died between answering and now
        on_closed(lost[0])
    return connection


def _negotiate(channel: RpcChannel, server: str, deadline: float, probe: bool, first: str = "discover",
               grace: float = PROBE_GRACE) -> tuple[Negotiated, dict[str, Any]]:
    """Return (era and version, DiscoverResult or InitializeResult).

    ``probe`` False: ``initialize`` only (the process exited on an earlier probe).
    Otherwise both openings may be tried on this connection, ``first`` first; the other
    follows once ``grace`` seconds pass without an answer, or at once when the first is
    refused in a way that does not prove the era. Whichever is answered as its era
    expects decides (2026-07-28 basic/transports/stdio: the fallback must not depend on
    one error code).
    """
    waker = threading.Event()
    probe_p = init_p = None
    probe_judged = False  # server/discover was answered and did not prove a modern server
    init_refused: str | None = None  # why initialize was refused, once it was

    def start(method: str, params: dict[str, Any]) -> Pending:
        try:
            return channel.start(method, params, waker)
        except Unavailable:
            # The process ended before its first request could be written (it exits at
            # start, and its end won the race with our write): lost as the probe is, so
            # the caller waits for the launcher's report and says why it cannot start.
            raise _ProbeLost() from None

    def start_probe() -> Pending:
        return start("server/discover", mcp.modern_params(None, capabilities=channel.capabilities))

    def start_init() -> Pending:
        return start("initialize", mcp.initialize_params(channel.capabilities))

    if probe and first == "discover":
        probe_p = start_probe()
    else:
        init_p = start_init()
    grace_end = time.monotonic() + grace
    try:
        while True:
            waker.clear()
            if probe_p is not None and probe_p.done:
                verdict, opened = _judge_probe(probe_p, server, init_p is None)
                probe_p, probe_judged = None, True
                if verdict is Verdict.MODERN:
                    return mcp.MODERN, _discover_result(channel, server, opened, deadline)
                if init_refused is not None:
                    raise Unavailable(server, f"refused initialize: {init_refused}")
                if init_p is None:
                    init_p = start_init()
            if init_p is not None and init_p.done:
                try:
                    result = init_p.outcome()
                except RemoteError as exc:
                    if mcp.judge_error(_error_dict(exc)) is Verdict.MODERN:
                        # It had locked itself modern before initialize arrived, or is
                        # modern although a saved catalogue said legacy.
                        return mcp.MODERN, _discover_result(channel, server, None, deadline)
                    init_p, init_refused = None, exc.detail
                    if probe and probe_p is None and not probe_judged:
                        probe_p = start_probe()  # the saved era was wrong: probe after all
                        continue
                    if probe_p is None:
                        raise Unavailable(server, f"refused initialize: {exc.detail}") from None
                    continue  # the probe is still open; its answer decides
                except UnknownOutcome:
                    raise _ProbeLost() from None
                version = _accept_initialize(server, result)
                channel.notify("notifications/initialized")
                return Negotiated("legacy", version), result
            now = time.monotonic()
            if now >= deadline:
                waited = "server/discover or initialize" if probe else "initialize"
                raise Unavailable(server, f"did not answer {waited} in time (startupTimeoutMs)")
            follow = probe and now >= grace_end
            if follow and first == "discover" and init_p is None and init_refused is None:
                # 2026-07-28 basic/transports/stdio: no answer in reasonable time means an
                # older server; the probe stays open and the first fitting answer decides.
                init_p = start_init()
                continue
            if follow and first == "initialize" and probe_p is None and not probe_judged and init_p is not None:
                # Saved as legacy but silent on initialize: perhaps modern now.
                probe_p = start_probe()
                continue
            both = (probe_p is not None or probe_judged or not probe) and (init_p is not None or init_refused is not None)
            wake_at = deadline if both or now >= grace_end else min(deadline, grace_end)
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
        return channel.request("server/discover", mcp.modern_params(None, capabilities=channel.capabilities), max(0.0, deadline - time.monotonic()))
    except ServerError as exc:
        raise Unavailable(server, f"server/discover failed: {exc.detail}") from None


def _accept_initialize(server: str, result: dict[str, Any]) -> str:
    version = result.get("protocolVersion")
    if version not in mcp.LEGACY_VERSIONS:
        # 2025-11-25 basic/lifecycle: a client that does not support the version disconnects.
        raise Incompatible(
            server, f"it answered initialize with protocol version {str(version)[:40]!r}; this client speaks {', '.join(mcp.LEGACY_VERSIONS)}"
        )
    if not isinstance(result.get("capabilities"), dict):
        raise ProtocolViolation(server, "its initialize result has no capabilities object")
    return str(version)


def _error_dict(exc: RemoteError) -> dict[str, Any]:
    return {"code": exc.code, "message": exc.remote_message, "data": exc.data}


# -- opening a streamable HTTP connection ---------------------------------------------------


def open_http(
    config: ServerConfig,
    on_notification: NotificationSink,
    on_closed: ClosedSink,
    timeout: float,
    *,
    environ: Mapping[str, str] = os.environ,
    track: LinkSink = lambda link: None,
    handlers: Handlers | None = None,
    credentials: Credentials | None = None,
    auth: LinkAuth | None = None,
    era: str | None = None,
) -> Connection:
    """Connect to a streamable HTTP server and find out its era within ``timeout`` seconds.

    ``era``: the era a saved catalogue of this configuration recorded. A saved legacy
    server gets ``initialize`` at once, without the ``server/discover`` POST first; when
    it refuses that, the normal negotiation follows (the era is cached per origin and
    re-probed when the assumption stops working, 2026-07-28 basic/versioning). A saved
    modern server opens as any other: ``server/discover`` is the modern opening.

    Raises:
        ConfigError: a credential it names is not set.
        Unavailable: it could not be reached or refused to open.
        Incompatible: it speaks no protocol revision we speak.
    """
    server = config.name
    if config.url is None:  # parse() refuses such an entry; a hand-made ServerConfig may not
        raise ConfigError(f"server {server!r}: an http server needs a \"url\"")
    deadline = time.monotonic() + timeout
    headers = http_headers(config, environ, credentials)
    from ..transport.http import HttpTransport  # first use: http.client and ssl load here
    from .http.link import HttpLink

    opened_event = threading.Event()

    def closed(reason: str) -> None:
        if opened_event.is_set():
            on_closed(reason)

    channel = RpcChannel(server, on_notification, closed, handlers)
    channel.telemetry = _http_attributes(config.url)
    channel.secrets = telemetry.header_secrets(headers)
    link = HttpLink(channel, HttpTransport(config.url, verify=config.ca_file or True), server, headers, auth=auth)
    channel.attach(link)
    track(link)
    try:
        negotiated, opened = _negotiate_http(channel, link, server, deadline, era)
    except BaseException:
        link.close("could not open")
        link.wait_closed()
        raise
    opened_event.set()
    return Connection(channel, link, negotiated, opened)


def resume_http(
    config: ServerConfig,
    session_id: str,
    version: str,
    on_closed: ClosedSink,
    *,
    environ: Mapping[str, str] = os.environ,
    handlers: Handlers | None = None,
    credentials: Credentials | None = None,
    auth: LinkAuth | None = None,
) -> Connection:
    """A connection to a 2025-11-25 HTTP server inside a session opened before, by
    another process (a stored task's): no handshake, the session's id and protocol
    version on every request, no listening stream, and the session is not ended when
    this connection closes (its tasks may still be polled by others).

    Raises:
        ConfigError: a credential it names is not set, or the version is not one we speak.
    """
    server = config.name
    if config.url is None:
        raise ConfigError(f"server {server!r}: an http server needs a \"url\"")
    if version not in mcp.LEGACY_VERSIONS:
        raise ConfigError(f"server {server!r}: a stored session speaks {version!r}, which this client does not")
    headers = http_headers(config, environ, credentials)
    from ..transport.http import HttpTransport
    from .http.link import HttpLink

    channel = RpcChannel(server, lambda method, params: None, on_closed, handlers)
    channel.telemetry = _http_attributes(config.url)
    channel.secrets = telemetry.header_secrets(headers)
    link = HttpLink(channel, HttpTransport(config.url, verify=config.ca_file or True), server, headers, auth=auth)
    channel.attach(link)
    negotiated = Negotiated("legacy", version)
    link.use(negotiated)
    link.session_id = session_id
    link.keep_session = True
    return Connection(channel, link, negotiated, {"capabilities": {"tasks": {"cancel": {}}}})


def _http_attributes(url: str) -> dict[str, Any]:
    """The OpenTelemetry attributes of an HTTP server at ``url`` (its host and port)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    attributes: dict[str, Any] = {"network.transport": "tcp"}
    if parts.hostname:
        attributes["server.address"] = parts.hostname
    try:
        port = parts.port
    except ValueError:
        port = None
    attributes["server.port"] = port if port is not None else (443 if parts.scheme == "https" else 80)
    return attributes


def _remaining(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _negotiate_http(channel: RpcChannel, link: HttpLink, server: str, deadline: float,
                    saved_era: str | None = None) -> tuple[Negotiated, dict[str, Any]]:
    """2026-07-28 basic/transports/streamable-http "Backward Compatibility"."""
    if saved_era == "legacy":
        saved = _initialize_saved_legacy(channel, link, server, deadline)
        if saved is not None:
            return saved
    verdict, opened = Verdict.HANDSHAKE, None
    for attempt in range(2):
        try:
            params = mcp.modern_params(None, capabilities=channel.capabilities)
            opened = channel.request("server/discover", params, _remaining(deadline))
            verdict = mcp.judge_discover_result(opened)
        except RemoteError as exc:
            if exc.code not in jsonrpc.MODERN_ERROR_CODES:
                verdict = Verdict.HANDSHAKE  # a JSON-RPC error that is not a modern one: an older server
            elif exc.code != jsonrpc.UNSUPPORTED_PROTOCOL_VERSION:
                raise Unavailable(server, f"refused server/discover: {exc.detail}") from None
            else:
                verdict = mcp.judge_error(_error_dict(exc))
                if verdict is Verdict.MODERN:
                    # 2026-07-28 basic/versioning: resend with a version it lists (ours).
                    if attempt == 0:
                        continue
                    raise Unavailable(server, f"refused server/discover at {mcp.MODERN_VERSION} twice although it lists it") from None
                if verdict is Verdict.REFUSE:
                    versions = ", ".join(mcp.supported_versions(_error_dict(exc))) or "(none named)"
                    raise Incompatible(
                        server, f"it supports protocol versions {versions}; this client speaks {', '.join(mcp.MODERN_VERSIONS + mcp.LEGACY_VERSIONS)}"
                    ) from None
        except (HttpRefused, HttpServerFailed):
            verdict = Verdict.HANDSHAKE  # a non-2xx status without a modern error: an older server
        except (TimedOut, UnknownOutcome) as exc:
            raise Unavailable(server, f"did not answer server/discover: {exc.detail}") from None
        break
    if verdict is Verdict.REFUSE:
        versions = ", ".join(mcp.supported_versions(opened or {})) or "(none named)"
        raise Incompatible(server, f"it supports protocol versions {versions}; this client speaks {', '.join(mcp.MODERN_VERSIONS + mcp.LEGACY_VERSIONS)}")
    if verdict is Verdict.MODERN:
        link.use(mcp.MODERN)
        return mcp.MODERN, opened or {}
    link.use(Negotiated("legacy", mcp.LEGACY_VERSION))
    try:
        result = channel.request("initialize", mcp.initialize_params(channel.capabilities), _remaining(deadline))
    except HttpRefused as exc:
        if exc.status in (401, 403):
            raise  # its own message says which credentials were refused
        raise Unavailable(server, f"refused initialize (HTTP {exc.status}); is the URL its MCP endpoint?") from None
    except (RemoteError, TimedOut, UnknownOutcome) as exc:
        raise Unavailable(server, f"initialize failed: {exc.detail}") from None
    negotiated = Negotiated("legacy", _accept_initialize(server, result))
    link.use(negotiated)
    # Over HTTP the server must accept notifications/initialized before any request.
    link.notify_accepted("notifications/initialized")
    return negotiated, result


def _initialize_saved_legacy(channel: RpcChannel, link: HttpLink, server: str,
                             deadline: float) -> tuple[Negotiated, dict[str, Any]] | None:
    """``initialize`` straight away for a server saved as legacy; None: it refused, probe it.

    Raises:
        HttpRefused: 401 or 403 (its message names the refused credentials).
        Unavailable: it did not answer.
    """
    link.use(Negotiated("legacy", mcp.LEGACY_VERSION))
    try:
        result = channel.request("initialize", mcp.initialize_params(channel.capabilities), _remaining(deadline))
        version = _accept_initialize(server, result)
    except HttpRefused as exc:
        if exc.status in (401, 403):
            raise
        reason = f"HTTP {exc.status}"
    except (RemoteError, HttpServerFailed, Incompatible, ProtocolViolation) as exc:
        reason = getattr(exc, "detail", str(exc))
    except (TimedOut, UnknownOutcome) as exc:
        raise Unavailable(server, f"did not answer initialize: {exc.detail}") from None
    else:
        negotiated = Negotiated("legacy", version)
        link.use(negotiated)
        link.notify_accepted("notifications/initialized")
        return negotiated, result
    logger.info("server %r: saved as legacy but refused initialize (%s); finding out its era again", server, reason)
    link.use(None)  # back to probing: modern headers, no session
    return None


# -- discovery ----------------------------------------------------------------------------
