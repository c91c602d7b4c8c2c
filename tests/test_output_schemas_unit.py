"""Output schemas (issue 16 item 2), pure: catalogue/schemas.py over Catalogue objects."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

import albedo_actors
from albedo_actors.catalogue import Catalogue
from albedo_actors.catalogue import schemas
from albedo_actors.catalogue.naming import advertise
from albedo_actors.catalogue.schemas import check_result, dialect, load_problem

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(albedo_actors.__file__)))


def catalogue(server: str = "u", **output_schemas) -> Catalogue:
    tools = tuple({"name": name, "inputSchema": {"type": "object"}, "outputSchema": schema}
                  for name, schema in output_schemas.items()) + ({"name": "plain", "inputSchema": {"type": "object"}},)
    return Catalogue(server=server, era="modern", protocol_version="2026-07-28", tools=tools)


def result(value) -> dict:
    return {"content": [], "structuredContent": value}


@pytest.mark.parametrize(("uri", "name"), [
    (None, "Draft202012Validator"),
    ("https://json-schema.org/draft/2020-12/schema", "Draft202012Validator"),
    ("https://json-schema.org/draft/2019-09/schema#", "Draft201909Validator"),
    ("http://json-schema.org/draft-07/schema#", "Draft7Validator"),
    ("https://json-schema.org/draft-07/schema", "Draft7Validator"),  # https, as many servers write it
    ("http://json-schema.org/draft-06/schema#", "Draft6Validator"),
    ("http://json-schema.org/draft-04/schema", "Draft4Validator"),
    ("https://example.com/own", None),
    ("json-schema.org/draft-07/schema", None),
    (7, None),
])
def test_dialect_names_the_validator_of_each_known_schema_uri(uri, name):
    assert dialect({} if uri is None else {"$schema": uri}) == name


def test_the_dialect_table_names_classes_jsonschema_has():
    import jsonschema.validators

    for name in schemas.DIALECTS.values():
        assert getattr(jsonschema.validators, name).META_SCHEMA


def test_load_problems_are_cheap_checks_with_what_follows():
    assert load_problem({"type": "object"}) is None
    assert load_problem(True).endswith("is a boolean, not a JSON object; its results are not checked")
    assert load_problem({"$schema": 1}) == "its outputSchema's $schema is not a string; its results are not checked"
    wide = {"enum": list(range(schemas.MAX_SCHEMA_NODES))}
    assert load_problem(wide) == f"its outputSchema has more than {schemas.MAX_SCHEMA_NODES} values; its results are not checked"
    big = {"description": "x" * schemas.MAX_SCHEMA_CHARS, "title": "y"}
    assert load_problem(big) == (f"its outputSchema holds more than {schemas.MAX_SCHEMA_CHARS} characters of text; "
                                 "its results are not checked")


def test_compiled_validators_are_cached_per_catalogue_and_a_new_catalogue_is_compiled_again():
    first = catalogue(t={"type": "object", "required": ["x"]})
    assert check_result(first, "t", result({})).errors == ("$: 'x' is a required property",)
    compiled = schemas._CACHE["u"][1]["t"]
    assert check_result(first, "t", result({"x": 1})).errors == ()
    assert schemas._CACHE["u"][1]["t"] is compiled  # the same catalogue: compiled once
    # The server's listing changed (a new catalogue object, same server): its schema now.
    second = catalogue(t={"type": "object", "required": ["y"]})
    assert check_result(second, "t", result({"x": 1})).errors == ("$: 'y' is a required property",)
    assert check_result(first, "plain", result({})).errors == ()  # no outputSchema: nothing to check


def test_a_check_never_raises_on_odd_results():
    odd = catalogue(t={"type": "object", "properties": {"n": {"type": "integer"}}})
    assert check_result(None, "t", result(1)).errors == ()
    assert check_result(odd, "missing-tool", result(1)).errors == ()
    assert check_result(odd, "t", {"content": [], "structuredContent": None}).errors == ("$: None is not of type 'object'",)
    assert check_result(odd, "t", {"isError": True}).errors == ()


def test_a_pattern_and_formats_follow_the_draft_and_formats_are_not_asserted():
    # format is an annotation in 2020-12 (no format assertion vocabulary): never a problem.
    tool = catalogue(t={"type": "object", "properties": {"when": {"type": "string", "format": "date-time"},
                                                         "code": {"type": "string", "pattern": "^[A-Z]+$"}}})
    assert check_result(tool, "t", result({"when": "not a date", "code": "ABC"})).errors == ()
    assert check_result(tool, "t", result({"code": "abc"})).errors == ("$.code: 'abc' does not match '^[A-Z]+$'",)


def test_advertise_warns_once_per_bad_output_schema_and_keeps_the_tool():
    warnings: list[str] = []
    listed = catalogue("w", bad=[1], fine={"type": "object"})
    operations = advertise({"w": listed}, {}, warnings.append)
    assert [op.operation for op in operations] == ["bad", "fine", "plain"]
    assert warnings == ["server 'w': tool 'bad': its outputSchema is an array, not a JSON object; its results are not checked"]


BROKEN = {"type": "objekt"}  # fails its metaschema


def test_a_listed_catalogue_is_compiled_at_load_and_a_broken_schema_warns_there_once():
    tools = catalogue("listed", bad=BROKEN, fine={"type": "object", "required": ["x"]}).tools
    compiled = schemas.prepare("listed", tools)  # what discovery does, on the server's thread
    listed = Catalogue(server="listed", era="modern", protocol_version="2026-07-28", tools=tools)
    schemas.remember(listed, compiled)
    warnings: list[str] = []
    assert [op.operation for op in advertise({"listed": listed}, {}, warnings.append)] == ["bad", "fine", "plain"]
    assert len(warnings) == 1 and warnings[0].startswith(
        "server 'listed': tool 'bad': its outputSchema does not compile ($.type: 'objekt' is not valid")
    assert warnings[0].endswith("; its results are not checked")
    first = check_result(listed, "bad", result({"any": 1}))
    assert (first.errors, first.warning) == ((), None)  # said at load: the call does not repeat it
    assert schemas._CACHE["listed"][1]["fine"] is compiled["fine"]  # the validator compiled at load is the one used
    assert check_result(listed, "fine", result({})).errors == ("$: 'x' is a required property",)


def test_a_saved_catalogue_compiles_at_the_first_call_and_warns_there_once_per_process():
    saved = catalogue("saved", bad=BROKEN)  # as read from the store: not prepared
    warnings: list[str] = []
    advertise({"saved": saved}, {}, warnings.append)
    assert warnings == []  # nothing compiled at load
    first, second = check_result(saved, "bad", result(1)), check_result(saved, "bad", result(2))
    assert first.warning is not None and first.warning.startswith("server 'saved': tool 'bad': its outputSchema does not compile")
    assert (first.errors, second.errors, second.warning) == ((), (), None)
    # The server lists the same tool again (a new catalogue object): the same line is not given twice.
    again = Catalogue(server="saved", era="modern", protocol_version="2026-07-28", tools=saved.tools)
    schemas.remember(again, schemas.prepare("saved", again.tools))
    later: list[str] = []
    advertise({"saved": again}, {}, later.append)
    assert later == [] and check_result(again, "bad", result(3)).warning is None


def test_the_same_schema_compiles_once_for_every_listing_and_server_that_has_it():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    first = schemas.prepare("once-a", catalogue("once-a", t=schema).tools)
    again = schemas.prepare("once-a", catalogue("once-a", t=dict(reversed(list(schema.items())))).tools)  # read again
    other = schemas.prepare("once-b", catalogue("once-b", u=schema).tools)  # another server's tool
    assert first["t"].validator is not None
    assert again["t"].validator is first["t"].validator and other["u"].validator is first["t"].validator
    broken_a = schemas.prepare("once-a", catalogue("once-a", bad=BROKEN).tools)["bad"]
    broken_b = schemas.prepare("once-b", catalogue("once-b", bad=BROKEN).tools)["bad"]
    # Compiled once, but each server's warning names that server.
    assert broken_a.take_warning().startswith("server 'once-a': tool 'bad': its outputSchema does not compile")
    assert broken_b.take_warning().startswith("server 'once-b': tool 'bad': its outputSchema does not compile")


CHILD = r"""
import json, sys
from albedo_actors.catalogue import Catalogue
from albedo_actors.catalogue.naming import advertise
import albedo_actors.runtime, albedo_actors.binding
tools = tuple({"name": f"t{i}", "inputSchema": {"type": "object"}, "outputSchema": {"type": "object", "required": ["x"]}}
              for i in range(200))
advertise({"s": Catalogue(server="s", era="modern", protocol_version="2026-07-28", tools=tools)}, {}, print)
loaded = "jsonschema" in sys.modules or "re2" in sys.modules
from albedo_actors.catalogue.schemas import check_result
errors = check_result(Catalogue(server="s", era="modern", protocol_version="2026-07-28", tools=tools), "t1", {"structuredContent": {}}).errors
re2_at_check = "re2" in sys.modules  # a schema without a pattern never loads it
patterned = ({"name": "p", "inputSchema": {"type": "object"}, "outputSchema": {"type": "string", "pattern": "^[a-z]+$"}},)
more = check_result(Catalogue(server="p", era="modern", protocol_version="2026-07-28", tools=patterned), "p", {"structuredContent": "A"}).errors
print(json.dumps({"at_load": loaded, "at_check": "jsonschema" in sys.modules, "errors": errors + more,
                  "re2_at_check": re2_at_check, "re2_at_pattern": "re2" in sys.modules}))
"""


def test_jsonschema_loads_at_the_first_checked_call_and_re2_at_the_first_pattern_not_at_import_or_load():
    run = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, cwd=PACKAGE_ROOT)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1]) == {
        "at_load": False, "at_check": True, "re2_at_check": False, "re2_at_pattern": True,
        "errors": ["$: 'x' is a required property", "$: 'A' does not match '^[a-z]+$'"]}


# -- issue 23: keywords bounded, the wall clock, the metaschema check ----------------------------------


def reference_errors(schema, value) -> bool:
    """Whether jsonschema's own validator finds a problem: the reference for equality."""
    import jsonschema

    return any(True for _ in jsonschema.Draft202012Validator(schema).iter_errors(value))


EQUALITY = [
    [1, 1.0], [1, True], [0, False], [None, False, 0, "", [], {}], ["1", 1], [[], []], [{}, {}],
    [{"a": 1, "b": 2}, {"b": 2, "a": 1}], [{"a": None}, {"a": False}], [{"a": 1}, {"a": 1, "b": 1}],
    [[1, {"x": [True]}], [1.0, {"x": [1]}]], [[1, {"x": [2]}], [1.0, {"x": [2.0]}]], [[1, 2], [2, 1]],
    [2 ** 53 + 1, float(2 ** 53)], [-0.0, 0], [0.1 + 0.2, 0.3], [{"a": {"b": [1, {"c": 1}]}}, {"a": {"b": [1.0, {"c": 1.0}]}}],
]


@pytest.mark.parametrize("items", EQUALITY, ids=[json.dumps(e)[:40] for e in EQUALITY])
def test_unique_items_and_enum_follow_json_schema_equality_as_jsonschema_does(items):
    # 1 and 1.0 are equal, true and 1 are not, an object's member order does not matter.
    tool = catalogue("eq", unique={"type": "array", "uniqueItems": True}, member={"enum": items[:1]})
    repeated = bool(check_result(tool, "unique", result(items)).errors)
    assert repeated is reference_errors({"uniqueItems": True}, items)
    for other in items[1:]:
        assert bool(check_result(tool, "member", result(other)).errors) is reference_errors({"enum": items[:1]}, other)


def test_unique_items_names_the_two_equal_items():
    tool = catalogue("uq", t={"uniqueItems": True})
    assert check_result(tool, "t", result([{"a": [1]}, {"b": 2}, {"a": [1.0]}])).errors == (
        "$: the array has non-unique elements: items 0 and 2 are equal ({'a': [1.0]})",)


def test_enum_over_many_members_is_a_set_lookup_and_keeps_jsonschemas_answers():
    members = [f"code-{i}" for i in range(2000)] + [{"k": 1}, [1, 2]]
    tool = catalogue("en", t={"type": "array", "items": {"enum": members}})
    value = [f"code-{i % 2000}" for i in range(9000)] + [{"k": 1.0}, [1.0, 2], True]
    (line,) = check_result(tool, "t", result(value)).errors
    assert line.startswith("$[9002]: True is not one of ['code-0', 'code-1', ")


@pytest.mark.parametrize(("schema", "value"), [
    ({"prefixItems": [{"type": "string"}], "unevaluatedItems": False}, ["a", "b"]),
    ({"prefixItems": [{"type": "string"}], "unevaluatedItems": {"type": "integer"}}, ["a", 1, "c"]),
    ({"allOf": [{"items": True}], "unevaluatedItems": False}, list(range(5000))),
    ({"contains": {"type": "string"}, "unevaluatedItems": False}, ["a", 1]),
    ({"properties": {"a": True}, "unevaluatedProperties": False}, {"a": 1, "b": 2, "c": 3}),
    ({"allOf": [{"patternProperties": {"^x": True}}], "unevaluatedProperties": {"type": "string"}}, {"x1": 1, "y": 2, "z": "s"}),
    ({"if": {"required": ["a"]}, "then": {"properties": {"b": True}}, "unevaluatedProperties": False}, {"a": 1, "b": 2}),
    ({"$schema": "https://json-schema.org/draft/2019-09/schema", "items": [True], "unevaluatedItems": False}, [1, 2]),
    ({"$schema": "https://json-schema.org/draft/2019-09/schema", "properties": {"a": True}, "unevaluatedProperties": False},
     {"a": 1, "b": 2}),
])
def test_unevaluated_keywords_give_jsonschemas_answers(schema, value):
    import jsonschema

    tool = catalogue("un", t=schema)
    ours = check_result(tool, "t", result(value)).errors
    theirs = [e.message for e in jsonschema.validators.validator_for(schema)(schema).iter_errors(value)]
    assert bool(ours) is bool(theirs)
    assert [line.split(": ", 1)[1].split(" (")[0] for line in ours] == [m.split(" (")[0] for m in theirs]


COSTLY = {"anyOf": [{"type": "string"}] * 3000}  # each failing branch writes out the instance
BIG = {f"k{i}": "x" * 100 for i in range(19_000)}


def listed(server: str, **output_schemas) -> Catalogue:
    """A catalogue as a server has just listed it: compiled at load (discovery's prepare)."""
    tools = catalogue(server, **output_schemas).tools
    made = Catalogue(server=server, era="modern", protocol_version="2026-07-28", tools=tools)
    schemas.remember(made, schemas.prepare(server, tools))
    return made


def test_a_check_stops_at_the_deadline_and_keeps_what_it_found():
    tool = listed("wall", t={"allOf": [{"required": ["missing"]}, COSTLY]})
    checked = check_result(tool, "t", result(BIG), deadline=time.monotonic() + 0.2)
    assert checked.errors[0] == "$: 'missing' is a required property"
    assert checked.errors[1].startswith("checking stopped at the call's deadline, ")
    assert len(checked.errors) == 2


def test_a_check_without_a_deadline_stops_after_max_check_seconds(monkeypatch):
    monkeypatch.setattr(schemas, "MAX_CHECK_SECONDS", 0.2)
    tool = listed("cap", t=COSTLY)
    assert check_result(tool, "t", result(BIG)).errors == ("checking stopped after 0.2 s (the outputSchema is too costly to check)",)
    # A deadline later than the cap is held to the cap.
    assert check_result(tool, "t", result(BIG), deadline=time.monotonic() + 60).errors == (
        "checking stopped after 0.2 s (the outputSchema is too costly to check)",)


def test_a_match_that_could_outlast_the_time_left_is_not_started():
    tool = catalogue("afford", t={"type": "string", "pattern": "[ab]*a[ab]{100}c"})
    text = "ab" * (1 << 20)  # its worst case: 2 MiB times about 107 instructions, over 2 s of RE2's NFA
    assert check_result(tool, "t", result(text), deadline=time.monotonic() + 0.5).errors == (
        "checking stopped: a string of 2097152 characters is too long to match against the pattern "
        "'[ab]*a[ab]{100}c' in the time the call has left",)
    assert check_result(tool, "t", result("ab" * 10), deadline=time.monotonic() + 0.5).errors == (
        "$: 'abababababababababab' does not match '[ab]*a[ab]{100}c'",)


def test_a_saved_catalogues_first_call_compiles_within_its_deadline_or_again_at_the_next():
    tool = catalogue("late", t={"type": "object", "required": ["late"]})  # as read from the store
    assert check_result(tool, "t", result({}), deadline=time.monotonic() - 1).errors == (
        "checking stopped at the call's deadline, 0 ms into the check (the outputSchema is too costly to check in "
        "the time the call had left)",)
    assert "t" not in schemas._CACHE["late"][1]  # nothing kept: the next call compiles
    assert check_result(tool, "t", result({})).errors == ("$: 'late' is a required property",)
    # The metaschema check of a large schema is held to the deadline too.
    large = catalogue("late", t={"anyOf": [{"type": "string", "title": "not compiled before"}] * 3000})
    assert check_result(large, "t", result(1), deadline=time.monotonic() + 0.1).errors[0].startswith(
        "checking stopped at the call's deadline, ")


def test_a_saved_catalogues_pattern_re2_cannot_run_warns_at_its_first_call_once():
    saved = catalogue("saved-re2", t={"properties": {"s": {"pattern": "(?<=a)b"}, "n": {"type": "integer"}}})
    first = check_result(saved, "t", result({"s": "zz", "n": "q"}))
    assert first.errors == ("$.n: 'q' is not of type 'integer'",)
    assert first.warning == ("server 'saved-re2': tool 't': its outputSchema's pattern '(?<=a)b' cannot be matched in "
                             "linear time (a lookbehind), so it is not checked; the rest of the schema is")
    assert check_result(saved, "t", result({"s": "zz"})).warning is None


def test_a_subschema_that_names_its_dialect_is_checked_by_our_bounded_classes():
    # jsonschema would check a subschema with its own $schema by its own class: Python's
    # re, quadratic uniqueItems, no budget.
    tool = catalogue("dialect", t={"properties": {
        "s": {"$schema": "https://json-schema.org/draft/2020-12/schema", "pattern": "^(a|a?)+$"},
        "u": {"$schema": "http://json-schema.org/draft-07/schema#", "uniqueItems": True},
        "m": {"$ref": "https://json-schema.org/draft/2020-12/schema"}}})
    value = {"s": "a" * 40 + "!", "u": [{"i": k} for k in range(5000)] + [{"i": 0.0}], "m": {"uniqueItems": "yes"}}
    assert check_result(tool, "t", result(value)).errors == (
        "$.s: '" + "a" * 40 + "!' does not match '^(a|a?)+$'",
        "$.u: the array has non-unique elements: items 0 and 5000 are equal ({'i': 0.0})",
        "$.m.uniqueItems: 'yes' is not of type 'boolean'")


def test_a_pattern_re2_cannot_run_counts_as_matching_wherever_it_is_used():
    tool = catalogue("unknown-pattern", t={
        "type": "object", "properties": {"s": {"pattern": "(?=x)"}},
        "patternProperties": {"(?=y)": {"type": "integer"}}, "additionalProperties": False})
    # "y1" might match (?=y): neither its patternProperties subschema nor additionalProperties applies.
    assert check_result(tool, "t", result({"s": "nope", "y1": "not an integer"})).errors == ()


def test_patterns_in_data_keywords_are_not_compiled_and_in_unknown_keywords_are():
    found = schemas._patterns({"properties": {"enum": {"pattern": "^a"}, "p": {"enum": [{"pattern": "(?=data)"}]}},
                               "examples": [{"pattern": "(?=x)"}], "x-extension": {"pattern": "^b"},
                               "patternProperties": {"^c": {"propertyNames": {"pattern": "^d"}}}})
    assert found == ["^c", "^a", "^d", "^b"] or sorted(found) == ["^a", "^b", "^c", "^d"]


def test_a_schema_with_too_many_distinct_patterns_is_not_used():
    many = {"properties": {f"p{i}": {"pattern": f"^{i}$"} for i in range(schemas.MAX_SCHEMA_PATTERNS + 1)}}
    (compiled,) = schemas.prepare("many", catalogue("many", t=many).tools[:1]).values()
    assert compiled.validator is None
    assert compiled.take_warning() == (f"server 'many': tool 't': its outputSchema has more than {schemas.MAX_SCHEMA_PATTERNS} "
                                       "distinct patterns; its results are not checked")


def test_a_long_pattern_name_is_not_compiled_and_the_rest_is_checked():
    # A patternProperties name is not among the schema's counted text: its length is bounded here.
    tool = catalogue("long-name", t={"patternProperties": {"x" * 100_000: {"type": "integer"}}, "required": ["y"]})
    checked = check_result(tool, "t", result({"x" * 100_000: "not an integer"}))
    assert checked.errors == ("$: 'y' is a required property",)
    assert "cannot be matched in linear time (longer than 8192 characters)" in checked.warning


@pytest.mark.timeout(30)  # jsonschema's check_schema takes 71 s on this schema
def test_the_metaschema_check_is_linear_in_the_schema():
    # draft-04's metaschema says "enum" has uniqueItems: 4,000 objects are 8 million pairs to compare.
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "enum": [{"a": i} for i in range(4000)]}
    (compiled,) = schemas.prepare("meta", catalogue("meta", t=schema).tools[:1]).values()
    assert compiled.validator is not None and compiled.take_warning() is None
    tool = Catalogue(server="meta", era="modern", protocol_version="2026-07-28", tools=catalogue("meta", t=schema).tools)
    schemas.remember(tool, {"t": compiled})
    assert check_result(tool, "t", result({"a": 3999.0})).errors == ()
    assert check_result(tool, "t", result({"a": 4000})).errors[0].startswith("$: {'a': 4000} is not one of [{'a': 0}, ")
    # And a metaschema problem there is still found.
    broken = {"$schema": "http://json-schema.org/draft-04/schema#", "enum": [{"a": 1}, {"a": 1.0}]}
    (bad,) = schemas.prepare("meta", catalogue("meta", t=broken).tools[:1]).values()
    assert bad.validator is None and "does not compile ($.enum: " in bad.take_warning()


def test_formats_are_not_asserted_by_the_metaschema_check_so_python_re_compiles_no_server_pattern():
    # "(" is not a regex: the metaschema's "format": "regex" would refuse the schema. It is
    # used, and the pattern is the one thing not checked.
    tool = catalogue("fmt", t={"properties": {"s": {"pattern": "("}, "n": {"type": "integer"}}})
    checked = check_result(tool, "t", result({"s": "x", "n": "y"}))
    assert checked.errors == ("$.n: 'y' is not of type 'integer'",)
    assert checked.warning is not None and "pattern '(' cannot be matched in linear time (RE2: missing ): ()" in checked.warning


def test_jsonschema_matches_patterns_with_re_only_where_our_route_reaches():
    # jsonschema has no hook for its regex engine: the modules whose re.search we route
    # are the only ones that match with re (formats are not asserted; exceptions.py
    # matches a fixed pattern of its own). A new jsonschema that matches elsewhere fails here.
    import pathlib
    import re

    import jsonschema

    check_result(catalogue("route", t={"pattern": "^a"}), "t", result("a"))  # the route is in place
    uses: dict[str, set[str]] = {}
    for path in pathlib.Path(jsonschema.__file__).parent.glob("*.py"):
        calls = set(re.findall(r"\bre\.(search|match|fullmatch|compile|finditer|findall|sub|split)\(", path.read_text()))
        if calls or re.search(r"from re import", path.read_text()):
            uses[path.stem] = calls
    assert uses == {"_keywords": {"search"}, "_legacy_keywords": {"search"}, "_utils": {"search"},
                    "_format": {"compile"}, "exceptions": {"compile"}}
    from jsonschema import _keywords, _legacy_keywords, _utils

    assert all(isinstance(module.re, schemas._PatternRoute) for module in (_keywords, _legacy_keywords, _utils))
    assert _utils.re.search("^a+$", "aaa") is not None  # outside a check: Python's re, unchanged


def test_the_errors_a_check_keeps_hold_no_more_text_than_a_line_shows():
    # jsonschema writes out the whole instance in most messages, and anyOf keeps every
    # branch's errors until it ends: without a cut, each of these holds the 2 MB object's text.
    from jsonschema.exceptions import ValidationError

    validator = schemas._checking_class("Draft202012Validator")({"anyOf": [{"type": "string"}, {"type": "integer"}] * 25})
    schemas._STATE.budget = schemas._Budget(None, time.monotonic() + 60, server=True)
    try:
        (error,) = validator.iter_errors(BIG)
    finally:
        schemas._STATE.budget = None
    assert isinstance(error, ValidationError) and len(error.context) == 50
    assert all(len(e.message) <= 2 * schemas.MAX_ERROR_CHARS and len(e.args[0]) == len(e.message) for e in [error, *error.context])
    assert error.context[0].message.startswith("{'k0': 'xxxx")
