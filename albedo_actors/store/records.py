"""The frozen records the store hands out; plain immutable data, safe to share between threads.

Secret values (bearer token, header value, env values, the OAuth record; a task's session
id, arguments and result) never appear in a ``repr``: it shows only which of them are set.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

__all__ = ["Credentials", "HeldDefinition", "SavedCatalogue", "ServerState", "TaskRecord", "TrustEvent", "TrustedDefinition",
           "freeze", "thaw", "TASK_STATES", "TASK_ACTIVE", "TASK_TERMINAL"]

_EMPTY: Mapping[str, str] = MappingProxyType({})


def freeze(value: Any) -> Any:
    """A deep, immutable copy of JSON-like data: dicts become read-only mappings, lists tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({str(k): freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """The inverse of :func:`freeze`: plain dicts and lists, ready for ``json.dumps``."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value


_UNSET: Any = object()  # ``header`` not given


@dataclass(frozen=True, repr=False, init=False)
class Credentials:
    """One server's secrets. Every field is optional; ``Credentials()`` means none stored.

    ``headers`` are the custom HTTP headers, ``(name, value)`` pairs in the order they
    are sent, no name twice (names compare without case); ``env`` holds the
    ``KEY=value`` entries for a stdio server; ``oauth`` is the OAuth record (a mapping).

    ``header=(name, value)`` (or None) is the older one-header form: given, it replaces
    ``headers`` with that one header; :attr:`header` reads the first one.
    """

    bearer_token: str | None
    headers: tuple[tuple[str, str], ...]
    env: Mapping[str, str]
    oauth: Mapping[str, Any] | None

    def __init__(self, bearer_token: str | None = None, header: tuple[str, str] | None = _UNSET,
                 env: Mapping[str, str] | None = None, oauth: Mapping[str, Any] | None = None,
                 headers: Any = ()) -> None:
        if header is not _UNSET:
            if header is not None and not (isinstance(header, (tuple, list)) and len(header) == 2):
                raise TypeError("Credentials.header must be a (name, value) pair of str or None")
            headers = () if header is None else (tuple(header),)
        object.__setattr__(self, "bearer_token", bearer_token)
        object.__setattr__(self, "headers", headers)
        object.__setattr__(self, "env", env)
        object.__setattr__(self, "oauth", oauth)
        self.__post_init__()

    def __post_init__(self) -> None:
        if self.bearer_token is not None and not isinstance(self.bearer_token, str):
            raise TypeError("Credentials.bearer_token must be a str or None")
        pairs = self.headers if self.headers is not None else ()
        if isinstance(pairs, Mapping):
            pairs = tuple(pairs.items())
        if not isinstance(pairs, (tuple, list)) or not all(
                isinstance(p, (tuple, list)) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in pairs):
            raise TypeError("Credentials.headers must be (name, value) pairs of str")
        names = [name.lower() for name, _ in pairs]
        if len(set(names)) != len(names):
            raise ValueError("Credentials.headers names one header twice")
        object.__setattr__(self, "headers", tuple((name, value) for name, value in pairs))
        env = self.env if self.env is not None else {}
        if not isinstance(env, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise TypeError("Credentials.env must map str to str")
        object.__setattr__(self, "env", MappingProxyType(dict(env)) if env else _EMPTY)
        if self.oauth is not None:
            if not isinstance(self.oauth, Mapping):
                raise TypeError("Credentials.oauth must be a mapping or None")
            object.__setattr__(self, "oauth", freeze(self.oauth))

    @property
    def header(self) -> tuple[str, str] | None:
        """The first custom header, or None (the older one-header form)."""
        return self.headers[0] if self.headers else None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Credentials):
            return NotImplemented
        return (self.bearer_token == other.bearer_token and self.headers == other.headers
                and dict(self.env) == dict(other.env)
                and thaw(self.oauth) == thaw(other.oauth))

    __hash__ = None  # type: ignore[assignment]  # mappings inside: not hashable

    def __repr__(self) -> str:
        parts = []
        if self.bearer_token is not None:
            parts.append("bearer_token=<secret>")
        if self.headers:
            parts.append("headers={" + ", ".join(f"{name!r}: <secret>" for name, _ in self.headers) + "}")
        if self.env:
            parts.append("env={" + ", ".join(f"{k!r}: <secret>" for k in sorted(self.env)) + "}")
        if self.oauth is not None:
            parts.append("oauth=<secret>")
        return "Credentials(" + ", ".join(parts) + ")"

    @property
    def empty(self) -> bool:
        """True when nothing is stored."""
        return self.bearer_token is None and not self.headers and not self.env and self.oauth is None


@dataclass(frozen=True)
class SavedCatalogue:
    """A server's catalogue as saved under ``fingerprint`` (of its configuration and credentials).

    ``catalogue`` is a fresh dict decoded for this record alone (no one else holds it);
    ``saved_at`` is a Unix time.
    """

    server: str
    fingerprint: str
    era: str
    catalogue: dict[str, Any]
    saved_at: float
    # The JSON text ``catalogue`` was decoded from (None when not read from a store): the
    # saved layer reuses the catalogue it built from the same text (catalogue.saved).
    text: str | None = field(default=None, compare=False)

    def __repr__(self) -> str:
        return (f"SavedCatalogue(server={self.server!r}, fingerprint={self.fingerprint!r}, "
                f"era={self.era!r}, saved_at={self.saved_at!r}, catalogue=<{len(self.catalogue)} keys>)")


@dataclass(frozen=True)
class ServerState:
    """The last state ``albedo-mcp doctor`` saw of a server: ``state`` (ok, down,
    needs_sign_in, misconfigured or off) at ``seen_at`` (a Unix time), with the
    ``fingerprint`` of the configuration it was seen under and the ``report`` it printed
    (a fresh dict; never a secret)."""

    server: str
    state: str
    fingerprint: str
    report: dict[str, Any]
    seen_at: float


@dataclass(frozen=True)
class TrustedDefinition:
    """A trusted tool definition (``kind`` "tool") or a server's instructions (``kind``
    "instructions", ``name`` ""), with its digests (catalogue/trust.py) and when."""

    server: str
    kind: str
    name: str
    digest: str
    whole: str
    definition: dict[str, Any]
    trusted_at: float = 0.0


@dataclass(frozen=True)
class HeldDefinition:
    """A tool (or the instructions) held until approved: ``change`` "changed" or "new",
    ``changes`` the keys that differ, ``definition`` what the server gives now."""

    server: str
    kind: str
    name: str
    change: str
    changes: tuple[str, ...]
    digest: str
    whole: str
    definition: dict[str, Any]
    held_at: float = 0.0


@dataclass(frozen=True)
class TrustEvent:
    """One line of the trust history: ``event`` "trusted", "held" or "approved" (``who``:
    "cli", "service" or "host")."""

    server: str
    kind: str
    name: str
    event: str
    changes: tuple[str, ...]
    who: str | None
    at: float


# The states of a task (MCP tasks; "lost": the server no longer knows it).
TASK_ACTIVE = frozenset({"working", "input_required"})
TASK_TERMINAL = frozenset({"completed", "failed", "cancelled", "lost"})
TASK_STATES = TASK_ACTIVE | TASK_TERMINAL


@dataclass(frozen=True, repr=False)
class TaskRecord:
    """One MCP task a server created for a task-augmented ``tools/call`` (the store's
    ``tasks`` table): enough to find it again from another process, or another host.

    ``server`` and ``task_id`` together are the key. ``era`` is "legacy" or "modern",
    ``version`` the protocol version, ``transport`` "stdio" or "http"; ``session_id`` the
    legacy HTTP ``Mcp-Session-Id`` (a secret). ``arguments`` are kept only when the host
    asked (a secret); ``arguments_digest`` always. ``state`` is one of
    :data:`TASK_STATES`; ``message`` the status message (escaped by the caller).
    ``answered`` holds the keys of the input requests already answered; ``result`` the
    ``CallToolResult`` once read (a secret), ``error`` one line; ``delivered``: the
    result (or error) reached a caller. ``lease_owner``/``lease_until``: who polls it,
    until when (:meth:`Store.take_task_lease`). Times are Unix times.

    Mappings are frozen (read-only), lists tuples. The ``repr`` never shows the session
    id, the arguments or the result, only whether they are set.
    """

    server: str
    task_id: str
    tool: str
    era: str
    version: str
    transport: str
    session_id: str | None
    arguments_digest: str
    arguments: Mapping[str, Any] | None
    state: str
    message: str | None
    poll_ms: int
    ttl_ms: int | None
    created_at: float
    updated_at: float
    expires_at: float | None
    answered: tuple[str, ...] = ()
    result: Mapping[str, Any] | None = None
    error: str | None = None
    delivered: bool = False
    lease_owner: str | None = None
    lease_until: float | None = None

    def __post_init__(self) -> None:
        for name in ("server", "task_id", "tool", "era", "version", "transport", "arguments_digest", "state"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"TaskRecord.{name} must be a str")
        for name in ("session_id", "message", "error", "lease_owner"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise TypeError(f"TaskRecord.{name} must be a str or None")
        if self.era not in ("legacy", "modern"):
            raise ValueError(f"TaskRecord.era must be 'legacy' or 'modern', not {self.era!r}")
        if self.transport not in ("stdio", "http"):
            raise ValueError(f"TaskRecord.transport must be 'stdio' or 'http', not {self.transport!r}")
        if self.state not in TASK_STATES:
            raise ValueError(f"TaskRecord.state must be one of {', '.join(sorted(TASK_STATES))}, not {self.state!r}")
        if isinstance(self.poll_ms, bool) or not isinstance(self.poll_ms, int):
            raise TypeError("TaskRecord.poll_ms must be an int")
        if self.ttl_ms is not None and (isinstance(self.ttl_ms, bool) or not isinstance(self.ttl_ms, int)):
            raise TypeError("TaskRecord.ttl_ms must be an int or None")
        for name in ("created_at", "updated_at"):
            object.__setattr__(self, name, float(getattr(self, name)))
        for name in ("expires_at", "lease_until"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, float(getattr(self, name)))
        for name in ("arguments", "result"):
            value = getattr(self, name)
            if value is not None:
                if not isinstance(value, Mapping):
                    raise TypeError(f"TaskRecord.{name} must be a mapping or None")
                object.__setattr__(self, name, freeze(value))
        if isinstance(self.answered, str) or not all(isinstance(key, str) for key in self.answered):
            raise TypeError("TaskRecord.answered must be a sequence of str")
        object.__setattr__(self, "answered", tuple(self.answered))
        object.__setattr__(self, "delivered", bool(self.delivered))

    __hash__ = None  # type: ignore[assignment]  # mappings inside: not hashable

    @property
    def terminal(self) -> bool:
        """The task ended: completed, failed, cancelled or lost."""
        return self.state in TASK_TERMINAL

    @property
    def pending(self) -> bool:
        """Still someone's business: working or waiting for input, or ended with an
        outcome (a result or error, read or still to read) that has not reached a caller."""
        return self.state in TASK_ACTIVE or not self.delivered

    def expired(self, now: float | None = None) -> bool:
        """True once ``expires_at`` (the server's TTL from creation) is before ``now`` (default: now)."""
        return self.expires_at is not None and self.expires_at < (time.time() if now is None else now)

    def __repr__(self) -> str:
        parts = [f"server={self.server!r}", f"task_id={self.task_id!r}", f"tool={self.tool!r}", f"state={self.state!r}",
                 f"era={self.era!r}", f"version={self.version!r}", f"transport={self.transport!r}"]
        if self.session_id is not None:
            parts.append("session_id=<secret>")
        parts.append(f"arguments_digest={self.arguments_digest!r}")
        if self.arguments is not None:
            parts.append("arguments=<secret>")
        if self.message is not None:
            parts.append(f"message={self.message!r}")
        parts += [f"poll_ms={self.poll_ms!r}", f"ttl_ms={self.ttl_ms!r}", f"created_at={self.created_at!r}",
                  f"updated_at={self.updated_at!r}", f"expires_at={self.expires_at!r}"]
        if self.answered:
            parts.append(f"answered={self.answered!r}")
        parts.append("result=<set>" if self.result is not None else "result=None")
        if self.error is not None:
            parts.append(f"error={self.error!r}")
        parts.append(f"delivered={self.delivered!r}")
        if self.lease_owner is not None:
            parts.append(f"lease_owner={self.lease_owner!r}, lease_until={self.lease_until!r}")
        return "TaskRecord(" + ", ".join(parts) + ")"
