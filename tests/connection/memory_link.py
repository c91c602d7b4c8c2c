"""An in-memory ``Link`` (connection/channel.py): a channel's server is a Python function.

No subprocess, no socket, no thread of its own: a request is handed to ``serve`` on the
thread that sends it, and whatever ``serve`` returns is fed back to the channel at once,
as a reader thread would. A request ``serve`` leaves unanswered (it returns nothing) is
held until the test answers it (:meth:`MemoryLink.answer`) from any thread, or the
channel gives it up (:attr:`MemoryLink.cancelled`, :attr:`MemoryLink.forgotten`).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable

from albedo_actors.connection.channel import LinkClosed, Pending, RpcChannel
from albedo_actors.wire import jsonrpc, mcp
from albedo_actors.wire.deadline import Bound

Serve = Callable[[dict[str, Any]], Iterable[dict[str, Any]]]


def unanswered(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A server that answers nothing by itself: the test answers."""
    return []


class MemoryLink:
    """Implements :class:`albedo_actors.connection.channel.Link` in memory."""

    def __init__(self, channel: RpcChannel, serve: Serve = unanswered) -> None:
        self._channel = channel
        self._serve = serve
        self._lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []  # every request sent, in order
        self.others: list[dict[str, Any]] = []  # notifications and responses sent
        self.deadlines: list[Bound | None] = []  # each request's deadline, as the channel gave it
        self.cancelled: list[int] = []
        self.forgotten: list[int] = []
        self.negotiated: mcp.Negotiated | None = None
        self.closed_reason: str | None = None

    @classmethod
    def attached(cls, serve: Serve = unanswered, server: str = "mem", **channel_args: Any) -> tuple[RpcChannel, MemoryLink]:
        """A channel and its in-memory link, attached."""
        heard: list[tuple[str, dict[str, Any]]] = []
        channel = RpcChannel(server, on_notification=channel_args.pop("on_notification", lambda m, p: heard.append((m, p))),
                             on_closed=channel_args.pop("on_closed", lambda reason: None), **channel_args)
        link = cls(channel, serve)
        channel.attach(link)
        return channel, link

    # -- what the test does ---------------------------------------------------------------------

    def answer(self, message: dict[str, Any]) -> None:
        """The server sends ``message`` (a response, a notification or a request)."""
        self._channel.feed_message(message)

    def result(self, request_id: int, result: dict[str, Any]) -> None:
        self.answer(jsonrpc.result_response(request_id, result))

    def lose(self, reason: str = "the server went away") -> None:
        """The connection drops (as a reader thread reports an exited process)."""
        self._channel.connection_lost(reason)

    # -- Link -----------------------------------------------------------------------------------

    def send_request(self, pending: Pending, message: dict[str, Any], deadline: Bound | None = None) -> None:
        with self._lock:
            if self.closed_reason is not None:
                raise LinkClosed()
            self.requests.append(message)
            self.deadlines.append(deadline)
        for answer in self._serve(message):
            self.answer(answer)

    def send_other(self, message: dict[str, Any]) -> None:
        with self._lock:
            if self.closed_reason is not None:
                raise LinkClosed()
            self.others.append(message)

    def cancel(self, pending: Pending) -> None:
        self.cancelled.append(pending.id)
        self._channel.notify("notifications/cancelled", {"requestId": pending.id, "reason": "timed out"})

    def forget(self, pending: Pending) -> None:
        self.forgotten.append(pending.id)

    def close(self, reason: str = "closed") -> None:
        with self._lock:
            if self.closed_reason is not None:
                return
            self.closed_reason = reason
        self._channel.connection_lost(reason, local=True)

    @property
    def closed(self) -> bool:
        return self.closed_reason is not None

    def wait_closed(self, timeout: float | None = None) -> bool:
        return True  # no thread, no process

    def use(self, negotiated: mcp.Negotiated) -> None:
        self.negotiated = negotiated

    def listen(self, filters: dict[str, bool]) -> Pending | None:
        return None

    def authorization_context(self) -> str:
        return ""

    def set_tool_headers(self, tools: tuple[dict[str, Any], ...], warnings: list[str]) -> tuple[dict[str, Any], ...]:
        return tools
