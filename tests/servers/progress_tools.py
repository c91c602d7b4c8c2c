"""Tools that send ``notifications/progress``, shared by the stdio and HTTP fault servers.

Each tool uses the request's ``_meta.progressToken`` (none: it sends no progress). What
a tool sent is appended to the file ``log`` names when given, one JSON line each:
``{"event": "progress" | "answer" | "stopped", "at": time.monotonic(), "n": N}`` (the
monotonic clock is the machine's, so a test can compare it with its own, loosely).

tick {interval_ms, count, then?, log?, via?, token?}
    ``count`` progress notifications, one every ``interval_ms`` (the first at once;
    ``token`` "other": for another token than the call's);
    then (``then``) "answer" (default) or "hang": stop sending and never answer.
    ``via`` "listen" (legacy HTTP only): the notifications go on the session's
    listening GET stream and the answer is a JSON body.
flood {count}
    ``count`` progress notifications as fast as they can be written, each 10,000th
    followed by one for another token, then the answer.
hostile
    Progress whose message holds terminal controls and is 100,000 characters long,
    one for a token no call has, ones whose numbers are not numbers, then the answer
    ``"hostile sent"``.

How a tool reaches the wire is the server's (``Wire``): stdio writes lines from a
thread of the tool's own; HTTP pushes onto the request's SSE stream from such a thread
(the answer ends the stream) or, with ``via`` "listen", writes from the handler.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable

HOSTILE_MESSAGE = "\x1b]0;pwned\x07\x1b[2J\u202eevil\r\n" + "A" * 100_000


class Wire:
    """How one call's tool sends: ``send(message)`` a notification, ``answer(result)``
    the response, ``wait(seconds)`` (False when the server is stopping)."""

    def __init__(self, send: Callable[[dict], None], answer: Callable[[dict], None],
                 wait: Callable[[float], bool] = lambda seconds: (time.sleep(seconds), True)[1]) -> None:
        self.send = send
        self.answer = answer
        self.wait = wait


def token_of(params: dict) -> Any:
    meta = params.get("_meta")
    return meta.get("progressToken") if isinstance(meta, dict) else None


def progress(token: Any, n: float, total: Any = None, message: Any = None) -> dict:
    params: dict[str, Any] = {"progressToken": token, "progress": n}
    if total is not None:
        params["total"] = total
    if message is not None:
        params["message"] = message
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}


def _log(path: str | None, event: str, n: int = 0) -> None:
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"event": event, "at": time.monotonic(), "n": n}) + "\n")


def tick(params: dict, args: dict, wire: Wire, text_result: Callable[[str], dict]) -> None:
    token = token_of(params)
    if args.get("token") == "other" and token is not None:
        token = f"other-{token}"  # progress for a token no call has
    interval = args.get("interval_ms", 500) / 1000
    count = args.get("count", 6)
    log = args.get("log")
    for i in range(count):
        if i and not wire.wait(interval):
            return
        if token is not None:
            wire.send(progress(token, i + 1, count, f"step {i + 1} of {count}"))
            _log(log, "progress", i + 1)
    if args.get("then", "answer") == "hang":
        _log(log, "stopped", count)
        return
    if not wire.wait(interval):
        return
    _log(log, "answer", count)
    wire.answer(text_result(f"ticked {count}"))


def flood(params: dict, args: dict, wire: Wire, text_result: Callable[[str], dict]) -> None:
    token = token_of(params)
    count = args["count"]
    if token is not None:
        for i in range(count):
            wire.send(progress(token, i + 1, count))
            if i % 10_000 == 9_999:
                wire.send(progress(f"not-{token}", i + 1, count))
    wire.answer(text_result(f"flooded {count}"))


def hostile(params: dict, args: dict, wire: Wire, text_result: Callable[[str], dict]) -> None:
    token = token_of(params)
    if token is not None:
        wire.send(progress(token, 1, 3, HOSTILE_MESSAGE))
        wire.send(progress("nobody's token", 99, 100, "\x1b[31mnot yours"))
        wire.send(progress(token, "2", None, "a string for progress"))
        wire.send(progress(token, 10**400, None, "a number too large"))
        wire.send(progress(token, True, None, "a boolean"))
        wire.send(progress(token, 2, {"total": 1}, "\x9b6n total is no number"))
    wire.answer(text_result("hostile sent"))


TOOLS = {
    "tick": (tick, "Send count progress notifications every interval_ms, then answer (or hang).",
             {"interval_ms": {"type": "integer"}, "count": {"type": "integer"}, "then": {"type": "string"},
              "log": {"type": "string"}, "via": {"type": "string"}, "token": {"type": "string"}}),
    "flood": (flood, "Send count progress notifications at once, then answer.", {"count": {"type": "integer"}}),
    "hostile": (hostile, "Send hostile progress notifications, then answer.", {}),
}


def in_thread(fn: Callable[[], None], name: str) -> None:
    thread = threading.Thread(target=fn, name=name, daemon=True)
    thread.start()
