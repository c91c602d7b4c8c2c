"""What a server offers, as plain immutable data that may cross threads.

The dicts inside come straight from the server's JSON and are never mutated after
discovery; treat them as read-only.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from ..wire import tasks


@dataclass(frozen=True)
class Catalogue:
    server: str
    era: str  # "modern" or "legacy"
    protocol_version: str
    server_info: dict[str, Any] = field(default_factory=dict, compare=False)
    instructions: str | None = None
    capabilities: dict[str, Any] = field(default_factory=dict, compare=False)
    tools: tuple[dict[str, Any], ...] = ()
    resources: tuple[dict[str, Any], ...] = ()
    resource_templates: tuple[dict[str, Any], ...] = ()
    prompts: tuple[dict[str, Any], ...] = ()
    warnings: tuple[str, ...] = field(default=(), compare=False)
    # When the server was asked for it (a Unix time; None when unknown: a catalogue saved
    # before this was kept, or built by hand). A client that is already connected hands
    # out the catalogue it discovered then, with this time, not the time it is asked.
    discovered_at: float | None = field(default=None, compare=False)

    def older_than(self, other: Catalogue | None) -> bool:
        """True when both discovery times are known and this was discovered before ``other``."""
        return (other is not None and self.discovered_at is not None and other.discovered_at is not None
                and self.discovered_at < other.discovered_at)

    def same_listing(self, other: Catalogue | None) -> bool:
        """True when ``other`` advertises exactly the same things."""
        return other is not None and (
            self.tools == other.tools
            and self.resources == other.resources
            and self.resource_templates == other.resource_templates
            and self.prompts == other.prompts
            and self.instructions == other.instructions
        )

    @functools.cached_property
    def task_tools(self) -> dict[str, str]:
        """Tool name -> its ``execution.taskSupport`` ("optional" or "required"), for the
        tools that may run as tasks (wire/tasks.py); built at first need, once."""
        found = {}
        for tool in self.tools:
            support = tasks.support(tool) if isinstance(tool, dict) else "forbidden"
            if support != "forbidden" and isinstance(tool.get("name"), str):
                found[tool["name"]] = support
        return found

    def tool(self, name: str) -> dict[str, Any] | None:
        for tool in self.tools:
            if tool["name"] == name:
                return tool
        return None
