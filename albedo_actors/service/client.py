"""The command line's client of a running settings service (the one writer of a home).

::

    client = ServiceClient.find(home)      # None: no live service for this home
    client.get()                           # GET /api/mcp
    client.patch({"servers": {...}, "secrets": {...}})
    client.sign_in(name[, new_client=True]); client.sign_in_status(name); client.offer(name, url); client.cancel_sign_in(name)

``find`` reads ``HOME/service.json`` through :func:`albedo_actors.service.server.read_service_file`
(None when it is missing, malformed or its pid is gone). Requests go to 127.0.0.1 only
(a file naming any other address is refused, and its token is never sent), never through a
proxy, with ``Authorization: Bearer <token>`` and bounded timeouts; answers are read up to
:data:`MAX_ANSWER` bytes.

Errors are ours, one line each: 400 (and any other 4xx) -> :class:`ConfigError` with the
service's ``{"error"}`` line; 409 -> :class:`ServiceConflict` (a :class:`SettingsConflict`:
exit 3, the server could not connect and nothing was kept); 401/403 -> ConfigError (the
service refused the token); 5xx or an answer that is not JSON -> :class:`SessionError`; no
answer in time -> :class:`SessionTimedOut`. A connection that is refused before anything
was sent raises :class:`ServiceGone`: the service has gone away, and the caller acts on the
home directly (that is the documented fallback; nothing was written through the service).
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

import requests

from ..errors import AlbedoError, AuthError, ConfigError, SessionError, SessionTimedOut, SettingsConflict, StoreError

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 120.0  # a save connects the server (startupTimeoutMs, 30 s by default) under the home's lock
MAX_ANSWER = 16 * 1024 * 1024


class ServiceGone(Exception):
    """The service refused the connection: nothing was sent; act on the home directly."""


class ServiceConflict(SettingsConflict):
    """A 409 from the service: its one line, exit 3 like :class:`SettingsConflict`."""

    def __init__(self, server: str, message: str) -> None:  # noqa: D107 - the service's line, as it is
        ConfigError.__init__(self, message)
        self.server = server
        self.cause = ConfigError(message)


class ServiceSignInFailed(AuthError):
    """A sign-in the service ran ended failed or cancelled: its one-line reason, exit 3."""

    def __init__(self, server: str, line: str) -> None:  # noqa: D107 - the service's line, as it is
        AlbedoError.__init__(self, line)
        self.server = server
        self.detail = line


class ServiceClient:
    """Talks to one running settings service (see the module's docstring)."""

    def __init__(self, url: str, token: str, *, source: str = "service.json") -> None:
        self.url = _loopback(url, source)
        self._token = token
        self._source = source
        self._http = requests.Session()
        self._http.trust_env = False  # no proxy, no .netrc: the token goes to 127.0.0.1 only

    def __repr__(self) -> str:  # never the token
        return f"ServiceClient({self.url!r})"

    @classmethod
    def find(cls, home: str) -> ServiceClient | None:
        """The client of the live service named by ``HOME/service.json``, else None."""
        import os

        from .server import read_service_file

        info = read_service_file(home)
        if not info:
            return None
        url, token = info.get("url"), info.get("token")
        source = os.path.join(os.path.abspath(home), "service.json")
        if not isinstance(url, str) or not isinstance(token, str) or not token:
            return None
        return cls(url, token, source=source)

    def fork(self) -> ServiceClient:
        """A client of the same service with its own connections, for another thread
        (a requests session is not meant to be shared between threads)."""
        return ServiceClient(self.url, self._token, source=self._source)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the API -------------------------------------------------------------------------------

    def get(self) -> dict[str, Any]:
        return self._json("GET", "/api/mcp")

    def patch(self, body: dict[str, Any], *, name: str = "", timeout: float = READ_TIMEOUT_S) -> dict[str, Any]:
        return self._json("PATCH", "/api/mcp", body, name=name, timeout=timeout)

    def sign_in(self, name: str, *, new_client: bool = False) -> dict[str, Any]:
        return self._json("PUT", _login(name), {"newClient": True} if new_client else {}, name=name)

    def sign_in_status(self, name: str) -> dict[str, Any]:
        return self._json("GET", _login(name), name=name)

    def offer(self, name: str, url: str) -> dict[str, Any]:
        return self._json("POST", _login(name) + "/callback", {"url": url}, name=name)

    def cancel_sign_in(self, name: str) -> None:
        self._request("DELETE", _login(name), None, name=name, timeout=READ_TIMEOUT_S)

    # -- internals -----------------------------------------------------------------------------

    def _json(self, method: str, path: str, body: Any = None, *, name: str = "", timeout: float = READ_TIMEOUT_S) -> dict[str, Any]:
        status, data = self._request(method, path, body, name=name, timeout=timeout)
        if status == 204:
            return {}
        if not isinstance(data, dict):
            raise SessionError(f"the settings service at {self.url} answered {method} {path} with no JSON object; "
                               f"check `albedo-mcp servers` before trying again")
        return data

    def _request(self, method: str, path: str, body: Any, *, name: str, timeout: float) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body).encode("utf-8")
        try:
            reply = self._http.request(method, self.url + path, data=data, headers=headers, stream=True,
                                       allow_redirects=False, timeout=(CONNECT_TIMEOUT_S, timeout))
            try:
                raw = _read_capped(reply)
            finally:
                reply.close()
        except requests.ConnectionError as exc:
            if _refused(exc):
                raise ServiceGone(self.url) from None
            if isinstance(exc, requests.ReadTimeout) or _timed_out(exc):
                raise SessionTimedOut(_no_answer(self.url, method)) from None
            raise SessionError(f"the settings service at {self.url} closed the connection during {method} {path}; "
                               f"check `albedo-mcp servers` before trying again") from None
        except requests.Timeout:
            raise SessionTimedOut(_no_answer(self.url, method)) from None
        except requests.RequestException as exc:
            raise SessionError(f"the settings service at {self.url} could not be asked: {type(exc).__name__}") from None
        status = reply.status_code
        try:
            parsed = json.loads(raw.decode("utf-8")) if raw else None
        except ValueError:
            parsed = None
        if 200 <= status < 300:
            return status, parsed
        error = parsed.get("error") if isinstance(parsed, dict) else None
        line = error if isinstance(error, str) and error else f"the settings service answered HTTP {status}"
        if status in (401, 403):
            raise ConfigError(f"the settings service at {self.url} refused the token of {self._source}; "
                              f"restart `albedo-mcp serve`, or remove that file if no service runs")
        if status == 409:
            raise ServiceConflict(name, line)
        if 400 <= status < 500:
            raise ConfigError(line)
        if status == 503:  # the service's store could not be read or written
            raise StoreError(line)
        raise SessionError(f"the settings service at {self.url} failed: {line}")


def _loopback(url: str, source: str) -> str:
    """``url`` when it is http://127.0.0.1:PORT (the only address a service listens on)."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or parts.hostname != "127.0.0.1" or port is None or parts.path not in ("", "/") \
            or parts.query or parts.fragment or parts.username is not None:
        raise ConfigError(f"{source} names {url[:100]!r}, not http://127.0.0.1:PORT; remove it if no service runs")
    return f"http://127.0.0.1:{port}"


def _login(name: str) -> str:
    return "/api/auth/logins/" + urllib.parse.quote(f"mcp:{name}", safe=":")


def _read_capped(reply: requests.Response) -> bytes:
    chunks, size = [], 0
    for chunk in reply.iter_content(65536):
        size += len(chunk)
        if size > MAX_ANSWER:
            raise SessionError(f"the settings service's answer is larger than {MAX_ANSWER} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _causes(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    todo: list[Any] = [exc]
    while todo:
        item = todo.pop()
        if not isinstance(item, BaseException) or any(item is s for s in seen) or len(seen) > 20:
            continue
        seen.append(item)
        todo.extend([item.__cause__, item.__context__, getattr(item, "reason", None), *item.args])
    return seen


def _refused(exc: BaseException) -> bool:
    """True only when no connection was made (so nothing was sent)."""
    return any(isinstance(item, ConnectionRefusedError) for item in _causes(exc))


def _timed_out(exc: BaseException) -> bool:
    from urllib3.exceptions import ReadTimeoutError

    return any(isinstance(item, (ReadTimeoutError, TimeoutError)) for item in _causes(exc))


def _no_answer(url: str, method: str) -> str:
    what = "; check `albedo-mcp servers` before trying again" if method not in ("GET",) else "; try again"
    return f"the settings service at {url} did not answer in time{what}"
