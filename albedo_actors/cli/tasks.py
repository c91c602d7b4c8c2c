"""``albedo-mcp tasks``: the tool calls that ran as MCP tasks and are kept in the store.

- ``tasks [--all] [--json]``: the tasks not ended (``--all``: every one kept), newest
  first: id, server, tool, state, age and expiry.
- ``tasks result TASK_ID [--timeout S] [--json]``: poll the task from here (a host that
  died mid-task leaves it for this) and print the tool's result as ``call`` does.
- ``tasks cancel TASK_ID``: cancel it (``tasks/cancel``).

TASK_ID is an id as the list shows it, or ``SERVER/ID`` when two servers use one id.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from ..config import load, resolve_home
from ..errors import EXIT_OK, ConfigError
from ..wire.text import printable
from .options import Usage, place_options
from .output import out, print_json
from .run import ProgressLine, admin_runtime, seconds, shown, store_for

ACTIONS = ("result", "cancel")


def tasks_parser(commands: Any) -> None:
    tasks = commands.add_parser(
        "tasks", help="the tool calls that ran as MCP tasks, kept in the store: list them, get a result, cancel one",
        description="Without an action: list the tasks not ended (--all: every one kept). "
                    "'tasks result TASK_ID' polls a task from here and prints its result as 'call' does "
                    "(a host that died mid-task leaves it for this); 'tasks cancel TASK_ID' cancels it. "
                    "TASK_ID is an id as the list shows it, or SERVER/ID when two servers use one id.")
    tasks.add_argument("words", nargs="*", metavar="ACTION TASK_ID", help="result TASK_ID, or cancel TASK_ID")
    tasks.add_argument("--all", action="store_true", help="list every task kept, the ended ones too")
    tasks.add_argument("--json", action="store_true", help="print JSON (the list, the CallToolResult, or the outcome)")
    tasks.add_argument("--timeout", type=seconds, default=None, metavar="SECONDS",
                       help="result: wait at most this long (default: the server's callTimeoutMs, moved by each "
                            "change of status up to its maxCallTimeoutMs); a task still running then goes on")
    place_options(tasks)


def tasks_command(args: argparse.Namespace) -> int:
    words = list(args.words)
    if not words:
        return _list(args)
    action = words[0]
    if action not in ACTIONS or len(words) != 2:
        raise Usage("tasks takes no words (to list the tasks), 'result TASK_ID' or 'cancel TASK_ID'")
    if args.all:
        raise Usage("--all goes with the list only")
    return _result(args, words[1]) if action == "result" else _cancel(args, words[1])


def _list(args: argparse.Namespace) -> int:
    if args.timeout is not None:
        raise Usage("--timeout goes with 'tasks result' only")
    home = resolve_home(args.home)
    from ..actors.tasks import TaskDesk

    with store_for(args, home) as store:
        found = TaskDesk(store, lambda server: None).list(pending_only=not args.all)
    if args.json:
        print_json(found)
        return EXIT_OK
    if not found:
        out("no tasks" + ("" if args.all else " running (--all lists the ended ones kept)"))
        return EXIT_OK
    for task in found:
        expires = "never" if task["expiresIn"] is None else f"in {_age(task['expiresIn'])}"
        line = (f"{task['id']}  {task['server']}/{task['tool']}  {task['state']}  "
                f"started {_age(task['age'])} ago  expires {expires}")
        if task["message"]:
            line += f"  ({task['message']})"
        if task["error"] and task["state"] not in ("working", "input_required"):
            line += f"  {task['error']}"
        out(printable(line, one_line=True, limit=400))
    return EXIT_OK


def _runtime_for(args: argparse.Namespace, store: Any, task_id: str) -> tuple[Any, str]:
    """A runtime over the one server the task belongs to, and that server's name."""
    from ..actors.tasks import TaskDesk

    record = TaskDesk(store, lambda server: None).find(task_id)
    config = load(resolve_home(args.home))
    servers = [server for server in config.servers if server.name == record.server]
    if not servers:
        raise ConfigError(f"server {record.server!r} of task {task_id} is no longer configured; its task cannot be "
                          "reached (it expires on its own)")
    return admin_runtime(dataclasses.replace(config, servers=tuple(servers)), store), record.server


def _result(args: argparse.Namespace, task_id: str) -> int:
    home = resolve_home(args.home)
    with store_for(args, home) as store:
        runtime, server = _runtime_for(args, store, task_id)
        with runtime:
            progress = None if args.json else _progress(server)
            try:
                result = runtime.task_result(task_id, args.timeout, progress)
            finally:
                if progress is not None:
                    progress.clear()
    return shown(result, args.json, f"server {server!r}: the task's tool reported an error")


def _cancel(args: argparse.Namespace, task_id: str) -> int:
    if args.timeout is not None:
        raise Usage("--timeout goes with 'tasks result' only")
    home = resolve_home(args.home)
    with store_for(args, home) as store:
        runtime, _server = _runtime_for(args, store, task_id)
        with runtime:
            line = runtime.cancel_task(task_id)
    if args.json:
        print_json({"outcome": line})
    else:
        out(line)
    return EXIT_OK


def _progress(server: str) -> ProgressLine | None:
    import sys

    if not (sys.stderr is not None and sys.stderr.isatty()):
        return None
    return ProgressLine(printable(f"{server} task", one_line=True, limit=80))


def _age(seconds_: float) -> str:
    if seconds_ < 90:
        return f"{seconds_:.0f}s"
    if seconds_ < 90 * 60:
        return f"{seconds_ / 60:.0f}m"
    if seconds_ < 36 * 3600:
        return f"{seconds_ / 3600:.1f}h"
    return f"{seconds_ / 86400:.1f}d"


__all__ = ["tasks_command", "tasks_parser"]
