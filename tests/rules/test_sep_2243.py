"""The client rules of SEP-2243 (tests/rules/rules.json; docs/rules.rst)."""

from __future__ import annotations

# Rules of this SEP not proved yet: each is an open item of the table until a test here
# proves it, or DECLINED says why we do not follow it.
OPEN = {
    "sep-2243-client-includes-standard-headers": "not assessed yet",
    "sep-2243-header-name-case-insensitive": "not assessed yet",
    "sep-2243-log-warning-rejecting-tool-definition-due": "not assessed yet",
}
