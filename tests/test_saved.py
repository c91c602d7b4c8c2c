"""Fingerprints of configuration and credentials, and the saved form of a catalogue."""

import json

import pytest

from albedo_actors.catalogue import Catalogue
from albedo_actors.config import ServerConfig
from albedo_actors.catalogue.saved import SAME, SAVED, STALE, fingerprint, from_json, load_current, save_discovered, to_json
from albedo_actors.store import Credentials, open_store

BASE = ServerConfig(name="docs", type="stdio", command="/bin/docs", args=("--root", "/srv"), env={"TOKEN": "DOCS_TOKEN"})


def test_the_fingerprint_is_stable_and_keeps_no_secret():
    creds = Credentials(bearer_token="tok-123456", env={"K": "secret-env-987"})
    environ = {"DOCS_TOKEN": "named-secret-555"}
    first = fingerprint(BASE, creds, environ)
    assert first == fingerprint(BASE, creds, dict(environ))
    assert len(first) == 64
    for secret in ("tok-123456", "secret-env-987", "named-secret-555"):
        assert secret not in first


DIGEST_KEY = bytes(range(32))


@pytest.mark.parametrize("key", [None, DIGEST_KEY], ids=["no key", "key"])
@pytest.mark.parametrize(
    "change",
    [
        lambda c, k, e: (ServerConfig(**{**BASE.__dict__, "args": ("--root", "/other")}), k, e),
        lambda c, k, e: (ServerConfig(**{**BASE.__dict__, "disabled_tools": ("rm",)}), k, e),
        lambda c, k, e: (c, Credentials(bearer_token="other"), e),
        lambda c, k, e: (c, Credentials(env={"K": "changed"}), e),
    ],
    ids=["args", "tool filter", "bearer token", "env entry"],
)
def test_what_changes_the_server_changes_the_fingerprint(change, key):
    creds, environ = Credentials(env={"K": "v"}), {"DOCS_TOKEN": "s"}
    before = fingerprint(BASE, creds, environ, key)
    assert fingerprint(*change(BASE, creds, environ), key) != before


def test_a_named_variable_changes_the_fingerprint_only_under_a_key():
    """Without a key the store holds no digest of a value it does not hold itself: the
    value of an environment variable the configuration names is left out (issue 23 hole 11)."""
    creds = Credentials(env={"K": "v"})
    assert fingerprint(BASE, creds, {"DOCS_TOKEN": "s"}, DIGEST_KEY) != fingerprint(BASE, creds, {"DOCS_TOKEN": "rotated"}, DIGEST_KEY)
    assert fingerprint(BASE, creds, {"DOCS_TOKEN": "s"}) == fingerprint(BASE, creds, {"DOCS_TOKEN": "rotated"}) \
        == fingerprint(BASE, creds, {})


def test_a_keyed_fingerprint_is_another_under_another_key_or_none():
    creds, environ = Credentials(bearer_token="tok"), {"DOCS_TOKEN": "s"}
    keyed = fingerprint(BASE, creds, environ, DIGEST_KEY)
    assert len(keyed) == 64 and keyed == fingerprint(BASE, creds, dict(environ), DIGEST_KEY)
    assert keyed != fingerprint(BASE, creds, environ, bytes(32)) and keyed != fingerprint(BASE, creds, environ)


def test_switching_a_server_off_and_on_or_its_call_timeout_keeps_the_fingerprint():
    assert fingerprint(ServerConfig(**{**BASE.__dict__, "enabled": False})) == fingerprint(BASE)
    assert fingerprint(ServerConfig(**{**BASE.__dict__, "call_timeout_ms": 5})) == fingerprint(BASE)


def test_a_catalogue_round_trips_through_json():
    catalogue = Catalogue(
        server="docs", era="modern", protocol_version="2026-07-28", server_info={"name": "d", "version": "1"},
        instructions="use search", capabilities={"tools": {"listChanged": True}},
        tools=({"name": "search", "inputSchema": {"type": "object"}},), prompts=({"name": "greet"},),
    )
    restored = from_json("docs", json.loads(json.dumps(to_json(catalogue))))
    assert restored == catalogue and restored.same_listing(catalogue)
    assert restored.server_info == catalogue.server_info and restored.capabilities == catalogue.capabilities


@pytest.mark.parametrize("data", [{}, {"era": "modern"}, {"era": "x", "protocolVersion": "v"},
                                  {"era": "legacy", "protocolVersion": "v", "tools": [1]}])
def test_a_damaged_saved_catalogue_is_refused(data):
    with pytest.raises(ValueError, match="saved catalogue of 'docs'"):
        from_json("docs", data)


def test_a_catalogue_discovered_before_the_saved_one_is_never_saved_over_it(tmp_path):
    """A connected client hands out the catalogue of its own discovery, which a later
    discovery (the doctor's check, on another connection) may have replaced in the store:
    that older one is STALE, not saved back (and so not reviewed: see preparer.py)."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    store = open_store(str(home))
    try:
        def listing(description: str, at: float | None) -> Catalogue:
            return Catalogue(server="docs", era="modern", protocol_version="2025-06-18", discovered_at=at,
                             tools=({"name": "lookup", "description": description, "inputSchema": {"type": "object"}},))

        first, changed = listing("Look a word up.", 100.0), listing("Look it up, and send it away.", 200.0)
        assert save_discovered(store, "docs", "k", first) == SAVED
        assert save_discovered(store, "docs", "k", changed) == SAVED
        assert load_current(store, "docs", "k").discovered_at == 200.0  # kept with the catalogue
        assert save_discovered(store, "docs", "k", first) == STALE
        assert load_current(store, "docs", "k").same_listing(changed)
        assert save_discovered(store, "docs", "k", listing("Look it up, and send it away.", 300.0)) == SAME
        assert save_discovered(store, "docs", "k", listing("Look a word up, again.", 300.0)) == SAVED
        # A discovery time unknown on either side: compared by listing only, as before.
        assert save_discovered(store, "docs", "k", listing("Built by hand.", None)) == SAVED
        assert save_discovered(store, "docs", "k", first) == SAVED
    finally:
        store.close()
