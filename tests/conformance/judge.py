"""Judge a conformance run against tests/conformance/expected-failures.txt.

Usage: judge.py EXPECTED_FILE OUT_DIR

OUT_DIR holds one folder per requirement revision (scripts/conformance lays it out):
``REV/requirements.json`` (``{"client": [...scored...], "not_scored": [...]}``, from the
suite's requirements/REV.yaml) and, for the revisions that were run, ``REV/results/``,
the suite's ``--output-dir`` with one ``<scenario>-<timestamp>/checks.json`` per scenario.

A scenario passes when its checks include a SUCCESS and no FAILURE or WARNING (the
suite counts a WARNING as a failure too). Unlike the suite's own summary, a scenario
that emitted no passing check at all fails: ``initialize`` and
``http-standard-headers`` otherwise "pass" for a client that never connected.

EXPECTED_FILE names one scenario per line, ``NAME`` for every revision or
``NAME@REVISION`` for one, with a ``# reason``. The run fails when a scenario fails
without being listed, when a listed scenario passes (remove its line), and when a line
names no scenario of any revision. Scenarios a revision runs but does not score (the
extensions: DPoP, workload identity, enterprise-managed authorization, client
credentials, ...) are judged exactly like scored ones; the table marks them ``ext`` and
the summary counts them apart.
"""

from __future__ import annotations

import json
import os
import re
import sys

TIMESTAMP = re.compile(r"-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$")
BAD = ("FAILURE", "WARNING")


def load_expected(path: str) -> dict[str, str]:
    """Entry (``NAME`` or ``NAME@REVISION``) -> reason."""
    entries: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            text, _, reason = line.partition("#")
            name = text.strip()
            if not name:
                continue
            if len(name.split()) != 1:
                raise SystemExit(f"{path}:{number}: one scenario name per line, then '# reason'")
            entries[name] = reason.strip()
    return entries


def load_results(results_dir: str) -> dict[str, tuple[str, list[dict]]]:
    """Scenario name -> (its result folder, its checks)."""
    found: dict[str, tuple[str, list[dict]]] = {}
    for folder, _dirs, files in os.walk(results_dir):
        if "checks.json" in files:
            name = TIMESTAMP.sub("", os.path.relpath(folder, results_dir)).replace(os.sep, "/")
            with open(os.path.join(folder, "checks.json"), encoding="utf-8") as f:
                found[name] = (folder, json.load(f))
    return found


def verdict(checks: list[dict] | None) -> tuple[bool, str]:
    """(passed, why not) for one scenario's checks."""
    if checks is None:
        return False, "no result (the suite did not run it or crashed)"
    bad = [c for c in checks if c.get("status") in BAD]
    if bad:
        first = bad[0]
        why = first.get("errorMessage") or first.get("description") or ""
        return False, f"{len(bad)} failing check(s); {first.get('id')} {first.get('status')}: {why}"
    if not any(c.get("status") == "SUCCESS" for c in checks):
        return False, "no check passed (the client never got far enough to be checked)"
    return True, ""


def client_says(folder: str) -> str:
    """The last line the client wrote on stderr (ours is a one-line reason)."""
    try:
        with open(os.path.join(folder, "stderr.txt"), encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def judge(expected_path: str, out_dir: str, rules: bool = False) -> int:
    """``rules``: also fail unless every suite check that proves a client rule passed (issue 30)."""
    expected = load_expected(expected_path)
    revisions = sorted(d for d in os.listdir(out_dir) if os.path.isfile(os.path.join(out_dir, d, "requirements.json")))
    scored: dict[str, set[str]] = {}
    judged: dict[str, set[str]] = {}  # scored and unscored
    table: dict[str, dict[str, str]] = {}  # scenario -> revision -> cell
    problems: list[str] = []
    counts = {"pass": 0, "FAIL": 0, "xfail": 0, "XPASS": 0}
    extension_counts = dict(counts)
    run = []
    statuses: dict[str, set[str]] = {}  # check id -> its statuses in every scenario that ran it
    for rev in revisions:
        with open(os.path.join(out_dir, rev, "requirements.json"), encoding="utf-8") as f:
            requirements = json.load(f)
        scored[rev] = set(requirements["client"])
        judged[rev] = scored[rev] | set(requirements["not_scored"])
        results_dir = os.path.join(out_dir, rev, "results")
        if not os.path.isdir(results_dir):
            continue
        run.append(rev)
        results = load_results(results_dir)
        for _folder, scenario_checks in results.values():
            for check in scenario_checks or []:
                statuses.setdefault(str(check.get("id")), set()).add(str(check.get("status")))
        for name in requirements["client"] + requirements["not_scored"]:
            folder, checks = results.get(name, ("", None))
            passed, why = verdict(checks)
            # Unscored scenarios (the extensions) are judged like scored ones; only
            # their cells and counts are kept apart.
            extension = name not in scored[rev]
            listed = name in expected or f"{name}@{rev}" in expected
            cell = {(True, False): "pass", (False, False): "FAIL", (False, True): "xfail", (True, True): "XPASS"}[
                (passed, listed)
            ]
            (extension_counts if extension else counts)[cell] += 1
            table.setdefault(name, {})[rev] = f"ext {cell}" if extension else cell
            if cell == "FAIL":
                said = client_says(folder) if folder else ""
                problems.append(f"{name} @ {rev} failed: {why}" + (f"\n    client: {said}" if said else ""))
            elif cell == "XPASS":
                entry = f"{name}@{rev}" if f"{name}@{rev}" in expected else name
                problems.append(f"{name} @ {rev} passes but is listed as '{entry}': remove or narrow that line")
    for entry in expected:
        name, _, rev = entry.partition("@")
        if not any(name in names for r, names in judged.items() if not rev or r == rev):
            problems.append(f"'{entry}' in {expected_path} names no scenario of any revision: fix or remove the line")
    if not run:
        print(f"judge: no results under {out_dir}", file=sys.stderr)
        return 1
    if rules:
        problems += rule_checks(statuses)

    # Scored scenarios first, in the suite's order, then those only run for show.
    rows = sorted(table, key=lambda name: all(table[name][r].startswith("ext") for r in table[name]))
    width = max(len(name) for name in rows) if rows else 10
    print(f"\n{'scenario'.ljust(width)}  " + "  ".join(rev.ljust(10) for rev in run))
    for name in rows:
        print(f"{name.ljust(width)}  " + "  ".join(table[name].get(rev, "-").ljust(10) for rev in run))
    print("\npass: required and passing; xfail: failing as listed in expected-failures.txt;")
    print("FAIL: failing, not listed; XPASS: listed but passing; ext: an unscored scenario (an extension),")
    print("judged the same way\n")
    for problem in problems:
        print(f"  ✗ {problem}")
    print(f"\nconformance: {counts['xfail'] + extension_counts['xfail']} failing as expected-failures.txt lists")
    print(f"conformance: scored {counts['pass']} passed, unscored (extensions) {extension_counts['pass']} passed")
    # The plain closing line CI reads: "N passed, N failed".
    print(f"conformance: {counts['pass'] + extension_counts['pass']} passed, {len(problems)} failed")
    return 1 if problems else 0


def rule_checks(statuses: dict[str, set[str]]) -> list[str]:
    """The client rules (tests/rules/rules.json) that the suite's own checks prove: each
    such check must have passed in this run, and failed nowhere (issue 30)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "rules"))
    import rulebook  # tests/rules/rulebook.py

    out = []
    for check in rulebook.suite_checks():
        seen = statuses.get(check, set())
        if "SUCCESS" not in seen or seen & set(BAD):
            shown = ", ".join(sorted(seen)) or "never run"
            out.append(f"client rule {check} is proved by the suite's check of that id, which did not pass ({shown}): "
                       "fix it, or prove the rule with a test under tests/rules")
    return out


if __name__ == "__main__":
    argv = sys.argv[1:]
    with_rules = "--rules" in argv
    argv = [a for a in argv if a != "--rules"]
    if len(argv) != 2:
        raise SystemExit("usage: judge.py [--rules] EXPECTED_FILE OUT_DIR")
    sys.exit(judge(argv[0], argv[1], rules=with_rules))
