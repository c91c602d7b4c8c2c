"""A host process for tests/test_tasks_resume.py: a Runtime over a store that calls a task tool.

Usage: python tests/task_host.py SPEC_JSON, where the spec says:

- ``home``: the host's home (its extensions.json names the servers); ``database``: a
  database URL (None: SQLite in home); ``hostname``: this process's machine name as a
  lease owner (another machine's, for a takeover test); ``lease``: seconds of the
  task lease (actors/tasks.py's LEASE); ``keep_arguments``: Runtime's keep_task_arguments.
- ``mode``:
  - ``"kill"``: call ``operation`` with ``arguments``; when a progress report contains
    ``at``, print ``{"id": ...}`` (the task's id, from the store) and SIGKILL itself.
  - ``"call"``: the same call to its end; when ``at`` arrives, print the id (and go on);
    at the end print ``{"result": ..., "gets": N}`` (N: tasks/get requests this process sent).
  - ``"close"``: the call on another thread; when ``at`` arrives, print the id and leave
    ``with Runtime`` (a normal close while the task runs); print ``{"closed": true, "call": LINE}``.
  - ``"result"``: ``mcp.task_result(task, timeout=timeout)``; print ``{"result": ..., "gets": N}``
    or ``{"error": TYPE, "line": ...}``, each with ``asked_at`` (the Unix time it asked).
Each printed line is one JSON object, flushed at once.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time

spec = json.loads(sys.argv[1])
if spec.get("hostname"):
    _name = spec["hostname"]
    socket.gethostname = lambda: _name  # before albedo_actors is imported: its lease owner names this machine

import otel_kit  # noqa: E402  (tests/otel_kit.py, beside this script)

from albedo_actors.actors import tasks as task_module  # noqa: E402
from albedo_actors.runtime import Runtime  # noqa: E402
from albedo_actors.store import open_store  # noqa: E402

if spec.get("lease"):
    task_module.LEASE = float(spec["lease"])


def say(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def gets(exporter) -> int:
    return sum(1 for span in exporter.get_finished_spans() if span.name == "tasks/get")


def main() -> int:
    store = open_store(spec["home"], url=spec.get("database"))
    mode = spec["mode"]
    at = spec.get("at")
    told = threading.Event()

    def on_progress(report) -> None:
        if at is None or told.is_set() or at not in (report.message or ""):
            return
        [task] = [t for t in runtime.mcp().tasks() if t["tool"] == spec["operation"].split("/", 1)[1]
                  and t["state"] == "working"][:1]
        say({"id": task["id"], "server": task["server"]})
        told.set()
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)

    with otel_kit.recording() as exporter:
        runtime = Runtime(spec["home"], store, enabled=True, background=False,
                          keep_task_arguments=bool(spec.get("keep_arguments")))
        try:
            with runtime:
                mcp = runtime.mcp()
                if mode in ("kill", "call"):
                    result = mcp.call(spec["operation"], on_progress=on_progress, **spec.get("arguments", {}))
                    say({"result": result.as_dict(), "gets": gets(exporter)})
                elif mode == "close":
                    outcome: list[str] = []

                    def call() -> None:
                        try:
                            mcp.call(spec["operation"], on_progress=on_progress, **spec.get("arguments", {}))
                            outcome.append("returned")
                        except Exception as exc:  # noqa: BLE001 - reported to the test
                            outcome.append(f"{type(exc).__name__}: {exc}")

                    thread = threading.Thread(target=call)
                    thread.start()
                    if not told.wait(60):
                        say({"error": "no report", "line": at})
                        return 1
                    # leaving `with runtime` closes it while the call runs
                elif mode == "result":
                    asked_at = time.time()
                    try:
                        result = mcp.task_result(spec["task"], timeout=spec.get("timeout"))
                        say({"result": result.as_dict(), "gets": gets(exporter), "asked_at": asked_at})
                    except Exception as exc:  # noqa: BLE001 - reported to the test
                        say({"error": type(exc).__name__, "line": str(exc), "gets": gets(exporter), "asked_at": asked_at})
            if mode == "close":
                thread.join(30)
                say({"closed": True, "call": outcome[0] if outcome else "still running"})
        finally:
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
