"""The actors' messages (reply.Message): written by hand rather than generated as
frozen dataclasses (each dataclass costs about a millisecond of import), they keep what
``@dataclass(frozen=True, eq=False)`` gave: frozen fields, identity equality, the
dataclass ``repr`` (``reply`` left out), keyword construction, and a fresh ``reply``
future per request unless one is given."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import inspect

import pytest

from albedo_actors.actors import client, composer, preparer, refresher, registry, reply


def _all_messages() -> list[type[reply.Message]]:
    found: list[type[reply.Message]] = []
    todo = list(reply.Message.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(found, key=lambda c: (c.__module__, c.__qualname__))


MESSAGES = [c for c in _all_messages() if c.__module__.startswith("albedo_actors.")]


def _fields(cls: type) -> list[str]:
    """The fields in __init__'s order, reply (keyword-only, last) left out."""
    return [name for name, p in inspect.signature(cls).parameters.items() if name != "reply"]


def _make(cls: type) -> tuple[reply.Message, dict[str, object]]:
    values = {name: object() for name in _fields(cls)}
    return cls(**values), values


def test_every_module_message_is_found() -> None:
    names = {c.__qualname__ for c in MESSAGES}
    # One from each module, so that a module's messages cannot drop out unnoticed.
    assert {"Open", "Connect", "Prepare", "Release", "Refresh", "_Dialled", "CloseAll"} <= names
    assert {client.__name__, composer.__name__, preparer.__name__, refresher.__name__,
            registry.__name__, reply.__name__} == {c.__module__ for c in MESSAGES}


@pytest.mark.parametrize("cls", MESSAGES, ids=lambda c: c.__qualname__)
def test_message_is_frozen_like_a_frozen_dataclass(cls: type) -> None:
    message, values = _make(cls)
    for name, value in values.items():
        assert getattr(message, name) is value
    for name in [*values, "reply", "anything"]:
        with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot assign to field '{name}'"):
            setattr(message, name, 1)
        with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot delete field '{name}'"):
            delattr(message, name)
    for name, value in values.items():
        assert getattr(message, name) is value


@pytest.mark.parametrize("cls", MESSAGES, ids=lambda c: c.__qualname__)
def test_message_repr_and_equality_are_the_dataclass_ones(cls: type) -> None:
    values = {name: f"v{i}" for i, name in enumerate(_fields(cls))}
    message = cls(**values)
    fields = ", ".join(f"{name}={value!r}" for name, value in values.items())
    assert repr(message) == f"{cls.__qualname__}({fields})"
    twin = cls(**values)
    assert message == message and message != twin and hash(message) != hash(twin)
    assert len({message, twin}) == 2


@pytest.mark.parametrize("cls", [c for c in MESSAGES if issubclass(c, reply.Request)], ids=lambda c: c.__qualname__)
def test_request_reply_is_fresh_or_the_one_given(cls: type) -> None:
    first, _ = _make(cls)
    second, _ = _make(cls)
    assert isinstance(first.reply, concurrent.futures.Future) and not first.reply.done()
    assert first.reply is not second.reply
    given: concurrent.futures.Future = concurrent.futures.Future()
    values = {name: object() for name in _fields(cls)}
    assert cls(**values, reply=given).reply is given
    assert inspect.signature(cls).parameters["reply"].kind is inspect.Parameter.KEYWORD_ONLY


def test_defaults_are_kept() -> None:
    assert client._Dialled(1, None, None, None).listen is None
    assert composer.SetOverlays(()).credentials is None
