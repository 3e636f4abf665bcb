"""Verify any signed text the ledger hands out — a plain C2SP signed note, a tlog-checkpoint
(signed tree head) or a tlog-proof@v1 receipt — and describe what was established.

This is what ``veritrain note verify`` runs; it recognises the format from the text itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ledger.errors import VerificationError
from ledger.note import verify_note
from ledger.receipt import HEADER as RECEIPT_HEADER
from ledger.receipt import parse_receipt, verify_receipt
from ledger.tlog_checkpoint import parse_checkpoint, verify_checkpoint


@dataclass(frozen=True)
class VerifiedText:
    """The outcome of a successful verification."""

    kind: str
    """``note``, ``checkpoint`` or ``receipt``."""
    text: str
    """The signed text (for a receipt, its checkpoint text)."""
    summary: str
    """One line for a person."""


def verify_signed_text(
    data: str, vkeys: Sequence[str], *, entry_body: bytes | None = None
) -> VerifiedText:
    """Verify ``data`` under ``vkeys``; raise :class:`VerificationError` naming what failed.

    For a receipt, ``entry_body`` (the logged entry) lets the inclusion proof be checked too;
    without it only the checkpoint's signature is."""
    if data.startswith(RECEIPT_HEADER + "\n"):
        return _verify_receipt(data, vkeys, entry_body)
    if entry_body is not None:
        raise VerificationError("an entry body can only be checked against a tlog-proof receipt")
    text = verify_note(data, vkeys)
    try:
        checkpoint = parse_checkpoint(text)
    except VerificationError:
        return VerifiedText(kind="note", text=text, summary="signed note verified")
    return VerifiedText(
        kind="checkpoint",
        text=text,
        summary=(
            f"checkpoint verified: {checkpoint.origin} has {checkpoint.size} entries, "
            f"root {checkpoint.root_hash.hex()}"
        ),
    )


def _verify_receipt(data: str, vkeys: Sequence[str], entry_body: bytes | None) -> VerifiedText:
    receipt = parse_receipt(data)
    if entry_body is None:
        checkpoint = verify_checkpoint(receipt.checkpoint, vkeys)
        summary = (
            f"receipt checkpoint verified ({checkpoint.origin}, size {checkpoint.size}); "
            f"inclusion of entry {receipt.index} not checked: pass the entry body to check it"
        )
    else:
        checkpoint = verify_receipt(data, entry_body, vkeys)
        summary = (
            f"receipt verified: entry {receipt.index} is in {checkpoint.origin} at size "
            f"{checkpoint.size}, root {checkpoint.root_hash.hex()}"
        )
    return VerifiedText(kind="receipt", text=checkpoint.text(), summary=summary)
