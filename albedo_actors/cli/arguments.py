"""``call``'s arguments as people type them, the lines that refuse them, and the names suggested for a typo.

::

    albedo-mcp call a/echo text=hello count=3 tags:='["x", "y"]'

``key=value`` is coerced by the parameter's schema in the tool's ``inputSchema``
(:func:`coerce`): a parameter that may be a string keeps the text as it is typed (``5``
stays ``"5"``); one that is a number, an integer, a boolean, null, an object or an array
takes the text as JSON (``n=5``, ``on=true``, ``opts={"depth": 2}``) when it parses to
that type, and keeps the text otherwise, so that the schema check names what it must
be. A key the schema does not name keeps its text. ``key:=JSON`` is a JSON value as it
is, whatever the schema says. ``--args JSON`` gives the base object; each ``key=value``
adds its key or replaces it.

No line here quotes a value the user typed (a value may be a secret): the refusals
name the parameter and what it must be.
"""

from __future__ import annotations

import difflib
import json
import math
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from ..catalogue.schemas import ArgumentProblem
from ..wire.text import printable
from .options import PROG, Usage

JSON_TYPES = ("string", "number", "integer", "boolean", "object", "array", "null")
MAX_SHOWN_PARAMETERS = 12  # a signature lists at most this many, then "…"
MAX_BRANCHES = 32  # anyOf / oneOf branches looked at for a parameter's types
MAX_SUGGESTION_CHOICES = 20_000  # names difflib compares a typo with, at most
CUTOFF = 0.5  # difflib's similarity a suggestion needs ("eb" for "ev": 0.5)

_TYPE_WORDS = {
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "true or false",
    "object": "a JSON object",
    "array": "a JSON array",
    "null": "null",
}


class Pair(NamedTuple):
    """One typed argument: its key, its text, and whether it was given as JSON (``key:=``)."""

    key: str
    text: str
    as_json: bool


def parse_pairs(items: Sequence[str]) -> list[Pair]:
    """``key=value`` and ``key:=JSON`` arguments, checked for form (not yet against a schema).

    Raises:
        Usage: an argument is not of either form, a key is given twice, or a ``key:=``
            value is not JSON (the line names the position or the key, never the value).
    """
    pairs: list[Pair] = []
    seen: set[str] = set()
    for number, item in enumerate(items, 1):
        key, sep, text = item.partition("=")
        as_json = key.endswith(":")
        if as_json:
            key = key[:-1]
        if not sep or not key:
            raise Usage(f"argument {number} after the name is not key=value (or key:=JSON), e.g. text=hello "
                        f"n=5 tags:='[\"a\"]'")
        if key in seen:
            raise Usage(f"parameter {shown(key)} is given twice")
        seen.add(key)
        if as_json:
            try:
                json.loads(text)
            except ValueError:
                raise Usage(f"parameter {shown(key)}: {shown(key, quote=False)}:= takes a JSON value "
                            "(a string in double quotes, a number, true, false, null, an object or an array)") from None
        pairs.append(Pair(key, text, as_json))
    return pairs


def coerce(pairs: Iterable[Pair], schema: Any, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The arguments object: ``base`` (``--args``), then each pair coerced by ``schema``
    (the tool's inputSchema; see the module docstring), replacing a key ``base`` has."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    properties = properties if isinstance(properties, dict) else {}
    out = dict(base or {})
    for pair in pairs:
        out[pair.key] = json.loads(pair.text) if pair.as_json else value_for(pair.text, properties.get(pair.key))
    return out


def value_for(text: str, schema: Any) -> Any:
    """``text`` as the parameter ``schema`` wants it: the text itself when it may be a
    string (or the schema does not say), else its JSON value when that is of a type the
    schema allows (an integral number for an integer), else the text."""
    types = types_of(schema)
    if not types or "string" in types:
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text
    kind = json_type(value)  # 5.0 is an integer, as JSON Schema counts
    if kind is None or (isinstance(value, float) and not math.isfinite(value)):
        return text
    if kind in types or (kind == "integer" and "number" in types):
        if kind == "integer" and isinstance(value, float) and "number" not in types:
            return int(value)
        return value
    return text


def types_of(schema: Any, depth: int = 0) -> set[str]:
    """The JSON types a (parameter's) schema allows, from ``type``, else its ``anyOf`` /
    ``oneOf`` branches, else its ``enum`` / ``const`` values; empty when it does not say
    (no type, a ``$ref``, a branch that allows anything)."""
    if not isinstance(schema, dict) or depth > 8:
        return set()
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind} & set(JSON_TYPES)
    if isinstance(kind, list):
        return {k for k in kind if isinstance(k, str)} & set(JSON_TYPES)
    found: set[str] = set()
    for keyword in ("anyOf", "oneOf"):
        branches = schema.get(keyword)
        if isinstance(branches, list) and branches:
            for branch in branches[:MAX_BRANCHES]:
                allowed = types_of(branch, depth + 1)
                if not allowed:
                    return set()  # a branch that allows anything: the schema does not say
                found |= allowed
    if found:
        return found
    values = schema.get("enum")
    if isinstance(values, list):
        return {kind for kind in map(json_type, values[:1000]) if kind is not None}
    if "const" in schema:
        kind = json_type(schema["const"])
        return {kind} if kind is not None else set()
    return set()


def json_type(value: Any) -> str | None:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return None


def describe(types: Iterable[str]) -> str:
    """``a number``, ``a string or null``: what a value of ``types`` is, in words."""
    kinds = set(types)
    if "number" in kinds:
        kinds.discard("integer")
    return " or ".join(_TYPE_WORDS[kind] for kind in JSON_TYPES if kind in kinds)


def problem_line(server: str, operation: str, problem: ArgumentProblem, schema: Any, arguments: Mapping[str, Any]) -> str:
    """The one line refusing a call whose arguments do not fit the tool's inputSchema:
    ``server 'x': tool 'y': parameter 'n' must be a number; see albedo-mcp tools x``.
    It names the parameter and what it must be, never the value given."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    properties = properties if isinstance(properties, dict) else {}
    what = _what(problem, properties, arguments)
    return printable(f"server {server!r}: tool {operation!r}: {what}; see {PROG} tools {server}", one_line=True)


def _what(problem: ArgumentProblem, properties: Mapping[str, Any], arguments: Mapping[str, Any]) -> str:
    keyword, expected, path = problem.keyword, problem.expected, problem.path
    if not path:
        if keyword == "required" and isinstance(expected, list):
            missing = [str(name) for name in expected if name not in arguments]
            if len(missing) == 1:
                return f"parameter {shown(missing[0])} is required"
            if missing:
                return f"parameters {', '.join(shown(name) for name in missing[:10])} are required"
        if keyword in ("additionalProperties", "unevaluatedProperties"):
            extras = [str(key) for key in arguments if key not in properties]
            if extras:
                near = closest(extras[0], properties)
                hint = f" (did you mean {shown(near)}?)" if near else ""
                return f"parameter {shown(extras[0])} is not one the tool takes{hint}"
        if keyword in ("minProperties", "maxProperties"):
            return f"the tool takes {'at least' if keyword == 'minProperties' else 'at most'} {expected} parameters"
        return f"the arguments do not fit its inputSchema ({keyword})"
    name = path_text(path)
    parameter = f"parameter {shown(name)}"
    if keyword in ("type", "anyOf", "oneOf"):
        types = types_of(properties.get(str(path[0]))) if len(path) == 1 else types_of({"type": expected} if keyword == "type" else {keyword: expected})
        if types:
            return f"{parameter} must be {describe(types)}"
    if keyword == "enum" and isinstance(expected, list):
        return f"{parameter} must be one of {_values(expected)}"
    if keyword == "const":
        return f"{parameter} must be {_values([expected])}"
    bounds = {
        "minimum": "at least", "maximum": "at most", "exclusiveMinimum": "above", "exclusiveMaximum": "below",
    }
    if keyword in bounds and isinstance(expected, (int, float)) and not isinstance(expected, bool):
        return f"{parameter} must be {bounds[keyword]} {expected}"
    lengths = {"minLength": ("at least", "characters"), "maxLength": ("at most", "characters"),
               "minItems": ("at least", "items"), "maxItems": ("at most", "items")}
    if keyword in lengths and isinstance(expected, int):
        more, unit = lengths[keyword]
        return f"{parameter} must have {more} {expected} {unit}"
    if keyword == "pattern" and isinstance(expected, str):
        return f"{parameter} must match the pattern {shown(expected[:80])}"
    if keyword == "multipleOf":
        return f"{parameter} must be a multiple of {expected}"
    if keyword == "required" and isinstance(expected, list):
        return f"{parameter} needs {', '.join(shown(str(item)) for item in expected[:10])}"
    if keyword == "uniqueItems":
        return f"{parameter} must not repeat an item"
    return f"{parameter} does not fit its inputSchema ({printable(keyword, one_line=True, limit=40)})"


def path_text(path: Sequence[str | int]) -> str:
    """``opts.depth``, ``items[2]``: where in the arguments, from the parameter down."""
    text = str(path[0])
    for part in path[1:]:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def _values(values: list[Any]) -> str:
    shown_values = ", ".join(json.dumps(value, ensure_ascii=False)[:40] for value in values[:10])
    return shown_values + (", …" if len(values) > 10 else "")


def shown(text: str, quote: bool = True) -> str:
    """A name for a line: escaped, bounded, quoted as ``repr`` does."""
    text = printable(text, one_line=True, limit=80)
    return repr(text) if quote else text


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice nearest ``word`` (difflib), or None when none is near."""
    pool = []
    for choice in choices:
        if isinstance(choice, str):
            pool.append(choice)
            if len(pool) >= MAX_SUGGESTION_CHOICES:
                break
    found = difflib.get_close_matches(word, pool, n=1, cutoff=CUTOFF)
    return found[0] if found else None


def signature(server: str, operation: str, schema: Any) -> str:
    """``server/tool(required, [optional])``: the required parameters plain, then the
    optional ones in brackets, each in the schema's order; escaped, and bounded to
    MAX_SHOWN_PARAMETERS names."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    properties = properties if isinstance(properties, dict) else {}
    required = schema.get("required") if isinstance(schema, dict) else None
    required = [name for name in required if isinstance(name, str)] if isinstance(required, list) else []
    names = [*dict.fromkeys(required), *(name for name in properties if name not in required)]
    wanted = set(required)
    parts = [str(name) if name in wanted else f"[{name}]" for name in names[:MAX_SHOWN_PARAMETERS]]
    if len(names) > MAX_SHOWN_PARAMETERS:
        parts.append("…")
    text = f"{server}/{operation}({', '.join(parts)})" if server else f"{operation}({', '.join(parts)})"
    return printable(text, one_line=True)
