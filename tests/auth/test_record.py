"""The stored OAuth record: tied to its URL, never showing a token."""

from __future__ import annotations

import time

from albedo_actors.auth.record import OAuthRecord, from_credentials, usable
from albedo_actors.auth.tokens import TokenSet
from albedo_actors.store.records import Credentials

URL = "https://mcp.example.com/mcp"


def signed_in(**changes):
    record = OAuthRecord(url=URL).with_tokens(
        TokenSet(access_token="AT-secret", refresh_token="RT-secret", expires_at=time.time() + 3600, scope="mcp"))
    return record.replace(**changes) if changes else record


def test_a_record_round_trips_through_credentials():
    record = signed_in(issuer="https://as.example.com", client_id="c1")
    again = from_credentials(Credentials(oauth=record.to_json()))
    assert again == record


def test_a_record_for_another_url_is_never_usable():
    record = signed_in()
    assert usable(record, URL) is record
    assert usable(record, URL + "/") is None
    assert usable(record, "https://other.example.com/mcp") is None
    assert usable(None, URL) is None


def test_neither_repr_nor_view_shows_a_token_or_secret():
    record = signed_in(client_secret="CS-secret", client_id="c1", client_kind="registered")
    for text in (repr(record), str(record.view()), repr(Credentials(oauth=record.to_json()))):
        assert "AT-secret" not in text and "RT-secret" not in text and "CS-secret" not in text
    assert record.view()["state"] == "signed_in" and record.view()["client"]["id"] == "c1"


def test_signing_out_drops_the_tokens_and_keeps_the_client_and_step_up():
    record = signed_in(client_id="c1", step_up="mcp admin").signed_out("needs_sign_in", "the refresh was refused")
    assert (record.access_token, record.refresh_token, record.expires_at, record.scope) == (None, None, None, None)
    assert (record.client_id, record.step_up, record.state) == ("c1", "mcp admin", "needs_sign_in")


def test_expiring_means_within_a_minute_or_past_half_of_a_short_life():
    hour_ago = time.time() - 3600
    assert not signed_in().expiring()
    assert signed_in(expires_at=time.time() + 30, obtained_at=hour_ago).expiring()
    assert signed_in(expires_at=time.time() + 30, obtained_at=None).expiring()
    assert not signed_in(expires_at=None).expiring()
    short = signed_in(expires_at=time.time() + 30)  # a 30 s token, just issued
    assert not short.expiring() and short.expiring(now=short.obtained_at + 16)


def test_an_unreadable_record_is_none_and_an_unknown_state_needs_a_sign_in():
    assert from_credentials(Credentials(oauth={"state": "signed_in"})) is None  # no url
    assert from_credentials(Credentials(oauth={"url": URL, "state": "bogus"})).state == "needs_sign_in"
    assert from_credentials(Credentials(oauth={"url": URL, "access_token": 5})) is None
    assert from_credentials(Credentials(oauth={"url": URL, "expires_at": "soon"})) is None


def test_a_client_given_to_the_settings_follows_the_server_to_a_new_url_and_its_tokens_do_not(tmp_path):
    import dataclasses

    from albedo_actors.settings import SecretInput, ServerChanges, ServerSpec, Settings
    from albedo_actors.store import open_store

    store = open_store(str(tmp_path))
    try:
        settings = Settings(str(tmp_path), store)
        settings.add(ServerSpec(name="g", url=URL, enabled=False), SecretInput(oauth_client=("hand", "s3cret")))
        store.update_credentials("g", lambda c: dataclasses.replace(c, oauth=from_credentials(c).with_tokens(
            TokenSet(access_token="AT-secret", refresh_token="RT-secret")).to_json()))
        view = settings.edit("g", ServerChanges(url="https://moved.example.com/mcp"))
        record = from_credentials(store.get_credentials("g"))
        assert record.url == "https://moved.example.com/mcp"
        assert (record.configured_client_id, record.configured_client_secret) == ("hand", "s3cret")
        assert record.access_token is None and record.refresh_token is None
        assert view.auth["client"] == {"kind": "configured", "id": "hand", "issuer": None}
        assert "s3cret" not in repr(view) and "s3cret" not in str(view.as_json())
        settings.edit("g", secrets=SecretInput(oauth_client=("hand", "-")))
        assert from_credentials(store.get_credentials("g")).configured_client_secret is None
        settings.edit("g", secrets=SecretInput(oauth_client=("-", None)))
        assert from_credentials(store.get_credentials("g")).configured_client_id is None
    finally:
        store.close()
