"""A stdio MCP server that decides at start, from a file, how to behave (issue 11's CLI tests).

::

    mode_file_server.py NAME MODE_FILE START_LOG [fault_server.py flags...]

It appends ``NAME`` as one line to ``START_LOG`` (so a test sees which servers were
started at all), then reads ``MODE_FILE``:

- missing, empty or ``normal``: it becomes ``fault_server.py`` with the flags;
- ``slow S``: the same after ``S`` seconds (``--delay-start S``: it reads nothing before);
- ``hang``: the same, but it never reads its input (``--delay-start 3600``);
- ``down``: it exits with code 1 at once;
- ``gate PATH``: the same as ``normal`` once ``PATH`` exists (it reads nothing before,
  and gives up with code 1 after ``GATE_WAIT`` s): a test opens the gate when what it
  waits for has happened.

Its command line stays the same whatever the file says, so the server's configuration
(and with it the fingerprint of its saved catalogue) does not change between runs while
what it does does. It replaces itself with the fault server (``os.execv``): one process,
which the client's usual shutdown ends.
"""

from __future__ import annotations

import os
import sys
import time

FAULT_SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fault_server.py")
GATE_WAIT = 60.0  # s; a bound on the wait for a gate, never an expected duration


def main(argv: list[str]) -> None:
    name, mode_file, start_log, *flags = argv
    fd = os.open(start_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (name + "\n").encode())  # one write of a short line: O_APPEND keeps lines whole
    finally:
        os.close(fd)
    try:
        with open(mode_file, encoding="utf-8") as handle:
            mode = handle.read().split()
    except FileNotFoundError:
        mode = []
    if mode[:1] == ["down"]:
        sys.exit(1)
    if mode[:1] == ["hang"]:
        flags = [*flags, "--delay-start", "3600"]
    elif mode[:1] == ["slow"]:
        flags = [*flags, "--delay-start", mode[1]]
    elif mode[:1] == ["gate"]:
        deadline = time.monotonic() + GATE_WAIT
        while not os.path.exists(mode[1]):
            if time.monotonic() > deadline:
                sys.exit(1)
            time.sleep(0.02)  # a poll of the gate, bounded above
    os.execv(sys.executable, [sys.executable, FAULT_SERVER, *flags])


if __name__ == "__main__":
    main(sys.argv[1:])
