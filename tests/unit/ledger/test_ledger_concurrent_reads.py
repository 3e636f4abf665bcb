"""Readers never fail while a run appends (SQLite, WAL).

``veritrain serve`` and ``veritrain verify`` open their own connections to a ledger a training
run is writing. Each reader here opens a fresh engine again and again (as a new CLI process or
a web worker does), reads the latest tree head, the entries and an inclusion proof in one
snapshot, and checks the proof; a writer appends in bursts, reopening its engine between them
(as a run resumed after a crash does). No read may raise, and every snapshot is consistent."""

from __future__ import annotations

import multiprocessing
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

from unit.ledger.ledger_helpers import ORIGIN, StepClock

from attestation.keys import SigningKey
from ledger.db import create_engine, upgrade
from ledger.merkle import verify_inclusion
from ledger.service import Ledger

BURSTS = 4
APPENDS_PER_BURST = 15
READERS = 3


def _log_key(origin: str) -> SigningKey:
    """The same log key in every process (the writer is a process of its own)."""
    return SigningKey(name=origin, seed=b"\x07" * 32)


def _append_in_bursts(url: str, start: Any) -> None:
    start.wait(timeout=120)  # every reader has read once (and nobody spins while we import)
    for burst in range(BURSTS):
        engine = create_engine(url)
        try:
            ledger = Ledger(engine, origin=ORIGIN, log_keys=_log_key, clock=StepClock())
            for i in range(APPENDS_PER_BURST):
                t = burst * APPENDS_PER_BURST + i
                ledger.append("run", "outer_step", {"t": t}, step=t, metrics={"loss": 1 / (t + 1)})
        finally:
            engine.dispose()  # the last connection closing checkpoints and removes the WAL


def _read_until_done(url: str, done: Any, results: Any, start: Any) -> None:
    sizes: list[int] = []
    errors: list[str] = []
    waited = False
    while True:
        finished = done.is_set()
        engine = create_engine(url)
        try:
            ledger = Ledger(engine)
            head = ledger.latest_tree_head("run")
            proof = ledger.inclusion_proof("run", head.size - 1, head.size)
            verify_inclusion(proof.leaf_hash, proof.index, proof.size, proof.hashes, head.root_hash)
            if len(ledger.entries("run", 0, head.size)) != head.size:
                errors.append(f"fewer than {head.size} entries under a head of that size")
            sizes.append(head.size)
        except Exception as exc:  # every failure is reported, whatever its kind
            errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            engine.dispose()
        if finished:
            break
        if not waited:
            start.wait(timeout=120)  # read once, then wait for the writer to be ready
            waited = True
    results.put((sizes, errors))


def test_upgrade_puts_a_new_database_in_wal_mode_once(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    upgrade(f"sqlite:///{path}")
    # WAL is a property of the file (https://sqlite.org/wal.html#persistence_of_wal_mode):
    # a plain connection that sets nothing sees it.
    with sqlite3.connect(path) as plain:
        assert plain.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_a_reader_does_not_wait_on_a_writer_to_ask_for_wal(
    migrated_template: Path, tmp_path: Path
) -> None:
    # A ledger file in rollback-journal mode (restored with `sqlite3 .dump`, or made by another
    # tool) while a writer holds its write lock: readers may read, but switching the file to
    # WAL needs the lock, so a reader that asked for WAL on connect failed with "database is
    # locked" after the 30 s busy timeout.
    path = tmp_path / "ledger.db"
    shutil.copyfile(migrated_template, path)
    engine = create_engine(f"sqlite:///{path}")
    Ledger(engine, origin=ORIGIN, log_keys=_log_key, clock=StepClock()).create_run("run", {})
    engine.dispose()
    with sqlite3.connect(path) as plain:
        assert plain.execute("PRAGMA journal_mode = DELETE").fetchone() == ("delete",)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("UPDATE runs SET status = status")
    try:
        reader = create_engine(f"sqlite:///{path}")
        started = time.monotonic()
        try:
            assert Ledger(reader).latest_tree_head("run").size == 1
        finally:
            reader.dispose()
        assert time.monotonic() - started < 5, "the reader waited for the writer's lock"
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    upgrade(f"sqlite:///{path}")  # what every run does when it starts
    with sqlite3.connect(path) as plain:
        assert plain.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_readers_never_fail_while_a_run_appends(migrated_template: Path, tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    shutil.copyfile(migrated_template, path)
    url = f"sqlite:///{path}"
    engine = create_engine(url)
    Ledger(
        engine,
        origin=ORIGIN,
        log_keys=_log_key,
        clock=StepClock(),
    ).create_run("run", {"model": "gpt-tiny"})
    engine.dispose()

    spawn = multiprocessing.get_context("spawn")
    done, results = spawn.Event(), spawn.Queue()
    # The writer's first append waits until every reader has read once; the readers wait there
    # too, so that none of them spins while the others and the writer start (imports).
    start = spawn.Barrier(READERS + 1)
    readers = [
        spawn.Process(target=_read_until_done, args=(url, done, results, start))
        for _ in range(READERS)
    ]
    writer = spawn.Process(target=_append_in_bursts, args=(url, start))
    for process in [*readers, writer]:
        process.start()
    writer.join(timeout=240)
    done.set()
    outcomes = [results.get(timeout=120) for _ in readers]
    for reader in readers:
        reader.join(timeout=60)
    assert writer.exitcode == 0, "the writer failed"

    final = 1 + BURSTS * APPENDS_PER_BURST
    for sizes, errors in outcomes:
        assert errors == []
        assert sizes == sorted(sizes), "a reader saw the log shrink"
        assert sizes[-1] == final
    assert sum(len(sizes) for sizes, _ in outcomes) > 3 * READERS, "the readers hardly read"
