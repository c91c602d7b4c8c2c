"""Issue 23, hole 6: a save never undoes a token refresh.

A save (``Settings.edit``, ``PATCH /api/mcp``) used to read the server's credentials,
apply the typed secrets to that snapshot and write it back as a blind replace, so a
refresh that committed in between was undone and its rotated refresh token lost. Each
test here commits a real refresh-like write through a second store (another connection
to the same database, as another process's refresher would) at the moment just after
the save has read the row, and checks that both the save's change and the rotated
tokens survive.
"""

from __future__ import annotations

import dataclasses
import os
import threading

import pytest

from albedo_actors.auth.record import OAuthRecord, from_credentials
from albedo_actors.settings import SecretInput, ServerSpec, Settings
from albedo_actors.store import open_store

URL = "http://127.0.0.1:9/mcp"  # never dialled: the server is saved switched off


def signed_in(refresh_token: str) -> OAuthRecord:
    return OAuthRecord(url=URL, state="signed_in", issuer="http://127.0.0.1:9", token_endpoint="http://127.0.0.1:9/token",
                       client_kind="registered", client_id="client-1", access_token="access-" + refresh_token,
                       refresh_token=refresh_token, expires_at=4102444800.0)


class RefreshAfterRead:
    """Wraps ``store.get_credentials``: right after the save reads ``name``'s row the first
    time, another connection commits a rotation of its tokens (what a refresher does)."""

    def __init__(self, store, other, name: str) -> None:
        self.store, self.other, self.name = store, other, name
        self.original = store.get_credentials
        self.rotated = threading.Event()

    def __call__(self, server: str):
        credentials = self.original(server)
        if server == self.name and not self.rotated.is_set():
            self.rotated.set()
            self.other.update_credentials(server, lambda current: dataclasses.replace(
                current, oauth=signed_in("rotated").to_json()))
        return credentials


@pytest.fixture
def two_stores(svc_home):
    first, second = open_store(svc_home), open_store(svc_home)
    yield first, second
    second.close()
    first.close()


def seed(settings: Settings, store) -> None:
    settings.add(ServerSpec("web", url=URL, enabled=False), SecretInput(bearer_token="bearer-1"))
    store.update_credentials("web", lambda current: dataclasses.replace(current, oauth=signed_in("spent").to_json()))


def assert_both_kept(store) -> None:
    stored = store.get_credentials("web")
    record = from_credentials(stored)
    assert record is not None and record.refresh_token == "rotated", "the save undid the refresh"
    assert stored.bearer_token == "bearer-2", "the save's own change was lost"


def test_a_direct_edit_keeps_a_refresh_that_committed_after_it_read_the_row(svc_home, two_stores, monkeypatch):
    store, other = two_stores
    settings = Settings(svc_home, store)
    seed(settings, store)
    hook = RefreshAfterRead(store, other, "web")
    monkeypatch.setattr(store, "get_credentials", hook)
    settings.edit("web", secrets=SecretInput(bearer_token="bearer-2"))
    assert hook.rotated.is_set()
    monkeypatch.undo()
    assert_both_kept(store)


def test_a_patch_keeps_a_refresh_that_committed_after_it_read_the_row(svc, monkeypatch):
    other = open_store(svc.home)
    try:
        seed(Settings(svc.home, svc.store), svc.store)
        hook = RefreshAfterRead(svc.store, other, "web")
        monkeypatch.setattr(svc.store, "get_credentials", hook)
        reply = svc.patch({"secrets": {"web": {"bearerToken": "bearer-2"}}})
        assert reply.status_code == 200, reply.text
        assert hook.rotated.is_set()
        monkeypatch.undo()
        assert_both_kept(svc.store)
    finally:
        other.close()


def test_an_invalid_secret_is_refused_before_anything_is_written(svc_home, two_stores):
    store, _ = two_stores
    settings = Settings(svc_home, store)
    seed(settings, store)
    before = store.get_credentials("web")
    text = open(os.path.join(svc_home, "extensions.json"), encoding="utf-8").read()
    with pytest.raises(Exception, match="line break"):
        settings.edit("web", secrets=SecretInput(bearer_token="a\nb"))
    assert store.get_credentials("web") == before
    assert open(os.path.join(svc_home, "extensions.json"), encoding="utf-8").read() == text
