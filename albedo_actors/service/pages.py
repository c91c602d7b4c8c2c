"""The settings page's credentials: single-use opening links and expiring page sessions.

::

    pages = PageSessions()
    link = pages.new_link()                # for http://127.0.0.1:PORT/#open=LINK
    token, expires = pages.open(link)      # once: the link is spent; None when spent or expired
    pages.valid(token)                     # True while the session lives
    pages.close(token)                     # the page's sign-out

No cookie authorises anything. A cookie belongs to a host, not a port, and SameSite
ignores the port, so another local user's page on another 127.0.0.1 port would be sent
it and could replay it (issue 23, hole 1). Instead the page is opened with a link whose
secret is in the URL fragment (``#open=``), which a browser never sends to a server; the
page trades it, once, for a page session token that it keeps in ``sessionStorage``
(per origin: port included) and sends as ``Authorization: Bearer`` with every request.

- A link is single use, and lives :data:`LINK_LIFETIME_S` if unused: what a terminal's
  scrollback or the browser's history keeps of it opens nothing.
- A page session lives :data:`SESSION_LIFETIME_S` from its opening, until the page
  signs out, or until the service stops; at most :data:`MAX_SESSIONS` live at once (the
  oldest ends first).
- Tokens are 256 random bits, compared in constant time; only their SHA-256 digests are
  kept, so a memory dump of the service names no usable token.

Thread-safe: waitress's request threads share one instance.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from typing import Callable

__all__ = ["PageSessions", "LINK_LIFETIME_S", "SESSION_LIFETIME_S", "MAX_SESSIONS", "MAX_LINKS"]

LINK_LIFETIME_S = 15 * 60.0
SESSION_LIFETIME_S = 8 * 3600.0
MAX_SESSIONS = 32
MAX_LINKS = 32


class PageSessions:
    """The live opening links and page sessions of one service (see the module docstring)."""

    def __init__(self, *, link_lifetime: float = LINK_LIFETIME_S, session_lifetime: float = SESSION_LIFETIME_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._link_lifetime = link_lifetime
        self._session_lifetime = session_lifetime
        self._clock = clock
        self._lock = threading.Lock()
        self._links: dict[bytes, float] = {}  # digest -> expiry (monotonic)
        self._sessions: dict[bytes, float] = {}

    def new_link(self) -> str:
        """A fresh single-use opening secret."""
        link = secrets.token_urlsafe(32)
        with self._lock:
            self._expire()
            _keep_at_most(self._links, MAX_LINKS - 1)
            self._links[_digest(link)] = self._clock() + self._link_lifetime
        return link

    def open(self, link: str) -> tuple[str, float] | None:
        """Spend ``link``: a new session token and its lifetime in seconds, or None when
        the link is unknown, spent or expired."""
        with self._lock:
            self._expire()
            if self._links.pop(_digest(link), None) is None:
                return None
            token = secrets.token_urlsafe(32)
            _keep_at_most(self._sessions, MAX_SESSIONS - 1)
            self._sessions[_digest(token)] = self._clock() + self._session_lifetime
        return token, self._session_lifetime

    def valid(self, token: str) -> bool:
        """True while ``token`` names a live page session."""
        with self._lock:
            expiry = self._sessions.get(_digest(token))
            if expiry is None:
                return False
            if expiry <= self._clock():
                del self._sessions[_digest(token)]
                return False
            return True

    def close(self, token: str) -> bool:
        """End the page session ``token`` (the page's sign-out); False when it was not live."""
        with self._lock:
            return self._sessions.pop(_digest(token), None) is not None

    def clear(self) -> None:
        with self._lock:
            self._links.clear()
            self._sessions.clear()

    def _expire(self) -> None:
        now = self._clock()
        for table in (self._links, self._sessions):
            for key in [key for key, expiry in table.items() if expiry <= now]:
                del table[key]


def _digest(token: str) -> bytes:
    # A dict lookup by digest: the token itself is never kept, and the lookup's timing
    # depends on a hash of the guess, not on how much of the token it got right.
    return hashlib.sha256(token.encode("utf-8", "replace")).digest()


def _keep_at_most(table: dict[bytes, float], n: int) -> None:
    while len(table) > n:
        del table[min(table, key=table.__getitem__)]  # the one that ends first
