"""The error tree's exit codes (issue 12, Deliver 5): one table, errors.EXIT_CODES, that
every class has its own row in, that the command line exits by, and that errors.py's
docstring and the user guide's "Exit codes" (docs/guide.rst) both show. "Usage" (2)
means ConfigError only.

The command line is run in process (``cli.main``) with its one command raising each
class in turn, so the exit code is the one the table gives and stderr is one line.
"""

from __future__ import annotations

import inspect
import os
import re

import pytest

from albedo_actors.cli import entry as cli_entry
from albedo_actors import cli, errors
from albedo_actors.errors import EXIT_CODES, AlbedoError, ConfigError, exit_code

GUIDE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "guide.rst")
CLASSES = sorted((c for c in vars(errors).values() if inspect.isclass(c) and issubclass(c, AlbedoError)),
                 key=lambda c: c.__name__)


def instance(cls: type[AlbedoError]) -> AlbedoError:
    """One of ``cls``, built from its own signature (a server name, a status, a cause)."""
    values = {"server": "srv", "message": "went wrong", "status": 500, "code": -32000, "why": "expired",
              "cause": errors.Unavailable("srv", "refused")}
    try:
        signature = inspect.signature(cls)
    except ValueError:  # Exception's own __init__: one message
        return cls("went wrong")
    params = [p for p in signature.parameters.values()
              if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return cls(*(values.get(p.name, "went wrong") for p in params))


def test_every_error_class_has_its_own_row_in_the_one_table():
    assert set(EXIT_CODES) == set(CLASSES)
    assert {c.__name__ for c in CLASSES} <= set(errors.__all__)


def test_usage_is_configuration_only():
    assert [c for c, code in EXIT_CODES.items() if code == errors.EXIT_USAGE] == [ConfigError]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_the_cli_exits_with_the_tables_code_and_one_line(cls, tmp_path, monkeypatch, capsys):
    error = instance(cls)

    def raising(args):
        raise error

    monkeypatch.setattr(cli_entry, "tools_command", raising)
    code = cli.main(["--home", str(tmp_path), "tools"])
    assert code == EXIT_CODES[cls] == exit_code(error)
    err = capsys.readouterr().err
    assert err == f"albedo-mcp: {error}\n"


def test_a_subclass_defined_elsewhere_exits_as_its_nearest_listed_base():
    class Elsewhere(errors.HttpRefused):
        pass

    assert exit_code(Elsewhere("srv", 403, "forbidden")) == errors.EXIT_UNAVAILABLE


def test_errors_docstring_draws_each_class_with_its_exit_code():
    drawn = dict(re.findall(r"── (\w+)\s+(\d)\s", errors.__doc__ or ""))
    assert {name: int(code) for name, code in drawn.items()} == {
        c.__name__: code for c, code in EXIT_CODES.items() if c is not AlbedoError}


def test_the_guide_lists_each_class_with_its_exit_code_and_every_code():
    with open(GUIDE, encoding="utf-8") as f:
        text = f.read()
    section = text.split("\nExit codes\n==========\n", 1)[1].split("\nCommands\n========\n", 1)[0]
    listed = {name: int(code) for name, code in re.findall(r"^(\w+)\s+(\d)$", section, re.M)}
    assert listed == {c.__name__: code for c, code in EXIT_CODES.items()}
    described = {int(code) for code in re.findall(r"^(\d)   \S", section, re.M)}
    assert described == {0, *EXIT_CODES.values()}
