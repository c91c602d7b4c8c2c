"""Two processes opening a fresh SQLite store at once: ``PRAGMA journal_mode=wal`` on a
database another connection is switching to WAL answers SQLITE_BUSY at once, without the
busy handler (seen as ``database is locked`` from one ``albedo-mcp serve`` of two started
together, about once in 100 pairs here). The store's connect tries it again, backing off,
within its busy timeout.

The race itself cannot be produced on demand, so the test gives a real store's connect the
answer SQLite gives then (its ``OperationalError``), twice, and then the real connection.
"""

from __future__ import annotations

import sqlite3

import peewee
import pytest

from albedo_actors.errors import StoreError
from albedo_actors.store import open_store


def busy_then_real(monkeypatch, times: int) -> list[int]:
    real = peewee.SqliteDatabase._connect
    calls = []

    def connect(self):
        calls.append(1)
        if len(calls) <= times:
            raise sqlite3.OperationalError("database is locked")
        return real(self)

    monkeypatch.setattr(peewee.SqliteDatabase, "_connect", connect)
    return calls


def test_a_store_opened_while_another_switches_it_to_wal_waits_and_opens(home, monkeypatch):
    calls = busy_then_real(monkeypatch, 2)
    store = open_store(str(home))
    try:
        assert len(calls) >= 3
        assert store.get_credentials("x").empty
    finally:
        store.close()


def test_other_operational_errors_are_not_tried_again(home, monkeypatch):
    real = peewee.SqliteDatabase._connect
    calls = []

    def connect(self):
        calls.append(1)
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(peewee.SqliteDatabase, "_connect", connect)
    with pytest.raises(StoreError, match="unable to open database file"):
        open_store(str(home))
    assert len(calls) == 1
    monkeypatch.setattr(peewee.SqliteDatabase, "_connect", real)
