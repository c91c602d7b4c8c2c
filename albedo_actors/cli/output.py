"""What the command line prints: every line through the escaping rule, JSON exactly, errors and warnings one line each on stderr.

A failure is one line on stderr; with ``--json`` it is also one JSON object on stdout,
``{"error": {"type", "message", "server", "exit"}}`` (:func:`failure`). A reader that
leaves early ends the run quietly (:func:`closed_pipe`).
"""

from __future__ import annotations

import logging
import os
import re
import sys
from typing import Any

from ..wire.text import json_text, printable
from .options import PROG


def print_result(result: dict[str, Any]) -> None:
    content = result.get("content")
    printed = False
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            out(block.get("text", ""))
        elif kind in ("image", "audio"):
            size = len(block.get("data") or "") * 3 // 4
            out(f"[{kind} {block.get('mimeType', '?')}, about {size} bytes]")
        elif kind == "resource_link":
            out(f"[link {block.get('uri', '?')}]")
        elif kind == "resource":
            resource = block.get("resource")
            resource = resource if isinstance(resource, dict) else {}
            out(resource["text"] if isinstance(resource.get("text"), str) else f"[resource {resource.get('uri', '?')}]")
        else:
            out(f"[{kind} content]")
        printed = True
    contents = result.get("contents")
    for item in contents if isinstance(contents, list) else []:  # resources/read
        if isinstance(item, dict):
            if isinstance(item.get("text"), str):
                out(item["text"])
            else:
                size = len(item.get("blob") or "") * 3 // 4
                out(f"[resource {item.get('uri', '?')} {item.get('mimeType', '?')}, about {size} bytes]")
            printed = True
    messages = result.get("messages")
    for message in messages if isinstance(messages, list) else []:  # prompts/get
        if isinstance(message, dict):
            block = message.get("content")
            block = block if isinstance(block, dict) else {}
            text = block.get("text") if block.get("type") == "text" and isinstance(block.get("text"), str) else f"[{block.get('type', '?')} content]"
            out(f"{message.get('role', '?')}: {text}")
            printed = True
    if not printed and "structuredContent" in result:
        print_json(result["structuredContent"])


def print_json(value: Any) -> None:
    # Exact JSON (json.loads gives back what the server sent), with no raw control,
    # C1, bidi override or lone surrogate in it: see albedo_actors.wire.text.
    sys.stdout.write(json_text(value, indent=2) + "\n")


def out(text: Any, flush: bool = False) -> None:
    """Print to stdout through the escaping rule (lines and tabs kept)."""
    print(printable(text), flush=flush)


def warn(message: str) -> None:
    print(f"{PROG}: warning: {printable(message, one_line=True)}", file=sys.stderr)


def error_line(message: str) -> None:
    print(f"{PROG}: {printable(message, one_line=True)}", file=sys.stderr)


def note(message: str) -> None:
    """A hint on stderr (one line), so that stdout holds only what was asked for."""
    print(f"{PROG}: {printable(message, one_line=True)}", file=sys.stderr)


def failure(exc: BaseException, code: int, *, message: str | None = None, as_json: bool = False) -> int:
    """Report a failure and return its exit ``code``: one line on stderr and, with
    ``as_json``, ``{"error": {"type", "message", "server", "exit"}}`` on stdout.

    ``type`` is the error's class name (``Unavailable``, ``ConfigError``, ``Usage``...),
    ``message`` the stderr line without the program's name (``str(exc)`` unless
    ``message`` is given), ``server`` the server the error names (its ``server``
    attribute, else the name a line starting ``server 'NAME'`` gives), else null.
    """
    text = printable(str(exc) if message is None else message, one_line=True)
    error_line(text)
    if as_json:
        server = getattr(exc, "server", None)
        if not isinstance(server, str):
            # Every line about one server starts "server 'NAME'" (names never hold a quote).
            named = _NAMED.match(text)
            server = named.group(1) if named else None
        print_json({"error": {"type": type(exc).__name__, "message": text,
                              "server": server if isinstance(server, str) else None, "exit": code}})
    return code


_NAMED = re.compile(r"server '([^'\\]+)'")

# The exit status of a run whose reader went away, as of a program killed by SIGPIPE
# (128 + 13): what `cat` or `git log` give under `set -o pipefail`.
EXIT_CLOSED_PIPE = 141


def closed_pipe() -> int:
    """Stdout's (or stderr's) reader has gone: print nothing more, and return 141.

    Both streams are pointed at /dev/null, so that the lines still buffered are dropped
    without a second BrokenPipeError ("Exception ignored ...") at interpreter exit.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for stream in (sys.stdout, sys.stderr):
            try:
                os.dup2(devnull, stream.fileno())
            except (AttributeError, OSError, ValueError):  # not a real file (a test's capture)
                pass
    finally:
        os.close(devnull)
    return EXIT_CLOSED_PIPE


class PrintableFormatter(logging.Formatter):
    """--verbose log lines through the escaping rule (a traceback keeps its lines)."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))
