"""Static checks that each seam's implementation fits the Protocol its user declares.

Nothing here runs: mypy reads this file with the package (setup.cfg [mypy] ``files``),
so an implementation that drifts from its Protocol fails the type check, even where
the code that wires them together (actors/) does not yet say their types.
"""

from __future__ import annotations

from albedo_actors.auth.refresh import RefreshStore
from albedo_actors.auth.server_auth import CredentialStore, ServerAuth
from albedo_actors.auth.signin import SignInStore
from albedo_actors.catalogue.saved import CatalogueStore
from albedo_actors.connection.channel import Link
from albedo_actors.connection.http.exchange import LinkAuth
from albedo_actors.connection.http.link import HttpLink
from albedo_actors.connection.stdio_link import StdioLink
from albedo_actors.service.client import ServiceClient
from albedo_actors.settings import Settings, SettingsPort
from albedo_actors.store import Store
from connection.memory_link import MemoryLink


def store_fits(store: Store) -> tuple[CredentialStore, RefreshStore, SignInStore, CatalogueStore]:
    return store, store, store, store


def server_auth_fits(auth: ServerAuth) -> LinkAuth:
    return auth


def links_fit(stdio: StdioLink, http: HttpLink, memory: MemoryLink) -> tuple[Link, Link, Link]:
    return stdio, http, memory


def settings_ports_fit(settings: Settings, client: ServiceClient) -> tuple[SettingsPort, SettingsPort]:
    return settings, client
