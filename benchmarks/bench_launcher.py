#!/usr/bin/env python3
"""The stdio launcher's own start: what making it a child subreaper costs (issue 23).

Each start is the launcher exactly as :mod:`albedo_actors.transport.stdio` runs it
(``python -I -S launcher.py SPEC_FD``, an empty environment, the spec through a pipe)
with ``/bin/cat`` as the server (it exits on EOF, as a polite server does). Measured
per start:

start   from ``Popen`` to the launcher's ``{"pid": N}`` status line (the host waits
        for that line before a server counts as started);
stop    from closing the server's stdin and the control pipe (what the host's close
        does) to the launcher's exit (``wait4``): the server's end, the group's and
        the descendants' check, the exit status;
cpu     the launcher's user + system CPU, from ``wait4`` (with the server's, which
        it reaped: the same ``/bin/cat`` in every variant).

Three launchers, in rotating order, ``--starts`` (200) starts each; figures are
medians:

subreaper   ``albedo_actors/transport/launcher.py`` as it is: ``prctl`` through the
            C ``_ctypes`` at its start;
none        the same file with the ``_become_subreaper()`` call taken out: the start
            before issue 23;
ctypes      the same file with ``prctl`` called through the ``ctypes`` package
            (``ctypes.CDLL(None).prctl``): the obvious route, for comparison.

The variants are written to a temporary directory; the run fails if the text it
replaces is not found. Run: ``.venv/bin/python benchmarks/bench_launcher.py
[--starts N] [--quick]``. See docs/configuration.rst ("How a stdio server runs").
"""

from __future__ import annotations

import argparse
import marshal
import os
import statistics
import subprocess
import sys
import tempfile
import time

from _common import REPO  # benchmarks/_common.py; it also puts the checkout first on sys.path

LAUNCHER = os.path.join(REPO, "albedo_actors", "transport", "launcher.py")
CALL = "    _become_subreaper()\n"
CTYPES_CALL = "    import ctypes\n    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)\n"
SERVER = "/bin/cat"


def variants(directory: str) -> dict[str, str]:
    with open(LAUNCHER) as f:
        text = f.read()
    if text.count(CALL) != 1:
        raise RuntimeError(f"{LAUNCHER}: the subreaper call ({CALL.strip()}) is not there once")
    paths = {"subreaper": LAUNCHER}
    for name, call in (("none", ""), ("ctypes", CTYPES_CALL)):
        path = os.path.join(directory, f"launcher_{name}.py")
        with open(path, "w") as f:
            f.write(text.replace(CALL, call))
        paths[name] = path
    return paths


def one_start(path: str, cwd: str) -> tuple[float, float, float]:
    """Run the launcher at ``path`` once; seconds to its pid line, seconds from the close
    to its exit, its CPU seconds."""
    data_r, data_w = os.pipe()
    spec_r, spec_w = os.pipe()
    t0 = time.perf_counter()
    launcher = subprocess.Popen([sys.executable, "-I", "-S", path, str(spec_r)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(data_r, spec_r),
                                env={}, cwd=cwd, bufsize=0)
    os.close(data_r)
    os.close(spec_r)
    spec = {"argv": [SERVER], "cwd": cwd, "env": {}, "secrets": [], "stdin_fd": data_r, "term_grace": 2.0, "kill_grace": 2.0}
    os.write(spec_w, marshal.dumps(spec))
    os.close(spec_w)
    assert launcher.stderr is not None and launcher.stdin is not None and launcher.stdout is not None
    first = launcher.stderr.readline()
    started = time.perf_counter() - t0
    if not first.startswith(b'{"pid"'):
        raise RuntimeError(f"{path}: the launcher said {first!r}")
    t1 = time.perf_counter()
    os.close(data_w)  # the server's stdin: EOF
    launcher.stdin.close()  # the control pipe: "close"
    rest = launcher.stderr.read()  # to its exit
    launcher.stdout.close()
    launcher.stderr.close()
    pid, status, usage = os.wait4(launcher.pid, 0)  # it closed its stderr: it is exiting
    stopped = time.perf_counter() - t1
    launcher.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    if launcher.returncode != 0 or b'"exit"' not in rest:
        raise RuntimeError(f"{path}: the launcher ended with {launcher.returncode}: {rest!r}")
    return started, stopped, usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="40 starts each")
    args = parser.parse_args(argv)
    starts = 40 if args.quick else args.starts
    with tempfile.TemporaryDirectory() as directory:
        paths = variants(directory)
        names = list(paths)
        times: dict[str, list[float]] = {name: [] for name in names}
        stops: dict[str, list[float]] = {name: [] for name in names}
        cpus: dict[str, list[float]] = {name: [] for name in names}
        for name in names:  # warm the page cache and the bytecode caches
            one_start(paths[name], directory)
        for i in range(starts):
            for name in names[i % len(names):] + names[:i % len(names)]:
                started, stopped, cpu = one_start(paths[name], directory)
                times[name].append(started)
                stops[name].append(stopped)
                cpus[name].append(cpu)
    print(f"launcher start, {starts} starts each, medians (python {sys.version.split()[0]}, "
          f"load {os.getloadavg()[0]:.2f}):")
    base = {what: statistics.median(figures["none"]) for what, figures in (("start", times), ("stop", stops), ("cpu", cpus))}
    for name in names:
        line = []
        for what, figures in (("start", times), ("stop", stops), ("cpu", cpus)):
            value = statistics.median(figures[name])
            line.append(f"{what} {value * 1000:6.2f} ms ({(value - base[what]) * 1000:+.2f})")
        print(f"  {name:<10} " + "   ".join(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
