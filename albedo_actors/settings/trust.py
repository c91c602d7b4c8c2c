"""Tool integrity in the settings: what is held, and approving it (catalogue/trust.py).

Shared by :meth:`albedo_actors.settings.Settings.approve` (the command line and the
service) and :meth:`albedo_actors.runtime.Session.approve` (a host).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from ..catalogue.trust import INSTRUCTIONS, HeldTool, held_from, trusted_from
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..store import Store

__all__ = ["approve_held", "held_tools"]


def held_tools(store: Store, servers: Iterable[str]) -> dict[str, tuple[HeldTool, ...]]:
    """What is held of each of ``servers`` (those with holds), with the trusted
    definitions for a diff.

    Raises:
        StoreError: the store failed.
    """
    found = store.load_trust(servers)
    return {server: held_from(server, holds, trusted_from(trusted))
            for server, (trusted, holds) in sorted(found.items()) if holds}


def approve_held(store: Store, server: str, tools: Iterable[str] | None, *, who: str) -> list[str]:
    """Approve what is held of ``server``: the ``tools`` named (the instructions as
    ``(instructions)``), or all of it (None). Kept in the store with the history (by
    ``who``: "cli", "service" or "host"); the store's revision moves, so running sessions
    offer it from their next turn. The names approved, sorted.

    Raises:
        ConfigError: a name given is not held (nothing is approved then); ``tools`` is empty.
        StoreError: the store failed.
    """
    if isinstance(tools, str):
        tools = [tools]
    held = held_tools(store, [server]).get(server, ())
    names = {hold.tool: hold for hold in held}
    if tools is not None:
        wanted = list(dict.fromkeys(tools))
        if not wanted:
            raise ConfigError(f"server {server!r}: name the tools to approve, or approve all of them (--all)")
        missing = [name for name in wanted if name not in names]
        if missing:
            listed = ", ".join(sorted(names)) or "nothing"
            raise ConfigError(f"server {server!r}: {', '.join(repr(m) for m in missing)} is not held (held: {listed}); "
                              "`albedo-mcp tools --held` lists what is held")
        keys = [("instructions", "") if name == INSTRUCTIONS and names[name].instructions else ("tool", name) for name in wanted]
    else:
        keys = None
    approved = store.approve_held(server, keys, who)
    return sorted(INSTRUCTIONS if row.kind == "instructions" else row.name for row in approved)
