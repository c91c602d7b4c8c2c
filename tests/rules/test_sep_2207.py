"""The client rules of SEP-2207 (tests/rules/rules.json; docs/rules.rst)."""

from __future__ import annotations

# Rules of this SEP not proved yet: each is an open item of the table until a test here
# proves it, or DECLINED says why we do not follow it.
OPEN = {
    "sep-2207-client-metadata-grant-types": "not assessed yet",
    "sep-2207-desire-refresh-tokens-keep-refresh-tokens": "not assessed yet",
    "sep-2207-desire-refresh-tokens-assume-refresh-tokens": "not assessed yet",
}
