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
- The cost is bounded: a schema deeper than :data:`MAX_SCHEMA_DEPTH` levels, with more
  than :data:`MAX_SCHEMA_NODES` values or :data:`MAX_SCHEMA_CHARS` characters of text is not used
  (one warning at load); a ``structuredContent`` with more than
  :data:`MAX_CONTENT_VALUES` values or deeper than :data:`MAX_CONTENT_DEPTH` levels is
  not checked (one problem says so); a check stops after :data:`MAX_STEPS` keyword
  evaluations (``$ref`` fan-out) and on a reference cycle. A schema with a ``pattern``
  that repeats a repeated part (``(a+)+``: Python's ``re`` backtracks, exponentially on
  a short string) is not used (one warning, as for a schema that does not compile).

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
  object for the same saved text); a schema that fails there warns at that call,
  unless the same warning was already given in this process.

Either way the tool stays callable and its results are not checked, and a warning is
given once.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any, Final, Iterable, Mapping

from .model import Catalogue
from ..wire.text import printable

MAX_ERRORS = 5
MAX_ERROR_CHARS = 200
MAX_SCHEMA_DEPTH = 32
MAX_SCHEMA_NODES = 10_000
MAX_SCHEMA_CHARS = 256 * 1024  # of its strings together
MAX_CONTENT_VALUES = 20_000
MAX_CONTENT_DEPTH = 64
MAX_STEPS = 50_000

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


def _problem(schema: Any) -> tuple[str | None, bool]:
    """:func:`load_problem`'s text, and whether the schema is used at all."""
    if not isinstance(schema, dict):
        return f"its outputSchema is {_kind(schema)}, not a JSON object; its results are not checked", False
    bound = _bound(schema, MAX_SCHEMA_DEPTH, MAX_SCHEMA_NODES, MAX_SCHEMA_CHARS)
    if bound is not None:
        return f"its outputSchema {bound}; its results are not checked", False
    if dialect(schema) is None:
        uri = schema.get("$schema")
        if not isinstance(uri, str):
            return "its outputSchema's $schema is not a string; its results are not checked", False
        return (f"its outputSchema names $schema {uri[:80]!r}, which is not a JSON "
                "Schema dialect this client knows; its results are checked as JSON Schema 2020-12"), True
    return None, True


def check_result(catalogue: Catalogue | None, tool: str, result: Mapping[str, Any]) -> Checked:
    """Check ``result`` (a CallToolResult of ``tool``) against the tool's outputSchema.

    Never raises and never changes ``result``. A tool without an outputSchema (or a
    catalogue that is None) costs one dictionary lookup after its first call.
    """
    if catalogue is None:
        return NOTHING
    compiled = _compiled(catalogue, tool)
    if compiled is None:
        return NOTHING
    warning = compiled.take_warning()
    if compiled.validator is None or result.get("isError") is True:
        return Checked((), warning)
    if "structuredContent" not in result:
        return Checked(("structuredContent is missing: the tool declares an outputSchema",), warning)
    return Checked(_validate(compiled.validator, result["structuredContent"]), warning)


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
            compiled[name] = _compile(server, name, tool["outputSchema"]) if "outputSchema" in tool else _NO_SCHEMA
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


def _compiled(catalogue: Catalogue, tool: str) -> _Compiled | None:
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
        found = _NO_SCHEMA if schema is None else _compile(catalogue.server, tool, schema)
        tools[tool] = found  # two threads may both compile at a first call: harmless
    return None if found is _NO_SCHEMA else found


def _compile(server: str, tool: str, schema: Any) -> _Compiled:
    if not _problem(schema)[1]:
        return _Compiled(None, None)  # not used: warned at load (catalogue/naming.py's advertise)
    try:
        text: str | None = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = None
    known = _BY_TEXT.get(text) if text is not None else None
    if known is None:
        known = _compile_schema(schema)
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


def _compile_schema(schema: dict[str, Any]) -> tuple[Any, str | None]:
    name = dialect(schema) or DEFAULT_DIALECT
    from jsonschema.exceptions import SchemaError  # loaded at the first schema compiled

    cls = _checking_class(name)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        where = exc.json_path if exc.json_path != "$" else "its root"
        return None, f"its outputSchema does not compile ({where}: {exc.message}); its results are not checked"
    except (RecursionError, ValueError, TypeError) as exc:
        return None, f"its outputSchema does not compile ({type(exc).__name__}); its results are not checked"
    risky = _risky_pattern(schema)
    if risky is not None:
        # Python's re backtracks: a nested repetition can take exponential time on a short
        # string the same server sends, and no check may hold a caller's thread unbounded.
        return None, (f"its outputSchema has the pattern {risky[:60]!r}, a repetition inside a repetition that "
                      "could take unbounded time to match; its results are not checked")
    return cls(schema, registry=_registry()), None


def _risky_pattern(schema: dict[str, Any]) -> str | None:
    """The first ``pattern`` (or ``patternProperties`` key) of ``schema`` with a repeated
    part inside a repeated part (star height 2, as ``(a+)+``), or None."""
    stack: list[Any] = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            patterns = [item["pattern"]] if isinstance(item.get("pattern"), str) else []
            if isinstance(item.get("patternProperties"), dict):
                patterns.extend(item["patternProperties"])
            for pattern in patterns:
                if _nested_repeat(pattern):
                    return pattern
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _nested_repeat(pattern: str) -> bool:
    try:
        parsed = _parse_regex(pattern)
    except Exception:  # noqa: BLE001 - not a Python pattern: jsonschema reports it, if it can
        return False
    stack: list[tuple[Any, bool]] = [(parsed, False)]
    while stack:
        items, inside = stack.pop()
        for op, arg in items:
            name = getattr(op, "name", str(op))
            if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                low, high, body = arg
                repeats = high != 1
                if repeats and inside and name != "POSSESSIVE_REPEAT":
                    return True
                stack.append((body, inside or repeats))
            elif name == "SUBPATTERN":
                stack.append((arg[-1], inside))
            elif name == "BRANCH":
                stack.extend((branch, inside) for branch in arg[1])
            elif name in ("ASSERT", "ASSERT_NOT", "ATOMIC_GROUP"):
                stack.append((arg[-1] if name != "ATOMIC_GROUP" else arg, inside))
    return False


def _parse_regex(pattern: str) -> Any:
    try:
        from re import _parser  # type: ignore[attr-defined]  # CPython 3.11 and later
    except ImportError:  # pragma: no cover - CPython 3.10
        import sre_parse as _parser
    return _parser.parse(pattern)


_CLASSES: dict[str, Any] = {}
_STEPS = threading.local()


class _OverBudget(Exception):
    pass


def _checking_class(name: str) -> Any:
    """The jsonschema validator class ``name``, extended to count keyword evaluations."""
    cls = _CLASSES.get(name)
    if cls is None:
        import jsonschema.validators

        base = getattr(jsonschema.validators, name)
        cls = jsonschema.validators.extend(base, validators={k: _counted(v) for k, v in base.VALIDATORS.items()})
        _CLASSES[name] = cls
    return cls


def _counted(keyword: Any) -> Any:
    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        left = getattr(_STEPS, "left", 0) - 1  # set by _validate on this thread; elsewhere: no budget
        _STEPS.left = left
        if left < 0:
            raise _OverBudget
        errors = keyword(validator, value, instance, schema)
        if errors is not None:
            yield from errors

    return counted


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


def _validate(validator: Any, content: Any) -> tuple[str, ...]:
    import referencing.exceptions

    bound = _bound(content, MAX_CONTENT_DEPTH, MAX_CONTENT_VALUES)
    if bound is not None:
        return (f"structuredContent {bound}; it is not checked",)
    lines: list[str] = []
    _STEPS.left = MAX_STEPS
    try:
        for error in validator.iter_errors(content):
            if len(lines) == MAX_ERRORS - 1:
                lines.append("(more problems not listed)")
                break
            lines.append(_one_line(f"{error.json_path}: {error.message}"))
    except _OverBudget:
        lines.append(f"checking stopped after {MAX_STEPS} steps (the outputSchema is too costly to check)")
    except referencing.exceptions.Unresolvable as exc:
        ref = getattr(exc, "ref", None)
        ref = ref if isinstance(ref, str) else "?"
        why = "" if ref.startswith("#") else " (references outside the schema are never fetched)"
        lines.append(_one_line(f"$ref {ref!r} is not resolved{why}; checking stopped"))
    except RecursionError:
        lines.append("checking stopped: the outputSchema refers to itself without end")
    except Exception as exc:  # noqa: BLE001 - a check never breaks a result
        lines.append(_one_line(f"checking failed ({type(exc).__name__})"))
    return tuple(lines[:MAX_ERRORS])


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
