"""The body of a C2SP tlog-witness ``add-checkpoint`` request, and the ``text/x.tlog.size``
body of its 409 answer: one typed home for the format the log writes
(``veritrain/witnesses/push.py``) and the witness reads (``ledger/witness/witness.py``).

tlog-witness, "add-checkpoint": the body is

    old <size>\\n                 decimal, no leading zeroes (0 is "0")
    <base64 hash>\\n              zero to 63 consistency proof lines (RFC 6962 §2.1.2)
    \\n                           an empty line
    <checkpoint>                 a C2SP signed note (tlog-checkpoint), possibly several signatures
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

from ledger.errors import MalformedSubmissionError
from ledger.merkle import HASH_SIZE

MAX_PROOF_LINES = 63
"""tlog-witness: a client MUST NOT send more than 63 consistency proof lines."""

MAX_BODY_BYTES = 256 * 1024
"""Largest body a witness reads: 63 proof lines and a checkpoint with a few dozen
signatures fit in a few KiB; even 16 ML-DSA-44 signatures stay under 64 KiB."""

SIZE_CONTENT_TYPE = "text/x.tlog.size"
"""Content-Type of a 409 answer, whose body is the witness's latest cosigned size."""

MAX_SIZE = 2**63 - 1
"""Tree sizes are 64-bit signed in every database the ledger supports."""

_DECIMAL = re.compile(r"0|[1-9][0-9]{0,18}")
"""At most 19 digits: anything longer exceeds MAX_SIZE (and int() of a huge string is slow)."""


@dataclass(frozen=True)
class AddCheckpoint:
    """One add-checkpoint request."""

    old_size: int
    """Size of the checkpoint the client believes the witness last cosigned (0: none)."""
    proof: tuple[bytes, ...]
    """Consistency proof from ``old_size`` to the checkpoint's size (empty from 0)."""
    note: str
    """The signed checkpoint note."""

    def __post_init__(self) -> None:
        if not 0 <= self.old_size <= MAX_SIZE:
            raise MalformedSubmissionError(
                f"expected an old size in [0, 2^63), got {self.old_size}"
            )
        if len(self.proof) > MAX_PROOF_LINES:
            raise MalformedSubmissionError(
                f"expected at most {MAX_PROOF_LINES} consistency proof lines, got {len(self.proof)}"
            )
        for i, digest in enumerate(self.proof):
            if len(digest) != HASH_SIZE:
                raise MalformedSubmissionError(
                    f"expected {HASH_SIZE}-byte proof hashes, "
                    f"got {len(digest)} bytes on line {i + 2}"
                )

    def body(self) -> bytes:
        """The request body, as tlog-witness specifies it."""
        lines = [f"old {self.old_size}", *(base64.b64encode(h).decode() for h in self.proof)]
        return ("".join(f"{line}\n" for line in lines) + "\n" + self.note).encode()


def parse_add_checkpoint(body: bytes) -> AddCheckpoint:
    """Parse a request body; raise :class:`MalformedSubmissionError` (400) if it does not
    follow tlog-witness. The checkpoint note is returned unparsed and unverified."""
    if len(body) > MAX_BODY_BYTES:
        raise MalformedSubmissionError(
            f"expected a body of at most {MAX_BODY_BYTES} bytes, got {len(body)}"
        )
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedSubmissionError("expected a UTF-8 body, got undecodable bytes") from None
    # The first empty line ends the header: neither the old size line nor a base64 hash
    # can be empty, and the checkpoint starts with its (non-empty) origin line.
    end = text.find("\n\n")
    if end < 0:
        raise MalformedSubmissionError(
            "expected an old size line, proof lines and an empty line before the checkpoint"
        )
    old_line, *proof_lines = text[:end].split("\n")
    note = text[end + 2 :]
    if not old_line.startswith("old ") or not _DECIMAL.fullmatch(old_line[4:]):
        raise MalformedSubmissionError(
            "expected a first line 'old <size>' in decimal "
            f"without leading zeroes, got {old_line!r}"
        )
    old_size = int(old_line[4:])
    if old_size > MAX_SIZE:
        raise MalformedSubmissionError(f"expected an old size below 2^63, got {old_size}")
    if len(proof_lines) > MAX_PROOF_LINES:
        raise MalformedSubmissionError(
            f"expected at most {MAX_PROOF_LINES} consistency proof lines, got {len(proof_lines)}"
        )
    if not note:
        raise MalformedSubmissionError("expected a checkpoint after the empty line, got nothing")
    return AddCheckpoint(
        old_size=old_size,
        proof=tuple(_hash(line, i + 2) for i, line in enumerate(proof_lines)),
        note=note,
    )


def format_size(size: int) -> str:
    """The body of a 409 answer: the size in decimal and a newline."""
    return f"{size}\n"


def parse_size(body: str) -> int:
    """Read the body of a 409 answer (``text/x.tlog.size``)."""
    if not body.endswith("\n") or not _DECIMAL.fullmatch(body[:-1]):
        raise MalformedSubmissionError(
            "expected a decimal size and a newline in a "
            f"{SIZE_CONTENT_TYPE} body, got {body[:40]!r}"
        )
    size = int(body[:-1])
    if size > MAX_SIZE:
        raise MalformedSubmissionError(f"expected a size below 2^63, got {size}")
    return size


def _hash(line: str, number: int) -> bytes:
    try:
        digest = base64.b64decode(line, validate=True)
    except (binascii.Error, ValueError):
        raise MalformedSubmissionError(
            f"line {number}: expected a base64 consistency proof hash, got {line[:60]!r}"
        ) from None
    if len(digest) != HASH_SIZE:
        raise MalformedSubmissionError(
            f"line {number}: expected a {HASH_SIZE}-byte hash, got {len(digest)} bytes"
        )
    return digest
