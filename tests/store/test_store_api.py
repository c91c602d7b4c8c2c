"""The store on SQLite and PostgreSQL: round trips, limits, errors, threads, permissions."""

from __future__ import annotations

import dataclasses
import os
import stat
import threading

import pytest

from albedo_actors.errors import StoreError
from albedo_actors.store import MAX_CATALOGUE_BYTES, Credentials, SavedCatalogue, Store, open_store

CANARY = "canary-secret-7f3a"


def test_credentials_round_trip_every_field(stores):
    store = stores()
    creds = Credentials(bearer_token="tok-ü", header=("X-Api-Key", "hv"), env={"A": "1", "B": "two=2"},
                        oauth={"access_token": "at", "expires_at": 12.5, "scopes": ["a", "b"], "nested": {"x": None}})
    store.put_credentials("docs", creds)
    got = store.get_credentials("docs")
    assert got == creds
    assert got.header == ("X-Api-Key", "hv")
    assert dict(got.env) == {"A": "1", "B": "two=2"}
    assert got.oauth["scopes"] == ("a", "b") and got.oauth["nested"]["x"] is None
    with pytest.raises(TypeError):
        got.env["C"] = "3"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.bearer_token = "x"  # type: ignore[misc]


def test_missing_credentials_are_empty_and_delete_forgets(stores):
    store = stores()
    assert store.get_credentials("nope") == Credentials()
    store.put_credentials("s", Credentials(bearer_token="t"))
    store.put_credentials("s", Credentials(env={"K": "v"}))  # replaces, not merges
    assert store.get_credentials("s") == Credentials(env={"K": "v"})
    store.delete_credentials("s")
    store.delete_credentials("s")
    assert store.get_credentials("s") == Credentials()


def test_update_credentials_reads_modifies_and_writes(stores):
    store = stores()
    new = store.update_credentials("s", lambda c: dataclasses.replace(c, bearer_token="a"))
    assert new == Credentials(bearer_token="a")
    new = store.update_credentials("s", lambda c: dataclasses.replace(c, header=("H", c.bearer_token + "b")))
    assert store.get_credentials("s") == new == Credentials(bearer_token="a", header=("H", "ab"))


def test_update_credentials_rolls_back_when_fn_raises(stores):
    store = stores()
    store.put_credentials("s", Credentials(bearer_token="old"))

    def boom(c):
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        store.update_credentials("s", boom)
    assert store.get_credentials("s") == Credentials(bearer_token="old")
    # The connection is usable afterwards.
    store.update_credentials("s", lambda c: Credentials(bearer_token="new"))
    assert store.get_credentials("s").bearer_token == "new"


def test_catalogue_round_trip_overwrite_and_delete(stores):
    store = stores()
    assert store.load_catalogue("s") is None
    cat = {"tools": [{"name": "search", "inputSchema": {"type": "object"}}], "resources": [], "note": "é"}
    store.save_catalogue("s", "fp1", "2025-11-25", cat)
    saved = store.load_catalogue("s")
    assert isinstance(saved, SavedCatalogue)
    assert (saved.server, saved.fingerprint, saved.era, saved.catalogue) == ("s", "fp1", "2025-11-25", cat)
    assert saved.saved_at > 0
    store.save_catalogue("s", "fp2", "2026-07-28", {"tools": []})
    saved2 = store.load_catalogue("s")
    assert (saved2.fingerprint, saved2.era, saved2.catalogue) == ("fp2", "2026-07-28", {"tools": []})
    assert saved2.saved_at >= saved.saved_at
    store.delete_catalogue("s")
    assert store.load_catalogue("s") is None


def test_server_state_round_trip_overwrite_delete_and_no_revision_bump(stores):
    store = stores()
    assert store.load_server_states(["a", "b"]) == {}
    revision = store.revision()
    store.save_server_state("a", "down", "fp1", {"error": "server 'a': cannot start", "stderr": ["é"]})
    store.save_server_state("b", "ok", "fp2", {"tools": 3})
    found = store.load_server_states(["a", "b", "c"])
    assert set(found) == {"a", "b"}
    assert (found["a"].state, found["a"].fingerprint, found["a"].report) == ("down", "fp1", {"error": "server 'a': cannot start", "stderr": ["é"]})
    assert found["a"].seen_at > 0
    store.save_server_state("a", "ok", "fp3", {})
    again = store.load_server_states(["a"])["a"]
    assert (again.state, again.fingerprint, again.report) == ("ok", "fp3", {})
    assert again.seen_at >= found["a"].seen_at
    assert store.revision() == revision  # no session is offered anything new by a state
    store.delete_server_state("a")
    assert set(store.load_server_states(["a", "b"])) == {"b"}
    with pytest.raises(StoreError, match="'a'"):
        store.save_server_state("a", "ok", "fp", {"x": float("nan")})


def test_catalogue_over_the_size_limit_is_refused_naming_the_server(stores):
    store = stores()
    store.save_catalogue("big", "fp", "e", {"tools": []})
    huge = {"tools": [{"name": "t", "description": "x" * MAX_CATALOGUE_BYTES}]}
    with pytest.raises(StoreError) as info:
        store.save_catalogue("big", "fp2", "e", huge)
    assert "'big'" in str(info.value) and "limit" in str(info.value)
    assert "\n" not in str(info.value)
    assert store.load_catalogue("big").catalogue == {"tools": []}  # the old one stays
    fits = {"d": "x" * (MAX_CATALOGUE_BYTES - 100)}
    store.save_catalogue("big", "fp3", "e", fits)
    assert store.load_catalogue("big").catalogue == fits


def test_catalogue_that_is_not_json_is_refused(stores):
    with pytest.raises(StoreError, match="'s'"):
        stores().save_catalogue("s", "fp", "e", {"x": object()})


def test_oauth_client_round_trip_per_issuer_and_redirect(stores):
    store = stores()
    assert store.get_oauth_client("https://as.example", "http://127.0.0.1:1/cb") is None
    store.put_oauth_client("https://as.example", "http://127.0.0.1:1/cb", {"client_id": "a", "client_secret": "s"})
    store.put_oauth_client("https://as.example", "http://127.0.0.1:2/cb", {"client_id": "b"})
    store.put_oauth_client("https://as.example", "http://127.0.0.1:1/cb", {"client_id": "c"})
    assert store.get_oauth_client("https://as.example", "http://127.0.0.1:1/cb") == {"client_id": "c"}
    assert store.get_oauth_client("https://as.example", "http://127.0.0.1:2/cb") == {"client_id": "b"}
    assert store.get_oauth_client("https://other.example", "http://127.0.0.1:2/cb") is None


def test_migrations_run_once_and_are_recorded(stores):
    first = stores()
    assert first.migrations_applied == (1, 2, 3, 4, 5, 6)
    assert first.schema_versions() == [1, 2, 3, 4, 5, 6]
    second = stores()
    assert second.migrations_applied == ()
    assert second.schema_versions() == [1, 2, 3, 4, 5, 6]


def test_secrets_never_in_repr_or_errors(stores):
    creds = Credentials(bearer_token=CANARY, header=("X-K", CANARY), env={"K": CANARY}, oauth={"t": CANARY})
    assert CANARY not in repr(creds) and CANARY not in str(creds)
    assert "X-K" in repr(creds) and "'K'" in repr(creds)
    store = stores()
    store.put_credentials("s", creds)
    assert CANARY not in repr(store)
    store.close()
    with pytest.raises(StoreError) as info:
        store.get_credentials("s")
    assert "closed" in str(info.value) and CANARY not in str(info.value)


def test_store_is_shared_between_threads_and_close_closes_every_connection(stores):
    store = stores()
    errors = []

    def work(n):
        try:
            for i in range(20):
                store.update_credentials("shared", lambda c, n=n, i=i: dataclasses.replace(
                    c, env={**c.env, f"t{n}_{i}": "1"}))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert len(store.get_credentials("shared").env) == 80
    assert len(store._db._conns) >= 1
    store.close()
    assert store._db._conns == {}
    store.close()  # idempotent


def test_unknown_url_scheme_is_refused(tmp_path):
    with pytest.raises(StoreError, match="mysql"):
        open_store(str(tmp_path), "mysql://u:pw@h/db")


def test_unreachable_postgres_is_one_line_without_the_password(tmp_path):
    pytest.importorskip("psycopg2")
    with pytest.raises(StoreError) as info:
        open_store(str(tmp_path), f"postgresql://user:{CANARY}@127.0.0.1:1/db")
    message = str(info.value)
    assert CANARY not in message and "\n" not in message
    assert "127.0.0.1:1" in message


def test_database_url_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ALBEDO_DATABASE_URL", f"sqlite:///{tmp_path}/other.db")
    store = open_store(str(tmp_path / "home"))
    try:
        store.put_credentials("s", Credentials(bearer_token="t"))
    finally:
        store.close()
    assert os.path.exists(tmp_path / "other.db")
    assert not os.path.exists(tmp_path / "home" / "albedo.db")


def test_sqlite_files_are_private(tmp_path):
    old = os.umask(0o022)
    try:
        home = tmp_path / "newhome"
        store = open_store(str(home))
        try:
            store.put_credentials("s", Credentials(bearer_token="t"))
            db = home / "albedo.db"
            assert stat.S_IMODE(os.stat(home).st_mode) == 0o700
            for name in (db, str(db) + "-wal", str(db) + "-shm"):
                assert os.path.exists(name), name
                assert stat.S_IMODE(os.stat(name).st_mode) == 0o600, name
            journal = store._db.execute_sql("PRAGMA journal_mode").fetchone()[0]
            sync = store._db.execute_sql("PRAGMA synchronous").fetchone()[0]
            assert (journal, sync) == ("wal", 2)
        finally:
            store.close()
    finally:
        os.umask(old)


def test_existing_home_keeps_its_mode_and_the_database_is_private(tmp_path):
    # Only directories albedo creates are 0700 (issue 10): an existing one is not ours to chmod.
    home = tmp_path / "loose"
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)
    open_store(str(home)).close()
    assert stat.S_IMODE(os.stat(home).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(home / "albedo.db").st_mode) == 0o600


def test_store_type_is_exported():
    assert Store.__name__ == "Store"


def test_delete_forgets_the_registration_the_server_signed_in_with_unless_another_server_uses_it(stores):
    """Issue 25, item 6: ``remove`` forgets a dynamic registration only when no other
    server still uses it (its record names it and was not signed out)."""
    store = stores()
    issuer, redirect = "https://as.example", "http://127.0.0.1:33418/callback"

    def signed_in(server: str, client_id: str, state: str = "signed_in") -> None:
        store.put_credentials(server, Credentials(oauth={"url": "https://x.example/mcp", "state": state,
                                                         "client_kind": "registered", "issuer": issuer,
                                                         "client_id": client_id}))

    store.put_oauth_client(issuer, redirect, {"client_id": "shared"})
    signed_in("g", "shared")
    signed_in("h", "shared")
    signed_in("k", "other")  # another client of the same issuer: not a use
    store.delete_credentials("g")
    assert store.get_oauth_client(issuer, redirect)["client_id"] == "shared"  # h uses it
    signed_in("h", "shared", state="signed_out")  # h signed out: it uses it no more
    signed_in("g", "shared")
    store.delete_credentials("g")
    assert store.get_oauth_client(issuer, redirect) is None
    assert store.get_credentials("h").oauth["client_id"] == "shared"  # h's own record is untouched


def test_trust_rows_first_use_keeps_the_first_a_hold_is_one_row_and_approval_bumps(stores):
    from albedo_actors.store.records import HeldDefinition, TrustedDefinition

    store = stores()
    one = TrustedDefinition("dict", "tool", "lookup", "d1", "w1", {"name": "lookup", "description": "one"})
    store.record_trust("dict", [one], [])
    # A second first use (another host at once) never replaces what was trusted.
    store.record_trust("dict", [TrustedDefinition("dict", "tool", "lookup", "d2", "w2", {"name": "lookup"})], [])
    [trusted], [] = store.load_trust(["dict"])["dict"]
    assert (trusted.digest, trusted.definition) == ("d1", {"name": "lookup", "description": "one"})
    assert store.load_trust(["dict"], definitions=False)["dict"][0][0].definition == {}
    hold = HeldDefinition("dict", "tool", "lookup", "changed", ("description",), "d3", "w3", {"name": "lookup", "description": "3"})
    assert [h.name for h in store.record_trust("dict", [], [hold], keep=[("tool", "lookup")])] == ["lookup"]
    assert store.record_trust("dict", [], [hold], keep=[("tool", "lookup")]) == []  # known already: not told again
    before = store.revision()
    assert store.approve_held("dict", [("tool", "other")], "cli") == []
    assert store.revision() == before  # nothing approved, nothing moved
    [approved] = store.approve_held("dict", None, "cli")
    assert approved.name == "lookup" and store.revision() > before
    [trusted], held = store.load_trust(["dict"])["dict"]
    assert trusted.digest == "d3" and held == []
    assert [(e.event, e.who) for e in store.trust_history("dict")] == [("approved", "cli"), ("held", None), ("trusted", None)]
    store.record_trust("dict", [], [hold], keep=[("tool", "lookup")])
    store.record_trust("dict", [], [], keep=[])  # gone, or back as trusted: the hold row goes
    assert store.load_trust(["dict"])["dict"][1] == []
