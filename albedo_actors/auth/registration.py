"""Dynamic Client Registration (RFC 7591): pure request and response checks.

Spec digest section 7.1 step 5 and issue 6 item 3: when the user configured
no client, register a public ``native`` client (RFC 7591 2, MCP 2026
``basic/authorization/client-registration``) with ``refresh_token`` among
its grants when offline access is offered, and check the answer before
using it. No network here: the caller posts :func:`registration_request`
as JSON and hands the raw answer to :func:`parse_registration`.

RFC 7592 (client configuration): an answer that carries a ``registration_client_uri``
and a ``registration_access_token`` lets the client read its registration later
(``GET`` with the token as Bearer); :func:`read_outcome` says what such a read means:
the client is still registered, it is gone, or the read told nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ..wire.jsonrpc import WireError, parse_line

__all__ = [
    "ALIVE",
    "AUTH_METHODS",
    "ClientRegistration",
    "GONE",
    "MAX_BODY",
    "RegistrationError",
    "UNKNOWN",
    "parse_registration",
    "read_outcome",
    "refusal",
    "registration_request",
]

#: Largest registration answer we read (hostile or broken servers).
MAX_BODY = 64 * 1024
MAX_FIELD = 4096
MAX_REDIRECTS = 64

#: The longest ``error_description`` of a refused registration repeated in an error line.
MAX_DESCRIPTION = 200

#: Token endpoint authentication methods we can use (RFC 7591 2).
AUTH_METHODS = ("none", "client_secret_basic", "client_secret_post")

# RFC 6750 2.1 b64token: the registration access token goes into an Authorization header.
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*\Z")


class RegistrationError(ValueError):
    """A registration answer (or request) that must not be used.

    Messages never contain the client secret or the raw body.
    """


@dataclass(frozen=True)
class ClientRegistration:
    """A registered client (RFC 7591 3.2.1).

    ``client_secret`` is ``None`` for a public client and never shown by
    ``repr``. ``registration_client_uri`` and ``registration_access_token``
    (RFC 7592 3) are both set or both ``None``; the token is never shown by
    ``repr`` either.
    """

    client_id: str
    client_secret: str | None = field(default=None, repr=False)
    token_endpoint_auth_method: str = "none"
    redirect_uris: tuple[str, ...] = ()
    registration_client_uri: str | None = None
    registration_access_token: str | None = field(default=None, repr=False)


def registration_request(client_name: str, redirect_uri: str, *,
                         offline_access: bool,
                         auth_method: str = "none") -> dict:
    """The client metadata to POST to the registration endpoint (RFC 7591 2).

    A ``native`` application (MCP 2026: desktop / CLI / localhost clients),
    authorization code grant with ``response_types ["code"]`` (RFC 7591 2.1),
    plus ``refresh_token`` when ``offline_access`` is requested.
    """
    if not isinstance(client_name, str) or not client_name.strip():
        raise RegistrationError("client_name must be a non-empty string")
    if not isinstance(redirect_uri, str) or not redirect_uri:
        raise RegistrationError("redirect_uri must be a non-empty string")
    if auth_method not in AUTH_METHODS:
        raise RegistrationError(
            f"unsupported token_endpoint_auth_method {auth_method!r}")
    grants = ["authorization_code"]
    if offline_access:
        grants.append("refresh_token")
    return {
        "client_name": client_name,
        "redirect_uris": [redirect_uri],
        "grant_types": grants,
        "response_types": ["code"],
        "token_endpoint_auth_method": auth_method,
        "application_type": "native",
    }


def refusal(body: bytes, content_type: str | None) -> tuple[str | None, str | None]:
    """The ``error`` and ``error_description`` of a refused registration (RFC 7591 3.2.2),
    each ``None`` when the answer does not give a usable one.

    The code must be an RFC 6749 error code (printable ASCII without quote or backslash,
    at most 64 characters); the description is kept to its printable characters, cut to
    :data:`MAX_DESCRIPTION` and put on one line. Neither raises on any answer.
    """
    try:
        data = _load_object(body, "registration error", RegistrationError)
    except (RegistrationError, RecursionError, UnicodeDecodeError):
        return None, None
    code = data.get("error")
    if not (isinstance(code, str) and 0 < len(code) <= 64
            and all(0x20 <= ord(c) <= 0x7E and c not in '"\\' for c in code)):
        code = None
    text = data.get("error_description")
    description = None
    if isinstance(text, str):
        description = " ".join("".join(c if c.isprintable() else " " for c in text[:MAX_FIELD]).split())
        if len(description) > MAX_DESCRIPTION:
            description = description[:MAX_DESCRIPTION - 1] + "…"
        description = description or None
    return code, description


def _media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def _is_json_type(content_type: str | None) -> bool:
    media = _media_type(content_type)
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json"))



def _load_object(body: bytes, what: str, error: type[ValueError]) -> dict:
    """Decode a bounded UTF-8 JSON object (RFC 8259), or raise ``error``."""
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise error(f"{what} body must be bytes")
    if len(body) > MAX_BODY:
        raise error(f"{what} is larger than {MAX_BODY} bytes")
    try:
        data = parse_line(bytes(body))
    except WireError:
        raise error(f"{what} is not JSON") from None
    if not isinstance(data, dict):
        raise error(f"{what} is not a JSON object")
    return data


def _opt_str(data: dict, key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_FIELD:
        raise RegistrationError(f"registration field {key} is not a string")
    return value


def parse_registration(body: bytes, content_type: str | None, *,
                       redirect_uri: str | None = None,
                       requested_method: str | None = None,
                       allow_http: bool = False) -> ClientRegistration:
    """Check a client information response (RFC 7591 3.2.1).

    ``requested_method`` is the ``token_endpoint_auth_method`` we asked for: an
    answer that does not name one registered that one. Refused with
    :class:`RegistrationError`: a body over 64 KiB, a content
    type that is not JSON, a body that is not a JSON object, no non-empty
    string ``client_id``, an auth method we cannot use (or one that needs a
    secret the server did not issue), and - when ``redirect_uri`` is given -
    a ``redirect_uris`` list that does not contain it (RFC 7591 3.2.1: the
    server returns the metadata it actually registered).

    The RFC 7592 pair is kept only when both are usable: an absolute https URL
    (http too with ``allow_http``, for a plain-http server) without a fragment,
    and an RFC 6750 ``b64token``. Anything else leaves both ``None``: the
    registration is used all the same, only never read back.
    """
    if content_type and not _is_json_type(content_type):
        raise RegistrationError(
            f"registration answer has content type "
            f"{_media_type(content_type)[:64]!r}, not JSON")
    data = _load_object(body, "registration answer", RegistrationError)

    client_id = data.get("client_id")
    if not isinstance(client_id, str) or not client_id.strip():
        raise RegistrationError("registration answer has no client_id")
    if len(client_id) > MAX_FIELD:
        raise RegistrationError("registration client_id is too long")

    secret = _opt_str(data, "client_secret") or None

    method = _opt_str(data, "token_endpoint_auth_method")
    if method is None and requested_method in AUTH_METHODS and (requested_method == "none" or secret):
        # An answer that does not echo the method registered the one we asked for.
        method = requested_method
    if method is None:
        # RFC 7591 2 defaults to client_secret_basic; without a secret the
        # only usable reading is a public client.
        method = "client_secret_basic" if secret else "none"
    if method not in AUTH_METHODS:
        raise RegistrationError(
            f"unsupported token_endpoint_auth_method {method[:64]!r}")
    if method != "none" and secret is None:
        raise RegistrationError(
            f"token_endpoint_auth_method {method} needs a client_secret")

    raw_redirects = data.get("redirect_uris")
    if raw_redirects is None:
        redirects: tuple[str, ...] = (redirect_uri,) if redirect_uri else ()
    else:
        if (not isinstance(raw_redirects, list)
                or len(raw_redirects) > MAX_REDIRECTS
                or not all(isinstance(u, str) and len(u) <= MAX_FIELD
                           for u in raw_redirects)):
            raise RegistrationError("registration redirect_uris is not a list "
                                    "of strings")
        redirects = tuple(raw_redirects)
    if redirect_uri is not None and redirect_uri not in redirects:
        raise RegistrationError(
            "the authorization server did not register our redirect URI")

    uri, token = _configuration(data, allow_http)
    return ClientRegistration(client_id=client_id, client_secret=secret,
                              token_endpoint_auth_method=method,
                              redirect_uris=redirects,
                              registration_client_uri=uri,
                              registration_access_token=token)


def _configuration(data: dict, allow_http: bool) -> tuple[str | None, str | None]:
    """The RFC 7592 ``registration_client_uri`` and ``registration_access_token``
    of an answer, when both are there and usable; else ``(None, None)``."""
    uri, token = data.get("registration_client_uri"), data.get("registration_access_token")
    if not (isinstance(uri, str) and isinstance(token, str)) or len(uri) > MAX_FIELD or len(token) > MAX_FIELD:
        return None, None
    if not _B64TOKEN.match(token) or any(c in uri for c in " \t\r\n\x00"):
        return None, None
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        return None, None
    scheme = parts.scheme.lower()
    if not parts.hostname or parts.fragment or scheme not in (("https", "http") if allow_http else ("https",)):
        return None, None
    return uri, token


#: What a read of a kept registration (RFC 7592 2.1) means.
ALIVE, GONE, UNKNOWN = "alive", "gone", "unknown"


def read_outcome(status: int, body: bytes, content_type: str | None, client_id: str, *,
                 redirect_uri: str | None = None, requested_method: str | None = None,
                 allow_http: bool = False) -> tuple[str, ClientRegistration | None]:
    """What the answer to ``GET registration_client_uri`` says of ``client_id``.

    ``(GONE, None)``: 401, 403 or 404, or an ``invalid_client`` error (RFC 7592
    2.1: a client that does not exist is answered 401 and its token revoked; one
    that may not read its registration, 403). ``(ALIVE, registration)``: a 200
    whose body is a usable registration of ``client_id`` (its secret and access
    token may be new ones: RFC 7592 2.1 says to use them from now on).
    ``(UNKNOWN, None)``: anything else (a 5xx, an unreadable body, another
    client's registration), which says nothing either way.
    """
    if status in (401, 403, 404):
        return GONE, None
    try:
        data = _load_object(body, "registration read", RegistrationError)
    except RegistrationError:
        return UNKNOWN, None
    if data.get("error") == "invalid_client":
        return GONE, None
    if status != 200:
        return UNKNOWN, None
    try:
        found = parse_registration(body, content_type, redirect_uri=redirect_uri,
                                   requested_method=requested_method, allow_http=allow_http)
    except RegistrationError:
        return UNKNOWN, None
    if found.client_id != client_id:
        return UNKNOWN, None
    return ALIVE, found
