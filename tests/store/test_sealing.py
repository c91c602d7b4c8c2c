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
        "get many": lambda: store.get_credentials_of(["docs"]),
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
