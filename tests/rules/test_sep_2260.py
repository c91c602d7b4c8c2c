"""The client rules of SEP-2260 (tests/rules/rules.json; docs/rules.rst), through a real
ServerHandle against tests/servers/rules_stdio_server.py."""

from __future__ import annotations

import pytest

from stdio_rules_kit import launches, rules_config, started, until

INVALID_PARAMS = -32602


def _answer_to_the_unassociated_request(tmp_path, method: str) -> tuple[dict, list]:
    """The client's answer to ``method`` sent by a 2026-07-28 stdio server after the call
    it was sent beside was answered, from a host that registered every handler."""
    log = str(tmp_path / "log.jsonl")
    asked: list = []
    handlers = {kind: (lambda params, kind=kind: asked.append(kind) or {}) for kind in ("elicitation", "roots", "sampling")}
    with started(rules_config(log), str(tmp_path), handlers=handlers) as handle:
        handle.call_tool("ask", {"method": method}, 10)
        answer = until(lambda: [m for life in launches(log) for m in life if m.get("id") == "srv-1" and "method" not in m],
                       "the client's answer")
    return answer[0], asked


@pytest.mark.rule("sep-2260-return-standard-json-rpc-errors-common")
def test_an_unassociated_elicitation_request_gets_invalid_params(tmp_path):
    """On a 2026-07-28 connection, where no server request can belong to a request of the
    client (input is asked for in an input_required result), an elicitation/create request
    from the server is answered with -32602 Invalid params, even when the host has an
    elicitation handler; the handler is not asked."""
    answer, asked = _answer_to_the_unassociated_request(tmp_path, "elicitation/create")
    assert answer["error"]["code"] == INVALID_PARAMS and "result" not in answer
    assert asked == []


@pytest.mark.rule("sep-2260-return-standard-json-rpc-errors-common-2")
def test_an_unassociated_roots_request_gets_invalid_params(tmp_path):
    """On a 2026-07-28 connection a roots/list request from the server is answered with
    -32602 Invalid params, even when the host has a roots handler; the handler is not asked."""
    answer, asked = _answer_to_the_unassociated_request(tmp_path, "roots/list")
    assert answer["error"]["code"] == INVALID_PARAMS and "result" not in answer
    assert asked == []


@pytest.mark.rule("sep-2260-return-errors-common-failure-cases-sampling")
def test_an_unassociated_sampling_request_gets_invalid_params(tmp_path):
    """On a 2026-07-28 connection a sampling/createMessage request from the server is
    answered with -32602 Invalid params, even when the host has a sampling handler; the
    handler is not asked."""
    answer, asked = _answer_to_the_unassociated_request(tmp_path, "sampling/createMessage")
    assert answer["error"]["code"] == INVALID_PARAMS and "result" not in answer
    assert asked == []
