"""What the command line prints: every line through the escaping rule, JSON exactly, errors and warnings one line each on stderr."""

from __future__ import annotations

import logging
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


class PrintableFormatter(logging.Formatter):
    """--verbose log lines through the escaping rule (a traceback keeps its lines)."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))
