"""The HTTP fast path: urllib3's pool driven directly, one send a request, and a JSON
exchange on the caller's thread, bounded by the caller's deadline.

Against the fault-injecting server (tests/servers/fault_http_server.py) and, for what
no MCP server does on purpose (a body dripped a byte at a time, repeated header
fields), a raw loopback socket server written here.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time

import pytest

from albedo_actors.config import ServerConfig
from albedo_actors.transport import http as transport_http
from albedo_actors.transport.http import Exchange, HttpFailed, HttpTransport
from albedo_actors.wire.deadline import Deadline
from helpers import text_of

WAIT = 10.0


def http_config(server, **overrides) -> ServerConfig:
    return ServerConfig(name="f", type="http", url=server.url, **overrides)


def workers(name: str = "f") -> list[threading.Thread]:
    """The HTTP link's worker threads (its pool names them mcp-http-<server>_<n>)."""
    return [t for t in threading.enumerate() if t.name.startswith(f"mcp-http-{name}_")]


class RawServer:
    """One loopback listener. Each connection is served on its own thread: after each
    request, ``script(conn, stop)`` answers; it returns True to keep the connection for
    another request. ``connections`` counts those accepted; ``closed`` is set whenever
    the server has closed one."""

    def __init__(self, script) -> None:
        self._script = script
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}/mcp"
        self._threads: list[threading.Thread] = []
        self.connections = 0
        self.closed = threading.Event()
        self._accepter = threading.Thread(target=self._accept, name="raw-http-accept", daemon=True)
        self._accepter.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            self.connections += 1
            thread = threading.Thread(target=self._serve, args=(conn,), name="raw-http-conn", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(WAIT)
        with conn:
            while read_request(conn) and self._script(conn, self._stop):
                pass
        self.closed.set()

    def close(self) -> None:
        self._stop.set()
        self._accepter.join(WAIT)
        for thread in self._threads:
            thread.join(WAIT)
        self._listener.close()
        assert not self._accepter.is_alive() and not any(t.is_alive() for t in self._threads)


def read_request(conn: socket.socket) -> bytes:
    """Read one request (head and Content-Length body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += conn.recv(65536)
    return data


@pytest.fixture
def raw_server():
    started = []

    def start(script) -> RawServer:
        server = RawServer(script)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


# -- the caller's thread ---------------------------------------------------------------------


def test_a_json_answer_is_read_on_the_callers_thread_and_no_worker_is_started(http_fault, clients):
    server = http_fault()
    handle = clients.start(http_config(server))
    assert handle.connect().era == "modern"
    for text in ("one", "two", "three"):
        assert text_of(handle.call_tool("echo", {"text": text})) == text
    assert workers() == [], "a JSON exchange was handed to a worker thread"


def test_an_sse_answer_is_read_by_a_worker_and_the_call_succeeds(http_fault, clients):
    server = http_fault(sse=True)
    handle = clients.start(http_config(server))
    handle.connect()
    assert text_of(handle.call_tool("echo", {"text": "streamed"})) == "streamed"
    assert workers(), "an SSE answer was read without a worker"


def test_a_legacy_session_over_json_works_on_the_callers_thread(http_fault, clients):
    server = http_fault(era="legacy")
    handle = clients.start(http_config(server))
    assert handle.connect().era == "legacy"
    assert handle.read_resource("demo://readme")["contents"]
    assert workers() == []
    # A tools/call of a session with a listening stream is read by a worker: its progress
    # may come on that stream, and the deadline it moves must bound the read (issue 16).
    assert text_of(handle.call_tool("echo", {"text": "old"})) == "old"
    assert workers()


def test_a_legacy_session_without_a_listening_stream_calls_tools_on_the_callers_thread(http_fault, clients):
    server = http_fault(era="legacy", no_get=True)
    handle = clients.start(http_config(server))
    assert handle.connect().era == "legacy"
    for thread in [t for t in threading.enumerate() if t.name == "mcp-listen-f"]:
        thread.join(WAIT)  # the GET was refused: the listening thread ends
    assert text_of(handle.call_tool("echo", {"text": "old"})) == "old"
    assert workers() == []


# -- the deadline bounds the whole exchange ----------------------------------------------------


def _drip(conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
    for _ in range(200):  # a byte every 50 ms: each read succeeds, the whole takes 10 s
        if stop.wait(0.05):
            return
        try:
            conn.sendall(b" ")
        except OSError:
            return  # the client gave up: what the test wants


def test_a_body_dripped_a_byte_at_a_time_ends_at_the_exchanges_deadline(raw_server):
    server = raw_server(_drip)
    transport = HttpTransport(server.url)
    outcome: list[BaseException] = []

    def exchange() -> None:
        reply = transport.send("POST", {"Content-Type": "application/json"}, Exchange(Deadline.after(0.5)), body=b"{}")
        try:
            reply.body()
        except HttpFailed as exc:
            outcome.append(exc)

    thread = threading.Thread(target=exchange, name="test-drip")
    thread.start()
    thread.join(WAIT)
    transport.close()
    assert not thread.is_alive(), "the dripped body was read past the deadline"
    [failed] = outcome
    assert failed.timed_out and failed.sent
    assert str(failed) == "no answer in time"


def test_an_exchange_past_its_deadline_is_not_sent(raw_server):
    server = raw_server(lambda conn, stop: None)
    transport = HttpTransport(server.url)
    with pytest.raises(HttpFailed) as caught:
        transport.send("POST", {}, Exchange(Deadline(time.monotonic() - 1, 1.0)), body=b"{}")
    transport.close()
    assert caught.value.timed_out and not caught.value.sent


# -- the wire ------------------------------------------------------------------------------------


def _answer(conn: socket.socket, stop: threading.Event) -> None:
    body = b'{"ok": true}'
    conn.sendall(b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"a\"\r\n"
                 b"WWW-Authenticate: DPoP algs=\"ES256\"\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


def test_repeated_header_fields_arrive_as_one_comma_joined_value(raw_server):
    server = raw_server(_answer)
    transport = HttpTransport(server.url)
    reply = transport.send("POST", {}, Exchange(), body=b"{}")
    assert reply.status == 401
    assert reply.headers["www-authenticate"] == 'Bearer realm="a", DPoP algs="ES256"'
    assert reply.json() == {"ok": True}
    transport.close()


@pytest.mark.parametrize("body", [b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}', b""])
def test_a_request_goes_out_in_one_send(http_fault, monkeypatch, body):
    # http.client alone writes the head, then the body: two segments.
    sends: list[bytes] = []
    original = http.client.HTTPConnection.send

    def counting(self, data):
        sends.append(bytes(data))
        return original(self, data)

    monkeypatch.setattr(http.client.HTTPConnection, "send", counting)
    server = http_fault()
    transport = HttpTransport(server.url)
    reply = transport.send("POST", {"Content-Type": "application/json"}, Exchange(), body=body)
    reply.close()
    transport.close()
    [sent] = sends
    assert sent.startswith(b"POST /mcp HTTP/1.1\r\n") and sent.endswith(b"\r\n\r\n" + body)
    assert b"\r\nUser-Agent: " + transport_http.USER_AGENT.encode() + b"\r\n" in sent


def _keep_alive(conn: socket.socket, stop: threading.Event) -> bool:
    body = b'{"jsonrpc": "2.0", "id": 1, "result": {}}'
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    return True


def _once(conn: socket.socket, stop: threading.Event) -> bool:
    _keep_alive(conn, stop)
    return False  # then close the connection, as a server's idle timeout would


def test_a_connection_is_kept_alive_and_reused_for_the_next_request(raw_server):
    server = raw_server(_keep_alive)
    transport = HttpTransport(server.url)
    for _ in range(5):
        assert transport.send("POST", {}, Exchange(), body=b"{}").json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
    transport.close()
    assert server.connections == 1


def test_an_idle_connection_the_server_closed_is_replaced_and_the_request_is_not_lost(raw_server):
    server = raw_server(_once)
    transport = HttpTransport(server.url)
    assert transport.send("POST", {}, Exchange(), body=b"{}").json()["result"] == {}
    assert server.closed.wait(WAIT)
    assert transport.send("POST", {}, Exchange(), body=b"{}").json()["result"] == {}
    transport.close()
    assert server.connections == 2


def _notification_only(conn: socket.socket, stop: threading.Event) -> bool:
    body = b'{"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "hi"}}'
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    return True


def test_a_json_answer_without_the_response_fails_the_call_on_the_callers_thread(raw_server):
    from albedo_actors.connection.channel import RpcChannel
    from albedo_actors.connection.http.link import HttpLink
    from albedo_actors.errors import ProtocolViolation

    server = raw_server(_notification_only)
    heard: list[str] = []
    channel = RpcChannel("raw", on_notification=lambda method, params: heard.append(method), on_closed=lambda reason: None)
    link = HttpLink(channel, HttpTransport(server.url), "raw", {})
    channel.attach(link)
    try:
        with pytest.raises(ProtocolViolation, match="answered tools/call without its response"):
            channel.request("tools/call", {"name": "echo"}, timeout=WAIT)
        assert heard == ["notifications/message"]
    finally:
        link.close("done")
        assert link.wait_closed(WAIT)
