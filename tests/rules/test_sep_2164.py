"""The client rules of SEP-2164 (tests/rules/rules.json; docs/rules.rst)."""

from __future__ import annotations

# Rules of this SEP not proved yet: each is an open item of the table until a test here
# proves it, or DECLINED says why we do not follow it.
OPEN = {
    "sep-2164-also-accept-32002-resource-found-error": "not assessed yet",
}
