"""The client rules of SEP-1932 (tests/rules/rules.json; docs/rules.rst)."""

from __future__ import annotations

# Rules of this SEP not proved yet: each is an open item of the table until a test here
# proves it, or DECLINED says why we do not follow it.
OPEN = {
    "sep-1932-client-dpop-auth-scheme": "not assessed yet",
    "sep-1932-client-fresh-proof": "not assessed yet",
    "sep-1932-client-token-request-proof": "not assessed yet",
    "sep-1932-client-as-nonce": "not assessed yet",
    "sep-1932-client-rs-nonce": "not assessed yet",
    "sep-1932-asymmetric-alg-only": "not assessed yet",
    "sep-1932-implementations-also-conform-baseline-authorization": "not assessed yet",
    "sep-1932-implementations-adopting-extension-follow-security": "not assessed yet",
    "sep-1932-protect-dpop-private-keys-using-appropriate": "not assessed yet",
    "sep-1932-browser-based-use-web-crypto-api": "not assessed yet",
}
