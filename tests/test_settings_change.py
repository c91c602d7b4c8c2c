"""Issue 25, Deliver 8: one settings change written once (:class:`albedo_actors.settings.Change`).

Against real stdio servers (the fault server): a change that adds two servers, one of
which cannot start, keeps nothing; its JSON form goes both ways.
"""

from __future__ import annotations

import sys

import pytest

from helpers import FAULT_SERVER

pytest.importorskip("albedo_actors.store")

from albedo_actors.errors import ConfigError, SettingsConflict  # noqa: E402
from albedo_actors.settings import Change, SecretInput, Settings  # noqa: E402
from albedo_actors.store import open_store  # noqa: E402


@pytest.fixture
def settings(tmp_path):
    store = open_store(str(tmp_path))
    yield Settings(str(tmp_path), store)
    store.close()


def entry(*flags: str) -> dict:
    return {"type": "stdio", "command": sys.executable, "args": [FAULT_SERVER, *flags]}


def test_a_change_is_all_or_nothing_across_servers(tmp_path, settings):
    good = Change(servers={"one": entry()}, secrets={"one": SecretInput(env={"K": "kept-1"})}, added=frozenset({"one"}))
    assert settings.apply(good)
    before = (tmp_path / "extensions.json").read_text()
    both = Change(servers={"two": entry(), "three": entry("--stderr-and-exit", "3")},
                  secrets={"one": SecretInput(env={"K": "changed-2"}), "two": SecretInput(env={"T": "t-2"})})
    with pytest.raises(SettingsConflict, match="three"):
        settings.apply(both)
    assert (tmp_path / "extensions.json").read_text() == before
    assert dict(settings.store.get_credentials("one").env) == {"K": "kept-1"}
    assert settings.store.get_credentials("two").empty
    with pytest.raises(ConfigError, match="exists already"):
        settings.apply(good)  # "added": never an edit of a server of the same name


def test_change_json_goes_both_ways_and_never_quotes_a_value():
    change = Change(servers={"web": {"type": "http", "url": "http://127.0.0.1:9/mcp"}, "old": None},
                    secrets={"web": SecretInput(bearer_token="b-1", headers={"X-A": "a-1", "X-B": "", "X-C": "-"})},
                    sign_out=frozenset({"web"}), enabled={"mcp": True}, added=frozenset({"web"}))
    body = change.to_json()
    assert body["secrets"]["web"] == {"bearerToken": "b-1", "headers": {"X-A": "a-1", "X-B": "", "X-C": None}, "oauth": None}
    again = Change.from_json(body)
    assert again.to_json() == body
    assert again.secrets["web"].headers == {"X-A": "a-1", "X-B": "", "X-C": "-"}
    assert again.sign_out == {"web"} and again.added == {"web"}
    with pytest.raises(ConfigError) as refused:
        Change.from_json({"secrets": {"web": {"headers": {"X-A": 12345678}}}})
    assert "12345678" not in str(refused.value)
    assert "b-1" not in repr(change) and "a-1" not in repr(change)


def test_the_service_patch_takes_several_headers_and_the_older_one_header_form(tmp_path, settings):
    from albedo_actors.service.app import patch

    off = {"type": "http", "url": "http://127.0.0.1:9/mcp", "enabled": False}  # switched off: not tried
    assert patch(settings, {"servers": {"web": off}, "added": ["web"],
                            "secrets": {"web": {"headers": {"X-A": "a-1", "X-B": "b-1"}}}})
    assert settings.store.get_credentials("web").headers == (("X-A", "a-1"), ("X-B", "b-1"))
    assert patch(settings, {"secrets": {"web": {"headers": {"x-a": "", "X-B": None, "X-C": "c-1"}}}})
    assert settings.store.get_credentials("web").headers == (("x-a", "a-1"), ("X-C", "c-1"))
    with pytest.raises(ConfigError, match="X-D header has no stored value to keep"):
        patch(settings, {"secrets": {"web": {"headers": {"X-D": ""}}}})
    with pytest.raises(ConfigError, match="give the X-E header by its name alone") as refused:
        patch(settings, {"secrets": {"web": {"headers": {"X-E: value-77": "v"}}}})
    assert "value-77" not in str(refused.value)
    assert patch(settings, {"secrets": {"web": {"header": None}}})  # the older form: every header removed
    assert settings.store.get_credentials("web").headers == ()
    assert [view.credentials for view in settings.servers()] == [()]
