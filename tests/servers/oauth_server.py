"""A loopback OAuth 2.1 authorization server plus an MCP resource server, in one process.

The MCP server is the SDK peer of ``sdk_server.py`` (tools ``echo``, ``add``, ``time``,
``echo_with_progress``, the demo resources and prompt), served over streamable HTTP at
``/mcp`` exactly as ``sdk_server.py http`` serves it (both eras on the one endpoint: a
``MCP-Protocol-Version: 2026-07-28`` POST is a stateless modern request, ``initialize``
opens a legacy session), but every request to ``/mcp`` needs ``Authorization: Bearer
<access token>`` issued by the authorization server below. Built on the official SDK's
server-side auth pieces (``mcp.server.auth``): an in-memory
``OAuthAuthorizationServerProvider``, the SDK's authorization and dynamic client
registration handlers, its RFC 9728 metadata route, its metadata builder and its
``BearerAuthBackend``; the token endpoint is this file's own (the SDK's does not do
``client_credentials`` or ``private_key_jwt``).

Usage:
    python tests/servers/oauth_server.py [--port P] [--issuer-path /tenant]
        [--scopes "mcp admin"] [--no-offline-access] [--no-iss]
        [--challenge-scope SCOPE] [--tool-scope TOOL=SCOPE ...]
        [--token-lifetime SECONDS] [--client ID[:SECRET]:REDIRECT_URI ...]
        [--client-credentials ID:SECRET ...] [--jwt-client ID:PUBLIC_KEY_PEM_FILE ...]
        [--jwt-bearer-issuer ISSUER=PUBLIC_KEY_PEM_FILE ...] [--jwt-bearer-error CODE] [--id-jag-issuer ISSUER=PUBLIC_KEY_PEM_FILE ...]
        [--stateless] [--json-response] [--rfc7592]

``--jwt-bearer-issuer`` / ``--id-jag-issuer`` add the RFC 7523 jwt-bearer grant to the
token endpoint (and to ``grant_types_supported``): see :class:`JwtBearerGrant`.
``--jwt-bearer-error CODE`` refuses every such request that carries an assertion with CODE
(``unauthorized_client``, say).

It listens on 127.0.0.1 only and prints the MCP endpoint URL
(``http://127.0.0.1:PORT/mcp``) as the first line of stdout once the port is bound
(``--port 0``, the default, picks a free port). The issuer is ``http://127.0.0.1:PORT``,
or ``http://127.0.0.1:PORT/tenant`` with ``--issuer-path /tenant``.

Endpoints (``{issuer}`` is the issuer URL, ``{ip}`` is its path, "" by default):

* ``POST|GET|DELETE /mcp`` - the MCP endpoint. No or a non-Bearer ``Authorization``:
  401 with ``WWW-Authenticate: Bearer resource_metadata="<PRM URL>"`` (plus
  ``scope="..."`` with ``--challenge-scope``). An unknown, expired or revoked token, or
  one issued for another resource: the same 401 with ``error="invalid_token"`` as well.
  A ``tools/call`` of a tool named by ``--tool-scope TOOL=SCOPE`` whose token lacks
  SCOPE: 403 with ``WWW-Authenticate: Bearer error="insufficient_scope",
  scope="SCOPE", resource_metadata="..."``.
* ``GET /.well-known/oauth-protected-resource/mcp`` - RFC 9728 metadata: ``resource``
  (the MCP URL), ``authorization_servers`` ([issuer]), ``scopes_supported`` (``--scopes``,
  default ``mcp``; ``offline_access`` is not listed there), ``bearer_methods_supported``.
* ``GET /.well-known/oauth-authorization-server{ip}`` - RFC 8414 metadata (PKCE S256,
  registration endpoint, ``none``/``client_secret_basic``/``client_secret_post`` client
  auth (plus ``private_key_jwt`` when a ``--jwt-client`` is configured), the
  authorization_code, refresh_token and client_credentials grants, ``scopes_supported``
  = ``--scopes`` + ``offline_access`` (unless ``--no-offline-access``),
  ``authorization_response_iss_parameter_supported: true`` (unless ``--no-iss``)).
* ``GET|POST {ip}/authorize`` - auto-approves: checks client_id, redirect_uri (must be
  registered; may be left out when the client has exactly one), ``response_type=code``,
  the PKCE S256 ``code_challenge``, ``scope`` (must be within the client's) and
  ``resource`` (must be the MCP URL when given), then answers 302 to
  ``redirect_uri?code=...&state=...&iss=...`` (errors once the redirect URI is known
  are redirected too, with ``iss``).
* ``POST {ip}/token`` - grants ``authorization_code`` (PKCE verifier, redirect_uri,
  single-use code, 5 minutes), ``refresh_token`` (rotated: the used refresh token is
  dead afterwards and presenting it again is ``invalid_grant``; an optional ``scope``
  must be within the original grant) and ``client_credentials`` (for ``--client-credentials``
  and ``--jwt-client`` clients only; no refresh token). Client authentication follows
  the client's registered method: ``none`` (``client_id`` in the body),
  ``client_secret_basic``, ``client_secret_post`` (pre-configured confidential clients
  may use either), ``private_key_jwt`` (RFC 7523 ``client_assertion``: RS256/ES256,
  ``iss`` = ``sub`` = client id, ``aud`` = the token endpoint URL or the issuer, ``exp``
  in the future, a ``jti`` never seen before). Responses carry ``expires_in``
  (``--token-lifetime``, default 3600) and ``scope``. ``resource``, when given, must be
  the MCP URL. A failed client authentication is 401 ``invalid_client``; other
  errors 400.
* ``POST {ip}/register`` - RFC 7591 dynamic client registration (the SDK's handler;
  ``token_endpoint_auth_method`` defaults to ``client_secret_post``; a client that
  registers without ``scope`` gets every supported scope). With ``--rfc7592`` the answer
  also carries ``registration_client_uri`` (``{issuer}/register/<client id>``) and a
  ``registration_access_token`` (RFC 7592 3).
* ``GET {ip}/register/<client id>`` (``--rfc7592``) - RFC 7592 2.1 read: with
  ``Authorization: Bearer <its registration access token>``, 200 and the client's
  registration; an unknown (or forgotten) client or a wrong token: 401
  ``invalid_token``. Each read counts in ``registration_reads``.
* ``POST {ip}/par`` (``--par``, advertised as ``pushed_authorization_request_endpoint``) -
  RFC 9126 pushed authorization request: the client authenticated as at the token
  endpoint (an unknown or forgotten client: 401 ``invalid_client``), its ``client_id``
  and ``redirect_uri`` checked; 201 with a ``request_uri``, which /authorize never
  redeems (albedo pushes only to ask whether a kept client is still known).
  ``par_requests`` and ``par_refused`` in ``/stats`` count them.
* ``GET /stats`` (no auth) - JSON counters (``client_assertion_jtis``: the jti of every
  ``private_key_jwt`` client assertion POSTed, checked or not): ``token_requests`` per grant type
  (``authorization_code``, ``refresh_token``, ``client_credentials``; every POST to the
  token endpoint with that ``grant_type`` counts, success or not), ``registrations``
  (successful), ``authorize_requests``, ``last_resource`` (the ``resource`` of the last
  authorize or token request that carried one), ``last_authorize_resource``,
  ``last_token_resource``, ``mcp_requests_with_token`` (requests to /mcp carrying a Bearer
  token, valid or not), ``mcp_requests_authorized``, ``mcp_requests_unauthorized`` (401s),
  ``mcp_requests_forbidden`` (403s), ``last_authorize_scope`` and ``last_token_scope``,
  ``authorize_client_ids`` (the ``client_id`` of every authorize request, in order),
  ``unknown_client_authorizations`` (authorize requests naming a client it does not
  know: they get the SDK's 400 page ``Client ID '...' not found``, never a redirect, as
  RFC 6749 4.1.2.1 says), ``registration_reads`` and ``refresh_client_ids`` (the client
  of every refresh that succeeded).
* ``POST /admin/expire`` (no auth) - every access token issued so far is expired now.
* ``POST /admin/revoke-refresh`` (no auth) - every refresh token is invalidated.
* ``POST /admin/advertise-lifetime?seconds=N`` (no auth) - token answers issued from
  now on say ``expires_in`` N (the tokens stay valid for ``--token-lifetime``); 0 makes
  a client refresh before every request. Without ``seconds``: the real lifetime again.
* ``POST /admin/hold-refresh`` (no auth) - from now on every ``refresh_token`` grant
  request hangs (a token endpoint that does not answer) until ``POST
  /admin/release-refresh``, which lets every held one (and later ones) go on as usual.
  ``refresh_held`` in ``/stats`` counts the requests that were held.
* ``POST /admin/forget-client`` (no auth; ``?client_id=ID``, else every client
  registered through ``/register``) - the server forgets the client, as one restarted
  with an in-memory client store or cleaning up stale registrations does: its
  authorization requests get the error page, its token requests ``invalid_client``.
  Its tokens stay valid. Answers ``{"forgotten": N}``.
* ``POST /admin/refuse-client`` (no auth; ``?at=redirect|token`` (default ``token``),
  ``&error=CODE`` (default ``invalid_client``), ``&times=N`` (default 1)) - the next N
  authorizations of a known client are refused with CODE: at the redirect (``error=CODE``
  and the ``state`` on the client's registered redirect URI, RFC 6749 4.1.2.1), or at
  the code exchange (401 for ``invalid_client``, else 400). Each refused client id is
  appended to ``refused_client_ids`` in ``/stats``; ``times=0`` stops refusing.

``--client ID[:SECRET]:REDIRECT_URI`` pre-registers a client (public with no SECRET,
otherwise confidential with client_secret_basic or client_secret_post) allowed every
scope and the authorization_code and refresh_token grants. Tokens are never printed
or logged.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import hashlib
import hmac
import json
import os
import re
import secrets
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlparse, urlunparse

import anyio
from pydantic import AnyHttpUrl, AnyUrl
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcp.server.auth.handlers.authorize import AuthorizationHandler
from mcp.server.auth.handlers.register import RegistrationHandler
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    ProviderTokenVerifier,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.routes import build_metadata, build_resource_metadata_url, create_protected_resource_routes
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sdk_server  # noqa: E402  (the SDK peer: its MCPServer, tools and event store)

JWT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
CODE_LIFETIME = 300
SUBJECT = "albedo-test-user"


class Stats:
    def __init__(self) -> None:
        self.token_requests = {"authorization_code": 0, "refresh_token": 0, "client_credentials": 0}
        self.registrations = 0
        self.authorize_requests = 0
        self.last_resource: str | None = None
        self.last_authorize_resource: str | None = None
        self.last_token_resource: str | None = None
        self.last_authorize_scope: str | None = None
        self.last_token_scope: str | None = None
        self.mcp_requests_with_token = 0
        self.mcp_requests_authorized = 0
        self.mcp_requests_unauthorized = 0
        self.mcp_requests_forbidden = 0
        # DPoP (--dpop)
        self.dpop_token_requests = 0  # token requests with a valid proof
        self.dpop_proofs_refused = 0  # proofs refused (token endpoint and /mcp)
        self.dpop_replays = 0  # proofs whose jti was seen before
        self.dpop_nonce_challenges_as = 0
        self.dpop_nonce_challenges_rs = 0
        self.mcp_requests_dpop = 0  # /mcp requests authorized with the DPoP scheme
        self.dpop_methods: dict[str, int] = {}  # ... per HTTP method
        self.bearer_with_bound_token = 0  # a DPoP-bound token sent as Bearer (must stay 0)
        # The jti of every private_key_jwt client assertion POSTed, before anything is checked
        # (a DPoP nonce retry must carry a new one).
        self.client_assertion_jtis: list[str | None] = []
        self.token_jkts: list[str] = []  # the key thumbprint of every bound token issued
        self.mcp_jkts: list[str] = []  # the key thumbprints /mcp saw
        # Registrations (issue 23 hole 5)
        self.authorize_client_ids: list[str | None] = []
        self.unknown_client_authorizations = 0
        self.registration_reads = 0
        self.refresh_client_ids: list[str] = []
        self.refresh_held = 0  # refresh_token requests held by /admin/hold-refresh
        self.refused_client_ids: list[str] = []  # the clients /admin/refuse-client refused, in order
        self.par_requests = 0  # pushed authorization requests (--par), and those refused
        self.par_refused = 0

    def as_json(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass
class ServerConfig:
    issuer: str
    mcp_url: str
    prm_url: str
    token_url: str
    scopes: list[str]  # resource scopes (PRM scopes_supported)
    offline_access: bool
    send_iss: bool
    token_lifetime: int
    challenge_scope: str | None
    tool_scopes: dict[str, list[str]]
    # client id -> public key (PEM bytes) for private_key_jwt clients
    jwt_clients: dict[str, bytes] = field(default_factory=dict)
    # client ids allowed the client_credentials grant
    cc_clients: set[str] = field(default_factory=set)
    # pre-configured confidential clients that may use either secret method
    flexible_secret_clients: set[str] = field(default_factory=set)
    # the expires_in token answers give (/admin/advertise-lifetime); None: the real lifetime
    advertised_lifetime: int | None = None
    # /admin/refuse-client: the error codes the next authorizations of a known client get,
    # one each, at the redirect ("redirect") or at the code exchange ("token")
    refusals: dict[str, list[str]] = field(default_factory=lambda: {"redirect": [], "token": []})

    @property
    def all_scopes(self) -> list[str]:
        return self.scopes + (["offline_access"] if self.offline_access else [])


class MemoryProvider:
    """In-memory ``OAuthAuthorizationServerProvider``: clients, codes and tokens in dicts."""

    def __init__(self, config: ServerConfig, stats: Stats) -> None:
        self.config = config
        self.stats = stats
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access_tokens: dict[str, AccessToken] = {}
        self.refresh_tokens: dict[str, RefreshToken] = {}
        self.registered: set[str] = set()  # the clients registered through /register
        self.registration_tokens: dict[str, str] = {}  # client id -> RFC 7592 registration access token

    # -- clients --------------------------------------------------------------------------

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.clients[client_info.client_id] = client_info
        self.registered.add(client_info.client_id)
        self.stats.registrations += 1

    # -- authorization ----------------------------------------------------------------------

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        if params.resource is not None and params.resource != self.config.mcp_url:
            raise AuthorizeError("invalid_target", f"unknown resource {params.resource!r}")
        scopes = params.scopes if params.scopes is not None else (client.scope or "").split()
        code = secrets.token_urlsafe(32)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=scopes,
            expires_at=time.time() + CODE_LIFETIME,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject=SUBJECT,
        )
        # iss is added by the authorize route for every redirect (success and error alike)
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        code = self.codes.get(authorization_code)
        if code is None or code.client_id != client.client_id:
            return None
        return code

    def _issue(
        self, client_id: str, scopes: list[str], resource: str | None, subject: str, refresh: bool
    ) -> OAuthToken:
        access = secrets.token_urlsafe(32)
        self.access_tokens[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=int(time.time()) + self.config.token_lifetime,
            # a token asked for without a resource indicator is still only good for this server
            resource=resource or self.config.mcp_url,
            subject=subject,
            claims={"iss": self.config.issuer},
        )
        refresh_token = None
        if refresh:
            refresh_token = secrets.token_urlsafe(32)
            self.refresh_tokens[refresh_token] = RefreshToken(
                token=refresh_token, client_id=client_id, scopes=scopes, resource=resource, subject=subject
            )
        return OAuthToken(
            access_token=access,
            expires_in=self.config.token_lifetime if self.config.advertised_lifetime is None
            else self.config.advertised_lifetime,
            scope=" ".join(scopes),
            refresh_token=refresh_token,
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        if self.codes.pop(authorization_code.code, None) is None:
            raise TokenError("invalid_grant", "authorization code already used")
        return self._issue(client.client_id, authorization_code.scopes, authorization_code.resource,
                           authorization_code.subject or SUBJECT, refresh=True)

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        token = self.refresh_tokens.get(refresh_token)
        if token is None or token.client_id != client.client_id:
            return None
        if token.expires_at is not None and token.expires_at < time.time():
            return None
        return token

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        # rotation: the presented refresh token dies here, a new one is issued
        if self.refresh_tokens.pop(refresh_token.token, None) is None:
            raise TokenError("invalid_grant", "refresh token already used")
        return self._issue(client.client_id, scopes or refresh_token.scopes, refresh_token.resource,
                           refresh_token.subject or SUBJECT, refresh=True)

    def issue_client_credentials(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        return self._issue(client_id, scopes, resource, client_id, refresh=False)

    async def load_access_token(self, token: str) -> AccessToken | None:
        access = self.access_tokens.get(token)
        if access is None or (access.expires_at is not None and access.expires_at <= time.time()):
            return None
        return access

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access_tokens.pop(token.token, None)
        self.refresh_tokens.pop(token.token, None)

    # -- test hooks -------------------------------------------------------------------------

    def expire_all(self) -> int:
        past = int(time.time()) - 1
        for token in self.access_tokens.values():
            token.expires_at = past
        return len(self.access_tokens)

    def revoke_refresh(self) -> int:
        count = len(self.refresh_tokens)
        self.refresh_tokens.clear()
        return count

    def forget_client(self, client_id: str | None) -> int:
        """Forget one client, or every client registered through /register; their tokens stay."""
        gone = [client_id] if client_id is not None else sorted(self.registered)
        count = 0
        for one in gone:
            if self.clients.pop(one, None) is not None:
                count += 1
            self.registered.discard(one)
            self.registration_tokens.pop(one, None)
        return count


NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}


class TokenFailure(Exception):
    def __init__(self, error: str, description: str, status: int = 400, basic: bool = False) -> None:
        self.error, self.description, self.status, self.basic = error, description, status, basic

    def response(self) -> Response:
        headers = dict(NO_STORE)
        if self.status == 401 and self.basic:
            headers["WWW-Authenticate"] = 'Basic realm="token"'
        return JSONResponse({"error": self.error, "error_description": self.description},
                            status_code=self.status, headers=headers)


def verify_pkce(verifier: str, challenge: str) -> bool:
    if not 43 <= len(verifier) <= 128:
        return False
    digest = hashlib.sha256(verifier.encode()).digest()
    return hmac.compare_digest(base64.urlsafe_b64encode(digest).decode().rstrip("="), challenge)


class TokenEndpoint:
    """RFC 6749 token endpoint: authorization_code, refresh_token and client_credentials."""

    def __init__(self, provider: MemoryProvider, config: ServerConfig, stats: Stats) -> None:
        self.provider, self.config, self.stats = provider, config, stats
        self.seen_jtis: set[str] = set()
        self.dpop: Dpop | None = None
        self.jwt_bearer: JwtBearerGrant | None = None  # --jwt-bearer-issuer / --id-jag-issuer
        self.released: asyncio.Event | None = None  # set: refreshes go on; unset: they hang (/admin/hold-refresh)

    async def authenticate(self, request: Request, form: dict[str, str]) -> OAuthClientInformationFull:
        auth_header = request.headers.get("authorization", "")
        form_client_id = form.get("client_id")
        if auth_header[:6].lower() == "basic ":
            try:
                decoded = base64.b64decode(auth_header[6:], validate=True).decode()
                raw_id, raw_secret = decoded.split(":", 1)
            except (ValueError, UnicodeDecodeError, binascii.Error):
                raise TokenFailure("invalid_client", "malformed Basic credentials", 401, basic=True)
            client_id, secret = unquote(raw_id), unquote(raw_secret)
            if form_client_id is not None and form_client_id != client_id:
                raise TokenFailure("invalid_request", "client_id differs from the Basic credentials")
            if "client_secret" in form or "client_assertion" in form:
                raise TokenFailure("invalid_request", "more than one client authentication method")
            client = await self.provider.get_client(client_id)
            self._check_secret(client, secret, "client_secret_basic", basic=True)
            return client  # type: ignore[return-value]
        if "client_assertion" in form or "client_assertion_type" in form:
            return await self._authenticate_jwt(form)
        if form.get("client_secret") is not None:
            if not form_client_id:
                raise TokenFailure("invalid_request", "client_id is required with client_secret")
            client = await self.provider.get_client(form_client_id)
            self._check_secret(client, form["client_secret"], "client_secret_post", basic=False)
            return client  # type: ignore[return-value]
        if not form_client_id:
            raise TokenFailure("invalid_client", "no client authentication", 401)
        client = await self.provider.get_client(form_client_id)
        if client is None:
            raise TokenFailure("invalid_client", "unknown client", 401)
        if client.token_endpoint_auth_method != "none":
            raise TokenFailure("invalid_client", "client authentication required", 401)
        return client

    def _check_secret(self, client: OAuthClientInformationFull | None, secret: str, method: str, basic: bool) -> None:
        if client is None or not client.client_secret:
            raise TokenFailure("invalid_client", "unknown client or not a confidential client", 401, basic)
        allowed = {client.token_endpoint_auth_method}
        if client.client_id in self.config.flexible_secret_clients:
            allowed = {"client_secret_basic", "client_secret_post"}
        if method not in allowed:
            registered = client.token_endpoint_auth_method
            raise TokenFailure("invalid_client", f"client is registered for {registered}", 401, basic)
        if not hmac.compare_digest(client.client_secret.encode(), secret.encode()):
            raise TokenFailure("invalid_client", "wrong client secret", 401, basic)
        if client.client_secret_expires_at and client.client_secret_expires_at < time.time():
            raise TokenFailure("invalid_client", "client secret expired", 401, basic)

    async def _authenticate_jwt(self, form: dict[str, str]) -> OAuthClientInformationFull:
        import jwt

        if form.get("client_assertion_type") != JWT_ASSERTION_TYPE or not form.get("client_assertion"):
            raise TokenFailure("invalid_client", "unsupported or missing client_assertion", 401)
        assertion = form["client_assertion"]
        try:
            unverified = jwt.decode(assertion, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise TokenFailure("invalid_client", "malformed client_assertion", 401)
        client_id = unverified.get("iss")
        if not isinstance(client_id, str) or client_id not in self.config.jwt_clients:
            raise TokenFailure("invalid_client", "unknown client_assertion issuer", 401)
        if form.get("client_id") not in (None, client_id):
            raise TokenFailure("invalid_client", "client_id differs from the assertion issuer", 401)
        try:
            claims = jwt.decode(
                assertion,
                self.config.jwt_clients[client_id],
                algorithms=["RS256", "ES256"],
                audience=[self.config.token_url, self.config.issuer],
                issuer=client_id,
                options={"require": ["iss", "sub", "aud", "exp", "jti"]},
            )
        except jwt.PyJWTError as error:
            raise TokenFailure("invalid_client", f"client_assertion rejected: {type(error).__name__}", 401)
        if claims["sub"] != client_id:
            raise TokenFailure("invalid_client", "client_assertion sub must be the client id", 401)
        if claims["jti"] in self.seen_jtis:
            raise TokenFailure("invalid_client", "client_assertion jti already used", 401)
        self.seen_jtis.add(claims["jti"])
        client = await self.provider.get_client(client_id)
        assert client is not None
        return client

    def _check_resource(self, form: dict[str, str]) -> str | None:
        resource = form.get("resource")
        if resource is not None:
            self.stats.last_resource = self.stats.last_token_resource = resource
            if resource != self.config.mcp_url:
                raise TokenFailure("invalid_target", f"unknown resource {resource!r}")
        return resource

    async def handle(self, request: Request) -> Response:
        if request.method != "POST":
            return Response(status_code=405, headers={"Allow": "POST"})
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/x-www-form-urlencoded":
            return TokenFailure("invalid_request", "body must be application/x-www-form-urlencoded").response()
        pairs = parse_qsl((await request.body()).decode("utf-8", "replace"), keep_blank_values=True)
        form: dict[str, str] = {}
        for key, value in pairs:
            if key in form:
                return TokenFailure("invalid_request", f"parameter {key} repeated").response()
            form[key] = value
        grant_type = form.get("grant_type")
        if grant_type in self.stats.token_requests:
            self.stats.token_requests[grant_type] += 1
        released = self.released
        if grant_type == "refresh_token" and released is not None and not released.is_set():
            self.stats.refresh_held += 1
            await released.wait()  # a hung token endpoint, until /admin/release-refresh
        if "client_assertion" in form:
            self.stats.client_assertion_jtis.append(_unverified_jti(form["client_assertion"]))
        if "scope" in form:
            self.stats.last_token_scope = form["scope"]
        jkt = None
        if self.dpop is not None:
            checked = await self.dpop.token_request(request, form)
            if isinstance(checked, Response):
                return checked
            jkt = checked
        if grant_type == JWT_BEARER_GRANT and self.jwt_bearer is not None:
            return await self.jwt_bearer.handle(request, form, self, jkt)
        try:
            if not grant_type:
                raise TokenFailure("invalid_request", "grant_type is required")
            if grant_type not in self.stats.token_requests:
                raise TokenFailure("unsupported_grant_type", f"grant_type {grant_type!r} is not supported")
            client = await self.authenticate(request, form)
            refusals = self.config.refusals["token"]
            if grant_type == "authorization_code" and refusals:
                error = refusals.pop(0)
                self.stats.refused_client_ids.append(client.client_id)
                raise TokenFailure(error, "refused by /admin/refuse-client", 401 if error == "invalid_client" else 400)
            token = await getattr(self, "_" + grant_type)(client, form)
        except TokenFailure as failure:
            return failure.response()
        except TokenError as error:
            return TokenFailure(error.error, error.error_description or error.error).response()
        if self.dpop is not None:
            body, headers = self.dpop.issued(token, jkt)
            return JSONResponse(body, headers=headers)
        return JSONResponse(token.model_dump(exclude_none=True), headers=NO_STORE)

    async def _authorization_code(self, client: OAuthClientInformationFull, form: dict[str, str]) -> OAuthToken:
        if "authorization_code" not in client.grant_types:
            raise TokenFailure("unauthorized_client", "client may not use authorization_code")
        for name in ("code", "code_verifier"):
            if not form.get(name):
                raise TokenFailure("invalid_request", f"{name} is required")
        resource = self._check_resource(form)
        code = await self.provider.load_authorization_code(client, form["code"])
        if code is None:
            raise TokenFailure("invalid_grant", "unknown, used or foreign authorization code")
        if code.expires_at < time.time():
            self.provider.codes.pop(code.code, None)
            raise TokenFailure("invalid_grant", "authorization code expired")
        if code.redirect_uri_provided_explicitly or "redirect_uri" in form:
            if form.get("redirect_uri") != str(code.redirect_uri):
                raise TokenFailure("invalid_grant", "redirect_uri does not match the authorization request")
        if not verify_pkce(form["code_verifier"], code.code_challenge):
            self.provider.codes.pop(code.code, None)
            raise TokenFailure("invalid_grant", "PKCE verification failed")
        if resource is not None and code.resource is not None and resource != code.resource:
            raise TokenFailure("invalid_target", "resource differs from the authorization request")
        if code.resource is None and resource is not None:
            code = code.model_copy(update={"resource": resource})
        return await self.provider.exchange_authorization_code(client, code)

    async def _refresh_token(self, client: OAuthClientInformationFull, form: dict[str, str]) -> OAuthToken:
        if "refresh_token" not in client.grant_types:
            raise TokenFailure("unauthorized_client", "client may not use refresh_token")
        if not form.get("refresh_token"):
            raise TokenFailure("invalid_request", "refresh_token is required")
        resource = self._check_resource(form)
        refresh = await self.provider.load_refresh_token(client, form["refresh_token"])
        if refresh is None:
            raise TokenFailure("invalid_grant", "unknown, used, revoked or foreign refresh token")
        scopes = form["scope"].split() if form.get("scope") else refresh.scopes
        if not set(scopes) <= set(refresh.scopes):
            raise TokenFailure("invalid_scope", "scope exceeds the original grant")
        if resource is not None and refresh.resource is not None and resource != refresh.resource:
            raise TokenFailure("invalid_target", "resource differs from the original grant")
        token = await self.provider.exchange_refresh_token(client, refresh, scopes)
        self.stats.refresh_client_ids.append(client.client_id)
        return token

    async def _client_credentials(self, client: OAuthClientInformationFull, form: dict[str, str]) -> OAuthToken:
        if client.client_id not in self.config.cc_clients:
            raise TokenFailure("unauthorized_client", "client may not use client_credentials")
        resource = self._check_resource(form)
        allowed = self.config.scopes
        scopes = form["scope"].split() if form.get("scope") else list(allowed)
        if not set(scopes) <= set(allowed):
            raise TokenFailure("invalid_scope", "scope not allowed for client_credentials")
        return self.provider.issue_client_credentials(client.client_id, scopes, resource)


# -- DPoP (RFC 9449): --dpop and its flags ------------------------------------------------------


class DpopProofError(Exception):
    pass


def _unverified_jti(token: str) -> str | None:
    import jwt

    try:
        jti = jwt.decode(token, options={"verify_signature": False}).get("jti")
    except jwt.PyJWTError:
        return None
    return jti if isinstance(jti, str) else None


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def jwk_thumbprint(jwk: dict) -> str:
    """RFC 7638 SHA-256 thumbprint of an EC public JWK."""
    members = {name: jwk[name] for name in ("crv", "kty", "x", "y")}
    return _b64url(hashlib.sha256(json.dumps(members, separators=(",", ":"), sort_keys=True).encode()).digest())


class Dpop:
    """The server's DPoP side (``--dpop``): proofs checked with pyjwt/cryptography at the
    token endpoint and at /mcp, tokens bound to the proof key (``cnf.jkt``), nonces.

    * Token endpoint: a request with a ``DPoP`` header must carry one valid proof
      (``typ`` dpop+jwt, ``alg`` listed, a public ``jwk``, the signature, ``htm`` POST,
      ``htu`` the token endpoint, ``iat`` within 5 minutes, a ``jti`` never seen): else 400
      ``invalid_dpop_proof``. With ``--dpop-nonce-as`` its ``nonce`` must be the server's
      (else 400 ``use_dpop_nonce`` with ``DPoP-Nonce``). The tokens it gets are bound to
      the key (token_type ``DPoP``; the refresh token too: refreshing it needs a proof of
      the same key, else ``invalid_grant``), unless ``--dpop-bearer`` (Bearer, unbound).
      A request without a proof gets unbound Bearer tokens.
    * /mcp: a bound token is taken only as ``Authorization: DPoP <token>`` with one valid
      proof (``htm`` the method, ``htu`` the MCP URL, ``ath`` of the token, the token's
      ``jkt``, a fresh ``jti``: a replayed proof is 401 ``invalid_dpop_proof``); with
      ``--dpop-nonce-rs`` its nonce must be the server's (401 ``WWW-Authenticate: DPoP
      error="use_dpop_nonce"`` with ``DPoP-Nonce``). A bound token sent as Bearer is
      401 ``invalid_token`` and counted. Challenges use the ``DPoP`` scheme.
    * ``--dpop-nonce-loop``: every nonce demand gives a new nonce and none is ever accepted.
    * ``--dpop-nonce-value V``: the nonce the server gives (else a random one).
    * ``--dpop-mislabel``: a token request without a proof is answered token_type ``DPoP``.
    """

    def __init__(self, args: argparse.Namespace, config: "ServerConfig", stats: Stats) -> None:
        self.config, self.stats = config, stats
        self.algorithms = args.dpop_algs.split()
        self.bearer = args.dpop_bearer
        self.mislabel = args.dpop_mislabel
        self.nonce_as, self.nonce_rs, self.loop = args.dpop_nonce_as, args.dpop_nonce_rs, args.dpop_nonce_loop
        self.nonce = args.dpop_nonce_value or secrets.token_urlsafe(16)
        self.seen_jtis: set[str] = set()
        self.bound: dict[str, str] = {}  # access token -> jkt
        self.bound_refresh: dict[str, str] = {}  # refresh token -> jkt

    # -- proofs --------------------------------------------------------------------------

    def verify(self, headers: Headers, method: str, url: str, token: str | None = None) -> dict:
        """The checked claims of the request's one proof, with ``jkt``; raises DpopProofError."""
        import jwt
        from jwt.algorithms import ECAlgorithm

        proofs = headers.getlist("dpop")
        if len(proofs) != 1 or "," in proofs[0]:
            raise DpopProofError("exactly one DPoP proof is needed")
        proof = proofs[0]
        try:
            header = jwt.get_unverified_header(proof)
        except jwt.PyJWTError:
            raise DpopProofError("not a JWS")
        jwk = header.get("jwk")
        if header.get("typ") != "dpop+jwt" or header.get("alg") not in (self.algorithms or ["ES256"]) or header.get("alg") != "ES256":
            raise DpopProofError("typ or alg not accepted")
        if not isinstance(jwk, dict) or "d" in jwk or jwk.get("kty") != "EC":
            raise DpopProofError("jwk missing, private or not EC")
        try:
            key = ECAlgorithm.from_jwk(json.dumps(jwk))
            claims = jwt.decode(proof, key, algorithms=["ES256"],  # type: ignore[arg-type]
                                options={"require": ["jti", "htm", "htu", "iat"], "verify_aud": False, "verify_iat": False})
        except (jwt.PyJWTError, ValueError, KeyError) as error:
            raise DpopProofError(f"signature or claims refused ({type(error).__name__})")
        if claims["htm"] != method or claims["htu"] != url:
            raise DpopProofError("htm or htu does not match the request")
        if not isinstance(claims["iat"], int) or abs(time.time() - claims["iat"]) > 300:
            raise DpopProofError("iat outside the window")
        if token is not None and claims.get("ath") != _b64url(hashlib.sha256(token.encode()).digest()):
            raise DpopProofError("ath does not match the access token")
        if claims["jti"] in self.seen_jtis:
            self.stats.dpop_replays += 1
            raise DpopProofError("the proof was replayed (jti seen before)")
        self.seen_jtis.add(claims["jti"])
        claims["jkt"] = jwk_thumbprint(jwk)
        return claims

    def _nonce_ok(self, claims: dict) -> bool:
        if self.loop:
            self.nonce = secrets.token_urlsafe(16)
            return False
        return claims.get("nonce") == self.nonce

    # -- token endpoint ------------------------------------------------------------------

    async def token_request(self, request: Request, form: dict[str, str]) -> "str | None | Response":
        """Before the grant: the proof's jkt (None without a proof), or the refusal to send."""
        if "dpop" not in request.headers:
            if form.get("grant_type") == "refresh_token" and form.get("refresh_token") in self.bound_refresh:
                return TokenFailure("invalid_grant", "this refresh token is DPoP-bound: a proof is needed").response()
            return None
        try:
            claims = self.verify(request.headers, "POST", self.config.token_url)
        except DpopProofError as error:
            self.stats.dpop_proofs_refused += 1
            return TokenFailure("invalid_dpop_proof", str(error)).response()
        if self.nonce_as and not self._nonce_ok(claims):
            self.stats.dpop_nonce_challenges_as += 1
            response = TokenFailure("use_dpop_nonce", "Authorization server requires nonce in DPoP proof").response()
            response.headers["DPoP-Nonce"] = self.nonce
            return response
        self.stats.dpop_token_requests += 1
        bound = self.bound_refresh.get(form.get("refresh_token", "")) if form.get("grant_type") == "refresh_token" else None
        if bound is not None and bound != claims["jkt"]:
            return TokenFailure("invalid_grant", "this refresh token is bound to another DPoP key").response()
        return claims["jkt"]

    def issued(self, token: OAuthToken, jkt: str | None) -> tuple[dict, dict]:
        """The token response's body and headers, the tokens bound to ``jkt``."""
        body = token.model_dump(exclude_none=True)
        headers = dict(NO_STORE)
        if self.nonce_as and not self.loop:
            headers["DPoP-Nonce"] = self.nonce
        if jkt is None and self.mislabel:
            body["token_type"] = "DPoP"  # a bound token to a request that sent no proof
        if jkt is None or self.bearer:
            return body, headers
        self.bound[token.access_token] = jkt
        if token.refresh_token:
            self.bound_refresh[token.refresh_token] = jkt
        self.stats.token_jkts.append(jkt)
        body["token_type"] = "DPoP"
        return body, headers

    # -- the MCP endpoint ----------------------------------------------------------------

    async def guard(self, scope, receive, send, guard: "McpGuard"):
        """Check a /mcp request's DPoP; the scope to go on with (the token as Bearer for the
        SDK's backend) or None when it was answered here."""
        headers = Headers(scope=scope)
        scheme, _, token = headers.get("authorization", "").partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer" and token in self.bound:
            self.stats.bearer_with_bound_token += 1
            await guard._drain(receive)
            await guard._deny(send, 401, ['error="invalid_token"', 'error_description="a DPoP-bound token sent as Bearer"',
                                          f'resource_metadata="{self.config.prm_url}"'], "invalid_token", "DPoP-bound token")
            return None
        if scheme != "dpop":
            return scope
        if token not in self.bound:
            self.stats.dpop_proofs_refused += 1
            await guard._drain(receive)
            await guard._deny(send, 401, ['error="invalid_token"', f'resource_metadata="{self.config.prm_url}"'],
                              "invalid_token", "not a DPoP-bound token")
            return None
        try:
            claims = self.verify(headers, scope["method"], self.config.mcp_url, token)
            if claims["jkt"] != self.bound[token]:
                raise DpopProofError("the proof key is not the token's")
        except DpopProofError as error:
            self.stats.dpop_proofs_refused += 1
            await guard._drain(receive)
            await guard._deny(send, 401, ['error="invalid_dpop_proof"', f'error_description="{error}"',
                                          f'resource_metadata="{self.config.prm_url}"'], "invalid_dpop_proof", str(error))
            return None
        if self.nonce_rs and not self._nonce_ok(claims):
            self.stats.dpop_nonce_challenges_rs += 1
            await guard._drain(receive)
            await guard._deny(send, 401, ['error="use_dpop_nonce"', 'error_description="Resource server requires nonce in DPoP proof"',
                                          f'resource_metadata="{self.config.prm_url}"'], "use_dpop_nonce", "nonce needed",
                              extra=[(b"dpop-nonce", self.nonce.encode("latin-1"))])
            return None
        self.stats.mcp_requests_dpop += 1
        self.stats.dpop_methods[scope["method"]] = self.stats.dpop_methods.get(scope["method"], 0) + 1
        if claims["jkt"] not in self.stats.mcp_jkts:
            self.stats.mcp_jkts.append(claims["jkt"])
        rewritten = [(k, v) for k, v in scope["headers"] if k.lower() != b"authorization"]
        rewritten.append((b"authorization", b"Bearer " + token.encode("latin-1")))
        return {**scope, "headers": rewritten}


# -- jwt-bearer (RFC 7523) and ID-JAG grants: --jwt-bearer-issuer / --id-jag-issuer ------------


JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
ID_JAG_TYP = "oauth-id-jag+jwt"


class JwtBearerGrant:
    """RFC 7523 2.1 jwt-bearer grant: workload assertions (``--jwt-bearer-issuer``) and
    SEP-990 ID-JAGs (``--id-jag-issuer``, told apart by their ``typ: oauth-id-jag+jwt``).

    A workload assertion must be signed (RS256/ES256) by a trusted issuer's key, name
    this server as ``aud`` (its issuer or token endpoint URL), carry ``exp`` in the future,
    ``sub`` and a ``jti`` never seen before; client authentication is optional (when
    sent, it must be valid). An ID-JAG must, besides, come with an authenticated client
    equal to its ``client_id`` claim and name the MCP URL as its ``resource``. Stats:
    ``jwt_bearer_requests`` (every POST with this grant_type), ``jwt_bearer_accepted``,
    ``jwt_bearer_refused`` (error -> count), ``jwt_bearer_jtis`` and ``jwt_bearer_subjects``
    (of the assertions presented, in order), ``id_jag_requests``.
    """

    def __init__(self, config: ServerConfig, stats: Stats, workload: dict[str, bytes], id_jag: dict[str, bytes],
                 error: str | None = None) -> None:
        self.config, self.stats = config, stats
        self.error = error  # --jwt-bearer-error: every request of this grant is refused with it
        self.workload, self.id_jag = workload, id_jag
        self.seen: set[str] = set()
        stats.jwt_bearer_requests = 0  # type: ignore[attr-defined]
        stats.jwt_bearer_accepted = 0  # type: ignore[attr-defined]
        stats.jwt_bearer_refused = {}  # type: ignore[attr-defined]
        stats.jwt_bearer_jtis = []  # type: ignore[attr-defined]
        stats.jwt_bearer_subjects = []  # type: ignore[attr-defined]
        stats.id_jag_requests = 0  # type: ignore[attr-defined]

    async def handle(self, request: Request, form: dict[str, str], endpoint: "TokenEndpoint", jkt: str | None = None) -> Response:
        """The grant's answer; with ``--dpop`` the tokens are bound to ``jkt``, the proof's key."""
        stats: Any = self.stats
        stats.jwt_bearer_requests += 1
        try:
            token = await self._grant(request, form, endpoint)
        except TokenFailure as failure:
            stats.jwt_bearer_refused[failure.error] = stats.jwt_bearer_refused.get(failure.error, 0) + 1
            return failure.response()
        stats.jwt_bearer_accepted += 1
        if endpoint.dpop is not None:
            body, headers = endpoint.dpop.issued(token, jkt)
            return JSONResponse(body, headers=headers)
        return JSONResponse(token.model_dump(exclude_none=True), headers=NO_STORE)

    async def _client(self, request: Request, form: dict[str, str], endpoint: "TokenEndpoint"):
        authenticated = ("authorization" in request.headers or "client_secret" in form or "client_assertion" in form)
        if authenticated or (form.get("client_id") and form["client_id"] in endpoint.provider.clients):
            return await endpoint.authenticate(request, form)
        return None  # RFC 7523 3.1: client authentication is optional; the assertion names the workload

    async def _grant(self, request: Request, form: dict[str, str], endpoint: "TokenEndpoint") -> OAuthToken:
        import jwt

        assertion = form.get("assertion")
        if not assertion:
            raise TokenFailure("invalid_request", "assertion is required")
        if self.error:
            raise TokenFailure(self.error, "this grant is refused (--jwt-bearer-error)")
        client = await self._client(request, form, endpoint)
        resource = endpoint._check_resource(form)
        try:
            header = jwt.get_unverified_header(assertion)
            unverified = jwt.decode(assertion, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise TokenFailure("invalid_grant", "the assertion is not a JWT")
        is_jag = str(header.get("typ", "")).lower() == ID_JAG_TYP
        keys = self.id_jag if is_jag else self.workload
        if is_jag:
            self.stats.id_jag_requests += 1  # type: ignore[attr-defined]
        jti, sub = unverified.get("jti"), unverified.get("sub")
        self.stats.jwt_bearer_jtis.append(jti if isinstance(jti, str) else None)  # type: ignore[attr-defined]
        self.stats.jwt_bearer_subjects.append(sub if isinstance(sub, str) else None)  # type: ignore[attr-defined]
        issuer = unverified.get("iss")
        if not isinstance(issuer, str) or issuer not in keys:
            raise TokenFailure("invalid_grant", "the assertion's issuer is not trusted")
        try:
            claims = jwt.decode(assertion, keys[issuer], algorithms=["RS256", "ES256"],
                                audience=[self.config.issuer, self.config.token_url], issuer=issuer,
                                options={"require": ["iss", "sub", "aud", "exp", "jti"]})
        except jwt.ExpiredSignatureError:
            raise TokenFailure("invalid_grant", "the assertion has expired")
        except jwt.InvalidAudienceError:
            raise TokenFailure("invalid_grant", "the assertion is for another audience")
        except jwt.PyJWTError as error:
            raise TokenFailure("invalid_grant", f"the assertion was rejected: {type(error).__name__}")
        if claims["jti"] in self.seen:
            raise TokenFailure("invalid_grant", "the assertion's jti was already used")
        self.seen.add(claims["jti"])
        if is_jag:
            if client is None:
                raise TokenFailure("invalid_client", "an ID-JAG needs client authentication", 401)
            if claims.get("client_id") != client.client_id:
                raise TokenFailure("invalid_grant", "the ID-JAG names another client")
            if claims.get("resource") != self.config.mcp_url:
                raise TokenFailure("invalid_grant", "the ID-JAG is for another resource")
        allowed = self.config.scopes
        scopes = form["scope"].split() if form.get("scope") else list(allowed)
        if not set(scopes) <= set(allowed):
            raise TokenFailure("invalid_scope", "scope not allowed for this assertion")
        return endpoint.provider._issue(client.client_id if client else claims["sub"], scopes, resource, claims["sub"],
                                        refresh=False)


def _trusted_keys(specs: list[str], flag: str) -> dict[str, bytes]:
    keys: dict[str, bytes] = {}
    for spec in specs:
        issuer, _, key_file = spec.rpartition("=")
        if not issuer or not key_file:
            raise SystemExit(f"{flag} {spec!r}: expected ISSUER=PUBLIC_KEY_PEM_FILE")
        with open(key_file, "rb") as handle:
            keys[issuer] = handle.read()
    return keys


def add_query(url: str, **params: str) -> str:
    parsed = urlparse(url)
    query = parse_qsl(parsed.query, keep_blank_values=True) + list(params.items())
    return urlunparse(parsed._replace(query=urlencode(query)))


class McpGuard:
    """ASGI: bearer-token check (and per-tool scope check) in front of the SDK's MCP app."""

    def __init__(self, app, provider: MemoryProvider, config: ServerConfig, stats: Stats) -> None:
        self.app, self.config, self.stats = app, config, stats
        self.dpop: Dpop | None = None
        self.backend = BearerAuthBackend(
            ProviderTokenVerifier(provider), resource_server_url=AnyHttpUrl(config.mcp_url)
        )

    async def _deny(self, send, status: int, challenge: list[str], error: str | None, description: str,
                    extra: list | None = None) -> None:
        body = json.dumps({"error": error or "invalid_request", "error_description": description}).encode()
        await send({
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", (("DPoP " if self.dpop else "Bearer ") + ", ".join(challenge)).encode()),
                *(extra or []),
            ],
        })
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope, receive, send) -> None:
        if self.dpop is not None:
            scope = await self.dpop.guard(scope, receive, send, self)
            if scope is None:
                return
        headers = Headers(scope=scope)
        authorization = headers.get("authorization", "")
        presented = authorization[:7].lower() == "bearer "
        if presented:
            self.stats.mcp_requests_with_token += 1
        result = await self.backend.authenticate(HTTPConnection(scope)) if presented else None
        if result is None:
            self.stats.mcp_requests_unauthorized += 1
            challenge = []
            if presented:
                challenge += ['error="invalid_token"', 'error_description="The access token is invalid or expired"']
            challenge.append(f'resource_metadata="{self.config.prm_url}"')
            if self.config.challenge_scope:
                challenge.append(f'scope="{self.config.challenge_scope}"')
            await self._drain(receive)
            await self._deny(send, 401, challenge, "invalid_token" if presented else None, "Authentication required")
            return
        credentials, user = result
        scope["auth"], scope["user"] = credentials, user
        if self.config.tool_scopes and scope["method"] == "POST":
            body = await self._drain(receive)
            missing = self._missing_scopes(body, set(user.scopes))
            if missing:
                self.stats.mcp_requests_forbidden += 1
                await self._deny(send, 403, [
                    'error="insufficient_scope"',
                    f'scope="{" ".join(missing)}"',
                    f'resource_metadata="{self.config.prm_url}"',
                    'error_description="The access token lacks a scope this tool requires"',
                ], "insufficient_scope", "The access token lacks a scope this tool requires")
                return
            receive = self._replay(body, receive)
        self.stats.mcp_requests_authorized += 1
        reset = auth_context_var.set(user)
        try:
            await self.app(scope, receive, send)
        finally:
            auth_context_var.reset(reset)

    @staticmethod
    async def _drain(receive) -> bytes:
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            body.extend(message.get("body", b""))
            if not message.get("more_body"):
                break
        return bytes(body)

    @staticmethod
    def _replay(body: bytes, receive):
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return replay

    def _missing_scopes(self, body: bytes, granted: set[str]) -> list[str]:
        try:
            decoded = json.loads(body) if body else None
        except ValueError:
            return []
        messages = decoded if isinstance(decoded, list) else [decoded]
        missing: list[str] = []
        for message in messages:
            if not isinstance(message, dict) or message.get("method") != "tools/call":
                continue
            params = message.get("params")
            name = params.get("name") if isinstance(params, dict) else None
            for needed in self.config.tool_scopes.get(name, []) if isinstance(name, str) else []:
                if needed not in granted and needed not in missing:
                    missing.append(needed)
        return missing


class Root:
    """ASGI: /mcp goes through the guard to the SDK's app (which also owns the lifespan);
    everything else is the authorization server / metadata app."""

    def __init__(self, mcp_app, guard: McpGuard, auth_app) -> None:
        self.mcp_app, self.guard, self.auth_app = mcp_app, guard, auth_app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] == "/mcp":
            await self.guard(scope, receive, send)
        elif scope["type"] == "http":
            await self.auth_app(scope, receive, send)
        else:
            await self.mcp_app(scope, receive, send)


def parse_client(spec: str) -> tuple[str, str | None, str]:
    client_id, _, rest = spec.partition(":")
    if not client_id or not rest:
        raise argparse.ArgumentTypeError(f"--client {spec!r}: expected ID[:SECRET]:REDIRECT_URI")
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", rest):  # no SECRET: the rest is the redirect URI
        return client_id, None, rest
    secret, _, redirect = rest.partition(":")
    if not redirect:
        raise argparse.ArgumentTypeError(f"--client {spec!r}: expected ID[:SECRET]:REDIRECT_URI")
    return client_id, secret, redirect


def build_app(args: argparse.Namespace, port: int):
    base = f"http://127.0.0.1:{port}"
    issuer_path = "/" + args.issuer_path.strip("/") if args.issuer_path and args.issuer_path.strip("/") else ""
    issuer = base + issuer_path
    mcp_url = base + "/mcp"
    scopes = args.scopes.split() if args.scopes else ["mcp"]
    tool_scopes: dict[str, list[str]] = {}
    for spec in args.tool_scope:
        tool, _, needed = spec.partition("=")
        if not tool or not needed:
            raise SystemExit(f"--tool-scope {spec!r}: expected TOOL=SCOPE")
        tool_scopes.setdefault(tool, []).extend(needed.split())
        for s in needed.split():
            if s not in scopes:
                scopes.append(s)
    config = ServerConfig(
        issuer=issuer,
        mcp_url=mcp_url,
        prm_url=str(build_resource_metadata_url(AnyHttpUrl(mcp_url))),
        token_url=issuer + "/token",
        scopes=scopes,
        offline_access=not args.no_offline_access,
        send_iss=not args.no_iss,
        token_lifetime=args.token_lifetime,
        challenge_scope=args.challenge_scope,
        tool_scopes=tool_scopes,
    )
    stats = Stats()
    provider = MemoryProvider(config, stats)
    all_scope = " ".join(config.all_scopes)

    for spec in args.client:
        client_id, secret, redirect = parse_client(spec)
        provider.clients[client_id] = OAuthClientInformationFull(
            client_id=client_id,
            client_secret=secret,
            redirect_uris=[AnyUrl(redirect)],
            token_endpoint_auth_method="client_secret_basic" if secret else "none",
            grant_types=["authorization_code", "refresh_token"],
            scope=all_scope,
        )
        if secret:
            config.flexible_secret_clients.add(client_id)
    for spec in args.client_credentials:
        client_id, _, secret = spec.partition(":")
        if not client_id or not secret:
            raise SystemExit(f"--client-credentials {spec!r}: expected ID:SECRET")
        provider.clients[client_id] = OAuthClientInformationFull(
            client_id=client_id, client_secret=secret, token_endpoint_auth_method="client_secret_basic",
            grant_types=["client_credentials"], scope=" ".join(scopes),
        )
        config.cc_clients.add(client_id)
        config.flexible_secret_clients.add(client_id)
    for spec in args.jwt_client:
        client_id, _, key_file = spec.partition(":")
        if not client_id or not key_file:
            raise SystemExit(f"--jwt-client {spec!r}: expected ID:PUBLIC_KEY_PEM_FILE")
        with open(key_file, "rb") as handle:
            config.jwt_clients[client_id] = handle.read()
        provider.clients[client_id] = OAuthClientInformationFull(
            client_id=client_id, token_endpoint_auth_method="private_key_jwt",
            grant_types=["client_credentials"], scope=" ".join(scopes),
        )
        config.cc_clients.add(client_id)

    # RFC 8414 metadata: the SDK's builder, then what this server adds
    registration = ClientRegistrationOptions(
        enabled=True, valid_scopes=config.all_scopes, default_scopes=config.all_scopes
    )
    metadata = build_metadata(AnyHttpUrl(issuer), None, registration, RevocationOptions(enabled=False))
    metadata.grant_types_supported = ["authorization_code", "refresh_token", "client_credentials"]
    metadata.token_endpoint_auth_methods_supported = ["none", "client_secret_basic", "client_secret_post"]
    if config.jwt_clients:
        metadata.token_endpoint_auth_methods_supported.append("private_key_jwt")
        metadata.token_endpoint_auth_signing_alg_values_supported = ["RS256", "ES256"]
    workload_keys = _trusted_keys(args.jwt_bearer_issuer, "--jwt-bearer-issuer")
    id_jag_keys = _trusted_keys(args.id_jag_issuer, "--id-jag-issuer")
    if workload_keys or id_jag_keys:
        metadata.grant_types_supported.append(JWT_BEARER_GRANT)
    metadata.scopes_supported = config.all_scopes
    metadata.authorization_response_iss_parameter_supported = True if config.send_iss else None
    metadata_body = json.loads(metadata.model_dump_json(exclude_none=True))
    metadata_body["issuer"] = issuer  # exact string (no normalisation of the path)
    if args.par:
        metadata_body["pushed_authorization_request_endpoint"] = issuer + "/par"
    dpop = Dpop(args, config, stats) if args.dpop else None
    if dpop is not None and dpop.algorithms:  # --dpop-algs "": listed nowhere, ES256 taken
        metadata_body["dpop_signing_alg_values_supported"] = dpop.algorithms

    async def as_metadata(request: Request) -> Response:
        return JSONResponse(metadata_body)

    authorize_handler = AuthorizationHandler(provider)

    async def authorize(request: Request) -> Response:
        stats.authorize_requests += 1
        params = request.query_params if request.method == "GET" else await request.form()
        client_id = params.get("client_id")
        stats.authorize_client_ids.append(client_id if isinstance(client_id, str) else None)
        if not isinstance(client_id, str) or client_id not in provider.clients:
            stats.unknown_client_authorizations += 1
        resource = params.get("resource")
        if isinstance(resource, str):
            stats.last_resource = stats.last_authorize_resource = resource
        if isinstance(params.get("scope"), str):
            stats.last_authorize_scope = params.get("scope")
        redirect_uri = params.get("redirect_uri")
        if config.refusals["redirect"] and isinstance(client_id, str) and client_id in provider.clients \
                and isinstance(redirect_uri, str) and redirect_uri in [str(u) for u in provider.clients[client_id].redirect_uris or ()]:
            # RFC 6749 4.1.2.1: a known client with a valid redirect URI hears its error there
            stats.refused_client_ids.append(client_id)
            error = config.refusals["redirect"].pop(0)
            state = params.get("state")
            extra = {"state": state} if isinstance(state, str) else {}
            if config.send_iss:
                extra["iss"] = issuer
            return Response(status_code=302, headers={"Location": add_query(redirect_uri, error=error, **extra),
                                                      "Cache-Control": "no-store"})
        response = await authorize_handler.handle(request)
        location = response.headers.get("location")
        if config.send_iss and response.status_code == 302 and location:
            response.headers["location"] = add_query(location, iss=issuer)
        return response

    registration_handler = RegistrationHandler(provider, registration)

    async def register(request: Request) -> Response:
        response = await registration_handler.handle(request)
        if not args.rfc7592 or response.status_code != 201:
            return response
        # RFC 7592 3: the client configuration endpoint and its access token
        info = json.loads(bytes(response.body))
        token = secrets.token_urlsafe(32)
        provider.registration_tokens[info["client_id"]] = token
        info.update(registration_client_uri=f"{issuer}/register/{info['client_id']}", registration_access_token=token)
        return JSONResponse(info, status_code=201, headers=NO_STORE)

    async def read_registration(request: Request) -> Response:
        """RFC 7592 2.1: the client's registration, for its registration access token."""
        stats.registration_reads += 1
        client_id = request.path_params["client_id"]
        given = request.headers.get("authorization", "")
        token = provider.registration_tokens.get(client_id)
        client = provider.clients.get(client_id)
        if client is None or token is None or given[:7].lower() != "bearer " \
                or not hmac.compare_digest(given[7:].strip().encode(), token.encode()):
            # RFC 7592 2.1: an unknown client (or a token that is not its own) is 401
            return JSONResponse({"error": "invalid_token"}, status_code=401,
                                headers={**NO_STORE, "WWW-Authenticate": 'Bearer error="invalid_token"'})
        info = json.loads(client.model_dump_json(exclude_none=True))
        info.update(registration_client_uri=f"{issuer}/register/{client_id}", registration_access_token=token)
        return JSONResponse(info, headers=NO_STORE)
    token_endpoint = TokenEndpoint(provider, config, stats)
    token_endpoint.dpop = dpop
    if workload_keys or id_jag_keys:
        token_endpoint.jwt_bearer = JwtBearerGrant(config, stats, workload_keys, id_jag_keys, args.jwt_bearer_error)

    async def pushed(request: Request) -> Response:
        """RFC 9126 2: the client authenticated as at the token endpoint; a request_uri."""
        stats.par_requests += 1
        form = dict(parse_qsl((await request.body()).decode("utf-8", "replace"), keep_blank_values=True))
        try:
            client = await token_endpoint.authenticate(request, form)
        except TokenFailure as failure:
            stats.par_refused += 1
            return failure.response()
        if form.get("client_id") != client.client_id or form.get("redirect_uri") not in [
                str(u) for u in client.redirect_uris or ()]:
            return TokenFailure("invalid_request", "client_id or redirect_uri do not match the client").response()
        return JSONResponse({"request_uri": "urn:ietf:params:oauth:request_uri:" + secrets.token_urlsafe(16),
                             "expires_in": 60}, status_code=201, headers=NO_STORE)

    async def stats_route(request: Request) -> Response:
        return JSONResponse(stats.as_json())

    async def expire(request: Request) -> Response:
        return JSONResponse({"expired": provider.expire_all()})

    async def revoke_refresh(request: Request) -> Response:
        return JSONResponse({"revoked": provider.revoke_refresh()})

    async def forget_client(request: Request) -> Response:
        return JSONResponse({"forgotten": provider.forget_client(request.query_params.get("client_id"))})

    async def refuse_client(request: Request) -> Response:
        at = request.query_params.get("at", "token")
        error = request.query_params.get("error", "invalid_client")
        times = int(request.query_params.get("times", "1"))
        if at not in config.refusals:
            return JSONResponse({"error": "at must be redirect or token"}, status_code=400)
        config.refusals[at] = [error] * times
        return JSONResponse({"refusing": at, "times": times})

    async def advertise_lifetime(request: Request) -> Response:
        seconds = request.query_params.get("seconds")
        config.advertised_lifetime = int(seconds) if seconds else None
        return JSONResponse({"advertised": config.advertised_lifetime})

    async def hold_refresh(request: Request) -> Response:
        token_endpoint.released = asyncio.Event()
        return JSONResponse({"holding": True})

    async def release_refresh(request: Request) -> Response:
        released = token_endpoint.released
        if released is not None:
            released.set()
        return JSONResponse({"held": stats.refresh_held})

    well_known_as = "/.well-known/oauth-authorization-server" + issuer_path
    routes = [
        *create_protected_resource_routes(
            # strings, so the model keeps them exact (AnyHttpUrl("http://h:p") would gain a "/")
            resource_url=mcp_url, authorization_servers=[issuer], scopes_supported=scopes  # type: ignore[arg-type]
        ),
        Route(well_known_as, as_metadata, methods=["GET"]),
        Route(issuer_path + "/authorize", authorize, methods=["GET", "POST"]),
        Route(issuer_path + "/token", token_endpoint.handle, methods=["POST"]),
        Route(issuer_path + "/register", register, methods=["POST"]),
        Route(issuer_path + "/register/{client_id}", read_registration, methods=["GET"]),
        Route(issuer_path + "/par", pushed, methods=["POST"]),
        Route("/stats", stats_route, methods=["GET"]),
        Route("/admin/expire", expire, methods=["POST"]),
        Route("/admin/revoke-refresh", revoke_refresh, methods=["POST"]),
        Route("/admin/forget-client", forget_client, methods=["POST"]),
        Route("/admin/refuse-client", refuse_client, methods=["POST"]),
        Route("/admin/hold-refresh", hold_refresh, methods=["POST"]),
        Route("/admin/advertise-lifetime", advertise_lifetime, methods=["POST"]),
        Route("/admin/release-refresh", release_refresh, methods=["POST"]),
    ]
    auth_app = Starlette(routes=routes)

    server = sdk_server.server
    mcp_app = server.streamable_http_app(
        streamable_http_path="/mcp",
        json_response=args.json_response,
        stateless_http=args.stateless,
        event_store=sdk_server.MemoryEventStore() if args.event_store else None,
        host="127.0.0.1",
    )
    server.tool(description="Report progress, then return the text.", structured_output=False)(
        sdk_server.echo_with_progress
    )
    if args.event_store:
        server.tool(description="Close this request's SSE stream, then answer the text.", structured_output=False)(
            sdk_server.echo_after_reconnect
        )
    guard = McpGuard(mcp_app, provider, config, stats)
    guard.dpop = dpop
    return Root(mcp_app, guard, auth_app), mcp_url


def main() -> None:
    parser = argparse.ArgumentParser(description="Loopback OAuth 2.1 authorization server + protected MCP server")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default 0: any free port)")
    parser.add_argument("--issuer-path", default="", metavar="PATH",
                        help="issuer path, e.g. /tenant (issuer http://127.0.0.1:PORT/tenant)")
    parser.add_argument("--scopes", default="mcp", help='space-separated resource scopes (default "mcp")')
    parser.add_argument("--no-offline-access", action="store_true",
                        help="leave offline_access out of the AS metadata scopes_supported")
    parser.add_argument("--no-iss", action="store_true",
                        help="neither advertise authorization_response_iss_parameter_supported nor send iss")
    parser.add_argument("--challenge-scope", metavar="SCOPE", help='add scope="SCOPE" to the 401 challenge')
    parser.add_argument("--tool-scope", action="append", default=[], metavar="TOOL=SCOPE",
                        help="tools/call of TOOL needs SCOPE (403 insufficient_scope otherwise); repeatable")
    parser.add_argument("--token-lifetime", type=int, default=3600, metavar="SECONDS",
                        help="access token lifetime (default 3600)")
    parser.add_argument("--client", action="append", default=[], metavar="ID[:SECRET]:REDIRECT_URI",
                        help="pre-registered client (public without SECRET); repeatable")
    parser.add_argument("--client-credentials", action="append", default=[], metavar="ID:SECRET",
                        help="confidential client for the client_credentials grant; repeatable")
    parser.add_argument("--jwt-client", action="append", default=[], metavar="ID:PUBLIC_KEY_PEM_FILE",
                        help="private_key_jwt client for the client_credentials grant; repeatable")
    parser.add_argument("--jwt-bearer-issuer", action="append", default=[], metavar="ISSUER=PUBLIC_KEY_PEM_FILE",
                        help="trust workload assertions of ISSUER for the jwt-bearer grant (RFC 7523); repeatable")
    parser.add_argument("--jwt-bearer-error", metavar="CODE",
                        help="refuse every jwt-bearer grant request (with an assertion) with this error code")
    parser.add_argument("--id-jag-issuer", action="append", default=[], metavar="ISSUER=PUBLIC_KEY_PEM_FILE",
                        help="accept ID-JAGs of the identity provider ISSUER for the jwt-bearer grant (SEP-990); repeatable")
    parser.add_argument("--stateless", action="store_true", help="no legacy sessions (stateless_http)")
    parser.add_argument("--json-response", action="store_true", help="answer with JSON instead of SSE")
    parser.add_argument("--event-store", action="store_true", help="keep SSE events so sessions can resume")
    parser.add_argument("--rfc7592", action="store_true",
                        help="registrations carry a registration_client_uri and access token, readable with GET (RFC 7592)")
    parser.add_argument("--par", action="store_true",
                        help="a pushed authorization request endpoint (RFC 9126; its request_uri is never redeemed)")
    parser.add_argument("--dpop", action="store_true", help="DPoP (RFC 9449): see the Dpop class")
    parser.add_argument("--dpop-algs", default="ES256", help='dpop_signing_alg_values_supported (default "ES256")')
    parser.add_argument("--dpop-bearer", action="store_true", help="answer Bearer (unbound) tokens to DPoP token requests")
    parser.add_argument("--dpop-nonce-as", action="store_true", help="the token endpoint demands a DPoP nonce")
    parser.add_argument("--dpop-nonce-rs", action="store_true", help="/mcp demands a DPoP nonce")
    parser.add_argument("--dpop-nonce-loop", action="store_true", help="every nonce demand gives a new one, none accepted")
    parser.add_argument("--dpop-nonce-value", default="", metavar="NONCE", help="the nonce given (default: random)")
    parser.add_argument("--dpop-mislabel", action="store_true", help="answer token_type DPoP to a request without a proof")
    args = parser.parse_args()

    import uvicorn

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(128)
    port = listener.getsockname()[1]
    app, mcp_url = build_app(args, port)
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=2)
    print(mcp_url, flush=True)
    anyio.run(uvicorn.Server(config).serve, [listener])


if __name__ == "__main__":
    main()
