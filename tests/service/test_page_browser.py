"""The "MCP sign-ins" page in a real browser: headless Chromium driven by Selenium.

Everything is real: the service (albedo_actors.service.server.Service, in this
process, on a free port of 127.0.0.1), the loopback authorization server and protected
MCP server of tests/servers/oauth_server.py (it auto-approves every authorization
request and redirects to the sign-in's loopback callback), and Debian's chromium and
chromium-driver. scripts/test installs those two when they are missing; without them
the test skips, which CI=true turns into a failure (tests/conftest.py).

Every wait is a bounded WebDriverWait on what the page shows; nothing sleeps.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import urllib.parse

import pytest
import requests

from albedo_actors.settings import ServerSpec, Settings
from albedo_actors.store.models import CredentialRow
from helpers import FAULT_SERVER, OAuthServer

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT = 30  # seconds: a bound on every wait, never an expected duration
BUILD = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "build")
# Server text is data: a reason holding markup must show as text and never become markup.
HOSTILE_REASON = '<img id="injected" src="x" onerror="document.title=\'pwned\'">401 from the server'
SIGN_INS = "#view-sign-ins"
SERVERS = "#view-servers"
GUARDED = "guarded"
UNREADABLE = "damaged"  # its stored credentials cannot be read (issue 23, hole 10)


# -- fixtures ---------------------------------------------------------------------------

@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.delenv("ALBEDO_DATABASE_URL", raising=False)
    monkeypatch.setenv("ALBEDO_NO_BROWSER", "1")  # the page opens the tab; the service never does
    path = tmp_path / "home"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def oauth():
    server = OAuthServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def service(home, store, oauth):
    """The real service over a home with one HTTP server that needs a sign-in (its
    recorded reason is hostile markup) and one switched-off stdio server."""
    from albedo_actors.service.server import Service

    settings = Settings(str(home), store)
    view = settings.add(ServerSpec(name=GUARDED, transport="http", url=oauth.url))
    assert view.auth["state"] == "needs_sign_in", view.auth  # saving a 401 server keeps it, needing a sign-in
    store.update_credentials(GUARDED, lambda c: dataclasses.replace(c, oauth={**dict(c.oauth or {}), "reason": HOSTILE_REASON}))
    settings.add(ServerSpec(name="local", transport="stdio", command=sys.executable, args=(FAULT_SERVER,), enabled=False))
    settings.add(ServerSpec(name=UNREADABLE, transport="stdio", command=sys.executable, args=(FAULT_SERVER,), enabled=False))
    store.put_credentials(UNREADABLE, dataclasses.replace(store.get_credentials(UNREADABLE), bearer_token="tok"))
    CredentialRow.update(bearer_token="enc:v1:not-sealed").where(CredentialRow.server == UNREADABLE).execute(store._db)
    with Service(str(home), store, port=0) as running:
        yield running


@pytest.fixture
def browser(tmp_path):
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not shutil.which(path)]
    if missing:
        pytest.skip(f"{' and '.join(missing)} missing: install Debian's chromium and chromium-driver (scripts/test does)")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service as DriverService

    options = Options()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1200,900", "--no-first-run", "--disable-extensions",
                     f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=DriverService(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()  # ends chromedriver and every chromium process (the leak check looks)


# -- helpers ----------------------------------------------------------------------------

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


def visible_button(found, css: str):
    buttons = [b for b in found.find_elements(By.CSS_SELECTOR, css) if b.is_displayed()]
    return buttons[0] if buttons else None


def show_view(driver, view: str) -> None:
    """Follow the nav link to a view (only the current view is shown: hidden text reads as "")."""
    driver.find_element(By.ID, f"nav-{view}").click()
    wait_for(driver, f"the {view} view", lambda d: d.find_element(By.ID, f"view-{view}").is_displayed())


def focus_by_keyboard(driver, target, limit: int = 40) -> None:
    """Tab through the page until ``target`` has the focus (as a keyboard user would)."""
    body = driver.find_element(By.TAG_NAME, "body")
    body.click()
    for _ in range(limit):
        if driver.switch_to.active_element == target:
            return
        driver.switch_to.active_element.send_keys(Keys.TAB)
    pytest.fail(f"the Tab key never reached {target.text!r} in {limit} presses")


def sign_in_completes_in_new_tab(driver, page_handle: str, oauth: OAuthServer) -> None:
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


def open_page(driver, service) -> str:
    """Follow a new opening link, as the user does with the one `albedo-mcp open` prints."""
    url = service.open_url()
    driver.get(url)
    wait_for(driver, "the link's secret gone from the address bar", lambda d: d.current_url == service.url + "/")
    wait_for(driver, "the servers listed", lambda d: row(d, SERVERS, GUARDED) is not None)
    return url


# -- the tests --------------------------------------------------------------------------

def test_sign_in_and_out_of_a_server_from_the_page(service, browser, oauth, store):
    driver = browser
    os.makedirs(BUILD, exist_ok=True)

    # The single-use link opens the page, which takes its secret out of the address bar
    # at once; no cookie is set, and the service token is never in the page.
    open_page(driver, service)
    assert service.token not in driver.page_source
    assert driver.get_cookies() == [] and driver.execute_script("return document.cookie;") == ""

    # Both servers are listed with name, transport and state; the one that needs a
    # sign-in is under "MCP sign-ins", the switched-off stdio server is not.
    show_view(driver, "sign-ins")
    assert driver.find_element(By.CSS_SELECTOR, f"{SIGN_INS} h2").text == "MCP sign-ins"
    wait_for(driver, "the server under MCP sign-ins", lambda d: state_of(d, SIGN_INS, GUARDED) == "needs sign-in")
    assert row(driver, SIGN_INS, "local") is None
    show_view(driver, "servers")
    local = row(driver, SERVERS, "local")
    assert local is not None and "stdio" in local.text and state_of(driver, SERVERS, "local") == "disabled"
    assert "http" in row(driver, SERVERS, GUARDED).text

    # A server whose stored credentials cannot be read is listed, with the store's line.
    damaged = row(driver, SERVERS, UNREADABLE)
    assert damaged is not None and state_of(driver, SERVERS, UNREADABLE) == "credentials unreadable"
    assert "remove the server and add it again" in damaged.find_element(By.CSS_SELECTOR, ".problem").text

    # The server's reason is shown as text: its markup never became an element.
    show_view(driver, "sign-ins")
    assert HOSTILE_REASON in row(driver, SIGN_INS, GUARDED).text
    assert driver.find_elements(By.ID, "injected") == [] and driver.title != "pwned"

    # Sign in: the authorization page opens in a new tab; the page, never reloaded, sees the state change.
    page_handle = driver.current_window_handle
    driver.execute_script("window.__notReloaded = true;")
    visible_button(row(driver, SIGN_INS, GUARDED), "button.sign-in").click()
    sign_in_completes_in_new_tab(driver, page_handle, oauth)
    wait_for(driver, "the state signed in", lambda d: state_of(d, SIGN_INS, GUARDED) == "signed in")
    show_view(driver, "servers")
    wait_for(driver, "signed in in the server list", lambda d: state_of(d, SERVERS, GUARDED) == "signed in")
    assert store.get_credentials(GUARDED).oauth["state"] == "signed_in"
    assert driver.execute_script("return window.__notReloaded === true;")
    access_token = store.get_credentials(GUARDED).oauth["access_token"]
    assert access_token and access_token not in driver.page_source
    driver.save_screenshot(os.path.join(BUILD, "service-page-signed-in.png"))
    show_view(driver, "sign-ins")

    # Sign out: the server needs a sign-in again (and is listed for one).
    visible_button(row(driver, SIGN_INS, GUARDED), "button.sign-out").click()
    wait_for(driver, "the state signed out", lambda d: state_of(d, SIGN_INS, GUARDED) == "signed out")
    assert store.get_credentials(GUARDED).oauth["state"] == "signed_out"
    assert visible_button(row(driver, SIGN_INS, GUARDED), "button.sign-out") is None

    # With a browser that blocks the new tab (window.open does nothing): a sign-in
    # started and then cancelled from the page ends, and its link goes away.
    driver.execute_script("window.__opened = []; window.open = (url) => { window.__opened.push(url); return null; };")
    visible_button(row(driver, SIGN_INS, GUARDED), "button.sign-in").click()
    wait_for(driver, "the sign-in pending", lambda d: state_of(d, SIGN_INS, GUARDED) == "signing in…")
    visible_button(row(driver, SIGN_INS, GUARDED), "button.cancel").click()
    wait_for(driver, "the sign-in cancelled", lambda d: state_of(d, SIGN_INS, GUARDED) == "signed out"
             and not row(d, SIGN_INS, GUARDED).find_elements(By.CSS_SELECTOR, "a.authorization-link"))
    status = requests.get(f"{service.url}/api/auth/logins/mcp:{GUARDED}", headers={"Authorization": f"Bearer {service.token}"}, timeout=WAIT)
    assert status.status_code == 200 and status.json()["state"] == "cancelled", status.text
    driver.execute_script("window.__opened = [];")

    # By keyboard, the new tab still blocked: the link kept on the page is the
    # authorization page (the service's PUT answer), and following it signs in.
    focus_by_keyboard(driver, visible_button(row(driver, SIGN_INS, GUARDED), "button.sign-in"))
    driver.switch_to.active_element.send_keys(Keys.ENTER)
    link = wait_for(driver, "the link to the authorization page",
                    lambda d: (row(d, SIGN_INS, GUARDED).find_elements(By.CSS_SELECTOR, "a.authorization-link") or [None])[0])
    opened = driver.execute_script("return window.__opened;")
    assert opened == [link.get_attribute("href")]
    assert urllib.parse.urlsplit(opened[0]).path.endswith("/authorize")
    assert opened[0].startswith(oauth.base)
    assert link.get_attribute("target") == "_blank" and "noopener" in link.get_attribute("rel")
    assert state_of(driver, SIGN_INS, GUARDED) == "signing in…"
    driver.save_screenshot(os.path.join(BUILD, "service-page-signing-in.png"))
    link.click()
    sign_in_completes_in_new_tab(driver, page_handle, oauth)
    wait_for(driver, "the state signed in again", lambda d: state_of(d, SIGN_INS, GUARDED) == "signed in")
    visible_button(row(driver, SIGN_INS, GUARDED), "button.sign-out").click()
    wait_for(driver, "the state signed out again", lambda d: state_of(d, SIGN_INS, GUARDED) == "signed out")
    assert driver.execute_script("return window.__notReloaded === true;")
    driver.save_screenshot(os.path.join(BUILD, "service-page.png"))

    # Readable at phone width: nothing wider than the screen.
    driver.set_window_size(375, 800)
    wait_for(driver, "a phone-width layout",
             lambda d: d.execute_script("return document.documentElement.scrollWidth <= window.innerWidth;"))
    driver.save_screenshot(os.path.join(BUILD, "service-page-phone.png"))


def authorization_link(driver):
    links = row(driver, SIGN_INS, GUARDED).find_elements(By.CSS_SELECTOR, "a.authorization-link")
    return links[0] if links else None


def test_a_refused_client_gives_the_page_the_new_authorization_link(service, browser, oauth, store):
    """Issue 25, item 6: the authorization server refuses the client at the redirect; the
    service registers a new one, and the page, polling, shows the new link and says why
    (a poll may not open a tab itself)."""
    driver = browser
    open_page(driver, service)
    show_view(driver, "sign-ins")
    page_handle = driver.current_window_handle
    oauth.refuse_client("redirect", "invalid_client")
    driver.execute_script("window.__opened = []; window.open = (url) => { window.__opened.push(url); return null; };")
    visible_button(row(driver, SIGN_INS, GUARDED), "button.sign-in").click()
    first = wait_for(driver, "the link to the authorization page", authorization_link).get_attribute("href")
    authorization_link(driver).click()  # the tab: the authorization server sends it back with error=invalid_client
    sign_in_completes_in_new_tab(driver, page_handle, oauth)
    again = wait_for(driver, "a new link", lambda d: (authorization_link(d) is not None
                                                      and authorization_link(d).get_attribute("href") != first
                                                      and authorization_link(d).get_attribute("href")))
    client = urllib.parse.parse_qs(urllib.parse.urlsplit(again).query)["client_id"][0]
    assert oauth.stats()["refused_client_ids"] == [urllib.parse.parse_qs(urllib.parse.urlsplit(first).query)["client_id"][0]]
    assert client not in oauth.stats()["refused_client_ids"]
    wait_for(driver, "why, on the status line", lambda d: "registered a new one" in d.find_element(By.ID, "status").text)
    wait_for(driver, "the state signing in", lambda d: state_of(d, SIGN_INS, GUARDED) == "signing in…")
    wait_for(driver, "the new link, clicked",
             lambda d: (link := authorization_link(d)) is not None and (link.click() or True))
    sign_in_completes_in_new_tab(driver, page_handle, oauth)
    wait_for(driver, "the state signed in", lambda d: state_of(d, SIGN_INS, GUARDED) == "signed in")
    assert store.get_credentials(GUARDED).oauth["client_id"] == client


def test_another_ports_page_is_sent_no_credential_and_the_page_session_ends(service, browser, other_listener):
    """Issue 23, hole 1: a page of another local user, served on another 127.0.0.1 port,
    fetches its own origin with credentials; a cookie of the settings page would be sent
    to it (cookies are per host, not per port). The page keeps its session in
    sessionStorage (per origin, port included) and sends it as a Bearer header: the
    other page is sent nothing it could replay."""
    driver = browser
    link = open_page(driver, service)
    assert "#open=" not in driver.current_url
    session = driver.execute_script("return sessionStorage.getItem('albedo-page-token');")
    assert session and session != service.token
    bearer = {"Authorization": f"Bearer {session}"}
    assert requests.get(service.url + "/api/mcp", headers=bearer, timeout=WAIT).status_code == 200
    # A reload of the same tab keeps the session; the spent link opens nothing any more.
    driver.refresh()
    wait_for(driver, "the servers listed after a reload", lambda d: row(d, SERVERS, GUARDED) is not None)
    again = requests.post(service.url + "/api/session", json={"open": link.partition("#open=")[2]}, timeout=WAIT)
    assert again.status_code == 401

    # The other user's page, in the same browser.
    driver.get(other_listener.url + "/")
    wait_for(driver, "the other page's fetch", lambda d: d.title == "collected")
    got = other_listener.requests()
    assert {r["path"] for r in got} - {"/favicon.ico"} == {"/", "/collect"}, got
    sent = "\n".join(json.dumps(r) for r in got)
    for secret in (session, service.token, link.partition("#open=")[2]):
        assert secret not in sent
    assert not any(r["headers"].get("Cookie") for r in got), got
    assert driver.execute_script("return sessionStorage.getItem('albedo-page-token');") is None  # another origin's storage
    # Whatever it was sent, replayed from its server with a forged Origin, authorises nothing.
    for r in got:
        replay = {k: v for k, v in r["headers"].items() if k.lower() in ("cookie", "authorization")}
        forged = {**replay, "Origin": service.url, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"}
        answer = requests.patch(service.url + "/api/mcp", data=b'{"retryMs": 5000}', headers=forged, timeout=WAIT)
        assert answer.status_code == 401

    # Back on the page, "Sign out of this page" ends its session.
    driver.get(service.url + "/")
    wait_for(driver, "the servers listed from sessionStorage", lambda d: row(d, SERVERS, GUARDED) is not None)
    driver.find_element(By.ID, "page-sign-out").click()
    wait_for(driver, "the signed-out message", lambda d: "Signed out of this page" in d.find_element(By.ID, "status").text)
    assert requests.get(service.url + "/api/mcp", headers=bearer, timeout=WAIT).status_code == 401
    assert driver.execute_script("return sessionStorage.getItem('albedo-page-token');") is None
    # A new tab with no link shows what to do instead of a broken page.
    driver.switch_to.new_window("tab")
    driver.get(service.url + "/")
    wait_for(driver, "the not-opened message", lambda d: "albedo-mcp open" in d.find_element(By.ID, "status").text)
