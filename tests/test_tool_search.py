"""Tool search, budgets and pinning (issue 16, Deliver 3).

The ranking is checked on real tool lists (tests/fixtures/tools_*.json, dumped once from
npm server-everything, npm server-filesystem and tests/servers/sdk_server.py by
tests/fixtures/dump_tool_lists.py): every known query must find its tool among the
first RECALL_AT results. The budget, the search tool and the most recently used are
checked on plain compositions and on a real session (tests/servers/fault_binding_server.py).
Every wait is bounded; nothing sleeps.
"""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

from albedo_actors.catalogue.composition import Composition, Usage
from albedo_actors.binding import SEARCH_TOOL as BINDING_SEARCH_TOOL
from albedo_actors.catalogue import Catalogue
from albedo_actors.catalogue.naming import MAX_DESCRIPTION, Advertised
from albedo_actors.catalogue.search import MAX_LIMIT, MAX_QUERY, MAX_TOKENS, SEARCH_TOOL, ToolIndex, _words, tokens
from albedo_actors.config import Advertise, McpConfig, ServerConfig, parse
from albedo_actors.errors import ConfigError
from albedo_actors.runtime import Runtime

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")
BINDING_SERVER = os.path.join(HERE, "servers", "fault_binding_server.py")
RECALL_AT = 3  # each known query finds its tool among the first three

# query -> the tools (server/tool) any one of which answers it
KNOWN = {
    "read a file": {"filesystem/read_file", "filesystem/read_text_file"},
    "add two numbers": {"everything/get-sum", "sdk/add"},
    "write a file": {"filesystem/write_file"},
    "list the contents of a directory": {"filesystem/list_directory"},
    "make a new folder": {"filesystem/create_directory"},
    "move or rename a file": {"filesystem/move_file"},
    "search for files matching a pattern": {"filesystem/search_files"},
    "file size and permissions metadata": {"filesystem/get_file_info"},
    "edit lines in a text file": {"filesystem/edit_file"},
    "echo a message back": {"everything/echo", "sdk/echo"},
    "directory tree": {"filesystem/directory_tree"},
    "read an image": {"filesystem/read_media_file"},
    "which directories am I allowed to access": {"filesystem/list_allowed_directories"},
    "read several files at once": {"filesystem/read_multiple_files"},
    "get a tiny image": {"everything/get-tiny-image"},
    "current time": {"sdk/time"},
}


def fixture_catalogues() -> dict[str, Catalogue]:
    catalogues = {}
    for name in ("everything", "filesystem", "sdk"):
        with open(os.path.join(FIXTURES, f"tools_{name}.json"), encoding="utf-8") as f:
            data = json.load(f)
        # server-everything declares that it runs tool calls as tasks (issue 29): its research tool requires one.
        capabilities = {"tasks": {"requests": {"tools": {"call": {}}}}} if name == "everything" else {}
        catalogues[name] = Catalogue(server=name, era="legacy", protocol_version="2025-11-25", tools=tuple(data["tools"]),
                                     capabilities=capabilities)
    return catalogues


def tool(name: str, description: str = "", **properties) -> dict:
    return {"name": name, "description": description,
            "inputSchema": {"type": "object", "properties": {key: {"type": "string"} for key in properties}}}


def composition_of(tools: dict[str, list[dict]], usage: Usage | None = None) -> Composition:
    catalogues = {server: Catalogue(server=server, era="modern", protocol_version="2026-07-28", tools=tuple(listed))
                  for server, listed in tools.items()}
    return Composition(catalogues=catalogues, usage=usage)


def many(n: int = 20) -> dict[str, list[dict]]:
    return {"a": [tool(f"tool{i}", f"does thing number {i}") for i in range(n)],
            "b": [tool("read_file", "Read a file from disk", path="")]}


# -- ranking ----------------------------------------------------------------------------------


def test_tokens_split_snake_camel_dots_slashes_and_drop_plurals_and_stop_words():
    expected = ["read", "text", "file"]
    for spelling in ("read_text_file", "readTextFile", "ReadTextFile", "read-text-file", "fs.read.text.file",
                     "read/text/files", "READ_TEXT_FILE"):
        assert [t for t in tokens(spelling) if t != "f"][-3:] == expected, spelling
    assert tokens("HTTPServer getURLs") == ["http", "server", "get", "url"]
    assert tokens("read a file from the disk") == ["read", "file", "disk"]
    assert tokens("access class") == ["access", "class"]  # "ss" is not a plural


def test_known_queries_find_their_tool_in_the_top_three_of_the_real_tool_lists():
    composition = Composition(catalogues=fixture_catalogues())
    assert len(composition.model_operations()) >= 30  # the three real lists, whole
    missed = {}
    for query, wanted in KNOWN.items():
        found = [f"{item.server}/{item.operation}" for item in composition.search(query, RECALL_AT)]
        if not wanted & set(found):
            missed[query] = found
    assert not missed, f"recall@{RECALL_AT} below 100%: {missed}"


def test_a_query_with_no_known_word_finds_nothing():
    composition = Composition(catalogues=fixture_catalogues())
    assert composition.search("zzqx wvvy", 5) == []
    assert composition.search("the a of", 5) == []  # stop words only


def test_the_index_is_built_at_the_first_search_once_and_not_by_the_turn_set():
    composition = composition_of(many(), Usage())
    composition.usage.set_budget(5)
    composition.model_operations()
    assert composition._index is None  # a turn's set never builds it
    composition.search("read", 1)
    index = composition._index
    assert isinstance(index, ToolIndex)
    composition.search("thing", 3)
    composition.model_operations()
    assert composition._index is index  # once per composition


def reference_bm25(operations: list[Advertised], query: str) -> list[tuple[str, float]]:
    """BM25 (k1 1.2, b 0.75) written out plainly over the whole list at once: what the
    index, built of one part per server, must rank exactly alike."""
    import math
    from collections import Counter

    bags = [Counter(_words(item)) for item in operations]
    average = sum(sum(bag.values()) for bag in bags) / len(bags)
    scored = []
    for number, bag in enumerate(bags):
        length, score = sum(bag.values()), 0.0
        for word in set(tokens(query)):
            holding = sum(1 for other in bags if word in other)
            if bag[word]:
                idf = math.log(1 + (len(bags) - holding + 0.5) / (holding + 0.5))
                score += idf * bag[word] * 2.2 / (bag[word] + 1.2 * (0.25 + 0.75 * length / average))
        if score:
            scored.append((number, score))
    scored.sort(key=lambda pair: (-pair[1], pair[0]))
    return [(operations[number].name, round(score, 9)) for number, score in scored]


def test_an_index_of_one_part_per_server_ranks_as_bm25_over_the_whole_list():
    composition = Composition(catalogues=fixture_catalogues())
    operations = list(composition.model_operations())
    index = ToolIndex(operations)
    assert len(index._parts) == 3  # one per server
    for query in (*KNOWN, "file", "directory image", "echo sum time"):
        expected = reference_bm25(operations, query)
        assert [item.name for item in index.search(query, MAX_LIMIT)] == [name for name, _ in expected[:MAX_LIMIT]], query


def test_a_new_composition_reuses_each_unchanged_servers_part_and_rebuilds_a_changed_one():
    catalogues = fixture_catalogues()
    first = Composition(catalogues=catalogues)
    first.search("read a file", 1)
    parts = {part.operations[0].server: part for _base, part in first._index._parts}
    changed = dict(catalogues, sdk=Catalogue(server="sdk", era="legacy", protocol_version="2025-06-18",
                                             tools=(tool("weather", "Tell the weather in a city", city=""),)))
    second = Composition(catalogues=changed)  # a new session's composition: the sdk server's tools changed
    assert [item.operation for item in second.search("weather in a city", 1)] == ["weather"]
    again = {part.operations[0].server: part for _base, part in second._index._parts}
    assert again["everything"] is parts["everything"] and again["filesystem"] is parts["filesystem"]
    assert again["sdk"] is not parts["sdk"]
    assert "sdk/time" not in [f"{item.server}/{item.operation}" for item in second.search("current time", 5)]


# -- budget, pinning, recency -------------------------------------------------------------------


def test_under_budget_everything_is_advertised_and_no_search_tool():
    usage = Usage()
    composition = composition_of(many(3), usage)
    assert composition.model_operations_shared() is composition.operations
    usage.set_budget(4)  # 4 operations, a budget of 4: under
    assert composition.model_operations_shared() is composition.operations
    assert SEARCH_TOOL not in {item.name for item in composition.model_operations(include=["b/read_file"])}


def test_over_budget_the_pinned_then_included_then_recent_then_the_search_tool():
    warned = []
    usage = Usage(warn=warned.append)
    usage.set_budget(4, ("b/read_file", "a/tool3"))
    composition = composition_of(many(), usage)
    names = composition._names()
    composition.used(names["a/tool7"])
    composition.used(names["a/tool9"])
    shown = composition.model_operations()
    assert [f"{i.server}/{i.operation}" for i in shown[:-1]] == ["b/read_file", "a/tool3", "a/tool9"]
    usage.set_budget(6, ("b/read_file", "a/tool3"))  # room left after the recent: the first listed, in order
    assert [f"{i.server}/{i.operation}" for i in composition.model_operations()[:-1]] == [
        "b/read_file", "a/tool3", "a/tool9", "a/tool7", "a/tool0"]
    usage.set_budget(4, ("b/read_file", "a/tool3"))
    assert shown[-1].name == SEARCH_TOOL == BINDING_SEARCH_TOOL and len(shown) == 4
    shown = composition.model_operations(include=[names["a/tool1"].name, "a/nope"])
    assert [f"{i.server}/{i.operation}" for i in shown[:-1]] == ["b/read_file", "a/tool3", "a/tool1"]
    assert warned == []


def test_a_pinned_name_that_does_not_exist_warns_once_per_session():
    warned = []
    usage = Usage(warn=warned.append)
    usage.configured = Advertise(3, ("a/ghost\x1b[2J", "b/read_file"))
    composition = composition_of(many(), usage)
    for _ in range(3):
        shown = composition.model_operations()
        assert shown[0].operation == "read_file" and shown[-1].name == SEARCH_TOOL and len(shown) == 3
    assert len(warned) == 1 and "a/ghost" in warned[0] and "\x1b" not in warned[0] and "\n" not in warned[0]
    composition_of(many(), usage).model_operations()  # the next composition of the same session
    assert len(warned) == 1


def test_recently_used_are_most_recent_first_and_bounded():
    usage = Usage()
    for i in range(1500):
        usage.used(f"n{i}")
    usage.used("n700")
    recent = usage.recent()
    assert recent[0] == "n700" and recent[1] == "n1499" and len(recent) == 1000


def test_a_session_budget_must_leave_room_for_the_search_tool():
    usage = Usage()
    for bad in (1, 0, -3, True, "5", 2.5):
        with pytest.raises(ConfigError, match="at least 2"):
            usage.set_budget(bad)
    usage.configured = Advertise(5)
    usage.set_budget(None)
    assert usage.budget() is None
    usage.set_budget(9, configured=True)
    assert usage.budget() == Advertise(5)


@pytest.mark.parametrize("advertise, match", [
    ([], "must be an object"),
    ({"maxTools": 1}, "from 2 to"),
    ({"maxTools": True}, "from 2 to"),
    ({"maxTools": 10 ** 6}, "from 2 to"),
    ({}, "from 2 to"),
    ({"maxTools": 8, "pinned": "docs/search"}, "list of strings"),
    ({"maxTools": 8, "pinned": ["search"]}, '"server/tool"'),
    ({"maxTools": 8, "max": 3}, "unknown key"),
])
def test_the_configured_budget_is_validated_in_one_line(advertise, match):
    with pytest.raises(ConfigError, match=match) as caught:
        parse({"mcp": {"advertise": advertise}}, "/h")
    assert "\n" not in str(caught.value) and "mcp.advertise" in str(caught.value)


def test_the_configured_budget_is_read():
    config = parse({"mcp": {"advertise": {"maxTools": 64, "pinned": ["docs/search"]}}}, "/h")
    assert config.advertising == Advertise(64, ("docs/search",))
    assert parse({"mcp": {}}, "/h").advertising is None


# -- the search tool's arguments and hostile text ------------------------------------------------


def test_the_search_tool_validates_its_arguments_and_clamps_the_limit():
    composition = composition_of(many(80))
    for bad, why in (({}, "needs 'query'"), ({"query": ""}, "needs 'query'"), ({"query": 3}, "needs 'query'"),
                     ({"query": "x" * (MAX_QUERY + 1)}, "over 1000"), ({"query": "thing", "limit": True}, "whole number"),
                     ({"query": "thing", "limit": "5"}, "whole number"), ({"query": "thing", "other": 1}, "only 'query'"),
                     ([], "object of arguments")):
        result = composition.call_search(bad)
        assert result["isError"] is True and why in result["content"][0]["text"], bad
    assert len(composition.call_search({"query": "thing", "limit": 0})["structuredContent"]["tools"]) == 1
    assert len(composition.call_search({"query": "thing", "limit": 10 ** 9})["structuredContent"]["tools"]) == MAX_LIMIT
    assert len(composition.call_search({"query": "thing"})["structuredContent"]["tools"]) == 10
    assert len(composition.call_search({"query": "thing", "limit": 3.0})["structuredContent"]["tools"]) == 3
    nothing = composition.call_search({"query": "\x1b[31mqqq\nzzz"})
    assert "isError" not in nothing and "\x1b" not in nothing["content"][0]["text"] and "\n" not in nothing["content"][0]["text"]


def test_hostile_descriptions_are_bounded_in_the_index_and_escaped_in_results():
    huge = ("read file \x1b[2J\u202e\x00 " * 200_000)  # ~3 MB of words and control codes
    composition = composition_of({"evil": [tool("read_file", huge, **{f"p{i}\x1b": "" for i in range(500)})],
                                  "good": [tool("read_text_file", "Read a text file")]})
    (item,) = [i for i in composition.operations if i.server == "evil"]
    assert len(_words(item)) <= MAX_TOKENS
    result = composition.call_search({"query": "read file", "limit": 5})
    for found in result["structuredContent"]["tools"]:
        assert len(found["description"]) <= MAX_DESCRIPTION
        assert not any(ch in found["description"] for ch in "\x1b\u202e\x00\n")
    text = result["content"][0]["text"]
    assert not any(ch in text for ch in "\x1b\u202e\x00\n")
    # The index bounds what it is given itself, whatever bounded it before (an Advertised
    # built with a raw description: every word of it counted would be 1.4 million).
    raw = Advertised("mcp_x_t_00000000", "x", "tool", "t" * 10_000, "a b c d e f g h " * 400_000,
                     {"type": "object", "properties": {f"p{i}": {} for i in range(10_000)}})
    assert len(_words(raw)) <= MAX_TOKENS
    assert ToolIndex([raw]).search("p5 c", 1) == [raw]


# -- a real session -------------------------------------------------------------------------------


@pytest.fixture
def session(tmp_path):
    """A real runtime over fault_binding_server.py (about twenty tools), its configuration
    read at every preparation (``state["advertise"]`` changes it)."""
    home = str(tmp_path / "home")
    state = {"advertise": Advertise(4)}
    server = ServerConfig(name="f", type="stdio", command=sys.executable, args=(BINDING_SERVER,))

    def config() -> McpConfig:
        return McpConfig(home=home, servers=(server,), advertising=state["advertise"])

    with Runtime(home, None, config=config, enabled=True) as runtime:
        yield runtime, state


def test_a_searched_tool_that_is_called_appears_in_the_next_turns_set(session):
    runtime, _state = session
    mcp = runtime.mcp()
    composition = runtime.composition()
    assert len(composition.operations) > 4
    shown = composition.model_operations()
    assert len(shown) == 4 and shown[-1].name == SEARCH_TOOL
    assert all(item.operation != "argv" for item in shown[:-1])
    result = mcp.call(SEARCH_TOOL, query="the server's arguments and working directory", limit=3)
    found = [entry["name"] for entry in result.structuredContent["tools"]]
    argv = found[0]
    assert argv.startswith("mcp_f_argv_")
    assert json.loads(result.content[0]["text"])["tools"][0]["name"] == argv
    assert [entry["name"] for entry in mcp.search("the server's arguments and working directory", limit=3)] == found
    assert "cwd" in mcp.call(argv).content[0]["text"]  # not advertised, but callable
    shown = runtime.composition().model_operations()
    assert shown[0].name == argv and shown[-1].name == SEARCH_TOOL and len(shown) == 4


def test_a_budget_changed_on_a_live_session_holds_from_the_next_turn(session):
    runtime, state = session
    mcp = runtime.mcp()
    everything = runtime.composition().operations
    assert mcp.call("f/echo", text="x").isError is False
    assert len(runtime.composition().model_operations()) == 4
    assert runtime.composition()._index is None  # neither a call nor a turn's set builds the index
    runtime.composer.set_budget(3).get(timeout=10)  # the session's own
    assert len(runtime.composition().model_operations()) == 3
    runtime.composer.set_budget(None).get(timeout=10)  # this session: no budget
    assert runtime.composition().model_operations() == everything
    runtime.composer.set_budget(None, configured=True).get(timeout=10)
    assert len(runtime.composition().model_operations()) == 4
    state["advertise"] = Advertise(6, ("f/echo",))  # the configuration changed: a reload
    from albedo_actors.actors.composer import Reload, TurnEnded

    runtime.request(Reload())
    runtime.request(TurnEnded())
    shown = runtime.composition().model_operations()
    assert len(shown) == 6 and shown[0].operation == "echo"
    state["advertise"] = None
    runtime.request(Reload())
    assert runtime.composition().model_operations() == runtime.composition().operations
    with pytest.raises(ConfigError, match="mcp.search"):
        mcp.search("")


# -- every text field of a search result is escaped (issue 23, Noted) -------------------------------

TEXT_SERVER = os.path.join(HERE, "servers", "fault_text_server.py")
# Code points printable() escapes: C0 (but LF and TAB), DEL, C1, bidi controls, surrogates.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _texts(value):
    """Every string of ``value``, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, sub in value.items():
            yield key
            yield from _texts(sub)
    elif isinstance(value, list):
        for sub in value:
            yield from _texts(sub)


def test_every_text_field_of_a_search_result_is_escaped_in_its_text_and_its_structured_content(tmp_path):
    from servers.fault_text_server import FIND_TOOL, HOSTILE

    from albedo_actors.wire.text import printable

    server = "evil\x1b]0;title\x07\u202e\ud800"  # a configured name: control codes, a bidi override, a lone surrogate
    home = str(tmp_path / "home")
    config = McpConfig(home=home, advertising=Advertise(2), servers=(
        # its own cwd: the default one is named after the server, and a lone surrogate has no file name
        # (left alone here: a dial failure, not the search's; see the report of issue 23)
        ServerConfig(name=server, type="stdio", command=sys.executable, args=(TEXT_SERVER, "--hostile-schema"),
                     cwd=str(tmp_path)),))
    with Runtime(home, None, config=config, enabled=True) as runtime:
        assert runtime.composition().model_operations()[-1].name == SEARCH_TOOL
        result = runtime.mcp().call(SEARCH_TOOL, query="find things by name, or a description", limit=50)
    tools = result.structuredContent["tools"]
    assert len(tools) >= 5
    text = result.content[0]["text"]
    assert UNSAFE.search(text) is None and json.loads(text) == {"tools": tools}
    for entry in tools:
        for field in _texts(entry):
            assert UNSAFE.search(field) is None, field
        assert entry["server"] == printable(server, one_line=True) == "evil\\x1b]0;title\\x07\\u202e\\ud800"
    (found,) = [entry for entry in tools if entry["operation"] == printable(FIND_TOOL, one_line=True)]
    shown = printable(HOSTILE)
    assert found["description"] == printable(f"Find things {HOSTILE} by name.", one_line=True)
    (parameter,) = found["inputSchema"]["properties"].items()
    assert parameter[0] == "q" + shown
    assert parameter[1] == {"type": "string", "title": "t" + shown, "description": "d" + shown,
                            "enum": ["e" + shown], "default": "e" + shown}
    # The name stays callable as it is listed (advertised names are sanitised ASCII already).
    assert found["name"].startswith("mcp_evil_") and re.fullmatch(r"mcp_[A-Za-z0-9_-]*_[0-9a-f]{8}", found["name"])


def test_a_search_result_of_a_hand_built_composition_escapes_a_tool_name_with_a_lone_surrogate():
    composition = composition_of({"s\u202e": [tool("read\ud800file\x1b[2J", "read a file\u2066", **{"p\x9b": ""})],
                                  "b": [tool(f"t{i}", "other") for i in range(5)]})
    result = composition.call_search({"query": "read file"})
    (entry,) = [e for e in result["structuredContent"]["tools"] if e["server"] == "s\\u202e"]
    assert entry["operation"] == "read\\ud800file\\x1b[2J" and entry["description"] == "read a file\\u2066"
    assert list(entry["inputSchema"]["properties"]) == ["p\\x9b"]
    assert UNSAFE.search(result["content"][0]["text"]) is None
