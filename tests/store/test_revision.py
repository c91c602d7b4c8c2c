"""The store's revision: every write that changes what a session is offered moves it, in
that write's own transaction; a token refresh that only rotates the tokens, saved
catalogues, client registrations and refresh leases never do. On SQLite and PostgreSQL
(``stores``, tests/store/conftest.py)."""

from __future__ import annotations

import dataclasses
import time

import pytest

from albedo_actors.errors import StoreError
from albedo_actors.store import Credentials

SIGNED_IN = {"url": "https://mcp.example/mcp", "state": "signed_in", "access_token": "at-1", "refresh_token": "rt-1",
             "expires_at": 1000.0, "obtained_at": 900.0, "updated_at": 900.0, "scope": "read", "account": "ann",
             "client_kind": "registered", "client_id": "c1", "issuer": "https://as.example"}


def rotated(oauth: dict, n: int) -> dict:
    """``oauth`` after a routine refresh: new tokens, times and DPoP key, nothing else."""
    return {**oauth, "access_token": f"at-{n}", "refresh_token": f"rt-{n}", "expires_at": 1000.0 + n,
            "obtained_at": 900.0 + n, "updated_at": 900.0 + n, "dpop_key": f"{{\"k\": {n}}}"}


def test_a_new_store_is_at_revision_zero_and_bump_moves_it_by_one(stores):
    store = stores()
    assert store.revision() == 0
    store.bump_revision()
    store.bump_revision()
    assert store.revision() == 2
    assert stores().revision() == 2  # another connection (another process would see the same)


def test_credentials_writes_bump_only_when_what_a_session_sees_changes(stores):
    store = stores()
    seen = [store.revision()]

    def moved() -> bool:
        now = store.revision()
        assert now >= seen[-1], "the revision went back"
        seen.append(now)
        return seen[-1] != seen[-2]

    store.put_credentials("a", Credentials(bearer_token="t1"))
    assert moved()
    store.put_credentials("a", Credentials(bearer_token="t1"))  # the same again
    assert not moved()
    store.update_credentials("a", lambda c: dataclasses.replace(c, env={"K": "v"}))
    assert moved()
    store.update_credentials("a", lambda c: dataclasses.replace(c, header=("X-Key", "h")))
    assert moved()
    store.update_credentials("a", lambda c: c)  # nothing changed
    assert not moved()
    store.update_credentials("a", lambda c: dataclasses.replace(c, oauth=SIGNED_IN))  # a sign-in
    assert moved()
    for n in (2, 3):  # routine refreshes, through both writers
        store.update_credentials("a", lambda c, n=n: dataclasses.replace(c, oauth=rotated(SIGNED_IN, n)))
        assert not moved()
    with store.holding_credentials("a") as (current, put):
        put.take_lease("me", time.time() + 30)  # a refresh's lease is no change either
        put(dataclasses.replace(current, oauth=rotated(SIGNED_IN, 4)))
        put.drop_lease("me")
    assert not moved()
    store.put_credentials("a", dataclasses.replace(store.get_credentials("a"), oauth=rotated(SIGNED_IN, 5)))
    assert not moved()
    for change in ({"state": "needs_sign_in", "access_token": None}, {"account": "bob"}, {"scope": "read write"},
                   {"client_id": "c2"}, {"url": "https://moved.example/mcp"}):
        store.update_credentials("a", lambda c, change=change: dataclasses.replace(c, oauth={**c.oauth, **change}))
        assert moved(), change
    store.delete_credentials("a")
    assert moved()
    store.delete_credentials("a")  # nothing there
    assert not moved()


def test_catalogues_clients_and_leases_do_not_move_it(stores):
    store = stores()
    store.put_credentials("a", Credentials(bearer_token="t"))
    before = store.revision()
    store.save_catalogue("a", "f" * 64, "2025-06-18", {"tools": []})
    store.delete_catalogue("a")
    store.put_oauth_client("https://as.example", "http://127.0.0.1:1/cb", {"client_id": "c"})
    store.delete_oauth_client("https://as.example", "c")
    with store.holding_credentials("a") as (_current, put):
        put.take_lease("me", time.time() + 30)
    with store.holding_credentials("a") as (_current, put):
        put.drop_lease("me")
    assert store.revision() == before


def test_the_revision_moves_with_its_write_and_a_reader_never_waits_for_a_writer(stores):
    writer, reader = stores(), stores()
    before = reader.revision()
    with writer.holding_credentials("a") as (current, put):
        put(dataclasses.replace(current, bearer_token="new"))
        # The write's transaction holds the lock (SQLite: the database's; PostgreSQL: the
        # rows'): a reader is answered at once, and sees neither the write nor its bump.
        assert reader.revision() == before
        assert reader.get_credentials("a").bearer_token is None
    assert reader.revision() == before + 1 and reader.get_credentials("a").bearer_token == "new"


def test_a_write_that_rolls_back_leaves_the_revision(stores):
    store = stores()
    before = store.revision()
    with pytest.raises(RuntimeError):
        with store.holding_credentials("a") as (current, put):
            put(dataclasses.replace(current, bearer_token="new"))
            raise RuntimeError("the caller changed its mind")
    assert store.revision() == before and store.get_credentials("a").bearer_token is None


def test_reading_the_revision_of_a_closed_store_is_a_store_error(stores):
    store = stores()
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.revision()
