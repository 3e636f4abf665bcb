"""C2SP tlog-checkpoint bodies: exact text form, strict parsing, signature and origin checks."""

from __future__ import annotations

import hashlib

import pytest

from attestation.keys import SigningKey
from ledger.errors import VerificationError
from ledger.tlog_checkpoint import Checkpoint, parse_checkpoint, sign_checkpoint, verify_checkpoint

ROOT = hashlib.sha256(b"root").digest()


def test_text_form_is_origin_size_base64_root_then_extensions() -> None:
    checkpoint = Checkpoint(origin="example.com/log", size=20852163, root_hash=ROOT)
    lines = checkpoint.text().split("\n")
    assert lines[:2] == ["example.com/log", "20852163"]
    assert parse_checkpoint(checkpoint.text()) == checkpoint
    with_ext = Checkpoint(origin="o", size=0, root_hash=ROOT, extensions=("ext one", "two"))
    assert with_ext.text().endswith("\next one\ntwo\n")
    assert parse_checkpoint(with_ext.text()) == with_ext


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("o\n007\nAAAA\n", "leading zeroes"),
        ("o\n-1\nAAAA\n", "decimal tree size"),
        ("o\n1\n", "origin, size and root hash"),
        ("o\n1\n***\n", "not base64"),
        ("o\n1\nAAAA\n", "32-byte root hash"),
        ("\n1\n" + "A" * 43 + "=\n", "non-empty one-line origin"),
        ("o\n1\n" + "A" * 43 + "=\n\n", "non-empty one-line extensions"),
        ("o\n1\n" + "A" * 43 + "=", "ending in a newline"),
    ],
)
def test_malformed_checkpoints_are_rejected(text: str, message: str) -> None:
    with pytest.raises(VerificationError, match=message):
        parse_checkpoint(text)


def test_a_signed_checkpoint_verifies_only_for_its_origin_and_key() -> None:
    key = SigningKey.generate("veritrain.local/runs/r1")
    checkpoint = Checkpoint(origin=key.name, size=5, root_hash=ROOT)
    note = sign_checkpoint(checkpoint, key)
    assert verify_checkpoint(note, [key.public.vkey], origin=key.name) == checkpoint
    with pytest.raises(VerificationError, match=r"expected origin 'veritrain\.local/runs/r2'"):
        verify_checkpoint(note, [key.public.vkey], origin="veritrain.local/runs/r2")
    with pytest.raises(VerificationError, match="no signature from a known key"):
        verify_checkpoint(note, [SigningKey.generate(key.name).public.vkey])
    grown = note.replace("\n5\n", "\n6\n")
    with pytest.raises(VerificationError, match="does not verify"):
        verify_checkpoint(grown, [key.public.vkey])


def test_the_log_key_must_be_named_after_the_origin() -> None:
    with pytest.raises(VerificationError, match="log key name must equal the origin"):
        sign_checkpoint(
            Checkpoint(origin="a/log", size=1, root_hash=ROOT), SigningKey.generate("b")
        )
