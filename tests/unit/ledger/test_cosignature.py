"""C2SP tlog-cosignature v1 (Ed25519, signature type 0x04): the spec's own example, the key
id rule, and cosignatures that verify only over the exact checkpoint, time and key."""

from __future__ import annotations

import base64
import hashlib

import pytest

from attestation.errors import KeyFormatError
from attestation.keys import COSIGNATURE_V1_ALGORITHM, PublicKey, SigningKey
from ledger.cosignature import (
    Cosignature,
    cosign,
    cosignatures_in,
    cosigner_key,
    signed_message,
    verify_cosignature,
)
from ledger.errors import VerificationError
from ledger.note import open_note, sign_note, sign_note_with, verify_note
from ledger.tlog_checkpoint import Checkpoint, sign_checkpoint, verify_checkpoint

# The example of c2sp.org/tlog-cosignature ("Format" and "Ed25519 signed message").
SPEC_TEXT = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
SPEC_LINE = (
    "— witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJ"
    "sX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA=="
)
SPEC_MESSAGE = (
    "cosignature/v1\ntime 1679315147\nexample.com/behind-the-sofa\n20852163\n"
    "CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
)


@pytest.fixture
def witness() -> SigningKey:
    return SigningKey.generate("witness.example/w1", signature_type=COSIGNATURE_V1_ALGORITHM)


@pytest.fixture
def checkpoint_note() -> str:
    log = SigningKey.generate("example.com/log")
    return sign_checkpoint(
        Checkpoint(origin="example.com/log", size=7, root_hash=b"\x11" * 32), log
    )


def test_the_spec_example_line_carries_key_id_timestamp_and_a_64_byte_signature() -> None:
    _, [signature] = open_note(SPEC_TEXT + "\n" + SPEC_LINE + "\n")
    cosignature = Cosignature.from_note_signature(signature)

    assert cosignature.name == "witness.example.com/w1"
    assert cosignature.key_id == bytes.fromhex("8d66cf3f")
    # The same instant as the time line of the spec's signed-message example.
    assert cosignature.timestamp == 1679315147
    assert len(cosignature.signature) == 64
    assert cosignature.line() == SPEC_LINE + "\n"  # parsing and writing are inverse


def test_the_signed_message_is_the_spec_example_byte_for_byte() -> None:
    assert signed_message(SPEC_TEXT, 1679315147) == SPEC_MESSAGE.encode()


def test_a_witness_key_id_hashes_type_0x04_and_its_vkey_says_so(witness: SigningKey) -> None:
    public = witness.public
    raw = public.raw
    assert public.key_id == hashlib.sha256(b"witness.example/w1\n\x04" + raw).digest()[:4]
    assert public.key_id != hashlib.sha256(b"witness.example/w1\n\x01" + raw).digest()[:4]
    name, key_id, blob = public.vkey.split("+", 2)
    assert (name, key_id) == ("witness.example/w1", public.key_id.hex())
    assert base64.b64decode(blob) == b"\x04" + raw
    assert PublicKey.from_vkey(public.vkey, signature_type=COSIGNATURE_V1_ALGORITHM) == public
    # The private key string round-trips with its type.
    assert (
        SigningKey.from_skey(witness.skey, signature_type=COSIGNATURE_V1_ALGORITHM).public == public
    )


def test_a_witness_key_is_refused_where_a_note_key_is_expected_and_vice_versa(
    witness: SigningKey,
) -> None:
    with pytest.raises(KeyFormatError, match=r"expected signature type 0x01 \(Ed25519\), got 0x04"):
        PublicKey.from_vkey(witness.public.vkey)
    with pytest.raises(VerificationError, match="bad verifier key"):
        verify_note("hello\n\n— x AAAAAA==\n", [witness.public.vkey])
    with pytest.raises(VerificationError, match="expected signature type 0x01"):
        sign_note("hello\n", witness.skey)
    with pytest.raises(VerificationError, match="cosigner key"):
        sign_note_with("hello\n", witness)
    log_vkey = SigningKey.generate("example.com/log").public.vkey
    with pytest.raises(VerificationError, match="bad witness key"):
        cosigner_key(log_vkey)


def test_a_cosignature_verifies_over_the_exact_text_time_and_key(
    witness: SigningKey, checkpoint_note: str
) -> None:
    text, _ = open_note(checkpoint_note)
    cosignature = cosign(text, witness, 1_700_000_000)
    verify_cosignature(text, cosignature, witness.public)  # returns None

    altered = text.replace("\n7\n", "\n8\n")
    with pytest.raises(VerificationError, match="does not verify"):
        verify_cosignature(altered, cosignature, witness.public)
    later = Cosignature(
        cosignature.name, cosignature.key_id, cosignature.timestamp + 1, cosignature.signature
    )
    with pytest.raises(VerificationError, match="does not verify"):
        verify_cosignature(text, later, witness.public)
    other = SigningKey.generate("witness.example/w1", signature_type=COSIGNATURE_V1_ALGORITHM)
    with pytest.raises(VerificationError, match="from another key"):
        verify_cosignature(text, cosignature, other.public)
    # A plain note signature by the same key material is not a cosignature.
    with pytest.raises(VerificationError, match="cosigner key"):
        cosign(text, SigningKey(name=witness.name, seed=witness.seed), 1)


def test_cosignatures_on_a_checkpoint_are_found_and_the_log_signature_still_verifies(
    witness: SigningKey, checkpoint_note: str
) -> None:
    text, _ = open_note(checkpoint_note)
    second = SigningKey.generate("witness.example/w2", signature_type=COSIGNATURE_V1_ALGORITHM)
    note = checkpoint_note + cosign(text, witness, 10).line() + cosign(text, second, 11).line()

    found = cosignatures_in(note, [witness.public, second.public])
    assert sorted((v.key.name, v.cosignature.timestamp) for v in found) == [
        ("witness.example/w1", 10),
        ("witness.example/w2", 11),
    ]
    # Only a given witness counts; the others' lines and the log's are ignored.
    assert [v.key.name for v in cosignatures_in(note, [second.public])] == ["witness.example/w2"]


def test_a_corrupt_cosignature_from_a_given_witness_rejects_the_note(
    witness: SigningKey, checkpoint_note: str
) -> None:
    text, _ = open_note(checkpoint_note)
    line = cosign(text, witness, 10).line()
    blob = bytearray(base64.b64decode(line.split(" ")[-1]))
    blob[-1] ^= 1
    bad = f"— {witness.name} {base64.b64encode(bytes(blob)).decode()}\n"
    with pytest.raises(VerificationError, match="does not verify"):
        cosignatures_in(checkpoint_note + bad, [witness.public])


def test_a_log_checkpoint_with_cosignatures_verifies_under_the_log_key(
    witness: SigningKey,
) -> None:
    log = SigningKey.generate("example.com/log")
    note = sign_checkpoint(
        Checkpoint(origin="example.com/log", size=3, root_hash=b"\x22" * 32), log
    )
    text, _ = open_note(note)
    cosigned = note + cosign(text, witness, 5).line()
    assert verify_checkpoint(cosigned, [log.public.vkey]).size == 3
