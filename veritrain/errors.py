"""Errors of the composition root (verify, reproduce, the recorder's wiring). The CLI turns
them, like every package's errors, into one line and exit status 2."""

from __future__ import annotations


class VeritrainError(Exception):
    """Base of the errors raised by ``veritrain/`` itself."""
