"""A run of 1,000 appended entries: every inclusion proof and a consistency proof between
every pair of an edge-covering sample of sizes verify against the signed tree heads; a
flipped byte, a deleted entry, reordered entries, a tampered tree node, tree head or metric
are all caught by ``Ledger.audit_run``."""

from __future__ import annotations

import random
import shutil
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from unit.ledger.ledger_helpers import ORIGIN, StepClock

from ledger.db import create_engine
from ledger.errors import VerificationError
from ledger.keyring import InMemoryLogKeys
from ledger.merkle import consistency_proof, inclusion_proof, verify_consistency, verify_inclusion
from ledger.service import Ledger
from ledger.tlog_checkpoint import verify_checkpoint

APPENDS = 1000
SIZE = APPENDS + 1  # plus the genesis entry


@dataclass(frozen=True)
class BigRun:
    path: Path
    vkey: str


@pytest.fixture(scope="module")
def big_run(migrated_template: Path, tmp_path_factory: pytest.TempPathFactory) -> BigRun:
    path = tmp_path_factory.mktemp("big") / "ledger.db"
    shutil.copyfile(migrated_template, path)
    keys = InMemoryLogKeys()
    engine = create_engine(f"sqlite:///{path}")
    ledger = Ledger(engine, origin=ORIGIN, log_keys=keys, clock=StepClock())
    ledger.create_run("big", {"model": "gpt-tiny"})
    for t in range(APPENDS):
        ledger.append(
            "big",
            "outer_step",
            {"t": t, "digest": f"{t:064x}"},
            step=t,
            metrics={"loss": 1 / (t + 1)},
        )
    engine.dispose()  # checkpoints the WAL into the file, so copies are complete
    return BigRun(path=path, vkey=keys(f"{ORIGIN}/runs/big").public.vkey)


@pytest.fixture
def ledger(big_run: BigRun) -> Iterator[Ledger]:
    engine = create_engine(f"sqlite:///{big_run.path}")
    yield Ledger(engine)
    engine.dispose()


@pytest.fixture
def tampered(big_run: BigRun, tmp_path: Path) -> Iterator[tuple[sqlite3.Connection, Ledger]]:
    """A copy of the big run, a raw connection to tamper with it (as someone with database
    access would, bypassing the ledger), and a ledger to audit it."""
    path = tmp_path / "copy.db"
    shutil.copyfile(big_run.path, path)
    raw = sqlite3.connect(path)
    engine = create_engine(f"sqlite:///{path}")
    yield raw, Ledger(engine)
    raw.close()
    engine.dispose()


def sample_sizes(n: int) -> list[int]:
    powers = [1 << k for k in range(n.bit_length()) if 1 << k <= n]
    edges = {1, 2, 3, n - 1, n} | {p + d for p in powers for d in (-1, 0, 1)}
    rng = random.Random(7)
    return sorted(s for s in edges | {rng.randint(1, n) for _ in range(10)} if 1 <= s <= n)


def test_every_inclusion_proof_verifies(ledger: Ledger, big_run: BigRun) -> None:
    head = verify_checkpoint(ledger.latest_tree_head("big").note, [big_run.vkey])
    assert head.size == SIZE
    leaves = [
        e.leaf_hash for start in range(0, SIZE, 1000) for e in ledger.entries("big", start, 1000)
    ]
    for index in range(SIZE):
        proof = ledger.inclusion_proof("big", index)
        verify_inclusion(leaves[index], index, SIZE, proof.hashes, head.root_hash)
    for size in sample_sizes(SIZE):  # and at older sizes, against the heads signed then
        root = verify_checkpoint(ledger.tree_head_at("big", size).note, [big_run.vkey]).root_hash
        for index in {0, size // 2, size - 1}:
            proof = ledger.inclusion_proof("big", index, size)
            assert list(proof.hashes) == inclusion_proof(leaves, index, size)
            verify_inclusion(leaves[index], index, size, proof.hashes, root)


def test_the_batch_of_all_proofs_equals_the_proofs_one_by_one(ledger: Ledger) -> None:
    leaves = [
        e.leaf_hash for start in range(0, SIZE, 1000) for e in ledger.entries("big", start, 1000)
    ]
    for size in (1, 2, 7, 64, 333, SIZE):
        batch = ledger.inclusion_proofs("big", size)
        assert [p.index for p in batch] == list(range(size))
        assert [p.leaf_hash for p in batch] == leaves[:size]
        for proof in batch:
            assert list(proof.hashes) == inclusion_proof(leaves, proof.index, size)
            assert proof.root_hash == ledger.tree_head_at("big", size).root_hash


def test_consistency_proofs_between_sampled_sizes_verify(ledger: Ledger, big_run: BigRun) -> None:
    sizes = sample_sizes(SIZE)
    assert {1, 2, 512, 513, 1000, SIZE} <= set(sizes)
    roots = {
        s: verify_checkpoint(ledger.tree_head_at("big", s).note, [big_run.vkey]).root_hash
        for s in sizes
    }
    leaves = [
        e.leaf_hash for start in range(0, SIZE, 1000) for e in ledger.entries("big", start, 1000)
    ]
    pairs = [(old, new) for old in sizes for new in sizes if old <= new]
    for old, new in pairs:
        proof = ledger.consistency_proof("big", old, new)
        verify_consistency(old, new, proof.hashes, roots[old], roots[new])
    for old, new in pairs[::25]:
        assert list(ledger.consistency_proof("big", old, new).hashes) == consistency_proof(
            leaves, old, new
        )


def test_the_untouched_run_audits(ledger: Ledger) -> None:
    summary = ledger.audit_run("big")
    assert summary.size == SIZE and summary.kinds["outer_step"] == APPENDS


@pytest.mark.parametrize("index", [0, 1, 511, 512, 777, SIZE - 2, SIZE - 1])
def test_a_flipped_byte_in_any_entry_is_caught(
    tampered: tuple[sqlite3.Connection, Ledger], index: int
) -> None:
    raw, ledger = tampered
    [body] = raw.execute("SELECT body FROM entries WHERE idx = ?", (index,)).fetchone()
    position = random.Random(index).randrange(len(body))
    flipped = body[:position] + bytes([body[position] ^ 0x01]) + body[position + 1 :]
    raw.execute("UPDATE entries SET body = ? WHERE idx = ?", (flipped, index))
    raw.commit()
    with pytest.raises(VerificationError) as caught:
        ledger.audit_run("big")
    assert caught.value.index == index, str(caught.value)


def test_a_flipped_byte_that_keeps_valid_json_is_caught_at_its_entry(
    tampered: tuple[sqlite3.Connection, Ledger],
) -> None:
    raw, ledger = tampered
    [body] = raw.execute("SELECT body FROM entries WHERE idx = 300").fetchone()
    forged = body.replace(b'"digest":"0000', b'"digest":"1000', 1)
    assert forged != body
    raw.execute("UPDATE entries SET body = ? WHERE idx = 300", (forged,))
    raw.commit()
    with pytest.raises(VerificationError, match="entry 300") as caught:
        ledger.audit_run("big")
    assert caught.value.index == 300


def test_a_deleted_entry_is_caught(tampered: tuple[sqlite3.Connection, Ledger]) -> None:
    raw, ledger = tampered
    raw.execute("DELETE FROM metrics WHERE entry_index = 400")
    raw.execute("DELETE FROM entries WHERE idx = 400")
    raw.commit()
    with pytest.raises(VerificationError, match="expected index 400, got 401") as caught:
        ledger.audit_run("big")
    assert caught.value.index == 400


def test_reordered_entries_are_caught(tampered: tuple[sqlite3.Connection, Ledger]) -> None:
    raw, ledger = tampered
    bodies = dict(raw.execute("SELECT idx, body FROM entries WHERE idx IN (600, 601)").fetchall())
    raw.execute("UPDATE entries SET body = ? WHERE idx = 600", (bodies[601],))
    raw.execute("UPDATE entries SET body = ? WHERE idx = 601", (bodies[600],))
    raw.commit()
    with pytest.raises(VerificationError, match="expected index 600, got 601"):
        ledger.audit_run("big")


def test_a_tampered_tree_node_is_caught(tampered: tuple[sqlite3.Connection, Ledger]) -> None:
    raw, ledger = tampered
    raw.execute("UPDATE tree_nodes SET hash = zeroblob(32) WHERE level = 3 AND idx = 20")
    raw.commit()
    with pytest.raises(VerificationError, match=r"tree node \(level 3, index 20\)") as caught:
        ledger.audit_run("big")
    assert caught.value.index == 160


def test_a_tampered_older_tree_head_is_caught(tampered: tuple[sqlite3.Connection, Ledger]) -> None:
    raw, ledger = tampered
    [note] = raw.execute("SELECT note FROM tree_heads WHERE size = 50").fetchone()
    raw.execute(
        "UPDATE tree_heads SET note = ? WHERE size = 50", (note.replace("\n50\n", "\n51\n"),)
    )
    raw.commit()
    with pytest.raises(VerificationError, match="does not verify"):
        ledger.audit_run("big")


def test_a_tampered_metric_row_is_caught(tampered: tuple[sqlite3.Connection, Ledger]) -> None:
    raw, ledger = tampered
    raw.execute("UPDATE metrics SET value = 0.0 WHERE entry_index = 900")
    raw.commit()
    with pytest.raises(VerificationError, match="entry 900: metric 'loss'"):
        ledger.audit_run("big")
