"""The OAuth callback listener, over real sockets on 127.0.0.1."""

import errno
import http.client
import socket
import threading
import time
from urllib.parse import urlencode

import pytest

from albedo_actors.auth.callback import DEFAULT_PORT, CallbackListener

STATE = "expected-state-0123456789"


def request(listener, method="GET", path="/callback", query=None, body=None):
    """(status, headers, body) of one request to the listener."""
    target = path + ("?" + urlencode(query) if query is not None else "")
    conn = http.client.HTTPConnection("127.0.0.1", listener.port, timeout=5)
    try:
        conn.request(method, target, body=body)
        response = conn.getresponse()
        return response.status, response.headers, response.read()
    finally:
        conn.close()


def assert_refused(port):
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


@pytest.fixture
def listener():
    with CallbackListener(STATE, port=0, lifetime=30) as it:
        yield it


def test_valid_callback_is_the_result(listener):
    assert listener.redirect_uri == f"http://127.0.0.1:{listener.port}/callback"
    status, headers, body = request(listener, query={"code": "abc", "state": STATE, "iss": "https://as.example"})
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain")
    assert "no-store" in headers["Cache-Control"]
    assert listener.wait(2) == {"code": "abc", "state": STATE, "iss": "https://as.example"}
    assert not listener.cancelled


def test_error_callback_is_a_result(listener):
    request(listener, query={"error": "access_denied", "error_description": "no", "state": STATE})
    assert listener.wait(2) == {"error": "access_denied", "error_description": "no", "state": STATE}


def test_default_port_and_urllib():
    import urllib.request

    with CallbackListener(STATE, lifetime=30) as listener:
        if listener.port == DEFAULT_PORT:
            assert listener.redirect_uri == "http://127.0.0.1:33418/callback"
        url = listener.redirect_uri + "?" + urlencode({"code": "c1", "state": STATE})
        with urllib.request.urlopen(url, timeout=5) as response:
            assert response.status == 200
        assert listener.wait(2)["code"] == "c1"


@pytest.mark.parametrize("query", [{"code": "x"}, {"code": "x", "state": "wrong"}, {"code": "x", "state": ""}])
def test_wrong_or_missing_state_is_ignored(listener, query):
    status, _, body = request(listener, query=query)
    assert status == 400
    assert listener.wait(0.2) is None
    # Still waiting: a valid one afterwards is taken.
    status, _, _ = request(listener, query={"code": "good", "state": STATE})
    assert status == 200
    assert listener.wait(2)["code"] == "good"


def test_duplicate_state_is_ignored(listener):
    conn = http.client.HTTPConnection("127.0.0.1", listener.port, timeout=5)
    try:
        conn.request("GET", f"/callback?code=x&state={STATE}&state=other")
        assert conn.getresponse().status == 400
    finally:
        conn.close()
    assert listener.wait(0.2) is None


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "HEAD", "OPTIONS"])
def test_other_methods_refused(listener, method):
    status, _, _ = request(listener, method=method, query={"code": "x", "state": STATE}, body=b"code=x")
    assert status in (405, 501)
    assert listener.wait(0.1) is None


def test_unknown_method_refused(listener):
    status, _, body = request(listener, method="BREW<script>", query={"code": "x", "state": STATE})
    assert status in (400, 405, 501)
    assert b"script" not in body.lower() and b"BREW" not in body
    assert listener.wait(0.1) is None


@pytest.mark.parametrize("path", ["/", "/callback/", "/other", "/callbackx", "/CALLBACK"])
def test_other_paths_refused(listener, path):
    status, _, _ = request(listener, path=path, query={"code": "x", "state": STATE})
    assert status == 404
    assert listener.wait(0.1) is None


def test_nothing_from_the_request_is_reflected(listener):
    hostile = "<script>alert(1)</script>"
    bodies = [
        request(listener, query={"code": hostile, "state": "bad" + hostile})[2],
        request(listener, path="/x" + "%3Cscript%3E", query={"q": hostile})[2],
        request(listener, method="POST", query={"code": hostile})[2],
        request(listener, query={"code": hostile, "state": STATE, "error_description": hostile})[2],
    ]
    for body in bodies:
        assert b"script" not in body.lower()
        assert b"alert" not in body
        assert b"<" not in body
        assert STATE.encode() not in body
    assert listener.wait(2)["code"] == hostile


def test_malformed_request_line_not_reflected(listener):
    with socket.create_connection(("127.0.0.1", listener.port), timeout=5) as sock:
        sock.sendall(b"GET /callback?<script> HTTP/9<script>\r\n\r\n")
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    # An HTTP/0.9-style answer is just the fixed body.
    assert data.endswith(b"Bad request.\n")
    assert b"script" not in data.lower()


def test_busy_port_falls_back_to_an_ephemeral_one():
    blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # SO_REUSEADDR so a TIME_WAIT left by an earlier test does not stop the
    # bind; a socket listening on the port blocks any other bind on Linux.
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        try:
            blocker.bind(("127.0.0.1", DEFAULT_PORT))
            blocker.listen(1)
        except OSError as exc:  # already busy on this machine: still a busy port
            assert exc.errno == errno.EADDRINUSE
        with CallbackListener(STATE, lifetime=30) as listener:
            assert listener.port != DEFAULT_PORT
            assert listener.fallback
            assert listener.redirect_uri == f"http://127.0.0.1:{listener.port}/callback"
            request(listener, query={"code": "eph", "state": STATE})
            assert listener.wait(2)["code"] == "eph"
    finally:
        blocker.close()


def test_pasted_url_wins_the_race(listener):
    assert not listener.offer(f"http://127.0.0.1:{listener.port}/callback?code=x&state=wrong")
    assert not listener.offer("not a url")
    assert listener.offer(f"http://127.0.0.1:{listener.port}/callback?code=pasted&state={STATE}&iss=https%3A%2F%2Fas")
    assert listener.wait(1) == {"code": "pasted", "state": STATE, "iss": "https://as"}
    # The listener lost the race: it closes and a later valid callback changes nothing.
    assert not listener.offer(f"http://127.0.0.1:{listener.port}/callback?code=late&state={STATE}")
    # offer() winning closed the port before it returned: no poll.
    assert_refused(listener.port)
    assert listener.wait(0)["code"] == "pasted"


def test_listener_wins_then_paste_refused(listener):
    request(listener, query={"code": "browser", "state": STATE})
    assert not listener.offer(f"{listener.redirect_uri}?code=pasted&state={STATE}")
    assert listener.wait(1)["code"] == "browser"


def test_first_valid_callback_wins_under_concurrency(listener):
    results = []

    def paste():
        results.append(listener.offer(f"{listener.redirect_uri}?code=pasted&state={STATE}"))

    thread = threading.Thread(target=paste)
    thread.start()
    try:
        request(listener, query={"code": "browser", "state": STATE})
    except OSError:
        pass  # the paste won and the listener closed first
    thread.join(5)
    code = listener.wait(2)["code"]
    assert code in ("pasted", "browser")
    assert results == [code == "pasted"]


def test_cancel(listener):
    waited = []
    thread = threading.Thread(target=lambda: waited.append(listener.wait(10)))
    thread.start()
    time.sleep(0.1)
    listener.cancel()
    thread.join(5)
    assert waited == [None]
    assert listener.cancelled
    assert not listener.offer(f"{listener.redirect_uri}?code=late&state={STATE}")
    listener.close()
    assert_refused(listener.port)


def test_wait_timeout_is_bounded(listener):
    start = time.monotonic()
    assert listener.wait(0.3) is None
    assert 0.25 <= time.monotonic() - start < 2
    # A wait timing out does not end the sign-in.
    assert listener.offer(f"{listener.redirect_uri}?code=later&state={STATE}")


def test_lifetime_closes_the_listener():
    with CallbackListener(STATE, port=0, lifetime=0.3) as listener:
        start = time.monotonic()
        assert listener.wait() is None
        assert time.monotonic() - start < 3
        assert listener.timed_out
        assert not listener.offer(f"{listener.redirect_uri}?code=late&state={STATE}")
        # wait() returning on the lifetime means the port is already closed: no poll.
        assert_refused(listener.port)


def test_after_close_nothing_listens():
    listener = CallbackListener(STATE, port=0, lifetime=30)
    port = listener.port
    request(listener, path="/nope")
    listener.close()
    listener.close()  # idempotent
    assert_refused(port)
    assert listener.wait(0) is None
    assert not any(t.name.startswith("oauth-callback") and t.is_alive() for t in threading.enumerate())


def test_empty_state_rejected():
    with pytest.raises(ValueError):
        CallbackListener("")
