"""OAuth discovery for HTTP MCP servers: pure checks, no network.

Spec digest section 7.1 (MCP 2025-11-25 and 2026-07-28 ``basic/authorization``):
parse the 401/403 ``WWW-Authenticate`` challenge (RFC 9110 11.6.1), find and
check Protected Resource Metadata (RFC 9728), find and check authorization
server metadata (RFC 8414, OpenID Connect Discovery), choose the scope, check
the ``iss`` of the authorization response (RFC 9207) and build the
authorization URL (RFC 6749 4.1.1, RFC 7636 4.3, RFC 8707 2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping
from urllib.parse import SplitResult, parse_qsl, quote, urlencode, urlsplit, urlunsplit

from ..wire.jsonrpc import Json

__all__ = [
    "AuthDiscoveryError",
    "AuthServerMetadata",
    "Challenge",
    "ResourceMetadata",
    "authorization_server_metadata_urls",
    "authorization_url",
    "bearer_challenge",
    "check_authorization_server_metadata",
    "check_iss",
    "check_resource_metadata",
    "choose_scope",
    "dpop_challenge",
    "parse_www_authenticate",
    "protected_resource_metadata_urls",
    "step_up_scope",
]

# Bounds on what a remote party can make us hold or walk through.
MAX_HEADER = 16 * 1024
MAX_CHALLENGES = 32
MAX_PARAMS = 32
MAX_URL = 2048
MAX_LIST = 64
MAX_SCOPE_TOKEN = 256
MAX_SCOPES = 128

OFFLINE_ACCESS = "offline_access"


class AuthDiscoveryError(ValueError):
    """A discovery document or authorization response that must not be used."""


# ---------------------------------------------------------------------------
# WWW-Authenticate (RFC 9110 11.6.1, RFC 6750 3, RFC 9728 5.1)

_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789"
                   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_TOKEN68 = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                     "0123456789-._~+/")
_WS = " \t"


@dataclass(frozen=True)
class Challenge:
    """One challenge of a ``WWW-Authenticate`` header (RFC 9110 11.6.1).

    ``scheme`` is lower-cased (schemes are case-insensitive), ``params`` maps
    lower-cased parameter names to their (unquoted) values, the first
    occurrence winning; ``token68`` holds a token68 credential form if any.
    """

    scheme: str
    params: dict = field(default_factory=dict)
    token68: str | None = None

    @property
    def resource_metadata(self) -> str | None:
        """RFC 9728 5.1: the Protected Resource Metadata URL."""
        return self.params.get("resource_metadata")

    @property
    def scope(self) -> str | None:
        """RFC 6750 3: the scope the request needs."""
        return self.params.get("scope")

    @property
    def error(self) -> str | None:
        """RFC 6750 3.1: e.g. ``invalid_token`` or ``insufficient_scope``."""
        return self.params.get("error")

    @property
    def error_description(self) -> str | None:
        """RFC 6750 3: human-readable text; never trust it for decisions."""
        return self.params.get("error_description")


class _Scanner:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def more(self) -> bool:
        return self.i < len(self.s)

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in _WS:
            self.i += 1

    def token(self) -> str:
        start = self.i
        while self.i < len(self.s) and self.s[self.i] in _TCHAR:
            self.i += 1
        return self.s[start:self.i]

    def quoted(self) -> str:
        # at '"'; RFC 9110 5.6.4 quoted-string with quoted-pair; an unterminated
        # string takes the rest of the header.
        self.i += 1
        out = []
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "\\" and self.i + 1 < len(self.s):
                out.append(self.s[self.i + 1])
                self.i += 2
                continue
            self.i += 1
            if c == '"':
                break
            out.append(c)
        return "".join(out)

    def skip_to_comma(self) -> None:
        # skip garbage up to the next comma outside quotes
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == ",":
                return
            if c == '"':
                self.quoted()
            else:
                self.i += 1

    def at_param(self, first: bool = False) -> bool:
        """Whether a ``token OWS "="`` (an auth-param, not token68) starts here."""
        j = self.i
        while j < len(self.s) and self.s[j] in _TCHAR:
            j += 1
        if j == self.i:
            return False
        while j < len(self.s) and self.s[j] in _WS:
            j += 1
        if j >= len(self.s) or self.s[j] != "=":
            return False
        # "abc==" or, right after the scheme, "abc=" then end/comma is token68.
        k = j + 1
        if k < len(self.s) and self.s[k] == "=":
            return False
        if first:
            while k < len(self.s) and self.s[k] in _WS:
                k += 1
            if k >= len(self.s) or self.s[k] == ",":
                return False
        return True


def parse_www_authenticate(header: str) -> list[Challenge]:
    """Parse a ``WWW-Authenticate`` value into challenges (RFC 9110 11.6.1).

    ``challenge = auth-scheme [ 1*SP ( token68 / #auth-param ) ]``, several
    challenges separated by commas; quoted strings may hold commas and
    backslash escapes. Never raises: garbage is skipped and whatever could
    be read is returned. Bounded to 16 KiB, 32 challenges, 32 params each.
    """
    try:
        if not isinstance(header, str):
            return []
        sc = _Scanner(header[:MAX_HEADER])
        found: list[Challenge] = []
        while sc.more() and len(found) < MAX_CHALLENGES:
            while sc.more() and (sc.peek() in _WS or sc.peek() == ","):
                sc.i += 1
            if not sc.more():
                break
            scheme = sc.token()
            if not scheme:
                sc.i += 1
                sc.skip_to_comma()
                continue
            params: dict[str, str] = {}
            token68 = None
            sc.ws()
            if sc.more() and sc.peek() != "," and not sc.at_param(first=True):
                start = sc.i
                while sc.more() and sc.peek() in _TOKEN68:
                    sc.i += 1
                while sc.more() and sc.peek() == "=":
                    sc.i += 1
                value = sc.s[start:sc.i]
                sc.ws()
                if value and (not sc.more() or sc.peek() == ","):
                    token68 = value
                else:
                    sc.skip_to_comma()
                found.append(Challenge(scheme.lower(), params, token68))
                continue
            # auth-params, until something that is not "token =" after a comma
            while sc.more():
                if not sc.at_param():
                    break
                name = sc.token().lower()
                sc.ws()
                sc.i += 1  # "="
                sc.ws()
                if sc.peek() == '"':
                    value = sc.quoted()
                else:
                    value = sc.token()
                if name not in params and len(params) < MAX_PARAMS:
                    params[name] = value
                sc.ws()
                if sc.more() and sc.peek() != ",":
                    sc.skip_to_comma()
                # at a comma or the end; a following param continues this challenge
                while sc.more() and (sc.peek() == "," or sc.peek() in _WS):
                    sc.i += 1
            found.append(Challenge(scheme.lower(), params, None))
        return found
    except Exception:  # pragma: no cover - defensive: never raise on input
        return []


def _header_values(headers: Any, name: str) -> list[str]:
    if headers is None:
        return []
    if isinstance(headers, str):
        return [headers]
    get_all = getattr(headers, "get_all", None) or getattr(headers, "get_list", None)
    if callable(get_all):
        try:
            values = get_all(name)
            if values:
                return [v for v in values if isinstance(v, str)]
        except Exception:
            pass
    items: Iterable[Any]
    if isinstance(headers, Mapping) or hasattr(headers, "items"):
        items = headers.items()
    else:
        items = headers
    out = []
    try:
        for item in items:
            if (isinstance(item, (tuple, list)) and len(item) == 2
                    and isinstance(item[0], str) and item[0].lower() == name
                    and isinstance(item[1], str)):
                out.append(item[1])
    except Exception:
        return out
    return out


def bearer_challenge(headers: Any) -> Challenge | None:
    """The first ``Bearer`` or ``DPoP`` challenge of the response's ``WWW-Authenticate``.

    RFC 6750 3 / digest 7.1 step 1 and 7.2; RFC 9449 7.1: a server taking DPoP-bound
    tokens challenges with the ``DPoP`` scheme (it carries ``resource_metadata``,
    ``scope`` and ``error`` alike). ``headers`` may be a mapping (case-insensitive
    names honoured), a list of ``(name, value)`` pairs (for repeated headers) or the
    header value itself. None when there is none.
    """
    for value in _header_values(headers, "www-authenticate"):
        for challenge in parse_www_authenticate(value):
            if challenge.scheme in ("bearer", "dpop"):
                return challenge
    return None


def dpop_challenge(headers: Any) -> Challenge | None:
    """The first ``DPoP`` challenge (RFC 9449 7.1, 9: ``error="use_dpop_nonce"``), if any."""
    for value in _header_values(headers, "www-authenticate"):
        for challenge in parse_www_authenticate(value):
            if challenge.scheme == "dpop":
                return challenge
    return None


# ---------------------------------------------------------------------------
# Protected Resource Metadata (RFC 9728; digest 7.1 step 2)

def _http_url(url: Json) -> SplitResult | None:
    """urlsplit of an absolute http(s) URL with a host, else None."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL:
        return None
    if any(c in url for c in " \t\r\n\x00"):
        return None
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    return parts


def _origin(parts: SplitResult) -> str:
    return f"{parts.scheme.lower()}://{parts.netloc}"


def protected_resource_metadata_urls(server_url: str, challenge_url: str | None) -> list[str]:
    """Where to look for the server's Protected Resource Metadata, in order.

    Digest 7.1 step 2 / RFC 9728 3.1 and 5.1: the challenge's
    ``resource_metadata`` when given (an http(s) URL); otherwise
    ``<origin>/.well-known/oauth-protected-resource<path>`` then the root
    ``<origin>/.well-known/oauth-protected-resource``.
    """
    if challenge_url is not None and _http_url(challenge_url) is not None:
        return [challenge_url]
    parts = _http_url(server_url)
    if parts is None:
        return []
    base = _origin(parts) + "/.well-known/oauth-protected-resource"
    path = parts.path.rstrip("/")
    urls = [base + path] if path else []
    urls.append(base)
    return urls


@dataclass(frozen=True)
class ResourceMetadata:
    """Checked RFC 9728 metadata: ``resource`` is the RFC 8707 parameter."""

    resource: str
    authorization_servers: tuple[str, ...]
    scopes_supported: tuple[str, ...]


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def _resource_matches(resource: SplitResult, server: SplitResult) -> bool:
    if resource.scheme.lower() != server.scheme.lower():
        return False
    if (resource.hostname or "").lower() != (server.hostname or "").lower():
        return False
    scheme = server.scheme.lower()
    if (resource.port or _default_port(scheme)) != (server.port or _default_port(scheme)):
        return False
    if resource.username or resource.password or resource.fragment:
        return False
    if resource.query and resource.query != server.query:
        return False
    rpath = resource.path.rstrip("/")
    spath = server.path.rstrip("/")
    return spath == rpath or spath.startswith(rpath + "/")


def _str_list(value: Json, limit: int, max_len: int) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    out: list[str] = []
    for item in value[:MAX_LIST * 4]:
        if isinstance(item, str) and item and len(item) <= max_len and item not in out:
            out.append(item)
            if len(out) >= limit:
                break
    return tuple(out)


def _scopes(value: Json) -> tuple[str, ...]:
    return tuple(s for s in _str_list(value, MAX_SCOPES, MAX_SCOPE_TOKEN) if _SCOPE_TOKEN.match(s))


def check_resource_metadata(doc: Json, server_url: str) -> ResourceMetadata:
    """Check a Protected Resource Metadata document (RFC 9728 2, 3.3; digest 7.1 step 2).

    ``resource`` must be the server URL or a prefix of it ending on a path
    segment boundary (scheme and host compared case-insensitively, default
    ports equal); at least one http(s) ``authorization_servers`` entry.
    Over-long strings and list entries are ignored. Raises
    AuthDiscoveryError with a one-line reason.
    """
    if not isinstance(doc, dict):
        raise AuthDiscoveryError("protected resource metadata is not a JSON object")
    server = _http_url(server_url)
    if server is None:
        raise AuthDiscoveryError("the MCP server URL is not an http(s) URL")
    resource = doc.get("resource")
    rparts = _http_url(resource)
    if rparts is None or not isinstance(resource, str):
        raise AuthDiscoveryError("protected resource metadata has no usable resource")
    if not _resource_matches(rparts, server):
        raise AuthDiscoveryError(
            f"protected resource metadata is for {resource[:200]!r}, not this server")
    servers = tuple(s for s in _str_list(doc.get("authorization_servers"), MAX_LIST, MAX_URL)
                    if _http_url(s) is not None)
    if not servers:
        raise AuthDiscoveryError("protected resource metadata lists no authorization server")
    return ResourceMetadata(resource, servers, _scopes(doc.get("scopes_supported")))


# ---------------------------------------------------------------------------
# Authorization server metadata (RFC 8414, OIDC Discovery; digest 7.1 steps 3-4)

def authorization_server_metadata_urls(issuer: str) -> list[str]:
    """Where to look for the issuer's metadata, in the spec's order (digest 7.1 step 3).

    With a path (``https://auth.example.com/tenant1``): RFC 8414 path-inserted
    ``/.well-known/oauth-authorization-server/tenant1``, OIDC path-inserted
    ``/.well-known/openid-configuration/tenant1``, OIDC path-appended
    ``/tenant1/.well-known/openid-configuration``. Without a path: the RFC
    8414 then the OIDC well-known URL at the root.
    """
    parts = _http_url(issuer)
    if parts is None:
        return []
    origin = _origin(parts)
    path = parts.path.rstrip("/")
    if path:
        return [
            f"{origin}/.well-known/oauth-authorization-server{path}",
            f"{origin}/.well-known/openid-configuration{path}",
            f"{origin}{path}/.well-known/openid-configuration",
        ]
    return [
        f"{origin}/.well-known/oauth-authorization-server",
        f"{origin}/.well-known/openid-configuration",
    ]


@dataclass(frozen=True)
class AuthServerMetadata:
    """Checked authorization server metadata (RFC 8414 2)."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    registration_endpoint: str | None
    scopes_supported: tuple[str, ...]
    code_challenge_methods_supported: tuple[str, ...]
    token_endpoint_auth_methods_supported: tuple[str, ...]
    authorization_response_iss_parameter_supported: bool
    client_id_metadata_document_supported: bool
    # RFC 9449 5.1: the JWS algorithms it takes for DPoP proofs (empty: it lists none)
    dpop_signing_alg_values_supported: tuple[str, ...] = ()
    # RFC 9126 5: its pushed authorization request endpoint (None: none, or not usable).
    # Used only to ask whether it still knows a kept client (signin.choose_client).
    pushed_authorization_request_endpoint: str | None = None


def _endpoint(doc: dict[str, Any], name: str, allow_http: bool, required: bool) -> str | None:
    value = doc.get(name)
    if value is None and not required:
        return None
    return _required_endpoint(doc, name, allow_http)


def _required_endpoint(doc: dict[str, Any], name: str, allow_http: bool) -> str:
    value = doc.get(name)
    parts = _http_url(value)
    if parts is None or not isinstance(value, str):
        raise AuthDiscoveryError(f"authorization server metadata has no usable {name}")
    if parts.fragment:
        raise AuthDiscoveryError(f"authorization server {name} has a fragment")
    if parts.scheme.lower() != "https" and not allow_http:
        raise AuthDiscoveryError(f"authorization server {name} is not https")
    return value


def check_authorization_server_metadata(doc: Json, issuer: str, mcp_url: str) -> AuthServerMetadata:
    """Check RFC 8414 / OIDC metadata (RFC 8414 3.3, digest 7.1 steps 3-4, 7.3).

    ``issuer`` must equal the issuer the URL was built from, exactly;
    ``S256`` must be in ``code_challenge_methods_supported`` (missing means
    refused); the endpoints must be https unless the MCP server URL is
    plain http. Raises AuthDiscoveryError with a one-line reason.
    """
    if not isinstance(doc, dict):
        raise AuthDiscoveryError("authorization server metadata is not a JSON object")
    got = doc.get("issuer")
    if not isinstance(got, str) or got != issuer:
        shown = got[:200] if isinstance(got, str) else got.__class__.__name__
        raise AuthDiscoveryError(
            f"authorization server metadata names issuer {shown!r}, expected {issuer[:200]!r}")
    mcp = _http_url(mcp_url)
    allow_http = mcp is not None and mcp.scheme.lower() == "http"
    methods = _str_list(doc.get("code_challenge_methods_supported"), MAX_LIST, 64)
    if "S256" not in methods:
        raise AuthDiscoveryError("authorization server does not support PKCE S256")
    authorization = _required_endpoint(doc, "authorization_endpoint", allow_http)
    token = _required_endpoint(doc, "token_endpoint", allow_http)
    registration = _endpoint(doc, "registration_endpoint", allow_http, False)
    try:  # optional and only ever a probe: an unusable one is left out, never an error
        pushed = _endpoint(doc, "pushed_authorization_request_endpoint", allow_http, False)
    except AuthDiscoveryError:
        pushed = None
    return AuthServerMetadata(
        issuer=got,
        authorization_endpoint=authorization,
        token_endpoint=token,
        registration_endpoint=registration,
        scopes_supported=_scopes(doc.get("scopes_supported")),
        code_challenge_methods_supported=methods,
        token_endpoint_auth_methods_supported=_str_list(
            doc.get("token_endpoint_auth_methods_supported"), MAX_LIST, 128),
        authorization_response_iss_parameter_supported=(
            doc.get("authorization_response_iss_parameter_supported") is True),
        client_id_metadata_document_supported=(
            doc.get("client_id_metadata_document_supported") is True),
        dpop_signing_alg_values_supported=_str_list(doc.get("dpop_signing_alg_values_supported"), MAX_LIST, 32),
        pushed_authorization_request_endpoint=pushed,
    )


# ---------------------------------------------------------------------------
# Scope (digest 7.1 step 6, 7.2)

# RFC 6749 3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E )
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]{1,%d}\Z" % MAX_SCOPE_TOKEN)


def _scope_tokens(*sources: Any) -> list[str]:
    out: list[str] = []
    for source in sources:
        if isinstance(source, str):
            tokens = source[:MAX_SCOPES * MAX_SCOPE_TOKEN].split()
        elif isinstance(source, (tuple, list)):
            tokens = [t for t in source if isinstance(t, str)]
        else:
            continue
        for token in tokens:
            if _SCOPE_TOKEN.match(token) and token not in out and len(out) < MAX_SCOPES:
                out.append(token)
    return out


def choose_scope(step_up: str | None, challenge_scope: str | None,
                 scopes_supported: tuple, as_scopes: tuple) -> str | None:
    """The ``scope`` to request (digest 7.1 step 6, 7.2; RFC 6749 3.3).

    A pending step-up, else the challenge's ``scope``, else the resource's
    ``scopes_supported``; plus ``offline_access`` when the authorization
    server's ``scopes_supported`` lists it (and only then). Space-separated,
    no duplicates; None when there is nothing to ask for (scope omitted).
    """
    base = _scope_tokens(step_up) or _scope_tokens(challenge_scope) \
        or _scope_tokens(scopes_supported)
    if not base:
        return None
    if OFFLINE_ACCESS in _scope_tokens(as_scopes) and OFFLINE_ACCESS not in base:
        base.append(OFFLINE_ACCESS)
    return " ".join(base)


def step_up_scope(requested: str | None, challenged: str | None) -> str:
    """Scopes to re-authorize with after ``insufficient_scope`` (digest 7.2, 2026).

    The union of the scopes previously requested and the challenged ones,
    in that order, without duplicates.
    """
    return " ".join(_scope_tokens(requested, challenged))


# ---------------------------------------------------------------------------
# Authorization response (RFC 9207; digest 7.1 step 8)

def check_iss(params: Mapping[str, str], issuer: str, promised: bool) -> None:
    """Check the ``iss`` of an authorization response (RFC 9207 2.4; digest 7.1 step 8).

    Present: must equal the recorded issuer by exact string comparison
    (after form decoding only), whether or not it was promised. Missing:
    refused when the metadata promised it
    (``authorization_response_iss_parameter_supported``), else accepted.
    Applies to error responses too. Raises AuthDiscoveryError.
    """
    value = params.get("iss") if isinstance(params, Mapping) else None
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            if not value and not promised:
                return
            raise AuthDiscoveryError("authorization response has no single iss")
        value = value[0]
    if value is None:
        if promised:
            raise AuthDiscoveryError("authorization response lacks the promised iss")
        return
    if not isinstance(value, str) or value != issuer:
        raise AuthDiscoveryError("authorization response iss does not match the issuer")


def authorization_url(endpoint: str, client_id: str, redirect_uri: str, challenge: str,
                      state: str, scope: str | None, resource: str | None) -> str:
    """The authorization request URL (RFC 6749 4.1.1, RFC 7636 4.3, RFC 8707 2).

    ``response_type=code``, ``client_id``, ``redirect_uri``,
    ``code_challenge`` with ``code_challenge_method=S256``, ``state``, and
    ``scope`` and ``resource`` when given, form-encoded and appended to any
    query the endpoint already has (RFC 6749 3.1); those of ours replace
    same-named ones already there. Raises AuthDiscoveryError for an
    endpoint that is not an http(s) URL.
    """
    parts = _http_url(endpoint)
    if parts is None:
        raise AuthDiscoveryError("authorization endpoint is not an http(s) URL")
    ours = [
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", redirect_uri),
        ("code_challenge", challenge),
        ("code_challenge_method", "S256"),
        ("state", state),
    ]
    if scope:
        ours.append(("scope", scope))
    if resource:
        ours.append(("resource", resource))
    names = {name for name, _ in ours}
    kept = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in names]
    query = urlencode(kept + ours, quote_via=quote, safe="")
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))
