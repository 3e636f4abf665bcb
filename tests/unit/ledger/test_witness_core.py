"""The witness below HTTP (``ledger.witness``): what it cosigns, what it remembers across a
restart, that concurrent requests cannot fork it, and how it follows its logs file."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
from unit.ledger.witness_helpers import SmallLog, add_checkpoint_body, small_log

from attestation.keys import COSIGNATURE_V1_ALGORITHM, SigningKey
from ledger.cosignature import cosignatures_in
from ledger.db import create_engine
from ledger.errors import (
    InconsistentCheckpointError,
    InvalidRequestError,
    OldSizeMismatchError,
    UnknownLogError,
    WitnessRefusal,
)
from ledger.note import open_note
from ledger.tlog_checkpoint import parse_checkpoint, sign_checkpoint
from ledger.witness import TrustedLogs, Witness


@pytest.fixture
def witness_db(migrated_template: Path, tmp_path: Path) -> str:
    path = tmp_path / "witness.db"
    shutil.copyfile(migrated_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def log(migrated_template: Path, tmp_path: Path) -> SmallLog:
    path = tmp_path / "log.db"
    shutil.copyfile(migrated_template, path)
    return small_log(f"sqlite:///{path}", entries=6)


@pytest.fixture
def witness_key() -> SigningKey:
    return SigningKey.generate("witness.test/w1", signature_type=COSIGNATURE_V1_ALGORITHM)


def open_witness(
    url: str, key: SigningKey, log: SmallLog, clock: float = 1_800_000_000.0
) -> Witness:
    return Witness(create_engine(url), key, TrustedLogs([log.vkey]), clock=lambda: clock)


def test_a_cosignature_covers_the_submitted_checkpoint_and_carries_the_witness_clock(
    witness_db: str, witness_key: SigningKey, log: SmallLog
) -> None:
    witness = open_witness(witness_db, witness_key, log, clock=1_800_000_123.9)
    note = log.note()

    lines = witness.add_checkpoint(add_checkpoint_body(0, [], note))

    [found] = cosignatures_in(note + lines, [witness_key.public])
    assert found.cosignature.timestamp == 1_800_000_123
    stored = witness.latest(log.origin)
    assert stored is not None and (stored.size, stored.root_hash) == (
        6,
        log.ledger.latest_tree_head(log.run_id).root_hash,
    )
    # The monitoring view holds the log's signature and the cosignature.
    _, signatures = open_note(stored.note)
    assert [s.name for s in signatures] == [log.origin, witness_key.name]


def test_a_restarted_witness_remembers_what_it_cosigned(
    witness_db: str, witness_key: SigningKey, log: SmallLog
) -> None:
    first = open_witness(witness_db, witness_key, log)
    first.add_checkpoint(add_checkpoint_body(0, [], log.note(4)))
    first._engine.dispose()  # the process ends

    log.grow(3)
    again = open_witness(witness_db, witness_key, log)  # a new process on the same database
    # It insists on the size it cosigned before the restart ...
    with pytest.raises(OldSizeMismatchError) as refused:
        again.add_checkpoint(add_checkpoint_body(0, [], log.note()))
    assert refused.value.size == 4
    # ... and accepts the log's growth from there, with a proof.
    again.add_checkpoint(add_checkpoint_body(4, log.proof(4, 9), log.note()))
    stored = again.latest(log.origin)
    assert stored is not None and stored.size == 9


def test_concurrent_submissions_cannot_fork_the_witness(
    witness_db: str, witness_key: SigningKey, log: SmallLog
) -> None:
    log.grow(6)  # sizes 1..12 are available
    witness = open_witness(witness_db, witness_key, log)
    witness.add_checkpoint(add_checkpoint_body(0, [], log.note(3)))
    # Eight requests race from the same stored size 3 to different sizes; each is valid on
    # its own. Exactly one may win; every other must learn the winner's size (409).
    sizes = list(range(5, 13))
    start = threading.Barrier(len(sizes))
    outcomes: dict[int, object] = {}

    def submit(size: int) -> None:
        body = add_checkpoint_body(3, log.proof(3, size), log.note(size))
        start.wait()
        try:
            outcomes[size] = witness.add_checkpoint(body)
        except WitnessRefusal as exc:
            outcomes[size] = exc

    threads = [threading.Thread(target=submit, args=(size,)) for size in sizes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    winners = [size for size, result in outcomes.items() if isinstance(result, str)]
    assert len(winners) == 1, outcomes
    losers = [result for result in outcomes.values() if not isinstance(result, str)]
    assert all(isinstance(r, OldSizeMismatchError) and r.size == winners[0] for r in losers), losers
    stored = witness.latest(log.origin)
    assert stored is not None and stored.size == winners[0]


def test_a_rolled_back_or_rewritten_log_is_never_cosigned(
    witness_db: str, witness_key: SigningKey, log: SmallLog, tmp_path: Path, migrated_template: Path
) -> None:
    witness = open_witness(witness_db, witness_key, log)
    witness.add_checkpoint(add_checkpoint_body(0, [], log.note()))  # size 6
    # The same run id recorded again with another history, its head re-signed with the key
    # the witness trusts (an operator rewriting the run).
    shutil.copyfile(migrated_template, tmp_path / "other.db")
    other = small_log(f"sqlite:///{tmp_path / 'other.db'}", entries=8)
    assert other.origin == log.origin
    text, _ = open_note(other.note())
    forged = sign_checkpoint(parse_checkpoint(text), log.keys(log.origin))
    with pytest.raises(InconsistentCheckpointError, match="not consistent"):
        witness.add_checkpoint(add_checkpoint_body(6, other.proof(6, 8), forged))
    # Rolled back: a smaller tree is refused however the old size is given.
    with pytest.raises(OldSizeMismatchError):
        witness.add_checkpoint(add_checkpoint_body(4, [], log.note(4)))
    stored = witness.latest(log.origin)
    assert stored is not None and stored.size == 6


def test_the_logs_file_is_reread_when_it_changes(
    witness_db: str, witness_key: SigningKey, log: SmallLog, tmp_path: Path, migrated_template: Path
) -> None:
    logs_file = tmp_path / "logs.txt"
    logs_file.write_text(f"# the first run\n{log.vkey}\n")
    witness = Witness(create_engine(witness_db), witness_key, TrustedLogs(logs_file=logs_file))
    witness.add_checkpoint(add_checkpoint_body(0, [], log.note()))

    shutil.copyfile(migrated_template, tmp_path / "second.db")
    second = small_log(f"sqlite:///{tmp_path / 'second.db'}", run_id="second-run", entries=3)
    with pytest.raises(UnknownLogError, match="second-run"):
        witness.add_checkpoint(add_checkpoint_body(0, [], second.note()))

    # Added without a restart (written atomically, as the docs ask).
    staging = tmp_path / "logs.new"
    staging.write_text(f"{log.vkey}\n{second.vkey}  # the second run\n")
    staging.replace(logs_file)
    witness.add_checkpoint(add_checkpoint_body(0, [], second.note()))

    # A broken edit keeps the last good list rather than dropping every log.
    staging.write_text("not a key\n")
    staging.replace(logs_file)
    log.grow(1)
    witness.add_checkpoint(add_checkpoint_body(6, log.proof(6, 7), log.note()))


def test_a_bad_log_key_or_no_log_at_all_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequestError, match="--log: bad log key"):
        TrustedLogs(["nonsense"])
    with pytest.raises(InvalidRequestError, match="at least one trusted log"):
        TrustedLogs([])
    bad = tmp_path / "logs.txt"
    bad.write_text("# ok\n\nnot-a-key\n")
    with pytest.raises(InvalidRequestError, match=r"logs.txt:3: bad log key"):
        TrustedLogs(logs_file=bad)
