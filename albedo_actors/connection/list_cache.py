"""The pages of the list methods a server said are fresh (2026-07-28 server/utilities/caching).

A :class:`ListCache` belongs to one server's client (``actors/client.py``) and outlives its
connections: a re-dial within a page's freshness reads that page from here, not from the
server. Discovery (:mod:`.discovery`) is its only user.

- A page is kept for ``ttlMs`` milliseconds from the moment its answer was read. An
  absent, non-numeric, zero or negative ``ttlMs`` means stale at once: nothing is kept.
- The key is the exact request (the method and its params as sent, ``_meta`` included,
  so the protocol version and the cursor are in it) and the authorization context the
  request went out under (:meth:`Link.authorization_context`, a digest of the
  credentials): a different request, or a different token, never meets another's page.
- A result that took a multi round-trip retry (``inputResponses`` / ``requestState``) is
  never kept: the caller does not offer it.
- Nothing here runs by itself: an expired page is read again only when discovery next
  needs it (no polling, no timers).

Thread-safe: the dialer and the re-discovery threads of one client may use it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

# The list methods a list_changed notification's capability names (wire/mcp.LIST_CHANGED).
LIST_METHODS = {
    "tools": ("tools/list",),
    "resources": ("resources/list", "resources/templates/list"),
    "prompts": ("prompts/list",),
}
# Pages kept at most (every list, every authorization context): beyond it a page is not
# kept (it is read again next time), so a server cannot make the cache grow without bound.
MAX_CACHED_PAGES = 400


def ttl_seconds(result: dict[str, Any]) -> float:
    """How long a result stays fresh: ``ttlMs`` in seconds; 0 when absent, not a number,
    or negative (2026-07-28: absent means 0; a negative value is ignored and treated as 0)."""
    ttl = result.get("ttlMs")
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or ttl != ttl or ttl <= 0:
        return 0.0
    return min(float(ttl), 1e12) / 1000.0


def request_key(method: str, params: dict[str, Any] | None, context: str) -> str:
    """The cache key of one request: its method, its params exactly as sent, and the
    authorization context it went out under."""
    return json.dumps([method, params, context], sort_keys=True, separators=(",", ":"), default=str)


class ListCache:
    """Fresh list pages by request (see the module's docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        # key -> (method, fresh until (clock), result)
        self._pages: dict[str, tuple[str, float, dict[str, Any]]] = {}
        # Bumped by forget(): a page asked for before a list changed is not kept after it.
        self._generations: dict[str, int] = {}

    def generation(self, method: str) -> int:
        """The number of times ``method``'s pages were forgotten; give it back to :meth:`put`."""
        with self._lock:
            return self._generations.get(method, 0)

    def get(self, key: str) -> dict[str, Any] | None:
        """The page kept for ``key`` while it is fresh; None otherwise (an expired page is
        dropped: the caller asks the server again)."""
        with self._lock:
            entry = self._pages.get(key)
            if entry is None:
                return None
            if self._clock() >= entry[1]:
                del self._pages[key]
                return None
            return entry[2]

    def put(self, key: str, method: str, result: dict[str, Any], received: float, generation: int) -> None:
        """Keep ``result`` (read at ``received``, on this cache's clock) for its ``ttlMs``,
        unless the list was forgotten since ``generation`` (:meth:`generation`) was read."""
        ttl = ttl_seconds(result)
        if ttl <= 0:
            return
        with self._lock:
            if self._generations.get(method, 0) != generation:
                return
            now = self._clock()
            until = received + ttl
            if until <= now:
                return
            if key not in self._pages and len(self._pages) >= MAX_CACHED_PAGES:
                self._pages = {k: v for k, v in self._pages.items() if v[1] > now}
                if len(self._pages) >= MAX_CACHED_PAGES:
                    return
            self._pages[key] = (method, until, result)

    def forget(self, *methods: str) -> None:
        """Drop every page of these methods, in every authorization context (a list
        changed, or one of its cursors stopped working)."""
        with self._lock:
            self._pages = {k: v for k, v in self._pages.items() if v[0] not in methods}
            for method in methods:
                self._generations[method] = self._generations.get(method, 0) + 1

    def now(self) -> float:
        return self._clock()
