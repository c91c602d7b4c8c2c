"""A stdio MCP server whose tools declare output schemas, for tests/test_output_schemas*.py.

It is the bundled demo server (both eras) plus tools that each declare one
``outputSchema`` and answer ``{"value": V}`` with ``structuredContent`` V (and V's JSON
as a text block); without ``value`` the result has no ``structuredContent``. So the test
chooses a good or a bad result, and only the schema differs between tools.

The dialect tools use keywords whose meaning differs between drafts, so a client that
checks with the wrong draft gets a good result wrong or a bad one right:

v2020       no ``$schema`` (2020-12 by default): ``prefixItems`` with ``items: false``,
            ``dependentRequired``, a local ``$ref`` into ``$defs``, and
            ``additionalProperties`` of type integer
v2020_named the same with ``$schema`` 2020-12 named
v2019       2019-09: ``items`` in array form with ``additionalItems: false``, and
            ``dependentRequired``
v07         draft-07: ``items`` array form, ``additionalItems: false``, ``dependencies``
v06         draft-06: numeric ``exclusiveMinimum`` 5
v04         draft-04: ``minimum`` 5 with boolean ``exclusiveMinimum``
unknown     ``$schema`` https://example.com/own-dialect; ``required: ["x"]``

Broken or hostile schemas:

bad_schema  ``{"type": "objekt"}``: fails its metaschema
not_object  an outputSchema that is a JSON array
deep        an outputSchema 40 levels deep
remote_ref  ``$ref`` to ``--ref-url`` (property ``x``), a relative ``$ref`` under an
            ``$id`` on that host (property ``y``), and the 2020-12 metaschema by its URL
            (property ``meta``: resolved from what jsonschema ships)
loop_ref    a ``$ref`` to itself
fan_out     ``allOf`` of two ``$ref``\\ s, 30 levels of them (2^30 evaluations)
errors      an ``isError: true`` result whose ``structuredContent`` does not match
redos       a ``pattern`` ``^(a+)+$`` (exponential backtracking in Python's ``re``)

Patterns that backtrack without bound in Python's ``re`` (issue 23), each on property
``s``; matched by RE2 they take no measurable time:

bt_alt      ``(a|a)*$``            bt_opt    ``(?:a?){35}a{35}``
bt_plus     ``^(a|a?)+$``          bt_stars  ``a*a*a*b``
bt_keys     ``^(a|a?)+$`` as a ``patternProperties`` name (integers), other names strings
bt_uneval   the same name pattern in an ``allOf``, then ``unevaluatedProperties: false``
            (jsonschema's own walker matches it)
bt_names    ``propertyNames`` with ``pattern`` ``^(a|a?)+$``
bt_dialect  ``s`` with ``^(a|a?)+$`` in a subschema that names ``$schema`` 2020-12
            (jsonschema would check it with its own class)
no_linear   ``s`` with ``(a)\\1`` (a backreference) and ``t`` with ``(?=a)`` (a
            lookahead), which RE2 cannot run, and an integer ``n``

Costly ones:

unique      an array with ``uniqueItems`` (jsonschema compares every pair of objects)
costly      ``anyOf`` of 3,000 ``{"type": "string"}``: each failing branch writes out
            the whole instance, so a large object takes seconds (within MAX_STEPS)

Usage: schema_server.py [--ref-url URL] [--era dual|legacy|modern]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from albedo_actors.demo.server import DemoServer, text_result  # noqa: E402

PAIR_2020 = {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False}
V2020 = {
    "type": "object",
    "properties": {"pair": PAIR_2020, "id": {"$ref": "#/$defs/id"}},
    "additionalProperties": {"type": "integer"},
    "dependentRequired": {"a": ["b"]},
    "$defs": {"id": {"type": "string", "minLength": 1}},
}
V2019 = {
    "$schema": "https://json-schema.org/draft/2019-09/schema",
    "type": "object",
    "properties": {"pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}], "additionalItems": False}},
    "dependentRequired": {"a": ["b"]},
}
V07 = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {"pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}], "additionalItems": False}},
    "dependencies": {"a": ["b"]},
}
V06 = {"$schema": "http://json-schema.org/draft-06/schema#", "type": "object", "properties": {"n": {"exclusiveMinimum": 5}}}
V04 = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
       "properties": {"n": {"minimum": 5, "exclusiveMinimum": True}}}
UNKNOWN = {"$schema": "https://example.com/own-dialect", "type": "object", "required": ["x"]}


BACKTRACKING = {"bt_alt": "(a|a)*$", "bt_opt": "(?:a?){35}a{35}", "bt_plus": "^(a|a?)+$", "bt_stars": "a*a*a*b"}


def deep(levels: int) -> dict:
    schema: dict = {"type": "integer"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def fan_out(levels: int) -> dict:
    defs: dict = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]} for i in range(levels)}
    defs[f"d{levels}"] = {"type": "object"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


def schemas(ref_url: str) -> dict:
    host = ref_url.rsplit("/", 1)[0]
    return {
        "v2020": V2020,
        "v2020_named": {"$schema": "https://json-schema.org/draft/2020-12/schema", **V2020},
        "v2019": V2019,
        "v07": V07,
        "v06": V06,
        "v04": V04,
        "unknown": UNKNOWN,
        "bad_schema": {"type": "objekt"},
        "not_object": ["type", "object"],
        "deep": deep(40),
        "remote_ref": {
            "type": "object",
            "properties": {
                "x": {"$ref": ref_url},
                "y": {"$id": f"{host}/nested/", "$ref": "other.json"},
                "meta": {"$ref": "https://json-schema.org/draft/2020-12/schema"},
            },
        },
        "loop_ref": {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}},
        "fan_out": fan_out(30),
        "errors": {"type": "object", "required": ["never"]},
        "redos": {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}},
        **{name: {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}}
           for name, pattern in BACKTRACKING.items()},
        "bt_keys": {"type": "object", "patternProperties": {"^(a|a?)+$": {"type": "integer"}},
                    "additionalProperties": {"type": "string"}},
        "bt_uneval": {"allOf": [{"patternProperties": {"^(a|a?)+$": True}}], "unevaluatedProperties": False},
        "bt_names": {"type": "object", "propertyNames": {"pattern": "^(a|a?)+$"}},
        "bt_dialect": {"type": "object", "properties": {
            "s": {"$schema": "https://json-schema.org/draft/2020-12/schema", "pattern": "^(a|a?)+$"}}},
        "no_linear": {"type": "object", "properties": {"s": {"type": "string", "pattern": "(a)\\1"},
                                                       "t": {"type": "string", "pattern": "(?=a)"},
                                                       "n": {"type": "integer"}}},
        "unique": {"type": "array", "uniqueItems": True},
        "costly": {"anyOf": [{"type": "string"}] * 3000},
    }


class SchemaServer(DemoServer):
    name = "albedo-schema-peer"

    def __init__(self, ref_url: str, era: str) -> None:
        super().__init__(era=era)
        for name, schema in schemas(ref_url).items():
            self.add_tool(name, self.give, description=f"Answer structuredContent = value ({name} outputSchema).",
                          properties={"value": {"description": "the structuredContent to answer"}},
                          output_schema=schema)  # type: ignore[arg-type]

    @staticmethod
    def give(request, args: dict) -> dict:
        if "value" not in args:
            return text_result("no structured content")
        value = args["value"]
        result = text_result(json.dumps(value), is_error=request.params.get("name") == "errors")
        result["structuredContent"] = value
        return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ref-url", default="http://127.0.0.1:9/schema.json")
    parser.add_argument("--era", choices=("dual", "legacy", "modern"), default="dual")
    options = parser.parse_args()
    SchemaServer(options.ref_url, options.era).run()


if __name__ == "__main__":
    main()
