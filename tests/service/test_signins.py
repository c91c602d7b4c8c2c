"""SignIns, the sign-in API's engine, against the real loopback OAuth server.

tests/servers/oauth_server.py is the authorization server and the protected MCP server
(auto-approving); an agent built on ``follow_redirect_agent`` plays the browser, or the
test itself fetches the authorization URL and pastes the callback URL it is sent to. The
sign-ins' ends are awaited through ``on_change`` (bounded), never by sleeping.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import urllib.parse
import webbrowser

import pytest
import requests

from albedo_actors.auth.record import from_credentials
from albedo_actors.auth.signin import FORGOTTEN, follow_redirect_agent
from albedo_actors.errors import ConfigError
from albedo_actors.service.signins import SignIns
from albedo_actors.settings import Settings
from helpers import FAULT_SERVER, OAuthServer

WAIT = 30  # seconds: a bound on waits, never an expected duration
NAME = "g"


class Changes:
    """on_change: the names it was called with; ``wait(name)`` blocks (bounded) until one came."""

    def __init__(self, slow: float = 0.0) -> None:
        self.names: list[str] = []
        self._cond = threading.Condition()
        self._slow = slow

    def __call__(self, name: str) -> None:
        if self._slow:
            threading.Event().wait(self._slow)  # a slow hook, not a synchronisation
        with self._cond:
            self.names.append(name)
            self._cond.notify_all()

    def wait(self, name: str, count: int = 1) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.names.count(name) >= count, WAIT), f"no end of {name!r}: {self.names}"


@pytest.fixture
def make(home, store):
    """``make(servers, agent=...)``: extensions.json with ``servers`` and a SignIns over it; closed afterwards."""
    made: list[SignIns] = []

    def build(servers: dict, *, agent=None, lifetime: float = WAIT, slow: float = 0.0,
              port: int = 0) -> tuple[SignIns, Changes]:
        (home / "extensions.json").write_text(json.dumps({"mcp": {"servers": servers}}))
        changes = Changes(slow)
        signins = SignIns(lambda: Settings(str(home), store), changes, agent=agent, port=port, lifetime=lifetime)
        made.append(signins)
        return signins, changes

    yield build
    for signins in made:
        signins.close()


def http_entry(server: OAuthServer, **extra) -> dict:
    return {"type": "http", "url": server.url, **extra}


def record_of(store, name: str = NAME):
    return from_credentials(store.get_credentials(name))


def assert_no_secret(value, store, name: str = NAME) -> None:
    """Nothing SignIns returned carries a token of the stored record."""
    record = record_of(store, name)
    text = json.dumps(value)
    for secret in (record.access_token, record.refresh_token, record.client_secret) if record else ():
        if secret:
            assert secret not in text


def callback_of(authorization_url: str) -> str:
    """What the browser would be sent to: the authorization server's redirect (it approves at once)."""
    reply = requests.get(authorization_url, allow_redirects=False, timeout=WAIT)
    assert reply.status_code in (302, 303), reply.status_code
    return reply.headers["Location"]


# -- signing in ------------------------------------------------------------------------------------


def test_start_returns_the_url_at_once_and_the_callback_listener_signs_in(make, store, oauth_server, caplog):
    caplog.set_level(logging.DEBUG)
    server = oauth_server()
    opened: list[str] = []
    follow = follow_redirect_agent()

    def agent(url, listener):
        opened.append(url)
        follow(url, listener)

    signins, changes = make({NAME: http_entry(server)}, agent=agent)
    assert signins.status(NAME) == {"state": "none", "reason": None}
    started = signins.start(NAME)
    assert started["state"] == "pending" and set(started) == {"state", "authorizationUrl"}
    url = urllib.parse.urlsplit(started["authorizationUrl"])
    query = urllib.parse.parse_qs(url.query)
    assert url.path.endswith("/authorize") and query["code_challenge_method"] == ["S256"] and query["state"]
    changes.wait(NAME)
    assert opened == [started["authorizationUrl"]]
    assert signins.status(NAME) == {"state": "signed_in", "reason": None}
    record = record_of(store)
    assert record.state == "signed_in" and record.access_token and record.refresh_token
    assert server.stats()["token_requests"]["authorization_code"] == 1
    assert changes.names == [NAME]
    assert_no_secret([started, signins.status(NAME), caplog.text], store)
    assert "sign-in to server 'g' ended: signed_in" in caplog.text


def test_a_second_start_while_pending_gives_the_same_sign_in_and_cancel_ends_it(make, store, oauth_server, monkeypatch):
    server = oauth_server()
    # No agent: the service opens no browser (the page does). A browser it asked for would be seen here.
    opened: list[str] = []
    monkeypatch.delenv("ALBEDO_NO_BROWSER", raising=False)
    monkeypatch.setattr(webbrowser, "open", lambda url, *args, **kwargs: opened.append(url) or True)
    signins, changes = make({NAME: http_entry(server)})
    first = signins.start(NAME)
    assert opened == []
    assert signins.start(NAME) == first
    assert signins.status(NAME) == {"state": "pending", "reason": None}
    assert server.stats()["authorize_requests"] == 0  # the service opened no browser, and asked nothing itself
    redirect = urllib.parse.parse_qs(urllib.parse.urlsplit(first["authorizationUrl"]).query)["redirect_uri"][0]
    port = urllib.parse.urlsplit(redirect).port
    signins.cancel(NAME)
    status = signins.status(NAME)
    assert status["state"] == "cancelled" and "\n" not in status["reason"] and "cancelled" in status["reason"]
    assert changes.names == [NAME]
    with pytest.raises(OSError):  # the callback listener is closed
        socket.create_connection(("127.0.0.1", port), timeout=WAIT).close()
    signins.cancel(NAME)  # none in flight: nothing
    again = signins.start(NAME)  # a new sign-in after the cancelled one
    assert again["state"] == "pending" and again["authorizationUrl"] != first["authorizationUrl"]
    assert record_of(store) is None


def test_a_pasted_callback_url_completes_the_sign_in(make, store, oauth_server):
    server = oauth_server()
    signins, changes = make({NAME: http_entry(server)})
    started = signins.start(NAME)
    callback = callback_of(started["authorizationUrl"])
    parts = urllib.parse.urlsplit(callback)
    query = dict(urllib.parse.parse_qsl(parts.query))
    forged = parts._replace(query=urllib.parse.urlencode({**query, "state": "not-the-state"})).geturl()
    with pytest.raises(ConfigError, match=r"server 'g': that URL is not this sign-in's callback"):
        signins.offer(NAME, forged)
    assert signins.status(NAME)["state"] == "pending"  # still waiting
    # Pasted, not delivered: the callback goes to offer(), never to the listener.
    assert signins.offer(NAME, "  " + callback + "\n") == {"state": "signed_in", "reason": None}
    assert changes.names == [NAME]
    assert record_of(store).state == "signed_in" and record_of(store).access_token
    with pytest.raises(ConfigError, match="no sign-in is in progress"):
        signins.offer(NAME, callback)


def test_a_refusal_of_the_authorization_server_fails_in_one_line(make, store, oauth_server):
    server = oauth_server()
    follow = follow_redirect_agent()
    # The "browser" acts once start() has answered: a fast one could otherwise end the
    # sign-in (failed) before start() looks, and start() then rightly says so.
    answered = threading.Event()

    def refusing_agent(url, listener):
        assert answered.wait(30)
        # The user asks for a scope the client was not registered for: the AS redirects an error.
        parts = urllib.parse.urlsplit(url)
        query = dict(urllib.parse.parse_qsl(parts.query))
        follow(parts._replace(query=urllib.parse.urlencode({**query, "scope": "admin-everything"})).geturl(), listener)

    signins, changes = make({NAME: http_entry(server)}, agent=refusing_agent)
    try:
        assert signins.start(NAME)["state"] == "pending"
    finally:
        answered.set()
    changes.wait(NAME)
    status = signins.status(NAME)
    assert status["state"] == "failed", status
    assert status["reason"].startswith("server 'g': sign-in failed: the authorization server refused: ")
    assert "\n" not in status["reason"] and "\r" not in status["reason"]
    assert server.stats()["token_requests"]["authorization_code"] == 0
    assert record_of(store) is None or not record_of(store).access_token


def test_a_server_that_cannot_be_reached_fails_before_any_url(make, store):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    signins, changes = make({NAME: {"type": "http", "url": f"http://127.0.0.1:{port}/mcp"}})
    status = signins.start(NAME)
    assert status["state"] == "failed" and "authorizationUrl" not in status
    assert status["reason"].startswith("server 'g': sign-in failed: ") and "\n" not in status["reason"]
    assert signins.status(NAME) == status and changes.names == [NAME]


def test_a_client_credentials_server_is_signed_in_by_start(make, store, oauth_server, monkeypatch):
    server = oauth_server("--client-credentials", "svc:s3cret-value")
    monkeypatch.setenv("SVC_SIGNINS_SECRET", "s3cret-value")
    oauth = {"grant": "client_credentials", "clientId": "svc", "clientSecretEnvVar": "SVC_SIGNINS_SECRET"}
    signins, changes = make({NAME: http_entry(server, oauth=oauth)})
    status = signins.start(NAME)
    assert status == {"state": "signed_in", "reason": None}
    assert changes.names == [NAME]
    assert record_of(store).client_kind == "client_credentials" and record_of(store).access_token
    assert server.stats()["authorize_requests"] == 0
    assert "s3cret-value" not in json.dumps(status)
    assert_no_secret(status, store)


def test_unknown_and_stdio_servers_are_refused(make, home):
    signins, changes = make({"local": {"type": "stdio", "command": "python3", "args": [FAULT_SERVER]}})
    with pytest.raises(ConfigError, match="stdio server"):
        signins.start("local")
    with pytest.raises(ConfigError, match="nope"):
        signins.start("nope")
    with pytest.raises(ConfigError, match="no sign-in is in progress"):
        signins.offer("nope", "http://127.0.0.1:1/callback?code=x&state=y")
    assert signins.status("local") == {"state": "none", "reason": None} and changes.names == []


def test_close_cancels_every_sign_in_and_leaves_no_thread(make, home, store, oauth_server):
    server = oauth_server()
    # A host whose change hook takes its time (0.5 s): close() still waits for it to return.
    signins, changes = make({NAME: http_entry(server), "h": http_entry(server)}, slow=0.5)
    signins.start(NAME)
    signins.start("h")
    threads = {thread for thread in threading.enumerate() if thread.name.startswith("sign-in-")}
    assert len(threads) == 2
    signins.close()
    assert not any(thread.is_alive() for thread in threads)
    assert signins.status(NAME)["state"] == "cancelled" and signins.status("h")["state"] == "cancelled"
    assert sorted(changes.names) == ["g", "h"]
    with pytest.raises(ConfigError, match="stopping"):
        signins.start(NAME)
    # (the autouse leak fixture also checks that no thread is left behind)


def test_two_starts_at_once_share_one_sign_in(make, store, oauth_server):
    server = oauth_server()
    signins, changes = make({NAME: http_entry(server)})
    results: list[dict] = []
    barrier = threading.Barrier(2, timeout=WAIT)

    def start() -> None:
        barrier.wait()
        results.append(signins.start(NAME))

    threads = [threading.Thread(target=start) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert len(results) == 2 and results[0] == results[1] and results[0]["state"] == "pending"
    assert len([t for t in threading.enumerate() if t.name.startswith("sign-in-")]) == 1


def test_a_sign_in_nobody_completes_fails_when_its_lifetime_ends(make, store, oauth_server):
    server = oauth_server()
    signins, changes = make({NAME: http_entry(server)}, lifetime=0.5)
    assert signins.start(NAME)["state"] == "pending"
    changes.wait(NAME)
    assert signins.status(NAME) == {"state": "failed", "reason": "server 'g': sign-in failed: the sign-in was not completed in time"}


# -- the kept client registration (issue 23, hole 5) -----------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def client_of(authorization_url: str) -> str:
    return urllib.parse.parse_qs(urllib.parse.urlsplit(authorization_url).query)["client_id"][0]


def test_new_client_registers_anew_and_never_joins_a_sign_in_in_flight(make, store, oauth_server):
    server = oauth_server()
    port = free_port()  # one redirect URI: the registration kept for it is reused
    signins, changes = make({NAME: http_entry(server)}, port=port)
    first = signins.start(NAME)
    with pytest.raises(ConfigError, match="a sign-in is already in progress"):
        signins.start(NAME, new_client=True)  # that one chose its client already
    assert server.stats()["registrations"] == 1
    assert signins.offer(NAME, callback_of(first["authorizationUrl"]))["state"] == "signed_in"
    kept = client_of(first["authorizationUrl"])
    fresh = signins.start(NAME, new_client=True)
    assert client_of(fresh["authorizationUrl"]) != kept and server.stats()["registrations"] == 2
    assert signins.offer(NAME, callback_of(fresh["authorizationUrl"]))["state"] == "signed_in"
    assert record_of(store).client_id == client_of(fresh["authorizationUrl"])
    again = signins.start(NAME)  # the new one is kept and reused
    assert client_of(again["authorizationUrl"]) == client_of(fresh["authorizationUrl"])
    signins.cancel(NAME)


def test_a_cancelled_or_run_out_sign_in_with_the_kept_client_says_it_forgot_it(make, store, oauth_server):
    server = oauth_server()
    port = free_port()
    redirect = f"http://127.0.0.1:{port}/callback"
    signins, changes = make({NAME: http_entry(server)}, port=port, lifetime=1.0)
    first = signins.start(NAME)
    assert signins.offer(NAME, callback_of(first["authorizationUrl"]))["state"] == "signed_in"
    assert signins.start(NAME)["state"] == "pending"  # with the kept client; nobody comes back
    signins.cancel(NAME)
    assert signins.status(NAME) == {"state": "cancelled", "reason": f"server 'g': the sign-in was cancelled; {FORGOTTEN}"}
    assert store.get_oauth_client(server.base, redirect) is None
    again = signins.start(NAME)  # a fresh registration, and nobody completes it: kept
    assert client_of(again["authorizationUrl"]) != client_of(first["authorizationUrl"])
    changes.wait(NAME, 3)
    assert signins.status(NAME) == {"state": "failed", "reason": "server 'g': sign-in failed: the sign-in was not completed in time"}
    assert store.get_oauth_client(server.base, redirect)["client_id"] == client_of(again["authorizationUrl"])
    signins.start(NAME)  # the kept one again: this time it runs out
    changes.wait(NAME, 4)
    assert signins.status(NAME)["reason"] == f"server 'g': sign-in failed: the sign-in was not completed in time; {FORGOTTEN}"
    assert store.get_oauth_client(server.base, redirect) is None


def test_a_refused_client_is_replaced_and_the_status_gives_the_new_url(make, store, oauth_server):
    """Issue 25, item 6: the sign-in registers a new client and sends the user again; the
    status says where and why, and a pasted callback's answer is that status."""
    server = oauth_server()
    port = free_port()
    signins, changes = make({NAME: http_entry(server)}, port=port)
    first = signins.start(NAME)
    assert signins.offer(NAME, callback_of(first["authorizationUrl"]))["state"] == "signed_in"
    server.refuse_client("redirect", "unauthorized_client")
    started = signins.start(NAME)
    location = requests.get(started["authorizationUrl"], allow_redirects=False, timeout=WAIT).headers["Location"]
    assert "error=unauthorized_client" in location
    answer = signins.offer(NAME, location)
    again = answer.get("authorizationUrl")
    assert answer == {"state": "pending", "reason": None, "authorizationUrl": again, "notice": (
        "server 'g': the authorization server refused the client albedo registered (unauthorized_client), so albedo "
        "forgot it and registered a new one: sign in once more at the new URL")}
    assert client_of(again) != client_of(first["authorizationUrl"]) and signins.status(NAME) == answer
    assert signins.start(NAME) == {"state": "pending", "authorizationUrl": again}  # joins it, at the new URL
    assert signins.offer(NAME, callback_of(again)) == {"state": "signed_in", "reason": None}
    assert record_of(store).client_id == client_of(again)
    assert_no_secret(answer, store)
