"""The demo stdio server, plus a rendezvous at EOF (issue 12's parallel stop tests).

::

    eof_rendezvous_server.py DIRECTORY COUNT NAME

It serves like ``albedo_actors/demo/server.py`` until its stdin ends. Then it writes
``NAME.eof`` in DIRECTORY and, before exiting, waits (at most ``WAIT`` s, under the
launcher's 2 s grace before SIGTERM) until COUNT ``*.eof`` files exist: the EOF of
every server of the run. It records how many it saw in ``NAME.seen``.

So a client that closes its servers one after another (waiting for each to end before
the next gets EOF) leaves each ``NAME.seen`` below COUNT; one that gives every server
EOF before waiting on any of them leaves every ``NAME.seen`` at COUNT. An outcome, not
a timing: nothing here measures how long a close took.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "albedo_actors", "demo"))

from server import DemoServer  # noqa: E402 - the demo server by path: standard library only

WAIT = 1.5  # s; the launcher sends SIGTERM 2 s after EOF
POLL = 0.01


def main(argv: list[str]) -> None:
    directory, count, name = argv[0], int(argv[1]), argv[2]
    DemoServer().run()
    with open(os.path.join(directory, f"{name}.eof"), "w"):
        pass
    deadline = time.monotonic() + WAIT
    seen = 0
    while True:
        seen = sum(1 for entry in os.listdir(directory) if entry.endswith(".eof"))
        if seen >= count or time.monotonic() > deadline:
            break
        time.sleep(POLL)  # a peer's bounded rendezvous, not a test's synchronisation
    with open(os.path.join(directory, f"{name}.seen.tmp"), "w") as handle:
        handle.write(str(seen))
    os.replace(os.path.join(directory, f"{name}.seen.tmp"), os.path.join(directory, f"{name}.seen"))


if __name__ == "__main__":
    main(sys.argv[1:])
