"""HTTP request headers of the 2026-07-28 Streamable HTTP transport.

Pure code: no threads, no I/O. Sources: 2026-07-28 basic/transports/streamable-http
("Request headers", "Value encoding") and server/tools ("x-mcp-header").

- Every modern POST carries ``MCP-Protocol-Version`` and ``Mcp-Method``;
  ``tools/call`` and ``prompts/get`` add ``Mcp-Name`` (``params.name``),
  ``resources/read`` adds it from ``params.uri``.
- A tool whose ``inputSchema`` annotates a property with ``"x-mcp-header": N``
  makes ``tools/call`` mirror that argument into ``Mcp-Param-N``. A tool whose
  annotations break the rules is invalid; the caller drops it from what
  ``tools/list`` yields (:class:`InvalidToolHeaders` says why).
- ``Mcp-Name`` and ``Mcp-Param-*`` values go out plain when they are safe, else
  as ``=?base64?<standard base64 with padding of the UTF-8 bytes>?=``
  (the alphabet is not named normatively; the spec's examples use standard
  RFC 4648 base64 with ``=`` padding, ambiguity 13).
- Values a server gave that we send back are checked before they are used:
  an ``Mcp-Session-Id`` must be visible ASCII (:func:`session_id`), and an SSE
  event id goes out as ``Last-Event-ID`` in UTF-8 (:func:`last_event_id`) unless
  it holds a control character. :func:`field_value_problem` says why any value
  cannot be an HTTP field value (the transport's last check before sending).

Header names compare case-insensitively (ambiguity 22); the spellings below are
the spec's. Header values are case-sensitive.
"""

from __future__ import annotations

import base64
import re
from typing import Any

from .jsonrpc import Json

HEADER_PROTOCOL_VERSION = "MCP-Protocol-Version"
HEADER_METHOD = "Mcp-Method"
HEADER_NAME = "Mcp-Name"
PARAM_HEADER_PREFIX = "Mcp-Param-"
X_MCP_HEADER = "x-mcp-header"

# Method -> the params key mirrored into Mcp-Name.
NAME_PARAMS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri",
               # the tasks extension (io.modelcontextprotocol/tasks): the task's id
               "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}

SENTINEL_PREFIX = "=?base64?"
SENTINEL_SUFFIX = "?="

# Integers outside this range are not sent as headers (server/tools "x-mcp-header").
MAX_SAFE_INTEGER = 2**53 - 1
# Containers (objects and arrays) tool_param_headers looks at before giving up.
MAX_SCHEMA_NODES = 10_000

HEADER_TYPES = frozenset({"string", "integer", "boolean"})

# RFC 9110 section 5.6.2: token = 1*tchar; tchar is ALPHA / DIGIT / these (ASCII only).
_TCHARS = frozenset("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")

# Schema keywords whose value is an object of names -> subschemas (or, for the
# last two, names -> lists of names). Their keys are names, never annotations;
# only "properties" keeps a property path going.
_NAME_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependentRequired", "dependencies"}
)
# Kinds of node in the tool_param_headers walk.
_SCHEMA, _NAMES, _PROPERTIES = 0, 1, 2


class InvalidToolHeaders(ValueError):
    """A tool's ``x-mcp-header`` annotations break the rules; ``str()`` is a short reason."""


def encode_value(value: str) -> str:
    """Return ``value`` as an ``Mcp-Name`` / ``Mcp-Param-*`` header value.

    Plain when every character is printable ASCII (0x20-0x7E), there is no leading
    or trailing space, and the value does not look like the sentinel (starts with
    ``=?base64?``, compared case-insensitively to be safe, and ends with ``?=``).
    Anything else is base64-wrapped. Tab, although the spec allows it inside a
    plain value, is wrapped too (as the official SDK does): the result then never
    contains a control character, and wrapping is always decoded by the server.

    Raises:
        ValueError: ``value`` holds a lone surrogate, so it has no UTF-8 form
            (such a request could not be serialised either).
    """
    if (
        value.isascii()
        and value.isprintable()
        and not value.startswith(" ")
        and not value.endswith(" ")
        and not (value[: len(SENTINEL_PREFIX)].lower() == SENTINEL_PREFIX and value.endswith(SENTINEL_SUFFIX))
    ):
        return value
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a header value that is not valid Unicode (lone surrogate)") from None
    return SENTINEL_PREFIX + base64.b64encode(data).decode("ascii") + SENTINEL_SUFFIX


def convert(value: Json) -> str | None:
    """Convert an argument to header text, or ``None`` when no header is sent.

    A string as is; a boolean as ``true``/``false``; an integer (not a bool) in
    decimal when it lies within +-(2^53-1), and so a float with no fractional part.
    ``None`` (absent/null) gives ``None``, and so does every other type (another
    float, list, dict, an integer out of range):
    the spec defines no conversion for them (ambiguity 14), so the header is
    omitted and the server decides.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON 5.0 for an integer property: servers compare numerically
    if isinstance(value, int) and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        return str(value)
    return None


def _check_plain(what: str, value: str) -> None:
    if not value or not value.isascii() or not value.isprintable() or " " in value:
        raise ValueError(f"{what} {_show(value)} cannot be sent as an HTTP header value")


def request_headers(method: str, params: dict[str, Any] | None, version: str) -> dict[str, str]:
    """Headers for a modern POST of ``method``: version, method, and ``Mcp-Name`` where due.

    ``Mcp-Name`` is omitted when the name/uri param is missing or not a string
    (the body is then invalid anyway and the server answers with an error).

    Raises:
        ValueError: ``method`` or ``version`` is empty or not visible ASCII (they
            are sent as is; the spec defines no encoding for them).
    """
    _check_plain("a protocol version", version)
    _check_plain("a method", method)
    headers = {HEADER_PROTOCOL_VERSION: version, HEADER_METHOD: method}
    key = NAME_PARAMS.get(method)
    if key is not None and isinstance(params, dict):
        name = params.get(key)
        if isinstance(name, str):
            headers[HEADER_NAME] = encode_value(name)
    return headers


def _show(text: Any, limit: int = 40) -> str:
    """A short, printable quotation of untrusted text for reasons."""
    text = str(text)
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _check_header_name(name: Json, where: str) -> str:
    """Return ``name`` if it is a valid ``x-mcp-header`` value, else raise."""
    if not isinstance(name, str):
        raise InvalidToolHeaders(f"x-mcp-header on {where} is a {type(name).__name__}, not a string")
    if not name:
        raise InvalidToolHeaders(f"x-mcp-header on {where} is empty")
    if any(ch < " " or ch == "\x7f" for ch in name):
        raise InvalidToolHeaders(f"x-mcp-header {_show(name)} on {where} contains control characters")
    if not all(ch in _TCHARS for ch in name):
        raise InvalidToolHeaders(f"x-mcp-header {_show(name)} on {where} is not an HTTP token")
    return name


def _where(path: tuple[str, ...]) -> str:
    return "the schema root" if not path else f"property {_show('.'.join(path))}"


def tool_param_headers(tool: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """Map each ``x-mcp-header`` name of ``tool`` to the path of its property.

    The path is the tuple of property names from the ``inputSchema`` root, through
    ``properties`` keywords only. A tool without annotations gives ``{}``.

    The whole schema is searched: an ``x-mcp-header`` key in any object other than
    as a property name (e.g. under ``items``, ``anyOf``, ``$defs``,
    ``additionalProperties``, an unknown keyword, or even in ``default`` or
    ``examples`` data) makes the tool invalid, as does one on the root. ``$ref``
    is never followed, so an annotation reached only through it sits in ``$defs``
    and is refused there. The annotated property's ``type`` must be exactly
    ``"string"``, ``"integer"`` or ``"boolean"``; a type list such as
    ``["string", "null"]`` is refused too (as the official SDK does; the spec
    names single types only). Only the chain matters, not the types along it:
    ``properties`` under a property typed ``array`` still counts as a chain (the
    argument then never holds an object there, so no header is sent).

    Raises:
        InvalidToolHeaders: the first broken rule, or a schema of more than
            MAX_SCHEMA_NODES objects and arrays.
    """
    schema = tool.get("inputSchema") if isinstance(tool, dict) else None
    found: dict[str, tuple[str, ...]] = {}
    seen: dict[str, str] = {}  # lower-cased name -> where it was
    # Entries: (node, path, broken_by, kind). path is the chain of property names
    # so far; broken_by is the first keyword that left that chain (None while on
    # it); kind says whether node is a schema (or data) or a map of names.
    stack: list[tuple[Json, tuple[str, ...], str | None, int]] = [(schema, (), None, _SCHEMA)]
    visited = 0
    while stack:
        node, path, broken_by, kind = stack.pop()
        visited += 1
        children: list[tuple[Json, tuple[str, ...], str | None, int]] = []
        if isinstance(node, list):
            off = broken_by or "an array"
            children = [(item, path, off, _SCHEMA) for item in node if isinstance(item, (dict, list))]
        elif kind != _SCHEMA:  # keys are names, values subschemas
            on_chain = kind == _PROPERTIES and broken_by is None
            for name, sub in node.items():
                if isinstance(sub, (dict, list)):
                    children.append((sub, (*path, str(name)) if on_chain else path, broken_by, _SCHEMA))
        elif isinstance(node, dict):
            if X_MCP_HEADER in node:
                _record(node, path, broken_by, found, seen)
            for keyword, sub in node.items():
                if keyword == X_MCP_HEADER or not isinstance(sub, (dict, list)):
                    continue
                if keyword in _NAME_MAPS and isinstance(sub, dict):
                    if keyword == "properties":
                        children.append((sub, path, broken_by, _PROPERTIES))
                    else:
                        children.append((sub, path, broken_by or keyword, _NAMES))
                else:
                    children.append((sub, path, broken_by or keyword, _SCHEMA))
        # Only objects and arrays are stacked; each one counts once, so check early.
        if visited + len(stack) + len(children) > MAX_SCHEMA_NODES:
            raise InvalidToolHeaders("schema too large to check")
        stack.extend(reversed(children))  # document order
    return found


def _record(
    node: dict[str, Any],
    path: tuple[str, ...],
    broken_by: str | None,
    found: dict[str, tuple[str, ...]],
    seen: dict[str, str],
) -> None:
    where = _where(path)
    if broken_by is not None:
        raise InvalidToolHeaders(f"x-mcp-header under {_show(broken_by)}: only a chain of properties may lead to it")
    if not path:
        raise InvalidToolHeaders("x-mcp-header on the schema root, not on a property")
    name = _check_header_name(node[X_MCP_HEADER], where)
    type_ = node.get("type")
    if not isinstance(type_, str) or type_ not in HEADER_TYPES:
        shown = _show(type_) if isinstance(type_, str) else "missing" if type_ is None else f"a {type(type_).__name__}"
        raise InvalidToolHeaders(f"x-mcp-header {_show(name)} on {where}: type {shown}, not string, integer or boolean")
    key = name.lower()
    if key in seen:
        raise InvalidToolHeaders(f"x-mcp-header {_show(name)} on {where} repeats the one on {seen[key]}")
    seen[key] = where
    found[name] = path


def param_headers(paths: dict[str, tuple[str, ...]], arguments: dict[str, Any] | None) -> dict[str, str]:
    """``Mcp-Param-<N>`` headers for a ``tools/call`` with ``arguments``.

    ``paths`` is what :func:`tool_param_headers` returned. The value at each path
    is converted (:func:`convert`) and encoded (:func:`encode_value`); a path that
    is absent, reaches a non-object, ends in ``null`` or in a value with no
    conversion gives no header.

    Raises:
        InvalidToolHeaders: ``paths`` holds a name that is not a token, or two
            names equal case-insensitively (not possible from tool_param_headers).
    """
    headers: dict[str, str] = {}
    seen: set[str] = set()
    for name, path in paths.items():
        _check_header_name(name, "a parameter")
        if name.lower() in seen:
            raise InvalidToolHeaders(f"x-mcp-header {_show(name)} given twice")
        seen.add(name.lower())
        value: Json = arguments
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        text = convert(value)
        if text is not None:
            headers[PARAM_HEADER_PREFIX + name] = encode_value(text)
    return headers


# -- values that go into HTTP fields -----------------------------------------------------------

# RFC 9110 section 5.5: a field value is visible characters and obs-text (0x80-0xFF),
# with SP / HTAB only between them. CR, LF and NUL are never allowed (they would end
# or split the message: RFC 9110 section 5.5, RFC 9112 section 2.2), nor is any other
# control.
_SPLITTERS = re.compile(rb"[\r\n\x00]")
_CONTROLS = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")


class InvalidHeaderValue(ValueError):
    """A value that cannot go into an HTTP header; ``str()`` is a short reason (never the value)."""


def field_value_problem(value: str | bytes) -> str | None:
    """Why ``value`` cannot be sent as an HTTP field value, or ``None`` if it can.

    A ``str`` goes out as Latin-1 (as http.client writes it), so it must have a
    Latin-1 form; ``bytes`` go out as they are. Either must hold no control
    character but HTAB (RFC 9110 section 5.5). The reason never quotes the value:
    it may be a credential.
    """
    if isinstance(value, str):
        try:
            data = value.encode("latin-1")
        except UnicodeEncodeError:
            return "holds a character outside Latin-1"
    else:
        data = bytes(value)
    if _SPLITTERS.search(data):
        return "holds CR, LF or NUL"
    if _CONTROLS.search(data):
        return "holds a control character"
    return None


def session_id(value: str) -> str:
    """Return ``value`` if it can be sent back as ``Mcp-Session-Id``.

    2025-11-25 basic/transports, "Session Management": the session ID "MUST only
    contain visible ASCII characters (ranging from 0x21 to 0x7E)".

    Raises:
        InvalidHeaderValue: empty, or a character outside 0x21-0x7E (a server's
            protocol violation: the session could not be used).
    """
    if not _VISIBLE_ASCII.fullmatch(value):
        raise InvalidHeaderValue("is empty" if not value else "holds a character that is not visible ASCII (0x21-0x7E)")
    return value


def last_event_id(value: str) -> bytes:
    """The ``Last-Event-ID`` header value for an SSE "last event ID string".

    WHATWG HTML, server-sent events ("reestablish the connection"): the header is
    the last event ID string *encoded as UTF-8*, so an id of any script goes back as
    the bytes the server sent. The SSE parser already drops ids holding NUL, and CR
    and LF end lines, so they never reach here.

    Raises:
        InvalidHeaderValue: a lone surrogate, a control character (not allowed in a
            field value, RFC 9110 section 5.5), or a leading or trailing space or tab
            (a receiver strips those, so the server would not get its id back).
    """
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidHeaderValue("is not valid Unicode") from None
    problem = field_value_problem(data)
    if problem is not None:
        raise InvalidHeaderValue(problem)
    if data[:1] in (b" ", b"\t") or data[-1:] in (b" ", b"\t"):
        raise InvalidHeaderValue("starts or ends with a space or tab")
    return data
