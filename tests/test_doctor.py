"""``albedo-mcp doctor`` and what ``servers`` shows after it, through the real command line.

Every run is a subprocess of ``python -m albedo_actors`` with its own ``--home``; the
servers are real: the bundled demo server, the npm ``server-everything``, the fault
servers of tests/servers (one that exits at start with a stderr of its own, one that
never answers ``initialize``), and tests/servers/oauth_server.py (a loopback OAuth
authorization server in front of an MCP server). No assertion is about time: a hung
server's bound is its ``startupTimeoutMs``, and the run's own timeout only bounds the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import FAULT_SERVER, HERE, read_record

pytest.importorskip("albedo_actors.store")

RUN_TIMEOUT = 120  # seconds; a bound on every command, never an expected duration
PROCESS_SERVER = os.path.join(HERE, "servers", "fault_process_server.py")
INIT_FAULT_SERVER = os.path.join(HERE, "servers", "init_fault_server.py")
PEERS = os.environ.get("ALBEDO_PEERS") or os.path.join(os.path.dirname(HERE), ".peers", "peers", "node_modules")
EVERYTHING = os.path.join(PEERS, "@modelcontextprotocol", "server-everything", "dist", "index.js")
REPORT_KEYS = {"name", "transport", "enabled", "state", "error", "stderr", "era", "protocolVersion", "tools",
               "resources", "prompts", "readyMs", "auth", "catalogue"}


def demo_entry(*extra: str, **more) -> dict:
    return {"command": sys.executable, "args": ["-m", "albedo_actors.demo.server", *extra], **more}


def fault_entry(*flags: str, **more) -> dict:
    return {"command": sys.executable, "args": [FAULT_SERVER, *flags], **more}


def write_config(home, servers: dict) -> None:
    home.mkdir(mode=0o700, exist_ok=True)
    (home / "extensions.json").write_text(json.dumps({"mcp": {"servers": servers}}), encoding="utf-8")


def albedo(home, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "ALBEDO_DATABASE_URL"}
    environ["ALBEDO_NO_BROWSER"] = "1"
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "albedo_actors", "--home", str(home), *argv],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT, env=environ)


def doctor_json(home, *argv: str, code: int, env: dict | None = None) -> dict[str, dict]:
    run = albedo(home, "doctor", "--json", *argv, env=env)
    assert run.returncode == code, f"exit {run.returncode}, stderr: {run.stderr!r}"
    assert "Traceback" not in run.stderr
    reports = json.loads(run.stdout)
    assert isinstance(reports, list)
    return {report["name"]: report for report in reports}


def servers_json(home) -> dict[str, dict]:
    run = albedo(home, "servers", "--json")
    assert run.returncode == 0, run.stderr
    return {view["name"]: view for view in json.loads(run.stdout)}


def discovers(record) -> int:
    """How many times the fault server behind ``--record`` was dialled (opened and discovered)."""
    if not os.path.exists(record):
        return 0
    return sum(1 for message in read_record(record) if message.get("method") in ("server/discover", "initialize"))


# -- the states --------------------------------------------------------------------------------


def test_the_demo_server_is_ok_with_its_era_counts_and_time_to_ready(tmp_path):
    home = tmp_path / "home"
    write_config(home, {"demo": demo_entry()})
    run = albedo(home, "doctor")
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    lines = run.stdout.splitlines()
    assert lines[0].startswith("demo: ok (stdio, modern 2026-07-28, 3 tools, 1 resource, 1 prompt; ready in ")
    assert lines[-1] == "1 server: 1 ok"
    report = doctor_json(home, code=0)["demo"]
    assert set(report) == REPORT_KEYS
    assert (report["state"], report["era"], report["protocolVersion"]) == ("ok", "modern", "2026-07-28")
    assert (report["tools"], report["resources"], report["prompts"]) == (3, 1, 1)
    assert isinstance(report["readyMs"], int) and report["readyMs"] >= 0
    assert report["error"] is None and report["stderr"] == []
    assert report["auth"]["state"] == "none"
    # The first run saved what it discovered; the second found it current.
    assert report["catalogue"] == {"state": "current", "savedAt": report["catalogue"]["savedAt"], "updated": False}


def test_the_npm_server_everything_is_ok(tmp_path):
    if not os.path.isfile(EVERYTHING):
        pytest.fail(f"the npm test peer is not installed: {EVERYTHING} is missing; run scripts/test", pytrace=False)
    home = tmp_path / "home"
    write_config(home, {"everything": {"command": "node", "args": [EVERYTHING, "stdio"]}})
    report = doctor_json(home, code=0)["everything"]
    assert report["state"] == "ok", report
    assert report["tools"] > 5 and report["era"] == "legacy"


def test_a_server_that_exits_at_start_is_down_with_its_stderr_tail_and_no_secret(tmp_path):
    home = tmp_path / "home"
    named, stored_env, stored_header = "named-secret-4471", "stored-env-secret-9932", "stored-header-secret-5518"
    stderr_file = tmp_path / "stderr.txt"
    stderr_file.write_text(f"starting\nkey {named} refused\ntoken {stored_env} and {stored_header} refused\n")
    write_config(home, {"crash": {"command": sys.executable, "args": [PROCESS_SERVER, "--stderr-file", str(stderr_file)],
                                  "env": {"API_KEY": {"env": "DOCTOR_NAMED_SECRET"}}}})
    from albedo_actors.store import Credentials, open_store

    store = open_store(str(home))
    try:
        # A stored header value too (kept from when the server was HTTP): never printed either.
        store.put_credentials("crash", Credentials(env={"TOKEN": stored_env}, header=("X-Key", stored_header)))
    finally:
        store.close()
    env = {"DOCTOR_NAMED_SECRET": named}
    text = albedo(home, "doctor", env=env)
    reports = doctor_json(home, code=3, env=env)
    listed = albedo(home, "servers", "--json")
    report = reports["crash"]
    assert report["state"] == "down"
    assert report["error"] == "server 'crash': cannot start: it exited with status 3"
    assert report["stderr"] == ["starting", "key *** refused", "token *** and *** refused"]
    assert text.returncode == 3, text.stderr
    assert "  stderr: starting | key *** refused | token *** and *** refused" in text.stdout.splitlines()
    for secret in (named, stored_env, stored_header):
        for shown in (text.stdout, text.stderr, json.dumps(reports), listed.stdout, listed.stderr,
                      (home / "extensions.json").read_text()):
            assert secret not in shown


def test_a_server_that_never_answers_initialize_is_down_within_its_startup_timeout(tmp_path):
    home = tmp_path / "home"
    write_config(home, {
        "hung": {"command": sys.executable, "args": [INIT_FAULT_SERVER, "--initialize", "silent", "--probe", "silent"],
                 "startupTimeoutMs": 1000},
        "demo": demo_entry(),
    })
    reports = doctor_json(home, code=3)
    assert reports["hung"]["state"] == "down"
    assert "in time (startupTimeoutMs)" in reports["hung"]["error"]
    assert reports["hung"]["tools"] is None and reports["hung"]["readyMs"] is None
    assert reports["demo"]["state"] == "ok"  # the hung server hides nothing


def test_an_http_server_that_refuses_connections_is_down(tmp_path):
    home = tmp_path / "home"
    write_config(home, {"gone": {"url": "http://127.0.0.1:9/mcp", "startupTimeoutMs": 2000}})
    report = doctor_json(home, code=3)["gone"]
    assert report["state"] == "down" and report["error"].startswith("server 'gone': ")
    assert report["stderr"] == [] and report["auth"]["state"] == "none"


def test_an_http_server_asking_for_oauth_without_a_token_needs_a_sign_in(tmp_path, oauth_server):
    server = oauth_server()
    home = tmp_path / "home"
    write_config(home, {"protected": {"url": server.url}})
    reports = doctor_json(home, code=3)
    report = reports["protected"]
    assert report["state"] == "needs_sign_in", report
    assert "albedo-mcp sign-in protected" in report["error"]
    assert report["auth"]["state"] == "needs_sign_in"
    # A stored needs_sign_in is not dialled again: the same state, from the store.
    assert doctor_json(home, code=3)["protected"]["state"] == "needs_sign_in"
    text = albedo(home, "doctor")
    assert "  auth: needs_sign_in" in "\n".join(text.stdout.splitlines())


def test_a_signed_in_http_server_is_ok_with_its_auth_expiry_and_no_token_shown(tmp_path, oauth_server):
    server = oauth_server("--client-credentials", "svc:svc-secret-3317")
    home = tmp_path / "home"
    write_config(home, {"svc": {"url": server.url, "oauth": {"grant": "client_credentials", "clientId": "svc",
                                                             "clientSecretEnvVar": "SVC_SECRET"}}})
    env = {"SVC_SECRET": "svc-secret-3317"}
    signed = albedo(home, "sign-in", "svc", env=env)
    assert signed.returncode == 0, signed.stderr
    text = albedo(home, "doctor", env=env)
    reports = doctor_json(home, code=0, env=env)
    report = reports["svc"]
    assert report["state"] == "ok" and report["tools"] >= 1, report
    assert report["auth"]["state"] == "signed_in" and report["auth"]["expires_at"] > 0
    assert text.returncode == 0, text.stderr
    assert [line for line in text.stdout.splitlines() if line.startswith("  auth: signed_in; expires ")]
    from albedo_actors.store import open_store

    store = open_store(str(home))
    try:
        token = store.get_credentials("svc").oauth["access_token"]
    finally:
        store.close()
    for shown in (text.stdout, text.stderr, json.dumps(reports), albedo(home, "servers", "--json").stdout):
        assert token not in shown and "svc-secret-3317" not in shown


def test_a_server_naming_an_unset_variable_is_misconfigured_and_hides_no_other(tmp_path):
    home = tmp_path / "home"
    write_config(home, {
        "unset": demo_entry(env={"KEY": {"env": "DOCTOR_SURELY_UNSET"}}),
        "missing": {"command": str(tmp_path / "no-such-program")},
        "demo": demo_entry(),
    })
    reports = doctor_json(home, code=3, env={})
    assert reports["unset"]["state"] == "misconfigured"
    assert reports["unset"]["error"] == ("server 'unset': env KEY names $DOCTOR_SURELY_UNSET, "
                                         "which is not set in the host's environment")
    assert reports["missing"]["state"] == "misconfigured"
    assert "is not an executable file" in reports["missing"]["error"]
    assert reports["demo"]["state"] == "ok"


def test_a_disabled_server_is_off_and_never_dialled(tmp_path):
    home = tmp_path / "home"
    record = tmp_path / "record"
    write_config(home, {"demo": demo_entry(), "resting": fault_entry("--record", str(record), enabled=False)})
    reports = doctor_json(home, code=0)  # every enabled server is ok
    assert reports["resting"]["state"] == "off"
    assert reports["resting"]["enabled"] is False
    assert discovers(record) == 0
    # Asked for by name, an off server is not usable: exit 3.
    assert doctor_json(home, "resting", code=3)["resting"]["state"] == "off"
    assert discovers(record) == 0


def test_exit_codes(tmp_path):
    home = tmp_path / "home"
    write_config(home, {"demo": demo_entry(), "broken": fault_entry("--stderr-and-exit", "3")})
    assert set(doctor_json(home, "demo", code=0)) == {"demo"}  # only the named server is checked
    assert set(doctor_json(home, code=3)) == {"demo", "broken"}
    unknown = albedo(home, "doctor", "nothere")
    assert unknown.returncode == 2
    assert unknown.stdout == "" and len(unknown.stderr.splitlines()) == 1
    assert unknown.stderr.startswith("albedo-mcp: no server named 'nothere'")
    refused = albedo(home, "--no-store", "doctor")
    assert refused.returncode == 2 and refused.stderr == "albedo-mcp: doctor keeps what it finds in the store; leave out --no-store\n"
    write_config(home, {})
    empty = albedo(home, "doctor")
    assert (empty.returncode, empty.stdout) == (0, "")
    assert empty.stderr == "albedo-mcp: no servers yet; add one: albedo-mcp add URL | 'COMMAND LINE'\n"


# -- what doctor keeps -------------------------------------------------------------------------


def test_doctor_saves_the_catalogue_it_discovers_so_tools_does_not_dial(tmp_path):
    home = tmp_path / "home"
    record = tmp_path / "record"
    write_config(home, {"f": fault_entry("--record", str(record))})
    first = doctor_json(home, code=0)["f"]
    assert first["catalogue"]["state"] == "none" and first["catalogue"]["updated"] is True
    dialled = discovers(record)
    assert dialled >= 1
    tools = albedo(home, "tools")
    assert tools.returncode == 0 and "f/echo(text)\t" in tools.stdout, tools.stderr
    assert discovers(record) == dialled  # listed from what doctor saved, and it says so
    assert "server 'f': listed from its catalogue saved less than a minute ago" in tools.stderr
    again = doctor_json(home, code=0)["f"]
    assert again["catalogue"]["state"] == "current" and again["catalogue"]["updated"] is False
    assert discovers(record) > dialled  # doctor dials every time


def test_servers_shows_the_last_state_and_an_outdated_catalogue(tmp_path):
    home = tmp_path / "home"
    write_config(home, {"demo": demo_entry(), "broken": fault_entry("--stderr-and-exit", "3")})
    before = servers_json(home)
    assert before["demo"]["lastSeen"] is None and before["demo"]["catalogue"] == "none"
    assert "not checked yet (albedo-mcp doctor)" in albedo(home, "servers").stdout
    doctor_json(home, code=3)
    seen = servers_json(home)
    assert seen["demo"]["state"] == "catalogue saved" and seen["demo"]["catalogue"] == "current"
    assert seen["demo"]["lastSeen"]["state"] == "ok" and seen["demo"]["lastSeen"]["configurationChanged"] is False
    assert seen["broken"]["state"] == "down"  # not "catalogue saved", not "not discovered yet"
    assert seen["broken"]["lastSeen"]["state"] == "down"
    assert seen["broken"]["lastSeen"]["error"] == "server 'broken': cannot start: it exited with status 3"
    text = {line.split("\t")[0]: line.split("\t") for line in albedo(home, "servers").stdout.splitlines()}
    assert text["broken"][2] == "down" and text["broken"][-1].startswith("seen down ")
    assert text["demo"][-1].startswith("seen ok ") and text["demo"][-1].endswith(" UTC")
    # The configuration changes: the saved catalogue and the state seen were of the old one.
    write_config(home, {"demo": demo_entry("--era", "dual"), "broken": fault_entry("--stderr-and-exit", "4")})
    changed = servers_json(home)
    assert changed["demo"]["state"] == "catalogue outdated" and changed["demo"]["catalogue"] == "outdated"
    assert changed["demo"]["lastSeen"]["configurationChanged"] is True
    assert changed["broken"]["state"] == "not discovered yet"  # its "down" was of the old configuration
    text = {line.split("\t")[0]: line.split("\t") for line in albedo(home, "servers").stdout.splitlines()}
    assert text["demo"][2] == "catalogue outdated"
    assert text["demo"][-1].endswith(", before its configuration changed")


def test_remove_forgets_the_state_seen(tmp_path):
    home = tmp_path / "home"
    write_config(home, {"demo": demo_entry()})
    doctor_json(home, code=0)
    assert albedo(home, "remove", "demo").returncode == 0
    write_config(home, {"demo": demo_entry()})
    assert servers_json(home)["demo"]["lastSeen"] is None
