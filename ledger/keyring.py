"""Where the ledger gets the private key that signs a run's tree heads.

The ledger never stores private keys. It is given a :class:`LogKeys`: anything that, asked
for a log origin, returns the ``attestation.keys.SigningKey`` named by that origin. The CLI
provides one backed by ``<key_dir>``; tests and embedded uses can take :class:`InMemoryLogKeys`.
"""

from __future__ import annotations

from typing import Protocol

from attestation.keys import SigningKey


class LogKeys(Protocol):
    """Returns the log signing key for a C2SP origin (the key's name must be the origin)."""

    def __call__(self, origin: str) -> SigningKey: ...


class InMemoryLogKeys:
    """Generates one key per origin on first use and keeps it in memory only."""

    def __init__(self) -> None:
        self._keys: dict[str, SigningKey] = {}

    def __call__(self, origin: str) -> SigningKey:
        if origin not in self._keys:
            self._keys[origin] = SigningKey.generate(origin)
        return self._keys[origin]
