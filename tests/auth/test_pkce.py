"""PKCE verifier, S256 challenge and state (RFC 7636)."""

import base64
import hashlib
import re

import pytest

from albedo_actors.auth.pkce import challenge_s256, new_state, new_verifier

UNRESERVED = re.compile(r"[A-Za-z0-9\-._~]+\Z")


def test_verifier_is_43_to_128_unreserved_characters():
    for length in (43, 64, 128):
        verifier = new_verifier(length)
        assert len(verifier) == length
        assert UNRESERVED.match(verifier)
    assert 43 <= len(new_verifier()) <= 128
    assert UNRESERVED.match(new_verifier())


def test_verifier_length_outside_rfc_bounds_is_refused():
    for length in (0, 42, 129):
        with pytest.raises(ValueError):
            new_verifier(length)


def test_verifiers_and_states_are_fresh_each_time():
    assert len({new_verifier() for _ in range(50)}) == 50
    assert len({new_state() for _ in range(50)}) == 50


def test_challenge_matches_rfc7636_appendix_b_example():
    verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    assert challenge_s256(verifier) == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"


def test_challenge_is_unpadded_base64url_of_sha256():
    verifier = new_verifier()
    challenge = challenge_s256(verifier)
    assert "=" not in challenge and "+" not in challenge and "/" not in challenge
    assert len(challenge) == 43
    padded = challenge + "="
    assert base64.urlsafe_b64decode(padded) == hashlib.sha256(verifier.encode()).digest()


def test_state_is_url_safe_and_long_enough():
    state = new_state()
    assert re.fullmatch(r"[A-Za-z0-9_-]{43,}", state)
