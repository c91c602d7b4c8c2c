"""TLS: verified against the configured trust store, and only that."""

import ssl
import subprocess

import pytest

from albedo_actors.config import ServerConfig
from albedo_actors.errors import Unavailable
from servers.fault_http_server import FaultHTTPServer


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1, made with openssl."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key


@pytest.fixture
def https_server(certificate):
    cert, key = certificate
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    server = FaultHTTPServer()
    server.tls_context = context
    url = server.start()
    try:
        yield server, url
    finally:
        server.stop()


def test_a_certificate_outside_the_trust_store_is_refused(clients, https_server):
    server, url = https_server
    assert url.startswith("https://")
    handle = clients.start(ServerConfig(name="tls", type="http", url=url, startup_timeout_ms=5000))
    with pytest.raises(Unavailable, match="server 'tls': .*TLS certificate that is not trusted"):
        handle.connect()
    assert server.requests == []  # nothing was sent over an unverified connection


def test_the_configured_trust_store_is_used(clients, https_server, certificate):
    server, url = https_server
    cert, _key = certificate
    handle = clients.start(ServerConfig(name="tls", type="http", url=url, ca_file=str(cert)))
    assert handle.connect().era == "modern"
    result = handle.call_tool("echo", {"text": "over tls"})
    assert result["content"][0]["text"] == "over tls"


def test_a_trusted_certificate_for_another_host_name_is_refused(clients, https_server, certificate):
    # The certificate names 127.0.0.1 only; "localhost" reaches the same listener.
    server, url = https_server
    cert, _key = certificate
    other = url.replace("https://127.0.0.1:", "https://localhost:")
    handle = clients.start(ServerConfig(name="tls", type="http", url=other, ca_file=str(cert), startup_timeout_ms=5000))
    with pytest.raises(Unavailable, match="server 'tls': .*TLS certificate that is not trusted"):
        handle.connect()
    assert server.requests == []
