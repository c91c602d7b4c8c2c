"""Standard-library helpers the benchmarks share, safe for the matrix's workers.

A worker measuring ``before`` must import the package from ``PYTHONPATH`` alone, so
it cannot import ``_common`` (which puts this checkout first on ``sys.path``); what
both need lives here, importing nothing of ours.
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time: the matrix's rss row counts modules
    from typing import Any, Callable


def descendants() -> set[int]:
    """Pids of every live process below this one (from /proc; zombies count as gone)."""
    parent_of: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":
            parent_of[int(entry)] = int(fields[1])
    found: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        children = {pid for pid, ppid in parent_of.items() if ppid in frontier} - found
        found |= children
        frontier = children
    return found


def shares(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` near-equal whole shares."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def threaded_throughput(calls: list[Callable[[], Any]], total: int) -> float:
    """One thread per entry of ``calls``, each calling its function in a loop,
    ``total`` calls in all; calls per second from the moment they all start."""
    import threading

    start = threading.Barrier(len(calls) + 1)
    errors: list[BaseException] = []

    def worker(call: Callable[[], Any], n: int) -> None:
        start.wait()
        try:
            for _ in range(n):
                call()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [
        threading.Thread(target=worker, args=(call, n), daemon=True) for call, n in zip(calls, shares(total, len(calls)))
    ]
    for thread in threads:
        thread.start()
    start.wait()
    t0 = time.perf_counter()
    for thread in threads:
        thread.join(600)
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} threaded calls failed, first: {errors[0]!r}")
    return total / elapsed
