"""Bounded parsing and classification of JSON-RPC messages."""

import json

import pytest

from albedo_actors.wire import jsonrpc
from albedo_actors.wire.framing import FrameTooLarge, LineFramer
from albedo_actors.wire.jsonrpc import WireError


def test_encode_is_one_compact_line_without_raw_newlines():
    line = jsonrpc.encode(jsonrpc.request(1, "tools/call", {"text": "a\nb", "ü": "é"}))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"text": "a\nb", "ü": "é"}}


@pytest.mark.parametrize(
    "raw, reason",
    [
        (b"\xff\xfe{}", "invalid UTF-8"),
        (b"{not json", "invalid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "nested"),
        (b"[" * 200 + b"]" * 200, "nested deeper"),
        (b'{"n": ' + b"9" * 100_000 + b"}", "too many digits"),
        (b'{"n": 1e999}', "out of range"),
        (b'{"n": NaN}', "constant"),
        (b'{"n": 0.' + b"1" * 200 + b"}", "characters"),
    ],
)
def test_bad_input_is_a_wire_error_with_a_reason(raw, reason):
    with pytest.raises(WireError, match=reason):
        jsonrpc.parse_line(raw)


def test_oversized_message_is_refused_before_decoding():
    with pytest.raises(WireError, match="MiB limit"):
        jsonrpc.parse_line(b" " * (jsonrpc.MAX_MESSAGE_BYTES + 1))


def test_moderately_nested_json_is_accepted():
    depth = jsonrpc.MAX_DEPTH - 1
    value = jsonrpc.parse_line(b"[" * depth + b"]" * depth)
    assert isinstance(value, list)


@pytest.mark.parametrize(
    "message, kind",
    [
        ({"jsonrpc": "2.0", "id": 1, "method": "ping"}, jsonrpc.REQUEST),
        ({"jsonrpc": "2.0", "id": "a", "method": "roots/list", "params": {}}, jsonrpc.REQUEST),
        ({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}, jsonrpc.NOTIFICATION),
        ({"jsonrpc": "2.0", "id": 3, "result": {}}, jsonrpc.RESPONSE),
        ({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse"}}, jsonrpc.RESPONSE),
    ],
)
def test_classify_accepts_the_three_kinds(message, kind):
    assert jsonrpc.classify(message) == kind


@pytest.mark.parametrize(
    "message",
    [
        [1, 2],
        {"id": 1, "result": {}},
        {"jsonrpc": "2.0", "id": True, "result": {}},
        {"jsonrpc": "2.0", "id": 1.0, "result": {}},
        {"jsonrpc": "2.0", "id": 1, "method": 5},
        {"jsonrpc": "2.0", "id": 1, "method": "x", "params": "p"},
        {"jsonrpc": "2.0", "id": 1, "error": {"code": "x", "message": "m"}},
        {"jsonrpc": "2.0", "id": 1},
    ],
)
def test_classify_rejects_what_is_not_json_rpc(message):
    with pytest.raises(WireError):
        jsonrpc.classify(message)


def test_framer_splits_lines_across_chunks_and_drops_blank_lines():
    framer = LineFramer()
    assert framer.feed(b'{"a":') == []
    assert framer.feed(b'1}\r\n\n{"b":2}\n{"c"') == [b'{"a":1}', b'{"b":2}']
    assert framer.pending == 4
    assert framer.feed(b":3}\n") == [b'{"c":3}']


def test_framer_bounds_a_line_without_newline():
    framer = LineFramer(max_bytes=1024)
    framer.feed(b"x" * 1000)
    with pytest.raises(FrameTooLarge):
        framer.feed(b"x" * 100)
    assert framer.pending == 0  # the memory is released


def test_framer_refuses_a_complete_line_over_the_limit():
    framer = LineFramer(max_bytes=10)
    with pytest.raises(FrameTooLarge):
        framer.feed(b"y" * 11 + b"\n")


def test_framer_on_whole_line_chunks_drops_blank_lines_and_carriage_returns():
    # A chunk of whole lines with nothing held (the usual read) takes the split path.
    framer = LineFramer(max_bytes=10)
    assert framer.feed(b'{"a":1}\r\n\n\r\n{"b":2}\n') == [b'{"a":1}', b'{"b":2}']
    assert framer.feed(b"\n") == []
    assert framer.pending == 0
    assert framer.feed(b"x" * 10 + b"\n") == [b"x" * 10]
    with pytest.raises(FrameTooLarge):
        framer.feed(b"y" * 11 + b"\n")
    assert framer.pending == 0


@pytest.mark.parametrize(
    "text",
    ['{"a": [1, 2.5, null, true, "\\u00e9"]}', '  {"a": 1}  ', '{"a": 1}\t', "[]", '"s"', "3"],
)
def test_parse_line_takes_what_the_standard_decoder_takes(text):
    assert jsonrpc.parse_line(text.encode()) == json.loads(text)


@pytest.mark.parametrize("raw", [b'{"a": 1} {"b": 2}', b'{"a": 1}x', b"", b"   ", b'{"a": 1'])
def test_parse_line_refuses_what_the_standard_decoder_refuses(raw):
    with pytest.raises(WireError, match="invalid JSON"):
        jsonrpc.parse_line(raw)


def test_encode_matches_the_standard_encoder_and_its_errors():
    message = {"jsonrpc": "2.0", "id": 7, "params": {"t": "a\n\"b\"\u2028é", "n": [1.5, -0.0, 10**30, None, False]}}
    assert jsonrpc.encode(message) == json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    circular: dict = {}
    circular["self"] = circular
    with pytest.raises(ValueError, match="Circular reference"):
        jsonrpc.encode(circular)
    with pytest.raises(ValueError):
        jsonrpc.encode({"n": float("nan")})
    with pytest.raises(TypeError):
        jsonrpc.encode({"o": object()})
