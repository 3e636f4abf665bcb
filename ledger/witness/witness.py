"""A C2SP tlog-witness (https://c2sp.org/tlog-witness), below HTTP: it checks a submitted
checkpoint against the latest one it cosigned for that log, and cosigns it if the log only
grew.

For one add-checkpoint request, in the order of the spec's checks:

1. parse the body (400 when malformed);
2. the checkpoint's origin must be a configured log (404);
3. a signature from a key trusted for that origin must verify, and none from such a key may
   fail (403); signatures from other keys are ignored;
4. the old size must not exceed the checkpoint's size (400);
5. in one transaction, with the witness's row for the origin locked:
   the old size must equal the size last cosigned, 0 if none (409, answered with that size);
   a size-0 checkpoint must have the empty tree's root (422); from old size 0 the proof must
   be empty (422); otherwise the RFC 6962 consistency proof from the stored (size, root) to
   the new one must verify, and at equal sizes the roots must be equal (422);
   then the new (size, root) and the cosigned note are stored and the transaction commits
   before the cosignature is returned.

Check and store share one transaction that holds the row (``SELECT ... FOR UPDATE`` on
PostgreSQL; SQLite's write lock, taken at ``BEGIN IMMEDIATE``, on SQLite), so two concurrent
requests cannot both advance from the same state -- the race the spec spells out -- and a
restart never forgets what was cosigned. A first cosigning for an origin inserts the row; a
concurrent first insert loses on the primary key and is answered 409 like any stale request.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from attestation.keys import COSIGNATURE_V1_ALGORITHM, PublicKey, SigningKey
from ledger import db
from ledger.cosignature import Cosignature, cosign
from ledger.errors import (
    InconsistentCheckpointError,
    MalformedSubmissionError,
    NotFoundError,
    OldSizeMismatchError,
    UnknownLogError,
    UntrustedCheckpointError,
    VerificationError,
)
from ledger.merkle import EMPTY_ROOT, verify_consistency
from ledger.models import NAME_LENGTH, VKEY_LENGTH, WitnessCheckpoint
from ledger.note import NoteSignature, open_note, verify_note
from ledger.tlog_checkpoint import Checkpoint, parse_checkpoint
from ledger.witness.submission import MAX_SIZE, AddCheckpoint, parse_add_checkpoint
from ledger.witness.trusted_logs import TrustedLogs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CosignedCheckpoint:
    """What the witness holds for one log: the latest checkpoint it cosigned."""

    origin: str
    size: int
    root_hash: bytes
    note: str
    """The checkpoint with the log signature(s) the witness verified and its cosignature."""
    updated_at: datetime


def origin_hash(origin: str) -> str:
    """tlog-witness monitoring path element: lowercase hex SHA-256 of the origin."""
    return hashlib.sha256(origin.encode()).hexdigest()


class Witness:
    """Cosigns checkpoints of the logs in ``logs`` with ``key``, keeping its state in the
    database behind ``engine`` (a ledger database: ``ledger.db.create_engine``, migrated)."""

    def __init__(
        self,
        engine: Engine,
        key: SigningKey,
        logs: TrustedLogs,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        db.check_engine(engine)
        if key.signature_type != COSIGNATURE_V1_ALGORITHM:
            raise VerificationError(
                f"expected a witness key of signature type 0x04, got 0x{key.signature_type:02x}"
                f" for {key.name!r} (create one with `veritrain witness keygen`)"
            )
        if len(key.public.vkey) > VKEY_LENGTH:
            raise VerificationError(
                f"expected a witness key name of at most {NAME_LENGTH} characters"
            )
        self._engine = engine
        self._key = key
        self._vkey = key.public.vkey
        self._logs = logs
        self._clock = clock

    @property
    def vkey(self) -> str:
        """The witness's C2SP verifier key (signature type 0x04)."""
        return self._vkey

    def add_checkpoint(self, body: bytes) -> str:
        """Handle an add-checkpoint request body; return the answer's signature line(s), or
        raise a :class:`~ledger.errors.WitnessRefusal` (see the module docstring)."""
        # 1. Parse the request and the checkpoint text (unverified so far).
        request = parse_add_checkpoint(body)
        try:
            text, signatures = open_note(request.note)
            checkpoint = parse_checkpoint(text)
        except VerificationError as exc:
            raise MalformedSubmissionError(f"malformed checkpoint: {exc}") from None
        if checkpoint.size > MAX_SIZE:
            raise MalformedSubmissionError(
                f"expected a tree size below 2^63, got {checkpoint.size}"
            )
        # 2. Only configured logs.
        vkeys = self._logs.keys_for(checkpoint.origin)
        if not vkeys:
            raise UnknownLogError(f"unknown log origin {checkpoint.origin!r}")
        # 3. A trusted log signature (verify_note ignores unknown keys, fails on bad known ones).
        try:
            verify_note(request.note, vkeys)
        except VerificationError as exc:
            raise UntrustedCheckpointError(f"checkpoint of {checkpoint.origin!r}: {exc}") from None
        # 4. The old size cannot be past the new checkpoint.
        if request.old_size > checkpoint.size:
            raise MalformedSubmissionError(
                f"expected old size <= checkpoint size {checkpoint.size}, got {request.old_size}"
            )
        log_signatures = _trusted_signatures(signatures, vkeys)
        # 5. Check against the stored state and advance it, atomically.
        try:
            return self._advance(request, text, checkpoint, log_signatures).line()
        except sa.exc.IntegrityError:
            # A concurrent first request for this origin inserted the row before us.
            stored = self.latest(checkpoint.origin)
            raise OldSizeMismatchError(
                f"expected old size {stored.size if stored else 0}, got {request.old_size}",
                size=stored.size if stored else 0,
            ) from None

    def latest(self, origin: str) -> CosignedCheckpoint | None:
        """The latest checkpoint cosigned for ``origin`` (None if never)."""
        with db.read_session(self._engine) as session:
            row = session.get(WitnessCheckpoint, (self._vkey, origin))
            return None if row is None else _cosigned(row)

    def origins(self) -> list[tuple[str, int]]:
        """Every log this witness has cosigned, as (origin, latest size cosigned), sorted by
        origin: what lets a verifier see a second log that claims the same run (a split view
        under another origin, docs/auditing.md). Not in tlog-witness; served at ``/origins``."""
        with db.read_session(self._engine) as session:
            rows = session.execute(
                sa.select(WitnessCheckpoint.origin, WitnessCheckpoint.size)
                .where(WitnessCheckpoint.witness_key == self._vkey)
                .order_by(WitnessCheckpoint.origin)
            ).all()
            return [(origin, size) for origin, size in rows]

    def latest_by_origin_hash(self, hashed_origin: str) -> CosignedCheckpoint:
        """The monitoring view (tlog-witness "Monitor Retrieval Mechanism"): the latest
        cosigned checkpoint of the log whose origin hashes to ``hashed_origin``."""
        with db.read_session(self._engine) as session:
            row = session.scalars(
                sa.select(WitnessCheckpoint).where(
                    WitnessCheckpoint.witness_key == self._vkey,
                    WitnessCheckpoint.origin_hash == hashed_origin,
                )
            ).first()
            if row is None:
                raise NotFoundError(
                    f"this witness never cosigned a log with origin hash {hashed_origin}"
                )
            return _cosigned(row)

    def _advance(
        self,
        request: AddCheckpoint,
        text: str,
        checkpoint: Checkpoint,
        log_signatures: list[NoteSignature],
    ) -> Cosignature:
        """``text`` is the note text exactly as the log signed it: the cosignature covers
        those bytes, never a re-serialisation of the parsed checkpoint."""
        with db.write_session(self._engine) as session:
            row = _lock(session, self._vkey, checkpoint.origin)
            stored_size = 0 if row is None else row.size
            if request.old_size != stored_size:
                raise OldSizeMismatchError(
                    f"{checkpoint.origin}: expected old size {stored_size}, got {request.old_size}",
                    size=stored_size,
                )
            _check_consistency(request, checkpoint, None if row is None else row.root_hash)
            timestamp = max(1, int(self._clock()))  # tlog-witness: the timestamp is never 0
            cosignature = cosign(text, self._key, timestamp)
            note = text + "\n" + "".join(s.line() for s in log_signatures)
            note += cosignature.line()
            now = datetime.fromtimestamp(timestamp, UTC)
            if row is None:
                session.add(
                    WitnessCheckpoint(
                        witness_key=self._vkey,
                        origin=checkpoint.origin,
                        origin_hash=origin_hash(checkpoint.origin),
                        size=checkpoint.size,
                        root_hash=checkpoint.root_hash,
                        note=note,
                        updated_at=now,
                    )
                )
                session.flush()  # a concurrent insert fails here, before anything is returned
            else:
                row.size, row.root_hash, row.note, row.updated_at = (
                    checkpoint.size,
                    checkpoint.root_hash,
                    note,
                    now,
                )
        # Committed: only now may the cosignature leave the witness.
        return cosignature


def _lock(session: Session, witness_key: str, origin: str) -> WitnessCheckpoint | None:
    """The witness's row for ``origin``, locked until the transaction ends."""
    return session.scalars(
        sa.select(WitnessCheckpoint)
        .where(WitnessCheckpoint.witness_key == witness_key, WitnessCheckpoint.origin == origin)
        .with_for_update()  # PostgreSQL row lock; SQLite already holds the database write lock
    ).one_or_none()


def _check_consistency(
    request: AddCheckpoint, checkpoint: Checkpoint, stored_root: bytes | None
) -> None:
    if checkpoint.size == 0 and checkpoint.root_hash != EMPTY_ROOT:
        raise InconsistentCheckpointError(
            f"a checkpoint of size 0 must have the empty tree's root {EMPTY_ROOT.hex()}, "
            f"got {checkpoint.root_hash.hex()}"
        )
    if request.old_size == 0:
        if request.proof:
            raise InconsistentCheckpointError(
                f"expected no consistency proof from old size 0, got {len(request.proof)} lines"
            )
        return
    assert stored_root is not None  # old size == stored size > 0, so a row exists
    try:
        # Equal sizes: the proof must be empty and the roots identical (RFC 9162 §2.1.4.2).
        verify_consistency(
            request.old_size, checkpoint.size, request.proof, stored_root, checkpoint.root_hash
        )
    except VerificationError as exc:
        log.warning(
            "possible log misbehaviour: %s size %d does not extend the cosigned size %d: %s",
            checkpoint.origin,
            checkpoint.size,
            request.old_size,
            exc,
        )
        raise InconsistentCheckpointError(
            f"{checkpoint.origin}: checkpoint of size {checkpoint.size} is not consistent with "
            f"the cosigned size {request.old_size}: {exc}"
        ) from None


def _trusted_signatures(
    signatures: list[NoteSignature], vkeys: tuple[str, ...]
) -> list[NoteSignature]:
    """The signature lines of the trusted log keys (verify_note has just verified them)."""
    trusted = {(k.name, k.key_id) for k in map(PublicKey.from_vkey, vkeys)}
    return [s for s in signatures if (s.name, s.key_id) in trusted]


def _cosigned(row: WitnessCheckpoint) -> CosignedCheckpoint:
    return CosignedCheckpoint(
        origin=row.origin,
        size=row.size,
        root_hash=row.root_hash,
        note=row.note,
        updated_at=row.updated_at,
    )
