"""albedo_actors.wire.text: the one escaping rule for printed text, and exact JSON output."""

from __future__ import annotations

import json

import pytest

from albedo_actors.wire.text import ELLIPSIS, json_text, printable

# Every code point the rule escapes, and what it becomes.
ESCAPED = (
    [(chr(c), f"\\x{c:02x}") for c in range(0x00, 0x20) if chr(c) not in "\t\n\r"]
    + [("\r", "\\r"), ("\x7f", "\\x7f")]
    + [(chr(c), f"\\x{c:02x}") for c in range(0x80, 0xA0)]
    + [(chr(c), f"\\u{c:04x}") for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]]
    + [("\ud800", "\\ud800"), ("\udfff", "\\udfff")]
)
KEPT = ["a", " ", "\\", "é", "流", "\u00a0", "\u200d", "\u200e", "\u200f", "\U0001f600", "\u2028", "\ufeff"]


@pytest.mark.parametrize("ch,escape", ESCAPED)
def test_each_unsafe_code_point_is_written_as_repr_writes_it(ch, escape):
    assert printable(f"<{ch}>") == f"<{escape}>"
    assert printable(f"<{ch}>", one_line=True) == f"<{escape}>"
    assert repr(ch)[1:-1] == escape  # the same form as Python's repr


@pytest.mark.parametrize("ch", KEPT)
def test_printable_characters_of_any_script_pass_unchanged(ch):
    assert printable(f"<{ch}>") == f"<{ch}>"


def test_newline_and_tab_stay_in_text_and_are_escaped_in_one_line_mode():
    assert printable("a\nb\tc") == "a\nb\tc"
    assert printable("a\nb\tc", one_line=True) == "a\\nb\\tc"


def test_the_sequences_a_terminal_would_obey_come_out_as_visible_text():
    hostile = "\x1b]0;pwned\x07\x1b[2J\x9b31m\x1b[?1049h"
    shown = printable(hostile)
    assert shown == "\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\x1b[?1049h"
    assert all(0x20 <= ord(ch) < 0x7F for ch in shown)


def test_escaping_twice_changes_nothing_and_backslashes_are_not_doubled():
    text = "C:\\dir \\x1b \x1b \u202e \ud800"
    once = printable(text)
    assert printable(once) == once
    assert once.startswith("C:\\dir \\x1b ")


@pytest.mark.parametrize("limit", range(0, 40))
def test_a_limit_bounds_the_result_and_never_splits_an_escape(limit):
    text = "ab\x1bcd\u202eef\x9b" * 3
    shown = printable(text, limit=limit)
    assert len(shown) <= limit
    full = printable(text)
    if len(full) <= limit:
        assert shown == full
    elif limit:
        assert shown.endswith(ELLIPSIS)
        body = shown[: -len(ELLIPSIS)]
        # The cut falls between whole characters' escapes: the body is some prefix, escaped.
        assert any(printable(text[:k]) == body for k in range(len(text) + 1))


def test_a_limit_cuts_before_an_escape_that_would_not_fit():
    assert printable("abc\x1b", limit=5) == "abc" + ELLIPSIS
    assert printable("abc\x1b", limit=7) == "abc\\x1b"


def test_a_non_string_is_shown_as_its_str():
    assert printable(42) == "42"
    assert printable(None) == "None"


VALUES = [
    "plain",
    "\x1b]0;title\x07 \x1b[2J \x07 \x9b \x7f \u202e \u2066 \x00",
    "lone \ud800 surrogate",
    {"k\x1b": ["\x85", "流", "\u202d"], "n": 1, "f": 1.5, "t": True, "z": None},
]


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("indent", [None, 2])
def test_json_text_reads_back_exactly_and_holds_no_unsafe_code_point(value, indent):
    text = json_text(value, indent=indent)
    assert json.loads(text) == value
    assert printable(text) == text  # nothing left for the rule to escape
    text.encode("utf-8")  # no lone surrogate: every one is a JSON escape
    if isinstance(value, str):
        assert text == json.dumps(value, ensure_ascii=True) or not value.isascii()


def test_json_text_keeps_readable_scripts_unescaped():
    assert json_text({"name": "流 é"}, indent=None) == '{"name": "流 é"}'
