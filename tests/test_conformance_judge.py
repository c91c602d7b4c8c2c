"""tests/conformance/judge.py: how scripts/conformance turns suite results into a verdict."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "conformance"))
import judge  # noqa: E402

STAMP = "-2026-11-30T01-45-46-517Z"


def write_run(out, rev, scored, not_scored=(), results=None):
    """Lay out OUT/REV as scripts/conformance does; results maps scenario -> statuses."""
    os.makedirs(os.path.join(out, rev), exist_ok=True)
    with open(os.path.join(out, rev, "requirements.json"), "w") as f:
        json.dump({"client": list(scored), "not_scored": list(not_scored)}, f)
    if results is None:
        return
    for name, statuses in results.items():
        folder = os.path.join(out, rev, "results", name + STAMP)
        os.makedirs(folder)
        checks = [{"id": f"c{i}", "status": s, "description": "d"} for i, s in enumerate(statuses)]
        with open(os.path.join(folder, "checks.json"), "w") as f:
            json.dump(checks, f)


def run(tmp_path, expected_lines, results, scored=None, not_scored=()):
    """Judge a 2025-11-25 run; 2026-07-28 is known (as in every real run) but not run."""
    case = tmp_path / str(len(os.listdir(tmp_path)))
    case.mkdir()
    expected = case / "expected.txt"
    expected.write_text("".join(line + "\n" for line in expected_lines))
    out = str(case / "out")
    write_run(out, "2025-11-25", scored or list(results), not_scored, results)
    write_run(out, "2026-07-28", scored or list(results))
    return judge.judge(str(expected), out)


def test_passing_and_listed_failing_scenarios_pass(tmp_path):
    results = {"tools_call": ["SUCCESS", "INFO"], "auth/pre-registration": ["FAILURE"]}
    assert run(tmp_path, ["auth/pre-registration  # no OAuth yet"], results) == 0


@pytest.mark.parametrize(
    "statuses",
    [["FAILURE"], ["SUCCESS", "WARNING"], [], ["INFO", "SKIPPED"]],
    ids=["failure", "warning", "no-checks", "nothing-passed"],
)
def test_an_unlisted_failure_fails(tmp_path, statuses):
    assert run(tmp_path, [], {"initialize": statuses}) == 1


def test_a_scenario_without_result_fails(tmp_path):
    assert run(tmp_path, [], {}, scored=["sse-retry"]) == 1


def test_a_listed_scenario_that_passes_fails(tmp_path):
    assert run(tmp_path, ["tools_call # was broken"], {"tools_call": ["SUCCESS"]}) == 1


def test_an_entry_for_another_revision_does_not_excuse(tmp_path):
    assert run(tmp_path, ["tools_call@2026-07-28 # x"], {"tools_call": ["FAILURE"]}) == 1
    assert run(tmp_path, ["tools_call@2025-11-25 # x"], {"tools_call": ["FAILURE"]}) == 0


def test_an_entry_naming_no_scored_scenario_fails(tmp_path):
    assert run(tmp_path, ["tools-call # typo"], {"tools_call": ["SUCCESS"]}) == 1


def test_an_unscored_scenario_is_judged_like_a_scored_one(tmp_path, capsys):
    # Issue 15: the extensions count too; a failing one fails the run unless listed.
    results = {"tools_call": ["SUCCESS"], "auth/dpop": ["FAILURE"]}
    assert run(tmp_path, [], results, scored=["tools_call"], not_scored=["auth/dpop"]) == 1
    assert "auth/dpop @ 2025-11-25 failed" in capsys.readouterr().out


def test_an_unscored_scenario_without_result_fails(tmp_path):
    assert run(tmp_path, [], {"tools_call": ["SUCCESS"]}, scored=["tools_call"], not_scored=["auth/dpop"]) == 1


def test_a_listed_unscored_failure_is_excused_and_its_pass_is_not(tmp_path):
    failing = {"tools_call": ["SUCCESS"], "auth/dpop": ["FAILURE"]}
    assert run(tmp_path, ["auth/dpop # not yet"], failing, scored=["tools_call"], not_scored=["auth/dpop"]) == 0
    passing = {"tools_call": ["SUCCESS"], "auth/dpop": ["SUCCESS"]}
    assert run(tmp_path, ["auth/dpop # not yet"], passing, scored=["tools_call"], not_scored=["auth/dpop"]) == 1


def test_unscored_passes_are_counted_apart(tmp_path, capsys):
    results = {"tools_call": ["SUCCESS"], "auth/dpop": ["SUCCESS"], "auth/wif-jwt-bearer": ["SUCCESS"]}
    assert run(tmp_path, [], results, scored=["tools_call"], not_scored=["auth/dpop", "auth/wif-jwt-bearer"]) == 0
    out = capsys.readouterr().out
    assert "scored 1 passed, unscored (extensions) 2 passed" in out
    assert "conformance: 3 passed, 0 failed" in out
    assert "ext pass" in out


def test_nested_scenario_folders_are_named_by_their_path(tmp_path):
    # auth/... scenarios live in results/auth/<name>-<time>/
    results = {"auth/metadata-var1": ["FAILURE"]}
    assert run(tmp_path, ["auth/metadata-var1 # no OAuth yet"], results) == 0


def test_with_rules_a_suite_check_that_proves_a_client_rule_must_pass(tmp_path, capsys):
    # issue 30: the rules tests/rules/rules.json says the suite proves are judged by their
    # check ids: each must pass in the run and fail nowhere.
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "rules"))
    import rulebook

    proved = rulebook.suite_checks()
    assert proved

    def judged(statuses):
        case = tmp_path / str(len(os.listdir(tmp_path)))
        case.mkdir()
        (case / "expected.txt").write_text("")
        out = str(case / "out")
        write_run(out, "2025-11-25", ["s"], results=None)
        folder = os.path.join(out, "2025-11-25", "results", "s" + STAMP)
        os.makedirs(folder)
        with open(os.path.join(folder, "checks.json"), "w") as f:
            json.dump([{"id": check, "status": statuses.get(check, "SUCCESS"), "description": "d"} for check in proved], f)
        write_run(out, "2026-07-28", ["s"])
        return judge.judge(str(case / "expected.txt"), out, rules=True)

    assert judged({}) == 0
    capsys.readouterr()
    assert judged({proved[0]: "FAILURE"}) == 1
    assert f"client rule {proved[0]}" in capsys.readouterr().out
