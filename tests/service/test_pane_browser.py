"""The settings pane in a real browser: add, edit, remove, enable, disable and import
servers from the page (issue 27).

Everything is real: ``albedo-mcp serve --port 0`` as a subprocess over a fresh home
(its runtime's session dials what the page saves), the fault server over stdio
(tests/servers/fault_server.py), the official SDK's server over streamable HTTP
(tests/servers/sdk_server.py), and headless Chromium through Selenium
(tests/service/browser.py). The page reaches the service only through its API;
each test checks what was saved in extensions.json and the store, not only what
the page shows.
"""

from __future__ import annotations

import json
import shlex
import sys

import pytest

from browser import (By, Keys, data_state, extensions_bytes, open_page, opened_store, press,
                     read_extensions, ready_in_row, row, visible_button, visible_text, wait_for)
from helpers import FAULT_SERVER, SdkHttpServer

BEARER = "tok-first-7f3a"  # secrets typed into the page: never in a page, an answer or extensions.json
ENV_SECRET = "env-secret-91c2"
IMPORTED_SECRET = "imported-literal-5d0e"


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.delenv("ALBEDO_DATABASE_URL", raising=False)
    path = tmp_path / "home"
    path.mkdir(mode=0o700)
    return str(path)


# -- fixtures -----------------------------------------------------------------------------

@pytest.fixture
def sdk_http(tmp_path):
    server = SdkHttpServer(record=str(tmp_path / "sdk-record.jsonl"))
    server.start()
    yield server
    server.stop()


# -- the form ---------------------------------------------------------------------------------

def stdio_target(*flags: str) -> str:
    return shlex.join([sys.executable, FAULT_SERVER, *flags])


def fill(driver, css: str, text: str) -> None:
    field = driver.find_element(By.CSS_SELECTOR, css)
    field.clear()
    field.send_keys(text)


def value(driver, css: str) -> str:
    return driver.find_element(By.CSS_SELECTOR, css).get_attribute("value")


def open_add_form(driver) -> None:
    driver.find_element(By.ID, "nav-add").click()
    wait_for(driver, "the add form", lambda d: d.find_element(By.ID, "view-form").is_displayed())
    assert driver.find_element(By.ID, "f-name").get_attribute("readonly") is None


def type_target(driver, target: str, transport: str, name: str) -> None:
    """Type the target, leave the field (the page guesses), then name the server."""
    fill(driver, "#f-target", target)
    press(driver, Keys.TAB)
    wait_for(driver, f"the transport guessed as {transport}",
             lambda d: value(d, "#f-transport") == transport and value(d, "#f-name"))
    fill(driver, "#f-name", name)


def env_row(driver, index: int = 0):
    """The ``index``th env row of the form (one more is added with its button when needed)."""
    rows = driver.find_elements(By.CSS_SELECTOR, "#f-env .env-row")
    while len(rows) <= index:
        driver.find_element(By.ID, "f-add-env").click()
        rows = wait_for(driver, "a new env row",
                        lambda d, n=len(rows): (found := d.find_elements(By.CSS_SELECTOR, "#f-env .env-row"))
                        and len(found) > n and found)
    return rows[index]


def save_and_see(driver, name: str, state: str = "ok") -> None:
    """Save the form; the page goes back to the servers, where ``name``'s row shows ``state``."""
    driver.find_element(By.ID, "f-save").click()
    wait_for(driver, "the servers view after Save", lambda d: d.find_element(By.ID, "view-servers").is_displayed())
    wait_for(driver, f"{name} {state}", lambda d: data_state(d, name) == state)


def confirm(driver, yes: bool) -> None:
    dialog = wait_for(driver, "the confirmation", lambda d: (found := d.find_element(By.ID, "confirm")).is_displayed() and found)
    assert dialog.get_attribute("open") is not None
    driver.find_element(By.ID, "confirm-yes" if yes else "confirm-no").click()
    wait_for(driver, "the confirmation closed", lambda d: not d.find_element(By.ID, "confirm").is_displayed())


def secrets_absent(driver, home: str, *secrets: str) -> None:
    """No secret typed into the page is in the page now, nor in extensions.json."""
    source = driver.page_source
    saved = (extensions_bytes(home) or b"").decode()
    for secret in secrets:
        assert secret not in source, "a secret is in the page"
        assert secret not in saved, "a secret is in extensions.json"


# -- the tests --------------------------------------------------------------------------------

def test_add_a_stdio_and_an_http_server_and_one_that_cannot_connect_keeps_nothing(home, serve, driver, sdk_http):
    running = serve()
    open_page(driver, running, running.link)
    assert driver.find_element(By.ID, "servers-empty").is_displayed()

    # A stdio server: the command line is guessed as stdio; its env secret is masked.
    open_add_form(driver)
    type_target(driver, stdio_target(), "stdio", "local")
    first = env_row(driver)
    first.find_element(By.CSS_SELECTOR, "input.env-name").send_keys("API_KEY")
    secret_field = first.find_element(By.CSS_SELECTOR, "input.env-value")
    assert secret_field.get_attribute("type") == "password"
    secret_field.send_keys(ENV_SECRET)
    save_and_see(driver, "local")
    local = row(driver, "#servers-list", "local")
    assert "stdio" in local.find_element(By.CSS_SELECTOR, ".transport").text
    assert FAULT_SERVER in local.find_element(By.CSS_SELECTOR, ".target").text
    wait_for(driver, "local's tools counted", lambda d: row(d, "#servers-list", "local")
             .find_element(By.CSS_SELECTOR, ".tools-count").text.strip() not in ("", "0 tools"))
    assert local.find_element(By.CSS_SELECTOR, ".era").text.startswith("MCP ")  # the protocol it speaks
    assert read_extensions(home)["mcp"]["servers"]["local"]["args"] == [FAULT_SERVER]
    with opened_store(home) as store:
        assert dict(store.get_credentials("local").env) == {"API_KEY": ENV_SECRET}

    # An HTTP server: a URL is guessed as http; its bearer token is stored, never shown.
    open_add_form(driver)
    type_target(driver, sdk_http.url, "http", "remote")
    assert driver.find_element(By.ID, "f-bearer").get_attribute("type") == "password"
    fill(driver, "#f-bearer", BEARER)
    save_and_see(driver, "remote")
    assert sdk_http.url in row(driver, "#servers-list", "remote").find_element(By.CSS_SELECTOR, ".target").text
    assert read_extensions(home)["mcp"]["servers"]["remote"]["url"] == sdk_http.url
    with opened_store(home) as store:
        assert store.get_credentials("remote").bearer_token == BEARER

    # One that cannot connect: the form stays open with one line naming it; nothing saved.
    before = extensions_bytes(home)
    open_add_form(driver)
    type_target(driver, shlex.join([sys.executable, "-c", "raise SystemExit(3)"]), "stdio", "broken")
    fill(driver, "#f-name", "broken")
    driver.find_element(By.ID, "f-save").click()
    error = wait_for(driver, "the error in the form",
                     lambda d: (text := d.find_element(By.ID, "form-error").text) and text)
    assert "broken" in error and "\n" not in error.strip() and "Traceback" not in error
    assert driver.find_element(By.ID, "form-error").get_attribute("role") == "alert"
    assert driver.find_element(By.ID, "view-form").is_displayed()
    assert extensions_bytes(home) == before
    with opened_store(home) as store:
        assert store.get_credentials("broken").empty
    driver.find_element(By.ID, "f-cancel").click()
    wait_for(driver, "the servers view after Cancel", lambda d: d.find_element(By.ID, "view-servers").is_displayed())
    # (A poll made while the service tried it may have listed it for a moment: Settings
    # writes extensions.json, tries the server, and puts the old file back on a 409.)
    wait_for(driver, "no row for the server that was not saved", lambda d: row(d, "#servers-list", "broken") is None)
    assert extensions_bytes(home) == before
    secrets_absent(driver, home, BEARER, ENV_SECRET)


def test_edit_a_secret_blank_keeps_it_and_a_dash_removes_it(home, serve, driver, sdk_http):
    running = serve()
    open_page(driver, running, running.link)
    open_add_form(driver)
    type_target(driver, sdk_http.url, "http", "remote")
    fill(driver, "#f-bearer", BEARER)
    save_and_see(driver, "remote")
    with opened_store(home) as store:
        assert store.get_credentials("remote").bearer_token == BEARER

    # Edit: the name is read-only, the secret field blank and saying "stored".
    ready_in_row(driver, "#servers-list", "remote", "button.edit").click()
    wait_for(driver, "the edit form", lambda d: d.find_element(By.ID, "view-form").is_displayed()
             and value(d, "#f-name") == "remote")
    assert driver.find_element(By.ID, "f-name").get_attribute("readonly") is not None
    bearer = driver.find_element(By.ID, "f-bearer")
    assert bearer.get_attribute("value") == "" and "stored" in bearer.get_attribute("placeholder")
    assert value(driver, "#f-target") == sdk_http.url
    secrets_absent(driver, home, BEARER)
    save_and_see(driver, "remote")  # blank keeps it
    with opened_store(home) as store:
        assert store.get_credentials("remote").bearer_token == BEARER

    ready_in_row(driver, "#servers-list", "remote", "button.edit").click()
    wait_for(driver, "the edit form", lambda d: d.find_element(By.ID, "view-form").is_displayed()
             and value(d, "#f-name") == "remote")
    fill(driver, "#f-bearer", "-")  # a dash removes it
    save_and_see(driver, "remote")
    with opened_store(home) as store:
        assert store.get_credentials("remote").bearer_token is None
    ready_in_row(driver, "#servers-list", "remote", "button.edit").click()
    wait_for(driver, "the edit form", lambda d: d.find_element(By.ID, "view-form").is_displayed()
             and value(d, "#f-name") == "remote")
    assert "stored" not in (driver.find_element(By.ID, "f-bearer").get_attribute("placeholder") or "")
    secrets_absent(driver, home, BEARER)


def test_disable_enable_and_remove_with_a_confirmation(home, serve, driver):
    with open(f"{home}/extensions.json", "w", encoding="utf-8") as f:
        json.dump({"enabled": {"mcp": True}, "mcp": {"servers": {
            "local": {"type": "stdio", "command": sys.executable, "args": [FAULT_SERVER]}}}}, f)
    running = serve()
    open_page(driver, running, running.link)
    wait_for(driver, "local ok", lambda d: data_state(d, "local") == "ok")

    # Disable and enable act at once (no confirmation).
    ready_in_row(driver, "#servers-list", "local", "button.disable").click()
    wait_for(driver, "local off", lambda d: data_state(d, "local") == "off")
    assert read_extensions(home)["mcp"]["servers"]["local"].get("enabled") is False
    assert visible_button(row(driver, "#servers-list", "local"), "button.disable") is None
    ready_in_row(driver, "#servers-list", "local", "button.enable").click()
    wait_for(driver, "local ok again", lambda d: data_state(d, "local") == "ok")
    assert read_extensions(home)["mcp"]["servers"]["local"].get("enabled", True) is True

    # Remove asks first: No keeps it, Yes removes it.
    ready_in_row(driver, "#servers-list", "local", "button.remove").click()
    assert "local" in wait_for(driver, "the question", lambda d: d.find_element(By.ID, "confirm-text").text)
    confirm(driver, yes=False)
    assert row(driver, "#servers-list", "local") is not None
    assert "local" in read_extensions(home)["mcp"]["servers"]
    ready_in_row(driver, "#servers-list", "local", "button.remove").click()
    confirm(driver, yes=True)
    wait_for(driver, "local gone", lambda d: row(d, "#servers-list", "local") is None)
    assert "local" not in read_extensions(home)["mcp"].get("servers", {})
    wait_for(driver, "the empty list", lambda d: d.find_element(By.ID, "servers-empty").is_displayed())


def test_import_a_pasted_claude_desktop_file(home, serve, driver):
    running = serve()
    open_page(driver, running, running.link)
    pasted = json.dumps({"mcpServers": {
        "imported": {"command": sys.executable, "args": [FAULT_SERVER], "env": {"API_KEY": IMPORTED_SECRET}},
        "dead": {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"]},
    }}, indent=2)
    driver.find_element(By.ID, "nav-import").click()
    wait_for(driver, "the import view", lambda d: d.find_element(By.ID, "view-import").is_displayed())
    fill(driver, "#import-text", pasted)
    before = extensions_bytes(home)
    driver.find_element(By.ID, "import-preview").click()

    def outcome(d, name):
        found = row(d, "#import-list", name)
        return found.find_element(By.CSS_SELECTOR, ".outcome").text if found is not None else None

    wait_for(driver, "the preview", lambda d: outcome(d, "imported") == "ready" and outcome(d, "dead") == "ready")
    assert extensions_bytes(home) == before  # a preview writes nothing
    assert IMPORTED_SECRET not in driver.page_source  # the details say there is a secret, never its value
    driver.find_element(By.ID, "import-go").click()
    wait_for(driver, "the outcomes", lambda d: outcome(d, "imported") == "imported" and outcome(d, "dead") == "refused")
    dead_error = visible_text(row(driver, "#import-list", "dead"), ".error")
    assert "dead" in dead_error and "\n" not in dead_error.strip()
    saved = read_extensions(home)["mcp"]["servers"]
    assert set(saved) == {"imported"}
    assert IMPORTED_SECRET not in extensions_bytes(home).decode()
    with opened_store(home) as store:
        assert dict(store.get_credentials("imported").env) == {"API_KEY": IMPORTED_SECRET}
    driver.find_element(By.ID, "nav-servers").click()
    wait_for(driver, "the imported server ok", lambda d: data_state(d, "imported") == "ok")
    assert IMPORTED_SECRET not in driver.page_source
