"""A tool call that runs as an MCP task, followed to its end on the caller's thread.

The call is sent task-augmented (wire/tasks.py says how, in each era); a server that
answers with a task gets polled until the task ends, and the caller gets the tool's
result as from any call. What the caller sees of the task in between is progress: each
change of status or status message is a :class:`~.progress.ProgressReport` ("task
working: ...") handed to the call's ``on_progress``, and it moves the call's deadline as
a progress notification does (``callTimeoutMs`` from the last change, never past
``maxCallTimeoutMs``). Past the deadline, or when the caller gives up, the task is
cancelled with ``tasks/cancel`` (never ``notifications/cancelled``).

Between polls the caller's thread waits on an event, for the server's poll interval
(clamped: wire/tasks.py) or until a status notification for the task arrives (the
channel hands it over in O(1) on the reader thread and only the latest is kept, so a
flood costs one poll's worth of work), or until the caller gives up.

Input: in 2025-11-25 a task waiting for input is followed with ``tasks/result``, on
which the server sends its own requests (an elicitation) for the host's handlers to
answer; in 2026 the ``inputRequests`` of an ``input_required`` poll are answered with
``tasks/update``, each key once however many polls repeat it, by the same handlers and
rules as the input of a plain call (Connection._answer_inputs): input the host does not
give fails the call, and the task is cancelled.

Every step is told to the call's :class:`TaskBook` (the store's, through the actors), so
that a process that dies mid-task leaves a row another can resume from. A book that
fails is logged once and never fails the call.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from ..errors import AlbedoError, ProtocolViolation, RemoteError, ServerError, SessionExpired, TimedOut, Unavailable, UnknownOutcome
from ..wire import tasks
from ..wire.deadline import Deadline
from ..wire.tasks import BadTask, TaskState
from ..wire.text import printable
from ..wire import telemetry
from .progress import CallProgress, ProgressReport

if TYPE_CHECKING:
    from .negotiation import Connection

logger = telemetry.logger(__name__)

CANCEL_TIMEOUT = 5.0  # seconds a tasks/cancel may take
# The first polls of a new task come sooner than the server's interval: the first at
# once, then after FIRST_STEP, each wait RAMP times the last: a task that ends at once
# costs a round trip, not a whole interval, and a long one a few polls more (0, 25, 100,
# 400 ms, then the interval).
FIRST_STEP = 0.025
RAMP = 4.0
UPDATE_LIMIT = 64  # inputRequests keys answered per task, at most
MAX_ROUNDS = 10_000  # tasks/get polls of one task, at most (a cap beside the deadline's)
NOTE_EVERY = tasks.MIN_POLL  # seconds: a changing status message is told to the book at most this often


class TaskStart(NamedTuple):
    """A task the server just created, with what is needed to find it again."""

    server: str
    tool: str
    era: str
    version: str
    transport: str  # "stdio" or "http"
    session_id: str | None  # a 2025-11-25 HTTP session's Mcp-Session-Id: polls need it
    arguments: dict[str, Any] | None  # the call's (the book keeps a digest of them)
    keep_arguments: bool  # the host asked for the arguments themselves to be kept
    state: TaskState


class TaskBook(Protocol):
    """Where a running task is kept (the store's, through actors/; None: nowhere)."""

    def begin(self, start: TaskStart) -> None: ...

    def note(self, server: str, state: TaskState, answered: tuple[str, ...]) -> None: ...

    def end(self, server: str, task_id: str, status: str, result: dict[str, Any] | None, error: str | None) -> None: ...

    def alive(self, server: str, task_id: str) -> None:
        """A poll was made: the book renews its hold on the task when due (a lease)."""

    def release(self, server: str, task_id: str) -> None:
        """This process stops polling the task, which goes on (another may resume it)."""


class _Heard:
    """The latest status notification of one task, and the event that wakes its poller."""

    __slots__ = ("latest", "wake")

    def __init__(self) -> None:
        self.latest: dict[str, Any] | None = None
        self.wake = threading.Event()

    def hear(self, params: dict[str, Any]) -> None:  # reader thread: O(1)
        self.latest = params
        self.wake.set()

    def take(self) -> dict[str, Any] | None:
        latest, self.latest = self.latest, None
        return latest


def call_as_task(connection: Connection, tool: str, params: dict[str, Any], progress: CallProgress,
                 book: TaskBook | None, keep_arguments: bool = False) -> dict[str, Any]:
    """Send ``tools/call`` asking for a task, and follow the task to the tool's result.

    A server that answers at once (an optional tool it chose to run inline) gives the
    result as it came. Raises what :meth:`Connection.request` raises, and:
        TimedOut: the task did not end by the call's deadline (it was cancelled).
        UnknownOutcome: the task was lost (the server forgot it or its session), or the
            connection ended while it ran (a stored task can then be resumed).
        ProtocolViolation: what the server said of the task is not a task.
    """
    result = connection.request("tools/call", params, progress=progress, task=True)
    if not tasks.is_created(result, connection.modern):
        return result
    try:
        state = tasks.created(result, connection.modern)
    except BadTask as exc:
        raise ProtocolViolation(connection.server, str(exc)) from None
    session = getattr(connection.link, "session_id", None) if not connection.modern else None
    start = TaskStart(connection.server, tool, connection.era, connection.version, connection.transport, session,
                      params.get("arguments"), keep_arguments, state)
    _tell(book, "begin", start)
    return follow(connection, tool, state, progress, book)


def follow(connection: Connection, tool: str, state: TaskState, progress: CallProgress, book: TaskBook | None,
           answered: tuple[str, ...] = (), *, resumed: bool = False) -> dict[str, Any]:
    """Poll the task ``state`` names until it ends; its tool result (see :func:`call_as_task`).

    ``resumed``: a stored task taken up again (its row's ``state`` and ``answered``, the
    inputRequests keys answered before): it is polled at once, and its deadline passing
    leaves it running (TimedOut says it goes on; the book is told to let it go) instead
    of cancelling it.
    """
    return _Follower(connection, tool, state, progress, book, answered, resumed).run()


class _Follower:
    def __init__(self, connection: Connection, tool: str, state: TaskState, progress: CallProgress,
                 book: TaskBook | None, answered: tuple[str, ...], resumed: bool = False) -> None:
        self.resumed = resumed
        self.connection = connection
        self.server = connection.server
        self.modern = connection.modern
        self.tool = tool
        self.state = state
        self.progress = progress
        self.book = book
        self.answered = list(answered)
        self.heard = _Heard()
        self.reports = 0
        self.polls = 0  # tasks/get requests made (status notifications heard are not polls)
        self.noted = 0.0  # when the book was last told of a change (time.monotonic())
        self.ended = False  # the book was told the task's end (or that this process let it go)
        self.over = False  # the task itself ended (completed, failed, cancelled, lost)
        self.ramp = 0.0  # the next wait, while it is below the server's interval

    @property
    def tid(self) -> str:
        return self.state.task_id

    def run(self) -> dict[str, Any]:
        channel = self.connection.channel
        channel.watch_task(self.tid, self.heard.hear)
        channel.track(self.progress)  # 2025-11-25: the call's token stays valid until the task ends
        pending_tasks = getattr(self.connection.link, "pending_tasks", None)
        if pending_tasks is not None:
            pending_tasks.add(self.tid)  # a 2025-11-25 HTTP session with a task is not ended on close
        try:
            if self.resumed:
                self._poll()
            else:
                self._report()
            return self._run()
        except BaseException:
            if not self.ended:  # interrupted (KeyboardInterrupt) or lost the connection: another may resume it
                self._release()
            raise
        finally:
            channel.watch_task(self.tid, None)
            channel.untrack(self.progress)
            if pending_tasks is not None and self.over:
                # Only a task that ended leaves the session free to end: one interrupted
                # (the host closing) stays pending, or the close could DELETE its session.
                pending_tasks.discard(self.tid)

    def _run(self) -> dict[str, Any]:
        # Bounded by MAX_ROUNDS polls and by the deadline, which _wait checks every round:
        # a round woken by a status notification is no poll (a flood of them must not
        # use the polls up), and only a change moves the deadline, never past the cap.
        while self.polls < MAX_ROUNDS:
            status = self.state.status
            if status in (tasks.COMPLETED, tasks.FAILED, tasks.CANCELLED):
                return self._finish()
            if status == tasks.INPUT_REQUIRED:
                if not self.modern:
                    # 2025-11-25: tasks/result blocks until the task ends; the server's
                    # own requests (an elicitation) come on it for the host's handlers.
                    return self._read_result()
                self._answer_inputs()
            self._wait()
            self._poll()
        self._give_up(f"task {self.tid} did not end after {MAX_ROUNDS} polls")
        raise AssertionError("unreachable")  # _give_up raises

    # -- waiting and polling ---------------------------------------------------------------

    def _wait(self) -> None:
        progress, heard = self.progress, self.heard
        cancel = progress.cancel
        if cancel is not None:
            cancel.bind(heard.wake.set)
        try:
            if heard.latest is None:
                interval = self.state.poll
                if self.ramp < interval:
                    interval, self.ramp = self.ramp, max(FIRST_STEP, self.ramp * RAMP)
                heard.wake.wait(max(0.0, min(interval, progress.remaining())))
            heard.wake.clear()
        finally:
            if cancel is not None:
                cancel.bind(None)
        if cancel is not None and cancel.cancelled:
            self._give_up(f"tools/call ran as task {self.tid}, which its caller gave up; the server was told to cancel it",
                          caller=True)
        if progress.expired:
            if self.resumed:
                self._release()
                raise TimedOut(self.server, f"task {self.tid} was still {self.state.status.replace('_', ' ')} after "
                                            f"{progress.seconds:g} s; it goes on: ask for its result again later")
            self._give_up(progress.timed_out(self.server, f"tools/call (task {self.tid})").replace(
                "; it was cancelled", "; the task was cancelled"))

    def _poll(self) -> None:
        """The task's state now: from a status notification heard, else ``tasks/get``."""
        heard = self.heard.take()
        new: TaskState | None = None
        if heard is not None:
            try:
                new = tasks.parse(heard, self.modern, "a task status notification")
            except BadTask:
                new = None  # a notification that is not a task's changes nothing; the poll asks
            if new is not None and new.task_id != self.tid:
                new = None
            if new is not None and self.modern and new.status == tasks.COMPLETED and new.result is None:
                new = None  # 2026: the result comes with tasks/get
        if new is None:
            new = self._get()
            if new is None:
                return  # the poll was not answered in time: the next one asks again
            _tell(self.book, "alive", self.server, self.tid)
        self._moved(new)

    def _get(self) -> TaskState | None:
        self.polls += 1
        try:
            result = self._request("tasks/get", {"taskId": self.tid}, Deadline.after(self._poll_timeout()))
        except TimedOut:
            return None
        try:
            state = tasks.parse(result, self.modern, "a tasks/get result")
        except BadTask as exc:
            raise ProtocolViolation(self.server, str(exc)) from None
        if state.task_id != self.tid:
            raise ProtocolViolation(self.server, f"answered tasks/get for task {self.tid} with task {state.task_id}")
        return state

    def _poll_timeout(self) -> float:
        """A poll's own bound: callTimeoutMs, never past the call's deadline."""
        return max(0.05, min(self.progress.seconds, self.progress.remaining()))

    def _moved(self, new: TaskState) -> None:
        old = self.state
        self.state = new
        if new.status != old.status or new.message != old.message:
            self._report()
        # The book (a store write) hears a new status or poll interval at once, and a
        # status message that keeps changing (a flood of notifications) at most every NOTE_EVERY.
        now = time.monotonic()
        if (new.status != old.status or new.poll != old.poll
                or (new.message != old.message and now - self.noted >= NOTE_EVERY)):
            self.noted = now
            _tell(self.book, "note", self.server, new, tuple(self.answered))

    def _report(self) -> None:
        """A change of status is progress: the host hears it, and the deadline moves."""
        self.reports += 1
        self.progress.note(ProgressReport(self.server, float(self.reports), None, tasks.status_line(self.state)))

    # -- input -------------------------------------------------------------------------------

    def _answer_inputs(self) -> None:
        """2026: answer the keys of this round's ``inputRequests`` not answered before."""
        requests = self.state.input_requests or {}
        fresh = {key: value for key, value in requests.items() if isinstance(key, str) and key not in self.answered}
        if not fresh:
            return
        if len(self.answered) + len(fresh) > UPDATE_LIMIT:
            self._give_up(f"task {self.tid} asked for more than {UPDATE_LIMIT} inputs")
        try:
            answers = self.connection._answer_inputs("tasks/get", fresh)
        except ProtocolViolation:
            # Refused as the same request outside a task is (no handler, so nothing was
            # declared; or the handler failed): the call fails, and the task, which would
            # wait for that answer until its TTL, is cancelled. A resumed task is left to
            # the host that started it (its handlers may differ).
            if self.resumed:
                self._release()
            else:
                self._cancel(f"task {self.tid} asked for input this host does not give")
            raise
        self._request("tasks/update", {"taskId": self.tid, "inputResponses": answers},
                      Deadline.after(self._poll_timeout()))
        self.answered.extend(fresh)
        _tell(self.book, "note", self.server, self.state, tuple(self.answered))

    # -- the end -------------------------------------------------------------------------------

    def _finish(self) -> dict[str, Any]:
        state = self.state
        if state.status == tasks.CANCELLED:
            why = f"task {self.tid} was cancelled by the server" + (f": {state.message}" if state.message else "")
            self._end(tasks.CANCELLED, None, why)
            raise UnknownOutcome(self.server, f"tools/call ran as {why}")
        if not self.modern:
            return self._read_result()
        if state.status == tasks.FAILED:
            error = state.error or {}
            found = error.get("code")
            code = found if isinstance(found, int) and not isinstance(found, bool) else -32603
            said = error.get("message")
            line = printable(said if isinstance(said, str) else (state.message or "the task failed"), one_line=True, limit=300)
            self._end(tasks.FAILED, None, line)
            raise RemoteError(self.server, code, f"task {self.tid} failed: {line}", error.get("data"))
        result = state.result
        if result is None:
            got = self._get()
            result = got.result if got is not None else None
            if result is None:
                raise ProtocolViolation(self.server, f"said task {self.tid} completed but gave no result")
        self._end(tasks.COMPLETED, result, None)
        return result

    def _read_result(self) -> dict[str, Any]:
        """2025-11-25: ``tasks/result`` (it waits for the task's end on the server)."""
        try:
            result = self._request("tasks/result", {"taskId": self.tid}, None)
        except RemoteError as exc:
            self._end(tasks.FAILED, None, str(exc))
            raise
        except TimedOut:
            if self.resumed:
                self._release()
                raise TimedOut(self.server, f"task {self.tid} had not ended after {self.progress.seconds:g} s; it goes "
                                            "on: ask for its result again later") from None
            self._give_up(self.progress.timed_out(self.server, f"tools/call (task {self.tid})").replace(
                "; it was cancelled", "; the task was cancelled"))
        self._end(tasks.COMPLETED, result, None)
        return result

    def _give_up(self, why: str, caller: bool = False) -> None:
        """Cancel the task (``tasks/cancel``, bounded), note it, and raise TimedOut."""
        self._cancel(why)
        raise TimedOut(self.server, why)

    def _cancel(self, why: str) -> None:
        """Cancel the task (``tasks/cancel``, bounded; a failure is logged) and note it."""
        if tasks.server_cancels(self.connection.capabilities, self.modern):
            try:
                self._request("tasks/cancel", {"taskId": self.tid}, Deadline.after(CANCEL_TIMEOUT), quiet=True)
            except ServerError as exc:
                logger.info("server %r: tasks/cancel of task %s failed: %s", self.server, self.tid, exc)
        self._end(tasks.CANCELLED, None, why)

    def _request(self, method: str, params: dict[str, Any], deadline: Any, quiet: bool = False) -> dict[str, Any]:
        """One tasks/* request; a task or session the server forgot ends the task as lost."""
        try:
            if deadline is None:  # tasks/result: the call's own moving deadline
                return self.connection.request(method, params, progress=self.progress, task=True)
            return self.connection.request(method, params, deadline=deadline, task=True)
        except SessionExpired:
            self._lost("the server ended the session the task ran in (HTTP 404)")
        except RemoteError as exc:
            if method != "tasks/result" and exc.code in (-32602, -32002) and not quiet:
                self._lost(f"the server no longer knows it ({printable(exc.remote_message, one_line=True, limit=120)})")
            if (not self.modern and not quiet and exc.code == -32000 and "session" in exc.remote_message.lower()
                    and getattr(self.connection.link, "session_id", None) is not None):
                # The TypeScript SDK answers a session id it does not know (a restarted
                # server) with HTTP 400 and -32000 "No valid session ID provided", not 404.
                self._lost("the server no longer knows the session it ran in "
                           f"({printable(exc.remote_message, one_line=True, limit=120)})")
            raise
        except (Unavailable, UnknownOutcome) as exc:
            if quiet:
                raise
            if self.connection.transport == "stdio":
                self._lost("the server process it ran in has ended")
            if not self.modern and getattr(self.connection.link, "session_id", None) is None:
                self._lost("the server ended the session the task ran in")
            raise UnknownOutcome(self.server, f"the connection ended while task {self.tid} ran ({_reason(exc)}); "
                                              f"`albedo-mcp tasks result {self.tid}` resumes it") from None
        raise AssertionError("unreachable")

    def _end(self, status: str, result: dict[str, Any] | None, error: str | None) -> None:
        self.ended = self.over = True
        _tell(self.book, "end", self.server, self.tid, status, result, error)

    def _release(self) -> None:
        self.ended = True
        _tell(self.book, "release", self.server, self.tid)

    def _lost(self, why: str) -> None:
        line = f"task {self.tid} is lost: {why}"
        self._end(tasks.LOST, None, line)
        raise UnknownOutcome(self.server, f"{line}; it may or may not have run")


def _reason(exc: AlbedoError) -> str:
    text = str(exc)
    prefix = f"server {getattr(exc, 'server', '')!r}: "
    return text[len(prefix):] if text.startswith(prefix) else text


_failed_books: set[str] = set()


def _tell(book: TaskBook | None, step: str, *args: Any) -> None:
    """Tell the book one step; its failure is logged (once per kind) and never fails the call."""
    if book is None:
        return
    try:
        getattr(book, step)(*args)
    except Exception as exc:  # noqa: BLE001 - the store failing never fails a running call
        key = f"{step}:{type(exc).__name__}"
        if key not in _failed_books:
            _failed_books.add(key)
            logger.warning("a task could not be kept in the store (%s: %s); the call goes on, but a host that dies "
                           "before it ends cannot resume it", type(exc).__name__, printable(exc, one_line=True, limit=200))


__all__ = ["TaskBook", "TaskStart", "call_as_task", "follow"]
