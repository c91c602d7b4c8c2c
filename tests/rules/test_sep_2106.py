"""The client rules of SEP-2106 (tests/rules/rules.json; docs/rules.rst): a real Runtime
and the real command line against tests/servers/rules_stdio_server.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from albedo_actors.catalogue.schemas import MAX_SCHEMA_DEPTH
from albedo_actors.config import McpConfig
from albedo_actors.runtime import Runtime
from stdio_rules_kit import RULES_SERVER, rules_config, sent

RUN_TIMEOUT = 60  # a bound on each command line run, never an expected duration

DECLINED = {
    "sep-2106-opt-mode-fetches-non-local-ref": (
        "albedo_actors has no mode that fetches a non-local $ref: a reference outside the schema (other than the JSON "
        "Schema metaschemas shipped with jsonschema) is never retrieved and fails the check, so there is no opt-in mode "
        "to bound."
    ),
}


class _Runtime:
    def __init__(self, home: str, log: str) -> None:
        self.runtime = Runtime(home, None, config=McpConfig(home=home, servers=(rules_config(log),)), enabled=True)
        self.warnings: list[str] = []

    def __enter__(self):
        self.runtime.start()
        return self.runtime.mcp(warn=self.warnings.append)

    def __exit__(self, *exc_info) -> None:
        self.runtime.stop()


@pytest.mark.rule("sep-2106-json-schema-validation-already-handles-type")
def test_outputs_and_typed_arguments_are_validated_against_the_declared_schemas(tmp_path):
    """A tool's structuredContent is validated against its outputSchema on every call (the
    problems come back with the result, naming the JSON path, without blocking it), and
    on the command line a call's arguments are validated against the tool's inputSchema
    before anything is sent."""
    log = str(tmp_path / "log.jsonl")
    with _Runtime(str(tmp_path), log) as mcp:
        good = mcp.call("r/shape", content={"n": 1})
        assert good.schemaErrors == () and good.structuredContent == {"n": 1}
        bad = mcp.call("r/shape", content={"n": "x"})
        assert bad.structuredContent == {"n": "x"} and "$.n: 'x' is not of type 'integer'" in bad.schemaErrors
        missing = mcp.call("r/shape", content={})
        assert any("'n' is a required property" in line for line in missing.schemaErrors), missing.schemaErrors
    home = tmp_path / "cli"
    home.mkdir()
    cli_log = str(tmp_path / "cli.jsonl")
    entry = {"command": sys.executable, "args": [RULES_SERVER, cli_log]}
    (home / "extensions.json").write_text(json.dumps({"mcp": {"servers": {"r": entry}}}), encoding="utf-8")

    def call(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "albedo_actors", "--home", str(home), "call", "r/typed", *argv],
                              capture_output=True, text=True, timeout=RUN_TIMEOUT)

    refused = call('--args', '{"count": "seven"}')
    assert refused.returncode == 2 and "tool 'typed'" in refused.stderr and "count" in refused.stderr, refused.stderr
    assert not [m for m in sent(cli_log, "tools/call")]  # refused before it was sent
    done = call("count=7", "--json")
    assert done.returncode == 0, done.stderr
    assert [m["params"]["arguments"] for m in sent(cli_log, "tools/call")] == [{"count": 7}]


@pytest.mark.rule("sep-2106-implementations-apply-reasonable-bounds-example-max")
def test_an_output_schema_deeper_than_the_bound_is_not_used_and_the_tool_stays_callable(tmp_path):
    """A tool's outputSchema deeper than MAX_SCHEMA_DEPTH (32) levels is never compiled or
    used: one warning names the tool, and its results come back unchecked; the other
    bounds (values, text, patterns, steps and a time budget per check) are kept the same
    way (catalogue/schemas.py)."""
    assert MAX_SCHEMA_DEPTH < 40  # the server's deep schema is 40 levels
    opened = _Runtime(str(tmp_path), str(tmp_path / "log.jsonl"))
    with opened as mcp:
        result = mcp.call("r/deep")
        assert result.structuredContent == {"a": "not checked"} and result.schemaErrors == ()
        assert mcp.call("r/shape", content={"n": "x"}).schemaErrors  # the other tools' schemas are still used
    warned = [w for w in opened.warnings if "'deep'" in w]
    assert len(warned) == 1 and "more than 32 levels deep" in warned[0], opened.warnings
