"""MCP on top of JSON-RPC, both eras: versions, per-request ``_meta``, era verdicts.

Pure code. The era rules follow 2026-07-28 basic/versioning and
basic/transports/stdio ("Backward compatibility"), as the reference ports them:

- a ``DiscoverResult`` naming 2026-07-28, or a ``-32022`` whose ``supported`` names
  it, makes the server modern;
- a modern server that names only versions we open with ``initialize`` gets
  ``initialize``; one that names neither is refused;
- any other answer means an older server, which gets ``initialize``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from .. import __version__
from .jsonrpc import UNSUPPORTED_PROTOCOL_VERSION, Json

MODERN_VERSION = "2026-07-28"
MODERN_VERSIONS = (MODERN_VERSION,)
# Offered first, then accepted back, newest first (2025-11-25 basic/lifecycle).
LEGACY_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
LEGACY_VERSION = LEGACY_VERSIONS[0]

CLIENT_INFO = {"name": "albedo_actors", "version": __version__}

META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"

LIST_CHANGED = {
    "notifications/tools/list_changed": "tools",
    "notifications/resources/list_changed": "resources",
    "notifications/prompts/list_changed": "prompts",
}
# subscriptions/listen filter field for each capability that can change.
LISTEN_FILTERS = {"tools": "toolsListChanged", "resources": "resourcesListChanged", "prompts": "promptsListChanged"}


@dataclass(frozen=True)
class Negotiated:
    """What a connection speaks: its era and protocol version, decided once per opening.

    ``era`` is "modern" (2026-07-28: per-request ``_meta``, no session) or "legacy"
    (the ``initialize`` handshake revisions). One frozen value: the connection holds it
    and gives the same value to its link, so the two never disagree.
    """

    era: str
    version: str

    @property
    def modern(self) -> bool:
        return self.era == "modern"

    @property
    def legacy(self) -> bool:
        return self.era == "legacy"


MODERN = Negotiated("modern", MODERN_VERSION)


class Verdict(enum.Enum):
    MODERN = "modern"
    HANDSHAKE = "handshake"  # open with initialize
    REFUSE = "refuse"


# The server requests a host may handle, by the name a host registers a handler under.
HANDLED_METHODS = {"elicitation": "elicitation/create", "sampling": "sampling/createMessage", "roots": "roots/list"}
_CAPABILITIES: dict[str, dict[str, Any]] = {"elicitation": {"form": {}}, "sampling": {}, "roots": {}}


def client_capabilities(handlers: dict[str, Any] | None) -> dict[str, Any]:
    """The client capabilities to declare: exactly those a handler is registered for."""
    return {kind: _CAPABILITIES[kind] for kind in (handlers or {}) if kind in _CAPABILITIES}


def modern_params(
    params: dict[str, Any] | None, version: str = MODERN_VERSION, capabilities: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Return a copy of ``params`` carrying the modern per-request ``_meta``.

    2026-07-28 basic/index "_meta": protocolVersion and clientCapabilities are
    required on every request; clientInfo SHOULD be sent. By default we declare no
    client capabilities. Keys the caller put in ``_meta`` (e.g. progressToken) are kept.
    """
    out = dict(params) if params else {}
    meta = dict(out.get("_meta") or {})
    meta[META_PROTOCOL_VERSION] = version
    meta[META_CLIENT_INFO] = CLIENT_INFO
    meta[META_CLIENT_CAPABILITIES] = capabilities or {}
    out["_meta"] = meta
    return out


def initialize_params(capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    """``initialize`` params: newest legacy version and the declared capabilities."""
    return {"protocolVersion": LEGACY_VERSION, "capabilities": capabilities or {}, "clientInfo": CLIENT_INFO}


def _verdict_for_versions(versions: Json) -> Verdict | None:
    if not isinstance(versions, list):
        return None
    if any(v in MODERN_VERSIONS for v in versions):
        return Verdict.MODERN
    if any(v in LEGACY_VERSIONS for v in versions):
        return Verdict.HANDSHAKE
    return Verdict.REFUSE


def judge_discover_result(result: Json) -> Verdict:
    """The era a successful ``server/discover`` answer shows."""
    if isinstance(result, dict):
        verdict = _verdict_for_versions(result.get("supportedVersions"))
        if verdict is not None:
            return verdict
    return Verdict.HANDSHAKE  # not a DiscoverResult: any other answer means an older server


def judge_error(error: dict[str, Any]) -> Verdict:
    """The era an error answer to ``server/discover`` (or ``initialize``) shows."""
    if error.get("code") == UNSUPPORTED_PROTOCOL_VERSION:
        data = error.get("data")
        verdict = _verdict_for_versions(data.get("supported") if isinstance(data, dict) else None)
        if verdict is not None:
            return verdict
    return Verdict.HANDSHAKE


def supported_versions(result_or_error: dict[str, Any]) -> list[str]:
    """The versions a DiscoverResult or a -32022 error names, for messages."""
    versions = result_or_error.get("supportedVersions")
    if versions is None and isinstance(result_or_error.get("data"), dict):
        versions = result_or_error["data"].get("supported")
    return [str(v) for v in versions] if isinstance(versions, list) else []


def is_input_required(result: dict[str, Any]) -> bool:
    return result.get("resultType") == "input_required"


def server_info_of(result: dict[str, Any], era: str) -> dict[str, Any]:
    """serverInfo from an InitializeResult (legacy) or a DiscoverResult's _meta (modern)."""
    if era == "legacy":
        info = result.get("serverInfo")
    else:
        meta = result.get("_meta")
        info = meta.get(META_SERVER_INFO) if isinstance(meta, dict) else None
    return info if isinstance(info, dict) else {}
