"""Server configuration: the ``mcp`` section of ``$ALBEDO_HOME/extensions.json``.

::

    {"mcp": {"retryMs": 30000, "servers": {
        "docs": {"type": "stdio", "command": "/usr/local/bin/docs-mcp",
                 "args": ["--root", "/srv/docs"], "cwd": "/srv/docs",
                 "env": {"DOCS_TOKEN": {"env": "MY_DOCS_TOKEN"}}},
        "search": {"type": "http", "url": "https://mcp.example.com/mcp",
                   "bearerTokenEnvVar": "MY_SEARCH_TOKEN", "enabledTools": ["search"],
                   "callTimeoutMs": 30000}}}}

Secrets are named, never inlined: every ``env`` value (and HTTP header) names one
environment variable of the host process, and a missing variable is an error of that
server (left out of a session with one warning naming it and the variable, its calls
refused with that line) instead of a server started without it. albedo's own variables
(every name starting with ``ALBEDO_``, in any case: the store key, the database URL, the
service's) are never named: as an env, header, bearer or OAuth variable each is refused
in one line naming the server and the key (:func:`own_variable`), at parse time and again
when a host builds a :class:`ServerConfig` in code. Parsing is strict: an unknown key is
reported, so that a typo does not silently change behaviour.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from .errors import ConfigError
from .safefiles import FileRefused, read_text

if TYPE_CHECKING:  # the record's type only: config stays a leaf at run time
    from .store.records import Credentials

DEFAULT_STARTUP_TIMEOUT_MS = 30_000
DEFAULT_CALL_TIMEOUT_MS = 60_000
DEFAULT_RETRY_MS = 30_000
EXTENSION_DEFAULTS = {"mcp": False, "editor-mcp": True}
MAX_TIMEOUT_MS = 3_600_000
# What a stdio server inherits from the host, besides the variables named for it.
INHERITED_ENV = ("HOME", "PATH", "TMPDIR")
# albedo's own variables (the store key and its files, the database URL, the home, the
# service's settings, and any added later) start with this; none is ever given to a server.
OWN_PREFIX = "ALBEDO_"
OWN_VARIABLE = ("one of albedo's own variables (ALBEDO_*: the store key, the database URL, the service's "
                "settings), which no server is given; name another variable")

# The validators every writer of the settings shares (settings, the service, the CLI):
# a server's name, an environment variable's name, an HTTP header's name (an RFC 9110 token).
SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,47}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_COMMON_KEYS = {"type", "enabled", "enabledTools", "disabledTools", "startupTimeoutMs", "callTimeoutMs", "maxCallTimeoutMs", "trust",
                "tasks"}
TASK_MODES = ("auto", "always", "never")
_STDIO_KEYS = _COMMON_KEYS | {"command", "args", "cwd", "env"}
_HTTP_KEYS = _COMMON_KEYS | {"url", "bearerTokenEnvVar", "headers", "caFile", "oauth"}
_OAUTH_KEYS = {"grant", "clientId", "clientSecretEnvVar", "privateKeyEnvVar", "signingAlgorithm", "tokenEndpointAuthMethod", "clientMetadataUrl", "scope", "dpop"}
# The keys of the grants with no browser (auth/grants.py): workload identity and enterprise.
_JWT_BEARER_KEYS = {"assertionFile", "assertionEnvVar"}
_ENTERPRISE_KEYS = {"idpIssuer", "idpTokenEndpoint", "idpClientId", "idpClientSecretEnvVar", "idTokenEnvVar"}
_OAUTH_KEYS |= _JWT_BEARER_KEYS | _ENTERPRISE_KEYS
OAUTH_GRANTS = ("authorization_code", "client_credentials", "jwt-bearer", "enterprise")
OAUTH_AUTH_METHODS = ("none", "client_secret_basic", "client_secret_post", "private_key_jwt")
OAUTH_SIGNING_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "ES512", "EdDSA")



@dataclass(frozen=True)
class OAuthSettings:
    """The ``oauth`` object of an HTTP server entry: how albedo identifies itself when signing in.

    Every part is optional. ``client_id`` (with ``client_secret_env_var``) is a client
    registered by hand; without one, albedo registers itself (RFC 7591). ``grant`` is
    ``authorization_code`` (a user signs in) or ``client_credentials`` (machine to
    machine: a client secret, or ``private_key_env_var`` naming a PEM private key for
    ``private_key_jwt``), ``jwt-bearer`` (workload identity, RFC 7523: the workload's
    JWT from ``assertion_file``, re-read at each grant, or ``assertion_env_var``) or
    ``enterprise`` (SEP-990: the user's id_token is exchanged at the identity provider
    ``idp_issuer`` for an ID-JAG, which the jwt-bearer grant presents to the MCP
    server's authorization server). Secrets are variable names, never values.
    """

    grant: str = "authorization_code"
    client_id: str | None = None
    client_secret_env_var: str | None = None
    private_key_env_var: str | None = None
    signing_algorithm: str = "RS256"
    token_endpoint_auth_method: str | None = None
    client_metadata_url: str | None = None
    scope: str | None = None
    # DPoP (RFC 9449): True always, False never, None when the authorization server lists
    # dpop_signing_alg_values_supported (see auth/dpop.py).
    dpop: bool | None = None
    # jwt-bearer: where the workload's JWT is (one of the two)
    assertion_file: str | None = None
    assertion_env_var: str | None = None
    # enterprise: the company's identity provider and the user's id_token
    idp_issuer: str | None = None
    idp_token_endpoint: str | None = None  # else found by discovery at idp_issuer
    idp_client_id: str | None = None
    idp_client_secret_env_var: str | None = None
    id_token_env_var: str | None = None  # else the host's id_token provider


@dataclass(frozen=True)
class ServerConfig:
    """One configured server. Environment values are variable *names*, never secrets."""

    name: str
    type: str  # "stdio" or "http"
    command: str | None = None
    args: tuple[str, ...] = ()
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)  # KEY -> host variable name
    url: str | None = None
    bearer_token_env_var: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)  # header -> host variable name
    ca_file: str | None = None  # trust store for TLS (default: the certifi bundle)
    oauth: OAuthSettings | None = None  # how to sign in, when the server asks (HTTP only)
    enabled: bool = True
    enabled_tools: tuple[str, ...] | None = None
    disabled_tools: tuple[str, ...] = ()
    startup_timeout_ms: int = DEFAULT_STARTUP_TIMEOUT_MS
    call_timeout_ms: int = DEFAULT_CALL_TIMEOUT_MS
    # The hard cap of a tool call that progress keeps alive (None: ten times callTimeoutMs).
    max_call_timeout_ms: int | None = None
    # "trust": "pinned" holds every change of its tools (catalogue/trust.py); "default" the usual rules.
    trust: str = "default"
    # "tasks": when a tool call runs as an MCP task (connection/tasks.py): "auto" when the
    # tool requires one, or allows one and ran long before; "always" whenever the tool
    # allows one; "never" (a tool that requires one is then left out).
    tasks: str = "auto"

    @property
    def startup_timeout(self) -> float:
        return self.startup_timeout_ms / 1000

    @property
    def call_timeout(self) -> float:
        return self.call_timeout_ms / 1000

    @property
    def max_call_timeout(self) -> float:
        """Seconds a tool call may last however much progress it reports."""
        cap = self.max_call_timeout_ms if self.max_call_timeout_ms is not None else 10 * self.call_timeout_ms
        return max(cap, self.call_timeout_ms) / 1000

    def __post_init__(self) -> None:
        # The check parse() makes with the file and key in its message, made again for a
        # configuration a host builds in code: no path routes albedo's own variables.
        oauth = self.oauth
        named = [*(("env " + key, var) for key, var in self.env.items()),
                 *(("header " + key, var) for key, var in self.headers.items()),
                 ("bearerTokenEnvVar", self.bearer_token_env_var)]
        if oauth is not None:
            named += [("oauth.clientSecretEnvVar", oauth.client_secret_env_var),
                      ("oauth.privateKeyEnvVar", oauth.private_key_env_var),
                      ("oauth.assertionEnvVar", oauth.assertion_env_var),
                      ("oauth.idpClientSecretEnvVar", oauth.idp_client_secret_env_var),
                      ("oauth.idTokenEnvVar", oauth.id_token_env_var)]
        for what, variable in named:
            if isinstance(variable, str) and own_variable(variable):
                raise ConfigError(f"server {self.name!r}: {what} names ${variable}, {OWN_VARIABLE}")

    def tool_enabled(self, tool: str) -> bool:
        if self.enabled_tools is not None and tool not in self.enabled_tools:
            return False
        return tool not in self.disabled_tools


@dataclass(frozen=True)
class McpConfig:
    home: str
    servers: tuple[ServerConfig, ...] = ()
    retry_ms: int = DEFAULT_RETRY_MS
    # Per-extension defaults from the top-level "enabled" object (a session's own
    # choice overrides them): the mcp extension is off, editor-mcp on, unless set.
    extensions: Mapping[str, bool] = field(default_factory=lambda: dict(EXTENSION_DEFAULTS))
    # "mcp": {"advertise": {"maxTools": N, "pinned": [...]}}: None advertises every operation.
    advertising: Advertise | None = None
    # "mcp": {"trust": {"newTools": "hold" | "allow"}}: whether a tool that was not there before is held.
    new_tools: str = "hold"

    def extension_enabled(self, extension: str) -> bool:
        return bool(self.extensions.get(extension, False))

    def server(self, name: str) -> ServerConfig:
        for server in self.servers:
            if server.name == name:
                return server
        raise ConfigError(f"no server named {name!r} in {os.path.join(self.home, 'extensions.json')}")

    @property
    def enabled(self) -> tuple[ServerConfig, ...]:
        return tuple(s for s in self.servers if s.enabled)


def own_variable(name: str) -> bool:
    """True for a variable of albedo's own namespace (``ALBEDO_*``, in any case: a
    case-insensitive environment, as on Windows, reads ``albedo_store_key`` as the key)."""
    return name.upper().startswith(OWN_PREFIX)


def resolve_home(explicit: str | None = None, environ: Mapping[str, str] = os.environ) -> str:
    """``--home``, else ``$ALBEDO_HOME``, else ``~/.albedo``."""
    home = explicit or environ.get("ALBEDO_HOME") or os.path.join(os.path.expanduser("~"), ".albedo")
    return os.path.abspath(home)


def load(home: str) -> McpConfig:
    """Read ``HOME/extensions.json``; a missing file means no servers.

    Raises:
        ConfigError: the file is unreadable, not JSON, or an entry is invalid.
    """
    path = os.path.join(home, "extensions.json")
    try:
        data = json.loads(read_text(path))  # never through a symbolic link
    except FileNotFoundError:
        return McpConfig(home=home)
    except FileRefused as exc:
        raise ConfigError(str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from None
    return parse(data, home, source=path)


def parse(data: Any, home: str, source: str = "extensions.json") -> McpConfig:
    """Validate the whole document; the first problem raises, naming where it is.

    Raises:
        ConfigError
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a JSON object")
    foreign = foreign_format(data)
    if foreign is not None:
        # Another client's file in our place would otherwise give no servers, silently.
        raise ConfigError(f"{source} holds {foreign}, not albedo's format (servers under \"mcp\": {{\"servers\": ...}}); "
                          f"move it aside and run `albedo-mcp import FILE` to bring its servers in")
    mcp = data.get("mcp", {})
    if not isinstance(mcp, dict):
        raise ConfigError(f'{source}: "mcp" must be an object')
    unknown = set(mcp) - {"servers", "retryMs", "advertise", "trust"}
    if unknown:
        raise ConfigError(f'{source}: unknown key(s) in "mcp": {", ".join(sorted(unknown))}')
    servers = mcp.get("servers", {})
    if not isinstance(servers, dict):
        raise ConfigError(f'{source}: "mcp.servers" must be an object of name → server')
    retry_ms = _timeout(mcp, "retryMs", DEFAULT_RETRY_MS, f"{source}: mcp")
    parsed = tuple(_server(name, entry, home, source) for name, entry in servers.items())
    return McpConfig(home=home, servers=parsed, retry_ms=retry_ms, extensions=_extensions(data.get("enabled"), source),
                     advertising=_advertise(mcp.get("advertise"), source), new_tools=_trust(mcp.get("trust"), source))


def _trust(value: Any, source: str) -> str:
    """``mcp.trust``: ``{"newTools": "hold" | "allow"}`` (default hold); the newTools value."""
    if value is None:
        return "hold"
    where = f"{source}: mcp.trust"
    if not isinstance(value, dict):
        raise ConfigError(f'{where} must be an object, e.g. {{"newTools": "hold"}}')
    unknown = set(value) - {"newTools"}
    if unknown:
        raise ConfigError(f'{where}: unknown key(s): {", ".join(sorted(map(str, unknown)))} (known: newTools)')
    new_tools = value.get("newTools", "hold")
    if new_tools not in ("hold", "allow"):
        raise ConfigError(f'{where}: "newTools" must be "hold" or "allow"')
    return str(new_tools)


def foreign_format(data: dict) -> str | None:
    """Which other client's format the document ``data`` is, or None.

    Claude, Cursor, Windsurf and Gemini list servers under a top-level ``mcpServers``;
    VS Code under a top-level ``servers`` beside ``inputs``, or (in its settings) under
    ``"mcp": {"servers", "inputs"}``. albedo's own document has none of these: its
    servers are under ``"mcp": {"servers"}``, and ``"mcp"`` never holds ``inputs``.
    """
    if "mcpServers" in data:
        return 'another client\'s "mcpServers" list (Claude, Cursor, Windsurf or Gemini CLI)'
    mcp = data.get("mcp")
    if "servers" in data or "inputs" in data or (isinstance(mcp, dict) and "inputs" in mcp):
        return 'a VS Code MCP configuration ("servers" with "inputs")'
    return None


# -- "mcp": {"advertise": ...}: the budget of operations a session advertises (tool search) --

MAX_ADVERTISED = 10_000
MAX_PINNED = 1_000


@dataclass(frozen=True)
class Advertise:
    """A session advertises at most ``max_tools`` operations: the ``pinned`` ones
    (``server/tool``) first, then the most recently used, then the search tool."""

    max_tools: int
    pinned: tuple[str, ...] = ()


def _advertise(value: Any, source: str) -> Advertise | None:
    if value is None:
        return None
    where = f"{source}: mcp.advertise"
    if not isinstance(value, dict):
        raise ConfigError(f'{where} must be an object, e.g. {{"maxTools": 64, "pinned": ["docs/search"]}}')
    unknown = set(value) - {"maxTools", "pinned"}
    if unknown:
        raise ConfigError(f'{where}: unknown key(s): {", ".join(sorted(map(str, unknown)))}')
    limit = value.get("maxTools")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 2 <= limit <= MAX_ADVERTISED:
        raise ConfigError(f'{where}: "maxTools" must be a whole number from 2 to {MAX_ADVERTISED} (one place is the search tool)')
    pinned = _strings(value, "pinned", where)
    if len(pinned) > MAX_PINNED:
        raise ConfigError(f'{where}: "pinned" names {len(pinned)} operations, over {MAX_PINNED}')
    bad = next((name for name in pinned if name.count("/") < 1 or name.startswith("/") or name.endswith("/")), None)
    if bad is not None:
        raise ConfigError(f'{where}: "pinned" names operations as "server/tool", not {bad[:80]!r}')
    return Advertise(limit, pinned)


def _extensions(value: Any, source: str) -> dict[str, bool]:
    """The top-level ``enabled`` object: extension name -> on by default."""
    if value is None:
        return dict(EXTENSION_DEFAULTS)
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, bool) for k, v in value.items()):
        raise ConfigError(f'{source}: "enabled" must map extension names to true or false, e.g. {{"mcp": true}}')
    return {**EXTENSION_DEFAULTS, **value}


def _server(name: str, entry: Any, home: str, source: str) -> ServerConfig:
    where = f"{source}: server {name!r}"
    if not SERVER_NAME.match(name):
        raise ConfigError(f"{where}: a name must be 1-48 letters, digits, '-' or '_', starting with a letter or digit")
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be an object")
    kind = entry.get("type") or ("stdio" if "command" in entry else "http" if "url" in entry else None)
    if kind not in ("stdio", "http"):
        raise ConfigError(f'{where}: "type" must be "stdio" or "http"')
    unknown = set(entry) - (_STDIO_KEYS if kind == "stdio" else _HTTP_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) for a {kind} server: {', '.join(sorted(unknown))}")
    common: dict[str, Any] = {
        "enabled": _bool(entry, "enabled", True, where),
        "enabled_tools": _strings(entry, "enabledTools", where) if "enabledTools" in entry else None,
        "disabled_tools": _strings(entry, "disabledTools", where),
        "startup_timeout_ms": _timeout(entry, "startupTimeoutMs", DEFAULT_STARTUP_TIMEOUT_MS, where),
        "call_timeout_ms": _timeout(entry, "callTimeoutMs", DEFAULT_CALL_TIMEOUT_MS, where),
    }
    if "trust" in entry:
        if entry["trust"] not in ("pinned", "default"):
            raise ConfigError(f'{where}: "trust" must be "pinned" (hold every change of its tools) or "default"')
        common["trust"] = entry["trust"]
    if "tasks" in entry:
        if entry["tasks"] not in TASK_MODES:
            raise ConfigError(f'{where}: "tasks" must be "auto" (a task when the tool requires one, or allows one and '
                              'ran long before), "always" (whenever the tool allows one) or "never"')
        common["tasks"] = entry["tasks"]
    if "maxCallTimeoutMs" in entry:
        cap = _timeout(entry, "maxCallTimeoutMs", 0, where)
        if cap < common["call_timeout_ms"]:
            raise ConfigError(f'{where}: "maxCallTimeoutMs" ({cap}) must be at least "callTimeoutMs" ({common["call_timeout_ms"]})')
        common["max_call_timeout_ms"] = cap
    if kind == "stdio":
        command = entry.get("command")
        if not isinstance(command, str) or not command.strip() or "\0" in command:
            raise ConfigError(f'{where}: "command" must be the executable to run (a non-empty string)')
        cwd = entry.get("cwd")
        if cwd is not None:
            if not isinstance(cwd, str) or not cwd or "\0" in cwd:
                raise ConfigError(f'{where}: "cwd" must be a directory path')
            cwd = os.path.join(home, os.path.expanduser(cwd))
        return ServerConfig(
            name=name,
            type="stdio",
            command=command,
            args=tuple(_strings(entry, "args", where)),
            cwd=cwd,
            env=_named(entry, "env", where, ENV_NAME, "an environment variable name"),
            **common,
        )
    return ServerConfig(
        name=name,
        type="http",
        url=_url(entry.get("url"), where),
        bearer_token_env_var=_variable(entry.get("bearerTokenEnvVar"), f'{where}: "bearerTokenEnvVar"', optional=True),
        headers=_named(entry, "headers", where, HEADER_NAME, "an HTTP header name"),
        ca_file=_ca_file(entry.get("caFile"), home, where),
        oauth=_oauth(entry.get("oauth"), where, home),
        **common,
    )


def _oauth(value: Any, where: str, home: str = "") -> OAuthSettings | None:
    if value is None:
        return None
    where = f'{where}: "oauth"'
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be an object")
    unknown = set(value) - _OAUTH_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown key(s): {', '.join(sorted(unknown))} (known: {', '.join(sorted(_OAUTH_KEYS))})")
    if "clientSecret" in value or "privateKey" in value:  # pragma: no cover - caught as unknown above
        raise ConfigError(f"{where}: secrets are named, never written into extensions.json")

    def text(key: str, limit: int = 2048) -> str | None:
        item = value.get(key)
        if item is None:
            return None
        if not isinstance(item, str) or not item.strip() or len(item) > limit or any(ch in item for ch in "\r\n\0"):
            raise ConfigError(f'{where}: "{key}" must be a non-empty one-line string')
        return item

    grant = text("grant") or "authorization_code"
    if grant not in OAUTH_GRANTS:
        raise ConfigError(f'{where}: "grant" must be one of {", ".join(OAUTH_GRANTS)}')
    method = text("tokenEndpointAuthMethod")
    if method is not None and method not in OAUTH_AUTH_METHODS:
        raise ConfigError(f'{where}: "tokenEndpointAuthMethod" must be one of {", ".join(OAUTH_AUTH_METHODS)}')
    algorithm = text("signingAlgorithm") or "RS256"
    if algorithm not in OAUTH_SIGNING_ALGORITHMS:
        raise ConfigError(f'{where}: "signingAlgorithm" must be one of {", ".join(OAUTH_SIGNING_ALGORITHMS)}')
    metadata_url = text("clientMetadataUrl")
    if metadata_url is not None:
        parts = urllib.parse.urlsplit(metadata_url)
        if parts.scheme != "https" or not parts.hostname or parts.fragment or parts.username or parts.password:
            raise ConfigError(f'{where}: "clientMetadataUrl" must be an https URL without a fragment or userinfo')
    dpop = value.get("dpop")  # DPoP (RFC 9449): see OAuthSettings.dpop
    if dpop is not None and not isinstance(dpop, bool):
        raise ConfigError(f'{where}: "dpop" must be true or false')
    settings = OAuthSettings(
        grant=grant,
        client_id=text("clientId"),
        client_secret_env_var=_variable(value.get("clientSecretEnvVar"), f'{where}: "clientSecretEnvVar"', optional=True),
        private_key_env_var=_variable(value.get("privateKeyEnvVar"), f'{where}: "privateKeyEnvVar"', optional=True),
        signing_algorithm=algorithm,
        token_endpoint_auth_method=method,
        client_metadata_url=metadata_url,
        scope=text("scope", 4096),
        dpop=dpop,
        **_grant_keys(value, grant, where, home, text),
    )
    if settings.client_secret_env_var and not settings.client_id:
        raise ConfigError(f'{where}: "clientSecretEnvVar" needs a "clientId"')
    if settings.private_key_env_var and not settings.client_id:
        raise ConfigError(f'{where}: "privateKeyEnvVar" needs a "clientId"')
    if grant == "client_credentials":
        if not settings.client_id:
            raise ConfigError(f'{where}: the client_credentials grant needs a "clientId"')
        if not (settings.client_secret_env_var or settings.private_key_env_var):
            raise ConfigError(f'{where}: the client_credentials grant needs "clientSecretEnvVar" or "privateKeyEnvVar"')
    if method == "private_key_jwt" and not settings.private_key_env_var:
        raise ConfigError(f'{where}: "private_key_jwt" needs "privateKeyEnvVar"')
    if method in ("client_secret_basic", "client_secret_post") and not settings.client_secret_env_var:
        raise ConfigError(f'{where}: "{method}" needs "clientSecretEnvVar"')
    if grant == "enterprise" and not settings.client_id:
        raise ConfigError(f'{where}: the enterprise grant needs a "clientId" (the client registered at the MCP '
                          f"server's authorization server, which the ID-JAG names)")
    return settings


def _grant_keys(value: dict, grant: str, where: str, home: str, text: Any) -> dict[str, Any]:
    """The keys of the jwt-bearer and enterprise grants (auth/grants.py), checked."""
    for keys, owner in ((_JWT_BEARER_KEYS, "jwt-bearer"), (_ENTERPRISE_KEYS, "enterprise")):
        stray = sorted(k for k in keys if k in value)
        if stray and grant != owner:
            raise ConfigError(f'{where}: {", ".join(stray)} only go with "grant": "{owner}"')
    out: dict[str, Any] = {}
    if grant == "jwt-bearer":
        path = value.get("assertionFile")
        if path is not None:
            if not isinstance(path, str) or not path.strip() or "\0" in path:
                raise ConfigError(f'{where}: "assertionFile" must be the path of the file holding the workload\'s JWT')
            out["assertion_file"] = os.path.join(home, os.path.expanduser(path))
        out["assertion_env_var"] = _variable(value.get("assertionEnvVar"), f'{where}: "assertionEnvVar"', optional=True)
        if (path is None) == (out["assertion_env_var"] is None):
            raise ConfigError(f'{where}: the jwt-bearer grant needs exactly one of "assertionFile" or "assertionEnvVar"')
    if grant == "enterprise":
        for key, field_name in (("idpIssuer", "idp_issuer"), ("idpTokenEndpoint", "idp_token_endpoint")):
            url = text(key)
            if url is not None:
                parts = urllib.parse.urlsplit(url)
                loopback = parts.hostname in ("127.0.0.1", "localhost", "::1")
                if (parts.scheme != "https" and not (parts.scheme == "http" and loopback)) or not parts.hostname \
                        or parts.fragment or parts.query or parts.username or parts.password:
                    raise ConfigError(f'{where}: "{key}" must be an https URL without a query, fragment or userinfo')
            out[field_name] = url
        out["idp_client_id"] = text("idpClientId")
        out["idp_client_secret_env_var"] = _variable(value.get("idpClientSecretEnvVar"), f'{where}: "idpClientSecretEnvVar"',
                                                     optional=True)
        out["id_token_env_var"] = _variable(value.get("idTokenEnvVar"), f'{where}: "idTokenEnvVar"', optional=True)
        if not out["idp_issuer"] or not out["idp_client_id"]:
            raise ConfigError(f'{where}: the enterprise grant needs "idpIssuer" and "idpClientId" (the identity provider '
                              f"and albedo's client there)")
    return out


def _bool(entry: dict, key: str, default: bool, where: str) -> bool:
    value = entry.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f'{where}: "{key}" must be true or false')
    return value


def _strings(entry: dict, key: str, where: str) -> tuple[str, ...]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and "\0" not in v for v in value):
        raise ConfigError(f'{where}: "{key}" must be a list of strings')
    return tuple(value)


def _timeout(entry: dict, key: str, default: int, where: str) -> int:
    value = entry.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_TIMEOUT_MS:
        raise ConfigError(f'{where}: "{key}" must be a whole number of milliseconds from 1 to {MAX_TIMEOUT_MS}')
    return value


def _variable(value: Any, where: str, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    return _required_variable(value, where)


def _required_variable(value: Any, where: str) -> str:
    if not isinstance(value, str) or not ENV_NAME.match(value):
        raise ConfigError(f"{where} must name an environment variable of the host")
    if own_variable(value):
        # The store key ($ALBEDO_STORE_KEY), the database URL with its password: whatever a
        # server is given as env, a header, a bearer token or an OAuth secret, it can read.
        raise ConfigError(f"{where} names ${value}, {OWN_VARIABLE}")
    return value


def _named(entry: dict, key: str, where: str, pattern: re.Pattern, what: str) -> dict[str, str]:
    value = entry.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f'{where}: "{key}" must be an object')
    out = {}
    for name, ref in value.items():
        if not pattern.match(name):
            raise ConfigError(f'{where}: "{key}" key {name!r} is not {what}')
        if not (isinstance(ref, dict) and set(ref) == {"env"}):
            raise ConfigError(
                f'{where}: "{key}.{name}" must be {{"env": "VARIABLE"}}: secrets are named, never written into extensions.json'
            )
        out[name] = _required_variable(ref["env"], f'{where}: "{key}.{name}.env"')
    return out


def _ca_file(value: Any, home: str, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or "\0" in value:
        raise ConfigError(f'{where}: "caFile" must be the path of a PEM file of trusted certificates')
    return os.path.join(home, os.path.expanduser(value))


def _url(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f'{where}: "url" must be an http or https URL')
    parts = urllib.parse.urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f'{where}: "url" must be an http or https URL with a host')
    if parts.username is not None or parts.password is not None:
        raise ConfigError(f'{where}: "url" must not carry a user name or password; use bearerTokenEnvVar or headers')
    if parts.fragment or value.endswith("#"):
        raise ConfigError(f'{where}: "url" must not have a fragment')
    return value


def http_headers(server: ServerConfig, environ: Mapping[str, str] = os.environ,
                 credentials: Credentials | None = None) -> dict[str, str]:
    """The credentials an HTTP server gets on every request, read from named variables.

    Stored ``credentials`` (their ``bearer_token`` and their one ``header``, a
    (name, value) pair) are added, and win over a named variable for the same header.

    Raises:
        ConfigError: a named variable is not set, or its value cannot be a header.
    """
    where = f"server {server.name!r}"
    named = dict(server.headers)
    if server.bearer_token_env_var is not None:
        named["Authorization"] = server.bearer_token_env_var
    out = {}
    for header, variable in named.items():
        value = environ.get(variable)
        if value is None:
            raise ConfigError(f"{where}: {header} names ${variable}, which is not set in the host's environment")
        if any(ch in value for ch in "\r\n\0"):
            raise ConfigError(f"{where}: ${variable} holds a line break, which cannot go into an HTTP header")
        out[header] = f"Bearer {value}" if header == "Authorization" and variable == server.bearer_token_env_var else value
    stored = []
    bearer = credentials.bearer_token if credentials is not None else None
    if bearer:
        stored.append(("Authorization", f"Bearer {bearer}"))
    if credentials is not None:
        stored.extend(credentials.headers)
    for name, value in stored:
        if any(ch in value for ch in "\r\n\0") or not HEADER_NAME.match(name):
            raise ConfigError(f"{where}: the stored {name} header cannot be sent (a line break or a bad name)")
        for existing in [h for h in out if h.lower() == name.lower()]:
            del out[existing]
        out[name] = value
    return out
