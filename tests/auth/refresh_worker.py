"""A second process refreshing a shared store's OAuth tokens, for test_refresh_races.py.

    python refresh_worker.py MODE HOME URL SERVER NAME

MODE is ``held`` (call ``refresh_held`` directly) or ``refresher`` (ask a
``TokenRefresher`` actor of this process). URL ``-`` means SQLite in HOME. SERVER is
the MCP URL of the server named NAME.

Protocol, one JSON object per line on stdout, answers one line each on stdin:

- opens the store, reads the stored access token (the token this process "saw"),
  prints ``{"event": "ready", "seen": FP}`` and waits for ``go``;
- prints ``{"event": "calling"}`` and refreshes with that seen token; prints
  ``{"event": "locking"}`` each time the refresh asks the store for a short
  transaction on the credentials row (``Store.holding_credentials``: taking the
  refresh lease, writing the result), just before it does;
- if a token request is about to be made (the HTTP client is asked for, inside the
  refresh lease, outside any transaction) prints ``{"event": "holding"}`` and waits
  for ``proceed`` first;
- prints ``{"event": "result", ...}`` (the returned and the stored record as
  fingerprints, and how many token requests this process made) and exits 0.

Tokens are never printed, only fingerprints (FP: 16 hex digits of their SHA-256).
Every wait is bounded; a wait that runs out exits with status 3.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import sys

from albedo_actors.actors.refresher import TokenRefresher, refresh_by
from albedo_actors.auth.refresh import refresh_held
from albedo_actors.auth.http import AuthHttp
from albedo_actors.auth.record import from_credentials
from albedo_actors.config import ServerConfig
from albedo_actors.store import open_store

WAIT_S = 60.0


def fp(token: str | None) -> str | None:
    return None if token is None else hashlib.sha256(token.encode()).hexdigest()[:16]


def say(**fields) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def expect(word: str) -> None:
    """Wait (bounded) for the line ``word`` on stdin."""
    if not select.select([sys.stdin], [], [], WAIT_S)[0]:
        say(event="timeout", waiting_for=word)
        os._exit(3)
    line = sys.stdin.readline().strip()
    if line != word:
        say(event="unexpected", waiting_for=word, got=line)
        os._exit(3)


class AnnouncingStore:
    """The store, announcing each ``holding_credentials`` before its transaction is asked for."""

    def __init__(self, store) -> None:
        self._store = store

    def __getattr__(self, name: str):
        return getattr(self._store, name)

    def holding_credentials(self, server: str):
        say(event="locking")
        return self._store.holding_credentials(server)


def main() -> None:
    mode, home, url, server_url, name = sys.argv[1:]
    store = open_store(home, None if url == "-" else url)
    requests = 0

    def http_factory(server: ServerConfig) -> AuthHttp:
        nonlocal requests
        requests += 1
        say(event="holding")
        expect("proceed")
        return AuthHttp(verify=True)

    try:
        config = ServerConfig(name=name, type="http", url=server_url)
        seen = from_credentials(store.get_credentials(name)).access_token
        say(event="ready", seen=fp(seen))
        expect("go")
        say(event="calling")
        if mode == "held":
            record, requested = refresh_held(AnnouncingStore(store), config, seen, {}, http_factory)
        elif mode == "refresher":
            ref = TokenRefresher.start(AnnouncingStore(store), {}, http_factory)
            try:
                record, requested = refresh_by(ref)(config, seen).result(timeout=WAIT_S), None
            finally:
                ref.stop(timeout=WAIT_S)
        else:
            raise SystemExit(f"unknown mode {mode}")
        stored = from_credentials(store.get_credentials(name))
        say(event="result", requested=requested, requests=requests,
            state=record.state, access=fp(record.access_token), refresh=fp(record.refresh_token),
            stored_state=stored.state, stored_access=fp(stored.access_token), stored_refresh=fp(stored.refresh_token))
    finally:
        store.close()


if __name__ == "__main__":
    main()
