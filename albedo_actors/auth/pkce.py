"""PKCE (RFC 7636) and ``state`` values for the authorization code flow.

Spec digest 7.1 step 7: the authorization request always uses PKCE with
``S256`` and carries a ``state`` that is checked on return.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import string

#: RFC 7636 section 4.1: unreserved = ALPHA / DIGIT / "-" / "." / "_" / "~"
UNRESERVED = string.ascii_letters + string.digits + "-._~"

MIN_VERIFIER = 43
MAX_VERIFIER = 128


def new_verifier(length: int = 64) -> str:
    """A fresh ``code_verifier`` (RFC 7636 section 4.1).

    ``length`` characters (43..128) drawn with ``secrets`` from the
    unreserved set ``[A-Z] / [a-z] / [0-9] / "-" / "." / "_" / "~"``.
    """
    if not isinstance(length, int) or not MIN_VERIFIER <= length <= MAX_VERIFIER:
        raise ValueError("a PKCE verifier is 43 to 128 characters (RFC 7636 4.1)")
    return "".join(secrets.choice(UNRESERVED) for _ in range(length))


def challenge_s256(verifier: str) -> str:
    """The ``S256`` ``code_challenge`` of ``verifier`` (RFC 7636 section 4.2).

    ``BASE64URL-ENCODE(SHA256(ASCII(code_verifier)))`` without padding.
    """
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def new_state() -> str:
    """A fresh, unguessable ``state`` (RFC 6749 section 10.12; digest 7.1 step 7).

    256 bits from ``secrets``, base64url without padding (43 characters).
    """
    return secrets.token_urlsafe(32)
