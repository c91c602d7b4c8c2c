"""One deadline per call: the instant every wait of the call ends at.

A :class:`Deadline` is made once, where a call starts (the binding, the command line,
or a handle from its ``timeout``), and travels down with the call: the dial, the
channel's wait, the link, the auth step (a token refresh or sign-in on the call path)
and the transport's exchange and any SSE resumption all end at it. It is a plain
immutable value (DESIGN rule 4), an instant of ``time.monotonic()`` and the seconds it
was made from (what a message says: "within 1 s").

:class:`Bound` is what the layers below take: anything with an instant that may be
read again before each wait. A :class:`Deadline` never moves; a call's
:class:`~albedo_actors.connection.progress.CallProgress` is a bound that a progress
notification moves (never past its cap), so a read that re-reads ``at`` before each
chunk follows it without being told.

It lives in ``wire`` because every layer needs it and ``wire`` is the one layer each
of them may import (``transport`` imports only ``wire`` and ``errors``); it holds no
thread and no socket, only arithmetic on the monotonic clock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Bound", "Deadline", "remaining"]


class Bound(Protocol):
    """An instant a wait must end at; read ``at`` again before each wait (it may move)."""

    @property
    def at(self) -> float:
        """The instant (``time.monotonic()``)."""

    @property
    def seconds(self) -> float:
        """The timeout it stands for, in seconds (for messages: "within 1 s")."""

    def remaining(self) -> float:
        """Seconds left, never negative (0 once it passed)."""

    @property
    def expired(self) -> bool:
        """True once the instant has passed."""


@dataclass(frozen=True, slots=True, repr=False)
class Deadline:
    """An immutable instant of ``time.monotonic()`` and the seconds it was made from."""

    at: float
    seconds: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        """The deadline ``seconds`` from now."""
        seconds = max(0.0, float(seconds))
        return cls(time.monotonic() + seconds, seconds)

    @classmethod
    def of(cls, bound: Bound) -> Deadline:
        """A bound as it stands now (a moving one no longer moves in the copy)."""
        return bound if isinstance(bound, Deadline) else cls(bound.at, bound.seconds)

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self.at - time.monotonic())

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.at

    def min(self, other: Bound | None) -> Deadline:
        """The earlier of this deadline and ``other`` (None: this one). A moving
        ``other`` is taken as it stands now."""
        if other is None or self.at <= other.at:
            return self
        return Deadline.of(other)

    def within(self, seconds: float) -> Deadline:
        """The earlier of this deadline and ``seconds`` from now (a step's own bound)."""
        return self.min(Deadline.after(seconds))

    def __repr__(self) -> str:
        return f"Deadline(in {self.at - time.monotonic():.3f} s of {self.seconds:g} s)"


def remaining(bound: Bound | None, default: float | None = None) -> float | None:
    """Seconds left of ``bound`` (never negative), or ``default`` without one."""
    return default if bound is None else bound.remaining()
