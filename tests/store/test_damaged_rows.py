"""Stored rows are read with bounded nesting (issue 10 item 8): a row nested too deep is
a damaged row, one StoreError line, never a RecursionError past the handlers.

Rows are planted in the real database (SQLite and PostgreSQL) through the store's own
models, as a damaged or hostile database would hold them; the CLI test runs
``albedo-mcp tools`` against a saved catalogue made too deep.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from albedo_actors.errors import StoreError
from albedo_actors.store import Credentials
from albedo_actors.store.models import CatalogueRow, CredentialRow, OAuthClientRow
from albedo_actors.wire.jsonrpc import MAX_DEPTH
from helpers import FAULT_SERVER

RUN_TIMEOUT = 60  # a bound on each CLI run, never an expected duration


def nested(depth: int) -> str:
    """A JSON object whose nesting is ``depth`` levels of objects and arrays in all."""
    return '{"a":' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


# Far past the C decoder's recursion limit, and between it and the bound (json.loads
# reads that, then freezing the value would recurse once per level).
DEPTHS = [100_000, 900, MAX_DEPTH + 1]


def damaged(what: str, name: str, remedy: str = "") -> str:
    return (f"store: the saved {what} of {name!r} is damaged (not a JSON object nested at most "
            f"{MAX_DEPTH} deep) and cannot be used{remedy}")


@pytest.mark.parametrize("depth", DEPTHS)
def test_a_catalogue_nested_too_deep_is_a_damaged_row(stores, depth):
    store = stores()
    store.save_catalogue("s", "key", "modern", {"tools": []})
    CatalogueRow.update(catalogue=nested(depth)).where(CatalogueRow.server == "s").execute(store._db)
    with pytest.raises(StoreError) as caught:
        store.load_catalogue("s")
    assert str(caught.value) == damaged("catalogue", "s")
    # The store is still fine for everything else.
    store.save_catalogue("t", "key", "modern", {"tools": []})
    assert store.load_catalogue("t").catalogue == {"tools": []}


@pytest.mark.parametrize("column", ["env", "oauth"])
@pytest.mark.parametrize("depth", DEPTHS)
def test_credentials_nested_too_deep_are_a_damaged_row(stores, column, depth):
    store = stores()
    store.put_credentials("s", Credentials(bearer_token="t"))
    CredentialRow.update({getattr(CredentialRow, column): nested(depth)}).where(CredentialRow.server == "s").execute(store._db)
    remedy = "; remove the server and add it again (albedo-mcp remove NAME, then albedo-mcp add ...)"
    with pytest.raises(StoreError) as caught:
        store.get_credentials("s")
    assert str(caught.value) == damaged("credentials", "s", remedy)
    with pytest.raises(StoreError) as caught:  # the locked read-modify-write reads it the same way
        with store.holding_credentials("s"):
            pass
    assert str(caught.value) == damaged("credentials", "s", remedy)


@pytest.mark.parametrize("depth", DEPTHS)
def test_an_oauth_client_nested_too_deep_is_a_damaged_row(stores, depth):
    store = stores()
    store.put_oauth_client("https://as.example", "http://127.0.0.1:1/cb", {"client_id": "c"})
    OAuthClientRow.update(client=nested(depth)).where(OAuthClientRow.issuer == "https://as.example").execute(store._db)
    with pytest.raises(StoreError) as caught:
        store.get_oauth_client("https://as.example", "http://127.0.0.1:1/cb")
    assert str(caught.value) == damaged("OAuth client", "https://as.example")


def test_a_row_at_the_bound_reads(stores):
    store = stores()
    store.save_catalogue("s", "key", "modern", {"tools": []})
    CatalogueRow.update(catalogue=nested(MAX_DEPTH)).where(CatalogueRow.server == "s").execute(store._db)
    value = store.load_catalogue("s").catalogue["a"]
    for _level in range(MAX_DEPTH - 2):
        (value,) = value
    assert value == []


def test_tools_with_a_saved_catalogue_nested_too_deep_warns_once_and_dials(tmp_path):
    home = tmp_path
    (home / "extensions.json").write_text(json.dumps({"mcp": {"servers": {"f": {"command": sys.executable, "args": [FAULT_SERVER]}}}}))
    database = ["--database", f"sqlite:///{home / 'albedo.db'}"]

    def tools(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "albedo_actors", "--home", str(home), *database, "tools", *extra],
                              capture_output=True, text=True, timeout=RUN_TIMEOUT)

    first = tools()
    assert first.returncode == 0 and first.stderr == "", first.stderr
    with sqlite3.connect(home / "albedo.db") as db:
        assert db.execute("UPDATE catalogues SET catalogue = ?", (nested(100_000),)).rowcount == 1
    db.close()
    # The damaged row is not used: the server is dialled and listed as before, and what
    # it logs (shown with --verbose) is the store's one line, not a traceback.
    verbose = tools("--verbose")
    assert verbose.returncode == 0, verbose.stderr
    assert verbose.stdout == first.stdout
    assert "Traceback" not in verbose.stderr and "RecursionError" not in verbose.stderr
    warnings = [line for line in verbose.stderr.splitlines() if " WARNING " in line and "saved catalogue cannot be used" in line]
    assert len(warnings) == 1 and warnings[0].endswith(f"server 'f': its saved catalogue cannot be used ({damaged('catalogue', 'f')})")
    # The dial's catalogue replaced the damaged row: the next run reads it again.
    with sqlite3.connect(home / "albedo.db") as db:
        (saved,) = db.execute("SELECT catalogue FROM catalogues").fetchone()
    db.close()
    assert "echo" in {tool["name"] for tool in json.loads(saved)["tools"]}
    again = tools("--verbose")
    assert again.stdout == first.stdout
    assert "saved catalogue cannot be used" not in again.stderr
