"""``store encrypt`` (or a rotation) stopped at a chosen row, for test_sealing_processes.py.

    python sealing_worker.py HOME URL N

Opens the store (URL ``-``: SQLite in HOME) with the keys of its environment
(``$ALBEDO_STORE_KEY``, and ``$ALBEDO_STORE_OLD_KEY`` for a rotation) and runs
``Store.reseal``. Inside the transaction of the N-th row, after its update and before
its commit, it prints ``paused TABLE`` and waits (bounded) on stdin: the test kills it
there with SIGKILL. Without a kill it exits 3 after the wait.
"""

from __future__ import annotations

import os
import select
import sys

from albedo_actors.store import open_store

WAIT_S = 60.0


def main() -> None:
    home, url, stop_after = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = open_store(home, None if url == "-" else url)
    seen = 0

    def progress(table: str, key: tuple[str, ...]) -> None:
        nonlocal seen
        seen += 1
        if seen == stop_after:
            sys.stdout.write(f"paused {table}\n")
            sys.stdout.flush()
            select.select([sys.stdin], [], [], WAIT_S)
            os._exit(3)

    try:
        store.reseal(progress=progress)
    finally:
        store.close()
    sys.stdout.write("finished\n")


if __name__ == "__main__":
    main()
