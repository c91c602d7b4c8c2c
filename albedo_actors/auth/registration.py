"""Dynamic Client Registration (RFC 7591): pure request and response checks.

Spec digest section 7.1 step 5 and issue 6 item 3: when the user configured
no client, register a public ``native`` client (RFC 7591 2, MCP 2026
``basic/authorization/client-registration``) with ``refresh_token`` among
its grants when offline access is offered, and check the answer before
using it. No network here: the caller posts :func:`registration_request`
as JSON and hands the raw answer to :func:`parse_registration`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..wire.jsonrpc import WireError, parse_line

__all__ = [
    "AUTH_METHODS",
    "ClientRegistration",
    "MAX_BODY",
    "RegistrationError",
    "parse_registration",
    "registration_request",
]

#: Largest registration answer we read (hostile or broken servers).
MAX_BODY = 64 * 1024
MAX_FIELD = 4096
MAX_REDIRECTS = 64

#: Token endpoint authentication methods we can use (RFC 7591 2).
AUTH_METHODS = ("none", "client_secret_basic", "client_secret_post")


class RegistrationError(ValueError):
    """A registration answer (or request) that must not be used.

    Messages never contain the client secret or the raw body.
    """


@dataclass(frozen=True)
class ClientRegistration:
    """A registered client (RFC 7591 3.2.1).

    ``client_secret`` is ``None`` for a public client and never shown by
    ``repr``.
    """

    client_id: str
    client_secret: str | None = field(default=None, repr=False)
    token_endpoint_auth_method: str = "none"
    redirect_uris: tuple[str, ...] = ()


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
                       requested_method: str | None = None) -> ClientRegistration:
    """Check a client information response (RFC 7591 3.2.1).

    ``requested_method`` is the ``token_endpoint_auth_method`` we asked for: an
    answer that does not name one registered that one. Refused with
    :class:`RegistrationError`: a body over 64 KiB, a content
    type that is not JSON, a body that is not a JSON object, no non-empty
    string ``client_id``, an auth method we cannot use (or one that needs a
    secret the server did not issue), and - when ``redirect_uri`` is given -
    a ``redirect_uris`` list that does not contain it (RFC 7591 3.2.1: the
    server returns the metadata it actually registered).
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

    return ClientRegistration(client_id=client_id, client_secret=secret,
                              token_endpoint_auth_method=method,
                              redirect_uris=redirects)
