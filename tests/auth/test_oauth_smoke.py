"""A first end-to-end sign-in against the real loopback authorization server."""

from __future__ import annotations

from albedo_actors.auth.signin import SignIn, follow_redirect_agent
from albedo_actors.config import ServerConfig
from albedo_actors.store import open_store


def test_sign_in_stores_tokens_for_the_server_url(tmp_path, oauth_server):
    server = oauth_server()
    store = open_store(str(tmp_path))
    try:
        config = ServerConfig(name="guarded", type="http", url=server.url)
        record = SignIn(config, store, agent=follow_redirect_agent(), port=0, lifetime=10).run()
        assert record.state == "signed_in" and record.url == server.url
        stored = store.get_credentials("guarded").oauth
        assert stored["url"] == server.url and stored["access_token"] == record.access_token
        assert server.stats()["token_requests"]["authorization_code"] == 1
    finally:
        store.close()


def test_a_sign_in_in_flight_can_be_cancelled(tmp_path, oauth_server):
    import socket
    import threading

    import pytest

    from albedo_actors.errors import AuthError

    server = oauth_server()
    store = open_store(str(tmp_path))
    shown = threading.Event()
    ports = []

    def user_looks_away(url, listener):  # the browser was opened; nobody signs in
        ports.append(listener.port)
        shown.set()

    try:
        config = ServerConfig(name="guarded", type="http", url=server.url)
        flow = SignIn(config, store, agent=user_looks_away, port=0, lifetime=60)
        outcome = []
        runner = threading.Thread(target=lambda: outcome.append(_run(flow, AuthError)))
        runner.start()
        assert shown.wait(30)
        flow.cancel()
        runner.join(30)
        assert not runner.is_alive()
        assert isinstance(outcome[0], AuthError) and "cancelled" in str(outcome[0])
        assert server.stats()["token_requests"]["authorization_code"] == 0
        assert store.get_credentials("guarded").oauth is None or "access_token" not in store.get_credentials("guarded").oauth
        with pytest.raises(OSError):  # the listener is closed: nothing answers on its port
            socket.create_connection(("127.0.0.1", ports[0]), timeout=2).close()
        cancelled_first = SignIn(config, store, agent=user_looks_away, port=0, lifetime=60)
        cancelled_first.cancel()
        with pytest.raises(AuthError, match="cancelled"):
            cancelled_first.run()
    finally:
        store.close()


def _run(flow, expected):
    try:
        return flow.run()
    except expected as exc:
        return exc
