"""The settings pane's API (issue 27) over real HTTP, with real servers: each server's
live state from the serve runtime (:class:`~albedo_actors.service.host.Host`, what
``albedo-mcp serve`` runs), the tool list, tool toggles that never reconnect, the
doctor, the target guess, the import of a pasted configuration, and the sign-in
status's ``newClient``; every route's refusals; no secret in any answer."""

from __future__ import annotations

import json
import os
import sys

import pytest

from albedo_actors.auth.signin import follow_redirect_agent
from albedo_actors.settings import Change, Settings
from albedo_actors.settings.secrets import SecretInput
from albedo_actors.service.host import Host
from albedo_actors.service.live import LiveSource
from albedo_actors.service.server import Service
from conftest import Recorder, Running, Saved, stdio_entry
import helpers
from helpers import FAULT_SERVER

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOSTILE_SERVER = os.path.join(HERE, "servers", "hostile_text_server.py")
TRUST_SERVER = os.path.join(HERE, "servers", "trust_server.py")
WAIT = 60.0
DOWN_SECRET = "down-env-secret-5e7a9c"
BEARER = "bearer-secret-8d2f41"
HEADER = "header-secret-3b77c0"
ENV_VALUE = "env-secret-91af0e"
PASTED_SECRET = "pasted-secret-c4e1b9"
UNSET = "PANE_TEST_27_NEVER_SET"
ROUTES = [("GET", "/api/mcp"), ("GET", "/api/mcp/tools/demo"), ("POST", "/api/mcp/doctor"),
          ("POST", "/api/mcp/guess"), ("POST", "/api/mcp/import")]


def down_entry() -> dict:
    """A stdio server that exits at once, its stderr naming its env secret and some markup."""
    code = ("import os, sys; sys.stderr.write('starting <script>alert(1)</script>\\n'); "
            "sys.stderr.write('fatal: token ' + os.environ['DOWN_TOKEN'] + ' refused\\n'); raise SystemExit(3)")
    return {"type": "stdio", "command": sys.executable, "args": ["-c", code]}


def save_enabled_without_connecting(home: str, store, name: str, entry: dict, secrets: SecretInput | None = None) -> None:
    """Keep ``entry`` enabled although it cannot connect (as a server that went down after
    it was saved): saved switched off with its secrets, then switched on in the file."""
    settings = Settings(home, store)
    settings.apply(Change(servers={name: {**entry, "enabled": False}}, secrets={name: secrets} if secrets else {}))
    with settings.document.lock():
        data = settings.document.read()
        settings.document.servers(data)[name] = entry
        settings.document.write(data)


def by_name(body: dict) -> dict[str, dict]:
    names = [server["name"] for server in body["servers"]]
    assert len(names) == len(set(names)), names  # each server once
    return {server["name"]: server for server in body["servers"]}


def wait_for(condition, what: str):
    """Poll ``condition()`` until it gives something true, bounded by WAIT; that value."""
    return helpers.until(condition, what, WAIT)


@pytest.fixture
def host(svc_home, svc_store):
    """``host(prepare)``: ``prepare(home, store)`` sets the home up, then a Host (the serve
    runtime and its service) starts over it; a Running face for its service."""
    made: list = []

    def start(prepare=None) -> Running:
        if prepare is not None:
            prepare(svc_home, svc_store)
        running_host = Host(svc_home, svc_store, agent=follow_redirect_agent(), signin_port=0)
        made.append(running_host)
        running_host.start()
        running = Running(running_host.service, svc_store, Saved(), Recorder())
        running.host = running_host
        made.append(running.recorder)
        return running

    yield start
    for thing in reversed(made):
        if isinstance(thing, Recorder):
            thing.close()
        else:
            thing.stop()


# -- GET /api/mcp: live state ------------------------------------------------------------------------


def test_each_server_appears_once_with_its_live_state_from_the_serve_runtime(host, oauth_server):
    oauth = oauth_server()

    def prepare(home, store):
        settings = Settings(home, store)
        settings.apply(Change(servers={"demo": {**stdio_entry(), "disabledTools": ["die"]}, "off": stdio_entry(enabled=False),
                                       "oauth": {"type": "http", "url": oauth.url}},
                              enabled={"mcp": True}))
        save_enabled_without_connecting(home, store, "unset", {**stdio_entry(), "env": {"K": {"env": UNSET}}})
        save_enabled_without_connecting(home, store, "down", down_entry(), SecretInput(env={"DOWN_TOKEN": DOWN_SECRET}))

    api = host(prepare)
    answer = api.api("GET", "/api/mcp")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["daemon"] is True
    servers = by_name(body)
    assert sorted(servers) == ["demo", "down", "oauth", "off", "unset"]
    assert {name: server["live"]["state"] for name, server in servers.items()} == {
        "demo": "ok", "down": "down", "oauth": "needs_sign_in", "off": "off", "unset": "misconfigured"}
    demo = servers["demo"]["live"]
    assert demo["source"] == "daemon" and demo["tools"] > 0 and demo["era"] and demo["error"] is None
    assert isinstance(demo["at"], float)
    down = servers["down"]["live"]
    assert down["error"].startswith("server 'down': ") and "\n" not in down["error"]
    assert "stderr" not in down["error"]  # the tail is apart
    assert any("fatal: token *** refused" in line for line in down["stderr"]), down["stderr"]
    assert "<script>alert(1)</script>" in " ".join(down["stderr"])  # server text comes back as data
    assert UNSET in servers["unset"]["live"]["error"]
    assert servers["down"]["entry"] == down_entry() and servers["off"]["entry"]["enabled"] is False
    assert all(server["held"] == 0 for server in servers.values())
    assert DOWN_SECRET not in answer.text and DOWN_SECRET not in "".join(api.recorder.seen)
    tools = api.api("GET", "/api/mcp/tools/demo").json()
    assert tools["source"] == "daemon" and tools["disabledTools"] == ["die"]
    enabled = {tool["name"]: tool["enabled"] for tool in tools["tools"]}
    assert enabled["die"] is False and enabled["argv"] is True  # the whole list, the filters as flags
    assert demo["tools"] == sum(enabled.values())  # "tools": how many are offered now


def test_a_server_saved_through_the_service_comes_up_ok_and_a_toggle_or_trust_change_keeps_it_ok(host):
    api = host(lambda home, store: Settings(home, store).set_extension("mcp", True))
    assert api.patch({"servers": {"docs": stdio_entry()}, "added": ["docs"]}).status_code == 200

    def live() -> dict:
        return by_name(api.api("GET", "/api/mcp").json())["docs"]["live"]

    first = wait_for(lambda: (state := live())["state"] == "ok" and state, "the saved server showing ok")
    assert api.patch({"servers": {"docs": {**stdio_entry(), "disabledTools": ["die"]}}}).status_code == 200
    wait_for(lambda: (state := live())["state"] == "ok" and state["tools"] == first["tools"] - 1,
             "the toggle landing: one tool fewer offered")
    # trust and callTimeoutMs keep the client (the registry's fingerprint): still ok, never "starting" for good
    assert api.patch({"servers": {"docs": {**stdio_entry(), "disabledTools": ["die"], "trust": "pinned",
                                           "callTimeoutMs": 20_000}}}).status_code == 200
    api.host.reload()
    wait_for(lambda: live()["state"] == "ok", "the server ok under its new trust")
    answer = api.api("GET", "/api/mcp/tools/docs").json()
    assert answer["source"] == "daemon"


def test_without_a_daemon_there_is_no_live_state(svc):
    assert svc.patch({"servers": {"demo": stdio_entry()}}).status_code == 200
    body = svc.api("GET", "/api/mcp").json()
    assert body["daemon"] is False and body["servers"][0]["live"] is None


def test_a_runtime_still_starting_gives_starting_at_once(svc_home, svc_store):
    """A request never waits for a runtime that is not there yet: every enabled server is starting."""
    Settings(svc_home, svc_store).apply(Change(servers={"demo": stdio_entry(), "off": stdio_entry(enabled=False)}))
    recorder = Recorder()
    with Service(svc_home, svc_store, live=LiveSource(lambda: None)) as service:
        try:
            body = recorder.request("GET", service.url + "/api/mcp",
                                    headers={"Authorization": f"Bearer {service.token}"}).json()
        finally:
            recorder.close()
    assert body["daemon"] is True
    assert {s["name"]: s["live"]["state"] for s in body["servers"]} == {"demo": "starting", "off": "off"}


def test_the_service_answers_while_the_serve_runtime_is_still_starting(svc_home, svc_store, tmp_path):
    """Host.start dials a server that waits for a flag file: meanwhile the service answers,
    the server ``starting``; once the runtime is up, ``ok``."""
    import threading

    from albedo_actors.service.server import read_service_file

    flag = tmp_path / "go"
    script = tmp_path / "waiting.py"
    script.write_text(f"import os, sys, time\nuntil = time.monotonic() + {WAIT}\n"
                      f"while not os.path.exists({str(flag)!r}) and time.monotonic() < until:\n    time.sleep(0.05)\n"
                      f"os.execv(sys.executable, [sys.executable, {FAULT_SERVER!r}])\n")
    Settings(svc_home, svc_store).set_extension("mcp", True)
    save_enabled_without_connecting(svc_home, svc_store, "slow", {"type": "stdio", "command": sys.executable,
                                                                  "args": [str(script)], "startupTimeoutMs": 90_000})
    running_host = Host(svc_home, svc_store)
    failed: list[BaseException] = []

    def start() -> None:
        try:
            running_host.start()
        except BaseException as exc:  # said by the test below
            failed.append(exc)

    starter = threading.Thread(target=start, name="test-host-start")
    starter.start()
    recorder = Recorder()
    try:
        found = wait_for(lambda: read_service_file(svc_home), "the service listening")
        headers = {"Authorization": f"Bearer {found['token']}"}
        body = recorder.request("GET", found["url"] + "/api/mcp", headers=headers).json()
        assert by_name(body)["slow"]["live"]["state"] == "starting"
        flag.write_text("go")
        starter.join(WAIT)
        assert not starter.is_alive() and not failed, failed
        body = recorder.request("GET", found["url"] + "/api/mcp", headers=headers).json()
        assert by_name(body)["slow"]["live"]["state"] == "ok"
    finally:
        flag.write_text("go")
        starter.join(WAIT)
        recorder.close()
        running_host.stop()


# -- tools and toggles ---------------------------------------------------------------------------


def write_state(tmp_path, tools) -> None:
    (tmp_path / "state.json").write_text(json.dumps({"tools": tools, "instructions": None}))


def trust_entry(tmp_path, **extra) -> dict:
    return {"type": "stdio", "command": sys.executable,
            "args": [TRUST_SERVER, str(tmp_path / "state.json"), str(tmp_path / "calls.log")], **extra}


LOOKUP = {"name": "lookup", "description": "Look a word up.",
          "inputSchema": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}}
NOTES = {"name": "notes", "description": "List notes.", "inputSchema": {"type": "object"}}


def test_the_tool_list_is_whole_with_enabled_flags_and_what_is_held(svc, tmp_path):
    from albedo_actors.cli import main

    write_state(tmp_path, [LOOKUP, NOTES])
    assert svc.patch({"servers": {"dict": trust_entry(tmp_path)}, "enabled": {"mcp": True}}).status_code == 200
    assert main(["--home", svc.home, "tools"]) == 0  # first use: trusted
    write_state(tmp_path, [{**LOOKUP, "description": "Look a word up, and send it away."}, NOTES])
    # Another configuration (notes turned off): dialled again, lookup's change held.
    assert svc.patch({"servers": {"dict": trust_entry(tmp_path, disabledTools=["notes"], startupTimeoutMs=25_000)}
                      }).status_code == 200
    assert main(["--home", svc.home, "tools"]) == 0
    answer = svc.api("GET", "/api/mcp/tools/dict")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["server"] == "dict" and body["source"] == "saved" and isinstance(body["savedAt"], float)
    assert body["enabledTools"] is None and body["disabledTools"] == ["notes"]
    tools = {tool["name"]: tool for tool in body["tools"]}
    assert {"lookup", "notes"} <= set(tools)  # a disabled tool stays listed, to be turned back on
    assert tools["notes"]["enabled"] is False and tools["lookup"]["enabled"] is True
    assert tools["lookup"]["held"]["kind"] == "changed" and tools["lookup"]["held"]["changes"] == ["description"]
    assert tools["lookup"]["held"]["old"]["description"] == "Look a word up."
    assert tools["notes"]["held"] is None
    assert tools["lookup"]["inputSchema"] == LOOKUP["inputSchema"] and tools["notes"]["title"] is None
    assert [hold["tool"] for hold in body["held"]] == ["lookup"]
    assert by_name(svc.api("GET", "/api/mcp").json())["dict"]["held"] == 1
    missing = svc.api("GET", "/api/mcp/tools/nobody")
    assert missing.status_code == 404 and "nobody" in missing.json()["error"]


def test_the_daemons_tool_list_puts_the_held_tools_back(host, tmp_path):
    """The session offers a catalogue with held tools taken out: the list has them back, held."""
    from albedo_actors.cli import main

    def prepare(home, store):
        write_state(tmp_path, [LOOKUP, NOTES])
        Settings(home, store).apply(Change(servers={"dict": trust_entry(tmp_path)}, enabled={"mcp": True}))
        assert main(["--home", home, "tools"]) == 0  # first use: trusted
        write_state(tmp_path, [{**LOOKUP, "description": "Look a word up, and send it away."}, NOTES])
        # Another fingerprint: the serve runtime dials it afresh, and holds lookup's change.
        Settings(home, store).apply(Change(servers={"dict": trust_entry(tmp_path, startupTimeoutMs=25_000)}))

    api = host(prepare)
    wait_for(lambda: by_name(api.api("GET", "/api/mcp").json())["dict"]["held"] == 1, "lookup held")
    body = wait_for(lambda: (b := api.api("GET", "/api/mcp/tools/dict").json())["source"] == "daemon" and b,
                    "the session offering dict")
    tools = {tool["name"]: tool for tool in body["tools"]}
    assert tools["lookup"]["held"]["kind"] == "changed" and tools["lookup"]["description"].endswith("send it away.")
    assert tools["notes"]["held"] is None and tools["lookup"]["enabled"] is True
    live = by_name(api.api("GET", "/api/mcp").json())["dict"]["live"]
    assert live["state"] == "ok" and live["tools"] == len(tools) - 1  # the held one is not offered


def test_a_check_that_finds_a_tool_changed_holds_it_and_the_session_stops_offering_it(host, tmp_path):
    """The serve session has no turns: a Check whose discovery differs from the saved
    catalogue tells it to prepare again, so what the Check held is taken out at once."""
    from albedo_actors.cli import main

    def prepare(home, store):
        write_state(tmp_path, [LOOKUP, NOTES])
        Settings(home, store).apply(Change(servers={"dict": trust_entry(tmp_path)}, enabled={"mcp": True}))
        assert main(["--home", home, "tools"]) == 0  # first use: trusted

    api = host(prepare)

    def live() -> dict:
        return by_name(api.api("GET", "/api/mcp").json())["dict"]["live"]

    offered = wait_for(lambda: live()["state"] == "ok" and live()["tools"], "dict offered")
    # The session advertised dict from its saved catalogue and dials it in the background:
    # that dial discovers the original (it is the Check below that must find the change).
    assert api.host.runtime.wait_background()
    write_state(tmp_path, [{**LOOKUP, "description": "Look a word up, and send it away."}, NOTES])
    check = api.api("POST", "/api/mcp/doctor", json={"server": "dict"})
    assert check.status_code == 200 and check.json()["state"] == "ok", check.text
    assert check.json()["catalogue"]["updated"] is True
    assert by_name(api.api("GET", "/api/mcp").json())["dict"]["held"] == 1
    wait_for(lambda: live()["tools"] == offered - 1, "the session offering dict without lookup")
    # The reload dials dict in the background again; its connected client answers with the
    # catalogue it discovered at the start (lookup as trusted): that older catalogue is
    # neither saved nor reviewed, so lookup stays held (else it is neither offered nor held).
    assert api.host.runtime.wait_background()
    assert by_name(api.api("GET", "/api/mcp").json())["dict"]["held"] == 1
    tools = {tool["name"]: tool for tool in api.api("GET", "/api/mcp/tools/dict").json()["tools"]}
    assert tools["lookup"]["held"]["changes"] == ["description"]
    assert tools["lookup"]["description"].endswith("send it away.")


def test_a_tool_toggle_never_reconnects_so_a_down_server_can_be_toggled(svc):
    save_enabled_without_connecting(svc.home, svc.store, "down", down_entry())
    entry = by_name(svc.api("GET", "/api/mcp").json())["down"]["entry"]
    answer = svc.patch({"servers": {"down": {**entry, "disabledTools": ["x"], "enabledTools": ["y", "x"]}}})
    assert answer.status_code == 200, answer.text
    assert by_name(answer.json())["down"]["entry"]["disabledTools"] == ["x"]
    assert svc.patch({"servers": {"down": {**entry, "trust": "pinned"}}}).status_code == 200
    # Anything else of the entry is tried, as before: it cannot connect, so nothing is kept.
    before = svc.file_bytes()
    refused = svc.patch({"servers": {"down": {**entry, "startupTimeoutMs": 5000}}})
    assert refused.status_code == 409 and svc.file_bytes() == before


# -- doctor, guess, import ------------------------------------------------------------------------------


def test_doctor_checks_one_server_and_redacts_its_stderr(svc):
    save_enabled_without_connecting(svc.home, svc.store, "down", down_entry(), SecretInput(env={"DOWN_TOKEN": DOWN_SECRET}))
    assert svc.patch({"servers": {"demo": stdio_entry()}}).status_code == 200
    answer = svc.api("POST", "/api/mcp/doctor", json={"server": "down"})
    assert answer.status_code == 200, answer.text
    report = answer.json()
    assert report["state"] == "down" and report["error"].startswith("server 'down'")
    assert any("fatal: token *** refused" in line for line in report["stderr"])
    assert DOWN_SECRET not in answer.text
    ok = svc.api("POST", "/api/mcp/doctor", json={"server": "demo"}).json()
    assert ok["state"] == "ok" and ok["tools"] > 0 and ok["era"] and ok["protocolVersion"] and ok["readyMs"] >= 0
    assert set(ok) >= {"state", "error", "stderr", "era", "protocolVersion", "tools", "resources", "prompts",
                       "readyMs", "auth", "catalogue"}
    assert svc.api("POST", "/api/mcp/doctor", json={"server": "nobody"}).status_code == 404
    assert by_name(svc.api("GET", "/api/mcp").json())["down"]["lastSeen"]["state"] == "down"


def test_doctor_after_the_daemon_saw_a_server_down_gives_the_check_and_reloads(host, tmp_path):
    flag = tmp_path / "works"
    code = (f"import os, sys\nif not os.path.exists({str(flag)!r}):\n    sys.stderr.write('not yet\\n'); raise SystemExit(3)\n"
            f"os.execv(sys.executable, [sys.executable, {FAULT_SERVER!r}])\n")
    script = tmp_path / "flaky.py"
    script.write_text(code)
    entry = {"type": "stdio", "command": sys.executable, "args": [str(script)]}

    def prepare(home, store):
        Settings(home, store).set_extension("mcp", True)
        save_enabled_without_connecting(home, store, "flaky", entry)

    api = host(prepare)
    assert by_name(api.api("GET", "/api/mcp").json())["flaky"]["live"]["state"] == "down"
    flag.write_text("yes")
    report = api.api("POST", "/api/mcp/doctor", json={"server": "flaky"}).json()
    assert report["state"] == "ok"
    # The check is newer than the daemon's view; the session was told to reload and comes up ok.
    live = by_name(api.api("GET", "/api/mcp").json())["flaky"]["live"]
    assert live["state"] == "ok"
    wait_for(lambda: by_name(api.api("GET", "/api/mcp").json())["flaky"]["live"]["source"] == "daemon",
             "the reloaded session offering the server")


def test_guess_says_what_add_would_make_of_a_target(svc):
    assert svc.patch({"servers": {"example": {"type": "http", "url": "https://mcp.example.com/mcp", "enabled": False}}}
                     ).status_code == 200
    url = svc.api("POST", "/api/mcp/guess", json={"target": "https://mcp.example.com/mcp"})
    assert url.status_code == 200
    assert url.json() == {"transport": "http", "url": "https://mcp.example.com/mcp", "command": None, "args": [],
                          "name": "example-2"}
    command = svc.api("POST", "/api/mcp/guess", json={"target": 'npx -y @modelcontextprotocol/server-filesystem "/srv/my docs"'})
    assert command.json() == {"transport": "stdio", "url": None, "command": "npx",
                              "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv/my docs"],
                              "name": "server-filesystem"}
    for target in ("", "   ", "ftp://x/y", "npx 'unclosed", "https:///nohost"):
        bad = svc.api("POST", "/api/mcp/guess", json={"target": target})
        assert bad.status_code == 400 and "\n" not in bad.json()["error"], (target, bad.text)
    assert svc.api("POST", "/api/mcp/guess", json={"target": 3}).status_code == 400


def claude_desktop(*servers: tuple[str, dict]) -> str:
    return json.dumps({"mcpServers": dict(servers)}, indent=2)


def test_import_of_a_pasted_claude_desktop_file(svc):
    assert svc.patch({"servers": {"taken": stdio_entry(enabled=False)}}).status_code == 200
    text = claude_desktop(
        ("fresh", {"command": sys.executable, "args": [FAULT_SERVER], "env": {"API_KEY": PASTED_SECRET}}),
        ("taken", {"command": sys.executable, "args": [FAULT_SERVER]}),
        ("broken", {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"]}))
    before = svc.file_bytes()
    dry = svc.api("POST", "/api/mcp/import", json={"text": text, "dryRun": True})
    assert dry.status_code == 200, dry.text
    body = dry.json()
    assert body["kind"] == "claude" and body["imported"] == 0 and body["inputs"] == []
    rows = {row["name"]: row for row in body["servers"]}
    assert {name: row["outcome"] for name, row in rows.items()} == {"fresh": "ready", "taken": "skipped", "broken": "ready"}
    assert "stored: env API_KEY" in rows["fresh"]["details"] and rows["fresh"]["transport"] == "stdio"
    assert "exists already" in rows["taken"]["error"]
    assert svc.file_bytes() == before and svc.store.get_credentials("fresh").env == {}  # nothing written
    assert svc.saved.count == 1
    done = svc.api("POST", "/api/mcp/import", json={"text": text, "kind": "claude", "dryRun": False})
    assert done.status_code == 200, done.text
    body = done.json()
    rows = {row["name"]: row for row in body["servers"]}
    assert {name: row["outcome"] for name, row in rows.items()} == {"fresh": "imported", "taken": "skipped", "broken": "refused"}
    assert body["imported"] == 1 and rows["fresh"]["state"]
    assert rows["broken"]["error"].startswith("server 'broken' was not saved, it could not connect")
    assert rows["broken"]["error"].endswith("import it switched off")
    assert svc.store.get_credentials("fresh").env == {"API_KEY": PASTED_SECRET}  # in the store
    with open(svc.extensions, encoding="utf-8") as f:
        saved = f.read()
    assert PASTED_SECRET not in saved and '"broken"' not in saved  # nothing of the refused one kept
    assert PASTED_SECRET not in dry.text + done.text
    svc.saved.wait(2)  # on_saved once for the import
    switched_off = svc.api("POST", "/api/mcp/import", json={"text": claude_desktop(
        ("later", {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"]})), "disabled": True}).json()
    assert switched_off["servers"][0]["outcome"] == "imported"
    assert by_name(svc.api("GET", "/api/mcp").json())["later"]["enabled"] is False


def test_import_refuses_an_unknown_format_and_a_bad_body(svc):
    for body in ({"text": "this is not a configuration"}, {"text": json.dumps({"something": {}})},
                 {"text": "{}", "kind": "notepad"}, {"text": 3}, {"text": "{}", "dryRun": "yes"},
                 {"text": "{}", "colour": "blue"}, {"text": "{}", "inputs": {"a": 1}}):
        answer = svc.api("POST", "/api/mcp/import", json=body)
        assert answer.status_code == 400 and "\n" not in answer.json()["error"], (body, answer.text)
    assert svc.file_bytes() is None


def test_import_asks_for_vscode_inputs_and_refuses_a_blank_one(svc):
    text = json.dumps({"inputs": [{"id": "key", "type": "promptString", "description": "The API key", "password": True}],
                       "servers": {"vs": {"type": "stdio", "command": sys.executable, "args": [FAULT_SERVER],
                                          "env": {"API_KEY": "${input:key}"}}}})
    dry = svc.api("POST", "/api/mcp/import", json={"text": text, "dryRun": True}).json()
    assert dry["kind"] == "vscode"
    assert dry["inputs"] == [{"id": "key", "description": "The API key", "password": True}]
    assert dry["servers"][0]["inputs"] == ["key"]
    blank = svc.api("POST", "/api/mcp/import", json={"text": text}).json()
    assert blank["servers"][0]["outcome"] == "refused" and "input key was left blank" in blank["servers"][0]["error"]
    given = svc.api("POST", "/api/mcp/import", json={"text": text, "inputs": {"key": PASTED_SECRET}})
    assert given.json()["servers"][0]["outcome"] == "imported" and PASTED_SECRET not in given.text
    assert svc.store.get_credentials("vs").env == {"API_KEY": PASTED_SECRET}


# -- the sign-in status's newClient --------------------------------------------------------------------


def test_a_sign_in_the_authorization_server_refused_the_client_of_offers_a_new_client(svc, oauth_server):
    server = oauth_server()
    assert svc.patch({"servers": {"g": {"type": "http", "url": server.url}}}).status_code == 200
    server.refuse_client("redirect", "invalid_client", times=2)  # the registered client, then its replacement
    svc.api("PUT", "/api/auth/logins/mcp:g", json={})
    status = wait_for(lambda: (s := svc.api("GET", "/api/auth/logins/mcp:g").json())["state"] != "pending" and s,
                      "the refused sign-in ending")
    assert status["state"] == "failed" and status["newClient"] is True, status
    again = svc.api("PUT", "/api/auth/logins/mcp:g", json={"newClient": True})
    assert again.status_code == 202
    status = wait_for(lambda: (s := svc.api("GET", "/api/auth/logins/mcp:g").json())["state"] != "pending" and s,
                      "the new client's sign-in ending")
    assert status == {"state": "signed_in", "reason": None}  # no newClient once it worked


# -- refusals, hostile text, secrets ------------------------------------------------------------------


def test_every_new_route_keeps_the_checks(svc):
    assert svc.patch({"servers": {"demo": stdio_entry(enabled=False)}}).status_code == 200
    bodies = {"/api/mcp/doctor": {"server": "demo"}, "/api/mcp/guess": {"target": "https://x.example/mcp"},
              "/api/mcp/import": {"text": "{}", "dryRun": True}}
    for method, path in ROUTES:
        body = bodies.get(path)
        assert svc.api(method, path, token=False, json=body).status_code == 401, path
        assert svc.api(method, path, headers={"Authorization": "Bearer wrong"}, json=body).status_code == 401, path
        wrong_host = svc.api(method, path, headers={"Host": f"evil.example:{svc.port}"}, json=body)
        assert wrong_host.status_code == 403, path
        if method == "POST":
            form = svc.api(method, path, data="server=demo", headers={"Content-Type": "application/x-www-form-urlencoded"})
            assert form.status_code == 415, path
            bad = svc.api(method, path, json=["not", "an", "object"])
            assert bad.status_code == 400 and "\n" not in bad.json()["error"], path
            assert svc.api(method, path, data=b"{", headers={"Content-Type": "application/json"}).status_code == 400
    assert svc.api("GET", "/api/mcp/tools/not%20a%20name").status_code == 400
    assert svc.api("POST", "/api/mcp/doctor", json={"server": "nobody"}).status_code == 404
    assert svc.api("POST", "/api/mcp/doctor", json={"server": "bad name!"}).status_code == 400


def test_a_hostile_servers_text_comes_back_as_plain_json_data(host):
    def prepare(home, store):
        settings = Settings(home, store)
        settings.apply(Change(servers={"hostile": {"type": "stdio", "command": sys.executable,
                                                   "args": [HOSTILE_SERVER, "huge-schema"]}}, enabled={"mcp": True}))

    api = host(prepare)
    answer = api.api("GET", "/api/mcp/tools/hostile")
    assert answer.status_code == 200 and answer.headers["Content-Type"].startswith("application/json")
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    tools = {tool["name"]: tool for tool in answer.json()["tools"]}
    assert {"echo", "huge", "wide"} <= set(tools)
    assert isinstance(tools["huge"]["inputSchema"]["properties"]["path"]["description"], str)
    report = api.api("POST", "/api/mcp/doctor", json={"server": "hostile"})
    assert report.status_code == 200 and report.json()["state"] == "ok"


def test_no_stored_secret_is_in_any_answer(svc):
    http = {"type": "http", "url": "http://127.0.0.1:9/mcp", "enabled": False}
    assert svc.patch({"servers": {"api": http, "tool": stdio_entry(enabled=False)},
                      "secrets": {"api": {"bearerToken": BEARER, "headers": {"X-Key": HEADER}},
                                  "tool": {"env": {"TOOL_TOKEN": ENV_VALUE}}}}).status_code == 200
    svc.api("GET", "/api/mcp")
    svc.api("GET", "/api/mcp/tools/api")
    svc.api("GET", "/api/mcp/tools/tool")
    svc.api("POST", "/api/mcp/doctor", json={"server": "api"})
    svc.api("POST", "/api/mcp/doctor", json={"server": "tool"})
    svc.api("POST", "/api/mcp/guess", json={"target": "https://api.example/mcp"})
    svc.api("POST", "/api/mcp/import", json={"text": claude_desktop(("api", {"url": "https://x.example/mcp"})),
                                             "dryRun": True})
    seen = "\n".join(svc.recorder.seen)
    assert '"credentials": ["bearer token", "header X-Key"]' in seen
    for secret in (BEARER, HEADER, ENV_VALUE):
        assert secret not in seen
    with open(svc.extensions, encoding="utf-8") as f:
        saved = f.read()
    assert all(secret not in saved for secret in (BEARER, HEADER, ENV_VALUE))
