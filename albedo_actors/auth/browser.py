"""Opening the authorization URL in the user's browser, safely.

``open_authorization_url`` refuses anything but an absolute ``http(s)`` URL
(a shell command, a ``file:`` or ``javascript:`` URL, an option-like string
starting with ``-``, whitespace or control characters) with a ``ValueError``.
With ``ALBEDO_NO_BROWSER`` set nothing is opened. Otherwise Python's
``webbrowser`` module is asked to open it: it starts the browser with an
argument vector (``subprocess.Popen([...])`` without ``shell=True``), never
through a shell, so the URL is one argument and is never interpreted as a
command. The caller always shows the URL as well, opened or not.
"""

from __future__ import annotations

import os
import webbrowser
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

NO_BROWSER_ENV = "ALBEDO_NO_BROWSER"
MAX_URL_LENGTH = 8192


def check_authorization_url(url: object) -> str:
    """Return ``url`` if it is an absolute http(s) URL, else raise ValueError."""
    if not isinstance(url, str):
        raise ValueError("the authorization URL is not a string")
    if not url:
        raise ValueError("the authorization URL is empty")
    if len(url) > MAX_URL_LENGTH:
        raise ValueError("the authorization URL is too long")
    if url.startswith("-"):
        raise ValueError("the authorization URL looks like a command-line option")
    if any(ch.isspace() or ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in url):
        raise ValueError("the authorization URL contains whitespace or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise ValueError("the authorization URL cannot be parsed") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError("the authorization URL is not an http(s) URL")
    if not url.lower().startswith(parts.scheme.lower() + "://"):
        raise ValueError("the authorization URL is not an absolute http(s) URL")
    if not parts.hostname:
        raise ValueError("the authorization URL has no host")
    return url


def _no_browser(environ: Mapping[str, str]) -> bool:
    value = environ.get(NO_BROWSER_ENV)
    return value is not None and value.strip().lower() not in ("", "0", "false", "no")


def open_authorization_url(
    url: str,
    environ: Mapping[str, str] = os.environ,
    opener: Callable[[str], object] | None = None,
) -> bool:
    """Ask a browser to open ``url``; return whether one was asked.

    Raises ValueError (one-line reason) for anything but an absolute http(s)
    URL. Returns False without opening when ``ALBEDO_NO_BROWSER`` is set (to
    anything but empty, ``0``, ``false`` or ``no``) or when ``webbrowser``
    finds no browser. ``opener`` replaces ``webbrowser.open`` (tests pass a
    fake so no browser starts).
    """
    check_authorization_url(url)
    return _ask_browser(url, environ, opener)


def open_local_file(path: str, environ: Mapping[str, str] = os.environ,
                    opener: Callable[[str], object] | None = None) -> bool:
    """Ask a browser to open the local file ``path`` (a ``file://`` URL); return whether
    one was asked. For a secret the browser must reach without it ever being on a
    command line: a browser's argv is readable by every local user in /proc, so the
    secret goes in a file of the user's and only the file's name is passed.
    ``ALBEDO_NO_BROWSER`` and ``opener`` as for :func:`open_authorization_url`."""
    import pathlib

    return _ask_browser(pathlib.Path(os.path.abspath(path)).as_uri(), environ, opener)


def _ask_browser(url: str, environ: Mapping[str, str], opener: Callable[[str], object] | None) -> bool:
    if _no_browser(environ):
        return False
    if opener is None:
        def opener(target: str) -> bool:
            return webbrowser.open(target, new=2, autoraise=True)
    try:
        opened = opener(url)
    except Exception:  # webbrowser.Error or a failing launcher: the URL is shown anyway
        return False
    return opened is None or bool(opened)
