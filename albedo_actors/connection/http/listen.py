"""The listening stream of one HTTP link, on its own thread.

**Owns** the listening thread and the exchange of its current stream: the optional GET
stream of an older session, or a held-open ``subscriptions/listen`` for a modern server
whose lists can change. Messages on it go to the channel.

A stream that ends is reopened after the server's ``retry`` or our wait, whichever is
longer: the wait is 1 s, doubling up to 60 s with each attempt that heard nothing, so
there is always at least 1 s between two openings, even with ``retry: 0``. An attempt
heard something only if a real notification arrived (not a comment, a ``retry`` field,
an event without data, a response, a request, or the subscription's acknowledgement);
eight attempts in a row that heard nothing give up. A server that sends one real
notification per stream forever is bounded too: at most 60 openings in any ten minutes
(LISTEN_WINDOW_OPENINGS per LISTEN_WINDOW), then the next waits for the oldest to leave
the window; it is never given up, as it keeps delivering.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

from ...transport.http import Exchange, HttpFailed, decode_message
from ...wire import jsonrpc, mcp
from ...wire.jsonrpc import Json, WireError
from ...wire.sse import SseParser
from .exchange import LinkState, begin, settle
from ...wire import telemetry

logger = telemetry.logger(__name__)  # records carry the server and trace ids

LISTEN_FIRST_WAIT = 1.0  # also the least wait between two openings, whatever retry says
LISTEN_MAX_WAIT = 60.0
LISTEN_LIMIT = 8
LISTEN_WINDOW = 600.0  # seconds; at most LISTEN_WINDOW_OPENINGS openings within any such span
LISTEN_WINDOW_OPENINGS = 60


class Listener:
    """The listening stream of ``link``: ``start()`` once; ``abort()`` from any thread ends
    the stream in progress (the link's ``closing`` ends the loop); ``join()`` waits."""

    def __init__(self, link: LinkState, filters: dict[str, bool] | None) -> None:
        self._link = link
        self._filters = filters  # None: an older session's GET stream
        self._thread = threading.Thread(target=self._loop, name=f"mcp-listen-{link.server}", daemon=True)
        self.answered = threading.Event()  # the first opening has its answer (or failed)
        self._exchange: Exchange | None = None

    def start(self) -> None:
        self._thread.start()

    def abort(self) -> None:
        exchange = self._exchange
        if exchange is not None:
            exchange.abort()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float) -> bool:
        """Wait for the thread (not from itself); True once it has ended."""
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def _loop(self) -> None:
        closing, server = self._link.closing, self._link.server
        quiet = 0
        wait = LISTEN_FIRST_WAIT
        openings: collections.deque[float] = collections.deque()  # when each stream of the window opened
        while not closing.is_set():
            openings.append(time.monotonic())
            heard, retry_ms, refused = self._once()
            if refused or closing.is_set():
                return
            if heard:
                quiet, wait = 0, LISTEN_FIRST_WAIT
            else:
                quiet += 1
                if quiet >= LISTEN_LIMIT:
                    logger.info("server %r: its listening stream heard nothing %d times; given up", server, quiet)
                    return
            # The server's retry or our wait, whichever is longer: a retry of 0 (or a
            # stream that ends at once) never makes a busy loop.
            delay = max(wait, retry_ms / 1000 if retry_ms is not None else 0.0)
            if not heard:
                wait = min(wait * 2, LISTEN_MAX_WAIT)
            now = time.monotonic()
            while openings and openings[0] <= now - LISTEN_WINDOW:
                openings.popleft()
            if len(openings) >= LISTEN_WINDOW_OPENINGS:
                # Each stream heard a notification, but a server that hangs up after
                # every one is still held to a rate: wait for the oldest to leave.
                delay = max(delay, openings[0] + LISTEN_WINDOW - now)
                logger.debug("server %r: %d listening streams in %g s; the next waits %.1f s",
                             server, len(openings), LISTEN_WINDOW, delay)
            if closing.wait(delay):
                return

    def _once(self) -> tuple[bool, int | None, bool]:
        """One listening stream; returns (heard something, retry ms, refused for good)."""
        link = self._link
        channel, server = link.channel, link.server
        exchange = Exchange()
        self._exchange = exchange
        if link.closing.is_set():
            self.answered.set()
            return False, None, True
        pending = None
        try:
            if self._filters is None:
                flow = link.auth_flow("GET", nonce=False)
                reply = link.transport.send("GET", link.stream_headers(begin(flow)), exchange)
            else:
                flow = link.auth_flow("POST", nonce=False)
                pending = channel.reserve("subscriptions/listen")
                params: dict[str, Any] | None = mcp.modern_params({"notifications": self._filters}, link.version,
                                                                  channel.capabilities)
                if telemetry.api() is not None:  # its span, and trace context as every request has
                    pending.span, params = telemetry.start_request("subscriptions/listen", params,
                                                                   channel.telemetry_attributes, pending.id)
                message = jsonrpc.request(pending.id, "subscriptions/listen", params)
                reply = link.transport.send("POST", link.post_headers(message, begin(flow)), exchange,
                                            body=jsonrpc.encode(message))
        except HttpFailed as exc:  # nobody waits on this stream: it is reopened, or given up
            self.answered.set()
            if pending is not None:
                channel.drop(pending)
            logger.debug("server %r: listening stream failed: %s", server, exc)
            return False, None, False
        self.answered.set()
        settle(flow, reply)
        if reply.status != 200 or not reply.is_sse:
            # A 405 or any other refusal leaves the stream closed for the connection's life.
            reply.close()
            if pending is not None:
                channel.drop(pending)
            logger.debug("server %r: no listening stream (HTTP %s)", server, reply.status)
            return False, None, True
        parser = SseParser(max_retry_ms=int(LISTEN_MAX_WAIT * 1000))
        heard = False
        try:
            for event in reply.events(parser):
                if not event.data:
                    continue
                try:
                    message = decode_message(event.data)
                except WireError as exc:
                    logger.warning("server %r sent an invalid message on its listening stream: %s", server, exc)
                    continue
                # Only a real notification is "hearing something": not the
                # acknowledgement, a response or a request (nor, above, a comment, a
                # retry field or an event without data). A server that sends only those
                # and hangs up is given up after LISTEN_LIMIT attempts.
                if _real_notification(message):
                    heard = True
                channel.feed_message(message)
                if pending is not None and not channel.is_pending(pending):
                    return heard, parser.retry_ms, True  # the server ended the subscription gracefully
        except HttpFailed as exc:
            logger.debug("server %r: listening stream dropped: %s", server, exc)
        finally:
            reply.close()
            if pending is not None:
                channel.drop(pending)
        return heard, parser.retry_ms, False


def _real_notification(message: Json) -> bool:
    """A JSON-RPC notification (a method, no id) other than the listen acknowledgement."""
    return (
        isinstance(message, dict)
        and "id" not in message
        and isinstance(message.get("method"), str)
        and message["method"] != "notifications/subscriptions/acknowledged"
    )
