"""Witness cosignatures of a run's signed tree heads, in the ``cosignatures`` table (the log
side of C2SP tlog-witness; the witness's own state is ``ledger/witness/``).

A cosignature is stored only after it verified against the witness's key over the stored
tree head's note text (C2SP tlog-cosignature), so what the API serves next to a tree head
is checked, not merely relayed. One row per (run, witness key, size): a witness asked again
about the same head answers with a newer timestamp, which replaces the older line (a
fresher statement about the same tree). The largest size a witness cosigned is where the
next submission to it starts its consistency proof.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from attestation.keys import PublicKey
from ledger.cosignature import Cosignature, parse_signature_lines, verify_cosignature
from ledger.errors import VerificationError
from ledger.models import Cosignature as CosignatureRow
from ledger.models import TreeHead
from ledger.note import open_note


def add(
    session: Session, head: TreeHead, witness: PublicKey, lines: str, now: datetime
) -> CosignatureRow:
    """Verify the cosignature(s) by ``witness`` among ``lines`` (newline-terminated signature
    lines, e.g. a witness's add-checkpoint answer) on ``head`` and store the newest."""
    # 1. The text every cosignature must cover: the tree head's note text as the log signed it.
    text, _ = open_note(head.note)
    # 2. The witness's lines (others are ignored, as C2SP signed-note asks), each verified.
    verified: list[Cosignature] = []
    for signature in parse_signature_lines(lines):
        if (signature.name, signature.key_id) != (witness.name, witness.key_id):
            continue
        cosignature = Cosignature.from_note_signature(signature)
        verify_cosignature(text, cosignature, witness)
        if cosignature.timestamp == 0:
            # tlog-witness: a witness's cosignature MUST NOT omit the timestamp.
            raise VerificationError(f"cosignature by {witness.name} has no timestamp (0)")
        verified.append(cosignature)
    if not verified:
        raise VerificationError(
            f"expected a cosignature by {witness.name} (key id {witness.key_id.hex()}), got none"
        )
    newest = max(verified, key=lambda c: c.timestamp)
    # 3. Insert, or replace an older statement about the same head.
    row = session.get(CosignatureRow, (head.run_id, witness.vkey, head.size))
    if row is None:
        row = CosignatureRow(
            run_id=head.run_id,
            witness_key=witness.vkey,
            size=head.size,
            witness_name=witness.name,
            root_hash=head.root_hash,
            line=newest.line(),
            timestamp=newest.timestamp,
            created_at=now,
        )
        session.add(row)
    elif row.timestamp < newest.timestamp:
        row.line, row.timestamp, row.created_at = newest.line(), newest.timestamp, now
    session.flush()
    return row


def witnessed_size(session: Session, run_id: str, witness_vkey: str) -> int:
    """The largest tree size of the run ``witness_vkey`` cosigned; 0 if none."""
    size = session.scalar(
        sa.select(sa.func.max(CosignatureRow.size)).where(
            CosignatureRow.run_id == run_id, CosignatureRow.witness_key == witness_vkey
        )
    )
    return int(size or 0)


def for_head(session: Session, run_id: str, size: int) -> list[CosignatureRow]:
    """Every cosignature stored for the run's tree head of ``size``, by witness name."""
    return list(
        session.scalars(
            sa.select(CosignatureRow)
            .where(CosignatureRow.run_id == run_id, CosignatureRow.size == size)
            .order_by(CosignatureRow.witness_name, CosignatureRow.witness_key)
        )
    )
