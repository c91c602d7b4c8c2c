"""The stdio launcher: parent of one MCP server process, in a process group of its own.

Run by :mod:`albedo_actors.transport.stdio` as ``python -I -S launcher.py SPEC`` (stdlib
only, so it runs isolated from the host's ``PYTHON*`` variables and site packages,
and starts without the cost of site processing).
SPEC is JSON: ``{"argv": [...], "cwd": "...", "stdin_fd": N, "term_grace": 2.0,
"kill_grace": 2.0}``. The launcher's own environment is already reduced by the host
and is passed to the server unchanged.

Pipes:

- the server's stdin is ``stdin_fd``, a pipe the host writes requests to directly;
- the server's stdout is the launcher's stdout (the host reads responses directly),
  which the launcher then lets go of, so the host sees EOF when the server is gone;
- the server's stderr goes to the launcher, which keeps a small tail of it;
- the launcher's stdin is the control pipe: EOF on it means "close" (the host closed
  it, or the host died);
- the launcher's stderr is the status channel back to the host: one JSON line
  ``{"pid": N}`` (or ``{"error": "..."}``) at start, and ``{"exit": code, "stderr":
  tail}`` when the server ends.

Shutdown (2025-11-25 basic/lifecycle "Shutdown", 2026-07-28 basic/transports/stdio
"Shutdown"): once the control pipe closes, the server's stdin has been closed by the
host; the server gets ``term_grace`` seconds to exit, then its group gets SIGTERM, and
``kill_grace`` seconds later SIGKILL. A server that ignores EOF and SIGTERM still ends.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading

TAIL_BYTES = 2048


def _status(obj: dict) -> None:
    try:
        os.write(2, json.dumps(obj).encode() + b"\n")
    except OSError:
        pass  # the host is gone; nothing to tell


def _keep_tail(stream, tail: collections.deque) -> None:
    """Read the server's stderr to EOF, keeping only its last TAIL_BYTES."""
    size = 0
    for chunk in iter(lambda: stream.read1(4096), b""):
        tail.append(chunk)
        size += len(chunk)
        while size - len(tail[0]) >= TAIL_BYTES:
            size -= len(tail.popleft())


def _signal_group(pgid: int, sig: int) -> bool:
    """Signal the server's group; False when no process of it is left."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a member we cannot signal (zombie or setuid); still there


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    # Ctrl-C in the host's terminal is for the host; we end when the control pipe closes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stdin_fd = spec["stdin_fd"]
    try:
        server = subprocess.Popen(
            spec["argv"],
            stdin=stdin_fd,
            stdout=1,
            stderr=subprocess.PIPE,
            cwd=spec["cwd"],
            start_new_session=True,  # its own session and process group
            close_fds=True,
        )
    except OSError as exc:
        _status({"error": f"{exc.strerror or exc}: {spec['argv'][0]}"})
        return 127
    os.close(stdin_fd)
    # Let go of stdout so that the host sees EOF exactly when the server's side closes.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    _status({"pid": server.pid})

    tail: collections.deque = collections.deque()
    tail_reader = threading.Thread(target=_keep_tail, args=(server.stderr, tail), daemon=True)
    tail_reader.start()
    done = threading.Event()

    def watch_control() -> None:
        while os.read(0, 4096):
            pass  # the host writes nothing here; only EOF matters
        done.set()

    def watch_server() -> None:
        server.wait()
        done.set()

    threading.Thread(target=watch_control, daemon=True).start()
    threading.Thread(target=watch_server, daemon=True).start()
    done.wait()

    if server.poll() is None:
        # Closing: the host has closed the server's stdin; give it time, then end it.
        try:
            server.wait(spec.get("term_grace", 2.0))
        except subprocess.TimeoutExpired:
            _signal_group(server.pid, signal.SIGTERM)
            try:
                server.wait(spec.get("kill_grace", 2.0))
            except subprocess.TimeoutExpired:
                _signal_group(server.pid, signal.SIGKILL)
                server.wait()
    tail_reader.join(0.5)
    _status({"exit": server.returncode, "stderr": b"".join(tail.copy())[-TAIL_BYTES:].decode("utf-8", "replace")})
    # Helpers the server left in its group (its leader is gone) end with it.
    _signal_group(server.pid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
