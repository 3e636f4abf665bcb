from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from attestation.errors import KeyFormatError, SignatureError
from attestation.keys import PublicKey, SigningKey, load_or_create


def test_c2sp_example_vkey_parses_with_its_key_id(testvectors: Path) -> None:
    example = json.loads((testvectors / "kat.json").read_text())["signed_note_c2sp_example"]
    key = PublicKey.from_vkey(example["vkey"])
    assert key.name == "example.com/foo"
    assert key.key_id.hex() == "530d903a"
    assert key.vkey == example["vkey"]


def test_key_strings_round_trip_and_sign() -> None:
    key = SigningKey.generate("veritrain.local/runs/r1")
    assert SigningKey.from_skey(key.skey) == key
    public = PublicKey.from_vkey(key.public.vkey)
    public.verify(key.sign(b"msg"), b"msg")
    with pytest.raises(SignatureError):
        public.verify(key.sign(b"msg"), b"other")


def test_vkey_with_wrong_key_id_is_rejected() -> None:
    vkey = SigningKey.generate("a").public.vkey
    name, _, blob = vkey.split("+", 2)
    with pytest.raises(KeyFormatError, match="key id mismatch"):
        PublicKey.from_vkey(f"{name}+00000000+{blob}")


def test_saved_key_is_private_and_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "log.key"
    key = load_or_create(path, "log")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create(path, "log") == key
    with pytest.raises(FileExistsError):
        SigningKey.generate("log").save(path)
    path.chmod(0o644)
    with pytest.raises(KeyFormatError, match="chmod 600"):
        SigningKey.load(path)
