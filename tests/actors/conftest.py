"""Fixtures for the actor tests."""

from __future__ import annotations

import pytest

from albedo_actors.actors.preparer import RuntimePreparer
from albedo_actors.actors.registry import ServerRegistry
from albedo_actors.store import open_store


@pytest.fixture
def runtime(tmp_path):
    """``runtime(background=True)`` starts a (store, registry, preparer) set on one home and
    returns (store, preparer proxy); every set is stopped afterwards."""
    started = []

    def start(background: bool = True):
        store = open_store(str(tmp_path / "home"))
        registry = ServerRegistry.start(str(tmp_path / "home"))
        preparer = RuntimePreparer.start(registry, store, environ={"PATH": "/usr/bin:/bin"}, background=background)
        started.append((store, registry, preparer))
        return store, preparer.proxy()

    yield start
    for store, registry, preparer in reversed(started):
        preparer.stop(timeout=30)
        registry.stop(timeout=30)
        store.close()
