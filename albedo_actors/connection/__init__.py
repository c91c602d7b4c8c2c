"""One negotiated connection to one server: the channel, the stdio and HTTP links,
era negotiation and discovery. Runs on callers', reader and worker threads; no actor."""

from .discovery import DISCOVERY_BUDGET, MAX_PAGES, discover
from .negotiation import Connection, Handlers, open_http, open_stdio

__all__ = ["DISCOVERY_BUDGET", "MAX_PAGES", "Connection", "Handlers", "discover", "open_http", "open_stdio"]
