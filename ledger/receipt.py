"""Per-entry offline receipts in the C2SP tlog-proof@v1 format
(https://c2sp.org/tlog-proof): an entry's index, its RFC 9162 inclusion proof, and the
signed checkpoint the proof leads to, in one text file.

    c2sp.org/tlog-proof@v1
    [extra <base64>]            optional, unauthenticated
    index <decimal>
    <base64 hash>               zero or more: leaf sibling first, root child last
    <blank line>
    <signed checkpoint, verbatim>

Anyone holding the entry body, the receipt and the log's verifier key can check that the
entry is in the log without asking the ledger anything.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ledger.errors import VerificationError
from ledger.merkle import HASH_SIZE, leaf_hash, verify_inclusion
from ledger.tlog_checkpoint import Checkpoint, verify_checkpoint

HEADER = "c2sp.org/tlog-proof@v1"
"""First line of every tlog-proof@v1 receipt."""

_INDEX_LINE = re.compile(r"index (0|[1-9][0-9]*)")


@dataclass(frozen=True)
class Receipt:
    """A parsed tlog-proof@v1 receipt; nothing in it is verified yet."""

    index: int
    proof: tuple[bytes, ...]
    checkpoint: str
    """The signed checkpoint note, verbatim."""
    extra: bytes | None = None

    def text(self) -> str:
        """The receipt in tlog-proof@v1 form."""
        lines = [HEADER]
        if self.extra is not None:
            lines.append(f"extra {base64.b64encode(self.extra).decode()}")
        lines.append(f"index {self.index}")
        lines.extend(base64.b64encode(h).decode() for h in self.proof)
        return "\n".join(lines) + "\n\n" + self.checkpoint


def parse_receipt(text: str) -> Receipt:
    """Parse a tlog-proof@v1 receipt, checking its format only."""
    head, sep, checkpoint = text.partition("\n\n")
    if not sep:
        raise VerificationError("malformed receipt: expected a blank line before the checkpoint")
    lines = head.split("\n")
    if lines[0] != HEADER:
        raise VerificationError(
            f"malformed receipt: expected first line {HEADER!r}, got {lines[0]!r}"
        )
    rest = lines[1:]
    extra = None
    if rest and rest[0].startswith("extra "):
        extra = _b64(rest.pop(0).removeprefix("extra "), what="extra data")
    if not rest or not (match := _INDEX_LINE.fullmatch(rest[0])):
        got = rest[0] if rest else "nothing"
        raise VerificationError(f"malformed receipt: expected 'index <decimal>', got {got!r}")
    proof = []
    for line in rest[1:]:
        digest = _b64(line, what="proof hash")
        if len(digest) != HASH_SIZE:
            raise VerificationError(
                f"malformed receipt: expected {HASH_SIZE}-byte "
                f"proof hashes, got {len(digest)} bytes"
            )
        proof.append(digest)
    return Receipt(
        index=int(match.group(1)), proof=tuple(proof), checkpoint=checkpoint, extra=extra
    )


def verify_receipt(
    receipt: str, entry_body: bytes, vkeys: Sequence[str], *, origin: str | None = None
) -> Checkpoint:
    """Return the verified checkpoint if ``receipt`` proves ``entry_body`` is in the log
    signed by one of ``vkeys`` (and, with ``origin``, that it is this log)."""
    # 1. Format.
    parsed = parse_receipt(receipt)
    # 2. The checkpoint must be signed by a trusted log key.
    checkpoint = verify_checkpoint(parsed.checkpoint, vkeys, origin=origin)
    # 3. The entry's leaf hash must be included in the checkpointed tree at the index.
    verify_inclusion(
        leaf_hash(entry_body), parsed.index, checkpoint.size, parsed.proof, checkpoint.root_hash
    )
    return checkpoint


def _b64(value: str, *, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise VerificationError(f"malformed receipt: {what} is not base64: {value!r}") from None
