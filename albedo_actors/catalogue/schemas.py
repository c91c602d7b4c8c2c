"""Output schemas: a tool's ``structuredContent`` checked against its ``outputSchema``.

Pure code over plain data; nothing here dials a server or opens a socket.

The rule (issue 16; 2026-07-28 server/tools "Structured content": the client SHOULD
validate, MUST NOT dereference network ``$ref``\\ s, SHOULD bound the cost):

- A tool that declares an ``outputSchema`` has the ``structuredContent`` of each of its
  results checked with ``jsonschema``, in the dialect its ``$schema`` names: JSON Schema
  2020-12 when it names none; 2019-09, draft-07, draft-06, draft-04 (and draft-03) when
  declared, by ``http`` or ``https`` and with or without the empty fragment ``#``. A
  ``$schema`` naming anything else is checked as 2020-12, with one warning at load.
- A check never blocks the result. Its problems come back as at most
  :data:`MAX_ERRORS` one-line strings of at most :data:`MAX_ERROR_CHARS` characters,
  each naming the JSON path (``$.items[2]: 'x' is not of type 'integer'``), escaped by
  the one printable-text rule (:func:`albedo_actors.wire.text.printable`). A missing
  ``structuredContent`` is one such problem. A result with ``isError: true`` is not
  checked (an error's structured content need not match the schema).
- ``$ref`` is followed only inside the schema itself and to the JSON Schema
  metaschemas shipped with ``jsonschema``; any other reference (``http://...``, a file)
  is never retrieved: that reference fails, and the check says so.
- Patterns (``pattern``, ``patternProperties``, and the ``additionalProperties`` and
  ``unevaluatedProperties`` that depend on them) are ECMA-262 and matched by RE2 in
  linear time (catalogue/patterns.py), never by Python's ``re``, which backtracks in C
  holding the GIL (issue 23: ``(a|a)*$`` against 40 characters would stop the host for
  days). A pattern RE2 cannot run (a backreference, a lookaround) counts as matching,
  with one warning at load; the rest of its schema is checked.
- The cost is bounded: a schema deeper than :data:`MAX_SCHEMA_DEPTH` levels, with more
  than :data:`MAX_SCHEMA_NODES` values, :data:`MAX_SCHEMA_CHARS` characters of text
  or :data:`MAX_SCHEMA_PATTERNS` distinct patterns is not used (one warning at load); a ``structuredContent`` with more than
  :data:`MAX_CONTENT_VALUES` values or deeper than :data:`MAX_CONTENT_DEPTH` levels is
  not checked (one problem says so). A check stops (one problem says so, after the
  problems found so far) after :data:`MAX_STEPS` keyword evaluations (``$ref`` fan-out),
  on a reference cycle, and at the call's deadline or :data:`MAX_CHECK_SECONDS`,
  whichever is sooner; it starts no match whose worst case could outlast that. Each
  keyword's own work is linear in the value it is given: ``uniqueItems`` and ``enum``
  compare JSON-equality keys in a set (jsonschema's own compare pairs: 9,000 objects
  took 113 s), ``unevaluated*`` look up what was evaluated in a set. A check runs on the
  caller's thread; nothing in it holds the GIL for long (RE2 releases it as it matches).

When the work is done:

- :func:`load_problem` is cheap (no ``jsonschema``) and runs where the catalogue's
  operations are built (catalogue/naming.py's ``advertise``: once per catalogue), so a
  saved catalogue of hundreds of servers is ready without compiling one schema.
- A catalogue a server has just listed (connection/discovery.py, on that server's own
  thread, never a session's) has every declared schema compiled by :func:`prepare`:
  one that fails its metaschema warns when the catalogue loads (where its operations
  are built, with the other schema warnings: :func:`compile_warning`); the validators
  are kept for that catalogue (:func:`remember`).
- A catalogue read from the store has its tools' validators compiled at each tool's
  first checked call (a catalogue is immutable: the saved layer hands out the same
  object for the same saved text), within that call's deadline (one that comes first
  stops it, and the next call compiles again); a schema that fails there warns at that
  call, unless the same warning was already given in this process.
- The metaschema check is jsonschema's, with the bounded keywords above and no
  ``format`` asserted: ``"format": "regex"`` would compile each server pattern with
  Python's ``re``.

Either way the tool stays callable and its results are not checked, and a warning is
given once.

A call's arguments are checked the same way against the tool's ``inputSchema``
(:func:`check_arguments`, the command line's ``call``), before anything is sent.
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Final, Iterable, Mapping

from . import patterns
from .model import Catalogue
from ..wire.text import printable

MAX_ERRORS = 5
MAX_ERROR_CHARS = 200
MAX_SCHEMA_DEPTH = 32
MAX_SCHEMA_NODES = 10_000
MAX_SCHEMA_CHARS = 256 * 1024  # of its strings together
MAX_SCHEMA_PATTERNS = 64  # distinct patterns: each compiles in at most about 25 ms (patterns.MAX_MEM)
MAX_CONTENT_VALUES = 20_000
MAX_CONTENT_DEPTH = 64
MAX_STEPS = 50_000
MAX_CHECK_SECONDS = 5.0  # a check's wall-clock bound when the call's deadline is later (or unknown)

# ``$schema`` without its scheme and empty fragment -> the jsonschema validator class.
DIALECTS: Final = {
    "json-schema.org/draft/2020-12/schema": "Draft202012Validator",
    "json-schema.org/draft/2019-09/schema": "Draft201909Validator",
    "json-schema.org/draft-07/schema": "Draft7Validator",
    "json-schema.org/draft-06/schema": "Draft6Validator",
    "json-schema.org/draft-04/schema": "Draft4Validator",
    "json-schema.org/draft-03/schema": "Draft3Validator",
}
DEFAULT_DIALECT: Final = "Draft202012Validator"

@dataclass(frozen=True)
class Checked:
    """What checking one result found.

    ``errors``: the result's problems (the binding's ``schemaErrors``), empty when it
    matches or is not checked. ``warning``: one line to show once, at the first checked
    call of a tool whose schema does not compile (None otherwise).
    """

    errors: tuple[str, ...] = ()
    warning: str | None = None


NOTHING: Final = Checked()


def dialect(schema: Mapping[str, Any]) -> str | None:
    """The validator class name ``schema``'s ``$schema`` names (2020-12 without one);
    None when it names a dialect this module does not know."""
    uri = schema.get("$schema")
    if uri is None:
        return DEFAULT_DIALECT
    if not isinstance(uri, str):
        return None
    key = uri.strip()
    for scheme in ("https://", "http://"):
        if key.startswith(scheme):
            key = key[len(scheme):]
            break
    else:
        return None
    return DIALECTS.get(key[:-1] if key.endswith("#") else key)


def load_problem(schema: Any) -> str | None:
    """Why a tool's ``outputSchema`` is not used, or not used as it says; None if fine.

    Cheap (no ``jsonschema``): the schema must be a JSON object within the bounds, and
    its ``$schema`` (if any) a known dialect. The text ends with what follows from it.
    """
    return _problem(schema)[0]


# How the lines name a schema and what follows when it is not used: an outputSchema's
# (results) by default, an inputSchema's (a call's arguments) for check_arguments.
_OUTPUT = ("outputSchema", "its results")
_INPUT = ("inputSchema", "the arguments")


def _problem(schema: Any, words: tuple[str, str] = _OUTPUT) -> tuple[str | None, bool]:
    """:func:`load_problem`'s text, and whether the schema is used at all."""
    what, checked = words
    if not isinstance(schema, dict):
        return f"its {what} is {_kind(schema)}, not a JSON object; {checked} are not checked", False
    bound = _bound(schema, MAX_SCHEMA_DEPTH, MAX_SCHEMA_NODES, MAX_SCHEMA_CHARS)
    if bound is not None:
        return f"its {what} {bound}; {checked} are not checked", False
    if dialect(schema) is None:
        uri = schema.get("$schema")
        if not isinstance(uri, str):
            return f"its {what}'s $schema is not a string; {checked} are not checked", False
        return (f"its {what} names $schema {uri[:80]!r}, which is not a JSON "
                f"Schema dialect this client knows; {checked} are checked as JSON Schema 2020-12"), True
    return None, True


def check_result(catalogue: Catalogue | None, tool: str, result: Mapping[str, Any],
                 deadline: float | None = None) -> Checked:
    """Check ``result`` (a CallToolResult of ``tool``) against the tool's outputSchema.

    ``deadline``: the call's deadline (``time.monotonic()``; ServerHandle's
    ``call_tool_and_deadline``). The check ends by then, or :data:`MAX_CHECK_SECONDS`
    from now if that is sooner, and says so in a problem line when it stopped there.

    Never raises and never changes ``result``. A tool without an outputSchema (or a
    catalogue that is None) costs two dictionary lookups after its first call.
    """
    if catalogue is None:
        return NOTHING
    entry = _CACHE.get(catalogue.server)  # _kept(catalogue), inline
    if entry is not None and entry[0] is catalogue and entry[1].get(tool) is _NO_SCHEMA:
        return NOTHING  # the most common call: no clock read, nothing made (bench_binding.py)
    cap = time.monotonic() + MAX_CHECK_SECONDS
    until, capped = (cap, True) if deadline is None or deadline >= cap else (deadline, False)
    try:
        compiled = _compiled(catalogue, tool, until)
    except _OutOfTime:  # a saved catalogue's first call: compiled again at the next one
        return Checked((_stopped(cap - MAX_CHECK_SECONDS, capped),))
    if compiled is None:
        return NOTHING
    warning = compiled.take_warning()
    if compiled.validator is None or result.get("isError") is True:
        return Checked((), warning)
    if "structuredContent" not in result:
        return Checked(("structuredContent is missing: the tool declares an outputSchema",), warning)
    return Checked(_validate(compiled.validator, result["structuredContent"], until, capped), warning)


def prepare(server: str, tools: Iterable[Any]) -> dict[str, Any]:
    """Compile the outputSchema of every tool of a list ``server`` has just sent.

    Returns the compiled validators by tool name, for :func:`remember` once the
    catalogue is made; a schema that does not compile keeps its warning for
    :func:`compile_warning` (given when the catalogue's operations are built). A tool
    without an outputSchema costs nothing, and a list without one never loads
    ``jsonschema``.
    """
    compiled: dict[str, _Compiled] = {}
    for tool in tools:
        name = tool.get("name") if isinstance(tool, dict) else None
        if isinstance(name, str) and name not in compiled:
            compiled[name] = _compile(server, name, tool["outputSchema"], math.inf) if "outputSchema" in tool else _NO_SCHEMA
    return compiled


def compile_warning(catalogue: Catalogue, tool: str) -> str | None:
    """The one line saying that ``tool``'s outputSchema does not compile (or is not
    used), when :func:`prepare` compiled this catalogue and found so; given once, so
    the tool's first call does not repeat it. None otherwise (a catalogue read from
    the store compiles at the tool's first call, and warns there)."""
    tools = _kept(catalogue)
    found = None if tools is None else tools.get(tool)
    return None if found is None else found.take_warning()


def remember(catalogue: Catalogue, compiled: Mapping[str, Any]) -> None:
    """Keep what :func:`prepare` compiled as ``catalogue``'s validators (the cache that
    :func:`check_result` reads), replacing what was kept for an earlier catalogue of
    the same server."""
    with _CACHE_LOCK:
        _keep(catalogue, dict(compiled))


@dataclass(frozen=True)
class ArgumentProblem:
    """One way a call's arguments do not fit the tool's ``inputSchema``.

    ``path``: where, from the top-level parameter down (empty: the arguments object
    itself, e.g. a required parameter missing); ``keyword``: the JSON Schema keyword
    that failed (``type``, ``required``, ``enum``, ``additionalProperties`` ...);
    ``expected``: that keyword's value in the schema (the server's data: bound it before
    printing); ``message``: jsonschema's line, escaped and cut to MAX_ERROR_CHARS.
    """

    path: tuple[str | int, ...]
    keyword: str
    expected: Any
    message: str


@dataclass(frozen=True)
class ArgumentsChecked:
    """What :func:`check_arguments` found: the problems (the most relevant first, at most
    MAX_ERRORS) and, when the arguments were not checked or not to the end, why (one
    line; the arguments are then sent as they are)."""

    problems: tuple[ArgumentProblem, ...] = ()
    unchecked: str | None = None


def check_arguments(schema: Any, arguments: Mapping[str, Any], deadline: float | None = None) -> ArgumentsChecked:
    """Check a call's ``arguments`` against the tool's ``inputSchema`` before anything is sent.

    The same bounded check as a result's (the dialect its ``$schema`` names, RE2
    patterns, no reference fetched, MAX_STEPS and the clock), ending by ``deadline``
    (``time.monotonic()``) or MAX_CHECK_SECONDS from now. A schema that cannot be used
    (not an object within the bounds, failing its metaschema) checks nothing, and says
    why in ``unchecked``; so does a check stopped before any problem was found.
    Never raises.
    """
    cap = time.monotonic() + MAX_CHECK_SECONDS
    until = cap if deadline is None or deadline >= cap else deadline
    why, used = _problem(schema, _INPUT)
    if not used:
        return ArgumentsChecked(unchecked=why)
    try:
        validator, why = _compile_schema(schema, until, _INPUT)
    except _OutOfTime:
        return ArgumentsChecked(unchecked="its inputSchema did not compile in time; the arguments are not checked")
    if validator is None:
        return ArgumentsChecked(unchecked=why)
    import jsonschema.exceptions
    import referencing.exceptions

    bound = _bound(arguments, MAX_CONTENT_DEPTH, MAX_CONTENT_VALUES)
    if bound is not None:
        return ArgumentsChecked(unchecked=f"the arguments {bound}; they are not checked")
    found: list[Any] = []
    stopped = None
    _STATE.budget = _Budget(MAX_STEPS, until, server=True)
    try:
        for error in validator.iter_errors(arguments):
            found.append(error)
            if len(found) >= 4 * MAX_ERRORS:
                break
    except _OverBudget:
        stopped = f"checking stopped after {MAX_STEPS} steps (the inputSchema is too costly to check)"
    except _OutOfTime:
        stopped = f"checking stopped after {MAX_CHECK_SECONDS:g} s (the inputSchema is too costly to check)"
    except _TooCostly as exc:
        stopped = f"checking stopped: a string of {exc.chars} characters is too long to match against the pattern {exc.pattern[:40]!r}"
    except referencing.exceptions.Unresolvable as exc:
        ref = getattr(exc, "ref", None)
        stopped = f"$ref {ref if isinstance(ref, str) else '?'!r} is not resolved (references outside the schema are never fetched)"
    except RecursionError:
        stopped = "checking stopped: the inputSchema refers to itself without end"
    except Exception as exc:  # noqa: BLE001 - a check never breaks a call
        stopped = f"checking failed ({type(exc).__name__})"
    finally:
        _STATE.budget = None
    if not found:
        return ArgumentsChecked(unchecked=None if stopped is None else _one_line(f"{stopped}; the arguments are sent unchecked"))
    best = jsonschema.exceptions.best_match(found)
    ordered = [best, *(error for error in found if error is not best)] if best is not None else found
    return ArgumentsChecked(tuple(
        ArgumentProblem(tuple(error.absolute_path), str(error.validator), error.validator_value, _one_line(error.message))
        for error in ordered[:MAX_ERRORS]))


# -- internals ---------------------------------------------------------------------------------


# The schema warnings given in this process: a schema read again (the saved copy of a
# catalogue whose live listing warned, or a new catalogue with the same tool) warns once.
_GIVEN: set[str] = set()
_GIVEN_LIMIT = 4096


class _Compiled:
    """One tool's compiled validator (None: not checked) and its one-time warning."""

    __slots__ = ("validator", "_warning", "_lock")

    def __init__(self, validator: Any, warning: str | None) -> None:
        self.validator = validator
        self._warning = warning
        self._lock = threading.Lock()

    def take_warning(self) -> str | None:
        """The warning, the first time it is asked for and only if this process has not
        given the same line already; None otherwise."""
        if self._warning is None:
            return None
        with self._lock:
            warning, self._warning = self._warning, None
            if warning is None or warning in _GIVEN:
                return None
            if len(_GIVEN) >= _GIVEN_LIMIT:
                _GIVEN.clear()
            _GIVEN.add(warning)
        return warning


_NO_SCHEMA: Final = _Compiled(None, None)  # the tool declares no outputSchema

# Per server name: the catalogue object and its tools' compiled validators (or
# _NO_SCHEMA). A catalogue is immutable, so what is compiled for it stays right while it
# is the same object; another catalogue of that server replaces the entry. Bounded as
# catalogue/naming.py's operations cache is.
_CACHE: dict[str, tuple[Catalogue, dict[str, _Compiled]]] = {}
_CACHE_LIMIT = 4096
_CACHE_LOCK = threading.Lock()


def _kept(catalogue: Catalogue) -> dict[str, _Compiled] | None:
    """What is kept for ``catalogue`` (this very object), or None."""
    entry = _CACHE.get(catalogue.server)
    return entry[1] if entry is not None and entry[0] is catalogue else None


def _keep(catalogue: Catalogue, tools: dict[str, _Compiled]) -> dict[str, _Compiled]:
    """Keep ``tools`` for ``catalogue``, replacing its server's entry; the caller holds _CACHE_LOCK."""
    if len(_CACHE) >= _CACHE_LIMIT and catalogue.server not in _CACHE:
        _CACHE.clear()  # a bound only: a host configures far fewer servers
    _CACHE[catalogue.server] = (catalogue, tools)
    return tools


def _compiled(catalogue: Catalogue, tool: str, until: float) -> _Compiled | None:
    tools = _kept(catalogue)
    if tools is None:
        with _CACHE_LOCK:
            tools = _kept(catalogue)
            if tools is None:
                tools = _keep(catalogue, {})
    found = tools.get(tool)
    if found is None:
        definition = catalogue.tool(tool)
        schema = definition.get("outputSchema") if isinstance(definition, dict) else None
        found = _NO_SCHEMA if schema is None else _compile(catalogue.server, tool, schema, until)
        tools[tool] = found  # two threads may both compile at a first call: harmless
    return None if found is _NO_SCHEMA else found


def _compile(server: str, tool: str, schema: Any, until: float) -> _Compiled:
    if not _problem(schema)[1]:
        return _Compiled(None, None)  # not used: warned at load (catalogue/naming.py's advertise)
    try:
        text: str | None = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = None
    known = _BY_TEXT.get(text) if text is not None else None
    if known is None:
        known = _compile_schema(schema, until)
        if text is not None:
            if len(_BY_TEXT) >= _BY_TEXT_LIMIT:
                _BY_TEXT.clear()
            _BY_TEXT[text] = known
    validator, why = known
    return _Compiled(validator, None if why is None else _one_line(f"server {server!r}: tool {tool!r}: {why}"))


# A schema's canonical JSON text -> its validator (None: not used) and why not: the same
# schema (a listing read again, its saved copy, another tool or server) compiles once.
# A validator is immutable, so threads and servers share it. Bounded; cleared when full.
_BY_TEXT: dict[str, tuple[Any, str | None]] = {}
_BY_TEXT_LIMIT = 4096


def _compile_schema(schema: dict[str, Any], until: float, words: tuple[str, str] = _OUTPUT) -> tuple[Any, str | None]:
    """The validator for ``schema`` (None: not used) and the warning it comes with.

    Raises:
        _OutOfTime: ``until`` came first (nothing is kept: a later call compiles again).
    """
    what, checked = words
    name = dialect(schema) or DEFAULT_DIALECT
    budget = _Budget(None, until, server=False)
    _STATE.budget = budget
    try:
        try:
            # The metaschema check, as jsonschema's check_schema but with its keywords
            # bounded (a draft-04 "enum" of 4,000 objects is "uniqueItems" there: 71 s in
            # jsonschema's own) and no format asserted: "format": "regex" would compile
            # every server pattern with Python's re, and "uri" would run whatever
            # optional format library the host has installed over server text.
            error = next(_metaschema(name).iter_errors(schema), None)
        except (RecursionError, ValueError, TypeError) as exc:
            return None, f"its {what} does not compile ({type(exc).__name__}); {checked} are not checked"
        if error is not None:
            where = error.json_path if error.json_path != "$" else "its root"
            return None, f"its {what} does not compile ({where}: {error.message}); {checked} are not checked"
        found = _patterns(schema)
        if len(found) > MAX_SCHEMA_PATTERNS:
            return None, f"its {what} has more than {MAX_SCHEMA_PATTERNS} distinct patterns; {checked} are not checked"
        refused = []
        for pattern in found:
            budget.tick()
            why = patterns.problem(pattern)
            if why is not None:
                refused.append((pattern, why))
    finally:
        _STATE.budget = None
    warning = None
    if refused:
        pattern, why = refused[0]
        those = (f", nor can {len(refused) - 1} more of its patterns; those are not checked, the rest of the schema is"
                 if len(refused) > 1 else ", so it is not checked; the rest of the schema is")
        warning = f"its {what}'s pattern {pattern[:60]!r} cannot be matched in linear time ({why}){those}"
    return _checking_class(name)(schema, registry=_registry()), warning


# Keywords whose values are maps of names to subschemas, and keywords whose values are
# data: where a pattern can and cannot be.
_NAME_MAPS = frozenset(("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"))
_DATA = frozenset(("enum", "const", "default", "examples"))


def _patterns(schema: dict[str, Any]) -> list[str]:
    """The distinct patterns of ``schema`` (``pattern`` values and ``patternProperties``
    keys), wherever a subschema can be, including under keywords nobody defines (a
    ``$ref`` may point there); never inside ``enum``, ``const``, ``default``, ``examples``."""
    found: dict[str, None] = {}
    stack: list[tuple[Any, bool]] = [(schema, True)]
    while stack:
        item, keywords = stack.pop()
        if isinstance(item, dict):
            if not keywords:  # names -> subschemas
                stack.extend((value, True) for value in reversed(item.values()))
                continue
            if isinstance(item.get("pattern"), str):
                found[item["pattern"]] = None
            if isinstance(item.get("patternProperties"), dict):
                found.update(dict.fromkeys(item["patternProperties"]))
            # pushed last first, so that the first pattern found is the first one written
            stack.extend((value, key not in _NAME_MAPS) for key, value in reversed(item.items()) if key not in _DATA)
        elif isinstance(item, list):
            stack.extend((value, keywords) for value in reversed(item))
    return list(found)


# -- the check's budget: keyword evaluations and the wall clock ------------------------------


class _OverBudget(Exception):
    pass


class _OutOfTime(Exception):
    pass


class _TooCostly(Exception):
    def __init__(self, chars: int, pattern: str) -> None:
        super().__init__(chars, pattern)
        self.chars = chars
        self.pattern = pattern


class _Budget:
    """What one check (or one compile) on this thread may still spend.

    ``steps``: keyword evaluations left (None: not counted). ``until``: the
    ``time.monotonic()`` it must end by. ``server``: it matches server patterns (a result
    check), so jsonschema's own ``re.search`` calls go to RE2 (:class:`_PatternRoute`).
    """

    __slots__ = ("steps", "until", "server")

    def __init__(self, steps: int | None, until: float, *, server: bool) -> None:
        self.steps = steps
        self.until = until
        self.server = server

    def tick(self) -> None:
        """One keyword evaluation (or a bounded piece of work).

        Raises:
            _OverBudget: no steps left.
            _OutOfTime: the clock passed ``until``.
        """
        if self.steps is not None:
            self.steps -= 1
            if self.steps < 0:
                raise _OverBudget
        if time.monotonic() >= self.until:
            raise _OutOfTime

    def afford(self, work: int, regex: patterns.Regex, chars: int) -> None:
        """Refuse a match whose worst case (``work``) could outlast the time left.

        Raises:
            _OutOfTime: the clock passed ``until``.
            _TooCostly: the match could run past it.
        """
        left = self.until - time.monotonic()
        if left <= 0:
            raise _OutOfTime
        if work > left * patterns.WORK_PER_SECOND:
            raise _TooCostly(chars, regex.source)


_STATE = threading.local()  # .budget: the _Budget of the check running on this thread, or None


def _budget() -> _Budget | None:
    return getattr(_STATE, "budget", None)


def _matches(pattern: str, text: str) -> bool:
    """JSON Schema's ``pattern`` test (unanchored, ECMA-262) by RE2, within the budget;
    True for a pattern RE2 cannot run (warned at load: never a problem by itself)."""
    regex = patterns.compiled(pattern)
    if regex is None:
        return True
    data = patterns.encode(text)
    budget = _budget()
    if budget is not None:
        budget.afford(regex.work(data), regex, len(text))
    return regex.search(data)


class _PatternRoute:
    """Stands for ``re`` in jsonschema's keyword modules: inside a result check on this
    thread, ``search`` is :func:`_matches` (RE2); anywhere else it is ``re.search``.

    jsonschema has no hook for its regex engine. The keywords that match patterns are
    replaced below, but its ``unevaluatedProperties`` walkers call ``re.search`` on
    ``patternProperties`` themselves (_utils.py, _legacy_keywords.py); this is what they
    reach. tests/test_output_schemas_unit.py fails if jsonschema matches with ``re``
    anywhere else.
    """

    def __init__(self, real: Any) -> None:
        self._re = real

    def search(self, pattern: Any, string: Any, flags: int = 0) -> Any:
        budget = _budget()
        if budget is None or not budget.server or flags or not isinstance(pattern, str) or not isinstance(string, str):
            return self._re.search(pattern, string, flags)
        return True if _matches(pattern, string) else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._re, name)


_CLASSES: dict[tuple[str, bool], Any] = {}
_METASCHEMAS: dict[str, Any] = {}
_CLASS_LOCK = threading.Lock()


def _checking_class(name: str, server: bool = True) -> Any:
    """The jsonschema validator class ``name``, extended: every keyword counts against the
    budget, the keywords below are bounded, and (``server``) patterns go to RE2."""
    cls = _CLASSES.get((name, server))
    if cls is None:
        import jsonschema.validators

        with _CLASS_LOCK:
            _route_patterns()
            base = getattr(jsonschema.validators, name)
            keywords = dict(base.VALIDATORS)
            for keyword, bounded in _bounded(keywords).items():
                keywords[keyword] = bounded
            if server:
                for keyword, replaced in _PATTERN_KEYWORDS.items():
                    if keyword in keywords:
                        keywords[keyword] = replaced
            cls = jsonschema.validators.extend(base, validators={k: _counted(v) for k, v in keywords.items()})
            import attrs

            cls._albedo_server = server
            cls._albedo_fields = tuple((f.name, f.alias) for f in attrs.fields(cls) if f.init)
            cls.evolve = _evolve  # our own class, extended: no jsonschema class is changed
            _CLASSES[(name, server)] = cls
    return cls


def _evolve(self: Any, **changes: Any) -> Any:
    """jsonschema's ``evolve`` (every descent makes one), but staying among our classes.

    jsonschema picks the class of a subschema by its ``$schema``: a subschema (or a
    ``$ref``'d metaschema) that names 2020-12 would be checked by jsonschema's own
    Draft202012Validator, with Python's re, unbounded keywords and no budget. We pick
    the same draft, as our class; a class we do not know (one the host registered)
    leaves ours as it is.
    """
    schema = changes.setdefault("schema", self.schema)
    cls = type(self)
    if isinstance(schema, dict) and "$schema" in schema:  # jsonschema's validator_for looks no further
        import jsonschema.validators

        chosen = jsonschema.validators.validator_for(schema, default=None)
        if chosen is not None and chosen.__name__ in _DIALECT_NAMES:
            cls = _checking_class(chosen.__name__, cls._albedo_server)
    for name, alias in cls._albedo_fields:
        if alias not in changes:
            changes[alias] = getattr(self, name)
    return cls(**changes)


_DIALECT_NAMES: Final = frozenset(DIALECTS.values())


def _metaschema(name: str) -> Any:
    """A validator of schemas of dialect ``name`` against its metaschema (formats not
    asserted; the metaschema's own patterns, ours to trust, stay with jsonschema)."""
    meta = _METASCHEMAS.get(name)
    if meta is None:
        cls = _checking_class(name, server=False)
        meta = _METASCHEMAS[name] = cls(cls.META_SCHEMA, format_checker=None)
    return meta


def _route_patterns() -> None:
    """Point jsonschema's keyword modules' ``re`` at :class:`_PatternRoute` (once)."""
    import re

    from jsonschema import _keywords, _legacy_keywords, _utils

    for module in (_keywords, _legacy_keywords, _utils):
        if getattr(module, "re", None) is re:
            module.re = _PatternRoute(re)


def _counted(keyword: Any) -> Any:
    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        budget = _budget()
        if budget is not None:
            budget.tick()
        errors = keyword(validator, value, instance, schema)
        if errors is None:
            return
        for error in errors:
            message = error.message
            if isinstance(message, str) and len(message) > _MESSAGE_CHARS:
                # jsonschema writes out the whole instance in most messages, and anyOf,
                # oneOf, not, contains and if keep every branch's errors until they end:
                # 3,000 failing branches over a 2 MB object held 400 MiB after 2 s. A
                # line shows MAX_ERROR_CHARS; the rest is dropped here, as it is made.
                error.message = message = message[:_MESSAGE_CHARS]
                error.args = (message, *error.args[1:])
            yield error

    return counted


_MESSAGE_CHARS: Final = 2 * MAX_ERROR_CHARS  # more than a line shows, however its escapes grow


# -- keywords, bounded ----------------------------------------------------------------------------
#
# jsonschema's own cost more than linear in what they are given: uniqueItems compares
# every pair of unhashable items (9,000 objects: 113 s), enum compares the value with
# every member (each item of a long array against a long enum), unevaluatedItems and
# unevaluatedProperties look each item up in a list of what was evaluated. These give the
# same answers in time linear in the instance.


def _error(message: str) -> Any:
    from jsonschema.exceptions import ValidationError

    return ValidationError(message)


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Any:
    # JSON Schema equality (2020-12 core 4.2.2): 1 and 1.0 are equal, true and 1 are not,
    # and the order of an object's members does not matter. _json_key gives equal
    # values equal keys, so one pass with a set decides.
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: dict[Any, int] = {}
    budget = _budget()
    for index, item in enumerate(instance):
        if budget is not None and index & 1023 == 1023:
            budget.tick()
        first = seen.setdefault(_json_key(item), index)
        if first != index:  # named by index: the array itself may be too long for the line
            yield _error(f"the array has non-unique elements: items {first} and {index} are equal ({_brief(item, 80)})")
            return


_TRUE, _FALSE = ("bool", True), ("bool", False)


def _json_key(value: Any) -> Any:
    """A hashable key, equal for two JSON values exactly when JSON Schema calls them equal.

    Numbers are themselves (Python compares ints and floats by value, exactly); a
    boolean is tagged, as bool is an int in Python; a list is a tagged tuple, an object a
    tagged frozenset of (name, key) pairs.

    Raises:
        TypeError: ``value`` is not made of JSON types.
    """
    if isinstance(value, bool):
        return _TRUE if value else _FALSE
    if value is None or isinstance(value, (str, int, float)):
        return value
    if isinstance(value, list):
        return ("array", tuple(_json_key(item) for item in value))
    if isinstance(value, dict):
        return ("object", frozenset((key, _json_key(item)) for key, item in value.items()))
    raise TypeError(type(value).__name__)


def _enum(base: Any) -> Any:
    def enum(validator: Any, members: Any, instance: Any, schema: Any) -> Any:
        known = _members(members)
        if known is None:  # not a list of JSON values: jsonschema's own answer
            yield from base(validator, members, instance, schema) or ()
            return
        keys, shapes = known
        if isinstance(instance, (dict, list)) and (isinstance(instance, dict), len(instance)) not in shapes:
            found = False  # no member is a container of this kind and size
        else:
            found = _json_key(instance) in keys
        if not found:
            yield _error(f"{_brief(instance)} is not one of {_brief(members)}")

    return enum


# id(enum list) -> (the list, its members' keys, the (is object, length) of its containers).
# The list is held, so its id is not reused while the entry stands. Bounded; cleared when full.
_ENUMS: dict[int, tuple[Any, frozenset[Any], frozenset[tuple[bool, int]]]] = {}
_ENUMS_LIMIT = 4096


def _members(members: Any) -> tuple[frozenset[Any], frozenset[tuple[bool, int]]] | None:
    if not isinstance(members, list):
        return None
    entry = _ENUMS.get(id(members))
    if entry is None or entry[0] is not members:
        try:
            keys = frozenset(_json_key(member) for member in members)
        except (TypeError, RecursionError):
            return None
        shapes = frozenset((isinstance(m, dict), len(m)) for m in members if isinstance(m, (dict, list)))
        if len(_ENUMS) >= _ENUMS_LIMIT:
            _ENUMS.clear()
        entry = _ENUMS[id(members)] = (members, keys, shapes)
    return entry[1], entry[2]


def _unevaluated_items(walker: Any) -> Any:
    def unevaluated_items(validator: Any, unevaluated: Any, instance: Any, schema: Any) -> Any:
        if not validator.is_type(instance, "array"):
            return
        evaluated = set(walker(validator, instance, schema))  # jsonschema's walk; a set, not a list
        extras = [item for index, item in enumerate(instance) if index not in evaluated]
        if extras:
            yield _error(f"Unevaluated items are not allowed ({_listed(extras)} unexpected)")

    return unevaluated_items


def _unevaluated_properties(walker: Any) -> Any:
    def unevaluated_properties(validator: Any, unevaluated: Any, instance: Any, schema: Any) -> Any:
        if not validator.is_type(instance, "object"):
            return
        evaluated = set(walker(validator, instance, schema))
        extras = [key for key in instance if key not in evaluated
                  and next(validator.descend(instance[key], unevaluated, path=key, schema_path=key), None) is not None]
        if not extras:
            return
        if unevaluated is False:
            yield _error(f"Unevaluated properties are not allowed ({_listed(sorted(extras))} unexpected)")
        else:
            yield _error(f"Unevaluated properties are not valid under the given schema ({_listed(extras)} unevaluated and invalid)")

    return unevaluated_properties


def _bounded(keywords: Mapping[str, Any]) -> dict[str, Any]:
    """The bounded replacements of ``keywords`` (a draft's VALIDATORS). An unevaluated*
    keyword is replaced only when it is one whose walker we know (jsonschema 4.18-4.x)."""
    from jsonschema import _keywords, _legacy_keywords, _utils

    walkers = {
        getattr(_keywords, "unevaluatedItems", None): (_unevaluated_items, getattr(_utils, "find_evaluated_item_indexes_by_schema", None)),
        getattr(_legacy_keywords, "unevaluatedItems_draft2019", None):
            (_unevaluated_items, getattr(_legacy_keywords, "find_evaluated_item_indexes_by_schema", None)),
        getattr(_keywords, "unevaluatedProperties", None):
            (_unevaluated_properties, getattr(_utils, "find_evaluated_property_keys_by_schema", None)),
        getattr(_legacy_keywords, "unevaluatedProperties_draft2019", None):
            (_unevaluated_properties, getattr(_legacy_keywords, "find_evaluated_property_keys_by_schema", None)),
    }
    out: dict[str, Any] = {}
    if "uniqueItems" in keywords:
        out["uniqueItems"] = _unique_items
    if "enum" in keywords:
        out["enum"] = _enum(keywords["enum"])
    for keyword in ("unevaluatedItems", "unevaluatedProperties"):
        make, walker = walkers.get(keywords.get(keyword), (None, None))
        if make is not None and walker is not None:
            out[keyword] = make(walker)
    return out


# -- keywords that match server patterns: RE2 ------------------------------------------------------


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Any:
    if validator.is_type(instance, "string") and isinstance(pattern, str) and not _matches(pattern, instance):
        # a long string is cut so that the line still shows the pattern
        shown = _brief(instance) if len(instance) <= 80 else f"{instance[:80]!r}… ({len(instance)} characters)"
        yield _error(f"{shown} does not match {pattern!r}")


def _pattern_properties(validator: Any, properties: Any, instance: Any, schema: Any) -> Any:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in properties.items():
        if patterns.compiled(pattern) is None:
            continue  # RE2 cannot run it (warned at load): its subschema applies to no name we know
        for key, value in instance.items():
            if _matches(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, additional: Any, instance: Any, schema: Any) -> Any:
    if not validator.is_type(instance, "object"):
        return
    named = schema.get("properties", {})
    regexes = schema.get("patternProperties", {})
    # A name a pattern RE2 cannot run might match is not called additional (_matches: True).
    extras = [key for key in instance if key not in named and not any(_matches(p, key) for p in regexes)]
    if validator.is_type(additional, "object"):
        for key in extras:
            yield from validator.descend(instance[key], additional, path=key)
    elif not additional and extras:
        if regexes:
            verb = "does" if len(extras) == 1 else "do"
            yield _error(f"{_listed(sorted(extras), verbs=False)} {verb} not match any of the regexes: "
                         f"{', '.join(repr(p) for p in sorted(regexes))}")
        else:
            yield _error(f"Additional properties are not allowed ({_listed(sorted(extras))} unexpected)")


_PATTERN_KEYWORDS: Final = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}


def _listed(items: list[Any], verbs: bool = True) -> str:
    """``'a', 'b' were`` (jsonschema's wording), at most ten of them."""
    shown = ", ".join(_brief(item) for item in items[:10]) + (", …" if len(items) > 10 else "")
    return f"{shown} {'was' if len(items) == 1 else 'were'}" if verbs else shown


_BRIEF: list[Any] = []


def _brief(value: Any, limit: int = MAX_ERROR_CHARS) -> str:
    """``repr(value)`` as far as a problem line shows it (about ``limit`` characters), at
    a cost bounded by that, not by the value's size."""
    if isinstance(value, str):
        return repr(value[:limit])
    if not _BRIEF:
        import reprlib

        short = reprlib.Repr()
        short.maxlevel, short.maxdict, short.maxlist = 4, 20, 20
        short.maxstring = short.maxother = MAX_ERROR_CHARS
        _BRIEF.append(short)
    text = str(_BRIEF[0].repr(value))
    return text if len(text) <= limit else text[:limit] + "…"


_REGISTRY: list[Any] = []


def _registry() -> Any:
    """A registry that retrieves nothing: a ``$ref`` outside the schema (and the
    metaschemas jsonschema ships) fails locally; no socket or file is ever opened.
    Without it jsonschema would fetch remote references with urlopen."""
    if not _REGISTRY:
        import referencing
        import referencing.exceptions

        def refuse(uri: str) -> Any:
            raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]

        _REGISTRY.append(referencing.Registry(retrieve=refuse))  # type: ignore[call-arg]
    return _REGISTRY[0]


def _validate(validator: Any, content: Any, until: float, capped: bool) -> tuple[str, ...]:
    import referencing.exceptions

    bound = _bound(content, MAX_CONTENT_DEPTH, MAX_CONTENT_VALUES)
    if bound is not None:
        return (f"structuredContent {bound}; it is not checked",)
    lines: list[str] = []
    started = time.monotonic()
    _STATE.budget = _Budget(MAX_STEPS, until, server=True)
    try:
        for error in validator.iter_errors(content):
            if len(lines) == MAX_ERRORS - 1:
                lines.append("(more problems not listed)")
                break
            lines.append(_one_line(f"{error.json_path}: {error.message}"))
    except _OverBudget:
        lines.append(f"checking stopped after {MAX_STEPS} steps (the outputSchema is too costly to check)")
    except _OutOfTime:
        lines.append(_stopped(started, capped))
    except _TooCostly as exc:
        lines.append(_one_line(f"checking stopped: a string of {exc.chars} characters is too long to match against "
                               f"the pattern {exc.pattern[:40]!r} in the time the call has left"))
    except referencing.exceptions.Unresolvable as exc:
        ref = getattr(exc, "ref", None)
        ref = ref if isinstance(ref, str) else "?"
        why = "" if ref.startswith("#") else " (references outside the schema are never fetched)"
        lines.append(_one_line(f"$ref {ref!r} is not resolved{why}; checking stopped"))
    except RecursionError:
        lines.append("checking stopped: the outputSchema refers to itself without end")
    except Exception as exc:  # noqa: BLE001 - a check never breaks a result
        lines.append(_one_line(f"checking failed ({type(exc).__name__})"))
    finally:
        _STATE.budget = None
    return tuple(lines[:MAX_ERRORS])


def _stopped(started: float, capped: bool) -> str:
    if capped:
        return f"checking stopped after {MAX_CHECK_SECONDS:g} s (the outputSchema is too costly to check)"
    spent = max(0, round((time.monotonic() - started) * 1000))
    return (f"checking stopped at the call's deadline, {spent} ms into the check (the outputSchema is too costly "
            "to check in the time the call had left)")


def _one_line(text: str) -> str:
    return printable(text, one_line=True, limit=MAX_ERROR_CHARS)


def _bound(value: Any, max_depth: int, max_nodes: int, max_chars: int | None = None) -> str | None:
    """Why ``value`` is over the bounds (depth, values, and the characters of its
    strings when ``max_chars`` is given), or None; walked with an explicit stack."""
    if not isinstance(value, (dict, list)):
        return None
    nodes, chars = 1, 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            return f"is more than {max_depth} levels deep"
        children: Any = item.values() if type(item) is dict else item
        nodes += len(children)
        if nodes > max_nodes:
            return f"has more than {max_nodes} values"
        for child in children:
            kind = type(child)
            if kind is dict or kind is list:
                stack.append((child, depth + 1))
            elif kind is str and max_chars is not None:
                chars += len(child)
        if max_chars is not None and chars > max_chars:
            return f"holds more than {max_chars} characters of text"
    return None


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return f"a {type(value).__name__}"
