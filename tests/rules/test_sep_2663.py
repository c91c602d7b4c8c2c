"""The client rules of SEP-2663 (tests/rules/rules.json; docs/rules.rst)."""

from __future__ import annotations

# Rules of this SEP not proved yet: each is an open item of the table until a test here
# proves it, or DECLINED says why we do not follow it.
OPEN = {
    "sep-2663-client-handles-polymorphic-result": "not assessed yet",
    "sep-2663-client-rejects-task-result-on-unsupported": "not assessed yet",
    "sep-2663-cancel-not-via-cancelled-notification": "not assessed yet",
    "sep-2663-client-emits-mcp-name-on-tasks-methods": "not assessed yet",
    "sep-2663-respect-pollintervalms-provided-responses-determini": "not assessed yet",
    "sep-2663-continue-polling-until-task-reaches-terminal": "not assessed yet",
    "sep-2663-persist-task-ids-durable-storage-so": "not assessed yet",
    "sep-2663-inspect-field-provide-responses-via-inputresponses": "not assessed yet",
    "sep-2663-treat-each-entry-inputrequests-would-equivalent": "not assessed yet",
    "sep-2663-deduplicate-inputrequests-keys-across-consecutive-p": "not assessed yet",
    "sep-2663-track-inputrequests-keys-avoid-responding-requests": "not assessed yet",
    "sep-2663-hosts-apply-same-trust-model-these": "not assessed yet",
}
