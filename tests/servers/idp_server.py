"""A loopback identity provider doing RFC 8693 token exchange for SEP-990 ID-JAGs.

Usage:
    python tests/servers/idp_server.py --key PRIVATE_KEY_PEM_FILE --client ID[:SECRET] ...
        [--port P] [--jag-client-id ID] [--jag-resource URL] [--jag-audience URL]
        [--no-discovery] [--jag-typ TYP]

It listens on 127.0.0.1 only and prints its issuer URL (``http://127.0.0.1:PORT``) as
the first line of stdout once the port is bound. The key (ES256 or RS256 PEM) signs the
ID-JAGs it issues, and its public half verifies the id_tokens it is given (the tests
sign those id_tokens with the same key, as the IdP's own sign-in would).

Endpoints:

* ``GET /.well-known/openid-configuration`` (unless ``--no-discovery``): ``issuer``,
  ``token_endpoint``, ``grant_types_supported`` (token-exchange),
  ``token_endpoint_auth_methods_supported`` (``client_secret_basic``, ``client_secret_post``, ``none``).
* ``POST /token``: ``grant_type=urn:ietf:params:oauth:grant-type:token-exchange`` only.
  The client authenticates as registered by ``--client`` (``ID:SECRET``: HTTP Basic or
  ``client_secret_post``; ``ID`` alone: a public client, ``client_id`` in the body); a
  failure is 401 ``invalid_client``. ``subject_token_type`` must be the id_token type,
  ``requested_token_type`` the ID-JAG type, ``audience`` and ``resource`` present; the
  ``subject_token`` must be an id_token this IdP signed (``iss`` = its issuer, ``aud`` =
  the authenticated client, ``exp`` in the future), else 400 ``invalid_grant``. The
  answer: ``access_token`` = an ID-JAG (header ``typ: oauth-id-jag+jwt``; claims
  ``iss``, ``sub`` of the id_token, ``aud`` = the ``audience`` asked for (or
  ``--jag-audience``), ``resource`` = the ``resource`` asked for (or
  ``--jag-resource``: the hostile case of an ID-JAG for another resource),
  ``client_id`` = ``--jag-client-id`` (the client the MCP authorization server knows),
  ``iat``, ``exp`` (+300 s), a fresh ``jti``, ``scope`` when asked), with
  ``issued_token_type`` the ID-JAG type and ``token_type: N_A``.
* ``GET /stats``: ``exchange_requests`` (every POST to /token), ``exchanges_issued``,
  ``refused`` (error -> count), ``last_audience``, ``last_resource``, ``last_scope``,
  ``last_client``. Tokens are never printed or logged.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hmac
import json
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, unquote

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"
ID_JAG_TYPE = "urn:ietf:params:oauth:token-type:id-jag"


class Refused(Exception):
    def __init__(self, error: str, description: str, status: int = 400) -> None:
        self.error, self.description, self.status = error, description, status


class Idp:
    def __init__(self, args: argparse.Namespace, issuer: str) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        with open(args.key, "rb") as handle:
            self.private_pem = handle.read()
        key = serialization.load_pem_private_key(self.private_pem, None)
        self.algorithm = "ES256" if isinstance(key, ec.EllipticCurvePrivateKey) else "RS256"
        self.public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                                        serialization.PublicFormat.SubjectPublicKeyInfo)
        self.args, self.issuer = args, issuer
        self.clients: dict[str, str | None] = {}
        for spec in args.client:
            client_id, _, secret = spec.partition(":")
            self.clients[client_id] = secret or None
        self.lock = threading.Lock()
        self.stats: dict = {"exchange_requests": 0, "exchanges_issued": 0, "refused": {}, "last_audience": None,
                            "last_resource": None, "last_scope": None, "last_client": None}

    def metadata(self) -> dict:
        return {"issuer": self.issuer, "token_endpoint": self.issuer + "/token",
                "grant_types_supported": [TOKEN_EXCHANGE],
                "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post", "none"]}

    def authenticate(self, headers, form: dict[str, str]) -> str:
        authorization = headers.get("Authorization", "")
        if authorization[:6].lower() == "basic ":
            try:
                raw_id, raw_secret = base64.b64decode(authorization[6:], validate=True).decode().split(":", 1)
            except (ValueError, UnicodeDecodeError, binascii.Error):
                raise Refused("invalid_client", "malformed Basic credentials", 401)
            client_id, secret = unquote(raw_id), unquote(raw_secret)
        else:
            client_id, secret = form.get("client_id", ""), form.get("client_secret")
        if client_id not in self.clients:
            raise Refused("invalid_client", "unknown client", 401)
        expected = self.clients[client_id]
        if expected is None:
            if secret is not None:
                raise Refused("invalid_client", "a public client has no secret", 401)
            return client_id
        if secret is None or not hmac.compare_digest(expected.encode(), secret.encode()):
            raise Refused("invalid_client", "wrong client secret", 401)
        return client_id

    def exchange(self, headers, form: dict[str, str]) -> dict:
        import jwt

        if form.get("grant_type") != TOKEN_EXCHANGE:
            raise Refused("unsupported_grant_type", "only token exchange")
        client_id = self.authenticate(headers, form)
        if form.get("subject_token_type") != ID_TOKEN_TYPE:
            raise Refused("invalid_request", "subject_token_type must be the id_token type")
        if form.get("requested_token_type") != ID_JAG_TYPE:
            raise Refused("invalid_request", "requested_token_type must be the ID-JAG type")
        for name in ("subject_token", "audience", "resource"):
            if not form.get(name):
                raise Refused("invalid_request", f"{name} is required")
        self.stats.update(last_audience=form["audience"], last_resource=form["resource"], last_scope=form.get("scope"),
                          last_client=client_id)
        try:
            claims = jwt.decode(form["subject_token"], self.public_pem, algorithms=[self.algorithm], audience=client_id,
                                issuer=self.issuer, options={"require": ["iss", "sub", "aud", "exp"]})
        except jwt.PyJWTError as error:
            raise Refused("invalid_grant", f"the id_token was rejected: {type(error).__name__}")
        now = int(time.time())
        jag = {"iss": self.issuer, "sub": claims["sub"], "aud": self.args.jag_audience or form["audience"],
               "resource": self.args.jag_resource or form["resource"], "client_id": self.args.jag_client_id or client_id,
               "iat": now, "exp": now + 300, "jti": str(uuid.uuid4())}
        if form.get("scope"):
            jag["scope"] = form["scope"]
        token = jwt.encode(jag, self.private_pem, algorithm=self.algorithm, headers={"typ": self.args.jag_typ})
        return {"access_token": token, "issued_token_type": ID_JAG_TYPE, "token_type": "N_A", "expires_in": 300}


def handler_for(idp: Idp):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format, *args):  # noqa: A002 - never log (the body holds tokens)
            pass

        def _send(self, status: int, body: dict, extra: dict | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            for key, value in (extra or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/.well-known/openid-configuration" and not idp.args.no_discovery:
                self._send(200, idp.metadata())
            elif self.path == "/stats":
                with idp.lock:
                    self._send(200, json.loads(json.dumps(idp.stats)))
            else:
                self._send(404, {"error": "not_found"})

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(min(length, 1 << 20)).decode("utf-8", "replace")
            if self.path != "/token":
                self._send(404, {"error": "not_found"})
                return
            form: dict[str, str] = {}
            for key, value in parse_qsl(body, keep_blank_values=True):
                form.setdefault(key, value)
            with idp.lock:
                idp.stats["exchange_requests"] += 1
                try:
                    answer = idp.exchange(self.headers, form)
                except Refused as refused:
                    idp.stats["refused"][refused.error] = idp.stats["refused"].get(refused.error, 0) + 1
                    extra = {"WWW-Authenticate": 'Basic realm="idp"'} if refused.status == 401 else None
                    self._send(refused.status, {"error": refused.error, "error_description": refused.description}, extra)
                    return
                idp.stats["exchanges_issued"] += 1
            self._send(200, answer)

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description="Loopback identity provider: RFC 8693 token exchange for ID-JAGs")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--key", required=True, metavar="PRIVATE_KEY_PEM_FILE")
    parser.add_argument("--client", action="append", default=[], metavar="ID[:SECRET]")
    parser.add_argument("--jag-client-id", metavar="ID", help="the client_id claim of the ID-JAGs (default: the IdP client)")
    parser.add_argument("--jag-resource", metavar="URL", help="issue ID-JAGs for this resource, whatever was asked")
    parser.add_argument("--jag-audience", metavar="URL", help="issue ID-JAGs for this audience, whatever was asked")
    parser.add_argument("--jag-typ", default="oauth-id-jag+jwt", metavar="TYP")
    parser.add_argument("--no-discovery", action="store_true", help="publish no OpenID configuration")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler_for(None))  # type: ignore[arg-type]
    issuer = f"http://127.0.0.1:{server.server_address[1]}"
    server.RequestHandlerClass = handler_for(Idp(args, issuer))
    server.daemon_threads = True
    print(issuer, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    sys.exit(main())
