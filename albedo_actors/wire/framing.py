"""Newline-delimited framing for stdio (2025-11-25 / 2026-07-28 basic/transports stdio).

:class:`LineFramer` turns a byte stream into lines while holding at most
``max_bytes`` plus one read chunk in memory: a line of any length without a newline
costs bounded memory and raises :class:`FrameTooLarge`, after which the connection
is ended by its owner.
"""

from __future__ import annotations

from .jsonrpc import MAX_MESSAGE_BYTES, WireError


class FrameTooLarge(WireError):
    """A line grew past the message size limit before its newline arrived."""


class LineFramer:
    """Split a byte stream into lines; not thread-safe (one reader owns it)."""

    __slots__ = ("_buffer", "_max")

    def __init__(self, max_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self._buffer = bytearray()
        self._max = max_bytes

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add ``chunk``; return the complete lines it finished, without newlines.

        Empty lines are skipped and a trailing ``\\r`` is dropped.

        Raises:
            FrameTooLarge: a line is longer than the limit.
        """
        buffer = self._buffer
        if not buffer and chunk.endswith(b"\n") and len(chunk) <= self._max:
            # The usual read: whole lines only, none over the limit (the chunk is not).
            # bytes.split does it in C, with no copy into and out of the buffer.
            whole = chunk.split(b"\n")
            whole.pop()  # what follows the last newline: nothing
            if b"\r" in chunk:
                whole = [line[:-1] if line.endswith(b"\r") else line for line in whole]
            if b"" in whole:
                whole = [line for line in whole if line]
            return whole
        start = len(buffer)
        buffer += chunk
        end = buffer.find(b"\n", start)
        if end < 0:
            if len(buffer) > self._max:
                size = len(buffer)
                buffer.clear()
                raise FrameTooLarge(f"a message of more than {size} bytes without a newline, over the {self._max >> 20} MiB limit")
            return []
        lines: list[bytes] = []
        begin = 0
        while end >= 0:
            line = bytes(buffer[begin:end])
            if line.endswith(b"\r"):
                line = line[:-1]
            if len(line) > self._max:
                buffer.clear()
                raise FrameTooLarge(f"a message of {len(line)} bytes, over the {self._max >> 20} MiB limit")
            if line:
                lines.append(line)
            begin = end + 1
            end = buffer.find(b"\n", begin)
        del buffer[:begin]
        if len(buffer) > self._max:
            size = len(buffer)
            buffer.clear()
            raise FrameTooLarge(f"a message of more than {size} bytes without a newline, over the {self._max >> 20} MiB limit")
        return lines

    @property
    def pending(self) -> int:
        """Bytes held for a line not yet finished."""
        return len(self._buffer)
