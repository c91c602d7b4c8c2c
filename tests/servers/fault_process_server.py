"""Stdio fault server about process lifetime: children, a closed stdout, signals.

It is :mod:`fault_server` (every flag of it works here too) plus these:

--spawn-child          at start, run a child process that ignores SIGTERM, reads
                       nothing and keeps the server's stdout open (as a helper
                       a real server forks would)
--ignore-term          ignore SIGTERM (stdin EOF still ends it, unless it closed stdout)
--escape HOW           at start, run a helper that leaves the server's process group
                       (issue 23 hole 9), holds the server's stdout and stderr open and
                       sleeps: ``setsid`` (the server's child calls setsid()),
                       ``setpgid`` (it calls setpgid(0, 0): a group of its own, the
                       server's session), ``daemon`` (the classic double fork: the
                       child forks, the grandchild calls setsid() and forks, both
                       parents exit, so the last one is an orphan in a session of its
                       own). Repeatable: one helper each.
--escape-ignore-term   the helpers ignore SIGTERM
--stderr-file FILE     write FILE's bytes to stderr and exit with code 3 at once

Tools (besides fault_server's):

pids            JSON text ``{"pid": N, "ppid": N, "child": N or null, "escaped":
                [N, ...]}`` (the helpers of --escape, in order)
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
# argv: how, "1" to ignore SIGTERM, the fd to write the pid of the process that stays to.
ESCAPER = """\
import os, signal, sys, time
how, ignore_term, report = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
if ignore_term:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if how == "setsid":
    os.setsid()
elif how == "setpgid":
    os.setpgid(0, 0)
elif how == "daemon":
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)
os.write(report, str(os.getpid()).encode())
os.close(report)
while True:
    time.sleep(3600)
"""


def escape(how: str, ignore_term: bool) -> int:
    """Run an ESCAPER helper; the pid of the process that stays, once it has left the group."""
    report_r, report_w = os.pipe()
    helper = subprocess.Popen([sys.executable, "-c", ESCAPER, how, "1" if ignore_term else "0", str(report_w)],
                              stdin=subprocess.DEVNULL, pass_fds=(report_w,))
    os.close(report_w)
    with os.fdopen(report_r, "rb") as report:
        pid = int(report.read())  # EOF once the one that stays has written it
    if how == "daemon":
        helper.wait(10)  # it exited at once: reaped here, as a daemon's starter is
    else:
        HELPERS.append(helper)  # it stays our child
    return pid


HELPERS: list[subprocess.Popen] = []


class ProcessServer(fault_server.FaultServer):
    def __init__(self, options: argparse.Namespace, child: subprocess.Popen | None, escaped: list[int]) -> None:
        super().__init__(options)
        self.child = child
        self.escaped = escaped
        self.stdout_closed = threading.Event()
        self.add_tool("pids", self.tool_pids, description="This process's pid, parent pid and child pid.")
        self.add_tool("close_stdout", self.tool_close_stdout, description="Close stdout and keep running.")
        self.add_tool("exec_env", self.tool_exec_env, description="The environment this process was started with.")

    def tool_pids(self, request, args: dict) -> dict:
        return text_result(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "child": self.child.pid if self.child else None,
                                       "escaped": self.escaped}))

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
    parser.add_argument("--escape", action="append", default=[], choices=("setsid", "setpgid", "daemon"))
    parser.add_argument("--escape-ignore-term", action="store_true")
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
    escaped = [escape(how, mine.escape_ignore_term) for how in mine.escape]
    server = ProcessServer(options, child, escaped)
    server.run()  # until stdin EOF
    if server.stdout_closed.is_set() or options.ignore_eof_and_term:
        # Keep running with no way to tell the host: only a signal ends it.
        threading.Event().wait()


if __name__ == "__main__":
    main()
