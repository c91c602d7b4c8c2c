"""Advertised names, schema bounds and the advertised list (albedo_actors.catalogue.naming)."""

from __future__ import annotations

import hashlib
import json
import random
import re
import subprocess
import sys

import pytest

from albedo_actors.catalogue import Catalogue
from albedo_actors.config import ServerConfig
from albedo_actors.catalogue.naming import MAX_DESCRIPTION, MAX_NAME, Advertised, InvalidSchema, SchemaTooLarge, advertise, advertised_name, bound_schema, sanitise, server_prefix

NAME = re.compile(r"^mcp_[A-Za-z0-9_-]*_[0-9a-f]{8}$")
OBJECT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


def tool(name, schema=None, description=None):
    entry = {"name": name, "inputSchema": OBJECT if schema is None else schema}
    if description is not None:
        entry["description"] = description
    return entry


def catalogue(server, *tools, resources=(), templates=(), prompts=()):
    return Catalogue(
        server=server,
        era="modern",
        protocol_version="2026-07-28",
        tools=tuple(tools),
        resources=tuple(resources),
        resource_templates=tuple(templates),
        prompts=tuple(prompts),
    )


def config(name, **kwargs):
    return ServerConfig(name=name, type="stdio", command="/bin/true", **kwargs)


def random_text(rng: random.Random) -> str:
    alphabets = [
        "abcXYZ019_-",
        "./: @#\t\n\0é漢字🙂",
        "".join(map(chr, range(0x20, 0x7F))),
    ]
    length = rng.choice([0, 1, 5, 23, 24, 25, 49, 50, 51, 64, 100, 300])
    out = []
    for _ in range(length):
        roll = rng.random()
        if roll < 0.1:
            out.append(chr(rng.randrange(0x80, 0x110000)))  # any code point, surrogates too
        else:
            out.append(rng.choice(rng.choice(alphabets)))
    return "".join(out)


# -- names -----------------------------------------------------------------------------------


def test_the_name_has_the_documented_form():
    digest = hashlib.sha256(b"docs\0search").hexdigest()[:8]
    assert advertised_name("docs", "search") == f"mcp_docs_search_{digest}"


def test_names_are_stable_across_processes():
    here = [advertised_name("docs", "search"), advertised_name("a.b", "tool/x"), advertised_name("s", "read_resource", "read_resource")]
    code = (
        "import json; from albedo_actors.catalogue.naming import advertised_name as a; "
        "print(json.dumps([a('docs', 'search'), a('a.b', 'tool/x'), a('s', 'read_resource', 'read_resource')]))"
    )
    # A different hash seed: nothing may depend on Python's randomised hash().
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={"PYTHONHASHSEED": "123"}, check=True)
    assert json.loads(there.stdout) == here


def test_the_same_tool_on_two_servers_gets_two_names():
    first, second = advertised_name("alpha", "search"), advertised_name("beta", "search")
    assert first != second
    assert first.startswith("mcp_alpha_search_") and second.startswith("mcp_beta_search_")


def test_tools_that_sanitise_to_the_same_text_stay_distinct():
    names = [advertised_name("docs", t) for t in ("get.page", "get/page", "get page", "get_page", "get😀page")]
    assert {sanitise(t) for t in ("get.page", "get/page", "get page", "get_page")} == {"get_page"}
    assert len(set(names)) == len(names)
    assert all(name.startswith("mcp_docs_get_page_") for name in names)
    # Servers too: "a.b" and "a_b" offering the same tool.
    assert advertised_name("a.b", "x") != advertised_name("a_b", "x")


def test_the_resource_and_prompt_operations_never_take_a_tools_name():
    assert advertised_name("s", "read_resource", "read_resource") != advertised_name("s", "read_resource")
    assert advertised_name("s", "get_prompt", "get_prompt") != advertised_name("s", "get_prompt")


@pytest.mark.parametrize("seed", range(5))
def test_every_name_fits_the_limit_and_the_character_set(seed):
    rng = random.Random(seed)
    seen = {}
    for _ in range(2000):
        server, operation = random_text(rng), random_text(rng)
        name = advertised_name(server, operation)
        assert len(name) <= MAX_NAME, name
        assert NAME.match(name), name
        assert name.startswith(server_prefix(server))
        assert name == advertised_name(server, operation)
        previous = seen.setdefault(name, (server, operation))
        assert previous == (server, operation), f"{previous} and {(server, operation)} share {name}"


def test_truncation_keeps_the_hash_and_distinctness():
    server = "s" * 48
    a, b = "t" * 80 + "a", "t" * 80 + "b"  # differ only past the cut
    name_a, name_b = advertised_name(server, a), advertised_name(server, b)
    assert len(name_a) == len(name_b) == MAX_NAME
    assert name_a != name_b
    assert name_a.endswith("_" + hashlib.sha256(f"{server}\0{a}".encode()).hexdigest()[:8])
    assert name_a[:-9] == name_b[:-9]  # the same visible text; only the hash differs
    # The server keeps at least 24 characters; a short operation lets it keep more.
    assert name_a.startswith("mcp_" + "s" * 24 + "_t")
    assert advertised_name(server, "go").startswith("mcp_" + "s" * 48 + "_go_")
    long_server = "x" * 100
    assert advertised_name(long_server, "go").startswith("mcp_" + "x" * 48 + "_go_")
    assert server_prefix(long_server) == "mcp_" + "x" * 24


def test_short_names_are_not_cut():
    assert advertised_name("s" * 25, "t" * 25) == f"mcp_{'s' * 25}_{'t' * 25}_" + hashlib.sha256(f"{'s' * 25}\0{'t' * 25}".encode()).hexdigest()[:8]


# -- schema bounds -------------------------------------------------------------------------------


def nested(depth):
    schema = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


def test_a_plain_object_schema_is_returned_unchanged():
    assert bound_schema(OBJECT) is OBJECT
    assert bound_schema({"type": "object"}) == {"type": "object"}


@pytest.mark.parametrize(
    "schema",
    [None, [], "object", {"type": "string"}, {"properties": {}}, {"type": "object", "properties": []}, {"type": "object", "required": "x"}],
    ids=["null", "array", "string", "string-schema", "no-type", "properties-array", "required-string"],
)
def test_a_schema_that_is_not_an_object_schema_is_invalid(schema):
    with pytest.raises(InvalidSchema):
        bound_schema(schema)


def test_a_deep_schema_is_too_large_without_recursion():
    bound_schema(nested(10))
    with pytest.raises(SchemaTooLarge, match="deep"):
        bound_schema(nested(40))
    with pytest.raises(SchemaTooLarge):
        bound_schema(nested(100_000))  # far past the recursion limit: no RecursionError


def test_a_schema_with_too_many_values_is_too_large():
    properties = {f"p{i}": {"type": "string"} for i in range(1500)}
    with pytest.raises(SchemaTooLarge, match="values"):
        bound_schema({"type": "object", "properties": properties})


def test_a_schema_over_64_kib_is_too_large():
    properties = {f"p{i}": {"type": "string", "description": "x" * 1000} for i in range(80)}
    with pytest.raises(SchemaTooLarge, match="bytes"):
        bound_schema({"type": "object", "properties": properties})


def test_both_errors_are_value_errors():
    assert issubclass(InvalidSchema, ValueError) and issubclass(SchemaTooLarge, ValueError)


# -- the advertised list ---------------------------------------------------------------------------


def test_one_bad_tool_is_left_out_alone_with_a_warning_naming_it():
    warnings = []
    catalogues = {
        "docs": catalogue("docs", tool("search"), tool("deep", nested(40)), tool("flat", {"type": "string"}), tool("fetch")),
        "other": catalogue("other", tool("search")),
    }
    out = advertise(catalogues, {"docs": config("docs"), "other": config("other")}, warnings.append)
    assert [(a.server, a.operation) for a in out] == [("docs", "search"), ("docs", "fetch"), ("other", "search")]
    assert len(warnings) == 2
    assert "'docs'" in warnings[0] and "'deep'" in warnings[0] and "left out" in warnings[0]
    assert "'docs'" in warnings[1] and "'flat'" in warnings[1] and "left out" in warnings[1]


def test_advertised_entries_carry_name_kind_operation_and_bounded_description():
    out = advertise({"docs": catalogue("docs", tool("search", description="d" * 5000), tool("bare"))}, {}, pytest.fail)
    search, bare = out
    assert search == Advertised(advertised_name("docs", "search"), "docs", "tool", "search", search.description, OBJECT)
    assert len(search.description) == MAX_DESCRIPTION
    assert bare.description == ""
    assert search.as_json() == {
        "name": search.name,
        "server": "docs",
        "kind": "tool",
        "operation": "search",
        "description": search.description,
        "inputSchema": OBJECT,
    }


def test_enabled_and_disabled_tools_apply():
    catalogues = {"docs": catalogue("docs", tool("a"), tool("b"), tool("c"))}
    warnings = []
    only = advertise(catalogues, {"docs": config("docs", enabled_tools=("a", "c", "zz"))}, warnings.append)
    assert [a.operation for a in only] == ["a", "c"]
    assert warnings == ["server 'docs': enabledTools names 'zz', which it does not offer"]
    without = advertise(catalogues, {"docs": config("docs", disabled_tools=("b",))}, pytest.fail)
    assert [a.operation for a in without] == ["a", "c"]


RESOURCES = [{"uri": "demo://readme", "name": "readme"}]
TEMPLATES = [{"uriTemplate": "demo://greeting/{name}", "name": "greeting"}]
PROMPTS = [{"name": "greet", "description": "Greet someone.", "arguments": [{"name": "name", "required": True}]}]


def test_resources_and_prompts_are_one_operation_each_per_server():
    out = advertise({"demo": catalogue("demo", tool("echo"), resources=RESOURCES, templates=TEMPLATES, prompts=PROMPTS)}, {}, pytest.fail)
    assert [(a.kind, a.operation) for a in out] == [("tool", "echo"), ("read_resource", "read_resource"), ("get_prompt", "get_prompt")]
    _echo, read, prompt = out
    assert read.name == advertised_name("demo", "read_resource", "read_resource")
    assert prompt.name == advertised_name("demo", "get_prompt", "get_prompt")
    assert read.input_schema["required"] == ["uri"] and read.input_schema["properties"]["uri"]["type"] == "string"
    assert set(prompt.input_schema["properties"]) == {"name", "arguments"}
    assert "demo://readme" in read.description and "demo://greeting/{name}" in read.description
    assert "greet(name)" in prompt.description
    # None when the server offers none.
    assert [a.kind for a in advertise({"t": catalogue("t", tool("echo"))}, {}, pytest.fail)] == ["tool"]


def test_a_long_resource_listing_is_bounded():
    many = [{"uri": f"file:///{i:05d}/" + "p" * 100, "name": f"r{i}"} for i in range(500)]
    (read,) = advertise({"fs": catalogue("fs", resources=many)}, {}, pytest.fail)
    assert len(read.description) <= MAX_DESCRIPTION
    assert "more)" in read.description


def test_resource_and_prompt_operations_follow_enabled_and_disabled_tools():
    cat = {"demo": catalogue("demo", tool("echo"), resources=RESOURCES, prompts=PROMPTS)}
    assert [a.operation for a in advertise(cat, {"demo": config("demo", enabled_tools=("echo",))}, pytest.fail)] == ["echo"]
    assert [a.operation for a in advertise(cat, {"demo": config("demo", disabled_tools=("read_resource",))}, pytest.fail)] == ["echo", "get_prompt"]
    assert [a.operation for a in advertise(cat, {"demo": config("demo", enabled_tools=("get_prompt",))}, pytest.fail)] == ["get_prompt"]


# -- what the model is offered of an inputSchema (issue 23, Noted) ------------------------------------

from albedo_actors.catalogue.naming import MAX_ADVERTISED_SCHEMA, MAX_SCHEMA_PROSE, _bounded, _nothing_to_cut, advertised_schema  # noqa: E402


def size_of(schema) -> int:
    return len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass"))


def test_prose_is_cut_and_escaped_where_it_is_a_keyword_and_structure_is_kept_exact():
    long = "é\x1b[2J\u202e" + "w" * 3000
    data = "d\x1b" + "d" * 700  # over the prose bound, but data: never cut
    schema = {
        "type": "object", "title": long, "$comment": long, "x-hint": long, "x-enumDescriptions": [long, "short"],
        "properties": {
            # properties named like prose keywords are parameters: their schemas are walked, not cut
            "description": {"type": "string", "description": long, "default": data, "enum": [data, "b"]},
            "title": {"type": "string", "const": data, "pattern": "^\x1b" + "a" * 600 + "$"},
            "list": {"type": "array", "items": {"type": "object", "properties": {"deep": {"description": long}}},
                     "examples": [[1, 2], long]},
        },
        "$defs": {"thing": {"anyOf": [{"type": "string", "markdownDescription": long}, {"type": "null"}]}},
        "required": ["description"],
    }
    before = json.dumps(schema)
    offered, reduced = advertised_schema(schema)
    assert reduced is None and json.dumps(schema) == before  # the server's schema is never changed
    cut = "é\\x1b[2J\\u202e" + "w" * (MAX_SCHEMA_PROSE - 1 - len("é\\x1b[2J\\u202e")) + "…"
    assert offered["title"] == offered["$comment"] == offered["x-hint"] == cut and len(cut) == MAX_SCHEMA_PROSE
    assert offered["x-enumDescriptions"] == [cut, "short"]
    described = offered["properties"]["description"]
    assert described == {"type": "string", "description": cut, "default": data, "enum": [data, "b"]}
    assert offered["properties"]["title"] == schema["properties"]["title"]  # const and pattern: data, exact
    assert offered["properties"]["title"] is schema["properties"]["title"]  # nothing under it changed: not copied
    assert offered["properties"]["list"]["items"]["properties"]["deep"]["description"] == cut
    assert offered["properties"]["list"]["examples"] == [[1, 2], cut]
    assert offered["$defs"]["thing"]["anyOf"][0]["markdownDescription"] == cut
    assert offered["$defs"]["thing"]["anyOf"][1] is schema["$defs"]["thing"]["anyOf"][1]


def test_a_schema_over_the_bound_loses_prose_first_then_everything_but_names_and_types():
    def wide(n, text, name=lambda i: f"p{i}", **extra):
        return {"type": "object", "description": "root", "required": [name(0), "nope"],
                "properties": {name(i): {"type": "string", "description": text, "examples": [text], **extra} for i in range(n)}}

    # 20 cut descriptions and examples of 512 characters are 20 KiB: cut to 128, they fit.
    offered, reduced = advertised_schema(wide(20, "x" * 1000))
    assert size_of(offered) <= MAX_ADVERTISED_SCHEMA and "cut to 128 characters" in reduced
    assert offered["description"].startswith("albedo: the descriptions in this schema are cut to 128")
    assert all(len(sub["description"]) == 128 for sub in offered["properties"].values())
    # 90 of them do not: the prose is left out, the structure kept whole.
    offered, reduced = advertised_schema(wide(90, "x" * 1000, format="uri"))
    assert reduced.endswith("its descriptions are left out") and size_of(offered) <= MAX_ADVERTISED_SCHEMA
    assert offered["properties"]["p5"] == {"type": "string", "format": "uri"}
    assert offered["required"] == ["p0", "nope"] and offered["description"].startswith("albedo: the descriptions")
    # Structure alone over the bound: only the parameters' names and types.
    offered, reduced = advertised_schema(wide(90, "x", enum=[f"value-{j}" for j in range(20)]))
    assert reduced.endswith("only its parameters' names and types are given") and size_of(offered) <= MAX_ADVERTISED_SCHEMA
    assert offered["properties"]["p89"] == {"type": "string"} and offered["required"] == ["p0"]
    assert offered["description"].startswith("albedo: only the names and types")
    # Even the names are too many: an object schema the model may still call.
    offered, reduced = advertised_schema(wide(400, "x", name=lambda i: f"parameter_{i:04d}_" + "n" * 20))
    assert offered == {"type": "object", "description": offered["description"]} and "parameters are not given" in reduced


def test_the_fast_path_is_taken_only_when_nothing_would_be_cut(seed=7):
    rng = random.Random(seed)
    pieces = ["a", "b c", "\x1b", "\u202e", "\x7f", "\x9b", "é", "\ud800", '"', "\\", "\n", "\r", "\x08"]
    taken = 0
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.choice([1, 5, 40])))
        text *= rng.choice([1, 1, 20, 200])
        key = rng.choice(["description", "title", "x-note", "default", "pattern"])
        schema = {"type": "object", "properties": {"p": {"type": "string", key: text}}}
        schema, size, dumped = _bounded(schema)
        if _nothing_to_cut(dumped, size):
            taken += 1
            assert advertised_schema(schema, size) == (schema, None)
        else:
            offered, _ = advertised_schema(schema, size)
            assert offered is schema or offered != schema  # the slow way: a copy only when something was cut
    assert taken > 100
