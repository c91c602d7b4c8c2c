"""What a session of many servers builds once and reuses: each saved row's catalogue
(catalogue.saved) and each server's advertised operations (catalogue.naming).

The reused results must be exactly what building them again gives: the operations
(names, schemas, descriptions, order) and the warnings, on a fixture of many servers
that covers every warning advertise() gives.
"""

from __future__ import annotations

import pytest

from albedo_actors.catalogue import Catalogue
from albedo_actors.catalogue import naming
from albedo_actors.catalogue import saved as saved_module
from albedo_actors.catalogue.naming import advertise
from albedo_actors.catalogue.saved import from_json, load_current, load_current_all, to_json
from albedo_actors.config import ServerConfig

OBJECT = {"type": "object", "properties": {"text": {"type": "string"}}}


def server_catalogue(i: int) -> Catalogue:
    tools = [{"name": f"t{j}", "description": f"tool {j} of {i}", "inputSchema": {**OBJECT, "title": f"{i}.{j}"}} for j in range(3)]
    if i % 5 == 1:
        tools.append({"name": "bad", "inputSchema": {"type": "string"}})  # left out, with a warning
    if i % 7 == 2:
        tools.append({"name": "t0", "inputSchema": OBJECT})  # listed twice
        tools.append({"inputSchema": OBJECT})  # no name
    return Catalogue(
        server=f"srv-{i:03d}", era="modern", protocol_version="2026-07-28", tools=tuple(tools),
        resources=({"uri": f"file:///{i}", "name": "a file"},) if i % 2 else (),
        prompts=({"name": "greet", "arguments": [{"name": "who", "required": True}]},) if i % 3 == 0 else (),
    )


def server_config(i: int) -> ServerConfig:
    changes: dict = {}
    if i % 4 == 3:
        changes["disabled_tools"] = ("t1", "read_resource")
    if i % 6 == 5:
        changes["enabled_tools"] = ("t0", "t2", "missing")  # "missing": a warning
    return ServerConfig(name=f"srv-{i:03d}", type="stdio", command="/bin/true", **changes)


def built_again(catalogues, configs):
    """What advertise() gives without what it kept: every server built once more, by
    the function advertise() builds one server with."""
    operations: list[dict] = []
    warnings: list[str] = []
    for server, catalogue in catalogues.items():
        operations += [item.as_json() for item in naming._advertise_one(server, catalogue, configs.get(server), warnings.append)]
    return operations, warnings


def test_reused_operations_are_what_building_them_again_gives():
    catalogues = {f"srv-{i:03d}": server_catalogue(i) for i in range(60)}
    configs = {name: server_config(i) for i, name in enumerate(catalogues)}
    expected, expected_warnings = built_again(catalogues, configs)
    assert any("listed twice" in w for w in expected_warnings) and any("missing" in w for w in expected_warnings)
    naming._BUILT.clear()
    for _ in range(3):  # built, then reused twice: the same list, the same warnings, in the same order
        warnings: list[str] = []
        again = advertise(catalogues, configs, warnings.append)
        assert [item.as_json() for item in again] == expected and warnings == expected_warnings
    # A part of the servers, in another order, some without a configuration.
    part = {name: catalogues[name] for name in reversed(list(catalogues)[::3])}
    fewer = {name: configs[name] for name in list(part)[::2]}
    warnings = []
    reused = [item.as_json() for item in advertise(part, fewer, warnings.append)]
    assert (reused, warnings) == built_again(part, fewer)


def test_another_configuration_or_catalogue_of_a_server_is_built_again():
    first = server_catalogue(0)
    plain = ServerConfig(name="srv-000", type="stdio", command="/bin/true")
    assert [a.operation for a in advertise({"srv-000": first}, {"srv-000": plain}, lambda _w: None)] == ["t0", "t1", "t2", "get_prompt"]
    off = ServerConfig(name="srv-000", type="stdio", command="/bin/true", disabled_tools=("t1",))
    assert [a.operation for a in advertise({"srv-000": first}, {"srv-000": off}, lambda _w: None)] == ["t0", "t2", "get_prompt"]
    warnings: list[str] = []
    only = ServerConfig(name="srv-000", type="stdio", command="/bin/true", enabled_tools=("t2", "nope"))
    assert [a.operation for a in advertise({"srv-000": first}, {"srv-000": only}, warnings.append)] == ["t2"]
    assert warnings == ["server 'srv-000': enabledTools names 'nope', which it does not offer"]
    assert [a.operation for a in advertise({"srv-000": first}, {}, lambda _w: None)] == ["t0", "t1", "t2", "get_prompt"]
    # An equal catalogue that is another object (a server listed anew) is built again.
    other = Catalogue(server="srv-000", era="modern", protocol_version="2026-07-28", tools=({"name": "new", "inputSchema": OBJECT},))
    assert [a.operation for a in advertise({"srv-000": other}, {}, lambda _w: None)] == ["new"]


def test_the_same_saved_row_gives_the_same_catalogue_and_a_changed_one_another(store):
    store.save_catalogue("a", "key", "modern", to_json(server_catalogue(1)))
    store.save_catalogue("b", "key", "modern", to_json(server_catalogue(2)))
    first = load_current_all(store, {"a": "key", "b": "key"})
    again = load_current_all(store, {"a": "key", "b": "key"})
    assert first["a"] is again["a"] and first["b"] is again["b"]
    assert load_current(store, "a", "key") is first["a"]
    assert first["a"] == from_json("a", to_json(server_catalogue(1)))
    # The row of "a" saved again with another listing: a new catalogue, not the kept one.
    store.save_catalogue("a", "key", "modern", to_json(server_catalogue(3)))
    changed = load_current_all(store, {"a": "key", "b": "key"})
    assert changed["b"] is first["b"] and changed["a"] is not first["a"]
    assert [t["name"] for t in changed["a"].tools] == [t["name"] for t in server_catalogue(3).tools]
    assert [a.operation for a in advertise({"a": changed["a"]}, {}, lambda _w: None)] == ["t0", "t1", "t2", "read_resource", "get_prompt"]


def test_a_row_that_is_not_a_catalogue_raises_each_time(store):
    saved_module._BUILT.pop("a", None)  # kept by another test of this process
    store.save_catalogue("a", "key", "modern", {"tools": []})  # no era: not a catalogue
    for _ in range(2):
        assert isinstance(load_current_all(store, {"a": "key"})["a"], ValueError)
        with pytest.raises(ValueError):
            load_current(store, "a", "key")
    assert "a" not in saved_module._BUILT
