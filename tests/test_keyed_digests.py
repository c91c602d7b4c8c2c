"""Digests of secrets are keyed (issue 23 hole 11), on SQLite and PostgreSQL.

The saved catalogue's fingerprint covers the server's secrets and is stored in the clear
beside them. The review recomputed it from extensions.json and each of the 10,000 4-digit
PINs, and had the PIN in 0.09 s without the key. Here that attack is run against what
the real command line stored: with a store key the fingerprint is an HMAC under a key
derived from the store key, and the same brute force finds nothing (while with the
derived key it does, so the search is a real one). Without a key a stored secret is in
the clear in the credentials table anyway, and the value of a variable the
configuration names is not in the fingerprint at all. Setting, rotating and removing the
key each costs one rediscovery, counted from the server's own record of what it received.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from albedo_actors.catalogue.saved import fingerprint
from albedo_actors.config import load
from albedo_actors.store import Credentials, open_store
from albedo_actors.store.models import CatalogueRow, CredentialRow
from albedo_actors.store.sealing import DIGEST_INFO, StoreKeys, new_key, parse_key
from helpers import FAULT_SERVER, read_record

RUN_TIMEOUT = 120  # a bound on each command, never an expected duration
PIN = "4711"
PINS = [f"{n:04d}" for n in range(10_000)]


def env_with(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALBEDO_STORE_") and k != "ALBEDO_DATABASE_URL"}
    env.update(extra)
    return env


def albedo(backend, *argv: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess:
    _kind, home, url = backend
    where = ["--database", url] if url else []
    run = subprocess.run([sys.executable, "-m", "albedo_actors", "--home", home, *where, *argv], env=env,
                         input=stdin, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert run.returncode == 0, (argv, run.stderr)
    return run


def stored_fingerprint(backend, server: str) -> str:
    """What anyone who can read the database reads, without any key."""
    _kind, home, url = backend
    store = open_store(home, url, keys=None)
    try:
        return CatalogueRow.select(CatalogueRow.fingerprint).where(CatalogueRow.server == server).scalar(store._db)
    finally:
        store.close()


def stored_env(backend, server: str) -> str:
    _kind, home, url = backend
    store = open_store(home, url, keys=None)
    try:
        return CredentialRow.select(CredentialRow.env).where(CredentialRow.server == server).scalar(store._db)
    finally:
        store.close()


def guess(target: str, digest, key: bytes | None = None) -> list[str]:
    """Every PIN whose fingerprint is ``target``: ``digest(pin, key)`` is the attacker's recomputation."""
    return [pin for pin in PINS if digest(pin, key) == target]


@pytest.fixture
def pin_home(backend):
    """A home with two stdio servers: ``stored`` keeps its PIN in the store (``add --env PIN``),
    ``named`` names $MY_PIN of the host's environment."""
    _kind, home, _url = backend
    os.makedirs(home, mode=0o700, exist_ok=True)
    named = {"type": "stdio", "command": sys.executable, "args": [FAULT_SERVER],
             "env": {"PIN": {"env": "MY_PIN"}}}
    with open(os.path.join(home, "extensions.json"), "w") as f:
        json.dump({"mcp": {"servers": {"named": named}}}, f)
    return home


def attack(backend, home):
    """The attacker's two recomputations, from extensions.json and a guessed PIN."""
    config = load(home)
    stored_server, named_server = config.server("stored"), config.server("named")

    def of_stored(pin, key):
        return fingerprint(stored_server, Credentials(env={"PIN": pin}), {}, key)

    def of_named(pin, key):
        return fingerprint(named_server, Credentials(), {"MY_PIN": pin}, key)

    return of_stored, of_named


def run_both(backend, home, env) -> None:
    """``add`` the stored-PIN server (it connects and saves its catalogue) and list every tool
    (which saves the named one's)."""
    albedo(backend, "add", "--transport", "stdio", f"{sys.executable} {FAULT_SERVER}", "--name", "stored",
           "--env", "PIN", env=env, stdin=PIN + "\n")
    albedo(backend, "tools", env=env)


def test_with_a_store_key_a_brute_force_over_every_pin_finds_nothing(backend, pin_home):
    key = new_key()
    run_both(backend, pin_home, env_with(ALBEDO_STORE_KEY=key, MY_PIN=PIN))
    of_stored, of_named = attack(backend, pin_home)
    for server, digest in (("stored", of_stored), ("named", of_named)):
        target = stored_fingerprint(backend, server)
        assert len(target) == 64
        assert guess(target, digest) == [], server  # without the key: nothing
        # With the digest key (never written anywhere) the same search finds it: it is a real search.
        assert guess(target, digest, StoreKeys(parse_key(key, "k")).digest_key) == [PIN], server
    assert stored_env(backend, "stored").startswith("enc:v1:")


def test_without_a_key_the_fingerprint_reveals_nothing_the_database_does_not_hold_in_clear(backend, pin_home):
    run_both(backend, pin_home, env_with(MY_PIN=PIN))
    of_stored, of_named = attack(backend, pin_home)
    # The stored PIN is found, and it is in the credentials table in clear beside it.
    assert guess(stored_fingerprint(backend, "stored"), of_stored) == [PIN]
    assert json.loads(stored_env(backend, "stored")) == {"PIN": PIN}
    # The named variable's value is not in the fingerprint: every guess gives the same one.
    target = stored_fingerprint(backend, "named")
    assert of_named("0000", None) == of_named(PIN, None) == target
    assert len({of_named(pin, None) for pin in PINS[:100]}) == 1


def test_the_digest_key_is_hkdf_expand_of_the_store_key_and_never_the_store_key():
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

    old, new = parse_key(new_key(), "k"), parse_key(new_key(), "k")
    keys = StoreKeys(new, (old,))
    assert keys.digest_key == HKDFExpand(hashes.SHA256(), 32, DIGEST_INFO).derive(new)  # RFC 5869 2.3
    assert keys.digest_key not in (new, old) and keys.digest_key == StoreKeys(new).digest_key
    assert StoreKeys(old).digest_key != keys.digest_key  # the current key's, during a rotation too
    assert keys.digest_key.hex() not in repr(keys)


def discovers(record) -> int:
    return len([m for m in read_record(record) if m.get("method") == "server/discover"])


def test_setting_rotating_and_removing_the_key_each_cost_one_rediscovery(backend, tmp_path):
    _kind, home, _url = backend
    record = tmp_path / "record"
    os.makedirs(home, mode=0o700, exist_ok=True)
    server = {"type": "stdio", "command": sys.executable, "args": [FAULT_SERVER, "--record", str(record)]}
    with open(os.path.join(home, "extensions.json"), "w") as f:
        json.dump({"mcp": {"servers": {"f": server}}}, f)
    old, new = new_key(), new_key()
    steps = [  # (what changed, the store command that changes it and its environment, the hosts' environment after)
        ("no key", None, None, env_with()),
        ("key set", ["store", "encrypt"], env_with(ALBEDO_STORE_KEY=old), env_with(ALBEDO_STORE_KEY=old)),
        ("rotated", ["store", "rotate-key"], env_with(ALBEDO_STORE_KEY=old, ALBEDO_STORE_NEW_KEY=new),
         env_with(ALBEDO_STORE_KEY=new)),
        ("removed", ["store", "decrypt"], env_with(ALBEDO_STORE_KEY=new), env_with()),
    ]
    seen = []
    for label, command, command_env, env in steps:
        if command is not None:
            albedo(backend, *command, env=command_env)
        albedo(backend, "tools", env=env)
        first = discovers(record)
        albedo(backend, "tools", env=env)  # the second lists from the saved catalogue
        seen.append((label, first, discovers(record)))
    assert seen == [("no key", 1, 1), ("key set", 2, 2), ("rotated", 3, 3), ("removed", 4, 4)]
