"""The ledger on a real PostgreSQL: concurrent appenders (threads and processes) never fork
the log or leave a gap, a step or run id is taken exactly once under contention, a failed
append leaves nothing, and proofs and the audit hold."""

from __future__ import annotations

import itertools
import multiprocessing
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa

from attestation.keys import SigningKey
from ledger.db import create_engine, upgrade
from ledger.errors import ConflictError, DuplicateStepError, RunExistsError
from ledger.merkle import verify_consistency, verify_inclusion
from ledger.receipt import verify_receipt
from ledger.service import Ledger
from ledger.tlog_checkpoint import verify_checkpoint

ORIGIN = "pg.veritrain.local"
RUN = "concurrent"


class FixedLogKeys:
    """Every process signs with the same log key (as workers sharing a key directory do)."""

    def __init__(self, skey: str) -> None:
        self._key = SigningKey.from_skey(skey)

    def __call__(self, origin: str) -> SigningKey:
        assert origin == self._key.name
        return self._key


@pytest.fixture
def log_key() -> SigningKey:
    return SigningKey.generate(f"{ORIGIN}/runs/{RUN}")


@pytest.fixture
def pg_url(postgres_url: str) -> str:
    upgrade(postgres_url)
    return postgres_url


@pytest.fixture
def ledger(pg_url: str, log_key: SigningKey) -> Iterator[Ledger]:
    engine = create_engine(pg_url, pool_size=8)
    yield Ledger(engine, origin=ORIGIN, log_keys=FixedLogKeys(log_key.skey))
    engine.dispose()


def _append_many(url: str, skey: str, worker: int, count: int) -> None:
    engine = create_engine(url)
    try:
        ledger = Ledger(engine, origin=ORIGIN, log_keys=FixedLogKeys(skey))
        for i in range(count):
            ledger.append(RUN, "note", {"worker": worker, "i": i})
    finally:
        engine.dispose()


def _assert_one_unforked_log(ledger: Ledger, writers: int, per_writer: int) -> None:
    size = 1 + writers * per_writer
    entries = ledger.entries(RUN, 0, 1000)
    # No gap: indices are exactly 0..size-1; no fork: one entry per index, each linked to
    # the one before, and every writer's every append landed exactly once.
    assert [e.index for e in entries] == list(range(size))
    assert sorted((e.payload["worker"], e.payload["i"]) for e in entries[1:]) == [
        (w, i) for w in range(writers) for i in range(per_writer)
    ]
    for before, after in itertools.pairwise(entries):
        assert after.envelope().prev == before.leaf_hash.hex()
    summary = ledger.audit_run(RUN)  # chain, every signed head, every stored tree node
    assert summary.size == size == ledger.get_run(RUN).size


def test_concurrent_threads_never_fork_the_log(ledger: Ledger) -> None:
    ledger.create_run(RUN, {})
    writers, per_writer = 4, 15
    barrier = threading.Barrier(writers)

    def writer(worker: int) -> None:
        barrier.wait()  # start together, so the appends really contend for the lock
        for i in range(per_writer):
            ledger.append(RUN, "note", {"worker": worker, "i": i})

    with ThreadPoolExecutor(writers) as pool:
        for future in [pool.submit(writer, w) for w in range(writers)]:
            future.result()
    _assert_one_unforked_log(ledger, writers, per_writer)


def test_concurrent_processes_never_fork_the_log(
    ledger: Ledger, pg_url: str, log_key: SigningKey
) -> None:
    ledger.create_run(RUN, {})
    writers, per_writer = 2, 15
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=_append_many, args=(pg_url, log_key.skey, w, per_writer))
        for w in range(writers)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
        assert process.exitcode == 0
    _assert_one_unforked_log(ledger, writers, per_writer)


def test_audits_during_appends_see_one_consistent_snapshot(ledger: Ledger) -> None:
    ledger.create_run(RUN, {})
    done = threading.Event()

    def writer() -> None:
        try:
            for i in range(40):
                ledger.append(RUN, "note", {"worker": 0, "i": i})
        finally:
            done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    audits = 0
    while not done.is_set() or audits == 0:
        # Entries, heads, nodes and metrics are read in several statements; a snapshot that
        # moved between them would report a log longer than its signed head.
        assert ledger.audit_run(RUN).size >= 1
        audits += 1
    thread.join()
    assert ledger.audit_run(RUN).size == 41


def _race(count: int, attempt: Callable[[], object]) -> list[object]:
    barrier = threading.Barrier(count)

    def one() -> object:
        barrier.wait()
        try:
            return attempt()
        except (DuplicateStepError, RunExistsError) as exc:
            return exc

    with ThreadPoolExecutor(count) as pool:
        return [f.result() for f in [pool.submit(one) for _ in range(count)]]


def test_a_step_raced_by_resumed_trainers_is_recorded_once(ledger: Ledger) -> None:
    ledger.create_run(RUN, {})
    outcomes = _race(4, lambda: ledger.append(RUN, "outer_step", {"t": 0}, step=0))
    assert sum(isinstance(o, DuplicateStepError) for o in outcomes) == 3
    assert ledger.get_run(RUN).outer_steps == 1
    assert ledger.get_run(RUN).size == 2


def test_a_run_id_raced_by_two_creators_is_created_once(ledger: Ledger) -> None:
    outcomes = _race(3, lambda: ledger.create_run(RUN, {}))
    assert sum(isinstance(o, RunExistsError) for o in outcomes) == 2
    assert [r.size for r in ledger.list_runs()] == [1]
    assert len(ledger.keys(RUN)) == 1


def test_a_failed_append_leaves_nothing_on_postgres(ledger: Ledger, pg_url: str) -> None:
    ledger.create_run(RUN, {})
    ledger.append(RUN, "outer_step", {}, step=0, metrics={"loss": 1.0})

    def counts() -> tuple[int, ...]:
        with ledger.engine.connect() as conn:
            return tuple(
                conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one()
                for t in ("entries", "tree_nodes", "tree_heads", "metrics")
            )

    before = counts()
    with pytest.raises(ConflictError, match="cannot record entry 2"):
        ledger.append(RUN, "eval", {}, step=0, metrics={"loss": 2.0})  # metrics PK clash
    assert counts() == before
    assert ledger.append(RUN, "eval", {}, step=0, metrics={"eval_loss": 2.0}).index == 2


def test_proofs_and_receipts_verify_on_postgres(ledger: Ledger, log_key: SigningKey) -> None:
    ledger.create_run(RUN, {})
    for t in range(40):
        ledger.append(RUN, "outer_step", {"t": t}, step=t, metrics={"loss": 1.0 / (t + 1)})
    vkey = log_key.public.vkey
    head = verify_checkpoint(ledger.latest_tree_head(RUN).note, [vkey])
    for entry in ledger.entries(RUN):
        proof = ledger.inclusion_proof(RUN, entry.index)
        verify_inclusion(entry.leaf_hash, entry.index, head.size, proof.hashes, head.root_hash)
        verify_receipt(ledger.receipt(RUN, entry.index), entry.body, [vkey])
    for old in (1, 2, 7, 8, 9, 16, 32, 33, 40, 41):
        c = ledger.consistency_proof(RUN, old)
        verify_consistency(old, head.size, c.hashes, c.old_root, c.new_root)
    assert ledger.audit_run(RUN).size == 41
    assert len(ledger.metrics(RUN, keys=["loss"])) == 40
