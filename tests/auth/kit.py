"""The kit of the OAuth flow tests (test_oauth_flow, test_dpop, test_grants): a store, the
token refreshers and the server handles of one test, and the client's real sign-in paths.

Each file makes its own ``kit`` fixture after ``oauth_server``, so that the handles stop
before the servers do (a server stopping under an open stream waits out its graceful
shutdown).
"""

from __future__ import annotations

import dataclasses
import urllib.parse

from albedo_actors.actors.client import ServerHandle
from albedo_actors.actors.refresher import TokenRefresher, refresh_by
from albedo_actors.auth.record import OAuthRecord, from_credentials
from albedo_actors.auth.server_auth import ServerAuth
from albedo_actors.auth.signin import SignIn, authorizer, follow_redirect_agent
from albedo_actors.config import ServerConfig
from albedo_actors.store import open_store


class Kit:
    """A store, token refreshers and the handles of one test; everything is stopped at the end.

    ``name`` is the server whose credentials :meth:`record` reads. With ``agent`` (the
    default) a sign-in follows the authorization URL's redirect as a browser would, and
    ``redirects`` keeps the redirect_uri of every URL it opened; without it, sign-ins get no
    agent, as a host with only browser-free grants has none. With ``on_demand`` a handle
    signs in by itself when it is given no ``authorize``.
    """

    def __init__(self, home: str, name: str, *, agent: bool = True, on_demand: bool = False) -> None:
        self.home = home
        self.name = name
        self.store = open_store(home)
        self.refreshers: list = []
        self.handles: list[ServerHandle] = []
        self.redirects: list[str] = []
        self.follows = agent
        self.on_demand = on_demand

    def agent(self):
        """An agent that follows the authorization URL and notes its redirect_uri."""
        follow = follow_redirect_agent()

        def agent(url, listener):
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
            self.redirects.append(query["redirect_uri"][0])
            follow(url, listener)

        return agent

    def sign_in(self, config: ServerConfig, environ: dict | None = None, *, port: int = 0, id_token=None) -> OAuthRecord:
        return SignIn(config, self.store, environ=environ or {}, agent=self.agent() if self.follows else None,
                      port=port, lifetime=10, id_token=id_token).run()

    def authorizer(self, environ: dict | None = None, *, id_token=None):
        return authorizer(self.store, environ=environ or {}, agent=self.agent() if self.follows else None,
                          port=0, lifetime=10, id_token=id_token)

    def refresher(self, environ: dict | None = None):
        ref = TokenRefresher.start(self.store, environ=environ or {})
        self.refreshers.append(ref)
        return ref

    def handle(self, config: ServerConfig, environ: dict | None = None, *, authorize=None, id_token=None) -> ServerHandle:
        if authorize is None and self.on_demand:
            authorize = self.authorizer(environ, id_token=id_token)
        auth = ServerAuth(config, self.store, refresh_by(self.refresher(environ)), authorize=authorize)
        handle = ServerHandle.start(config, self.home, auth=auth)
        self.handles.append(handle)
        return handle

    def record(self, name: str | None = None) -> OAuthRecord | None:
        return from_credentials(self.store.get_credentials(name or self.name))

    def stored(self) -> OAuthRecord:
        """The record kept for ``name``, which must be there."""
        record = self.record()
        assert record is not None
        return record

    def edit(self, **changes) -> None:
        """Changes the fields of the record kept for ``name``."""
        self.store.update_credentials(self.name, lambda c: dataclasses.replace(
            c, oauth=dataclasses.replace(from_credentials(c), **changes).to_json()))

    def close(self) -> None:
        for handle in self.handles:
            handle.stop()
        for ref in self.refreshers:
            ref.stop(timeout=10)
        self.store.close()
