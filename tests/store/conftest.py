"""Store fixtures: every store test runs on SQLite and on PostgreSQL.

PostgreSQL comes from $ALBEDO_TEST_POSTGRES_URL (scripts/test starts a throwaway
cluster and sets it); run directly, a throwaway cluster is started here. Under
CI=true a missing PostgreSQL fails the tests. Each test gets a fresh database.
"""

from __future__ import annotations

import os
import sys
import urllib.parse
import uuid

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import pgcluster  # noqa: E402

from albedo_actors.store import open_store  # noqa: E402


@pytest.fixture(scope="session")
def pg_server_url():
    url = os.environ.get("ALBEDO_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    bindir = pgcluster.find_bin()
    if bindir is None:
        pytest.fail("no PostgreSQL: set $ALBEDO_TEST_POSTGRES_URL or install Debian's postgresql "
                    "(scripts/test does both)", pytrace=False)
    cluster = pgcluster.Cluster(bindir)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def _with_db(url: str, dbname: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request, tmp_path, pg_server_url):
    """(kind, home, url): where a store of this test lives; url None means SQLite in home.

    ``pg_server_url`` is asked for even on SQLite, so that a cluster started here is
    up before the leak check's first snapshot (it is session-wide, not the test's).
    """
    home = str(tmp_path / "home")
    if request.param == "sqlite":
        yield "sqlite", home, None
        return
    import psycopg2

    server = pg_server_url
    name = "albedo_t_" + uuid.uuid4().hex[:16]
    admin = psycopg2.connect(server, connect_timeout=10)
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        yield "postgresql", home, _with_db(server, name)
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture
def stores(backend):
    """``stores()`` opens a store on this test's backend; all are closed afterwards."""
    _kind, home, url = backend
    opened = []

    def opener():
        store = open_store(home, url)
        opened.append(store)
        return store

    yield opener
    for store in opened:
        store.close()
