"""The ``albedo-mcp`` command line, run as a real subprocess against fault servers.

Every run gets its own ``--home`` with an extensions.json written by the test; the
servers are the fault server (tests/servers/fault_server.py). The exit codes are the
ones the cli module's docstring lists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from albedo_actors.catalogue.naming import advertised_name
from helpers import FAULT_SERVER, read_record, schema_validate

RUN_TIMEOUT = 60  # seconds; a bound on every command, never an expected duration
CONSOLE_SCRIPT = os.path.join(os.path.dirname(sys.executable), "albedo-mcp")


def fault_entry(*flags: str, **extra) -> dict:
    """An extensions.json server entry running the fault server with ``flags``."""
    return {"command": sys.executable, "args": [FAULT_SERVER, *flags], **extra}


def write_config(home, servers: dict) -> None:
    (home / "extensions.json").write_text(json.dumps({"mcp": {"servers": servers}}), encoding="utf-8")


def albedo(home, *argv: str, env: dict | None = None, program: list[str] | None = None) -> subprocess.CompletedProcess:
    command = (program or [sys.executable, "-m", "albedo_actors"]) + ["--home", str(home), *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env)


def assert_one_line_error(run: subprocess.CompletedProcess, code: int, *names: str) -> str:
    """Exit ``code``, and stderr is exactly one line, no traceback, containing ``names``."""
    assert run.returncode == code, f"exit {run.returncode}, stderr: {run.stderr!r}"
    assert "Traceback" not in run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got: {run.stderr!r}"
    assert lines[0].startswith("albedo-mcp: ")
    for name in names:
        assert name in lines[0]
    return lines[0]


# -- tools ------------------------------------------------------------------------------


def test_tools_prints_server_slash_tool_with_its_parameters_one_per_line(tmp_path):
    write_config(tmp_path, {"faulty": fault_entry(), "other": fault_entry("--era", "legacy", "--probe", "error")})
    run = albedo(tmp_path, "tools")
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    names = [line.split("\t")[0] for line in run.stdout.splitlines()]
    # Required parameters plain, optional ones in brackets; the advertised names are in --json.
    assert names[:3] == ["faulty/echo(text)", "faulty/add(a, b)", "faulty/time()"]
    assert {"faulty/die()", "faulty/hang()", "faulty/state_only([rounds])", "other/echo(text)", "other/add(a, b)"} <= set(names)
    assert all(name.startswith(("faulty/", "other/")) for name in names)
    assert len(names) == len(set(names))
    assert not any(name.startswith("mcp_") for name in names)
    # The description follows a tab; echo's is the fault server's own.
    assert "faulty/echo(text)\tReturn the given text unchanged." in run.stdout.splitlines()


def test_tools_json_prints_an_array_of_tool_objects_with_exactly_the_documented_keys(tmp_path):
    write_config(tmp_path, {"faulty": fault_entry()})
    run = albedo(tmp_path, "tools", "--json")
    assert run.returncode == 0, run.stderr
    tools = json.loads(run.stdout)
    assert isinstance(tools, list) and tools
    for tool in tools:
        assert set(tool) == {"name", "server", "kind", "operation", "description", "inputSchema", "savedAt"}
        assert tool["savedAt"] is None  # dialled by this run, not listed from a saved catalogue
        assert tool["server"] == "faulty"
        assert tool["kind"] in ("tool", "read_resource", "get_prompt")
        assert tool["kind"] == "tool" or tool["operation"] == tool["kind"]
        assert tool["name"] == advertised_name("faulty", tool["operation"], tool["kind"])
        assert isinstance(tool["description"], str)
        assert tool["inputSchema"]["type"] == "object"
    echo = next(tool for tool in tools if tool["operation"] == "echo")
    assert echo["inputSchema"]["required"] == ["text"]


@pytest.mark.parametrize(
    "broken",
    [{"command": "/nonexistent/x"}, fault_entry("--stderr-and-exit", "3")],
    ids=["no-such-command", "exits-at-start"],
)
def test_tools_leaves_out_a_server_that_cannot_start_with_one_warning_line(tmp_path, broken):
    write_config(tmp_path, {"faulty": fault_entry(), "broken": broken})
    run = albedo(tmp_path, "tools")
    assert run.returncode == 0, run.stderr
    names = [line.split("\t")[0] for line in run.stdout.splitlines()]
    assert "faulty/echo(text)" in names
    assert not any(name.startswith("broken/") for name in names)
    assert "Traceback" not in run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("albedo-mcp: warning: server 'broken': cannot start")
    assert "faulty" not in lines[0]


def test_a_second_tools_run_with_a_store_starts_from_the_saved_catalogue(tmp_path):
    record = tmp_path / "record"
    write_config(tmp_path, {"f": fault_entry("--record", str(record)), "broken": fault_entry("--stderr-and-exit", "3")})
    database = ["--database", f"sqlite:///{tmp_path / 'albedo.db'}"]
    first = albedo(tmp_path, *database, "tools")
    assert first.returncode == 0, first.stderr
    assert "f/echo(text)\t" in first.stdout
    dials = [m for m in read_record(record) if m.get("method") == "server/discover"]
    assert len(dials) == 1
    second = albedo(tmp_path, *database, "tools")
    assert (second.returncode, second.stdout) == (0, first.stdout), second.stderr
    # Listed from the saved catalogue: the server was not started again.
    assert [m for m in read_record(record) if m.get("method") == "server/discover"] == dials
    # The server that cannot start has no saved catalogue: still one warning line naming it.
    # The second run says which server it listed from a saved catalogue, and how old it is.
    for run, noted in ((first, []), (second, ["albedo-mcp: server 'f': listed from its catalogue saved less than a minute "
                                              "ago; 'albedo-mcp tools --refresh' dials it"])):
        lines = run.stderr.splitlines()
        assert len(lines) == 1 + len(noted) and lines[0].startswith("albedo-mcp: warning: server 'broken': cannot start"), run.stderr
        assert lines[1:] == noted
    # A call dials the server then.
    called = albedo(tmp_path, *database, "call", "f/echo", "--args", '{"text": "dialled"}')
    assert (called.returncode, called.stdout) == (0, "dialled\n"), called.stderr
    assert len([m for m in read_record(record) if m.get("method") == "server/discover"]) == 2


def test_call_starts_only_the_server_its_name_fixes(tmp_path):
    record = tmp_path / "record"
    write_config(tmp_path, {"faulty": fault_entry(), "other": fault_entry("--record", str(record))})
    run = albedo(tmp_path, "call", advertised_name("faulty", "echo"), "--args", '{"text": "hi"}')
    assert (run.returncode, run.stdout, run.stderr) == (0, "hi\n", "")
    assert not record.exists() or read_record(record) == []


# -- call -------------------------------------------------------------------------------


def test_call_by_advertised_name_prints_the_text_result(tmp_path):
    write_config(tmp_path, {"faulty": fault_entry()})
    run = albedo(tmp_path, "call", advertised_name("faulty", "echo"), "--args", '{"text": "hi"}')
    assert (run.returncode, run.stdout, run.stderr) == (0, "hi\n", "")


def test_call_server_slash_tool_json_prints_a_valid_call_tool_result(tmp_path):
    write_config(tmp_path, {"faulty": fault_entry()})
    run = albedo(tmp_path, "call", "faulty/echo", "--args", '{"text": "hi"}', "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    schema_validate("2026-07-28", "CallToolResult", result)
    assert result["content"] == [{"type": "text", "text": "hi"}]
    assert result.get("isError", False) is False


def test_call_exits_1_when_the_tool_reports_an_error(tmp_path):
    write_config(tmp_path, {"faulty": fault_entry()})
    # --no-check sends arguments that do not fit the schema, so that the server refuses them.
    run = albedo(tmp_path, "call", "faulty/add", "--args", '{"a": "two", "b": 1}', "--no-check")
    line = assert_one_line_error(run, 1, "'faulty'", "'add'")
    assert "reported an error" in line
    assert "integer" in run.stdout  # the tool's own error text is printed


USAGE_ERRORS = {
    # id: (servers or raw extensions.json text, argv, env changes, names stderr must contain)
    "args-not-json": ({"faulty": fault_entry()}, ["call", "faulty/echo", "--args", "{text"], {}, ["--args", "not valid JSON"]),
    "args-not-object": ({"faulty": fault_entry()}, ["call", "faulty/echo", "--args", '["hi"]'], {}, ["--args", "JSON object"]),
    "unknown-advertised-tool": ({"faulty": fault_entry()}, ["call", advertised_name("faulty", "nope")], {}, [advertised_name("faulty", "nope")]),
    "unknown-tool-of-server": ({"faulty": fault_entry()}, ["call", "faulty/nope"], {}, ["faulty/nope"]),
    "unknown-advertised-server": ({"faulty": fault_entry()}, ["call", advertised_name("nosuch", "echo")], {}, [advertised_name("nosuch", "echo")]),
    "unknown-server": ({"faulty": fault_entry()}, ["call", "nosuch/echo"], {}, ["'nosuch'"]),
    "config-not-json": ('{"mcp": {"servers": ', ["tools"], {}, ["extensions.json", "not valid JSON"]),
    "env-value-inline": (
        {"faulty": fault_entry(env={"TOKEN": "inline-secret-value"})},
        ["tools"],
        {},
        ["'faulty'", "env.TOKEN"],
    ),
    "env-variable-unset": (
        {"faulty": fault_entry(env={"TOKEN": {"env": "MCP_TEST_UNSET_VARIABLE"}})},
        ["call", "faulty/echo", "--args", '{"text": "hi"}'],
        {"MCP_TEST_UNSET_VARIABLE": None},
        ["'faulty'", "MCP_TEST_UNSET_VARIABLE"],
    ),
    "unknown-key": ({"faulty": fault_entry(callTimeoutMS=300)}, ["tools"], {}, ["'faulty'", "callTimeoutMS"]),
}


@pytest.mark.parametrize("case", list(USAGE_ERRORS))
def test_usage_and_configuration_errors_exit_2_with_one_line(tmp_path, case):
    servers, argv, env_changes, names = USAGE_ERRORS[case]
    if isinstance(servers, str):
        (tmp_path / "extensions.json").write_text(servers, encoding="utf-8")
    else:
        write_config(tmp_path, servers)
    env = dict(os.environ)
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    run = albedo(tmp_path, *argv, env=env)
    line = assert_one_line_error(run, 2, *names)
    assert run.stdout == ""
    assert "inline-secret-value" not in line  # an inlined secret is not echoed back


@pytest.mark.parametrize(
    "broken",
    [{"command": "/nonexistent/x"}, fault_entry("--stderr-and-exit", "3")],
    ids=["no-such-command", "exits-at-start"],
)
def test_call_exits_3_when_its_only_server_cannot_start(tmp_path, broken):
    write_config(tmp_path, {"broken": broken})
    run = albedo(tmp_path, "call", "broken/echo", "--args", '{"text": "hi"}')
    line = assert_one_line_error(run, 3, "server 'broken'", "cannot start")
    assert run.stdout == ""
    if "args" in broken:
        assert "exited with status 3" in line


def test_call_exits_4_when_the_server_dies_during_the_call(tmp_path):
    write_config(tmp_path, {"faulty": fault_entry()})
    run = albedo(tmp_path, "call", "faulty/die")
    assert_one_line_error(run, 4, "server 'faulty'", "may or may not have run")
    assert run.stdout == ""


def test_call_exits_5_when_the_call_times_out(tmp_path):
    write_config(tmp_path, {"faulty": fault_entry(callTimeoutMs=300)})
    run = albedo(tmp_path, "call", "faulty/hang")
    assert_one_line_error(run, 5, "server 'faulty'", "no answer within 0.3 s")
    assert run.stdout == ""


def demo_entry() -> dict:
    from albedo_actors.demo.run import SERVER

    return {"command": sys.executable, "args": ["-I", SERVER]}


def test_resources_and_prompts_are_one_operation_each_and_call_reads_and_gets(tmp_path):
    write_config(tmp_path, {"demo": demo_entry()})
    listed = albedo(tmp_path, "tools", "--json")
    assert listed.returncode == 0, listed.stderr
    kinds = {entry["kind"]: entry for entry in json.loads(listed.stdout)}
    assert set(kinds) == {"tool", "read_resource", "get_prompt"}
    read, prompt = kinds["read_resource"], kinds["get_prompt"]
    assert read["name"] == advertised_name("demo", "read_resource", "read_resource")
    assert "demo://readme" in read["description"] and read["inputSchema"]["required"] == ["uri"]
    assert prompt["name"] == advertised_name("demo", "get_prompt", "get_prompt") and "greet" in prompt["description"]
    greeting = albedo(tmp_path, "call", read["name"], "--args", '{"uri": "demo://greeting/Ada"}')
    assert (greeting.returncode, greeting.stdout, greeting.stderr) == (0, "Hello, Ada!\n", "")
    got = albedo(tmp_path, "call", prompt["name"], "--args", '{"name": "greet", "arguments": {"name": "Ada"}}', "--json")
    assert got.returncode == 0, got.stderr
    assert "Please greet Ada warmly." in json.loads(got.stdout)["messages"][0]["content"]["text"]
    by_slash = albedo(tmp_path, "call", "demo/read_resource", "--args", '{"uri": "demo://greeting/Bo"}')
    assert (by_slash.returncode, by_slash.stdout) == (0, "Hello, Bo!\n"), by_slash.stderr
    bad = albedo(tmp_path, "call", read["name"], "--args", '{"url": "x"}')
    assert_one_line_error(bad, 2, "uri")


def test_call_resolves_an_advertised_name_when_server_names_share_a_prefix(tmp_path):
    # "f" and "f_x": the name of f_x's echo starts with "mcp_f_" too; only the exact match counts.
    write_config(tmp_path, {"f": fault_entry(), "f_x": fault_entry()})
    run = albedo(tmp_path, "call", advertised_name("f_x", "echo"), "--args", '{"text": "hi"}')
    assert (run.returncode, run.stdout, run.stderr) == (0, "hi\n", "")


# -- the program itself -------------------------------------------------------------------


def test_the_console_script_and_python_m_print_the_same_tools(tmp_path):
    assert os.access(CONSOLE_SCRIPT, os.X_OK), f"{CONSOLE_SCRIPT} is missing; install the package (scripts/test does)"
    write_config(tmp_path, {"faulty": fault_entry(), "other": fault_entry("--era", "legacy", "--probe", "error")})
    by_module = albedo(tmp_path, "tools")
    by_script = albedo(tmp_path, "tools", program=[CONSOLE_SCRIPT])
    assert by_module.returncode == by_script.returncode == 0
    assert by_module.stdout == by_script.stdout
    assert "faulty/echo(text)\t" in by_script.stdout and "other/echo(text)\t" in by_script.stdout
    assert by_module.stderr == ""
    # The second run lists from the catalogues the first saved, and says so.
    assert by_script.stderr == ("albedo-mcp: listed from saved catalogues: 'faulty' saved less than a minute ago, "
                                "'other' saved less than a minute ago; 'albedo-mcp tools --refresh' dials them\n")


def test_demo_finds_both_eras(tmp_path):
    run = subprocess.run([CONSOLE_SCRIPT, "demo"], capture_output=True, text=True, timeout=RUN_TIMEOUT, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "era found: modern" in run.stdout
    assert "era found: legacy" in run.stdout
    stages = [line for line in run.stdout.splitlines() if line[:2] in ("1.", "2.", "3.")]
    assert [line[:2] for line in stages] == ["1.", "2.", "3."]
    assert "First start" in stages[0] and "saved catalogue" in stages[1]
    assert "Ready in" in run.stdout  # the second start, from the saved catalogues
    assert "left out at the start: server 'late'" in run.stdout
    assert "joined after that turn" in run.stdout
    assert "Traceback" not in run.stderr


def test_only_the_named_environment_variables_reach_a_server(tmp_path):
    write_config(tmp_path, {"faulty": fault_entry(env={"TOKEN": {"env": "MY_TOKEN"}})})
    env = dict(os.environ, ALBEDO_CANARY="canary-secret-8086", MY_TOKEN="named-token-4711")
    run = albedo(tmp_path, "call", "faulty/env", env=env)
    assert run.returncode == 0, run.stderr
    server_env = json.loads(run.stdout)
    assert "canary-secret-8086" not in run.stdout
    assert "ALBEDO_CANARY" not in server_env
    assert server_env["TOKEN"] == "named-token-4711"
    assert "MY_TOKEN" not in server_env
