"""The service while a save waits on a slow server: the server being added is not listed
until its save ends (it is in extensions.json while it is tried, and goes again when it
cannot connect), and requests on the port that may wait on a server are capped, so the
page's polls always find a request thread (429 "busy, try again" past the cap)."""

from __future__ import annotations

import concurrent.futures
import time

import pytest

from albedo_actors.service import server as service_server
from conftest import stdio_entry

WAIT = 60.0
SLOW = "slow"


def slow_entry() -> dict:
    """A stdio server that sleeps before it reads anything: its add waits out the 3 s startup
    bound and is refused (409)."""
    return {**stdio_entry("--delay-start", "30"), "startupTimeoutMs": 3000}


def wait_until_written(path: str, name: str) -> None:
    """Until ``name`` is in extensions.json (its add is being tried), bounded."""
    until = time.monotonic() + WAIT
    while True:
        try:
            with open(path, encoding="utf-8") as f:
                if f'"{name}"' in f.read():
                    return
        except FileNotFoundError:
            pass
        assert time.monotonic() < until, f"{name!r} never reached {path}"
        time.sleep(0.02)


def names(running) -> list[str]:
    answer = running.api("GET", "/api/mcp")
    assert answer.status_code == 200, answer.text
    return [server["name"] for server in answer.json()["servers"]]


def test_a_server_whose_add_is_being_tried_is_not_listed_until_its_save_ends(svc):
    assert svc.patch({"servers": {"quick": stdio_entry()}, "added": ["quick"]}).status_code == 200
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        adding = pool.submit(svc.patch, {"servers": {SLOW: slow_entry()}, "added": [SLOW]})
        wait_until_written(svc.extensions, SLOW)
        assert names(svc) == ["quick"]  # in the file, being tried: not shown
        answer = adding.result(timeout=WAIT)
    assert answer.status_code == 409, answer.text
    assert SLOW in answer.json()["error"]
    assert names(svc) == ["quick"]
    with open(svc.extensions, encoding="utf-8") as f:
        assert SLOW not in f.read()


@pytest.fixture
def one_slow_slot(monkeypatch):
    """The port runs one request that may wait on a server at a time."""
    monkeypatch.setattr(service_server, "TCP_THREADS", 3)


def test_past_the_cap_a_slow_request_is_refused_at_once_and_polls_still_answer(one_slow_slot, svc):
    assert svc.patch({"servers": {"quick": stdio_entry()}, "added": ["quick"]}).status_code == 200
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        adding = pool.submit(svc.patch, {"servers": {SLOW: slow_entry()}, "added": [SLOW]})
        wait_until_written(svc.extensions, SLOW)
        check = svc.api("POST", "/api/mcp/doctor", json={"server": "quick"})
        assert check.status_code == 429, check.text
        error = check.json()["error"]
        assert "busy" in error and "try again" in error and "\n" not in error
        assert names(svc) == ["quick"]  # the poll is answered meanwhile
        assert adding.result(timeout=WAIT).status_code == 409
    # The slot is free again: the same check runs.
    check = svc.api("POST", "/api/mcp/doctor", json={"server": "quick"})
    assert check.status_code == 200 and check.json()["state"] == "ok", check.text
