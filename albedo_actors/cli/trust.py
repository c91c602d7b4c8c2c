"""``approve`` and ``tools --held``: tool integrity on the command line (catalogue/trust.py).

- ``albedo-mcp approve SERVER TOOL ...`` (or ``--all``) approves what is held of the
  server: through the settings service when one runs (``POST /api/mcp/approve``), else
  in the store directly; the history says "cli" (or "service"). ``--show`` prints what
  changed and approves nothing.
- ``albedo-mcp tools --held`` prints the same typed diff for every held tool: the old
  and new description, and the paths of the schema's keys that changed.
"""

from __future__ import annotations

import argparse
from typing import Any, Iterable, Mapping

from ..catalogue.trust import INSTRUCTIONS, HeldTool
from ..config import load, resolve_home
from ..errors import EXIT_OK
from ..wire.text import printable
from .options import PROG, Usage, place_options
from .output import note, out, print_json

MAX_PATHS = 20  # schema paths listed per key


def approve_parser(commands: Any) -> None:
    approve = commands.add_parser("approve", help="approve tools held since they changed or appeared (tool integrity)",
                                  description="approve tools (or instructions) held since they changed or appeared after "
                                              "the server was trusted; `tools --held` shows what changed")
    approve.add_argument("server", metavar="SERVER")
    approve.add_argument("tools", nargs="*", metavar="TOOL", help=f"the held tools to approve ({INSTRUCTIONS} for the "
                                                                    "server's instructions)")
    approve.add_argument("--all", action="store_true", help="approve everything held of the server")
    approve.add_argument("--show", action="store_true", help="show what changed (a typed diff) and approve nothing")
    approve.add_argument("--json", action="store_true", help="print a JSON object")
    place_options(approve)


def approve_command(args: argparse.Namespace) -> int:
    """``approve SERVER [TOOL ...] [--all] [--show]``."""
    home = resolve_home(args.home)
    if args.show:
        return show_command(args, home)
    if bool(args.tools) == bool(args.all):
        raise Usage(f"name the tools to approve or give --all, not both or neither: {PROG} approve {args.server} TOOL ... | --all "
                    f"({PROG} approve {args.server} --show shows what is held)")
    tools = None if args.all else list(args.tools)
    from ..service.client import ServiceClient, ServiceGone, ServiceSilent

    try:
        client = ServiceClient.find(home)
    except ServiceSilent:
        client = None
    if client is not None:
        with client:
            try:
                return _approved(args, client.approve(args.server, tools))
            except ServiceGone:
                pass  # refused before anything was sent: act directly
    from ..settings import Settings
    from ..store import open_store

    store = open_store(home, url=args.database)
    try:
        return _approved(args, Settings(home, store).approve(args.server, tools, who="cli"))
    finally:
        store.close()


def _approved(args: argparse.Namespace, approved: list[str]) -> int:
    if args.json:
        print_json({"server": args.server, "approved": approved})
    elif approved:
        out(f"approved {args.server}: {', '.join(approved)}; sessions offer them from their next turn")
    else:
        note(f"server {args.server!r}: nothing is held, so nothing was approved")
    return EXIT_OK


def show_command(args: argparse.Namespace, home: str) -> int:
    from ..settings.trust import held_tools
    from ..store import open_store

    load(home).server(args.server)  # a ConfigError names a server that is not configured
    store = open_store(home, url=args.database)
    try:
        held = held_tools(store, [args.server])
    finally:
        store.close()
    print_held(held, args.json)
    return EXIT_OK


def print_held(held: Mapping[str, Iterable[HeldTool]], as_json: bool) -> None:
    """The typed diff of every held tool, or (JSON) an array of them."""
    holds = [hold for server in sorted(held) for hold in held[server]]
    if as_json:
        print_json([held_json(hold) for hold in holds])
        return
    if not holds:
        note("nothing is held")
        return
    for hold in holds:
        for line in diff_lines(hold):
            out(line)


def held_json(hold: HeldTool) -> dict[str, Any]:
    return {"server": hold.server, "tool": hold.tool, "held": True, "kind": hold.kind, "changes": list(hold.changes),
            "schemaChanges": {key: schema_paths((hold.old or {}).get(key), hold.new.get(key))
                              for key in ("inputSchema", "outputSchema") if key in hold.changes},
            "old": dict(hold.old) if hold.old is not None else None, "new": dict(hold.new)}


def diff_lines(hold: HeldTool) -> list[str]:
    """What changed in one held tool, a few lines: a header, the old and new text of each
    changed text field, the changed paths of each changed schema; every line escaped."""
    what = "new since the server was trusted" if hold.kind == "new" else f"changed: {', '.join(hold.changes)}"
    lines = [f"{hold.server}/{hold.tool}: held ({what}); approve: {PROG} approve {hold.server} {hold.tool}"]
    old = hold.old or {}
    for key in hold.changes:
        if key in ("description", "title", "instructions", "name"):
            if hold.old is not None:
                lines.append(f"  {key} was: {_text(old.get(key))}")
            lines.append(f"  {key} now: {_text(hold.new.get(key))}")
        elif key in ("inputSchema", "outputSchema"):
            paths = schema_paths(old.get(key), hold.new.get(key))
            shown = ", ".join(paths[:MAX_PATHS]) + (f" and {len(paths) - MAX_PATHS} more" if len(paths) > MAX_PATHS else "")
            lines.append(f"  {key} {'changed at' if hold.old is not None else 'keys'}: {shown or '(whole)'}")
        else:
            lines.append(f"  {key} changed" if hold.old is not None else f"  {key}: {_text(hold.new.get(key))}")
    return [printable(line, one_line=True) for line in lines]


def _text(value: Any) -> str:
    return "(none)" if value is None else printable(str(value), one_line=True, limit=400)


def schema_paths(old: Any, new: Any, at: str = "") -> list[str]:
    """The paths (``properties.word.type``) where two JSON values differ; ``old`` None: every top-level key of ``new``."""
    if old is None and isinstance(new, Mapping):
        return sorted(f"{at}{key}" for key in new)
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        paths: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            if key not in old or key not in new:
                paths.append(f"{at}{key}")
            elif old[key] != new[key]:
                paths.extend(schema_paths(old[key], new[key], f"{at}{key}.") if isinstance(old[key], Mapping)
                             and isinstance(new[key], Mapping) else [f"{at}{key}"])
        return paths
    return [at.rstrip(".") or "(whole)"] if old != new else []
