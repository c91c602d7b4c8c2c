"""ServerAuth's refresher seam (issue 12): a Protocol it declares, not an actor it asks."""

from __future__ import annotations

import ast
import concurrent.futures
import os

import pytest

import albedo_actors.auth.server_auth as server_auth_module
from albedo_actors.actors.refresher import TokenRefresher, refresh_by
from albedo_actors.auth.server_auth import ServerAuth
from albedo_actors.config import ServerConfig
from albedo_actors.errors import AuthError, NeedsSignIn
from albedo_actors.store import open_store

SERVER = ServerConfig(name="docs", type="http", url="https://docs.invalid/mcp")


@pytest.fixture
def store(tmp_path):
    opened = open_store(str(tmp_path))
    yield opened
    opened.close()


def test_server_auth_imports_neither_pykka_nor_the_actors():
    with open(server_auth_module.__file__, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    imported = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert not {name for name in imported if name.startswith("pykka") or "actors" in name.split(".")}, imported


def test_a_stopped_refresher_is_a_one_line_needs_sign_in(store):
    refresher = TokenRefresher.start(store)
    refresh = refresh_by(refresher)
    refresher.stop(timeout=10)
    reply = refresh(SERVER, "old-token")  # no pykka error: a failed future, at once
    assert isinstance(reply.exception(timeout=0), AuthError)
    with pytest.raises(NeedsSignIn) as raised:
        ServerAuth(SERVER, store, refresh)._refresh("old-token")
    message = str(raised.value)
    assert "'docs'" in message and "the token refresher has stopped" in message and "\n" not in message


def test_any_callable_answering_one_future_is_a_refresher(store):
    # The seam is the Protocol, not the actor: a plain function serves.
    asked = []

    def refresh(server, seen):
        asked.append((server.name, seen))
        done: concurrent.futures.Future = concurrent.futures.Future()
        done.set_exception(AuthError(server.name, "the authorization server refused the refresh"))
        return done

    with pytest.raises(NeedsSignIn) as raised:
        ServerAuth(SERVER, store, refresh)._refresh("old-token")
    assert asked == [("docs", "old-token")] and "refused the refresh" in str(raised.value)
    assert os.linesep not in str(raised.value)
