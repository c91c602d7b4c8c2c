"""``albedo-mcp export --to KIND``: the configured servers in another client's format, with no secret.

The file is built by :mod:`albedo_actors.settings.exports` from extensions.json and the
names (never the values) of the stored credentials; each stored credential becomes a
reference to an environment variable, and one warning line per server says which.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from ..config import parse, resolve_home
from ..errors import EXIT_OK, ConfigError
from ..safefiles import FileRefused, read_text
from .options import place_options
from .output import out, warn


def export_parsers(commands: Any) -> None:
    from ..settings.exports import EXPORT_KINDS

    help = "write the configured servers in another client's format, with no secret in it"
    sub = commands.add_parser("export", help=help, description=help + (
        ". A stored credential becomes a reference to an environment variable in the client's syntax "
        "(env KEY -> KEY, header H of server S -> S_H, bearer token -> S_TOKEN); a warning line says which."))
    sub.add_argument("--to", dest="kind", required=True, choices=EXPORT_KINDS, help="the client's format")
    sub.add_argument("--output", metavar="FILE", help="write a new FILE (never over an existing one) instead of standard output")
    place_options(sub)


def export_command(args: argparse.Namespace) -> int:
    from ..settings import FILE_NAME, Settings
    from ..settings.exports import export_servers
    from ..store import open_store

    home = resolve_home(args.home)
    path = os.path.join(home, FILE_NAME)
    try:
        document = json.loads(read_text(path))
    except FileNotFoundError:
        document = {}
    except FileRefused as exc:
        raise ConfigError(str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from None
    parse(document, home, source=path)  # the file is valid (and not another client's) before anything is written
    store = open_store(home, url=args.database)
    try:
        views = Settings(home, store).servers()
    finally:
        store.close()
    stored: dict[str, list[str]] = {}
    for view in views:
        if view.problem is not None:
            warn(f"server {view.name!r}: its stored credentials cannot be read ({view.problem}); exported without them")
        stored[view.name] = list(view.credentials)
    text, notes = export_servers(document, stored, args.kind)
    for note in notes:
        warn(note)
    if args.output is None:
        out(text.rstrip("\n"))
        return EXIT_OK
    target = os.path.expanduser(args.output)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise ConfigError(f"{target} exists already; give another --output, or move it aside") from None
    except OSError as exc:
        raise ConfigError(f"cannot write {target}: {exc.strerror or type(exc).__name__}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)
    out(f"wrote {len(views)} servers to {target} ({args.kind})")
    return EXIT_OK
