"""Secrets sealed at rest: AES-256-GCM under the store key, each value bound to its row.

::

    keys = keys_from(os.environ)              # $ALBEDO_STORE_KEY or $ALBEDO_STORE_KEY_FILE; None: no key
    text = keys.seal(("credentials", "docs", "oauth"), '{"access_token": ...}')
    keys.open(("credentials", "docs", "oauth"), text, "credentials of 'docs'")

The key is 32 random bytes written in base64url (43 characters, ``=`` padding allowed);
:func:`new_key` makes one. A sealed value is the text ``enc:v1:<key id>:<base64url of
nonce + ciphertext + tag>``: the key id (:func:`key_id`, 8 hex digits of a SHA-256 of the
key) tells a value sealed under another key from a damaged one. The associated data
names the table, the row's key and the column (:func:`_aad`), so a value copied to
another row, server or column does not open.

A value that does not start with ``enc:v1:`` is plaintext (a store written before a key
was set, or mid-``store encrypt``) and is read as it is; every write seals. So the prefix
is never the start of a plaintext secret: a bearer token or header value that starts with
it is refused at every write, key or no key (:func:`refuse_prefix`); the other secret
columns hold JSON objects, which cannot. A value that starts with it but is not one
(:func:`sealed_key_id` None: damaged, or a plaintext secret an older albedo stored) is
damaged, whatever key is given, and may be replaced.

With a key, ``StoreKeys.digest_key`` is the key of every digest of a secret that the
store holds or albedo shows (the saved catalogues' fingerprints): HKDF-Expand (RFC 5869
section 2.3) of the store key, which is uniformly random already, so it is the PRK and
Extract is skipped (section 3.3). The store key itself never keys anything but AES-GCM.

``cryptography`` (which ``pyjwt[crypto]`` brings), ``hashlib`` and ``hmac`` are imported
only once a key is set or a sealed value is opened: a host with no key loads none of them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..errors import StoreError

__all__ = [
    "PREFIX", "KEY_VARS", "StoreKeys", "keys_from", "parse_key", "read_key_file", "new_key", "key_id",
    "is_sealed", "sealed_key_id", "refuse_prefix", "NEEDS_KEY", "DIGEST_INFO",
]

PREFIX = "enc:v1:"
KEY_BYTES = 32
NONCE_BYTES = 12
# The variables that give the store key (the first set wins), the previous key (read only,
# for a store mid-rotation), and the new key of ``store rotate-key``.
KEY_VARS = ("ALBEDO_STORE_KEY", "ALBEDO_STORE_KEY_FILE")
OLD_KEY_VARS = ("ALBEDO_STORE_OLD_KEY", "ALBEDO_STORE_OLD_KEY_FILE")
NEW_KEY_VARS = ("ALBEDO_STORE_NEW_KEY", "ALBEDO_STORE_NEW_KEY_FILE")
NEEDS_KEY = "set ALBEDO_STORE_KEY (or ALBEDO_STORE_KEY_FILE) to the key this store was encrypted with"
# HKDF's info for the digest key (StoreKeys.digest_key): what the derived key is for.
DIGEST_INFO = b"albedo_actors digests of secrets v1"
# A key file longer than this is not a key file.
_MAX_KEY_FILE = 4096

Where = Sequence[str]  # (table, row key..., column)


def is_sealed(text: str | None) -> bool:
    return text is not None and text.startswith(PREFIX)


def refuse_prefix(text: str | None, what: str) -> None:
    """Refuse a plaintext secret that starts with the sealed prefix: it would read back as
    a sealed value (one that does not open) instead of itself.

    Raises:
        StoreError: the one line naming ``what``; the value is never quoted.
    """
    if text is not None and text.startswith(PREFIX):
        raise StoreError(f"store: {what} starts with {PREFIX!r}, which marks a value encrypted at rest, so it "
                         "cannot be stored; give the secret itself, not a value copied from the database")


def sealed_key_id(text: str) -> str | None:
    """The key id a sealed value names, or None when it is not a well-formed sealed value."""
    rest = text[len(PREFIX):]
    kid, sep, _body = rest.partition(":")
    return kid if sep and len(kid) == 8 and all(c in "0123456789abcdef" for c in kid) else None


def key_id(key: bytes) -> str:
    """8 hex digits naming ``key`` (a SHA-256 of it under a label; it reveals nothing usable)."""
    import hashlib

    return hashlib.sha256(b"albedo store key id\0" + key).hexdigest()[:8]


def new_key() -> str:
    """A fresh store key: 32 random bytes in base64url, no padding."""
    import base64

    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).rstrip(b"=").decode("ascii")


def parse_key(text: str, where: str) -> bytes:
    """The 32 key bytes written in ``text`` (base64url or base64, padding optional).

    Raises:
        StoreError: ``text`` is not a key; the message never quotes it.
    """
    import base64
    import binascii

    value = text.strip()
    value = value.replace("+", "-").replace("/", "_")
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != KEY_BYTES:
        raise StoreError(f"store: {where} is not a store key (32 bytes in base64url, 43 characters); "
                         "make one with: albedo-mcp store new-key")
    return raw


def read_key_file(path: str, variable: str) -> bytes:
    """The key in the file ``path`` names: a regular file no one but its owner may read or write.

    A symbolic link is followed (mounted secrets are links); the file it reaches is checked.

    Raises:
        StoreError: the file is missing, unreadable, open to others, or holds no key.
    """
    import stat

    where = f"${variable} ({path})"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise StoreError(f"store: {where} cannot be read ({exc.strerror or type(exc).__name__}); "
                         "give the path of the key file") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StoreError(f"store: {where} is not a regular file; give the path of the key file")
        if stat.S_IMODE(info.st_mode) & 0o077:
            raise StoreError(f"store: {where} may be read or written by others (mode "
                             f"{stat.S_IMODE(info.st_mode):o}): chmod 600 it")
        data = os.read(fd, _MAX_KEY_FILE + 1)
    except OSError as exc:
        raise StoreError(f"store: {where} cannot be read ({exc.strerror or type(exc).__name__})") from None
    finally:
        os.close(fd)
    if len(data) > _MAX_KEY_FILE:
        raise StoreError(f"store: {where} is not a store key file (too long); make a key with: albedo-mcp store new-key")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        text = ""
    return parse_key(text, where)


def _key_from(environ: Mapping[str, str], variables: Sequence[str]) -> bytes | None:
    value_var, file_var = variables
    if environ.get(value_var):
        return parse_key(environ[value_var], f"${value_var}")
    if environ.get(file_var):
        return read_key_file(environ[file_var], file_var)
    return None


def keys_from(environ: Mapping[str, str]) -> "StoreKeys | None":
    """The store keys the environment gives: ``$ALBEDO_STORE_KEY`` (or ``_FILE``) seals and
    opens; ``$ALBEDO_STORE_OLD_KEY`` (or ``_FILE``) only opens (a store mid-rotation). None
    when neither is set.

    Raises:
        StoreError: a variable is set but gives no key.
    """
    key = _key_from(environ, KEY_VARS)
    old = _key_from(environ, OLD_KEY_VARS)
    if key is None and old is None:
        return None
    if key is None:
        raise StoreError("store: $ALBEDO_STORE_OLD_KEY is set without $ALBEDO_STORE_KEY: set ALBEDO_STORE_KEY "
                         "(or ALBEDO_STORE_KEY_FILE) to the store's current key")
    return StoreKeys(key, (old,) if old is not None else ())


def new_key_from(environ: Mapping[str, str], path: str | None = None) -> bytes | None:
    """The new key of ``store rotate-key``: ``path`` (a key file), else ``$ALBEDO_STORE_NEW_KEY`` (or ``_FILE``)."""
    if path:
        return read_key_file(path, "--new-key-file")
    return _key_from(environ, NEW_KEY_VARS)


def _aad(where: Where) -> bytes:
    # Each part is length-prefixed, so no two different places give the same bytes.
    out = bytearray(b"albedo store v1")
    for part in where:
        data = part.encode("utf-8", "surrogatepass")
        out += len(data).to_bytes(4, "big") + data
    return bytes(out)


@dataclass
class StoreKeys:
    """The key that seals (``key``) and the keys that open: it and ``also_open`` (previous keys)."""

    key: bytes
    also_open: tuple[bytes, ...] = ()
    _ciphers: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        import hmac

        self.kid = key_id(self.key)
        # The key of the digests of secrets (fingerprints): HKDF-Expand(store key,
        # DIGEST_INFO, 32), which is one HMAC-SHA256 (RFC 5869 section 2.3: T(1)).
        self.digest_key = hmac.digest(self.key, DIGEST_INFO + b"\x01", "sha256")
        self._keys = {self.kid: self.key}
        for old in self.also_open:
            self._keys.setdefault(key_id(old), old)

    def __repr__(self) -> str:  # never the key bytes
        return f"StoreKeys(key id {self.kid}, {len(self._keys) - 1} previous)"

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(self._keys)

    def opens(self, kid: str) -> bool:
        return kid in self._keys

    def _cipher(self, kid: str) -> Any:
        cipher = self._ciphers.get(kid)
        if cipher is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            cipher = self._ciphers[kid] = AESGCM(self._keys[kid])
        return cipher

    def seal(self, where: Where, text: str) -> str:
        """``text`` sealed under the key, bound to ``where`` (table, row key, column)."""
        import base64

        nonce = os.urandom(NONCE_BYTES)
        body = self._cipher(self.kid).encrypt(nonce, text.encode("utf-8", "surrogatepass"), _aad(where))
        return f"{PREFIX}{self.kid}:" + base64.urlsafe_b64encode(nonce + body).rstrip(b"=").decode("ascii")

    def open(self, where: Where, text: str, what: str) -> str:
        """The plaintext of a sealed ``text``; ``what`` names it for the error line.

        Raises:
            StoreError: sealed under a key not given, or it does not open (damaged, or
                copied from another row).
        """
        import base64
        import binascii

        kid = sealed_key_id(text)
        if kid is None:
            raise malformed(what)
        if kid not in self._keys:
            raise StoreError(f"store: the saved {what} are encrypted under key {kid}, not the key given "
                             f"({self.kid}): {NEEDS_KEY}")
        body = text[len(PREFIX) + len(kid) + 1:]
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        except (binascii.Error, ValueError):
            raise damaged(what) from None
        from cryptography.exceptions import InvalidTag

        if len(raw) < NONCE_BYTES + 16:
            raise damaged(what)
        try:
            plain = self._cipher(kid).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], _aad(where))
        except InvalidTag:
            raise damaged(what) from None
        return str(plain.decode("utf-8", "surrogatepass"))


# What a user does about credentials nothing can read: ``edit`` and ``sign-in`` read them
# first, so only ``remove`` (which deletes the row unread) clears them.
REMOVE_AND_ADD = "remove the server and add it again (albedo-mcp remove NAME, then albedo-mcp add ...)"


# What a user does about a task whose sealed values nothing can read: its result is lost to
# this store; deleting the task (or waiting for it to expire) clears it.
FORGET_TASK = "delete the task (it is deleted anyway when it expires or its server is removed) and call the tool again"


def _remedy(what: str) -> str:
    if what.startswith("credentials"):
        return REMOVE_AND_ADD
    if what.startswith("task"):
        return FORGET_TASK
    return "save them again (albedo-mcp edit NAME, or sign-in NAME)"


def damaged(what: str) -> StoreError:
    return StoreError(f"store: the saved {what} do not decrypt under the key given (damaged, or copied from "
                      f"another row); {_remedy(what)}")


def malformed(what: str) -> StoreError:
    """A value that starts with the prefix but is not a sealed value: no key opens it."""
    return StoreError(f"store: the saved {what} start with {PREFIX!r} but are not an encrypted value (damaged, or a "
                      f"secret an older albedo stored in clear); {_remedy(what)}")


def no_key(what: str, text: str) -> StoreError:
    kid = sealed_key_id(text)
    if kid is None:
        return malformed(what)
    return StoreError(f"store: the saved {what} are encrypted under key {kid} and no key is set: {NEEDS_KEY}")


def open_value(keys: StoreKeys | None, where: Where, text: str | None, what: str) -> str | None:
    """``text`` as stored (plaintext or sealed) read back as plaintext; None stays None."""
    if text is None or not text.startswith(PREFIX):
        return text
    if keys is None:
        raise no_key(what, text)
    return keys.open(where, text, what)


def check_overwritable(keys: StoreKeys | None, values: Sequence[str | None], what: str) -> None:
    """Refuse to replace a row holding a value sealed under a key not given (it would be lost).

    A value sealed under a key given may be replaced even if it is damaged (that is the
    remedy), and so may one that only looks sealed (:func:`malformed`); plaintext may always be.

    Raises:
        StoreError: the one line naming what to set.
    """
    for text in values:
        if text is None or not text.startswith(PREFIX):
            continue
        kid = sealed_key_id(text)
        if kid is None:
            continue  # no key opens it: nothing is lost by replacing it
        if keys is None:
            raise no_key(what, text)
        if not keys.opens(kid):
            raise StoreError(f"store: the saved {what} are encrypted under key {kid}, not the key given "
                             f"({keys.kid}): {NEEDS_KEY}")
