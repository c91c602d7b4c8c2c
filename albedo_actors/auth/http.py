"""The HTTP side of signing in: metadata GETs, registration and token POSTs.

One :class:`AuthHttp` per sign-in or refresher: a ``requests.Session`` that ignores
the environment (no proxies, no ``.netrc``: a token request never goes anywhere but
the URL we name), never follows a redirect (a 3xx is an answer like any other, so a
secret is never re-sent to another address), verifies TLS as the MCP server's entry
says, and reads at most :data:`MAX_BODY` bytes of any answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import requests

MAX_BODY = 64 * 1024
TIMEOUT_S = 10.0
USER_AGENT = "albedo-actors-oauth"

__all__ = ["AuthHttp", "AuthReply", "AuthHttpError", "MAX_BODY", "TIMEOUT_S"]


class AuthHttpError(Exception):
    """The request did not get an answer (connection, TLS, timeout, oversized body)."""

    def __init__(self, url: str, reason: str, *, transient: bool = True) -> None:
        super().__init__(f"{_short(url)}: {reason}")
        self.url = url
        self.reason = reason
        self.transient = transient


@dataclass(frozen=True)
class AuthReply:
    status: int
    content_type: str
    body: bytes
    location: str | None = None
    www_authenticate: str | None = None

    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON."""
        import json

        try:
            return json.loads(self.body.decode("utf-8"), parse_constant=_reject)
        except (UnicodeDecodeError, ValueError, RecursionError):
            return None


def _reject(name: str) -> Any:
    raise ValueError(name)


def _short(url: str, limit: int = 160) -> str:
    url = str(url).split("?", 1)[0]
    return url if len(url) <= limit else url[: limit - 1] + "…"


class AuthHttp:
    """Bounded, redirect-free HTTP for the OAuth requests of one server."""

    def __init__(self, verify: bool | str = True, timeout: float = TIMEOUT_S) -> None:
        self._session = requests.Session()
        self._session.trust_env = False
        self._session.headers["User-Agent"] = USER_AGENT
        self._verify = verify
        self._timeout = timeout

    def get(self, url: str, accept: str = "application/json") -> AuthReply:
        return self._send("GET", url, headers={"Accept": accept})

    def post_form(self, url: str, form: dict[str, str], headers: dict[str, str] | None = None) -> AuthReply:
        sent = {"Accept": "application/json", "Content-Type": "application/x-www-form-urlencoded"}
        sent.update(headers or {})
        return self._send("POST", url, headers=sent, data=form)

    def post_json(self, url: str, document: Any, headers: dict[str, str] | None = None) -> AuthReply:
        return self._send("POST", url, headers={"Accept": "application/json", **(headers or {})}, json=document)

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> "AuthHttp":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _send(self, method: str, url: str, **kwargs: Any) -> AuthReply:
        kwargs["headers"] = {**kwargs["headers"], "Accept-Encoding": "identity"}
        try:
            response = self._session.request(
                method, url, allow_redirects=False, stream=True, verify=self._verify, timeout=self._timeout, **kwargs
            )
        except requests.exceptions.SSLError:
            raise AuthHttpError(url, "its TLS certificate was not accepted", transient=False) from None
        except requests.exceptions.Timeout:
            raise AuthHttpError(url, f"no answer within {self._timeout:g} s") from None
        except (requests.exceptions.RequestException, ValueError, OSError) as exc:
            raise AuthHttpError(url, f"could not be reached ({type(exc).__name__})") from None
        try:
            declared = response.headers.get("Content-Length")
            if declared is not None and declared.strip().isdigit() and int(declared) > MAX_BODY:
                raise AuthHttpError(url, f"answered with more than {MAX_BODY} bytes", transient=False)
            chunks, size = [], 0
            try:
                for chunk in response.iter_content(16 * 1024):
                    size += len(chunk)
                    if size > MAX_BODY:
                        raise AuthHttpError(url, f"answered with more than {MAX_BODY} bytes", transient=False)
                    chunks.append(chunk)
            except requests.exceptions.RequestException as exc:
                raise AuthHttpError(url, f"broke off its answer ({type(exc).__name__})") from None
            return AuthReply(
                status=response.status_code,
                content_type=response.headers.get("Content-Type", ""),
                body=b"".join(chunks),
                location=response.headers.get("Location"),
                www_authenticate=response.headers.get("WWW-Authenticate"),
            )
        finally:
            response.close()
