"""The client-rules pack: every client obligation of the official conformance suite's
requirement files, and how we stand on each (issue 30).

``rules.json`` is the list: each client-side sentence (MUST, SHOULD, MAY) of the
suite's ``src/seps/sep-*.yaml`` at the pinned commit named in its ``source``, with a key
(the suite's check id where it has one, else one of ours), its SEP, its level and its
words quoted. How we stand on a rule is said in exactly one of four ways:

- a test under ``tests/rules/`` marked ``@pytest.mark.rule("KEY")`` (its docstring's
  first line is our behaviour, as the table shows it);
- ``"suite_proves": true`` in the list: the official suite checks it, and
  ``scripts/conformance`` fails unless that check passed in the same run
  (tests/conformance/judge.py);
- ``DECLINED = {"KEY": "why"}`` in a module of ``tests/rules/``: a MAY we skip, or a
  SHOULD we deliberately differ on, or a rule that binds no client of ours, with the
  reason;
- ``OPEN = {"KEY": "what is missing"}``: a rule we do not meet yet, shown as open.

Everything here is read from the source (``ast``), never by importing the tests, so the
table (``docs/rules.rst``, written by ``scripts/rules-table``) is made the same way by
the script and by the test that checks it is current (tests/rules/test_rulebook.py).
"""

from __future__ import annotations

import ast
import json
import os
import pathlib
import textwrap
from dataclasses import dataclass, field
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
RULES = HERE / "rules.json"
TABLE = REPO / "docs" / "rules.rst"


@dataclass
class Standing:
    tests: list[tuple[str, str]] = field(default_factory=list)  # (node id, behaviour)
    declined: str | None = None
    open: str | None = None


def load() -> dict[str, Any]:
    with open(RULES, encoding="utf-8") as f:
        return json.load(f)


def _marked(decorator: ast.expr) -> list[str]:
    """The rule keys a ``@pytest.mark.rule("K", ...)`` decorator names."""
    call = decorator if isinstance(decorator, ast.Call) else None
    if call is None:
        return []
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "rule"):
        return []
    return [arg.value for arg in call.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]


def scan(folder: pathlib.Path = HERE) -> tuple[dict[str, Standing], list[str]]:
    """Every rule key the tests of ``folder`` mark, decline or leave open; and problems
    (a module whose DECLINED/OPEN is not a literal dict of strings)."""
    found: dict[str, Standing] = {}
    problems: list[str] = []
    for path in sorted(folder.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        relative = path.relative_to(REPO).as_posix()
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and node.targets[0].id in ("DECLINED", "OPEN"):
                try:
                    value = ast.literal_eval(node.value)
                except ValueError:
                    value = None
                if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) and v.strip()
                                                          for k, v in value.items()):
                    problems.append(f"{relative}: {node.targets[0].id} must be a literal dict of rule key -> reason")
                    continue
                for key, reason in value.items():
                    standing = found.setdefault(key, Standing())
                    if node.targets[0].id == "DECLINED":
                        standing.declined = " ".join(reason.split())
                    else:
                        standing.open = " ".join(reason.split())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                keys = [key for decorator in node.decorator_list for key in _marked(decorator)]
                if not keys:
                    continue
                doc = ast.get_docstring(node) or ""
                behaviour = " ".join(doc.strip().split("\n\n")[0].split()) if doc else ""
                for key in keys:
                    found.setdefault(key, Standing()).tests.append((f"{relative}::{node.name}", behaviour))
    return found, problems


def problems() -> list[str]:
    """What keeps the pack from being whole: a rule with no standing, a test or entry
    naming no rule, a rule both tested and declined, a rule test without a docstring."""
    rules = load()["rules"]
    keys = {rule["key"] for rule in rules}
    found, out = scan()
    for key in sorted(set(found) - keys):
        out.append(f"{key!r} is marked, declined or open in tests/rules but is no rule of rules.json")
    for rule in rules:
        standing = found.get(rule["key"], Standing())
        ways = bool(standing.tests) + bool(standing.declined) + bool(standing.open) + bool(rule.get("suite_proves"))
        if ways == 0:
            out.append(f"{rule['key']} (SEP-{rule['sep']}) has neither a test nor a reason: mark a test under tests/rules "
                       "with @pytest.mark.rule, or say why in DECLINED or OPEN")
        elif standing.declined and (standing.tests or rule.get("suite_proves")):
            out.append(f"{rule['key']} is both declined and proved: choose one")
        for node, behaviour in standing.tests:
            if not behaviour:
                out.append(f"{node} proves {rule['key']} but has no docstring (its first line is the table's behaviour)")
    return out


def counts() -> dict[str, int]:
    rules = load()["rules"]
    found, _ = scan()
    tally = {"rules": len(rules), "tested": 0, "suite": 0, "declined": 0, "open": 0}
    for rule in rules:
        standing = found.get(rule["key"], Standing())
        if standing.tests:
            tally["tested"] += 1
        elif rule.get("suite_proves"):
            tally["suite"] += 1
        elif standing.declined:
            tally["declined"] += 1
        elif standing.open:
            tally["open"] += 1
    return tally


def _cell(text: str) -> str:
    """``text`` on one line, every reStructuredText markup character escaped: the words
    and behaviours are shown as written, never read as markup."""
    line = _one_line(text).replace("\\", "\\\\")
    for mark in "`*_|[]<>":
        line = line.replace(mark, "\\" + mark)
    return line


def _one_line(text: str) -> str:
    """``text`` with every run of whitespace one space, its ends kept as they were (one space)."""
    joined = " ".join(text.split())
    if text[:1].isspace() and joined:
        joined = " " + joined
    if text[-1:].isspace() and joined:
        joined += " "
    return joined


def _prose(text: str) -> str:
    """A test's docstring sentence for the page: its ````literal```` spans kept as
    literals, everything else escaped as :func:`_cell` escapes it."""
    parts = " ".join(text.split()).split("``")
    if len(parts) % 2 == 0:  # an unmatched ````: nothing is read as a literal
        return _cell(text)
    return "".join(_cell(part) if i % 2 == 0 else f"``{part}``" for i, part in enumerate(parts))


def _wrap(text: str, width: int = 88) -> list[str]:
    """Lines of at most ``width``, never breaking a word or a hyphenated name (an inline
    literal broken across lines would read as another name)."""
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)


def table() -> str:
    """docs/rules.rst, made from rules.json and the tests' markers."""
    data = load()
    found, _ = scan()
    source = data["source"]
    tally = counts()
    out = [
        "Client rules",
        "============",
        "",
        ".. This page is generated by scripts/rules-table from tests/rules/rules.json and the",
        "   markers of tests/rules/test_*.py; tests/rules/test_rulebook.py fails when it is not current.",
        "",
        "Every client obligation (MUST, SHOULD, MAY) that the official conformance suite's",
        f"requirement files list, at `{source['repository']}` commit ``{source['commit'][:12]}``",
        f"(``{source['files']}``), and how albedo_actors stands on it. Each rule is proved by a",
        "test of ``tests/rules/`` that runs the real client against a server of our own, or by",
        "the official suite's own check (``scripts/conformance`` fails unless it passed), or",
        "is declined with the reason, or is open.",
        "",
        f"{tally['rules']} rules: {tally['tested']} tested by us, {tally['suite']} checked by the official suite, "
        f"{tally['declined']} declined with a reason, {tally['open']} open.",
        "",
    ]
    by_sep: dict[int, list[dict[str, Any]]] = {}
    for rule in data["rules"]:
        by_sep.setdefault(rule["sep"], []).append(rule)
    for sep in sorted(by_sep):
        title = f"SEP-{sep}"
        out += [title, "-" * len(title), ""]
        for rule in by_sep[sep]:
            standing = found.get(rule["key"], Standing())
            out.append(f"``{rule['key']}`` ({rule['level']})")
            out.append("")
            out += ["    " + line for line in _wrap("“" + _cell(rule["words"]) + "”")]
            out.append("")
            if standing.tests:
                for index, (node, behaviour) in enumerate(standing.tests):
                    if index:
                        out.append("")
                    out += ["    " + line for line in _wrap(f"**Tested.** {_prose(behaviour)} (``{node}``)")]
            elif rule.get("suite_proves"):
                out += ["    " + line for line in _wrap(
                    f"**Checked by the official suite** (check ``{rule['check']}``; scripts/conformance fails unless "
                    "it passed).", 88)]
            elif standing.declined:
                out += ["    " + line for line in _wrap(f"**Declined.** {_cell(standing.declined)}")]
            elif standing.open:
                out += ["    " + line for line in _wrap(f"**Open.** {_cell(standing.open)}")]
            else:
                out.append("    **No standing yet.**")
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def suite_checks() -> list[str]:
    """The suite's check ids that prove a rule (scripts/conformance must see each pass)."""
    return [rule["check"] for rule in load()["rules"] if rule.get("suite_proves")]


def main() -> int:
    TABLE.write_text(table(), encoding="utf-8")
    print(f"wrote {os.path.relpath(TABLE, os.getcwd())}: {counts()}")
    for problem in problems():
        print(f"rules: {problem}")
    return 1 if problems() else 0


if __name__ == "__main__":
    raise SystemExit(main())
