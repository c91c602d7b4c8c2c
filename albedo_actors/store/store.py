"""The store: credentials, saved catalogues, OAuth client registrations, the revision,
the last state ``albedo-mcp doctor`` saw of each server, tool integrity's trusted
definitions, holds and history (catalogue/trust.py; migration 0005), and MCP tasks, the
long-running tool calls a server runs as tasks (migration 0006): a row per task, so a
process started after a SIGKILL finds them again, with a lease so that one process (of
any host sharing a PostgreSQL database) polls a task at a time.

Owns one peewee database (SQLite at ``$ALBEDO_HOME/albedo.db`` by default, or PostgreSQL
by URL) and every connection to it: one connection per thread that uses the store,
opened on first use and all closed by :meth:`Store.close`. Hands out frozen records
(:class:`Credentials`, :class:`SavedCatalogue`) and fresh plain dicts, never rows.

Durability and concurrency:

- SQLite: WAL, ``synchronous=FULL``, a bounded busy timeout (a second process writing
  at once waits instead of failing), every write in ``BEGIN IMMEDIATE``; the database
  file and its ``-wal``/``-shm`` are 0600 inside a 0700 home.
- PostgreSQL: read-modify-write takes the row with ``SELECT ... FOR UPDATE``; lock
  waits and statements are bounded by ``lock_timeout``/``statement_timeout``.
- Each write is one transaction over one row, so a process killed mid-write leaves
  the old record or the new one, never a mix.

The revision (:meth:`Store.revision`, table ``albedo_revision``): one counter that every
write changing what a session is offered bumps inside its own transaction, so a reader
that sees the new revision sees the write too. A credentials write bumps it when the
server's secrets or sign-in changed (:func:`visible`); a token refresh that only rotates
the tokens does not (every running session would reload for nothing). The settings bump
it after each write of ``extensions.json`` (:meth:`Store.bump_revision`). Saved
catalogues, the states doctor saw, OAuth client registrations, refresh leases,
re-sealing, tasks, trusting a first catalogue and recording a hold never bump it; approving a
held tool does (:meth:`Store.approve_held`).

Every failure of the database or its driver becomes :class:`StoreError` with a
one-line message that names the operation and never a secret value.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import sqlite3
import threading
import time
import urllib.parse
from typing import Any, Callable, Iterable, Iterator, Mapping

import peewee
from peewee import PostgresqlDatabase, SqliteDatabase

from ..wire import telemetry
from ..errors import StoreError
from ..wire.jsonrpc import MAX_DEPTH, Json  # the wire's nesting bound (store may import wire: it is pure)
from ..safefiles import FileRefused, check_not_link, make_private_dirs, open_private
from . import migrations, sealing
from .models import (CatalogueRow, CredentialRow, HoldRow, OAuthClientRow, RevisionRow, ServerStateRow, TaskRow, TrustedRow,
                     TrustEventRow)
from .records import (TASK_ACTIVE, Credentials, HeldDefinition, SavedCatalogue, ServerState, TaskRecord, TrustEvent,
                      TrustedDefinition, thaw)
from .sealing import StoreKeys

__all__ = ["open_store", "Store", "CredentialsWriter", "Lease", "MAX_CATALOGUE_BYTES", "DB_FILENAME", "BUSY_TIMEOUT_S",
           "visible"]

log = telemetry.logger(__name__)  # records carry the server and trace ids

DB_FILENAME = "albedo.db"
# A saved catalogue larger than this (as UTF-8 JSON) is refused.
MAX_CATALOGUE_BYTES = 8 * 1024 * 1024
# How long a writer waits for another process's write lock before failing (SQLite busy
# timeout; PostgreSQL lock_timeout).
BUSY_TIMEOUT_S = 30.0
PG_CONNECT_TIMEOUT_S = 10
# The many-server reads name up to this many servers in their query; more, and they read every row.
FEW = 16
# The trust history keeps about this many lines (the newest).
TRUST_HISTORY = 1000
PG_STATEMENT_TIMEOUT_S = 60
# What a user can do about a database that failed (a StoreError says it on its one line).
RETRY = "check that the database is there, writable and not held by another program, then retry"

class _HideQueryParameters(logging.Filter):
    """peewee logs every query with its parameters at DEBUG; ours hold tokens and secrets.

    The query text is kept (it names tables and columns), the parameters never reach a
    handler, whatever the host's logging configuration.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.msg
        if isinstance(message, tuple) and len(message) == 2 and isinstance(message[0], str):
            params = message[1]
            count = len(params) if isinstance(params, (list, tuple)) else "some"
            record.msg, record.args = f"{message[0]} -- {count} parameters hidden", ()
        return True


_PEEWEE_FILTER = _HideQueryParameters()
if not any(isinstance(f, _HideQueryParameters) for f in logging.getLogger("peewee").filters):
    logging.getLogger("peewee").addFilter(_PEEWEE_FILTER)

try:  # the `postgres` extra
    import psycopg2
    _DRIVER_ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error, psycopg2.Error)
except ImportError:  # pragma: no cover - depends on the extra
    psycopg2 = None
    _DRIVER_ERRORS = (sqlite3.Error,)


class _FromEnviron:
    def __repr__(self) -> str:
        return "FROM_ENVIRON"


FROM_ENVIRON: Any = _FromEnviron()


def open_store(home: str, url: str | None = None, keys: StoreKeys | None = FROM_ENVIRON,
               environ: Mapping[str, str] | None = None) -> "Store":
    """Open (creating and migrating as needed) the store.

    ``url`` None means ``$ALBEDO_DATABASE_URL``, else SQLite at ``home/albedo.db``.
    ``postgresql://`` (or ``postgres://``) URLs select PostgreSQL (extra ``postgres``);
    ``sqlite:///PATH`` names another SQLite file.

    ``keys`` seal the secrets at rest (:mod:`.sealing`); by default they come from
    ``$ALBEDO_STORE_KEY`` (or ``$ALBEDO_STORE_KEY_FILE``, plus ``$ALBEDO_STORE_OLD_KEY``
    to read a store mid-rotation) of ``environ`` (default ``os.environ``); None: no key.

    Raises:
        StoreError: the URL is not understood, a key variable gives no key, or the
            database cannot be opened or migrated.
    """
    environ = os.environ if environ is None else environ
    if keys is FROM_ENVIRON:
        keys = sealing.keys_from(environ)
    url = url or environ.get("ALBEDO_DATABASE_URL") or None
    if url is None:
        return Store(_sqlite(os.path.join(home, DB_FILENAME), home, keys is not None), "sqlite:" + DB_FILENAME, keys)
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme in ("postgresql", "postgres"):
        return Store(_postgres(url), _redact(url), keys)
    if scheme == "sqlite":
        path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
        if not path:
            raise StoreError(f"store: database URL {_redact(url)} names no file")
        return Store(_sqlite(path, os.path.dirname(path) or ".", keys is not None), "sqlite:" + path, keys)
    raise StoreError(f"store: database URL scheme {scheme or '(none)'!r} is not supported; "
                     "use postgresql://... or leave it unset for SQLite in $ALBEDO_HOME")


class Store:
    """Credentials, saved catalogues and OAuth clients; safe to use from several threads.

    Use :func:`open_store` to get one, and :meth:`close` it when every thread is done.
    """

    def __init__(self, db: _SqliteDatabase | _PostgresqlDatabase, where: str, keys: StoreKeys | None = None) -> None:
        self._db = db
        self._where = where
        self._keys = keys
        self._pg = isinstance(db, PostgresqlDatabase)
        self._closed = False
        with self._op("open"):
            self.migrations_applied = tuple(migrations.migrate(db))

    def __repr__(self) -> str:
        return f"<Store {self._where}{' closed' if self._closed else ''}>"

    # --- credentials ----------------------------------------------------------

    def get_credentials(self, server: str) -> Credentials:
        """The server's credentials; ``Credentials()`` when none are stored.

        Raises:
            StoreError: the database failed.
        """
        with self._op(f"reading the credentials of {server!r}"):
            row = CredentialRow.select().where(CredentialRow.server == server).first(self._db)
            return self._credentials(row)

    def get_credentials_of(self, servers: Iterable[str]) -> dict[str, Credentials | StoreError]:
        """The credentials of each of ``servers`` (``Credentials()`` for one with none
        stored), in one query instead of one per server. A server whose stored
        credentials cannot be read (damaged, sealed under a key not given) is its
        StoreError, as :meth:`get_credentials` of it would raise; the others are still
        given, so one such row is that server's error and never the whole home's.

        Raises:
            StoreError: the database failed.
        """
        names = list(dict.fromkeys(servers))
        wanted = set(names)
        found: dict[str, Credentials | StoreError] = {}
        # A failure names the servers when there are few (one line stays short).
        which = ", ".join(map(repr, names)) if len(names) <= 3 else f"{len(names)} servers"
        with self._op(f"reading the credentials of {which}"):
            for query in _selecting(CredentialRow.select(), CredentialRow.server, names):
                for row in query.execute(self._db):
                    if row.server in wanted:
                        try:
                            found[row.server] = self._credentials(row)
                        except StoreError as exc:
                            found[row.server] = exc
        return {name: found[name] if name in found else Credentials() for name in names}

    def put_credentials(self, server: str, creds: Credentials) -> None:
        """Replace the server's credentials (storing ``Credentials()`` keeps an empty row).

        Raises:
            StoreError: the database failed.
        """
        with self._op(f"saving the credentials of {server!r}"), self._write():
            query = CredentialRow.select().where(CredentialRow.server == server)
            if self._pg:
                query = query.for_update()
            row = query.first(self._db)
            old: Credentials | None = Credentials()
            if row is not None:  # never replace what the key given cannot read
                sealing.check_overwritable(self._keys, tuple(getattr(row, c) for c in _SEALED_CREDENTIALS),
                                           f"credentials of {server!r}")
                old = self._credentials_or_none(row)
            self._upsert_credentials(server, creds, old)

    def update_credentials(self, server: str, fn: Callable[[Credentials], Credentials]) -> Credentials:
        """Read, ``fn(old)``, write back, in one transaction that holds the row; returns the new one.

        Two processes updating the same server at once are serialised: neither loses
        the other's change. ``fn`` runs inside the transaction: keep it short and
        free of I/O. An exception from ``fn`` rolls back and propagates unchanged.

        Raises:
            StoreError: the database failed.
        """
        with self.holding_credentials(server) as (old, put):
            new = fn(old)
            if not isinstance(new, Credentials):
                raise TypeError("update_credentials: fn must return Credentials")
            put(new)
            return new

    @contextlib.contextmanager
    def holding_credentials(self, server: str) -> Iterator[tuple[Credentials, "CredentialsWriter"]]:
        """Hold the server's credentials row for one short read-decide-write.

        Yields ``(current, put)``; ``put(new)`` writes inside the same transaction,
        which commits when the block ends (an exception rolls it back). Another
        process (or thread) holding it waits up to the busy/lock timeout. On SQLite
        this is the database's write lock, so the block must do no network or other
        slow I/O: every other writer of the store waits for it. A token refresh takes
        the row's refresh lease here (``put.lease``, ``put.take_lease``), makes its
        request outside, and writes the result in a second block.

        Raises:
            StoreError: the database failed or the lock was not had in time.
        """
        with self._op(f"updating the credentials of {server!r}"), self._write():
            # Make sure there is a row to lock (FOR UPDATE locks nothing that is not there).
            empty = "{}" if self._keys is None else self._keys.seal(("credentials", server, "env"), "{}")
            CredentialRow.insert(server=server, env=empty, updated_at=time.time()) \
                .on_conflict_ignore().execute(self._db)
            query = CredentialRow.select().where(CredentialRow.server == server)
            if self._pg:
                query = query.for_update()
            row = query.first(self._db)
            current = self._credentials(row)
            yield current, CredentialsWriter(self, server, _lease(row), current)

    def credentials_and_lease(self, server: str) -> tuple[Credentials, "Lease | None"]:
        """The server's credentials and its refresh lease, read without taking any lock.

        Raises:
            StoreError: the database failed.
        """
        with self._op(f"reading the credentials of {server!r}"):
            row = CredentialRow.select().where(CredentialRow.server == server).first(self._db)
            return self._credentials(row), _lease(row)

    def delete_credentials(self, server: str) -> None:
        """Forget the server's credentials (nothing happens when there are none), and with
        them the dynamic client registration its OAuth record signed in with.

        A removed server's registration is not reused: a server added again (under any
        name) registers a new client, unless another server still uses that registration
        (its record names it and was not signed out): then it is kept for that server's
        next sign-in, and a registration the authorization server forgot is caught there
        (``invalid_client``, no callback, an RFC 7592 read). The record's
        ``client_kind``, ``issuer`` and ``client_id`` name it (``auth/record.py``); every
        redirect URI it was kept for goes. A record that cannot be read (sealed under a
        key not given) forgets nothing, and another server's record that cannot be read
        counts as using it: the row is deleted all the same (``remove`` needs no key).

        Raises:
            StoreError: the database failed.
        """
        with self._op(f"deleting the credentials of {server!r}"), self._write():
            row = CredentialRow.select(CredentialRow.oauth).where(CredentialRow.server == server).first(self._db)
            registered = _registration_of(self._keys, server, row.oauth if row is not None else None)
            if CredentialRow.delete().where(CredentialRow.server == server).execute(self._db):
                self._bump()
            if registered is not None and not self._registration_used(server, registered):
                self._delete_clients(*registered)

    def _registration_used(self, server: str, registered: tuple[str, str]) -> bool:
        """True when a server other than ``server`` uses the registration (issuer, client
        id): its record names it and was not signed out, or its record cannot be read.
        Inside the caller's transaction."""
        rows = CredentialRow.select(CredentialRow.server, CredentialRow.oauth).where(
            (CredentialRow.server != server) & CredentialRow.oauth.is_null(False)).tuples().execute(self._db)
        return any(_uses_registration(self._keys, other, text, registered) for other, text in rows)

    # --- the revision ---------------------------------------------------------

    def revision(self) -> int:
        """The store's revision: it has moved whenever a write changed what a session is
        offered (see the module docstring). One primary-key SELECT; takes no lock.

        A failure is not logged here: the caller (``settings_watch``) reads it on every
        session's activity and says once that it fails.

        Raises:
            StoreError: the database failed.
        """
        with self._op("reading the store's revision", quiet=True):
            cursor = self._db.execute_sql(_REVISION_SQL)  # type: ignore[no-untyped-call]
            found = cursor.fetchone()
            return int(found[0]) if found is not None else 0

    def bump_revision(self) -> None:
        """Move the revision on: a change the store cannot see was made (the settings call
        it after each write of ``extensions.json``, so a host that shares the database
        hears it even where the file's change is slow to show).

        Raises:
            StoreError: the database failed.
        """
        with self._op("bumping the store's revision"), self._write():
            self._bump()

    # --- catalogues -----------------------------------------------------------

    def save_catalogue(self, server: str, fingerprint: str, era: str, catalogue: dict[str, Any]) -> None:
        """Save the server's catalogue, replacing the one saved before.

        Raises:
            StoreError: the catalogue is not JSON or is larger than ``MAX_CATALOGUE_BYTES``
                as JSON, or the database failed.
        """
        try:
            text = json.dumps(thaw(catalogue), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:  # RecursionError: nested too deep to encode
            raise StoreError(f"store: the catalogue of server {server!r} is not JSON: {_line(exc)}") from None
        size = len(text.encode("utf-8"))
        if size > MAX_CATALOGUE_BYTES:
            raise StoreError(
                f"store: the catalogue of server {server!r} is {size} bytes of JSON, over the "
                f"{MAX_CATALOGUE_BYTES}-byte limit; it was not saved")
        with self._op(f"saving the catalogue of {server!r}"), self._write():
            CatalogueRow.insert(server=server, fingerprint=fingerprint, era=era, catalogue=text,
                                saved_at=time.time()).on_conflict(
                conflict_target=[CatalogueRow.server],
                preserve=[CatalogueRow.fingerprint, CatalogueRow.era, CatalogueRow.catalogue,
                          CatalogueRow.saved_at]).execute(self._db)

    def load_catalogue(self, server: str) -> SavedCatalogue | None:
        """The server's saved catalogue, or None.

        Raises:
            StoreError: the database failed, or the saved JSON is unreadable.
        """
        with self._op(f"loading the catalogue of {server!r}"):
            row = CatalogueRow.select().where(CatalogueRow.server == server).first(self._db)
            if row is None:
                return None
            return SavedCatalogue(server=row.server, fingerprint=row.fingerprint, era=row.era,
                                  catalogue=_json_object(row.catalogue, "catalogue", server),
                                  saved_at=row.saved_at, text=row.catalogue)

    def load_catalogues(self, servers: Iterable[str]) -> dict[str, SavedCatalogue | StoreError]:
        """The saved catalogue of each of ``servers`` that has one, in one query; a row
        whose JSON is unreadable is its StoreError (as
        :meth:`load_catalogue` of that server would raise), the others are still given.

        Raises:
            StoreError: the database failed.
        """
        names = list(dict.fromkeys(servers))
        wanted = set(names)
        found: dict[str, SavedCatalogue | StoreError] = {}
        with self._op(f"loading the catalogues of {len(names)} servers"):
            select = CatalogueRow.select(CatalogueRow.server, CatalogueRow.fingerprint, CatalogueRow.era,
                                         CatalogueRow.catalogue, CatalogueRow.saved_at).tuples()
            for query in _selecting(select, CatalogueRow.server, names):
                for server, fingerprint, era, text, saved_at in query.execute(self._db):
                    if server not in wanted:
                        continue
                    try:
                        found[server] = SavedCatalogue(server=server, fingerprint=fingerprint, era=era,
                                                       catalogue=_json_object(text, "catalogue", server), saved_at=saved_at,
                                                       text=text)
                    except StoreError as exc:
                        found[server] = exc
        return found

    def delete_catalogue(self, server: str) -> None:
        """Forget the server's saved catalogue.

        Raises:
            StoreError: the database failed.
        """
        with self._op(f"deleting the catalogue of {server!r}"), self._write():
            CatalogueRow.delete().where(CatalogueRow.server == server).execute(self._db)

    # --- the states doctor saw --------------------------------------------------

    def save_server_state(self, server: str, state: str, fingerprint: str, report: dict[str, Any]) -> None:
        """Keep ``state`` as the last one seen of ``server`` (now), replacing the one before.
        Never bumps the revision: no session is offered anything new by it.

        Raises:
            StoreError: ``report`` is not JSON, or the database failed.
        """
        try:
            text = json.dumps(thaw(report), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise StoreError(f"store: the state of server {server!r} is not JSON: {_line(exc)}") from None
        with self._op(f"saving the state of {server!r}"), self._write():
            ServerStateRow.insert(server=server, state=state, fingerprint=fingerprint, report=text,
                                  seen_at=time.time()).on_conflict(
                conflict_target=[ServerStateRow.server],
                preserve=[ServerStateRow.state, ServerStateRow.fingerprint, ServerStateRow.report,
                          ServerStateRow.seen_at]).execute(self._db)

    def load_server_states(self, servers: Iterable[str]) -> dict[str, ServerState | StoreError]:
        """The last state seen of each of ``servers`` that has one, in one query; a row
        whose JSON is unreadable is its StoreError, the others are still given.

        Raises:
            StoreError: the database failed.
        """
        names = list(dict.fromkeys(servers))
        wanted = set(names)
        found: dict[str, ServerState | StoreError] = {}
        with self._op(f"loading the states of {len(names)} servers"):
            select = ServerStateRow.select(ServerStateRow.server, ServerStateRow.state, ServerStateRow.fingerprint,
                                           ServerStateRow.report, ServerStateRow.seen_at).tuples()
            for query in _selecting(select, ServerStateRow.server, names):
                for server, state, fingerprint, text, seen_at in query.execute(self._db):
                    if server not in wanted:
                        continue
                    try:
                        found[server] = ServerState(server=server, state=state, fingerprint=fingerprint,
                                                    report=_json_object(text, "state", server), seen_at=seen_at)
                    except StoreError as exc:
                        found[server] = exc
        return found

    def delete_server_state(self, server: str) -> None:
        """Forget the last state seen of ``server``.

        Raises:
            StoreError: the database failed.
        """
        with self._op(f"deleting the state of {server!r}"), self._write():
            ServerStateRow.delete().where(ServerStateRow.server == server).execute(self._db)

    # --- tool integrity (catalogue/trust.py) -------------------------------------

    def load_trust(self, servers: Iterable[str], definitions: bool = True
                   ) -> dict[str, tuple[list[TrustedDefinition], list[HeldDefinition]]]:
        """What is trusted and what is held of each of ``servers`` that has anything,
        in two queries. A row whose JSON is unreadable is left out (a damaged trusted
        row makes its tool new again: held, never offered unchecked). Without
        ``definitions`` the trusted rows come with their digests alone (``definition``
        empty): what a discovery compares, without decoding every definition.

        Raises:
            StoreError: the database failed.
        """
        names = list(dict.fromkeys(servers))
        wanted = set(names)
        found: dict[str, tuple[list[TrustedDefinition], list[HeldDefinition]]] = {}
        with self._op(f"loading the trusted tools of {len(names)} servers"):
            text_column = TrustedRow.definition if definitions else peewee.Value("{}")
            select = TrustedRow.select(TrustedRow.server, TrustedRow.kind, TrustedRow.name, TrustedRow.digest,
                                       TrustedRow.whole, text_column, TrustedRow.trusted_at).tuples()
            for query in _selecting(select, TrustedRow.server, names):
                for server, kind, name, digest, whole, text, at in query.execute(self._db):
                    if server in wanted:
                        definition = _json_or_none(text) if definitions else {}
                        if definition is not None:
                            found.setdefault(server, ([], []))[0].append(
                                TrustedDefinition(server, kind, name, digest, whole, definition, at))
            held = HoldRow.select(HoldRow.server, HoldRow.kind, HoldRow.name, HoldRow.change, HoldRow.changes,
                                  HoldRow.digest, HoldRow.whole, HoldRow.definition, HoldRow.held_at).tuples()
            for query in _selecting(held, HoldRow.server, names):
                for server, kind, name, change, changes, digest, whole, text, at in query.execute(self._db):
                    definition = _json_or_none(text)
                    if server in wanted and definition is not None:
                        found.setdefault(server, ([], []))[1].append(
                            HeldDefinition(server, kind, name, change, tuple(_json_list(changes)), digest, whole, definition, at))
        return found

    def record_trust(self, server: str, trust: Iterable[TrustedDefinition], holds: Iterable[HeldDefinition],
                     keep: Iterable[tuple[str, str]] | None = None) -> list[HeldDefinition]:
        """In one transaction: trust ``trust`` (first use, or new tools allowed; a definition
        trusted already is kept as it is), hold
        ``holds`` (a hold already kept with the same digest is left as it is), and, when
        ``keep`` is given, forget every hold of ``server`` whose (kind, name) is not in it
        (the tool is gone, or back as it was trusted). Returns the holds that are new
        (held now, or held again with another definition). Never bumps the revision.

        Raises:
            StoreError: a definition is not JSON, or the database failed.
        """
        trust, holds = list(trust), list(holds)
        now = time.time()
        fresh: list[HeldDefinition] = []
        with self._op(f"recording the trusted tools of {server!r}"), self._write():
            known = set(TrustedRow.select(TrustedRow.kind, TrustedRow.name).where(
                TrustedRow.server == server).tuples().execute(self._db)) if trust else set()
            for entry in trust:
                # Never over what another process trusted meanwhile (two hosts' first use at
                # once): the first one kept wins, and the other's next discovery is held.
                if (entry.kind, entry.name) in known:
                    continue
                TrustedRow.insert(server=server, kind=entry.kind, name=entry.name, digest=entry.digest, whole=entry.whole,
                                  definition=_json_text(entry.definition, server),
                                  trusted_at=now).on_conflict_ignore().execute(self._db)
                self._event(server, entry.kind, entry.name, "trusted", (), None, now)
            existing = {(kind, name): (digest, whole) for kind, name, digest, whole in HoldRow.select(
                HoldRow.kind, HoldRow.name, HoldRow.digest, HoldRow.whole).where(HoldRow.server == server).tuples().execute(self._db)}
            for hold in holds:
                if existing.get((hold.kind, hold.name)) == (hold.digest, hold.whole):
                    continue
                HoldRow.insert(server=server, kind=hold.kind, name=hold.name, change=hold.change,
                               changes=json.dumps(list(hold.changes)), digest=hold.digest, whole=hold.whole,
                               definition=_json_text(hold.definition, server), held_at=now).on_conflict(
                    conflict_target=[HoldRow.server, HoldRow.kind, HoldRow.name],
                    preserve=[HoldRow.change, HoldRow.changes, HoldRow.digest, HoldRow.whole, HoldRow.definition,
                              HoldRow.held_at]).execute(self._db)
                self._event(server, hold.kind, hold.name, "held", hold.changes, None, now)
                fresh.append(dataclasses.replace(hold, held_at=now))
            if keep is not None:
                kept = set(keep)
                for kind, name in existing:
                    if (kind, name) not in kept:
                        HoldRow.delete().where((HoldRow.server == server) & (HoldRow.kind == kind)
                                               & (HoldRow.name == name)).execute(self._db)
        return fresh

    def approve_held(self, server: str, names: Iterable[tuple[str, str]] | None, who: str) -> list[HeldDefinition]:
        """Trust what is held of ``server`` (``names``: those alone, as (kind, name)
        pairs; None: all of them),
        forget those holds, write the history (by ``who``) and bump the revision, in one
        transaction. Returns what was approved (a name not held is not in it).

        Raises:
            StoreError: the database failed.
        """
        wanted = None if names is None else set(names)
        now = time.time()
        approved: list[HeldDefinition] = []
        with self._op(f"approving the held tools of {server!r}"), self._write():
            rows = HoldRow.select(HoldRow.kind, HoldRow.name, HoldRow.change, HoldRow.changes, HoldRow.digest, HoldRow.whole,
                                  HoldRow.definition).where(HoldRow.server == server).tuples().execute(self._db)
            for kind, name, change, changes, digest, whole, text in rows:
                if wanted is not None and (kind, name) not in wanted:
                    continue
                TrustedRow.insert(server=server, kind=kind, name=name, digest=digest, whole=whole, definition=text,
                                  trusted_at=now).on_conflict(
                    conflict_target=[TrustedRow.server, TrustedRow.kind, TrustedRow.name],
                    preserve=[TrustedRow.digest, TrustedRow.whole, TrustedRow.definition, TrustedRow.trusted_at]).execute(self._db)
                HoldRow.delete().where((HoldRow.server == server) & (HoldRow.kind == kind) & (HoldRow.name == name)).execute(self._db)
                found = tuple(_json_list(changes))
                self._event(server, kind, name, "approved", found, who, now)
                approved.append(HeldDefinition(server, kind, name, change, found, digest, whole, _json_or_none(text) or {}, now))
            if approved:
                self._bump()
        return approved

    def trust_history(self, server: str | None = None, limit: int = 50) -> list[TrustEvent]:
        """The latest events of the trust history (of ``server``, or of every server), newest first.

        Raises:
            StoreError: the database failed.
        """
        with self._op("reading the trust history"):
            query = TrustEventRow.select().order_by(TrustEventRow.id.desc()).limit(limit)
            if server is not None:
                query = query.where(TrustEventRow.server == server)
            return [TrustEvent(row.server, row.kind, row.name, row.event, tuple(_json_list(row.changes)), row.who, row.at)
                    for row in query.execute(self._db)]

    def forget_trust(self, server: str) -> None:
        """Forget what is trusted and held of ``server`` (its next catalogue is a first use again).

        Raises:
            StoreError: the database failed.
        """
        with self._op(f"forgetting the trusted tools of {server!r}"), self._write():
            TrustedRow.delete().where(TrustedRow.server == server).execute(self._db)
            HoldRow.delete().where(HoldRow.server == server).execute(self._db)

    def _event(self, server: str, kind: str, name: str, event: str, changes: tuple[str, ...], who: str | None,
               at: float) -> None:
        """One line of history; the oldest beyond TRUST_HISTORY lines are dropped (a short history)."""
        row = TrustEventRow.insert(server=server, kind=kind, name=name, event=event, changes=json.dumps(list(changes)),
                                   who=who, at=at).execute(self._db)
        if isinstance(row, int) and row % 64 == 0:  # now and then, not at every line
            TrustEventRow.delete().where(TrustEventRow.id <= row - TRUST_HISTORY).execute(self._db)

    # --- tasks (MCP tasks: long-running tool calls; migration 0006) ----------------

    def add_task(self, record: TaskRecord) -> None:
        """Save ``record`` (a task a server just created), replacing a row with the same
        key (server, task id); in the same transaction, delete every server's expired
        tasks (``expires_at`` before now). The session id, arguments and result are
        sealed when the store has a key. Never bumps the revision.

        Raises:
            StoreError: a value is not JSON, a plaintext session id starts with the
                sealed prefix, or the database failed.
        """
        if not isinstance(record, TaskRecord):
            raise TypeError("add_task takes a TaskRecord")
        values = self._task_columns(record, _TASK_FIELDS)
        with self._op(f"saving the task {_task_name(record.server, record.task_id)}"), self._write():
            self._delete_expired_tasks(time.time())
            TaskRow.insert(server=record.server, task_id=record.task_id, **values).on_conflict(
                conflict_target=[TaskRow.server, TaskRow.task_id],
                update={getattr(TaskRow, k): v for k, v in values.items()}).execute(self._db)

    def update_task(self, server: str, task_id: str, **fields: Any) -> TaskRecord | None:
        """Change only the given fields of a task (any :class:`TaskRecord` field but the
        key and the lease, which :meth:`take_task_lease` and :meth:`drop_task_lease`
        change), in one transaction that holds the row; the updated record, or None when
        the row is gone. ``updated_at`` is the caller's to set (when the state changed).

        Raises:
            TypeError, ValueError: a field is unknown, or a value is not what the
                record takes (nothing is written).
            StoreError: the row's sealed values cannot be read under the key given (it
                says what to do), a value is not JSON, or the database failed.
        """
        unknown = set(fields) - _TASK_UPDATABLE
        if unknown:
            raise TypeError(f"update_task: not a field it changes: {', '.join(sorted(unknown))}")
        with self._op(f"updating the task {_task_name(server, task_id)}"), self._write():
            row = self._task_row(server, task_id, lock=True)
            if row is None:
                return None
            new = dataclasses.replace(self._task(row), **fields)
            if fields:
                TaskRow.update({getattr(TaskRow, k): v for k, v in self._task_columns(new, tuple(fields)).items()}) \
                    .where(_task_key(server, task_id)).execute(self._db)
            return new

    def get_task(self, server: str, task_id: str) -> TaskRecord | None:
        """The task, or None (an expired task not deleted yet is still given: see
        :meth:`TaskRecord.expired`).

        Raises:
            StoreError: its sealed values cannot be read under the key given (the line
                says what to do: set the key, or delete the task), or the database failed.
        """
        with self._op(f"reading the task {_task_name(server, task_id)}"):
            row = self._task_row(server, task_id)
            return None if row is None else self._task(row)

    def find_tasks(self, task_id: str) -> list[TaskRecord]:
        """Every server's task with this id, newest first (the CLI takes a bare id, and
        ``SERVER/ID`` when two servers share one). A task whose sealed values cannot be
        read is given as :meth:`list_tasks` gives it.

        Raises:
            StoreError: the database failed.
        """
        with self._op(f"finding the task {task_id!r}"):
            query = TaskRow.select().where(TaskRow.task_id == task_id).order_by(
                TaskRow.created_at.desc(), TaskRow.server)
            return self._tasks_readable(query.execute(self._db))

    def list_tasks(self, pending_only: bool = True, server: str | None = None) -> list[TaskRecord]:
        """The tasks (of ``server``, or of every server), newest first, after deleting the
        expired ones; ``pending_only``: those still working or waiting for input, or ended
        with an outcome no caller has had (:attr:`TaskRecord.pending`).

        A task whose sealed values (session id, arguments, result) cannot be read under
        the key given never fails the listing: it is listed without them (None), its
        ``error`` the one line why; :meth:`get_task` of it raises that line.

        Raises:
            StoreError: the database failed.
        """
        with self._op("listing the tasks"):
            with self._write():
                self._delete_expired_tasks(time.time())
            query = TaskRow.select()
            if server is not None:
                query = query.where(TaskRow.server == server)
            if pending_only:
                query = query.where(TaskRow.state.in_(sorted(TASK_ACTIVE)) | (TaskRow.delivered == False))  # noqa: E712
            query = query.order_by(TaskRow.created_at.desc(), TaskRow.server, TaskRow.task_id)
            return self._tasks_readable(query.execute(self._db))

    def take_task_lease(self, server: str, task_id: str, owner: str, until: float,
                        gone: str | None = None) -> TaskRecord | None:
        """Take the task's lease for ``owner`` (an opaque id) until ``until`` (Unix time),
        atomically: when nobody holds it, its holder's ran out (``lease_until`` at or
        before now, by this host's clock), ``owner`` holds it already (a renewal), or its
        holder is ``gone`` (an owner the caller knows has ended: a process of its machine
        that no longer runs).
        Returns the record with the lease taken, or None: another holds it, or the row is
        gone (:meth:`get_task` tells them apart). One short transaction holding the row
        (``FOR UPDATE`` on PostgreSQL, the write lock on SQLite): no network I/O in it;
        the polling happens outside, under the lease.

        Raises:
            StoreError: the row's sealed values cannot be read under the key given, or
                the database failed (or its lock was not had in time).
        """
        with self._op(f"taking the lease of the task {_task_name(server, task_id)}"), self._write():
            row = self._task_row(server, task_id, lock=True)
            if row is None:
                return None
            if row.lease_owner is not None and row.lease_until is not None and row.lease_owner != owner \
                    and row.lease_owner != gone and float(row.lease_until) > time.time():
                return None
            record = self._task(row)
            TaskRow.update(lease_owner=owner, lease_until=float(until)).where(_task_key(server, task_id)) \
                .execute(self._db)
            return dataclasses.replace(record, lease_owner=owner, lease_until=float(until))

    def drop_task_lease(self, server: str, task_id: str, owner: str) -> None:
        """Clear the task's lease if ``owner`` holds it (another's, taken over after
        ours ran out, stays).

        Raises:
            StoreError: the database failed.
        """
        with self._op(f"dropping the lease of the task {_task_name(server, task_id)}"), self._write():
            TaskRow.update(lease_owner=None, lease_until=None).where(
                _task_key(server, task_id) & (TaskRow.lease_owner == owner)).execute(self._db)

    def delete_task(self, server: str, task_id: str) -> bool:
        """Forget the task (its sealed values need no key to be deleted); True if there was one.

        Raises:
            StoreError: the database failed.
        """
        with self._op(f"deleting the task {_task_name(server, task_id)}"), self._write():
            return bool(TaskRow.delete().where(_task_key(server, task_id)).execute(self._db))

    def delete_expired_tasks(self, now: float | None = None) -> int:
        """Forget every server's tasks whose ``expires_at`` is before ``now`` (default:
        now); how many.

        Raises:
            StoreError: the database failed.
        """
        with self._op("deleting the expired tasks"), self._write():
            return self._delete_expired_tasks(time.time() if now is None else now)

    def delete_server_tasks(self, server: str) -> int:
        """Forget every task of ``server`` (it was removed); how many.

        Raises:
            StoreError: the database failed.
        """
        with self._op(f"deleting the tasks of {server!r}"), self._write():
            return int(TaskRow.delete().where(TaskRow.server == server).execute(self._db))

    def _delete_expired_tasks(self, now: float) -> int:
        """Inside the caller's write transaction."""
        return int(TaskRow.delete().where(TaskRow.expires_at.is_null(False) & (TaskRow.expires_at < now))
                   .execute(self._db))

    def _task_row(self, server: str, task_id: str, lock: bool = False) -> TaskRow | None:
        query = TaskRow.select().where(_task_key(server, task_id))
        if lock and self._pg:
            query = query.for_update()
        row: TaskRow | None = query.first(self._db)
        return row

    def _task(self, row: TaskRow, lenient: bool = False) -> TaskRecord:
        """The row's record. ``lenient``: a sealed value that cannot be read is None and
        ``error`` says why, instead of raising that StoreError."""
        what = f"task values of {_task_name(row.server, row.task_id)}"
        opened: dict[str, Any] = {}
        problem: StoreError | None = None
        for column in _SEALED_TASK:
            try:
                text = sealing.open_value(self._keys, ("tasks", row.server, row.task_id, column), getattr(row, column), what)
                if text is not None and column != "session_id":
                    opened[column] = _json_object(text, "task", _task_name(row.server, row.task_id))
                else:
                    opened[column] = text
            except StoreError as exc:
                if not lenient:
                    raise
                opened[column], problem = None, problem or exc
        try:
            return TaskRecord(
                server=row.server, task_id=row.task_id, tool=row.tool, era=row.era, version=row.version,
                transport=row.transport, session_id=opened["session_id"], arguments_digest=row.arguments_digest,
                arguments=opened["arguments"], state=row.state, message=row.message, poll_ms=int(row.poll_ms),
                ttl_ms=None if row.ttl_ms is None else int(row.ttl_ms), created_at=row.created_at,
                updated_at=row.updated_at, expires_at=row.expires_at, answered=tuple(_json_list(row.answered)),
                result=opened["result"], error=str(problem) if problem is not None else row.error,
                delivered=bool(row.delivered), lease_owner=row.lease_owner, lease_until=row.lease_until)
        except (TypeError, ValueError) as exc:  # a state (era, transport) this version does not know
            raise StoreError(f"store: the saved task {_task_name(row.server, row.task_id)} is damaged or from a newer "
                             f"albedo ({_line(exc)}); {sealing.FORGET_TASK}") from None

    def _tasks_readable(self, rows: Iterable[TaskRow]) -> list[TaskRecord]:
        """The records of ``rows``, leniently (:meth:`_task`); a row no record can be made
        of (an unknown state) is left out, with a warning."""
        found = []
        for row in rows:
            try:
                found.append(self._task(row, lenient=True))
            except StoreError as exc:
                log.warning("%s", exc)
        return found

    def _task_columns(self, record: TaskRecord, names: Iterable[str]) -> dict[str, Any]:
        """The columns of ``record``'s fields ``names``, as stored (JSON text, sealed with a key)."""
        values: dict[str, Any] = {}
        where = _task_name(record.server, record.task_id)
        for name in names:
            value = getattr(record, name)
            if name in ("arguments", "result") and value is not None:
                value = _json_value_text(value, f"the {name} of the task {where}")
            elif name == "answered":
                value = json.dumps(list(value))
            elif name == "session_id":
                sealing.refuse_prefix(value, f"the session id of the task {where}")
            if name in _SEALED_TASK and value is not None and self._keys is not None:
                value = self._keys.seal(("tasks", record.server, record.task_id, name), value)
            values[name] = value
        return values

    # --- OAuth client registrations -------------------------------------------

    def put_oauth_client(self, issuer: str, redirect_uri: str, client: dict[str, Any]) -> None:
        """Save the client registration for (issuer, redirect URI), replacing any before.

        Raises:
            StoreError: ``client`` is not JSON, or the database failed.
        """
        try:
            text = json.dumps(thaw(client), separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError, RecursionError):
            raise StoreError(f"store: the OAuth client for issuer {issuer!r} is not JSON") from None
        with self._op(f"saving the OAuth client for issuer {issuer!r}"), self._write():
            where = ("oauth_clients", issuer, redirect_uri, "client")
            query = OAuthClientRow.select(OAuthClientRow.client).where(
                (OAuthClientRow.issuer == issuer) & (OAuthClientRow.redirect_uri == redirect_uri))
            if self._pg:
                query = query.for_update()
            for (old,) in query.tuples().execute(self._db):
                sealing.check_overwritable(self._keys, (old,), f"OAuth client for issuer {issuer!r}")
            if self._keys is not None:
                text = self._keys.seal(where, text)
            OAuthClientRow.insert(issuer=issuer, redirect_uri=redirect_uri, client=text,
                                  saved_at=time.time()).on_conflict(
                conflict_target=[OAuthClientRow.issuer, OAuthClientRow.redirect_uri],
                preserve=[OAuthClientRow.client, OAuthClientRow.saved_at]).execute(self._db)

    def get_oauth_client(self, issuer: str, redirect_uri: str) -> dict[str, Any] | None:
        """The client registration for (issuer, redirect URI) as a fresh dict, or None.

        Raises:
            StoreError: the database failed.
        """
        with self._op(f"reading the OAuth client for issuer {issuer!r}"):
            row = OAuthClientRow.select().where(
                (OAuthClientRow.issuer == issuer) & (OAuthClientRow.redirect_uri == redirect_uri)
            ).first(self._db)
            if row is None:
                return None
            return _json_object(self._open_client(row.issuer, row.redirect_uri, row.client), "OAuth client", issuer)

    def delete_oauth_client(self, issuer: str, client_id: str) -> int:
        """Forget the registrations of ``client_id`` at ``issuer`` (any redirect URI); how many.

        Used when the authorization server no longer knows a registration albedo kept
        (``invalid_client``, a sign-in with it that got no callback, an RFC 7592 read
        that found it gone): the next sign-in registers afresh.

        Raises:
            StoreError: the database failed.
        """
        with self._op(f"deleting an OAuth client for issuer {issuer!r}"), self._write():
            return self._delete_clients(issuer, client_id)

    def _delete_clients(self, issuer: str, client_id: str) -> int:
        """Delete the rows of ``client_id`` at ``issuer``, inside the caller's transaction."""
        rows = OAuthClientRow.select().where(OAuthClientRow.issuer == issuer).execute(self._db)
        gone = [row.redirect_uri for row in rows
                if _client_id_of(self._open_client(row.issuer, row.redirect_uri, row.client, strict=False)) == client_id]
        for redirect_uri in gone:
            OAuthClientRow.delete().where((OAuthClientRow.issuer == issuer)
                                          & (OAuthClientRow.redirect_uri == redirect_uri)).execute(self._db)
        return len(gone)

    # --- sealing: store encrypt / rotate-key / decrypt / status ------------------

    @property
    def digest_key(self) -> bytes | None:
        """The key of every digest of a secret kept beside the secrets (the saved
        catalogues' fingerprints, :func:`albedo_actors.catalogue.saved.fingerprint`): one
        derived from the store key (:mod:`.sealing`), never the store key; None without one."""
        return self._keys.digest_key if self._keys is not None else None

    def sealing_status(self) -> dict[str, int]:
        """How many rows (credentials, OAuth clients and tasks) hold a secret in clear
        (``"plaintext"``), how many are sealed, by key id (``"key <id>"``), and how many
        hold a value that starts with the sealed prefix but is not one (``"damaged"``,
        only when there is one). A task row holding no secret (no session id, arguments
        or result) is not counted. Needs no key.

        Raises:
            StoreError: the database failed.
        """
        counts: dict[str, int] = {"plaintext": 0}
        with self._op("reading the store's encryption status"):
            rows = [values for values in CredentialRow.select(*_SEALED_CREDENTIAL_COLUMNS).tuples().execute(self._db)]
            rows += [values for values in OAuthClientRow.select(OAuthClientRow.client).tuples().execute(self._db)]
            rows += [values for values in TaskRow.select(*_SEALED_TASK_COLUMNS).tuples().execute(self._db)]
        for values in rows:
            present = [v for v in values if v is not None]
            if not present:
                continue  # a task with no secret
            if any(sealing.is_sealed(v) and sealing.sealed_key_id(v) is None for v in present):
                counts["damaged"] = counts.get("damaged", 0) + 1
                continue
            if any(not sealing.is_sealed(v) for v in present):
                counts["plaintext"] += 1
                continue
            kids = sorted({sealing.sealed_key_id(v) or "?" for v in present})
            label = "key " + "+".join(kids)
            counts[label] = counts.get(label, 0) + 1
        return counts

    def reseal(self, to_plaintext: bool = False,
               progress: Callable[[str, tuple[str, ...]], None] | None = None,
               unreadable: Callable[[str], None] | None = None) -> dict[str, int]:
        """Write every secret value of the store sealed under the key (``store encrypt``;
        ``rotate-key`` when the store was opened with the new key and the old one as a
        previous key), or in clear (``to_plaintext``: ``store decrypt``).

        One row per short transaction, the row locked: a process killed at any moment
        leaves each row as it was or as it is now, every row readable (in clear, or
        sealed under one of the keys), and a second run finishes. Values already in the
        wanted form are left as they are. ``progress(table, row key)`` is called inside
        each row's transaction, after its update, before its commit (tests stop there).

        A row that cannot be read (damaged, sealed under a key not given, or, for
        ``to_plaintext``, holding a value that in clear would read as sealed) is left as
        it is and the run goes on: ``unreadable(line)`` hears each one's StoreError line;
        without it, the first one is raised once every other row is done.

        Returns ``{"rewritten": n, "kept": n}`` (the unreadable rows count in neither).

        Raises:
            StoreError: no key is set (to seal), a row cannot be read and ``unreadable``
                is None (the rows done stay done), or the database failed.
        """
        if not to_plaintext and self._keys is None:
            raise StoreError("store: no key is set: set ALBEDO_STORE_KEY (or ALBEDO_STORE_KEY_FILE) to the key to "
                             "encrypt with (make one with: albedo-mcp store new-key)")
        counts = {"rewritten": 0, "kept": 0}
        problems: list[str] = []
        with self._op("listing the rows to rewrite"):
            servers = [name for (name,) in CredentialRow.select(CredentialRow.server).tuples().execute(self._db)]
            clients = list(OAuthClientRow.select(OAuthClientRow.issuer, OAuthClientRow.redirect_uri)
                           .tuples().execute(self._db))
            tasks = list(TaskRow.select(TaskRow.server, TaskRow.task_id).tuples().execute(self._db))
        for server in servers:
            with self._op(f"rewriting the credentials of {server!r}"), self._write():
                query = CredentialRow.select(*_SEALED_CREDENTIAL_COLUMNS).where(CredentialRow.server == server)
                if self._pg:
                    query = query.for_update()
                found = list(query.tuples().execute(self._db))
                if not found:
                    continue  # deleted meanwhile
                changes = {}
                try:
                    for column, text in zip(_SEALED_CREDENTIALS, found[0]):
                        new = self._resealed(("credentials", server, column), text, to_plaintext,
                                             f"credentials of {server!r}")
                        if new != text:
                            changes[getattr(CredentialRow, column)] = new
                except StoreError as exc:  # nothing of this row was written: it stays as it is
                    problems.append(str(exc))
                    if unreadable is not None:
                        unreadable(str(exc))
                    continue
                if changes:
                    CredentialRow.update(changes).where(CredentialRow.server == server).execute(self._db)
                counts["rewritten" if changes else "kept"] += 1
                if progress is not None:
                    progress("credentials", (server,))
        for issuer, redirect_uri in clients:
            with self._op(f"rewriting the OAuth client for issuer {issuer!r}"), self._write():
                match = (OAuthClientRow.issuer == issuer) & (OAuthClientRow.redirect_uri == redirect_uri)
                clients_query = OAuthClientRow.select(OAuthClientRow.client).where(match)
                if self._pg:
                    clients_query = clients_query.for_update()
                found = list(clients_query.tuples().execute(self._db))
                if not found:
                    continue
                text = found[0][0]
                try:
                    new = self._resealed(("oauth_clients", issuer, redirect_uri, "client"), text, to_plaintext,
                                         f"OAuth client for issuer {issuer!r}")
                except StoreError as exc:
                    problems.append(str(exc))
                    if unreadable is not None:
                        unreadable(str(exc))
                    continue
                if new != text:
                    OAuthClientRow.update(client=new).where(match).execute(self._db)
                counts["rewritten" if new != text else "kept"] += 1
                if progress is not None:
                    progress("oauth_clients", (issuer, redirect_uri))
        for server, task_id in tasks:
            with self._op(f"rewriting the task {_task_name(server, task_id)}"), self._write():
                task_query = TaskRow.select(*_SEALED_TASK_COLUMNS).where(_task_key(server, task_id))
                if self._pg:
                    task_query = task_query.for_update()
                found = list(task_query.tuples().execute(self._db))
                if not found or all(text is None for text in found[0]):
                    continue  # deleted meanwhile (expired, or forgotten), or it holds no secret
                task_changes = {}
                try:
                    for column, text in zip(_SEALED_TASK, found[0]):
                        new = self._resealed(("tasks", server, task_id, column), text, to_plaintext,
                                             f"task values of {_task_name(server, task_id)}")
                        if new != text:
                            task_changes[getattr(TaskRow, column)] = new
                except StoreError as exc:
                    problems.append(str(exc))
                    if unreadable is not None:
                        unreadable(str(exc))
                    continue
                if task_changes:
                    TaskRow.update(task_changes).where(_task_key(server, task_id)).execute(self._db)
                counts["rewritten" if task_changes else "kept"] += 1
                if progress is not None:
                    progress("tasks", (server, task_id))
        if counts["rewritten"]:
            self._compact()
        if problems and unreadable is None:
            raise StoreError(problems[0])
        return counts

    def _compact(self) -> None:
        """Drop the old versions of rewritten rows from the database's files.

        SQLite: ``VACUUM`` builds the file afresh (free pages and the free space inside
        pages may still hold the values in clear), then the -wal is checkpointed and
        truncated. PostgreSQL: ``VACUUM FULL`` of the three tables rewrites them without
        their dead row versions; it waits for other sessions' locks within the lock
        timeout, and if it cannot run (not the tables' owner) the rows are still sealed.
        """
        if not self._pg:
            with self._op("compacting the database"):
                self._db.execute_sql("VACUUM")  # type: ignore[no-untyped-call]
                self._db.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")  # type: ignore[no-untyped-call]
            return
        try:
            with self._op("compacting the credentials tables"):
                conn = self._db.connection()  # type: ignore[no-untyped-call]
                # VACUUM runs outside any transaction block. peewee runs its connections in
                # autocommit already; whatever the mode was, it is put back (left off, every
                # later read of this connection would stay "idle in transaction", holding
                # its locks: another store's VACUUM FULL would wait out the lock timeout).
                was = conn.autocommit
                conn.autocommit = True
                try:
                    with conn.cursor() as cursor:
                        cursor.execute("VACUUM FULL credentials, oauth_clients, tasks")
                finally:
                    conn.autocommit = was
        except StoreError as exc:
            log.warning("the old row versions were not compacted away (run VACUUM FULL credentials, "
                        "oauth_clients, tasks as their owner): %s", exc)

    def _resealed(self, where: tuple[str, ...], text: str | None, to_plaintext: bool, what: str) -> str | None:
        if text is None:
            return None
        if to_plaintext:
            plain = sealing.open_value(self._keys, where, text, what)
            if sealing.is_sealed(text) and sealing.is_sealed(plain):  # an older albedo sealed it
                raise StoreError(f"store: the saved {what} hold a value that starts with {sealing.PREFIX!r}, which "
                                 f"in clear would read as encrypted, so they stay encrypted; {sealing.REMOVE_AND_ADD}")
            return plain
        keys = self._keys
        assert keys is not None
        if not sealing.is_sealed(text):
            return keys.seal(where, text)
        if sealing.sealed_key_id(text) == keys.kid:
            return text  # done already (a run killed midway, run again)
        return keys.seal(where, keys.open(where, text, what))  # under a previous key: rotate

    # --- lifecycle ------------------------------------------------------------

    def close(self) -> None:
        """Close every connection of every thread. Idempotent; later calls raise StoreError."""
        if self._closed:
            return
        self._closed = True
        self._db.close_all_connections()

    def schema_versions(self) -> list[int]:
        """The migrations recorded in this database (for admins and tests)."""
        with self._op("reading the schema version"):
            return migrations.applied_versions(self._db)

    # --- internals ------------------------------------------------------------

    @contextlib.contextmanager
    def _op(self, what: str, quiet: bool = False) -> Iterator[None]:
        if self._closed:
            raise StoreError(f"store {self._where}: {what}: the store is closed")
        try:
            self._db.connect(reuse_if_open=True)
            yield
        except (peewee.PeeweeException, OSError) + _DRIVER_ERRORS as exc:
            self._db.drop_broken_connection()
            if isinstance(exc, FileRefused):  # its message is already one line that says what to do
                message = f"store {self._where}: {what}: refused: {exc}"
            else:
                message = f"store {self._where}: {what} failed: {_line(exc)}; {RETRY}"
            if not quiet:
                log.warning("%s", message)
            raise StoreError(message) from None

    def _credentials(self, row: CredentialRow | None) -> Credentials:
        return _credentials(row, self._keys)

    def _credentials_or_none(self, row: CredentialRow | None) -> Credentials | None:
        """The row's credentials, or None when they cannot be read (a write over them
        then counts as a change)."""
        try:
            return self._credentials(row)
        except StoreError:
            return None

    def _bump(self) -> None:
        """Move the revision on, inside the caller's write transaction (last, so that on
        PostgreSQL the one revision row is locked only until that transaction commits)."""
        RevisionRow.insert(id=1, revision=1).on_conflict(
            conflict_target=[RevisionRow.id],
            update={RevisionRow.revision: RevisionRow.revision + 1}).execute(self._db)

    def _open_client(self, issuer: str, redirect_uri: str, text: str, strict: bool = True) -> str:
        try:
            return sealing.open_value(self._keys, ("oauth_clients", issuer, redirect_uri, "client"), text,
                                      f"OAuth client for issuer {issuer!r}") or ""
        except StoreError:
            if strict:
                raise
            return ""

    def _write(self) -> peewee._atomic:
        # BEGIN IMMEDIATE takes SQLite's write lock up front, so the busy timeout
        # applies (a deferred transaction upgrading to a writer fails at once instead).
        return self._db.atomic() if self._pg else self._db.atomic("IMMEDIATE")

    def _upsert_credentials(self, server: str, creds: Credentials, old: Credentials | None) -> None:
        """Write ``creds`` over ``old`` (what the row holds now; None: unreadable), and
        bump the revision when a session would see the difference (:func:`visible`)."""
        values: dict[str, Any] = {
            "bearer_token": creds.bearer_token,
            **header_columns(creds.headers),
            "env": json.dumps(dict(creds.env), sort_keys=True),
            "oauth": None if creds.oauth is None else json.dumps(thaw(creds.oauth), sort_keys=True),
        }
        # Every write, key or no key: a plaintext value that starts with the prefix would
        # read back as a sealed one (the JSON columns start with "{" and never do).
        sealing.refuse_prefix(creds.bearer_token, f"the bearer token of {server!r}")
        for name, value in creds.headers:
            sealing.refuse_prefix(value, f"the {name} header of {server!r}")
        if self._keys is not None:
            for column in _SEALED_CREDENTIALS:
                if values[column] is not None:
                    values[column] = self._keys.seal(("credentials", server, column), values[column])
        values["updated_at"] = time.time()
        CredentialRow.insert(server=server, **values).on_conflict(
            conflict_target=[CredentialRow.server],
            update={getattr(CredentialRow, k): v for k, v in values.items()},
        ).execute(self._db)
        if old is None or visible(old) != visible(creds):
            self._bump()


@dataclasses.dataclass(frozen=True)
class Lease:
    """A credentials row's refresh lease: ``owner`` (an opaque id) refreshes until ``until`` (Unix time)."""

    owner: str
    until: float


class CredentialsWriter:
    """The ``put`` of :meth:`Store.holding_credentials`: writes inside its transaction.

    ``put(new)`` replaces the credentials (the lease is left as it is); ``lease`` is
    the refresh lease as read under the lock; ``take_lease``/``drop_lease`` change it.
    """

    def __init__(self, store: Store, server: str, lease: Lease | None, current: Credentials) -> None:
        self._store = store
        self._server = server
        self.lease = lease
        self._current = current  # what the row holds now, in this transaction

    def __call__(self, new: Credentials) -> None:
        if not isinstance(new, Credentials):
            raise TypeError("holding_credentials: put takes Credentials")
        self._store._upsert_credentials(self._server, new, self._current)
        self._current = new

    def take_lease(self, owner: str, until: float) -> None:
        CredentialRow.update(refresh_owner=owner, refresh_until=float(until)) \
            .where(CredentialRow.server == self._server).execute(self._store._db)
        self.lease = Lease(owner, float(until))

    def drop_lease(self, owner: str) -> None:
        """Clear the lease if ``owner`` holds it (another's, taken over after ours ran out, stays)."""
        if self.lease is not None and self.lease.owner == owner:
            CredentialRow.update(refresh_owner=None, refresh_until=None) \
                .where((CredentialRow.server == self._server) & (CredentialRow.refresh_owner == owner)) \
                .execute(self._store._db)
            self.lease = None


# The keys of an OAuth record (auth/record.py) that a token refresh rotates and no session
# sees: a write that changes only these does not move the revision.
ROTATING_OAUTH_KEYS = frozenset({"access_token", "refresh_token", "expires_at", "obtained_at", "updated_at", "dpop_key"})

_REVISION_SQL = "SELECT revision FROM albedo_revision WHERE id = 1"


def visible(credentials: Credentials) -> str:
    """What a session can tell of ``credentials``, as one comparable string: the secrets,
    and the OAuth record without the tokens a refresh rotates (its state, account, scope,
    client and URL stay in). Two credentials with the same ``visible`` offer a session
    the same; a sign-in or sign-out changes it, a routine token refresh does not."""
    oauth = None
    if credentials.oauth is not None:
        oauth = {key: value for key, value in thaw(credentials.oauth).items() if key not in ROTATING_OAUTH_KEYS}
    return json.dumps([credentials.bearer_token, [list(pair) for pair in credentials.headers] or None,
                       dict(credentials.env), oauth], sort_keys=True, default=str)


def _lease(row: CredentialRow | None) -> Lease | None:
    if row is None or row.refresh_owner is None or row.refresh_until is None:
        return None
    return Lease(row.refresh_owner, float(row.refresh_until))


def _registration_of(keys: StoreKeys | None, server: str, text: str | None) -> tuple[str, str] | None:
    """(issuer, client id) of the dynamic registration a stored OAuth record signed in
    with, or None (no record, another kind of client, or a record that cannot be read)."""
    if text is None:
        return None
    try:
        opened = sealing.open_value(keys, ("credentials", server, "oauth"), text, f"credentials of {server!r}")
        record = _json_object(opened or "{}", "credentials", server)
    except StoreError:
        return None
    issuer, client_id = record.get("issuer"), record.get("client_id")
    if record.get("client_kind") != "registered" or not isinstance(issuer, str) or not isinstance(client_id, str):
        return None
    return issuer, client_id


def _uses_registration(keys: StoreKeys | None, server: str, text: str, registered: tuple[str, str]) -> bool:
    """True when ``server``'s stored OAuth record ``text`` uses the dynamic registration
    ``registered`` (issuer, client id) and was not signed out, or cannot be read."""
    try:
        opened = sealing.open_value(keys, ("credentials", server, "oauth"), text, f"credentials of {server!r}")
        record = _json_object(opened or "{}", "credentials", server)
    except StoreError:
        return True
    return (record.get("client_kind") == "registered" and record.get("state") != "signed_out"
            and (record.get("issuer"), record.get("client_id")) == registered)


def _client_id_of(text: str) -> str | None:
    try:
        return _json_object(text, "OAuth client", "?").get("client_id")
    except StoreError:
        return None


# --- databases ----------------------------------------------------------------


class _Tracked:
    """Mixin: remember every connection (they are per thread) so close_all_connections reaches all."""

    def _track_init(self) -> None:
        self._conns_lock = threading.Lock()
        self._conns: dict[int, tuple[threading.Thread, Any]] = {}

    def _connect(self) -> Any:  # a DB-API connection of the driver (sqlite3, psycopg2)
        conn = super()._connect()  # type: ignore[misc]
        stale = []
        with self._conns_lock:
            # Connections of threads that have ended are closed here, so they do not pile up.
            for key, (thread, old) in list(self._conns.items()):
                if not thread.is_alive():
                    stale.append(old)
                    del self._conns[key]
            self._conns[id(conn)] = (threading.current_thread(), conn)
        for old in stale:
            with contextlib.suppress(Exception):
                old.close()
        return conn

    def _close(self, conn: Any) -> None:
        with self._conns_lock:
            self._conns.pop(id(conn), None)
        super()._close(conn)  # type: ignore[misc]

    def drop_broken_connection(self) -> None:
        """After an error: roll back and close this thread's connection so the next use reconnects."""
        if self._state.closed:  # type: ignore[attr-defined]
            return
        conn = self._state.conn  # type: ignore[attr-defined]
        with contextlib.suppress(Exception):
            conn.rollback()
        with contextlib.suppress(Exception):
            self._close(conn)
        self._state.reset()  # type: ignore[attr-defined]

    def close_all_connections(self) -> None:
        with self._conns_lock:
            conns = [conn for _thread, conn in self._conns.values()]
            self._conns.clear()
        for conn in conns:
            with contextlib.suppress(Exception):
                conn.close()
        with contextlib.suppress(Exception):
            self._state.reset()  # type: ignore[attr-defined]


class _SqliteDatabase(_Tracked, SqliteDatabase):
    def __init__(self, path: str, secure_delete: bool = False) -> None:
        self._track_init()
        pragmas: dict[str, Any] = {"journal_mode": "wal", "synchronous": "full", "foreign_keys": 1}
        if secure_delete:
            # With a store key: the bytes a write replaces (a plaintext value being
            # sealed) are zeroed in the file, not left in a free page.
            pragmas["secure_delete"] = 1
        super().__init__(
            path,
            pragmas=pragmas,
            timeout=BUSY_TIMEOUT_S,
            # Connections stay in their own thread; close_all_connections may close
            # them from another thread once every user is done.
            check_same_thread=False,
        )

    def _connect(self) -> Any:
        _restrict(self.database)  # before SQLite opens them by name (FileRefused)
        # ``PRAGMA journal_mode=wal`` on a database another process is switching too (two
        # processes opening a fresh store at once) is SQLITE_BUSY at once: SQLite calls no
        # busy handler for it. So it is tried again, backing off, until the busy timeout.
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        pause = 0.005
        while True:
            try:
                conn = super()._connect()
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)  # another process holds the lock: a bounded back-off, no event to wait on
                pause = min(pause * 2, 0.1)
        _restrict(self.database)
        return conn


class _PostgresqlDatabase(_Tracked, PostgresqlDatabase):
    def __init__(self, url: str) -> None:
        self._track_init()
        if url.lower().startswith("postgres://"):
            url = "postgresql://" + url[len("postgres://"):]
        super().__init__(
            url,  # peewee hands a postgresql:// URL to psycopg2 as the DSN
            connect_timeout=PG_CONNECT_TIMEOUT_S,
            options=f"-c lock_timeout={int(BUSY_TIMEOUT_S * 1000)} "
                    f"-c statement_timeout={PG_STATEMENT_TIMEOUT_S * 1000}",
            application_name="albedo_actors",
        )


def _sqlite(path: str, home: str, secure_delete: bool = False) -> _SqliteDatabase:
    try:
        # Only directories we create are made 0700; an existing one (say /tmp, named
        # by --database sqlite:///tmp/albedo.db) keeps its mode.
        make_private_dirs(home)
        # Create the file ourselves, 0600 whatever the umask, never through a link;
        # SQLite gives -wal and -shm the mode of the database file, and _restrict()
        # re-checks all three around every connect.
        _restrict(path)
        os.close(open_private(path))
    except FileRefused as exc:
        raise StoreError(f"store sqlite:{path}: refused: {exc}") from None
    except OSError as exc:
        raise StoreError(f"store sqlite:{path}: cannot create it: {_line(exc)}") from None
    return _SqliteDatabase(path, secure_delete)


def _restrict(path: str) -> None:
    """The database and its -wal/-shm: regular files of ours, not links, 0600.

    SQLite opens them by name and follows links, so a link planted at any of them is
    refused before SQLite can open it (raises FileRefused).
    """
    for name in (path, path + "-wal", path + "-shm"):
        check_not_link(name)
        with contextlib.suppress(FileNotFoundError):
            if os.stat(name).st_mode & 0o777 != 0o600:
                os.chmod(name, 0o600)


def _postgres(url: str) -> _PostgresqlDatabase:
    if psycopg2 is None:
        raise StoreError("store: a postgresql:// URL needs psycopg2: install albedo-actors[postgres]")
    return _PostgresqlDatabase(url)


def _redact(url: str) -> str:
    """The URL without user info, query or fragment (they may hold a password)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


def _line(exc: BaseException, limit: int = 200) -> str:
    """One bounded line about ``exc``: its type and the first line of its message.

    psycopg2 puts details (which may quote values) on later lines; only the first is kept.
    """
    cause = exc.__cause__ or exc.__context__
    diag = getattr(exc, "diag", None) or getattr(cause, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    text = primary or (str(exc).strip().splitlines() or [""])[0]
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# The columns of a credentials row that hold secrets, sealed when a key is set (the header
# name, the timestamps and the refresh lease are not secret).
_SEALED_CREDENTIALS = ("bearer_token", "header_value", "env", "oauth")
_SEALED_CREDENTIAL_COLUMNS = tuple(getattr(CredentialRow, c) for c in _SEALED_CREDENTIALS)

# The columns of a task row that hold secrets, sealed when a key is set; and the fields
# of a TaskRecord a write sets (all but the key: server and task_id).
_SEALED_TASK = ("session_id", "arguments", "result")
_SEALED_TASK_COLUMNS = tuple(getattr(TaskRow, c) for c in _SEALED_TASK)
_TASK_FIELDS = tuple(f.name for f in dataclasses.fields(TaskRecord) if f.name not in ("server", "task_id"))
_TASK_UPDATABLE = frozenset(_TASK_FIELDS) - {"lease_owner", "lease_until"}  # update_task's


def _task_name(server: str, task_id: str) -> str:
    """How a task is named in a message: ``'SERVER/ID'``, quoted."""
    return repr(f"{server}/{task_id}")


def _task_key(server: str, task_id: str) -> Any:
    return (TaskRow.server == server) & (TaskRow.task_id == task_id)


def _json_value_text(value: Any, what: str) -> str:
    try:
        return json.dumps(thaw(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False, sort_keys=True)
    except (TypeError, ValueError, RecursionError) as exc:
        raise StoreError(f"store: {what} is not JSON: {_line(exc)}") from None


def _credentials(row: CredentialRow | None, keys: StoreKeys | None) -> Credentials:
    if row is None:
        return Credentials()
    what = f"credentials of {row.server!r}"
    opened = {column: sealing.open_value(keys, ("credentials", row.server, column), getattr(row, column), what)
              for column in _SEALED_CREDENTIALS}
    headers = headers_of(row.header_name, opened["header_value"], row.server)
    env = _json_object(opened["env"] or "{}", "credentials", row.server)
    oauth = None if opened["oauth"] is None else _json_object(opened["oauth"], "credentials", row.server)
    return Credentials(bearer_token=opened["bearer_token"], headers=headers, env=env, oauth=oauth)


# Several custom headers share the row's two header columns, without a new column: one
# header is stored as it always was (its name, its value); two or more as a JSON array
# of the names in ``header_name`` (a header name never starts with "[") and a JSON
# array of the values, in the same order, in ``header_value`` (sealed like one value).


def header_columns(headers: tuple[tuple[str, str], ...]) -> dict[str, str | None]:
    """The ``header_name`` and ``header_value`` columns of ``headers`` (before sealing)."""
    if not headers:
        return {"header_name": None, "header_value": None}
    if len(headers) == 1:
        return {"header_name": headers[0][0], "header_value": headers[0][1]}
    return {"header_name": json.dumps([name for name, _ in headers]),
            "header_value": json.dumps([value for _, value in headers])}


def headers_of(name: str | None, value: str | None, server: str) -> tuple[tuple[str, str], ...]:
    """The headers of a row's two header columns (``value`` opened): the one-header form or the arrays."""
    if name is None or value is None:
        return ()
    if not name.startswith("["):
        return ((name, value),)
    try:
        names, values = json.loads(name), json.loads(value)
    except ValueError:
        names = values = None
    if not (isinstance(names, list) and isinstance(values, list) and len(names) == len(values)
            and all(isinstance(x, str) for x in names + values)
            and len({n.lower() for n in names}) == len(names)):
        raise StoreError(f"the stored headers of {server!r} cannot be read; {sealing.REMOVE_AND_ADD}")
    return tuple(zip(names, values))


_REMEDY = {"credentials": f"; {sealing.REMOVE_AND_ADD}"}


def _json_object(text: str, what: str, name: str) -> dict[str, Any]:
    """A stored JSON object, read with bounded nesting: a row nested deeper than the
    wire's MAX_DEPTH is damaged like any other unreadable row, never a RecursionError
    (json.loads, and freezing the value afterwards, recurse once per level)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # the C decoder raises RecursionError near ~1000 levels
        value = None
    # A value cannot nest deeper than the text has opening brackets (counted in C):
    # most rows are not walked at all.
    if isinstance(value, dict) and text.count("[") + text.count("{") > MAX_DEPTH and _deeper_than(value, MAX_DEPTH):
        value = None
    if not isinstance(value, dict):
        # Never quote the text: it may be a secret.
        raise StoreError(f"store: the saved {what} of {name!r} is damaged (not a JSON object nested at most "
                         f"{MAX_DEPTH} deep) and cannot be used{_REMEDY.get(what, '')}")
    return value


def _json_or_none(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _json_list(text: str) -> list[str]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return []
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _json_text(value: Any, server: str) -> str:
    try:
        return json.dumps(thaw(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False, sort_keys=True)
    except (TypeError, ValueError, RecursionError) as exc:
        raise StoreError(f"store: a tool definition of server {server!r} is not JSON: {_line(exc)}") from None


def _selecting(query: Any, key: Any, names: list[str]) -> Iterator[Any]:
    """The queries that read the rows of ``names`` (the caller drops rows of other names).

    A few names: ``key IN (...)``. Many: every row, in one query; building an IN of
    hundreds of parameters costs peewee more than reading the rows of servers no longer
    configured (and SQLite bounds the parameters of one statement)."""
    if len(names) > FEW:
        yield query
        return
    if names:
        yield query.where(key.in_(names))


def _deeper_than(value: Json, limit: int) -> bool:
    """True if ``value`` nests more than ``limit`` levels of objects and arrays (level by
    level, no recursion). Everything albedo saves came through the wire's bound, so a
    deeper row was not written by albedo."""
    level, depth = [value], 1
    while level:
        if depth > limit:
            return True
        below: list[Json] = []
        for node in level:
            below.extend(c for c in (node.values() if isinstance(node, dict) else node) if isinstance(c, (dict, list)))
        level, depth = below, depth + 1
    return False
