"""The client rules of SEP-1933 (tests/rules/rules.json; docs/rules.rst)."""

from __future__ import annotations

# Rules of this SEP not proved yet: each is an open item of the table until a test here
# proves it, or DECLINED says why we do not follow it.
OPEN = {
    "sep-1933-wif-grant-type": "not assessed yet",
    "sep-1933-wif-assertion-missing": "not assessed yet",
    "sep-1933-wif-assertion-verified": "not assessed yet",
    "sep-1933-wif-assertion-expired": "not assessed yet",
    "sep-1933-wif-assertion-audience": "not assessed yet",
    "sep-1933-wif-assertion-malformed": "not assessed yet",
    "sep-1933-wif-no-retry": "not assessed yet",
    "sep-1933-wif-grant-fallback": "not assessed yet",
}
