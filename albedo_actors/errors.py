"""Every error albedo_actors raises, in one tree.

::

    AlbedoError                       (exit)
     ├── ConfigError              2   extensions.json, a server entry or an argument is
     │    │                           wrong; fix it and retry (the only "usage" error)
     │    └── SettingsConflict    3   a saved server could not connect; the save was undone
     ├── StoreError               7   the catalogue/credential store could not be read or
     │                                written (the database is gone, locked, damaged)
     ├── SessionError             6   the session itself failed, not one server (its
     │    │                           preparation failed); start a new session
     │    ├── SessionClosed       6   the session or its runtime has closed or is not running
     │    └── SessionTimedOut     5   the session did not answer in time (busy); try again
     ├── ServerError              3   something about one server (always names it)
     │    ├── Unavailable         3   the request never left: the server could not be reached
     │    │    ├── Incompatible   3   the server speaks no protocol revision we speak
     │    │    ├── HttpRefused    3   an HTTP 4xx without a JSON-RPC error: not run
     │    │    ├── NeedsSignIn    3   the server wants a (new) OAuth sign-in: not run
     │    │    │    └── RefreshDeferred  3   a refresh that cannot be done now; tokens kept
     │    │    └── SessionExpired 3   an older server ended the HTTP session (404)
     │    ├── TimedOut            5   no answer in time; the request was cancelled, or
     │    │                           (``sent`` False) never sent: a dial or an auth step
     │    │                           before it did not finish by the call's deadline
     │    ├── UnknownOutcome      4   the request was sent, then the connection was lost
     │    │    └── HttpServerFailed  4   an HTTP 5xx without a JSON-RPC error
     │    ├── ProtocolViolation   4   the server sent something that is not valid MCP
     │    └── RemoteError         1   the server's own JSON-RPC error (code, message, data)
     │         └── ResourceNotFound  1   resources/read: no resource at that URI (-32602, or
     │                                   the older -32002)
     └── AuthError                3   a sign-in could not be done (discovery, registration,
          │                           the authorization response, the token request)
          └── ClientRefused       3   the authorization server refused the client albedo
                                      registered, or its registration: sign in with a new client

The number is the command line's exit code for each class (:data:`EXIT_CODES`,
the one table ``albedo-mcp`` exits by; :func:`exit_code` looks an error up by its
class, nearest first). 0 is done and 1 also means the tool reported ``isError``;
2 is usage only: something the user typed or configured is wrong. A bare
:class:`AlbedoError` is never raised; were one to be, it exits 6 like a session error.

Library exceptions (``OSError`` from pipes and files, ``pykka.Timeout``,
``ActorDeadError``, ``requests`` and ``peewee`` errors, ``json`` errors) are translated at
the edge where they cross into our API (the runtime, the binding, the settings, the
session, the store, the command line) and never reach a caller. Each message is one
line that names the server (when there is one) and says what to do.

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
    "SessionError",
    "SessionClosed",
    "SessionTimedOut",
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
    "ResourceNotFound",
    "AuthError",
    "ClientRefused",
    "RefreshDeferred",
    "EXIT_CODES",
    "exit_code",
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


class SessionError(AlbedoError):
    """The session itself failed, not one server (e.g. preparing its servers failed);
    the message says what to do. The previous servers stay in use where there were any."""


class SessionClosed(SessionError):
    """The session (or the runtime under it) has closed, or was never started: start a new one."""


class SessionTimedOut(SessionError):
    """The session did not answer within its bound (it is busy, e.g. reading the
    configuration or opening servers); nothing was called: try again."""


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

    def __init__(self, server: str, why: str = "", method: str | None = None, *, step_up: bool = False,
                 machine: bool = False) -> None:
        what = f"{method} did not run" if method else "nothing was sent"
        reason = f" ({why})" if why else ""
        if machine:
            # A grant with no user (client credentials, workload identity): no sign-in
            # by a person fixes it, its configuration or credentials do.
            message = (f"could not sign in by itself{reason}; {what}: check its \"oauth\" settings and the "
                       f"credentials they name, then retry")
        else:
            message = f"needs the user to sign in{reason}; {what}: run `albedo-mcp sign-in {server}`"
        super().__init__(server, message)
        self.why = why
        self.step_up = step_up  # more scope for this request; the server's other operations still work


class TimedOut(ServerError):
    """No answer by the call's deadline.

    ``sent`` True: the request was sent, then dropped and cancelled (it may have run).
    ``sent`` False: it never ran, so it is safe to try again: a step before it (the dial,
    a token refresh or a sign-in, named by ``step``) was still running at the deadline.
    That step goes on without the call (a refresh finishes for the next call).
    """

    def __init__(self, server: str, message: str, *, sent: bool = True, step: str | None = None) -> None:
        super().__init__(server, message)
        self.sent = sent
        self.step = step

    @classmethod
    def unsent(cls, server: str, method: str, step: str, seconds: float, *, refused: bool = False) -> TimedOut:
        """``method`` never ran: ``step`` did not finish within the call's ``seconds``.

        ``refused``: the server refused it first (a 401 or 403 before a new token), so it
        reached the server but did not run; otherwise it was not sent at all."""
        what = "did not run" if refused else "was not sent"
        return cls(server, f"{method} {what}: {step} did not finish within {seconds:g} s; try again", sent=False, step=step)


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


class ResourceNotFound(RemoteError):
    """``resources/read`` found no resource at ``uri``: the server's -32602 (2026-07-28)
    or -32002, the code of 2025-11-25 and older, which a client SHOULD still accept as
    "not found" (SEP-2164) whatever era the server speaks."""

    def __init__(self, server: str, uri: str, code: int, message: str, data: Json = None) -> None:
        ServerError.__init__(self, server, f"resource {_one_line(uri, 200)!r} not found (error {code}: {_one_line(message)})")
        self.code = code
        self.remote_message = message
        self.data = data
        self.uri = uri


class AuthError(AlbedoError):
    """A sign-in could not be done; ``server`` names the server, the message says why."""

    def __init__(self, server: str, message: str) -> None:
        message = printable(message, one_line=True)
        super().__init__(f"server {server!r}: sign-in failed: {message}")
        self.server = server
        self.detail = message


class ClientRefused(AuthError):
    """The sign-in failed because the authorization server refused the client albedo
    registered (the one kept, then the new one registered in its place): a sign-in with a
    new client (``sign-in --new-client``, the page's **Sign in again with a new client**)
    is the way on; or refused the registration itself, when the message gives the
    server's error and the way on (a client registered by hand)."""


def _one_line(text: str, limit: int = 300) -> str:
    """Collapse a server-supplied string to one bounded line for messages."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class RefreshDeferred(NeedsSignIn):
    """A refresh that could not be done for now (5xx, timeout): the tokens are kept."""


EXIT_OK = 0
EXIT_TOOL_ERROR = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_UNKNOWN_OUTCOME = 4
EXIT_TIMED_OUT = 5
EXIT_SESSION = 6
EXIT_STORE = 7

# The one table: class -> exit code of ``albedo-mcp`` (the tree above draws it; the
# docs/guide.rst's "Exit codes" lists it). Every class of this module has its own row.
EXIT_CODES: dict[type[AlbedoError], int] = {
    AlbedoError: EXIT_SESSION,
    ConfigError: EXIT_USAGE,
    SettingsConflict: EXIT_UNAVAILABLE,
    StoreError: EXIT_STORE,
    SessionError: EXIT_SESSION,
    SessionClosed: EXIT_SESSION,
    SessionTimedOut: EXIT_TIMED_OUT,
    ServerError: EXIT_UNAVAILABLE,
    Unavailable: EXIT_UNAVAILABLE,
    Incompatible: EXIT_UNAVAILABLE,
    HttpRefused: EXIT_UNAVAILABLE,
    NeedsSignIn: EXIT_UNAVAILABLE,
    RefreshDeferred: EXIT_UNAVAILABLE,
    SessionExpired: EXIT_UNAVAILABLE,
    TimedOut: EXIT_TIMED_OUT,
    UnknownOutcome: EXIT_UNKNOWN_OUTCOME,
    HttpServerFailed: EXIT_UNKNOWN_OUTCOME,
    ProtocolViolation: EXIT_UNKNOWN_OUTCOME,
    RemoteError: EXIT_TOOL_ERROR,
    ResourceNotFound: EXIT_TOOL_ERROR,
    AuthError: EXIT_UNAVAILABLE,  # a sign-in that failed is like a server that could not be reached
    ClientRefused: EXIT_UNAVAILABLE,
}


def exit_code(exc: AlbedoError) -> int:
    """The exit code for ``exc``: its class's row of :data:`EXIT_CODES`, else its nearest
    listed base's (a subclass defined elsewhere exits as its parent does)."""
    for cls in type(exc).__mro__:
        if cls in EXIT_CODES:
            return EXIT_CODES[cls]
    return EXIT_SESSION
