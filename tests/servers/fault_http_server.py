"""Fault-injecting streamable-HTTP MCP server for the client's tests.

The HTTP sibling of ``fault_server.py``: the JSON-RPC logic is the bundled demo
server's (``albedo_actors.demo.server.DemoServer``), served over the Streamable
HTTP transport of both protocol eras on one endpoint (default path ``/mcp``),
with switches that make it misbehave. Standard library only
(``http.server.ThreadingHTTPServer``), bound to 127.0.0.1.

In-process use (tests)::

    server = FaultHTTPServer(era="dual", sse=True)   # any option below as keyword
    url = server.start()          # "http://127.0.0.1:PORT/mcp"
    ...
    server.configure(oversized="chunked")            # change faults at run time
    server.requests               # every HTTP request received (RecordedRequest)
    server.events                 # what happened (dicts, see EVENTS below)
    server.wait_for_event("client_closed", request_id=7, timeout=5)
    server.wait_for_request(lambda r: r.method == "DELETE")
    server.announce_tools_changed()  # list_changed to legacy GET streams / modern listens
    server.end_listens()          # graceful end of open subscriptions/listen streams
    server.sessions, server.expire_session(sid), server.clear_records()
    server.stop()                 # closes everything, joins every thread (bounded)

It is also a context manager (``with FaultHTTPServer() as server: server.url``).

``CanaryServer`` is a tiny HTTP listener that records whatever reaches it and
answers 200; point ``redirect_to`` at it to prove the client follows nothing.

Script use::

    python tests/servers/fault_http_server.py [--port P] [flags]

prints the endpoint URL as the first stdout line (then ``canary URL`` as the
second line with ``--redirect-to canary``) and serves until SIGTERM/SIGINT.

Normal behaviour
----------------
POST only with ``Accept`` naming both ``application/json`` and
``text/event-stream`` (else 406) and a JSON ``Content-Type`` (else 415); a
present ``Origin`` that is not http(s)://127.0.0.1 / localhost / [::1] gets 403;
unparsable JSON gets 400 + -32700; a batch (array) 400 + -32600.

Era of a POST (``--era dual``): an ``MCP-Protocol-Version`` header that is not a
legacy revision, or no such header but a body that looks modern
(``server/discover`` or ``_meta`` protocolVersion), makes it modern; anything
else is legacy. ``--era modern`` treats every POST as modern (``initialize``
gets 400 + -32022 listing the modern versions; GET/DELETE get 405);
``--era legacy`` treats every POST as legacy.

Modern (2026-07-28): stateless, each POST judged alone; ``Mcp-Session-Id`` is
ignored. Checks, in order, each failing with HTTP 400: ``MCP-Protocol-Version``
present (-32020), equal to ``_meta`` protocolVersion if that is given (-32020),
supported (-32022); ``Mcp-Method`` present and equal to the body method
(-32020; for notifications only checked when present); ``Mcp-Name`` present and
equal to ``params.name`` (tools/call, prompts/get) or ``params.uri``
(resources/read) after ``=?base64?...?=`` decoding (-32020); for tools/call of a
tool whose ``x-mcp-header`` annotations are valid, each ``Mcp-Param-X`` present
exactly when the argument is present and non-null and equal to it (-32020);
a repeated routing header is -32020 too. Then the demo logic (missing
``_meta`` fields -32602, ...). Errors go out as JSON with HTTP status 400
(-32700/-32600/-32602/-32020/-32021/-32022), 404 (-32601) or 200 (others);
results as JSON, or as SSE with ``--sse`` (no event ids in this era).
Notifications get 202. ``subscriptions/listen`` always answers SSE: the
acknowledgement, then list_changed notifications, open until the client
disconnects (recorded as ``client_closed``), ``end_listens()`` (graceful
response) or stop().

Legacy (2024-11-05 .. 2025-11-25): ``initialize`` (any session header ignored)
answers with a new ``Mcp-Session-Id``. Every other POST, GET and DELETE needs
that header: missing -> 400, unknown or ended -> 404. A session negotiated at
2025-06-18 or later also needs ``MCP-Protocol-Version`` equal to the negotiated
version on every later request (missing or different -> 400; for older sessions
the header is optional but must be a legacy revision). Notifications and
responses get 202 (``notifications/cancelled`` is recorded as ``cancelled``).
Requests answer JSON, or SSE with ``--sse``/``--event-ids``; JSON-RPC errors
inside a session are HTTP 200. DELETE -> 200 and the session ends (its streams
close). GET with ``Accept: text/event-stream`` opens the listening stream (406
without that Accept; 405 with ``--no-get``); it stays open until the client
leaves, the session ends or stop(). Server notifications made while no GET
stream is open are queued and sent when the next one opens (with event ids, a
dropped GET stream keeps receiving them for a ``Last-Event-ID`` resumption).

Flags (each is also a keyword of ``FaultHTTPServer``/``configure``)
-------------------------------------------------------------------
--era dual|legacy|modern      as above (default dual)
--sse                         answer requests with SSE (both eras)
--event-ids                   legacy SSE events carry ids ``<stream>-<n>`` (unique per
                              session); every legacy SSE stream (POST or GET) starts with
                              a priming event (id, empty data); legacy POST responses use
                              SSE. GET with ``Last-Event-ID`` + session id replays what
                              came after that id on the same stream and then continues
                              that stream on the new connection (unknown id -> 400)
--no-get                      legacy GET answered 405
--redirect-to URL|canary      every request to the endpoint (POST, GET, DELETE) is answered
                              ``--redirect-status`` (default 307) with ``Location: URL``,
                              nothing else; ``canary`` (script only) starts a CanaryServer
                              and redirects there
--redirect-status 301|302|303|307|308
--oversized content-length|chunked
                              requests whose method is in ``--fault-methods`` get a 200
                              ``application/json`` body of exactly 17 MiB (a valid JSON-RPC
                              result with one huge text block), declared by Content-Length
                              or sent chunked without a length
--cut-stream N                SSE responses to POSTed requests whose method is in
                              ``--fault-methods`` are cut: the first event carrying a
                              message is written only up to N bytes (at most its length
                              minus one) and the connection is closed (chunked body left
                              unterminated). Implies SSE for those responses. Events
                              before it (the legacy ``--event-ids`` priming event, with an
                              id) are complete, so a legacy client can resume; the whole
                              message is replayed on resumption.
--cut-times K                 only the first K such responses are cut (default: all)
--fault-methods M,M           methods hit by --oversized and --cut-stream (default tools/call)
--session-404-after N         a legacy session serves the first N POSTs carrying its id
                              (requests and notifications; initialize does not count) and
                              then expires: that POST and everything later with the id gets
                              404; a new initialize gets a new id (which expires the same way)
--listen-ends-at-once         modern ``subscriptions/listen``: the SSE stream ends right
                              after the acknowledgement (no response); legacy GET: the
                              SSE stream ends at once, nothing sent (but ``retry:``)
--retry VALUE                 ``retry: VALUE`` (verbatim, may be garbage) written first on
                              every SSE response, resumptions included
--no-headers                  record the request, then never send a status line: the
                              connection stays open, silent, until stop()
--slow TOOL=SECONDS           (repeatable) tools/call of TOOL is answered after SECONDS; in
                              SSE mode the stream headers (and legacy priming event) go out
                              first. A client that disconnects meanwhile is recorded as
                              ``client_closed``; the call is then dropped, except in a legacy
                              session with ``--event-ids``, where the answer still goes into
                              the stream for a ``Last-Event-ID`` resumption
--list-changed-every N        legacy: after every Nth JSON-RPC request POSTed in a session,
                              ``notifications/tools/list_changed`` on its GET stream (queued
                              if none is open); modern: after every Nth modern request, on
                              every open listen stream that asked for toolsListChanged
--listen-sends KIND           every listening stream (modern ``subscriptions/listen``, after
                              its acknowledgement; legacy GET, instead of its normal stream)
                              carries exactly one KIND block and then ends: ``notification``
                              (``notifications/message``), ``comment`` (``: ...``), ``retry``
                              (``retry: 0`` only), ``empty`` (an event whose data is empty),
                              ``priming`` (an id and empty data), ``response`` (a response to
                              an id the client never used); recorded as ``listen_sent``
--event-id-prefix TEXT        legacy SSE event ids are ``TEXT<stream>-<n>`` (TEXT may be any
                              text: non-ASCII, controls); ``Last-Event-ID`` is read as UTF-8
                              (WHATWG: the client sends the id encoded as UTF-8)
--session-id-value VALUE      ``initialize`` answers ``Mcp-Session-Id: VALUE`` (VALUE's
                              characters are the header's bytes, Latin-1) instead of a uuid;
                              the session is known under VALUE
--initialize-version V        a legacy ``initialize`` is answered with protocolVersion V
                              whatever the client asked for (an older revision, or one
                              nobody knows); the session is negotiated at V
--discover-error JSON         a POSTed ``server/discover`` (either era) is answered with HTTP
                              400 and a JSON-RPC error whose ``code``/``message``/``data``
                              are this object's (e.g. ``{"code": -32020, "message": "..."}``),
                              before any header check
--discover-error-times K      only the first K ``server/discover`` POSTs get it (default: all)
--record FILE                 (script only) append every request and event as a JSON line

Tools: ``echo``, ``add``, ``time`` (demo); ``hang`` (never answers: the request
stays open, JSON or SSE, until the client disconnects, recorded as
``client_closed`` with its request id); ``region {region?}`` (its ``region``
property is annotated ``x-mcp-header: Region``; answers the JSON text
``{"region": argument, "header": raw Mcp-Param-Region or null, "decoded": decoded
value or null}``); ``bad_header {amount}`` (``x-mcp-header`` on a ``number``
property: invalid, a client must leave it out; if called anyway it echoes
``amount``); ``progress {count}`` (sends ``count`` ``notifications/progress``
when the request has a progressToken, then answers; notifications force SSE);
``p_tick``, ``p_flood``, ``p_hostile`` (tests/servers/progress_tools.py: progress
sent while the request's SSE stream is open, or on the GET stream).

EVENTS (``server.events``; every dict has ``event`` and ``time``)
----------------------------------------------------------------
client_closed   {request_id, method, era} a held POST/stream lost its client;
                {stream: "get", session} a GET stream lost its client
stream_cut      {request_id, method, bytes}
oversized       {request_id, method, mode, bytes_sent, complete}
redirected      {method, location, status}
no_headers      {method}
session_created {session, version};  session_expired {session};  session_deleted {session}
cancelled       {request_id, session}  (legacy notifications/cancelled)
get_opened      {session, stream};  get_closed_at_once {session}
resumed         {session, last_event_id, replayed}
listen_opened   {request_id, notifications};  listen_ended {request_id, graceful}
listen_sent     {kind, count, era} a --listen-sends stream was written (count from 1)
list_changed    {target: "get"|"pending"|"listen", session | request_id}
server_error    {error}
"""

from __future__ import annotations

import argparse
import base64
import binascii
import io
import itertools
import json
import re
import select
import signal
import socket
import sys
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field, fields, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

try:
    from servers import progress_tools
except ImportError:  # run as a script: tests/servers is on sys.path
    import progress_tools  # type: ignore[no-redef]
from albedo_actors.demo.server import (
    INVALID_REQUEST,
    LEGACY_VERSIONS,
    META_SUBSCRIPTION,
    META_VERSION,
    METHOD_NOT_FOUND,
    MISSING_CLIENT_CAPABILITY,
    PARSE_ERROR,
    UNSUPPORTED_VERSION,
    INVALID_PARAMS,
    DemoServer,
    Request,
    text_result,
)

MIB = 1024 * 1024
OVERSIZED_BYTES = 17 * MIB
HEADER_MISMATCH = -32020

# HTTP status for a modern JSON-RPC error code (others: 200).
MODERN_ERROR_STATUS = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}
# Body field that Mcp-Name must equal, per method.
NAME_FIELDS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
# Sessions negotiated at these versions must send MCP-Protocol-Version.
VERSION_HEADER_REQUIRED = ("2025-11-25", "2025-06-18")
HTTP_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
BASE64_PREFIX, BASE64_SUFFIX = "=?base64?", "?="

POLL_S = 0.05  # how often waiting loops look at the client socket and stop()
JOIN_TIMEOUT_S = 5.0  # total bound on joining threads in stop()

_local = threading.local()  # stream / headers of the request being handled


class _ClientGone(Exception):
    """Writing to the client failed: it closed the connection."""


# --------------------------------------------------------------------------- options


@dataclass
class FaultOptions:
    era: str = "dual"
    sse: bool = False
    event_ids: bool = False
    no_get: bool = False
    redirect_to: str | None = None
    redirect_status: int = 307
    oversized: str | None = None
    cut_stream: int | None = None
    cut_times: int | None = None
    fault_methods: tuple[str, ...] = ("tools/call",)
    session_404_after: int | None = None
    listen_ends_at_once: bool = False
    retry: str | None = None
    no_headers: bool = False
    slow: dict[str, float] = field(default_factory=dict)
    list_changed_every: int | None = None
    listen_sends: str | None = None
    event_id_prefix: str = ""
    session_id_value: str | None = None
    initialize_version: str | None = None
    discover_error: dict[str, Any] | None = None
    discover_error_times: int | None = None

    def check(self) -> None:
        if self.listen_sends not in (None, *LISTEN_SENDS):
            raise ValueError(f"listen_sends must be one of {', '.join(LISTEN_SENDS)}, not {self.listen_sends!r}")
        if self.session_id_value is not None:
            self.session_id_value.encode("latin-1")  # the header's bytes
        if self.era not in ("dual", "legacy", "modern"):
            raise ValueError(f"era must be dual, legacy or modern, not {self.era!r}")
        if self.oversized not in (None, "content-length", "chunked"):
            raise ValueError(f"oversized must be content-length or chunked, not {self.oversized!r}")
        if self.redirect_status not in (301, 302, 303, 307, 308):
            raise ValueError(f"redirect_status must be a redirect status, not {self.redirect_status!r}")
        if self.discover_error is not None and not isinstance(self.discover_error.get("code"), int):
            raise ValueError(f"discover_error must be an object with an integer code, not {self.discover_error!r}")
        for name in ("cut_stream", "cut_times", "session_404_after", "list_changed_every", "discover_error_times"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < (1 if name == "list_changed_every" else 0)):
                raise ValueError(f"{name} must be a non-negative integer, not {value!r}")
        if isinstance(self.fault_methods, str):
            self.fault_methods = tuple(m for m in self.fault_methods.split(",") if m)
        self.fault_methods = tuple(self.fault_methods)
        self.slow = {str(k): float(v) for k, v in dict(self.slow).items()}
        if self.retry is not None:
            self.retry = str(self.retry)
            if "\n" in self.retry or "\r" in self.retry:
                raise ValueError("retry must be one line")


OPTION_NAMES = frozenset(f.name for f in fields(FaultOptions))

# --listen-sends: the one SSE block of each listening stream (count: its number).
LISTEN_SENDS = ("notification", "comment", "retry", "empty", "priming", "response")


def listen_block(kind: str, count: int) -> bytes:
    if kind == "notification":
        message = {"jsonrpc": "2.0", "method": "notifications/message",
                   "params": {"level": "info", "logger": "listen", "data": f"listen {count}"}}
        return f"data: {json.dumps(message)}\n\n".encode()
    if kind == "response":
        return f"data: {json.dumps({'jsonrpc': '2.0', 'id': f'never-sent-{count}', 'result': {}})}\n\n".encode()
    return {
        "comment": f": keep-alive {count}\n\n",
        "retry": "retry: 0\n\n",
        "empty": "data:\n\n",
        "priming": f"id: listen-{count}\ndata:\n\n",
    }[kind].encode()


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request as received (headers in arrival order, raw body)."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    connection: int  # serial number of the TCP connection it came on
    time: float  # time.monotonic()

    def header(self, name: str, default: str | None = None) -> str | None:
        """First value of header ``name`` (case-insensitive)."""
        lowered = name.lower()
        return next((v for k, v in self.headers if k.lower() == lowered), default)

    def header_all(self, name: str) -> list[str]:
        lowered = name.lower()
        return [v for k, v in self.headers if k.lower() == lowered]

    def json(self) -> Any:
        return json.loads(self.body)

    def to_json(self) -> dict:
        return {
            "method": self.method,
            "path": self.path,
            "headers": [list(h) for h in self.headers],
            "body": self.body.decode("utf-8", "replace"),
            "connection": self.connection,
        }


# --------------------------------------------------------------------------- header values


def decode_header_value(raw: str) -> str | None:
    """Decode an ``Mcp-Name``/``Mcp-Param-*`` value; None if it is malformed."""
    if raw.startswith(BASE64_PREFIX) and raw.endswith(BASE64_SUFFIX) and len(raw) >= len(BASE64_PREFIX) + 2:
        encoded = raw[len(BASE64_PREFIX):-len(BASE64_SUFFIX)]
        try:
            return base64.b64decode(encoded, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            return None
    if raw != raw.strip(" \t") or any(not (0x20 <= ord(c) <= 0x7E or c == "\t") for c in raw):
        return None
    return raw


def header_annotations(input_schema: Any) -> dict[str, tuple[str, str]] | None:
    """``{header token: (property, type)}`` of a flat schema's ``x-mcp-header``
    annotations, or None when any annotation is invalid (the tool is invalid)."""
    found: dict[str, tuple[str, str]] = {}
    properties = input_schema.get("properties", {}) if isinstance(input_schema, dict) else {}
    for prop, schema in properties.items():
        if not isinstance(schema, dict) or "x-mcp-header" not in schema:
            continue
        token = schema["x-mcp-header"]
        kind = schema.get("type")
        if (
            not isinstance(token, str)
            or not HTTP_TOKEN.match(token)
            or token.lower() in (t.lower() for t in found)
            or kind not in ("string", "integer", "boolean")
        ):
            return None
        found[token] = (prop, kind)
    return found


def header_matches(decoded: str, value: Any, kind: str) -> bool:
    if kind == "boolean":
        return isinstance(value, bool) and decoded == ("true" if value else "false")
    if kind == "integer":
        return (
            isinstance(value, int) and not isinstance(value, bool)
            and re.fullmatch(r"-?[0-9]+", decoded) is not None and int(decoded) == value
        )
    return isinstance(value, str) and decoded == value


def accept_ok(accept: str, *, need_json: bool, need_sse: bool) -> bool:
    types = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    has_json = bool(types & {"application/json", "application/*", "*/*"})
    has_sse = bool(types & {"text/event-stream", "text/*", "*/*"})
    return (has_json or not need_json) and (has_sse or not need_sse)


# --------------------------------------------------------------------------- SSE streams


class _Stream:
    """Events of one SSE stream, independent of the connection(s) carrying it.

    Producers ``push`` messages; a connection ``pump``s them out. With event
    ids a later connection (GET + Last-Event-ID) can take the stream over.
    """

    def __init__(self, number: int, session: "_Session | None", event_ids: bool, label: str,
                 id_prefix: str = "") -> None:
        self.number = number
        self.id_prefix = id_prefix
        self.session = session
        self.event_ids = event_ids
        self.label = label
        self.cond = threading.Condition()
        self.events: list[tuple[str | None, bytes, bool]] = []  # (id, SSE block, carries a message)
        self.messages = 0
        self.finished = False
        self.writer: object | None = None  # token of the connection currently carrying it
        self._seq = itertools.count(1)

    def push(self, message: dict | None) -> None:
        """Append a message (None: a priming event, id and empty data)."""
        data = "" if message is None else json.dumps(message, separators=(",", ":"), ensure_ascii=False)
        with self.cond:
            if self.finished:
                return
            event_id = f"{self.id_prefix}{self.number}-{next(self._seq)}" if self.event_ids else None
            block = (f"id: {event_id}\n" if event_id else "") + f"data: {data}\n\n"
            self.events.append((event_id, block.encode("utf-8"), message is not None))
            if message is not None:
                self.messages += 1
            if event_id is not None and self.session is not None:
                self.session.event_index[event_id] = (self, len(self.events) - 1)
            self.cond.notify_all()

    def push_raw(self, block: bytes) -> None:
        """Append an SSE block as it is (a comment, a bare retry): no message, no id."""
        with self.cond:
            if not self.finished:
                self.events.append((None, block, False))
                self.cond.notify_all()

    def finish(self) -> None:
        with self.cond:
            self.finished = True
            self.cond.notify_all()


class _Session:
    def __init__(self, session_id: str, engine: "_Engine", version: str) -> None:
        self.id = session_id
        self.engine = engine
        self.version = version
        self.posts = 0
        self.requests = 0
        self.ended = False
        self.streams: list[_Stream] = []
        self.event_index: dict[str, tuple[_Stream, int]] = {}
        self.listen: _Stream | None = None  # newest GET stream
        self.pending: list[dict] = []  # server messages waiting for a GET stream
        self._numbers = itertools.count(1)

    def new_stream(self, event_ids: bool, label: str) -> _Stream:
        stream = _Stream(next(self._numbers), self, event_ids, label, self.engine.owner.options.event_id_prefix)
        self.streams.append(stream)
        return stream


# --------------------------------------------------------------------------- JSON-RPC engine


class _Engine(DemoServer):
    """The demo server's JSON-RPC logic plus the fault tools; messages it sends
    go to the SSE stream of the request being handled (thread-local), or, for a
    legacy session, to its GET stream."""

    name = "albedo-fault-http"
    instructions = "Fault-injecting streamable-HTTP test server built on the albedo demo server."

    def __init__(self, owner: "FaultHTTPServer", era: str) -> None:
        super().__init__(era=era, stdin=io.BytesIO(), stdout=io.BytesIO())
        self.owner = owner
        self.lock = threading.Lock()
        self.session: _Session | None = None
        if era != "legacy":
            self.opened_as = "modern"  # every request here is judged as a modern one
        self._add_fault_tools()

    def send(self, message: Any) -> None:
        stream = getattr(_local, "stream", None)
        if stream is not None:
            stream.push(message)
        else:
            self.owner._server_message(self, message)

    def handle_notification(self, method: str, params: dict) -> None:
        request_id = params.get("requestId")
        if method == "notifications/cancelled" and isinstance(request_id, (str, int)):
            self.owner._record_event("cancelled", request_id=request_id,
                                     session=self.session.id if self.session else None)
        super().handle_notification(method, params)

    def _add_fault_tools(self) -> None:
        self.add_tool("hang", lambda request, args: None,
                      description="Never answer; the request stays open until the client leaves.")
        self.add_tool("region", self.tool_region,
                      description="Echo the Mcp-Param-Region header received with this call.",
                      properties={"region": {"type": "string", "x-mcp-header": "Region"}})
        self.add_tool("bad_header", lambda request, args: text_result(json.dumps({"amount": args.get("amount")})),
                      description="Invalid x-mcp-header (on a number property): clients must leave it out.",
                      properties={"amount": {"type": "number", "x-mcp-header": "Amount"}})
        self.add_tool("progress", self.tool_progress,
                      description="Send count progress notifications (if a progressToken is given), then answer.",
                      properties={"count": {"type": "integer"}}, required=("count",))
        for name, (tool, description, properties) in progress_tools.TOOLS.items():
            self.add_tool(f"p_{name}", self._progress_tool(tool), description=description, properties=properties)

    def _progress_tool(self, tool: Any) -> Any:
        """A progress_tools tool. On the request's SSE stream: the first message goes out
        from the handler (so the POST answers with a stream), the rest from a thread of the
        tool's own, and the answer ends the stream. ``via`` "listen": the notifications go
        to the session's GET stream and the handler answers with a JSON body."""
        owner = self.owner

        def wait(seconds: float) -> bool:
            return not owner._stopping.wait(seconds)

        def handler(request: Request, args: dict) -> dict | None:
            if args.get("via") == "listen":
                answered: list[dict] = []
                tool(request.params, args,
                     progress_tools.Wire(lambda m: owner._server_message(self, m), answered.append, wait), text_result)
                return answered[0] if answered else None
            stream = _local.stream
            first = threading.Event()

            def send(message: dict) -> None:
                stream.push(message)
                first.set()

            def answer(result: dict) -> None:
                stream.push(self.result_message(request, result))
                stream.finish()
                first.set()

            progress_tools.in_thread(lambda: tool(request.params, args, progress_tools.Wire(send, answer, wait), text_result),
                                     f"tool-{request.id}")
            first.wait(10.0)  # the stream has a message: the POST answers with SSE
            return None
        return handler

    @staticmethod
    def tool_region(request: Request, args: dict) -> dict:
        headers = getattr(_local, "headers", None)
        raw = headers.get("Mcp-Param-Region") if headers is not None else None
        decoded = decode_header_value(raw) if raw is not None else None
        return text_result(json.dumps({"region": args.get("region"), "header": raw, "decoded": decoded}))

    def tool_progress(self, request: Request, args: dict) -> dict:
        count = args["count"]
        meta = request.params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        if token is not None:
            for i in range(count):
                self.send({"jsonrpc": "2.0", "method": "notifications/progress",
                           "params": {"progressToken": token, "progress": i + 1, "total": count}})
        return text_result(f"sent {count if token is not None else 0} progress notifications")


# --------------------------------------------------------------------------- HTTP plumbing


class _Listener(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type, owner: "_HTTPServerBase") -> None:
        self.owner = owner
        super().__init__(address, handler)

    def process_request(self, request: socket.socket, client_address: Any) -> None:
        self.owner._spawn_connection(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    disable_nagle_algorithm = True  # headers and body go out together, not 40 ms apart
    protocol_version = "HTTP/1.1"
    server_version = "albedo-fault-http/1.0"
    server: _Listener

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        self.conn_id = getattr(_local, "conn_id", 0)
        self.owner = self.server.owner
        self.started = False  # status line sent for the current request

    # every method goes to the owner
    def do_POST(self) -> None:
        self._dispatch()

    do_GET = do_DELETE = do_PUT = do_PATCH = do_HEAD = do_OPTIONS = do_POST

    def _dispatch(self) -> None:
        self.started = False
        try:
            body = self._read_body()
        except (ValueError, OSError):
            self.close_connection = True
            try:
                self.send_plain(400, b"bad request framing")
            except (OSError, _ClientGone):
                pass
            return
        record = self.owner._record_request(self, body)
        try:
            self.owner._handle_http(self, record)
        except (_ClientGone, OSError):
            self.close_connection = True
        except Exception as exc:  # a bug here must not hang the client
            self.owner._record_event("server_error", error=repr(exc))
            self.close_connection = True
            if not self.started:
                try:
                    self.send_plain(500, repr(exc).encode())
                except (OSError, _ClientGone):
                    pass

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size_line = self.rfile.readline(1024)
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline(8)
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0:
            raise ValueError("negative Content-Length")
        body = self.rfile.read(length) if length else b""
        if len(body) != length:
            raise ValueError("short body")
        return body

    # ---- writing

    def _write(self, data: bytes) -> None:
        try:
            self.wfile.write(data)
        except OSError as exc:
            raise _ClientGone() from exc

    def start_response(self, status: int, headers: list[tuple[str, str]]) -> None:
        try:
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
        except OSError as exc:
            raise _ClientGone() from exc
        self.started = True

    def send_plain(self, status: int, body: bytes = b"", content_type: str | None = "text/plain",
                   headers: list[tuple[str, str]] | None = None) -> None:
        all_headers = list(headers or [])
        if body and content_type:
            all_headers.append(("Content-Type", content_type))
        all_headers.append(("Content-Length", str(len(body))))
        self.start_response(status, all_headers)
        if body and self.command != "HEAD":
            self._write(body)

    def send_json(self, status: int, message: Any, headers: list[tuple[str, str]] | None = None) -> None:
        body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        self.send_plain(status, body, "application/json", headers)

    def start_sse(self, headers: list[tuple[str, str]] | None = None, retry: str | None = None) -> None:
        self.start_response(200, [
            ("Content-Type", "text/event-stream"),
            ("Cache-Control", "no-cache"),
            ("X-Accel-Buffering", "no"),
            ("Transfer-Encoding", "chunked"),
            *(headers or []),
        ])
        if retry is not None:
            self.write_chunk(f"retry: {retry}\n\n".encode("utf-8"))

    def write_chunk(self, data: bytes) -> None:
        if data:
            self._write(b"%x\r\n%s\r\n" % (len(data), data))

    def end_chunks(self) -> None:
        self._write(b"0\r\n\r\n")

    def peer_closed(self) -> bool:
        """True once the client has closed (or reset) the connection."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True


class _HTTPServerBase:
    """A ThreadingHTTPServer on its own thread that records requests and events
    and whose stop() closes every connection and joins every thread."""

    handler_class: type = _Handler

    def __init__(self, host: str = "127.0.0.1", port: int = 0, path: str = "/mcp") -> None:
        self.host = host
        self.port = port
        self.path = path
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._requests: list[RecordedRequest] = []
        self._events: list[dict] = []
        self._stopping = threading.Event()
        self._listener: _Listener | None = None
        self._serve_thread: threading.Thread | None = None
        self._connections: dict[int, tuple[threading.Thread, socket.socket]] = {}
        self._conn_ids = itertools.count(1)
        self.on_record: Callable[[str, dict], None] | None = None  # ("request"|"event", dict)
        self.tls_context: Any = None  # an ssl.SSLContext set before start() serves HTTPS

    # ---- lifecycle

    def start(self) -> str:
        """Bind, serve on a background thread and return the endpoint URL."""
        if self._listener is not None:
            raise RuntimeError("already started")
        self._listener = _Listener((self.host, self.port), self.handler_class, self)
        self.port = self._listener.server_address[1]
        if self.tls_context is not None:
            self._listener.socket = self.tls_context.wrap_socket(self._listener.socket, server_side=True)
        self._serve_thread = threading.Thread(
            target=self._listener.serve_forever, kwargs={"poll_interval": POLL_S},
            name=f"{type(self).__name__}-{self.port}", daemon=True)
        self._serve_thread.start()
        return self.url

    def stop(self, timeout: float = JOIN_TIMEOUT_S) -> bool:
        """Stop serving, close all connections, join all threads (bounded).

        Returns True when every thread finished in time."""
        if self._listener is None or self._stopping.is_set():
            return True
        self._stopping.set()
        self._wake_all()
        deadline = time.monotonic() + timeout
        self._listener.shutdown()
        if self._serve_thread is not None:
            self._serve_thread.join(max(0.0, deadline - time.monotonic()))
        self._listener.server_close()
        with self._lock:
            connections = list(self._connections.values())
        for _, sock in connections:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread, _ in connections:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            alive = [t for t, _ in self._connections.values() if t.is_alive()]
        return not alive and not (self._serve_thread and self._serve_thread.is_alive())

    def __enter__(self) -> "_HTTPServerBase":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _wake_all(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def _spawn_connection(self, request: socket.socket, client_address: Any) -> None:
        conn_id = next(self._conn_ids)
        thread = threading.Thread(target=self._serve_connection, args=(conn_id, request, client_address),
                                  name=f"{type(self).__name__}-conn-{conn_id}", daemon=True)
        with self._lock:
            if self._stopping.is_set():
                request.close()
                return
            self._connections[conn_id] = (thread, request)
        thread.start()

    def _serve_connection(self, conn_id: int, request: socket.socket, client_address: Any) -> None:
        _local.conn_id = conn_id
        try:
            self.handler_class(request, client_address, self._listener)
        except Exception:  # the client went away in the middle of something
            pass
        finally:
            try:
                self._listener.shutdown_request(request)
            except Exception:
                pass
            with self._lock:
                self._connections.pop(conn_id, None)

    # ---- addresses

    @property
    def origin(self) -> str:
        scheme = "https" if self.tls_context is not None else "http"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return self.origin + self.path

    # ---- records

    def _record_request(self, handler: _Handler, body: bytes) -> RecordedRequest:
        record = RecordedRequest(
            method=handler.command,
            path=handler.path,
            headers=tuple((k, v) for k, v in handler.headers.items()),
            body=body,
            connection=handler.conn_id,
            time=time.monotonic(),
        )
        with self._changed:
            self._requests.append(record)
            self._changed.notify_all()
        if self.on_record is not None:
            self.on_record("request", record.to_json())
        return record

    def _record_event(self, event: str, **fields: Any) -> dict:
        entry = {"event": event, **fields, "time": time.monotonic()}
        with self._changed:
            self._events.append(entry)
            self._changed.notify_all()
        if self.on_record is not None:
            self.on_record("event", entry)
        return entry

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every HTTP request received so far (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def events(self) -> list[dict]:
        with self._lock:
            return [dict(e) for e in self._events]

    def clear_records(self) -> None:
        with self._lock:
            self._requests.clear()
            self._events.clear()

    def wait_for_request(self, predicate: Callable[[RecordedRequest], bool] = lambda r: True,
                         timeout: float = 5.0) -> RecordedRequest:
        """The first recorded request matching ``predicate`` (waits; TimeoutError)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for record in self._requests:
                    if predicate(record):
                        return record
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("no matching request recorded")
                self._changed.wait(remaining)

    def wait_for_event(self, event: str | Callable[[dict], bool], timeout: float = 5.0, **match: Any) -> dict:
        """The first event named ``event`` (or matching a predicate) whose fields
        equal ``match`` (waits; TimeoutError)."""
        def matches(entry: dict) -> bool:
            if callable(event):
                ok = event(entry)
            else:
                ok = entry["event"] == event
            return ok and all(entry.get(k) == v for k, v in match.items())

        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for entry in self._events:
                    if matches(entry):
                        return dict(entry)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"no event {event!r} {match!r} recorded")
                self._changed.wait(remaining)

    def _handle_http(self, handler: _Handler, record: RecordedRequest) -> None:
        raise NotImplementedError


# --------------------------------------------------------------------------- canary


class CanaryServer(_HTTPServerBase):
    """Records anything it receives and answers 200 ``canary``. ``start()``
    returns its base URL (no path); ``hits`` lists the requests."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host, port, path="")

    @property
    def hits(self) -> list[RecordedRequest]:
        return self.requests

    def _handle_http(self, handler: _Handler, record: RecordedRequest) -> None:
        handler.send_plain(200, b"canary\n")


# --------------------------------------------------------------------------- the server


class FaultHTTPServer(_HTTPServerBase):
    """Streamable-HTTP MCP server with fault switches (see the module docstring)."""

    # The JSON-RPC logic of every session (a subclass may serve its own tools: rug_server.py).
    engine_class: type[_Engine] = _Engine

    def __init__(self, host: str = "127.0.0.1", port: int = 0, path: str = "/mcp", **options: Any) -> None:
        super().__init__(host, port, path)
        unknown = set(options) - OPTION_NAMES
        if unknown:
            raise TypeError(f"unknown options: {', '.join(sorted(unknown))}")
        self.options = FaultOptions(**options)
        self.options.check()
        self._modern = self.engine_class(self, self.options.era if self.options.era != "legacy" else "dual")
        self._sessions: dict[str, _Session] = {}
        self._listens: dict[_Stream, Any] = {}  # open modern listen streams -> request id
        self._cuts = 0
        self._discover_errors = 0
        self._modern_requests = 0
        self._listen_sent = 0

    # ---- public controls

    def configure(self, **options: Any) -> None:
        """Change options while running (takes effect from the next request)."""
        unknown = set(options) - OPTION_NAMES
        if unknown:
            raise TypeError(f"unknown options: {', '.join(sorted(unknown))}")
        new = replace(self.options, **options)
        new.check()
        with self._lock:
            if new.era != self.options.era:
                self._modern = self.engine_class(self, new.era if new.era != "legacy" else "dual")
            if "cut_stream" in options or "cut_times" in options:
                self._cuts = 0
            if "discover_error" in options or "discover_error_times" in options:
                self._discover_errors = 0
            self.options = new

    @property
    def sessions(self) -> list[str]:
        """Ids of the live legacy sessions."""
        with self._lock:
            return list(self._sessions)

    def expire_session(self, session_id: str) -> None:
        """End a legacy session as if it had timed out (later requests: 404)."""
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is not None:
            self._end_session(session, "session_expired")

    def announce_tools_changed(self) -> None:
        """Send ``notifications/tools/list_changed`` to every legacy session (GET
        stream, or queued) and every modern listen stream that asked for it."""
        with self._lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            self._push_to_get(session, {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        self._announce_modern()

    def end_listens(self) -> None:
        """End every open modern listen stream gracefully (with its response)."""
        with self._lock:
            listens = list(self._listens.items())
        for stream, request_id in listens:
            stream.push({"jsonrpc": "2.0", "id": request_id,
                         "result": {"resultType": "complete", "_meta": {META_SUBSCRIPTION: request_id}}})
            stream.finish()
            self._record_event("listen_ended", request_id=request_id, graceful=True)

    def _wake_all(self) -> None:
        super()._wake_all()
        with self._lock:
            streams = [s for session in self._sessions.values() for s in session.streams] + list(self._listens)
        for stream in streams:
            with stream.cond:
                stream.cond.notify_all()

    # ---- message routing

    def _server_message(self, engine: _Engine, message: dict) -> None:
        """A message an engine sent outside any request's stream."""
        if engine.session is not None:
            self._push_to_get(engine.session, message)

    def _push_to_get(self, session: _Session, message: dict) -> None:
        with self._lock:
            stream = session.listen if not session.ended else None
            if stream is None and not session.ended:
                session.pending.append(message)
        if stream is not None:
            stream.push(message)
        if message.get("method") == "notifications/tools/list_changed":
            self._record_event("list_changed", target="get" if stream else "pending", session=session.id)

    def _announce_modern(self) -> None:
        with self._lock:
            listens = list(self._listens.items())
        honoured = self._modern.listeners
        for stream, request_id in listens:
            if honoured.get(request_id, {}).get("toolsListChanged"):
                stream.push({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
                             "params": {"_meta": {META_SUBSCRIPTION: request_id}}})
                self._record_event("list_changed", target="listen", request_id=request_id)

    # ---- HTTP entry

    def _handle_http(self, h: _Handler, record: RecordedRequest) -> None:
        opts = self.options
        if opts.no_headers:
            self._record_event("no_headers", method=h.command)
            self._stopping.wait()
            h.close_connection = True
            return
        path = urllib.parse.urlsplit(h.path).path
        if path != self.path:
            h.send_plain(404, b"not found")
            return
        origin = h.headers.get("Origin")
        if origin is not None:
            host = urllib.parse.urlsplit(origin).hostname or ""
            if host not in ("127.0.0.1", "localhost", "::1"):
                h.send_plain(403, b"forbidden origin")
                return
        if opts.redirect_to:
            h.send_plain(opts.redirect_status, headers=[("Location", opts.redirect_to)])
            self._record_event("redirected", method=h.command, location=opts.redirect_to,
                               status=opts.redirect_status)
            return
        if h.command == "POST":
            self._post(h, record, opts)
        elif h.command == "GET":
            self._get(h, opts)
        elif h.command == "DELETE":
            self._delete(h, opts)
        else:
            h.send_plain(405, b"method not allowed", headers=[("Allow", self._allow(opts))])

    @staticmethod
    def _allow(opts: FaultOptions) -> str:
        if opts.era == "modern":
            return "POST"
        return "POST, DELETE" if opts.no_get else "GET, POST, DELETE"

    def _error(self, id: Any, code: int, message: str, data: Any = None) -> dict:
        return self._modern.error_message(id, code, message, data)

    # ---- POST

    def _post(self, h: _Handler, record: RecordedRequest, opts: FaultOptions) -> None:
        if not accept_ok(h.headers.get("Accept", ""), need_json=True, need_sse=True):
            h.send_json(406, self._error(None, INVALID_REQUEST,
                                         "Not Acceptable: Accept must list application/json and text/event-stream"))
            return
        content_type = h.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if content_type != "application/json":
            h.send_json(415, self._error(None, INVALID_REQUEST, "Unsupported Media Type: use application/json"))
            return
        try:
            message = json.loads(record.body)
        except (ValueError, RecursionError):
            h.send_json(400, self._error(None, PARSE_ERROR, "Parse error"))
            return
        if not isinstance(message, dict):
            h.send_json(400, self._error(None, INVALID_REQUEST, "Invalid Request: one JSON object per POST"))
            return
        if message.get("method") == "server/discover" and "id" in message and self._discover_error_due(opts):
            error = dict(opts.discover_error or {})
            h.send_json(400, {"jsonrpc": "2.0", "id": message["id"],
                              "error": {"message": "discover refused", **error}})
            return
        if self._is_modern(h, message, opts):
            self._post_modern(h, message, opts)
        else:
            self._post_legacy(h, message, opts)

    def _discover_error_due(self, opts: FaultOptions) -> bool:
        if opts.discover_error is None:
            return False
        with self._lock:
            if opts.discover_error_times is not None and self._discover_errors >= opts.discover_error_times:
                return False
            self._discover_errors += 1
            return True

    @staticmethod
    def _is_modern(h: _Handler, message: dict, opts: FaultOptions) -> bool:
        if opts.era != "dual":
            return opts.era == "modern"
        version = h.headers.get("MCP-Protocol-Version")
        if version is not None:
            return version not in LEGACY_VERSIONS
        method = message.get("method")
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        return method == "server/discover" or (
            method != "initialize" and isinstance(meta, dict) and META_VERSION in meta)

    # ---- modern POST

    def _modern_header_problem(self, h: _Handler, message: dict, engine: _Engine) -> dict | None:
        id = message.get("id")
        method = message["method"]
        is_request = "id" in message
        for name in ("MCP-Protocol-Version", "Mcp-Method", "Mcp-Name"):
            if len(h.headers.get_all(name) or []) > 1:
                return self._error(id, HEADER_MISMATCH, f"{name} header appears more than once")
        version = h.headers.get("MCP-Protocol-Version")
        if version is None:
            return self._error(id, HEADER_MISMATCH, "Missing MCP-Protocol-Version header")
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        meta = params.get("_meta")
        meta_version = meta.get(META_VERSION) if isinstance(meta, dict) else None
        if meta_version is not None and meta_version != version:
            return self._error(id, HEADER_MISMATCH,
                               f"MCP-Protocol-Version header {version!r} does not match _meta protocolVersion "
                               f"{meta_version!r}")
        if version not in engine.modern_versions:
            return engine.unsupported_version(id, version)
        header_method = h.headers.get("Mcp-Method")
        if (is_request or header_method is not None) and header_method != method:
            what = "Missing Mcp-Method header" if header_method is None else (
                f"Mcp-Method header {header_method!r} does not match method {method!r}")
            return self._error(id, HEADER_MISMATCH, what)
        if not is_request:
            return None
        field_name = NAME_FIELDS.get(method)
        if field_name is not None:
            expected = params.get(field_name)
            raw = h.headers.get("Mcp-Name")
            if raw is None and expected is not None:
                return self._error(id, HEADER_MISMATCH, "Missing Mcp-Name header")
            if raw is not None:
                decoded = decode_header_value(raw)
                if decoded is None:
                    return self._error(id, HEADER_MISMATCH, f"Malformed Mcp-Name header {raw!r}")
                if decoded != expected:
                    return self._error(id, HEADER_MISMATCH,
                                       f"Mcp-Name header {decoded!r} does not match params.{field_name} {expected!r}")
        if method == "tools/call":
            return self._param_header_problem(h, id, params, engine)
        return None

    def _param_header_problem(self, h: _Handler, id: Any, params: dict, engine: _Engine) -> dict | None:
        name = params.get("name")
        tool = engine.tools.get(name) if isinstance(name, str) else None
        if tool is None:
            return None
        annotations = header_annotations(tool.definition["inputSchema"])
        if not annotations:
            return None
        arguments = params.get("arguments")
        arguments = arguments if isinstance(arguments, dict) else {}
        for token, (prop, kind) in annotations.items():
            header = f"Mcp-Param-{token}"
            values = h.headers.get_all(header) or []
            value = arguments.get(prop)
            if len(values) > 1:
                return self._error(id, HEADER_MISMATCH, f"{header} header appears more than once")
            raw = values[0] if values else None
            if value is None:
                if raw is not None:
                    return self._error(id, HEADER_MISMATCH, f"{header} header present but argument {prop!r} absent")
                continue
            if raw is None:
                return self._error(id, HEADER_MISMATCH, f"Missing {header} header for argument {prop!r}")
            decoded = decode_header_value(raw)
            if decoded is None or not header_matches(decoded, value, kind):
                return self._error(id, HEADER_MISMATCH,
                                   f"{header} header {raw!r} does not match argument {prop!r} {value!r}")
        return None

    def _post_modern(self, h: _Handler, message: dict, opts: FaultOptions) -> None:
        engine = self._modern
        method = message.get("method")
        if not isinstance(method, str):
            h.send_json(400, self._error(message.get("id"), INVALID_REQUEST,
                                         "Invalid Request: modern clients send requests and notifications only"))
            return
        if method != "initialize":  # initialize gets the engine's -32022 with the supported versions
            problem = self._modern_header_problem(h, message, engine)
            if problem is not None:
                h.send_json(MODERN_ERROR_STATUS.get(problem["error"]["code"], 400), problem)
                return
        if "id" not in message:
            with engine.lock:
                engine.handle(message)
            h.send_plain(202)
            return
        self._serve_request(h, engine, message, opts, era="modern")
        if method != "subscriptions/listen":
            with self._lock:
                self._modern_requests += 1
                due = opts.list_changed_every and self._modern_requests % opts.list_changed_every == 0
            if due:
                self._announce_modern()

    # ---- legacy POST

    def _legacy_version_problem(self, h: _Handler, session: _Session) -> str | None:
        version = h.headers.get("MCP-Protocol-Version")
        if session.version in VERSION_HEADER_REQUIRED:
            if version is None:
                return "Bad Request: MCP-Protocol-Version header required"
            if version != session.version:
                return f"Bad Request: unsupported MCP-Protocol-Version {version!r} (session uses {session.version})"
        elif version is not None and version not in LEGACY_VERSIONS:
            return f"Bad Request: unsupported MCP-Protocol-Version {version!r}"
        return None

    def _find_session(self, h: _Handler, *, count_post: bool) -> _Session | None:
        """The request's session, or None after answering 400/404."""
        session_id = h.headers.get("Mcp-Session-Id")
        if session_id is None:
            h.send_json(400, self._error(None, INVALID_REQUEST, "Bad Request: Mcp-Session-Id header required"))
            return None
        expired = None
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None and count_post:
                session.posts += 1
                limit = self.options.session_404_after
                if limit is not None and session.posts > limit:
                    expired = self._sessions.pop(session_id)
                    session = None
        if expired is not None:
            self._end_session(expired, "session_expired")
        if session is None:
            h.send_json(404, self._error(None, INVALID_REQUEST, "Session not found"))
            return None
        problem = self._legacy_version_problem(h, session)
        if problem is not None:
            h.send_json(400, self._error(None, INVALID_REQUEST, problem))
            return None
        return session

    def _end_session(self, session: _Session, event: str) -> None:
        with self._lock:
            session.ended = True
            streams = list(session.streams)
            session.listen = None
        for stream in streams:
            stream.finish()
        self._record_event(event, session=session.id)

    def _post_legacy(self, h: _Handler, message: dict, opts: FaultOptions) -> None:
        method = message.get("method")
        if method == "initialize" and "id" in message:
            self._initialize(h, message, opts)
            return
        session = self._find_session(h, count_post=True)
        if session is None:
            return
        if method is None or "id" not in message:
            # a notification, or the client's answer to a server request
            with session.engine.lock:
                session.engine.handle(message)
            h.send_plain(202)
            return
        with self._lock:
            session.requests += 1
            due = opts.list_changed_every and session.requests % opts.list_changed_every == 0
        self._serve_request(h, session.engine, message, opts, era="legacy", session=session)
        if due:
            self._push_to_get(session, {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})

    def _initialize(self, h: _Handler, message: dict, opts: FaultOptions) -> None:
        engine = self.engine_class(self, "legacy")
        with engine.lock:
            response = engine.handle(message)
        if response is None or "result" not in response:
            h.send_json(200 if response else 400, response or self._error(message.get("id"), INVALID_REQUEST, "?"))
            return
        if opts.initialize_version is not None:
            response["result"]["protocolVersion"] = opts.initialize_version
        session = _Session(opts.session_id_value or uuid.uuid4().hex, engine, response["result"]["protocolVersion"])
        engine.session = session
        with self._lock:
            self._sessions[session.id] = session
        self._record_event("session_created", session=session.id, version=session.version)
        self._serve_request(h, engine, message, opts, era="legacy", session=session, response=response,
                            headers=[("Mcp-Session-Id", session.id)])

    # ---- answering a request (both eras)

    def _serve_request(self, h: _Handler, engine: _Engine, message: dict, opts: FaultOptions, *, era: str,
                       session: _Session | None = None, response: dict | None = None,
                       headers: list[tuple[str, str]] | None = None) -> None:
        """Answer one POSTed request: JSON, SSE or held open, with the faults.
        ``response``: already computed (initialize); ``headers``: extra ones."""
        request_id = message["id"]
        method = message["method"]
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        faulted = method in opts.fault_methods
        if faulted and opts.oversized:
            self._send_oversized(h, request_id, method, opts.oversized, era, headers)
            return
        cut = None
        if faulted and opts.cut_stream is not None:
            with self._lock:
                if opts.cut_times is None or self._cuts < opts.cut_times:
                    self._cuts += 1
                    cut = opts.cut_stream
        listen = era == "modern" and method == "subscriptions/listen"
        sse = opts.sse or listen or cut is not None or (era == "legacy" and opts.event_ids)
        event_ids = era == "legacy" and opts.event_ids
        stream = session.new_stream(event_ids, "post") if session else _Stream(0, None, False, "post")
        started = False
        sent = 0  # events already written (the priming one)

        def start() -> None:
            nonlocal started, sent
            if not started:
                started = True
                h.start_sse(headers, opts.retry)
                if event_ids:
                    stream.push(None)
                    h.write_chunk(stream.events[0][1])
                    sent = 1

        tool = params.get("name") if method == "tools/call" else None
        delay = opts.slow.get(tool) if isinstance(tool, str) else None
        client_left = False
        if delay is not None and response is None:
            if sse:
                start()
            until = time.monotonic() + delay
            waited = self._wait_or_gone(h, delay)
            if waited == "stopped":
                return
            if waited == "gone":
                self._client_closed(h, request_id, method, era)
                if era == "modern" or not event_ids:
                    return  # modern: the disconnect cancels it; legacy without ids: nobody can resume
                # legacy: a disconnect is no cancellation; the answer goes into the
                # stream for a Last-Event-ID resumption
                client_left = True
                if self._stopping.wait(max(0.0, until - time.monotonic())):
                    return

        if response is None:
            _local.stream, _local.headers = stream, h.headers
            try:
                with engine.lock:
                    response = engine.handle(message)
            finally:
                _local.stream = _local.headers = None

        if listen and response is None:
            with self._lock:
                self._listens[stream] = request_id
            self._record_event("listen_opened", request_id=request_id,
                               notifications=engine.listeners.get(request_id))
            if opts.listen_ends_at_once:
                stream.finish()
            elif opts.listen_sends:
                stream.push_raw(self._next_listen_block(opts.listen_sends, "modern"))
                stream.finish()
        if response is not None and stream.messages == 0 and not started:
            is_error = "error" in response
            if era == "modern" and is_error:
                h.send_json(MODERN_ERROR_STATUS.get(response["error"]["code"], 200), response, headers)
                return
            if not sse:
                h.send_json(200, response, headers)
                return
        if response is None and not sse and stream.messages == 0:
            # JSON mode, never answered (hang): hold the request until the client leaves
            if self._wait_or_gone(h, None) == "gone":
                self._client_closed(h, request_id, method, era)
            return
        if client_left:
            if response is not None:
                stream.push(response)
                stream.finish()
            return
        start()
        if response is not None:
            stream.push(response)
            stream.finish()
        outcome = self._pump(h, stream, sent, cut, request_id=request_id, method=method, era=era)
        if listen:
            with self._lock:
                self._listens.pop(stream, None)
            engine.listeners.pop(request_id, None)
            if opts.listen_ends_at_once and outcome == "finished":
                self._record_event("listen_ended", request_id=request_id, graceful=False)

    def _next_listen_block(self, kind: str, era: str) -> bytes:
        with self._lock:
            self._listen_sent += 1
            count = self._listen_sent
        self._record_event("listen_sent", kind=kind, count=count, era=era)
        return listen_block(kind, count)

    def _client_closed(self, h: _Handler, request_id: Any, method: str, era: str) -> None:
        h.close_connection = True
        self._record_event("client_closed", request_id=request_id, method=method, era=era)

    def _wait_or_gone(self, h: _Handler, seconds: float | None) -> str:
        """Wait ``seconds`` (None: for ever). Returns "done", "gone" (the client
        left first) or "stopped" (stop() came first)."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while not self._stopping.is_set():
            if h.peer_closed():
                return "gone"
            remaining = POLL_S if deadline is None else min(POLL_S, deadline - time.monotonic())
            if remaining <= 0:
                return "done"
            self._stopping.wait(remaining)
        h.close_connection = True
        return "stopped"

    def _pump(self, h: _Handler, source: _Stream, start: int, cut: int | None, **who: Any) -> str:
        """Write the stream's events from index ``start`` until it finishes
        ("finished"), the client leaves ("client_closed"), another connection
        takes it over ("detached"), the cut fault fires ("cut") or stop()."""
        token = object()
        with source.cond:
            source.writer = token
            source.cond.notify_all()
        index = start
        while True:
            with source.cond:
                if source.writer is token and index >= len(source.events) and not source.finished \
                        and not self._stopping.is_set():
                    source.cond.wait(POLL_S)
                if source.writer is not token:
                    h.close_connection = True
                    return "detached"
                batch = source.events[index:]
                finished = source.finished
            try:
                for _, block, carries_message in batch:
                    if cut is not None and carries_message:
                        part = block[:max(0, min(cut, len(block) - 1))]
                        h.write_chunk(part)
                        h.close_connection = True
                        self._record_event("stream_cut", bytes=len(part), **{k: v for k, v in who.items()
                                                                              if k in ("request_id", "method")})
                        with source.cond:
                            if source.writer is token:
                                source.writer = None
                        return "cut"
                    h.write_chunk(block)
                    index += 1
                if finished:
                    h.end_chunks()
                    return "finished"
            except _ClientGone:
                self._stream_client_closed(h, who)
                return "client_closed"
            if self._stopping.is_set():
                h.close_connection = True
                return "stopped"
            if not batch and h.peer_closed():
                self._stream_client_closed(h, who)
                return "client_closed"

    def _stream_client_closed(self, h: _Handler, who: dict) -> None:
        h.close_connection = True
        self._record_event("client_closed", **who)

    # ---- oversized

    def _send_oversized(self, h: _Handler, request_id: Any, method: str, mode: str, era: str,
                        headers: list[tuple[str, str]] | None) -> None:
        result: dict[str, Any] = {"content": [{"type": "text", "text": ""}]}
        if era == "modern":
            result["resultType"] = "complete"
        shell = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}, separators=(",", ":"))
        head, tail = shell.split('"text":""', 1)
        head, tail = (head + '"text":"').encode(), ('"' + tail).encode()
        padding = OVERSIZED_BYTES - len(head) - len(tail)
        sent = 0
        complete = False
        try:
            if mode == "content-length":
                h.start_response(200, [*(headers or []), ("Content-Type", "application/json"),
                                       ("Content-Length", str(OVERSIZED_BYTES))])
                write = h._write
            else:
                h.start_response(200, [*(headers or []), ("Content-Type", "application/json"),
                                       ("Transfer-Encoding", "chunked")])
                write = h.write_chunk
            write(head)
            sent += len(head)
            block = b"x" * (64 * 1024)
            remaining = padding
            while remaining > 0:
                if self._stopping.is_set():
                    raise _ClientGone()
                piece = block if remaining >= len(block) else block[:remaining]
                write(piece)
                sent += len(piece)
                remaining -= len(piece)
            write(tail)
            sent += len(tail)
            if mode == "chunked":
                h.end_chunks()
            complete = True
        except _ClientGone:
            h.close_connection = True
        self._record_event("oversized", request_id=request_id, method=method, mode=mode,
                           bytes_sent=sent, complete=complete)

    # ---- GET and DELETE (legacy)

    def _get(self, h: _Handler, opts: FaultOptions) -> None:
        if opts.era == "modern" or opts.no_get:
            h.send_plain(405, b"method not allowed", headers=[("Allow", self._allow(opts))])
            return
        if not accept_ok(h.headers.get("Accept", ""), need_json=False, need_sse=True):
            h.send_json(406, self._error(None, INVALID_REQUEST, "Not Acceptable: Accept must list text/event-stream"))
            return
        session = self._find_session(h, count_post=False)
        if session is None:
            return
        last_event_id = h.headers.get("Last-Event-ID")
        if last_event_id is not None:
            # http.server decodes header bytes as Latin-1; the client sent UTF-8.
            last_event_id = last_event_id.encode("latin-1").decode("utf-8", "replace")
            with self._lock:
                found = session.event_index.get(last_event_id)
            if found is None:
                h.send_json(400, self._error(None, INVALID_REQUEST, f"Unknown Last-Event-ID {last_event_id!r}"))
                return
            stream, index = found
            self._record_event("resumed", session=session.id, last_event_id=last_event_id,
                               replayed=len(stream.events) - index - 1)
            h.start_sse(None, opts.retry)
            who = {"stream": stream.label, "session": session.id}
            self._pump(h, stream, index + 1, None, **who)
            return
        if opts.listen_ends_at_once:
            # Recorded before the end goes out: a client that gives up at once must
            # not find the last closing missing from the record.
            self._record_event("get_closed_at_once", session=session.id)
            h.start_sse(None, opts.retry)
            h.end_chunks()
            return
        if opts.listen_sends:
            h.start_sse(None, opts.retry)
            h.write_chunk(self._next_listen_block(opts.listen_sends, "legacy"))
            h.end_chunks()
            return
        stream = session.new_stream(opts.event_ids, "get")
        if opts.event_ids:
            stream.push(None)
        with self._lock:
            pending, session.pending = session.pending, []
            session.listen = stream
        for message in pending:
            stream.push(message)
        self._record_event("get_opened", session=session.id, stream=stream.number)
        h.start_sse(None, opts.retry)
        try:
            self._pump(h, stream, 0, None, stream="get", session=session.id)
        finally:
            if not opts.event_ids:
                with self._lock:
                    if session.listen is stream:
                        session.listen = None

    def _delete(self, h: _Handler, opts: FaultOptions) -> None:
        if opts.era == "modern":
            h.send_plain(405, b"method not allowed", headers=[("Allow", self._allow(opts))])
            return
        session = self._find_session(h, count_post=False)
        if session is None:
            return
        with self._lock:
            self._sessions.pop(session.id, None)
        self._end_session(session, "session_deleted")
        h.send_plain(200)


# --------------------------------------------------------------------------- script


def _slow_flag(value: str) -> tuple[str, float]:
    name, sep, seconds = value.rpartition("=")
    try:
        if not sep or not name:
            raise ValueError
        return name, float(seconds)
    except ValueError:
        raise argparse.ArgumentTypeError("expected TOOL=SECONDS") from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--path", default="/mcp")
    parser.add_argument("--era", choices=("dual", "legacy", "modern"), default="dual")
    parser.add_argument("--sse", action="store_true")
    parser.add_argument("--event-ids", action="store_true")
    parser.add_argument("--no-get", action="store_true")
    parser.add_argument("--redirect-to", metavar="URL|canary")
    parser.add_argument("--redirect-status", type=int, default=307, choices=(301, 302, 303, 307, 308))
    parser.add_argument("--oversized", choices=("content-length", "chunked"))
    parser.add_argument("--cut-stream", type=int, metavar="N")
    parser.add_argument("--cut-times", type=int, metavar="K")
    parser.add_argument("--fault-methods", default="tools/call", metavar="M,M")
    parser.add_argument("--session-404-after", type=int, metavar="N")
    parser.add_argument("--listen-ends-at-once", action="store_true")
    parser.add_argument("--retry", metavar="VALUE")
    parser.add_argument("--no-headers", action="store_true")
    parser.add_argument("--slow", type=_slow_flag, action="append", default=[], metavar="TOOL=SECONDS")
    parser.add_argument("--list-changed-every", type=int, metavar="N")
    parser.add_argument("--listen-sends", choices=LISTEN_SENDS)
    parser.add_argument("--event-id-prefix", default="", metavar="TEXT")
    parser.add_argument("--session-id-value", metavar="VALUE")
    parser.add_argument("--initialize-version", metavar="V")
    parser.add_argument("--discover-error", type=json.loads, metavar="JSON")
    parser.add_argument("--discover-error-times", type=int, metavar="K")
    parser.add_argument("--record", metavar="FILE")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    options = {name: getattr(args, name) for name in OPTION_NAMES}
    options["slow"] = dict(args.slow)
    canary = None
    if args.redirect_to == "canary":
        canary = CanaryServer(args.host)
        options["redirect_to"] = canary.start()
    try:
        server = FaultHTTPServer(args.host, args.port, args.path, **options)
    except (TypeError, ValueError) as exc:
        if canary:
            canary.stop()
        sys.exit(f"fault_http_server: {exc}")
    record_lock = threading.Lock()
    record_file = open(args.record, "a", encoding="utf-8") if args.record else None

    def record(kind: str, entry: dict, source: str = "server") -> None:
        if record_file is None:
            return
        line = json.dumps({"type": kind, "source": source, **entry}, default=repr)
        with record_lock:
            record_file.write(line + "\n")
            record_file.flush()

    server.on_record = record
    if canary is not None:
        canary.on_record = lambda kind, entry: record(kind, entry, "canary")
    done = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: done.set())
    print(server.start(), flush=True)
    if canary is not None:
        print(f"canary {canary.url}", flush=True)
    try:
        while not done.wait(0.1):
            pass
    finally:
        server.stop()
        if canary is not None:
            canary.stop()
        if record_file is not None:
            record_file.close()


if __name__ == "__main__":
    main()
