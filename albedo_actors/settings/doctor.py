"""The doctor's check: dial servers now, in parallel, and say how each one is.

:func:`examine` checks the servers of a configuration and returns one :class:`Report`
each (``albedo-mcp doctor`` prints them, the settings service's ``POST /api/mcp/doctor``
returns one as JSON).

Each enabled server is dialled through its own :class:`~albedo_actors.actors.client.ServerHandle`
(the client a session uses, with the store's OAuth tokens and the daemon's auth factory),
all at once (at most DIALS_AT_ONCE), each bounded by its ``startupTimeoutMs``; every
client is closed (all servers get EOF at once) and stopped before :func:`examine`
returns, so no server process outlives the check. States:

- ``ok``: it started, initialized and was discovered; era, protocol version, counts of
  tools, resources and prompts, and the time from the dial to ready.
- ``down``: it could not be started, opened or discovered in time; the error line, and
  for a stdio server that exited, the tail of its stderr, apart.
- ``needs_sign_in``: it asks for an OAuth sign-in (a 401, or its stored state says so).
- ``misconfigured``: it cannot be dialled as configured: a variable it names is unset,
  its command cannot be found, or its stored credentials cannot be read.
- ``off``: switched off in extensions.json; never dialled.

What the dials discover is saved as a session's preparation saves it (the catalogue
under the server's fingerprint) and reviewed as it reviews it (tool integrity: a first
use is trusted, a changed or new tool held), and each state is kept in the store with when it was
seen and the fingerprint it was seen under, for ``servers``. No secret is ever given or
kept: the values of the server's stored credentials and of the variables it names are
redacted from every line (:func:`redact`), over the transport's own redaction of the
stderr tail.
"""

from __future__ import annotations

import concurrent.futures
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..catalogue.saved import fingerprint
from ..config import McpConfig, ServerConfig, http_headers
from ..errors import AlbedoError, ConfigError, NeedsSignIn, ServerError, StoreError
from ..transport.launcher import MIN_SECRET
from ..transport.stdio import STDERR_TAIL, TAIL_JOIN

if TYPE_CHECKING:
    from ..catalogue import Catalogue
    from ..store import Store
    from ..store.records import Credentials

__all__ = ["STATES", "Report", "examine", "secret_values", "redact", "split_error", "REDACTED"]

STATES = ("ok", "down", "needs_sign_in", "misconfigured", "off")
DIALS_AT_ONCE = 64  # servers dialled at once; more wait for a free slot
SLACK = 1.0  # over a server's startupTimeoutMs, for the client's own hand-offs (as ServerHandle.connect waits)
REDACTED = "***"
# The fields of a stored OAuth record (auth/record.py) that are secrets.
_OAUTH_SECRETS = ("access_token", "refresh_token", "client_secret", "configured_client_secret")


@dataclass
class Report:
    """What doctor found of one server; never a secret (see :func:`redact`)."""

    name: str
    transport: str
    enabled: bool
    state: str = "off"
    error: str | None = None  # the one-line error, without the stderr tail
    stderr: tuple[str, ...] = ()  # the last lines of a stdio server's stderr, redacted
    era: str | None = None
    protocol_version: str | None = None
    tools: int | None = None
    resources: int | None = None
    prompts: int | None = None
    ready_ms: int | None = None  # from the dial to the catalogue
    auth: Mapping[str, Any] = field(default_factory=dict)
    catalogue: str = "none"  # the saved catalogue before this run: current, changed, outdated or none
    catalogue_saved_at: float | None = None
    catalogue_updated: bool = False  # this run saved what it discovered (it differed)
    fingerprint: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "transport": self.transport,
            "enabled": self.enabled,
            "state": self.state,
            "error": self.error,
            "stderr": list(self.stderr),
            "era": self.era,
            "protocolVersion": self.protocol_version,
            "tools": self.tools,
            "resources": self.resources,
            "prompts": self.prompts,
            "readyMs": self.ready_ms,
            "auth": dict(self.auth),
            "catalogue": {"state": self.catalogue, "savedAt": self.catalogue_saved_at, "updated": self.catalogue_updated},
        }


# -- the check ----------------------------------------------------------------------------------


def examine(config: McpConfig, store: Store, names: Sequence[str] = (),
            environ: Mapping[str, str] | None = None) -> list[Report]:
    """Check ``names`` (default: every configured server) of ``config``; one report each,
    in the configuration's order. Saves the catalogues discovered and every state seen.

    Raises:
        ConfigError: a name is not configured.
        StoreError: the database failed.
    """
    from ..actors.preparer import save_and_review
    from ..catalogue.trust import policy_of
    from ..settings import auth_view

    environ = dict(os.environ) if environ is None else dict(environ)
    servers = [config.server(name) for name in dict.fromkeys(names)] if names else list(config.servers)
    credentials = dict(store.get_credentials_of([s.name for s in servers])) if servers else {}
    saved = _saved_catalogues(store, [s.name for s in servers])
    digest_key = getattr(store, "digest_key", None)
    reports: dict[str, Report] = {}
    secrets: dict[str, list[str]] = {}
    to_dial: list[ServerConfig] = []
    for server in servers:
        creds = credentials.get(server.name)
        readable = None if isinstance(creds, StoreError) else creds
        report = Report(server.name, server.type, server.enabled,
                        fingerprint=fingerprint(server, readable, environ, digest_key))
        reports[server.name] = report
        secrets[server.name] = secret_values(server, readable, environ)
        _catalogue_before(report, saved.get(server.name))
        if not server.enabled:
            continue
        if isinstance(creds, StoreError):
            _failed(report, "misconfigured", f"server {server.name!r}: {creds}", secrets[server.name])
            continue
        problem = _not_dialable(server, config.home, readable, environ)
        if problem is not None:
            state, error = problem
            _failed(report, state, str(error), secrets[server.name])
            continue
        to_dial.append(server)
    outcomes = _dial_all(config.home, store, to_dial, {s.name: credentials.get(s.name) for s in to_dial})
    for server in to_dial:
        report = reports[server.name]
        outcome, elapsed = outcomes[server.name]
        if isinstance(outcome, BaseException):
            _failed(report, _state_of(outcome), str(outcome), secrets[server.name])
            continue
        report.state = "ok"
        report.ready_ms = round(elapsed * 1000)
        report.era, report.protocol_version = outcome.era, outcome.protocol_version
        report.tools, report.resources, report.prompts = len(outcome.tools), len(outcome.resources), len(outcome.prompts)
        try:
            # Saved and reviewed as a session's preparation would: a changed tool is held
            # now (the pane and every session see the hold), never saved unchecked.
            report.catalogue_updated = save_and_review(store, server.name, report.fingerprint, outcome, policy_of(config, server))
        except (StoreError, ValueError) as exc:
            report.error = redact(f"server {server.name!r}: its catalogue was not saved: {exc}", secrets[server.name])
        if report.catalogue == "current" and report.catalogue_updated:
            report.catalogue = "changed"
    # The auth state as it stands now: a dial may have refreshed the tokens, or found
    # that the server asks for a sign-in.
    after = dict(store.get_credentials_of([s.name for s in servers])) if servers else {}
    for server in servers:
        creds = after.get(server.name)
        reports[server.name].auth = ({"state": "unknown"} if isinstance(creds, StoreError)
                                     else auth_view(server, creds))
    for report in reports.values():
        store.save_server_state(report.name, report.state, report.fingerprint, report.as_json())
    return [reports[s.name] for s in servers]


def secret_values(server: ServerConfig, credentials: Credentials | None, environ: Mapping[str, str]) -> list[str]:
    """Every value that must never be printed for ``server``: its stored credentials and
    the values of the variables it names (longest first, so none is left half-redacted)."""
    values: list[str] = []
    if credentials is not None:
        if credentials.bearer_token:
            values.append(credentials.bearer_token)
        if credentials.header:
            values.append(credentials.header[1])
        values.extend(credentials.env.values())
        record = credentials.oauth if isinstance(credentials.oauth, Mapping) else {}
        values.extend(str(record[key]) for key in _OAUTH_SECRETS if record.get(key))
    named = [*server.env.values(), *server.headers.values(), server.bearer_token_env_var]
    if server.oauth is not None:
        oauth = server.oauth
        named += [oauth.client_secret_env_var, oauth.private_key_env_var, oauth.assertion_env_var,
                  oauth.idp_client_secret_env_var, oauth.id_token_env_var]
    values.extend(environ[name] for name in named if name and name in environ)
    return sorted({v for v in values if isinstance(v, str) and len(v) >= MIN_SECRET}, key=len, reverse=True)


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every one of ``secrets`` replaced (the transport's rule: values
    shorter than MIN_SECRET would blank ordinary text, and are left)."""
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text


def split_error(line: str) -> tuple[str, tuple[str, ...]]:
    """An error line as its head and the stderr tail the stdio transport put after it."""
    head, _mark, tail = line.partition(STDERR_TAIL)
    return head, tuple(part for part in tail.split(TAIL_JOIN) if part) if tail else ()


def _failed(report: Report, state: str, line: str, secrets: Sequence[str]) -> None:
    report.state = state
    report.error, report.stderr = split_error(redact(line, secrets))


def _state_of(error: BaseException) -> str:
    if isinstance(error, NeedsSignIn):
        return "needs_sign_in"
    if isinstance(error, ConfigError):
        return "misconfigured"
    return "down"


def _not_dialable(server: ServerConfig, home: str, credentials: Credentials | None,
                  environ: Mapping[str, str]) -> tuple[str, AlbedoError] | None:
    """Why ``server`` is not dialled: misconfigured (what its client would refuse before
    starting anything), or waiting for a sign-in as a session leaves it; else None."""
    try:
        if server.type == "http":
            http_headers(server, environ, credentials=credentials)
        else:
            from ..connection.stdio_link import launch_spec

            launch_spec(server, home, environ, credentials)  # the client resolves the same on its dial
    except ConfigError as exc:
        return "misconfigured", exc
    except ServerError as exc:  # the command cannot be found or run: the configuration names it
        return "misconfigured", exc
    if server.type == "http":
        from ..actors.preparer import sign_in_needed

        why = sign_in_needed(server, credentials)
        if why:
            return "needs_sign_in", NeedsSignIn(server.name, why)
    return None


def _dial_all(home: str, store: Store, servers: list[ServerConfig],
              credentials: Mapping[str, Any]) -> dict[str, tuple[Catalogue | BaseException, float]]:
    """Dial every server at once, each bounded by its startupTimeoutMs; close them all.

    Each client is the one a session would use (the stored credentials, the daemon's
    auth factory over a token refresher of this store). Every client is closed first
    (each server gets EOF now, all in parallel), then stopped, before this returns."""
    if not servers:
        return {}
    import pykka

    from ..actors.client import ServerHandle

    refresher = auth = None
    if any(server.type == "http" for server in servers):
        from ..actors.refresher import TokenRefresher, server_auth_factory

        refresher = TokenRefresher.start(store)
        auth = server_auth_factory(store, refresher)
    handles: dict[str, ServerHandle] = {}
    try:
        for server in servers:
            handles[server.name] = ServerHandle.start(server, home, credentials=credentials.get(server.name),
                                                      auth=auth(server) if auth is not None else None)

        def dial(handle: ServerHandle) -> tuple[Catalogue | BaseException, float]:
            started = time.monotonic()
            try:
                catalogue = handle.connect(timeout=handle.config.startup_timeout + SLACK)
            except AlbedoError as exc:
                return exc, time.monotonic() - started
            except Exception as exc:  # noqa: BLE001 - a bug: one server's line, never the command's end
                return ServerError(handle.name, f"could not be checked ({type(exc).__name__})"), time.monotonic() - started
            return catalogue, time.monotonic() - started

        with concurrent.futures.ThreadPoolExecutor(max_workers=min(DIALS_AT_ONCE, len(handles)),
                                                   thread_name_prefix="mcp-doctor") as pool:
            futures = {name: pool.submit(dial, handle) for name, handle in handles.items()}
        # Leaving the block waited for every dial; each ended by its own bound.
        return {name: future.result() for name, future in futures.items()}
    finally:
        for handle in handles.values():
            handle.close()  # every server gets EOF now, in parallel
        for handle in handles.values():
            handle.stop()
        if refresher is not None:
            try:
                refresher.stop(timeout=10)
            except (pykka.ActorDeadError, pykka.Timeout):
                pass


def _saved_catalogues(store: Store, names: list[str]) -> dict[str, Any]:
    if not names:
        return {}
    return dict(store.load_catalogues(names))


def _catalogue_before(report: Report, saved: Any) -> None:
    """The saved catalogue as this run found it: current (saved under the server's
    fingerprint), outdated (under another: its configuration or credentials changed),
    or none (nothing saved, or a damaged row)."""
    if saved is None or isinstance(saved, StoreError):
        return
    report.catalogue_saved_at = saved.saved_at
    report.catalogue = "current" if saved.fingerprint == report.fingerprint else "outdated"
