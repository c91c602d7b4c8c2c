"""The auth rounds of one HTTP request to an MCP server, as a flow its link drives.

Like httpx's ``Auth.auth_flow``: a generator that yields what the request needs and is
sent what came back. The link owns the I/O; the flow owns the decisions:

.. code-block:: python

    flow = auth.flow("POST", url, deadline, request="tools/call")
    headers = next(flow)                  # the auth headers of the first try
    while True:
        reply = post(headers)             # the link sends, with its own headers
        try:
            flow.send(reply)              # None: the flow will post again
        except StopIteration as done:     # done.value None: ``reply`` is the answer;
            break                         # a string: the request was refused (why)
        reply.close()                     # let go of the answer before a long step
        headers = next(flow)              # a refresh, a step-up or a sign-in, then new headers

Every answer's ``DPoP-Nonce`` is kept (RFC 9449 8.2, 9). The rounds:

- A 401 ``use_dpop_nonce`` to a DPoP request is posted again once with the nonce it gave
  (RFC 9449 9; no refresh, no sign-in); a second one, or one without a usable nonce,
  ends the flow with the reason (the request did not run).
- With ``sign_in``: any other 401 goes to :meth:`Rounds.unauthorized` (a refresh, then an
  interactive sign-in when the host has one), and a 403 ``insufficient_scope`` to
  :meth:`Rounds.forbidden` (a step-up), at most :data:`MAX_AUTH_ROUNDS` + 1 times; they
  raise :class:`~albedo_actors.errors.NeedsSignIn` when nothing helps. Any other answer
  ends the flow: it is the request's.
- Every step (a refresh before the first try or after a 401, waiting for a sign-in) ends
  at the request's ``deadline``: :class:`~albedo_actors.errors.TimedOut` (``sent`` False)
  is raised out of the flow, and the refresh goes on for the next call.
"""

from __future__ import annotations

from typing import Generator, Mapping, Protocol

from ..wire.deadline import Bound
from .discovery import Challenge, bearer_challenge, dpop_challenge

MAX_AUTH_ROUNDS = 4  # one refresh and three sign-ins, then the request fails

NONCE_ASKED_AGAIN = ("asked again for a new DPoP nonce (use_dpop_nonce) after albedo sent the one it gave; "
                     "albedo asks once")
NONCE_NOT_GIVEN = "asked for a DPoP nonce (use_dpop_nonce) without giving a usable one"


class Answer(Protocol):
    """What the flow reads of an answer (a transport reply has it)."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]:
        """Lower-case names."""


class Rounds(Protocol):
    """The tokens of one server, as the flow uses them
    (:class:`~albedo_actors.auth.server_auth.ServerAuth`)."""

    def headers(self, method: str, url: str, deadline: Bound | None = None) -> dict[str, str]: ...

    def dpop_nonce(self, url: str, nonce: str) -> bool: ...

    def unauthorized(self, sent: str | None, challenge: Challenge | None, method: str, attempt: int,
                     deadline: Bound | None = None) -> str: ...

    def forbidden(self, sent: str | None, challenge: Challenge | None, method: str, attempt: int,
                  deadline: Bound | None = None) -> str: ...


# What the flow yields (auth headers; None: "let go of the answer, I go on"), is sent (an
# answer) and returns (None: the last answer is the request's; a string: why it was refused).
Flow = Generator[dict[str, str] | None, Answer, str | None]


def rounds(auth: Rounds, method: str, url: str, deadline: Bound | None = None, *, request: str = "",
           sign_in: bool = True, nonce: bool = True) -> Flow:
    """The flow of one ``method`` request to ``url`` (see the module docstring).

    ``request`` names it in errors (an MCP method); ``sign_in`` False: no refresh or
    sign-in after a 401 or 403 (a notification or a response); ``nonce`` False: no
    round at all, the first answer is the request's (a stream, a DELETE).

    Raises (out of ``next`` or ``send``):
        NeedsSignIn: the server needs a sign-in that could not happen here.
        TimedOut: a step did not finish by ``deadline``; nothing more was sent.
    """
    headers = auth.headers(method, url, deadline)
    attempt = 0
    nonce_retried = False  # once per token
    while True:
        answer = yield headers
        given = answer.headers.get("dpop-nonce")
        kept = given is not None and auth.dpop_nonce(url, given)
        if not nonce:
            return None
        status = answer.status
        if status == 401 and "DPoP" in headers:
            challenge = dpop_challenge(answer.headers)
            if challenge is not None and challenge.error == "use_dpop_nonce":
                if nonce_retried or not kept:
                    return NONCE_ASKED_AGAIN if nonce_retried else NONCE_NOT_GIVEN
                nonce_retried = True
                yield None  # RFC 9449 9: once more, with the nonce it gave
                headers = auth.headers(method, url, deadline)
                continue
        if not sign_in or status not in (401, 403) or attempt > MAX_AUTH_ROUNDS:
            return None
        challenge = bearer_challenge(answer.headers)
        if status == 403 and (challenge is None or challenge.error != "insufficient_scope"):
            return None
        yield None  # the answer is done with: a refresh or a sign-in may take long
        if status == 401:
            auth.unauthorized(headers.get("Authorization"), challenge, request, attempt, deadline)
        else:
            auth.forbidden(headers.get("Authorization"), challenge, request, attempt, deadline)
        attempt += 1
        nonce_retried = False  # a new token: its server may ask for a nonce once more
        headers = auth.headers(method, url, deadline)
