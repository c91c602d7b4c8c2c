"""Tool integrity: what a server's tools said when they were trusted, and what is held since.

A server can change what its tools say after the user trusted it (a "rug pull"): a new
description tells the model to do something else, or a new tool arrives with a
poisoned one. This module compares each discovery with what was trusted:

- **Trust on first use.** The first catalogue of a server (nothing trusted yet) is
  trusted whole: each tool by its :func:`definition_digest`, the instructions by
  :func:`instructions_digest` (no instructions is trusted too, so instructions that
  appear later are a change).
- **Held.** Later, a tool whose digest differs from its trusted one (``"changed"``), or
  a tool that was not trusted (``"new"``, unless the policy allows new tools), is held:
  taken out of the catalogue a session is offered. Changed or new instructions are
  held the same way (the offered catalogue has none). A tool that is gone is simply
  gone (removals apply at once); its trusted digest stays, so if it comes back as it
  was it is offered again, and changed it is held.
- **Pinned** (a server's ``"trust": "pinned"``): every change is held: the digest is
  of the tool's whole definition (every key, every ``_meta`` key), and new tools are
  held whatever ``newTools`` says.

The digest (:func:`definition_digest`) is the SHA-256 of the canonical JSON (sorted
keys, no spaces) of the keys that change what the model reads or what a call does:
``name``, ``title``, ``description``, ``inputSchema``, ``outputSchema``,
``annotations``, ``execution`` and the ``_meta`` keys in :data:`BEHAVIOUR_META`
(``ui``, ``openai/outputTemplate`` and ``openai/widgetAccessible``, which choose a
UI the tool drives, and ``io.modelcontextprotocol/related-task``). Other ``_meta``
keys (progress hints, vendor bookkeeping) do not change behaviour and are left out,
except for a pinned server.

Pure code: no I/O, no threads. The store keeps what is trusted and held
(``albedo_actors/store``); the preparer applies :func:`review` to every catalogue that
becomes a composition.
"""

from __future__ import annotations

import dataclasses
import json
import marshal
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Mapping, cast

from .model import Catalogue
from .naming import sha256

if TYPE_CHECKING:
    from ..config import McpConfig, ServerConfig

__all__ = ["BEHAVIOUR_META", "DEFINITION_KEYS", "INSTRUCTIONS", "HeldTool", "Policy", "Review", "Trusted", "TrustedEntry",
           "changed_keys", "definition_digest", "held_from", "instructions_digest", "key_of", "review", "store_digests",
           "trusted_from", "whole_digest"]

# The keys of a tool whose change is held, and the _meta keys among them.
DEFINITION_KEYS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations", "execution")
BEHAVIOUR_META = ("ui", "openai/outputTemplate", "openai/widgetAccessible", "io.modelcontextprotocol/related-task")
# The name a hold of a server's instructions goes by (HeldTool.tool, `albedo-mcp approve`);
# a tool of that name cannot be told apart in the store (its kind is "instructions").
INSTRUCTIONS = "(instructions)"

_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                              default=lambda value: dict(value) if isinstance(value, Mapping) else list(value))


def _hex(text: str) -> str:
    return sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _covered(tool: Mapping[str, Any]) -> dict[str, Any]:
    covered = {key: tool[key] for key in DEFINITION_KEYS if key in tool}
    meta = tool.get("_meta")
    if isinstance(meta, Mapping):
        kept = {key: meta[key] for key in BEHAVIOUR_META if key in meta}
        if kept:
            covered["_meta"] = kept
    return covered


def definition_digest(tool: Mapping[str, Any]) -> str:
    """The SHA-256 (hex) of the canonical JSON of what in ``tool`` changes behaviour (see the module docstring)."""
    return _hex(_CANONICAL.encode(_covered(tool)))


def whole_digest(tool: Mapping[str, Any]) -> str:
    """The SHA-256 (hex) of the canonical JSON of the whole tool (a pinned server's digest)."""
    return _hex(_CANONICAL.encode(tool))


def instructions_digest(text: str | None) -> str:
    """The SHA-256 (hex) of a server's instructions (None, no instructions, has its own)."""
    return _hex(_CANONICAL.encode({"instructions": text}))


@dataclass(frozen=True)
class TrustedEntry:
    """One trusted definition: its digests and the definition itself (to show a diff).
    For instructions ``definition`` is ``{"instructions": text}`` and both digests are
    :func:`instructions_digest`."""

    digest: str
    whole: str
    definition: Mapping[str, Any]
    # ``definition`` marshalled, made at its first comparison (see _identical): one per entry.
    packed: bytes | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of_tool(cls, tool: Mapping[str, Any]) -> TrustedEntry:
        return cls(definition_digest(tool), whole_digest(tool), tool)

    @classmethod
    def of_instructions(cls, text: str | None) -> TrustedEntry:
        digest = instructions_digest(text)
        return cls(digest, digest, {"instructions": text})


@dataclass(frozen=True)
class Trusted:
    """What is trusted of one server: its tools by name, and its instructions."""

    tools: Mapping[str, TrustedEntry] = field(default_factory=dict)
    instructions: TrustedEntry | None = None


@dataclass(frozen=True)
class Policy:
    """``new_tools``: ``mcp.trust.newTools`` ("hold" or "allow"); ``pinned``: the
    server's ``"trust": "pinned"``."""

    new_tools: Literal["hold", "allow"] = "hold"
    pinned: bool = False


def policy_of(config: McpConfig, server: ServerConfig) -> Policy:
    """The policy ``server`` is reviewed under: a session's preparation, ``add`` and the
    doctor's check all review under this one."""
    return Policy("allow" if config.new_tools == "allow" else "hold", server.trust == "pinned")


@dataclass(frozen=True)
class HeldTool:
    """A tool (or the instructions, ``tool`` :data:`INSTRUCTIONS`) held from the model.

    ``kind``: "changed" (differs from its trusted definition) or "new" (never trusted);
    ``changes``: the keys that differ (``("description", "inputSchema")``; every key of
    a new tool); ``old``: the trusted definition (None when new); ``new``: what the
    server gives now; ``digest``: the digest of ``new`` compared (the policy's)."""

    server: str
    tool: str
    kind: Literal["changed", "new"]
    changes: tuple[str, ...]
    old: Mapping[str, Any] | None
    new: Mapping[str, Any]
    digest: str = ""

    @property
    def instructions(self) -> bool:
        return self.tool == INSTRUCTIONS and "instructions" in self.new and "name" not in self.new


@dataclass(frozen=True)
class Review:
    """What :func:`review` decided for one catalogue.

    ``catalogue``: the catalogue to offer (held tools and held instructions taken out);
    ``holds``: what is held; ``trust``: definitions to trust now (a first use, or new
    tools the policy allows); ``trust_instructions``: the instructions to trust now
    (a first use), or None; ``first_use``: nothing was trusted before."""

    catalogue: Catalogue
    holds: tuple[HeldTool, ...] = ()
    trust: Mapping[str, TrustedEntry] = field(default_factory=dict)
    trust_instructions: TrustedEntry | None = None
    first_use: bool = False


def changed_keys(old: Mapping[str, Any] | None, new: Mapping[str, Any], *, whole: bool = False) -> tuple[str, ...]:
    """The keys of a definition that differ between ``old`` and ``new`` (sorted): the
    covered keys (every key when ``whole``), ``_meta`` as one key."""
    if whole:
        a, b = dict(old or {}), dict(new)
    else:
        a, b = _covered(old or {}), _covered(new)
    return tuple(sorted(key for key in set(a) | set(b) if _CANONICAL.encode(a.get(key)) != _CANONICAL.encode(b.get(key))))


# Each catalogue's digests, computed once per catalogue object (a saved catalogue is the
# same object at every preparation, catalogue/saved.py): (server, pinned) -> (catalogue,
# digests). The whole digests (the second of each pair) are made for a pinned server only.
_DIGESTS: dict[tuple[str, bool], tuple[Catalogue, dict[str, tuple[str, str]]]] = {}
_DIGESTS_LIMIT = 4096


def _cached_digests(catalogue: Catalogue, pinned: bool) -> dict[str, tuple[str, str]] | None:
    known = _DIGESTS.get((catalogue.server, pinned))
    return known[1] if known is not None and known[0] is catalogue else None


def _digests(catalogue: Catalogue, pinned: bool) -> dict[str, tuple[str, str]]:
    key = (catalogue.server, pinned)
    cached = _cached_digests(catalogue, pinned)
    if cached is not None:
        return cached
    digests = {}
    for tool in catalogue.tools:
        name = tool.get("name")
        if isinstance(name, str):
            digests[name] = (definition_digest(tool), whole_digest(tool) if pinned else "")
    if len(_DIGESTS) >= _DIGESTS_LIMIT and key not in _DIGESTS:
        _DIGESTS.clear()  # a bound only: a host configures far fewer servers
    _DIGESTS[key] = (catalogue, digests)
    return digests


def _identical(entry: TrustedEntry, tool: Mapping[str, Any]) -> bool:
    """The whole ``tool`` is the trusted definition, value for value and type for type.

    ``marshal`` writes a value's type with it (``1``, ``1.0`` and ``True`` differ, as
    in the digests' JSON, where ``==`` would call them equal), and is some ten times
    cheaper than a digest: an unchanged discovery skips the digests. The same keys in
    another order, or a value marshal cannot write, only mean the digests decide."""
    try:
        packed = entry.packed
        if packed is None:
            packed = marshal.dumps(cast(Any, entry.definition))
            object.__setattr__(entry, "packed", packed)  # a cache of a frozen value's own bytes
        return packed == marshal.dumps(cast(Any, tool))
    except ValueError:
        return False


def review(trusted: Trusted | None, catalogue: Catalogue, policy: Policy = Policy()) -> Review:
    """Compare ``catalogue`` with what is ``trusted`` of its server (None: nothing yet).

    Nothing trusted: the whole catalogue is trusted (first use) and offered as it is.
    Otherwise a tool is held when its digest (the whole one for a pinned server) differs
    from its trusted one, or when it is new and the policy holds new tools (a pinned
    server always does); changed or new instructions are held. A new tool the policy
    allows is trusted now (in ``trust``)."""
    server = catalogue.server
    if trusted is None:
        entries = {tool["name"]: TrustedEntry.of_tool(tool) for tool in catalogue.tools if isinstance(tool.get("name"), str)}
        return Review(catalogue, trust=entries, trust_instructions=TrustedEntry.of_instructions(catalogue.instructions),
                      first_use=True)
    pinned = policy.pinned
    # Digests made for this very catalogue object before (a saved catalogue) are used as
    # they are; otherwise they are made only if some tool is not the very one trusted.
    digests = _cached_digests(catalogue, pinned)
    holds: list[HeldTool] = []
    trust: dict[str, TrustedEntry] = {}
    offered: list[dict[str, Any]] = []
    known = trusted.tools
    for tool in catalogue.tools:
        name = tool.get("name")
        if not isinstance(name, str):
            offered.append(tool)
            continue
        entry = known.get(name)
        if digests is None and entry is not None and _identical(entry, tool):
            offered.append(tool)  # the very definition trusted (the whole tool, types included): no digest needed
            continue
        if digests is None:
            digests = _digests(catalogue, pinned)
        digest, whole = digests[name]
        if entry is None:
            if policy.new_tools == "allow" and not pinned:
                trust[name] = TrustedEntry(digest, whole or whole_digest(tool), tool)
                offered.append(tool)
            else:
                holds.append(HeldTool(server, name, "new", tuple(sorted(_covered(tool) if not pinned else tool)), None, tool,
                                      whole if pinned else digest))
            continue
        if (entry.whole if pinned else entry.digest) == (whole if pinned else digest):
            offered.append(tool)
            continue
        holds.append(HeldTool(server, name, "changed", changed_keys(entry.definition, tool, whole=pinned),
                              entry.definition, tool, whole if pinned else digest))
    instructions = catalogue.instructions
    trust_instructions = None
    held_instructions = False
    if instructions is not None:
        now = instructions_digest(instructions)
        before = trusted.instructions
        if before is None or before.digest != now:
            was = before.definition.get("instructions") if before is not None else None
            kind: Literal["changed", "new"] = "changed" if was is not None else "new"
            holds.append(HeldTool(server, INSTRUCTIONS, kind, ("instructions",),
                                  before.definition if before is not None and was is not None else None,
                                  {"instructions": instructions}, now))
            held_instructions = True
    if not holds and not trust:
        return Review(catalogue)
    if len(offered) != len(catalogue.tools) or held_instructions:
        catalogue = dataclasses.replace(catalogue, tools=tuple(offered),
                                        instructions=None if held_instructions else instructions)
    return Review(catalogue, tuple(holds), trust, trust_instructions)


# -- the store's records (store/records.py's TrustedDefinition, HeldDefinition) as trust's types --


def trusted_from(rows: Any) -> Trusted | None:
    """The :class:`Trusted` of one server from its stored trusted rows (None: none, a first use)."""
    rows = list(rows)
    if not rows:
        return None
    tools = {}
    instructions = None
    for row in rows:
        entry = TrustedEntry(row.digest, row.whole, row.definition)
        if row.kind == "instructions":
            instructions = entry
        else:
            tools[row.name] = entry
    return Trusted(tools, instructions)


def held_from(server: str, held: Any, trusted: Trusted | None) -> tuple[HeldTool, ...]:
    """The stored holds of one server as :class:`HeldTool` (with the trusted definition, for a diff)."""
    out = []
    for row in held:
        if row.kind == "instructions":
            old = trusted.instructions.definition if trusted is not None and trusted.instructions is not None else None
            if old is not None and old.get("instructions") is None:
                old = None
            out.append(HeldTool(server, INSTRUCTIONS, "new" if old is None else "changed", row.changes, old, row.definition, row.digest))
        else:
            entry = trusted.tools.get(row.name) if trusted is not None else None
            kind: Literal["changed", "new"] = "changed" if row.change == "changed" else "new"
            out.append(HeldTool(server, row.name, kind, row.changes, entry.definition if entry else None, row.definition, row.digest))
    return tuple(sorted(out, key=lambda hold: hold.tool))


def key_of(hold: HeldTool) -> tuple[str, str]:
    """The (kind, name) a hold is stored under."""
    return ("instructions", "") if hold.instructions else ("tool", hold.tool)


def store_digests(hold: HeldTool) -> tuple[str, str]:
    """Both digests of what ``hold`` holds (kept with it, so an approval trusts it for either policy)."""
    if hold.instructions:
        digest = instructions_digest(hold.new.get("instructions"))
        return digest, digest
    return definition_digest(hold.new), whole_digest(hold.new)
