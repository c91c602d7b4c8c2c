"""Server patterns (JSON Schema ``pattern``), matched in linear time by RE2.

Pure code over strings; ``re2`` (google-re2) is imported at the first pattern compiled,
never at import. Nothing here runs Python's ``re`` on a server's pattern: ``re``
backtracks, in C, holding the GIL, so one pattern such as ``(a|a)*$`` against a
40-character string would stop every thread of the host for days (issue 23).

The rule:

- A pattern is an ECMA-262 regular expression (2020-12 core section 6.4, "u" flag;
  draft-07 validation 4.3). :func:`translate` rewrites what RE2 reads differently or not
  at all: ``\\s``/``\\S`` (ECMA's white space and line terminators, where RE2's ``\\s``
  is ASCII only), ``.`` (any code point but a line terminator), ``\\uXXXX`` (surrogate
  pairs joined), ``\\u{...}``, ``\\cX``, ``\\0``, ``[]`` and ``[^]``, ``\\b`` in a class,
  ``[`` in a class, named groups and the long ``\\p{...}`` names. ``\\d``, ``\\w``,
  ``\\b`` are ASCII in both. What ECMA-262 does not define is passed on, and RE2 reads
  it as Perl does (``\\A``, ``\\z``) or refuses it.
- A pattern RE2 cannot run (a backreference, a lookaround, a repeat over 1,000, a
  program over :data:`MAX_MEM`, more than :data:`MAX_PATTERN_CHARS` characters) is
  :func:`compiled` as None with the reason, :func:`problem`; where it is used it counts
  as matching (a check never reports what it could not test), and the schema's other
  keywords are still checked.
- A match costs at most about its text's UTF-8 bytes times the pattern's program size
  (RE2's NFA, when its DFA runs out of memory): :meth:`Regex.work`. The caller bounds
  that against the time it has (:data:`WORK_PER_SECOND`). RE2 releases the GIL while
  it matches, so a long match never stops another thread.

Compiled patterns are kept per source text, the :data:`CACHE_LIMIT` most recently used
(each at most :data:`MAX_MEM` of program and DFA memory, which RE2 fills as it matches):
at most 32 MiB that servers' patterns and results can make the host hold, however many
patterns they send. One more evicts the least recently used, which compiles again
when it is next needed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Final

MAX_MEM: Final = 2 << 20  # bytes of RE2 program and DFA memory per pattern (RE2's own bound)
# Characters of one pattern: translate() reads them in Python, about 0.3 us each, and a
# patternProperties name is not among a schema's counted text (schemas.MAX_SCHEMA_CHARS).
MAX_PATTERN_CHARS: Final = 8192
CACHE_LIMIT: Final = 16  # x MAX_MEM: 32 MiB at most
# A conservative rate for RE2's slowest path: its NFA costs 3-6 ns per text byte per
# program instruction on a shared 2-CPU machine (benchmarks/bench_schemas.py prints it);
# 20 ns leaves room for a slower or busier one.
WORK_PER_SECOND: Final = 50_000_000

__all__ = ["Regex", "Unsupported", "compiled", "problem", "translate", "MAX_MEM", "WORK_PER_SECOND"]


class Unsupported(ValueError):
    """A pattern that cannot be matched in linear time, or is not a regular expression."""


class Regex:
    """One compiled pattern: :meth:`search` (JSON Schema's unanchored match) and its cost."""

    __slots__ = ("source", "size", "_regex")

    def __init__(self, source: str, regex: Any) -> None:
        self.source = source
        self._regex = regex
        self.size = max(1, int(regex.programsize))

    def work(self, data: bytes) -> int:
        """The most work a match of ``data`` can cost (bytes times program instructions)."""
        return (len(data) + 1) * self.size

    def search(self, data: bytes) -> bool:
        """Whether the pattern matches anywhere in ``data`` (UTF-8); linear time, GIL released."""
        return self._regex.search(data) is not None


def compiled(source: str) -> Regex | None:
    """``source`` compiled for RE2, or None when it cannot be (see :func:`problem`); cached."""
    return _entry(source)[0]


def problem(source: str) -> str | None:
    """Why ``source`` cannot be matched in linear time (one short phrase), or None."""
    return _entry(source)[1]


def encode(text: str) -> bytes:
    """``text`` as RE2 reads it: UTF-8, a lone surrogate (JSON allows ``"\\ud800"``) kept
    as its three bytes, which match no class that names code points."""
    return text.encode("utf-8", "surrogatepass")


# -- translation: ECMA-262 to RE2 ------------------------------------------------------


def _ranges(pairs: tuple[tuple[int, int], ...]) -> str:
    return "".join(f"\\x{{{lo:X}}}" if lo == hi else f"\\x{{{lo:X}}}-\\x{{{hi:X}}}" for lo, hi in pairs)


def _complement(pairs: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    out, start = [], 0
    for lo, hi in pairs:
        if lo > start:
            out.append((start, lo - 1))
        start = hi + 1
    if start <= 0x10FFFF:
        out.append((start, 0x10FFFF))
    return tuple(out)


# ECMA-262 WhiteSpace and LineTerminator (sections 12.2, 12.3), what its \s matches.
_SPACE = ((0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
          (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF))
_SPACE_IN: Final = _ranges(_SPACE)
_NOT_SPACE_IN: Final = _ranges(_complement(_SPACE))
_DOT: Final = "[^\\n\\r\\x{2028}\\x{2029}]"  # ECMA-262 22.2.2.8: "." is any but a line terminator
_ANY: Final = "[\\x{0}-\\x{10FFFF}]"  # [^]
_NOTHING: Final = "[^\\x{0}-\\x{10FFFF}]"  # []
_HEX = frozenset("0123456789abcdefABCDEF")
_DIGITS = frozenset("0123456789")
_SYNTAX = frozenset("^$\\.*+?()[]{}|/-")

# ECMA-262 General_Category long names (Unicode PropertyValueAliases.txt) -> the short
# names RE2 knows. Cased_Letter (LC) is spelled out; Unassigned (Cn) RE2 does not have.
_CATEGORIES: Final = {
    "Other": "C", "Control": "Cc", "cntrl": "Cc", "Format": "Cf", "Private_Use": "Co", "Surrogate": "Cs",
    "Letter": "L", "Lowercase_Letter": "Ll", "Modifier_Letter": "Lm", "Other_Letter": "Lo",
    "Titlecase_Letter": "Lt", "Uppercase_Letter": "Lu", "Mark": "M", "Combining_Mark": "M",
    "Spacing_Mark": "Mc", "Enclosing_Mark": "Me", "Nonspacing_Mark": "Mn", "Number": "N",
    "Decimal_Number": "Nd", "digit": "Nd", "Letter_Number": "Nl", "Other_Number": "No",
    "Punctuation": "P", "punct": "P", "Connector_Punctuation": "Pc", "Dash_Punctuation": "Pd",
    "Close_Punctuation": "Pe", "Final_Punctuation": "Pf", "Initial_Punctuation": "Pi",
    "Other_Punctuation": "Po", "Open_Punctuation": "Ps", "Symbol": "S", "Currency_Symbol": "Sc",
    "Modifier_Symbol": "Sk", "Math_Symbol": "Sm", "Other_Symbol": "So", "Separator": "Z",
    "Line_Separator": "Zl", "Paragraph_Separator": "Zp", "Space_Separator": "Zs",
}
_CASED = ("Lu", "Ll", "Lt")


def translate(source: str) -> str:
    """``source`` (ECMA-262, "u" flag) as an RE2 pattern with the same matches.

    Raises:
        Unsupported: a backreference or lookaround, which RE2 cannot run, or an escape
            or class that ECMA-262 itself refuses.
    """
    out: list[str] = []
    i, n = 0, len(source)
    while i < n:
        ch = source[i]
        if ch == "\\":
            piece, i = _escape(source, i + 1, False)
        elif ch == "[":
            piece, i = _class(source, i + 1)
        elif ch == ".":
            piece, i = _DOT, i + 1
        elif ch == "(" and source.startswith("(?", i):
            piece, i = _group(source, i)
        else:
            piece, i = ch, i + 1
        out.append(piece)
    return "".join(out)


def _group(source: str, i: int) -> tuple[str, int]:
    for opening, what in (("(?=", "a lookahead"), ("(?!", "a lookahead"), ("(?<=", "a lookbehind"), ("(?<!", "a lookbehind")):
        if source.startswith(opening, i):
            raise Unsupported(what)
    if source.startswith("(?<", i):  # a named group: checking needs no names (RE2 runs without captures)
        close = source.find(">", i + 3)
        if close < 0:
            raise Unsupported("an unterminated group name")
        return "(?:", close + 1
    flags, off = i + 2, False  # ES2025 modifiers, (?ims-ims:...): RE2 reads them, but "." is translated already
    while flags < len(source) and source[flags] in "ims-":
        if source[flags] == "s" and not off:
            raise Unsupported("a dotAll modifier")
        off = off or source[flags] == "-"
        flags += 1
    return "(?", i + 2


def _class(source: str, i: int) -> tuple[str, int]:
    n = len(source)
    negate = source.startswith("^", i)
    if negate:
        i += 1
    if i < n and source[i] == "]":  # ECMA-262: [] matches nothing, [^] any one code point
        return (_ANY if negate else _NOTHING), i + 1
    parts = ["[^" if negate else "["]
    while i < n and source[i] != "]":
        ch = source[i]
        if ch == "\\":
            piece, i = _escape(source, i + 1, True)
        elif ch == "[":  # a literal in ECMA-262; RE2 would read "[:alpha:]" as a POSIX class
            piece, i = "\\[", i + 1
        else:
            piece, i = ch, i + 1
        parts.append(piece)
    if i >= n:
        raise Unsupported("an unterminated character class")
    parts.append("]")
    return "".join(parts), i + 1


def _escape(source: str, i: int, in_class: bool) -> tuple[str, int]:
    """The RE2 text for the escape whose letter is at ``source[i]``, and where it ends."""
    n = len(source)
    if i >= n:
        raise Unsupported("a trailing backslash")
    ch = source[i]
    if ch in "dDwW" or ch in "tnvfr":
        return "\\" + ch, i + 1
    if ch == "s":
        return (_SPACE_IN if in_class else f"[{_SPACE_IN}]"), i + 1
    if ch == "S":
        return (_NOT_SPACE_IN if in_class else f"[{_NOT_SPACE_IN}]"), i + 1
    if ch in "bB":
        if not in_class:
            return "\\" + ch, i + 1
        if ch == "b":
            return "\\x{8}", i + 1  # a backspace inside a class
        raise Unsupported("\\B inside a character class")
    if ch == "0":
        if i + 1 < n and source[i + 1] in _DIGITS:
            raise Unsupported("an octal escape")
        return "\\x{0}", i + 1
    if ch in _DIGITS or ch == "k":  # RE2 would read \12 as octal; in ECMA-262 it is a group
        raise Unsupported("a backreference")
    if ch == "c":
        letter = source[i + 1] if i + 1 < n else ""
        if not ("a" <= letter <= "z" or "A" <= letter <= "Z"):
            raise Unsupported("a \\c escape without a letter")
        return f"\\x{{{ord(letter) % 32:X}}}", i + 2
    if ch == "x":
        digits = source[i + 1:i + 3]
        if len(digits) != 2 or not set(digits) <= _HEX:
            raise Unsupported("a \\x escape without two hex digits")
        return f"\\x{{{digits}}}", i + 3
    if ch == "u":
        code, end = _code_point(source, i + 1)
        return f"\\x{{{code:X}}}", end
    if ch in "pP":
        return _property(source, i, in_class)
    if ch in _SYNTAX:
        return "\\" + ch, i + 1
    # Not ECMA-262 ("u" refuses it): RE2 reads it as Perl does (\A, \z) or refuses it.
    return "\\" + ch, i + 1


def _code_point(source: str, i: int) -> tuple[int, int]:
    """The code point of ``\\u`` whose first character after the ``u`` is ``source[i]``."""
    if source.startswith("{", i):
        close = source.find("}", i + 1)
        digits = source[i + 1:close] if close > 0 else ""
        if not digits or len(digits) > 8 or not set(digits) <= _HEX or int(digits, 16) > 0x10FFFF:
            raise Unsupported("a \\u{...} escape that is not a code point")
        return int(digits, 16), close + 1
    digits = source[i:i + 4]
    if len(digits) != 4 or not set(digits) <= _HEX:
        raise Unsupported("a \\u escape without four hex digits")
    code, end = int(digits, 16), i + 4
    low = source[end + 2:end + 6] if source.startswith("\\u", end) else ""
    if 0xD800 <= code <= 0xDBFF and len(low) == 4 and set(low) <= _HEX and 0xDC00 <= int(low, 16) <= 0xDFFF:
        # "u" flag: a surrogate pair written as two escapes is one code point (22.2.1)
        return 0x10000 + ((code - 0xD800) << 10) + (int(low, 16) - 0xDC00), end + 6
    return code, end


def _property(source: str, i: int, in_class: bool) -> tuple[str, int]:
    kind = source[i]
    if not source.startswith("{", i + 1):
        raise Unsupported(f"\\{kind} without a {{name}}")
    close = source.find("}", i + 2)
    if close < 0:
        raise Unsupported(f"an unterminated \\{kind}{{...}}")
    name = source[i + 2:close]
    key, _, value = name.partition("=")
    if value:
        if key not in ("General_Category", "gc", "Script", "sc"):
            raise Unsupported(f"the property {key!r}")  # Script_Extensions and the rest: not in RE2
        name = value
    name = _CATEGORIES.get(name, name)
    if name in ("LC", "Cased_Letter"):
        if kind == "P" and in_class:
            raise Unsupported("\\P{LC} inside a character class")
        cased = "".join(f"\\p{{{c}}}" for c in _CASED)
        return (cased if in_class else f"[{'^' if kind == 'P' else ''}{cased}]"), close + 1
    return f"\\{kind}{{{name}}}", close + 1


# -- compiling and the cache ------------------------------------------------------------

_CACHE: OrderedDict[str, tuple[Regex | None, str | None]] = OrderedDict()  # least recently used first
_LOCK = threading.Lock()
_OPTIONS: list[Any] = []


def _entry(source: str) -> tuple[Regex | None, str | None]:
    if len(source) > MAX_PATTERN_CHARS:  # never kept: the cache holds no long text
        return None, f"longer than {MAX_PATTERN_CHARS} characters"
    with _LOCK:
        found = _CACHE.get(source)
        if found is not None:
            _CACHE.move_to_end(source)
            return found
    found = _compile(source)  # outside the lock: compiling may take milliseconds
    with _LOCK:
        _CACHE[source] = found  # two threads may both compile it: the same result either way
        _CACHE.move_to_end(source)
        while len(_CACHE) > CACHE_LIMIT:
            _CACHE.popitem(last=False)
    return found


def _compile(source: str) -> tuple[Regex | None, str | None]:
    try:
        text = translate(source)
    except Unsupported as exc:
        return None, str(exc)
    import re2  # google-re2: loaded at the first pattern compiled

    try:
        return Regex(source, re2.compile(text, _options())), None
    except re2.error as exc:
        why = exc.args[0] if exc.args else ""
        why = why.decode("utf-8", "replace") if isinstance(why, bytes) else str(why)
        return None, f"RE2: {why}" if why else "RE2 cannot compile it"
    finally:
        # re2.compile keeps its own LRU cache of 128 compiled objects (up to MAX_MEM each,
        # whatever we evict): ours is the one that decides what stays, so the module's
        # keeps nothing beyond what _CACHE refers to.
        re2.purge()


def _options() -> Any:
    if not _OPTIONS:
        import re2

        options = re2.Options()
        options.max_mem = MAX_MEM
        options.never_capture = True  # a yes-or-no match: no submatches to track
        options.log_errors = False  # RE2 would write each refused pattern to the host's stderr
        _OPTIONS.append(options)
    return _OPTIONS[0]
