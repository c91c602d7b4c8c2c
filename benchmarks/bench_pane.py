#!/usr/bin/env python3
"""The settings pane's Save (issue 27): from the click to the row showing ``ok``, against
``albedo-mcp add`` of the same server, on the command line and through the running service.

One ``albedo-mcp serve --port 0`` (a subprocess over a throwaway home, its runtime's
session running) and one headless Chromium on its page. The server added is the bundled
demo server over stdio (``python albedo_actors/demo/server.py``, standard library only),
each time under a new name. Each round times, in a rotating order:

page      in the page: the add form filled in (target, guessed transport, name), then
          from the click on **Save** to its row in the servers list showing ``ok``
          (``data-state``), measured in the page itself (``performance.now()`` and a
          MutationObserver, so no WebDriver polling is counted). It covers the PATCH
          (the server dialled once: the 409 rule) and the save; the row says ``ok`` from
          the PATCH's answer, whose ``live`` is that dial's result (``source``
          ``check``) until the session's own view is newer.
session   from the same click to the running session offering the server: ``GET
          /api/mcp`` asked every 50 ms until its ``live`` is ``ok`` with ``source``
          ``daemon`` (the session reloaded and dialled it again).
service   ``albedo-mcp add`` as a subprocess while serve runs: it sends the change
          through the service (the server dialled once, the 409 rule), until it exits
          (interpreter start included).
cli       ``albedo-mcp add`` as a subprocess on a second home with no service: it dials
          the server and writes the home itself, until it exits.

Each added server is removed again (untimed) so every round starts from the same
settings. Figures are the median and range over ``--runs`` (5) rounds, in
milliseconds, and the ratios of the medians.

Run: ``.venv/bin/python benchmarks/bench_pane.py [--runs 5]`` (Debian's chromium and
chromium-driver and ``selenium``, a test dependency). The last line is machine-readable::

    RATIOS pane page/service=0.89x page/cli=0.87x session/page=1.02x service/cli=0.98x page=637ms session=648ms service=717ms cli=729ms
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import _common  # benchmarks/_common.py; it also puts the checkout first on sys.path
from _common import REPO, ratio

sys.path.insert(0, os.path.join(REPO, "tests", "service"))
sys.path.insert(0, os.path.join(REPO, "tests"))
import browser  # noqa: E402  tests/service/browser.py: the browser tests' helpers, serve as a subprocess
from browser import By, Keys  # noqa: E402

DEMO = os.path.join(REPO, "albedo_actors", "demo", "server.py")
TARGET = shlex.join([sys.executable, DEMO])
TIMEOUT = 120.0  # a bound on each step, never an expected duration

# Click Save, then resolve with the milliseconds until the row of arguments[0] says ok.
_SAVE_TO_OK = """
const name = arguments[0], done = arguments[arguments.length - 1];
const ok = () => {
  const row = [...document.querySelectorAll('#servers-list li.row')].find((li) => li.dataset.server === name);
  const state = row && row.querySelector('.state');
  return state && state.getAttribute('data-state') === 'ok';
};
const started = performance.now();
const observer = new MutationObserver(() => {
  if (ok()) { observer.disconnect(); done(performance.now() - started); }
});
observer.observe(document.body, {subtree: true, childList: true, attributes: true, characterData: true});
document.getElementById('f-save').click();
"""


def page_add(driver, serve, name: str) -> tuple[float, float]:
    """Fill in the add form (untimed), then from the click on Save: to the row's ``ok`` (ms,
    timed in the page), and to the running session offering the server (ms, timed here:
    ``GET /api/mcp`` asked every 50 ms until its ``live`` is ``ok`` from the daemon)."""
    driver.find_element(By.ID, "nav-add").click()
    browser.wait_for(driver, "the add form", lambda d: d.find_element(By.ID, "view-form").is_displayed())
    target = driver.find_element(By.ID, "f-target")
    target.clear()
    target.send_keys(TARGET)
    target.send_keys(Keys.TAB)
    browser.wait_for(driver, "the guess", lambda d: d.find_element(By.ID, "f-transport").get_attribute("value") == "stdio"
                     and d.find_element(By.ID, "f-name").get_attribute("value"))
    field = driver.find_element(By.ID, "f-name")
    field.clear()
    field.send_keys(name)
    started = time.perf_counter()
    in_page = float(driver.execute_async_script(_SAVE_TO_OK, name))
    deadline = started + TIMEOUT
    while True:
        servers = serve.api("GET", "/api/mcp").json()["servers"]
        live = next((server.get("live") or {} for server in servers if server["name"] == name), {})
        if live.get("state") == "ok" and live.get("source") == "daemon":
            return in_page, (time.perf_counter() - started) * 1000
        if time.perf_counter() > deadline:
            raise RuntimeError(f"the session did not offer {name} within {TIMEOUT:g} s: {live}")
        time.sleep(0.05)  # polling another process's state, bounded by the deadline


def cli_add(home: str, name: str) -> float:
    """``albedo-mcp add`` of the demo server as a subprocess, until it exits, in ms."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "albedo_actors", "add", "--name", name, TARGET],
                          env=browser.cli_env(home), capture_output=True, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL)
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"albedo-mcp add {name} exited {done.returncode}: {done.stderr[-400:]}")
    return elapsed


def remove(home: str, name: str) -> None:
    done = subprocess.run([sys.executable, "-m", "albedo_actors", "remove", name], env=browser.cli_env(home),
                          capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"albedo-mcp remove {name} exited {done.returncode}: {done.stderr[-400:]}")


def span(values: list[float]) -> str:
    return f"{statistics.median(values):7.0f} ms   range {min(values):.0f}-{max(values):.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    opts = parser.parse_args()
    figures: dict[str, list[float]] = {"page": [], "session": [], "service": [], "cli": []}
    with tempfile.TemporaryDirectory(prefix="bench-pane-") as tmp:
        served, alone = os.path.join(tmp, "served"), os.path.join(tmp, "alone")
        os.makedirs(served, mode=0o700)
        os.makedirs(alone, mode=0o700)
        browser.mcp_on(served)  # a fresh home has MCP off: its session would dial nothing
        serve = browser.Serve(served)
        serve.start()
        try:
            with browser.chromium(os.path.join(tmp, "chromium-profile")) as driver:
                browser.open_page(driver, serve, serve.link)
                def page(name: str) -> float:
                    in_page, offered = page_add(driver, serve, name)
                    figures["session"].append(offered)
                    return in_page

                cases = {
                    "page": page,
                    "service": lambda name: cli_add(served, name),
                    "cli": lambda name: cli_add(alone, name),
                }
                homes = {"page": served, "service": served, "cli": alone}
                for case, run in cases.items():  # warm-up: the page cache, the first imports
                    run(f"warm-{case}")
                    remove(homes[case], f"warm-{case}")
                figures["session"].clear()
                order = list(cases)
                for i in range(opts.runs):
                    _common.progress(f"round {i + 1}/{opts.runs}")
                    for case in order:
                        name = f"{case}-{i}"
                        figures[case].append(cases[case](name))
                        remove(homes[case], name)
                    order = order[1:] + order[:1]
                    # The page's row goes before the next round (its removal came from elsewhere).
                    browser.wait_for(driver, "the removed rows gone",
                                     lambda d: not d.find_elements(By.CSS_SELECTOR, "#servers-list li.row"))
        finally:
            if not serve.stop():
                print(f"serve did not end cleanly: {serve.stderr()[-400:]}", file=sys.stderr)
    p, o, s, c = (statistics.median(figures[k]) for k in ("page", "session", "service", "cli"))
    print(f"adding a local stdio server (the demo server), {opts.runs} runs; {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"page     Save clicked -> row ok                  {span(figures['page'])}")
    print(f"session  Save clicked -> the session offers it   {span(figures['session'])}")
    print(f"service  albedo-mcp add via the service (exit)   {span(figures['service'])}")
    print(f"cli      albedo-mcp add, no service (exit)       {span(figures['cli'])}")
    print(f"page/service {ratio(p, s)}   page/cli {ratio(p, c)}   session/page {ratio(o, p)}   service/cli {ratio(s, c)}")
    print(f"RATIOS pane page/service={ratio(p, s)} page/cli={ratio(p, c)} session/page={ratio(o, p)} "
          f"service/cli={ratio(s, c)} page={p:.0f}ms session={o:.0f}ms service={s:.0f}ms cli={c:.0f}ms")


if __name__ == "__main__":
    main()
