"""The frozen records the store hands out; plain immutable data, safe to share between threads.

Secret values (bearer token, header value, env values, the OAuth record) never appear in
a ``repr``: it shows only which of them are set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

__all__ = ["Credentials", "HeldDefinition", "SavedCatalogue", "ServerState", "TrustEvent", "TrustedDefinition", "freeze", "thaw"]

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
