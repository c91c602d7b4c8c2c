"""The settings service's API contract over real HTTP (requests -> waitress on 127.0.0.1):
GET/PATCH /api/mcp (200, 400 writes nothing, 409 restores the file and the credentials
byte for byte), the sign-in routes (202, 200, 204) against the loopback OAuth server,
and concurrent PATCHes from two processes that lose nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from albedo_actors.auth.record import from_credentials
from albedo_actors.settings import Settings
from helpers import OAuthServer

BEARER = "bearer-secret-7c1d"
ENV_VALUE = "env-secret-91af"


def _names(body: dict) -> list[str]:
    return [server["name"] for server in body["servers"]]


def test_get_returns_the_defaults_and_the_servers_as_servers_json_prints_them(svc):
    empty = svc.api("GET", "/api/mcp")
    assert empty.status_code == 200
    assert empty.headers["Content-Type"].startswith("application/json")
    assert empty.json() == {"enabled": {"mcp": False, "editor-mcp": True}, "retryMs": 30000, "daemon": False, "servers": []}
    assert svc.patch({"servers": {"docs": svc.stdio_entry(enabled=False)},
                      "secrets": {"docs": {"env": {"DOCS_TOKEN": ENV_VALUE}}}}).status_code == 200
    body = svc.api("GET", "/api/mcp").json()
    settings = Settings(svc.home, svc.store)
    # Each server as `servers --json` prints it, with its entry, its holds and (no daemon here) no live state.
    assert body["servers"] == [{**view.as_json(), "entry": svc.stdio_entry(enabled=False), "held": 0, "live": None}
                               for view in settings.servers()]
    assert body["servers"][0]["credentials"] == ["env DOCS_TOKEN"]
    assert ENV_VALUE not in json.dumps(body)


def test_patch_saves_connects_returns_the_new_state_and_reloads_once(svc):
    answer = svc.patch({"servers": {"demo": svc.stdio_entry()}, "retryMs": 5000, "enabled": {"mcp": True}})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body == svc.api("GET", "/api/mcp").json()
    assert body["retryMs"] == 5000 and body["enabled"]["mcp"] is True
    (demo,) = body["servers"]
    assert demo["name"] == "demo" and demo["enabled"] and demo["catalogueSaved"] is True  # it connected
    assert svc.saved.count == 1


def test_an_omitted_secret_is_kept_and_null_removes_it(svc):
    entry = {"type": "http", "url": "http://127.0.0.1:9/mcp", "enabled": False}
    assert svc.patch({"servers": {"api": entry}, "secrets": {"api": {
        "bearerToken": BEARER, "header": {"name": "X-Key", "value": "header-secret-3b"}}}}).status_code == 200
    assert svc.store.get_credentials("api").bearer_token == BEARER
    assert svc.patch({"secrets": {"api": {"header": {"name": "X-Other", "value": ""}}}}).status_code == 200  # renamed
    assert svc.store.get_credentials("api").header == ("X-Other", "header-secret-3b")
    assert svc.patch({"secrets": {"api": {"header": None}}}).status_code == 200
    stored = svc.store.get_credentials("api")
    assert stored.bearer_token == BEARER and stored.header is None
    assert svc.patch({"secrets": {"api": {"bearerToken": None}}}).status_code == 200
    assert svc.store.get_credentials("api").bearer_token is None


def test_null_removes_a_server_and_its_credentials(svc):
    assert svc.patch({"servers": {"gone": svc.stdio_entry(enabled=False)},
                      "secrets": {"gone": {"env": {"K": ENV_VALUE}}}}).status_code == 200
    answer = svc.patch({"servers": {"gone": None}})
    assert answer.status_code == 200 and _names(answer.json()) == []
    assert svc.store.get_credentials("gone").env == {}


def test_invalid_input_is_400_and_writes_nothing(svc):
    assert svc.patch({"servers": {"keep": svc.stdio_entry(enabled=False)},
                      "secrets": {"keep": {"env": {"K": ENV_VALUE}}}}).status_code == 200
    before_file, before_creds, saved = svc.file_bytes(), svc.store.get_credentials("keep"), svc.saved.count
    for body in (
        {"servers": {"bad": {"type": "stdio", "command": "x", "colour": "blue"}}},  # unknown key
        {"servers": {"keep": None, "bad name!": svc.stdio_entry()}},
        {"retryMs": -1, "secrets": {"keep": {"env": {"K": None}}}},  # one bad part: no part is written
        {"secrets": {"nobody": {"env": {"K": "v"}}}},
        {"secrets": {"keep": {"bearerToken": "t"}}},  # a bearer token is for HTTP servers
        {"secrets": {"keep": {"oauth": {"access_token": "x"}}}},
        {"colour": "blue"},
        [1, 2],
    ):
        answer = svc.patch(body)
        assert answer.status_code == 400, (body, answer.text)
        assert set(answer.json()) == {"error"} and "\n" not in answer.json()["error"]
    assert svc.api("PATCH", "/api/mcp", data=b"{not json", headers={"Content-Type": "application/json"}).status_code == 400
    assert svc.file_bytes() == before_file
    assert svc.store.get_credentials("keep") == before_creds
    assert svc.saved.count == saved


def test_a_server_that_cannot_connect_is_409_and_everything_is_restored_byte_for_byte(svc):
    assert svc.patch({"servers": {"ok": svc.stdio_entry(enabled=False), "other": svc.stdio_entry(enabled=False)},
                      "secrets": {"ok": {"env": {"K": ENV_VALUE}}, "other": {"env": {"J": "j-secret"}}}}).status_code == 200
    before_file = svc.file_bytes()
    before = {name: svc.store.get_credentials(name) for name in ("ok", "other", "new")}
    saved = svc.saved.count
    # A multi-part PATCH: a removal, a secret change, a new server, the defaults, and a
    # switched-on server that cannot connect. Nothing of it may stay.
    answer = svc.patch({"servers": {"other": None, "new": svc.stdio_entry(enabled=False), "ok": svc.broken_entry()},
                        "secrets": {"ok": {"env": {"K": "changed-secret"}}, "new": {"env": {"N": "n-secret"}}},
                        "enabled": {"mcp": True}, "retryMs": 1234})
    assert answer.status_code == 409, answer.text
    assert "'ok'" in answer.json()["error"] and "\n" not in answer.json()["error"]
    assert svc.file_bytes() == before_file
    assert {name: svc.store.get_credentials(name) for name in before} == before
    assert svc.saved.count == saved


def test_saving_a_server_that_asks_for_oauth_keeps_it_needing_a_sign_in_then_sign_in_and_out(svc):
    oauth = OAuthServer()
    url = oauth.start()
    try:
        answer = svc.patch({"servers": {"secure": {"type": "http", "url": url}}})
        assert answer.status_code == 200, answer.text
        assert answer.json()["servers"][0]["auth"]["state"] == "needs_sign_in"
        login = "/api/auth/logins/mcp:secure"
        assert svc.api("GET", login).json() == {"state": "none", "reason": None}
        started = svc.api("PUT", login, json={})
        assert started.status_code == 202, started.text
        assert started.json()["state"] in ("pending", "signed_in")
        if started.json()["state"] == "pending":
            assert started.json()["authorizationUrl"].startswith(oauth.base)
        svc.saved.wait(2)  # the sign-in's end reloads the sessions too
        status = svc.api("GET", login)
        assert status.status_code == 200 and status.json()["state"] == "signed_in", status.text
        assert svc.api("GET", "/api/mcp").json()["servers"][0]["auth"]["state"] == "signed_in"
        token = from_credentials(svc.store.get_credentials("secure")).access_token
        out = svc.patch({"secrets": {"secure": {"oauth": None}}})  # the sign-out
        assert out.status_code == 200 and out.json()["servers"][0]["auth"]["state"] == "signed_out"
        assert from_credentials(svc.store.get_credentials("secure")).access_token is None
        for response in svc.recorder.seen:
            assert token not in response
    finally:
        oauth.stop()


def test_delete_cancels_a_sign_in_in_flight_and_a_pasted_url_must_be_its_callback(svc_home, svc_store):
    from albedo_actors.service.server import Service

    oauth = OAuthServer()
    url = oauth.start()
    try:
        Settings(svc_home, svc_store)  # the service without an agent: nobody plays the browser
        with Service(svc_home, svc_store, signin_port=0) as service:
            import requests

            headers = {"Authorization": f"Bearer {service.token}"}
            login = service.url + "/api/auth/logins/mcp:secure"
            assert requests.patch(service.url + "/api/mcp", json={"servers": {"secure": {"type": "http", "url": url}}},
                                  headers=headers, timeout=60).status_code == 200
            started = requests.put(login, json={}, headers=headers, timeout=60)
            assert started.status_code == 202 and started.json()["state"] == "pending"
            wrong = requests.post(login + "/callback", json={"url": "http://127.0.0.1:1/callback?code=x&state=nope"},
                                  headers=headers, timeout=60)
            assert wrong.status_code == 400 and "state" in wrong.json()["error"]
            assert requests.get(login, headers=headers, timeout=10).json()["state"] == "pending"
            cancelled = requests.delete(login, headers=headers, timeout=30)
            assert cancelled.status_code == 204 and cancelled.content == b""
            assert requests.get(login, headers=headers, timeout=10).json()["state"] == "cancelled"
            assert requests.put(service.url + "/api/auth/logins/mcp:nobody", json={}, headers=headers,
                                timeout=10).status_code == 400
            # The body: {} or {"newClient": true}; anything else is refused before a sign-in starts.
            for body in ([], {"newClient": "yes"}, {"newClient": True, "other": 1}, {"client": "x"}):
                refused = requests.put(login, json=body, headers=headers, timeout=10)
                assert refused.status_code == 400, (body, refused.text)
                assert refused.json()["error"] == """server 'secure': the sign-in takes {} or {"newClient": true}"""
            assert requests.get(login, headers=headers, timeout=10).json()["state"] == "cancelled"
            fresh = requests.put(login, json={"newClient": True}, headers=headers, timeout=60)
            assert fresh.status_code == 202 and fresh.json()["state"] == "pending", fresh.text
            registered = oauth.stats()["registrations"]
            assert requests.put(login, json={"newClient": True}, headers=headers, timeout=60).status_code == 400  # in flight
            assert oauth.stats()["registrations"] == registered
            assert requests.delete(login, headers=headers, timeout=30).status_code == 204
    finally:
        oauth.stop()


_WRITER = textwrap.dedent("""
    import sys, requests
    url, token, prefix, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    http = requests.Session(); http.trust_env = False
    for i in range(count):
        entry = {"type": "stdio", "command": "/bin/true", "enabled": False}
        answer = http.patch(url + "/api/mcp", json={"servers": {f"{prefix}{i}": entry},
                                                     "secrets": {f"{prefix}{i}": {"env": {"K": f"v{i}"}}}},
                            headers={"Authorization": "Bearer " + token}, timeout=60)
        assert answer.status_code == 200, answer.text
""")


def test_concurrent_patches_from_two_processes_lose_nothing(svc):
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, svc.url, svc.token, prefix, "15"])
               for prefix in ("a", "b")]
    # And a direct writer of the same home at once (the advisory lock serialises it too).
    settings = Settings(svc.home, svc.store)
    settings.set_extension("mcp", True)
    for writer in writers:
        assert writer.wait(timeout=120) == 0
    body = svc.api("GET", "/api/mcp").json()
    assert sorted(_names(body)) == sorted([f"a{i}" for i in range(15)] + [f"b{i}" for i in range(15)])
    assert body["enabled"]["mcp"] is True
    assert all(svc.store.get_credentials(f"{p}{i}").env == {"K": f"v{i}"} for p in "ab" for i in range(15))
    assert svc.saved.count == 30
