"""``store``: the encryption of the secrets at rest (new-key, status, encrypt, rotate-key, decrypt)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..config import resolve_home
from ..errors import EXIT_OK, EXIT_STORE, StoreError
from .options import PROG, Parser, Usage, place_options
from .output import out, warn


def store_parsers(commands: Any) -> None:
    store = commands.add_parser("store", help="encrypt the stored secrets, rotate or make the key, show the status",
                                description="The secrets in the store (tokens, refresh tokens, client secrets, header "
                                            "and env values) are encrypted at rest with AES-256-GCM when "
                                            "$ALBEDO_STORE_KEY (or $ALBEDO_STORE_KEY_FILE) gives a key.")
    actions = store.add_subparsers(dest="store_command", metavar="ACTION", parser_class=Parser)

    def action(name: str, help: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help, description=help)
        place_options(sub)
        return sub

    new_key = action("new-key", "print a new store key (32 random bytes, base64url), or write it to a new file")
    new_key.add_argument("--file", metavar="PATH", help="write it to PATH (created 0600; an existing file is never replaced)")
    action("status", "count the rows whose secrets are in clear, and those encrypted under each key id (needs no key)")
    action("encrypt", "encrypt every row under $ALBEDO_STORE_KEY, one row per transaction (safe to kill and run again)")
    rotate = action("rotate-key", "re-encrypt every row under a new key; the current one ($ALBEDO_STORE_KEY) opens them")
    rotate.add_argument("--new-key-file", metavar="PATH",
                        help="the file holding the new key (default: $ALBEDO_STORE_NEW_KEY, else $ALBEDO_STORE_NEW_KEY_FILE)")
    action("decrypt", "write every row back in clear (needs the key)")


def store_command(args: argparse.Namespace) -> int:
    from ..store import open_store, sealing

    action = getattr(args, "store_command", None)
    if action is None:
        raise Usage(f"store needs an action: new-key, status, encrypt, rotate-key or decrypt (see {PROG} store --help)")
    if action == "new-key":
        key = sealing.new_key()
        if not args.file:
            out(key)
            return EXIT_OK
        try:
            fd = os.open(args.file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except OSError as exc:
            raise Usage(f"store new-key: {args.file} cannot be created ({exc.strerror or type(exc).__name__}); "
                         "give a path where no file is") from None
        with os.fdopen(fd, "w", encoding="ascii") as f:
            os.fchmod(fd, 0o600)
            f.write(key + "\n")
        out(f"wrote a new store key (key id {sealing.key_id(sealing.parse_key(key, 'the new key'))}) to {args.file}")
        return EXIT_OK
    home = resolve_home(args.home)
    keys: Any = sealing.keys_from(os.environ)  # FROM_ENVIRON would read them again
    if action == "rotate-key":
        if keys is None:
            raise StoreError(f"store rotate-key: no current key: {sealing.NEEDS_KEY}")
        new = sealing.new_key_from(os.environ, args.new_key_file)
        if new is None:
            raise Usage("store rotate-key: give the new key with --new-key-file PATH or $ALBEDO_STORE_NEW_KEY "
                         "(make one with: albedo-mcp store new-key)")
        keys = sealing.StoreKeys(new, (keys.key,) + keys.also_open)
    store = open_store(home, url=args.database, keys=keys)
    try:
        if action == "status":
            counts = store.sealing_status()
            current = f" (the key given is {keys.kid})" if keys is not None else " (no key is set)"
            damaged = counts.pop("damaged", 0)
            out(f"{counts.pop('plaintext')} rows in clear" + "".join(
                f", {n} encrypted under {label}" for label, n in sorted(counts.items()))
                + (f", {damaged} damaged (a value starts with enc:v1: but is not an encrypted value)" if damaged else "")
                + current)
            return EXIT_OK
        # A row that cannot be read is one warning line and is left as it is; the others are done.
        unreadable: list[str] = []

        def left_alone(line: str) -> None:
            unreadable.append(line)
            warn(line)

        done = store.reseal(to_plaintext=action == "decrypt", unreadable=left_alone)
        verb = {"encrypt": "encrypted", "rotate-key": "re-encrypted", "decrypt": "decrypted"}[action]
        under = f" under key {keys.kid}" if action != "decrypt" and keys is not None else ""
        left = f"; {len(unreadable)} cannot be read and were left as they are" if unreadable else ""
        out(f"{verb} {done['rewritten']} rows{under}; {done['kept']} were so already{left}")
        if action == "rotate-key" and not unreadable:
            out(f"now set ALBEDO_STORE_KEY (or ALBEDO_STORE_KEY_FILE) to the new key (key id {keys.kid})")
        return EXIT_STORE if unreadable else EXIT_OK
    finally:
        store.close()
