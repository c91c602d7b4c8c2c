"""The headers of the link's HTTP requests, by era.

Pure: the values come from the link (its configured headers, its auth's headers, the
negotiated version and session). Sources: 2025-11-25 and 2026-07-28 basic/transports.

- Every POST accepts JSON and SSE. An older session's requests carry ``Mcp-Session-Id``
  and the negotiated ``MCP-Protocol-Version`` (not ``initialize``, which negotiates it).
- A modern request carries ``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name`` and the
  tool's ``Mcp-Param-*`` headers (:mod:`albedo_actors.wire.headers` encodes them).
- A GET stream carries ``Last-Event-ID`` when it resumes after an event id.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...wire import headers as mcp_headers
from ...wire import mcp, telemetry

ACCEPT_BOTH = "application/json, text/event-stream"
ACCEPT_STREAM = "text/event-stream"

ToolHeaders = dict[str, dict[str, tuple[str, ...]]]  # tool -> Mcp-Param header -> argument path


def post_headers(message: dict[str, Any], given: Mapping[str, str], *, legacy: bool, version: str,
                 session_id: str | None, tool_headers: ToolHeaders) -> dict[str, str]:
    """The headers of one POST of ``message``; ``given`` are the configured and auth headers.

    A request whose ``_meta`` carries our trace context (wire/telemetry.py) also carries
    it as the ``traceparent``/``tracestate`` headers, for servers behind gateways.
    """
    headers = {"Content-Type": "application/json", "Accept": ACCEPT_BOTH, **given}
    method = message.get("method")
    if method is not None:
        headers.update(telemetry.trace_headers(message.get("params")))
    if legacy:
        if session_id is not None:
            headers["Mcp-Session-Id"] = session_id
        if method != "initialize":
            headers["MCP-Protocol-Version"] = version
        return headers
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    if method is None:
        headers["MCP-Protocol-Version"] = version
        return headers
    version = params.get("_meta", {}).get(mcp.META_PROTOCOL_VERSION, version)
    headers.update(mcp_headers.request_headers(method, params, version))
    if method == "tools/call":
        name = params.get("name")
        paths = tool_headers.get(name) if isinstance(name, str) else None
        if paths:
            headers.update(mcp_headers.param_headers(paths, params.get("arguments")))
    return headers


def stream_headers(given: Mapping[str, str], *, version: str, session_id: str | None,
                   last_event_id: str | None = None) -> dict[str, str | bytes]:
    """Headers of a GET stream; ``Last-Event-ID`` when resuming after that id.

    Raises:
        InvalidHeaderValue: the id cannot go into a header.
    """
    headers: dict[str, str | bytes] = {"Accept": ACCEPT_STREAM, "MCP-Protocol-Version": version, **given}
    if session_id is not None:
        headers["Mcp-Session-Id"] = session_id
    if last_event_id:  # WHATWG: an empty last event ID string sends no header
        headers["Last-Event-ID"] = mcp_headers.last_event_id(last_event_id)
    return headers


def tool_headers(server: str, tools: tuple[dict[str, Any], ...],
                 warnings: list[str]) -> tuple[tuple[dict[str, Any], ...], ToolHeaders]:
    """2026-07-28 server/tools "x-mcp-header": the tools a client may keep (an HTTP client
    MUST leave out invalid ones, each named in ``warnings``) and their ``Mcp-Param-*`` paths."""
    kept, paths = [], {}
    for tool in tools:
        try:
            found = mcp_headers.tool_param_headers(tool)
        except mcp_headers.InvalidToolHeaders as exc:
            warnings.append(f"server {server!r}: left out tool {tool['name'][:80]!r}: "
                            f"its x-mcp-header annotations break the spec's rules ({exc})")
            continue
        if found:
            paths[tool["name"]] = found
        kept.append(tool)
    return tuple(kept), paths
