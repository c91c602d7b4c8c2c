"""The package's import graph keeps the layers of docs/design.rst's "Layout".

Read from the source (every ``import`` and ``from ... import``, at module level or
inside a function), so a layer that imports above itself, or any import cycle,
fails here before it can hide behind a lazy import.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "albedo_actors"
ROOT = "albedo_actors"

# Lowest first. A module may import its own layer and the layers below it, and the
# package root (which holds only ``__version__`` and imports nothing).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("wire", ("wire",)),
    ("errors", ("errors",)),
    ("leaves", ("safefiles", "config")),
    ("transport", ("transport",)),
    ("store", ("store",)),
    ("catalogue", ("catalogue",)),
    ("auth", ("auth",)),
    ("connection", ("connection",)),
    ("actors", ("actors",)),
    # The settings service sits among the faces: it serves Settings and a Runtime, and
    # the CLI goes through it when one runs.
    ("faces", ("runtime", "binding", "settings", "settings_watch", "session", "conformance", "service", "cli", "demo", "__main__")),
]

# Modules that sit lower than their folder: the store's frozen records are pure data
# (standard library only) that the layers below the store name as types, under
# ``if TYPE_CHECKING:`` so that nothing below the store loads peewee.
LEAF_MODULES = {"albedo_actors.store.records"}

# The narrower rules DESIGN.md states, checked on their own so a failure names them.
ONLY = {
    "wire": {"wire"},
    "errors": {"wire", "errors"},
    "safefiles": {"safefiles"},
    "config": {"wire", "errors", "safefiles", "config"},
    "transport": {"wire", "errors", "transport"},
}
NEVER = {
    "store": {"actors", "connection", "auth", "catalogue"},
    "catalogue": {"actors", "connection", "auth", "store"},
    "auth": {"actors", "connection"},
    "connection": {"actors"},
}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(modules: dict[str, pathlib.Path]) -> dict[str, set[str]]:
    """module -> the modules of ours it names (a ``from package import submodule`` is the submodule)."""
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names if alias.name.split(".")[0] == ROOT)
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(module, path.name == "__init__.py", node)
                if target.split(".")[0] != ROOT:
                    continue
                named = [f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in modules]
                targets.update(named or [target])
        graph[module] = {t for t in targets if t != module}
    return graph


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _rank(module: str) -> int:
    if module in LEAF_MODULES:
        return 2
    top = _top(module)
    for rank, (_name, tops) in enumerate(LAYERS):
        if top in tops:
            return rank
    raise AssertionError(f"{module} is in no layer; add its folder to LAYERS (and to docs/design.rst's Layout)")


MODULES = _modules()
GRAPH = _imports(MODULES)


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        if module != ROOT:
            _rank(module)


def test_the_package_root_and_the_leaf_modules_import_nothing_of_ours() -> None:
    for module in (ROOT, *LEAF_MODULES):
        assert GRAPH[module] == set(), f"{module} imports {sorted(GRAPH[module])}"


def test_below_the_store_the_records_are_named_only_for_types() -> None:
    # A run-time import of store.records would load the store package (and peewee).
    for module, path in MODULES.items():
        if module == ROOT or module in LEAF_MODULES or _rank(module) >= _rank("albedo_actors.store.store"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        guarded = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
                   for n in ast.walk(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("store.records"):
                assert id(node) in guarded, f"{module} imports store.records at run time (line {node.lineno}); name it under TYPE_CHECKING"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != ROOT))
def test_no_layer_imports_above_itself(module: str) -> None:
    above = sorted(t for t in GRAPH[module] if t != ROOT and _rank(t) > _rank(module))
    assert not above, f"{module} ({LAYERS[_rank(module)][0]}) imports the higher layer(s): {above}"


@pytest.mark.parametrize("layer", sorted(ONLY))
def test_low_layers_import_only_what_design_allows(layer: str) -> None:
    wrong = sorted(f"{m} -> {t}" for m in MODULES if _top(m) == layer
                   for t in GRAPH[m] if t != ROOT and t not in LEAF_MODULES and _top(t) not in ONLY[layer])
    assert not wrong, f"{layer} may import only {sorted(ONLY[layer])}: {wrong}"


@pytest.mark.parametrize("layer", sorted(NEVER))
def test_layers_below_actors_never_import_what_design_forbids(layer: str) -> None:
    wrong = sorted(f"{m} -> {t}" for m in MODULES if _top(m) == layer
                   for t in GRAPH[m] if t not in LEAF_MODULES and _top(t) in NEVER[layer])
    assert not wrong, f"{layer} must not import {sorted(NEVER[layer])}: {wrong}"


def test_there_is_no_import_cycle() -> None:
    # Tarjan's strongly connected components, iteratively: any component of two or more
    # modules is a cycle (every import counts, a function-local one too).
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles: list[list[str]] = []
    counter = 0
    for start in sorted(GRAPH):
        if start in index:
            continue
        work = [(start, iter(sorted(GRAPH[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in GRAPH:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(GRAPH[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    assert not cycles, f"import cycles: {cycles}"


def test_the_graph_is_read_from_real_imports() -> None:
    # The reader itself: known edges of the current layout are seen (so an empty graph
    # cannot pass every rule above).
    assert "albedo_actors.wire.jsonrpc" in GRAPH["albedo_actors.transport.http"]
    assert "albedo_actors.connection.channel" in GRAPH["albedo_actors.connection.http.link"]
    assert any(t.startswith("albedo_actors.actors.") for t in GRAPH["albedo_actors.runtime"])


def test_no_module_imports_another_modules_underscore_names() -> None:
    """A name that starts with ``_`` is its module's own: no other module of the package
    imports it (``from .x import _helper``); a shared helper is made public instead.
    The rule is for ``albedo_actors/`` only: the tests may still reach private names."""
    offenders = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            target = _resolve(module, path.name == "__init__.py", node)
            if target.split(".")[0] != ROOT or target == module:
                continue
            private = [alias.name for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")]
            offenders.extend(f"{module} imports {target}.{name}" for name in private)
    assert not offenders, "; ".join(offenders)
