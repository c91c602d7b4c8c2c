"""What the settings pane shows of each server now: its live state, and its tools.

::

    source = LiveSource(lambda: runtime)      # the serve runtime, or None while it starts
    snapshot = source()                       # the session's composition, asked within LIVE_BOUND
    live_states(settings, snapshot)           # NAME -> {"state", "era", ..., "source", "at"}
    tool_list(settings, "docs", snapshot)     # GET /api/mcp/tools/NAME's body

The daemon's view is the serve runtime's one session: its composition, asked of the
composer within :data:`LIVE_BOUND` (a composer busy with a long turn, or a runtime still
starting, gives the last composition seen, or none: then every enabled server is
``starting``). A request thread never waits longer than that.

States (the rules of the settings pane's contract):

- ``off``: switched off in extensions.json (or for the session), or MCP is off for it;
- ``misconfigured``: its stored credentials cannot be read, or the session left it out
  because its configuration cannot be used here (a variable it names is unset);
- ``needs_sign_in``: its OAuth state says so (needs a sign-in, signed out), or the
  session left it out for a sign-in;
- ``ok``: the session offers it (``tools``: how many of its tools it offers, by
  ``enabledTools``/``disabledTools``, held ones not counted);
- ``down``: the session left it out (``error``: the reason's first line, ``stderr``:
  the tail of a stdio server's stderr, apart);
- ``starting``: enabled, and not (yet) in the composition, or in it under another
  configuration (a save whose preparation has not landed).

When ``albedo-mcp doctor`` (or the pane's Check) saw the server after the daemon's view
was taken, under its configuration as it is now, its state is the check's
(``"source": "check"``). Every line is redacted of the server's secrets (its stored
credentials and the values of the variables it names), over the transport's own
redaction of the stderr tail.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..catalogue.saved import fingerprint
from ..config import ServerConfig, parse
from ..errors import AlbedoError, StoreError
from ..settings.doctor import redact, secret_values, split_error
from ..store.records import thaw
from ..settings.trust import held_tools
from ..wire import telemetry

if TYPE_CHECKING:
    from ..catalogue.composition import Composition
    from ..catalogue.trust import HeldTool
    from ..settings import ServerView, Settings

logger = telemetry.logger(__name__)  # records carry the server and trace ids

__all__ = ["LiveSource", "Snapshot", "live_states", "tool_list", "LIVE_BOUND"]

LIVE_BOUND = 1.0  # how long a request waits for the session's composition, in seconds
_SIGN_IN = "needs the user to sign in"  # NeedsSignIn's detail starts so (errors.py)
_MCP_OFF = "MCP is off for the session; turn the mcp extension on (`albedo-mcp extension mcp on`)"


@dataclass(frozen=True)
class Snapshot:
    """The daemon's view: the session's composition (None: none yet, the runtime is
    starting) and when it was first seen (a Unix time)."""

    composition: Composition | None
    at: float | None


class LiveSource:
    """The live state provider of ``albedo-mcp serve``: asks the runtime's session for its
    composition, within ``bound`` seconds, and remembers the last one it got.

    ``runtime()`` gives the running :class:`~albedo_actors.runtime.Runtime` (or None while it
    starts, or once it stopped). Thread-safe: request threads call it at once.
    """

    def __init__(self, runtime: Callable[[], Any], bound: float = LIVE_BOUND) -> None:
        self._runtime = runtime
        self._bound = bound
        self._lock = threading.Lock()
        self._last: Composition | None = None
        self._at: float | None = None

    def __call__(self) -> Snapshot:
        from ..actors.reply import ask

        runtime = self._runtime()
        composition = None
        if runtime is not None:
            try:
                composition = ask(runtime.composer.composition, timeout=self._bound)
            except AlbedoError as exc:  # stopping, or busy past the bound: the last one seen
                logger.debug("the session's composition was not given in time (%s)", type(exc).__name__)
        with self._lock:
            if composition is not None and composition is not self._last:
                self._last, self._at = composition, time.time()
            return Snapshot(self._last, self._at)


# -- GET /api/mcp's "live" ------------------------------------------------------------------------


def live_states(settings: Settings, views: list[ServerView], snapshot: Snapshot) -> dict[str, dict[str, Any]]:
    """Each server's ``live`` (see the module docstring), by name.

    Raises:
        ConfigError: extensions.json is invalid. StoreError: the database failed.
    """
    config = parse(settings.document.read(), settings.home, source=settings.path)
    servers = {server.name: server for server in config.servers}
    names = [view.name for view in views if view.name in servers]
    credentials = dict(settings.store.get_credentials_of(names)) if names else {}
    load_states = getattr(settings.store, "load_server_states", None)
    checks = dict(load_states(names)) if load_states is not None and names else {}
    key = getattr(settings.store, "digest_key", None)
    out: dict[str, dict[str, Any]] = {}
    for view in views:
        server = servers.get(view.name)
        if server is None:
            continue
        creds = credentials.get(view.name)
        readable = None if isinstance(creds, StoreError) else creds
        secrets = secret_values(server, readable, os.environ)
        live = _daemon_state(server, view, snapshot, secrets)
        check = checks.get(view.name)
        if (check is not None and not isinstance(check, StoreError) and live["state"] not in ("off", "misconfigured")
                and (snapshot.at is None or check.seen_at > snapshot.at)
                and check.fingerprint == fingerprint(server, readable, os.environ, key)):
            live = _check_state(check, secrets)
        out[view.name] = live
    return out


def _state(state: str, *, error: str | None = None, stderr: tuple[str, ...] = (), era: str | None = None,
           version: str | None = None, tools: int | None = None, source: str = "daemon",
           at: float | None = None) -> dict[str, Any]:
    return {"state": state, "era": era, "protocolVersion": version, "tools": tools, "error": error,
            "stderr": list(stderr), "source": source, "at": at}


def _daemon_state(server: ServerConfig, view: ServerView, snapshot: Snapshot, secrets: list[str]) -> dict[str, Any]:
    composition, at = snapshot.composition, snapshot.at
    name = server.name
    if not server.enabled:
        return _state("off", at=at)
    if view.problem is not None:
        return _state("misconfigured", error=redact(f"server {name!r}: {view.problem}", secrets), at=at)
    if composition is not None and (composition.mcp_off or name in composition.switched_off):
        return _state("off", error=_MCP_OFF if composition.mcp_off else None, at=at)
    reason = composition.left_out.get(name) if composition is not None else None
    if composition is not None and name in composition.misconfigured:
        return _state("misconfigured", error=redact(f"server {name!r}: {reason}", secrets).splitlines()[0], at=at)
    if view.auth.get("state") in ("needs_sign_in", "signed_out"):
        why = view.auth.get("reason")
        return _state("needs_sign_in", error=f"server {name!r}: needs a sign-in" + (f" ({why})" if why else ""), at=at)
    if reason is not None and reason.startswith(_SIGN_IN):
        return _state("needs_sign_in", error=redact(f"server {name!r}: {reason}", secrets), at=at)
    if composition is None or _outdated(composition, server):
        return _state("starting", at=at)
    catalogue = composition.catalogues.get(name)
    if catalogue is not None:
        offered = sum(1 for tool in catalogue.tools if server.tool_enabled(str(tool.get("name"))))
        return _state("ok", era=catalogue.era, version=catalogue.protocol_version, tools=offered, at=at)
    if reason is not None:
        head, tail = split_error(redact(reason, secrets))
        first = head.splitlines()[0] if head else "it could not be started"
        return _state("down", error=f"server {name!r}: {first}", stderr=tail, at=at)
    return _state("starting", at=at)


def _outdated(composition: Composition, server: ServerConfig) -> bool:
    """The composition holds this server under another configuration (a save not landed
    yet). Compared as the registry compares them, by fingerprint: a change that keeps
    the client (its trust, its call timeout) keeps the handle and its configuration."""
    for handle in (*composition.handles.values(), *composition.held):
        if handle.name == server.name:
            return handle.config != server and fingerprint(handle.config) != fingerprint(server)
    return False


def _check_state(check: Any, secrets: list[str]) -> dict[str, Any]:
    report = check.report if isinstance(check.report, Mapping) else {}

    def text(key: str) -> str | None:
        value = report.get(key)
        return redact(value, secrets) if isinstance(value, str) else None

    stderr = report.get("stderr")
    tools = report.get("tools")
    return _state(check.state, error=text("error"), era=text("era"), version=text("protocolVersion"),
                  stderr=tuple(redact(line, secrets) for line in stderr if isinstance(line, str)) if isinstance(stderr, list) else (),
                  tools=tools if isinstance(tools, int) and not isinstance(tools, bool) else None,
                  source="check", at=check.seen_at)


# -- GET /api/mcp/tools/NAME ------------------------------------------------------------------------


def tool_list(settings: Settings, name: str, snapshot: Snapshot | None) -> dict[str, Any]:
    """The server's whole discovered tool list, filters not applied (a disabled tool stays
    listed, to be turned back on), each with its ``enabled`` flag and what tool integrity
    holds of it. From the daemon's composition when it offers the server (its catalogue,
    held tools taken out, with the held ones put back), else from the saved catalogue
    (saved as discovered, held tools in it), else none.

    Raises:
        ConfigError: no such server (``NotConfigured``), or extensions.json is invalid.
        StoreError: the database failed.
    """
    config = parse(settings.document.read(), settings.home, source=settings.path)
    server = config.server(name)
    held: tuple[HeldTool, ...] = held_tools(settings.store, [name]).get(name, ())
    held_by_tool = {hold.tool: hold for hold in held}
    composition = snapshot.composition if snapshot is not None else None
    catalogue = composition.catalogues.get(name) if composition is not None else None
    tools: list[dict[str, Any]]
    saved_at = None
    if catalogue is not None and not _outdated(composition, server):  # type: ignore[arg-type]
        source = "daemon"
        tools = [thaw(tool) for tool in catalogue.tools]
        listed = {tool.get("name") for tool in tools}
        tools += [thaw(hold.new) for hold in held if not hold.instructions and hold.tool not in listed]
    else:
        saved = settings.store.load_catalogue(name)
        if saved is not None and isinstance(saved.catalogue.get("tools"), list):
            source, saved_at = "saved", saved.saved_at
            tools = [dict(tool) for tool in saved.catalogue["tools"] if isinstance(tool, Mapping)]
        else:
            source, tools = "none", []
    enabled_tools = server.enabled_tools
    listed_tools = []
    for tool in tools:
        tool_name = tool.get("name")
        if not isinstance(tool_name, str):
            continue
        hold = held_by_tool.get(tool_name)
        description = tool.get("description")
        title = tool.get("title")
        schema = tool.get("inputSchema")
        listed_tools.append({
            "name": tool_name,
            "title": title if isinstance(title, str) else None,
            "description": description if isinstance(description, str) else "",
            "inputSchema": thaw(schema) if isinstance(schema, Mapping) else {},
            "enabled": server.tool_enabled(tool_name),
            "held": _held_json(hold, with_tool=False) if hold is not None else None,
        })
    return {"server": name, "source": source, "savedAt": saved_at,
            "enabledTools": list(enabled_tools) if enabled_tools is not None else None,
            "disabledTools": list(server.disabled_tools), "tools": listed_tools,
            "held": [_held_json(hold, with_tool=True) for hold in held]}


def _held_json(hold: HeldTool, *, with_tool: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"tool": hold.tool} if with_tool else {}
    out.update(kind=hold.kind, changes=list(hold.changes), old=thaw(hold.old) if hold.old is not None else None,
               new=thaw(hold.new))
    return out
