"""Servers that need an OAuth sign-in, as sessions, the settings API and the admin CLI see them.

Every peer is real: tests/servers/oauth_server.py (authorization server + protected MCP
server, the ``oauth_server`` fixture) and the stdio fault server for the server that
needs no sign-in. The session's probes run on the composer's own mechanism with a fake
clock; nothing sleeps, every wait is bounded.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.parse

import pytest
import requests

from albedo_actors.actors.composer import ProbesSettled, TurnEnded
from albedo_actors.auth import refresh as refresh_module
from albedo_actors.auth import server_auth as server_auth_module
from albedo_actors.auth.signin import follow_redirect_agent
from albedo_actors.config import load
from albedo_actors.errors import NeedsSignIn
from albedo_actors.runtime import Runtime
from albedo_actors.settings import ServerSpec, Settings
from albedo_actors.store import open_store
from helpers import FAULT_SERVER, request, text_of
from kit import Cli, Running

ASK = 10  # seconds: bounds on waits, never expected durations
SETTLE = 60
RETRY_MS = 30_000


class Clock:
    """The composer's clock: only moves when the test moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class ShiftedTime:
    """Stands in for the ``time`` module of albedo_actors.actors.refresher: ``monotonic``
    runs ``offset`` seconds ahead, so a test can age ServerAuth's once-a-second re-read of
    the stored record without sleeping. Everything else is the real ``time``."""

    def __init__(self) -> None:
        self.offset = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.offset

    def __getattr__(self, name: str):
        return getattr(time, name)


def write_config(home, servers: dict) -> None:
    document = {"mcp": {"servers": servers, "retryMs": RETRY_MS}}
    (home / "extensions.json").write_text(json.dumps(document))


def good_entry() -> dict:
    return {"type": "stdio", "command": sys.executable, "args": [FAULT_SERVER]}


def mcp_requests(server) -> int:
    """Every request /mcp answered (each is authorized, 401 or 403)."""
    stats = server.stats()
    return stats["mcp_requests_authorized"] + stats["mcp_requests_unauthorized"] + stats["mcp_requests_forbidden"]


def oauth_of(store, name: str) -> dict:
    return dict(store.get_credentials(name).oauth or {})


def view_of(settings: Settings, name: str):
    views = [view for view in settings.servers() if view.name == name]
    assert len(views) == 1, views
    return views[0]


def sign_in(home, store, name: str):
    """What the user does: sign in through the settings API (the agent plays the browser)."""
    return Settings(str(home), store).begin_sign_in(name, agent=follow_redirect_agent(), port=0, lifetime=10).run()


def left_out_for_sign_in(composition, name: str) -> None:
    assert name not in composition.catalogues and name not in composition.handles
    assert "needs the user to sign in" in composition.left_out[name]
    assert any(f"{name!r}" in w and "needs the user to sign in" in w and "left out" in w for w in composition.warnings), composition.warnings
    lines = [line for line in composition.context_lines() if f"{name!r}" in line]
    assert len(lines) == 1 and "needs the user to sign in" in lines[0] and f"sign-in {name}" in lines[0], composition.context_lines()


# -- 1 and 2: a session with a server that needs a sign-in ---------------------------------------


def test_a_server_not_signed_in_is_left_out_and_the_others_work(home, store, oauth_server):
    server = oauth_server()
    write_config(home, {"good": good_entry(), "g": {"type": "http", "url": server.url}})
    with Runtime(str(home), store, enabled=True, config=load(str(home)), clock=Clock()) as runtime:
        composition = runtime.composition()
        assert set(composition.catalogues) == {"good"}
        left_out_for_sign_in(composition, "g")
        mcp = runtime.mcp()
        assert text_of(mcp.call("good/echo", text="still here").as_dict()) == "still here"
        assert all(tool["server"] == "good" for tool in mcp.tools())  # g advertises nothing
        with pytest.raises(NeedsSignIn, match="needs the user to sign in; tools/call did not run"):
            mcp.call("g/echo", text="x")  # left out for a sign-in: says so (issue 11)
        handle = runtime._registry.proxy().handle("g").get(timeout=ASK)  # its client, as a probe gets it
        assert handle is not None
        with pytest.raises(NeedsSignIn) as raised:
            handle.call_tool("echo", {"text": "x"})
        assert "needs the user to sign in" in str(raised.value) and "did not run" in str(raised.value)
        assert "'g'" in str(raised.value)
    stats = server.stats()
    assert stats["mcp_requests_authorized"] == 0 and stats["mcp_requests_with_token"] == 0
    assert oauth_of(store, "g")["state"] == "needs_sign_in"
    view = view_of(Settings(str(home), store), "g")
    assert view.auth["state"] == "needs_sign_in" and view.state == "needs sign-in"


def _sign_in_mid_session_then_probe(home, store, server, shifted: ShiftedTime | None) -> None:
    write_config(home, {"good": good_entry(), "g": {"type": "http", "url": server.url}})
    clock = Clock()
    with Runtime(str(home), store, enabled=True, config=load(str(home)), clock=clock) as runtime:
        composer = runtime.composer
        first = runtime.composition()
        left_out_for_sign_in(first, "g")
        # Activity before retryMs has passed probes nothing.
        before = mcp_requests(server)
        composer.turn_started().get(timeout=ASK)
        request(composer, ProbesSettled(), SETTLE)
        # Nothing waited for the turn's end but, at most, a reload of the same servers: the
        # session recorded g's needs-sign-in in the store, whose revision the watch hears.
        ended = request(composer, TurnEnded(), SETTLE)
        assert ended is None or (set(ended.catalogues) == {"good"} and "g" in ended.left_out)
        first = runtime.composition()
        assert mcp_requests(server) == before

        record = sign_in(home, store, "g")
        assert record.state == "signed_in" and record.access_token
        if shifted is not None:
            shifted.offset += 2.0  # past ServerAuth's once-a-second re-read of the store

        clock.now += RETRY_MS / 1000  # retryMs later, the next activity probes g
        composer.turn_started().get(timeout=ASK)
        request(composer, ProbesSettled(), SETTLE)
        # The fresh sign-in is still stored, whatever the probe found.
        stored = oauth_of(store, "g")
        assert stored["state"] == "signed_in" and stored.get("access_token") == record.access_token
        assert runtime.composition() is first  # found up mid-turn: the swap waits for the turn's end
        current = request(composer, TurnEnded(), SETTLE)
        assert current is not None, "the probe did not bring g back"
        assert set(current.catalogues) == {"good", "g"} and current.left_out == {}
        assert [line for line in current.context_lines() if "is not available" in line] == []
        assert runtime.composition() is current
        assert composer.take_changes().get(timeout=ASK) is True
        assert composer.take_changes().get(timeout=ASK) is False
        advertised = {(tool["server"], tool["operation"]) for tool in runtime.mcp().tools()}
        assert ("g", "echo") in advertised and ("good", "echo") in advertised
        assert text_of(runtime.mcp().call("g/echo", text="hi").as_dict()) == "hi"
    assert server.stats()["mcp_requests_authorized"] > 0
    assert view_of(Settings(str(home), store), "g").auth["state"] == "signed_in"


def test_after_the_user_signs_in_the_server_joins_on_the_next_probe(home, store, oauth_server, monkeypatch):
    shifted = ShiftedTime()
    monkeypatch.setattr(server_auth_module, "time", shifted)
    monkeypatch.setattr(refresh_module, "time", shifted)
    _sign_in_mid_session_then_probe(home, store, oauth_server(), shifted)


def test_a_probe_right_after_the_sign_in_keeps_the_new_tokens_and_brings_the_server_back(home, store, oauth_server):
    _sign_in_mid_session_then_probe(home, store, oauth_server(), None)


# -- 3: a stored needs_sign_in record is not dialled -----------------------------------------------


def test_a_server_needing_a_sign_in_is_left_out_without_a_dial_even_with_a_saved_catalogue(home, store, oauth_server):
    server = oauth_server()
    write_config(home, {"good": good_entry(), "g": {"type": "http", "url": server.url}})
    sign_in(home, store, "g")
    with Runtime(str(home), store, enabled=True, config=load(str(home))) as runtime:  # dials g: saves its catalogue
        assert set(runtime.composition().catalogues) == {"good", "g"}
    assert store.load_catalogue("g") is not None
    # The tokens die at the authorization server: the next dial's refresh is refused.
    server.expire()
    server.revoke_refresh()
    with Runtime(str(home), store, enabled=True, config=load(str(home))) as runtime:
        assert "g" in runtime.composition().catalogues  # advertised from the saved catalogue
        assert runtime.wait_background(SETTLE)
    assert server.stats()["token_requests"]["refresh_token"] >= 1
    stored = oauth_of(store, "g")
    assert stored["state"] == "needs_sign_in" and "access_token" not in stored
    view = view_of(Settings(str(home), store), "g")
    assert view.catalogue_saved and view.state == "needs sign-in"

    before = mcp_requests(server)
    with Runtime(str(home), store, enabled=True, config=load(str(home))) as runtime:
        composition = runtime.composition()
        assert set(composition.catalogues) == {"good"}
        left_out_for_sign_in(composition, "g")
        assert runtime.wait_background(SETTLE)
    assert mcp_requests(server) == before  # g was not dialled
    assert store.load_catalogue("g") is not None


def test_a_server_whose_sign_in_ends_mid_session_is_left_out_after_the_turn(home, store, oauth_server):
    server = oauth_server()
    write_config(home, {"good": good_entry(), "g": {"type": "http", "url": server.url}})
    sign_in(home, store, "g")
    with Runtime(str(home), store, enabled=True, config=load(str(home))) as runtime:
        composer, mcp = runtime.composer, runtime.mcp()
        assert set(runtime.composition().catalogues) == {"good", "g"}
        assert text_of(mcp.call("g/echo", text="before").as_dict()) == "before"
        server.expire()
        server.revoke_refresh()  # the refresh will be refused: the sign-in is over
        composer.turn_started().get(timeout=ASK)
        with pytest.raises(NeedsSignIn) as raised:
            mcp.call("g/echo", text="after")
        assert "needs the user to sign in" in str(raised.value) and "did not run" in str(raised.value)
        assert runtime.composition().left_out == {}  # mid-turn: nothing changes yet
        current = request(composer, TurnEnded(), SETTLE)
        assert current is not None, "the session was not refreshed after the turn"
        assert set(current.catalogues) == {"good"}
        left_out_for_sign_in(current, "g")
        assert composer.take_changes().get(timeout=ASK) is True
        assert text_of(mcp.call("good/echo", text="still").as_dict()) == "still"


# -- 4: the settings API ---------------------------------------------------------------------------


def test_settings_keep_a_401_server_sign_in_and_out_and_never_show_a_token(home, store, oauth_server):
    server = oauth_server()
    settings = Settings(str(home), store)
    added = settings.add(ServerSpec(name="g", transport="http", url=server.url))
    assert added.state == "needs sign-in" and added.auth["state"] == "needs_sign_in"
    assert added.as_json()["auth"]["state"] == "needs_sign_in" and added.as_json()["state"] == "needs sign-in"
    assert load(str(home)).server("g").url == server.url  # kept in extensions.json
    assert oauth_of(store, "g")["state"] == "needs_sign_in"

    record = sign_in(home, store, "g")
    tokens = [record.access_token, record.refresh_token]
    assert all(tokens), "the sign-in gave no refresh token: the token check below would be weak"
    stored = oauth_of(store, "g")
    assert stored["access_token"] == record.access_token and stored["refresh_token"] == record.refresh_token
    signed_in = view_of(settings, "g")
    assert signed_in.auth["state"] == "signed_in" and signed_in.state not in ("needs sign-in", "signed out")
    assert signed_in.auth["client"]["id"] == stored["client_id"]
    shown = [repr(settings.servers()), repr(signed_in), repr(signed_in.auth), json.dumps([v.as_json() for v in settings.servers()])]

    out = settings.sign_out("g")
    assert out.auth["state"] == "signed_out" and out.state == "signed out"
    stored = oauth_of(store, "g")
    assert stored["state"] == "signed_out"
    assert "access_token" not in stored and "refresh_token" not in stored
    assert stored.get("client_id")  # the client registration stays
    credentials = store.get_credentials("g")
    assert not any(token in repr(credentials.oauth) for token in tokens)
    shown += [repr(settings.servers()), repr(out), json.dumps([v.as_json() for v in settings.servers()])]
    for text in shown:
        for token in tokens:
            assert token not in text
    assert not any(token in (home / "extensions.json").read_text() for token in tokens)


# -- 5: the admin command line ----------------------------------------------------------------------


@pytest.fixture
def cli(home):
    runner = Cli(home)
    yield runner
    runner.stop_all()


def one_line_error(run_code: int, stderr: str, code: int) -> str:
    assert run_code == code, f"exit {run_code}, stderr: {stderr!r}"
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("albedo-mcp: "), stderr
    return lines[0]


def servers_json(cli: Cli) -> dict[str, dict]:
    run = cli.run("servers", "--json")
    assert run.returncode == 0, run.stderr
    return {entry["name"]: entry for entry in json.loads(run.stdout)}


def start_sign_in(cli: Cli, name: str, *extra: str) -> tuple[Running, str]:
    running = cli.start("sign-in", name, "--port", "0", *extra)
    assert running.line(running.proc.stdout) == f"Open this URL to sign in to {name}:"
    url = running.line(running.proc.stdout).strip()
    assert url.startswith("http://127.0.0.1:") and "code_challenge=" in url, url
    return running, url


def approve(url: str) -> str:
    """The browser's part: the auto-approving authorization server redirects to the callback."""
    response = requests.get(url, allow_redirects=False, timeout=ASK)
    assert response.status_code in (302, 303), response.status_code
    location = response.headers["Location"]
    assert "code=" in location and "state=" in location
    return location


def test_cli_add_sign_in_tools_call_sign_out(home, cli, oauth_server):
    server = oauth_server()
    run = cli.run("add", server.url, "--name", "g")
    assert run.returncode == 0, run.stderr
    assert "needs sign-in" in run.stdout and "Traceback" not in run.stderr
    listed = cli.run("servers")
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.startswith("g\t"))
    assert "needs sign-in" in row and "auth: needs_sign_in" in row
    assert servers_json(cli)["g"]["auth"]["state"] == "needs_sign_in"

    running, url = start_sign_in(cli, "g")
    running.write_line(approve(url))
    code, stdout, stderr = running.finish()
    assert code == 0, stderr
    assert "signed in to g" in stdout and "Traceback" not in stderr
    store = open_store(str(home))
    try:
        stored = oauth_of(store, "g")
    finally:
        store.close()
    tokens = [stored["access_token"], stored["refresh_token"]]

    listed = cli.run("servers")
    row = next(line for line in listed.stdout.splitlines() if line.startswith("g\t"))
    assert "auth: signed_in" in row
    entry = servers_json(cli)["g"]
    assert entry["auth"]["state"] == "signed_in" and entry["auth"]["client"]["id"] == stored["client_id"]

    tools = cli.run("tools")
    assert tools.returncode == 0, tools.stderr
    assert any(line.startswith("g/echo(text)\t") for line in tools.stdout.splitlines()), tools.stdout
    call = cli.run("call", "g/echo", "--args", '{"text":"hi"}')
    assert call.returncode == 0, call.stderr
    assert call.stdout.strip() == "hi"

    out = cli.run("sign-out", "g")
    assert out.returncode == 0, out.stderr
    listed = cli.run("servers")
    row = next(line for line in listed.stdout.splitlines() if line.startswith("g\t"))
    assert "signed out" in row and "auth: signed_out" in row
    assert servers_json(cli)["g"]["auth"]["state"] == "signed_out"
    before = mcp_requests(server)
    call = cli.run("call", "g/echo", "--args", '{"text":"hi"}')
    line = one_line_error(call.returncode, call.stderr, 3)
    assert "needs the user to sign in" in line and "'g'" in line
    assert mcp_requests(server) == before  # a signed-out server is not dialled

    for text in cli.outputs:
        for token in tokens:
            assert token not in text


def test_cli_sign_in_complains_about_a_wrong_callback_and_keeps_waiting(home, cli, oauth_server):
    server = oauth_server()
    assert cli.run("add", server.url, "--name", "g").returncode == 0
    running, url = start_sign_in(cli, "g")
    location = approve(url)
    parts = urllib.parse.urlsplit(location)
    query = [(k, "not-the-state" if k == "state" else v) for k, v in urllib.parse.parse_qsl(parts.query)]
    running.write_line(urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query))))
    complaint = running.line(running.proc.stderr)
    assert "not this sign-in's callback" in complaint and "still waiting" in complaint
    assert running.proc.poll() is None  # still waiting
    running.write_line(location)
    code, stdout, stderr = running.finish()
    assert code == 0, stderr
    assert "signed in to g" in stdout
    assert stderr.splitlines() == [complaint] and "Traceback" not in stderr
    store = open_store(str(home))
    try:
        stored = oauth_of(store, "g")
    finally:
        store.close()
    assert stored["state"] == "signed_in"
    assert server.stats()["token_requests"]["authorization_code"] == 1
    for text in cli.outputs:
        assert stored["access_token"] not in text and stored["refresh_token"] not in text


def test_cli_sign_in_to_a_stdio_server_exits_2_with_one_line(cli):
    assert cli.run("add", "--transport", "stdio", f"{sys.executable} {FAULT_SERVER}", "--name", "f").returncode == 0
    run = cli.run("sign-in", "f", "--port", "0")
    line = one_line_error(run.returncode, run.stderr, 2)
    assert "'f'" in line and "stdio" in line


def test_cli_sign_in_times_out_with_one_line(home, cli, oauth_server):
    server = oauth_server()
    assert cli.run("add", server.url, "--name", "g").returncode == 0
    run = cli.run("sign-in", "g", "--port", "0", "--timeout", "1")  # nothing pasted, no browser
    line = one_line_error(run.returncode, run.stderr, 3)
    assert "'g'" in line and "sign-in" in line
    assert "Open this URL to sign in to g:" in run.stdout
    assert server.stats()["token_requests"]["authorization_code"] == 0
    assert servers_json(cli)["g"]["auth"]["state"] == "needs_sign_in"


# -- a client registered by hand, given through the settings -----------------------------------------


def test_a_client_given_through_the_settings_signs_in_without_registering(home, store, oauth_server, cli):
    import socket

    with socket.socket() as probe:  # the redirect URI registered with the client needs a fixed port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = oauth_server("--client", f"handmade:handsecret:http://127.0.0.1:{port}/callback")
    added = cli.run("add", server.url, "--name", "g", "--oauth-client-id", "handmade", "--oauth-client-secret",
                    stdin="handsecret\n")
    assert added.returncode == 0, added.stderr
    assert "handsecret" not in (home / "extensions.json").read_text()
    assert servers_json(cli)["g"]["auth"]["client"] == {"kind": "configured", "id": "handmade", "issuer": None}
    record = Settings(str(home), store).begin_sign_in("g", agent=follow_redirect_agent(), port=port, lifetime=10).run()
    assert (record.client_kind, record.client_id, record.auth_method) == ("configured", "handmade", "client_secret_basic")
    assert server.stats()["registrations"] == 0
    server.expire()  # the refresh authenticates with the stored secret too
    called = cli.run("call", "g/echo", "--args", '{"text": "hi"}')
    assert called.returncode == 0 and called.stdout.strip() == "hi", called.stderr
    assert server.stats()["token_requests"]["refresh_token"] == 1
    shown = cli.run("servers", "--json").stdout + repr(Settings(str(home), store).servers())
    assert "handsecret" not in shown
    forgot = cli.run("edit", "g", "--oauth-client-id", "-")
    assert forgot.returncode == 0, forgot.stderr
    assert oauth_of(store, "g").get("configured_client_id") is None
