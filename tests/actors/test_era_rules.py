"""Two era rules through the real client (ServerHandle) against real servers: the stdio
fault server as a subprocess, the HTTP fault server on 127.0.0.1.

1. The versions ``initialize`` may answer (2025-11-25 basic/lifecycle "Version
   Negotiation"; the reference: albedo "accepts 2025-11-25, 2025-06-18, 2025-03-26, or
   2024-11-05 back"): an older revision is taken and used; one we do not speak is refused
   (a client that does not support the returned version disconnects).
2. Over HTTP, what a ``server/discover`` refused with 400 and a JSON-RPC error means
   (2026-07-28 basic/transports/streamable-http "Backward Compatibility"; the reference:
   "any non-2xx status without a modern error in its body, or a JSON-RPC error that is
   not one of -32020/-32021/-32022" means an older server). -32022 decides by its
   ``supported`` list; -32020 and -32021 prove a modern server, so there is no
   ``initialize`` fallback: the opening fails, saying why.
"""

from __future__ import annotations

import pytest

from albedo_actors.config import ServerConfig
from albedo_actors.errors import Incompatible, Unavailable
from helpers import fault_config, read_record, text_of

OLDER_VERSIONS = ["2025-06-18", "2025-03-26", "2024-11-05"]
UNKNOWN_VERSION = "1999-01-01"


def http_config(server) -> ServerConfig:
    return ServerConfig(name="f", type="http", url=server.url)


def posted(server, method: str) -> list:
    """The recorded POSTs carrying a JSON-RPC ``method``."""
    return [r for r in server.requests if r.method == "POST" and r.body and r.json().get("method") == method]


def assert_one_line_naming_the_server(exc: BaseException) -> str:
    message = str(exc)
    assert message.startswith("server 'f': ") and "\n" not in message, message
    return message


# -- 1. the version initialize answers with ----------------------------------------------------


@pytest.mark.parametrize("version", OLDER_VERSIONS)
def test_an_older_revision_answered_to_initialize_over_stdio_is_used(clients, tmp_path, version):
    record = tmp_path / "record"
    handle = clients.start(fault_config("f", "--era", "legacy", "--probe", "error", "--initialize-version", version,
                                        "--record", str(record)))
    catalogue = handle.connect()
    assert (catalogue.era, catalogue.protocol_version) == ("legacy", version)
    assert text_of(handle.call_tool("echo", {"text": f"at {version}"})) == f"at {version}"
    methods = [m.get("method") for m in read_record(record)]
    assert methods[:3] == ["server/discover", "initialize", "notifications/initialized"]
    assert "tools/call" in methods


@pytest.mark.parametrize("version", OLDER_VERSIONS)
def test_an_older_revision_answered_to_initialize_over_http_is_used(clients, http_fault, version):
    server = http_fault(era="legacy", initialize_version=version)
    handle = clients.start(http_config(server))
    catalogue = handle.connect()
    assert (catalogue.era, catalogue.protocol_version) == ("legacy", version)
    assert text_of(handle.call_tool("echo", {"text": f"at {version}"})) == f"at {version}"
    assert [event["version"] for event in server.events if event["event"] == "session_created"] == [version]
    (call,) = posted(server, "tools/call")
    # 2025-06-18 basic/transports: the negotiated version on every later request (we send
    # it to older sessions too, where it is allowed).
    assert call.header("MCP-Protocol-Version") == version


def test_an_unknown_revision_answered_to_initialize_over_stdio_is_refused(clients, tmp_path):
    record = tmp_path / "record"
    handle = clients.start(fault_config("f", "--era", "legacy", "--probe", "error", "--initialize-version", UNKNOWN_VERSION,
                                        "--record", str(record)))
    with pytest.raises(Incompatible) as info:
        handle.connect()
    message = assert_one_line_naming_the_server(info.value)
    assert f"it answered initialize with protocol version {UNKNOWN_VERSION!r}; this client speaks 2025-11-25" in message
    methods = [m.get("method") for m in read_record(record)]
    assert "initialize" in methods
    assert "notifications/initialized" not in methods and "tools/list" not in methods


def test_an_unknown_revision_answered_to_initialize_over_http_is_refused(clients, http_fault):
    server = http_fault(era="legacy", initialize_version=UNKNOWN_VERSION)
    handle = clients.start(http_config(server))
    with pytest.raises(Incompatible) as info:
        handle.connect()
    message = assert_one_line_naming_the_server(info.value)
    assert f"it answered initialize with protocol version {UNKNOWN_VERSION!r}; this client speaks 2025-11-25" in message
    assert len(posted(server, "initialize")) >= 1
    assert posted(server, "notifications/initialized") == [] and posted(server, "tools/list") == []


# -- 2. modern errors in a non-2xx answer to the server/discover probe (HTTP) ----------------------


def unsupported(*supported: str) -> dict:
    return {"code": -32022, "message": "Unsupported protocol version",
            "data": {"supported": list(supported), "requested": "2026-07-28"}}


def test_a_32022_in_a_400_naming_the_modern_revision_keeps_the_server_modern(clients, http_fault):
    # 2026-07-28 basic/versioning: resend with a version it lists (ours); no initialize.
    server = http_fault(era="dual", discover_error=unsupported("2026-07-28", "2025-11-25"), discover_error_times=1)
    handle = clients.start(http_config(server))
    catalogue = handle.connect()
    assert (catalogue.era, catalogue.protocol_version) == ("modern", "2026-07-28")
    assert text_of(handle.call_tool("echo", {"text": "modern"})) == "modern"
    assert len(posted(server, "server/discover")) == 2
    assert posted(server, "initialize") == []


def test_a_32022_in_a_400_naming_only_a_handshake_revision_gets_initialize(clients, http_fault):
    server = http_fault(era="dual", discover_error=unsupported("2025-11-25"))
    handle = clients.start(http_config(server))
    catalogue = handle.connect()
    assert (catalogue.era, catalogue.protocol_version) == ("legacy", "2025-11-25")
    assert text_of(handle.call_tool("echo", {"text": "legacy"})) == "legacy"
    assert len(posted(server, "server/discover")) == 1
    assert len(posted(server, "initialize")) == 1


def test_a_32022_in_a_400_naming_no_revision_we_speak_is_refused(clients, http_fault):
    server = http_fault(era="dual", discover_error=unsupported("2099-01-01", "2024-01-01"))
    handle = clients.start(http_config(server))
    with pytest.raises(Incompatible) as info:
        handle.connect()
    message = assert_one_line_naming_the_server(info.value)
    assert "it supports protocol versions 2099-01-01, 2024-01-01; this client speaks 2026-07-28" in message
    assert posted(server, "initialize") == []


@pytest.mark.parametrize(
    "error",
    [
        {"code": -32020, "message": "Mcp-Method header 'x' does not match method 'server/discover'"},
        {"code": -32021, "message": "Elicitation capability required",
         "data": {"requiredCapabilities": {"elicitation": {}}}},
    ],
    ids=["-32020", "-32021"],
)
def test_a_header_or_capability_error_in_a_400_is_a_modern_refusal_not_an_older_server(clients, http_fault, error):
    # 2026-07-28 basic/transports/streamable-http: a recognised modern error in a 400's
    # body means the server is modern; falling back to initialize would be wrong.
    server = http_fault(era="dual", discover_error=error)
    handle = clients.start(http_config(server))
    with pytest.raises(Unavailable) as info:
        handle.connect()
    assert not isinstance(info.value, Incompatible)
    message = assert_one_line_naming_the_server(info.value)
    assert message.startswith("server 'f': refused server/discover: "), message
    assert error["message"] in message
    assert posted(server, "initialize") == []


def test_a_non_modern_error_in_a_400_means_an_older_server(clients, http_fault):
    # The other side of the rule, for contrast: -32600 in a 400 is not a modern error.
    server = http_fault(era="dual", discover_error={"code": -32600, "message": "Bad Request: no session"})
    handle = clients.start(http_config(server))
    assert handle.connect().era == "legacy"
    assert len(posted(server, "initialize")) == 1
