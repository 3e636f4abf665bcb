"""The ledger's error hierarchy. The web layer maps these to HTTP statuses in one handler,
the CLI to one line and a non-zero exit."""

from __future__ import annotations


class LedgerError(Exception):
    """Base of every error raised by ``ledger``."""


class VerificationError(LedgerError):
    """A Merkle proof, signed note, tree head or hash chain does not verify.

    Messages say what was expected and what was found (and, for run-level checks, which
    entry index)."""


class NotFoundError(LedgerError):
    """A run, entry, tree head or key does not exist."""
