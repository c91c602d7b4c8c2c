"""The client rules of SEP-837 (tests/rules/rules.json; docs/rules.rst)."""

from __future__ import annotations

# Rules of this SEP not proved yet: each is an open item of the table until a test here
# proves it, or DECLINED says why we do not follow it.
OPEN = {
    "sep-837-application-type-present": "not assessed yet",
    "sep-837-prepared-handle-registration-failures-due-redirect": "not assessed yet",
    "sep-837-registration-request-rejected-surface-meaningful-err": "not assessed yet",
}
