"""Tasks kept in the store: the book a running task call writes, and the desk that lists,
resumes and cancels them (``mcp.tasks()``, ``mcp.task_result()``, ``albedo-mcp tasks``).

- :class:`StoreTaskBook` is connection/tasks.py's ``TaskBook`` over the store: a row per
  task (store/records.py's ``TaskRecord``) written when the server creates the task, at
  each change of its status, and at its end with the result. The arguments are kept as
  a digest (keyed by the store's digest key when it has one), and themselves only when
  the host asks. The process that polls a task holds the row's lease (:data:`LEASE`
  seconds, renewed while it polls), so that on a shared PostgreSQL only one host polls
  a task at a time, and one that dies lets another take it over when the lease runs out.
- :class:`TaskDesk` finds a task by id (``SERVER/ID`` when two servers share one),
  and resumes polling it from this process: over the connection of the session's own
  client, or, for a task of a 2025-11-25 HTTP session another process opened, inside
  that session (its id and protocol version are in the row). A task that ran in a stdio
  server of a process that has ended is lost with it, and says so in one line.

Actor-free: the desk runs on the caller's thread, as a tool call does.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..config import ServerConfig
from ..connection.negotiation import Connection, resume_http
from ..connection.progress import CallProgress, ProgressReport, new_token
from ..connection.tasks import TaskStart, follow
from ..errors import ConfigError, RemoteError, StoreError, TimedOut, UnknownOutcome
from ..store.records import TaskRecord, thaw
from ..wire import tasks
from ..wire.deadline import Deadline
from ..wire.tasks import TaskState
from ..wire.text import printable
from ..wire import telemetry

if TYPE_CHECKING:
    from ..store import Store
    from .client import ServerHandle

logger = telemetry.logger(__name__)

LEASE = 60.0  # seconds a poller holds a task's row; renewed while it polls
RENEW_AFTER = LEASE / 3  # renewed when at least this old
STORE_WAIT = 1.0  # seconds between looks at a row another host polls
CANCEL_TIMEOUT = 5.0

# This process, as a lease owner: host, process id, and a nonce (a reused pid is another owner).
OWNER = f"{socket.gethostname()[:64]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def arguments_digest(arguments: Mapping[str, Any] | None, key: bytes | None) -> str:
    """The digest a task row keeps of its call's arguments (HMAC-SHA-256 under the store's
    digest key when it has one: arguments may hold what a bare hash would give away)."""
    text = json.dumps(arguments or {}, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    data = text.encode("utf-8", "surrogatepass")
    if key is not None:
        return "hmac-sha256:" + hmac.new(key, data, hashlib.sha256).hexdigest()
    return "sha256:" + hashlib.sha256(data).hexdigest()


class StoreTaskBook:
    """connection/tasks.py's TaskBook over the store (see the module docstring). Thread-safe."""

    def __init__(self, store: Store, owner: str = OWNER, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self.owner = owner
        self._clock = clock
        self._renewed: dict[tuple[str, str], float] = {}
        # Each running task's TTL (ms): its row expires that long after the last news of
        # it, so a task that runs longer than its TTL is not deleted under its poller
        # (2026's ttlMs counts from the task's end; 2025-11-25 servers keep theirs longer).
        self._ttl: dict[tuple[str, str], int | None] = {}
        self._lock = threading.Lock()

    def follows(self, server: str, task_id: str, ttl_ms: int | None) -> None:
        """A stored task is polled from here now (a resumed one): its TTL, for its expiry."""
        with self._lock:
            self._ttl[(server, task_id)] = ttl_ms

    def _expires(self, server: str, task_id: str, now: float) -> dict[str, Any]:
        with self._lock:
            if (server, task_id) not in self._ttl:
                return {}
            ttl = self._ttl[(server, task_id)]
        return {"expires_at": None if ttl is None else now + ttl / 1000}

    def begin(self, start: TaskStart) -> None:
        now = self._clock()
        state = start.state
        key = self._store.digest_key
        record = TaskRecord(
            server=start.server, task_id=state.task_id, tool=start.tool, era=start.era, version=start.version,
            transport=start.transport, session_id=start.session_id,
            arguments_digest=arguments_digest(start.arguments, key),
            arguments=start.arguments if start.keep_arguments else None,
            state=state.status, message=state.message, poll_ms=int(state.poll * 1000), ttl_ms=state.ttl_ms,
            created_at=now, updated_at=now, expires_at=None if state.ttl_ms is None else now + state.ttl_ms / 1000,
            answered=(), result=None, error=None, delivered=False, lease_owner=self.owner, lease_until=now + LEASE,
        )
        self._store.add_task(record)
        with self._lock:
            self._renewed[(start.server, state.task_id)] = now
            self._ttl[(start.server, state.task_id)] = state.ttl_ms

    def note(self, server: str, state: TaskState, answered: tuple[str, ...]) -> None:
        now = self._clock()
        if state.ttl_ms is not None:
            self.follows(server, state.task_id, state.ttl_ms)
        self._store.update_task(server, state.task_id, state=state.status, message=state.message,
                                poll_ms=int(state.poll * 1000), answered=tuple(answered), updated_at=now,
                                **self._expires(server, state.task_id, now))
        self.alive(server, state.task_id)

    def alive(self, server: str, task_id: str) -> None:
        now = self._clock()
        with self._lock:
            last = self._renewed.get((server, task_id), 0.0)
            if now - last < RENEW_AFTER:
                return
            self._renewed[(server, task_id)] = now
        if self._store.take_task_lease(server, task_id, self.owner, now + LEASE) is None:
            logger.warning("server %r: task %s is polled by another host now (this one's lease ran out)", server, task_id)
            return
        expires = self._expires(server, task_id, now)
        if expires:
            self._store.update_task(server, task_id, **expires)

    def end(self, server: str, task_id: str, status: str, result: dict[str, Any] | None, error: str | None) -> None:
        now = self._clock()
        self._store.update_task(server, task_id, state=status, result=result, error=error, updated_at=now,
                                delivered=result is not None or error is not None, **self._expires(server, task_id, now))
        self.release(server, task_id)

    def release(self, server: str, task_id: str) -> None:
        with self._lock:
            self._renewed.pop((server, task_id), None)
            self._ttl.pop((server, task_id), None)
        self._store.drop_task_lease(server, task_id, self.owner)


def _ended_here(owner: str | None) -> bool:
    """Whether a lease owner is a process of this machine that no longer runs."""
    if owner is None:
        return False
    host, _, rest = owner.partition(":")
    pid_text, _, _nonce = rest.partition(":")
    if host != OWNER.partition(":")[0] or not pid_text.isdigit() or owner == OWNER:
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False  # this process under another nonce: not ended
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # it runs (as another user): not ours to take over
    return False


def task_summary(record: TaskRecord, now: float | None = None) -> dict[str, Any]:
    """One task as the host and the command line list it (no arguments, no result)."""
    now = time.time() if now is None else now
    polled = (record.lease_owner is not None and record.lease_until is not None and record.lease_until > now
              and not _ended_here(record.lease_owner))
    return {
        "id": record.task_id,
        "server": record.server,
        "tool": record.tool,
        "state": record.state,
        "message": record.message,
        "age": round(max(0.0, now - record.created_at), 1),
        "expiresIn": None if record.expires_at is None else round(max(0.0, record.expires_at - now), 1),
        "createdAt": record.created_at,
        "expiresAt": record.expires_at,
        "transport": record.transport,
        "era": record.era,
        "polled": polled,
        "error": record.error,
    }


class TaskDesk:
    """Lists, resumes and cancels stored tasks for one session (see the module docstring).

    ``handles(server)``: the session's client of ``server`` (None: not configured or off
    for the session); ``auth(config)``: the OAuth face for a borrowed session
    (registry's); ``credentials(server)``: its stored credentials.
    """

    def __init__(self, store: Store, handles: Callable[[str], Any],
                 auth: Callable[[ServerConfig], Any] | None = None,
                 handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
                 book: StoreTaskBook | None = None) -> None:
        self._store = store
        self._handles = handles
        self._auth = auth
        self._handlers = handlers
        self.book = book if book is not None else StoreTaskBook(store)

    # -- listing -----------------------------------------------------------------------------

    def list(self, pending_only: bool = True) -> list[dict[str, Any]]:
        """The stored tasks (the pending ones by default), newest first; expired ones are deleted."""
        now = time.time()
        return [task_summary(record, now) for record in self._store.list_tasks(pending_only=pending_only)]

    def find(self, text: str) -> TaskRecord:
        """The one stored task ``text`` names: its id, or ``SERVER/ID``.

        Raises:
            ConfigError: no task has that id, or two servers' tasks do.
        """
        if not isinstance(text, str) or not text or len(text) > 400:
            raise ConfigError("a task id is 1-256 printable characters (as `albedo-mcp tasks` lists them)")
        found = self._store.find_tasks(text)
        if not found and "/" in text:
            server, _, task_id = text.partition("/")
            record = self._store.get_task(server, task_id)
            found = [record] if record is not None else []
        shown = printable(text, one_line=True, limit=80)
        if not found:
            raise ConfigError(f"no stored task {shown}: `albedo-mcp tasks --all` lists them (an expired one is deleted)")
        if len(found) > 1:
            servers = ", ".join(sorted(r.server for r in found))
            raise ConfigError(f"task id {shown} is used by servers {servers}: name one as SERVER/{shown}")
        return found[0]

    # -- results -------------------------------------------------------------------------------

    def result(self, text: str, timeout: float | None = None,
               on_progress: Callable[[ProgressReport], None] | None = None) -> dict[str, Any]:
        """The tool result of a stored task, polling it from here until it ends or
        ``timeout`` seconds pass (None: the server's callTimeoutMs, extended by each change
        of status up to maxCallTimeoutMs). A task still running at the end goes on.

        Raises:
            ConfigError: no such task; its server is not configured for this session.
            TimedOut: it had not ended in time (it goes on); UnknownOutcome: it was lost,
            cancelled or expired; RemoteError: it failed; and what a tool call raises.
        """
        record = self.find(text)
        done = self._ended(record)
        if done is not None:
            return done
        handle = self._handle(record.server)
        config = handle.config
        seconds = timeout if timeout is not None else config.call_timeout
        deadline = Deadline.after(seconds)
        while True:
            took = self._store.take_task_lease(record.server, record.task_id, self.book.owner, time.time() + LEASE,
                                               gone=record.lease_owner if _ended_here(record.lease_owner) else None)
            if took is not None:
                record = took
                self.book.follows(record.server, record.task_id, record.ttl_ms)
                break
            # Another host polls it: its row will say when it ends, or its lease will run out.
            threading.Event().wait(min(STORE_WAIT, max(0.0, deadline.remaining())))
            current = self._store.get_task(record.server, record.task_id)
            if current is None:
                raise UnknownOutcome(record.server, f"task {record.task_id} was deleted while it was awaited")
            done = self._ended(current)
            if done is not None:
                return done
            record = current
            if deadline.expired:
                raise TimedOut(record.server, f"task {record.task_id} is being polled by another host; it goes on: ask "
                                              "for its result again later")
        state = TaskState(record.task_id, record.state, record.message, record.poll_ms / 1000, record.ttl_ms)
        reporter = None
        if on_progress is not None:
            from .client import FirstReport

            reporter = FirstReport(on_progress, record.server)
        # A timeout the caller gave is "at most this long": changes of status do not move it.
        cap = seconds if timeout is not None else max(config.max_call_timeout, seconds)
        progress = CallProgress(new_token(), seconds, cap, reporter, start=deadline)  # type: ignore[arg-type]
        if reporter is not None:
            reporter.progress = progress
        connection, borrowed = None, False
        try:
            connection, borrowed = self._connection(record, handle, deadline)
            result = follow(connection, record.tool, state, progress, self.book, record.answered, resumed=True)
        except BaseException:
            self.book.release(record.server, record.task_id)
            raise
        finally:
            if reporter is not None:
                reporter.close()
            if borrowed and connection is not None:
                connection.close("the task was followed")
                connection.wait_closed(2.0)
        return result

    def cancel(self, text: str) -> str:
        """Cancel a stored task (``tasks/cancel``); one line saying what happened.

        Raises:
            ConfigError: no such task, or its server is not configured for this session.
        """
        record = self.find(text)
        if record.terminal:
            return f"task {record.task_id} of server {record.server!r} had already ended ({record.state})"
        handle = self._handle(record.server)
        connection, borrowed = None, False
        try:
            connection, borrowed = self._connection(record, handle, Deadline.after(handle.config.startup_timeout + 1))
            if tasks.server_cancels(connection.capabilities, connection.modern) or borrowed:
                connection.request("tasks/cancel", {"taskId": record.task_id}, deadline=Deadline.after(CANCEL_TIMEOUT),
                                   task=True)  # 2026: a tasks/* request opts in to the extension
        except RemoteError as exc:
            line = printable(exc.remote_message, one_line=True, limit=120)
            self.book.end(record.server, record.task_id, tasks.LOST, None, f"task {record.task_id} is lost: {line}")
            return f"task {record.task_id} of server {record.server!r} is no longer known to the server ({line}); it is gone"
        except UnknownOutcome as exc:
            if "is lost" in str(exc):  # a stdio task whose host has gone: _connection ended its row
                return str(exc)
            raise
        finally:
            if borrowed and connection is not None:
                connection.close("the task was cancelled")
                connection.wait_closed(2.0)
        self.book.end(record.server, record.task_id, tasks.CANCELLED, None, "cancelled by the host")
        return f"task {record.task_id} of server {record.server!r} was cancelled"

    # -- helpers -------------------------------------------------------------------------------

    def _ended(self, record: TaskRecord) -> dict[str, Any] | None:
        """An ended task's result (marked delivered), or its end raised; None: it runs."""
        if record.state == tasks.COMPLETED and record.result is not None:
            if not record.delivered:
                self._store.update_task(record.server, record.task_id, delivered=True)
            return thaw(record.result)
        if record.terminal:
            why = record.error or f"it ended {record.state}"
            if record.state == tasks.FAILED:
                raise RemoteError(record.server, -32603, why)
            raise UnknownOutcome(record.server, why if why.startswith("task ") else f"task {record.task_id}: {why}")
        if record.expires_at is not None and record.expires_at <= time.time():
            self._store.delete_task(record.server, record.task_id)
            raise UnknownOutcome(record.server, f"task {record.task_id} expired (its server keeps it no longer); "
                                                "its result is gone")
        return None

    def _handle(self, server: str) -> ServerHandle:
        handle = self._handles(server)
        if handle is None:
            raise ConfigError(f"server {server!r} is not configured (or is off) for this session, so its task cannot "
                              "be followed: turn it on, or `albedo-mcp tasks cancel` forgets nothing while it is off")
        return handle

    def _connection(self, record: TaskRecord, handle: ServerHandle, deadline: Deadline) -> tuple[Connection, bool]:
        """A connection to poll ``record`` on, and whether it was made for it (close it after).

        Raises:
            UnknownOutcome: the task is lost (a stdio server of another process).
        """
        mine = record.lease_owner is not None and record.lease_owner.split(":")[:2] == OWNER.split(":")[:2]
        if record.transport == "stdio":
            live = handle._live if mine else None
            if live is None or not live.alive:
                line = f"task {record.task_id} is lost: it ran in a stdio server process that has ended with its host"
                self.book.end(record.server, record.task_id, tasks.LOST, None, line)
                raise UnknownOutcome(record.server, line)
            return live, False
        if record.era == "legacy" and record.session_id is not None:
            live = handle._live
            if live is not None and live.alive and getattr(live.link, "session_id", None) == record.session_id:
                return live, False
            credentials = self._credentials(record.server)
            auth = self._auth(handle.config) if self._auth is not None else None
            return resume_http(handle.config, record.session_id, record.version, lambda _reason: None,
                               credentials=credentials, auth=auth, handlers=self._handlers), True
        connection, _deadline = handle._dialled("tasks/get", None, deadline)
        return connection, False

    def _credentials(self, server: str) -> Any:
        try:
            return self._store.get_credentials(server)
        except StoreError:
            return None


__all__ = ["LEASE", "OWNER", "StoreTaskBook", "TaskDesk", "arguments_digest", "task_summary"]
