"""auth/flow.py: the 401/403/DPoP-nonce rounds of one request, driven as its link drives
them, against a scripted ServerAuth (no network)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from albedo_actors.auth.flow import MAX_AUTH_ROUNDS, NONCE_ASKED_AGAIN, NONCE_NOT_GIVEN, rounds
from albedo_actors.errors import NeedsSignIn, TimedOut
from albedo_actors.wire.deadline import Deadline

URL = "https://mcp.example/mcp"
NONCE_401 = {"www-authenticate": 'DPoP error="use_dpop_nonce"', "dpop-nonce": "n-1"}


@dataclass
class Reply:
    status: int
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Auth:
    token_type: str = "Bearer"
    refuse: bool = False  # unauthorized() raises NeedsSignIn
    late: bool = False  # headers() raises TimedOut (a refresh past the deadline)
    calls: list[str] = field(default_factory=list)
    tokens: int = 0

    def headers(self, method, url, deadline=None):
        self.calls.append(f"headers {method}")
        if self.late:
            raise TimedOut("s", "nothing was sent", sent=False, step="refreshing the token")
        value = f"{self.token_type} t{self.tokens}"
        return {"Authorization": value, **({"DPoP": "proof"} if self.token_type == "DPoP" else {})}

    def dpop_nonce(self, url, nonce):
        self.calls.append(f"nonce {nonce}")
        return nonce.startswith("n-")

    def unauthorized(self, sent, challenge, method, attempt, deadline=None):
        self.calls.append(f"unauthorized {sent} {method} {attempt}")
        if self.refuse:
            raise NeedsSignIn("s", "the server asks for a sign-in", method)
        self.tokens += 1
        return f"Bearer t{self.tokens}"

    def forbidden(self, sent, challenge, method, attempt, deadline=None):
        self.calls.append(f"forbidden {sent} {method} {attempt}")
        self.tokens += 1
        return f"Bearer t{self.tokens}"


def drive(auth, replies, **kw):
    """As the link does: (the headers of each try, how the flow ended)."""
    flow = rounds(auth, "POST", URL, Deadline.after(5.0), request="tools/call", **kw)
    tried = [next(flow)]
    for reply in replies:
        try:
            assert flow.send(reply) is None  # it lets go of the answer first
        except StopIteration as done:
            return tried, ("ended", done.value)
        tried.append(next(flow))
    return tried, ("open", None)


def test_an_accepted_answer_ends_the_flow_and_its_nonce_is_kept():
    auth = Auth()
    tried, end = drive(auth, [Reply(200, {"dpop-nonce": "n-9"})])
    assert tried == [{"Authorization": "Bearer t0"}] and end == ("ended", None)
    assert "nonce n-9" in auth.calls


def test_a_401_refreshes_then_posts_again_with_the_new_token():
    auth = Auth()
    tried, end = drive(auth, [Reply(401), Reply(200)])
    assert [t["Authorization"] for t in tried] == ["Bearer t0", "Bearer t1"] and end == ("ended", None)
    assert "unauthorized Bearer t0 tools/call 0" in auth.calls


def test_a_403_insufficient_scope_steps_up_and_any_other_403_is_the_answer():
    auth = Auth()
    scope = {"www-authenticate": 'Bearer error="insufficient_scope", scope="more"'}
    _, end = drive(auth, [Reply(403, scope), Reply(403)])
    assert end == ("ended", None) and any(c.startswith("forbidden") for c in auth.calls)


def test_a_dpop_nonce_is_answered_once_then_the_request_is_refused():
    tried, end = drive(Auth(token_type="DPoP"), [Reply(401, NONCE_401), Reply(401, NONCE_401)])
    assert len(tried) == 2 and end == ("ended", NONCE_ASKED_AGAIN)


def test_a_nonce_asked_for_without_a_usable_one_refuses_the_request():
    _, end = drive(Auth(token_type="DPoP"), [Reply(401, {**NONCE_401, "dpop-nonce": "bad"})])
    assert end == ("ended", NONCE_NOT_GIVEN)


def test_a_refused_sign_in_raises_out_of_the_flow():
    with pytest.raises(NeedsSignIn, match="tools/call did not run"):
        drive(Auth(refuse=True), [Reply(401)])


def test_a_refresh_still_running_at_the_deadline_raises_timed_out_before_anything_is_sent():
    with pytest.raises(TimedOut) as raised:
        drive(Auth(late=True), [])
    assert raised.value.sent is False


def test_the_rounds_are_bounded():
    tried, end = drive(Auth(), [Reply(401)] * (MAX_AUTH_ROUNDS + 3))
    assert end == ("ended", None) and len(tried) == MAX_AUTH_ROUNDS + 2


def test_without_sign_in_only_the_nonce_round_runs_and_without_nonce_none():
    _, end = drive(Auth(), [Reply(401)], sign_in=False)
    assert end == ("ended", None)
    tried, end = drive(Auth(token_type="DPoP"), [Reply(401, NONCE_401)], nonce=False)
    assert len(tried) == 1 and end == ("ended", None)
