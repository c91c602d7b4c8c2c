"""The client rules of SEP-2260 (tests/rules/rules.json; docs/rules.rst)."""

from __future__ import annotations

# Rules of this SEP not proved yet: each is an open item of the table until a test here
# proves it, or DECLINED says why we do not follow it.
OPEN = {
    "sep-2260-return-standard-json-rpc-errors-common": "not assessed yet",
    "sep-2260-return-standard-json-rpc-errors-common-2": "not assessed yet",
    "sep-2260-return-errors-common-failure-cases-sampling": "not assessed yet",
}
