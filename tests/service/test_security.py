"""Who may call the settings service: the Host check first (403), the token (401, no
detail), the page's single-use opening links and its expiring sessions (never a cookie),
bodies only as application/json (415), bodies up to 1 MiB (413); and a scan of every
response and log line for the secrets and the token used."""

from __future__ import annotations

import logging
import socket

import pytest
import requests

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


def _open_page(svc) -> str:
    """What the page does with its link: spend the #open= secret for a page session token."""
    link = svc.service.open_url().partition("#open=")[2]
    answer = svc.api("POST", "/api/session", token=False, json={"open": link})
    assert answer.status_code == 201, answer.text
    return answer.json()["token"]


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
    assert svc.api("GET", "/", token=False, headers={"Host": host}).status_code == 403
    link = svc.service.open_url().partition("#open=")[2]
    assert svc.api("POST", "/api/session", token=False, json={"open": link}, headers={"Host": host}).status_code == 403


def test_the_three_loopback_hosts_are_accepted_and_no_host_is_not(svc):
    for host in (f"127.0.0.1:{svc.port}", f"localhost:{svc.port}", f"[::1]:{svc.port}", f"LOCALHOST:{svc.port}"):
        assert svc.api("GET", "/api/mcp", headers={"Host": host}).status_code == 200, host
    no_host = _raw(svc.port, f"GET /api/mcp HTTP/1.0\r\nAuthorization: Bearer {svc.token}\r\n\r\n".encode())
    assert no_host.startswith(b"HTTP/1.0 403") or no_host.startswith(b"HTTP/1.1 403")


def test_an_opening_link_works_once_and_its_session_is_a_bearer_token_no_cookie(svc):
    assert svc.api("GET", "/", token=False).status_code == 200  # the page itself holds no data
    url = svc.service.open_url()
    assert url.startswith(f"{svc.url}/#open=") and svc.token not in url
    link = url.partition("#open=")[2]
    opened = svc.api("POST", "/api/session", token=False, json={"open": link})
    assert opened.status_code == 201 and "Set-Cookie" not in opened.headers
    page_token = opened.json()["token"]
    assert page_token != svc.token and page_token != link and opened.json()["expiresIn"] > 0
    again = svc.api("POST", "/api/session", token=False, json={"open": link})  # single use
    assert again.status_code == 401 and "albedo-mcp open" in again.json()["error"]
    bearer = {"Authorization": f"Bearer {page_token}"}
    assert svc.api("GET", "/api/mcp", token=False, headers=bearer).status_code == 200
    assert svc.api("PATCH", "/api/mcp", token=False, headers=bearer, json={"retryMs": 4000}).status_code == 200
    # A page session mints no links: only the service token does (albedo-mcp open).
    assert svc.api("POST", "/api/links", token=False, headers=bearer, json={}).status_code == 401
    minted = svc.api("POST", "/api/links", json={})
    assert minted.status_code == 201 and minted.json()["url"].startswith(f"{svc.url}/#open=")
    # The page's sign-out ends its session.
    assert svc.api("DELETE", "/api/session", token=False, headers=bearer).status_code == 204
    assert svc.api("GET", "/api/mcp", token=False, headers=bearer).status_code == 401
    for body in ({}, {"open": 1}, {"open": link, "x": 1}, []):
        assert svc.api("POST", "/api/session", token=False, json=body).status_code == 400, body
    assert svc.api("POST", "/api/session", token=False, json={"open": "forged"}).status_code == 401


def test_no_cookie_authorises_anything(svc):
    token = _open_page(svc)
    for cookies in ({"albedo_session": token}, {f"albedo_session_{svc.port}": token}, {"token": svc.token}):
        for headers in ({}, {"Origin": svc.url}, {"Sec-Fetch-Site": "same-origin"}):
            assert svc.api("GET", "/api/mcp", token=False, cookies=cookies, headers=headers).status_code == 401
            assert svc.api("PATCH", "/api/mcp", token=False, cookies=cookies, headers=headers,
                           json={"retryMs": 9000}).status_code == 401
    assert svc.file_bytes() is None


def test_links_and_page_sessions_expire(svc_home, svc_store):
    from albedo_actors.service.server import Service

    with Service(svc_home, svc_store, signin_port=0, link_lifetime=0.0) as service:
        link = service.open_url().partition("#open=")[2]
        answer = requests.post(f"{service.url}/api/session", json={"open": link}, timeout=30)
        assert answer.status_code == 401  # expired at once
    with Service(svc_home, svc_store, signin_port=0, session_lifetime=0.0) as service:
        link = service.open_url().partition("#open=")[2]
        answer = requests.post(f"{service.url}/api/session", json={"open": link}, timeout=30)
        assert answer.status_code == 201
        page = answer.json()["token"]
        assert requests.get(f"{service.url}/api/mcp", headers={"Authorization": f"Bearer {page}"}, timeout=30).status_code == 401


def test_a_page_session_ends_with_its_service(svc_home, svc_store):
    from albedo_actors.service.server import Service

    with Service(svc_home, svc_store, signin_port=0, port=0) as service:
        link = service.open_url().partition("#open=")[2]
        page = requests.post(f"{service.url}/api/session", json={"open": link}, timeout=30).json()["token"]
        port = service.port
    with Service(svc_home, svc_store, signin_port=0, port=port) as service:
        assert requests.get(f"{service.url}/api/mcp", headers={"Authorization": f"Bearer {page}"}, timeout=30).status_code == 401


def test_a_body_that_is_not_json_is_refused_and_writes_nothing(svc):
    page = {"Authorization": f"Bearer {_open_page(svc)}"}
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        body = b'{"retryMs": 4000}'
        by_page = svc.api("PATCH", "/api/mcp", token=False, data=body, headers={**page, "Content-Type": content_type})
        assert by_page.status_code == 415, content_type
        by_token = svc.api("PATCH", "/api/mcp", data=body, headers={"Content-Type": content_type})
        assert by_token.status_code == 415, content_type
        link = svc.service.open_url().partition("#open=")[2]
        opening = svc.api("POST", "/api/session", token=False, data=f'{{"open": "{link}"}}'.encode(),
                          headers={"Content-Type": content_type})
        assert opening.status_code == 415, content_type
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
    page = _open_page(svc)
    svc.api("GET", "/api/mcp", token=False, headers={"Authorization": f"Bearer {page}"})
    svc.api("POST", "/api/session", token=False, json={"open": bearer})
    svc.api("POST", "/api/links", json={})
    svc.api("GET", "/", token=False)
    svc.api("GET", "/static/app.js", token=False)
    svc.api("GET", "/static/../server.py", token=False)
    statuses = {int(seen.split(" ", 1)[0]) for seen in svc.recorder.seen}
    assert {200, 201, 400, 401, 404, 405, 409} <= statuses, statuses
    # The service's own log (the test's HTTP client logs the URLs it asks for itself).
    logged = "\n".join(record.getMessage() for record in caplog.records if not record.name.startswith("urllib3"))
    for text in (*svc.recorder.seen, logged):
        for secret in (*SECRETS, svc.token):
            assert secret not in text
    assert page not in logged  # the page's token is in the one answer that gives it, and nowhere else
    assert sum(page in text for text in svc.recorder.seen) == 1
