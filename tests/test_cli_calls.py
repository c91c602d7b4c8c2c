"""Calls people can type (issue 25): ``call SERVER/TOOL key=value``, the schema check before
anything is sent, "did you mean", ``tools`` as ``server/tool(params)``, ``tools --model``,
``search``, ``call mcp_search_tools``, ``tools --refresh`` and the age of a saved catalogue,
and one misconfigured server beside good ones.

Every run is the real command line (a subprocess, as tests/test_cli.py runs it) against
real servers: the fault server (tests/servers/fault_server.py: its ``typed`` tool answers
the arguments it was sent, and ``--record`` logs every line it receives), the bundled demo
server and the npm ``@modelcontextprotocol/server-everything``.
"""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from albedo_actors.catalogue.naming import advertised_name
from albedo_actors.catalogue.search import SEARCH_TOOL
from albedo_actors.config import McpConfig, ServerConfig
from albedo_actors.errors import ConfigError
from albedo_actors.runtime import Runtime
from helpers import FAULT_SERVER, HERE, read_record
from test_cli import albedo, assert_one_line_error, fault_entry, write_config

UNSET = "MCP_TEST_CALLS_UNSET_VARIABLE"  # never set (an ALBEDO_* name is refused at parse time instead)
SECRET = "s3cr3t-value-never-echoed"


def everything_entry() -> dict:
    command = os.path.join(os.environ.get("ALBEDO_PEERS", ""), ".bin", "mcp-server-everything")
    if not os.path.exists(command):
        pytest.fail(f"the npm peer is missing: {command} (scripts/test installs it)")
    return {"command": command}


def demo_entry() -> dict:
    return {"command": sys.executable, "args": ["-m", "albedo_actors.demo.server"]}


def calls(record) -> list[dict]:
    """The tools/call requests the recording fault server received."""
    return [m for m in read_record(record) if m.get("method") == "tools/call"] if record.exists() else []


def sent(run) -> dict:
    """The arguments the ``typed`` tool answered with (what it was sent)."""
    assert run.returncode == 0, run.stderr
    return json.loads(json.loads(run.stdout)["content"][0]["text"])


# -- key=value, coerced by the tool's inputSchema -------------------------------------------


def test_key_value_arguments_are_coerced_by_each_parameters_type(tmp_path):
    write_config(tmp_path, {"faulty": fault_entry()})
    run = albedo(tmp_path, "call", "faulty/typed", "text=5", "count=5", "ratio=2.5", "on=true", 'opts={"depth": 2}',
                 'tags=["a", "b"]', "maybe=null", "mode=fast", "level=3.0", "--json")
    got = sent(run)
    # A string stays a string even when it looks like a number; the others are their JSON values.
    assert got == {"text": "5", "count": 5, "ratio": 2.5, "on": True, "opts": {"depth": 2}, "tags": ["a", "b"],
                   "maybe": None, "mode": "fast", "level": 3}
    assert isinstance(got["level"], int) and isinstance(got["text"], str)
    # A key the schema does not name keeps its text; key:=JSON is a JSON value as it is.
    assert sent(albedo(tmp_path, "call", "faulty/typed", "text=x", "other=7", "any:=[1, {\"a\": null}]", "--json")) == {
        "text": "x", "other": "7", "any": [1, {"a": None}]}
    # Options may stand between the arguments.
    assert sent(albedo(tmp_path, "call", "faulty/typed", "text=a", "--json", "count=2")) == {"text": "a", "count": 2}


def test_args_json_is_the_base_and_key_value_adds_or_replaces(tmp_path):
    write_config(tmp_path, {"faulty": fault_entry()})
    run = albedo(tmp_path, "call", "faulty/typed", "--args", '{"text": "base", "count": 1, "on": false}', "count=2", "--json")
    assert sent(run) == {"text": "base", "count": 2, "on": False}
    # --args alone still works as before.
    assert sent(albedo(tmp_path, "call", "faulty/typed", "--args", '{"text": "only"}', "--json")) == {"text": "only"}


@pytest.mark.parametrize("argv, says", [
    (["text=x", "count=x"], "parameter 'count' must be an integer"),
    (["text=x", "count=2.5"], "parameter 'count' must be an integer"),
    (["text=x", "ratio=abc"], "parameter 'ratio' must be a number"),
    (["text=x", f"on={SECRET}"], "parameter 'on' must be true or false"),
    (["text=x", "opts=[1]"], "parameter 'opts' must be a JSON object"),
    (["text=x", f"tags=[\"a\", 1, \"{SECRET}\"]"], "parameter 'tags[1]' must be a string"),
    (["text=x", "maybe=x"], "parameter 'maybe' must be an integer or null"),
    (["text=x", f"mode={SECRET}"], "parameter 'mode' must be one of \"fast\", \"slow\""),
    (["text=x", "level=9"], "parameter 'level' must be at most 5"),
    (["count=1"], "parameter 'text' is required"),
    (["text:=5"], "parameter 'text' must be a string"),
], ids=["integer", "integral", "number", "boolean", "object", "array-item", "union", "enum", "maximum", "required", "json-given"])
def test_arguments_that_do_not_fit_are_refused_before_anything_is_sent(tmp_path, argv, says):
    record = tmp_path / "record"
    write_config(tmp_path, {"faulty": fault_entry("--record", str(record))})
    run = albedo(tmp_path, "call", "faulty/typed", *argv)
    line = assert_one_line_error(run, 2)
    assert line == f"albedo-mcp: server 'faulty': tool 'typed': {says}; see albedo-mcp tools faulty"
    assert SECRET not in line  # a value typed is never echoed
    assert run.stdout == ""
    # The server was dialled (to learn the schema) but the call never reached it.
    assert any(m.get("method") in ("initialize", "server/discover") for m in read_record(record))
    assert calls(record) == []
    # Without the check (--no-check), the same arguments are sent: the protection is the check.
    # (The server answers, or refuses them itself: exit 0 or 1, never 2.)
    unchecked = albedo(tmp_path, "call", "faulty/typed", *argv, "--no-check")
    assert unchecked.returncode in (0, 1), unchecked.stderr
    assert len(calls(record)) == 1


def test_a_parameter_the_tool_does_not_take_is_refused_with_the_nearest_name(tmp_path):
    record = tmp_path / "record"
    write_config(tmp_path, {"faulty": fault_entry("--record", str(record))})
    run = albedo(tmp_path, "call", "faulty/strict", "text=hi", "txet=hello")
    line = assert_one_line_error(run, 2)
    assert line == ("albedo-mcp: server 'faulty': tool 'strict': parameter 'txet' is not one the tool takes "
                    "(did you mean 'text'?); see albedo-mcp tools faulty")
    assert calls(record) == []


@pytest.mark.parametrize("argv, says", [
    (["text"], "argument 1 after the name is not key=value"),
    (["text=a", "=b"], "argument 2 after the name is not key=value"),
    (["text=a", "text=b"], "parameter 'text' is given twice"),
    (["opts:={nope"], "parameter 'opts': opts:= takes a JSON value"),
])
def test_arguments_that_are_not_key_value_are_a_usage_error(tmp_path, argv, says):
    record = tmp_path / "record"
    write_config(tmp_path, {"faulty": fault_entry("--record", str(record))})
    line = assert_one_line_error(albedo(tmp_path, "call", "faulty/typed", *argv), 2)
    assert says in line
    assert not record.exists()  # refused before any server is started


def test_key_value_calls_on_the_npm_server_everything_and_the_demo_server(tmp_path):
    write_config(tmp_path, {"ev": everything_entry(), "demo": demo_entry()})
    summed = albedo(tmp_path, "call", "ev/get-sum", "a=2", "b=3.5")
    assert (summed.returncode, summed.stdout) == (0, "The sum of 2 and 3.5 is 5.5.\n"), summed.stderr
    echoed = albedo(tmp_path, "call", "ev/echo", "message=5")  # a string parameter: "5" is sent as text
    assert (echoed.returncode, echoed.stdout) == (0, "Echo: 5\n"), echoed.stderr
    annotated = albedo(tmp_path, "call", "ev/get-annotated-message", "messageType=success", "includeImage=false", "--json")
    assert annotated.returncode == 0, annotated.stderr
    assert [block["type"] for block in json.loads(annotated.stdout)["content"]] == ["text"]
    prompt = albedo(tmp_path, "call", "ev/get_prompt", "name=args-prompt", 'arguments={"city": "Paris"}')
    assert prompt.returncode == 0 and "Paris" in prompt.stdout, prompt.stderr
    refused = albedo(tmp_path, "call", "ev/get-sum", "a=2", "b=two")
    assert assert_one_line_error(refused, 2) == ("albedo-mcp: server 'ev': tool 'get-sum': parameter 'b' must be a "
                                                 "number; see albedo-mcp tools ev")
    added = albedo(tmp_path, "call", "demo/add", "a=40", "b=2")
    assert (added.returncode, added.stdout) == (0, '{"sum":42}\n'), added.stderr
    read = albedo(tmp_path, "call", "demo/read_resource", "uri=demo://greeting/Ada")
    assert (read.returncode, read.stdout) == (0, "Hello, Ada!\n"), read.stderr


# -- did you mean ------------------------------------------------------------------------------


def test_an_unknown_server_or_tool_name_suggests_the_nearest(tmp_path):
    write_config(tmp_path, {"faulty": fault_entry()})
    tool = assert_one_line_error(albedo(tmp_path, "call", "faulty/ecoh", "text=hi"), 2)
    assert tool == "albedo-mcp: no MCP operation 'faulty/ecoh'; did you mean faulty/echo? ('albedo-mcp tools faulty' lists them)"
    server = assert_one_line_error(albedo(tmp_path, "call", "fautly/echo", "text=hi"), 2)
    assert server.startswith("albedo-mcp: no server named 'fautly' in ") and server.endswith("; did you mean faulty/echo?")
    echo = advertised_name("faulty", "echo")
    typo = echo.replace("_echo_", "_ecoh_")
    named = assert_one_line_error(albedo(tmp_path, "call", typo, "text=hi"), 2)
    assert named == f"albedo-mcp: no MCP operation {typo!r}; did you mean {echo}? ('albedo-mcp tools --json' lists them)"
    prefix = assert_one_line_error(albedo(tmp_path, "call", echo.replace("faulty", "faulyt"), "text=hi"), 2)
    assert "did you mean server 'faulty'?" in prefix
    listed = assert_one_line_error(albedo(tmp_path, "tools", "faulyt"), 2)
    assert listed.endswith("; did you mean 'faulty'?")
    # Nothing near: the line says so without a guess.
    far = assert_one_line_error(albedo(tmp_path, "call", "faulty/zzzzzzzz"), 2)
    assert "did you mean" not in far and "'faulty/zzzzzzzz'" in far


# -- tools --------------------------------------------------------------------------------------


def test_tools_lists_server_slash_tool_with_parameters_and_json_has_the_advertised_names(tmp_path):
    write_config(tmp_path, {"ev": everything_entry(), "faulty": fault_entry()})
    run = albedo(tmp_path, "tools")
    assert run.returncode == 0 and run.stderr == "", run.stderr
    lines = run.stdout.splitlines()
    assert "ev/get-sum(a, b)\tReturns the sum of two numbers" in lines
    assert "ev/get-resource-links([count])\tReturns up to ten resource links that reference different types of resources" in lines
    assert "ev/get_prompt(name, [arguments])" in [line.split("\t")[0] for line in lines]
    assert "faulty/typed(text, [count], [ratio], [on], [opts], [tags], [maybe], [mode], [level])" in [
        line.split("\t")[0] for line in lines]
    # One server: only its lines.
    only = albedo(tmp_path, "tools", "faulty", "--json")
    assert only.returncode == 0, only.stderr
    entries = json.loads(only.stdout)
    assert {entry["server"] for entry in entries} == {"faulty"}
    typed = next(entry for entry in entries if entry["operation"] == "typed")
    assert typed["name"] == advertised_name("faulty", "typed") and typed["inputSchema"]["required"] == ["text"]
    # Listed from the catalogue the first run saved: its time is in --json.
    saved = typed["savedAt"]
    assert saved is not None and time.strptime(saved, "%Y-%m-%dT%H:%M:%SZ")


def write_with_budget(home, servers: dict, advertise: dict) -> None:
    (home / "extensions.json").write_text(json.dumps({"mcp": {"servers": servers, "advertise": advertise}}), encoding="utf-8")


def test_tools_model_shows_what_the_model_is_offered_under_a_budget(tmp_path):
    write_config(tmp_path, {"demo": demo_entry()})
    everything = albedo(tmp_path, "tools", "--model")
    assert everything.returncode == 0, everything.stderr
    offered = [line.split("\t")[0] for line in everything.stdout.splitlines()]
    assert offered[:2] == [f"{advertised_name('demo', 'echo')}(text)", f"{advertised_name('demo', 'add')}(a, b)"]
    assert len(offered) == 5 and SEARCH_TOOL not in everything.stdout
    assert everything.stderr == "albedo-mcp: the model is offered all 5 operations (no budget: mcp.advertise.maxTools " \
                                "is not set; --budget N sets one for this listing)\n"
    budget = albedo(tmp_path, "tools", "--model", "--budget", "3")
    assert budget.returncode == 0, budget.stderr
    assert [line.split("\t")[0] for line in budget.stdout.splitlines()] == [
        f"{advertised_name('demo', 'echo')}(text)", f"{advertised_name('demo', 'add')}(a, b)", f"{SEARCH_TOOL}(query, [limit])"]
    assert "offered 2 of 5 operations and mcp_search_tools" in budget.stderr and "budget 3" in budget.stderr
    # The configured budget and its pinned operation, unless --budget says otherwise.
    write_with_budget(tmp_path, {"demo": demo_entry()}, {"maxTools": 2, "pinned": ["demo/time"]})
    configured = albedo(tmp_path, "tools", "--model", "--json")
    assert configured.returncode == 0, configured.stderr
    assert [entry["name"] for entry in json.loads(configured.stdout)] == [advertised_name("demo", "time"), SEARCH_TOOL]
    wider = albedo(tmp_path, "tools", "--budget", "10")  # --budget implies --model
    assert len(wider.stdout.splitlines()) == 5 and "within the budget of 10" in wider.stderr
    assert assert_one_line_error(albedo(tmp_path, "tools", "--budget", "1"), 2)


def test_search_and_call_mcp_search_tools_find_what_the_model_would_find(tmp_path):
    record = tmp_path / "record"
    write_config(tmp_path, {"faulty": fault_entry("--record", str(record)), "ev": everything_entry()})
    found = albedo(tmp_path, "search", "sum", "of", "two", "numbers", "--limit", "2")
    assert found.returncode == 0, found.stderr
    assert found.stdout.splitlines()[0] == "ev/get-sum(a, b)\tReturns the sum of two numbers"
    assert len(found.stdout.splitlines()) == 2
    as_json = albedo(tmp_path, "search", "add integers", "--json")
    assert json.loads(as_json.stdout)[0]["name"] == advertised_name("faulty", "add")
    nothing = albedo(tmp_path, "search", "xylophone")
    assert (nothing.returncode, nothing.stdout) == (0, "")
    assert nothing.stderr == "albedo-mcp: no operation matches 'xylophone'; try other words\n"
    # The model's search tool, called by name: answered here, never sent to a server.
    called = albedo(tmp_path, "call", SEARCH_TOOL, "query=add two integers", "limit=1", "--json")
    assert called.returncode == 0, called.stderr
    result = json.loads(called.stdout)
    assert [tool["name"] for tool in result["structuredContent"]["tools"]] == [advertised_name("faulty", "add")]
    assert calls(record) == []
    text = albedo(tmp_path, "call", SEARCH_TOOL, "query=echo")
    assert text.returncode == 0 and advertised_name("faulty", "echo") in text.stdout
    refused = assert_one_line_error(albedo(tmp_path, "call", SEARCH_TOOL, "limit=3"), 2)
    assert "needs 'query'" in refused


def test_tools_refresh_dials_again_and_lists_a_changed_tool_list(tmp_path):
    # One configuration (so one fingerprint) whose tool list changes once a marker exists.
    marker = tmp_path / "changed"
    wrapper = tmp_path / "server.py"
    down = tmp_path / "down"
    wrapper.write_text(
        "import os, runpy, sys\n"
        f"if os.path.exists({str(down)!r}): sys.exit('down for maintenance')\n"
        f"sys.path.insert(0, {os.path.join(HERE, 'servers')!r})\n"
        f"sys.argv = [{FAULT_SERVER!r}] + (['--pages', '2'] if os.path.exists({str(marker)!r}) else [])\n"
        f"runpy.run_path({FAULT_SERVER!r}, run_name='__main__')\n", encoding="utf-8")
    # New tools are trusted as they come here (tool integrity would hold them: tests/test_trust_cli.py).
    (tmp_path / "extensions.json").write_text(json.dumps({"mcp": {"trust": {"newTools": "allow"}, "servers": {
        "w": {"command": sys.executable, "args": [str(wrapper)]}}}}), encoding="utf-8")
    first = albedo(tmp_path, "tools")
    assert first.returncode == 0 and "w/echo(text)\t" in first.stdout and first.stderr == "", first.stderr
    marker.write_text("")
    saved = albedo(tmp_path, "tools")
    assert saved.stdout == first.stdout  # listed from the saved catalogue: the server was not dialled
    assert saved.stderr == ("albedo-mcp: server 'w': listed from its catalogue saved less than a minute ago; "
                            "'albedo-mcp tools --refresh' dials it\n")
    refreshed = albedo(tmp_path, "tools", "--refresh")
    assert refreshed.returncode == 0 and refreshed.stderr == "", refreshed.stderr
    listed = [line.split("\t")[0] for line in refreshed.stdout.splitlines()]
    assert listed[:2] == ["w/page_1()", "w/page_2()"] and "w/echo(text)" not in listed
    # What --refresh found was saved: the next run lists it without a dial.
    again = albedo(tmp_path, "tools")
    assert again.stdout == refreshed.stdout and "listed from its catalogue saved" in again.stderr
    assert json.loads(albedo(tmp_path, "tools", "--json").stdout)[0]["savedAt"] is not None
    # A server down at a refresh is left out of that listing with its warning; what was
    # saved stays for the next run.
    down.write_text("")
    failed = albedo(tmp_path, "tools", "--refresh")
    assert (failed.returncode, failed.stdout) == (0, "")
    assert failed.stderr.startswith("albedo-mcp: warning: server 'w': cannot start") and len(failed.stderr.splitlines()) == 1
    kept = albedo(tmp_path, "tools")
    assert kept.stdout == refreshed.stdout and "listed from its catalogue saved" in kept.stderr


# -- one misconfigured server never hides the others ------------------------------------------------


def misconfigured_home(tmp_path, record=None) -> dict:
    env = dict(os.environ)
    env.pop(UNSET, None)
    write_config(tmp_path, {
        "good": fault_entry(*(("--record", str(record)) if record else ())),
        "bad": fault_entry(env={"TOKEN": {"env": UNSET}}),
        "web": {"url": "http://127.0.0.1:9/mcp", "headers": {"X-Api-Key": {"env": UNSET}}},
    })
    return env


def test_a_server_naming_an_unset_variable_is_left_out_and_the_others_are_listed_and_called(tmp_path):
    env = misconfigured_home(tmp_path)
    listed = albedo(tmp_path, "tools", env=env)
    assert listed.returncode == 0, listed.stderr
    names = [line.split("\t")[0] for line in listed.stdout.splitlines()]
    assert "good/echo(text)" in names and not any(name.startswith(("bad/", "web/")) for name in names)
    assert listed.stderr.splitlines() == [
        f"albedo-mcp: warning: server 'bad': env TOKEN names ${UNSET}, which is not set in the host's environment; left out",
        f"albedo-mcp: warning: server 'web': X-Api-Key names ${UNSET}, which is not set in the host's environment; left out",
    ]
    called = albedo(tmp_path, "call", "good/echo", "text=still here", env=env)
    assert (called.returncode, called.stdout, called.stderr) == (0, "still here\n", "")
    for server, what in (("bad", "env TOKEN"), ("web", "X-Api-Key")):
        refused = albedo(tmp_path, "call", f"{server}/echo", "text=hi", env=env)
        line = assert_one_line_error(refused, 2)
        assert line == f"albedo-mcp: server '{server}': {what} names ${UNSET}, which is not set in the host's environment"
    # Set, the variable lets the server in.
    fixed = albedo(tmp_path, "tools", "bad", env={**env, UNSET: "value"})
    assert fixed.returncode == 0 and "bad/echo(text)" in fixed.stdout and fixed.stderr == "", fixed.stderr


def test_the_host_api_leaves_the_misconfigured_server_out_with_its_warning(tmp_path, monkeypatch):
    monkeypatch.delenv(UNSET, raising=False)
    home = str(tmp_path)
    servers = (ServerConfig(name="good", type="stdio", command=sys.executable, args=(FAULT_SERVER,)),
               ServerConfig(name="bad", type="stdio", command=sys.executable, args=(FAULT_SERVER,), env={"TOKEN": UNSET}))
    with Runtime(home, config=McpConfig(home=home, servers=servers), enabled=True) as runtime:
        composition = runtime.composition()
        assert set(composition.catalogues) == {"good"} and set(composition.left_out) == {"bad"}
        assert composition.warnings == (f"server 'bad': env TOKEN names ${UNSET}, which is not set in the host's "
                                        "environment; left out",)
        mcp = runtime.mcp()
        assert mcp.call("good/echo", text="hi").isError is False
        with pytest.raises(ConfigError, match=rf"server 'bad': env TOKEN names \${UNSET}, which is not set"):
            mcp.call("bad/echo", text="hi")


def test_the_catalogue_ages_are_one_line_however_many_servers():
    from albedo_actors.cli.run import catalogue_ages

    now = 1_000_000.0
    assert catalogue_ages({"a": now - 30}, now) == (
        "server 'a': listed from its catalogue saved less than a minute ago; 'albedo-mcp tools --refresh' dials it")
    assert catalogue_ages({"b": now - 7200, "a": now - 3 * 86_400}, now) == (
        "listed from saved catalogues: 'a' saved 3 days ago, 'b' saved 2 hours ago; 'albedo-mcp tools --refresh' dials them")
    many = {f"s{i:02}": now - 60 * (i + 5) for i in range(30)}
    line = catalogue_ages(many, now)
    assert "\n" not in line and line.startswith("30 servers listed from saved catalogues, saved from 5 minutes ago "
                                                "to 34 minutes ago (the oldest: 's29')")
