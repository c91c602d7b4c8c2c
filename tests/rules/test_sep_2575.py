"""The client rules of SEP-2575 (tests/rules/rules.json; docs/rules.rst)."""

from __future__ import annotations

# Rules of this SEP not proved yet: each is an open item of the table until a test here
# proves it, or DECLINED says why we do not follow it.
OPEN = {
    "sep-2575-client-declares-roots-capability": "not assessed yet",
    "sep-2575-client-declares-sampling-capability": "not assessed yet",
    "sep-2575-distinguish-notifications-belonging-different-concu": "not assessed yet",
    "sep-2575-check-acknowledged-filter-against-what-requested": "not assessed yet",
    "sep-2575-because-there-no-per-request-status": "not assessed yet",
    "sep-2575-cancel-flight-request-stdio-send-notifications": "not assessed yet",
    "sep-2575-server-process-exits-unexpectedly-restart": "not assessed yet",
    "sep-2575-server-returns-unsupportedprotocolversionerror-stdi": "not assessed yet",
    "sep-2575-stdio-connection-terminated-then-re-established": "not assessed yet",
}
