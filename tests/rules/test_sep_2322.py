"""The client rules of SEP-2322 (tests/rules/rules.json; docs/rules.rst)."""

from __future__ import annotations

# The task rules of an older draft of SEP-2322: tasks moved to the tasks extension of
# SEP-2663, whose single tasks/update replaces tasks/result and tasks/input_response.
DECLINED = {
    "sep-2322-tasks-get-shows-status-input-required": (
        "Superseded: under SEP-2663's tasks extension, which albedo_actors speaks, tasks/get itself carries a task's "
        "inputRequests and there is no tasks/result to call; see sep-2663-inspect-field-provide-responses-via-inputresponses."
    ),
    "sep-2322-construct-results-those-requests-call-tasks": (
        "Superseded: SEP-2663 removed tasks/input_response; albedo_actors answers a task's inputRequests with "
        "inputResponses in tasks/update (sep-2663-inspect-field-provide-responses-via-inputresponses and "
        "sep-2663-treat-each-entry-inputrequests-would-equivalent)."
    ),
    "sep-2322-after-sending-tasks-input-response-requestor": (
        "Superseded: SEP-2663 has no tasks/input_response; after its tasks/update albedo_actors goes on polling with "
        "tasks/get (sep-2663-continue-polling-until-task-reaches-terminal)."
    ),
}
