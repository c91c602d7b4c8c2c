"""The command line's parser pieces: one usage error, the options every command takes."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

PROG = "albedo-mcp"


class Usage(Exception):
    """A usage problem the user can fix; exit 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would exit; we report one line
        raise Usage(message)

    def print_help(self, file: SupportsWrite[str] | None = None) -> None:
        # argparse 3.11 and later drop a write error here (3.10 does not): written
        # plainly, a closed pipe reaches main, and --help ends as every command does.
        (file or sys.stdout).write(self.format_help())


def place_options(sub: argparse.ArgumentParser) -> None:
    # --home and --database after the command too; SUPPRESS keeps a value given before it.
    sub.add_argument("--home", default=argparse.SUPPRESS, help="configuration directory")
    sub.add_argument("--database", default=argparse.SUPPRESS, metavar="URL", help="store URL (default: $ALBEDO_DATABASE_URL, else HOME/albedo.db)")
    sub.add_argument("--verbose", "-v", action="store_true", default=argparse.SUPPRESS, help="log what happens to stderr")


def no_store_option(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--no-store", action="store_true", default=argparse.SUPPRESS,
                     help="open no store: no saved catalogues or credentials, every server is dialled")
