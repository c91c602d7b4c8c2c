"""A server's OAuth record: what the store keeps of a sign-in (``Credentials.oauth``).

The record is tied to the server URL it was made for: a record whose ``url`` is not the
configured URL is never used (:func:`usable`), so a token is never sent to another
server. ``repr`` and :meth:`OAuthRecord.view` never show a token or a secret.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from .tokens import REFRESH_MARGIN, TokenSet, needs_refresh

if TYPE_CHECKING:  # the record's type only: no layer below actors/ loads the store
    from ..store.records import Credentials

STATES = ("none", "needs_sign_in", "signed_in", "signed_out")

__all__ = ["OAuthRecord", "STATES", "from_credentials", "usable"]


@dataclass(frozen=True)
class OAuthRecord:
    url: str
    state: str = "needs_sign_in"
    reason: str | None = None
    # what discovery found (kept so a refresh needs no discovery)
    resource: str | None = None
    issuer: str | None = None
    token_endpoint: str | None = None
    # the client that signed in
    client_kind: str | None = None  # configured, registered, metadata_document, client_credentials
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)  # a registered client's only
    auth_method: str = "none"
    # tokens
    access_token: str | None = field(default=None, repr=False)
    refresh_token: str | None = field(default=None, repr=False)
    expires_at: float | None = None
    scope: str | None = None  # granted
    requested_scope: str | None = None
    step_up: str | None = None  # scopes a 403 insufficient_scope asked for, for the next sign-in
    # the last 401 challenge
    resource_metadata: str | None = None
    challenge_scope: str | None = None
    account: str | None = None
    # a client the user registered by hand and gave through the settings (secrets.oauth_client)
    configured_client_id: str | None = None
    configured_client_secret: str | None = field(default=None, repr=False)
    # A configured client (extensions.json or the settings) belongs to the issuer it was
    # first used with: its secret is never sent to another (see signin.check_client_issuer).
    bound_client_id: str | None = None
    bound_issuer: str | None = None
    obtained_at: float | None = None  # when the access token was issued to us
    # A sign-out unbinds the server from every dynamic registration kept before it: its
    # next sign-in registers a new client (signin.choose_client). Other servers that
    # share the old registration keep it (their records hold their own client id).
    reuse_registrations_after: float | None = None
    # DPoP (RFC 9449, auth/dpop.py): the server's private key as a JWK, while DPoP is used
    # for it, and the access token's type. A "DPoP" token is only ever sent with a proof
    # of that key, never as Bearer.
    token_type: str | None = None  # "Bearer" or "DPoP" (None: an older record, Bearer)
    dpop_key: str | None = field(default=None, repr=False)
    updated_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> "OAuthRecord | None":
        if not isinstance(data, Mapping) or not isinstance(data.get("url"), str):
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        for key, value in values.items():
            number = key in ("expires_at", "updated_at", "obtained_at", "reuse_registrations_after")
            if value is not None and not (isinstance(value, (int, float)) and not isinstance(value, bool) if number
                                          else isinstance(value, str)):
                return None  # a damaged record is no record: the server asks for a sign-in again
        if values.get("state") not in STATES:
            values["state"] = "needs_sign_in"
        return cls(**values)

    @property
    def tokens(self) -> TokenSet | None:
        if not self.access_token:
            return None
        return TokenSet(access_token=self.access_token, token_type=self.token_type or "Bearer", expires_at=self.expires_at,
                        refresh_token=self.refresh_token, scope=self.scope, account=self.account)

    @property
    def dpop_bound(self) -> bool:
        """True when the access token is DPoP-bound: sent only with a proof of ``dpop_key``."""
        return self.token_type == "DPoP"

    def expiring(self, now: float | None = None) -> bool:
        """True when the access token should be refreshed before it is sent.

        Within a minute of expiry; for a token that lives less than two minutes in all,
        once half its life has passed (else a 30 s token would be refreshed before
        every request).
        """
        tokens = self.tokens
        if tokens is None or tokens.expires_at is None:
            return False
        margin: float = REFRESH_MARGIN
        if self.obtained_at is not None and tokens.expires_at > self.obtained_at:
            margin = min(margin, (tokens.expires_at - self.obtained_at) / 2)
        return needs_refresh(tokens, time.time() if now is None else now, margin)

    def replace(self, **changes: Any) -> "OAuthRecord":
        return dataclasses.replace(self, updated_at=time.time(), **changes)

    def with_tokens(self, tokens: TokenSet, requested_scope: str | None = None) -> "OAuthRecord":
        return self.replace(
            state="signed_in", reason=None, access_token=tokens.access_token, obtained_at=time.time(),
            token_type=tokens.token_type,
            refresh_token=tokens.refresh_token, expires_at=tokens.expires_at,
            scope=tokens.scope or requested_scope or self.scope, account=tokens.account or self.account,
            requested_scope=requested_scope if requested_scope is not None else self.requested_scope,
        )

    def signed_out(self, state: str, reason: str | None) -> "OAuthRecord":
        """The record without tokens (the client registration, its issuer and step-up are kept).

        The DPoP key goes with the tokens it bound: the next sign-in makes a new one, so
        a key copied before the sign-out proves nothing afterwards."""
        return self.replace(state=state, reason=reason, access_token=None, refresh_token=None, expires_at=None, scope=None,
                            obtained_at=None, token_type=None, dpop_key=None)

    def view(self) -> dict[str, Any]:
        """What the settings show: never a token or a secret."""
        return {
            "state": self.state,
            "account": self.account,
            "expires_at": self.expires_at,
            "scope": self.scope,
            "step_up": self.step_up,
            "reason": self.reason,
            "client": ({"kind": self.client_kind, "id": self.client_id, "issuer": self.issuer} if self.client_id is not None
                       else {"kind": "configured", "id": self.configured_client_id, "issuer": None}
                       if self.configured_client_id else None),
        }


NO_AUTH_VIEW = {"state": "none", "account": None, "expires_at": None, "scope": None, "step_up": None, "reason": None, "client": None}


def from_credentials(credentials: Credentials | None) -> OAuthRecord | None:
    return OAuthRecord.from_json(credentials.oauth if credentials is not None else None)


def usable(record: OAuthRecord | None, url: str | None) -> OAuthRecord | None:
    """The record when it belongs to ``url``; None for another server's (never sent)."""
    if record is None or url is None or record.url != url:
        return None
    return record
