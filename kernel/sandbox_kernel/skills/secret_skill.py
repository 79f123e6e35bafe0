"""Example skill: uses a secret from the host environment without ever showing it to the sandbox."""

from __future__ import annotations

import hashlib
import hmac
import os

SECRET_VARIABLE = "SANDBOX_DEMO_API_KEY"


class SignerSkill:
    """Signs messages with an API key that only the host knows (env SANDBOX_DEMO_API_KEY)."""

    def _key(self) -> bytes:
        key = os.environ.get(SECRET_VARIABLE)
        if not key:
            raise RuntimeError(f"the host has no {SECRET_VARIABLE} set")
        return key.encode()

    def sign(self, message: str) -> str:
        """HMAC-SHA256 of `message` with the host's key, as hex."""
        return hmac.new(self._key(), message.encode(), hashlib.sha256).hexdigest()

    def verify(self, message: str, signature: str) -> bool:
        """Whether `signature` is the host's signature of `message`."""
        return hmac.compare_digest(self.sign(message), signature)

    def key_fingerprint(self) -> str:
        """The first 8 hex digits of the key's SHA-256: proof the key exists, not the key."""
        return hashlib.sha256(self._key()).hexdigest()[:8]
