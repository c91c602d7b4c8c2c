"""Signing in to one server: discovery, the client, the authorization, the tokens.

Everything here runs on the caller's thread and blocks on HTTP with bounded timeouts;
no actor calls it from a message handler (the sign-in command, a host's sign-in call
and the refresher's worker threads do). Each step follows the MCP authorization spec
(2025-11-25 and 2026-07-28 ``basic/authorization``); the pure checks live in
:mod:`.discovery`, :mod:`.registration` and :mod:`.tokens`, the HTTP in :mod:`.http`.

A failure is an :class:`~albedo_actors.errors.AuthError` naming the server with one
line saying what went wrong; no token, secret or code ever appears in a message.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
import time
import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from ..config import OAuthSettings, ServerConfig
from ..errors import AuthError, ClientRefused, ConfigError, StoreError
from . import discovery, dpop, grants, pkce, registration, tokens
from .addresses import AddressGuard
from .browser import check_authorization_url, open_authorization_url
from .callback import DEFAULT_LIFETIME_S, DEFAULT_PORT, CallbackListener
from .discovery import AuthDiscoveryError, AuthServerMetadata, Challenge, ResourceMetadata
from .http import AuthHttp, AuthHttpError, AuthReply
from .record import OAuthRecord, from_credentials, usable
from .registration import ClientRegistration, RegistrationError
from .tokens import TokenError, TokenSet
from ..wire import telemetry
from ..wire.jsonrpc import Json

if TYPE_CHECKING:  # the record's type only: no layer below actors/ loads the store
    from ..store.records import Credentials

log = telemetry.logger(__name__)  # records carry the server and trace ids

CLIENT_NAME = "albedo_actors"
# What a failure line adds when it forgot the kept registration (the next sign-in registers anew).
FORGOTTEN = "the kept client registration was forgotten (the authorization server may no longer know it): sign in again to register a new client"
# The errors that mean the authorization server does not know (or no longer accepts) the client.
CLIENT_REFUSALS = ("invalid_client", "unauthorized_client")
JWT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
ASSERTION_LIFETIME_S = 300

__all__ = [
    "FORGOTTEN",
    "Discovered",
    "SignIn",
    "discover",
    "probe_challenge",
    "refresh_record",
    "client_credentials_record",
    "check_client_issuer",
    "check_new_client",
    "store_record",
]


class SignInStore(Protocol):
    """The store as a sign-in uses it (:class:`albedo_actors.store.Store` is one); each
    method raises StoreError when the database fails."""

    def get_credentials(self, server: str) -> Credentials: ...

    def update_credentials(self, server: str, fn: Callable[[Credentials], Credentials]) -> Credentials: ...

    def get_oauth_client(self, issuer: str, redirect_uri: str) -> dict[str, Any] | None: ...

    def put_oauth_client(self, issuer: str, redirect_uri: str, client: dict[str, Any]) -> None: ...

    def delete_oauth_client(self, issuer: str, client_id: str) -> int: ...


def _url(server: ServerConfig) -> str:
    """The server's URL: only an HTTP server signs in.

    Raises:
        AuthError: it has none.
    """
    if server.type != "http" or not server.url:
        raise AuthError(server.name, "only HTTP servers sign in with OAuth")
    return server.url


@dataclass(frozen=True)
class Discovered:
    resource: ResourceMetadata
    server: AuthServerMetadata


@dataclass(frozen=True)
class Client:
    kind: str  # configured, registered, metadata_document, client_credentials
    client_id: str
    secret: str | None = dataclasses.field(default=None, repr=False)
    method: str = "none"
    kept: bool = False  # a registration kept from an earlier sign-in (not made by this one)


# -- discovery -----------------------------------------------------------------------------


def probe_challenge(http: AuthHttp, server: ServerConfig) -> Challenge | None:
    """POST an unauthenticated request and return the ``Bearer`` challenge of a 401, if any."""
    body = {"jsonrpc": "2.0", "id": 0, "method": "ping"}
    try:
        reply = http.post_json(_url(server), body, headers={"Accept": "application/json, text/event-stream"})
    except AuthHttpError as exc:
        raise AuthError(server.name, f"the server could not be asked: {exc.reason}") from None
    if reply.status in (401, 403):
        return discovery.bearer_challenge(reply.www_authenticate) or Challenge("bearer", {})
    return None


def _get_json(http: AuthHttp, name: str, url: str) -> tuple[AuthReply | None, Json]:
    try:
        reply = http.get(url)
    except AuthHttpError as exc:
        raise AuthError(name, f"discovery failed: {exc}") from None
    return reply, reply.json() if reply.status == 200 else None


def discover(http: AuthHttp, server: ServerConfig, challenge: Challenge | None) -> Discovered:
    """Protected Resource Metadata, then the first authorization server's metadata."""
    name, url = server.name, _url(server)
    hint = challenge.resource_metadata if challenge is not None else None
    resource = None
    for where in discovery.protected_resource_metadata_urls(url, hint):
        _, doc = _get_json(http, name, where)
        if not isinstance(doc, dict):
            continue
        try:
            resource = discovery.check_resource_metadata(doc, url)
        except AuthDiscoveryError as exc:
            # RFC 9728 3.3: a document for another resource is never used; stop here.
            raise AuthError(name, f"{exc}; no authorization request was made") from None
        break
    if resource is None:
        if hint is not None:
            raise AuthError(name, "the protected resource metadata its challenge names could not be read; "
                                  "no authorization request was made")
        return _discover_2025_03_26(http, server)
    issuer = resource.authorization_servers[0]
    reason = "no metadata was found"
    for where in discovery.authorization_server_metadata_urls(issuer):
        _, doc = _get_json(http, name, where)
        if not isinstance(doc, dict):
            continue
        if doc.get("issuer") != issuer:
            reason = "its metadata names another issuer"
            continue  # RFC 8414 3.3: not used
        try:
            metadata = discovery.check_authorization_server_metadata(doc, issuer, url)
        except AuthDiscoveryError as exc:
            raise AuthError(name, f"authorization server {issuer[:120]}: {exc}") from None
        return Discovered(resource, metadata)
    raise AuthError(name, f"authorization server {issuer[:120]}: {reason}; no authorization request was made")


def _discover_2025_03_26(http: AuthHttp, server: ServerConfig) -> Discovered:
    """A 2025-03-26 server publishes no resource metadata: its origin is the
    authorization server (RFC 8414 metadata there, else the default ``/authorize``,
    ``/token`` and ``/register``). Nothing leaves the MCP server's own origin, and no
    ``resource`` parameter is sent (that revision has none)."""
    url = _url(server)
    parts = urlsplit(url)
    origin = f"{parts.scheme.lower()}://{parts.netloc}"
    reply, doc = _get_json(http, server.name, origin + "/.well-known/oauth-authorization-server")
    if isinstance(doc, dict):
        try:
            metadata = discovery.check_authorization_server_metadata(doc, origin, url)
        except AuthDiscoveryError as exc:
            raise AuthError(server.name, f"it publishes no OAuth protected resource metadata, and the authorization "
                                         f"server metadata at its origin is not usable: {exc}") from None
    elif reply is not None and reply.status == 404:
        metadata = discovery.AuthServerMetadata(
            issuer=origin, authorization_endpoint=origin + "/authorize", token_endpoint=origin + "/token",
            registration_endpoint=origin + "/register", scopes_supported=(), code_challenge_methods_supported=("S256",),
            token_endpoint_auth_methods_supported=(), authorization_response_iss_parameter_supported=False,
            client_id_metadata_document_supported=False,
        )
    else:
        raise AuthError(server.name, "it publishes no OAuth protected resource metadata (RFC 9728) nor authorization "
                                     "server metadata, so albedo cannot find where to sign in")
    return Discovered(ResourceMetadata("", (origin,), ()), metadata)


# -- the client ------------------------------------------------------------------------------


def _secret(settings: OAuthSettings, environ: Mapping[str, str], name: str) -> str | None:
    variable = settings.client_secret_env_var
    if variable is None:
        return None
    return grants.named_variable(environ, name, "clientSecretEnvVar", variable)


def _method_for_secret(metadata: AuthServerMetadata, secret: str | None) -> str:
    if not secret:
        return "none"
    offered = metadata.token_endpoint_auth_methods_supported or ("client_secret_basic",)  # RFC 8414 2 default
    for method in ("client_secret_basic", "client_secret_post"):
        if method in offered:
            return method
    return "client_secret_basic"


def _registration_method(metadata: AuthServerMetadata) -> str:
    offered = metadata.token_endpoint_auth_methods_supported or ("client_secret_basic",)
    for method in ("none", "client_secret_basic", "client_secret_post"):
        if method in offered:
            return method
    return "none"


def choose_client(http: AuthHttp, store: SignInStore | None, server: ServerConfig, found: Discovered, redirect_uri: str,
                  environ: Mapping[str, str], *, new_client: bool = False,
                  reuse_after: float | None = None) -> Client:
    """A configured client (``extensions.json``, else the settings), else a Client ID
    Metadata Document, else a kept or new registration.

    A registration is kept per issuer and redirect URI (several servers of one
    authorization server share it) and reused, unless ``new_client`` (``sign-in
    --new-client``), or it was kept before ``reuse_after`` (the server's sign-out
    unbound it), or its RFC 7592 read, else a pushed authorization request (RFC 9126)
    where the authorization server takes them, says the authorization server no
    longer has it (then it is forgotten before anyone is sent to it). A new
    registration replaces the kept one of that issuer and redirect URI.

    Raises:
        AuthError: the registration failed or the server offers none.
        ConfigError: ``new_client`` for a server with a configured client.
    """
    settings = server.oauth or OAuthSettings()
    metadata = found.server
    if settings.client_id:
        if new_client:
            check_new_client(server, None)
        check_client_issuer(store, server, settings.client_id, metadata.issuer)
        secret = _secret(settings, environ, server.name)
        return Client("configured", settings.client_id, secret,
                      settings.token_endpoint_auth_method or _method_for_secret(metadata, secret))
    stored = current_record(store, server)
    if stored is not None and stored.configured_client_id:
        if new_client:
            check_new_client(server, stored)
        check_client_issuer(store, server, stored.configured_client_id, metadata.issuer)
        secret = stored.configured_client_secret
        return Client("configured", stored.configured_client_id, secret,
                      settings.token_endpoint_auth_method or _method_for_secret(metadata, secret))
    if settings.client_metadata_url and metadata.client_id_metadata_document_supported:
        return Client("metadata_document", settings.client_metadata_url, None, "none")
    kept = store.get_oauth_client(metadata.issuer, redirect_uri) if store is not None and not new_client else None
    if _reusable(kept, reuse_after):
        assert kept is not None
        kept = _still_registered(http, store, server, metadata.issuer, redirect_uri, kept)
        if kept is not None:
            kept = _still_known(http, store, server, found, redirect_uri, kept, environ)
        if kept is not None:
            return Client("registered", kept["client_id"], kept.get("client_secret"), kept.get("method") or "none",
                          kept=True)
    return _register(http, store, server, metadata, redirect_uri)


def _reusable(kept: dict[str, Any] | None, reuse_after: float | None) -> bool:
    """A kept registration with a client id, kept after ``reuse_after`` (a row from before
    the time was recorded counts as kept at 0: a sign-out unbinds it too)."""
    if not isinstance(kept, dict) or not isinstance(kept.get("client_id"), str):
        return False
    if reuse_after is None:
        return True
    at = kept.get("registered_at")
    return isinstance(at, (int, float)) and not isinstance(at, bool) and at > reuse_after


def _allow_http(server: ServerConfig) -> bool:
    """Plain-http OAuth URLs only for a plain-http MCP server (as discovery allows its endpoints)."""
    return urlsplit(_url(server)).scheme.lower() == "http"


def _still_registered(http: AuthHttp, store: SignInStore | None, server: ServerConfig, issuer: str, redirect_uri: str,
                      kept: dict[str, Any]) -> dict[str, Any] | None:
    """``kept``, unless its RFC 7592 read says the authorization server has forgotten it.

    Without a ``registration_client_uri`` and token there is nothing to read: ``kept``.
    The read is one bounded GET through the sign-in's own ``http`` (its address guard
    and deadline), the token as Bearer (RFC 7592 2.1). 401, 403, 404 or
    ``invalid_client``: the registration is forgotten and None returned (register
    afresh). A registration read back with a new secret or access token is kept with
    them (RFC 7592 2.1: the old ones are discarded). A failed or unreadable read
    blocks nothing: ``kept`` is used, and the failure rules of the sign-in recover if
    it really is gone.
    """
    uri, token = kept.get("registration_client_uri"), kept.get("registration_access_token")
    if not (isinstance(uri, str) and isinstance(token, str)):
        return kept
    client_id = kept["client_id"]
    try:
        reply = http.get(uri, headers={"Authorization": f"Bearer {token}"})
    except AuthHttpError as exc:
        log.info("server %r: the kept client registration could not be read (%s); it is used as it is",
                 server.name, exc)
        return kept
    outcome, found = registration.read_outcome(reply.status, reply.body, reply.content_type, client_id,
                                               redirect_uri=redirect_uri, requested_method=kept.get("method"),
                                               allow_http=_allow_http(server))
    if outcome == registration.GONE:
        log.info("server %r: its authorization server no longer has the kept client registration (HTTP %s); "
                 "registering a new client", server.name, reply.status)
        forget_registration(store, issuer, client_id)  # a failure: the new registration replaces it anyway
        return None
    if outcome == registration.ALIVE and found is not None:
        fresh = dict(kept)
        if found.client_secret:
            fresh["client_secret"] = found.client_secret
        if found.registration_client_uri and found.registration_access_token:
            fresh["registration_client_uri"] = found.registration_client_uri
            fresh["registration_access_token"] = found.registration_access_token
        if fresh != kept and store is not None:
            try:
                store.put_oauth_client(issuer, redirect_uri, fresh)
            except StoreError as exc:  # this sign-in uses them all the same
                log.warning("server %r: the renewed client registration was not kept: %s", server.name, exc)
        return fresh
    return kept


def _still_known(http: AuthHttp, store: SignInStore | None, server: ServerConfig, found: Discovered, redirect_uri: str,
                 kept: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any] | None:
    """``kept``, unless a pushed authorization request (RFC 9126) says the authorization
    server does not know it any more.

    Only for a kept registration that cannot be read back (no RFC 7592 endpoint) at an
    authorization server that publishes ``pushed_authorization_request_endpoint``. The
    request is an authorization request of its own (fresh PKCE challenge and state,
    the client authenticated as at the token endpoint), pushed and then left unused:
    the browser is sent the usual authorization URL, so nothing else changes. A 400 or
    401 ``invalid_client`` or ``unauthorized_client`` (RFC 9126 2.3) means it is gone:
    forgotten, and None returned (register afresh). Any other answer, or none, tells
    nothing: ``kept`` is used, and the sign-in's own failure rules recover if need be.
    """
    endpoint = found.server.pushed_authorization_request_endpoint
    if endpoint is None or isinstance(kept.get("registration_client_uri"), str):
        return kept
    client_id = kept["client_id"]
    form = {"response_type": "code", "client_id": client_id, "redirect_uri": redirect_uri,
            "code_challenge": pkce.challenge_s256(pkce.new_verifier()), "code_challenge_method": "S256",
            "state": pkce.new_state()}
    if found.resource.resource:
        form["resource"] = found.resource.resource
    client = Client("registered", client_id, kept.get("client_secret"), kept.get("method") or "none")
    try:
        headers = _authenticate(form, client, endpoint, found.server.issuer, server.oauth, environ, server.name)
        form["client_id"] = client_id  # RFC 9126 2.1: an authorization request names its client, however authenticated
        reply = http.post_form(endpoint, form, headers)
    except (AuthError, AuthHttpError) as exc:
        log.info("server %r: the kept client registration could not be checked with a pushed authorization request "
                 "(%s); it is used as it is", server.name, exc)
        return kept
    if reply.status in (400, 401) and _error_code(reply) in CLIENT_REFUSALS:
        log.info("server %r: its authorization server refused a pushed authorization request of the kept client "
                 "(HTTP %s, %s); registering a new client", server.name, reply.status, _error_code(reply))
        forget_registration(store, found.server.issuer, client_id)  # a failure: the new registration replaces it anyway
        return None
    return kept


def _register(http: AuthHttp, store: SignInStore | None, server: ServerConfig, metadata: AuthServerMetadata,
              redirect_uri: str) -> Client:
    """A new dynamic registration (RFC 7591), kept for (issuer, redirect URI) with its
    RFC 7592 configuration endpoint and token when the answer gives them.

    Raises:
        AuthError: the server offers no registration, or it failed or was refused.
    """
    if metadata.registration_endpoint is None:
        raise AuthError(server.name, "the authorization server offers no client registration; "
                                     'register albedo there and set "oauth": {"clientId": ...} for this server')
    wanted = _registration_method(metadata)
    offline = discovery.OFFLINE_ACCESS in metadata.scopes_supported
    document = registration.registration_request(CLIENT_NAME, redirect_uri, offline_access=offline, auth_method=wanted)
    try:
        reply = http.post_json(metadata.registration_endpoint, document)
    except AuthHttpError as exc:
        raise AuthError(server.name, f"client registration failed: {exc}") from None
    if reply.status not in (200, 201):
        raise ClientRefused(server.name, _registration_refused(server, reply, redirect_uri))
    try:
        client: ClientRegistration = registration.parse_registration(
            reply.body, reply.content_type, redirect_uri=redirect_uri, requested_method=wanted,
            allow_http=_allow_http(server))
    except RegistrationError as exc:
        raise AuthError(server.name, f"client registration: {exc}") from None
    if store is not None:
        kept: dict[str, Any] = {
            "client_id": client.client_id, "client_secret": client.client_secret,
            "method": client.token_endpoint_auth_method, "redirect_uri": redirect_uri, "registered_at": time.time(),
        }
        if client.registration_client_uri and client.registration_access_token:
            kept.update(registration_client_uri=client.registration_client_uri,
                        registration_access_token=client.registration_access_token)
        store.put_oauth_client(metadata.issuer, redirect_uri, kept)
    return Client("registered", client.client_id, client.client_secret, client.token_endpoint_auth_method)


def _registration_refused(server: ServerConfig, reply: AuthReply, redirect_uri: str) -> str:
    """What a refused registration says (RFC 7591 3.2.2): the HTTP status, the error code and
    description the answer gives, and the way on. ``invalid_redirect_uri`` (an authorization
    server, often an OpenID provider, that does not take albedo's loopback redirect URI)
    names the redirect URI refused and says to register a client there by hand."""
    code, description = registration.refusal(reply.body, reply.content_type) if 400 <= reply.status < 500 \
        else (None, None)
    said = f"HTTP {reply.status}" + (f", {code}" if code else "") + (f": {description}" if description else "")
    message = f"client registration was refused ({said})"
    if code == "invalid_redirect_uri":
        message += (f"; the authorization server does not accept albedo's loopback redirect URI {redirect_uri}: "
                    f"register a client there by hand that allows http://127.0.0.1 redirect URIs on any port (a native "
                    f"application), and give it with `albedo-mcp edit {server.name} --oauth-client-id ID`")
    elif code == "invalid_client_metadata":
        message += (f"; the authorization server does not take the client albedo asks for (a public native client "
                    f"with the authorization code grant): register one there by hand and give it with "
                    f"`albedo-mcp edit {server.name} --oauth-client-id ID`")
    return message


def check_new_client(server: ServerConfig, stored: OAuthRecord | None) -> None:
    """Refuse ``sign-in --new-client`` for a server that signs in with a client the user
    configured (``oauth.clientId``, a client given with ``--oauth-client-id``) or with a
    grant that registers none: albedo never replaces those.

    Raises:
        ConfigError: the server has such a client.
    """
    settings = server.oauth or OAuthSettings()
    name = server.name
    if settings.client_id:
        where = f'"oauth": {{"clientId": "{settings.client_id[:64]}"}} in extensions.json'
    elif settings.grant != "authorization_code":
        where = f'the {settings.grant} grant (it registers no client)'
    elif stored is not None and stored.configured_client_id:
        where = f"the client {stored.configured_client_id[:64]} given with --oauth-client-id"
    else:
        return
    raise ConfigError(f"server {name!r}: --new-client replaces only a client albedo registered itself; this server "
                      f"signs in with {where}, which albedo never replaces (sign in without --new-client)")


def check_client_issuer(store: SignInStore | None, server: ServerConfig, client_id: str, issuer: str) -> None:
    """Refuse a configured client at another issuer than the one it was first used with.

    A client registered by hand (``oauth.clientId``, or given to the settings) belongs to
    one authorization server. The issuer of its first successful sign-in is recorded
    with the server's OAuth record (``bound_issuer``, trust on first use); when later
    metadata names another issuer, the sign-in stops here, before the client id or its
    secret is sent anywhere. ``sign-out`` (or giving the client again with
    ``--oauth-client-id``) forgets the binding, for an authorization server that really
    moved. The binding is looked up whatever URL the stored record was made for, so an
    edited URL does not reset it.
    """
    if store is None:
        return
    stored = from_credentials(store.get_credentials(server.name))
    if stored is None or stored.bound_client_id != client_id or not stored.bound_issuer:
        return
    if stored.bound_issuer != issuer:
        raise AuthError(server.name, f"its metadata names the authorization server {issuer[:120]}, but the configured client "
                                     f"{client_id[:64]} belongs to {stored.bound_issuer[:120]}; nothing was sent to the new one "
                                     f"(if the server has really moved, run `albedo-mcp sign-out {server.name}` and sign in again)")


def _bound(record: OAuthRecord, client: Client, issuer: str) -> OAuthRecord:
    """``record`` with a configured client bound to ``issuer`` (others leave the binding as it is)."""
    if client.kind in ("configured", "client_credentials"):
        return dataclasses.replace(record, bound_client_id=client.client_id, bound_issuer=issuer)
    return record


def _authenticate(form: dict, client: Client, token_endpoint: str, issuer: str | None, settings: OAuthSettings | None,
                  environ: Mapping[str, str], name: str) -> dict:
    """Add the client's authentication to a token request ``form``; the headers to send."""
    if client.method == "private_key_jwt":
        # RFC 7523 3: the audience identifies the authorization server: its issuer.
        form.update({"client_id": client.client_id, "client_assertion_type": JWT_ASSERTION_TYPE,
                     "client_assertion": _assertion(client.client_id, issuer or token_endpoint, settings, environ, name)})
        return {}
    try:
        headers, extra = tokens.client_auth(client.client_id, client.secret, client.method)
    except ValueError as exc:
        raise AuthError(name, str(exc)) from None
    form.update(extra)
    if headers:
        form.pop("client_id", None)  # HTTP Basic names the client (RFC 6749 2.3.1)
    return headers


def _renewal(client: Client, token_endpoint: str, issuer: str | None, settings: OAuthSettings | None,
             environ: Mapping[str, str], name: str) -> Callable[[], str] | None:
    """For a ``private_key_jwt`` client: how to sign a new client assertion (a DPoP nonce
    retry sends the token request again, and an assertion's ``jti`` is single-use)."""
    if client.method != "private_key_jwt":
        return None
    return lambda: _assertion(client.client_id, issuer or token_endpoint, settings, environ, name)


def _assertion(client_id: str, audience: str, settings: OAuthSettings | None, environ: Mapping[str, str], name: str) -> str:
    """A ``private_key_jwt`` client assertion (RFC 7523 3, RFC 7521 4.2), signed with pyjwt."""
    import jwt  # pyjwt: imported only by servers that use a private key

    variable = settings.private_key_env_var if settings else None
    key = environ.get(variable) if variable else None
    if settings is None or not key:
        raise ConfigError(f"server {name!r}: oauth.privateKeyEnvVar names ${variable}, which is not set in the host's environment")
    now = int(time.time())
    claims = {"iss": client_id, "sub": client_id, "aud": audience, "iat": now, "exp": now + ASSERTION_LIFETIME_S,
              "jti": str(uuid.uuid4())}
    try:
        return jwt.encode(claims, key, algorithm=settings.signing_algorithm)
    except Exception as exc:  # a key that does not parse or does not fit the algorithm
        raise ConfigError(f"server {name!r}: the private key in ${variable} cannot sign {settings.signing_algorithm} ({type(exc).__name__})") from None


def _token_request(http: AuthHttp, name: str, endpoint: str, form: dict, headers: dict,
                   prover: dpop.Prover | None = None, *, parse: Callable[[AuthReply], Any] | None = None,
                   renew: Callable[[], str] | None = None) -> Any:
    """One token request (every grant's, and every refresh's): the answer's checked tokens
    (a :class:`TokenSet`), or what ``parse`` makes of the reply (the token exchange of
    :mod:`.grants`, whose answer is no access token).

    With a ``prover`` (DPoP, RFC 9449 5) each POST carries a fresh proof (no ``ath``);
    a 400 ``use_dpop_nonce`` carrying a usable ``DPoP-Nonce`` is answered once with a new
    proof holding that nonce (RFC 9449 8), a second one is an error. Any answer's
    ``DPoP-Nonce`` is kept for the origin. A DPoP-bound token to a request that sent no
    proof is refused (it could never be used); a ``Bearer`` answer to a proof is
    accepted (RFC 9449 5: the server may issue one) and used as Bearer. ``renew`` (a
    ``private_key_jwt`` client's) signs the new client assertion the retry carries.

    Raises:
        TokenError: refused, unreachable, or an answer that cannot be used.
    """
    retried = False
    while True:
        sent = headers if prover is None else {**headers, "DPoP": prover.proof("POST", endpoint)}
        try:
            reply = http.post_form(endpoint, form, sent)
        except AuthHttpError as exc:
            raise TokenError(f"token request failed: {exc}", error="unreachable", transient=exc.transient) from None
        fresh_nonce = reply.dpop_nonce is not None and dpop.NONCES.put(endpoint, reply.dpop_nonce)
        if prover is not None and reply.status == 400 and _error_code(reply) == "use_dpop_nonce":
            if not fresh_nonce:
                raise TokenError("the authorization server asked for a DPoP nonce (use_dpop_nonce) without giving a "
                                 "usable one", error="use_dpop_nonce", transient=False, status=400)
            if retried:
                raise TokenError("the authorization server asked again for a new DPoP nonce (use_dpop_nonce) after "
                                 "albedo sent the one it gave; albedo asks once", error="use_dpop_nonce", transient=True,
                                 status=400)
            retried = True
            if renew is not None and "client_assertion" in form:
                form = {**form, "client_assertion": renew()}
            continue
        if parse is not None:
            return parse(reply)
        granted = tokens.parse_token_response(reply.body, reply.status, time.time())
        if prover is None and granted.token_type == "DPoP":
            raise TokenError("the authorization server issued a DPoP-bound token to a request without a DPoP proof",
                             error="invalid_response", transient=False, status=reply.status)
        return granted


def _error_code(reply: AuthReply) -> str | None:
    data = reply.json()
    return tokens._error_code(data.get("error")) if isinstance(data, dict) else None


def _dpop_prover(server: ServerConfig, metadata: AuthServerMetadata, previous: OAuthRecord | None) -> dpop.Prover | None:
    """The DPoP key of a new sign-in (the stored one, else a new one), or None without DPoP.

    DPoP is used when ``"oauth": {"dpop": true}``, or, unless ``"dpop": false``, when the
    authorization server lists ``dpop_signing_alg_values_supported`` (RFC 9449 5.1).
    albedo signs ES256 only: a server listing other algorithms only is not sent proofs
    (Bearer, as without DPoP), and with ``"dpop": true`` the sign-in stops.

    Raises:
        AuthError: DPoP is configured and the server lists algorithms without ES256.
    """
    wanted = server.oauth.dpop if server.oauth is not None else None
    algorithms = metadata.dpop_signing_alg_values_supported
    if wanted is False or (wanted is None and not algorithms):
        return None
    if algorithms and dpop.ALGORITHM not in algorithms:
        if wanted:
            shown = ", ".join(a[:16] for a in algorithms[:8])
            raise AuthError(server.name, f"its authorization server takes DPoP proofs signed with {shown} only, and albedo "
                                         f'signs them with {dpop.ALGORITHM}; set "dpop": false to sign in without DPoP')
        return None
    stored = previous.dpop_key if previous is not None else None
    if stored:
        try:
            return dpop.prover(stored)
        except dpop.DpopKeyError:
            pass  # a damaged key: this sign-in makes a new one
    return dpop.prover(dpop.new_key())


def _record_prover(record: OAuthRecord) -> dpop.Prover | None:
    """The DPoP key of a stored sign-in, for its refresh (the same key: RFC 9449 5).

    Raises:
        TokenError: the token is DPoP-bound and its key is missing or unreadable (never
            a Bearer fallback: sign in again).
    """
    if record.dpop_key:
        try:
            return dpop.prover(record.dpop_key)
        except dpop.DpopKeyError:
            pass
    elif not record.dpop_bound:
        return None
    raise TokenError("its DPoP key is missing or unreadable, so its DPoP-bound tokens cannot be used; sign in again",
                     error="dpop_key", transient=False)


@functools.cache
def _lent() -> grants.Lent:
    """What the grants of :mod:`.grants` use from here (every token request goes through ``_token_request``).

    Built once, at the first grant (module functions only: two threads building it at
    once would build equal ones).
    """
    return grants.Lent(token_request=_token_request, authenticate=_authenticate, client=Client, secret=_secret,
                       method_for_secret=_method_for_secret, check_client_issuer=check_client_issuer,
                       scope_for_credentials=_scope_for_credentials, dpop_prover=_dpop_prover,
                       record_prover=_record_prover, renewal=_renewal)


# -- storing ----------------------------------------------------------------------------------


def store_record(store: SignInStore | None, name: str, record: OAuthRecord) -> None:
    """Write ``record`` as the server's OAuth record, keeping its other credentials."""
    if store is None:
        return
    store.update_credentials(name, lambda old: dataclasses.replace(old, oauth=record.to_json()))


def forget_registration(store: SignInStore | None, issuer: str, client_id: str) -> str:
    """Forget a kept registration (every redirect URI it was kept for); what to tell the user.

    Other servers that signed in with that client keep their tokens: a refresh uses
    the client id and secret recorded with the tokens, never the kept registration.
    """
    if store is None:
        return "sign in again to register a new client"
    try:
        store.delete_oauth_client(issuer, client_id)
    except StoreError:
        return "albedo could not forget the kept client registration (the database failed): sign in with --new-client"
    return FORGOTTEN


def current_record(store: SignInStore | None, server: ServerConfig) -> OAuthRecord | None:
    if store is None:
        return None
    return usable(from_credentials(store.get_credentials(server.name)), server.url)


# -- the authorization code flow -------------------------------------------------------------

Agent = Callable[[str, CallbackListener], None]


class _Refused(Exception):
    """The authorization server refused ``client`` (one of :data:`CLIENT_REFUSALS`):
    :meth:`SignIn._authorize` forgets it and may register anew. ``detail`` is the one-line
    reason, without the server's name."""

    def __init__(self, client: Client, error: str, detail: str) -> None:
        super().__init__(detail)
        self.client, self.error, self.detail = client, error, detail


class SignIn:
    """One sign-in to one server (authorization code + PKCE, or client credentials).

    ``run()`` blocks until it is signed in, fails, times out or is cancelled
    (``cancel()`` from another thread). ``agent(url, listener)`` takes the user to the
    authorization URL; the default opens the browser (unless ``ALBEDO_NO_BROWSER``)
    and ``announce(url)`` shows the URL either way. A callback URL the user pastes goes
    to ``offer(url)``; it races the loopback listener and the first valid one wins.

    ``new_client`` registers a new client instead of reusing the one kept for the
    authorization server (``sign-in --new-client``). A client albedo registered that
    the authorization server refuses (``invalid_client`` or ``unauthorized_client``, at
    the callback or the token endpoint) is forgotten and a new one registered, once:
    the user is sent to a second authorization URL, announced after :attr:`notice` is
    set to say why; a second refusal ends the sign-in. A sign-in that reused a kept
    registration and got no callback (timed out, cancelled) forgets that registration
    and says so in its error (:data:`FORGOTTEN`, also kept in
    :attr:`forgot_registration`): the next sign-in registers afresh; so does a Ctrl-C
    (``KeyboardInterrupt``) while it waits. RFC 6749 4.1.2.1 has an authorization
    server show its error to the user, never redirect, when it does not know the
    client: the browser shows it and the callback never comes, so, unless the
    registration can be read back (RFC 7592, see :func:`choose_client`), running out of
    time (or the user giving up) is the one sign of a forgotten client albedo can see.
    """

    def __init__(
        self,
        server: ServerConfig,
        store: SignInStore | None,
        *,
        environ: Mapping[str, str] | None = None,
        agent: Agent | None = None,
        announce: Callable[[str], None] | None = None,
        port: int = DEFAULT_PORT,
        lifetime: float = DEFAULT_LIFETIME_S,
        http: AuthHttp | None = None,
        id_token: grants.IdTokenProvider | None = None,
        new_client: bool = False,
    ) -> None:
        self.url = _url(server)
        self._new_client = new_client
        # What this sign-in's error said of the kept registration it forgot (None: it forgot none).
        self.forgot_registration: str | None = None
        # Why the user is sent to a second authorization URL (None: not sent again); set
        # just before that URL is announced (see _authorize).
        self.notice: str | None = None
        self._id_token = id_token  # the user's id_token, for the enterprise grant (see grants.IdTokenProvider)
        self.server = server
        self.store = store
        self.environ = dict(os.environ) if environ is None else dict(environ)
        self._agent = agent
        self._announce = announce or (lambda url: None)
        self._port = port
        self._lifetime = lifetime
        self._http = http
        self._lock = threading.Lock()
        self._listener: CallbackListener | None = None
        self._cancelled = False
        self._pasted: list[str] = []

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            listener = self._listener
        if listener is not None:
            listener.cancel()

    def offer(self, url: str) -> bool:
        """A callback URL pasted by the user; True when it was taken."""
        with self._lock:
            listener = self._listener
            if listener is None:
                self._pasted.append(url)
                return True
        return listener.offer(url)

    def run(self, challenge: Challenge | None = None) -> OAuthRecord:
        # Its span carries the server's name only: never a token, secret or assertion.
        with telemetry.step("sign-in", self.server.name):
            return self._run(challenge)

    def _run(self, challenge: Challenge | None) -> OAuthRecord:
        name = self.server.name
        own_http = self._http is None
        # Every request of the sign-in goes only where the server's own kind of address allows
        # (a public server cannot send albedo to a link-local, private or metadata address).
        http = self._http or AuthHttp(verify=self.server.ca_file or True, guard=AddressGuard(self.url))
        try:
            previous = current_record(self.store, self.server)
            if self._new_client:
                check_new_client(self.server, previous)  # before anything is sent
            if challenge is None and previous is not None and (previous.resource_metadata or previous.challenge_scope):
                challenge = Challenge("bearer", {k: v for k, v in (("resource_metadata", previous.resource_metadata),
                                                                 ("scope", previous.challenge_scope)) if v})
            if challenge is None:
                challenge = probe_challenge(http, self.server)
            found = discover(http, self.server, challenge)
            settings = self.server.oauth or OAuthSettings()
            if settings.grant == "client_credentials":
                record = client_credentials_record(http, self.server, found, challenge, self.environ, previous, self.store)
            elif settings.grant in ("jwt-bearer", "enterprise"):  # workload identity, enterprise-managed authorization
                record = grants.grant_record(_lent(), http, self.server, found, challenge, self.environ, previous,
                                             self.store, id_token=self._id_token)
            else:
                record = self._authorize(http, found, challenge, previous)
            store_record(self.store, name, record)
            return record
        finally:
            if own_http:
                http.close()

    def _authorize(self, http: AuthHttp, found: Discovered, challenge: Challenge | None,
                   previous: OAuthRecord | None) -> OAuthRecord:
        """The authorization code flow, with one recovery: a client albedo registered that
        the authorization server refuses (``invalid_client`` or ``unauthorized_client``,
        at the callback or the token endpoint) is forgotten, a new one is registered and
        the user is sent once more, to a new authorization URL (:attr:`notice` says why
        before it is announced). A second refusal is the error; so is the first one of a
        client the user configured (albedo never replaces it)."""
        name = self.server.name
        issuer = found.server.issuer
        new_client = self._new_client
        first: _Refused | None = None
        while True:
            try:
                return self._authorize_once(http, found, challenge, previous, new_client)
            except _Refused as refused:
                forgot = self._forget(refused.client, issuer)
                with self._lock:
                    cancelled = self._cancelled
                if refused.client.kind != "registered" or cancelled:
                    raise AuthError(name, f"{refused.detail}{forgot}") from None
                if first is not None:
                    raise ClientRefused(name, f"the authorization server refused the client albedo registered ({first.error}), "
                                          f"and the new one registered in its place too ({refused.error}): it does not "
                                          f"accept the clients albedo registers; ask its administrator for a client and "
                                          f"give it with `albedo-mcp edit {name} --oauth-client-id ID`") from None
                first = refused
                log.info("server %r: the authorization server refused the client albedo registered (%s); "
                         "registering a new one and asking again", name, refused.error)
                self.notice = (f"server {name!r}: the authorization server refused the client albedo registered "
                               f"({refused.error}), so albedo forgot it and registered a new one: sign in once more "
                               f"at the new URL")
                new_client = True

    def _authorize_once(self, http: AuthHttp, found: Discovered, challenge: Challenge | None,
                        previous: OAuthRecord | None, new_client: bool) -> OAuthRecord:
        """One authorization: a client, the user sent to the authorization URL, its
        callback, the code exchanged.

        Raises:
            _Refused: the authorization server refused the client (``invalid_client`` or
                ``unauthorized_client``) at the callback or the token endpoint.
            AuthError: any other failure.
        """
        name = self.server.name
        metadata = found.server
        step_up = previous.step_up if previous is not None else None
        scope = discovery.choose_scope(step_up, challenge.scope if challenge else None,
                                       found.resource.scopes_supported, metadata.scopes_supported)
        prover = _dpop_prover(self.server, metadata, previous)  # before the user is sent anywhere
        state = pkce.new_state()
        verifier = pkce.new_verifier()
        with self._lock:
            if self._cancelled:
                raise AuthError(name, "the sign-in was cancelled")
        listener = CallbackListener(state, port=self._port, lifetime=self._lifetime)
        try:
            with self._lock:
                self._listener = listener
                pasted, self._pasted = self._pasted, []
                cancelled = self._cancelled
            if cancelled:
                listener.cancel()
            client = choose_client(http, self.store, self.server, found, listener.redirect_uri, self.environ,
                                   new_client=new_client,
                                   reuse_after=previous.reuse_registrations_after if previous is not None else None)
            url = discovery.authorization_url(metadata.authorization_endpoint, client.client_id, listener.redirect_uri,
                                              pkce.challenge_s256(verifier), state, scope, found.resource.resource or None)
            try:
                check_authorization_url(url)
            except ValueError as exc:
                raise AuthError(name, f"the authorization URL cannot be opened: {exc}") from None
            try:
                self._announce(url)
                (self._agent or self._browser)(url, listener)
                for item in pasted:
                    listener.offer(item)
                result = listener.wait()
            except KeyboardInterrupt:  # Ctrl-C on the command's own thread: a cancel, as cancel() is
                if client.kept:
                    self._forget(client, metadata.issuer)
                raise
            if result is None:
                why = "cancelled" if listener.cancelled else "not completed in time"
                # A kept client the authorization server forgot is refused at its
                # authorization endpoint, in the browser, with no redirect back: no
                # callback is all we see of it.
                forgot = self._forget(client, metadata.issuer) if client.kept else ""
                raise AuthError(name, f"the sign-in was {why}{forgot}")
        finally:
            with self._lock:
                self._listener = None
            listener.close()
        try:
            discovery.check_iss(result, metadata.issuer, metadata.authorization_response_iss_parameter_supported)
        except AuthDiscoveryError as exc:
            raise AuthError(name, f"{exc}; the response was not used") from None
        if result.get("error"):
            # The redirect can come from anyone: only a well-formed RFC 6749 error code is
            # shown; error_description (free text) is not repeated.
            refusal = tokens._error_code(result["error"]) or "an unreadable error"
            if refusal in CLIENT_REFUSALS:
                raise _Refused(client, refusal, f"the authorization server refused: {refusal}")
            raise AuthError(name, f"the authorization server refused: {refusal}")
        code = result.get("code")
        if not code:
            raise AuthError(name, "the authorization response carried no code")
        form = tokens.code_grant(code, listener.redirect_uri, verifier, client.client_id, found.resource.resource or None)
        headers = _authenticate(form, client, metadata.token_endpoint, metadata.issuer, self.server.oauth, self.environ, name)
        try:
            granted = _token_request(http, name, metadata.token_endpoint, form, headers, prover,
                                     renew=_renewal(client, metadata.token_endpoint, metadata.issuer, self.server.oauth,
                                                    self.environ, name))
        except TokenError as exc:
            if exc.error in CLIENT_REFUSALS:
                raise _Refused(client, exc.error, str(exc)) from None
            raise AuthError(name, str(exc)) from None
        base = previous or OAuthRecord(url=self.url)
        record = base.replace(
            url=self.server.url, resource=found.resource.resource or None, issuer=metadata.issuer,
            token_endpoint=metadata.token_endpoint, client_kind=client.kind, client_id=client.client_id,
            client_secret=client.secret if client.kind == "registered" else None, auth_method=client.method,
            step_up=None, resource_metadata=challenge.resource_metadata if challenge else None,
            challenge_scope=challenge.scope if challenge else None, dpop_key=prover.jwk if prover is not None else None,
        )
        return _bound(record, client, metadata.issuer).with_tokens(granted, requested_scope=scope)

    def _forget(self, client: Client, issuer: str) -> str:
        """Forget ``client`` when it is a dynamic registration; what the error line adds."""
        if client.kind != "registered":
            return ""
        self.forgot_registration = forget_registration(self.store, issuer, client.client_id)
        return "; " + self.forgot_registration

    def _browser(self, url: str, listener: CallbackListener) -> None:
        try:
            open_authorization_url(url, self.environ)
        except ValueError as exc:
            raise AuthError(self.server.name, f"the authorization URL cannot be opened: {exc}") from None


def follow_redirect_agent(http_factory: Callable[[], AuthHttp] = AuthHttp) -> Agent:
    """An agent that plays the browser for an authorization server that approves at once.

    It GETs the authorization URL without following redirects and hands the
    ``Location`` to the listener, as a browser would deliver it (tests, the
    conformance client). Nothing is offered when there is no redirect.
    """

    def agent(url: str, listener: CallbackListener) -> None:
        with http_factory() as http:
            try:
                reply = http.get(url, accept="text/html")
            except AuthHttpError:
                listener.cancel()
                return
        if reply.location and 300 <= reply.status < 400:
            listener.offer(reply.location)
        else:
            listener.cancel()

    return agent


def authorizer(store: SignInStore | None, *, environ: Mapping[str, str] | None = None, agent: Agent | None = None,
               announce: Callable[[str], None] | None = None, port: int = DEFAULT_PORT,
               lifetime: float = DEFAULT_LIFETIME_S,
               id_token: grants.IdTokenProvider | None = None) -> Callable[[ServerConfig, Challenge | None], OAuthRecord]:
    """A sign-in a link may run by itself when a server asks (see ``ServerAuth``).

    ``id_token(server)`` is the host's source of the user's OpenID Connect id_token for
    the enterprise grant (a server whose ``oauth.idTokenEnvVar`` is set reads that instead).
    """

    def sign_in(server: ServerConfig, challenge: Challenge | None) -> OAuthRecord:
        return SignIn(server, store, environ=environ, agent=agent, announce=announce, port=port,
                      lifetime=lifetime, id_token=id_token).run(challenge)

    return sign_in


# -- refreshing and machine-to-machine tokens -------------------------------------------------


def _scope_for_credentials(server: ServerConfig, found: Discovered, challenge: Challenge | None,
                           previous: OAuthRecord | None) -> str | None:
    settings = server.oauth or OAuthSettings()
    if settings.scope:
        return settings.scope
    step_up = previous.step_up if previous is not None else None
    return discovery.choose_scope(step_up, challenge.scope if challenge else None, found.resource.scopes_supported, ())


def client_credentials_record(http: AuthHttp, server: ServerConfig, found: Discovered, challenge: Challenge | None,
                              environ: Mapping[str, str], previous: OAuthRecord | None,
                              store: SignInStore | None = None) -> OAuthRecord:
    """A token for the ``client_credentials`` grant (RFC 6749 4.4), no user involved."""
    metadata = found.server
    (settings, client_id), url = _credentials_client(server), _url(server)
    check_client_issuer(store, server, client_id, metadata.issuer)
    scope = _scope_for_credentials(server, found, challenge, previous)
    prover = _dpop_prover(server, metadata, previous)
    base = (previous or OAuthRecord(url=url)).replace(
        url=url, resource=found.resource.resource or None, issuer=metadata.issuer, token_endpoint=metadata.token_endpoint,
        client_kind="client_credentials", client_id=client_id, client_secret=None,
        auth_method=_credentials_method(settings, metadata), step_up=None, requested_scope=scope,
        resource_metadata=challenge.resource_metadata if challenge else None,
        challenge_scope=challenge.scope if challenge else None, dpop_key=prover.jwk if prover is not None else None,
        token_type=None,
    )
    granted = _credentials_grant(http, server, base, environ)
    base = dataclasses.replace(base, bound_client_id=client_id, bound_issuer=metadata.issuer)
    return base.with_tokens(granted, requested_scope=scope)


def _credentials_client(server: ServerConfig) -> tuple[OAuthSettings, str]:
    """The ``oauth`` settings of a client credentials server and the client id they name.

    Raises:
        AuthError: they name none (parse() refuses such an entry; a hand-made one may not).
    """
    settings = server.oauth
    if settings is None or not settings.client_id:
        raise AuthError(server.name, 'the client_credentials grant needs "oauth": {"clientId": ...}')
    return settings, settings.client_id


def _credentials_method(settings: OAuthSettings, metadata: AuthServerMetadata) -> str:
    if settings.token_endpoint_auth_method:
        return settings.token_endpoint_auth_method
    if settings.private_key_env_var:
        return "private_key_jwt"
    return _method_for_secret(metadata, "x")


def _credentials_grant(http: AuthHttp, server: ServerConfig, record: OAuthRecord, environ: Mapping[str, str]) -> TokenSet:
    settings, client_id = _credentials_client(server)
    if not record.token_endpoint:
        raise AuthError(server.name, "its record lacks the token endpoint; sign in again")
    secret = _secret(settings, environ, server.name) if record.auth_method != "private_key_jwt" else None
    client = Client("client_credentials", client_id, secret, record.auth_method)
    form = {"grant_type": "client_credentials", **({"resource": record.resource} if record.resource else {})}
    if record.requested_scope:
        form["scope"] = record.requested_scope
    headers = _authenticate(form, client, record.token_endpoint, record.issuer, settings, environ, server.name)
    try:
        return _token_request(http, server.name, record.token_endpoint, form, headers, _record_prover(record),
                              renew=_renewal(client, record.token_endpoint, record.issuer, settings, environ, server.name))
    except TokenError as exc:
        if exc.transient:
            raise
        raise AuthError(server.name, str(exc)) from None


def refresh_record(http: AuthHttp, server: ServerConfig, record: OAuthRecord, environ: Mapping[str, str]) -> OAuthRecord:
    """New tokens for ``record``: the refresh grant, or the client credentials grant again.

    Raises:
        TokenError: the authorization server refused (``transient`` False: sign in
            again) or could not answer (``transient`` True: keep the tokens).
    """
    if (record.client_kind in ("configured", "client_credentials", "jwt-bearer", "enterprise") and record.bound_issuer
            and record.bound_client_id == record.client_id and record.issuer != record.bound_issuer):
        raise TokenError("the record's authorization server is not the one its configured client belongs to",
                         error="issuer_mismatch", transient=False)
    if record.client_kind == "client_credentials" and server.oauth is not None and server.oauth.client_id:
        try:
            granted = _credentials_grant(http, server, record, environ)
        except (AuthError, ConfigError) as exc:  # a refusal, or its secret's variable unset
            raise TokenError(getattr(exc, "detail", str(exc)), error="invalid_client", transient=False) from None
        return record.with_tokens(granted)
    if record.client_kind in ("jwt-bearer", "enterprise") and server.oauth is not None \
            and server.oauth.grant == record.client_kind:
        # no refresh token: the grant again (the assertion re-read)
        return record.with_tokens(grants.regrant(_lent(), http, server, record, environ))
    if not record.refresh_token:
        raise TokenError("there is no refresh token", error="no_refresh_token", transient=False)
    if not (record.token_endpoint and record.client_id):
        raise TokenError("the record lacks its token endpoint", error="incomplete_record", transient=False)
    form = tokens.refresh_grant(record.refresh_token, record.client_id, record.resource)
    if record.client_kind == "configured":
        if server.oauth is not None and server.oauth.client_id == record.client_id:
            secret = _secret(server.oauth, environ, server.name)
        else:
            secret = record.configured_client_secret
    else:
        secret = record.client_secret
    client = Client(record.client_kind or "registered", record.client_id, secret, record.auth_method)
    headers = _authenticate(form, client, record.token_endpoint, record.issuer, server.oauth, environ, server.name)
    granted = _token_request(http, server.name, record.token_endpoint, form, headers, _record_prover(record),
                             renew=_renewal(client, record.token_endpoint, record.issuer, server.oauth, environ, server.name))
    merged = tokens.merge_refreshed(record.tokens or granted, granted)
    return record.with_tokens(merged)
