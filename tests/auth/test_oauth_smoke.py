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
