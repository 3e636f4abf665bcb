"""C2SP tlog-proof@v1 receipts: format, parse, and offline verification of one entry."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from attestation.keys import SigningKey
from ledger.errors import VerificationError
from ledger.merkle import inclusion_proof, leaf_hash, root_hash
from ledger.receipt import HEADER, Receipt, parse_receipt, verify_receipt
from ledger.tlog_checkpoint import Checkpoint, sign_checkpoint

ORIGIN = "veritrain.local/runs/r1"
BODIES = [f'{{"entry":{i}}}'.encode() for i in range(11)]


@pytest.fixture
def key() -> SigningKey:
    return SigningKey.generate(ORIGIN)


def make_receipt(key: SigningKey, index: int, extra: bytes | None = None) -> str:
    leaves = [leaf_hash(b) for b in BODIES]
    note = sign_checkpoint(
        Checkpoint(origin=ORIGIN, size=len(leaves), root_hash=root_hash(leaves)), key
    )
    proof = tuple(inclusion_proof(leaves, index, len(leaves)))
    return Receipt(index=index, proof=proof, checkpoint=note, extra=extra).text()


def test_the_receipt_has_the_tlog_proof_layout(key: SigningKey) -> None:
    text = make_receipt(key, 6, extra=b"context")
    lines = text.split("\n")
    assert lines[0] == HEADER
    assert lines[1] == "extra Y29udGV4dA=="
    assert lines[2] == "index 6"
    assert lines[3 : 3 + 4] and all(len(line) == 44 for line in lines[3:7])
    assert lines[7] == ""
    assert lines[8] == ORIGIN
    parsed = parse_receipt(text)
    assert (parsed.index, parsed.extra, len(parsed.proof)) == (6, b"context", 4)
    assert parsed.text() == text


def test_every_entry_verifies_offline_with_its_receipt(key: SigningKey) -> None:
    for index, body in enumerate(BODIES):
        checkpoint = verify_receipt(
            make_receipt(key, index), body, [key.public.vkey], origin=ORIGIN
        )
        assert checkpoint.size == len(BODIES)


def test_a_receipt_does_not_vouch_for_another_entry(key: SigningKey) -> None:
    with pytest.raises(VerificationError, match="inclusion proof does not lead to the root"):
        verify_receipt(make_receipt(key, 3), BODIES[4], [key.public.vkey])


def test_a_receipt_with_a_moved_index_fails(key: SigningKey) -> None:
    text = make_receipt(key, 3).replace("index 3\n", "index 2\n")
    with pytest.raises(VerificationError):
        verify_receipt(text, BODIES[3], [key.public.vkey])


def test_a_receipt_signed_by_an_unknown_key_fails(key: SigningKey) -> None:
    stranger = SigningKey.generate(ORIGIN)
    with pytest.raises(VerificationError, match="no signature from a known key"):
        verify_receipt(make_receipt(key, 0), BODIES[0], [stranger.public.vkey])


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda t: t.replace(HEADER, "c2sp.org/tlog-proof@v2"), "first line"),
        (lambda t: t.replace("index 5", "index 05"), "index <decimal>"),
        (lambda t: t.replace("index 5", "idx 5"), "index <decimal>"),
        (lambda t: t.split("\n\n")[0] + "\n", "blank line before the checkpoint"),
        (lambda t: t.replace("index 5\n", "index 5\nAAAA\n"), "32-byte proof hashes"),
    ],
)
def test_malformed_receipts_are_rejected(
    key: SigningKey, mutate: Callable[[str], str], message: str
) -> None:
    with pytest.raises(VerificationError, match=message):
        parse_receipt(mutate(make_receipt(key, 5)))
