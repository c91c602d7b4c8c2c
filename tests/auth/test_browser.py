"""Opening the authorization URL: only http(s), never a shell, never under ALBEDO_NO_BROWSER."""

import pytest

from albedo_actors.auth.browser import open_authorization_url

URL = "https://auth.example.com/authorize?response_type=code&client_id=abc&state=xyz"


class FakeOpener:
    def __init__(self, result=True):
        self.calls = []
        self.result = result

    def __call__(self, url):
        self.calls.append(url)
        return self.result


@pytest.mark.parametrize(
    "url",
    [
        "rm -rf ~",
        "xdg-open /etc/passwd",
        "$(touch /tmp/pwned)",
        "`id`",
        "file:///etc/passwd",
        "javascript:alert(1)",
        "JavaScript:alert(1)",
        "data:text/html,<script>alert(1)</script>",
        "-remote=http://evil",
        "--new-window",
        "-https://example.com",
        "https://example.com/a b",
        " https://example.com/",
        "https://example.com/\n",
        "https://example.com/\x00",
        "https://example.com/\x1b[31m",
        "https://example.com/\t",
        "http:example.com",
        "https:/example.com",
        "//example.com/authorize",
        "/authorize",
        "https://",
        "ftp://example.com/",
        "",
        "https://example.com:notaport/",
    ],
)
def test_refused(url):
    opener = FakeOpener()
    with pytest.raises(ValueError) as info:
        open_authorization_url(url, environ={}, opener=opener)
    assert "\n" not in str(info.value) and str(info.value)
    assert opener.calls == []


def test_not_a_string_refused():
    with pytest.raises(ValueError):
        open_authorization_url(None, environ={}, opener=FakeOpener())


def test_no_browser_env():
    opener = FakeOpener()
    assert open_authorization_url(URL, environ={"ALBEDO_NO_BROWSER": "1"}, opener=opener) is False
    assert opener.calls == []


def test_no_browser_env_still_checks_url():
    with pytest.raises(ValueError):
        open_authorization_url("file:///etc/passwd", environ={"ALBEDO_NO_BROWSER": "1"}, opener=FakeOpener())


@pytest.mark.parametrize("url", [URL, "http://127.0.0.1:8080/authorize?x=1", "HTTPS://Example.com/a"])
def test_fake_opener_called_once(url):
    opener = FakeOpener()
    assert open_authorization_url(url, environ={}, opener=opener) is True
    assert opener.calls == [url]


def test_opener_reporting_failure():
    opener = FakeOpener(result=False)
    assert open_authorization_url(URL, environ={}, opener=opener) is False
    assert opener.calls == [URL]


def test_opener_raising_is_not_fatal():
    def opener(url):
        raise OSError("no browser")

    assert open_authorization_url(URL, environ={}, opener=opener) is False


def test_default_opener_is_webbrowser(monkeypatch):
    import webbrowser

    calls = []
    monkeypatch.setattr(webbrowser, "open", lambda url, new=0, autoraise=True: calls.append(url) or True)
    assert open_authorization_url(URL, environ={}) is True
    assert calls == [URL]
