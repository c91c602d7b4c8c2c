"""The client rules of SEP-2549 (tests/rules/rules.json; docs/rules.rst)."""

from __future__ import annotations

# Rules of this SEP not proved yet: each is an open item of the table until a test here
# proves it, or DECLINED says why we do not follow it.
OPEN = {
    "sep-2549-ttlms-0-response-considered-immediately-stale": "not assessed yet",
    "sep-2549-ttlms-positive-consider-result-fresh-many": "not assessed yet",
    "sep-2549-ttlms-absent-assume-default-0-immediately": "not assessed yet",
    "sep-2549-ttlms-negative-ignore-treat-0": "not assessed yet",
    "sep-2549-once-ttl-expires-response-stale-re": "not assessed yet",
    "sep-2549-treat-ttl-polling-interval-triggers-automatic": "not assessed yet",
    "sep-2549-implementations-do-choose-poll-apply-jitter": "not assessed yet",
    "sep-2549-cached-responses-reused-same-authorization-context": "not assessed yet",
    "sep-2549-cached-page-expires-re-fetch-page": "not assessed yet",
    "sep-2549-require-consistent-snapshot-full-list-re": "not assessed yet",
    "sep-2549-cursor-becomes-invalid-e-g-server": "not assessed yet",
    "sep-2549-serve-cached-response-request-whose-method": "not assessed yet",
    "sep-2549-results-produced-retrying-request-through-multi": "not assessed yet",
}
