"""The stdio launcher: parent of one MCP server process, in a process group of its own.

Run by :mod:`albedo_actors.transport.stdio` as ``python -I -S launcher.py SPEC_FD``
(stdlib only, so it runs isolated from the host's ``PYTHON*`` variables and site
packages, and starts without the cost of site processing). SPEC_FD is a pipe the host
writes one :mod:`marshal`-ed dict to and closes: ``{"argv": [...], "cwd": "...",
"env": {...}, "secrets": [...], "stdin_fd": N, "term_grace": 2.0, "kill_grace": 2.0}``.

It is one process per server, so what it costs counts once per server: it is one
thread, imports nothing but ``os``, ``select`` and the C ``_signal`` (``json`` alone,
through ``re`` and ``enum``, doubled its start; ``marshal`` is built in and the host
runs it on its own interpreter), starts the server with ``posix_spawn``, and waits
for nothing by polling: the server's end (SIGCHLD), the control pipe, signals and
the server's stderr all wake one ``select``.

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

import marshal
import os
import select
import sys
import time

TYPE_CHECKING = False  # typing's own import would cost the launcher's start
if TYPE_CHECKING:
    import signal
    from typing import Any
else:
    try:  # the C module itself: the ``signal`` wrapper imports ``enum``, a third of our start
        import _signal as signal
    except ImportError:  # not CPython
        import signal

TAIL_BYTES = 2048
TAIL_WAIT = 0.5  # for the rest of the server's stderr once it ended (a helper may hold it open)
MIN_SECRET = 4  # shorter values are not redacted: they would blank ordinary text
CLOSING_SIGNALS: dict[int, str] = {signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}
# JSON string escapes (RFC 8259 section 7) for the status lines, written without ``json``.
_ESCAPES = {i: f"\\u{i:04x}" for i in range(0x20)} | {ord('"'): '\\"', ord("\\"): "\\\\", 0x7F: "\\u007f"}


def _json(value: Any) -> str:
    """The few JSON values a status line holds: str, int, float, bool, None, a dict of them."""
    if isinstance(value, str):
        return '"' + value.translate(_ESCAPES) + '"'
    if isinstance(value, dict):
        return "{" + ",".join(f"{_json(str(k))}:{_json(v)}" for k, v in value.items()) + "}"
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, (int, float)):
        return repr(value)
    return _json(str(value))


def _status(obj: dict[str, Any]) -> None:
    try:
        os.write(2, _json(obj).encode("utf-8", "replace") + b"\n")
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
    spec: dict[str, Any] = marshal.loads(b"".join(chunks))  # the host wrote it: a dict
    return spec


class Tail:
    """The last bytes of the server's stderr, with secrets redacted before any cut.

    ``margin`` (the longest secret) more bytes are kept than are shown, so that a
    secret near the front of what is shown is still whole when it is redacted.
    Used by the launcher's one thread only.
    """

    def __init__(self, secrets: list[bytes], limit: int = TAIL_BYTES) -> None:
        # Longest first: a secret that contains another is replaced whole.
        self.secrets = sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len, reverse=True)
        self.limit = limit
        self.margin = max((len(s) for s in self.secrets), default=0)
        self.chunks: list[bytes] = []
        self.size = 0
        self.cut = False

    def add(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self.size += len(chunk)
        keep = self.limit + self.margin
        drop = 0
        while self.size - len(self.chunks[drop]) >= keep:
            self.size -= len(self.chunks[drop])
            drop += 1
        if drop:
            del self.chunks[:drop]
            self.cut = True

    def text(self) -> str:
        return redacted_tail(b"".join(self.chunks), self.cut, self.secrets, self.limit + self.margin, self.limit)


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


def _signal_group(pgid: int, sig: int) -> bool:
    """Signal the server's group; False when no process of it is left."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a member we cannot signal (zombie or setuid); still there


def _noop(signum: int, frame: object) -> None:
    """A handled signal: the wake-up fd tells the loop (and exec resets it in the server)."""


def _spawn(spec: dict[str, Any], stdin_fd: int, stderr_fd: int) -> int:
    """Start the server in a session and process group of its own; return its pid.

    stdin: ``stdin_fd``; stdout: ours (the host's pipe); stderr: ``stderr_fd``. Every
    other descriptor of ours is close-on-exec except ``stdin_fd``, which is closed.
    SIGPIPE and SIGXFSZ, which Python ignores, are reset as ``subprocess`` resets them.

    Raises:
        OSError: the executable could not be run.
    """
    argv = spec["argv"]
    env = spec["env"]  # exactly this: never what this interpreter added to its own
    try:
        return os.posix_spawn(
            argv[0], argv, env,
            file_actions=[(os.POSIX_SPAWN_DUP2, stdin_fd, 0), (os.POSIX_SPAWN_DUP2, stderr_fd, 2), (os.POSIX_SPAWN_CLOSE, stdin_fd)],
            setsid=True,
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
        )
    except NotImplementedError:  # pragma: no cover - a libc without POSIX_SPAWN_SETSID
        import subprocess

        return subprocess.Popen(argv, stdin=stdin_fd, stdout=1, stderr=stderr_fd, env=env, start_new_session=True).pid


def main(argv: list[str]) -> int:
    spec = _read_spec(int(argv[1]))
    try:
        os.chdir(spec["cwd"])  # the host started us there; the server starts there too
    except OSError as exc:
        _status({"error": f"{exc.strerror or exc}: {spec['cwd']}"})
        return 127
    # Ctrl-C in the host's terminal is for the host; we end when the control pipe closes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # SIGTERM and SIGHUP (a service manager stopping us, a closed terminal) run the
    # shutdown sequence, SIGCHLD says the server ended: the handler does nothing, the
    # wake-up fd tells the loop below. Installed before the server starts, so that no
    # SIGCHLD is missed.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)  # a warning would go to the status channel
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, _noop)
    stdin_fd = spec["stdin_fd"]
    err_r, err_w = os.pipe()
    try:
        pid = _spawn(spec, stdin_fd, err_w)
    except OSError as exc:
        _status({"error": f"{exc.strerror or exc}: {spec['argv'][0]}"})
        return 127
    finally:
        os.close(err_w)
        os.close(stdin_fd)
    # Let go of stdout so that the host sees EOF exactly when the server's side closes.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)

    _status({"pid": pid})

    tail = Tail([os.fsencode(s) for s in spec.get("secrets", ())])
    term_grace = spec.get("term_grace", 2.0)
    kill_grace = spec.get("kill_grace", 2.0)
    watched = [0, wake_r, err_r]
    told = False
    stage = 0  # 0 running; 1 closing (EOF given); 2 SIGTERM sent; 3 SIGKILL sent
    deadline: float | None = None
    status = None
    while status is None:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready = select.select(watched, [], [], timeout)[0]
        closing = False
        if err_r in ready:
            chunk = os.read(err_r, 65536)
            if chunk:
                tail.add(chunk)
            else:
                watched.remove(err_r)
        if 0 in ready and not os.read(0, 4096):
            watched.remove(0)
            closing = True  # the control pipe closed: "close"
        if wake_r in ready:
            for number in os.read(wake_r, 256):
                if number in CLOSING_SIGNALS and not told:
                    told = True
                    _status({"closing": CLOSING_SIGNALS[number]})  # the host closes the server's stdin
                    closing = True
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == 0:
            status = None
        if status is not None:
            break
        if closing and stage == 0:
            # Closing: the host has closed the server's stdin; give it time, then end it.
            stage, deadline = 1, time.monotonic() + term_grace
        elif deadline is not None and time.monotonic() >= deadline:
            if stage == 1:
                _signal_group(pid, signal.SIGTERM)
                stage, deadline = 2, time.monotonic() + kill_grace
            else:
                _signal_group(pid, signal.SIGKILL)
                stage, deadline = 3, None  # SIGKILL cannot be refused: SIGCHLD comes

    # Helpers the server left in its group (its leader is gone) end with it; then the
    # rest of its stderr is theirs no longer to hold open.
    _signal_group(pid, signal.SIGKILL)
    until = time.monotonic() + TAIL_WAIT
    while err_r in watched:
        remaining = until - time.monotonic()
        if remaining <= 0 or not select.select([err_r], [], [], remaining)[0]:
            break
        chunk = os.read(err_r, 65536)
        if not chunk:
            break
        tail.add(chunk)
    _status({"exit": os.waitstatus_to_exitcode(status), "stderr": tail.text()})
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    os._exit(code)  # everything is written (os.write): skip the interpreter's teardown
