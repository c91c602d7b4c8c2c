"""Output schemas' patterns (issue 23), pure: catalogue/patterns.py, ECMA-262 read by RE2.

Each case is what ECMA-262 ("u" flag, as JSON Schema 2020-12 core 6.4 asks) says the
pattern matches; several are where Python's ``re`` says otherwise.
"""

from __future__ import annotations

import pytest

from albedo_actors.catalogue import patterns


def search(pattern: str, text: str) -> bool:
    regex = patterns.compiled(pattern)
    assert regex is not None, patterns.problem(pattern)
    return regex.search(patterns.encode(text))


@pytest.mark.parametrize(("pattern", "text", "matches"), [
    # Unanchored, as JSON Schema's pattern is.
    ("b", "abc", True), ("^b", "abc", False), ("c$", "abc", True),
    # $ is the end of the input only (Python's re also matches before a final newline).
    ("^abc$", "abc\n", False),
    # \d and \w are ASCII (Python's re takes any Unicode digit and letter).
    ("^\\d$", "\u0663", False), ("^\\d+$", "2026", True), ("^\\w$", "\u00e9", False), ("^\\w+$", "a_1", True),
    # \s is ECMA-262's white space and line terminators (RE2's own \s is ASCII only).
    ("^\\s$", "\u00a0", True), ("^\\s$", "\ufeff", True), ("^\\s$", "\u2028", True), ("^\\s$", "\u3000", True),
    ("^\\s$", "\x0b", True), ("^\\S$", "\u00a0", False), ("^\\S$", "x", True),
    ("^[\\s]$", "\u2029", True), ("^[^\\s]$", "\u2029", False), ("^[\\S]$", "\u2029", False), ("^[\\Sx]$", "x", True),
    # "." is one code point that is not a line terminator.
    ("^.$", "\n", False), ("^.$", "\r", False), ("^.$", "\u2028", False), ("^.$", "\U0001F600", True), ("^.$", "\u00e9", True),
    # [] matches nothing and [^] any one code point.
    ("a[]", "a", False), ("^[^]$", "\n", True),
    # \u escapes, a surrogate pair as one code point, \u{...}, \x, \c, \0, [\b].
    ("^\\u00e9$", "\u00e9", True), ("^\\uD83D\\uDE00$", "\U0001F600", True), ("^\\u{1F600}$", "\U0001F600", True),
    ("^\\x41$", "A", True), ("^\\cJ$", "\n", True), ("^\\0$", "\x00", True), ("^[\\b]$", "\x08", True),
    ("\\bword\\b", "a word.", True), ("\\Bord", "a word", True),
    # Unicode properties, by short and long name, and scripts.
    ("^\\p{L}+$", "\u00e9t\u00e9", True), ("^\\p{Letter}+$", "abc", True), ("^\\p{gc=Lu}$", "A", True),
    ("^\\p{General_Category=Decimal_Number}$", "\u0663", True), ("^\\p{Script=Greek}$", "\u03b1", True),
    ("^\\p{sc=Greek}$", "a", False), ("^\\P{L}$", "1", True), ("^\\p{LC}$", "a", True), ("^[\\p{LC}1]$", "1", True),
    ("^\\P{LC}$", "a", False),
    # A named group is a group; "[" inside a class is a literal (not a POSIX class).
    ("^(?<year>\\d{4})-(?<month>\\d{2})$", "2026-05", True), ("^[[:alpha:]]$", "a", False), ("^[[:alpha:]]+$", ":]", True),
    ("^\\/\\-\\.$", "/-.", True), ("^[a\\-z]+$", "-", True),
    # Ordinary patterns, as servers write them.
    ("^[a-z]+$", "abc", True), ("^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$", "a@b.example", True),
    ("^\\d{4}-\\d{2}-\\d{2}$", "2026-05-01", True), ("^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
                                                     "123e4567-e89b-12d3-a456-426614174000", True),
])
def test_a_pattern_matches_what_ecma_262_says_it_matches(pattern, text, matches):
    assert search(pattern, text) is matches


@pytest.mark.parametrize(("pattern", "why"), [
    ("(a)\\1", "a backreference"), ("(?<n>a)\\k<n>", "a backreference"), ("(a)\\12", "a backreference"),
    ("(?=a)", "a lookahead"), ("a(?!b)", "a lookahead"), ("(?<=a)b", "a lookbehind"), ("(?<!a)b", "a lookbehind"),
    ("\\01", "an octal escape"), ("(?s:.)", "a dotAll modifier"), ("\\p{Script_Extensions=Latin}", "the property 'Script_Extensions'"),
    ("\\pL", "\\p without a {name}"), ("[a", "an unterminated character class"), ("a\\", "a trailing backslash"),
    ("\\u12", "a \\u escape without four hex digits"), ("\\x4", "a \\x escape without two hex digits"),
    ("a{1001}", "RE2: invalid repetition size: {1001}"), ("(", "RE2: missing ): ("), ("\\p{Cn}", "RE2: invalid character class range: \\p{Cn}"),
    ("\\p{L}{1000}", "RE2: pattern too large - compile failed"),
])
def test_a_pattern_re2_cannot_run_is_not_compiled_and_says_why(pattern, why):
    assert patterns.compiled(pattern) is None
    assert patterns.problem(pattern) == why


def test_a_match_costs_at_most_text_bytes_times_program_size():
    regex = patterns.compiled("^(a|a?)+$")
    assert regex is not None and regex.size > 1
    data = patterns.encode("a" * 40 + "!")
    assert regex.work(data) == (len(data) + 1) * regex.size and regex.search(data) is False
    # A lone surrogate (JSON allows "\ud800") is three bytes RE2 can read.
    assert patterns.encode("\ud800") == b"\xed\xa0\x80" and search("^x", "x\ud800")


def test_the_cache_is_bounded_and_compiles_each_source_once():
    first = patterns.compiled("^cached[0-9]$")
    assert patterns.compiled("^cached[0-9]$") is first
    for i in range(patterns.CACHE_LIMIT + 1):
        patterns.compiled(f"^fill{i}$")
    assert len(patterns._CACHE) <= patterns.CACHE_LIMIT


def test_the_compiled_patterns_kept_are_the_most_recently_used_and_at_most_the_limit():
    """A server chooses its patterns and the results matched against them, and RE2 fills
    each pattern's DFA memory as it matches (up to patterns.MAX_MEM): the cache keeps
    CACHE_LIMIT of them, least recently used out first, so what servers can make the host
    hold is CACHE_LIMIT x MAX_MEM, however many patterns they send."""
    from albedo_actors.catalogue import patterns

    data = patterns.encode("ab" * 20_000)
    kept_hot = "^hot[a-z]*$"
    for i in range(4 * patterns.CACHE_LIMIT):
        assert patterns.compiled(f"[a-q][^u-z]{{{10 + i}}}x").search(data) is False
        assert patterns.compiled(kept_hot) is not None  # used again and again: never evicted
        assert len(patterns._CACHE) <= patterns.CACHE_LIMIT
    assert kept_hot in patterns._CACHE
    assert f"[a-q][^u-z]{{{10 + 4 * patterns.CACHE_LIMIT - 1}}}x" in patterns._CACHE
    assert "[a-q][^u-z]{10}x" not in patterns._CACHE
    assert patterns.CACHE_LIMIT * patterns.MAX_MEM <= 32 << 20
    # google-re2's module keeps an LRU of 128 compiled objects of its own: it must keep
    # none of ours, or what we evict stays alive there (100 patterns held 72 MiB so).
    import re2

    assert re2._Regexp._make.cache_info().currsize == 0
