"""Untrusted text made safe to show: the one escaping rule for everything albedo prints.

Pure code, standard library only. Everything a server sends (tool names, descriptions,
results, error messages, its stderr) is data; printed raw, a few code points would be
commands to the terminal or would change what the reader sees. :func:`printable` is the
one place that decides which, and every printed line (the command line's lists,
results, error lines and warnings, ``--verbose`` logs, the errors' own ``str()``) and
every MCP context line given to the model goes through it.

The rule
--------
These code points are escaped:

- the C0 controls U+0000-U+001F except LF and TAB (``one_line=True``: LF and TAB too),
  and DEL U+007F. ESC starts ANSI/ECMA-48 sequences (OSC ``ESC ] 0 ; title BEL`` sets
  the window title, CSI ``ESC [ 2 J`` clears the screen); BEL rings; CR and BS
  overwrite what was printed before them on the line;
- the C1 controls U+0080-U+009F (ECMA-48 section 5.3: U+009B is CSI, U+009D is OSC,
  each a one-character ESC sequence for a terminal that takes 8-bit controls);
- the Unicode bidirectional embedding, override and isolate controls U+202A-U+202E and
  U+2066-U+2069 (UAX #9; the "Trojan Source" attack, CVE-2021-42574): they reorder how
  the rest of the line is displayed, so a reader would see other text than was sent.
  The implicit marks (U+200E, U+200F, U+061C) are left alone: they reorder nothing
  but neutral characters next to them, and right-to-left text needs them;
- lone surrogates U+D800-U+DFFF: they have no UTF-8 form, so printing one would fail.

Each is written as Python's ``repr()`` writes it: ``\\t``, ``\\n`` and ``\\r``; ``\\xhh``
for other code points up to U+00FF (``\\x1b``, ``\\x7f``, ``\\x9b``); ``\\uhhhh`` above
(``\\u202e``, ``\\ud800``), lower-case hexadecimal. Everything else, including every
printable character of any script, emoji and their joiners, passes unchanged.

A backslash is not doubled, so ordinary text (paths, regular expressions) reads as
sent and escaping twice changes nothing (``printable(printable(t)) == printable(t)``).
The price is that printed text is for reading, not for parsing back: ``\\x1b`` on screen
may be the four characters a server sent. The exact text is in ``--json`` output
(:func:`json_text`), which escapes the same code points as JSON escapes and so stays
exact JSON that reads back to the very strings the server sent.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .jsonrpc import Json

__all__ = ["printable", "json_text", "ELLIPSIS"]

ELLIPSIS = "…"

_BIDI = "\u202a-\u202e\u2066-\u2069"
_SURROGATES = "\ud800-\udfff"
# Written from code points, never from the characters themselves, so that this file
# holds none of them. Compiled at first use: each takes most of a millisecond (a charset
# that reaches the surrogates), which ``import albedo_actors.runtime`` need not pay.
_SOURCES = {
    "unsafe": f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}{_SURROGATES}]",
    "unsafe_line": f"[\x00-\x1f\x7f-\x9f{_BIDI}{_SURROGATES}]",
    # What json.dumps(ensure_ascii=False) leaves raw but printable() escapes (json
    # already writes every C0 control as an escape, RFC 8259 section 7).
    "json_unsafe": f"[\x7f-\x9f{_BIDI}{_SURROGATES}]",
}
_PATTERNS: dict[str, re.Pattern[str]] = {}


def _pattern(name: str) -> re.Pattern[str]:
    pattern = _PATTERNS.get(name)
    if pattern is None:  # two threads may both compile it: the same pattern either way
        pattern = _PATTERNS[name] = re.compile(_SOURCES[name])
    return pattern


_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(ch: str) -> str:
    short = _SHORT.get(ch)
    if short is not None:
        return short
    code = ord(ch)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def _escape_match(match: re.Match[str]) -> str:
    return _escape(match.group())


def printable(text: Any, *, one_line: bool = False, limit: int | None = None) -> str:
    """``text`` with every unsafe code point escaped, by the rule in the module docstring.

    ``one_line``: LF and TAB are escaped too (for error and warning lines, which are
    one line each). ``limit``: at most that many characters come out; a longer result
    is cut and ends with "…", and the cut never splits an escape. A non-string is
    shown as its ``str()``.
    """
    if not isinstance(text, str):
        text = str(text)
    pattern = _pattern("unsafe_line" if one_line else "unsafe")
    if limit is None:
        return pattern.sub(_escape_match, text)
    if limit < 1:
        return ""
    # Every character comes out as at least one, so the first ``limit`` + 1 decide.
    head = text[: limit + 1]
    escaped = pattern.sub(_escape_match, head)
    if len(escaped) <= limit and len(head) == len(text):
        return escaped
    out: list[str] = []
    size = 0
    room = limit - len(ELLIPSIS)
    for ch in head:
        piece = _escape(ch) if pattern.match(ch) else ch
        if size + len(piece) > room:
            break
        out.append(piece)
        size += len(piece)
    return "".join(out) + ELLIPSIS


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def json_text(value: Json, *, indent: int | None = 2) -> str:
    """``value`` as JSON text that is safe to print and exact.

    ``json.dumps`` with ``ensure_ascii=False`` (every script stays readable), then the
    code points :func:`printable` escapes that JSON leaves raw (DEL, C1, the bidi
    controls, lone surrogates) written as ``\\uhhhh`` escapes. They can only stand
    inside strings (outside them JSON text is ASCII punctuation, digits and letters),
    where an escape means the same character: ``json.loads`` gives back ``value``
    exactly, lone surrogates included, and the text never holds one raw.

    Raises:
        TypeError, ValueError: ``value`` is not JSON data (as json.dumps).
    """
    return _pattern("json_unsafe").sub(_json_escape, json.dumps(value, indent=indent, ensure_ascii=False))
