"""A simple session over configured servers: open them in parallel, list, call, close.

This is what the command line uses until the RuntimePreparer and SessionComposer
arrive: every enabled server gets its own ServerClient, all dial at once, a server
that cannot start is left out with a warning, and closing stops every client (and so
every stdio server) in parallel.
"""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass
from typing import Any, Callable

from .actors.client import ServerHandle
from .catalogue import Catalogue
from .config import McpConfig, ServerConfig
from .errors import ConfigError, ServerError


@dataclass(frozen=True)
class AdvertisedTool:
    name: str
    server: str
    tool: str
    description: str
    input_schema: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "server": self.server,
            "tool": self.tool,
            "description": self.description,
            "inputSchema": self.input_schema,
        }


def advertised_name(server: str, tool: str) -> str:
    # Until the naming issue lands: mcp_<server>_<tool>.
    return f"mcp_{server}_{tool}"


class Session:
    """Clients for some servers of one configuration. Use as a context manager."""

    def __init__(
        self,
        config: McpConfig,
        servers: list[ServerConfig],
        warn: Callable[[str], None],
        credentials: Callable[[str], Any] | None = None,
    ) -> None:
        # ``credentials(name)`` gives a server's stored credentials (a plain record, see
        # albedo_actors.store.Credentials), read once per open; None: none stored.
        self._credentials = credentials
        self.config = config
        self._warn = warn
        self.handles: dict[str, ServerHandle] = {}
        self.catalogues: dict[str, Catalogue] = {}
        self.failures: dict[str, ServerError] = {}  # servers left out, and why
        self._servers = servers

    def __enter__(self) -> Session:
        self.open()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def open(self) -> None:
        """Start a client per server and connect all at once.

        A server that cannot be reached is left out; ``failures`` says why.

        Raises:
            ConfigError: the configuration of a server is unusable (e.g. a named
                variable is not set); all clients are stopped first.
        """
        stored = {s.name: self._credentials(s.name) for s in self._servers} if self._credentials is not None else {}
        for server in self._servers:
            self.handles[server.name] = ServerHandle.start(server, self.config.home, credentials=stored.get(server.name))
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(16, len(self.handles)))) as pool:
            futures = {name: pool.submit(handle.connect) for name, handle in self.handles.items()}
        config_errors = []
        for name, future in futures.items():
            try:
                catalogue = future.result()
            except ConfigError as exc:
                config_errors.append(exc)
            except ServerError as exc:
                self.failures[name] = exc
            else:
                self.catalogues[name] = catalogue
                for warning in catalogue.warnings:
                    self._warn(warning)
        if config_errors:
            self.close()
            raise config_errors[0]

    def tools(self) -> list[AdvertisedTool]:
        out = []
        for name, catalogue in self.catalogues.items():
            server = self.handles[name].config
            offered = {tool["name"] for tool in catalogue.tools}
            for missing in sorted(set(server.enabled_tools or ()) - offered):
                self._warn(f"server {name!r}: enabledTools names {missing!r}, which it does not offer")
            for tool in catalogue.tools:
                if server.tool_enabled(tool["name"]):
                    description = tool.get("description")
                    out.append(
                        AdvertisedTool(
                            name=advertised_name(name, tool["name"]),
                            server=name,
                            tool=tool["name"],
                            description=description if isinstance(description, str) else "",
                            input_schema=tool["inputSchema"],
                        )
                    )
        return out

    def close(self) -> None:
        """Stop every client at once; each ends its server process."""
        handles = list(self.handles.values())
        self.handles = {}
        if handles:
            with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(handles))) as pool:
                list(pool.map(lambda handle: handle.stop(), handles))
