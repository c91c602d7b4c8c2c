"""The settings service over a store with one row nothing can read, and a secret that
would read as sealed (issue 23 hole 10), over real HTTP.

GET /api/mcp lists every server (the broken one with its ``problem`` line, which says
what to do), a save of another server works, and a PATCH whose bearer token starts with
``enc:v1:`` is a 400 of one line that writes nothing.
"""

from __future__ import annotations

from albedo_actors.store.models import CredentialRow

LOOKS_SEALED = "enc:v1:plaintext-token-0123"


def test_one_unreadable_row_is_that_servers_problem_and_the_api_serves_the_others(svc):
    api = {"type": "http", "url": "http://127.0.0.1:9/mcp", "enabled": False}
    answer = svc.patch({"servers": {"api": api, "docs": svc.stdio_entry(enabled=False)},
                        "secrets": {"api": {"bearerToken": "tok"}, "docs": {"env": {"DOCS_TOKEN": "v"}}}})
    assert answer.status_code == 200, answer.text
    # An older albedo stored a plaintext token that starts with the prefix.
    CredentialRow.update(bearer_token=LOOKS_SEALED).where(CredentialRow.server == "api").execute(svc.store._db)

    listed = svc.api("GET", "/api/mcp")
    assert listed.status_code == 200, listed.text
    views = {view["name"]: view for view in listed.json()["servers"]}
    assert views["docs"]["problem"] is None and views["docs"]["credentials"] == ["env DOCS_TOKEN"]
    assert views["api"]["state"] == "credentials unreadable" and views["api"]["credentials"] == []
    assert "not an encrypted value" in views["api"]["problem"] and "albedo-mcp remove NAME" in views["api"]["problem"]
    assert LOOKS_SEALED not in listed.text

    # Saving another server works while that row stays as it is.
    saved = svc.patch({"servers": {"docs": svc.stdio_entry()}})
    assert saved.status_code == 200, saved.text
    assert CredentialRow.select(CredentialRow.bearer_token).where(CredentialRow.server == "api").scalar(svc.store._db) \
        == LOOKS_SEALED


def test_a_bearer_token_that_starts_with_the_sealed_prefix_is_a_400_that_writes_nothing(svc):
    before = svc.file_bytes()
    answer = svc.patch({"servers": {"api": {"type": "http", "url": "http://127.0.0.1:9/mcp", "enabled": False}},
                        "secrets": {"api": {"bearerToken": LOOKS_SEALED}}})
    assert answer.status_code == 400, answer.text
    assert "starts with 'enc:v1:'" in answer.text and "server 'api'" in answer.text and LOOKS_SEALED not in answer.text
    assert svc.file_bytes() == before and CredentialRow.select().count(svc.store._db) == 0
