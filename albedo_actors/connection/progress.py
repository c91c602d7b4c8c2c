"""Progress that keeps a tool call alive (2025-11-25 and 2026-07-28 basic/utilities/progress).

Every ``tools/call`` carries ``_meta.progressToken`` (unique per call, a string no other
call of the process uses). A ``notifications/progress`` naming it moves the call's
deadline to ``callTimeoutMs`` from then, never past the call's hard cap
(``maxCallTimeoutMs``, by default ten times ``callTimeoutMs``). A token that names no
running call changes nothing.

A flood costs little: on the reader thread a notification is checked and kept as the
call's latest report (O(1), nothing queued); the host hears the latest one at most
:data:`REPORTS_PER_SECOND` times a second, on one thread per call that serves nobody
else (:class:`Reporter`), and an exception from its callback is logged once and never
reaches the call. Numbers that are not finite, and message text, are bounded; the text
is escaped by the wire's printable-text rule (:func:`~albedo_actors.wire.text.printable`).
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from typing import Any, Callable, NamedTuple

from ..wire.deadline import Bound
from ..wire.text import printable
from ..wire import telemetry

logger = telemetry.logger(__name__)  # records carry the server and trace ids

REPORTS_PER_SECOND = 10  # at most this many callbacks a second per call
MESSAGE_LIMIT = 200  # characters of a progress message, escaped, at most
JOIN_TIMEOUT = 1.0  # for a reporter to finish its callback at the end of the call

_tokens = itertools.count(1)


def new_token() -> str:
    """A progress token no other call of this process uses."""
    return f"albedo-{next(_tokens)}"


class ProgressReport(NamedTuple):
    """One progress notification, made safe: numbers finite, message escaped and bounded."""

    server: str
    progress: float
    total: float | None
    message: str | None

    def line(self) -> str:
        """One line for a person: ``40/100 (40%) message``."""
        done = f"{self.progress:g}"
        if self.total is not None and self.total > 0:
            done += f"/{self.total:g} ({min(100.0, 100 * self.progress / self.total):.0f}%)"
        return f"{done} {self.message}" if self.message else done


def parse_report(server: str, params: dict[str, Any]) -> ProgressReport | None:
    """The report in a ``notifications/progress``'s params; None when it is not one."""
    progress = _number(params.get("progress"))
    if progress is None:
        return None
    total = _number(params.get("total"))
    message = params.get("message")
    text = printable(message, one_line=True, limit=MESSAGE_LIMIT) if isinstance(message, str) and message else None
    return ProgressReport(server, progress, total, text)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return number if math.isfinite(number) else None


class Cancel:
    """A caller's way to give up one running call (an awaited call that was cancelled).

    Made by the caller and handed to the call (``ServerHandle.call_tool(cancel=...)``);
    :meth:`cancel` may come from any thread (the event loop's), at any time, once or
    more. The channel that sends the request binds its interrupt here (:meth:`bind`):
    it ends the caller's wait at once and the waiting thread cancels the request the way
    a timeout does (stdio and 2025-11-25 HTTP: ``notifications/cancelled``; modern HTTP:
    the request's stream is closed). A call given up before it was sent is not sent.
    The hook does no blocking I/O on the canceller's thread.
    """

    __slots__ = ("cancelled", "_hook", "_lock")

    def __init__(self) -> None:
        self.cancelled = False
        self._hook: Callable[[], None] | None = None
        self._lock = threading.Lock()

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            hook = self._hook
        if hook is not None:
            hook()

    def bind(self, hook: Callable[[], None] | None) -> None:
        """Run ``hook`` when the call is given up (at once if it was already); None unbinds."""
        with self._lock:
            self._hook = hook
            now = self.cancelled and hook is not None
        if now:
            hook()  # type: ignore[misc]  # checked above: not None


class CallProgress:
    """One call's progress: its token, its moving deadline and hard cap, its latest report.

    A :class:`~albedo_actors.wire.deadline.Bound`: the call's one deadline, which
    :meth:`note` (on the reader thread) moves; whoever waits for the call (the channel,
    a link reading the answer on the caller's thread) reads :attr:`at` again before each
    wait and so follows it. Made from the call's :class:`~albedo_actors.wire.deadline.Deadline`
    (``start``), its first instant is that deadline's: a dial or an auth step before the
    request was sent has spent part of it.
    """

    __slots__ = ("token", "timeout", "started", "cap", "deadline", "extensions", "latest", "_reporter", "cancel")

    def __init__(self, token: str, timeout: float, cap: float, reporter: Reporter | None = None,
                 start: Bound | None = None, cancel: Cancel | None = None) -> None:
        # ``cancel``: the caller's way to give the call up (it travels with the call to
        # the channel, as this deadline does).
        self.cancel = cancel
        now = time.monotonic()
        self.token = token
        self.timeout = timeout
        self.started = now
        self.cap = now + max(cap, timeout)
        self.deadline = min(start.at, self.cap) if start is not None else now + timeout
        self.extensions = 0  # progress notifications that moved the deadline
        self.latest: ProgressReport | None = None
        self._reporter = reporter

    # -- the Bound protocol (wire/deadline.py) --------------------------------------------

    @property
    def at(self) -> float:
        return self.deadline

    @property
    def seconds(self) -> float:
        return self.timeout

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def note(self, report: ProgressReport) -> None:
        """A progress notification for this call arrived (reader thread; O(1))."""
        deadline = min(time.monotonic() + self.timeout, self.cap)
        if deadline > self.deadline:
            self.deadline = deadline
            self.extensions += 1
        self.latest = report
        if self._reporter is not None:
            self._reporter.poke()

    @property
    def capped(self) -> bool:
        """True when the deadline is the hard cap (progress can move it no further)."""
        return self.deadline >= self.cap

    def timed_out(self, server: str, method: str) -> str:
        """What a timeout says: the call's deadline, and whether progress extended it."""
        if self.extensions == 0:
            return f"{method} got no answer within {self.timeout:g} s; it was cancelled"
        ran = self.deadline - self.started
        if self.capped:
            return (f"{method} reported progress but got no answer within its cap of {ran:g} s (maxCallTimeoutMs); "
                    "it was cancelled")
        return (f"{method} got no answer within {self.timeout:g} s of its last progress "
                f"(the deadline was extended by progress, {ran:.1f} s in all); it was cancelled")


class Reporter:
    """Hands one call's latest progress to the host's callbacks, on its own thread.

    Started at the first report; at most :data:`REPORTS_PER_SECOND` deliveries a second
    (plus the last), each of the latest report only. :meth:`close` (at the end of the
    call) delivers the latest report if it was not yet, and waits for the thread to end
    (at most :data:`JOIN_TIMEOUT`: a callback that takes longer finishes on its own).
    Every call has one, so a call that hears no progress makes only this object: the
    thread and its events are made at the first report.
    """

    def __init__(self, callbacks: list[Callable[[ProgressReport], None]], name: str = "mcp-progress") -> None:
        self._callbacks = callbacks
        self._name = name
        self._lock = threading.Lock()
        self._wake: threading.Event | None = None  # with _done and _thread: made at the first report
        self._done: threading.Event | None = None
        self._thread: threading.Thread | None = None
        self._closed = False  # no thread starts after the end
        self._failed: set[int] = set()  # callbacks that raised (logged once each)
        self.progress: CallProgress | None = None

    def poke(self) -> None:
        wake = self._wake
        if wake is None:
            with self._lock:
                if self._closed:
                    return
                if self._wake is None:
                    self._done = threading.Event()
                    self._wake = threading.Event()
                    self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                    self._thread.start()
                wake = self._wake
        wake.set()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread, done, wake = self._thread, self._done, self._wake
        if thread is None or done is None or wake is None:
            return  # no report came: nothing was started
        done.set()
        wake.set()
        if thread is not threading.current_thread():
            thread.join(JOIN_TIMEOUT)

    def _run(self) -> None:
        wake, done = self._wake, self._done
        assert wake is not None and done is not None  # made before this thread started
        interval = 1.0 / REPORTS_PER_SECOND
        delivered: ProgressReport | None = None
        while True:
            wake.wait()  # set by every report, and by close()
            wake.clear()
            ending = done.is_set()
            report = self.progress.latest if self.progress is not None else None
            if report is not None and report is not delivered:
                delivered = report
                self._deliver(report)
            if ending:
                return  # the call's last report was delivered before it returned
            done.wait(interval)  # the rate limit; close() ends it at once (then the last report goes out)

    def _deliver(self, report: ProgressReport) -> None:
        for index, callback in enumerate(self._callbacks):
            try:
                callback(report)
            except Exception as exc:  # noqa: BLE001 - the host's callback never breaks the call
                if index not in self._failed:
                    self._failed.add(index)
                    logger.warning("server %r: a progress callback failed (%s: %s); its later failures are not logged",
                                   report.server, type(exc).__name__, printable(exc, one_line=True, limit=200))

