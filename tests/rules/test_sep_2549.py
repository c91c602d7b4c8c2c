"""The client rules of SEP-2549 (tests/rules/rules.json; docs/rules.rst).

Caching of the list methods (2026-07-28 server/utilities/caching): the client's
``ListCache`` (albedo_actors/connection/list_cache.py) keeps each list page for its
``ttlMs`` and discovery reads it instead of asking again. Most tests run one
``ServerHandle`` against ``tests/servers/caching_server.py`` (a 2026-07-28 stdio server
that records every request and reads its pages' ``ttlMs`` and cursors from a plan file):
the server's ``quit`` tool ends its process, and the client's next use dials a new one
and discovers again, which is where the cache is read.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import time

import pytest

from albedo_actors.actors.client import CatalogueChanged, ServerLost
from albedo_actors.config import ServerConfig
from albedo_actors.connection import discover, open_http
from albedo_actors.connection.list_cache import ListCache
from helpers import HERE, Owner, read_record

from servers.fault_http_server import FaultHTTPServer, _Engine

CACHING_SERVER = os.path.join(HERE, "servers", "caching_server.py")
WAIT = 15.0  # s: a bound on every wait, never an expected duration

DECLINED = {
    "sep-2549-implementations-do-choose-poll-apply-jitter":
        "albedo_actors never polls a list: a page is read again only when a discovery needs it "
        "(the test of sep-2549-treat-ttl-polling-interval-triggers-automatic proves no request "
        "goes out while idle), so this obligation of pollers binds nothing of ours.",
}


class _Server:
    """One caching_server.py configuration: its plan, its record, a handle and its events."""

    def __init__(self, tmp_path, clients, plan: dict) -> None:
        self.plan_path = tmp_path / "plan.json"
        self.record_path = tmp_path / "record.jsonl"
        self.set_plan(plan)
        self.owner = Owner.start()
        self.events: queue.Queue = self.owner.proxy().events.get(timeout=WAIT)
        config = ServerConfig(name="cache", type="stdio", command=sys.executable,
                              args=(CACHING_SERVER, str(self.plan_path), str(self.record_path)))
        self.handle = clients.start(config, owner=self.owner)

    def set_plan(self, plan: dict) -> None:
        tmp = self.plan_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(plan))
        os.replace(tmp, self.plan_path)

    def lists(self) -> list[tuple[str, str | None, str | None]]:
        """The list requests the server received so far: (method, cursor, requestState)."""
        if not self.record_path.exists():
            return []
        return [(r["method"], r["cursor"], r["state"]) for r in read_record(self.record_path)
                if r["method"].endswith("/list")]

    def redial(self):
        """End the server's process; the next use dials a new one and discovers: its catalogue."""
        self.handle.call_tool("quit", {}, timeout=WAIT)
        self.wait_for(ServerLost)
        return self.handle.connect(timeout=WAIT)

    def wait_for(self, kind: type):
        deadline = time.monotonic() + WAIT
        while True:
            event = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            if isinstance(event, kind):
                return event

    def stop(self) -> None:
        self.handle.stop()
        self.owner.stop()


@pytest.fixture
def caching(tmp_path, clients):
    made: list[_Server] = []

    def start(plan: dict) -> _Server:
        server = _Server(tmp_path, clients, plan)
        made.append(server)
        return server

    yield start
    for server in made:
        server.stop()


def names(catalogue) -> list[str]:
    return [tool["name"] for tool in catalogue.tools]


@pytest.mark.rule("sep-2549-ttlms-positive-consider-result-fresh-many", "sep-2549-cached-page-expires-re-fetch-page")
def test_a_fresh_page_is_served_from_the_cache_and_a_stale_one_asked_for_by_its_cursor(caching):
    """A list page with a positive ttlMs is fresh for that many milliseconds from its
    answer: a discovery within that time (a re-dial) takes it from the client's cache
    without a request, and a page of the same list that has gone stale is asked for
    again by its own cursor, not by reading the list from the start."""
    server = caching({"tools/list": [{"names": ["a1", "a2"], "ttlMs": 600_000}, {"names": ["b1"], "ttlMs": 0}]})
    assert names(server.handle.connect(timeout=WAIT)) == ["a1", "a2", "b1"]
    assert server.lists() == [("tools/list", None, None), ("tools/list", "c1", None)]
    # The server's first page changes; a fresh copy is what the client still uses.
    server.set_plan({"tools/list": [{"names": ["new"], "ttlMs": 600_000}, {"names": ["b2"], "ttlMs": 0}]})
    catalogue = server.redial()
    assert names(catalogue) == ["a1", "a2", "b2"]
    assert server.lists()[2:] == [("tools/list", "c1", None)]


@pytest.mark.rule("sep-2549-once-ttl-expires-response-stale-re")
def test_a_page_whose_ttl_has_passed_is_asked_for_again_on_the_next_discovery(caching):
    """Once a page's ttlMs has passed, the next discovery asks the server for it again
    (the cache drops it)."""
    server = caching({"tools/list": [{"names": ["old"], "ttlMs": 300}]})
    server.handle.connect(timeout=WAIT)
    read = time.monotonic()
    server.set_plan({"tools/list": [{"names": ["new"], "ttlMs": 300}]})
    # The TTL is about time: wait until it has passed (not a synchronisation).
    time.sleep(max(0.0, 0.4 - (time.monotonic() - read)))
    assert names(server.redial()) == ["new"]
    assert server.lists() == [("tools/list", None, None)] * 2


@pytest.mark.rule("sep-2549-ttlms-0-response-considered-immediately-stale",
                  "sep-2549-ttlms-absent-assume-default-0-immediately",
                  "sep-2549-ttlms-negative-ignore-treat-0")
@pytest.mark.parametrize("ttl", [0, None, -600_000], ids=["zero", "absent", "negative"])
def test_a_page_with_a_zero_absent_or_negative_ttl_is_stale_at_once(caching, ttl):
    """A list page whose ttlMs is 0, absent or negative is stale at once: it is never
    cached, the very next discovery asks the server for it again, and between discoveries
    the client relies on list_changed notifications."""
    page: dict = {"names": ["t"]}
    if ttl is not None:
        page["ttlMs"] = ttl
    server = caching({"tools/list": [page], "prompts/list": [{"names": ["p"], "ttlMs": 600_000}]})
    server.handle.connect(timeout=WAIT)
    server.set_plan({"tools/list": [{**page, "names": ["t2"]}], "prompts/list": [{"names": ["p"], "ttlMs": 600_000}]})
    assert names(server.redial()) == ["t2"]
    # prompts/list (fresh) shows the re-dial did use the cache; tools/list was asked twice.
    assert server.lists() == [("tools/list", None, None), ("prompts/list", None, None), ("tools/list", None, None)]


@pytest.mark.rule("sep-2549-treat-ttl-polling-interval-triggers-automatic")
def test_no_request_goes_out_while_the_client_is_idle_past_a_ttl(caching):
    """A TTL never triggers a request by itself: an idle client sends nothing when its
    pages expire, however many TTLs pass; a page is read again only when a discovery
    needs it."""
    server = caching({"tools/list": [{"names": ["t"], "ttlMs": 50}]})
    server.handle.connect(timeout=WAIT)
    # Idle for twenty TTLs (time is what is tested here, not a synchronisation).
    time.sleep(1.0)
    assert server.lists() == [("tools/list", None, None)]
    assert server.handle.status()["discovering"] is False


@pytest.mark.rule("sep-2549-cursor-becomes-invalid-e-g-server")
def test_an_invalid_cursor_discards_the_cached_pages_and_reads_the_list_from_the_start(caching):
    """A cursor from a cached page that the server now refuses with -32602 discards every
    cached page of that list (fresh ones too) and reads the list again from the
    beginning, without a cursor."""
    server = caching({"tools/list": [{"names": ["a"], "ttlMs": 600_000}, {"names": ["b"], "ttlMs": 0}]})
    server.handle.connect(timeout=WAIT)
    server.set_plan({"tools/list": [{"names": ["x"], "ttlMs": 600_000}, {"names": ["y"], "ttlMs": 600_000}],
                     "invalid": ["c1"], "cursor_prefix": "d"})
    assert names(server.redial()) == ["x", "y"]
    assert server.lists()[2:] == [("tools/list", "c1", None), ("tools/list", None, None), ("tools/list", "d1", None)]
    # The pages read after the restart are the cached ones now: the next discovery asks nothing.
    server.redial()
    assert len(server.lists()) == 5


@pytest.mark.rule("sep-2549-require-consistent-snapshot-full-list-re")
def test_a_list_change_reads_the_whole_list_again_from_the_start(caching):
    """Where the client needs the whole list anew (a list_changed notification), it drops
    every cached page of that list, fresh or not, and reads the list again from the
    beginning without a cursor, so the new catalogue is one snapshot of the server's list."""
    server = caching({"tools/list": [{"names": ["a"], "ttlMs": 600_000}, {"names": ["b"], "ttlMs": 600_000}]})
    server.handle.connect(timeout=WAIT)
    server.wait_for(CatalogueChanged)  # the first catalogue
    server.set_plan({"tools/list": [{"names": ["x"], "ttlMs": 600_000}, {"names": ["y"], "ttlMs": 600_000}]})
    server.handle.call_tool("change", {}, timeout=WAIT)
    event = server.wait_for(CatalogueChanged)
    assert names(event.catalogue) == ["x", "y"]
    assert server.lists()[2:] == [("tools/list", None, None), ("tools/list", "c1", None)]


@pytest.mark.rule("sep-2549-results-produced-retrying-request-through-multi")
def test_a_result_that_took_an_input_required_retry_is_never_cached(caching):
    """A list result that came only after an input_required retry (the request carried
    requestState or inputResponses) is never cached, whatever its ttlMs: the next
    discovery asks again, and the result is retried again."""
    server = caching({"tools/list": [{"names": ["t"], "ttlMs": 600_000}], "state_first": ["tools/list"]})
    server.handle.connect(timeout=WAIT)
    assert server.lists() == [("tools/list", None, None), ("tools/list", None, "again")]
    server.redial()
    assert server.lists()[2:] == [("tools/list", None, None), ("tools/list", None, "again")]


@pytest.mark.rule("sep-2549-serve-cached-response-request-whose-method")
def test_a_cached_page_answers_only_the_very_request_that_produced_it(caching):
    """A cached page answers only a request with the same method and the same params
    (cursor and _meta included): with tools/list's first page fresh in the cache, its
    second page (another cursor) and prompts/list (another method) are still asked of
    the server."""
    server = caching({"tools/list": [{"names": ["a"], "ttlMs": 600_000}, {"names": ["b"], "ttlMs": 600_000}],
                      "prompts/list": [{"names": ["p"], "ttlMs": 600_000}]})
    catalogue = server.handle.connect(timeout=WAIT)
    assert names(catalogue) == ["a", "b"] and [p["name"] for p in catalogue.prompts] == ["p"]
    assert server.lists() == [("tools/list", None, None), ("tools/list", "c1", None), ("prompts/list", None, None)]
    server.redial()  # every one of them fresh: nothing asked
    assert len(server.lists()) == 3


class _TtlEngine(_Engine):
    """The fault HTTP server's engine, its tools/list fresh for ten minutes."""

    def handle_tools_list(self, request):
        return {**super().handle_tools_list(request), "ttlMs": 600_000}


class _TtlServer(FaultHTTPServer):
    engine_class = _TtlEngine


@pytest.mark.rule("sep-2549-cached-responses-reused-same-authorization-context")
def test_cached_pages_are_never_shared_between_two_access_tokens():
    """Cached list pages are keyed by a digest of the credentials their request carried
    (the configured headers and the OAuth access token): a connection with another token
    asks the server again, one with the same token is answered from the cache."""
    cache = ListCache()

    def discover_with(server, token: str) -> None:
        config = ServerConfig(name="ttl", type="http", url=server.url, bearer_token_env_var="CACHE_TOKEN")
        connection = open_http(config, lambda method, params: None, lambda reason: None, WAIT,
                               environ={"CACHE_TOKEN": token})
        try:
            assert any(tool["name"] == "hang" for tool in discover(connection, WAIT, cache).tools)
        finally:
            connection.close("done")
            assert connection.wait_closed(WAIT)

    def lists_by_token(server) -> list[str | None]:
        return [r.header("Authorization") for r in server.requests
                if r.method == "POST" and json.loads(r.body).get("method") == "tools/list"]

    with _TtlServer(era="modern") as server:
        discover_with(server, "token-a")
        discover_with(server, "token-b")
        discover_with(server, "token-a")
        discover_with(server, "token-b")
        assert lists_by_token(server) == ["Bearer token-a", "Bearer token-b"]
