"""Store fixtures: every store test runs on SQLite and on PostgreSQL (``backend``,
from tests/conftest.py); ``stores()`` opens stores on it."""

from __future__ import annotations

import pytest

from albedo_actors.store import open_store


@pytest.fixture
def stores(backend):
    """``stores()`` opens a store on this test's backend; all are closed afterwards."""
    _kind, home, url = backend
    opened = []

    def opener():
        store = open_store(home, url)
        opened.append(store)
        return store

    yield opener
    for store in opened:
        store.close()
