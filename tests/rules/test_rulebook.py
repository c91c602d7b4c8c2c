"""The client-rules pack is whole, and its table in the docs is current (issue 30).

Every rule of tests/rules/rules.json has a test under tests/rules marked with it, or the
official suite's passing check, or a reason it is declined, or an open item; no marker
names a rule that is not in the list; and docs/rules.rst is what scripts/rules-table
makes of them now.
"""

from __future__ import annotations

import json

import rulebook


def test_every_rule_has_a_test_a_suite_check_or_a_reason():
    assert rulebook.problems() == []


def test_the_docs_table_is_generated_from_the_markers_and_current():
    assert rulebook.TABLE.read_text(encoding="utf-8") == rulebook.table(), \
        "docs/rules.rst is out of date: run scripts/rules-table"


def test_the_list_is_pinned_and_each_rule_quotes_its_words():
    data = rulebook.load()
    assert len(data["source"]["commit"]) == 40
    keys = [rule["key"] for rule in data["rules"]]
    assert len(keys) == len(set(keys))
    for rule in data["rules"]:
        assert rule["words"].strip() and rule["level"] in ("MUST", "MUST NOT", "SHOULD", "SHOULD NOT", "MAY")
        assert isinstance(rule["sep"], int) and rule["key"].startswith(f"sep-{rule['sep']}-")
        if rule.get("suite_proves"):
            assert rule.get("check") == rule["key"]


def test_the_list_is_valid_json_ending_in_a_newline():
    text = rulebook.RULES.read_text(encoding="utf-8")
    assert text.endswith("\n") and json.loads(text)
