"""``albedo-mcp import FILE``: bring in the servers of another client's configuration.

The file is read by :mod:`albedo_actors.settings.imports`; each server is then added as
``add`` adds one (through a running settings service when there is one), so it must
connect unless it is saved switched off. Per server one line: imported, refused (and
why) or skipped (its name is taken: nothing is ever overwritten). Exit 0 when every
server was imported, else the highest code of the others: 2 for a server refused for
its configuration or skipped, 3 for one that could not connect, 7 for a store failure.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from ..config import load, resolve_home
from ..errors import EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE, AlbedoError, ConfigError, exit_code
from .options import place_options
from .output import error_line, out
from ..wire import telemetry

logger = telemetry.logger(__name__)  # records carry the server and trace ids


def import_parsers(commands: Any) -> None:
    from ..settings.imports import KINDS

    help = "add the servers of another client's configuration file; each must connect unless --disabled"
    sub = commands.add_parser("import", help=help, description=help + (
        ". Literal env and header values are stored as credentials, never written into extensions.json; "
        "${env:VAR} and ${VAR} become references to your environment. A VS Code ${input:ID} is read like a "
        "secret: without echo from the terminal, or one line of standard input each, in the order of the file's inputs."))
    sub.add_argument("file", metavar="FILE", help="e.g. ~/.claude.json, .mcp.json, ~/.cursor/mcp.json, .vscode/mcp.json, ~/.codex/config.toml")
    sub.add_argument("--from", dest="kind", choices=KINDS, help="the file's kind (default: recognised from its content)")
    sub.add_argument("--dry-run", action="store_true", help="say what would be imported; try, ask for and write nothing")
    sub.add_argument("--disabled", action="store_true", help='save every server switched off ("enabled": false), not tried')
    sub.add_argument("--stdin", action="store_true", help="read the inputs from standard input even on a terminal")
    place_options(sub)


def import_command(args: argparse.Namespace) -> int:
    from ..settings.imports import read_servers

    home = resolve_home(args.home)
    path = os.path.expanduser(args.file)
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ConfigError(f"cannot read {path}: {reason}") from None
    found = read_servers(text, args.kind, source=path)
    if not found.servers:
        out(f"{path} ({found.kind}) lists no servers; nothing to import")
        return EXIT_OK
    # The home's extensions.json must be valid (and albedo's own) before anything is added to it.
    taken = {server.name for server in load(home).servers}
    ready, codes = [], []
    for server in found.servers:
        if server.problem is not None:
            codes.append(refused(server.name, f"server {server.name!r}: {server.problem}", EXIT_USAGE))
        elif server.name in taken:
            error_line(f"skipped {server.name}: a server of that name exists already; nothing of it was changed "
                       f"(remove or rename it, then import again)")
            codes.append(EXIT_USAGE)
        else:
            ready.append(server)
    if args.dry_run:
        codes.extend(dry_run(ready, found))
        done = len(found.servers) - sum(1 for code in codes if code)
        out(f"would import {done} of {len(found.servers)} servers from {path} ({found.kind}); nothing was written")
        return max(codes, default=EXIT_OK)
    answers = read_inputs(ready, found, args.stdin)
    imported = 0
    with Adder(home, args) as adder:
        for server in ready:
            code = adder.add(server, answers, args.disabled)
            imported += code == EXIT_OK
            codes.append(code)
    out(f"imported {imported} of {len(found.servers)} servers from {path} ({found.kind})")
    return max(codes, default=EXIT_OK)


def refused(name: str, message: str, code: int) -> int:
    """One line for a server that was not imported; its exit code."""
    prefix = f"server {name!r}"
    if message.startswith(prefix + ": "):
        message = message[len(prefix) + 2:]
    elif message.startswith(prefix + " "):
        message = "it" + message[len(prefix):]
    error_line(f"refused {name}: {message}")
    return code


def dry_run(servers: list[Any], found: Any) -> list[int]:
    from ..settings.imports import describe, to_settings

    codes = []
    for server in servers:
        try:
            spec, _ = to_settings(server, lambda value: "x")  # the checks only: nothing is read or kept
        except ConfigError as exc:
            codes.append(refused(server.name, str(exc), EXIT_USAGE))
            continue
        details = describe(server, spec.enabled)
        out(f"would import {server.name} ({server.transport}, {server.target})" + (f": {details}" if details else ""))
        codes.append(EXIT_OK)
    return codes


def read_inputs(servers: list[Any], found: Any, force_stdin: bool) -> dict[str, str]:
    """The VS Code inputs the servers to import use, read like secrets in the order of
    the file's ``inputs`` (then any used but not declared, in the order of use)."""
    from .admin import SecretReader

    used = {input_id for server in servers for input_id in server.inputs}
    if not used:
        return {}
    declared = {item.id: item for item in found.inputs}
    order = [item.id for item in found.inputs if item.id in used]
    order += [input_id for server in servers for input_id in server.inputs if input_id not in order]
    reader = SecretReader(force_stdin, editing=False)
    answers = {}
    for input_id in dict.fromkeys(order):
        item = declared.get(input_id)
        what = f"input {input_id}" + (f" ({item.description})" if item is not None and item.description else "")
        value = reader.read(what)
        answers[input_id] = value or (item.default if item is not None and item.default else "")
    return answers


def resolver(name: str, answers: dict[str, str]) -> Any:
    """:func:`albedo_actors.settings.imports.resolver` over this process's environment."""
    from ..settings.imports import resolver as resolve_with

    return resolve_with(name, answers, os.environ)


class Adder:
    """Adds servers as ``add`` does: through the home's running settings service when
    there is one (falling back to Settings directly once it has gone), else directly."""

    def __init__(self, home: str, args: argparse.Namespace) -> None:
        self.home = home
        self.args = args
        self.client: Any = None
        self.store: Any = None

    def __enter__(self) -> Adder:
        from ..service.client import ServiceClient, ServiceSilent
        from .output import warn

        try:
            self.client = ServiceClient.find(self.home)
        except ServiceSilent as exc:  # nothing was sent to it
            warn(str(exc))
        return self

    def __exit__(self, *exc: object) -> None:
        if self.client is not None:
            self.client.close()
        if self.store is not None:
            self.store.close()

    def add(self, server: Any, answers: dict[str, str], disabled: bool) -> int:
        from ..settings.imports import describe, to_settings

        try:
            spec, secrets = to_settings(server, resolver(server.name, answers))
            if disabled:
                spec = dataclasses.replace(spec, enabled=False)
            state = self._through_service(spec, secrets) if self.client is not None else None
            if state is None:
                state = self._directly(spec, secrets)
        except AlbedoError as exc:
            code = exit_code(exc)
            # A server that could not connect can still come in switched off, to be
            # started (and enabled) once it runs: say so on its line.
            hint = "; start it and import again, or import it with --disabled" if code == EXIT_UNAVAILABLE else ""
            return refused(server.name, str(exc) + hint, code)
        details = describe(server, spec.enabled)
        out(f"imported {server.name} ({spec.transport}, {state})" + (f": {details}" if details else ""))
        return EXIT_OK

    def _through_service(self, spec: Any, secrets: Any) -> str | None:
        """The server added through the service's API, as ``add`` does; its state, or
        None when the service has gone (nothing was sent)."""
        from ..service.client import ServiceGone

        try:
            view = self.client.add(spec, secrets)  # the settings port, as `add` goes through it
        except ServiceGone:
            logger.info("the settings service of %s has gone; importing directly", self.home)
            self.client.close()
            self.client = None
            return None
        return view.state

    def _directly(self, spec: Any, secrets: Any) -> str:
        from ..settings import Settings
        from ..store import open_store

        if self.store is None:
            self.store = open_store(self.home, url=self.args.database)
        return Settings(self.home, self.store).add(spec, secrets).state
