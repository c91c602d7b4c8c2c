"""The stdio link: what a stdio server is run as, and a channel's messages as lines.

- :func:`launch_spec` resolves a configured stdio server to the exact executable,
  directory and environment the launcher runs.
- :class:`StdioLink` carries a channel's messages over a stdio transport, one line each.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping

from ..config import INHERITED_ENV, ServerConfig
from ..errors import ConfigError, Unavailable
from ..safefiles import make_private_dirs
from ..transport.stdio import LaunchSpec, StdioTransport, TransportClosed, WriteTimeout
from ..wire import jsonrpc, mcp
from ..wire.deadline import Bound
from .channel import WRITE_TIMEOUT, LinkClosed, Pending, RpcChannel

if TYPE_CHECKING:  # the record's type only: no layer below actors/ loads the store
    from ..store.records import Credentials


def launch_spec(
    server: ServerConfig, home: str, environ: Mapping[str, str] = os.environ, credentials: Credentials | None = None
) -> LaunchSpec:
    """Resolve what to run for a stdio server: exact executable, directory, environment.

    The environment is HOME, PATH and TMPDIR of the host plus the named values, plus
    the ``KEY=value`` entries stored for the server (``credentials.env``), which win
    over a named value of the same key; nothing else of the host's environment
    reaches the server.

    Raises:
        ConfigError: a named variable is not set, or the directory does not exist.
        Unavailable: the command cannot be found or is not executable.
    """
    where = f"server {server.name!r}"
    env = {key: environ[key] for key in INHERITED_ENV if key in environ}
    env.setdefault("PATH", os.defpath)
    secrets = []
    for key, variable in server.env.items():
        if variable not in environ:
            raise ConfigError(f"{where}: env {key} names ${variable}, which is not set in the host's environment")
        env[key] = environ[variable]
        secrets.append(environ[variable])
    for key, value in (credentials.env if credentials is not None else {}).items():
        env[key] = value
        secrets.append(value)
    cwd = server.cwd
    if cwd is None:
        cwd = os.path.join(home, "servers", server.name)
        try:
            make_private_dirs(cwd)  # each directory made here is 0700, whatever the umask
        except OSError as exc:
            raise ConfigError(f"{where}: cannot create its directory {cwd}: {exc.strerror or exc}") from None
    elif not os.path.isdir(cwd):
        raise ConfigError(f'{where}: "cwd" {cwd} is not a directory')
    command = server.command
    if command is None:  # parse() refuses such an entry; a hand-made ServerConfig may not
        raise ConfigError(f'{where}: a stdio server needs a "command"')
    if os.sep in command:
        executable = os.path.normpath(os.path.join(cwd, os.path.expanduser(command)))
        if not (os.path.isfile(executable) and os.access(executable, os.X_OK)):
            raise Unavailable(server.name, f"cannot start: {executable} is not an executable file")
    else:
        import shutil  # a bare command only (shutil loads bz2 and lzma)

        found = shutil.which(command, path=_searchable(env["PATH"]))
        if found is None:
            raise Unavailable(server.name, f"cannot start: command {command!r} was not found on PATH; give its full path in extensions.json")
        executable = os.path.abspath(found)
    return LaunchSpec(executable=executable, args=server.args, cwd=cwd, env=env, secrets=tuple(secrets))


def _searchable(path: str) -> str:
    """PATH without its empty and relative entries, which name the host's working
    directory (POSIX: an empty entry is the current directory), not a place a
    configured command should come from. The server still gets PATH as it is."""
    return os.pathsep.join(entry for entry in path.split(os.pathsep) if os.path.isabs(entry))



class StdioLink:
    """A channel's link over a stdio transport: every message is one line."""

    def __init__(self, channel: RpcChannel, transport: StdioTransport,
                 closed_errors: tuple[type[Exception], ...] = (TransportClosed, WriteTimeout)) -> None:
        self._channel = channel
        self.transport = transport
        self._closed_errors = closed_errors
        self._negotiated: mcp.Negotiated | None = None  # until the opening decides; what is sent does not depend on it

    def send_request(self, pending: Pending, message: dict[str, Any], deadline: Bound | None = None) -> None:
        # ``deadline`` (the call's) does not bound a pipe write: WRITE_TIMEOUT does.
        try:
            self.transport.send(jsonrpc.encode(message), WRITE_TIMEOUT)
        except self._closed_errors:
            raise LinkClosed() from None

    def send_other(self, message: dict[str, Any]) -> None:
        try:
            self.transport.send(jsonrpc.encode(message), WRITE_TIMEOUT)
        except self._closed_errors:
            raise LinkClosed() from None

    def cancel(self, pending: Pending) -> None:
        # 2026-07-28 basic/patterns/cancellation: on stdio the client MUST send it.
        self._channel.notify("notifications/cancelled", {"requestId": pending.id, "reason": "timed out"})

    def forget(self, pending: Pending) -> None:
        pass  # the answer, if it comes, is dropped as an unknown id

    def close(self, reason: str) -> None:
        self.transport.close(reason)

    @property
    def closed(self) -> bool:
        return self.transport.closed

    def wait_closed(self, timeout: float | None = None) -> bool:
        return self.transport.wait_closed() if timeout is None else self.transport.wait_closed(timeout)

    def use(self, negotiated: mcp.Negotiated) -> None:
        self._negotiated = negotiated

    def listen(self, filters: dict[str, bool]) -> Pending | None:
        """Modern: ``subscriptions/listen`` for the lists that can change (2026-07-28
        basic/patterns/subscriptions), held open on the channel until the server ends it
        or the connection closes. An older server's notifications need no stream."""
        if self._negotiated is None or not self._negotiated.modern or not filters:
            return None
        params = mcp.modern_params({"notifications": filters}, self._negotiated.version, self._channel.capabilities)
        # Held by the channel, which correlates its notifications by subscriptionId.
        return self._channel.start("subscriptions/listen", params, subscription=filters)

    def authorization_context(self) -> str:
        return ""  # a process's credentials are its configuration's, fixed for its client

    def set_tool_headers(self, tools: tuple[dict[str, Any], ...], warnings: list[str]) -> tuple[dict[str, Any], ...]:
        return tools  # stdio carries no headers: x-mcp-header means nothing here
