"""The command line's parser pieces: one usage error, the options every command takes."""

from __future__ import annotations

import argparse
from typing import NoReturn

PROG = "albedo-mcp"


class Usage(Exception):
    """A usage problem the user can fix; exit 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would exit; we report one line
        raise Usage(message)


def place_options(sub: argparse.ArgumentParser) -> None:
    # --home and --database after the command too; SUPPRESS keeps a value given before it.
    sub.add_argument("--home", default=argparse.SUPPRESS, help="configuration directory")
    sub.add_argument("--database", default=argparse.SUPPRESS, metavar="URL", help="store URL (default: $ALBEDO_DATABASE_URL, else HOME/albedo.db)")
    sub.add_argument("--verbose", "-v", action="store_true", default=argparse.SUPPRESS, help="log what happens to stderr")


def no_store_option(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--no-store", action="store_true", default=argparse.SUPPRESS,
                     help="open no store: no saved catalogues or credentials, every server is dialled")
