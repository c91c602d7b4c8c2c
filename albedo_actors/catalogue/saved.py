"""Saved catalogues: the fingerprint that keys them and their JSON form.

A catalogue is saved under a fingerprint of the server's configuration and
credentials; one saved under another fingerprint (the configuration or a secret
changed) is not used. The fingerprint is a digest of a canonical JSON of every field
that can change what the server offers, with secret values digested first, so nothing
secret can be read back from it. It is stored in the clear beside the secrets, so it
must not let anyone test a guess of a secret either:

- With a store key, every digest (of each secret and of the whole) is an HMAC-SHA256
  under the store's digest key (``Store.digest_key``, derived from the store key, see
  :mod:`albedo_actors.store.sealing`). Without the key a guessed secret gives nothing
  to compare. The values of the environment variables the configuration names are
  covered too, so changing one changes the fingerprint.
- Without a key the digest is a plain SHA-256, and it covers only what the store
  holds in the clear already: the stored credentials, never the value of an
  environment variable the configuration names (the store does not hold those, and a
  digest of a short one, a PIN, is found by trying them all). So without a key a
  changed environment variable does not change the fingerprint: the saved catalogue
  stays in use until the server's next discovery replaces it (a host dials every
  server it advertises from a saved catalogue in the background at once).

A fingerprint made under one key never matches one made under another or under none:
setting, rotating or removing the key means one rediscovery of each server.

Pure code: no threads, and the store only through :class:`CatalogueStore`.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from .model import Catalogue
from .naming import sha256  # the one SHA-256 of the catalogue layer (no OpenSSL)
from ..config import ServerConfig
from ..errors import StoreError

if TYPE_CHECKING:  # the records' types only: no layer below actors/ loads the store
    from ..store.records import Credentials, SavedCatalogue

FINGERPRINT_VERSION = 1
_FIELDS = tuple(f.name for f in dataclasses.fields(ServerConfig))
MAX_CATALOGUE_BYTES = 8 * 1024 * 1024  # the store refuses larger (store.MAX_CATALOGUE_BYTES)


class CatalogueStore(Protocol):
    """The store as saved catalogues use it (:class:`albedo_actors.store.Store` is one);
    each method raises StoreError when the database fails."""

    def load_catalogue(self, server: str) -> SavedCatalogue | None: ...

    def save_catalogue(self, server: str, fingerprint: str, era: str, catalogue: dict[str, Any]) -> None: ...


# The canonical JSON of a fingerprint (json.dumps with these options, made once).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"),
                              default=lambda value: dict(value) if isinstance(value, Mapping) else list(value))


def _digest(value: str) -> str:
    return sha256(value.encode("utf-8")).hexdigest()


_KEYED: dict[bytes, Callable[[str], str]] = {}


def _keyed(key: bytes) -> Callable[[str], str]:
    """HMAC-SHA256 under ``key`` (RFC 2104), hex; made once per key (a process has one)."""
    made = _KEYED.get(key)
    if made is not None:
        return made
    import hmac  # only with a store key, which has loaded hashlib already (sealing)

    base = hmac.new(key, digestmod="sha256")

    def digest(value: str) -> str:
        mac = base.copy()  # the key's pads are hashed once, not once per value
        mac.update(value.encode("utf-8"))
        return mac.hexdigest()

    if len(_KEYED) >= 8:
        _KEYED.clear()  # a bound only: the store key changes only with a rotation
    _KEYED[key] = digest
    return digest


def fingerprint(server: ServerConfig, credentials: Credentials | None = None, environ: Mapping[str, str] | None = None,
                key: bytes | None = None) -> str:
    """The key a catalogue of ``server`` is saved under (64 hex digits).

    ``credentials`` is the server's stored credentials (or None). ``key`` is the
    store's digest key (``Store.digest_key``; None without a store key): with it every
    digest is an HMAC, and ``environ`` gives the values of the variables the
    configuration names, so that changing a named secret also changes the fingerprint;
    without it those values are left out (see the module docstring).
    """
    digest = _digest if key is None else _keyed(key)
    # The fields by name, as dataclasses.asdict gives them but without its deep copy
    # (the canonical JSON below is the same: a host with hundreds of servers computes
    # one per server at every preparation). Switching a server off and on, its call
    # timeout, or its trust (catalogue/trust.py) does not change it.
    config = {name: getattr(server, name) for name in _FIELDS if name not in ("enabled", "call_timeout_ms", "trust")}
    if config.get("oauth") is not None:
        config["oauth"] = dataclasses.asdict(config["oauth"])
    named = {}
    if environ is not None and key is not None:
        variables = list(server.env.values()) + list(server.headers.values())
        if server.bearer_token_env_var:
            variables.append(server.bearer_token_env_var)
        named = {variable: digest(environ[variable]) for variable in sorted(variables) if variable in environ}
    secrets = {}
    if credentials is not None:
        secrets = {
            "bearer": digest(credentials.bearer_token) if credentials.bearer_token else None,
            "header": _headers_key(credentials.headers, digest),
            "env": {name: digest(value) for name, value in sorted(credentials.env.items())},
        }
    canonical = _CANONICAL.encode({"v": FINGERPRINT_VERSION, "config": config, "named": named, "secrets": secrets})
    return digest(canonical)


def _headers_key(headers: tuple[tuple[str, str], ...], digest: Callable[[str], str]) -> Any:
    """The stored headers in a fingerprint: one header as it always was (so catalogues
    saved before several headers existed still match), several as a list of pairs."""
    if not headers:
        return None
    if len(headers) == 1:
        return [headers[0][0], digest(headers[0][1])]
    return [[name, digest(value)] for name, value in headers]


def to_json(catalogue: Catalogue) -> dict[str, Any]:
    """A catalogue as a JSON object (for the store)."""
    return {
        "era": catalogue.era,
        "protocolVersion": catalogue.protocol_version,
        "serverInfo": catalogue.server_info,
        "instructions": catalogue.instructions,
        "capabilities": catalogue.capabilities,
        "tools": list(catalogue.tools),
        "resources": list(catalogue.resources),
        "resourceTemplates": list(catalogue.resource_templates),
        "prompts": list(catalogue.prompts),
        **({"discoveredAt": catalogue.discovered_at} if catalogue.discovered_at is not None else {}),
    }


def size_of(catalogue: Catalogue) -> int:
    """Bytes of the catalogue's saved JSON form."""
    return len(json.dumps(to_json(catalogue), ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def load_current(store: CatalogueStore, server: str, key: str) -> Catalogue | None:
    """The catalogue ``store`` holds for ``server`` if it was saved under ``key``.

    Raises:
        StoreError: the store failed. ValueError: the saved JSON is not a catalogue.
    """
    saved = store.load_catalogue(server)
    return _from_saved(server, saved) if saved is not None and saved.fingerprint == key else None


def load_current_all(store: CatalogueStore, keys: Mapping[str, str],
                     saved_at: dict[str, float] | None = None) -> dict[str, Catalogue | StoreError | ValueError]:
    """For each server of ``keys`` (name -> fingerprint) with a catalogue saved under
    its key: that catalogue, or the error that makes its saved one unusable (a damaged
    row: StoreError; JSON that is not a catalogue: ValueError). A server with nothing
    saved, or saved under another key, is absent. A store that reads many servers at
    once (``load_catalogues``, as :class:`albedo_actors.store.Store` does) is asked
    once, not once per server. ``saved_at`` (when given) gets the time each catalogue
    returned was saved (a Unix time).

    Raises:
        StoreError: the store failed.
    """
    many = getattr(store, "load_catalogues", None)
    rows: Mapping[str, Any]
    if many is not None:
        rows = many(list(keys))
    else:
        rows = {}
        for server in keys:
            try:
                rows[server] = store.load_catalogue(server)
            except StoreError as exc:
                rows[server] = exc
    out: dict[str, Catalogue | StoreError | ValueError] = {}
    for server, key in keys.items():
        saved = rows.get(server)
        if isinstance(saved, StoreError):
            out[server] = saved
        elif saved is not None and saved.fingerprint == key:
            try:
                out[server] = _from_saved(server, saved)
            except ValueError as exc:
                out[server] = exc
            else:
                if saved_at is not None:
                    saved_at[server] = saved.saved_at
    return out


# The catalogue last built from each server's saved text, with the text's SHA-256: a
# catalogue is immutable, so loads of the same saved row give the same object, and what
# is built from it (its advertised operations, catalogue.naming) is built once. One entry
# per server name (replaced when its text changes), bounded; a text that is not a
# catalogue is not kept (it raises again).
_BUILT: dict[str, tuple[bytes, Catalogue]] = {}
_BUILT_LIMIT = 4096


def _from_saved(server: str, saved: SavedCatalogue) -> Catalogue:
    if saved.text is None:
        return from_json(server, saved.catalogue)
    digest = sha256(saved.text.encode("utf-8", "surrogatepass")).digest()
    built = _BUILT.get(server)
    if built is not None and built[0] == digest:
        return built[1]
    catalogue = from_json(server, saved.catalogue)
    if len(_BUILT) >= _BUILT_LIMIT and server not in _BUILT:
        _BUILT.clear()  # a bound only: a host configures far fewer servers
    _BUILT[server] = (digest, catalogue)
    return catalogue


SAVED, SAME, STALE = "saved", "same", "stale"  # what :func:`save_discovered` did


def save_discovered(store: CatalogueStore, server: str, key: str, catalogue: Catalogue) -> str:
    """Save a discovered ``catalogue`` under ``key``, unless the same listing, era and
    version are saved there (SAME) or the one saved there was discovered after it
    (STALE: never saved over a newer discovery); SAVED if saved.

    A client that stays connected hands out the catalogue of its own last discovery: a
    preparation's background dial of such a client reports that one, which the doctor's
    check (another connection) may have seen change since, and saved. Saving it again
    would put the older listing back, and reviewing it would forget what the newer one
    holds (tool integrity). A catalogue whose discovery time is unknown on either side
    (saved before discovery times were kept, or built by hand) is compared by listing
    alone, as before.

    Raises:
        StoreError, ValueError: as :func:`load_current`, or the catalogue is refused.
    """
    try:
        current = load_current(store, server, key)
    except (StoreError, ValueError):
        current = None  # a damaged saved row is replaced, not kept forever
    if (current is not None and current.same_listing(catalogue) and current.era == catalogue.era
            and current.protocol_version == catalogue.protocol_version):
        return SAME  # also re-saved when only the era changed: the next restart opens in it
    if catalogue.older_than(current):
        return STALE
    store.save_catalogue(server, key, catalogue.era, to_json(catalogue))
    return SAVED


def from_json(server: str, data: Mapping[str, Any]) -> Catalogue:
    """The catalogue a saved JSON object describes.

    Raises:
        ValueError: the object is not a saved catalogue.
    """
    def items(key: str) -> tuple[dict[str, Any], ...]:
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise ValueError(f"saved catalogue of {server!r}: {key} is not a list of objects")
        return tuple(value)

    era = data.get("era")
    version = data.get("protocolVersion")
    if era not in ("modern", "legacy") or not isinstance(version, str):
        raise ValueError(f"saved catalogue of {server!r} has no era or protocol version")
    instructions = data.get("instructions")
    discovered_at = data.get("discoveredAt")
    return Catalogue(
        server=server,
        era=era,
        protocol_version=version,
        server_info=dict(data.get("serverInfo") or {}),
        instructions=instructions if isinstance(instructions, str) else None,
        capabilities=dict(data.get("capabilities") or {}),
        tools=items("tools"),
        resources=items("resources"),
        resource_templates=items("resourceTemplates"),
        prompts=items("prompts"),
        discovered_at=float(discovered_at) if isinstance(discovered_at, (int, float)) and not isinstance(discovered_at, bool) else None,
    )
