"""Tool search: a BM25 index over a composition's operations, and the search tool's arguments.

Pure functions and one immutable index over plain data (standard library only).

The index
---------

:class:`ToolIndex` ranks operations by BM25 (k1 = 1.2, b = 0.75) over one bag of words
per operation: its tool name (counted :data:`NAME_WEIGHT` times, so a name match
outweighs a word of a long description), its server's name, its description and the
names of its parameters (the ``inputSchema``'s top-level ``properties``).

It is built of one part per server: a part indexes one server's operations and depends
on nothing else, so it is built once per catalogue and shared by every composition that
lists the same operations (every session over that catalogue; a catalogue that changes
gets a new part). A composition's index only ties its parts together, each operation's
length against the composition's average, and a query sums each word's document count
over the parts, so the ranking is BM25 over the whole composition, exactly. On the
benchmark's 10,000 operations from 50 servers (benchmarks/bench_search.py) a new
composition's index takes a few milliseconds and building every part about half a
second on a loaded 2-core machine.

It is a small BM25 of our own rather than SQLite's FTS5: the tokens must split
``camelCase``, ``snake_case``, dots and slashes, which FTS5's tokenisers do not, a stdio
host never loads ``sqlite3`` for it, and measured side by side an FTS5 table answered a
query several times slower (queries come at every search, a part is built once).

Server text is data and bounded here: a description is cut to
:data:`~albedo_actors.catalogue.naming.MAX_DESCRIPTION` characters before it is
tokenised, at most :data:`MAX_TOKENS` words of an operation are indexed and a word is
at most :data:`MAX_TOKEN` characters, so a hostile description costs the index no more
than an ordinary one.

Tokens
------

:func:`tokens`: ``readTextFile``, ``read_text_file``, ``read-text-file``,
``fs.read.text`` and ``fs/read/text`` all give ``read``, ``text``, ``file``;
words are lower-cased, a few English stop words are dropped and a plural ``s`` is
taken off (``files`` finds ``file``, ``numbers`` finds ``number``).

The search tool
---------------

:data:`SEARCH_TOOL` (``mcp_search_tools``) is what a session over its budget
advertises instead of the operations left out; it cannot collide with an advertised
name (those end in ``_`` and eight hexadecimal digits). :func:`search_arguments`
validates its arguments: ``query`` a non-empty string of at most :data:`MAX_QUERY`
characters, ``limit`` a whole number, clamped to 1 … :data:`MAX_LIMIT`
(default :data:`DEFAULT_LIMIT`). Every text of its result (:func:`found`: the name,
server, operation, description and every string of the inputSchema) is escaped by the
printable-text rule, in the JSON text and in ``structuredContent`` alike.
"""

from __future__ import annotations

import heapq
import math
import re
from collections import Counter
from itertools import chain, groupby, islice, repeat
from operator import attrgetter, is_, itemgetter
from typing import Any, Iterable, Mapping, Sequence

from .naming import MAX_DESCRIPTION, Advertised
from ..wire.text import printable

SEARCH_TOOL = "mcp_search_tools"
MAX_QUERY = 1000  # characters of a query
DEFAULT_LIMIT = 10
MAX_LIMIT = 50
MAX_TOKENS = 512  # words indexed per operation
MAX_TOKEN = 64  # characters of one word
NAME_WEIGHT = 3
K1, B = 1.2, 0.75

SEARCH_DESCRIPTION = (
    "Search the MCP tools this session has but does not list here. Give a few words of what you want "
    "to do (query); the result lists the best matching tools (name, description, inputSchema), and each "
    "listed name can be called at once."
)
SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "what the tool should do, in a few words", "maxLength": MAX_QUERY},
        "limit": {"type": "integer", "description": f"how many tools to list (1 to {MAX_LIMIT})",
                  "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
    },
    "required": ["query"],
}

_WORD = re.compile(r"[A-Z]{2,}s(?![a-z])|[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+|[^\W\d_]+")
_STOP = frozenset("a an and are as at be by for from in into is it of on or the this that to with".split())


# ASCII that is not a letter or a digit separates chunks (snake_case, dots, slashes, dashes,
# controls); str.translate and str.split do it in C. Other text is split by _WORD in a chunk.
_SEPARATE = {code: " " for code in range(128) if not chr(code).isalnum()}
_SPLIT_LIMIT = 200_000  # chunks remembered; past that the memo starts again
MAX_CHUNK_WORDS = 8  # words of one chunk (a camelCase run) at most


class _Memo(dict):
    """chunk -> its words (camelCase split, stop words dropped, plurals taken off), memoised:
    looked up from C (``map``), so a chunk seen before costs no Python frame."""

    def __missing__(self, chunk: str) -> tuple[str, ...]:
        out = []
        for part in _WORD.findall(chunk[:MAX_TOKEN * 4]):
            word = part.lower()[:MAX_TOKEN]
            if word in _STOP:
                continue
            if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
                word = word[:-1]
            out.append(word)
        words = tuple(out[:MAX_CHUNK_WORDS])
        if len(self) >= _SPLIT_LIMIT:
            self.clear()
        self[chunk] = words
        return words


_SPLIT = _Memo()
_split = _SPLIT.__getitem__


def tokens(text: str, limit: int = MAX_TOKENS) -> list[str]:
    """The words of ``text`` as the index counts them (at most ``limit`` of them)."""
    out: list[str] = []
    for chunk in text.translate(_SEPARATE).split():
        out += _split(chunk)
        if len(out) >= limit:
            return out[:limit]
    return out


def _counts(item: Advertised) -> tuple[Counter[str], int]:
    """An operation's words and how often each occurs, and how many in all (at most MAX_TOKENS)."""
    schema = item.input_schema if isinstance(item.input_schema, dict) else {}
    properties = schema.get("properties")
    parameters = " ".join(str(key)[:MAX_TOKEN] for key in list(properties)[:64]) if isinstance(properties, dict) else ""
    description = item.description[:MAX_DESCRIPTION] if isinstance(item.description, str) else ""
    name = item.operation[:MAX_TOKEN * 4]
    # One pass: the name NAME_WEIGHT times, then the server, the parameters, the description.
    text = " ".join((*(name,) * NAME_WEIGHT, item.server[:MAX_TOKEN * 4], parameters, description))
    counts = Counter(islice(chain.from_iterable(map(_split, text.translate(_SEPARATE).split())), MAX_TOKENS))
    return counts, sum(counts.values())


def _words(item: Advertised) -> list[str]:
    """The words :func:`_counts` counts, as one list (for the tests and the benchmark's scan)."""
    counts, _total = _counts(item)
    return list(counts.elements())


class _Part:
    """One server's operations indexed: per word, the operations (numbers within the
    part) that hold it and how often, and each operation's length in words. Depends on
    nothing but these operations, so every composition that lists the same operations
    (every session over the same catalogue) shares it."""

    __slots__ = ("operations", "postings", "lengths")

    def __init__(self, operations: tuple[Advertised, ...]) -> None:
        self.operations = operations
        counted = [_counts(item) for item in operations]
        self.lengths = [length for _counts_, length in counted]
        # Postings without a Python step per (word, operation): every pair flattened and
        # sorted by word in C, then cut into one slice per word.
        words = list(chain.from_iterable(counts for counts, _length in counted))
        numbers = list(chain.from_iterable(repeat(number, len(counts)) for number, (counts, _length) in enumerate(counted)))
        times = list(chain.from_iterable(counts.values() for counts, _length in counted))
        postings: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        if words:
            order = sorted(range(len(words)), key=words.__getitem__)
            pick = itemgetter(*order) if len(order) > 1 else (lambda values: (values[order[0]],))
            words_sorted, numbers_sorted, times_sorted = pick(words), pick(numbers), pick(times)
            start = 0
            for word, group in groupby(words_sorted):
                end = start + sum(1 for _ in group)
                postings[word] = (numbers_sorted[start:end], times_sorted[start:end])
                start = end
        self.postings = postings

    def holds(self, operations: Sequence[Advertised]) -> bool:
        """Whether this part indexes exactly ``operations`` (the same objects, in order)."""
        return len(operations) == len(self.operations) and all(map(is_, operations, self.operations))


# Each server's part last built, by server name: a catalogue's operations are the same
# objects until the catalogue changes (catalogue/naming.py's advertise() keeps them), so
# a new session's composition indexes only what changed. Bounded like advertise()'s.
_PARTS: dict[str, _Part] = {}
_PARTS_LIMIT = 4096


def _part(server: str, operations: tuple[Advertised, ...]) -> _Part:
    part = _PARTS.get(server)
    if part is None or not part.holds(operations):
        part = _Part(operations)
        if len(_PARTS) >= _PARTS_LIMIT and server not in _PARTS:
            _PARTS.clear()
        _PARTS[server] = part
    return part


class ToolIndex:
    """A BM25 index over ``operations``, built once (immutable afterwards, so any thread may search).

    Built of one :class:`_Part` per server (a run of operations of one server), reused
    from the last composition that listed the same operations; what is built here for
    the composition is only what ties the parts together: each operation's length
    normalisation against the composition's average length."""

    __slots__ = ("operations", "_parts", "_norms", "_total")

    def __init__(self, operations: Sequence[Advertised]) -> None:
        self.operations = tuple(operations)
        parts: list[tuple[int, _Part]] = []
        base = 0
        for server, run in groupby(self.operations, key=attrgetter("server")):
            items = tuple(run)
            parts.append((base, _part(server, items)))
            base += len(items)
        lengths = list(chain.from_iterable(part.lengths for _base, part in parts))
        average = (sum(lengths) / len(lengths)) if lengths else 1.0
        scale = K1 * B / (average or 1.0)
        self._norms = [K1 * (1 - B) + scale * length for length in lengths]
        self._parts = tuple(parts)
        self._total = len(self.operations)

    def search(self, query: str, limit: int = DEFAULT_LIMIT) -> list[Advertised]:
        """The best ``limit`` operations for ``query``, best first (ties in listing order)."""
        scores: dict[int, float] = {}
        norms, total = self._norms, self._total
        for word in set(tokens(query[:MAX_QUERY], 64)):
            found = [(base, posted) for base, part in self._parts if (posted := part.postings.get(word)) is not None]
            if not found:
                continue
            holding = sum(len(posted[0]) for _base, posted in found)
            weight = math.log(1 + (total - holding + 0.5) / (holding + 0.5)) * (K1 + 1)
            get = scores.get
            for base, (numbers, counts) in found:
                for number, count in zip(numbers, counts):
                    number += base
                    scores[number] = get(number, 0.0) + weight * count / (count + norms[number])
        if len(scores) > limit:
            # The limit-th best score (a plain float heap, no key), then only what reaches it
            # sorted: far fewer steps than ordering every matching operation.
            threshold = heapq.nlargest(limit, scores.values())[-1]
            best = sorted((-score, number) for number, score in scores.items() if score >= threshold)
        else:
            best = sorted((-score, number) for number, score in scores.items())
        return [self.operations[number] for _score, number in best[:limit]]


def search_arguments(arguments: Any) -> tuple[str, int]:
    """The search tool's ``(query, limit)``, validated; raises ValueError with one line saying what to send."""
    if not isinstance(arguments, Mapping):
        raise ValueError(f"{SEARCH_TOOL} takes an object of arguments: {{\"query\": \"...\", \"limit\": {DEFAULT_LIMIT}}}")
    unknown = sorted(str(key)[:40] for key in arguments if key not in ("query", "limit"))
    if unknown:
        raise ValueError(f"{SEARCH_TOOL} takes only 'query' and 'limit', not {unknown[0]!r}")
    query = arguments.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ValueError(f"{SEARCH_TOOL} needs 'query', a few words of what the tool should do")
    if len(query) > MAX_QUERY:
        raise ValueError(f"{SEARCH_TOOL}: 'query' is {len(query)} characters, over {MAX_QUERY}; give a few words")
    limit = arguments.get("limit", DEFAULT_LIMIT)
    if isinstance(limit, float) and limit.is_integer():
        limit = int(limit)
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ValueError(f"{SEARCH_TOOL}: 'limit' must be a whole number from 1 to {MAX_LIMIT}")
    return query, min(max(limit, 1), MAX_LIMIT)


def search_tool() -> Advertised:
    """The search tool as the model sees it."""
    return Advertised(SEARCH_TOOL, "", "tool", SEARCH_TOOL, SEARCH_DESCRIPTION, SEARCH_SCHEMA)


def found(items: Iterable[Advertised]) -> list[dict[str, Any]]:
    """Search results as data: advertised name, server, operation, description (bounded), inputSchema.

    Every text in them is escaped by the printable-text rule (wire/text.py): the name,
    server, operation and description as one line each, and every string of the
    inputSchema, its keys too. A result is the model's text, and the server name comes
    from a configuration and the tool's name and schema from a server, so none of them
    may reach the model raw."""
    return [{"name": printable(item.name, one_line=True), "server": printable(item.server, one_line=True),
             "operation": printable(item.operation, one_line=True),
             "description": printable(item.description, one_line=True, limit=MAX_DESCRIPTION),
             "inputSchema": _escaped(item.input_schema)} for item in items]


def _escaped(value: Any) -> Any:
    """``value`` (JSON data) with every string, keys included, escaped; recursive, as an
    advertised schema is at most MAX_SCHEMA_DEPTH levels deep (catalogue/naming.py)."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(key): _escaped(sub) for key, sub in value.items()}
    if isinstance(value, list):
        return [_escaped(sub) for sub in value]
    return value


def tool_result(items: Iterable[Advertised], query: str) -> dict[str, Any]:
    """The search tool's result (a CallToolResult): the matches as JSON text and as structuredContent."""
    import json

    tools = found(items)
    if not tools:
        text = f"no MCP tool matches '{printable(query, one_line=True, limit=80)}'; try other words"
        return {"content": [{"type": "text", "text": text}], "structuredContent": {"tools": []}}
    return {"content": [{"type": "text", "text": json.dumps({"tools": tools}, ensure_ascii=True)}],
            "structuredContent": {"tools": tools}}


def error_result(message: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": message}], "isError": True}


__all__ = ["SEARCH_TOOL", "ToolIndex", "search_arguments", "search_tool", "tokens", "tool_result"]
