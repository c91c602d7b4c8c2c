"""``completion bash|zsh|fish``: the shell's completion script, from argcomplete.

The script is argcomplete's own (:func:`argcomplete.shellcode`), not one written here.
It completes by running ``albedo-mcp`` itself with ``_ARGCOMPLETE`` set: :func:`complete_if_asked`
then answers from the parser :func:`albedo_actors.cli.entry.build_parser` built, so a new
command or option completes with no change here, and the names of the configured
servers complete where a command takes a server's NAME (read from extensions.json only:
no store is opened and no server is started).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .options import PROG

SHELLS = ("bash", "zsh", "fish")

# The commands whose NAME argument is a configured server's name.
NAMED_SERVER = ("edit", "remove", "enable", "disable", "sign-in", "sign-out", "doctor", "get")


def completion_parser(commands: Any) -> None:
    sub = commands.add_parser("completion", help="print the shell completion script: "
                              "source <(albedo-mcp completion bash) (see docs/commands/completion.rst)")
    sub.add_argument("shell", choices=SHELLS, metavar="SHELL", help="bash, zsh or fish")


def completion_command(args: argparse.Namespace) -> int:
    import argcomplete

    sys.stdout.write(argcomplete.shellcode([PROG], shell=args.shell))
    return 0


def complete_if_asked(parser: argparse.ArgumentParser) -> None:
    """When a completion script runs us (``$_ARGCOMPLETE`` set), print the completions
    for the shell and exit; otherwise do nothing (argcomplete is not even imported)."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    import argcomplete

    for action in parser._actions:  # noqa: SLF001 - argparse has no public walk of its subcommands
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                if command in NAMED_SERVER:
                    for argument in sub._actions:
                        if argument.dest == "name" and not argument.option_strings:
                            setattr(argument, "completer", server_names)  # argcomplete reads it
    # Options are offered once a word starts with "-", so that NAME lists only names.
    argcomplete.autocomplete(parser, always_complete_options=False)


def server_names(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """The configured servers' names starting with ``prefix`` (none when extensions.json
    cannot be read: a completion never prints an error)."""
    try:
        from ..config import resolve_home
        from ..settings import Settings

        names = Settings(resolve_home(getattr(parsed_args, "home", None)), None).names()  # type: ignore[arg-type]  # reads extensions.json only
    except Exception:  # noqa: BLE001 - completion offers nothing rather than fail
        return []
    return sorted(name for name in names if name.startswith(prefix))
