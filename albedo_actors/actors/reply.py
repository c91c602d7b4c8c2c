"""Requests that answer later: the caller's one future, carried by a tell.

An actor method that can answer at once is a proxy call: its pykka future holds the
answer itself. A request whose answer comes later (a preparation, a dial, a token
refresh) is a frozen :class:`Request` message sent with ``tell``; it carries the
``reply`` future its sender made, and the sender waits on that future alone, with one
bound (DESIGN.md rule 1: no future holds another future)::

    message = Reload()
    composer.tell(message)                 # ActorDeadError: the actor has stopped
    composition = message.reply.result(timeout=60)

:func:`request` does exactly that, and :func:`ask` is its twin for a proxy call; both
translate pykka's errors into ours (a stopped actor is :class:`SessionClosed`, a late one
:class:`SessionTimedOut`). Every reply resolves (rule 3): the receiving actor
resolves it, and a request still queued when the actor stops is failed by
:func:`fail_queued` from the actor's ``on_stop``.
"""

from __future__ import annotations

import concurrent.futures
from dataclasses import FrozenInstanceError
from typing import Any, Callable

import pykka

from ..errors import SessionClosed, SessionTimedOut

Reply = concurrent.futures.Future

# Sets a field of a frozen Message (in its __init__), as a frozen dataclass does.
set_field = object.__setattr__


class Message:
    """A frozen message with identity equality: what ``@dataclass(frozen=True, eq=False)``
    generates, written once by hand. Each generated dataclass costs about a millisecond
    of ``import albedo_actors.runtime`` (one ``exec`` per method), and the actors define
    some thirty messages. A subclass names its fields in ``__slots__`` (in ``__init__``'s
    order, after its bases') and sets them in ``__init__`` with :data:`set_field`; a field
    can then no longer be set or deleted (``FrozenInstanceError``), and ``repr`` lists the
    fields as a dataclass's does (but ``reply``)."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __repr__(self) -> str:
        names = [name for cls in reversed(type(self).__mro__) for name in cls.__dict__.get("__slots__", ())
                 if name != "reply"]
        return f"{type(self).__qualname__}({', '.join(f'{name}={getattr(self, name)!r}' for name in names)})"


class Request(Message):
    """A message that answers later through ``reply`` (made by its sender unless given)."""

    __slots__ = ("reply",)
    reply: Reply

    def __init__(self, *, reply: Reply | None = None) -> None:
        set_field(self, "reply", concurrent.futures.Future() if reply is None else reply)


CLOSED = "the MCP session has closed; start a new session to use MCP again"
ASK_TIMEOUT = 10.0  # an ask of an actor that answers at once (its own bookkeeping, never I/O)


def ask(method: Any, *args: Any, timeout: float | None = None) -> Any:
    """Call an actor's proxy ``method`` and wait (bounded) for its answer.

    pykka's own exceptions never reach a caller of the public faces (errors.py's rule):
    an actor that has stopped is :class:`SessionClosed`, one that does not answer within
    the bound :class:`SessionTimedOut`; each says what to do.
    """
    limit = ASK_TIMEOUT if timeout is None else timeout
    try:
        return method(*args).get(timeout=limit)
    except pykka.ActorDeadError:
        raise SessionClosed(CLOSED) from None
    except pykka.Timeout:
        raise SessionTimedOut(f"the MCP session did not answer within {limit:g} s; try again after the current operation") from None


def request(ref: pykka.ActorRef, message: Request, timeout: float, *, late: str | None = None) -> Any:
    """Tell ``ref`` ``message`` and wait at most ``timeout`` s on its one reply: the
    caller's single future, single bound.

    Raises:
        SessionClosed: the actor had stopped (nothing was sent), or the reply was cancelled.
        SessionTimedOut: no reply within ``timeout`` (``late`` says so, if given).
        Whatever the actor failed the reply with (an AlbedoError).
    """
    try:
        ref.tell(message)
    except pykka.ActorDeadError:
        raise SessionClosed(CLOSED) from None
    try:
        return message.reply.result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        raise SessionTimedOut(late or f"the MCP session did not answer within {timeout:g} s; try again after the current operation") from None
    except concurrent.futures.CancelledError:
        raise SessionClosed(CLOSED) from None


def resolve(reply: Reply, value: Any) -> bool:
    """Set ``reply``'s result unless it is already done (or cancelled); True if set."""
    try:
        reply.set_result(value)
        return True
    except concurrent.futures.InvalidStateError:
        return False


def fail(reply: Reply, error: BaseException) -> bool:
    """Fail ``reply`` unless it is already done (or cancelled); True if failed."""
    try:
        reply.set_exception(error)
        return True
    except concurrent.futures.InvalidStateError:
        return False


def chain(source: Reply, target: Reply) -> None:
    """Resolve ``target`` as ``source`` resolves (at once if it already has)."""

    def copy(done: Reply) -> None:
        if done.cancelled():
            target.cancel()
            return
        error = done.exception()
        if error is not None:
            fail(target, error)
        else:
            resolve(target, done.result())

    source.add_done_callback(copy)


def fail_queued(actor: pykka.Actor, error: Callable[[Request], BaseException]) -> None:
    """From ``on_stop``: fail every :class:`Request` still in ``actor``'s inbox.

    pykka drops told messages left in a stopped actor's inbox; a request's sender would
    then wait for its whole bound. ``on_stop`` runs once the actor counts as stopped
    (no tell gets in any more), so what is queued now is all there will be. Other
    envelopes go back in order, for pykka to answer as usual.
    """
    kept = []
    while not actor.actor_inbox.empty():  # only this (the actor's) thread takes from it
        envelope = actor.actor_inbox.get()
        message = getattr(envelope, "message", None)
        if isinstance(message, Request):
            fail(message.reply, error(message))
        else:
            kept.append(envelope)
    for envelope in kept:
        actor.actor_inbox.put(envelope)
