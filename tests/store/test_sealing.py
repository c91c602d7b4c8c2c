"""Secrets encrypted at rest (issue 15 item 4), on SQLite and PostgreSQL.

The rows are read raw (every column, through the store's models on its own database
connection) to see what is on disk: sealed values, values copied between rows, bytes
compared before and after a write that must not happen.
"""

from __future__ import annotations

import os

import pytest

from albedo_actors.errors import StoreError
from albedo_actors.store import Credentials, open_store
from albedo_actors.store.models import CredentialRow, OAuthClientRow
from albedo_actors.store.sealing import NEEDS_KEY, StoreKeys, key_id, keys_from, new_key, parse_key, read_key_file

TOKEN = "tok-0123456789-secret-access"
REFRESH = "ref-0123456789-secret-refresh"
CLIENT_SECRET = "cs-0123456789-client-secret"
HEADER = "hv-0123456789-header-value"
ENV_VALUE = "env-0123456789-env-value"
DPOP_D = "dpop-0123456789-private-d"
SECRETS = (TOKEN, REFRESH, CLIENT_SECRET, HEADER, ENV_VALUE, DPOP_D)


def a_key() -> StoreKeys:
    return StoreKeys(parse_key(new_key(), "test key"))


def full(n: int = 0) -> Credentials:
    return Credentials(bearer_token=f"{TOKEN}{n}", header=("X-Api-Key", f"{HEADER}{n}"), env={"API": f"{ENV_VALUE}{n}"},
                       oauth={"url": "https://mcp.example/mcp", "state": "signed_in", "access_token": f"{TOKEN}{n}",
                              "refresh_token": f"{REFRESH}{n}", "client_secret": f"{CLIENT_SECRET}{n}",
                              "dpop_key": {"kty": "EC", "d": f"{DPOP_D}{n}"}})


CLIENT = {"client_id": "registered-1", "client_secret": CLIENT_SECRET}


@pytest.fixture
def open_(backend):
    """``open_(keys)`` opens a store on this test's backend with ``keys``; all closed afterwards."""
    _kind, home, url = backend
    opened = []

    def opener(keys):
        store = open_store(home, url, keys=keys)
        opened.append(store)
        return store

    yield opener
    for store in opened:
        store.close()


def raw(store) -> list[tuple]:
    """Every column of every credentials and OAuth client row, as the database holds them."""
    creds = list(CredentialRow.select().order_by(CredentialRow.server).tuples().execute(store._db))
    clients = list(OAuthClientRow.select().order_by(OAuthClientRow.issuer).tuples().execute(store._db))
    return creds + clients


def raw_text(store) -> str:
    return repr(raw(store))


def assert_no_secret_in(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


def test_with_a_key_every_secret_column_is_sealed_and_reads_back(open_):
    keys = a_key()
    store = open_(keys)
    store.put_credentials("docs", full())
    store.put_oauth_client("https://as.example", "http://127.0.0.1/cb", CLIENT)
    [row] = CredentialRow.select().tuples().execute(store._db)
    server, bearer, header_name, header_value, env, oauth, *_rest = row
    assert (server, header_name) == ("docs", "X-Api-Key")  # not secret: in clear
    for value in (bearer, header_value, env, oauth):
        assert value.startswith(f"enc:v1:{keys.kid}:")
    [(_i, _r, client, _t)] = OAuthClientRow.select().tuples().execute(store._db)
    assert client.startswith(f"enc:v1:{keys.kid}:")
    assert_no_secret_in(raw_text(store))
    assert store.get_credentials("docs") == full()
    assert store.get_credentials_of(["docs", "none"]) == {"docs": full(), "none": Credentials()}
    assert store.credentials_and_lease("docs")[0] == full()
    assert store.get_oauth_client("https://as.example", "http://127.0.0.1/cb") == CLIENT
    assert store.update_credentials("docs", lambda c: Credentials(bearer_token="new")).bearer_token == "new"
    assert store.delete_oauth_client("https://as.example", "registered-1") == 1


def test_plaintext_rows_are_still_read_with_a_key_and_the_next_write_seals_them(open_):
    plain = open_(None)
    plain.put_credentials("docs", full())
    plain.put_oauth_client("https://as.example", "http://127.0.0.1/cb", CLIENT)
    keys = a_key()
    store = open_(keys)
    assert store.get_credentials("docs") == full()
    assert store.get_oauth_client("https://as.example", "http://127.0.0.1/cb") == CLIENT
    assert store.sealing_status() == {"plaintext": 2}
    store.update_credentials("docs", lambda c: c)
    assert store.sealing_status() == {"plaintext": 1, f"key {keys.kid}": 1}
    assert store.get_credentials("docs") == full()


def _raise(value):
    """``get_credentials_of`` gives a row it cannot read as its StoreError: raise it."""
    if isinstance(value, StoreError):
        raise value
    return value


def unreadable_cases(open_, keys):
    """A store sealed under ``keys``, and the raw rows before anything was tried."""
    sealed = open_(keys)
    sealed.put_credentials("docs", full())
    sealed.put_oauth_client("https://as.example", "http://127.0.0.1/cb", CLIENT)
    return raw(sealed)


@pytest.mark.parametrize("given", ["missing", "wrong"])
def test_a_missing_or_wrong_key_is_one_line_naming_what_to_set_and_nothing_is_overwritten(open_, given):
    keys = a_key()
    before = unreadable_cases(open_, keys)
    other = a_key()
    store = open_(None if given == "missing" else other)
    attempts = {
        "get": lambda: store.get_credentials("docs"),
        "get many": lambda: _raise(store.get_credentials_of(["docs"])["docs"]),
        "with lease": lambda: store.credentials_and_lease("docs"),
        "update": lambda: store.update_credentials("docs", lambda c: Credentials()),
        "put": lambda: store.put_credentials("docs", Credentials(bearer_token="replacement")),
        "put empty": lambda: store.put_credentials("docs", Credentials()),
        "client": lambda: store.get_oauth_client("https://as.example", "http://127.0.0.1/cb"),
        "put client": lambda: store.put_oauth_client("https://as.example", "http://127.0.0.1/cb", {"client_id": "x"}),
        "reseal": lambda: store.reseal(),
        "decrypt": lambda: store.reseal(to_plaintext=True),
    }

    def holding():
        with store.holding_credentials("docs") as (_c, put):
            put(Credentials())

    attempts["holding"] = holding
    if given == "missing":
        del attempts["reseal"]  # it says no key is set: tested below
    for name, attempt in attempts.items():
        with pytest.raises(StoreError) as caught:
            attempt()
        message = str(caught.value)
        assert "\n" not in message, name
        assert message.endswith(NEEDS_KEY), (name, message)
        assert keys.kid in message, name
        if given == "wrong":
            assert other.kid in message, name
    # Nothing reads as "no credentials", nothing was written.
    assert raw(store) == before
    if given == "missing":
        with pytest.raises(StoreError, match="no key is set"):
            store.reseal()
    # The right key still reads everything.
    assert open_(keys).get_credentials("docs") == full()


def test_deleting_a_server_is_still_possible_without_the_key(open_):
    """``remove`` is the user saying to forget the row; the key is not needed for that."""
    keys = a_key()
    unreadable_cases(open_, keys)
    store = open_(None)
    store.delete_credentials("docs")
    assert open_(keys).get_credentials("docs") == Credentials()


@pytest.mark.parametrize("column", ["bearer_token", "header_value", "env", "oauth"])
def test_a_value_copied_to_another_servers_row_does_not_decrypt(open_, column):
    keys = a_key()
    store = open_(keys)
    store.put_credentials("docs", full(1))
    store.put_credentials("mail", full(2))
    value = CredentialRow.select(getattr(CredentialRow, column)).where(CredentialRow.server == "docs").scalar(store._db)
    CredentialRow.update({getattr(CredentialRow, column): value}).where(CredentialRow.server == "mail").execute(store._db)
    with pytest.raises(StoreError) as caught:
        store.get_credentials("mail")
    assert str(caught.value).startswith("store: the saved credentials of 'mail' do not decrypt under the key given "
                                        "(damaged, or copied from another row)")
    assert store.get_credentials("docs") == full(1)  # the original still reads


def test_a_value_copied_to_another_column_or_client_row_does_not_decrypt(open_):
    keys = a_key()
    store = open_(keys)
    store.put_credentials("docs", full())
    store.put_oauth_client("https://as.example", "http://127.0.0.1/cb", CLIENT)
    store.put_oauth_client("https://other.example", "http://127.0.0.1/cb", {"client_id": "x"})
    oauth = CredentialRow.select(CredentialRow.oauth).scalar(store._db)
    CredentialRow.update(env=oauth).execute(store._db)  # the OAuth JSON moved into env
    with pytest.raises(StoreError, match="do not decrypt"):
        store.get_credentials("docs")
    client = OAuthClientRow.select(OAuthClientRow.client).where(OAuthClientRow.issuer == "https://as.example").scalar(store._db)
    OAuthClientRow.update(client=client).where(OAuthClientRow.issuer == "https://other.example").execute(store._db)
    with pytest.raises(StoreError, match="do not decrypt"):
        store.get_oauth_client("https://other.example", "http://127.0.0.1/cb")
    assert store.get_oauth_client("https://as.example", "http://127.0.0.1/cb") == CLIENT


def test_a_damaged_sealed_value_is_damage_not_a_wrong_key_and_saving_again_repairs_it(open_):
    keys = a_key()
    store = open_(keys)
    store.put_credentials("docs", full())
    oauth = CredentialRow.select(CredentialRow.oauth).scalar(store._db)
    flipped = oauth[:-5] + ("A" if oauth[-5] != "A" else "B") + oauth[-4:]
    CredentialRow.update(oauth=flipped).execute(store._db)
    with pytest.raises(StoreError) as caught:
        store.get_credentials("docs")
    assert "do not decrypt" in str(caught.value) and NEEDS_KEY not in str(caught.value)
    store.put_credentials("docs", full())  # under the key given: replacing it is the remedy
    assert store.get_credentials("docs") == full()


def test_encrypt_rotate_and_decrypt_rewrite_every_row(open_):
    plain = open_(None)
    for n in range(3):
        plain.put_credentials(f"s{n}", full(n))
    plain.put_oauth_client("https://as.example", "http://127.0.0.1/cb", CLIENT)
    assert TOKEN in raw_text(plain)  # the scan sees plaintext when there is some
    old = a_key()
    store = open_(old)
    assert store.reseal() == {"rewritten": 4, "kept": 0}
    assert store.reseal() == {"rewritten": 0, "kept": 4}  # run again: nothing left to do
    assert store.sealing_status() == {"plaintext": 0, f"key {old.kid}": 4}
    assert_no_secret_in(raw_text(store))

    new = a_key()
    rotating = open_(StoreKeys(new.key, (old.key,)))
    assert rotating.reseal() == {"rewritten": 4, "kept": 0}
    assert rotating.sealing_status() == {"plaintext": 0, f"key {new.kid}": 4}
    only_new = open_(new)
    for n in range(3):
        assert only_new.get_credentials(f"s{n}") == full(n)
    assert only_new.get_oauth_client("https://as.example", "http://127.0.0.1/cb") == CLIENT
    with pytest.raises(StoreError, match=f"encrypted under key {new.kid}, not the key given"):
        open_(old).get_credentials("s0")

    assert only_new.reseal(to_plaintext=True) == {"rewritten": 4, "kept": 0}
    assert open_(None).get_credentials("s1") == full(1)
    assert open_(None).sealing_status() == {"plaintext": 4}


def test_a_store_mid_rotation_reads_with_the_old_key_given_as_previous(open_):
    old, new = a_key(), a_key()
    open_(old).put_credentials("a", full(1))
    open_(new).put_credentials("b", full(2))
    both = open_(StoreKeys(new.key, (old.key,)))
    assert both.get_credentials_of(["a", "b"]) == {"a": full(1), "b": full(2)}


# --- keys ----------------------------------------------------------------------------------------


def test_keys_come_from_the_environment_and_a_bad_one_is_one_line_that_never_quotes_it(tmp_path):
    key = new_key()
    assert keys_from({}) is None
    assert keys_from({"ALBEDO_STORE_KEY": key}).kid == key_id(parse_key(key, "k"))
    assert keys_from({"ALBEDO_STORE_KEY": key + "=="}).kid == key_id(parse_key(key, "k"))  # padding allowed
    for bad in ("short", key[:-2], key + "AAAA", "not base64 at all!!" * 3):
        with pytest.raises(StoreError) as caught:
            keys_from({"ALBEDO_STORE_KEY": bad})
        assert "albedo-mcp store new-key" in str(caught.value) and bad not in str(caught.value)
    with pytest.raises(StoreError, match="ALBEDO_STORE_OLD_KEY is set without"):
        keys_from({"ALBEDO_STORE_OLD_KEY": key})
    both = keys_from({"ALBEDO_STORE_KEY": key, "ALBEDO_STORE_OLD_KEY": new_key()})
    assert len(both.key_ids) == 2
    assert key not in repr(both)


def test_a_key_file_must_be_a_regular_file_no_one_else_may_read(tmp_path):
    key = new_key()
    path = tmp_path / "key"
    path.write_text(key + "\n")
    os.chmod(path, 0o600)
    assert read_key_file(str(path), "ALBEDO_STORE_KEY_FILE") == parse_key(key, "k")
    link = tmp_path / "mounted"
    link.symlink_to(path)  # mounted secrets are links: followed, the file reached is checked
    assert keys_from({"ALBEDO_STORE_KEY_FILE": str(link)}).key == parse_key(key, "k")
    os.chmod(path, 0o640)
    with pytest.raises(StoreError, match="chmod 600"):
        keys_from({"ALBEDO_STORE_KEY_FILE": str(path)})
    with pytest.raises(StoreError, match="is not a regular file"):
        keys_from({"ALBEDO_STORE_KEY_FILE": str(tmp_path)})
    with pytest.raises(StoreError, match="cannot be read"):
        keys_from({"ALBEDO_STORE_KEY_FILE": str(tmp_path / "absent")})


def test_the_row_a_lease_creates_is_sealed_too(open_):
    keys = a_key()
    store = open_(keys)
    with store.holding_credentials("new") as (current, put):
        assert current == Credentials()
        put.take_lease("me", 1.0)
    assert store.sealing_status() == {"plaintext": 0, f"key {keys.kid}": 1}
    assert store.get_credentials("new") == Credentials()


# --- issue 23 hole 10: sealing is unambiguous ----------------------------------------------------

LOOKS_SEALED = "enc:v1:plaintext-token-0123"  # a plaintext secret that starts with the sealed prefix


@pytest.mark.parametrize("keyed", [False, True], ids=["no key", "key"])
@pytest.mark.parametrize("creds", [Credentials(bearer_token=LOOKS_SEALED), Credentials(header=("X-Api-Key", LOOKS_SEALED))],
                         ids=["bearer", "header"])
def test_a_plaintext_secret_that_starts_with_the_sealed_prefix_is_refused_in_one_line(open_, keyed, creds):
    store = open_(a_key() if keyed else None)
    store.put_credentials("docs", full())
    before = raw(store)
    writes = {
        "put": lambda: store.put_credentials("docs", creds),
        "put new": lambda: store.put_credentials("new", creds),
        "update": lambda: store.update_credentials("docs", lambda _old: creds),
    }
    for name, write in writes.items():
        with pytest.raises(StoreError) as caught:
            write()
        message = str(caught.value)
        assert "\n" not in message and LOOKS_SEALED not in message, name
        assert "starts with 'enc:v1:'" in message and ("'docs'" in message or "'new'" in message), (name, message)
    assert raw(store) == before  # nothing was written
    assert store.get_credentials("docs") == full()


@pytest.mark.parametrize("keyed", [False, True], ids=["no key", "key"])
def test_values_inside_the_json_columns_may_start_with_the_prefix_and_read_back_exactly(open_, keyed):
    """env and the OAuth record are JSON objects: their text starts with "{", never with the prefix."""
    store = open_(a_key() if keyed else None)
    creds = Credentials(env={"API": LOOKS_SEALED}, oauth={"url": "https://mcp.example/mcp", "access_token": LOOKS_SEALED})
    store.put_credentials("docs", creds)
    assert store.get_credentials("docs") == creds
    assert store.get_credentials_of(["docs"]) == {"docs": creds}


def plant(store, server: str, **columns) -> None:
    """Write raw column values into a credentials row, as a damaged database or an older albedo would."""
    CredentialRow.update({getattr(CredentialRow, k): v for k, v in columns.items()}).where(CredentialRow.server == server) \
        .execute(store._db)


def broken_rows(store, damaged_bearer: str) -> None:
    """In a plaintext store: servers a, b readable; "legacy" holding a plaintext bearer an
    older albedo stored (it starts with the prefix); "damaged" holding ``damaged_bearer``."""
    for n, name in enumerate(("a", "b", "legacy", "damaged")):
        store.put_credentials(name, full(n))
    plant(store, "legacy", bearer_token=LOOKS_SEALED)
    plant(store, "damaged", bearer_token=damaged_bearer)


def test_an_unreadable_row_is_that_servers_error_alone_and_says_to_remove_it(open_):
    keys = a_key()
    sealed = keys.seal(("credentials", "damaged", "bearer_token"), "tok")
    broken_rows(open_(None), sealed[:-3] + ("AAA" if sealed[-3:] != "AAA" else "BBB"))  # one character changed
    store = open_(keys)
    found = store.get_credentials_of(["a", "legacy", "damaged", "b", "none"])
    assert found["a"] == full(0) and found["b"] == full(1) and found["none"] == Credentials()
    for name, says in (("legacy", "start with 'enc:v1:' but are not an encrypted value"), ("damaged", "do not decrypt")):
        error = found[name]
        assert isinstance(error, StoreError), name
        assert f"credentials of {name!r}" in str(error) and says in str(error) and "albedo-mcp remove NAME" in str(error)
        assert LOOKS_SEALED not in str(error)
    # Without a key the legacy row is still damage, not "set the key".
    legacy = open_(None).get_credentials_of(["legacy"])["legacy"]
    assert isinstance(legacy, StoreError) and "not an encrypted value" in str(legacy) and NEEDS_KEY not in str(legacy)
    # Replacing it loses nothing anyone could read: allowed, with or without the key, and it repairs it.
    open_(None).put_credentials("legacy", Credentials(bearer_token="fresh"))
    assert store.get_credentials("legacy") == Credentials(bearer_token="fresh")


def test_encrypt_rewrites_every_row_it_can_read_and_reports_each_one_it_cannot(open_):
    keys, other = a_key(), a_key()
    plain = open_(None)
    broken_rows(plain, other.seal(("credentials", "damaged", "bearer_token"), "tok"))  # under a key not given
    assert plain.sealing_status() == {"plaintext": 3, "damaged": 1}  # the legacy row is not a sealed value
    before = {row[0]: row for row in raw(plain)}
    store = open_(keys)
    heard: list[str] = []
    assert store.reseal(unreadable=heard.append) == {"rewritten": 2, "kept": 0}
    heard.sort()  # the rows' order is the database's
    assert len(heard) == 2 and "'damaged' are encrypted under key " + other.kid in heard[0] and "'legacy'" in heard[1], heard
    after = {row[0]: row for row in raw(store)}
    assert after["legacy"] == before["legacy"] and after["damaged"] == before["damaged"]  # left as they were
    assert store.get_credentials_of(["a", "b"]) == {"a": full(0), "b": full(1)}
    assert store.sealing_status() == {"plaintext": 1, f"key {keys.kid}": 2, "damaged": 1}
    # Without the callback: every other row is done, then the first line is raised.
    with pytest.raises(StoreError, match="'legacy'|'damaged'"):
        store.reseal()


def test_decrypt_keeps_encrypted_a_value_that_in_clear_would_read_as_encrypted(open_):
    keys = a_key()
    store = open_(keys)
    store.put_credentials("a", full(1))
    store.put_credentials("old", Credentials(bearer_token="x"))
    plant(store, "old", bearer_token=keys.seal(("credentials", "old", "bearer_token"), LOOKS_SEALED))  # an older albedo sealed it
    heard: list[str] = []
    assert store.reseal(to_plaintext=True, unreadable=heard.append) == {"rewritten": 1, "kept": 0}
    assert len(heard) == 1 and "'old'" in heard[0] and "stay encrypted" in heard[0] and LOOKS_SEALED not in heard[0]
    assert store.get_credentials("old") == Credentials(bearer_token=LOOKS_SEALED)  # still sealed, still reads
    assert open_(None).get_credentials("a") == full(1)
