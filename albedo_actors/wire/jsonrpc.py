"""JSON-RPC 2.0 messages as plain dicts: building, bounded parsing, classifying.

Pure code: no threads, no I/O. A message that comes from a server is untrusted, so
:func:`parse_line` bounds what it accepts and raises :class:`WireError` with a short,
user-readable reason instead of letting a ``RecursionError``, ``ValueError``,
``UnicodeDecodeError`` or (later, on another thread) ``UnicodeEncodeError`` escape.
The rules, each applied to every message of every server:

- at most :data:`MAX_MESSAGE_BYTES` bytes, strict UTF-8, strict JSON;
- at most :data:`MAX_CONTAINERS` objects and arrays in all (a million ``{}`` in one
  line is refused before it is parsed: memory follows bytes, not objects);
- nested at most :data:`MAX_DEPTH` levels;
- numbers of at most :data:`MAX_NUMBER_DIGITS` characters (integers: CPython's 4300
  digits), none out of range;
- text that is text: a ``\\uD800``-style escape of a lone UTF-16 surrogate, in a
  key or a value, is valid JSON (RFC 8259 section 8.2) but not Unicode, and no
  Unicode string can hold it; the message is refused (RFC 7493 I-JSON, section 2.1).
"""

from __future__ import annotations

import json
import json.encoder
import math
import re
from typing import Any, Callable, NoReturn

# A decoded JSON value: None, bool, int, float, str, a list or a dict of them. Any, not a
# recursive union: what a server sends is untrusted, and every reader checks at run time
# the shape it needs before it relies on it.
Json = Any

# JSON-RPC 2.0 standard codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# MCP codes. 2026-07-28 basic/index "Error Codes".
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022
# 2025-11-25 and older: resource not found (modern servers use -32602).
RESOURCE_NOT_FOUND = -32002
MODERN_ERROR_CODES = frozenset({HEADER_MISMATCH, MISSING_REQUIRED_CLIENT_CAPABILITY, UNSUPPORTED_PROTOCOL_VERSION})

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 128
MAX_CONTAINERS = 500_000  # objects and arrays in one message (a 1,000-tool list has ~20,000)
MAX_NUMBER_DIGITS = 64  # characters of a non-integer number

# Kinds returned by classify().
REQUEST = "request"
NOTIFICATION = "notification"
RESPONSE = "response"


class WireError(ValueError):
    """A message that cannot be accepted; ``str()`` is a short reason."""


def encode(message: dict[str, Any]) -> bytes:
    """Serialise one message as a compact UTF-8 line ending in ``\\n``.

    ``json.dumps`` escapes control characters, so the line never contains a raw
    newline (2025-11-25 and 2026-07-28 basic/transports stdio).
    """
    if _encode_fast is not None:
        try:
            return "".join(_encode_fast(message, 0)).encode() + b"\n"
        except RecursionError:
            pass  # nested too deeply, or circular: the full encoder says which, as json.dumps does
    return _ENCODER.encode(message).encode() + b"\n"


def request(id_: int | str, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        message["params"] = params
    return message


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def result_response(id_: int | str, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "result": result}


def error_response(id_: int | str | None, code: int, message: str, data: Json = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": id_, "error": error}


def _parse_float(text: str) -> float:
    if len(text) > MAX_NUMBER_DIGITS:
        raise WireError(f"a number of {len(text)} characters")
    value = float(text)
    if math.isinf(value):
        raise WireError(f"a number out of range ({text[:20]})")
    return value


def _reject_constant(name: str) -> NoReturn:
    raise WireError(f"the non-JSON constant {name}")


# Built once: json.dumps/json.loads with options build a new coder on every call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
# Integers keep the default parser (fast, C); CPython refuses more than 4300 digits.
_DECODER = json.JSONDecoder(parse_float=_parse_float, parse_constant=_reject_constant)


def _fast_encoder() -> Callable[[Any, int], Any] | None:
    """``_ENCODER``'s C encoder, built once: ``JSONEncoder.encode`` builds a new one for
    every message (about half of its cost for a request). Without the circular check
    (whose table a failed call could leave dirty), so :func:`encode` hands a
    RecursionError back to ``_ENCODER``. None where the C encoder is missing."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    try:
        fast: Callable[[Any, int], Any] = make(
            None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", False, False, False
        )
        sample = {"a": [1, 2.5, None, True, "\u00e9\n\""], "b": {}}
        if "".join(fast(sample, 0)) != _ENCODER.encode(sample):
            return None
    except Exception:  # noqa: BLE001 - a Python whose C encoder takes other arguments
        return None
    return fast


_encode_fast = _fast_encoder()
_scan_once: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]  # set by its __init__


def parse_line(line: bytes) -> Json:
    """Decode one line (without its newline) into a JSON value.

    Raises:
        WireError: too large, not UTF-8, not JSON, nested deeper than MAX_DEPTH,
            or holding a number that is too long (integers: CPython's 4300 digits)
            or out of range.
    """
    if len(line) > MAX_MESSAGE_BYTES:
        raise WireError(f"a message of {len(line)} bytes, over the {MAX_MESSAGE_BYTES >> 20} MiB limit")
    # Counting brackets is a memchr-speed scan; brackets inside strings count too, so
    # only a line over the limit pays for the exact count.
    brackets = line.count(b"{") + line.count(b"[")
    if brackets > MAX_CONTAINERS and _count_containers(line) > MAX_CONTAINERS:
        raise WireError(f"a message of more than {MAX_CONTAINERS} JSON objects and arrays")
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WireError(f"invalid UTF-8 at byte {exc.start}") from None
    try:
        # The scanner itself, without decode()'s two whitespace matches; anything it
        # does not take whole (whitespace around, an error) goes to decode(), which
        # accepts or refuses it exactly as before.
        value, end = _scan_once(text, 0)
    except Exception:  # noqa: BLE001 - decode() below raises the error to report
        end = -1
    try:
        if end != len(text):
            value = _DECODER.decode(text)
    except WireError:
        raise
    except RecursionError:
        raise WireError("JSON nested too deeply") from None
    except ValueError as exc:
        if "digits" in str(exc):
            raise WireError("a number with too many digits") from None
        raise WireError(f"invalid JSON ({str(exc).split(':')[0]})") from None
    # Cheap pre-checks: only a line with many brackets can be too deep to accept, and
    # only one with a surrogate escape can hold a lone surrogate.
    if brackets > MAX_DEPTH:
        _check_depth(value)
    if _SURROGATE_ESCAPE.search(line) is not None:
        _check_text(value)
    return value


# A \uD800-\uDFFF escape (high or low half). It may be half of a valid pair, or the
# "\\" of an escaped backslash may stand before it: the exact test is _check_text.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
# A JSON string, for the exact container count. It runs before the line is parsed: in
# a malformed line it may miss a string, which only makes the count larger.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def _count_containers(line: bytes) -> int:
    """Objects and arrays in ``line``, not counting brackets inside strings."""
    bare = _STRING.sub(b"", line)
    return bare.count(b"{") + bare.count(b"[")


def _check_depth(value: Json) -> None:
    """Refuse a value nested deeper than MAX_DEPTH (level by level, no recursion)."""
    level, depth = [value], 1
    while level:
        if depth > MAX_DEPTH:
            raise WireError(f"JSON nested deeper than {MAX_DEPTH} levels")
        below: list[Json] = []
        for node in level:
            below.extend([c for c in (node.values() if type(node) is dict else node) if type(c) is dict or type(c) is list])
        level, depth = below, depth + 1


def _check_text(value: Json) -> None:
    """Refuse a value holding a lone surrogate anywhere (a key or a string value)."""
    try:
        _ENCODER.encode(value).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise WireError(f"a string holding a lone UTF-16 surrogate (U+{ord(exc.object[exc.start]):04X}), which is not text") from None


def valid_id(value: Json) -> bool:
    """A JSON-RPC id we accept: a string, or an integer that is not a bool."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def classify(message: Json) -> str:
    """Return REQUEST, NOTIFICATION or RESPONSE for a parsed message.

    Raises:
        WireError: the value is not a JSON-RPC 2.0 message.
    """
    if not isinstance(message, dict):
        raise WireError(f"a JSON {type(message).__name__} instead of a JSON-RPC object")
    if message.get("jsonrpc") != "2.0":
        raise WireError('a message without "jsonrpc": "2.0"')
    method = message.get("method")
    if method is not None:
        if not isinstance(method, str):
            raise WireError("a method that is not a string")
        params = message.get("params")
        if params is not None and not isinstance(params, (dict, list)):
            raise WireError(f"params of {method} that are not an object")
        if "id" in message:
            if not valid_id(message["id"]):
                raise WireError(f"a request {method} with an invalid id")
            return REQUEST
        return NOTIFICATION
    if "result" in message:
        if not valid_id(message.get("id")):
            raise WireError("a response with an invalid id")
        return RESPONSE
    if "error" in message:
        error = message["error"]
        if (
            not isinstance(error, dict)
            or not isinstance(error.get("code"), int)
            or isinstance(error.get("code"), bool)
            or not isinstance(error.get("message", ""), str)
        ):
            raise WireError("an error response without an integer code and a message")
        id_ = message.get("id")
        if id_ is not None and not valid_id(id_):
            raise WireError("an error response with an invalid id")
        return RESPONSE
    raise WireError("a message that is neither a request, a notification nor a response")
