"""`veritrain witness keygen|serve|push` as a user runs them (the real entry point, run in the
test's process with its own argv, working folder, environment and streams:
unit/veritrain_in_process.py): what they print, and one clear line when something is wrong."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

from unit.veritrain_in_process import run_veritrain

from attestation.keys import COSIGNATURE_V1_ALGORITHM, SigningKey


def veritrain(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return run_veritrain(list(args), cwd=cwd, env={"VERITRAIN_DATA_DIR": str(cwd / "data"), **env})


def test_keygen_prints_only_the_witness_vkey_and_never_overwrites(tmp_path: Path) -> None:
    made = veritrain("witness", "keygen", "witness.example.org/w1", "--out", "w1.key", cwd=tmp_path)

    assert made.returncode == 0, made.stderr
    vkey = made.stdout.removesuffix("\n")
    assert "\n" not in vkey and made.stderr == ""
    name, _, blob = vkey.split("+", 2)
    assert name == "witness.example.org/w1" and base64.b64decode(blob)[0] == 0x04
    key_file = tmp_path / "w1.key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert SigningKey.load(key_file, signature_type=COSIGNATURE_V1_ALGORITHM).public.vkey == vkey

    again = veritrain(
        "witness", "keygen", "witness.example.org/w1", "--out", "w1.key", cwd=tmp_path
    )
    assert again.returncode != 0 and "already exists; keys are never replaced" in again.stderr
    assert SigningKey.load(key_file, signature_type=COSIGNATURE_V1_ALGORITHM).public.vkey == vkey


def test_serve_refuses_bad_arguments_with_one_line(tmp_path: Path) -> None:
    veritrain("witness", "keygen", "w1", "--out", "w1.key", cwd=tmp_path)
    log_vkey = SigningKey.generate("veritrain.local/runs/r1").public.vkey
    witness_vkey = SigningKey.generate("w2", signature_type=COSIGNATURE_V1_ALGORITHM).public.vkey
    cases = [
        (
            ["--key", "missing.key", "--db", "sqlite:///w.db", "--log", log_vkey],
            "cannot read missing.key",
        ),
        (
            ["--key", "w1.key", "--db", "mysql://x/y", "--log", log_vkey],
            "expected a sqlite:/// or postgresql:// URL",
        ),
        (
            ["--key", "w1.key", "--db", "sqlite:///w.db", "--log", witness_vkey],
            "--log: bad log key",
        ),
        (["--key", "w1.key", "--db", "sqlite:///w.db"], "expected at least one trusted log"),
    ]
    for args, says in cases:
        result = veritrain("witness", "serve", *args, cwd=tmp_path)
        assert result.returncode != 0, args
        assert says in " ".join(result.stderr.split()), (args, result.stderr)
        assert "Traceback" not in result.stderr


def test_push_needs_witnesses_and_a_ledger(tmp_path: Path) -> None:
    result = veritrain("witness", "push", cwd=tmp_path)
    assert result.returncode == 2
    assert (
        result.stderr
        == "veritrain: error: VERITRAIN_WITNESSES: expected at least one VKEY@URL, got none\n"
    )

    witness = SigningKey.generate("w1", signature_type=COSIGNATURE_V1_ALGORITHM).public.vkey
    result = veritrain(
        "witness", "push", cwd=tmp_path, VERITRAIN_WITNESSES=f"{witness}@http://127.0.0.1:9"
    )
    assert result.returncode == 2
    assert result.stderr.startswith("veritrain: error: no ledger database at ")
    assert not (tmp_path / "data").exists()  # nothing was created
