"""DPoP (RFC 9449, SEP-1932): a server's key pair, its proofs, and the servers' nonces.

**Owns** the process's nonce cache (:data:`NONCES`, the latest ``DPoP-Nonce`` per
origin) and a small cache of loaded keys. No network, no threads of its own; every
function is safe to call from any thread.

- The key: one ES256 (P-256) key pair per server, made with ``cryptography`` when a
  sign-in first needs it (:func:`new_key`) and kept as a private JWK in the server's
  OAuth record (``OAuthRecord.dpop_key``), beside the tokens it binds. It never leaves
  the host: a proof carries only the public JWK (``kty``, ``crv``, ``x``, ``y``).
- A proof (RFC 9449 4.2): a JWS with header ``typ: dpop+jwt``, ``alg: ES256``, ``jwk``,
  and claims ``jti`` (128 random bits, never reused), ``htm`` (the request's method),
  ``htu`` (its URL without query and fragment), ``iat``, ``ath`` (base64url SHA-256 of
  the access token, at the resource server only) and ``nonce`` when the origin gave one.
  One proof per HTTP request, never replayed (a retry gets a new one).
- Nonces (RFC 9449 8, 9): the latest ``DPoP-Nonce`` any response of an origin
  (``scheme://host:port``) carried. A value is server text: only a well-formed
  ``NQCHAR`` string of at most :data:`MAX_NONCE` characters is kept; the cache holds at
  most :data:`MAX_ORIGINS` origins (the oldest is dropped).

``cryptography`` loads with the first key or proof: a host that never meets a DPoP
server never loads it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from collections import OrderedDict
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey

ALGORITHM = "ES256"
MAX_NONCE = 512
MAX_ORIGINS = 256
MAX_KEYS = 64  # loaded keys kept (one per server that uses DPoP)
_COORDINATE = 32  # bytes of a P-256 coordinate

__all__ = ["ALGORITHM", "DpopKeyError", "NONCES", "NonceCache", "Prover", "new_key", "prover", "origin", "htu",
           "thumbprint_of", "valid_nonce"]


class DpopKeyError(ValueError):
    """A stored DPoP key that cannot be used (damaged, or not a P-256 private JWK)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: Any) -> bytes:
    if not isinstance(text, str) or not text or len(text) > 64:
        raise DpopKeyError("a coordinate is missing")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError):
        raise DpopKeyError("a coordinate is not base64url") from None


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=True).encode("ascii")


# -- the key -----------------------------------------------------------------------------------


def new_key() -> str:
    """A new ES256 private key, as the compact JSON of its private JWK (RFC 7518 6.2)."""
    from cryptography.hazmat.primitives.asymmetric import ec

    numbers = ec.generate_private_key(ec.SECP256R1()).private_numbers()
    public = numbers.public_numbers
    return _json({"kty": "EC", "crv": "P-256", "x": _b64(public.x.to_bytes(_COORDINATE, "big")),
                  "y": _b64(public.y.to_bytes(_COORDINATE, "big")), "d": _b64(numbers.private_value.to_bytes(_COORDINATE, "big"))}
                 ).decode("ascii")


def thumbprint_of(public_jwk: dict[str, str]) -> str:
    """The RFC 7638 SHA-256 thumbprint of an EC public JWK (what a bound token's ``cnf.jkt`` names)."""
    members = {name: public_jwk[name] for name in ("crv", "kty", "x", "y")}
    return _b64(hashlib.sha256(_json(members)).digest())


def _ath(access_token: str) -> str:
    return _b64(hashlib.sha256(access_token.encode("ascii")).digest())


class Prover:
    """One loaded key: makes proofs. ``repr`` shows the thumbprint only."""

    __slots__ = ("jwk", "public_jwk", "thumbprint", "_key", "_header", "_sign", "_ath_for")

    def __init__(self, jwk: str) -> None:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

        try:
            doc = json.loads(jwk) if isinstance(jwk, str) and len(jwk) < 1024 else None
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or doc.get("kty") != "EC" or doc.get("crv") != "P-256":
            raise DpopKeyError("not a P-256 JWK")
        x, y, d = (int.from_bytes(_unb64(doc.get(name)), "big") for name in ("x", "y", "d"))
        try:
            key: EllipticCurvePrivateKey = ec.EllipticCurvePrivateNumbers(
                d, ec.EllipticCurvePublicNumbers(x, y, ec.SECP256R1())).private_key()
        except ValueError:
            raise DpopKeyError("the key does not fit its curve") from None
        self.jwk = jwk  # the private JWK: stored in the record, never shown
        self.public_jwk = {"kty": "EC", "crv": "P-256", "x": doc["x"], "y": doc["y"]}
        self.thumbprint = thumbprint_of(self.public_jwk)
        self._key = key
        # The header is the same for every proof of this key: encoded once.
        self._header = _b64(_json({"typ": "dpop+jwt", "alg": ALGORITHM, "jwk": self.public_jwk})) + "."
        algorithm = ec.ECDSA(hashes.SHA256())

        def sign(data: bytes) -> bytes:
            r, s = decode_dss_signature(key.sign(data, algorithm))
            return r.to_bytes(_COORDINATE, "big") + s.to_bytes(_COORDINATE, "big")  # JWS ES256: R || S (RFC 7518 3.4)

        self._sign = sign
        self._ath_for: tuple[str, str] | None = None  # (token, its ath): the same token is sent many times

    def __repr__(self) -> str:
        return f"Prover(thumbprint={self.thumbprint!r})"

    def proof(self, method: str, url: str, access_token: str | None = None, nonce: str | None = None) -> str:
        """A fresh proof for one ``method`` request to ``url``; ``ath`` when ``access_token`` is
        given (resource server), the origin's cached nonce unless ``nonce`` names one."""
        target, where = _split(url)
        # The claims are written out by hand (a proof is made per request): jti and ath are
        # base64url, a nonce is NQCHAR (no quote, no backslash), htm and htu are JSON-quoted.
        claims = (f'{{"jti":"{_b64(secrets.token_bytes(16))}","htm":{_quoted(method)},"htu":{_quoted(target)},'
                  f'"iat":{int(time.time())}')
        if access_token is not None:
            cached = self._ath_for
            if cached is None or cached[0] != access_token:
                cached = self._ath_for = (access_token, _ath(access_token))
            claims += f',"ath":"{cached[1]}"'
        if nonce is None:
            nonce = NONCES.get(where)  # checked when it was kept
        elif not valid_nonce(nonce):
            raise ValueError("not a DPoP nonce")
        if nonce is not None:
            claims += f',"nonce":"{nonce}"'
        signing_input = self._header + _b64((claims + "}").encode("ascii"))
        return signing_input + "." + _b64(self._sign(signing_input.encode("ascii")))


_loaded: OrderedDict[str, Prover] = OrderedDict()
_loaded_lock = threading.Lock()


def prover(jwk: str) -> Prover:
    """The :class:`Prover` of a stored private JWK (loaded once, kept for the next proofs).

    Raises:
        DpopKeyError: the JWK cannot be used.
    """
    with _loaded_lock:
        found = _loaded.get(jwk)
        if found is not None:
            _loaded.move_to_end(jwk)
            return found
    made = Prover(jwk)
    with _loaded_lock:
        _loaded[jwk] = made
        while len(_loaded) > MAX_KEYS:
            _loaded.popitem(last=False)
    return made


# -- URLs and nonces ---------------------------------------------------------------------------


@lru_cache(maxsize=64)
def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=True)


@lru_cache(maxsize=256)
def _split(url: str) -> tuple[str, str]:
    """(``htu``, origin) of a request URL."""
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    port = parts.port or (443 if scheme == "https" else 80)
    shown = f"[{host}]" if ":" in host else host
    netloc = parts.netloc.rsplit("@", 1)[-1]
    # RFC 9449 4.2: htu is the target URI without query and fragment.
    return f"{scheme}://{netloc}{parts.path or '/'}", f"{scheme}://{shown}:{port}"


def htu(url: str) -> str:
    """The ``htu`` of a request to ``url``: the URL without query and fragment."""
    return _split(url)[0]


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url`` (the port always written): the key of the nonce cache."""
    return _split(url)[1]


def valid_nonce(value: Any) -> bool:
    """RFC 9449 8.1: ``nonce = 1*NQCHAR`` (visible ASCII but ``"`` and ``\\``), bounded here."""
    return (isinstance(value, str) and 0 < len(value) <= MAX_NONCE
            and all(0x21 <= ord(c) <= 0x7E and c not in '"\\' for c in value))


class NonceCache:
    """The latest ``DPoP-Nonce`` per origin; bounded in origins and in value length; thread-safe."""

    def __init__(self, max_origins: int = MAX_ORIGINS) -> None:
        self._nonces: OrderedDict[str, str] = OrderedDict()
        self._max = max_origins
        self._lock = threading.Lock()

    def get(self, where: str) -> str | None:
        with self._lock:
            return self._nonces.get(where)

    def put(self, url: str, value: Any) -> bool:
        """Keep ``value`` as the nonce of ``url``'s origin; False (nothing kept) when it is not a
        well-formed nonce. Returns True for a usable nonce, new or the same as before."""
        if not valid_nonce(value):
            return False
        where = origin(url)
        with self._lock:
            self._nonces[where] = value
            self._nonces.move_to_end(where)
            while len(self._nonces) > self._max:
                self._nonces.popitem(last=False)
        return True

    def forget(self, url: str) -> None:
        with self._lock:
            self._nonces.pop(origin(url), None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._nonces)


NONCES = NonceCache()
