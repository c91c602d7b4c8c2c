#!/usr/bin/env python3
"""A stdio MCP server with a large tool list, for ``bench_discovery.py``. Standard library only.

It speaks the legacy era only (2025-11-25 basic/lifecycle): ``initialize`` opens the
session and ``server/discover`` gets ``-32601`` (method not found), which a modern
client takes as "an older server" and follows with ``initialize`` (2026-07-28
basic/transports/stdio). It offers tools and nothing else; ``tools/list`` is paginated
with opaque ``nextCursor`` strings (2025-11-25 server/utilities/pagination).

What it lists (one of):

``--tools N`` (default 1000)
    N realistic tools (name, title, a description of about 200 characters, an
    ``inputSchema`` with 3-5 typed properties including a nested object, a
    ``required`` list, ``annotations``; every fourth one an ``outputSchema``), in
    pages of ``--page-size`` (100) tools.
``--fill BYTES``
    as many realistic tools as fit in just under BYTES of wire bytes, counting every
    ``tools/list`` answer line whole (envelope and newline included), in pages of
    ``--page-size`` tools.
``--flood BYTES``
    pages of empty objects (``{"tools":[{},{},...]}``), each page about
    ``--page-bytes`` (1 MiB) on the wire, just under BYTES in all. Every entry is
    invalid (no name): a client must leave each one out.

Every answer is built before the first request is read (``--stats`` prints the
sizes to stderr), so a ``tools/list`` costs the server one small ``json.loads`` and
one write: the server is never what a benchmark measures. Wire sizes are counted
with a 6-digit request id, an upper bound for the ids a benchmark uses, so a real
answer is never larger than counted. The server exits at end of input.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Iterator

LEGACY_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST = "2025-11-25"
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
ID_WIDTH = 6  # request ids are counted as this many digits: see _line_size

_HEAD = b'{"jsonrpc":"2.0","id":'
_MID = b',"result":'


def _line_size(result: bytes) -> int:
    """Bytes of the answer line that carries ``result``, newline included."""
    return len(_HEAD) + ID_WIDTH + len(_MID) + len(result) + 2  # "}" and "\n"


# -- realistic tools ----------------------------------------------------------------------

_NOUNS = (
    "file", "issue", "invoice", "calendar_event", "customer", "deployment", "branch", "image",
    "report", "dataset", "contact", "message", "page", "ticket", "order", "metric",
)
_VERBS = ("read", "list", "search", "create", "update", "delete", "export", "sync", "render", "inspect")
_READ_ONLY = {"read", "list", "search", "export", "inspect"}
_STATUSES = ("open", "closed", "pending", "archived", "draft")
_SYSTEMS = ("the workspace", "the tracker", "the billing system", "the CRM", "the cluster", "the repository")


def _description(verb: str, noun: str, system: str, i: int) -> str:
    """About 200 characters of plain, slightly varied prose (some of it non-ASCII, as
    real descriptions are: UTF-8 on the wire, not \\u escapes)."""
    thing = noun.replace("_", " ")
    scope = "read" if verb in _READ_ONLY else "write"
    text = (
        f"{verb.capitalize()} {thing}s in {system}. Use it when the user asks to {verb} one {thing} by id or "
        f"by filter; results come newest first – at most `limit` of them. Needs the {noun}:{scope} scope (#{i})."
    )
    if len(text) < 190:
        text += " Safe to retry."
    return text


def tool(i: int) -> dict:
    """The i-th tool: deterministic, unique name, 3-5 properties."""
    noun = _NOUNS[i % len(_NOUNS)]
    verb = _VERBS[(i // len(_NOUNS)) % len(_VERBS)]
    system = _SYSTEMS[i % len(_SYSTEMS)]
    thing = noun.replace("_", " ")
    properties: dict = {
        "id": {
            "type": "string",
            "description": f"The {thing}'s identifier, as shown in {system}.",
            "pattern": "^[A-Za-z0-9_-]{1,64}$",
        },
        "limit": {
            "type": "integer",
            "description": "Maximum number of entries to return.",
            "minimum": 1,
            "maximum": 500,
            "default": 50,
        },
        "filter": {
            "type": "object",
            "description": f"Narrow the {thing}s considered.",
            "properties": {
                "status": {"type": "string", "enum": list(_STATUSES)},
                "since": {"type": "string", "format": "date-time", "description": "Only entries changed after this instant."},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 20},
            },
            "additionalProperties": False,
        },
    }
    extra = i % 3  # 3, 4 or 5 properties
    if extra >= 1:
        properties["dryRun"] = {"type": "boolean", "description": "Report what would change without changing it.", "default": False}
    if extra >= 2:
        properties["fields"] = {
            "type": "array",
            "description": "Fields to include in each entry (default: all).",
            "items": {"type": "string", "enum": ["id", "title", "owner", "created", "updated", "url"]},
            "uniqueItems": True,
        }
    entry: dict = {
        "name": f"{noun}_{verb}_{i:05d}",
        "title": f"{verb.capitalize()} {thing} ({i})",
        "description": _description(verb, noun, system, i),
        "inputSchema": {
            "type": "object",
            "properties": properties,
            "required": ["id"] if verb in ("read", "update", "delete", "inspect") else ["filter"],
            "additionalProperties": False,
        },
        "annotations": {
            "title": f"{verb.capitalize()} {thing}",
            "readOnlyHint": verb in _READ_ONLY,
            "destructiveHint": verb == "delete",
            "idempotentHint": verb != "create",
            "openWorldHint": i % 2 == 0,
        },
    }
    if i % 4 == 0:
        entry["outputSchema"] = {
            "type": "object",
            "properties": {
                "items": {"type": "array", "items": {"type": "object"}},
                "nextPage": {"type": ["string", "null"]},
            },
            "required": ["items"],
        }
    return entry


def _encode(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _tools_forever() -> Iterator[bytes]:
    i = 0
    while True:
        yield _encode(tool(i))
        i += 1


# -- pages --------------------------------------------------------------------------------


def _page(items: list[bytes], cursor: str | None) -> bytes:
    tail = b"]}" if cursor is None else b'],"nextCursor":' + _encode(cursor) + b"}"
    return b'{"tools":[' + b",".join(items) + tail


def pages_of(items: Iterator[bytes], per_page: int, budget: int | None, count: int | None) -> list[bytes]:
    """Pack ``items`` into pages of ``per_page``: ``count`` items, or as many as keep the
    answer lines' total under ``budget`` bytes (each page counted with its cursor, an
    upper bound for the last page, which has none)."""
    pages: list[list[bytes]] = []
    current: list[bytes] = []
    current_size = 0  # the sum of the current page's items and their commas
    used = 0  # the lines of the pages closed so far
    taken = 0
    for item in items:
        if count is not None and taken >= count:
            break
        if budget is not None:
            size = current_size + len(item) + (1 if current else 0)
            cursor = f"p{len(pages) + 1}"
            if used + _line_size(_page([], cursor)) + size >= budget:
                break
        current.append(item)
        current_size += len(item) + (1 if len(current) > 1 else 0)
        taken += 1
        if len(current) == per_page:
            pages.append(current)
            used += _line_size(_page(current, f"p{len(pages)}"))
            current, current_size = [], 0
    if current or not pages:
        pages.append(current)
    return [_page(items, f"p{n + 1}" if n + 1 < len(pages) else None) for n, items in enumerate(pages)]


def flood_pages(budget: int, page_bytes: int) -> list[bytes]:
    """Pages of ``{}`` entries, each line about ``page_bytes``, under ``budget`` in all."""
    pages: list[bytes] = []
    left = budget - 1  # strictly under
    while True:
        envelope = _line_size(_page([], f"p{len(pages) + 1}"))
        room = min(page_bytes, left) - envelope
        entries = (room + 1) // 3  # "{}" and a comma each, one comma fewer than entries
        if entries < 1:
            break
        pages.append(b"{}," * (entries - 1) + b"{}")
        left -= envelope + 3 * entries - 1
    if not pages:
        pages.append(b"")
    return [
        b'{"tools":[' + body + (b'],"nextCursor":"p%d"}' % (n + 1) if n + 1 < len(pages) else b"]}")
        for n, body in enumerate(pages)
    ]


# -- serving ------------------------------------------------------------------------------


def _answer(id_bytes: bytes, result: bytes) -> bytes:
    return _HEAD + id_bytes + _MID + result + b"}\n"


def _error(id_bytes: bytes, code: int, message: str) -> bytes:
    return _HEAD + id_bytes + b',"error":' + _encode({"code": code, "message": message}) + b"}\n"


def serve(pages: list[bytes]) -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    by_cursor = {f"p{n}": page for n, page in enumerate(pages) if n > 0}
    info = _encode({"name": "bench-tools-server", "version": "1.0"})
    for line in stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue  # not ours to judge; a benchmark client sends valid JSON
        if not isinstance(message, dict) or "id" not in message or "method" not in message:
            continue  # notifications (notifications/initialized) and stray answers
        id_bytes = _encode(message["id"])
        method = message["method"]
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        if method == "initialize":
            requested = params.get("protocolVersion")
            version = requested if requested in LEGACY_VERSIONS else LATEST
            out = _answer(
                id_bytes,
                b'{"protocolVersion":' + _encode(version) + b',"capabilities":{"tools":{"listChanged":false}},"serverInfo":' + info + b"}",
            )
        elif method == "tools/list":
            cursor = params.get("cursor")
            if cursor is None:
                out = _answer(id_bytes, pages[0])
            elif cursor in by_cursor:
                out = _answer(id_bytes, by_cursor[cursor])
            else:
                out = _error(id_bytes, INVALID_PARAMS, "unknown cursor")
        elif method == "ping":
            out = _answer(id_bytes, b"{}")
        else:  # server/discover among them: this is an older server
            out = _error(id_bytes, METHOD_NOT_FOUND, f"Method not found: {str(method)[:80]}")
        try:
            stdout.write(out)
            stdout.flush()
        except BrokenPipeError:
            return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A legacy-era stdio MCP server with a large tools/list.")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--tools", type=int, default=None, help="realistic tools to list (default 1000)")
    what.add_argument("--fill", type=int, default=None, metavar="BYTES", help="realistic tools just under BYTES of answers")
    what.add_argument("--flood", type=int, default=None, metavar="BYTES", help="pages of {} just under BYTES of answers")
    parser.add_argument("--page-size", type=int, default=100, help="tools per page (default 100)")
    parser.add_argument("--page-bytes", type=int, default=1 << 20, help="bytes per --flood page (default 1 MiB)")
    parser.add_argument("--stats", action="store_true", help="print pages, entries and wire bytes to stderr")
    opts = parser.parse_args(argv)
    if opts.page_size < 1 or opts.page_bytes < 64:
        parser.error("--page-size must be positive and --page-bytes at least 64")
    if opts.flood is not None:
        pages = flood_pages(opts.flood, opts.page_bytes)
    elif opts.fill is not None:
        pages = pages_of(_tools_forever(), opts.page_size, opts.fill, None)
    else:
        pages = pages_of(_tools_forever(), opts.page_size, None, 1000 if opts.tools is None else opts.tools)
    if opts.stats:
        wire = sum(_line_size(page) for page in pages)
        entries = sum(json.loads(page)["tools"].__len__() for page in pages)
        print(json.dumps({"pages": len(pages), "entries": entries, "wire_bytes": wire}), file=sys.stderr, flush=True)
    try:
        serve(pages)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
