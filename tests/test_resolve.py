"""The model's tool list is built once per composition, and one resolver serves the
binding, the command line and the demo (issue 12, Deliver 3).

``Composition.resolve`` is exercised on a real session (tests/servers/fault_binding_server.py,
one copy listing ``add`` with a schema too large for the model, another that cannot
start) and, for the reasons that need no server, on plain compositions. The command line's
``--hidden`` runs the real ``albedo-mcp``. Every wait is bounded; nothing sleeps.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest

import albedo_actors
from albedo_actors.catalogue import composition as preparer_module
from albedo_actors.catalogue.composition import OFF, Composition
from albedo_actors.catalogue import Catalogue
from albedo_actors.catalogue.naming import advertised_name
from albedo_actors.config import McpConfig, ServerConfig
from albedo_actors.errors import ConfigError, NeedsSignIn, Unavailable
from albedo_actors.runtime import Runtime
from albedo_actors.store import open_store
from helpers import text_of

HERE = os.path.dirname(os.path.abspath(__file__))
BINDING_SERVER = os.path.join(HERE, "servers", "fault_binding_server.py")
RUN_TIMEOUT = 60  # seconds: a bound on every command, never an expected duration
HIDDEN_WHY = "bytes of JSON, over 65536"


def server(name: str, *flags: str, **overrides) -> ServerConfig:
    return ServerConfig(name=name, type="stdio", command=sys.executable, args=(BINDING_SERVER, *flags), **overrides)


@pytest.fixture
def runtime(tmp_path):
    """A real runtime: f (add hidden by its schema, sleep disabled), g, and gone (cannot start)."""
    home = str(tmp_path / "home")
    store = open_store(home)
    config = McpConfig(home=home, servers=(
        server("f", "--bad-schema", "add", disabled_tools=("sleep",)),
        server("g"),
        ServerConfig(name="gone", type="stdio", command="/nonexistent/x"),
    ))
    try:
        with Runtime(home, store, config=config, enabled=True) as opened:
            yield opened
    finally:
        store.close()


# -- the one resolver ------------------------------------------------------------------------


def test_both_name_forms_give_the_advertised_operation_and_the_client_of_the_same_composition(runtime):
    composition = runtime.composition()
    by_slash, handle = composition.resolve("f/echo")
    by_name, same_handle = composition.resolve(advertised_name("f", "echo"))
    assert by_slash is by_name and by_slash in composition.operations  # the built entry, not a copy
    assert handle is same_handle is composition.handles["f"]
    read, _ = composition.resolve("f/read_resource")
    assert read.kind == "read_resource" and composition.resolve(read.name)[0] is read
    assert text_of(handle.call_tool(by_slash.operation, {"text": "resolved"})) == "resolved"


def test_a_tool_hidden_by_its_schema_is_named_with_why_and_called_only_when_asked(runtime):
    composition = runtime.composition()
    assert ("f", "add") not in {(op.server, op.operation) for op in composition.operations}
    for name in ("f/add", advertised_name("f", "add")):
        with pytest.raises(ConfigError) as plain:
            composition.resolve(name)
        assert str(plain.value).startswith(f"{name!r} is not advertised: inputSchema is ")
        assert HIDDEN_WHY in str(plain.value) and "--hidden" not in str(plain.value)
        with pytest.raises(ConfigError) as cli:
            composition.resolve(name, hidden_option="--hidden")
        assert str(cli.value).endswith("; add --hidden to call it anyway")
        item, handle = composition.resolve(name, hidden=True)
        assert (item.server, item.kind, item.operation) == ("f", "tool", "add") and handle is composition.handles["f"]
        assert handle.call_tool(item.operation, {"a": 2, "b": 40})["structuredContent"] == {"sum": 42}
    with pytest.raises(ConfigError, match="is not advertised"):
        runtime.mcp().call("f/add", a=2, b=40)  # the binding has no such flag


def test_a_disabled_tool_is_never_called_even_when_hidden_ones_are(runtime):
    composition = runtime.composition()
    for name in ("f/sleep", advertised_name("f", "sleep")):
        for hidden in (False, True):
            with pytest.raises(ConfigError) as raised:
                composition.resolve(name, hidden=hidden)
            assert str(raised.value) == "tool 'sleep' of server 'f' is disabled in extensions.json"


def test_a_left_out_server_says_why_and_that_nothing_ran(runtime):
    composition = runtime.composition()
    assert "gone" in composition.left_out
    with pytest.raises(Unavailable) as slash:
        composition.resolve("gone/echo")
    assert str(slash.value).startswith("server 'gone': is left out of this session (cannot start")
    assert str(slash.value).endswith("tools/call did not run")
    name = advertised_name("gone", "get_prompt", "get_prompt")
    with pytest.raises(Unavailable) as named:
        composition.resolve(name)
    assert str(named.value).endswith(f"{name!r} did not run")


def test_no_such_operation_names_the_listing_of_its_caller(runtime):
    composition = runtime.composition()
    with pytest.raises(ConfigError) as binding:
        composition.resolve("f/nope")
    assert str(binding.value) == "no MCP operation 'f/nope' in this session; mcp.tools() lists them"
    with pytest.raises(ConfigError) as cli:
        composition.resolve(advertised_name("g", "nope"), listing="'albedo-mcp tools'")
    assert str(cli.value).endswith("in this session; 'albedo-mcp tools' lists them")
    with pytest.raises(ConfigError, match="named by a string, not int"):
        composition.resolve(3)


def test_reasons_that_need_no_server():
    signed_out = Composition(left_out={"s": "needs the user to sign in (no token yet)"})
    with pytest.raises(NeedsSignIn) as raised:
        signed_out.resolve("s/read_resource")
    assert str(raised.value) == "server 's': needs the user to sign in; resources/read did not run: run `albedo-mcp sign-in s`"
    with pytest.raises(ConfigError) as off:
        Composition(mcp_off=True).resolve("s/echo")
    assert str(off.value) == OFF
    # A catalogue whose client is gone: the operation is found, its client is not.
    orphan = Composition(catalogues={"o": Catalogue("o", "legacy", "2025-11-25", tools=({"name": "t", "inputSchema": {"type": "object"}},))})
    with pytest.raises(Unavailable, match="server 'o': is not part of this session any more"):
        orphan.resolve("o/t")


def test_a_call_takes_the_operation_and_the_client_from_one_read_of_the_composition(runtime):
    # Each read of the published composition gives the next one; the second has no f.
    # A call that looked the operation up in one and the client up in another would fail.
    mcp = runtime.mcp()
    current = runtime.composition()

    class Flipping:
        def __init__(self) -> None:
            self.reads = 0

        @property
        def composition(self) -> Composition:
            self.reads += 1
            return current if self.reads % 2 else Composition(left_out={"f": "gone meanwhile"})

    flipping = Flipping()
    mcp._published = flipping
    assert text_of(mcp.call("f/echo", text="one read").as_dict()) == "one read"
    assert flipping.reads == 1


# -- built once ------------------------------------------------------------------------------


def test_advertise_runs_once_per_composition_and_never_per_call(runtime, monkeypatch):
    calls = []
    real = preparer_module.advertise

    def counting(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(preparer_module, "advertise", counting)
    before = runtime.composition()
    assert before.model_operations_shared() is before.model_operations_shared() is before.operations  # no overlays: the same tuple
    rebuilt = Composition(before.handles, before.catalogues, before.left_out)
    assert len(calls) == 1 and rebuilt.operations == before.operations  # construction built it, once
    mcp = runtime.mcp()
    for _ in range(5):
        mcp.tools()
        mcp.describe("g/echo")
        mcp.call("g/echo", text="x")
    assert len(calls) == 1  # no call, listing or describe built it again
    assert runtime.composition() is before


def test_the_binding_warns_once_per_composition(runtime):
    warnings: list[str] = []
    mcp = runtime.mcp(warnings.append)
    for _ in range(3):
        mcp.tools()
        mcp.call("g/echo", text="x")
    assert len(warnings) == 1 and warnings[0].startswith("server 'f': tool 'add' left out: inputSchema is ")
    assert tuple(warnings) == runtime.composition().operation_warnings


def test_only_the_composition_and_session_build_operations():
    """No module but catalogue/composition.py (Composition) uses advertise()."""
    package = os.path.dirname(albedo_actors.__file__)
    users = set()
    for folder, _dirs, files in os.walk(package):
        for file in files:
            if not file.endswith(".py"):
                continue
            path = os.path.join(folder, file)
            with open(path, encoding="utf-8") as handle:
                tree = ast.parse(handle.read(), path)
            for node in ast.walk(tree):
                named = (isinstance(node, ast.Name) and node.id == "advertise") or (isinstance(node, ast.Attribute) and node.attr == "advertise")
                imported = isinstance(node, ast.ImportFrom) and any(alias.name == "advertise" for alias in node.names)
                if named or imported:
                    users.add(os.path.relpath(path, package))
    assert users == {os.path.join("catalogue", "composition.py")}


# -- the command line's --hidden ---------------------------------------------------------------


def albedo(home, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "albedo_actors", "--home", str(home), *argv],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT)


@pytest.fixture
def home(tmp_path):
    entry = {"command": sys.executable, "args": [BINDING_SERVER, "--bad-schema", "add"], "disabledTools": ["sleep"]}
    (tmp_path / "extensions.json").write_text(json.dumps({"mcp": {"servers": {"f": entry}}}), encoding="utf-8")
    return tmp_path


def one_line(run: subprocess.CompletedProcess, code: int) -> str:
    assert run.returncode == code, (run.returncode, run.stderr)
    assert "Traceback" not in run.stderr and len(run.stderr.splitlines()) == 1, run.stderr
    return run.stderr.splitlines()[0]


def test_cli_calls_a_hidden_tool_only_with_hidden(home):
    for name in ("f/add", advertised_name("f", "add")):
        refused = albedo(home, "call", name, "--args", '{"a": 2, "b": 40}')
        line = one_line(refused, 2)
        assert line.startswith(f"albedo-mcp: {name!r} is not advertised: ") and HIDDEN_WHY in line
        assert line.endswith("; add --hidden to call it anyway") and refused.stdout == ""
        called = albedo(home, "call", name, "--hidden", "--args", '{"a": 2, "b": 40}', "--json")
        assert called.returncode == 0, called.stderr
        assert json.loads(called.stdout)["structuredContent"] == {"sum": 42}
    disabled = albedo(home, "call", "f/sleep", "--hidden")
    assert one_line(disabled, 2) == "albedo-mcp: tool 'sleep' of server 'f' is disabled in extensions.json"
    advertised = albedo(home, "call", "f/echo", "--args", '{"text": "hi"}')
    assert (advertised.returncode, advertised.stdout, advertised.stderr) == (0, "hi\n", "")


def test_cli_tools_warns_once_and_help_documents_hidden(home):
    listed = albedo(home, "tools")
    assert listed.returncode == 0
    warnings = [line for line in listed.stderr.splitlines() if "'add'" in line]
    assert len(warnings) == 1 and warnings[0].startswith("albedo-mcp: warning: server 'f': tool 'add' left out: "), listed.stderr
    assert "f/add(" not in listed.stdout and "f/echo(text)\t" in listed.stdout
    helped = albedo(home, "call", "--help")
    assert helped.returncode == 0 and "--hidden" in helped.stdout and "kept from the model" in helped.stdout
