"""The HTTP servers of the benchmark matrix, and its run-time TLS certificate.

``HttpServerProcess`` starts one server process for a whole row (the fast stdlib server,
``_fast_http_server.py``, over HTTP or HTTPS; or the official SDK server,
``tests/servers/sdk_server.py`` behind bench_http.py's TCP_NODELAY shim), pinned to the
server CPU, and waits (bounded) until it answers ``server/discover``.
``make_certificate`` writes a self-signed certificate for 127.0.0.1 (the ``cryptography``
package, a test dependency) that the clients then trust through their own options.
"""

from __future__ import annotations

import datetime
import json
import os
import select
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
FAST_SERVER = os.path.join(HERE, "_fast_http_server.py")
SDK_SERVER = os.path.join(REPO, "tests", "servers", "sdk_server.py")
START_TIMEOUT = 30.0
STOP_TIMEOUT = 5.0
SERVER_CPU = 1


def make_certificate(directory: str) -> tuple[str, str]:
    """A self-signed CA-capable certificate for 127.0.0.1/localhost; (cert path, key path)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "albedo matrix bench")])
    now = datetime.datetime.now(datetime.timezone.utc)
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                    x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return cert_path, key_path


def _discover(url: str, ca: str | None, timeout: float) -> None:
    import ssl

    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "matrix-probe", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {}}}}).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"})
    context = ssl.create_default_context(cafile=ca) if url.startswith("https:") else None
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    with opener.open(request, timeout=timeout) as response:
        response.read()


class HttpServerProcess:
    """One HTTP MCP server process; ``url`` once :meth:`start` returned."""

    def __init__(self, kind: str = "fast", cert: str | None = None, key: str | None = None, pin: bool = True) -> None:
        self.kind, self.cert, self.key, self.pin = kind, cert, key, pin
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> str:
        if self.kind == "fast":
            args = [sys.executable, FAST_SERVER, "--port", "0"]
            if self.cert:
                args += ["--cert", self.cert, "--key", self.key or ""]
        else:
            from bench_http import NODELAY_SHIM  # the TCP_NODELAY shim (see bench_http.py)

            args = [sys.executable, "-c", NODELAY_SHIM, SDK_SERVER, "http", "--port", "0", "--json-response"]
            if self.kind == "sdk_legacy":
                args.append("--legacy-only")
        pinning = self.pin and len(os.sched_getaffinity(0)) >= 2
        deadline = time.monotonic() + START_TIMEOUT
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            preexec_fn=(lambda: os.sched_setaffinity(0, {SERVER_CPU})) if pinning else None,
        )
        assert self.proc.stdout is not None
        line = b""
        while not line.endswith(b"\n"):
            if not select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                self.stop()
                raise RuntimeError(f"the {self.kind} server printed no URL within {START_TIMEOUT:g} s")
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                status = self.proc.wait()
                self.stop()
                raise RuntimeError(f"the {self.kind} server exited (status {status}) before printing its URL")
            line += chunk
        self.url = line.split(b"\n", 1)[0].decode().strip()
        while True:  # bound is not serving yet for uvicorn
            try:
                _discover(self.url, self.cert, max(0.1, min(2.0, deadline - time.monotonic())))
                return self.url
            except urllib.error.HTTPError:  # it answers (a legacy-only server refuses server/discover)
                return self.url
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the {self.kind} server did not answer within {START_TIMEOUT:g} s") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT)
        if proc.stdout is not None:
            proc.stdout.close()

    def __enter__(self) -> HttpServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
