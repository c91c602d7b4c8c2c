"""The client rules of SEP-2468 (tests/rules/rules.json; docs/rules.rst)."""

from __future__ import annotations

# Rules of this SEP not proved yet: each is an open item of the table until a test here
# proves it, or DECLINED says why we do not follow it.
OPEN = {
    "sep-2468-client-validate-metadata-issuer": "not assessed yet",
    "sep-2468-client-compare-iss-supported": "not assessed yet",
    "sep-2468-client-reject-missing-iss": "not assessed yet",
    "sep-2468-client-compare-iss-unadvertised": "not assessed yet",
    "sep-2468-client-proceed-no-iss": "not assessed yet",
    "sep-2468-client-no-normalization": "not assessed yet",
    "sep-2468-validation-applies-equally-error-responses-mismatch": "not assessed yet",
}
