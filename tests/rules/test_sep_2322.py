"""The client rules of SEP-2322 (tests/rules/rules.json; docs/rules.rst)."""

from __future__ import annotations

# Rules of this SEP not proved yet: each is an open item of the table until a test here
# proves it, or DECLINED says why we do not follow it.
OPEN = {
    "sep-2322-tasks-get-shows-status-input-required": "not assessed yet",
    "sep-2322-construct-results-those-requests-call-tasks": "not assessed yet",
    "sep-2322-after-sending-tasks-input-response-requestor": "not assessed yet",
}
