"""Every error albedo_actors raises, in one tree.

::

    AlbedoError
     ├── ConfigError            extensions.json or a server entry is wrong; fix it and retry
     │    └── SettingsConflict  a saved server could not connect; the save was undone
     ├── StoreError             the catalogue/credential store failed (later issues)
     ├── ServerError            something about one server (always names it)
     │    ├── Unavailable       the request never left: the server could not be reached
     │    │    ├── Incompatible the server speaks no protocol revision we speak
     │    │    ├── HttpRefused  an HTTP 4xx without a JSON-RPC error: not run
     │    │    ├── NeedsSignIn  the server wants a (new) OAuth sign-in: not run
     │    │    └── SessionExpired  an older server ended the HTTP session (404)
     │    ├── TimedOut          no answer in time; the request was cancelled
     │    ├── UnknownOutcome    the request was sent, then the connection was lost
     │    │    └── HttpServerFailed  an HTTP 5xx without a JSON-RPC error
     │    ├── ProtocolViolation the server sent something that is not valid MCP
     │    └── RemoteError       the server's own JSON-RPC error (code, message, data)
     └── AuthError              a sign-in could not be done (discovery, registration,
                                the authorization response, the token request)

Library exceptions (``OSError`` from pipes, ``pykka.Timeout``, ``ActorDeadError``,
``json`` errors) are translated at the edge where they happen and never reach a
caller. Each message is one line that names the server and says what to do.

Messages carry text a server sent (its error message, a name, its stderr). ``str()`` of
every error, and the ``detail`` of a server's or a sign-in's error, is therefore passed
through :func:`albedo_actors.wire.text.printable` in one-line mode: a control code, a
C1 control, a bidi override or a line break from a server is an escape (``\\x1b``,
``\\n``), never a command to the terminal that shows the message or a second line.
"""

from __future__ import annotations

from .wire.jsonrpc import Json
from .wire.text import printable

__all__ = [
    "AlbedoError",
    "ConfigError",
    "SettingsConflict",
    "StoreError",
    "ServerError",
    "Unavailable",
    "Incompatible",
    "HttpRefused",
    "HttpServerFailed",
    "SessionExpired",
    "NeedsSignIn",
    "TimedOut",
    "UnknownOutcome",
    "ProtocolViolation",
    "RemoteError",
    "AuthError",
]


class AlbedoError(Exception):
    """Base of every error albedo_actors raises on purpose."""

    def __str__(self) -> str:
        # Whatever text a message was built from, it is shown as one safe line.
        return printable(super().__str__(), one_line=True)


class ConfigError(AlbedoError):
    """The configuration is invalid; the message says which entry and why."""


class SettingsConflict(ConfigError):
    """Saving a server was refused: it could not connect, so the previous
    extensions.json and credentials were restored. ``server`` names it; ``cause`` is
    the server's own error (its message is one line)."""

    def __init__(self, server: str, cause: AlbedoError) -> None:
        super().__init__(f"server {server!r} was not saved, it could not connect: {_detail(cause)}")
        self.server = server
        self.cause = cause


def _detail(exc: AlbedoError) -> str:
    return getattr(exc, "detail", None) or str(exc)


class StoreError(AlbedoError):
    """The store could not be read or written."""


class ServerError(AlbedoError):
    """An error about one server; ``server`` is its configured name."""

    def __init__(self, server: str, message: str) -> None:
        message = printable(message, one_line=True)  # detail reaches context lines and other messages
        super().__init__(f"server {server!r}: {message}")
        self.server = server
        self.detail = message


class Unavailable(ServerError):
    """The request never reached the server; it is safe to try again."""


class Incompatible(Unavailable):
    """The server speaks no protocol revision this client speaks."""


class HttpRefused(Unavailable):
    """The server refused the request with an HTTP 4xx status and no JSON-RPC error."""

    def __init__(self, server: str, status: int, message: str) -> None:
        super().__init__(server, message)
        self.status = status


class SessionExpired(Unavailable):
    """An older HTTP server ended the session (404): the request did not run."""


class NeedsSignIn(Unavailable):
    """The server asks for an OAuth sign-in (none yet, refused, or more scope): not run."""

    def __init__(self, server: str, why: str = "", method: str | None = None, *, step_up: bool = False) -> None:
        what = f"{method} did not run" if method else "nothing was sent"
        reason = f" ({why})" if why else ""
        super().__init__(server, f"needs the user to sign in{reason}; {what}: run `albedo-mcp sign-in {server}`")
        self.why = why
        self.step_up = step_up  # more scope for this request; the server's other operations still work


class TimedOut(ServerError):
    """No answer within the timeout; the request was dropped and cancelled."""


class UnknownOutcome(ServerError):
    """The request was sent but the connection was lost before its answer.

    The server may or may not have acted on it: inspect before acting again.
    """


class HttpServerFailed(UnknownOutcome):
    """The server answered with an HTTP 5xx status and no JSON-RPC error."""

    def __init__(self, server: str, status: int, message: str) -> None:
        super().__init__(server, message)
        self.status = status


class ProtocolViolation(ServerError):
    """The server sent something that is not valid JSON-RPC or MCP."""


class RemoteError(ServerError):
    """The server answered the request with a JSON-RPC error."""

    def __init__(self, server: str, code: int, message: str, data: Json = None) -> None:
        super().__init__(server, f"error {code}: {_one_line(message)}")
        self.code = code
        self.remote_message = message
        self.data = data


class AuthError(AlbedoError):
    """A sign-in could not be done; ``server`` names the server, the message says why."""

    def __init__(self, server: str, message: str) -> None:
        message = printable(message, one_line=True)
        super().__init__(f"server {server!r}: sign-in failed: {message}")
        self.server = server
        self.detail = message


def _one_line(text: str, limit: int = 300) -> str:
    """Collapse a server-supplied string to one bounded line for messages."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class RefreshDeferred(NeedsSignIn):
    """A refresh that could not be done for now (5xx, timeout): the tokens are kept."""
