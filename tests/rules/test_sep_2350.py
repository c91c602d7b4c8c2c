"""The client rules of SEP-2350 (tests/rules/rules.json; docs/rules.rst): the scopes of a
re-authorization after an ``insufficient_scope`` challenge, through a real
:class:`ServerHandle` and sign-in against ``servers/oauth_server.py``, whose ``add`` tool
needs the ``admin`` scope the first sign-in does not ask for.
"""

from __future__ import annotations

import pytest

from albedo_actors.errors import NeedsSignIn

from helpers import text_of
from authrules import NAME, Kit, config_of


@pytest.fixture
def kit(tmp_path, oauth_server):
    kit = Kit(str(tmp_path), NAME)  # after oauth_server: the handles stop before the servers
    yield kit
    kit.close()


STEP_UP_FLAGS = ("--scopes", "mcp admin files", "--tool-scope", "add=admin", "--challenge-scope", "mcp files")


@pytest.mark.rule("sep-2350-scope-union-on-reauth")
def test_a_step_up_asks_for_the_union_of_the_scopes_asked_before_and_the_challenged_one(kit, oauth_server):
    """After a ``403 insufficient_scope``, the re-authorization asks for the union of the
    scopes requested before and the scopes the challenge names, so nothing granted before
    is lost; the call that was refused did not run and the old tokens stay in use meanwhile."""
    server = oauth_server(*STEP_UP_FLAGS)
    config = config_of(server.url)
    signed = kit.sign_in(config)
    before = set(signed.requested_scope.split())
    assert {"mcp", "files", "offline_access"} <= before and "admin" not in before
    handle = kit.handle(config)
    handle.connect()
    with pytest.raises(NeedsSignIn) as caught:
        handle.call_tool("add", {"a": 1, "b": 2})
    assert "did not run" in str(caught.value)
    assert text_of(handle.call_tool("echo", {"text": "still"})) == "still"  # the old tokens meanwhile

    again = kit.sign_in(config)
    asked = set(server.stats()["last_authorize_scope"].split())
    assert asked >= before | {"admin"}
    assert {"mcp", "files", "admin"} <= set(again.scope.split())
    fresh = kit.handle(config)
    fresh.connect()
    assert fresh.call_tool("add", {"a": 1, "b": 2})["structuredContent"]["sum"] == 3
    assert text_of(fresh.call_tool("echo", {"text": "kept"})) == "kept"
