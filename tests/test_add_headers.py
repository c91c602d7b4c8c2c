"""Issue 25, Deliver 2 and 7: ``add`` guesses the transport, takes several headers and
env entries, and no error line ever shows a secret; the store keeps several headers.

Through the real CLI (subprocesses of ``python -m albedo_actors``) against real servers:
the npm server-everything (stdio, from $ALBEDO_PEERS), the fault HTTP server (it records
every request's headers) and the fault stdio server.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from helpers import FAULT_SERVER
from servers.fault_http_server import FaultHTTPServer

pytest.importorskip("albedo_actors.store")

from albedo_actors.store import Credentials, open_store  # noqa: E402
from albedo_actors.store.sealing import PREFIX  # noqa: E402

RUN_TIMEOUT = 90  # seconds; a bound on every command, never an expected duration
PEERS = os.environ.get("ALBEDO_PEERS") or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                       ".peers", "peers", "node_modules")
EVERYTHING_BIN = os.path.join(PEERS, ".bin", "mcp-server-everything")


def environ(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ALBEDO_DATABASE_URL", "ALBEDO_HOME")}
    env.update(extra)
    return env


def albedo(home, *argv: str, stdin: str = "", env: dict | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "albedo_actors", *argv, "--home", str(home)]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=RUN_TIMEOUT,
                          env=environ(**(env or {})))


def one_line_error(run: subprocess.CompletedProcess, code: int) -> str:
    assert run.returncode == code, f"exit {run.returncode}, stderr: {run.stderr!r}"
    assert "Traceback" not in run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("albedo-mcp: "), run.stderr
    return lines[0]


def fault_line(*flags: str) -> str:
    return shlex.join([sys.executable, FAULT_SERVER, *flags])


def servers_json(home) -> dict[str, dict]:
    run = albedo(home, "servers", "--json")
    assert run.returncode == 0, run.stderr
    return {server["name"]: server for server in json.loads(run.stdout)}


def stored(home, name: str) -> Credentials:
    store = open_store(str(home))
    try:
        return store.get_credentials(name)
    finally:
        store.close()


@pytest.fixture
def http_server():
    server = FaultHTTPServer()
    server.start()
    yield server
    assert server.stop(), "the fault server's threads did not end"


# -- the transport is guessed from TARGET ------------------------------------------------------


def test_add_a_command_line_without_transport_is_a_stdio_server_npm_server_everything(tmp_path):
    if not os.path.isfile(EVERYTHING_BIN):
        pytest.fail(f"the npm test peer is not installed: {EVERYTHING_BIN} is missing; run scripts/test", pytrace=False)
    home = tmp_path / "home"
    run = albedo(home, "add", f"{shlex.quote(EVERYTHING_BIN)} stdio")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "added mcp-server-everything (stdio, catalogue saved)"
    entry = json.loads((home / "extensions.json").read_text())["mcp"]["servers"]["mcp-server-everything"]
    assert entry == {"type": "stdio", "command": EVERYTHING_BIN, "args": ["stdio"]}
    tools = albedo(home, "tools", env={"ALBEDO_NO_BROWSER": "1"})
    assert tools.returncode == 0, tools.stderr
    assert "echo" in tools.stdout


def test_add_an_http_url_is_http_and_transport_still_wins(tmp_path, http_server):
    home = tmp_path / "home"
    run = albedo(home, "add", http_server.url, "--name", "web")
    assert run.returncode == 0, run.stderr
    assert servers_json(home)["web"]["transport"] == "http"
    # --transport wins over the guess: a URL given as a stdio command is refused as a command.
    forced = albedo(home, "add", "--transport", "stdio", "https://example.invalid/mcp", "--name", "forced")
    assert forced.returncode == 3, forced.stderr
    assert "forced" not in servers_json(home)


# -- several headers -------------------------------------------------------------------------


def test_several_headers_are_stored_sent_listed_and_edited_each_by_name(tmp_path, http_server):
    home = tmp_path / "home"
    run = albedo(home, "add", http_server.url, "--name", "web", "--bearer-token", "--header", "X-One",
                 "--header", "X-Two", "--header-env", "X-Three=THREE_VALUE",
                 stdin="tok-1\none-1\ntwo-1\n", env={"THREE_VALUE": "three-1"})
    assert run.returncode == 0, run.stderr
    posts = [r for r in http_server.requests if r.method == "POST"]
    assert posts and all(r.header("Authorization") == "Bearer tok-1" and r.header("X-One") == "one-1"
                         and r.header("X-Two") == "two-1" and r.header("X-Three") == "three-1" for r in posts)
    assert servers_json(home)["web"]["credentials"] == ["bearer token", "header X-One", "header X-Two", "header X-Three"]
    listed = albedo(home, "servers")
    assert "header X-One, header X-Two, header X-Three" in listed.stdout
    assert stored(home, "web").headers == (("X-One", "one-1"), ("X-Two", "two-1"), ("X-Three", "three-1"))
    # edit: keep X-One (blank), remove X-Two ("-"), replace X-Three, add X-Four.
    http_server.clear_records()
    run = albedo(home, "edit", "web", "--header", "x-one", "--header", "X-Two", "--header", "X-Three",
                 "--header", "X-Four", stdin="\n-\nthree-2\nfour-1\n")
    assert run.returncode == 0, run.stderr
    assert stored(home, "web").headers == (("x-one", "one-1"), ("X-Three", "three-2"), ("X-Four", "four-1"))
    posts = [r for r in http_server.requests if r.method == "POST"]
    assert posts and all(r.header("X-One") == "one-1" and r.header("X-Two") is None
                         and r.header("X-Three") == "three-2" and r.header("X-Four") == "four-1" for r in posts)
    # A blank for a header that is not stored (and more than one is): nothing to keep.
    line = one_line_error(albedo(home, "edit", "web", "--header", "X-Five", stdin="\n"), 2)
    assert "X-Five header has no stored value to keep" in line
    assert stored(home, "web").headers == (("x-one", "one-1"), ("X-Three", "three-2"), ("X-Four", "four-1"))


def test_the_curl_form_of_header_is_refused_naming_only_the_name(tmp_path, http_server):
    home = tmp_path / "home"
    secret = "curl-form-secret-5e1d"
    line = one_line_error(albedo(home, "add", http_server.url, "--header", f"X-Api-Key: {secret}"), 2)
    assert secret not in line and "X-Api-Key" in line and "NAME only" in line
    line = one_line_error(albedo(home, "add", http_server.url, "--header", f"Authorization Bearer {secret}"), 2)
    assert secret not in line and "NAME only" in line
    assert not (home / "extensions.json").exists()


def test_repeated_env_and_env_from_reach_a_stdio_server(tmp_path):
    home = tmp_path / "home"
    run = albedo(home, "add", fault_line(), "--name", "files", "-e", "ONE", "--env", "TWO", "--env-from", "THREE=SOURCE",
                 "--env-from", "FOUR=SOURCE", stdin="one-1\ntwo-1\n", env={"SOURCE": "from-env"})
    assert run.returncode == 0, run.stderr
    assert dict(stored(home, "files").env) == {"ONE": "one-1", "TWO": "two-1", "THREE": "from-env", "FOUR": "from-env"}
    assert servers_json(home)["files"]["transport"] == "stdio"


# -- no error line shows a secret ---------------------------------------------------------------


def failing_steps(url: str, dead: str) -> list[tuple[tuple[str, ...], str, int]]:
    """(argv, stdin, exit) of every way add and edit can fail with secrets typed in: each
    secret typed is a distinctive canary ``SECRET-<n>-c0ffee``."""
    s = [f"SECRET-{n}-c0ffee" for n in range(40)]
    return [
        (("add", dead, "--name", "dead", "--bearer-token", "--header", "X-A", "--header", "X-B"), f"{s[0]}\n{s[1]}\n{s[2]}\n", 3),
        (("add", fault_line("--stderr-and-exit", "3"), "--name", "broken", "-e", "K"), f"{s[3]}\n", 3),
        (("add", url, "--name", "web", "--header", "X-A", "--header", "X-B"), f"{s[4]}\n", 2),  # stdin ends early
        (("add", url, "--name", "sealed", "--header", "X-A"), f"{PREFIX}{s[5]}\n", 2),  # looks encrypted
        (("add", url, "--name", "sealed", "--bearer-token"), f"{PREFIX}{s[6]}\n", 2),
        (("add", fault_line(), "--name", "stdio-h", "--header", "X-A"), f"{s[7]}\n", 2),  # a header for stdio
        (("add", url, "--name", "http-e", "-e", "K"), f"{s[8]}\n", 2),  # env for HTTP
        (("add", url, "--name", "bad-env", "-e", "1BAD"), f"{s[9]}\n", 2),
        (("add", url, "--name", "web", "--header", "X-A", "--header", f"X-B: {s[10]}"), f"{s[11]}\n", 2),
        (("add", url, "--name", "web", "--header-env", "X-A=NOT_SET_ANYWHERE"), "", 2),
        (("add", url, "--name", "web", "--oauth-client-id", "cid", "--oauth-client-secret"), f"{PREFIX}{s[12]}\n", 2),
        (("add", "http://127.0.0.1:9/mcp", "--name", "web", "--header", "X-Good"), f"{s[13]}\n", 3),
        (("add", url, "--name", "ok", "--header", "X-Good"), f"{s[14]}\n", 0),
        (("add", url, "--name", "ok", "--header", "X-Good"), f"{s[15]}\n", 2),  # the name is taken
        (("edit", "ok", "--url", dead, "--header", "X-Good", "--bearer-token"), f"{s[16]}\n{s[17]}\n", 3),
        (("edit", "ok", "--header", "X-New", "--header", "X-Other"), "\n\n", 2),  # nothing stored to keep
        (("edit", "ok", "--header", "X-Good"), f"{PREFIX}{s[18]}\n", 2),
        (("edit", "ok", "-e", "K"), f"{s[19]}\n", 2),  # env for HTTP
        (("edit", "nosuch", "--header", "X-Good"), f"{s[20]}\n", 2),
        (("edit", "ok", "--header", "bad header"), f"{s[21]}\n", 2),
        (("edit", "ok", "--header", f"X-Good:{s[22]}"), f"{s[23]}\n", 2),
    ]


def check_no_secret_shown(home, url: str) -> None:
    dead = "http://127.0.0.1:9/mcp"
    for argv, stdin, code in failing_steps(url, dead):
        run = albedo(home, "--verbose", *argv, stdin=stdin, env={"ALBEDO_NO_BROWSER": "1"})
        assert run.returncode == code, f"{argv}: exit {run.returncode}, stderr: {run.stderr[-2000:]}"
        assert "c0ffee" not in run.stdout + run.stderr, f"{argv} showed a secret: {run.stdout + run.stderr}"
        if code:
            assert "Traceback" not in run.stderr
    assert "c0ffee" not in (home / "extensions.json").read_text()
    # The one save that worked holds its secret (so the test is not vacuous), and no other.
    assert stored(home, "ok").headers == (("X-Good", "SECRET-14-c0ffee"),)
    assert set(servers_json(home)) == {"ok"}


def test_no_error_line_of_add_or_edit_shows_a_secret(tmp_path, http_server):
    check_no_secret_shown(tmp_path / "home", http_server.url)


def test_no_error_line_through_the_settings_service_shows_a_secret(tmp_path, http_server):
    from albedo_actors.service.server import Service

    home = tmp_path / "served"
    home.mkdir(mode=0o700)
    saves: list[int] = []
    store = open_store(str(home))
    service = Service(str(home), store, on_saved=lambda: saves.append(1))
    service.start()
    try:
        check_no_secret_shown(home, http_server.url)
        assert saves, "no command went through the service"
    finally:
        service.stop()
        store.close()


# -- the store -------------------------------------------------------------------------------


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
def test_the_store_keeps_several_headers_and_reads_one_header_in_its_old_form(tmp_path, sealed, monkeypatch):
    from albedo_actors.store.models import CredentialRow

    if sealed:
        from albedo_actors.store.sealing import new_key

        monkeypatch.setenv("ALBEDO_STORE_KEY", new_key())
    else:
        monkeypatch.delenv("ALBEDO_STORE_KEY", raising=False)
    store = open_store(str(tmp_path))
    try:
        several = Credentials(headers=(("X-A", "a-1"), ("X-B", "b-1")), bearer_token="t")
        store.put_credentials("many", several)
        store.put_credentials("one", Credentials(header=("X-Key", "k-1")))
        assert store.get_credentials("many") == several
        assert store.get_credentials("one").headers == (("X-Key", "k-1"),)
        rows = {row.server: row for row in CredentialRow.select().execute(store._db)}
        assert rows["one"].header_name == "X-Key"  # one header: the columns as they always were
        assert json.loads(rows["many"].header_name) == ["X-A", "X-B"]
        assert ("a-1" in rows["many"].header_value) is not sealed
    finally:
        store.close()
    # Secrets never show in a repr.
    assert "a-1" not in repr(several) and "X-A" in repr(several)
