"""OpenTelemetry: the MCP client spans and metrics, and the trace context every request carries.

Only with the ``otel`` extra (``opentelemetry-api``); the SDK and its exporters are the
host's choice (docs/observability.rst). The API is imported at the first request, and
only if it is installed: without it nothing of OpenTelemetry is imported and every
function here is a few attribute reads. With the API but no SDK (no tracer or meter
provider set), no span is made and nothing is timed; only a context the host holds is
injected. :func:`configure` holds the host's switches. Nothing here ever fails a
request: a failing SDK or propagator costs the request its span.

What is recorded follows the OpenTelemetry semantic conventions for MCP
(gen-ai/mcp.md):

- one span of kind CLIENT per request sent, named ``{mcp.method.name} {target}``
  (``tools/call echo``, ``prompts/get greet``, ``resources/read``), a child of the
  context current where the request is sent (the host's, on its own thread; see
  :func:`capture` for the helper threads), with the conventions' attributes;
- ``error.type``: the JSON-RPC error code, ``tool_error`` for an ``isError`` result,
  else the error's class name; the span's status is then ERROR;
- the request's ``params._meta`` gets the configured propagators' fields
  (``traceparent``, ``tracestate``, ``baggage``: 2026-07-28 reserves these unprefixed
  ``_meta`` keys for W3C trace context and baggage)
  and an HTTP request the ``traceparent``/``tracestate`` headers. Nothing a server
  sends is ever read as a carrier (nothing is extracted here);
- ``mcp.client.operation.duration`` (seconds, the conventions' buckets) per request,
  ``mcp.client.session.duration`` per session-era connection, and counters of
  reconnects, token refreshes, servers left out and held tools.

Arguments and results are recorded only when the host opts in (:func:`configure`),
as one-line printable text (wire/text.py), with the server's secret values (its env's
and headers' values) replaced by ``***``, cut to CONTENT_LIMIT characters. Sign-in,
token refresh and discovery spans carry the server and the method only: never a token,
secret or assertion.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import threading
import time
from typing import Any, Callable, Iterator, Mapping

from .text import json_text, printable

# The conventions' bucket boundaries for the MCP duration histograms (seconds).
DURATION_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
CONTENT_LIMIT = 4096  # characters of an argument or result recorded, when opted in
INSTRUMENTATION = "albedo_actors"
PROPAGATED = ("traceparent", "tracestate", "baggage")  # what may go into _meta
HEADERS = ("traceparent", "tracestate")  # what also goes into an HTTP request's headers

# Counters (what operators ask for), by name: the description of each.
COUNTERS = {
    "mcp.client.reconnects": "Connections opened again after one was lost",
    "mcp.client.token_refreshes": "OAuth access token refreshes, by outcome",
    "mcp.client.servers_left_out": "Servers left out of a session's catalogue",
    "mcp.client.tools_held": "Tools held back for review (tool integrity)",
}


class _Settings:
    enabled = True  # False: nothing is recorded or propagated, as without the package
    record_content = False  # arguments and results as span attributes
    merge_tool_span = False  # tools/call: our attributes go on the host's current span


SETTINGS = _Settings()
_log = logging.getLogger(__name__)
_lock = threading.Lock()
_api: _Api | None = None
_missing = False  # the API is not installed: never tried again


def configure(*, enabled: bool | None = None, record_content: bool | None = None,
              merge_tool_span: bool | None = None) -> None:
    """The host's choices (each left as it is when None).

    ``enabled`` False: nothing is recorded or propagated even with the API installed.
    ``record_content``: tool arguments and results (and prompt arguments) go on the
    spans, as printable one-line text. ``merge_tool_span``: when the host's current span
    (where a ``tools/call`` is made) is recording, our attributes are set on it instead
    of starting a second span, as the conventions ask of a host that traces the tool's
    execution itself; trace context is then the host span's.
    """
    if enabled is not None:
        SETTINGS.enabled = enabled
    if record_content is not None:
        SETTINGS.record_content = record_content
    if merge_tool_span is not None:
        SETTINGS.merge_tool_span = merge_tool_span


class _Api:
    """The loaded API, and the instruments made from it."""

    def __init__(self) -> None:
        from opentelemetry import context, metrics, propagate, trace

        self.context = context
        # Where the API keeps its global meter provider (read by unconfigured() only).
        self._metrics = sys.modules.get("opentelemetry.metrics._internal")
        self.trace = trace
        self.propagate = propagate
        self.kind = trace.SpanKind.CLIENT
        self.error = trace.StatusCode.ERROR
        self.tracer = trace.get_tracer(INSTRUMENTATION)
        meter = metrics.get_meter(INSTRUMENTATION)
        self.operation = meter.create_histogram(
            "mcp.client.operation.duration", unit="s",
            description="The duration of the MCP request or notification as observed on the sender from the time it "
                        "was sent until the response or ack is received",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS))
        self.session = meter.create_histogram(
            "mcp.client.session.duration", unit="s", description="The duration of the MCP session as observed on the "
                                                                  "MCP client", explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS))
        self.counters = {name: meter.create_counter(name, description=text) for name, text in COUNTERS.items()}

    def unconfigured(self) -> bool:
        """True while the host has set neither a tracer nor a meter provider (no SDK):
        every span and instrument is then the API's no-op one, and is skipped. Read from
        the API's globals (one read each; a missing one counts as set, so an API that
        renames them loses only the shortcut)."""
        return getattr(self.trace, "_TRACER_PROVIDER", 0) is None and getattr(self._metrics, "_METER_PROVIDER", 0) is None


def api() -> _Api | None:
    """The loaded API, or None when it is not installed or the host disabled it."""
    global _api, _missing
    if not SETTINGS.enabled or _missing:
        return None
    if _api is None:
        with _lock:
            if _api is None and not _missing:
                try:
                    _api = _Api()
                except ImportError:
                    _missing = True
                except Exception as exc:  # noqa: BLE001 - an API that fails to load: as if absent
                    _log.warning("OpenTelemetry could not be loaded (%s: %s); nothing is traced", type(exc).__name__, exc)
                    _missing = True
    return _api


def capture() -> object | None:
    """The caller's current context, to carry to another thread (:func:`attached`)."""
    loaded = api()
    return None if loaded is None else loaded.context.get_current()


@contextlib.contextmanager
def attached(captured: object | None) -> Iterator[None]:
    """Make ``captured`` (from :func:`capture`) the current context for the block."""
    loaded = api()
    if loaded is None or captured is None:
        yield
        return
    token = loaded.context.attach(captured)
    try:
        yield
    finally:
        loaded.context.detach(token)


def _target(method: str, params: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """The span name and the method's own attributes."""
    attributes: dict[str, Any] = {"mcp.method.name": method}
    name = params.get("name") if params is not None else None
    if method == "tools/call" and isinstance(name, str):
        attributes["gen_ai.tool.name"] = name
        attributes["gen_ai.operation.name"] = "execute_tool"
        return f"{method} {name}", attributes
    if method == "prompts/get" and isinstance(name, str):
        attributes["gen_ai.prompt.name"] = name
        return f"{method} {name}", attributes
    uri = params.get("uri") if params is not None else None
    if isinstance(uri, str) and method.startswith("resources/"):
        # Conditionally required by the conventions; never in the span's name (cardinality).
        attributes["mcp.resource.uri"] = uri
    return method, attributes


REDACTED = "***"
MIN_SECRET = 4  # shorter values are not redacted (they would blank ordinary text)


def _content(value: Any, secrets: tuple[str, ...] = ()) -> str:
    """An argument or result as one line of printable text, with the server's secret
    values replaced (longest first), then cut to CONTENT_LIMIT."""
    text = json_text(value, indent=None)
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= MIN_SECRET:
            text = text.replace(secret, REDACTED)
    return printable(text, one_line=True, limit=CONTENT_LIMIT)


def header_secrets(headers: Mapping[str, str]) -> tuple[str, ...]:
    """The secret values of an HTTP server's headers: each value, and a credential
    after its scheme (``Bearer TOKEN``: the token too)."""
    found: list[str] = []
    for value in headers.values():
        if not isinstance(value, str) or not value:
            continue
        found.append(value)
        scheme, _, credential = value.partition(" ")
        if credential.strip() and scheme.isalpha():
            found.append(credential.strip())
    return tuple(found)


class RequestSpan:
    """One request's span and its duration; :meth:`end` once, from any thread."""

    __slots__ = ("_api", "_span", "_own", "_attributes", "_start", "_ended", "_record", "_held", "_secrets")

    def __init__(self, loaded: _Api, span: Any, own: bool, attributes: dict[str, Any], secrets: tuple[str, ...] = ()) -> None:
        self._secrets = secrets
        self._api = loaded
        self._span = span
        self._own = own  # False: the host's span, which the host ends
        self._attributes = attributes  # the metric's attributes
        self._start = time.monotonic()
        self._ended = False
        self._record = SETTINGS.record_content and span.is_recording()
        # A held-open subscriptions/listen lasts as long as its connection: its end is no
        # error unless the server refused it, and it is no operation to time.
        self._held = attributes.get("mcp.method.name") == "subscriptions/listen"

    def end(self, result: Mapping[str, Any] | None = None, error: BaseException | None = None) -> None:
        """End with ``result`` or ``error`` (neither: the request was abandoned). Never
        raises: it runs on the reader thread before the caller is woken."""
        if self._ended:
            return
        self._ended = True
        try:
            self._end(result, error)
        except Exception as exc:  # noqa: BLE001 - a failing SDK or exporter never fails a call
            _log.debug("the span of a request could not be ended: %s", type(exc).__name__)

    def _end(self, result: Mapping[str, Any] | None, error: BaseException | None) -> None:
        span = self._span
        error_type: str | None = None
        if error is not None and self._held and not isinstance(getattr(error, "code", None), int):
            error = None
        if error is not None:
            code = getattr(error, "code", None)
            if isinstance(code, int):
                error_type = str(code)
                span.set_attribute("rpc.response.status_code", str(code))
            else:
                error_type = type(error).__name__
            span.set_status(self._api.error, str(error)[:200])
        elif result is not None and result.get("isError") is True:
            error_type = "tool_error"
            span.set_status(self._api.error)
            if self._record:
                span.set_attribute("gen_ai.tool.call.result", _content(result.get("content"), self._secrets))
        elif result is not None and self._record and "gen_ai.tool.name" in self._attributes:
            span.set_attribute("gen_ai.tool.call.result",
                               _content(result.get("structuredContent", result.get("content")), self._secrets))
        if error_type is not None:
            span.set_attribute("error.type", error_type)
            self._attributes["error.type"] = error_type
        if self._own:
            span.end()
        if not self._held:
            self._api.operation.record(time.monotonic() - self._start, self._attributes)


def start_request(method: str, params: dict[str, Any] | None, base: Callable[[], Mapping[str, Any]],
                  request_id: int, *, secrets: tuple[str, ...] = ()) -> tuple[RequestSpan | None, dict[str, Any] | None]:
    """Start the span of one request (:func:`_start_request`); never raises: a failing
    SDK or propagator costs the request its span, never the request. ``secrets``: the
    server's secret values, redacted from recorded arguments and results."""
    try:
        return _start_request(method, params, base, request_id, secrets)
    except Exception as exc:  # noqa: BLE001 - the request goes out as it would without telemetry
        _log.debug("the span of %s could not be started: %s", method, type(exc).__name__)
        return None, params


def _start_request(method: str, params: dict[str, Any] | None, base: Callable[[], Mapping[str, Any]],
                   request_id: int, secrets: tuple[str, ...] = ()) -> tuple[RequestSpan | None, dict[str, Any] | None]:
    """Start the span of one request; return it and the params to send.

    ``base``: gives the connection's attributes (``network.transport``, ``server.address``,
    ``server.port``, ``mcp.protocol.version``, ``mcp.session.id``). The params returned
    carry the trace context in ``_meta`` (a copy; the caller's dict is not changed).
    Without the API (or disabled): (None, params) unchanged.
    """
    loaded = api()
    if loaded is None:
        return None, params
    if loaded.unconfigured():
        # No SDK: no span to make, and nothing to time. A context the host holds (say a
        # traceparent it extracted itself, or baggage) still goes on to the server.
        current = loaded.context.get_current()
        return None, (_with_context(loaded, params, current) if current else params)
    name, attributes = _target(method, params)
    attributes.update(base())
    span_attributes = dict(attributes)
    span_attributes["jsonrpc.request.id"] = str(request_id)
    if SETTINGS.record_content and params is not None and method in ("tools/call", "prompts/get"):
        arguments = params.get("arguments")
        if arguments is not None:
            span_attributes["gen_ai.tool.call.arguments" if method == "tools/call" else "mcp.prompt.arguments"] = \
                _content(arguments, secrets)
    span = None
    if SETTINGS.merge_tool_span and method == "tools/call":
        current = loaded.trace.get_current_span()
        if current.is_recording():
            current.set_attributes(span_attributes)
            span, own = current, False
    if span is None:
        span = loaded.tracer.start_span(name, kind=loaded.kind, attributes=span_attributes)
        own = True
    try:
        params = _with_context(loaded, params, loaded.trace.set_span_in_context(span))
    except BaseException:
        if own:  # a failing propagator: the span ends here, never left open
            span.end()
        raise
    metric = {key: value for key, value in attributes.items() if key != "mcp.session.id"}
    return RequestSpan(loaded, span, own, metric, secrets), params


def _with_context(loaded: _Api, params: dict[str, Any] | None, context: Any) -> dict[str, Any] | None:
    """``params`` with ``context`` injected into its ``_meta`` (a copy when anything is)."""
    carrier: dict[str, str] = {}
    loaded.propagate.inject(carrier, context=context)
    if not carrier:
        return params
    params = dict(params or {})
    meta = dict(params.get("_meta") or {})
    for key in PROPAGATED:
        if key in carrier:
            meta[key] = carrier[key]
    params["_meta"] = meta
    return params


def trace_headers(params: Any) -> dict[str, str]:
    """The HTTP headers of the trace context that :func:`start_request` put in ``params``."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        return {}
    return {key: meta[key] for key in HEADERS if isinstance(meta.get(key), str)}


@contextlib.contextmanager
def step(name: str, server: str, **attributes: Any) -> Iterator[None]:
    """A span of an internal step (``discovery``, ``sign-in``, ``token refresh``) for
    ``server``: its requests are its children. ``attributes`` must hold no secret."""
    loaded = api()
    if loaded is None:
        yield
        return
    with loaded.tracer.start_as_current_span(f"{name} {server}", attributes={"mcp.server.name": server, **attributes},
                                               record_exception=False, set_status_on_exception=False) as span:
        try:
            yield
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__name__)
            span.set_status(loaded.error, type(exc).__name__)
            raise


def count(name: str, server: str, amount: int = 1, **attributes: Any) -> None:
    """Add to one of COUNTERS."""
    loaded = api()
    if loaded is not None and amount:
        loaded.counters[name].add(amount, {"mcp.server.name": server, **attributes})


def session_ended(seconds: float, attributes: Mapping[str, Any]) -> None:
    """A session-era connection lasted ``seconds``."""
    loaded = api()
    if loaded is not None:
        loaded.session.record(seconds, dict(attributes))


def log_ids() -> tuple[str, str] | None:
    """The current trace and span ids (hex), when a valid span is current.

    The API is loaded here only when the host has loaded it already (without it no span
    can be current), so that logging never imports it.
    """
    loaded = _api
    if loaded is None:
        if "opentelemetry.trace" not in sys.modules:
            return None
        loaded = api()
        if loaded is None:
            return None
    if not SETTINGS.enabled:
        return None
    context = loaded.trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


# Where a message of ours names its server: "server %r" (and "to server %r").
_SERVER_ARG = re.compile(r"server %r")
_CONVERSION = re.compile(r"%[^%]")
# Our threads that work for one server are named after it (actors/client.py, connection/http/link.py).
_THREAD = re.compile(r"^mcp-(?:dial|discover|reap|probe|http|stdio|listen)-(.+?)(?:_\d+)?$")


class LogFields(logging.Filter):
    """Adds ``mcp_server`` (the server's name, or None) and, while a span is current,
    ``trace_id`` and ``span_id`` to each record of the logger it is on: structured
    fields for a host's formatter or log exporter (``%(mcp_server)s``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.mcp_server = _server_of(record)
        ids = log_ids()
        if ids is not None:
            record.trace_id, record.span_id = ids
        return True


def _server_of(record: logging.LogRecord) -> str | None:
    message, args = record.msg, record.args
    if isinstance(message, str) and isinstance(args, tuple):
        found = _SERVER_ARG.search(message)
        if found is not None:
            index = len(_CONVERSION.findall(message[: found.start()]))
            if index < len(args):
                name = args[index]
                if isinstance(name, str):
                    return name
    thread = _THREAD.match(record.threadName or "")
    return thread.group(1) if thread is not None else None


_FIELDS = LogFields()


def logger(name: str) -> logging.Logger:
    """Our module logger ``name``, its records carrying :class:`LogFields`."""
    found = logging.getLogger(name)
    if _FIELDS not in found.filters:
        found.addFilter(_FIELDS)
    return found
