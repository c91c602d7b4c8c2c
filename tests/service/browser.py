"""What the browser tests of the settings page share: headless Chromium through Selenium,
bounded waits, the axe-core check, screenshots, and ``albedo-mcp serve`` as a real
subprocess.

The browser is Debian's chromium and chromium-driver (scripts/test installs them);
axe-core is the npm package of tests/peers/package.json, under $ALBEDO_PEERS. Without
one of them a test skips, which CI=true turns into a failure (tests/conftest.py).

Every wait is bounded (a WebDriverWait, or a deadline on a subprocess's output);
nothing sleeps to synchronise.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse

import pytest

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT = 30  # seconds: a bound on every wait, never an expected duration
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(REPO, "build")  # git-ignored: screenshots land here
DESKTOP = (1200, 900)
PHONE = (375, 800)


# -- the browser --------------------------------------------------------------------------

def start_chromium(profile: str):
    """A headless Chromium at desktop width (skips when chromium or its driver is missing)."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not shutil.which(path)]
    if missing:
        pytest.skip(f"{' and '.join(missing)} missing: install Debian's chromium and chromium-driver (scripts/test does)")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service as DriverService

    options = Options()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     f"--window-size={DESKTOP[0]},{DESKTOP[1]}", "--no-first-run", "--disable-extensions",
                     f"--user-data-dir={profile}"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=DriverService(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT)
    driver.set_script_timeout(WAIT)  # axe.run is an async script
    return driver


@contextlib.contextmanager
def chromium(profile: str):
    driver = start_chromium(profile)
    try:
        yield driver
    finally:
        driver.quit()  # ends chromedriver and every chromium process (the leak check looks)


# -- waits and finding things -------------------------------------------------------------

def wait_for(driver, what: str, condition):
    try:
        # A polling page re-renders its rows: an element found a moment ago may be gone
        # (stale) when it is read; the next poll finds the new one.
        return WebDriverWait(driver, WAIT, poll_frequency=0.1,
                             ignored_exceptions=(StaleElementReferenceException,)).until(lambda d: condition(d))
    except TimeoutException:
        pytest.fail(f"the page did not show {what} within {WAIT} s; it shows: {page_text(driver)!r}")


def page_text(driver) -> str:
    try:
        return driver.find_element(By.TAG_NAME, "body").text
    except Exception:  # the page itself is gone: say so instead of raising again
        return "<no page>"


def row(driver, section: str, name: str):
    rows = driver.find_elements(By.CSS_SELECTOR, f'{section} [data-server="{name}"]')
    return rows[0] if rows else None


def state_of(driver, section: str, name: str) -> str | None:
    found = row(driver, section, name)
    return found.find_element(By.CSS_SELECTOR, ".state").text if found is not None else None


def data_state(driver, name: str) -> str | None:
    """The live state word of ``name``'s row in the servers list (its ``data-state``)."""
    found = row(driver, "#servers-list", name)
    return found.find_element(By.CSS_SELECTOR, ".state").get_attribute("data-state") if found is not None else None


def visible_button(found, css: str):
    if found is None:
        return None
    buttons = [b for b in found.find_elements(By.CSS_SELECTOR, css) if b.is_displayed()]
    return buttons[0] if buttons else None


def ready_button(found, css: str):
    """A shown button under ``found`` that the page has not marked busy (``aria-disabled``:
    an action of it is under way, and a click now would be ignored), or None."""
    if found is None:
        return None
    for button in found.find_elements(By.CSS_SELECTOR, css):
        if button.is_displayed() and button.get_attribute("aria-disabled") != "true":
            return button
    return None


def ready_in_row(driver, section: str, name: str, css: str):
    """Wait (bounded) for the button ``css`` of ``name``'s row in ``section`` to be ready; it."""
    return wait_for(driver, f"{css} of {name} ready", lambda d: ready_button(row(d, section, name), css))


def visible_text(found, css: str) -> str:
    """The text of the first element under ``found`` matching ``css`` ("" when none or hidden)."""
    if found is None:
        return ""
    shown = [e for e in found.find_elements(By.CSS_SELECTOR, css) if e.is_displayed()]
    return shown[0].text if shown else ""


def focus_by_keyboard(driver, target, limit: int = 60, start: bool = True) -> int:
    """Tab through the page until ``target`` has the focus (as a keyboard user would);
    how many presses it took. ``start`` begins from the top of the page."""
    if start:
        driver.find_element(By.TAG_NAME, "body").click()
    for presses in range(limit):
        if driver.switch_to.active_element == target:
            return presses
        driver.switch_to.active_element.send_keys(Keys.TAB)
    pytest.fail(f"the Tab key never reached {target.text or target.get_attribute('id')!r} in {limit} presses")


def press(driver, key: str) -> None:
    driver.switch_to.active_element.send_keys(key)


def go(driver, hash_: str, section: str) -> None:
    """Switch the page to the view ``hash_`` (as a link or Back would) and wait for ``section``."""
    driver.execute_script("window.location.hash = arguments[0];", hash_)
    wait_for(driver, f"the view {hash_}", lambda d: d.find_element(By.CSS_SELECTOR, section).is_displayed())


def shown_views(driver) -> list[str]:
    return [v.get_attribute("id") for v in driver.find_elements(By.CSS_SELECTOR, "section.view") if v.is_displayed()]


def sign_in_completes_in_new_tab(driver, page_handle: str, oauth) -> None:
    """A new tab opened on the authorization server (it redirected to the loopback
    callback); close it and come back to the page."""
    wait_for(driver, "a new tab", lambda d: len(d.window_handles) == 2)
    tab = next(h for h in driver.window_handles if h != page_handle)
    driver.switch_to.window(tab)
    wait_for(driver, "the callback page", lambda d: "/callback" in d.current_url)
    assert urllib.parse.urlsplit(driver.current_url).hostname == "127.0.0.1"
    assert oauth.stats()["authorize_requests"] >= 1
    driver.close()
    driver.switch_to.window(page_handle)


# -- looks: width, colour scheme, screenshots, axe -----------------------------------------

def set_width(driver, size: tuple[int, int]) -> None:
    """The page at ``size``: PHONE emulates a phone's screen (375 CSS px, overlay
    scrollbars, the viewport meta tag applied), anything else is a desktop window."""
    if size == PHONE:
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": size[0], "height": size[1], "deviceScaleFactor": 1, "mobile": True})
    else:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        driver.set_window_size(*size)
    wait_for(driver, f"a {size[0]} px wide screen", lambda d: d.execute_script("return screen.width;") == size[0]
             or size != PHONE)


def color_scheme(driver, scheme: str) -> None:
    """Emulate ``prefers-color-scheme: scheme`` ("light" or "dark") through the DevTools protocol."""
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                           {"media": "", "features": [{"name": "prefers-color-scheme", "value": scheme}]})
    wait_for(driver, f"the {scheme} colour scheme",
             lambda d: d.execute_script(f"return matchMedia('(prefers-color-scheme: {scheme})').matches;"))


def assert_no_horizontal_scroll(driver, view: str) -> None:
    width, inner = driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth];")
    assert width <= min(PHONE[0], inner), f"the view {view} is {width} px wide at {inner} px: it scrolls sideways"


def screenshot(driver, name: str) -> str:
    """The whole page (not only the window's part of it) as build/NAME.png; its path."""
    import base64

    os.makedirs(BUILD, exist_ok=True)
    path = os.path.join(BUILD, f"{name}.png")
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}})
    with open(path, "wb") as f:
        f.write(base64.b64decode(shot["data"]))
    return path


def axe_source() -> str:
    """axe.min.js of the npm package (tests/peers); a skip without it (a failure under CI)."""
    peers = os.environ.get("ALBEDO_PEERS") or os.path.join(REPO, ".peers", "peers", "node_modules")
    path = os.path.join(peers, "axe-core", "axe.min.js")
    if not os.path.exists(path):
        pytest.skip(f"axe-core missing ({path}): install the npm test peers (scripts/test does)")
    with open(path, encoding="utf-8") as f:
        return f.read()


_AXE_RUN = """
const done = arguments[arguments.length - 1];
axe.run(document, {resultTypes: ["violations"]})
  .then((results) => done(JSON.stringify(results.violations)))
  .catch((error) => done(JSON.stringify({error: String(error)})));
"""


def axe_violations(driver) -> list[dict]:
    """axe-core's serious and critical violations on the page as it is now.

    The script is injected through WebDriver, which runs it outside the page's CSP
    (the page itself never allows an inline or foreign script)."""
    if not driver.execute_script("return typeof window.axe !== 'undefined';"):
        driver.execute_script(axe_source())
    found = json.loads(driver.execute_async_script(_AXE_RUN))
    assert not isinstance(found, dict), f"axe-core failed: {found['error']}"
    return [v for v in found if v.get("impact") in ("serious", "critical")]


def assert_accessible(driver, view: str) -> None:
    bad = axe_violations(driver)
    lines = [f"{v['id']} ({v['impact']}): {v['help']}; at {[n['target'] for n in v['nodes']]}" for v in bad]
    assert not bad, f"axe-core on {view}:\n  " + "\n  ".join(lines)


# -- albedo-mcp serve as a subprocess -------------------------------------------------------

LINK = re.compile(r"(http://127\.0\.0\.1:\d+/#open=[A-Za-z0-9_-]+)")
START_TIMEOUT = 60.0  # a bound on serve's start, never an expected duration
STOP_TIMEOUT = 15.0


def cli_env(home: str) -> dict[str, str]:
    """This environment for a command on ``home``: no database URL or store key of its
    own, no browser opened."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALBEDO_STORE_") and k != "ALBEDO_DATABASE_URL"}
    env.update(ALBEDO_HOME=home, ALBEDO_NO_BROWSER="1")
    return env


def albedo(home: str, *argv: str, stdin: str = "", timeout: float = 120) -> subprocess.CompletedProcess:
    """``albedo-mcp ARGV...`` on ``home`` as a subprocess, bounded."""
    return subprocess.run([sys.executable, "-m", "albedo_actors", *argv], env=cli_env(home), input=stdin,
                          capture_output=True, text=True, timeout=timeout)


class Serve:
    """``albedo-mcp serve --port 0`` on ``home``, a process of its own.

    ``start()`` waits (bounded) for the line with the single-use link and returns it;
    ``open_link()`` asks ``albedo-mcp open --no-browser`` for another; ``stop()`` sends
    SIGTERM and waits (bounded; SIGKILL on timeout), and says whether it ended cleanly.
    Its stderr goes to a file beside the home, shown when something fails.
    """

    def __init__(self, home: str) -> None:
        self.home = home
        self.proc: subprocess.Popen | None = None
        self.link = ""
        self.url = ""
        self.log_path = os.path.join(os.path.dirname(home), "serve.stderr")

    def start(self) -> str:
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "albedo_actors", "serve", "--port", "0"],
                                     env=cli_env(self.home), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self._log)
        try:
            line = self._line(START_TIMEOUT)
            found = LINK.search(line)
            assert found, f"serve printed no link: {line!r}"
        except BaseException:
            self.stop()
            raise
        self.link = found.group(1)
        self.url = self.link.partition("/#open=")[0]
        return self.link

    def _line(self, timeout: float) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                raise AssertionError(f"serve printed no link within {timeout:g} s; its stderr: {self.stderr()!r}")
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                raise AssertionError(f"serve ended (status {self.proc.wait(STOP_TIMEOUT)}): {self.stderr()!r}")
            line += chunk
        return line.decode()

    def stderr(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    @property
    def token(self) -> str:
        from albedo_actors.service.server import read_service_file

        info = read_service_file(self.home)
        assert info is not None, "service.json is gone"
        return info["token"]

    def open_link(self) -> str:
        """A new single-use link, from ``albedo-mcp open --no-browser``."""
        opened = albedo(self.home, "open", "--no-browser", timeout=WAIT)
        assert opened.returncode == 0, opened.stderr
        found = LINK.search(opened.stdout)
        assert found, opened.stdout
        return found.group(1)

    def api(self, method: str, path: str, **kwargs):
        """One request to the service's API with its token (what the page cannot do)."""
        import requests

        headers = {"Authorization": f"Bearer {self.token}", **kwargs.pop("headers", {})}
        return requests.request(method, self.url + path, headers=headers, timeout=WAIT, **kwargs)

    def stop(self) -> bool:
        proc, self.proc = self.proc, None
        if proc is None:
            return True
        clean = True
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                clean = proc.wait(STOP_TIMEOUT) == 0
            except subprocess.TimeoutExpired:
                clean = False
                proc.kill()
                proc.wait(STOP_TIMEOUT)
        if proc.stdout is not None:
            proc.stdout.close()
        self._log.close()
        return clean


# -- the page ---------------------------------------------------------------------------------

def open_page(driver, serve: Serve, link: str | None = None) -> None:
    """Follow a single-use link (serve's first one, else a new one) and wait for the servers view."""
    driver.get(link or serve.open_link())
    wait_for(driver, "the link's secret gone from the address bar", lambda d: "#open=" not in d.current_url)
    wait_for(driver, "the servers view", lambda d: d.find_element(By.ID, "view-servers").is_displayed())
    wait_for(driver, "the servers loaded", lambda d: d.find_elements(By.CSS_SELECTOR, "#servers-list li.row")
             or d.find_element(By.ID, "servers-empty").is_displayed())


def mcp_on(home: str) -> None:
    """Turn the mcp extension on in ``home``'s extensions.json, as `albedo-mcp extension mcp
    on` does (a fresh home has it off: the session then dials nothing)."""
    path = os.path.join(home, "extensions.json")
    document = read_extensions(home) if os.path.exists(path) else {}
    document.setdefault("enabled", {})["mcp"] = True
    with open(path, "w", encoding="utf-8") as f:
        json.dump(document, f)


def read_extensions(home: str) -> dict:
    with open(os.path.join(home, "extensions.json"), encoding="utf-8") as f:
        return json.load(f)


def extensions_bytes(home: str) -> bytes | None:
    try:
        with open(os.path.join(home, "extensions.json"), "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


@contextlib.contextmanager
def opened_store(home: str):
    """The home's store, opened in this process for a look (closed afterwards)."""
    from albedo_actors.store import open_store

    store = open_store(home)
    try:
        yield store
    finally:
        store.close()
