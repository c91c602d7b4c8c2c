"""Who may call the settings service: the Host check first (403), the token (401, no
detail), the browser login and its cookie (HttpOnly, SameSite=Strict, not the token),
cookie requests only from the service's own origin (403), changes only as
application/json (415), bodies up to 1 MiB (413); and a scan of every response and
log line for the secrets and the token used."""

from __future__ import annotations

import logging
import socket

import pytest

from albedo_actors.service.app import MAX_BODY

SECRETS = ("bearer-secret-5e2a", "header-secret-0c77", "env-secret-f19d", "client-secret-8a03")


def _raw(port: int, request: bytes) -> bytes:
    """One request sent as bytes (requests always sends the Host it connects to)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def _login(svc):
    answer = svc.api("GET", f"/?token={svc.token}", token=False)
    return answer, answer.cookies


def test_a_missing_or_wrong_token_is_401_with_no_detail(svc):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {svc.token}"},
                    {"Authorization": f"Bearer {svc.token}x"}, {"Authorization": "Bearer"}):
        answer = svc.api("GET", "/api/mcp", token=False, headers=headers)
        assert answer.status_code == 401, headers
        assert answer.json() == {"error": "unauthorized"}
    assert svc.api("PATCH", "/api/mcp", token=False, json={"retryMs": 5}).status_code == 401
    assert svc.file_bytes() is None


@pytest.mark.parametrize("host", ["evil.example:{port}", "127.0.0.1:1", "127.0.0.1", "localhost", "attacker.test",
                                  "127.0.0.1:{port}.evil.example"])
def test_a_foreign_host_is_403_before_anything_else(svc, host):
    host = host.format(port=svc.port)
    with_token = svc.api("GET", "/api/mcp", headers={"Host": host})
    assert with_token.status_code == 403
    assert svc.api("GET", "/api/mcp", token=False, headers={"Host": host}).status_code == 403  # not 401: first
    assert svc.api("GET", f"/?token={svc.token}", token=False, headers={"Host": host}).status_code == 403
    assert "Set-Cookie" not in with_token.headers


def test_the_three_loopback_hosts_are_accepted_and_no_host_is_not(svc):
    for host in (f"127.0.0.1:{svc.port}", f"localhost:{svc.port}", f"[::1]:{svc.port}", f"LOCALHOST:{svc.port}"):
        assert svc.api("GET", "/api/mcp", headers={"Host": host}).status_code == 200, host
    no_host = _raw(svc.port, f"GET /api/mcp HTTP/1.0\r\nAuthorization: Bearer {svc.token}\r\n\r\n".encode())
    assert no_host.startswith(b"HTTP/1.0 403") or no_host.startswith(b"HTTP/1.1 403")


def test_the_token_url_sets_an_httponly_strict_cookie_that_is_not_the_token_and_redirects(svc):
    wrong = svc.api("GET", "/?token=nope", token=False)
    assert wrong.status_code == 401 and "Set-Cookie" not in wrong.headers
    answer, cookies = _login(svc)
    assert answer.status_code == 303 and answer.headers["Location"] == "/"
    cookie = answer.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert svc.token not in cookie and svc.token not in answer.text
    page = svc.api("GET", "/", token=False, cookies=cookies)
    assert page.status_code == 200 and "MCP sign-ins" in page.text
    assert svc.api("GET", "/", token=False).status_code == 401  # no cookie: no page


def test_a_cookie_is_accepted_only_from_the_services_own_origin(svc):
    _, cookies = _login(svc)
    own = f"http://127.0.0.1:{svc.port}"
    ok = svc.api("GET", "/api/mcp", token=False, cookies=cookies, headers={"Sec-Fetch-Site": "same-origin"})
    assert ok.status_code == 200
    assert svc.api("PATCH", "/api/mcp", token=False, cookies=cookies, json={"retryMs": 4000},
                   headers={"Origin": own}).status_code == 200
    before = svc.file_bytes()
    for headers in ({}, {"Origin": "http://evil.example"}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"},
                    {"Sec-Fetch-Site": "same-site"}, {"Origin": own, "Sec-Fetch-Site": "cross-site"},
                    {"Origin": f"http://localhost:{svc.port}"}):
        answer = svc.api("PATCH", "/api/mcp", token=False, cookies=cookies, json={"retryMs": 9000}, headers=headers)
        assert answer.status_code == 403, headers
        assert svc.api("GET", "/api/mcp", token=False, cookies=cookies, headers=headers).status_code == 403, headers
    assert svc.file_bytes() == before
    other = {name: "forged" for name in cookies.keys()}
    assert svc.api("GET", "/api/mcp", token=False, cookies=other, headers={"Origin": own}).status_code == 401


def test_a_state_change_that_is_not_json_is_refused_and_writes_nothing(svc):
    _, cookies = _login(svc)
    own = {"Origin": f"http://127.0.0.1:{svc.port}"}
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        body = b'{"retryMs": 4000}'
        by_cookie = svc.api("PATCH", "/api/mcp", token=False, cookies=cookies, data=body,
                            headers={**own, "Content-Type": content_type})
        assert by_cookie.status_code == 415, content_type
        by_token = svc.api("PATCH", "/api/mcp", data=body, headers={"Content-Type": content_type})
        assert by_token.status_code == 415, content_type
    # A cookie's state change needs the JSON content type even without a body.
    assert svc.api("DELETE", "/api/auth/logins/mcp:x", token=False, cookies=cookies, headers=own).status_code == 415
    assert svc.file_bytes() is None


def test_a_body_over_one_mebibyte_is_413_with_or_without_a_length(svc):
    big = b'{"retryMs": 5000, "pad": "' + b"x" * MAX_BODY + b'"}'
    answer = svc.api("PATCH", "/api/mcp", data=big, headers={"Content-Type": "application/json"})
    assert answer.status_code == 413 and "error" in answer.json()
    chunked = svc.api("PATCH", "/api/mcp", data=iter([big[:1000], big[1000:]]), headers={"Content-Type": "application/json"})
    assert chunked.status_code == 413
    assert svc.file_bytes() is None
    fits = b'{"retryMs": 5000}' + b" " * (MAX_BODY - 17)
    assert svc.api("PATCH", "/api/mcp", data=fits, headers={"Content-Type": "application/json"}).status_code == 200


def test_no_response_or_log_line_carries_a_secret_or_the_token(svc, caplog):
    caplog.set_level(logging.DEBUG)
    http_entry = {"type": "http", "url": "http://127.0.0.1:9/mcp", "enabled": False}
    bearer, header, env, client = SECRETS
    svc.patch({"servers": {"api": http_entry, "tool": svc.stdio_entry(enabled=False)},
               "secrets": {"api": {"bearerToken": bearer, "header": {"name": "X-Key", "value": header},
                                   "oauth_client": {"clientId": "cid", "clientSecret": client}},
                           "tool": {"env": {"K": env}}}})
    # Every kind of answer, with the secrets in the requests that got them.
    svc.api("GET", "/api/mcp")
    svc.patch({"servers": {"api": {**http_entry, "enabled": True}}, "secrets": {"api": {"bearerToken": bearer}}})  # 409
    svc.patch({"secrets": {"api": {"bearerToken": bearer + "\n"}}})  # 400: a line break
    svc.patch({"secrets": {"tool": {"bearerToken": bearer}}})  # 400: not for stdio
    svc.patch({"secrets": {"api": {"env": {"K": env}}}})  # 400
    svc.patch({"servers": {"api": {**http_entry, "headers": {"X": header}}}})  # 400: a value where a name belongs
    svc.api("POST", "/api/auth/logins/mcp:api/callback", json={"url": f"http://127.0.0.1:1/cb?code={bearer}"})
    svc.api("PUT", "/api/auth/logins/mcp:tool", json={})
    svc.api("GET", "/api/mcp", token=False, headers={"Authorization": f"Bearer {bearer}"})
    svc.api("GET", "/nowhere")
    svc.api("DELETE", "/api/mcp")
    svc.api("GET", f"/?token={svc.token}", token=False)
    svc.api("GET", f"/?token={bearer}", token=False)
    _, cookies = _login(svc)
    svc.api("GET", "/", token=False, cookies=cookies)
    svc.api("GET", "/static/app.js", token=False)
    svc.api("GET", "/static/../server.py", token=False)
    statuses = {int(seen.split(" ", 1)[0]) for seen in svc.recorder.seen}
    assert {200, 303, 400, 401, 404, 405, 409} <= statuses, statuses
    # The service's own log (the test's HTTP client logs the URLs it asks for itself).
    logged = "\n".join(record.getMessage() for record in caplog.records if not record.name.startswith("urllib3"))
    for text in (*svc.recorder.seen, logged):
        for secret in (*SECRETS, svc.token):
            assert secret not in text
