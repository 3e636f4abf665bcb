"""The witness's state and the log's cosignatures on a real PostgreSQL: row locks keep
concurrent submissions from forking the witness (including the very first one, decided by
the primary key), a restart keeps the state, and cosignatures are stored and served."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
from unit.ledger.witness_helpers import SmallLog, add_checkpoint_body, serve_in_thread, small_log

from attestation.keys import COSIGNATURE_V1_ALGORITHM, SigningKey
from ledger.cosignature import cosignatures_in
from ledger.db import create_engine, upgrade
from ledger.errors import OldSizeMismatchError, WitnessRefusal
from ledger.witness import TrustedLogs, Witness
from veritrain.witnesses.endpoints import WitnessEndpoint
from veritrain.witnesses.push import BackgroundPusher, push_latest
from web.witness_app import WitnessSettings, create_witness_app

KEY = SigningKey.generate("witness.test/pg", signature_type=COSIGNATURE_V1_ALGORITHM)


@pytest.fixture
def log(postgres_url: str) -> Iterator[SmallLog]:
    upgrade(postgres_url)
    log = small_log(postgres_url, entries=3)
    log.grow(10)  # sizes 1..13
    yield log
    log.ledger.engine.dispose()


def race(witness: Witness, bodies: list[bytes]) -> list[str | WitnessRefusal]:
    start = threading.Barrier(len(bodies))
    results: list[str | WitnessRefusal] = [""] * len(bodies)

    def submit(i: int) -> None:
        start.wait()
        try:
            results[i] = witness.add_checkpoint(bodies[i])
        except WitnessRefusal as exc:
            results[i] = exc

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_concurrent_first_and_later_submissions_cannot_fork_the_witness_on_postgresql(
    postgres_url: str, log: SmallLog
) -> None:
    witness = Witness(create_engine(postgres_url), KEY, TrustedLogs([log.vkey]))
    # The first ever submission for the origin: no row to lock, the primary key decides.
    first = race(witness, [add_checkpoint_body(0, [], log.note(size)) for size in range(2, 8)])
    winners = [r for r in first if isinstance(r, str)]
    assert len(winners) == 1, first
    stored = witness.latest(log.origin)
    assert stored is not None
    assert all(
        isinstance(r, OldSizeMismatchError) and r.size == stored.size
        for r in first
        if not isinstance(r, str)
    )

    # From the stored size, to different larger sizes: the row lock serialises them.
    old = stored.size
    later = race(
        witness,
        [
            add_checkpoint_body(old, log.proof(old, size), log.note(size))
            for size in range(old + 1, 14)
        ],
    )
    assert len([r for r in later if isinstance(r, str)]) == 1, later
    final = witness.latest(log.origin)
    assert final is not None and final.size > old
    witness._engine.dispose()

    # A new process (engine) on the same database holds the same state.
    restarted = Witness(create_engine(postgres_url), KEY, TrustedLogs([log.vkey]))
    with pytest.raises(OldSizeMismatchError) as refused:
        restarted.add_checkpoint(add_checkpoint_body(0, [], log.note()))
    assert refused.value.size == final.size
    restarted._engine.dispose()


def test_cosignatures_are_stored_and_served_from_postgresql(
    postgres_url: str, log: SmallLog
) -> None:
    # The witness keeps its state in the same PostgreSQL database (its own table).
    app = create_witness_app(
        WitnessSettings(key=KEY, database_url=postgres_url, logs=TrustedLogs([log.vkey]))
    )
    with ExitStack() as stack:
        url = stack.enter_context(serve_in_thread(app))
        endpoint = WitnessEndpoint(vkey=KEY.public.vkey, url=url)
        result = push_latest(log.ledger, log.run_id, [endpoint])
        assert [o.detail for o in result.outcomes] == ["cosigned size 13 (from 0)"]
        log.grow(2)
        pusher = BackgroundPusher(log.ledger, [endpoint])
        pusher.notify(log.run_id)
        pusher.close()
        assert [o.detail for o in pusher.results[log.run_id].outcomes] == [
            "cosigned size 15 (from 13)"
        ]

    assert log.ledger.witnessed_size(log.run_id, KEY.public.vkey) == 15
    [record] = log.ledger.cosignatures(log.run_id)
    assert (record.size, record.witness_name) == (15, "witness.test/pg")
    note = log.ledger.cosigned_tree_head(log.run_id).note
    [found] = cosignatures_in(note, [KEY.public])
    assert found.cosignature.timestamp == record.timestamp
    assert (
        len(cosignatures_in(log.ledger.cosigned_tree_head(log.run_id, 13).note, [KEY.public])) == 1
    )
