"""The ledger service on SQLite: what a recorder writes and what the web app and the verifier
read back."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from unit.ledger.ledger_helpers import ORIGIN, log_vkey

from attestation.keys import SigningKey
from ledger.db import create_engine, upgrade
from ledger.errors import (
    DuplicateStepError,
    EntryNotFoundError,
    InvalidEntryError,
    InvalidRangeError,
    InvalidRequestError,
    InvalidRunIdError,
    LedgerError,
    LogKeyMismatchError,
    RunExistsError,
    RunFinishedError,
    RunNotFoundError,
    SchemaMissingError,
    TreeHeadNotFoundError,
)
from ledger.keyring import InMemoryLogKeys
from ledger.merkle import leaf_hash, root_hash, verify_consistency, verify_inclusion
from ledger.receipt import verify_receipt
from ledger.service import Ledger, read_runs
from ledger.tlog_checkpoint import verify_checkpoint


def start(ledger: Ledger, run_id: str = "r1", steps: int = 0) -> None:
    ledger.create_run(run_id, {"model": "gpt-tiny", "seed": 1})
    for t in range(steps):
        ledger.append(run_id, "outer_step", {"t": t}, step=t, metrics={"loss": 2.0 / (t + 1)})


def test_create_run_writes_the_genesis_entry_and_a_signed_head(
    ledger: Ledger, log_keys: InMemoryLogKeys
) -> None:
    genesis = ledger.create_run("r1", {"model": "gpt-tiny"})
    assert (genesis.index, genesis.kind, genesis.step) == (0, "run.genesis", None)
    envelope = genesis.envelope()
    assert (envelope.run, envelope.prev, envelope.payload) == ("r1", None, {"model": "gpt-tiny"})
    assert genesis.leaf_hash == leaf_hash(genesis.body)

    run = ledger.get_run("r1")
    assert (run.origin, run.status, run.size, run.outer_steps) == (
        f"{ORIGIN}/runs/r1",
        "running",
        1,
        0,
    )
    [key] = ledger.keys("r1")
    assert (key.role, key.name, key.vkey) == ("log", run.origin, log_vkey(log_keys, "r1"))
    assert ledger.log_public_key("r1").vkey == key.vkey

    head = ledger.latest_tree_head("r1")
    checkpoint = verify_checkpoint(head.note, [key.vkey], origin=run.origin)
    assert (checkpoint.size, checkpoint.root_hash) == (1, genesis.leaf_hash)


def test_appends_chain_each_entry_to_the_previous_one(
    ledger: Ledger, log_keys: InMemoryLogKeys
) -> None:
    start(ledger, steps=3)
    final = ledger.append("r1", "run.final", {"ok": True})
    entries = ledger.entries("r1")
    assert [e.index for e in entries] == [0, 1, 2, 3, 4]
    assert [e.kind for e in entries] == [
        "run.genesis",
        "outer_step",
        "outer_step",
        "outer_step",
        "run.final",
    ]
    for before, after in itertools.pairwise(entries):
        assert after.envelope().prev == before.leaf_hash.hex()
        assert after.recorded_at > before.recorded_at
    head = ledger.latest_tree_head("r1")
    assert head.size == 5 == final.index + 1
    assert head.root_hash == root_hash([e.leaf_hash for e in entries])
    verify_checkpoint(head.note, [log_vkey(log_keys, "r1")])


def test_metrics_go_into_the_entry_and_the_chart_table(ledger: Ledger) -> None:
    start(ledger)
    entry = ledger.append("r1", "outer_step", {"t": 0}, step=0, metrics={"loss": 3, "lr": 0.7})
    assert entry.payload["metrics"] == {"loss": 3.0, "lr": 0.7}
    ledger.append(
        "r1", "outer_step", {"t": 1, "metrics": {"loss": 2.5}}, step=1, metrics={"loss": 2.5}
    )
    points = ledger.metrics("r1")
    assert [(p.key, p.step, p.value, p.entry_index) for p in points] == [
        ("loss", 0, 3.0, 1),
        ("loss", 1, 2.5, 2),
        ("lr", 0, 0.7, 1),
    ]
    assert [p.key for p in ledger.metrics("r1", keys=["lr"])] == ["lr"]
    run = ledger.get_run("r1")
    assert (run.latest_step, run.outer_steps) == (1, 2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "outer_step", "step": None}, "need a step"),
        ({"kind": "eval", "metrics": {"loss": 1.0}}, "expected a step"),
        ({"step": 0, "metrics": {"loss": float("nan")}}, "finite number"),
        ({"step": 0, "metrics": {"bad key": 1.0}}, "metric names"),
        ({"step": -1}, "non-negative integer step"),
        (
            {"step": 0, "metrics": {"loss": 1.0}, "payload": {"metrics": {"loss": 2.0}}},
            "must equal",
        ),
        ({"kind": "Outer Step", "step": 0}, "entry kind"),
    ],
)
def test_invalid_appends_are_refused_before_anything_is_written(
    ledger: Ledger, kwargs: dict[str, object], message: str
) -> None:
    start(ledger)
    call: dict[str, object] = {"kind": "outer_step", "payload": {}, **kwargs}
    with pytest.raises(InvalidEntryError, match=message):
        ledger.append("r1", **call)  # type: ignore[arg-type]
    assert ledger.get_run("r1").size == 1


def test_an_outer_step_can_be_recorded_only_once(ledger: Ledger) -> None:
    start(ledger, steps=2)
    with pytest.raises(DuplicateStepError, match="already recorded outer step 1"):
        ledger.append("r1", "outer_step", {"t": 1, "resumed": True}, step=1)
    assert ledger.get_run("r1").size == 3
    assert [e.payload for e in ledger.entries("r1", 0, 10) if e.step == 1] == [
        {"t": 1, "metrics": {"loss": 1.0}}
    ]


def test_nothing_can_be_appended_after_run_final(ledger: Ledger) -> None:
    start(ledger, steps=1)
    ledger.append("r1", "run.final", {})
    run = ledger.get_run("r1")
    assert run.status == "finished" and run.finished_at is not None
    with pytest.raises(RunFinishedError, match="finished"):
        ledger.append("r1", "outer_step", {}, step=5)


def test_run_ids_and_duplicates_are_refused(ledger: Ledger) -> None:
    start(ledger)
    with pytest.raises(RunExistsError):
        ledger.create_run("r1", {})
    with pytest.raises(InvalidRunIdError):
        ledger.create_run("../r2", {})
    with pytest.raises(RunNotFoundError):
        ledger.append("nope", "outer_step", {}, step=0)
    with pytest.raises(InvalidRequestError, match="written by create_run"):
        ledger.append("r1", "run.genesis", {})


def test_reads_of_missing_things_raise_not_found(ledger: Ledger) -> None:
    start(ledger, steps=2)
    with pytest.raises(RunNotFoundError):
        ledger.get_run("r9")
    with pytest.raises(EntryNotFoundError, match="expected 0 <= index < 3"):
        ledger.entry("r1", 3)
    with pytest.raises(TreeHeadNotFoundError):
        ledger.tree_head_at("r1", 4)
    with pytest.raises(RunNotFoundError):
        ledger.metrics("r9")


def test_entries_are_paged(ledger: Ledger) -> None:
    start(ledger, steps=6)
    assert [e.index for e in ledger.entries("r1", start=2, limit=3)] == [2, 3, 4]
    assert [e.index for e in ledger.entries("r1", start=5, limit=10)] == [5, 6]
    assert ledger.entries("r1", start=50) == []
    with pytest.raises(InvalidRangeError):
        ledger.entries("r1", start=0, limit=0)
    with pytest.raises(InvalidRangeError):
        ledger.entries("r1", start=-1)


def test_proofs_verify_against_the_signed_heads(ledger: Ledger, log_keys: InMemoryLogKeys) -> None:
    start(ledger, steps=6)
    vkey = log_vkey(log_keys, "r1")
    for size in range(1, 8):
        head = verify_checkpoint(ledger.tree_head_at("r1", size).note, [vkey])
        for index in range(size):
            proof = ledger.inclusion_proof("r1", index, size)
            assert proof.root_hash == head.root_hash
            verify_inclusion(proof.leaf_hash, index, size, proof.hashes, head.root_hash)
        for old in range(1, size + 1):
            c = ledger.consistency_proof("r1", old, size)
            verify_consistency(old, size, c.hashes, c.old_root, c.new_root)
    latest = ledger.inclusion_proof("r1", 3)
    assert latest.size == 7


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda lg: lg.inclusion_proof("r1", 3, 3), "index < size 3"),
        (lambda lg: lg.inclusion_proof("r1", 0, 9), "between 1 and 4"),
        (lambda lg: lg.inclusion_proof("r1", 0, 0), "between 1 and 4"),
        (lambda lg: lg.consistency_proof("r1", 0, 3), "1 <= old <= new 3"),
        (lambda lg: lg.consistency_proof("r1", 4, 3), "1 <= old <= new 3"),
        (lambda lg: lg.consistency_proof("r1", 1, 5), "between 1 and 4"),
    ],
)
def test_bad_proof_ranges_are_refused(ledger: Ledger, call, message: str) -> None:  # type: ignore[no-untyped-def]
    start(ledger, steps=3)
    with pytest.raises(InvalidRangeError, match=message):
        call(ledger)


def test_receipts_verify_offline(ledger: Ledger, log_keys: InMemoryLogKeys) -> None:
    start(ledger, steps=4)
    vkey = log_vkey(log_keys, "r1")
    for entry in ledger.entries("r1"):
        receipt = ledger.receipt("r1", entry.index)
        checkpoint = verify_receipt(receipt, entry.body, [vkey], origin=f"{ORIGIN}/runs/r1")
        assert checkpoint.size == 5
    older = ledger.receipt("r1", 1, size=2)
    assert verify_receipt(older, ledger.entry("r1", 1).body, [vkey]).size == 2


def test_keys_are_enrolled_once_per_run_and_role(ledger: Ledger) -> None:
    start(ledger)
    attester = SigningKey.generate("attester.veritrain.local/r1").public
    first = ledger.enroll_key(attester, role="attester", run_id="r1")
    again = ledger.enroll_key(attester.vkey, role="attester", run_id="r1")
    assert first == again
    platform = SigningKey.generate("platform.veritrain.local").public
    ledger.enroll_key(platform, role="platform")
    assert [k.role for k in ledger.keys("r1")] == ["log", "attester"]
    assert [k.vkey for k in ledger.keys("r1", role="attester")] == [attester.vkey]
    assert [k.name for k in ledger.keys(None)] == ["platform.veritrain.local"]
    with pytest.raises(InvalidRequestError, match="role"):
        ledger.enroll_key(platform, role="Platform Root")
    with pytest.raises(InvalidRequestError, match="bad verifier key"):
        ledger.enroll_key("not-a-key", role="attester")
    with pytest.raises(RunNotFoundError):
        ledger.enroll_key(platform, role="attester", run_id="r9")


def test_runs_are_listed_newest_first(ledger: Ledger) -> None:
    start(ledger, "a")
    start(ledger, "b", steps=2)
    assert [(r.run_id, r.outer_steps) for r in ledger.list_runs()] == [("b", 2), ("a", 0)]


def test_a_ledger_without_keys_reads_but_never_writes(ledger: Ledger, engine: Engine) -> None:
    start(ledger, steps=1)
    reader = Ledger(engine)
    assert reader.get_run("r1").size == 2
    with pytest.raises(LedgerError, match="read-only"):
        reader.append("r1", "outer_step", {}, step=1)


def test_a_different_log_key_cannot_continue_a_run(ledger: Ledger, engine: Engine) -> None:
    start(ledger)
    other_machine = Ledger(engine, origin=ORIGIN, log_keys=InMemoryLogKeys())
    with pytest.raises(LogKeyMismatchError, match="not the run's enrolled log key"):
        other_machine.append("r1", "outer_step", {}, step=0)
    assert ledger.get_run("r1").size == 1


def test_two_threads_appending_on_sqlite_never_fork_the_log(ledger: Ledger) -> None:
    start(ledger)

    def appender(worker: int) -> None:
        for i in range(15):
            ledger.append("r1", "note", {"worker": worker, "i": i})

    threads = [threading.Thread(target=appender, args=(w,)) for w in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    entries = ledger.entries("r1")
    assert [e.index for e in entries] == list(range(31))
    assert sorted((e.payload["worker"], e.payload["i"]) for e in entries[1:]) == [
        (w, i) for w in range(2) for i in range(15)
    ]
    assert ledger.audit_run("r1").size == 31


def test_a_database_without_tables_says_to_upgrade(sqlite_url: str) -> None:
    engine = create_engine(sqlite_url)
    try:
        with pytest.raises(SchemaMissingError, match="veritrain db upgrade"):
            Ledger(engine).list_runs()
    finally:
        engine.dispose()


def test_read_runs_does_not_create_a_missing_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "ledger.db"
    with pytest.raises(SchemaMissingError):
        read_runs(f"sqlite:///{path}")
    assert not path.exists()
    upgrade(f"sqlite:///{path}")
    assert read_runs(f"sqlite:///{path}") == []


def test_engines_not_made_by_the_ledger_are_refused_on_sqlite(sqlite_url: str) -> None:
    plain = sa.create_engine(sqlite_url)
    with pytest.raises(ValueError, match=r"ledger\.db\.create_engine"):
        Ledger(plain)


def test_bodies_are_stored_exactly_as_hashed(ledger: Ledger, engine: Engine) -> None:
    start(ledger, steps=1)
    with engine.connect() as conn:
        body, digest = conn.execute(
            sa.text("SELECT body, leaf_hash FROM entries WHERE idx = 1")
        ).one()
    assert leaf_hash(body) == digest
    assert json.loads(body)["payload"] == {"t": 0, "metrics": {"loss": 2.0}}
