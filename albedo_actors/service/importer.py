"""``POST /api/mcp/import``: another client's configuration, pasted, read and imported.

::

    answer, imported = import_text(settings, {"text": pasted, "dryRun": True})

The same rules as ``albedo-mcp import`` (:mod:`albedo_actors.cli.importing`), over the
same pieces (:mod:`albedo_actors.settings.imports`): the text is read as its kind (or
the kind given); a server whose configuration cannot be imported is refused, one whose
name is taken is skipped (nothing is ever overwritten), and every other one is added as
``add`` adds it (one change each: it must connect unless it comes in switched off; a
server that cannot connect is refused, with nothing of it kept). Literal env and header
values are stored as credentials, never written into extensions.json, and never in the
answer: each server's ``details`` is :func:`~albedo_actors.settings.imports.describe`'s
line (names, never a value). ``dryRun`` checks and writes nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterable

from ..errors import AlbedoError, ConfigError, SettingsConflict
from ..settings.imports import KINDS, describe, read_servers, resolver, to_settings
from ..wire import telemetry

if TYPE_CHECKING:
    from ..settings import Settings

logger = telemetry.logger(__name__)  # records carry the server and trace ids

__all__ = ["import_text"]

_KEYS = frozenset({"text", "kind", "dryRun", "inputs", "disabled"})
SOURCE = "the pasted configuration"
TAKEN = "a server of that name exists already; nothing of it was changed (remove or rename it, then import again)"
HINT = "; start it and import again, or import it switched off"


def import_text(settings: Settings, body: Any,
                adding: Callable[[Iterable[str]], ContextManager[Any]] | None = None) -> tuple[dict[str, Any], int]:
    """Read and (unless ``dryRun``) import what ``body["text"]`` lists; the answer and how
    many servers were imported. ``adding(names)``: held around each server's add (the
    service hides a server from its listing while its add is being saved).

    Raises:
        ConfigError: the body's shape is wrong, or the text is none of the known kinds
            (the command line's line); nothing was written.
    """
    text, kind, dry_run, answers, disabled = _parse(body)
    found = read_servers(text, kind, source=SOURCE)
    taken = set(settings.names())
    rows = []
    imported = 0
    for server in found.servers:
        row: dict[str, Any] = {"name": server.name, "transport": server.transport, "target": server.target,
                               "details": describe(server, server.enabled and not disabled, "switched off"),
                               "inputs": list(server.inputs), "outcome": "ready", "error": None, "state": None}
        rows.append(row)
        if server.problem is not None:
            row.update(outcome="refused", error=f"server {server.name!r}: {server.problem}")
            continue
        if server.name in taken:
            row.update(outcome="skipped", error=f"server {server.name!r}: {TAKEN}")
            continue
        try:
            if dry_run:
                to_settings(server, lambda value: "x")  # the checks only: nothing is read or kept
                continue
            spec, secrets = to_settings(server, resolver(server.name, answers, os.environ))
            if disabled:
                spec = dataclasses.replace(spec, enabled=False)
            with adding([spec.name]) if adding is not None else contextlib.nullcontext():
                view = settings.add(spec, secrets)
        except SettingsConflict as exc:
            row.update(outcome="refused", error=str(exc) + HINT)
            continue
        except AlbedoError as exc:
            row.update(outcome="refused", error=_one_line(str(exc), server.name))
            continue
        taken.add(server.name)
        imported += 1
        row.update(outcome="imported", state=view.state)
        logger.info("server %r imported through the service", server.name)
    inputs = [{"id": item.id, "description": item.description or None, "password": True} for item in found.inputs]
    declared = {item.id for item in found.inputs}
    inputs += [{"id": input_id, "description": None, "password": True}
               for input_id in dict.fromkeys(i for server in found.servers for i in server.inputs) if input_id not in declared]
    return {"kind": found.kind, "inputs": inputs, "servers": rows, "imported": imported}, imported


def _one_line(message: str, name: str) -> str:
    line = message.splitlines()[0] if message else "it could not be imported"
    return line if line.startswith(f"server {name!r}") else f"server {name!r}: {line}"


def _parse(body: Any) -> tuple[str, str | None, bool, dict[str, str], bool]:
    shape = ('send {"text": "<the configuration>", "kind": null | "claude" | ..., "dryRun": true | false, '
             '"inputs": {"<id>": "<value>"}, "disabled": true | false}')
    if not isinstance(body, dict) or set(body) - _KEYS or not isinstance(body.get("text"), str):
        raise ConfigError(shape)
    kind = body.get("kind")
    if kind == "":
        kind = None
    if kind is not None and kind not in KINDS:
        raise ConfigError(f"{str(kind)[:40]!r} is not a kind albedo reads; give one of {', '.join(KINDS)}, or null to recognise it")
    dry_run, disabled = body.get("dryRun", False), body.get("disabled", False)
    answers = body.get("inputs") or {}
    if (not isinstance(dry_run, bool) or not isinstance(disabled, bool) or not isinstance(answers, dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in answers.items())):
        raise ConfigError(shape)
    return body["text"], kind, dry_run, answers, disabled
