"""Token requests and responses (RFC 6749): pure functions, no network.

Spec digest section 7.1 steps 9-11 and issue 6 item 5: the code grant
carries the PKCE ``code_verifier`` (RFC 7636 4.5) and the ``resource``
(RFC 8707 2); refreshes (RFC 6749 6) carry the same ``resource``; the client
authenticates as registered (RFC 6749 2.3.1, RFC 7591 2); token responses
(RFC 6749 5.1 / 5.2) are checked before anything is stored; a token within
a minute of expiry is refreshed first.
"""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass, field
from urllib.parse import quote_plus

from ..wire.jsonrpc import Json, parse_line

__all__ = [
    "MAX_BODY",
    "REFRESH_MARGIN",
    "TokenError",
    "TokenSet",
    "client_auth",
    "code_grant",
    "merge_refreshed",
    "needs_refresh",
    "parse_token_response",
    "refresh_grant",
]

#: Largest token endpoint answer we read.
MAX_BODY = 64 * 1024
MAX_TOKEN = 16 * 1024
MAX_TEXT = 256
#: Seconds before expiry at which a token is refreshed first.
REFRESH_MARGIN = 60


class TokenError(ValueError):
    """A token request the authorization server refused, or a bad answer.

    ``error`` is the RFC 6749 5.2 code (``invalid_grant``, ``invalid_client``
    ...) or ``invalid_response`` / ``server_error`` / ``http_<status>`` when
    the server gave none; ``transient`` is True when trying again later may
    work (5xx, 429) and the tokens must be kept. Messages never contain a
    token, a secret or the raw body.
    """

    def __init__(self, message: str, *, error: str, transient: bool,
                 status: int | None = None,
                 description: str | None = None) -> None:
        super().__init__(message)
        self.error = error
        self.transient = transient
        self.status = status
        self.description = description


@dataclass(frozen=True)
class TokenSet:
    """Tokens from a token response (RFC 6749 5.1); ``repr`` hides tokens.

    ``expires_at`` is an absolute time (same clock as ``now`` given to
    :func:`parse_token_response`), ``None`` when the server gave no
    ``expires_in``.
    """

    access_token: str = field(repr=False)
    token_type: str = "Bearer"
    expires_at: float | None = None
    refresh_token: str | None = field(default=None, repr=False)
    scope: str | None = None
    account: str | None = None  # who signed in, from an OpenID Connect id_token (display only)

    @property
    def has_refresh_token(self) -> bool:
        return self.refresh_token is not None

    def __repr__(self) -> str:  # explicit, so tokens can never slip in
        return (f"TokenSet(token_type={self.token_type!r}, "
                f"expires_at={self.expires_at!r}, scope={self.scope!r}, "
                f"has_refresh_token={self.has_refresh_token})")


def _need(name: str, value: Json) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string")
    return value


def code_grant(code: str, redirect_uri: str, verifier: str, client_id: str,
               resource: str | None) -> dict:
    """Form fields of the authorization code token request.

    RFC 6749 4.1.3 (``grant_type``, ``code``, ``redirect_uri``,
    ``client_id``), RFC 7636 4.5 (``code_verifier``), RFC 8707 2
    (``resource``: the canonical MCP server URI; left out only for a
    2025-03-26 server, which publishes no resource metadata).
    """
    return {
        "grant_type": "authorization_code",
        "code": _need("code", code),
        "redirect_uri": _need("redirect_uri", redirect_uri),
        "code_verifier": _need("code_verifier", verifier),
        "client_id": _need("client_id", client_id),
        **({"resource": resource} if resource else {}),
    }


def refresh_grant(refresh_token: str, client_id: str, resource: str | None,
                  scope: str | None = None) -> dict:
    """Form fields of a refresh request (RFC 6749 6, RFC 8707 2).

    ``scope`` is only sent when given (it may not exceed the original
    grant); ``client_id`` identifies a public client (RFC 6749 3.2.1).
    """
    form = {
        "grant_type": "refresh_token",
        "refresh_token": _need("refresh_token", refresh_token),
        "client_id": _need("client_id", client_id),
        **({"resource": resource} if resource else {}),
    }
    if scope:
        form["scope"] = scope
    return form


def _form_encode(value: str) -> str:
    # RFC 6749 Appendix B: application/x-www-form-urlencoded, UTF-8.
    return quote_plus(value, safe="", encoding="utf-8")


def client_auth(client_id: str, client_secret: str | None,
                method: str) -> tuple[dict, dict]:
    """Headers and extra form fields that authenticate the client.

    ``none``: a public client sends only ``client_id`` (RFC 6749 2.3,
    RFC 7591 2). ``client_secret_basic``: HTTP Basic with the id and secret
    each form-urlencoded before base64 (RFC 6749 2.3.1). ``client_secret_post``:
    ``client_id`` and ``client_secret`` in the body (RFC 6749 2.3.1).
    """
    _need("client_id", client_id)
    if method == "none":
        return {}, {"client_id": client_id}
    if method not in ("client_secret_basic", "client_secret_post"):
        raise ValueError(f"unsupported token_endpoint_auth_method "
                         f"{str(method)[:64]!r}")
    if not isinstance(client_secret, str) or not client_secret:
        raise ValueError(f"{method} needs a client secret")
    if method == "client_secret_post":
        return {}, {"client_id": client_id, "client_secret": client_secret}
    pair = f"{_form_encode(client_id)}:{_form_encode(client_secret)}"
    encoded = base64.b64encode(pair.encode("ascii")).decode("ascii")
    return {"Authorization": f"Basic {encoded}"}, {}



def _load(body: bytes) -> Json:
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise TypeError("token response body must be bytes")
    if len(body) > MAX_BODY:
        raise OverflowError
    return parse_line(bytes(body))


def _clean_text(value: Json) -> str | None:
    if not isinstance(value, str):
        return None
    text = "".join(c for c in value[:MAX_TEXT] if c.isprintable())
    return text or None


def _error_code(value: Json) -> str | None:
    # RFC 6749 5.2: error = 1*NQSCHAR; keep it short and printable.
    if isinstance(value, str) and 0 < len(value) <= 64 and all(
            0x20 <= ord(c) <= 0x7E and c not in '"\\' for c in value):
        return value
    return None


def _check_token(name: str, value: Json, *, allow_space: bool) -> str:
    # RFC 6749 A.12 / A.17: VSCHAR; the access token goes in an HTTP header
    # (RFC 6750 2.1), so no whitespace or control characters at all.
    low = 0x20 if allow_space else 0x21
    if (not isinstance(value, str) or not value or len(value) > MAX_TOKEN
            or not all(low <= ord(c) <= 0x7E for c in value)):
        raise TokenError(f"token response has an invalid {name}",
                         error="invalid_response", transient=False)
    return value


def parse_token_response(body: bytes, status: int, now: float) -> TokenSet:
    """Check a token endpoint answer (RFC 6749 5.1 success, 5.2 error).

    A 2xx answer must be a JSON object (at most 64 KiB) with an
    ``access_token`` and ``token_type`` ``Bearer`` (case-insensitive,
    RFC 6749 7.1 / RFC 6750); ``expires_in`` gives ``expires_at = now +
    expires_in``. Anything else raises :class:`TokenError`: 5xx and 429 are
    ``transient`` (keep the tokens), 4xx such as ``invalid_grant`` or
    ``invalid_client`` are not (the user must sign in again).
    """
    transient = status >= 500 or status == 429
    try:
        data = _load(body)
    except OverflowError:
        raise TokenError(f"token response is larger than {MAX_BODY} bytes",
                         error="invalid_response", transient=transient,
                         status=status) from None
    except (UnicodeDecodeError, ValueError, RecursionError):
        data = None
    if not 200 <= status < 300 or (isinstance(data, dict) and "error" in data):
        code = _error_code(data.get("error")) if isinstance(data, dict) else None
        desc = (_clean_text(data.get("error_description"))
                if isinstance(data, dict) else None)
        if code is None:
            code = "server_error" if status >= 500 else f"http_{status}"
        message = f"token request refused: {code} (HTTP {status})"
        if desc:
            message += f": {desc}"
        raise TokenError(message, error=code, transient=transient,
                         status=status, description=desc)
    if not isinstance(data, dict):
        raise TokenError("token response is not a JSON object",
                         error="invalid_response", transient=False,
                         status=status)

    access = _check_token("access_token", data.get("access_token"),
                          allow_space=False)
    token_type = data.get("token_type")
    # RFC 9449 5: a DPoP-bound token says "DPoP" (whether one may come is the caller's check)
    if not isinstance(token_type, str) or token_type.lower() not in ("bearer", "dpop"):
        shown = token_type[:32] if isinstance(token_type, str) else None
        raise TokenError(f"token_type {shown!r} is not Bearer (nor DPoP)",
                         error="invalid_response", transient=False,
                         status=status)

    expires_at: float | None = None
    expires_in = data.get("expires_in")
    if expires_in is not None:
        if isinstance(expires_in, str) and expires_in.strip().isdigit():
            expires_in = int(expires_in.strip())  # seen in the wild
        if (isinstance(expires_in, bool)
                or not isinstance(expires_in, (int, float))
                or not 0 <= expires_in <= 10 * 365 * 86400):
            raise TokenError("token response has an invalid expires_in",
                             error="invalid_response", transient=False,
                             status=status)
        expires_at = float(now) + float(expires_in)

    refresh = data.get("refresh_token")
    if refresh is not None:
        refresh = _check_token("refresh_token", refresh, allow_space=True)

    scope = data.get("scope")
    if scope is not None:
        if not isinstance(scope, str) or len(scope) > MAX_TOKEN:
            raise TokenError("token response has an invalid scope",
                             error="invalid_response", transient=False,
                             status=status)
        scope = scope or None

    return TokenSet(access_token=access, token_type="DPoP" if token_type.lower() == "dpop" else "Bearer",
                    expires_at=expires_at, refresh_token=refresh, scope=scope,
                    account=_account(data.get("id_token")))


def _account(id_token: Json) -> str | None:
    """Who signed in, for display: ``email``, ``preferred_username`` or ``sub`` of an
    OpenID Connect ``id_token``. Its signature is not checked: nothing is decided on it."""
    if not isinstance(id_token, str) or not id_token or len(id_token) > MAX_TOKEN:
        return None
    try:
        import jwt

        claims = jwt.decode(id_token, options={"verify_signature": False, "verify_exp": False, "verify_aud": False})
    except Exception:  # not a JWT: no account shown
        return None
    if not isinstance(claims, dict):
        return None
    for key in ("email", "preferred_username", "sub"):
        text = _clean_text(claims.get(key))
        if text:
            return text
    return None


def needs_refresh(tokens: TokenSet, now: float,
                  margin: float = REFRESH_MARGIN) -> bool:
    """True when the access token expires within ``margin`` seconds.

    A token without ``expires_at`` is used until the server answers 401.
    """
    if tokens.expires_at is None:
        return False
    return now >= tokens.expires_at - margin


def merge_refreshed(old: TokenSet, new: TokenSet) -> TokenSet:
    """The tokens to store after a refresh (RFC 6749 6).

    A response without ``refresh_token`` keeps the old one (the server may
    keep it valid); a rotated one replaces it. An omitted ``scope`` means
    the scope is unchanged (RFC 6749 5.1).
    """
    changes: dict = {}
    if new.account is None and old.account is not None:
        changes["account"] = old.account
    if new.refresh_token is None:
        changes["refresh_token"] = old.refresh_token
    if new.scope is None:
        changes["scope"] = old.scope
    return dataclasses.replace(new, **changes) if changes else new
