"""The ledger's commands as a user runs them: `veritrain note verify`, `veritrain db upgrade`,
`veritrain runs` (the real console entry point, run in the test's process with its own argv,
working folder, environment and streams: unit/veritrain_in_process.py)."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest
from unit.ledger.ledger_helpers import StepClock
from unit.veritrain_in_process import run_veritrain

from ledger.db import create_engine, head_revisions, upgrade
from ledger.keyring import InMemoryLogKeys
from ledger.note import open_note
from ledger.service import Ledger


def veritrain(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_veritrain(
        list(args), cwd=cwd, env={"VERITRAIN_DATA_DIR": str(cwd / "data")}, stdin=stdin
    )


@pytest.fixture
def example(testvectors: Path, tmp_path: Path) -> tuple[Path, str, str]:
    data = json.loads((testvectors / "kat.json").read_text())["signed_note_c2sp_example"]
    path = tmp_path / "example.note"
    path.write_text(data["note"])
    return path, data["vkey"], data["text"]


def assert_one_line_failure(result: subprocess.CompletedProcess[str], *, says: str) -> None:
    assert result.returncode != 0
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("veritrain: error: ") and says in lines[0], lines[0]


def test_note_verify_accepts_the_c2sp_example(
    example: tuple[Path, str, str], tmp_path: Path
) -> None:
    path, vkey, text = example
    result = veritrain("note", "verify", "--vkey", vkey, str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == text
    assert "signed note verified" in result.stderr


def test_note_verify_reads_stdin(example: tuple[Path, str, str], tmp_path: Path) -> None:
    path, vkey, text = example
    result = veritrain("note", "verify", "--vkey", vkey, "-", cwd=tmp_path, stdin=path.read_text())
    assert (result.returncode, result.stdout) == (0, text)


def test_note_verify_rejects_an_altered_text(
    example: tuple[Path, str, str], tmp_path: Path
) -> None:
    path, vkey, _ = example
    path.write_text(path.read_text().replace("example message", "example massage"))
    assert_one_line_failure(
        veritrain("note", "verify", "--vkey", vkey, str(path), cwd=tmp_path), says="does not verify"
    )


def test_note_verify_rejects_a_signature_under_another_key_id(
    example: tuple[Path, str, str], tmp_path: Path
) -> None:
    path, vkey, _ = example
    text, [sig] = open_note(path.read_text())
    blob = base64.b64encode(b"\xde\xad\xbe\xef" + sig.signature).decode()
    path.write_text(f"{text}\n\u2014 {sig.name} {blob}\n")
    assert_one_line_failure(
        veritrain("note", "verify", "--vkey", vkey, str(path), cwd=tmp_path),
        says="no signature from a known key",
    )


def test_note_verify_rejects_a_missing_final_newline(
    example: tuple[Path, str, str], tmp_path: Path
) -> None:
    path, vkey, _ = example
    path.write_text(path.read_text().rstrip("\n"))
    assert_one_line_failure(
        veritrain("note", "verify", "--vkey", vkey, str(path), cwd=tmp_path), says="newline"
    )


def test_note_verify_rejects_a_corrupted_signature(
    example: tuple[Path, str, str], tmp_path: Path
) -> None:
    path, vkey, _ = example
    text, [sig] = open_note(path.read_text())
    broken = bytes([sig.signature[0] ^ 0x80]) + sig.signature[1:]
    path.write_text(f"{text}\n\u2014 {sig.name} {base64.b64encode(sig.key_id + broken).decode()}\n")
    assert_one_line_failure(
        veritrain("note", "verify", "--vkey", vkey, str(path), cwd=tmp_path), says="does not verify"
    )


def test_note_verify_rejects_a_bad_vkey(example: tuple[Path, str, str], tmp_path: Path) -> None:
    path, _, _ = example
    assert_one_line_failure(
        veritrain("note", "verify", "--vkey", "nonsense", str(path), cwd=tmp_path),
        says="bad verifier key",
    )


def test_db_upgrade_then_runs_lists_what_was_recorded(tmp_path: Path) -> None:
    # 1. Nothing yet: a friendly message, and no database file appears.
    result = veritrain("runs", cwd=tmp_path)
    assert result.returncode == 0
    assert "No ledger" in result.stdout and "veritrain demo" in result.stdout
    assert not (tmp_path / "data" / "ledger.db").exists()

    # 2. An empty, migrated ledger.
    result = veritrain("db", "upgrade", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"revision {head_revisions()[0]} (head)" in result.stdout
    assert "(head)" in veritrain("db", "current", cwd=tmp_path).stdout
    assert "has no runs yet" in veritrain("runs", cwd=tmp_path).stdout

    # 3. Two runs, one finished.
    engine = create_engine(f"sqlite:///{tmp_path / 'data' / 'ledger.db'}")
    ledger = Ledger(engine, origin="veritrain.local", log_keys=InMemoryLogKeys(), clock=StepClock())
    ledger.create_run("first", {})
    ledger.append("first", "run.final", {})
    ledger.create_run("second", {})
    for t in range(3):
        ledger.append("second", "outer_step", {}, step=t)
    engine.dispose()
    lines = veritrain("runs", cwd=tmp_path).stdout.splitlines()
    assert lines[0].split()[:4] == ["RUN", "STEPS", "ENTRIES", "STATUS"]
    assert lines[1].split()[:4] == ["second", "3", "4", "running"]
    assert lines[2].split()[:4] == ["first", "0", "2", "finished"]


def test_note_verify_checks_a_ledger_receipt_with_its_entry(tmp_path: Path) -> None:
    keys = InMemoryLogKeys()
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    upgrade(url)
    engine = create_engine(url)
    ledger = Ledger(engine, origin="veritrain.local", log_keys=keys)
    ledger.create_run("r1", {})
    entry = ledger.append("r1", "outer_step", {"t": 0}, step=0)
    (tmp_path / "r1.tlog-proof").write_text(ledger.receipt("r1", 1))
    (tmp_path / "entry.json").write_bytes(entry.body)
    (tmp_path / "head.note").write_text(ledger.latest_tree_head("r1").note)
    (tmp_path / "other.json").write_bytes(ledger.entry("r1", 0).body)
    engine.dispose()
    vkey = keys("veritrain.local/runs/r1").public.vkey

    head = veritrain("note", "verify", "--vkey", vkey, "head.note", cwd=tmp_path)
    assert head.returncode == 0 and "veritrain.local/runs/r1 has 2 entries" in head.stderr
    ok = veritrain(
        "note", "verify", "--vkey", vkey, "--entry", "entry.json", "r1.tlog-proof", cwd=tmp_path
    )
    assert ok.returncode == 0, ok.stderr
    assert "entry 1 is in veritrain.local/runs/r1 at size 2" in ok.stderr
    assert_one_line_failure(
        veritrain(
            "note", "verify", "--vkey", vkey, "--entry", "other.json", "r1.tlog-proof", cwd=tmp_path
        ),
        says="inclusion proof does not lead to the root",
    )
