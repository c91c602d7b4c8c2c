"""Fixtures for the OAuth tests: a real loopback authorization server, a store, a refresher."""

from __future__ import annotations

import pytest

from servers.fault_auth_server import FaultAuthServer


@pytest.fixture
def fault():
    """``fault(**modes)`` starts a FaultAuthServer; all are stopped afterwards."""
    started: list = []

    def start(**modes) -> FaultAuthServer:
        server = FaultAuthServer(**modes)
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
