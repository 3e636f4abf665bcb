"""The write path: appending one entry to a run's log inside one transaction.

An append (1) locks the run row, (2) writes the entry, (3) extends the stored tree,
(4) signs and stores the new tree head, (5) writes the metric rows, (6) updates the run —
all in the caller's transaction, so a failure at any step leaves nothing of the entry
behind. The lock makes appends to one run strictly sequential: on PostgreSQL
``SELECT ... FOR UPDATE`` on the run row; on SQLite the write transaction already holds the
database's single write lock (``ledger/db.py``). The primary key (run, index) is the
backstop: even a writer that skipped the lock could not fork the log.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from attestation.keys import SigningKey
from ledger import tree_store
from ledger.envelope import KIND_FINAL, KIND_GENESIS, KIND_OUTER_STEP, build_body, check_kind
from ledger.errors import (
    ConflictError,
    DuplicateStepError,
    InvalidEntryError,
    LogKeyMismatchError,
    RunFinishedError,
    RunNotFoundError,
)
from ledger.merkle import leaf_hash
from ledger.models import (
    METRIC_KEY_LENGTH,
    STATUS_FINISHED,
    EnrolledKey,
    Entry,
    Metric,
    Run,
    TreeHead,
)
from ledger.tlog_checkpoint import Checkpoint, sign_checkpoint

ROLE_LOG = "log"
"""Enrolled-key role of a run's log key (the signer of its tree heads)."""

_TICK = timedelta(microseconds=1)
"""The resolution of ``recorded_at`` (RFC 3339 with microseconds, ledger/envelope.py)."""
_METRIC_KEY = re.compile(rf"[A-Za-z0-9_.:/-]{{1,{METRIC_KEY_LENGTH}}}")


@dataclass(frozen=True)
class NewEntry:
    """What the caller asks to record; validated on construction, before any transaction."""

    kind: str
    payload: Mapping[str, Any]
    step: int | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_kind(self.kind)
        if not isinstance(self.payload, Mapping):
            raise InvalidEntryError(
                f"expected a JSON object as payload, got {type(self.payload).__name__}"
            )
        if self.step is not None and (
            not isinstance(self.step, int) or isinstance(self.step, bool) or self.step < 0
        ):
            raise InvalidEntryError(f"expected a non-negative integer step, got {self.step!r}")
        if self.kind == KIND_OUTER_STEP and self.step is None:
            raise InvalidEntryError(f"{KIND_OUTER_STEP} entries need a step, got none")
        if self.metrics and self.step is None:
            raise InvalidEntryError(
                "metrics are recorded per outer step: expected a step, got none"
            )
        for key, value in self.metrics.items():
            if not isinstance(key, str) or not _METRIC_KEY.fullmatch(key):
                raise InvalidEntryError(
                    f"expected metric names of 1-{METRIC_KEY_LENGTH} "
                    f"letters, digits or ._:/-, got {key!r}"
                )
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
            ):
                raise InvalidEntryError(
                    f"expected a finite number for metric {key!r}, got {value!r}"
                )
        if self.metrics and "metrics" in self.payload:
            recorded = self.payload["metrics"]
            if not isinstance(recorded, Mapping) or dict(recorded) != dict(self.metrics):
                raise InvalidEntryError(
                    "payload['metrics'] must equal the metrics passed to append, got "
                    f"{recorded!r} and {dict(self.metrics)!r}"
                )

    def recorded_payload(self) -> dict[str, Any]:
        """The payload as written: with the metrics under ``metrics`` (added if absent), so
        the entry itself commits to the values the metrics table repeats."""
        payload = dict(self.payload)
        if self.metrics:
            payload["metrics"] = {key: float(value) for key, value in self.metrics.items()}
        return payload


def lock_run(session: Session, run_id: str) -> Run:
    """The run row, locked until the transaction ends (a no-op clause on SQLite, whose
    write transaction already holds the database lock)."""
    run = session.scalars(sa.select(Run).where(Run.id == run_id).with_for_update()).one_or_none()
    if run is None:
        raise RunNotFoundError(f"no run {run_id!r} in the ledger")
    return run


def check_log_key(session: Session, run: Run, key: SigningKey) -> None:
    """The key about to sign must be the run's enrolled log key."""
    enrolled = session.scalars(
        sa.select(EnrolledKey.vkey).where(
            EnrolledKey.run_id == run.id, EnrolledKey.role == ROLE_LOG
        )
    ).all()
    if key.public.vkey not in enrolled:
        raise LogKeyMismatchError(
            f"run {run.id!r}: the log key offered ({key.public.vkey}) is not the run's enrolled "
            f"log key ({', '.join(enrolled) or 'none'}); use the key directory the run started with"
        )


def append_locked(
    session: Session, run: Run, new: NewEntry, key: SigningKey, now: datetime
) -> Entry:
    """Append ``new`` to ``run`` (locked by :func:`lock_run` in this transaction)."""
    # Plain copies: after a failed flush the session has rolled back and ``run`` is expired.
    run_id, origin, index = run.id, run.origin, run.size
    if run.status == STATUS_FINISHED:
        raise RunFinishedError(
            f"run {run_id!r} is finished: nothing can be appended after {KIND_FINAL!r}"
        )
    if (new.kind == KIND_GENESIS) != (index == 0):
        raise InvalidEntryError(
            f"{KIND_GENESIS!r} must be entry 0 and only entry 0, got {new.kind!r} at index {index}"
        )
    if new.kind == KIND_OUTER_STEP and _has_outer_step(session, run_id, new.step):
        raise DuplicateStepError(f"run {run_id!r} already recorded outer step {new.step}")

    # 1. The entry, linked to its predecessor's leaf hash, and recorded strictly after it: a
    #    verifier insists that recorded_at only moves forward (quote endorsements are checked
    #    against it), so a clock that stepped back must not make an honest log fail.
    prev = None
    if index > 0:
        row = session.execute(
            sa.select(Entry.leaf_hash, Entry.recorded_at).where(
                Entry.run_id == run_id, Entry.index == index - 1
            )
        ).one()
        prev = row.leaf_hash
        now = max(now, row.recorded_at + _TICK)
    body = build_body(
        kind=new.kind,
        run_id=run_id,
        index=index,
        prev=prev,
        recorded_at=now,
        payload=new.recorded_payload(),
    )
    leaf = leaf_hash(body)
    entry = Entry(
        run_id=run_id,
        index=index,
        kind=new.kind,
        step=new.step,
        body=body,
        leaf_hash=leaf,
        recorded_at=now,
    )
    session.add(entry)
    try:
        session.flush()
    except sa.exc.IntegrityError as exc:  # only reachable by a writer that bypassed the lock
        raise ConflictError(f"run {run_id!r}: entry {index} was written concurrently") from exc

    # 2. The tree and its signed head at the new size.
    size = index + 1
    root = tree_store.append_leaf(session, run_id, index, leaf)
    note = sign_checkpoint(Checkpoint(origin=origin, size=size, root_hash=root), key)
    session.add(TreeHead(run_id=run_id, size=size, root_hash=root, note=note, created_at=now))

    # 3. The chart rows, repeating the metrics the entry records.
    if new.step is not None:
        session.add_all(
            Metric(run_id=run_id, step=new.step, key=k, value=float(v), entry_index=index)
            for k, v in new.metrics.items()
        )

    # 4. The run's summary.
    run.size = size
    run.updated_at = now
    if new.kind == KIND_OUTER_STEP:
        assert new.step is not None  # NewEntry insists
        run.outer_steps += 1
        run.latest_step = new.step if run.latest_step is None else max(run.latest_step, new.step)
    if new.kind == KIND_FINAL:
        run.status = STATUS_FINISHED
        run.finished_at = now
    try:
        session.flush()
    except sa.exc.IntegrityError as exc:
        raise ConflictError(f"run {run_id!r}: cannot record entry {index}: {exc.orig}") from exc
    return entry


def _has_outer_step(session: Session, run_id: str, step: int | None) -> bool:
    found = session.scalar(
        sa.select(Entry.index).where(
            Entry.run_id == run_id, Entry.kind == KIND_OUTER_STEP, Entry.step == step
        )
    )
    return found is not None
