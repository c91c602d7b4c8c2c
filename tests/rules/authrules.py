"""What the authorization rule tests share (tests/rules/test_sep_837, 1932, 1933, 2207,
2350, 2352, 2468): the in-process misbehaving authorization server
(``servers/fault_auth_server.py``, the suite's ``fault`` fixture), the client's real sign-in, the
kit of the OAuth flow tests (``tests/auth/kit.py``) for the peer server
(``servers/oauth_server.py``, ``oauth_server`` fixture of tests/conftest.py).
"""

from __future__ import annotations

import os
import socket
import sys

import pytest

from albedo_actors.auth.record import OAuthRecord, from_credentials
from albedo_actors.auth.signin import SignIn, follow_redirect_agent
from albedo_actors.config import OAuthSettings, ServerConfig
from albedo_actors.store import open_store

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "auth"))
from kit import Cli, Kit  # noqa: E402  (tests/auth/kit.py)

NAME = "guarded"
NO_BROWSER = {"ALBEDO_NO_BROWSER": "1"}

__all__ = ["Cli", "Kit", "NAME", "NO_BROWSER", "config_of", "free_port", "home", "one_line", "sign_in", "store",
           "stored", "OAuthRecord", "OAuthSettings"]


@pytest.fixture
def home(tmp_path):
    return str(tmp_path / "home")


@pytest.fixture
def store(home):
    opened = open_store(home)
    yield opened
    opened.close()


def config_of(url: str, name: str = NAME, **changes) -> ServerConfig:
    return ServerConfig(name=name, type="http", url=url, startup_timeout_ms=15000, call_timeout_ms=15000, **changes)


def sign_in(config: ServerConfig, store, *, port: int = 0, environ: dict | None = None) -> OAuthRecord:
    """The client's own interactive sign-in, its browser an agent that follows the redirect."""
    return SignIn(config, store, environ=environ or NO_BROWSER, agent=follow_redirect_agent(), port=port,
                  lifetime=10).run()


def stored(store, name: str = NAME) -> OAuthRecord | None:
    return from_credentials(store.get_credentials(name))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_line(error: BaseException, *parts: str, name: str = NAME) -> str:
    """The error's message, checked to be one line naming the server and holding ``parts``."""
    message = str(error)
    assert "\n" not in message and "Traceback" not in message, message
    assert f"server {name!r}" in message, message
    for part in parts:
        assert part in message, (part, message)
    return message
