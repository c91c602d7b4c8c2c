"""Numbered schema migrations, applied in order, each once, and recorded.

``MIGRATIONS[i]`` takes the schema from version ``i`` to ``i + 1``. Each migration
declares the table shapes it works on inside itself (frozen copies, never the live
models of :mod:`.models`), so a later change to a model cannot change what an old
migration does.

:func:`migrate` runs in one transaction that first takes a lock every other migrating
process also takes (``BEGIN IMMEDIATE`` on SQLite, a transaction-scoped advisory
lock on PostgreSQL), so two processes opening a new store at once apply each
migration exactly once.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from peewee import AutoField, BigIntegerField, BooleanField, CompositeKey, Database, DoubleField, IntegerField, Model, PostgresqlDatabase, TextField

__all__ = ["MIGRATIONS", "migrate", "applied_versions"]

# pg_advisory_xact_lock key: "albedo" in ASCII, any constant shared by all processes.
_PG_LOCK_KEY = 0x616C6265646F


def _schema_version(db: Database) -> type[Any]:  # a Model bound to ``db``; its fields are peewee's descriptors
    class SchemaVersion(Model):
        version = IntegerField(primary_key=True)
        applied_at = DoubleField()

        class Meta:
            database = db
            table_name = "albedo_schema_version"

    return SchemaVersion


def m0001_initial(db: Database) -> None:
    """Credentials, catalogues and OAuth client registrations."""

    class Base(Model):
        class Meta:
            database = db

    class Credentials(Base):
        server = TextField(primary_key=True)
        bearer_token = TextField(null=True)
        header_name = TextField(null=True)
        header_value = TextField(null=True)
        env = TextField(default="{}")
        oauth = TextField(null=True)
        updated_at = DoubleField()

        class Meta:
            table_name = "credentials"

    class Catalogues(Base):
        server = TextField(primary_key=True)
        fingerprint = TextField()
        era = TextField()
        catalogue = TextField()
        saved_at = DoubleField()

        class Meta:
            table_name = "catalogues"

    class OAuthClients(Base):
        issuer = TextField()
        redirect_uri = TextField()
        client = TextField()
        saved_at = DoubleField()

        class Meta:
            table_name = "oauth_clients"
            primary_key = CompositeKey("issuer", "redirect_uri")

    db.create_tables([Credentials, Catalogues, OAuthClients], safe=False)


def m0002_refresh_lease(db: Database) -> None:
    """The refresh lease of a credentials row: who is refreshing its OAuth tokens, until when.

    A process takes it in a short transaction before a token request and clears it when
    it writes the result, so the request itself runs with no database lock held (see
    ``actors/refresher.py``). Both columns are NULL when nobody is refreshing.
    """
    db.execute_sql("ALTER TABLE credentials ADD COLUMN refresh_owner TEXT")
    db.execute_sql("ALTER TABLE credentials ADD COLUMN refresh_until DOUBLE PRECISION")


def m0003_revision(db: Database) -> None:
    """The store's revision: one row, one counter, bumped by every write that changes what
    a session is offered (a server's configuration or secrets, a sign-in or sign-out;
    never a routine token refresh), in the same transaction as that write.

    A running host reads it (one primary-key SELECT) on session activity and reloads the
    sessions when it moved: so a change made by another process, or another host sharing
    the PostgreSQL database, reaches every session (``albedo_actors/settings_watch.py``).
    """

    class Revision(Model):
        id = IntegerField(primary_key=True)
        revision = BigIntegerField()

        class Meta:
            database = db
            table_name = "albedo_revision"

    db.create_tables([Revision], safe=False)
    Revision.insert(id=1, revision=0).execute()


def m0004_server_states(db: Database) -> None:
    """The last state ``albedo-mcp doctor`` saw of each server: ``ok``, ``down``,
    ``needs_sign_in``, ``misconfigured`` or ``off``, when, under which fingerprint of the
    configuration (so ``servers`` can say it changed since), and the report's JSON (era,
    version, counts, the error line; never a secret: the lines were redacted before).

    Writing a state never bumps the revision: no session is offered anything new by it.
    """

    class ServerStates(Model):
        server = TextField(primary_key=True)
        state = TextField()
        fingerprint = TextField()
        report = TextField()
        seen_at = DoubleField()

        class Meta:
            database = db
            table_name = "server_states"

    db.create_tables([ServerStates], safe=False)


def m0005_trust(db: Database) -> None:
    """Tool integrity (catalogue/trust.py): the trusted definition of each tool and the
    instructions of each server (``trusted_tools``), what is held until approved
    (``held_tools``, one row per held tool or instructions) and a short history
    (``trust_history``: trusted, held, approved, and by whom).

    An approval bumps the revision (a session is offered the tool from then on); a new
    hold does not (the session that found it holds it already).
    """

    class Base(Model):
        class Meta:
            database = db

    class Trusted(Base):
        server = TextField()
        kind = TextField()
        name = TextField()
        digest = TextField()
        whole = TextField()
        definition = TextField()
        trusted_at = DoubleField()

        class Meta:
            table_name = "trusted_tools"
            primary_key = CompositeKey("server", "kind", "name")

    class Held(Base):
        server = TextField()
        kind = TextField()
        name = TextField()
        change = TextField()
        changes = TextField()
        digest = TextField()
        whole = TextField()
        definition = TextField()
        held_at = DoubleField()

        class Meta:
            table_name = "held_tools"
            primary_key = CompositeKey("server", "kind", "name")

    class History(Base):
        id = AutoField()
        server = TextField()
        kind = TextField()
        name = TextField()
        event = TextField()
        changes = TextField()
        who = TextField(null=True)
        at = DoubleField()

        class Meta:
            table_name = "trust_history"

    db.create_tables([Trusted, Held, History], safe=False)


def m0006_tasks(db: Database) -> None:
    """MCP tasks (``tasks``): one row per task a server created for a task-augmented
    ``tools/call``, keyed by (server, task id), with an index on the task id alone (the
    CLI names a task by its id). A host killed mid-call finds its tasks again here, and
    on PostgreSQL any host may resume one while the lease (``lease_owner`` until
    ``lease_until``, as the credentials' refresh lease) lets one poll at a time.

    ``session_id``, ``arguments`` and ``result`` hold secrets: sealed when the store has
    a key, as the credentials are. ``arguments``, ``result`` (objects) and ``answered``
    (an array) are JSON text. Never bumps the revision.
    """

    class Tasks(Model):
        server = TextField()
        task_id = TextField(index=True)
        tool = TextField()
        era = TextField()
        version = TextField()
        transport = TextField()
        session_id = TextField(null=True)
        arguments_digest = TextField()
        arguments = TextField(null=True)
        state = TextField()
        message = TextField(null=True)
        poll_ms = BigIntegerField()
        ttl_ms = BigIntegerField(null=True)
        created_at = DoubleField()
        updated_at = DoubleField()
        expires_at = DoubleField(null=True)
        answered = TextField(default="[]")
        result = TextField(null=True)
        error = TextField(null=True)
        delivered = BooleanField(default=False)
        lease_owner = TextField(null=True)
        lease_until = DoubleField(null=True)

        class Meta:
            database = db
            table_name = "tasks"
            primary_key = CompositeKey("server", "task_id")

    db.create_tables([Tasks], safe=False)


MIGRATIONS: list[Callable[[Database], None]] = [m0001_initial, m0002_refresh_lease, m0003_revision, m0004_server_states,
                                                m0005_trust, m0006_tasks]


def migrate(db: Database) -> list[int]:
    """Apply the migrations this database lacks; return the versions applied now.

    The caller has connected ``db`` in this thread. Raises whatever the driver raises
    (the store translates it).
    """
    SchemaVersion = _schema_version(db)
    if isinstance(db, PostgresqlDatabase):
        txn = db.atomic()
    else:
        txn = db.atomic("IMMEDIATE")
    applied: list[int] = []
    with txn:
        if isinstance(db, PostgresqlDatabase):
            db.execute_sql("SELECT pg_advisory_xact_lock(%s)", (_PG_LOCK_KEY,))
        db.create_tables([SchemaVersion], safe=True)
        done = {row.version for row in SchemaVersion.select(SchemaVersion.version)}
        for number, step in enumerate(MIGRATIONS, start=1):
            if number in done:
                continue
            step(db)
            SchemaVersion.insert(version=number, applied_at=time.time()).execute()
            applied.append(number)
    return applied


def applied_versions(db: Database) -> list[int]:
    """The versions recorded in ``albedo_schema_version``, in order."""
    SchemaVersion = _schema_version(db)
    return [row.version for row in SchemaVersion.select().order_by(SchemaVersion.version)]
