"""C2SP tlog-checkpoint (https://c2sp.org/tlog-checkpoint): a log's signed tree head.

The note text is at least three non-empty lines: the log origin, the tree size in ASCII
decimal with no leading zeroes, and the base64 RFC 6962 root hash; any further lines are
opaque extension lines. The checkpoint is signed as a C2SP signed note by a key whose name
is the origin.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from dataclasses import dataclass

from attestation.keys import SigningKey
from ledger.errors import VerificationError
from ledger.merkle import HASH_SIZE
from ledger.note import sign_note_with, verify_note

_DECIMAL = re.compile(r"0|[1-9][0-9]*")
_MAX_SIZE_DIGITS = 20
"""2^64 - 1 has 20 digits; a longer size line is refused before int() parses it."""


@dataclass(frozen=True)
class Checkpoint:
    """A tree head: the log's identity, its size and its RFC 6962 root hash."""

    origin: str
    size: int
    root_hash: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.origin or "\n" in self.origin:
            raise VerificationError(f"expected a non-empty one-line origin, got {self.origin!r}")
        if self.size < 0:
            raise VerificationError(f"expected a tree size >= 0, got {self.size}")
        if len(self.root_hash) != HASH_SIZE:
            raise VerificationError(
                f"expected a {HASH_SIZE}-byte root hash, got {len(self.root_hash)} bytes"
            )
        for line in self.extensions:
            if not line or "\n" in line:
                raise VerificationError(f"expected non-empty one-line extensions, got {line!r}")

    def text(self) -> str:
        """The note text of this checkpoint (what gets signed)."""
        lines = [self.origin, str(self.size), base64.b64encode(self.root_hash).decode()]
        return "".join(f"{line}\n" for line in [*lines, *self.extensions])


def parse_checkpoint(text: str) -> Checkpoint:
    """Parse checkpoint note text (not the signatures; see :func:`verify_checkpoint`)."""
    if not text.endswith("\n"):
        raise VerificationError("malformed checkpoint: expected text ending in a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise VerificationError(
            "malformed checkpoint: expected origin, size "
            f"and root hash lines, got {len(lines)} lines"
        )
    origin, size_line, root_line, *extensions = lines
    if not _DECIMAL.fullmatch(size_line) or len(size_line) > _MAX_SIZE_DIGITS:
        raise VerificationError(
            "malformed checkpoint: expected a decimal tree "
            f"size without leading zeroes, got {size_line[:40]!r}"
        )
    try:
        root = base64.b64decode(root_line, validate=True)
    except (binascii.Error, ValueError):
        raise VerificationError(
            f"malformed checkpoint: root hash is not base64: {root_line!r}"
        ) from None
    return Checkpoint(
        origin=origin, size=int(size_line), root_hash=root, extensions=tuple(extensions)
    )


def sign_checkpoint(checkpoint: Checkpoint, key: SigningKey) -> str:
    """The signed note of ``checkpoint``; the key's name must be the checkpoint's origin."""
    if key.name != checkpoint.origin:
        raise VerificationError(
            f"log key name must equal the origin: expected {checkpoint.origin!r}, got {key.name!r}"
        )
    return sign_note_with(checkpoint.text(), key)


def verify_checkpoint(note: str, vkeys: Sequence[str], *, origin: str | None = None) -> Checkpoint:
    """Verify a signed checkpoint against ``vkeys`` and return it. With ``origin``, the
    checkpoint must be that log's."""
    checkpoint = parse_checkpoint(verify_note(note, vkeys))
    if origin is not None and checkpoint.origin != origin:
        raise VerificationError(
            f"checkpoint is for another log: expected origin {origin!r}, got {checkpoint.origin!r}"
        )
    return checkpoint
