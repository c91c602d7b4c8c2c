"""The stdio launcher: parent of one MCP server process, in a process group of its own.

Run by :mod:`albedo_actors.transport.stdio` as ``python -I -S launcher.py SPEC_FD``
(stdlib only, so it runs isolated from the host's ``PYTHON*`` variables and site
packages, and starts without the cost of site processing). SPEC_FD is a pipe the host
writes one JSON object to and closes: ``{"argv": [...], "cwd": "...", "env": {...},
"secrets": [...], "stdin_fd": N, "term_grace": 2.0, "kill_grace": 2.0}``.

Why a pipe and not argv or the launcher's own environment: the environment holds
secrets, and a process's argv is readable by every user in /proc. And the server gets
exactly ``env`` as given, never the launcher's own environment, because this
interpreter changes its own: with a C locale it adds ``LC_CTYPE`` (PEP 538 locale
coercion, which ``-I`` does not turn off).

Pipes:

- the server's stdin is ``stdin_fd``, a pipe the host writes requests to directly;
- the server's stdout is the launcher's stdout (the host reads responses directly),
  which the launcher then lets go of, so the host sees EOF when the server is gone;
- the server's stderr goes to the launcher, which keeps a small tail of it, with
  ``secrets`` redacted before it is cut (see :func:`redacted_tail`);
- the launcher's stdin is the control pipe: EOF on it means "close" (the host closed
  it, or the host died);
- the launcher's stderr is the status channel back to the host: one JSON line
  ``{"pid": N}`` (or ``{"error": "..."}``) at start, ``{"closing": "SIGTERM"}`` when
  a signal asks the launcher to end, and ``{"exit": code, "stderr": tail}`` when the
  server ends.

Shutdown (2025-11-25 basic/lifecycle "Shutdown", 2026-07-28 basic/transports/stdio
"Shutdown"): once the control pipe closes, the server's stdin has been closed by the
host; the server gets ``term_grace`` seconds to exit, then its group gets SIGTERM, and
``kill_grace`` seconds later SIGKILL. A server that ignores EOF and SIGTERM still ends.
SIGTERM or SIGHUP to the launcher runs the same sequence (the host is told first, so
that it closes the server's stdin). If the launcher itself is killed, the host sees
its status channel close without an exit status and ends the server's group itself.
"""

from __future__ import annotations

import collections
import io
import json
import os
import select
import signal
import subprocess
import sys
import threading
from typing import Any

TAIL_BYTES = 2048
MIN_SECRET = 4  # shorter values are not redacted: they would blank ordinary text


def _status(obj: dict[str, Any]) -> None:
    try:
        os.write(2, json.dumps(obj).encode() + b"\n")
    except OSError:
        pass  # the host is gone; nothing to tell


def _read_spec(fd: int) -> dict[str, Any]:
    chunks = []
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    spec: dict[str, Any] = json.loads(b"".join(chunks))  # the host wrote it: a JSON object
    return spec


class Tail:
    """The last bytes of the server's stderr, with secrets redacted before any cut.

    ``margin`` (the longest secret) more bytes are kept than are shown, so that a
    secret near the front of what is shown is still whole when it is redacted.
    """

    def __init__(self, secrets: list[bytes], limit: int = TAIL_BYTES) -> None:
        # Longest first: a secret that contains another is replaced whole.
        self.secrets = sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len, reverse=True)
        self.limit = limit
        self.margin = max((len(s) for s in self.secrets), default=0)
        self.chunks: collections.deque[bytes] = collections.deque()
        self.size = 0
        self.cut = False
        self.lock = threading.Lock()

    def add(self, chunk: bytes) -> None:
        with self.lock:
            self.chunks.append(chunk)
            self.size += len(chunk)
            keep = self.limit + self.margin
            while self.size - len(self.chunks[0]) >= keep:
                self.size -= len(self.chunks.popleft())
                self.cut = True

    def text(self) -> str:
        with self.lock:
            data, cut = b"".join(self.chunks), self.cut
        return redacted_tail(data, cut, self.secrets, self.limit + self.margin, self.limit)


def redacted_tail(data: bytes, cut: bool, secrets: list[bytes], keep: int, limit: int) -> str:
    """The last ``limit`` bytes of ``data`` (of which at most ``keep`` are looked at), as
    text, with every secret redacted before any cut.

    ``cut``: bytes before ``data`` were dropped, so a secret may straddle its start and
    show only its end there: the longest end of a secret that ``data`` starts with is
    redacted too (a false match hides a few bytes of noise, never a secret).
    """
    if len(data) > keep:
        data, cut = data[-keep:], True
    if cut:
        front = max((next((j for j in range(len(s) - 1, 0, -1) if data.startswith(s[-j:])), 0) for s in secrets), default=0)
        if front:
            data = b"***" + data[front:]
    for secret in secrets:
        data = data.replace(secret, b"***")
    return data[-limit:].decode("utf-8", "replace")


def _keep_tail(stream: io.BufferedReader, tail: Tail) -> None:
    """Read the server's stderr to EOF into ``tail``."""
    for chunk in iter(lambda: stream.read1(4096), b""):
        tail.add(chunk)


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
    spec = _read_spec(int(argv[1]))
    # Ctrl-C in the host's terminal is for the host; we end when the control pipe closes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # SIGTERM and SIGHUP (a service manager stopping us, a closed terminal) run the
    # shutdown sequence: the handler does nothing, the wake-up fd tells the loop below.
    # Handled (not ignored) signals are reset to the default in the server by exec.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: None)
    stdin_fd = spec["stdin_fd"]
    try:
        server = subprocess.Popen(
            spec["argv"],
            stdin=stdin_fd,
            stdout=1,
            stderr=subprocess.PIPE,
            cwd=spec["cwd"],
            env=spec["env"],  # exactly this: never what this interpreter added to its own
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

    tail = Tail([os.fsencode(s) for s in spec.get("secrets", ())])
    tail_reader = threading.Thread(target=_keep_tail, args=(server.stderr, tail), daemon=True)
    tail_reader.start()
    server_done = threading.Event()

    def watch_server() -> None:
        server.wait()
        server_done.set()
        os.write(wake_w, b"\0")

    threading.Thread(target=watch_server, daemon=True).start()
    while not server_done.is_set():
        ready = select.select([0, wake_r], [], [])[0]
        if 0 in ready and not os.read(0, 4096):
            break  # the control pipe closed: "close"
        if wake_r in ready:
            woken = os.read(wake_r, 64)
            signals = [signal.Signals(b).name for b in woken if b in (signal.SIGTERM, signal.SIGHUP)]
            if signals:
                _status({"closing": signals[0]})  # the host closes the server's stdin
                break

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
    _status({"exit": server.returncode, "stderr": tail.text()})
    # Helpers the server left in its group (its leader is gone) end with it.
    _signal_group(server.pid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
