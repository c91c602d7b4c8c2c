"""Other clients' MCP configurations, read into plain records for ``albedo-mcp import``.

::

    found = read_servers(text, kind=None)     # the kind is recognised from the content
    found.kind                                # "claude", "vscode", "codex", ...
    for server in found.servers:              # Imported records, in the file's order
        spec, secrets = to_settings(server, resolve)

Pure: text in, records out; nothing here reads the environment (:func:`resolver` is given
it), prompts or writes.
The formats read:

- ``claude``: a top-level ``mcpServers`` object (Claude Desktop, Claude Code's
  ``.mcp.json``); each entry has ``command``/``args``/``env`` (and ``cwd``), or ``type``
  ``http``/``sse`` with ``url`` and ``headers``. ``cursor`` reads the same.
- ``claude-code``: Claude Code's ``~/.claude.json``: the user's ``mcpServers`` and each
  project's ``projects.<path>.mcpServers``.
- ``windsurf``: ``mcpServers`` whose remote servers give ``serverUrl``.
- ``gemini``: ``mcpServers`` whose streamable HTTP servers give ``httpUrl`` (its ``url``
  is the old SSE transport), with ``cwd``, ``timeout``, ``includeTools``, ``excludeTools``.
- ``vscode``: a top-level ``servers`` object with ``inputs`` (or both under ``mcp`` in
  VS Code's settings); ``type`` is ``stdio``, ``http`` or ``sse``.
- ``codex``: Codex's ``config.toml``, one ``[mcp_servers.NAME]`` table each, with
  ``command``/``args``/``env``/``env_vars``/``cwd`` or ``url``, ``bearer_token_env_var``,
  ``http_headers`` and ``env_http_headers``.

Each string value is split into literal text and references: ``${env:VAR}`` and
``${VAR}`` (and, in Gemini's files, ``$VAR``) name a variable of the environment,
``${input:ID}`` (VS Code) an input asked for when importing. A value that is one
variable and nothing else becomes the ``{"env": "VAR"}`` reference extensions.json
takes; any other ``env`` or header value is a secret, stored by the settings.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..config import ENV_NAME, HEADER_NAME, MAX_TIMEOUT_MS, OWN_VARIABLE, SERVER_NAME, foreign_format, own_variable
from ..errors import ConfigError
from . import SecretInput, ServerSpec, fit_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with tomli, tomllib's original
    import tomli as tomllib

KINDS = ("claude", "claude-code", "cursor", "windsurf", "gemini", "vscode", "codex")
JSON_FAMILY = ("claude", "claude-code", "cursor", "windsurf", "gemini")
KNOWN = ("claude (Claude Desktop, Claude Code .mcp.json), claude-code (~/.claude.json), cursor, windsurf, gemini, "
         "vscode (mcp.json) and codex (config.toml)")

# ${env:VAR}, ${VAR} and ${VAR:-default}; ${input:ID}; any other ${...} (workspaceFolder, file:...).
_REFERENCE = re.compile(r"\$\{(?:(env:)?([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?|input:([^}]+)|([^}]*))\}")
_BARE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")  # Gemini's $VAR
# The editors' own ${...} variables (VS Code, Cursor, Windsurf): never environment variables.
EDITOR_VARIABLES = frozenset({
    "workspaceFolder", "workspaceFolderBasename", "workspaceRoot", "userHome", "pathSeparator", "cwd", "execPath",
    "file", "fileBasename", "fileBasenameNoExtension", "fileDirname", "fileDirnameBasename", "fileExtname",
    "fileWorkspaceFolder", "relativeFile", "relativeFileDirname", "lineNumber", "selectedText", "defaultBuildTask",
})

# What each family's entries may hold and albedo reads; other keys are named as ignored.
_JSON_KEYS = {"type", "command", "args", "env", "cwd", "url", "serverUrl", "httpUrl", "headers", "disabled", "enabled",
              "envFile", "timeout", "includeTools", "excludeTools", "disabledTools"}
_CODEX_KEYS = {"command", "args", "env", "env_vars", "cwd", "url", "bearer_token", "bearer_token_env_var", "http_headers",
               "env_http_headers", "enabled", "enabled_tools", "disabled_tools", "startup_timeout_sec",
               "startup_timeout_ms", "tool_timeout_sec"}


class Unrecognised(ConfigError):
    """The file is none of the known kinds (or not the kind ``--from`` named)."""


@dataclass(frozen=True)
class Value:
    """One string of the source file as pieces: ``("text", s)``, ``("env", VAR)`` or ``("input", ID)``."""

    pieces: tuple[tuple[str, str], ...]

    @property
    def variable(self) -> str | None:
        """The variable the value is, when it is one variable and nothing else."""
        if len(self.pieces) == 1 and self.pieces[0][0] == "env":
            return self.pieces[0][1]
        return None

    @property
    def literal(self) -> bool:
        return all(kind == "text" for kind, _ in self.pieces)

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(text for kind, text in self.pieces if kind == "input")

    @property
    def variables(self) -> tuple[str, ...]:
        return tuple(text for kind, text in self.pieces if kind == "env")

    def text(self) -> str:
        """The value with its references as they would be written (no secret is in a reference)."""
        return "".join(text if kind == "text" else "${%s:%s}" % (kind, text) for kind, text in self.pieces)

    def after(self, prefix: str) -> Value | None:
        """The value without a leading literal ``prefix`` (case-insensitive), or None."""
        if not self.pieces or self.pieces[0][0] != "text" or not self.pieces[0][1].lower().startswith(prefix.lower()):
            return None
        rest = self.pieces[0][1][len(prefix):]
        return Value(((("text", rest),) if rest else ()) + self.pieces[1:])

    def __repr__(self) -> str:  # a literal may be a secret: never shown
        return f"Value({', '.join(kind if kind == 'text' else f'{kind}:{text}' for kind, text in self.pieces)})"


@dataclass(frozen=True)
class Input:
    """A VS Code input: asked for, like a secret, when a server to import uses it."""

    id: str
    description: str = ""
    default: str | None = None


@dataclass(frozen=True)
class Imported:
    """One server of the source file, in albedo's terms. Never printed whole: ``env``,
    ``headers`` and ``bearer`` may hold secrets."""

    name: str  # the name it is saved under
    source: str  # its name in the file
    transport: str = "stdio"  # "stdio" or "http"
    command: str | None = None
    args: tuple[str, ...] = ()
    url: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # further extensions.json keys: references, tools, timeouts
    env: Mapping[str, Value] = field(default_factory=dict)  # stored as secrets
    headers: Mapping[str, Value] = field(default_factory=dict)  # stored as secrets
    bearer: Value | None = None  # stored as the bearer token
    enabled: bool = True
    notes: tuple[str, ...] = ()
    problem: str | None = None  # why it cannot be imported, said before anything is tried
    project: str = ""  # ~/.claude.json: the project whose mcpServers list it is in ("" for the user's)

    @property
    def target(self) -> str:
        import shlex

        if self.transport == "http":
            return self.url or ""
        return shlex.join([self.command or "", *self.args])

    @property
    def inputs(self) -> tuple[str, ...]:
        values = [*self.env.values(), *self.headers.values(), *([self.bearer] if self.bearer else [])]
        return tuple(dict.fromkeys(i for value in values for i in value.inputs))

    @property
    def secrets(self) -> tuple[str, ...]:
        """What is stored for it, by name only: "env KEY", "header NAME", "bearer token"."""
        return (*(f"env {key}" for key in self.env), *(f"header {name}" for name in self.headers),
                *(("bearer token",) if self.bearer else ()))

    def __repr__(self) -> str:
        return f"Imported(name={self.name!r}, transport={self.transport!r}, secrets={list(self.secrets)})"


@dataclass(frozen=True)
class Found:
    """What a file holds: its kind, its servers in the file's order, VS Code's inputs."""

    kind: str
    servers: tuple[Imported, ...]
    inputs: tuple[Input, ...] = ()


def read_servers(text: str, kind: str | None = None, source: str = "the file") -> Found:
    """The servers of ``text``, a file of ``kind`` (recognised from the content when None).

    Raises:
        Unrecognised: not a known kind, not valid JSON or TOML, or not the kind named.
    """
    if kind is not None and kind not in KINDS:
        raise Unrecognised(f"{kind!r} is not a kind albedo imports; the kinds are {KNOWN}")
    document, toml = _load(text, kind, source)
    if not isinstance(document, dict):
        raise Unrecognised(f"{source} is not a configuration albedo can import (its top level is not an object); "
                           f"it reads {KNOWN}")
    found = kind or recognise(document, toml)
    if found is None:
        if isinstance(document, dict) and "mcp" in document and isinstance(document["mcp"], dict) and foreign_format(document) is None:
            raise Unrecognised(f"{source} is albedo's own extensions.json format: nothing to import; copy it as HOME/extensions.json")
        raise Unrecognised(f"{source} is not a configuration albedo can import; it reads {KNOWN} (say which with --from)")
    if found == "codex":
        result = Found("codex", _codex(document, source))
    elif found == "vscode":
        result = _vscode(document, source)
    else:
        result = Found(found, _family(found, document, source))
    seen = recognise(document, toml)
    if kind is not None and not result.servers and seen is not None and seen != kind:
        raise Unrecognised(f"{source} lists no {kind} servers; it looks like a {seen} file (say --from {seen}, "
                           "or leave --from out)")
    return result


def recognise(document: Any, toml: bool) -> str | None:
    """The kind of a parsed file, or None. albedo's own format is none of them."""
    if not isinstance(document, dict):
        return None
    if toml:
        return "codex" if isinstance(document.get("mcp_servers"), dict) else None
    if foreign_format(document) is None:
        return None
    if "mcpServers" not in document:
        return "vscode"
    if isinstance(document.get("projects"), dict):
        return "claude-code"
    entries = [entry for entry in _object(document.get("mcpServers")).values() if isinstance(entry, dict)]
    if any("serverUrl" in entry for entry in entries):
        return "windsurf"
    if any(key in entry for entry in entries for key in ("httpUrl", "includeTools", "excludeTools", "trust")):
        return "gemini"
    return "claude"


def to_settings(server: Imported, resolve: Callable[[Value], str]) -> tuple[ServerSpec, SecretInput]:
    """``server`` as :meth:`Settings.add` takes it; ``resolve`` turns a secret's value
    (literal text, variables, inputs) into the string to store.

    Raises:
        ConfigError: the server cannot be saved as it is (its ``problem``).
    """
    if server.problem is not None:
        raise ConfigError(f"server {server.name!r}: {server.problem}")
    secrets = SecretInput(bearer_token=resolve(server.bearer) if server.bearer is not None else None,
                          headers={name: resolve(value) for name, value in server.headers.items()},
                          env={key: resolve(value) for key, value in server.env.items()})
    spec = ServerSpec(name=server.name, transport=server.transport, url=server.url, command=server.command,
                      args=server.args, enabled=server.enabled, extra=dict(server.extra))
    return spec, secrets


# -- reading -------------------------------------------------------------------------------------


def describe(server: Imported, enabled: bool, switched_off: str = "switched off (--disabled)") -> str:
    """What a server's line says besides its name: never a secret's value (``albedo-mcp
    import`` prints it, the settings service returns it); ``switched_off`` is said of a
    server the file has on that is imported switched off."""
    parts = [f"from project {server.project}"] if server.project else []
    if server.secrets:
        parts.append("stored: " + ", ".join(server.secrets))
    references = [f"env {key} <- ${ref['env']}" for key, ref in (server.extra.get("env") or {}).items()]
    references += [f"header {key} <- ${ref['env']}" for key, ref in (server.extra.get("headers") or {}).items()]
    if server.extra.get("bearerTokenEnvVar"):
        references.append(f"bearer token <- ${server.extra['bearerTokenEnvVar']}")
    if references:
        parts.append("from your environment: " + ", ".join(references))
    if server.inputs:
        parts.append("inputs: " + ", ".join(server.inputs))
    if not enabled and server.enabled:
        parts.append(switched_off)
    return "; ".join([*parts, *server.notes])


def resolver(name: str, answers: Mapping[str, str], environ: Mapping[str, str]) -> Callable[[Value], str]:
    """Turns a secret's value into the string to store: variables from ``environ``,
    inputs from ``answers`` (what :func:`to_settings` takes as ``resolve``).

    The function it returns raises ConfigError for a variable albedo keeps for itself,
    one that is not set, or an input left blank; the line never quotes a value."""
    def resolve(value: Value) -> str:
        text = []
        for kind, piece in value.pieces:
            if kind == "env":
                if own_variable(piece):
                    raise ConfigError(f"server {name!r}: a value uses ${piece}, {OWN_VARIABLE}")
                if piece not in environ:
                    raise ConfigError(f"server {name!r}: a value uses ${piece}, which is not set; set it and import again")
                text.append(environ[piece])
            elif kind == "input":
                if not answers.get(piece):
                    raise ConfigError(f"server {name!r}: input {piece} was left blank; import again and give it")
                text.append(answers[piece])
            else:
                text.append(piece)
        return "".join(text)

    return resolve


def _load(text: str, kind: str | None, source: str) -> tuple[Any, bool]:
    if kind != "codex":
        try:
            return json.loads(text), False
        except ValueError as exc:
            if kind is not None:
                raise Unrecognised(f"{source} is not valid JSON, as a {kind} file is: {exc}") from None
    try:
        return tomllib.loads(text), True
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        if kind == "codex":
            raise Unrecognised(f"{source} is not valid TOML, as a codex config.toml is: {exc}") from None
    raise Unrecognised(f"{source} is neither JSON nor TOML; albedo imports {KNOWN}")


def _object(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


class _Names:
    """The names given so far: the source's name when valid, else adapted (fit_name)."""

    def __init__(self) -> None:
        self.given: set[str] = set()

    def give(self, source: str) -> tuple[str, tuple[str, ...]]:
        if SERVER_NAME.match(source) and source not in self.given:
            self.given.add(source)
            return source, ()
        name = fit_name(source, self.given)
        self.given.add(name)
        why = "not a valid albedo name" if not SERVER_NAME.match(source) else "a name given already in this file"
        return name, (f"named {name} ({source!r} is {why})",)


def _family(kind: str, document: Any, source: str) -> tuple[Imported, ...]:
    names = _Names()
    groups = [("", _object(document.get("mcpServers")))]
    if kind == "claude-code":
        for path, project in _object(document.get("projects")).items():
            groups.append((str(path), _object(_object(project).get("mcpServers"))))
    servers: list[Imported] = []
    for project, entries in groups:
        servers.extend(_json_server(kind, str(name), entry, names, project) for name, entry in entries.items())
    return tuple(servers)


def _vscode(document: Any, source: str) -> Found:
    holder = document
    if "servers" not in document and isinstance(document.get("mcp"), dict):
        holder = document["mcp"]  # VS Code's settings.json: "mcp": {"servers", "inputs"}
    inputs = []
    for item in holder.get("inputs") or []:
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            default = item.get("default")
            inputs.append(Input(item["id"], str(item.get("description") or ""), default if isinstance(default, str) else None))
    names = _Names()
    servers = tuple(_json_server("vscode", str(name), entry, names) for name, entry in _object(holder.get("servers")).items())
    return Found("vscode", servers, tuple(inputs))


def value_of(text: str, kind: str) -> Value:
    """A string of a ``kind`` file split into text and references (Codex expands none)."""
    if kind == "codex":
        return Value((("text", text),) if text else ())
    pieces: list[tuple[str, str]] = []
    position = 0
    for match in _REFERENCE.finditer(text):
        _text_pieces(text[position:match.start()], kind, pieces)
        env_prefix, variable, _default, input_id, other = match.groups()
        if variable is not None and (env_prefix or variable not in EDITOR_VARIABLES):
            pieces.append(("env", variable))
        elif variable is not None:
            pieces.append(("other", variable))
        elif input_id is not None:
            pieces.append(("input", input_id))
        else:
            pieces.append(("other", other or ""))
        position = match.end()
    _text_pieces(text[position:], kind, pieces)
    return Value(tuple(pieces))


def _text_pieces(text: str, kind: str, pieces: list[tuple[str, str]]) -> None:
    if kind == "gemini":  # Gemini also expands a bare $VAR
        position = 0
        for match in _BARE.finditer(text):
            if match.start() > position:
                pieces.append(("text", text[position:match.start()]))
            pieces.append(("env", match.group(1)))
            position = match.end()
        text = text[position:]
    if text:
        pieces.append(("text", text))


class _Refused(Exception):
    """A server of the file that cannot be imported; the message says why."""


def _json_server(kind: str, name: str, entry: Any, names: _Names, project: str = "") -> Imported:
    given, notes = names.give(name)
    try:
        if not isinstance(entry, dict):
            raise _Refused("its entry is not an object")
        fields = _json_fields(kind, entry)
    except _Refused as exc:
        return Imported(name=given, source=name, notes=notes, problem=str(exc), project=project)
    ignored = sorted(set(entry) - _JSON_KEYS)
    extra_notes = (*notes, *fields.pop("notes"), *((f"ignored {', '.join(ignored)}",) if ignored else ()))
    return Imported(name=given, source=name, notes=extra_notes, project=project, **fields)


def _json_fields(kind: str, entry: dict) -> dict[str, Any]:
    declared = entry.get("type")
    url = entry.get("httpUrl") or entry.get("serverUrl") or entry.get("url")
    if declared == "sse" or (kind == "gemini" and "url" in entry and "httpUrl" not in entry and declared != "http"):
        raise _Refused("it uses the old HTTP+SSE transport, which albedo does not speak; if the server also offers "
                       "streamable HTTP, add that URL with `albedo-mcp add URL`")
    notes: list[str] = []
    fields: dict[str, Any] = {"notes": notes}
    extra: dict[str, Any] = {}
    if entry.get("disabled") is True or entry.get("enabled") is False:
        fields["enabled"] = False
        notes.append("switched off in the file, so saved switched off")
    if "command" in entry and declared in (None, "stdio"):
        if "envFile" in entry:
            raise _Refused('it reads env entries from "envFile", which albedo does not; put them in "env"')
        fields.update(transport="stdio", command=_plain(entry["command"], "command", kind),
                      args=tuple(_plain(arg, "args", kind) for arg in _list(entry.get("args"), "args")))
        if entry.get("cwd") is not None:
            extra["cwd"] = _plain(entry["cwd"], "cwd", kind)
        env, refs = _split(_strings(entry.get("env"), "env"), kind, "env", notes)
        fields["env"] = env
        if refs:
            extra["env"] = {key: {"env": variable} for key, variable in refs.items()}
    elif isinstance(url, str) and declared in (None, "http", "streamable-http", "streamableHttp"):
        fields.update(transport="http", url=_plain(url, "url", kind))
        headers = _strings(entry.get("headers"), "headers")
        fields["bearer"] = _bearer(headers, kind, extra)
        headers_left, refs = _split(headers, kind, "header", notes)
        fields["headers"] = headers_left
        if refs:
            extra["headers"] = {header: {"env": variable} for header, variable in refs.items()}
    else:
        raise _Refused(f"it names neither a command nor a URL albedo can use (type {declared!r})" if declared
                       else "it names neither a command nor a URL")
    _tools(entry, "includeTools", "excludeTools", extra)
    if "disabledTools" in entry:
        extra["disabledTools"] = _list(entry["disabledTools"], "disabledTools")
    if kind == "gemini" and "timeout" in entry:
        _milliseconds(entry["timeout"], "callTimeoutMs", extra, notes, "timeout")
    fields["extra"] = extra
    return fields


def _bearer(headers: dict[str, str], kind: str, extra: dict[str, Any]) -> Value | None:
    """An ``Authorization: Bearer ...`` header becomes the bearer token (or its variable)."""
    for header in list(headers):
        if header.lower() != "authorization":
            continue
        token = value_of(headers[header], kind).after("Bearer ")
        if token is None or not token.pieces:
            return None
        del headers[header]
        if token.variable is not None:
            extra["bearerTokenEnvVar"] = token.variable
            return None
        return token
    return None


def _split(values: dict[str, str], kind: str, what: str, notes: list[str]) -> tuple[dict[str, Value], dict[str, str]]:
    """(secrets to store, references KEY -> VAR) of an ``env`` or ``headers`` object."""
    pattern = ENV_NAME if what == "env" else HEADER_NAME
    secrets: dict[str, Value] = {}
    refs: dict[str, str] = {}
    for key, text in values.items():
        if not pattern.match(key):
            raise _Refused(f"{key[:80]!r} is not {'an environment variable' if what == 'env' else 'an HTTP header'} name")
        value = value_of(text, kind)
        other = [piece for piece_kind, piece in value.pieces if piece_kind == "other"]
        if other:
            # Named only when it is a plain name (${workspaceFolder}): this is a secret's place.
            shown = f"${{{other[0]}}}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,40}", other[0]) else "a ${...} reference"
            raise _Refused(f"its {what} {key} uses {shown}, which albedo cannot fill in "
                           "(it reads ${env:VAR}, ${VAR} and ${input:ID})")
        dropped = re.findall(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*):-", text)
        if dropped and kind != "codex":
            notes.append(f"{what} {key}: the default of ${{{dropped[0]}:-...}} is dropped, so ${dropped[0]} must be set")
        if value.variable is not None:
            refs[key] = value.variable
        elif not value.pieces:
            notes.append(f"{what} {key} is empty, so left out")
        else:
            secrets[key] = value
            if value.variables:
                notes.append(f"{what} {key} is built from ${', $'.join(value.variables)} now and stored")
    return secrets, refs


def _plain(value: Any, what: str, kind: str) -> str:
    """A command, argument, cwd or URL: literal text only (extensions.json names no variable there)."""
    if not isinstance(value, str):
        raise _Refused(f'its "{what}" must be a string')
    parsed = value_of(value, kind)
    if not parsed.literal:
        reference = next(piece for piece_kind, piece in parsed.pieces if piece_kind != "text")
        raise _Refused(f'its "{what}" uses ${{{reference[:40]}}}, and albedo takes no variable there; '
                       f"write the value in, or add it with `albedo-mcp add`")
    return value


def _list(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _Refused(f'its "{what}" must be a list of strings')
    return list(value)


def _strings(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(item, str) for item in value.values()):
        raise _Refused(f'its "{what}" must map names to strings')
    return dict(value)


def _tools(entry: dict, enabled: str, disabled: str, extra: dict[str, Any]) -> None:
    if enabled in entry:
        extra["enabledTools"] = _list(entry[enabled], enabled)
    if disabled in entry:
        extra["disabledTools"] = _list(entry[disabled], disabled)


def _milliseconds(value: Any, key: str, extra: dict[str, Any], notes: list[str], what: str, scale: float = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Refused(f'its "{what}" must be a number')
    ms = int(value * scale)
    if 1 <= ms <= MAX_TIMEOUT_MS:
        extra[key] = ms
    else:
        notes.append(f"{what} {value} is out of albedo's range (1 ms to 1 hour), so left out")


# -- Codex -----------------------------------------------------------------------------------------


def _codex(document: dict, source: str) -> tuple[Imported, ...]:
    names = _Names()
    servers = []
    for name, entry in _object(document.get("mcp_servers")).items():
        given, notes = names.give(str(name))
        try:
            if not isinstance(entry, dict):
                raise _Refused("its table is not a table of keys")
            fields = _codex_fields(entry)
        except _Refused as exc:
            servers.append(Imported(name=given, source=str(name), notes=notes, problem=str(exc)))
            continue
        ignored = sorted(set(entry) - _CODEX_KEYS)
        all_notes = (*notes, *fields.pop("notes"), *((f"ignored {', '.join(ignored)}",) if ignored else ()))
        servers.append(Imported(name=given, source=str(name), notes=all_notes, **fields))
    return tuple(servers)


def _codex_fields(entry: dict) -> dict[str, Any]:
    notes: list[str] = []
    fields: dict[str, Any] = {"notes": notes}
    extra: dict[str, Any] = {}
    if entry.get("enabled") is False:
        fields["enabled"] = False
        notes.append("switched off in the file, so saved switched off")
    if "command" in entry:
        fields.update(transport="stdio", command=_plain(entry["command"], "command", "codex"),
                      args=tuple(_list(entry.get("args"), "args")))
        if entry.get("cwd") is not None:
            extra["cwd"] = _plain(entry["cwd"], "cwd", "codex")
        env, _ = _split(_strings(entry.get("env"), "env"), "codex", "env", notes)
        fields["env"] = env
        refs = {variable: {"env": variable} for variable in _list(entry.get("env_vars"), "env_vars")}
        bad = next((variable for variable in refs if not ENV_NAME.match(variable)), None)
        if bad is not None:
            raise _Refused(f"{bad[:80]!r} in env_vars is not an environment variable name")
        if refs:
            extra["env"] = refs
    elif isinstance(entry.get("url"), str):
        fields.update(transport="http", url=entry["url"])
        if entry.get("bearer_token_env_var") is not None:
            extra["bearerTokenEnvVar"] = entry["bearer_token_env_var"]
        if isinstance(entry.get("bearer_token"), str) and entry["bearer_token"]:
            fields["bearer"] = value_of(entry["bearer_token"], "codex")
        headers = _strings(entry.get("http_headers"), "http_headers")
        fields["bearer"] = _bearer(headers, "codex", extra) or fields.get("bearer")
        fields["headers"], _ = _split(headers, "codex", "header", notes)
        named = _strings(entry.get("env_http_headers"), "env_http_headers")
        if named:
            extra["headers"] = {header: {"env": variable} for header, variable in named.items()}
    else:
        raise _Refused("it names neither a command nor a url")
    _tools(entry, "enabled_tools", "disabled_tools", extra)
    if "startup_timeout_sec" in entry:
        _milliseconds(entry["startup_timeout_sec"], "startupTimeoutMs", extra, notes, "startup_timeout_sec", 1000)
    elif "startup_timeout_ms" in entry:
        _milliseconds(entry["startup_timeout_ms"], "startupTimeoutMs", extra, notes, "startup_timeout_ms")
    if "tool_timeout_sec" in entry:
        _milliseconds(entry["tool_timeout_sec"], "callTimeoutMs", extra, notes, "tool_timeout_sec", 1000)
    fields["extra"] = extra
    return fields
