"""Console sign-ins: what the console's cookie holds instead of the API key typed on its login page.

A token is `<key id>.<issued>.<nonce>.<mac>`: the first 16 hex digits of the key's SHA-256, the
second it was issued, a random nonce, and an HMAC-SHA256 of those under this server's secret. It
names the key without being it, expires `TTL` after it was issued, dies with the key (a key no longer
configured signs no one in), and signing out revokes it.

Why signed, not a table of tokens: `wolf serve` is one process, but a deployment may run several
behind one address (a session's stream resumes on any of them). Given the same `WOLF_CONSOLE_SECRET`,
each process takes the others' tokens, and a restart signs no one out. Without it each process draws
a secret of its own, and a sign-in holds on the process that made it until that process stops.
Revocations are kept by the process that signed the token out, until the token would have expired:
another process takes a signed-out token until then (`TTL`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time
from collections.abc import Mapping

from agentwolf.access import Principal
from agentwolf.protocols.auth import ApiKeys

SECRET_ENV = "WOLF_CONSOLE_SECRET"
MIN_SECRET = 32
"""Characters a configured secret needs at least."""
TTL = 12 * 3600
"""Seconds a sign-in lasts."""
SKEW = 60
"""Seconds a token may seem issued in the future (another process's clock)."""
KEY_ID = 16
"""Hex digits of the key's SHA-256 a token names it by."""


class SecretTooShort(ValueError):
    pass


class SignIns:
    """Issues, checks and revokes this process's console sign-in tokens."""

    def __init__(self, secret: bytes | None = None, ttl: int = TTL) -> None:
        self.secret, self.ttl = secret or secrets.token_bytes(32), ttl
        self.revoked: dict[str, float] = {}
        """Nonces signed out, with when their tokens expire anyway."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> SignIns:
        """With `WOLF_CONSOLE_SECRET` (shared by the processes that serve one address), else a
        secret of this process's own."""
        configured = environ.get(SECRET_ENV)
        if configured is None:
            return cls()
        if len(configured) < MIN_SECRET:
            raise SecretTooShort(f"{SECRET_ENV} needs at least {MIN_SECRET} characters")
        return cls(configured.encode())

    def issue(self, principal: Principal) -> str:
        signed = f"{principal.key[:KEY_ID]}.{int(time.time())}.{secrets.token_urlsafe(16)}"
        return f"{signed}.{self._mac(signed)}"

    def principal(self, token: str, keys: ApiKeys) -> Principal | None:
        """Whom `token` signs in, if this server issued it, it has not expired nor been revoked,
        and its key is still configured."""
        if self._nonce(token) is None:
            return None
        return keys.identified(token.split(".", 1)[0])

    def revoke(self, token: str) -> None:
        if (nonce := self._nonce(token)) is None:
            return
        now = time.time()
        self.revoked = {n: until for n, until in self.revoked.items() if until > now}
        self.revoked[nonce] = int(token.split(".")[1]) + self.ttl

    def _nonce(self, token: str) -> str | None:
        """The nonce of a token that holds now (None: forged, malformed, expired or revoked)."""
        parts = token.split(".")
        if len(parts) != 4 or not parts[1].isdigit():
            return None
        signed, mac = ".".join(parts[:3]), parts[3]
        if not hmac.compare_digest(self._mac(signed).encode(), mac.encode()):
            return None
        if not -SKEW <= time.time() - int(parts[1]) < self.ttl or parts[2] in self.revoked:
            return None
        return parts[2]

    def _mac(self, signed: str) -> str:
        digest = hmac.new(self.secret, signed.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
