"""A C2SP tlog-witness below HTTP: the add-checkpoint request format, the logs a witness
trusts, and the witness that checks and cosigns checkpoints with its state in a database.
The HTTP app is ``web/witness_app.py``; the command ``veritrain witness serve``."""

from __future__ import annotations

from ledger.witness.submission import AddCheckpoint, parse_add_checkpoint
from ledger.witness.trusted_logs import TrustedLogs
from ledger.witness.witness import CosignedCheckpoint, Witness, origin_hash

__all__ = [
    "AddCheckpoint",
    "CosignedCheckpoint",
    "TrustedLogs",
    "Witness",
    "origin_hash",
    "parse_add_checkpoint",
]
