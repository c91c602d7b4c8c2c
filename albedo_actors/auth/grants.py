"""Grants with no browser: workload identity and enterprise-managed authorization.

* **jwt-bearer** (RFC 7523 2.1, SEP-1933 workload identity federation): the workload's
  own JWT (a projected service-account token, a CI job's OIDC token) is the
  ``assertion`` of the token request. It is read from ``oauth.assertionFile`` at
  every grant (such tokens rotate) or from ``oauth.assertionEnvVar``. An assertion
  whose ``exp`` has passed is refused here, before any request (its signature is the
  authorization server's to check: we cannot, and need not).
* **enterprise** (SEP-990, enterprise-managed authorization): the user's OpenID
  Connect ``id_token`` is exchanged at the company's identity provider (RFC 8693
  token exchange) for an Identity Assertion JWT Authorization Grant (ID-JAG) naming
  the MCP server's authorization server (``audience``) and the MCP server
  (``resource``); that ID-JAG is then the assertion of the jwt-bearer grant at the
  MCP server's authorization server, with the client authentication it asks for.
  The ID-JAG is read (not verified: it is the authorization server's to verify)
  and is never sent when it names another authorization server, another resource
  or another client. The id_token comes from ``oauth.idTokenEnvVar`` or, without
  one, from the host's :class:`IdTokenProvider` (``authorizer(id_token=...)``).

Neither grant expects a refresh token: when the access token expires, the grant runs
again (:func:`regrant`, from ``signin.refresh_record``). A refusal (``invalid_grant``,
``invalid_scope``, ``unauthorized_client`` ...) is one error line: nothing is retried
and no other grant is tried. Every token request goes through
``signin._token_request``. No assertion, id_token, ID-JAG or secret is ever logged
or put in a message.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import time
from typing import Any, Callable, Mapping, Protocol

from ..config import OAuthSettings, ServerConfig
from ..errors import AuthError, ConfigError
from . import discovery, tokens
from .addresses import AddressGuard
from .discovery import AuthServerMetadata, Challenge, ResourceMetadata
from .http import TIMEOUT_S, AuthHttp, AuthHttpError, AuthReply
from .record import OAuthRecord
from .tokens import TokenError, TokenSet

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"
ID_JAG_TYPE = "urn:ietf:params:oauth:token-type:id-jag"
ID_JAG_TYP = "oauth-id-jag+jwt"
MAX_ASSERTION = 16 * 1024  # bytes of an assertion file, an id_token or an ID-JAG

__all__ = ["IdTokenProvider", "Lent", "grant_record", "regrant", "read_assertion", "JWT_BEARER", "TOKEN_EXCHANGE"]


class IdTokenProvider(Protocol):
    """The host's source of the user's OpenID Connect id_token for ``server``
    (enterprise grant): a JWT issued by the identity provider to its client
    ``oauth.idpClientId``. Called on the thread doing the sign-in; it should return
    a fresh one, or raise when it has none."""

    def __call__(self, server: ServerConfig, /) -> str: ...


@dataclasses.dataclass(frozen=True)
class Lent:
    """What :mod:`.signin` lends the grants: it imports this module, never the reverse.

    ``token_request`` is ``signin._token_request``, through which every token request of
    every grant goes (DPoP proofs are added there, by the prover passed to it);
    ``authenticate`` adds a client's authentication to a form; ``client(kind, id, secret,
    method)`` makes the client ``authenticate`` takes; ``dpop_prover(server, metadata,
    previous)`` is the DPoP key of a new grant (None without DPoP), ``record_prover(record)``
    the key a stored record's tokens are bound to (for a re-grant); ``renewal(client, ...)``
    how to sign a ``private_key_jwt`` client's new assertion for a DPoP nonce retry.
    """

    token_request: Callable[..., Any]
    authenticate: Callable[..., dict]
    client: Callable[..., Any]
    secret: Callable[[OAuthSettings, Mapping[str, str], str], str | None]
    method_for_secret: Callable[[AuthServerMetadata, str | None], str]
    check_client_issuer: Callable[..., None]
    scope_for_credentials: Callable[..., str | None]
    dpop_prover: Callable[..., Any]
    record_prover: Callable[..., Any]
    renewal: Callable[..., Any]


class Found(Protocol):
    """What discovery found (``signin.Discovered`` is one)."""

    @property
    def resource(self) -> ResourceMetadata: ...

    @property
    def server(self) -> AuthServerMetadata: ...


# -- reading the JWTs ------------------------------------------------------------------------


def _segment(text: str) -> Any:
    padded = text + "=" * (-len(text) % 4)
    return json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))


def _unverified(token: str) -> tuple[dict, dict] | None:
    """The header and claims of a compact JWS, unverified; None when it is not one."""
    parts = token.split(".")
    if len(parts) != 3 or not all(parts[:2]):
        return None
    try:
        header, claims = _segment(parts[0]), _segment(parts[1])
    except (ValueError, UnicodeError, binascii.Error, RecursionError):
        return None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        return None
    return header, claims


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def _check_jwt(name: str, token: str, what: str, where: str) -> dict:
    """``token``'s claims, after the checks made before anything is sent: a JWT, not expired.

    Raises:
        AuthError: it is not a JWT, or its ``exp`` has passed (one line naming ``where``).
    """
    decoded = _unverified(token)
    if decoded is None:
        raise AuthError(name, f"{what} in {where} is not a JWT; nothing was sent")
    claims = decoded[1]
    exp = claims.get("exp")
    if isinstance(exp, (int, float)) and not isinstance(exp, bool) and exp <= time.time():
        raise AuthError(name, f"{what} in {where} expired at {_when(exp)}; nothing was sent (renew it)")
    return claims


def named_variable(environ: Mapping[str, str], name: str, setting: str, variable: str) -> str:
    """The value of ``$variable``, which server ``name``'s ``oauth.<setting>`` names.

    Raises:
        ConfigError: the variable is not set in the host's environment, or is empty.
    """
    value = environ.get(variable)
    if not value:
        raise ConfigError(f"server {name!r}: oauth.{setting} names ${variable}, which is not set in the host's environment")
    return value


def _clean(name: str, value: str, what: str, where: str) -> str:
    value = value.strip()
    if not value:
        raise ConfigError(f"server {name!r}: {where} holds no {what}")
    if len(value) > MAX_ASSERTION or any(not 0x21 <= ord(c) <= 0x7E for c in value):
        raise ConfigError(f"server {name!r}: {where} does not hold one {what} (at most {MAX_ASSERTION} printable characters)")
    return value


def read_assertion(server: ServerConfig, environ: Mapping[str, str]) -> tuple[str, str]:
    """The workload's JWT and where it was read (``the file PATH`` or ``$VAR``), read now.

    Raises:
        ConfigError: the file is missing, unreadable or too big, or the variable is unset.
        AuthError: it is not a JWT, or it has expired.
    """
    settings = server.oauth or OAuthSettings()
    name = server.name
    if settings.assertion_file:
        where = f"the file {settings.assertion_file}"
        try:
            # Not safefiles.read_text: a projected service-account token is a symbolic link
            # (Kubernetes' ..data swap), and that is how it rotates.
            with open(settings.assertion_file, "rb") as handle:
                raw = handle.read(MAX_ASSERTION + 1)
        except FileNotFoundError:
            raise ConfigError(f"server {name!r}: oauth.assertionFile {settings.assertion_file} does not exist") from None
        except OSError as exc:
            raise ConfigError(f"server {name!r}: oauth.assertionFile {settings.assertion_file} cannot be read "
                              f"({exc.strerror or type(exc).__name__})") from None
        if len(raw) > MAX_ASSERTION:
            raise ConfigError(f"server {name!r}: oauth.assertionFile {settings.assertion_file} is larger than "
                              f"{MAX_ASSERTION} bytes; it cannot be one JWT")
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            raise ConfigError(f"server {name!r}: oauth.assertionFile {settings.assertion_file} is not a JWT") from None
    elif settings.assertion_env_var:
        where = f"${settings.assertion_env_var}"
        text = named_variable(environ, name, "assertionEnvVar", settings.assertion_env_var)
    else:
        raise ConfigError(f'server {name!r}: the jwt-bearer grant needs "oauth": {{"assertionFile": ...}} or "assertionEnvVar"')
    assertion = _clean(name, text, "JWT", where)
    _check_jwt(name, assertion, "the workload assertion", where)
    return assertion, where


def _id_token(server: ServerConfig, environ: Mapping[str, str], provider: IdTokenProvider | None) -> tuple[str, str]:
    """The user's id_token and where it came from; checked like an assertion.

    Raises:
        ConfigError / AuthError: none is to be had, or it is no JWT or expired.
    """
    settings = server.oauth or OAuthSettings()
    name = server.name
    if settings.id_token_env_var:
        where = f"${settings.id_token_env_var}"
        value = named_variable(environ, name, "idTokenEnvVar", settings.id_token_env_var)
    elif provider is not None:
        where = "the host's id_token provider"
        try:
            value = provider(server)
        except Exception as exc:  # the host's code: whatever it raises is one line here
            raise AuthError(name, f"the host's id_token provider gave no id_token ({type(exc).__name__})") from None
        if not isinstance(value, str) or not value:
            raise AuthError(name, "the host's id_token provider gave no id_token")
    else:
        raise ConfigError(f'server {name!r}: the enterprise grant needs the user\'s id_token: set "oauth": '
                          f'{{"idTokenEnvVar": ...}}, or give the host\'s id_token provider (authorizer(id_token=...))')
    token = _clean(name, value, "id_token", where)
    _check_jwt(name, token, "the user's id_token", where)
    return token, where


# -- the grants -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Target:
    """What a grant needs of the discovered servers (kept in the record for a re-grant)."""

    issuer: str
    token_endpoint: str
    resource: str | None  # RFC 8707 resource: the MCP server (None: a 2025-03-26 server)
    scope: str | None
    auth_method: str


def _client(lent: Lent, server: ServerConfig, target: _Target, environ: Mapping[str, str]) -> Any:
    """The client the MCP server's authorization server authenticates; None: no client (jwt-bearer
    without a ``clientId``, RFC 7523 3.1: the assertion alone identifies the workload)."""
    settings = server.oauth or OAuthSettings()
    if not settings.client_id:
        return None
    secret = lent.secret(settings, environ, server.name) if target.auth_method in ("client_secret_basic",
                                                                               "client_secret_post") else None
    return lent.client(settings.grant, settings.client_id, secret, target.auth_method)


def _auth_method(lent: Lent, settings: OAuthSettings, metadata: AuthServerMetadata) -> str:
    if not settings.client_id:
        return "none"
    if settings.token_endpoint_auth_method:
        return settings.token_endpoint_auth_method
    if settings.private_key_env_var:
        return "private_key_jwt"
    return lent.method_for_secret(metadata, "x" if settings.client_secret_env_var else None)


def _jwt_bearer(lent: Lent, http: AuthHttp, server: ServerConfig, target: _Target, assertion: str, environ: Mapping[str, str],
                what: str, prover: Any = None) -> TokenSet:
    """The jwt-bearer grant (RFC 7523 2.1) at the MCP server's authorization server.

    Raises:
        TokenError: refused (``transient`` False: never retried) or not answered.
    """
    form = {"grant_type": JWT_BEARER, "assertion": assertion}
    if target.resource:
        form["resource"] = target.resource
    if target.scope:
        form["scope"] = target.scope
    client = _client(lent, server, target, environ)
    headers: dict = {}
    renew = None
    if client is not None:
        headers = lent.authenticate(form, client, target.token_endpoint, target.issuer, server.oauth, environ, server.name)
        renew = lent.renewal(client, target.token_endpoint, target.issuer, server.oauth, environ, server.name)
    try:
        granted: TokenSet = lent.token_request(http, server.name, target.token_endpoint, form, headers, prover, renew=renew)
        return granted
    except TokenError as exc:
        if exc.transient:
            raise
        raise TokenError(f"the authorization server refused {what}: {exc}; nothing is retried", error=exc.error,
                         transient=False, status=exc.status) from None


def _idp_http(server: ServerConfig, issuer: str, timeout: float) -> AuthHttp:
    # The identity provider is configured, not named by the MCP server: its own kind of
    # address is allowed (a company IdP on the intranet), nothing else.
    return AuthHttp(verify=server.ca_file or True, timeout=timeout, guard=AddressGuard(issuer))


def _idp_token_endpoint(http: AuthHttp, server: ServerConfig) -> tuple[str, tuple[str, ...]]:
    """The identity provider's token endpoint (configured, else OpenID Connect / RFC 8414
    discovery at its issuer) and the client authentication methods it lists.

    Raises:
        AuthError: it cannot be found.
    """
    settings = server.oauth or OAuthSettings()
    issuer = settings.idp_issuer or ""
    if settings.idp_token_endpoint:
        return settings.idp_token_endpoint, ()
    urls = [issuer.rstrip("/") + "/.well-known/openid-configuration"]
    urls += [u for u in discovery.authorization_server_metadata_urls(issuer) if u not in urls]
    for url in urls:
        try:
            reply = http.get(url)
        except AuthHttpError as exc:
            raise AuthError(server.name, f"the identity provider {issuer[:120]} could not be asked: {exc.reason}") from None
        doc = reply.json() if reply.status == 200 else None
        if not isinstance(doc, dict) or doc.get("issuer") != issuer:
            continue  # RFC 8414 3.3 / OpenID Connect Discovery 4.3: another issuer's document is not used
        endpoint = doc.get("token_endpoint")
        if not isinstance(endpoint, str) or len(endpoint) > 2048 or not endpoint.startswith(
                ("https://", "http://" if issuer.startswith("http://") else "https://")):
            raise AuthError(server.name, f"the identity provider {issuer[:120]} names no usable token endpoint")
        methods = doc.get("token_endpoint_auth_methods_supported")
        return endpoint, tuple(m for m in methods if isinstance(m, str)) if isinstance(methods, list) else ()
    raise AuthError(server.name, f"the identity provider {issuer[:120]} publishes no metadata for its issuer; "
                                 f'set "oauth": {{"idpTokenEndpoint": ...}}')


def _exchange_reply(reply: AuthReply) -> str:
    """The ID-JAG of an RFC 8693 2.2.1 answer; an error answer raises as any token request's."""
    if not 200 <= reply.status < 300:
        tokens.parse_token_response(reply.body, reply.status, time.time())  # raises its TokenError
    try:
        data = json.loads(reply.body[:tokens.MAX_BODY + 1]) if len(reply.body) <= tokens.MAX_BODY else None
    except (ValueError, UnicodeError, RecursionError):
        data = None
    if isinstance(data, dict) and "error" in data:
        tokens.parse_token_response(reply.body, 400, time.time())  # raises
    if not isinstance(data, dict):
        raise TokenError("the token exchange answer is not a JSON object", error="invalid_response", transient=False)
    if data.get("issued_token_type") != ID_JAG_TYPE:
        raise TokenError("the identity provider issued no ID-JAG (issued_token_type is not id-jag)",
                         error="invalid_response", transient=False)
    token = data.get("access_token")
    if not isinstance(token, str) or not token or len(token) > MAX_ASSERTION \
            or any(not 0x21 <= ord(c) <= 0x7E for c in token):
        raise TokenError("the token exchange answer has no usable ID-JAG", error="invalid_response", transient=False)
    return token


def _exchange(lent: Lent, server: ServerConfig, target: _Target, environ: Mapping[str, str],
              provider: IdTokenProvider | None, timeout: float = TIMEOUT_S) -> str:
    """RFC 8693 token exchange at the identity provider: the user's id_token for an ID-JAG
    naming ``target`` (SEP-990 "Token Exchange"); the ID-JAG, checked.

    Raises:
        AuthError: no id_token, the identity provider refused, or the ID-JAG is not for us.
        ConfigError: a named variable is unset.
        TokenError: transient: the identity provider could not answer.
    """
    settings = server.oauth or OAuthSettings()
    name, issuer = server.name, settings.idp_issuer or ""
    subject, _where = _id_token(server, environ, provider)
    secret = None
    if settings.idp_client_secret_env_var:
        secret = named_variable(environ, name, "idpClientSecretEnvVar", settings.idp_client_secret_env_var)
    with _idp_http(server, issuer, timeout) as http:
        endpoint, methods = _idp_token_endpoint(http, server)
        method = "none"
        if secret:
            method = "client_secret_post" if methods and "client_secret_basic" not in methods \
                and "client_secret_post" in methods else "client_secret_basic"
        form = {
            "grant_type": TOKEN_EXCHANGE,
            "requested_token_type": ID_JAG_TYPE,
            "audience": target.issuer,  # the MCP server's authorization server (SEP-990)
            "resource": target.resource or server.url or "",
            "subject_token": subject,
            "subject_token_type": ID_TOKEN_TYPE,
        }
        if target.scope:
            form["scope"] = target.scope
        client = lent.client("idp", settings.idp_client_id or "", secret, method)
        headers = lent.authenticate(form, client, endpoint, issuer, None, environ, name)
        try:
            jag: str = lent.token_request(http, name, endpoint, form, headers, parse=_exchange_reply)
        except TokenError as exc:
            if exc.transient:
                raise
            raise AuthError(name, f"the identity provider {issuer[:120]} refused the token exchange: {exc}") from None
    _check_id_jag(server, target, jag)
    return jag


def _check_id_jag(server: ServerConfig, target: _Target, jag: str) -> None:
    """Refuse an ID-JAG that is not for this authorization server, resource and client
    (SEP-990 "ID-JAG" claims), before it is sent anywhere.

    Raises:
        AuthError
    """
    name = server.name
    decoded = _unverified(jag)
    if decoded is None:
        raise AuthError(name, "the identity provider's ID-JAG is not a JWT; it was not sent")
    header, claims = decoded
    typ = header.get("typ")
    if isinstance(typ, str) and typ.lower() != ID_JAG_TYP:
        raise AuthError(name, f"the identity provider's ID-JAG has the type {typ[:40]!r}, not {ID_JAG_TYP}; it was not sent")
    audience = claims.get("aud")
    audiences = audience if isinstance(audience, list) else [audience]
    if target.issuer not in audiences:
        raise AuthError(name, f"the identity provider's ID-JAG is for another authorization server than "
                              f"{target.issuer[:120]}; it was not sent")
    resource = claims.get("resource")
    wanted = target.resource or server.url
    if resource is not None and resource != wanted:
        shown = resource[:120] if isinstance(resource, str) else "an unreadable one"
        raise AuthError(name, f"the identity provider's ID-JAG is for another resource ({shown}) than {str(wanted)[:120]}; "
                              f"it was not sent")
    client_id = claims.get("client_id")
    settings = server.oauth or OAuthSettings()
    if client_id is not None and client_id != settings.client_id:
        raise AuthError(name, "the identity provider's ID-JAG names another client than oauth.clientId; it was not sent")
    exp = claims.get("exp")
    if isinstance(exp, (int, float)) and not isinstance(exp, bool) and exp <= time.time():
        raise AuthError(name, "the identity provider's ID-JAG has already expired; it was not sent")


def _granted(lent: Lent, http: AuthHttp, server: ServerConfig, target: _Target, environ: Mapping[str, str],
             provider: IdTokenProvider | None, idp_timeout: float = TIMEOUT_S, prover: Any = None) -> TokenSet:
    """Run the server's grant once (with DPoP proofs at the MCP server's authorization
    server when ``prover`` is given; the identity provider's exchange carries none).

    Raises:
        AuthError, ConfigError: refused or impossible (one line each).
        TokenError: transient only.
    """
    settings = server.oauth or OAuthSettings()
    if settings.grant == "jwt-bearer":
        assertion, where = read_assertion(server, environ)
        what = f"the workload assertion from {where}"
    else:
        assertion, what = _exchange(lent, server, target, environ, provider, idp_timeout), "the ID-JAG of the identity provider"
    try:
        return _jwt_bearer(lent, http, server, target, assertion, environ, what, prover)
    except TokenError as exc:
        if exc.transient:
            raise
        raise AuthError(server.name, str(exc)) from None


def grant_record(lent: Lent, http: AuthHttp, server: ServerConfig, found: Found, challenge: Challenge | None,
                 environ: Mapping[str, str], previous: OAuthRecord | None, store: object = None, *,
                 id_token: IdTokenProvider | None = None) -> OAuthRecord:
    """A token for the server's ``jwt-bearer`` or ``enterprise`` grant, no browser involved.

    Raises:
        AuthError / ConfigError: one line; nothing is retried.
    """
    settings = server.oauth or OAuthSettings()
    metadata, url = found.server, server.url or ""
    if settings.client_id:
        lent.check_client_issuer(store, server, settings.client_id, metadata.issuer)
    scope = lent.scope_for_credentials(server, found, challenge, previous)
    target = _Target(metadata.issuer, metadata.token_endpoint, found.resource.resource or None, scope,
                     _auth_method(lent, settings, metadata))
    prover = lent.dpop_prover(server, metadata, previous)
    try:
        granted = _granted(lent, http, server, target, environ, id_token, prover=prover)
    except TokenError as exc:  # transient: could not be asked; the sign-in fails, in one line
        raise AuthError(server.name, str(exc)) from None
    base = (previous or OAuthRecord(url=url)).replace(
        url=url, resource=target.resource, issuer=metadata.issuer, token_endpoint=metadata.token_endpoint,
        client_kind=settings.grant, client_id=settings.client_id, client_secret=None, auth_method=target.auth_method,
        step_up=None, requested_scope=scope, resource_metadata=challenge.resource_metadata if challenge else None,
        challenge_scope=challenge.scope if challenge else None, dpop_key=prover.jwk if prover is not None else None,
        token_type=None,
    )
    if settings.client_id:
        base = dataclasses.replace(base, bound_client_id=settings.client_id, bound_issuer=metadata.issuer)
    return base.with_tokens(granted, requested_scope=scope)


def regrant(lent: Lent, http: AuthHttp, server: ServerConfig, record: OAuthRecord, environ: Mapping[str, str]) -> TokenSet:
    """The grant again for an expiring token (``signin.refresh_record``): the assertion is
    read afresh; the enterprise grant needs ``oauth.idTokenEnvVar`` here (without it the
    server needs a sign-in, which the host's id_token provider answers).

    Raises:
        TokenError: refused or impossible (``transient`` False), or not answered (True).
    """
    if not (record.token_endpoint and record.issuer):
        raise TokenError("the record lacks its token endpoint", error="incomplete_record", transient=False)
    settings = server.oauth or OAuthSettings()
    if settings.grant == "enterprise" and not settings.id_token_env_var:
        raise TokenError("a new token needs the user's id_token again", error="needs_id_token", transient=False)
    target = _Target(record.issuer, record.token_endpoint, record.resource, record.requested_scope, record.auth_method)
    try:
        # Under the refresh lease (refresh.LEASE_S, 2.5 request deadlines): the identity
        # provider's two requests (discovery, exchange) get half a deadline each, so the
        # whole re-grant (with the grant itself) ends before the lease can be taken over.
        return _granted(lent, http, server, target, environ, None, idp_timeout=TIMEOUT_S / 2,
                        prover=lent.record_prover(record))
    except (AuthError, ConfigError) as exc:
        raise TokenError(getattr(exc, "detail", str(exc)), error="grant_refused", transient=False) from None
