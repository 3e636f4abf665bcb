"""C2SP signed notes: the spec's example verifies; every tampering the spec cares about is
rejected with a message that says what was wrong."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from attestation.keys import SigningKey
from ledger.errors import VerificationError
from ledger.note import open_note, sign_note, verify_note


@pytest.fixture
def example(testvectors: Path) -> dict[str, str]:
    data: dict[str, str] = json.loads((testvectors / "kat.json").read_text())[
        "signed_note_c2sp_example"
    ]
    return data


def test_the_c2sp_example_verifies(example: dict[str, str]) -> None:
    assert verify_note(example["note"], [example["vkey"]]) == example["text"]


def test_sign_then_verify_round_trips() -> None:
    key = SigningKey.generate("veritrain.local/runs/r1")
    text = "veritrain.local/runs/r1\n3\nAAAA\n"
    note = sign_note(text, key.skey)
    assert note.startswith(text + "\n\u2014 veritrain.local/runs/r1 ")
    assert verify_note(note, [key.public.vkey]) == text


def test_a_known_name_with_another_key_id_is_not_a_signature_from_a_known_key(
    example: dict[str, str],
) -> None:
    # Same name, different key: C2SP says ignore it; then no known key signed.
    other = SigningKey.generate("example.com/foo")
    with pytest.raises(VerificationError, match="no signature from a known key"):
        verify_note(example["note"], [other.public.vkey])


def test_a_signature_line_with_a_wrong_key_id_is_ignored_and_the_note_rejected(
    example: dict[str, str],
) -> None:
    text, [sig] = open_note(example["note"])
    forged_id = base64.b64encode(b"\x00\x00\x00\x00" + sig.signature).decode()
    note = f"{text}\n\u2014 {sig.name} {forged_id}\n"
    with pytest.raises(VerificationError, match=r"expected one of example.com/foo \(530d903a\)"):
        verify_note(note, [example["vkey"]])


def test_a_bad_signature_from_a_known_key_rejects_the_note(example: dict[str, str]) -> None:
    text, [sig] = open_note(example["note"])
    broken = sig.signature[:-1] + bytes([sig.signature[-1] ^ 1])
    blob = base64.b64encode(sig.key_id + broken).decode()
    note = f"{text}\n\u2014 {sig.name} {blob}\n"
    with pytest.raises(VerificationError, match="does not verify"):
        verify_note(note, [example["vkey"]])


def test_a_bad_known_signature_rejects_even_next_to_a_good_one() -> None:
    good = SigningKey.generate("log.example/a")
    other = SigningKey.generate("witness.example/b")
    text = "hello\n"
    signed = sign_note(text, good.skey)
    wrong = sign_note("other text\n", other.skey).split("\n\n", 1)[1]
    with pytest.raises(VerificationError, match=r"witness\.example/b"):
        verify_note(signed + wrong, [good.public.vkey, other.public.vkey])


def test_a_missing_final_newline_is_rejected(example: dict[str, str]) -> None:
    with pytest.raises(VerificationError, match="end with a newline"):
        verify_note(example["note"].rstrip("\n"), [example["vkey"]])


def test_a_body_that_is_not_the_signed_one_is_rejected(example: dict[str, str]) -> None:
    altered = example["note"].replace("example message", "example massage")
    with pytest.raises(VerificationError, match="does not verify"):
        verify_note(altered, [example["vkey"]])


def test_unknown_signatures_are_ignored_when_a_known_one_verifies() -> None:
    log = SigningKey.generate("log.example/a")
    witness = SigningKey.generate("witness.example/w")
    text = "checkpoint body\n"
    cosigned = sign_note(text, log.skey) + sign_note(text, witness.skey).split("\n\n", 1)[1]
    assert verify_note(cosigned, [log.public.vkey]) == text
    assert verify_note(cosigned, [witness.public.vkey]) == text


@pytest.mark.parametrize(
    ("note", "message"),
    [
        ("no signatures at all\n", "blank line"),
        ("text\n\n", "at least one signature"),
        ("text\n\nnot a signature\n", "malformed signature line"),
        ("text\n\n\u2014 name !!notbase64!!\n", "not base64"),
        ("text\n\n\u2014 name AAAA\n", "key id and a signature"),
        ("te\x07xt\n\n\u2014 name AAAAAAAA\n", "control character"),
    ],
)
def test_malformed_notes_are_rejected(note: str, message: str) -> None:
    vkey = SigningKey.generate("name").public.vkey
    with pytest.raises(VerificationError, match=message):
        verify_note(note, [vkey])


def test_signing_refuses_text_without_a_final_newline() -> None:
    with pytest.raises(VerificationError, match="newline"):
        sign_note("no newline", SigningKey.generate("k").skey)


def test_bad_verifier_keys_are_reported(example: dict[str, str]) -> None:
    with pytest.raises(VerificationError, match="bad verifier key"):
        verify_note(example["note"], ["example.com/foo+00000000+AAAA"])
    with pytest.raises(VerificationError, match="at least one verifier key"):
        verify_note(example["note"], [])
