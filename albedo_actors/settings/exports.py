"""albedo's servers written in another client's format, for ``albedo-mcp export``.

::

    text, notes = export_servers(document, stored, "cursor")

Pure: the extensions.json document and, per server, the names of its stored
credentials (as :func:`albedo_actors.settings.describe_credentials` gives them: never a
value) in; the file's text and one note per thing not carried as it is out. No secret
can be written, since none is given: a stored credential becomes a reference to an
environment variable in the client's own syntax, named after it (``env KEY`` ->
``KEY``; a header ``X-Api-Key`` of server ``docs`` -> ``DOCS_X_API_KEY``; the bearer
token -> ``DOCS_TOKEN``), and a note says so. An OAuth sign-in is not carried: the
client signs in itself.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Sequence

EXPORT_KINDS = ("claude", "claude-code", "cursor", "windsurf", "gemini", "vscode", "codex")


def variable_for(server: str, what: str) -> str:
    """The environment variable a stored credential is written as (see the module's doc)."""
    return re.sub(r"[^A-Za-z0-9_]+", "_", f"{server}_{what}").strip("_").upper()


def reference(kind: str, variable: str) -> str:
    """``variable`` as ``kind``'s files refer to one: ``${env:VAR}`` (VS Code, Cursor,
    Windsurf) or ``${VAR}`` (Claude, Gemini)."""
    return f"${{env:{variable}}}" if kind in ("vscode", "cursor", "windsurf") else f"${{{variable}}}"


def export_servers(document: Mapping[str, Any], stored: Mapping[str, Sequence[str]], kind: str) -> tuple[str, list[str]]:
    """The text of a ``kind`` file holding the servers of ``document``; the notes."""
    servers = (document.get("mcp") or {}).get("servers") or {}
    notes: list[str] = []
    out: dict[str, dict[str, Any]] = {}
    for name, entry in servers.items():
        if not isinstance(entry, dict):
            continue
        said: list[str] = []
        out[name] = _entry(kind, name, entry, list(stored.get(name, ())), said)
        notes.extend(f"server {name!r}: {note}" for note in said)
    if kind == "codex":
        return _toml({"mcp_servers": out}), notes
    if kind == "vscode":
        return json.dumps({"servers": out, "inputs": []}, indent=2, ensure_ascii=False) + "\n", notes
    return json.dumps({"mcpServers": out}, indent=2, ensure_ascii=False) + "\n", notes


def _entry(kind: str, name: str, entry: dict, credentials: list[str], notes: list[str]) -> dict[str, Any]:
    stdio = (entry.get("type") or ("stdio" if "command" in entry else "http")) == "stdio"
    codex = kind == "codex"
    out: dict[str, Any] = {}
    if stdio:
        if kind == "vscode":
            out["type"] = "stdio"
        out["command"] = entry.get("command")
        if entry.get("args"):
            out["args"] = list(entry["args"])
        if entry.get("cwd") is not None:
            out["cwd"] = entry["cwd"]
            if kind not in ("gemini", "codex", "claude", "claude-code", "vscode"):
                notes.append("its cwd is written, but this client may not read it")
        refs = {key: str(ref.get("env")) for key, ref in (entry.get("env") or {}).items() if isinstance(ref, dict)}
        secrets = [item[len("env "):] for item in credentials if item.startswith("env ")]
        for key in secrets:
            notes.append(f"stored env {key} written as a reference to ${key}: set {key} where the client runs")
        if codex:
            passed = [key for key, variable in refs.items() if key == variable] + secrets
            for key, variable in refs.items():
                if key != variable:
                    notes.append(f"env {key} (from ${variable}) left out: Codex passes a variable under its own name only")
            if passed:
                out["env_vars"] = list(dict.fromkeys(passed))
        else:
            env = {key: reference(kind, variable) for key, variable in refs.items()}
            env.update({key: reference(kind, key) for key in secrets})
            if env:
                out["env"] = env
    else:
        url_key = {"windsurf": "serverUrl", "gemini": "httpUrl"}.get(kind, "url")
        if kind in ("claude", "claude-code", "vscode"):
            out["type"] = "http"
        out[url_key] = entry.get("url")
        headers: dict[str, str] = {}
        codex_refs: dict[str, str] = {}
        for header, ref in (entry.get("headers") or {}).items():
            if isinstance(ref, dict):
                headers[header] = reference(kind, str(ref.get("env")))
                codex_refs[header] = str(ref.get("env"))
        bearer_variable = entry.get("bearerTokenEnvVar")
        for item in credentials:
            if item.startswith("header "):
                header = item[len("header "):]
                variable = variable_for(name, header)
                headers[header] = reference(kind, variable)
                codex_refs[header] = variable
                notes.append(f"stored header {header} written as a reference to ${variable}: set it where the client runs")
            elif item == "bearer token":
                bearer_variable = variable_for(name, "token")
                notes.append(f"stored bearer token written as a reference to ${bearer_variable}: set it where the client runs")
        if "oauth" in credentials or entry.get("oauth"):
            notes.append("its OAuth sign-in is not carried: sign in from the client")
        if codex:
            if bearer_variable:
                out["bearer_token_env_var"] = bearer_variable
            if codex_refs:
                out["env_http_headers"] = codex_refs
        else:
            if bearer_variable:
                headers["Authorization"] = "Bearer " + reference(kind, bearer_variable)
            if headers:
                out["headers"] = headers
        if entry.get("caFile"):
            notes.append("its caFile is not carried")
    if entry.get("enabled") is False:
        if codex:
            out["enabled"] = False
        elif kind in ("claude", "claude-code", "cursor", "windsurf"):
            out["disabled"] = True
        else:
            notes.append("it is switched off here, and this format cannot say so: it is written switched on")
    _tools(kind, entry, out, notes)
    _timeouts(kind, entry, out)
    return out


def _tools(kind: str, entry: dict, out: dict[str, Any], notes: list[str]) -> None:
    keys = {"gemini": ("includeTools", "excludeTools"), "codex": ("enabled_tools", "disabled_tools"),
            "windsurf": (None, "disabledTools")}.get(kind, (None, None))
    for ours, theirs in zip(("enabledTools", "disabledTools"), keys):
        if ours in entry:
            if theirs is None:
                notes.append(f"its {ours} is not carried: this format has no such list")
            else:
                out[theirs] = list(entry[ours])


def _timeouts(kind: str, entry: dict, out: dict[str, Any]) -> None:
    if kind == "codex":
        if "startupTimeoutMs" in entry:
            out["startup_timeout_sec"] = entry["startupTimeoutMs"] / 1000
        if "callTimeoutMs" in entry:
            out["tool_timeout_sec"] = entry["callTimeoutMs"] / 1000
    elif kind == "gemini" and "callTimeoutMs" in entry:
        out["timeout"] = entry["callTimeoutMs"]


def _toml(document: dict[str, dict[str, dict[str, Any]]]) -> str:
    """Codex's config.toml: one ``[mcp_servers.NAME]`` table per server."""
    lines: list[str] = []
    for name, entry in document["mcp_servers"].items():
        if lines:
            lines.append("")
        lines.append(f"[mcp_servers.{_key(name)}]")
        lines.extend(f"{_key(key)} = {_value(value)}" for key, value in entry.items())
    return "\n".join(lines) + "\n" if lines else ""


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _string(key)


def _string(text: str) -> str:
    # A JSON string without \\u escapes of non-ASCII (TOML has no surrogate escapes) is a TOML basic string.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007F")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    return "{ " + ", ".join(f"{_key(key)} = {_value(item)}" for key, item in value.items()) + " }"
