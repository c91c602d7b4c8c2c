"""Stdio fault server about process lifetime: children, a closed stdout, signals.

It is :mod:`fault_server` (every flag of it works here too) plus these:

--spawn-child          at start, run a child process that ignores SIGTERM, reads
                       nothing and keeps the server's stdout open (as a helper
                       a real server forks would)
--ignore-term          ignore SIGTERM (stdin EOF still ends it, unless it closed stdout)
--stderr-file FILE     write FILE's bytes to stderr and exit with code 3 at once

Tools (besides fault_server's):

pids            JSON text ``{"pid": N, "ppid": N, "child": N or null}``
close_stdout    close stdout without answering and keep running, whatever stdin
                does: only a signal (SIGTERM unless ignored, else SIGKILL) ends it
exec_env        JSON text of the environment this process was started with, read
                from /proc/self/environ (so without what this interpreter itself
                adds, such as LC_CTYPE by PEP 538 locale coercion)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading

import fault_server
from albedo_actors.demo.server import text_result

CHILD = "import time\nwhile True:\n    time.sleep(3600)\n"


class ProcessServer(fault_server.FaultServer):
    def __init__(self, options: argparse.Namespace, child: subprocess.Popen | None) -> None:
        super().__init__(options)
        self.child = child
        self.stdout_closed = threading.Event()
        self.add_tool("pids", self.tool_pids, description="This process's pid, parent pid and child pid.")
        self.add_tool("close_stdout", self.tool_close_stdout, description="Close stdout and keep running.")
        self.add_tool("exec_env", self.tool_exec_env, description="The environment this process was started with.")

    def tool_pids(self, request, args: dict) -> dict:
        return text_result(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "child": self.child.pid if self.child else None}))

    def tool_close_stdout(self, request, args: dict) -> None:
        self.muted = True  # nothing more is written
        os.close(1)
        self.stdout_closed.set()

    def tool_exec_env(self, request, args: dict) -> dict:
        with open("/proc/self/environ", "rb") as f:
            entries = [entry for entry in f.read().split(b"\0") if entry]
        env = dict(os.fsdecode(entry).partition("=")[::2] for entry in entries)
        return text_result(json.dumps(env))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--spawn-child", action="store_true")
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--stderr-file")
    mine, rest = parser.parse_known_args(argv)
    if mine.stderr_file:
        with open(mine.stderr_file, "rb") as f:
            os.write(2, f.read())
        sys.exit(3)
    options = fault_server.parse_args(rest)
    if mine.ignore_term or options.ignore_eof_and_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the child: it ignores it too
    child = None
    if mine.spawn_child:
        # stdout is inherited: the child holds the host's end open like a forked helper.
        child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.DEVNULL)
    server = ProcessServer(options, child)
    server.run()  # until stdin EOF
    if server.stdout_closed.is_set() or options.ignore_eof_and_term:
        # Keep running with no way to tell the host: only a signal ends it.
        threading.Event().wait()


if __name__ == "__main__":
    main()
