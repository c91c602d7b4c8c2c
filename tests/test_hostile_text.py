"""Text from a server is data: invalid text, a million objects and floods cost only that server.

The servers are tests/servers/hostile_text_server.py (over stdio and streamable HTTP)
beside the well-behaved fault server. Every test asserts what a user sees: how long it
took, what was listed, the error line, the memory used, the threads started.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time

import pytest

from albedo_actors.actors.preparer import Prepare
from albedo_actors.connection import channel as rpc
from albedo_actors.actors.client import ServerHandle
from albedo_actors.config import ServerConfig
from albedo_actors.connection import DISCOVERY_BUDGET
from albedo_actors.errors import ProtocolViolation, ServerError, UnknownOutcome
from albedo_actors.wire import jsonrpc
from helpers import FAULT_SERVER, sent, text_of

HERE = os.path.dirname(os.path.abspath(__file__))
HOSTILE = os.path.join(HERE, "servers", "hostile_text_server.py")
RUN_TIMEOUT = 120  # a bound on every command, never an expected duration
PROMPT = 10.0  # "at once": far under every timeout involved (startup 30 s, call 60 s)


def hostile_entry(fault: str, *flags: str) -> dict:
    return {"command": sys.executable, "args": [HOSTILE, fault, *flags]}


def hostile_config(name: str, fault: str, *flags: str, **overrides) -> ServerConfig:
    return ServerConfig(name=name, type="stdio", command=sys.executable, args=(HOSTILE, fault, *flags), **overrides)


class HttpHostile:
    """The hostile server over streamable HTTP on 127.0.0.1, stopped by the fixture."""

    def __init__(self, fault: str) -> None:
        self.process = subprocess.Popen([sys.executable, HOSTILE, fault, "--http", "0"], stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()  # "listening PORT", or EOF if it failed
        assert line.startswith("listening "), line
        self.url = f"http://127.0.0.1:{int(line.split()[1])}/mcp"

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(10)
        self.process.stdout.close()


@pytest.fixture
def http_hostile():
    started: list[HttpHostile] = []

    def start(fault: str) -> HttpHostile:
        started.append(HttpHostile(fault))
        return started[-1]

    yield start
    for server in started:
        server.stop()


def write_config(home, servers: dict) -> None:
    (home / "extensions.json").write_text(json.dumps({"mcp": {"servers": servers}}), encoding="utf-8")


# Runs the CLI and reports its own peak RSS (kB) on the last line of stderr: VmHWM, the
# high-water mark of this process's own memory. Not getrusage's ru_maxrss, which Linux
# keeps across exec: a child forked from a pytest worker that had grown past 300 MiB
# reported the worker's peak, not its own (a full run saw 303 MiB for a 73 MiB CLI).
_MEASURED = (
    "import runpy, sys\n"
    "sys.argv = ['albedo-mcp'] + sys.argv[1:]\n"
    "try:\n"
    "    runpy.run_module('albedo_actors', run_name='__main__')\n"
    "finally:\n"
    "    with open('/proc/self/status') as status:\n"
    "        peak = next(line.split()[1] for line in status if line.startswith('VmHWM:'))\n"
    "    sys.stderr.write('peak-rss-kb %s\\n' % peak)\n"
)


def albedo(home, *argv: str) -> tuple[subprocess.CompletedProcess, float, int]:
    """Run ``albedo-mcp --home HOME ARGV``; (the run without the RSS line, seconds, peak RSS in MiB)."""
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-c", _MEASURED, "--home", str(home), *argv],
                         capture_output=True, text=True, timeout=RUN_TIMEOUT)
    took = time.monotonic() - started
    *lines, last = run.stderr.splitlines() or [""]
    assert last.startswith("peak-rss-kb "), run.stderr
    run.stderr = "".join(line + "\n" for line in lines)
    return run, took, int(last.split()[1]) // 1024


# -- the rule itself ------------------------------------------------------------------------


@pytest.mark.parametrize("line", [
    b'{"jsonrpc":"2.0","id":1,"result":{"d":"x\\ud800y"}}',
    b'{"jsonrpc":"2.0","id":1,"result":{"k\\udfff":1}}',
    b'{"jsonrpc":"2.0","id":1,"result":{"d":"\\udc00\\ud800"}}',  # a low half before a high half is no pair
    b'{"jsonrpc":"2.0","id":"x\\uD800","method":"ping"}',
], ids=["high-in-value", "low-in-key", "reversed-pair", "upper-case-in-id"])
def test_a_lone_surrogate_anywhere_makes_the_message_invalid(line):
    with pytest.raises(jsonrpc.WireError, match="lone UTF-16 surrogate"):
        jsonrpc.parse_line(line)


def test_a_surrogate_pair_and_an_escaped_backslash_are_text():
    assert jsonrpc.parse_line(b'{"a":"\\ud83d\\ude00","b":"\\\\ud800"}') == {"a": "\U0001F600", "b": "\\ud800"}


def test_a_million_empty_objects_are_refused_before_parsing_and_brackets_in_strings_do_not_count():
    flood = b"[" + b",".join([b"{}"] * 1_000_000) + b"]"
    started = time.monotonic()
    with pytest.raises(jsonrpc.WireError, match="more than 500000 JSON objects"):
        jsonrpc.parse_line(flood)
    assert time.monotonic() - started < 2.0  # counted, not parsed (parsing took 3 s and 140 MB)
    text = b'{"text":"' + b"{[" * 400_000 + b'"}'
    assert jsonrpc.parse_line(text) == {"text": "{[" * 400_000}


# -- one bad server is left out, the others are listed on time --------------------------------


def test_tools_lists_the_good_servers_on_time_when_others_send_lone_surrogates(tmp_path, http_hostile):
    bad_http = http_hostile("surrogate-description")
    write_config(tmp_path, {
        "good": {"command": sys.executable, "args": [FAULT_SERVER]},
        "badstdio": hostile_entry("surrogate-description"),
        "badkey": hostile_entry("surrogate-key"),
        "badhttp": {"type": "http", "url": bad_http.url},
    })
    run, took, _rss = albedo(tmp_path, "tools")
    assert run.returncode == 0, run.stderr
    assert took < 30  # before: about ten minutes, and nothing listed
    names = [line.split("\t")[0] for line in run.stdout.splitlines()]
    assert "good/echo(text)" in names
    assert not any(name.startswith(("badstdio/", "badkey/", "badhttp/")) for name in names)
    assert "Traceback" not in run.stderr
    lines = sorted(run.stderr.splitlines())
    assert len(lines) == 3, run.stderr
    for line, server in zip(lines, ("badhttp", "badkey", "badstdio")):
        assert line.startswith(f"albedo-mcp: warning: server {server!r}: ")
        assert "lone UTF-16 surrogate" in line


@pytest.mark.parametrize("fault", ["surrogate-result", "surrogate-error", "surrogate-request-id", "surrogate-method"])
def test_a_call_meeting_invalid_text_over_stdio_ends_at_once_and_the_next_call_redials(tmp_path, fault):
    handle = ServerHandle.start(hostile_config("h", fault), str(tmp_path))
    try:
        handle.connect()
        attempts = [handle.status()["attempt"]]
        for _call in range(2):
            started = time.monotonic()
            with pytest.raises(ServerError) as caught:
                handle.call_tool("echo", {"text": "hi"})
            assert time.monotonic() - started < PROMPT
            assert isinstance(caught.value, (ProtocolViolation, UnknownOutcome))
            message = str(caught.value)
            assert message.startswith("server 'h': ") and "\n" not in message
            assert "lone UTF-16 surrogate" in message
            attempts.append(handle.status()["attempt"])
        # The first connection ended with the first call; the second call dialled again
        # (or found the server restarted after the loss: actors/client.py restarts it).
        assert attempts[2] > attempts[0]
    finally:
        handle.stop()


@pytest.mark.parametrize("fault", ["surrogate-result", "surrogate-error"])
def test_a_call_meeting_invalid_text_over_http_fails_at_once_with_one_line(tmp_path, http_hostile, fault):
    server = http_hostile(fault)
    handle = ServerHandle.start(ServerConfig(name="h", type="http", url=server.url), str(tmp_path))
    try:
        handle.connect()
        started = time.monotonic()
        with pytest.raises(ServerError) as caught:
            handle.call_tool("echo", {"text": "hi"})
        assert time.monotonic() - started < PROMPT
        assert str(caught.value).startswith("server 'h': ") and "lone UTF-16 surrogate" in str(caught.value)
    finally:
        handle.stop()


def test_a_connection_survives_valid_text_after_the_rule_is_applied(tmp_path):
    # The well-behaved server over the same rule: emoji, escaped backslashes, controls.
    handle = ServerHandle.start(hostile_config("h", "none"), str(tmp_path))
    try:
        text = "pair \U0001F600, backslash \\ud800, nul \x00"
        assert text_of(handle.call_tool("echo", {"text": text})) == text
    finally:
        handle.stop()


# -- memory follows the bytes on the wire ----------------------------------------------------


def test_pages_of_empty_objects_stop_at_the_discovery_budget_with_bounded_memory(tmp_path):
    # 40 pages of 1 MiB of {} (each far under the 16 MiB message cap and the container
    # limit): before, the CLI grew to gigabytes; now the budget stops at page 8 (8 MiB and a few bytes).
    write_config(tmp_path, {"good": {"command": sys.executable, "args": [FAULT_SERVER]},
                            "flood": hostile_entry("empty-pages", "--pages", "40", "--page-bytes", str(1 << 20))})
    run, took, rss = albedo(tmp_path, "tools")
    assert run.returncode == 0, run.stderr
    assert "good/echo(text)\t" in run.stdout
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("albedo-mcp: warning: server 'flood': ")
    assert f"over the {DISCOVERY_BUDGET >> 20} MiB discovery budget (page 8 of tools/list" in lines[0]
    assert rss < 300, f"peak RSS {rss} MiB"


def test_over_http_the_budget_counts_the_bodies_on_the_wire(tmp_path, http_hostile):
    server = http_hostile("empty-pages")  # 40 pages of 1 MiB of {}
    handle = ServerHandle.start(ServerConfig(name="h", type="http", url=server.url), str(tmp_path))
    try:
        with pytest.raises(ProtocolViolation) as caught:
            handle.connect()
        assert f"over the {DISCOVERY_BUDGET >> 20} MiB discovery budget (page 8 of tools/list" in str(caught.value)
    finally:
        handle.stop()


def test_entries_left_out_by_the_hundred_thousand_cost_one_warning_line(tmp_path):
    write_config(tmp_path, {"flood": hostile_entry("empty-pages", "--pages", "3", "--page-bytes", str(300_000))})
    run, _took, rss = albedo(tmp_path, "tools")
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    assert lines == ["albedo-mcp: warning: server 'flood': left out 300000 entries of tools without a name"], run.stderr
    assert rss < 300, f"peak RSS {rss} MiB"


def test_a_million_empty_objects_from_a_server_leave_it_out_at_once(tmp_path):
    write_config(tmp_path, {"good": {"command": sys.executable, "args": [FAULT_SERVER]},
                            "flood": hostile_entry("million-objects")})
    run, took, rss = albedo(tmp_path, "tools")
    assert run.returncode == 0, run.stderr
    assert "good/echo(text)\t" in run.stdout
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("albedo-mcp: warning: server 'flood': "), run.stderr
    assert "more than 500000 JSON objects and arrays" in lines[0]
    assert took < 30
    assert rss < 300, f"peak RSS {rss} MiB"


# -- requests for the host's capabilities run on a bounded pool --------------------------------


def handler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("mcp-handler-")]


def test_a_flood_of_server_requests_uses_a_small_pool_and_the_excess_is_refused_at_once(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="albedo_actors.connection.channel")

    def refusals():
        return [r for r in caplog.records if "too many at once" in r.getMessage()]

    release = threading.Event()
    entered = threading.Semaphore(0)

    def elicit(params):
        entered.release()
        release.wait(30)
        return {"action": "accept", "content": {}}

    handle = ServerHandle.start(hostile_config("h", "flood-requests"), str(tmp_path), handlers={"elicitation": elicit})
    outcome: list = []
    try:
        handle.connect()
        caller = threading.Thread(target=lambda: outcome.append(handle.call_tool("flood", {"count": 100})))
        caller.start()
        for _ in range(rpc.HANDLER_WORKERS):
            assert entered.acquire(timeout=PROMPT)
        # Every worker is busy and the backlog is full; the other 84 are refused, and no
        # thread is started for them.
        deadline = time.monotonic() + PROMPT
        while len(refusals()) < 100 - rpc.HANDLER_BACKLOG and time.monotonic() < deadline:
            caller.join(0.05)  # bounded polling of the log, not a sleep standing for an event
        assert len(refusals()) == 100 - rpc.HANDLER_BACKLOG
        assert len(handler_threads()) == rpc.HANDLER_WORKERS
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == "albedo_actors.connection.channel"]
        assert len(warnings) == 1  # one line for the burst
        release.set()
        caller.join(PROMPT * 3)
        assert not caller.is_alive()
        answers = json.loads(text_of(outcome[0]))
        assert answers == {"results": rpc.HANDLER_BACKLOG, "errors": 100 - rpc.HANDLER_BACKLOG}
    finally:
        release.set()
        handle.stop()


# -- the preparer always answers ---------------------------------------------------------------


def test_a_failure_inside_a_preparation_fails_it_at_once_instead_of_leaving_the_session_waiting(tmp_path, monkeypatch):
    from albedo_actors.actors import preparer as preparer_module
    from albedo_actors.actors.preparer import RuntimePreparer
    from albedo_actors.actors.registry import ServerRegistry
    from albedo_actors.config import McpConfig

    def broken(catalogue):
        raise RuntimeError("a bug in sizing")

    monkeypatch.setattr(preparer_module, "size_of", broken)
    registry = ServerRegistry.start(str(tmp_path))
    preparer = RuntimePreparer.start(registry, None, environ={"PATH": "/usr/bin:/bin"})
    try:
        config = McpConfig(home=str(tmp_path), servers=(ServerConfig(name="good", type="stdio", command=sys.executable, args=(FAULT_SERVER,)),))
        future = sent(preparer.proxy(), Prepare(config))
        started = time.monotonic()
        with pytest.raises(Exception) as caught:
            future.result(timeout=60)
        assert time.monotonic() - started < 30
        assert "preparing the MCP servers failed (RuntimeError)" in str(caught.value)
    finally:
        preparer.stop(timeout=30)
        registry.stop(timeout=30)


# -- the reader thread always lives ------------------------------------------------------------


def test_a_message_whose_handling_raises_ends_the_connection_instead_of_the_reader():
    closed: list[str] = []
    sent: list[dict] = []

    class Link:
        def send_other(self, message):
            sent.append(message)

        def close(self, reason):
            closed.append(reason)

    def on_notification(method, params):
        raise RuntimeError("an owner's bug")

    channel = rpc.RpcChannel("h", on_notification, lambda reason: None)
    channel.attach(Link())
    channel.feed_line(b'{"jsonrpc":"2.0","method":"notifications/message","params":{}}')  # must not raise
    assert closed == ["it sent an invalid message: a message this client could not handle (RuntimeError)"]
    channel.feed_line(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
    assert sent == []  # poisoned: nothing after it is trusted


# -- what the model is offered of a tool's inputSchema (issue 23, Noted) ------------------------


def _offered_size(schema: dict) -> int:
    return len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def _strings(value, keyword=None):
    """(keyword, string) of every string in a schema, with the key it stands under."""
    if isinstance(value, str):
        yield keyword, value
    elif isinstance(value, dict):
        for key, sub in value.items():
            yield from _strings(sub, key)
    elif isinstance(value, list):
        for sub in value:
            yield from _strings(sub, keyword)


def test_a_60_kib_schema_of_prose_reaches_the_model_cut_and_escaped_and_calls_get_what_the_model_sends(tmp_path):
    from albedo_actors.catalogue.naming import MAX_ADVERTISED_SCHEMA, MAX_SCHEMA_PROSE
    from albedo_actors.config import McpConfig
    from albedo_actors.runtime import Runtime
    from servers.hostile_text_server import HUGE, WIDE

    home = str(tmp_path / "home")
    config = McpConfig(home=home, servers=(hostile_config("h", "huge-schema"),))
    warnings: list[str] = []
    with Runtime(home, None, config=config, enabled=True) as runtime:
        composition = runtime.composition()
        mcp = runtime.mcp(warn=warnings.append)
        offered = {item.operation: item for item in composition.model_operations()}
        assert set(offered) == {"echo", "huge", "wide"}  # neither is left out: each is cut instead
        huge, wide = offered["huge"].input_schema, offered["wide"].input_schema
        assert mcp.describe("h/huge")["inputSchema"] == huge and mcp.describe("h/wide")["inputSchema"] == wide
        sent = {"huge": HUGE["inputSchema"], "wide": WIDE["inputSchema"]}
        for name, schema in (("huge", huge), ("wide", wide)):
            assert _offered_size(sent[name]) > 60_000 and _offered_size(schema) <= MAX_ADVERTISED_SCHEMA
            # The structure is whole: every parameter, its type, enum and required.
            assert set(schema["properties"]) == set(sent[name]["properties"]) and schema["required"] == sent[name]["required"]
            for prop, sub in schema["properties"].items():
                assert sub["type"] == sent[name]["properties"][prop]["type"]
            # No prose reaches the model raw or long, and every cut is marked.
            for keyword, text in _strings(schema):
                assert not any(ch in text for ch in "\x1b\x07\x9b\u202e\u2066\u2069"), (keyword, text[:40])
                assert len(text) <= MAX_SCHEMA_PROSE, keyword
        assert huge["properties"]["mode"]["enum"] == ["fast", "slow"]
        assert huge["properties"]["options"]["properties"]["depth"] == {
            "type": "integer", "minimum": 0, "description": huge["properties"]["options"]["properties"]["depth"]["description"]}
        path = huge["properties"]["path"]["description"]
        assert path.endswith("…") and path.startswith("Describe \\x1b]0;pwned\\x07the path\\x1b[2J \\u202eevil")
        assert huge["properties"]["path"]["examples"][1] == "/tmp/x" and huge["properties"]["path"]["examples"][0].endswith("…")
        assert len(huge["$comment"]) == MAX_SCHEMA_PROSE and huge["$comment"].endswith("…")
        # 40 cut descriptions are still over the bound: they are cut shorter, the root says so, and it warns.
        assert all(len(sub["description"]) <= 128 and sub["description"].endswith("…") for sub in wide["properties"].values())
        assert wide["description"].startswith("albedo: the descriptions in this schema are cut to 128 characters")
        assert "description" not in huge  # within the bound after the first cut: no note, no warning
        mcp.call("h/echo", text="x")  # the composition's warnings reach the binding's warn once
        assert [w for w in warnings if "inputSchema" in w] == [
            f"server 'h': tool 'wide': its inputSchema is {_offered_size(sent['wide'])} bytes, over the "
            f"{MAX_ADVERTISED_SCHEMA} the model is given; its descriptions are cut to 128 characters"]
        # The catalogue keeps what the server sent; a call goes out with the model's arguments as given.
        assert composition.catalogues["h"].tool("huge")["inputSchema"] == sent["huge"]
        arguments = {"path": "/tmp/x", "mode": "slow", "options": {"depth": 3}, "extra": "not in the schema"}
        assert json.loads(mcp.call("h/huge", arguments).content[0]["text"]) == arguments


def test_the_real_tool_lists_are_offered_to_the_model_unchanged():
    from albedo_actors.catalogue import Catalogue
    from albedo_actors.catalogue.naming import MAX_ADVERTISED_SCHEMA, advertise

    largest = 0
    for name in ("everything", "filesystem", "sdk"):
        with open(os.path.join(HERE, "fixtures", f"tools_{name}.json"), encoding="utf-8") as f:
            tools = json.load(f)["tools"]
        # server-everything runs tool calls as tasks (its research tool requires one): it says
        # so in its capabilities, without which that tool would be left out (issue 29).
        capabilities = {"tasks": {"requests": {"tools": {"call": {}}}}} if name == "everything" else {}
        catalogue = Catalogue(server=name, era="legacy", protocol_version="2025-11-25", tools=tuple(tools),
                              capabilities=capabilities)
        warnings: list[str] = []
        offered = advertise({name: catalogue}, {}, warnings.append)
        assert warnings == [] and len(offered) == len(tools)
        for tool, item in zip(tools, offered):
            assert item.input_schema is tool["inputSchema"]  # the very object: nothing cut, nothing copied
            largest = max(largest, _offered_size(tool["inputSchema"]))
    assert largest == 648 and largest * 12 < MAX_ADVERTISED_SCHEMA  # server-everything's gzip-file-as-resource
