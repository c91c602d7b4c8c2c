"""The tables as they are now (the shapes migration 0001 froze): peewee models, private to ``store/``.

No model row leaves this package: :mod:`.store` turns rows into frozen records.

``BaseModel`` names a deferred database (``None``): one process may hold several
stores (the host's and a test's, SQLite and PostgreSQL), so every query is bound to
its store's database explicitly (``query.execute(db)``) instead of binding the model
classes globally.
"""

from __future__ import annotations

from peewee import AutoField, BigIntegerField, BooleanField, CompositeKey, DoubleField, IntegerField, Model, TextField

__all__ = ["BaseModel", "CredentialRow", "CatalogueRow", "OAuthClientRow", "RevisionRow", "ServerStateRow", "TrustedRow",
           "HoldRow", "TrustEventRow", "TaskRow", "ALL"]


class BaseModel(Model):
    class Meta:
        database = None  # deferred: each Store binds its queries to its own database
        legacy_table_names = False


class CredentialRow(BaseModel):
    """One server's secrets; one row, so a write replaces them all or none."""

    server = TextField(primary_key=True)
    bearer_token = TextField(null=True)
    header_name = TextField(null=True)
    header_value = TextField(null=True)
    env = TextField(default="{}")  # JSON object of str -> str
    oauth = TextField(null=True)  # JSON object, or NULL
    updated_at = DoubleField()
    # The refresh lease (migration 0002): which process refreshes the OAuth tokens, until when.
    refresh_owner = TextField(null=True)
    refresh_until = DoubleField(null=True)

    class Meta:
        table_name = "credentials"


class CatalogueRow(BaseModel):
    """A server's last catalogue, under the fingerprint of its configuration and credentials."""

    server = TextField(primary_key=True)
    fingerprint = TextField()
    era = TextField()
    catalogue = TextField()  # JSON object
    saved_at = DoubleField()

    class Meta:
        table_name = "catalogues"


class OAuthClientRow(BaseModel):
    """A dynamic client registration, per authorization server (issuer) and redirect URI."""

    issuer = TextField()
    redirect_uri = TextField()
    client = TextField()  # JSON object
    saved_at = DoubleField()

    class Meta:
        table_name = "oauth_clients"
        primary_key = CompositeKey("issuer", "redirect_uri")


class RevisionRow(BaseModel):
    """The store's revision (migration 0003): one row (``id`` 1) whose counter every write
    that changes what a session is offered bumps, inside that write's transaction."""

    id = IntegerField(primary_key=True)
    revision = BigIntegerField()

    class Meta:
        table_name = "albedo_revision"


class ServerStateRow(BaseModel):
    """The last state ``albedo-mcp doctor`` saw of a server (migration 0004)."""

    server = TextField(primary_key=True)
    state = TextField()  # ok, down, needs_sign_in, misconfigured or off
    fingerprint = TextField()  # of the configuration and credentials it was seen with
    report = TextField()  # JSON object: what doctor reported (never a secret)
    seen_at = DoubleField()

    class Meta:
        table_name = "server_states"


class TrustedRow(BaseModel):
    """A trusted tool definition or instructions of a server (migration 0005)."""

    server = TextField()
    kind = TextField()  # "tool" or "instructions"
    name = TextField()  # the tool's name ("" for instructions)
    digest = TextField()  # catalogue/trust.py's definition_digest (instructions_digest)
    whole = TextField()  # whole_digest (a pinned server's)
    definition = TextField()  # JSON object: the trusted definition
    trusted_at = DoubleField()

    class Meta:
        table_name = "trusted_tools"
        primary_key = CompositeKey("server", "kind", "name")


class HoldRow(BaseModel):
    """A tool (or the instructions) held from the model until approved (migration 0005)."""

    server = TextField()
    kind = TextField()
    name = TextField()
    change = TextField()  # "changed" or "new"
    changes = TextField()  # JSON array of the keys that differ
    digest = TextField()
    whole = TextField()
    definition = TextField()  # JSON object: what the server gives now
    held_at = DoubleField()

    class Meta:
        table_name = "held_tools"
        primary_key = CompositeKey("server", "kind", "name")


class TrustEventRow(BaseModel):
    """The short history of trust (migration 0005): trusted, held, approved."""

    id = AutoField()
    server = TextField()
    kind = TextField()
    name = TextField()
    event = TextField()  # "trusted" (first use, or a new tool allowed), "held" or "approved"
    changes = TextField()  # JSON array
    who = TextField(null=True)  # an approval's: "cli", "service" or "host"
    at = DoubleField()

    class Meta:
        table_name = "trust_history"


class TaskRow(BaseModel):
    """An MCP task a server created for a task-augmented tools/call (migration 0006)."""

    server = TextField()
    task_id = TextField(index=True)
    tool = TextField()
    era = TextField()  # "legacy" or "modern"
    version = TextField()  # the protocol version
    transport = TextField()  # "stdio" or "http"
    session_id = TextField(null=True)  # legacy HTTP Mcp-Session-Id; sealed with a key
    arguments_digest = TextField()
    arguments = TextField(null=True)  # JSON object, kept only when the host asked; sealed with a key
    state = TextField()  # working, input_required, completed, failed, cancelled or lost
    message = TextField(null=True)
    poll_ms = BigIntegerField()
    ttl_ms = BigIntegerField(null=True)
    created_at = DoubleField()
    updated_at = DoubleField()
    expires_at = DoubleField(null=True)
    answered = TextField(default="[]")  # JSON array of the inputRequests keys answered
    result = TextField(null=True)  # JSON object: the CallToolResult once read; sealed with a key
    error = TextField(null=True)
    delivered = BooleanField(default=False)
    lease_owner = TextField(null=True)  # who polls it, until when
    lease_until = DoubleField(null=True)

    class Meta:
        table_name = "tasks"
        primary_key = CompositeKey("server", "task_id")


ALL = (CredentialRow, CatalogueRow, OAuthClientRow, RevisionRow, ServerStateRow, TrustedRow, HoldRow, TrustEventRow, TaskRow)
