"""The client rules of SEP-2106 (tests/rules/rules.json; docs/rules.rst)."""

from __future__ import annotations

# Rules of this SEP not proved yet: each is an open item of the table until a test here
# proves it, or DECLINED says why we do not follow it.
OPEN = {
    "sep-2106-json-schema-validation-already-handles-type": "not assessed yet",
    "sep-2106-opt-mode-fetches-non-local-ref": "not assessed yet",
    "sep-2106-implementations-apply-reasonable-bounds-example-max": "not assessed yet",
}
