"""Output schemas (issue 16 item 2), whole flows: a real runtime and session, the binding,
and the command line, against tests/servers/schema_server.py and the SDK server.

Every schema problem is data on the result (``r.schemaErrors``), never an exception
and never a blocked result.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from albedo_actors.binding import AsyncMcp
from albedo_actors.catalogue.schemas import MAX_CONTENT_DEPTH, MAX_CONTENT_VALUES, MAX_ERROR_CHARS, MAX_ERRORS, MAX_STEPS
from albedo_actors.config import McpConfig, ServerConfig
from albedo_actors.runtime import Runtime
from helpers import HERE, SDK_SERVER

SCHEMA_SERVER = os.path.join(HERE, "servers", "schema_server.py")
RUN_TIMEOUT = 60  # a bound on each command line run, never an expected duration

GOOD_2020 = {"pair": ["x", 1], "id": "k", "a": 1, "b": 2}
BAD_2020 = {"pair": ["x", "y"], "a": 1}
GOOD_07 = {"pair": ["x", 1], "a": 1, "b": 2}
BAD_07 = {"pair": ["x", 1, "extra"], "a": 1}


def schema_server(name: str, *flags: str, **overrides) -> ServerConfig:
    return ServerConfig(name=name, type="stdio", command=sys.executable, args=(SCHEMA_SERVER, *flags), **overrides)


class Session:
    """A runtime over the schema server (``s``, dual era), a legacy one (``old``) and the
    SDK server (``sdk``), with the binding's warnings collected."""

    def __init__(self, home: str, *flags: str) -> None:
        config = McpConfig(home=home, servers=(
            schema_server("s", *flags),
            schema_server("old", "--era", "legacy", *flags),
            ServerConfig(name="sdk", type="stdio", command=sys.executable, args=(SDK_SERVER, "stdio")),
        ))
        self.runtime = Runtime(home, None, config=config, enabled=True)
        self.warnings: list[str] = []

    def __enter__(self) -> Session:
        self.runtime.start()
        self.mcp = self.runtime.mcp(warn=self.warnings.append)
        return self

    def __exit__(self, *exc_info) -> None:
        self.runtime.stop()


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    with Session(str(tmp_path_factory.mktemp("schemas-home"))) as opened:
        assert not opened.runtime.composition().left_out
        yield opened


@pytest.mark.parametrize("server", ["s", "old"])
@pytest.mark.parametrize("tool", ["v2020", "v2020_named"])
def test_a_2020_12_schema_passes_a_good_result_and_names_the_problems_of_a_bad_one(session, server, tool):
    # prefixItems with items: false means "a string, then an integer, nothing more" in
    # 2020-12 only; a draft-07 reading of it refuses every item of the good result.
    good = session.mcp.call(f"{server}/{tool}", value=GOOD_2020)
    assert good.schemaErrors == () and good.structuredContent == GOOD_2020
    bad = session.mcp.call(f"{server}/{tool}", value=BAD_2020)
    assert bad.structuredContent == BAD_2020 and bad.isError is False  # the result itself, unchanged
    assert "$.pair[1]: 'y' is not of type 'integer'" in bad.schemaErrors
    assert any(line.startswith("$: ") and "'b' is a dependency of 'a'" in line for line in bad.schemaErrors), bad.schemaErrors
    assert "schemaErrors" not in bad.as_dict()  # the record's data is the server's JSON alone


@pytest.mark.parametrize("server", ["s", "old"])
def test_a_draft_07_schema_is_checked_as_draft_07(session, server):
    # items in array form and dependencies: draft-07 meanings (2020-12 refuses that
    # items form, and ignores dependencies).
    assert session.mcp.call(f"{server}/v07", value=GOOD_07).schemaErrors == ()
    bad = session.mcp.call(f"{server}/v07", value=BAD_07)
    assert any(line.startswith("$.pair: ") and "Additional items are not allowed" in line for line in bad.schemaErrors), bad.schemaErrors
    assert any(line.startswith("$: ") and "'b' is a dependency of 'a'" in line for line in bad.schemaErrors), bad.schemaErrors


@pytest.mark.parametrize(("tool", "good", "bad", "problem"), [
    ("v2019", {"pair": ["x", 1], "a": 1, "b": 2}, {"pair": ["x", 1, 2]}, "$.pair: Additional items are not allowed"),
    ("v2019", {"pair": ["x", 1], "a": 1, "b": 2}, {"a": 1}, "$: 'b' is a dependency of 'a'"),
    ("v06", {"n": 6}, {"n": 5}, "$.n: 5 is less than or equal to the minimum of 5"),
    ("v04", {"n": 6}, {"n": 5}, "$.n: 5 is less than or equal to the minimum of 5"),
])
def test_the_other_declared_drafts_are_honoured(session, tool, good, bad, problem):
    assert session.mcp.call(f"s/{tool}", value=good).schemaErrors == ()
    errors = session.mcp.call(f"s/{tool}", value=bad).schemaErrors
    assert any(line.startswith(problem) for line in errors), errors


def test_an_unknown_dialect_warns_at_load_and_is_checked_as_2020_12(session):
    warnings = session.runtime.composition().operation_warnings
    assert ("server 's': tool 'unknown': its outputSchema names $schema 'https://example.com/own-dialect', which is not "
            "a JSON Schema dialect this client knows; its results are checked as JSON Schema 2020-12") in warnings
    assert session.mcp.call("s/unknown", value={}).schemaErrors == ("$: 'x' is a required property",)


def test_a_schema_that_does_not_compile_warns_when_the_catalogue_loads_and_leaves_the_tool_callable(session):
    loaded = [w for w in session.runtime.composition().operation_warnings if "'bad_schema'" in w]
    assert len(loaded) == 2, loaded  # once per server that lists it: s and old
    assert loaded[0].startswith("server 's': tool 'bad_schema': its outputSchema does not compile ($.type: ")
    assert loaded[1].startswith("server 'old': tool 'bad_schema': its outputSchema does not compile ($.type: ")
    first = session.mcp.call("s/bad_schema", value={"any": "thing"})
    said = [w for w in session.warnings if "'bad_schema'" in w]
    second = session.mcp.call("s/bad_schema", value=[1, 2])
    assert (first.structuredContent, first.schemaErrors) == ({"any": "thing"}, ())
    assert (second.structuredContent, second.schemaErrors) == ([1, 2], ())
    assert said == loaded  # the binding passed on the load's warnings, once; no call repeats them
    assert [w for w in session.warnings if "'bad_schema'" in w] == loaded
    assert loaded[0].endswith("; its results are not checked")


def test_schemas_that_are_not_objects_or_too_deep_warn_once_at_load_and_are_not_checked(session):
    warnings = session.runtime.composition().operation_warnings
    assert "server 's': tool 'not_object': its outputSchema is an array, not a JSON object; its results are not checked" in warnings
    assert "server 's': tool 'deep': its outputSchema is more than 32 levels deep; its results are not checked" in warnings
    for tool in ("not_object", "deep"):
        assert sum(f"tool {tool!r}" in w for w in warnings if w.startswith("server 's'")) == 1
        result = session.mcp.call(f"s/{tool}", value="not an object at all")
        assert (result.structuredContent, result.schemaErrors) == ("not an object at all", ())


def test_a_missing_structured_content_is_one_problem_and_the_result_is_kept(session):
    result = session.mcp.call("s/v2020")
    assert result.content[0]["text"] == "no structured content"
    assert result.schemaErrors == ("structuredContent is missing: the tool declares an outputSchema",)


def test_an_error_result_is_not_checked(session):
    result = session.mcp.call("s/errors", value={"not": "matching"})
    assert result.isError is True and result.schemaErrors == ()


def test_tools_without_an_output_schema_and_a_real_sdk_servers_schema(session):
    assert session.mcp.call("s/echo", text="plain").schemaErrors == ()
    # The SDK derives add's outputSchema from its pydantic return type.
    added = session.mcp.call("sdk/add", a=2, b=3)
    assert added.structuredContent == {"sum": 5} and added.schemaErrors == ()
    assert session.runtime.composition().catalogues["sdk"].tool("add")["outputSchema"]["required"] == ["sum"]


def test_the_async_binding_carries_schema_errors_too(session):
    import asyncio

    amcp = AsyncMcp(session.runtime.composer.actor_ref, session.warnings.append)
    bad = asyncio.run(amcp.call("s/v07", {"value": BAD_07}))
    assert any("'b' is a dependency of 'a'" in line for line in bad.schemaErrors)


def test_a_deep_or_huge_structured_content_is_not_checked_and_says_so(session):
    deep: object = 1
    for _ in range(MAX_CONTENT_DEPTH + 10):
        deep = [deep]
    assert session.mcp.call("s/v2020", value={"a": deep}).schemaErrors == (
        f"structuredContent is more than {MAX_CONTENT_DEPTH} levels deep; it is not checked",)
    huge = session.mcp.call("s/v2020", value={"pair": list(range(MAX_CONTENT_VALUES + 1))})
    assert huge.schemaErrors == (f"structuredContent has more than {MAX_CONTENT_VALUES} values; it is not checked",)
    assert len(huge.structuredContent["pair"]) == MAX_CONTENT_VALUES + 1


def test_a_self_reference_and_a_costly_fan_out_stop_with_a_note(session):
    assert session.mcp.call("s/loop_ref", value={}).schemaErrors == (
        "checking stopped: the outputSchema refers to itself without end",)
    assert session.mcp.call("s/fan_out", value={}).schemaErrors == (
        f"checking stopped after {MAX_STEPS} steps (the outputSchema is too costly to check)",)


def test_a_nested_repetition_is_checked_and_warns_no_more(session):
    # ^(a+)+$ is checked now (by RE2); its attack, 40 a's and a "!", runs in a child
    # process below (test_patterns_that_backtrack_...), as Python's re would hold the GIL.
    assert session.mcp.call("s/redos", value={"s": "a" * 40}).schemaErrors == ()
    assert session.mcp.call("s/redos", value={"s": "ab"}).schemaErrors == ("$.s: 'ab' does not match '^(a+)+$'",)
    assert not [w for w in session.runtime.composition().operation_warnings if "'redos'" in w]


def test_a_pattern_re2_cannot_run_warns_once_at_load_and_the_rest_of_the_schema_is_checked(session):
    session.mcp.tools()  # the binding has passed on this composition's load warnings
    said = [w for w in session.runtime.composition().operation_warnings if "server 's': tool 'no_linear'" in w]
    assert said == ["server 's': tool 'no_linear': its outputSchema's pattern '(a)\\\\1' cannot be matched in linear "
                    "time (a backreference), nor can 1 more of its patterns; those are not checked, the rest of the "
                    "schema is"]
    before = [w for w in session.warnings if "tool 'no_linear'" in w]
    # Neither pattern matches these strings, and neither is a problem: only the integer is.
    result = session.mcp.call("s/no_linear", value={"s": "xy", "t": "b", "n": "q"})
    assert result.schemaErrors == ("$.n: 'q' is not of type 'integer'",)
    assert session.mcp.call("s/no_linear", value={"s": "aa", "t": "a", "n": 1}).schemaErrors == ()
    assert before and [w for w in session.warnings if "tool 'no_linear'" in w] == before  # the calls add none


def test_problems_are_few_bounded_one_line_and_escaped(session):
    hostile = {"\x1b]0;owned\x07\u202ekey\n": "s" * 5000}
    (line,) = session.mcp.call("s/v2020", value=hostile).schemaErrors
    assert len(line) <= MAX_ERROR_CHARS and line.endswith("…")
    assert line.startswith("$['\\x1b]0;owned\\x07\\u202ekey\\n']: 'sss")
    assert not any(ch in line for ch in "\x1b\x07\u202e\n")
    many = session.mcp.call("s/v2020", value={f"k{i}": "s" for i in range(20)}).schemaErrors
    assert len(many) == MAX_ERRORS and many[-1] == "(more problems not listed)"
    assert all(line.endswith("'s' is not of type 'integer'") for line in many[:-1])


# -- $ref: nothing is ever fetched ----------------------------------------------------------------


class _Counting(http.server.BaseHTTPRequestHandler):
    """Serves any schema asked for, counting each request: a fetch would succeed."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.server.requests.append(self.path)  # type: ignore[attr-defined]
        body = b'{"type": "string"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/schema+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_remote_refs_are_never_fetched_and_fail_locally(tmp_path):
    listener = http.server.HTTPServer(("127.0.0.1", 0), _Counting)
    listener.requests = []  # type: ignore[attr-defined]
    serving = threading.Thread(target=listener.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    serving.start()
    url = f"http://127.0.0.1:{listener.server_address[1]}/schema.json"
    try:
        with Session(str(tmp_path), "--ref-url", url) as opened:
            absolute = opened.mcp.call("s/remote_ref", value={"x": 1})
            relative = opened.mcp.call("s/remote_ref", value={"y": 1})
            # the 2020-12 metaschema, named by its https URL, is what jsonschema ships: resolved, and checked
            meta = opened.mcp.call("s/remote_ref", value={"meta": {"type": 5}})
    finally:
        listener.shutdown()
        listener.server_close()
        serving.join(10)
    assert listener.requests == []  # type: ignore[attr-defined]
    assert absolute.schemaErrors == (
        f"$ref {url!r} is not resolved (references outside the schema are never fetched); checking stopped",)
    # a relative $ref under an $id of that host: named as the schema writes it
    assert relative.schemaErrors == (
        "$ref 'other.json' is not resolved (references outside the schema are never fetched); checking stopped",)
    assert any(line.startswith("$.meta.type: 5 is not valid under any of the given schemas") for line in meta.schemaErrors), meta.schemaErrors
    assert absolute.structuredContent == {"x": 1}


# -- the command line -------------------------------------------------------------------------------


def albedo(home, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "albedo_actors", "--home", str(home), *argv],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT)


def test_call_prints_one_warning_line_and_json_prints_only_the_servers_json(tmp_path):
    servers = {"s": {"command": sys.executable, "args": [SCHEMA_SERVER]}}
    (tmp_path / "extensions.json").write_text(json.dumps({"mcp": {"servers": servers}}), encoding="utf-8")
    good = albedo(tmp_path, "call", "s/v2020", "--args", json.dumps({"value": GOOD_2020}))
    assert (good.returncode, good.stderr, good.stdout) == (0, "", json.dumps(GOOD_2020) + "\n")
    for extra in ((), ("--json",)):
        bad = albedo(tmp_path, "call", "s/v2020", "--args", json.dumps({"value": BAD_2020}), *extra)
        assert bad.returncode == 0, bad.stderr
        (line,) = bad.stderr.splitlines()
        assert line.startswith("albedo-mcp: warning: server 's': tool 'v2020': its result does not match its "
                               "outputSchema: $.pair[1]: 'y' is not of type 'integer' (and more)")
    printed = json.loads(bad.stdout)  # exactly the server's CallToolResult: nothing of ours added
    assert printed["structuredContent"] == BAD_2020 and printed["content"] == [{"type": "text", "text": json.dumps(BAD_2020)}]
    assert set(printed) <= {"content", "structuredContent", "resultType", "_meta"} and "schemaErrors" not in bad.stdout


# -- a real peer: server-everything (the TypeScript SDK's schemas) -------------------------------------


PEERS = os.environ.get("ALBEDO_PEERS") or os.path.join(os.path.dirname(HERE), ".peers", "peers", "node_modules")
EVERYTHING = os.path.join(PEERS, "@modelcontextprotocol", "server-everything", "dist", "index.js")


def test_server_everythings_structured_tool_matches_its_own_schema(tmp_path):
    if not os.path.isfile(EVERYTHING):
        pytest.fail(f"the npm test peer is not installed: {EVERYTHING} is missing; run scripts/test", pytrace=False)
    config = McpConfig(home=str(tmp_path), servers=(
        ServerConfig(name="everything", type="stdio", command="node", args=(EVERYTHING, "stdio")),))
    warnings: list[str] = []
    with Runtime(str(tmp_path), None, config=config, enabled=True) as runtime:
        mcp = runtime.mcp(warn=warnings.append)
        weather = mcp.call("everything/get-structured-content", location="Chicago")
        schema = runtime.composition().catalogues["everything"].tool("get-structured-content")["outputSchema"]
    assert set(weather.structuredContent) == {"temperature", "conditions", "humidity"}
    assert weather.schemaErrors == ()
    assert not [w for w in warnings if "outputSchema" in w], warnings
    assert isinstance(schema, dict) and schema.get("type") == "object"


# -- issue 23: patterns that backtrack, keywords that cost more than linear, the deadline ---------------
#
# A pattern run by Python's re holds the GIL in C: pytest-timeout could not fire, and the
# whole runner would hang. So each attack runs in a child process, ended by a hard kill
# timeout: a check that freezes its process fails the test instead.

CHILD_TIMEOUT = 60  # a bound on the child, never an expected duration (it takes about 2 s)
PACKAGE_ROOT = os.path.dirname(HERE)
LONG = "a" * 40 + "!"

CHILD_CALLS = r"""
import json, sys
from albedo_actors.config import McpConfig, ServerConfig
from albedo_actors.runtime import Runtime

home, server, cases = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
out = {}
config = McpConfig(home=home, servers=(ServerConfig(name="s", type="stdio", command=sys.executable, args=(server,)),))
with Runtime(home, None, config=config, enabled=True) as runtime:
    mcp = runtime.mcp()
    for tool, value in cases:
        result = mcp.call("s/" + tool, value=value)
        out[tool] = {"content": result.structuredContent, "errors": list(result.schemaErrors)}
print(json.dumps(out))
"""

CHILD_LONG_MATCH = r"""
import json, random, threading
from albedo_actors.catalogue import Catalogue
from albedo_actors.catalogue.schemas import check_result

tool = {"name": "t", "inputSchema": {"type": "object"}, "outputSchema": {"type": "string", "pattern": "[ab]*a[ab]{40}c"}}
catalogue = Catalogue(server="s", era="modern", protocol_version="2026-07-28", tools=(tool,))
check_result(catalogue, "t", {"structuredContent": "c"})  # compiled, and re2 loaded, before counting
# 2 MiB of random a and b: RE2's DFA runs out of states and its NFA takes most of a second
# (linear, with the GIL released); Python's re would take hours, holding it.
text = random.Random(23).randbytes(1 << 21).translate(bytes(97 + i % 2 for i in range(256))).decode()
ticks, done = [0], threading.Event()

def tick():
    while not done.is_set():
        ticks[0] += 1

ticker = threading.Thread(target=tick)
ticker.start()
try:
    before = ticks[0]
    checked = check_result(catalogue, "t", {"structuredContent": text})
    during = ticks[0] - before
finally:
    done.set()
    ticker.join()
print(json.dumps({"errors": list(checked.errors), "during": during}))
"""


def run_child(code: str, *argv: str) -> dict:
    """Run ``code`` in a fresh interpreter and return its last line's JSON; a child that
    has not finished within CHILD_TIMEOUT is killed (its process group) and fails the test."""
    child = subprocess.Popen([sys.executable, "-c", code, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=PACKAGE_ROOT, start_new_session=True)
    try:
        out, err = child.communicate(timeout=CHILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        pytest.fail(f"the child was still running after {CHILD_TIMEOUT} s: a check froze its process", pytrace=False)
    assert child.returncode == 0, err
    return json.loads(out.splitlines()[-1])


def test_patterns_that_backtrack_in_pythons_re_are_checked_at_once_and_other_threads_run(tmp_path):
    cases = [
        ("redos", {"s": LONG}), ("bt_alt", {"s": LONG}), ("bt_opt", {"s": "a" * 35}), ("bt_plus", {"s": LONG}), ("bt_stars", {"s": "a" * 40}),
        ("bt_keys", {LONG: 1}), ("bt_uneval", {LONG: 1}), ("bt_names", {LONG: 1}), ("bt_dialect", {"s": LONG}),
    ]
    out = run_child(CHILD_CALLS, str(tmp_path), SCHEMA_SERVER, json.dumps(cases))
    assert {tool: out[tool]["content"] for tool, _ in cases} == dict(cases)  # every result, as sent
    # An unanchored pattern matches anywhere: (a|a)*$ matches the empty string at the end.
    assert out["bt_alt"]["errors"] == [] and out["bt_opt"]["errors"] == []
    assert out["bt_plus"]["errors"] == [f"$.s: {LONG!r} does not match '^(a|a?)+$'"]
    assert out["redos"]["errors"] == [f"$.s: {LONG!r} does not match '^(a+)+$'"]
    assert out["bt_stars"]["errors"] == [f"$.s: {'a' * 40!r} does not match 'a*a*a*b'"]
    # The name does not match its patternProperties pattern, so it is additional (a string).
    assert out["bt_keys"]["errors"] == [f"$['{LONG}']: 1 is not of type 'string'"]
    assert out["bt_uneval"]["errors"] == [f"$: Unevaluated properties are not allowed ({LONG!r} was unexpected)"]
    assert out["bt_names"]["errors"] == [f"$: {LONG!r} does not match '^(a|a?)+$'"]
    assert out["bt_dialect"]["errors"] == out["bt_plus"]["errors"]


def test_a_long_linear_match_leaves_the_gil_to_other_threads():
    # The checks above take microseconds; this one takes most of a second, and another
    # thread counts on throughout it (Python's re would hold the GIL: no count, then the kill).
    out = run_child(CHILD_LONG_MATCH)
    (line,) = out["errors"]
    assert line.startswith("$: '") and line.endswith("… (2097152 characters) does not match '[ab]*a[ab]{40}c'")
    assert out["during"] > 1000, out  # the other thread kept counting while RE2 matched


def test_the_command_line_checks_a_backtracking_pattern_at_once(tmp_path):
    servers = {"s": {"command": sys.executable, "args": [SCHEMA_SERVER]}}
    (tmp_path / "extensions.json").write_text(json.dumps({"mcp": {"servers": servers}}), encoding="utf-8")
    run = albedo(tmp_path, "call", "s/bt_plus", "--json", "--args", json.dumps({"value": {"s": LONG}}))
    assert run.returncode == 0, run.stderr
    (line,) = run.stderr.splitlines()
    assert line == (f"albedo-mcp: warning: server 's': tool 'bt_plus': its result does not match its outputSchema: "
                    f"$.s: {LONG!r} does not match '^(a|a?)+$'")
    assert json.loads(run.stdout)["structuredContent"] == {"s": LONG}


@pytest.fixture(scope="module")
def deadlines(tmp_path_factory):
    """Schema servers whose calls have a 4 s and a 2 s callTimeoutMs."""
    home = str(tmp_path_factory.mktemp("deadlines-home"))
    config = McpConfig(home=home, servers=(schema_server("four", call_timeout_ms=4000), schema_server("two", call_timeout_ms=2000)))
    with Runtime(home, None, config=config, enabled=True) as runtime:
        assert not runtime.composition().left_out
        yield runtime.mcp()


@pytest.mark.timeout(60)  # jsonschema's own uniqueItems takes about 100 s here
def test_unique_items_over_ten_thousand_objects_is_checked_within_a_4_s_call_timeout(deadlines):
    # 9,999 objects of one member each: 19,999 values, as many as MAX_CONTENT_VALUES lets in.
    distinct = [{"i": k} for k in range(MAX_CONTENT_VALUES // 2 - 1)]
    passed = deadlines.call("four/unique", value=distinct)
    assert passed.schemaErrors == () and passed.structuredContent == distinct
    # The last is the first again, as 0.0: equal in JSON Schema.
    repeated = distinct[:-1] + [{"i": 0.0}]
    reported = deadlines.call("four/unique", value=repeated)
    assert reported.schemaErrors == (f"$: the array has non-unique elements: items 0 and {len(repeated) - 1} are equal ({{'i': 0.0}})",)
    assert reported.structuredContent == repeated


def test_a_check_that_would_outlast_the_calls_deadline_stops_there_and_keeps_the_result(deadlines):
    # Each of the 3,000 failing branches writes out this 19,000-value object: over 5 s of
    # work, within MAX_STEPS, for a call whose callTimeoutMs is 2 s.
    value = {f"k{i}": "x" * 20 for i in range(19_000)}
    # Meanwhile another thread calls another server: the check blocks none of its calls.
    answered, done = [], threading.Event()

    def other_server() -> None:
        while not done.is_set():
            answered.append(deadlines.call("four/echo", text="x").content[0]["text"])

    caller = threading.Thread(target=other_server)
    caller.start()
    try:
        result = deadlines.call("two/costly", value=value)
    finally:
        done.set()
        caller.join(30)
    assert answered and set(answered) == {"x"}
    assert result.structuredContent == value and result.isError is False
    assert result.schemaErrors[-1].startswith("checking stopped at the call's deadline, ")
    assert result.schemaErrors[-1].endswith(" ms into the check (the outputSchema is too costly to check in the time the call had left)")
