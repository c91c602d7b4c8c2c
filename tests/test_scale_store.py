"""The paths a many-server preparation takes instead of one per server (issue 14, goal 6).

- The store reads the credentials and the saved catalogues of many servers in one
  query (every row for many names, ``IN`` for a few), giving exactly what the
  one-server reads give, and a damaged row is that server's error alone.
- ``load_current_all`` keeps only catalogues saved under the current key, also for a
  store that reads one server at a time.
- A composition given the session's overlays reuses the configured operations and
  name indexes it was built with; a composition with other catalogues builds its own.
- The registry keeps a client whose configuration is equal (a reloaded file) and
  starts a new one when the fingerprint changes, without computing fingerprints for
  a first apply.
- The schema bound counts a plain value too deep like a container (the walk pushes
  only containers).
"""

from __future__ import annotations

import dataclasses

import pytest

from albedo_actors.actors.client import ServerHandle
from albedo_actors.catalogue.composition import Composition
from albedo_actors.actors.registry import ServerRegistry
from albedo_actors.catalogue import Catalogue
from albedo_actors.catalogue import saved as saved_module
from albedo_actors.catalogue.naming import MAX_SCHEMA_DEPTH, SchemaTooLarge, bound_schema
from albedo_actors.catalogue.saved import fingerprint, load_current_all, to_json
from albedo_actors.config import ServerConfig
from albedo_actors.errors import StoreError
from albedo_actors.store import Credentials
from albedo_actors.store import store as store_module
from albedo_actors.store.models import CatalogueRow

TOOL = {"name": "echo", "description": "Echo.", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}


def catalogue(server: str, tool: str = "echo") -> Catalogue:
    return Catalogue(server=server, era="modern", protocol_version="2026-07-28", tools=({**TOOL, "name": tool},))


def config(name: str, **changes) -> ServerConfig:
    return ServerConfig(name=name, type="stdio", command="/bin/true", **changes)


@pytest.mark.parametrize("count", [3, store_module.FEW + 9], ids=["few-names", "many-names"])
def test_the_many_server_reads_give_what_the_one_server_reads_give(store, count):
    names = [f"s{i}" for i in range(count)]
    for i, name in enumerate(names):
        if i % 2 == 0:
            store.put_credentials(name, Credentials(bearer_token=f"token-{i}", env={"K": f"v{i}"}))
        if i % 3 != 2:
            store.save_catalogue(name, f"key-{i}", "modern", to_json(catalogue(name)))
    store.put_credentials("not-asked", Credentials(bearer_token="other"))
    store.save_catalogue("not-asked", "k", "modern", to_json(catalogue("not-asked")))

    credentials = store.get_credentials_of(names + ["unknown"])
    assert list(credentials) == names + ["unknown"]
    assert all(credentials[name] == store.get_credentials(name) for name in names)
    assert credentials["unknown"] == Credentials()
    loaded = store.load_catalogues(names + ["unknown"])
    assert set(loaded) == {name for i, name in enumerate(names) if i % 3 != 2}  # none for servers not asked for
    assert all(loaded[name] == store.load_catalogue(name) for name in loaded)


@pytest.mark.parametrize("count", [2, store_module.FEW + 1], ids=["few-names", "many-names"])
def test_a_damaged_saved_catalogue_is_that_servers_error_alone(store, count):
    names = [f"s{i}" for i in range(count)]
    for name in names:
        store.save_catalogue(name, "key", "modern", to_json(catalogue(name)))
    CatalogueRow.update(catalogue="[" * 300).where(CatalogueRow.server == "s1").execute(store._db)
    loaded = store.load_catalogues(names)
    assert isinstance(loaded["s1"], StoreError) and "damaged" in str(loaded["s1"])
    assert all(loaded[name].catalogue["tools"][0]["name"] == "echo" for name in names if name != "s1")
    found = load_current_all(store, {name: "key" for name in names})
    assert isinstance(found["s1"], StoreError) and isinstance(found["s0"], Catalogue)


def test_a_deeply_nested_row_is_damaged_even_when_it_parses(store):
    deep = '{"tools": ' + "[" * 200 + "]" * 200 + "}"  # valid JSON, deeper than the wire's bound
    store.save_catalogue("s", "key", "modern", to_json(catalogue("s")))
    CatalogueRow.update(catalogue=deep).where(CatalogueRow.server == "s").execute(store._db)
    assert isinstance(store.load_catalogues(["s"])["s"], StoreError)
    with pytest.raises(StoreError, match="damaged"):
        store.load_catalogue("s")


class OneAtATime:
    """A store that reads one server at a time (no ``load_catalogues``)."""

    def __init__(self, store) -> None:
        self._store = store

    def load_catalogue(self, server):
        return self._store.load_catalogue(server)

    def save_catalogue(self, *args):
        return self._store.save_catalogue(*args)


@pytest.mark.parametrize("wrap", [lambda s: s, OneAtATime], ids=["many-at-once", "one-at-a-time"])
def test_only_catalogues_saved_under_the_current_key_are_used(store, wrap):
    store.save_catalogue("a", "current", "modern", to_json(catalogue("a")))
    store.save_catalogue("b", "old", "modern", to_json(catalogue("b")))
    found = load_current_all(wrap(store), {"a": "current", "b": "current", "c": "current"})
    assert set(found) == {"a"} and found["a"].tool("echo") is not None


def test_a_composition_with_overlays_reuses_the_configured_operations(tmp_path):
    handles = {name: ServerHandle.start(config(name), str(tmp_path)) for name in ("a", "b")}  # never started
    base = Composition(handles, {name: catalogue(name) for name in handles})
    shown = base.with_overlays({"ed": catalogue("ed", "edit")}, {"ed": ServerHandle.start(config("ed"), str(tmp_path))}, {}, True)
    assert shown.operations is base.operations and shown._by_pair is base._by_pair and shown._by_name is base._by_name
    assert shown.operation_warnings == base.operation_warnings
    assert [op.name for op in shown.model_operations()][-1].startswith("mcp_editor-ed_edit_")
    item, handle = shown.resolve("b/echo")
    assert item.server == "b" and handle is handles["b"]
    other = dataclasses.replace(base, catalogues={"a": catalogue("a", "other")})
    assert [op.operation for op in other.operations] == ["other"]  # other catalogues: built again
    assert other.resolve("a/other")[1] is handles["a"]


def test_the_registry_keeps_an_equal_configuration_and_replaces_a_changed_one(tmp_path, monkeypatch):
    computed = []
    real = saved_module.fingerprint

    def counting(*args, **kwargs):
        computed.append(args[0].name)
        return real(*args, **kwargs)

    monkeypatch.setattr("albedo_actors.actors.registry.fingerprint", counting)
    registry = ServerRegistry.start(str(tmp_path))
    try:
        proxy = registry.proxy()
        first = proxy.apply((config("a"), config("b"))).get(timeout=10)
        assert computed == []  # a first apply compares nothing
        again = proxy.apply((config("a"), config("b", call_timeout_ms=5))).get(timeout=10)  # equal / fingerprint-equal
        assert again.handles["a"] is first.handles["a"] and again.handles["b"] is first.handles["b"]
        changed = proxy.apply((config("a", args=("x",)), config("b"))).get(timeout=10)
        assert changed.handles["a"] is not first.handles["a"] and changed.handles["b"] is first.handles["b"]
        assert changed.retired == (first.handles["a"],)
        assert fingerprint(config("a")) != fingerprint(config("a", args=("x",)))
        for applied in (first, again, changed):
            registry.tell(_release(applied))
    finally:
        registry.stop(timeout=30)


def _release(applied):
    from albedo_actors.actors.registry import Release

    return Release(tuple(applied.handles.values()))


def test_a_plain_value_too_deep_is_too_deep():
    schema: dict = {"type": "object", "properties": {}}
    node = schema["properties"]
    for _ in range(MAX_SCHEMA_DEPTH - 2):  # the last container is at depth MAX_SCHEMA_DEPTH
        node["x"] = {}
        node = node["x"]
    bound_schema(schema)  # containers only, at the bound
    node["leaf"] = "too deep"
    with pytest.raises(SchemaTooLarge, match="deep"):
        bound_schema(schema)
