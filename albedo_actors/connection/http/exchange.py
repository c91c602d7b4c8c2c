"""One request's exchange on the HTTP link, and the one translation of HTTP failures.

**Owns** nothing long-lived: a :class:`RequestExchange` is one request, from its first
POST to its answer, on the caller's thread or a worker of the link.

- Every request is its own POST (2025-11-25 and 2026-07-28 basic/transports); messages
  on its SSE stream go to the channel, which answers the server's requests (by POST) and
  resolves the pending request. A non-2xx answer carrying a JSON-RPC error reaches the
  request as the server's error.
- Auth (a :class:`LinkAuth`, unless the configuration gives its own ``Authorization``):
  every HTTP request is driven through the auth's flow (:mod:`albedo_actors.auth.flow`,
  httpx's ``auth_flow``): the flow gives the auth headers of each try and hears every
  answer; it decides the rounds (a DPoP nonce, a refresh, a step-up, a sign-in) and
  the exchange only sends, lets go of the answer and names the step a caller's
  deadline may end (nothing is sent after it).
- A 404 for an older session ends the connection.
- Resumption (2025-11-25-era sessions only, basic/transports "Resumability and
  Redelivery"): a stream that ends before its response is resumed with a GET carrying
  ``Last-Event-ID`` after the stream's ``retry`` (250 ms without one, at most 30 s),
  until the response arrives, the request is given up, or five resumptions in a row
  bring no new event. A stream without event ids cannot resume. The id goes back in
  UTF-8 (WHATWG HTML, server-sent events); one that cannot go into a header (a
  control character) is the server's protocol violation, and so is an
  ``Mcp-Session-Id`` that is not visible ASCII: one error line, nothing sent with it.
- :func:`failure` is the one place an :class:`HttpFailed` of a request becomes one of
  our errors (httpx maps its transport's exceptions at one place the same way).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Generator, Protocol

from ...auth import discovery as auth_discovery
from ...errors import (HttpRefused, HttpServerFailed, NeedsSignIn, ProtocolViolation, ServerError, SessionExpired, TimedOut,
                       Unavailable, UnknownOutcome)
from ...transport.http import Exchange, HttpFailed, HttpTransport, Reply, decode_message
from ...wire import headers as mcp_headers
from ...wire import jsonrpc
from ...wire.deadline import Bound
from ...wire.jsonrpc import WireError
from ...wire.sse import SseParser
from ..channel import Pending, RpcChannel
from ...wire import telemetry

logger = telemetry.logger(__name__)  # records carry the server and trace ids

RESUME_DEFAULT_MS = 250
RESUME_MAX_MS = 30_000
RESUME_LIMIT = 5
# What a call's TimedOut names when its deadline came during the link's auth step.
PREPARING = "refreshing the token"
AUTHORIZING = "signing in / refreshing the token"
CONNECTING = "connecting to the server"


# One request's auth rounds (:mod:`albedo_actors.auth.flow`): it yields the auth headers of
# each try (None: "let go of the answer, I go on"), is sent each answer, and returns None
# (the last answer is the request's) or why the request was refused.
AuthFlow = Generator[dict[str, str] | None, Reply, str | None]


class LinkAuth(Protocol):
    """The OAuth of one server as its link uses it, from the link's worker threads
    (implemented by :class:`albedo_actors.auth.server_auth.ServerAuth`)."""

    def flow(self, method: str, url: str, deadline: Bound | None = None, *, request: str = "",
             sign_in: bool = True, nonce: bool = True) -> AuthFlow:
        """The auth rounds of one ``method`` request to ``url``: its headers
        (``Authorization``, and a fresh ``DPoP`` proof for a DPoP-bound token), every
        answer's ``DPoP-Nonce`` kept, a 401 ``use_dpop_nonce`` answered once, and with
        ``sign_in`` a refresh, step-up or sign-in after a 401 or 403 (``request`` names
        it in errors); ``nonce`` False: no round at all. Each step ends at ``deadline``
        (:class:`~albedo_actors.errors.TimedOut`, ``sent`` False) and goes on without
        it; a sign-in that cannot happen raises :class:`~albedo_actors.errors.NeedsSignIn`."""

    def authorization_context(self) -> str:
        """A digest of the access token in use ("" without one), never the token."""


class LinkState(Protocol):
    """What one request's exchange (and the listening stream) use of their link
    (:class:`~albedo_actors.connection.http.link.HttpLink`)."""

    server: str
    channel: RpcChannel
    transport: HttpTransport
    auth: LinkAuth | None
    url: str  # a DPoP proof's htu
    configured: bool  # the configuration gives its own Authorization
    closing: threading.Event
    session_id: str | None

    @property
    def era(self) -> str | None: ...

    @property
    def version(self) -> str: ...

    def auth_flow(self, method: str, deadline: Bound | None = None, *, request: str = "", sign_in: bool = True,
                  nonce: bool = True) -> AuthFlow:
        """The auth's flow for one request (one that sends nothing without an auth)."""

    def post_headers(self, message: dict[str, Any], given: dict[str, str]) -> dict[str, str]: ...

    def stream_headers(self, given: dict[str, str], last_event_id: str | None = None) -> dict[str, str | bytes]: ...

    def submit(self, fn: Callable[[], None]) -> bool:
        """Run ``fn`` on a worker; False when the link is closing."""

    def finished(self, pending: Pending) -> None:
        """``pending``'s exchange is over: the link forgets it."""

    def session_lost(self) -> None: ...


def failure(server: str, method: str, exc: HttpFailed, deadline: Bound | None) -> ServerError | None:
    """The one translation of a request's :class:`HttpFailed` into our error; None when the
    exchange's ``deadline`` passed after the request may have left (the caller's wait then
    times it out and cancels it as the era wants)."""
    if exc.timed_out and deadline is not None:
        # The connection did not open by the deadline: nothing was sent.
        return None if exc.sent else TimedOut.unsent(server, method, CONNECTING, deadline.seconds)
    if exc.sent:
        return UnknownOutcome(server, f"{exc}; {method} may or may not have run")
    return Unavailable(server, f"{exc}; {method} was not sent")


def begin(flow: AuthFlow) -> dict[str, str]:
    """The flow's first auth headers.

    Raises:
        TimedOut: a token refresh did not finish by the flow's deadline.
    """
    given = next(flow)
    assert given is not None, "an auth flow begins with headers"
    return given


def settle(flow: AuthFlow, reply: Reply) -> None:
    """A request with no auth rounds (a stream, a DELETE): the flow hears its answer (and
    keeps its DPoP nonce) and ends."""
    try:
        flow.send(reply)
    except StopIteration:
        return
    flow.close()


def no_auth() -> AuthFlow:
    """The flow of a link without OAuth: no headers, no rounds."""
    yield {}
    return None


class RequestExchange:
    """One request's POST and answer; run once, by :meth:`inline` or :meth:`run`."""

    def __init__(self, link: LinkState, pending: Pending, message: dict[str, Any], exchange: Exchange,
                 bound: Bound | None) -> None:
        self._link = link
        self._channel = link.channel
        self._server = link.server
        self.pending = pending
        self.message = message
        self.exchange = exchange
        self.bound = bound  # the call's deadline, wherever its steps run
        self._reply: Reply | None = None  # the answer a worker reads on, handed over by inline()
        self._flow: AuthFlow | None = None  # the auth rounds, begun by the first POST

    # -- entry points -------------------------------------------------------------------------

    def run(self) -> None:
        """On a worker: the whole exchange (or what :meth:`inline` left)."""
        pending = self.pending
        try:
            self._exchange()
        except Exception as exc:  # a bug must not leave the request waiting forever
            logger.exception("server %r: the HTTP exchange for %s failed unexpectedly", self._server, pending.method)
            self._channel.fail(pending, UnknownOutcome(self._server, f"the exchange failed ({type(exc).__name__})"))
        finally:
            self._link.finished(pending)

    def inline(self) -> None:
        """The first POST of a request on the caller's thread.

        Past the deadline the request is left pending: the caller's wait then times it
        out and cancels it as the era wants, as it does when a worker is slow."""
        pending, exchange = self.pending, self.exchange
        handed = False
        try:
            flow = self._link.auth_flow("POST", self.bound, request=pending.method)
            headers = self._prepared(flow, PREPARING)
            reply = self._post(headers) if headers is not None else None
            if reply is None:
                return
            if (self._link.auth is not None and reply.status in (401, 403)) or reply.is_sse:
                # A sign-in may take minutes and a stream may last: a worker reads on, and
                # only the caller's wait (and the call's deadline, for the auth step and a
                # resumption) bounds it from now on.
                exchange.unbind()
                self._reply, self._flow = reply, flow
                handed = self._link.submit(self.run)
                if not handed:
                    reply.close()  # closing: the pending request has failed already
                return
            if self._rounds(flow, reply):
                self._answered(reply)
        except Exception as exc:  # a bug must not leave the request waiting forever
            logger.exception("server %r: the HTTP exchange for %s failed unexpectedly", self._server, pending.method)
            self._channel.fail(pending, UnknownOutcome(self._server, f"the exchange failed ({type(exc).__name__})"))
        finally:
            if not handed:
                self._link.finished(pending)

    # -- the exchange -------------------------------------------------------------------------

    def _prepared(self, flow: AuthFlow, step: str, refused: bool = False) -> dict[str, str] | None:
        """The headers of the message's next POST, the flow's next auth headers in them;
        None when the request has failed or was given up meanwhile (its caller's deadline
        came during the auth step: nothing is sent then). While the flow runs (a token
        refresh or a sign-in may be waited for) the pending request names ``step``, so a
        caller's wait that ends first says it was not sent (``refused``: the server
        refused it before, so it did not run)."""
        pending, bound = self.pending, self.bound
        pending.unsent = (step, refused)
        try:
            given = next(flow)
        except NeedsSignIn as exc:
            pending.unsent = None
            self._channel.fail(pending, exc)
            return None
        except TimedOut as exc:  # the auth's refresh, at the call's deadline: it goes on without us
            pending.unsent = None
            seconds = bound.seconds if bound is not None else 0.0
            self._channel.fail(pending, TimedOut.unsent(self._server, pending.method, exc.step or step, seconds,
                                                        refused=refused))
            return None
        assert given is not None, "an auth flow yields headers after letting go of an answer"
        # Cleared before looking: a caller that gave up after this sees it and cancels.
        pending.unsent = None
        if (refused and self._link.closing.is_set()) or not self._channel.is_pending(pending):
            return None  # its caller gave up while it was made, saying it was not sent
        return self._link.post_headers(self.message, given)

    def _post(self, headers: dict[str, str]) -> Reply | None:
        """POST the message; None when it failed (the request has failed then, or, past
        its deadline, is left for the caller's wait to time out)."""
        try:
            return self._link.transport.send("POST", headers, self.exchange, body=jsonrpc.encode(self.message))
        except HttpFailed as exc:
            self._fail(exc, self.exchange.deadline)
            return None

    def _fail(self, exc: HttpFailed, deadline: Bound | None) -> None:
        error = failure(self._server, self.pending.method, exc, deadline)
        if error is not None:
            self._channel.fail(self.pending, error)

    def _exchange(self) -> None:
        reply, flow = self._reply, self._flow
        self._reply = self._flow = None
        if flow is None:
            flow = self._link.auth_flow("POST", self.bound, request=self.pending.method)
        if reply is None:
            headers = self._prepared(flow, PREPARING)
            reply = self._post(headers) if headers is not None else None
        while reply is not None:
            if self._rounds(flow, reply):
                self._answered(reply)
                return
            # The flow goes on: a refresh, a step-up, a sign-in or the server's DPoP
            # nonce, then the request once more. It did not run.
            headers = self._prepared(flow, AUTHORIZING, refused=True)
            reply = self._post(headers) if headers is not None else None

    def _rounds(self, flow: AuthFlow, reply: Reply) -> bool:
        """Give the flow ``reply``: True when it is the request's answer; False when the
        flow posts again (``reply`` is closed) or the request has failed."""
        try:
            flow.send(reply)
        except StopIteration as done:
            if done.value is None:
                return True
            reply.close()  # RFC 9449 9: a nonce asked for again, or without a usable one
            self._channel.fail(self.pending, HttpRefused(self._server, 401, f"{done.value}; {self.pending.method} did not run"))
            return False
        reply.close()
        return False

    def _answered(self, reply: Reply) -> None:
        """The server answered the message (no more sign-in rounds): read the answer."""
        pending = self.pending
        if pending.method == "initialize" and 200 <= reply.status < 300:
            session_id = reply.headers.get("mcp-session-id") or None
            if session_id is not None:
                try:
                    mcp_headers.session_id(session_id)
                except mcp_headers.InvalidHeaderValue as exc:
                    reply.close()
                    self._channel.fail(pending, ProtocolViolation(
                        self._server, f"sent an Mcp-Session-Id that {exc}; it cannot be sent back, so the session cannot be used"))
                    return
            self._link.session_id = session_id
        if 200 <= reply.status < 300 and reply.status != 202:
            if reply.is_sse:
                self._read_stream(reply)
            else:
                self._read_json(reply)
            return
        self._refused(reply)

    # -- reading the answer -------------------------------------------------------------------

    def _read_json(self, reply: Reply) -> None:
        pending = self.pending
        try:
            body = reply.body()
            value = jsonrpc.parse_line(body)
        except HttpFailed as exc:
            self._fail(exc, reply.exchange.deadline)
            return
        except WireError as exc:
            self._channel.fail(pending, ProtocolViolation(self._server, f"answered {pending.method} with {exc}"))
            return
        items = value if isinstance(value, list) else [value]  # 2025-03-26 allowed batches
        for item in items:
            # Its share of the body's bytes (a discovery's byte budget counts them).
            self._channel.feed_message(item, len(body) // max(1, len(items)))
        if self._channel.is_pending(pending):
            self._channel.fail(pending, ProtocolViolation(self._server, f"answered {pending.method} without its response"))

    def _read_stream(self, reply: Reply) -> None:
        """Read the SSE answer to its response, resuming (legacy) as the module docstring
        says. Only the caller's wait bounds the read itself (it aborts the exchange at the
        deadline); the wait before a resumption, and its token refresh, end at the call's
        deadline."""
        link, pending, exchange, bound = self._link, self.pending, self.exchange, self.bound
        parser = SseParser(max_retry_ms=RESUME_MAX_MS)
        last_id: str | None = None
        quiet_resumptions = 0
        while True:
            heard = False
            problem = "the stream ended"
            try:
                for event in reply.events(parser):
                    if event.id is not None and event.id != last_id:
                        last_id, heard = event.id, True
                    if not event.data:
                        continue  # a priming event: an id and no message
                    heard = True
                    try:
                        self._channel.feed_message(decode_message(event.data), len(event.data))
                    except WireError as exc:
                        self._channel.fail(pending, ProtocolViolation(self._server, f"sent an SSE event with {exc}"))
                        reply.close()
                        return
                    if not self._channel.is_pending(pending):
                        reply.close()  # answered: the rest of the stream is not ours
                        return
            except HttpFailed as exc:
                problem = str(exc)  # why the stream ended: said below, in the error that ends the request
            if not self._channel.is_pending(pending) or exchange.aborted:
                return
            # An empty id is the server's reset: no Last-Event-ID, so nothing to resume from.
            resumable = link.era == "legacy" and link.session_id is not None and bool(last_id)
            if not resumable:
                why = "and could not be resumed (no event ids)" if link.era == "legacy" else "(2026-07-28 streams do not resume)"
                self._channel.fail(
                    pending,
                    UnknownOutcome(self._server, f"{problem} before the response to {pending.method} {why}; it may or may not have run"),
                )
                return
            quiet_resumptions = 0 if heard else quiet_resumptions + 1
            if quiet_resumptions >= RESUME_LIMIT:
                self._channel.fail(
                    pending, UnknownOutcome(self._server, f"{problem}; {RESUME_LIMIT} resumptions brought nothing new; it may or may not have run")
                )
                return
            delay = min(parser.retry_ms if parser.retry_ms is not None else RESUME_DEFAULT_MS, RESUME_MAX_MS) / 1000
            if bound is not None:
                if bound.remaining() <= delay:
                    return  # it could not resume before the call's deadline: the caller's wait ends it
                delay = min(delay, bound.remaining())
            if link.closing.wait(delay) or exchange.aborted:
                return
            flow = link.auth_flow("GET", bound, nonce=False)
            try:
                headers = link.stream_headers(begin(flow), last_id)
            except TimedOut:
                return  # the call's deadline came during a token refresh: the caller's wait ends it
            except mcp_headers.InvalidHeaderValue as exc:
                self._channel.fail(pending, ProtocolViolation(
                    self._server, f"sent an SSE event id that {exc}, so its stream cannot be resumed; "
                                  f"{pending.method} may or may not have run"))
                return
            resumed: Reply | None
            try:
                resumed = link.transport.send("GET", headers, exchange)
                settle(flow, resumed)
            except HttpFailed as exc:
                resumed = None
                problem = str(exc)
            if resumed is None or resumed.status != 200 or not resumed.is_sse:
                if resumed is not None:
                    resumed.close()
                    problem = f"resuming the stream was refused (HTTP {resumed.status})"
                self._channel.fail(pending, UnknownOutcome(self._server, f"{problem}; {pending.method} may or may not have run"))
                return
            reply = resumed
            parser = SseParser(max_retry_ms=RESUME_MAX_MS)

    def _refused(self, reply: Reply) -> None:
        link, pending = self._link, self.pending
        status = reply.status
        if status == 404 and link.session_id is not None and link.era == "legacy":
            reply.close()
            # End the connection before the caller hears why, so that its next call
            # finds it closed and dials a new session.
            mine = self._channel.take(pending)
            link.session_lost()
            if mine:
                pending.resolve(error=SessionExpired(self._server, f"its session ended (HTTP 404); {pending.method} did not run"))
            return
        configured = link.configured
        challenge = auth_discovery.bearer_challenge(reply.headers) if status in (401, 403) else None
        if not configured and (status == 401 or (challenge is not None and challenge.error == "insufficient_scope")):
            # Whatever its body says: the request did not run, and a sign-in would help.
            reply.close()
            scope = challenge.scope if challenge is not None else None
            why = "the server asks for a sign-in" if status == 401 else f"the server needs more scope ({scope or 'unnamed'})"
            self._channel.fail(pending, NeedsSignIn(self._server, why, pending.method, step_up=status == 403))
            return
        try:
            value = reply.json()
        except (HttpFailed, WireError):
            value = None  # a refusal without a readable body: its status says what happened
        error = value.get("error") if isinstance(value, dict) else None
        if isinstance(error, dict) and value.get("id") in (pending.id, None) and isinstance(error.get("code"), int):
            # A refusal's JSON-RPC error reaches its request as the server's error.
            self._channel.feed_message({**value, "id": pending.id})
            return
        if status in (401, 403):
            message = (f"refused the configured credentials (HTTP {status}); check the token extensions.json names"
                       if configured and status == 401 else f"refused {pending.method} (HTTP {status})")
            self._channel.fail(pending, HttpRefused(self._server, status, message))
        elif status == 202:
            self._channel.fail(pending, ProtocolViolation(self._server, f"accepted {pending.method} (202) without answering it"))
        elif status >= 500:
            self._channel.fail(
                pending, HttpServerFailed(self._server, status, f"failed with HTTP {status}; {pending.method} may or may not have run")
            )
        else:
            self._channel.fail(pending, HttpRefused(self._server, status, f"refused {pending.method} with HTTP {status}"))
