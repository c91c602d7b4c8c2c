"""The client rules of SEP-2352 (tests/rules/rules.json; docs/rules.rst)."""

from __future__ import annotations

# Rules of this SEP not proved yet: each is an open item of the table until a test here
# proves it, or DECLINED says why we do not follow it.
OPEN = {
    "sep-2352-no-cross-as-credential-reuse": "not assessed yet",
    "sep-2352-no-reuse-on-as-change": "not assessed yet",
    "sep-2352-reregister-on-as-change": "not assessed yet",
    "sep-2352-maintain-separate-registration-state-credentials-to": "not assessed yet",
    "sep-2352-use-pre-registered-credentials-persist-credentials": "not assessed yet",
    "sep-2352-authorization-server-indicated-protected-resource-m": "not assessed yet",
}
