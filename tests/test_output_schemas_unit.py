"""Output schemas (issue 16 item 2), pure: catalogue/schemas.py over Catalogue objects."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
loaded = "jsonschema" in sys.modules
from albedo_actors.catalogue.schemas import check_result
errors = check_result(Catalogue(server="s", era="modern", protocol_version="2026-07-28", tools=tools), "t1", {"structuredContent": {}}).errors
print(json.dumps({"at_load": loaded, "at_check": "jsonschema" in sys.modules, "errors": errors}))
"""


def test_jsonschema_loads_at_the_first_checked_call_not_at_import_or_when_a_saved_catalogue_loads():
    run = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, cwd=PACKAGE_ROOT)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1]) == {"at_load": False, "at_check": True,
                                                       "errors": ["$: 'x' is a required property"]}


@pytest.mark.parametrize(("pattern", "risky"), [
    ("^(a+)+$", True), ("(x*)*", True), ("((ab)+c)*", True), ("(?:[a-z]+\\.)*x", True), ("(?=(a+)+)", True),
    ("^[A-Z]+$", False), ("^(ab|cd)+$", False), ("^a{2}b?$", False), ("(", False),
])
def test_nested_repetition_is_found_in_patterns(pattern, risky):
    assert schemas._nested_repeat(pattern) is risky
