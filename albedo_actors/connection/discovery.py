"""Discovery: one connection's catalogue, every page of every list, within one byte budget.

:func:`discover` reads the catalogue, following ``nextCursor`` for at most
:data:`MAX_PAGES` pages per list, within one byte budget (:data:`DISCOVERY_BUDGET`)
for every page of every list, counted as each page arrives.

Given its client's :class:`~.list_cache.ListCache`, a 2026-07-28 discovery reads a page
the server marked fresh (``ttlMs``) from the cache instead of asking again, asks for an
expired page by its cursor, and keeps each page it reads for its ``ttlMs``. A cursored
request refused with -32602 after a cached page drops every cached page of that list and
reads it again from the beginning (once).
"""

from __future__ import annotations

import time
from typing import Any

from ..catalogue import Catalogue
from ..catalogue import schemas
from ..errors import ProtocolViolation, RemoteError
from ..wire import jsonrpc
from ..wire.jsonrpc import Json
from .list_cache import ListCache, request_key
from .negotiation import Connection

MAX_PAGES = 100
# Bytes on the wire of one whole discovery: every page of tools, resources, templates
# and prompts together, counted as each page arrives. The same as the saved-catalogue
# limit (saved.MAX_CATALOGUE_BYTES): a listing that cannot be saved is not worth reading.
DISCOVERY_BUDGET = 8 * 1024 * 1024


def discover(connection: Connection, timeout: float, cache: ListCache | None = None) -> Catalogue:
    """Read tools, resources, resource templates and prompts the server offers.

    ``cache``: the client's fresh pages (modern connections only): used and filled.

    Each list is asked only when the capabilities offer it. Pagination stops after
    MAX_PAGES pages or at a repeated cursor; what was read is kept, with a warning.

    Raises:
        ServerError: a list failed (the server's error, a timeout, a lost connection).
    """
    deadline = time.monotonic() + timeout
    asked_at = time.time()  # the catalogue's discovery time: what the server served from now on
    caps = connection.capabilities
    warnings: list[str] = []
    budget = _Budget(connection.server)
    lists: dict[str, tuple[dict[str, Any], ...]] = {}
    wanted = [
        ("tools", "tools/list", "tools"),
        ("resources", "resources/list", "resources"),
        ("resources", "resources/templates/list", "resourceTemplates"),
        ("prompts", "prompts/list", "prompts"),
    ]
    for capability, method, key in wanted:
        if not isinstance(caps.get(capability), dict):
            continue
        try:
            lists[key] = _list_all(connection, method, key, deadline, warnings, budget,
                                   cache if connection.modern else None)
        except RemoteError as exc:
            if method == "resources/templates/list" and exc.code == jsonrpc.METHOD_NOT_FOUND:
                continue  # offering resources does not oblige a server to have templates
            raise
    if "tools" in lists:
        # The link keeps what it needs to call them (HTTP: the Mcp-Param headers) and
        # says which it can call at all.
        lists["tools"] = connection.link.set_tool_headers(lists["tools"], warnings)
    # Output schemas compiled now, on this server's thread: one that does not compile
    # warns as the catalogue loads, and the first checked call finds its validator ready.
    compiled = schemas.prepare(connection.server, lists.get("tools", ()))
    catalogue = Catalogue(
        server=connection.server,
        era=connection.era,
        protocol_version=connection.version,
        server_info=connection.server_info,
        instructions=connection.instructions,
        capabilities=caps,
        tools=lists.get("tools", ()),
        resources=lists.get("resources", ()),
        resource_templates=lists.get("resourceTemplates", ()),
        prompts=lists.get("prompts", ()),
        warnings=tuple(warnings),
        discovered_at=asked_at,
    )
    schemas.remember(catalogue, compiled)
    return catalogue


class _Budget:
    """The bytes one discovery may still read (:data:`DISCOVERY_BUDGET`)."""

    def __init__(self, server: str, limit: int = DISCOVERY_BUDGET) -> None:
        self.server = server
        self.limit = limit
        self.used = 0

    def spend(self, sizes: list[int], method: str, page: int) -> None:
        """Count the pages just read; stop at the first excess.

        Raises:
            ProtocolViolation: the discovery read more than the budget.
        """
        self.used += sum(sizes)
        sizes.clear()
        if self.used > self.limit:
            raise ProtocolViolation(
                self.server,
                f"its catalogue is over the {self.limit >> 20} MiB discovery budget (page {page} of {method} reached "
                f"{self.used} bytes); ask its operator to offer fewer or smaller tools",
            )


class _StaleCursor(Exception):
    """A cursor taken from a cached page was refused: the list is read again from the start."""


def _list_all(connection: Connection, method: str, key: str, deadline: float, warnings: list[str],
              budget: _Budget, cache: ListCache | None) -> tuple[dict[str, Any], ...]:
    """Every valid item of one list, page by page (each page checked as it arrives).

    2026-07-28 server/utilities/caching: a cursor from a cached page that the server now
    refuses (-32602) means every cached page of the list is discarded and the list is
    read from the beginning, without the cache; that happens once per discovery.
    """
    if cache is not None:
        try:
            return _pages(connection, method, key, deadline, warnings, budget, cache)
        except _StaleCursor:
            cache.forget(method)
    return _pages(connection, method, key, deadline, warnings, budget, cache, use_cached=False)


def _pages(connection: Connection, method: str, key: str, deadline: float, warnings: list[str],
           budget: _Budget, cache: ListCache | None, use_cached: bool = True) -> tuple[dict[str, Any], ...]:
    kept = _Kept(connection.server, key)
    cursor: str | None = None
    seen: set[str] = set()
    sizes: list[int] = []
    from_cache = False  # a page of this pass came from the cache
    for page_number in range(1, MAX_PAGES + 1):
        params = {"cursor": cursor} if cursor is not None else None
        result = None
        if cache is not None:
            # The exact request (its _meta names the version) under the credentials in use.
            context = connection.link.authorization_context()
            cache_key = request_key(method, connection.params(params, method=method), context)
            if use_cached:
                result = cache.get(cache_key)
        if result is not None:
            from_cache = True
            sizes.append(len(jsonrpc.encode(result)))  # within the budget as if read again
        else:
            generation = cache.generation(method) if cache is not None else 0
            try:
                result = connection.request(method, params, max(0.0, deadline - time.monotonic()), sizes)
            except RemoteError as exc:
                if cursor is not None and from_cache and exc.code == jsonrpc.INVALID_PARAMS:
                    raise _StaleCursor() from None
                raise
            if cache is not None:
                # One answer per round: more than one means an input_required retry
                # (inputResponses / requestState), whose result is never kept. Nor is one
                # read while the credentials changed.
                if len(sizes) == 1 and connection.link.authorization_context() == context:
                    cache.put(cache_key, method, result, cache.now(), generation)
        budget.spend(sizes, method, page_number)
        page = result.get(key)
        if not isinstance(page, list):
            raise ProtocolViolation(connection.server, f"{method} returned no {key} list")
        cursor = result.get("nextCursor")
        kept.add(page)
        del page, result  # an invalid entry costs memory only while its page is checked
        # 2026-07-28 server/utilities/pagination: any non-null cursor continues.
        if cursor is None or (cursor == "" and not connection.modern):
            return kept.done(warnings)
        if not isinstance(cursor, str):
            raise ProtocolViolation(connection.server, f"{method} returned a nextCursor that is not a string")
        if cursor in seen:
            warnings.append(f"server {connection.server!r}: {method} repeated a cursor; kept the {len(kept.items)} {key} read so far")
            return kept.done(warnings)
        seen.add(cursor)
    warnings.append(f"server {connection.server!r}: {method} had more than {MAX_PAGES} pages; kept the {len(kept.items)} {key} of the first {MAX_PAGES}")
    return kept.done(warnings)


_REQUIRED = {"tools": "name", "resources": "uri", "resourceTemplates": "uriTemplate", "prompts": "name"}
MAX_NAMED_WARNINGS = 10  # entries of one list named in warnings; the rest are counted


class _Kept:
    """The valid entries of one list, added page by page, and what was left out.

    Warnings are bounded: the first few left-out entries are named, the rest counted,
    so a million bad entries cost one line, not a million.
    """

    def __init__(self, server: str, key: str) -> None:
        self.server = server
        self.key = key
        self.items: list[dict[str, Any]] = []
        self._field = _REQUIRED[key]
        self._seen: set[str] = set()
        self._named: list[str] = []
        self._unnamed = 0  # entries without an identifier
        self._more = 0  # further left-out entries past MAX_NAMED_WARNINGS

    def add(self, page: list[Json]) -> None:
        key, field, seen = self.key, self._field, self._seen
        for item in page:
            ident = item.get(field) if type(item) is dict else None
            if not isinstance(ident, str) or not ident:
                self._unnamed += 1
                continue
            if key == "tools" and not (isinstance(item.get("inputSchema"), dict) and item["inputSchema"].get("type") == "object"):
                self._leave_out(f"left out tool {ident[:80]!r}: its inputSchema is not an object schema")
                continue
            if ident in seen:
                self._leave_out(f"left out a second {key} entry named {ident[:80]!r}")
                continue
            seen.add(ident)
            self.items.append(item)

    def done(self, warnings: list[str]) -> tuple[dict[str, Any], ...]:
        prefix = f"server {self.server!r}: "
        if self._unnamed:
            some = "an entry" if self._unnamed == 1 else f"{self._unnamed} entries"
            warnings.append(f"{prefix}left out {some} of {self.key} without a {self._field}")
        warnings.extend(prefix + text for text in self._named)
        if self._more:
            warnings.append(f"{prefix}left out {self._more} more entries of {self.key}")
        return tuple(self.items)

    def _leave_out(self, text: str) -> None:
        if len(self._named) < MAX_NAMED_WARNINGS:
            self._named.append(text)
        else:
            self._more += 1
