"""Sealing is unambiguous, and a row nothing can read is its server's error alone (issue 23
hole 10), through the real command line and a real host, on SQLite and PostgreSQL.

Before: a plaintext bearer token ``enc:v1:...`` was stored as it was and read back as a
sealed value; from then on ``servers``, ``tools`` and every host preparation of the home
failed (exit 7), ``store encrypt`` stopped at it, and only ``remove`` recovered. Now the
value is refused in one line before anything is written, and a row that cannot be read
(an older albedo's plaintext ``enc:v1:`` value, a damaged sealed value) leaves every
other server listed, prepared and callable; its own line says to remove and add it.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from albedo_actors.config import load
from albedo_actors.runtime import Runtime
from albedo_actors.store import Credentials, open_store
from albedo_actors.store.models import CredentialRow
from albedo_actors.store.sealing import StoreKeys, new_key, parse_key
from helpers import FAULT_SERVER, store_cli as albedo, store_cli_env as env_with

LOOKS_SEALED = "enc:v1:plaintext-token-0123"


def rows(backend) -> list[tuple]:
    _kind, home, url = backend
    store = open_store(home, url, keys=None)
    try:
        return list(CredentialRow.select().order_by(CredentialRow.server).tuples().execute(store._db))
    finally:
        store.close()


def write_home(home: str, **servers: dict) -> None:
    os.makedirs(home, mode=0o700, exist_ok=True)
    with open(os.path.join(home, "extensions.json"), "w") as f:
        json.dump({"mcp": {"servers": servers}}, f)


GOOD = {"type": "stdio", "command": sys.executable, "args": [FAULT_SERVER]}
BROKEN = {"type": "http", "url": "http://127.0.0.1:9/mcp"}  # never dialled: left out before any dial


@pytest.mark.parametrize("keyed", [False, True], ids=["no key", "key"])
@pytest.mark.parametrize("options", [["--bearer-token"], ["--header", "X-Api-Key"]], ids=["bearer", "header"])
def test_a_plaintext_secret_that_starts_with_the_sealed_prefix_is_refused_in_one_line(backend, keyed, options):
    _kind, home, _url = backend
    write_home(home, good=GOOD)
    env = env_with(ALBEDO_STORE_KEY=new_key()) if keyed else env_with()
    before = rows(backend)
    run = albedo(backend, "add", "http://127.0.0.1:9/mcp", "--name", "evil", "--disabled", *options,
                 env=env, stdin=LOOKS_SEALED + "\n")
    assert run.returncode == 2, run.stderr
    [line] = run.stderr.splitlines()
    assert "server 'evil'" in line and "starts with 'enc:v1:'" in line and LOOKS_SEALED not in line
    assert rows(backend) == before
    assert "evil" not in open(os.path.join(home, "extensions.json")).read()
    # The home is as it was: servers lists and exits 0.
    listed = albedo(backend, "servers", env=env)
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr
    assert [line.split("\t")[:3] for line in listed.stdout.splitlines()] == [["good", "stdio", "not discovered yet"]]


def plant_unreadable(backend, key: str | None, value: str) -> None:
    """``broken`` (a configured HTTP server) with a stored bearer token and ``good`` with an
    env secret, written by albedo; then ``broken``'s bearer column set to ``value`` as a
    damaged database (or an older albedo) holds it."""
    _kind, home, url = backend
    store = open_store(home, url, keys=StoreKeys(parse_key(key, "k")) if key else None)
    try:
        store.put_credentials("good", Credentials(env={"TOKEN": "good-secret"}))
        store.put_credentials("broken", Credentials(bearer_token="tok"))
        CredentialRow.update(bearer_token=value).where(CredentialRow.server == "broken").execute(store._db)
    finally:
        store.close()


def damaged_sealed(key: str) -> str:
    sealed = StoreKeys(parse_key(key, "k")).seal(("credentials", "broken", "bearer_token"), "tok")
    return sealed[:-3] + ("AAA" if sealed[-3:] != "AAA" else "BBB")


CASES = {
    # An older albedo stored the plaintext token "enc:v1:..." as it was; no key is set.
    "older plaintext": (None, lambda key: LOOKS_SEALED, "start with 'enc:v1:' but are not an encrypted value"),
    # A sealed value with a character changed, under the key given.
    "damaged sealed": ("key", damaged_sealed, "do not decrypt under the key given"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_unreadable_row_leaves_every_other_server_working(backend, case):
    _kind, home, url = backend
    keyed, value, says = CASES[case]
    key = new_key() if keyed else None
    write_home(home, good=GOOD, broken=BROKEN)
    plant_unreadable(backend, key, value(key))
    env = env_with(ALBEDO_STORE_KEY=key) if key else env_with()
    remedy = "remove the server and add it again (albedo-mcp remove NAME"

    listed = albedo(backend, "servers", env=env)
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr
    lines = {line.split("\t")[0]: line.split("\t") for line in listed.stdout.splitlines()}
    assert lines["good"][2] == "not discovered yet" and lines["good"][4] == "env TOKEN"
    assert lines["broken"][2] == "credentials unreadable" and says in lines["broken"][4] and remedy in lines["broken"][4]
    as_json = {view["name"]: view for view in json.loads(albedo(backend, "servers", "--json", env=env).stdout)}
    assert as_json["good"]["problem"] is None and remedy in as_json["broken"]["problem"]

    tools = albedo(backend, "tools", env=env)
    assert tools.returncode == 0, tools.stderr
    assert "good/echo(" in tools.stdout
    [warning] = tools.stderr.splitlines()
    assert "server 'broken'" in warning and says in warning and warning.endswith("; left out")

    called = albedo(backend, "call", "good/echo", "--args", '{"text": "still here"}', env=env)
    assert called.returncode == 0 and "still here" in called.stdout, called.stderr
    refused = albedo(backend, "call", "broken/echo", "--args", '{"text": "x"}', env=env)
    assert refused.returncode == 7, refused.stderr
    [line] = refused.stderr.splitlines()
    assert says in line and remedy in line and "Traceback" not in refused.stderr

    # A host's session prepares the others and leaves the broken one out with its line.
    store = open_store(home, url, keys=StoreKeys(parse_key(key, "k")) if key else None)
    try:
        with Runtime(home, store, config=load(home), enabled=True, background=False) as runtime:
            composition = runtime.composition()
            assert "good" in composition.catalogues and "broken" not in composition.catalogues
            assert says in composition.left_out["broken"]
            assert any("server 'broken'" in w and says in w for w in composition.warnings)
    finally:
        store.close()

    status = albedo(backend, "store", "status", env=env)
    assert status.returncode == 0, status.stderr
    if key is None:
        assert status.stdout.startswith("1 rows in clear, 1 damaged"), status.stdout
        # store encrypt seals every other row, says which one it left, and exits 7.
        key = new_key()
        env = env_with(ALBEDO_STORE_KEY=key)
        sealed = albedo(backend, "store", "encrypt", env=env)
        assert sealed.returncode == 7, sealed.stderr
        [left] = sealed.stderr.splitlines()
        assert "'broken'" in left and says in left
        assert sealed.stdout.startswith("encrypted 1 rows under key ") and "1 cannot be read" in sealed.stdout
        broken_row, good_row = rows(backend)
        assert good_row[4].startswith("enc:v1:") and broken_row[1] == LOOKS_SEALED  # good's env sealed; broken as it was

    removed = albedo(backend, "remove", "broken", env=env)
    assert removed.returncode == 0, removed.stderr
    listed = albedo(backend, "servers", env=env)
    assert listed.returncode == 0 and [line.split("\t")[0] for line in listed.stdout.splitlines()] == ["good"]
