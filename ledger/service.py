"""The ledger service: one append-only, Merkle-logged, signed log per training run.

:class:`Ledger` is the one entry point for the trainer's recorder (writes), the web app and
the verifier (reads). It knows nothing of HTTP or the CLI; it takes an engine from
``ledger.db.create_engine`` and, for writing, a :class:`~ledger.keyring.LogKeys` that hands
out each run's log signing key (the ledger never stores private keys).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import InstrumentedAttribute, Session

from attestation.errors import AttestationError
from attestation.keys import PublicKey, SigningKey
from ledger import cosignature_store, db, tiles, tree_store
from ledger.append import ROLE_LOG, NewEntry, append_locked, check_log_key, lock_run
from ledger.audit import (
    AuditSummary,
    audit_run_log,
    check_metrics,
    check_tree_heads,
    check_tree_nodes,
)
from ledger.cosignature import cosigner_key
from ledger.envelope import KIND_GENESIS, check_run_id
from ledger.errors import (
    EntryNotFoundError,
    InvalidRangeError,
    InvalidRequestError,
    LedgerError,
    RunExistsError,
    RunNotFoundError,
    SchemaMissingError,
    TreeHeadNotFoundError,
    VerificationError,
)
from ledger.keyring import LogKeys
from ledger.merkle import leaf_hash
from ledger.models import (
    ROLE_LENGTH,
    STATUS_RUNNING,
    EnrolledKey,
    Entry,
    Metric,
    Run,
    TreeHead,
)
from ledger.receipt import Receipt
from ledger.records import (
    ConsistencyProof,
    CosignatureRecord,
    EntryRecord,
    InclusionProof,
    KeyRecord,
    MetricPoint,
    RunInfo,
    SignedTreeHead,
    cosignature_record,
    entry_record,
    head_record,
    key_record,
    metric_point,
    run_info,
)
from ledger.tiles import Tile

MAX_PAGE = 1000
"""Most entries one :meth:`Ledger.entries` call returns."""

_ROLE = re.compile(rf"[a-z][a-z0-9_.-]{{0,{ROLE_LENGTH - 1}}}")


def utc_now() -> datetime:
    return datetime.now(UTC)


def read_runs(url: str) -> list[RunInfo]:
    """The runs of the ledger at ``url``, newest first, without creating anything: a missing
    SQLite file or an empty database raises :class:`SchemaMissingError`."""
    if db.sqlite_file_missing(url):
        raise SchemaMissingError(f"no ledger database at {db.display_url(url)}")
    engine = db.create_engine(url)
    try:
        return Ledger(engine).list_runs()
    finally:
        engine.dispose()


class Ledger:
    """Append to and query the runs' logs in one database."""

    def __init__(
        self,
        engine: Engine,
        *,
        origin: str | None = None,
        log_keys: LogKeys | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        """``origin`` is the log origin prefix (``VERITRAIN_ORIGIN``); a run's log origin is
        ``<origin>/runs/<run_id>``. Without ``origin`` and ``log_keys`` the ledger is
        read-only (the web app's case)."""
        db.check_engine(engine)
        self._engine = engine
        self._origin = origin
        self._log_keys = log_keys
        self._clock = clock

    @property
    def engine(self) -> Engine:
        return self._engine

    def run_origin(self, run_id: str) -> str:
        """The C2SP log origin of ``run_id`` (also its log key's name)."""
        check_run_id(run_id)
        if self._origin is None:
            raise LedgerError("this ledger is read-only: it was opened without an origin")
        return f"{self._origin}/runs/{run_id}"

    def log_public_key(self, run_id: str) -> PublicKey:
        """The key that signs (or will sign) ``run_id``'s tree heads, so a genesis payload can
        commit to it before the run exists."""
        return self._signing_key(self.run_origin(run_id)).public

    # -- writes -------------------------------------------------------------------------

    def create_run(self, run_id: str, genesis: Mapping[str, Any]) -> EntryRecord:
        """Start ``run_id``'s log with its ``run.genesis`` entry and enroll its log key."""
        origin = self.run_origin(run_id)
        key = self._signing_key(origin)
        new = NewEntry(kind=KIND_GENESIS, payload=genesis)
        now = self._clock()
        with db.write_session(self._engine) as session:
            if session.get(Run, run_id) is not None:
                raise RunExistsError(f"run {run_id!r} already exists")
            run = Run(
                id=run_id,
                origin=origin,
                status=STATUS_RUNNING,
                size=0,
                latest_step=None,
                outer_steps=0,
                created_at=now,
                updated_at=now,
                finished_at=None,
            )
            session.add(run)
            try:
                session.flush()
            except sa.exc.IntegrityError as exc:  # PostgreSQL: a concurrent create won
                raise RunExistsError(f"run {run_id!r} already exists") from exc
            _add_key(session, key.public, role=ROLE_LOG, run_id=run_id, now=now)
            return entry_record(append_locked(session, run, new, key, now))

    def append(
        self,
        run_id: str,
        kind: str,
        payload: Mapping[str, Any],
        *,
        step: int | None = None,
        metrics: Mapping[str, float] | None = None,
    ) -> EntryRecord:
        """Append one entry and sign the new tree head, atomically.

        With ``metrics`` (which need a ``step``), the entry's payload records them under
        ``metrics`` and the same transaction writes one metrics row per key. Raises
        :class:`~ledger.errors.DuplicateStepError` for an ``outer_step`` the run already has,
        :class:`~ledger.errors.RunFinishedError` after ``run.final``."""
        new = NewEntry(kind=kind, payload=payload, step=step, metrics=metrics or {})
        if kind == KIND_GENESIS:
            raise InvalidRequestError(f"{KIND_GENESIS!r} entries are written by create_run")
        key = self._signing_key(self.run_origin(run_id))
        now = self._clock()
        with db.write_session(self._engine) as session:
            run = lock_run(session, run_id)
            check_log_key(session, run, key)
            return entry_record(append_locked(session, run, new, key, now))

    def enroll_key(
        self, key: PublicKey | str, *, role: str, run_id: str | None = None
    ) -> KeyRecord:
        """Record a public key (object or C2SP vkey string) under ``role`` for ``run_id``, or
        globally when ``run_id`` is None. Enrolling the same key again returns the record."""
        public = _public_key(key)
        if not _ROLE.fullmatch(role):
            raise InvalidRequestError(
                f"expected a role like 'attester' or 'cluster-0', got {role!r}"
            )
        with db.write_session(self._engine) as session:
            if run_id is not None:
                _require_run(session, run_id)
            existing = session.scalars(
                sa.select(EnrolledKey).where(
                    _same_run(run_id), EnrolledKey.role == role, EnrolledKey.vkey == public.vkey
                )
            ).first()
            row = existing or _add_key(session, public, role=role, run_id=run_id, now=self._clock())
            return key_record(row)

    def add_cosignatures(
        self, run_id: str, size: int, witness_vkey: str, lines: str
    ) -> CosignatureRecord:
        """Store the witness's ``cosignature/v1`` on the run's tree head of ``size``, taken
        from ``lines`` (newline-terminated signature lines, e.g. its add-checkpoint answer;
        lines of other keys are ignored). Raises :class:`VerificationError` unless a line of
        ``witness_vkey`` (signature type 0x04) verifies over that tree head."""
        witness = cosigner_key(witness_vkey)
        for attempt in range(2):
            try:
                with db.write_session(self._engine) as session:
                    _require_run(session, run_id)
                    head = _tree_head(session, run_id, size)
                    row = cosignature_store.add(session, head, witness, lines, self._clock())
                    return cosignature_record(row)
            except sa.exc.IntegrityError:
                if attempt:  # the concurrent writer's row is there now; a retry updates it
                    raise
        raise AssertionError("unreachable")

    # -- reads --------------------------------------------------------------------------

    def list_runs(self) -> list[RunInfo]:
        """Every run, newest first."""
        with db.read_session(self._engine) as session:
            rows = session.scalars(sa.select(Run).order_by(Run.created_at.desc(), Run.id))
            return [run_info(run) for run in rows]

    def get_run(self, run_id: str) -> RunInfo:
        with db.read_session(self._engine) as session:
            return run_info(_require_run(session, run_id))

    def entries(self, run_id: str, start: int = 0, limit: int = 100) -> list[EntryRecord]:
        """Entries ``start`` .. ``start+limit-1`` (fewer at the end of the log)."""
        if start < 0 or not 1 <= limit <= MAX_PAGE:
            raise InvalidRangeError(
                "expected start >= 0 and 1 <= limit <= "
                f"{MAX_PAGE}, got start {start}, limit {limit}"
            )
        with db.read_session(self._engine) as session:
            _require_run(session, run_id)
            rows = session.scalars(
                sa.select(Entry)
                .where(Entry.run_id == run_id, Entry.index >= start)
                .order_by(Entry.index)
                .limit(limit)
            )
            return [entry_record(row) for row in rows]

    def entry(self, run_id: str, index: int) -> EntryRecord:
        with db.read_session(self._engine) as session:
            run = _require_run(session, run_id)
            row = session.get(Entry, (run_id, index))
            if row is None:
                raise EntryNotFoundError(
                    f"run {run_id!r} has no entry {index}: expected 0 <= index < {run.size}"
                )
            return entry_record(row)

    def latest_tree_head(self, run_id: str) -> SignedTreeHead:
        """The signed tree head covering the whole log."""
        with db.read_session(self._engine) as session:
            run = _require_run(session, run_id)
            return head_record(_tree_head(session, run_id, run.size))

    def cosigned_tree_head(self, run_id: str, size: int | None = None) -> SignedTreeHead:
        """The signed tree head of ``size`` (default: the latest) with every stored witness
        cosignature of it appended to its note (C2SP tlog-cosignature)."""
        with db.read_session(self._engine) as session:
            run = _require_run(session, run_id)
            head = head_record(_tree_head(session, run_id, run.size if size is None else size))
            lines = [row.line for row in cosignature_store.for_head(session, run_id, head.size)]
        return replace(head, note=head.note + "".join(lines))

    def cosignatures(self, run_id: str, size: int | None = None) -> list[CosignatureRecord]:
        """The stored cosignatures of the run's tree head of ``size`` (default: the latest),
        by witness name."""
        with db.read_session(self._engine) as session:
            size = _tree_head(
                session, run_id, _require_run(session, run_id).size if size is None else size
            ).size
            return [
                cosignature_record(r) for r in cosignature_store.for_head(session, run_id, size)
            ]

    def witnessed_size(self, run_id: str, witness_vkey: str) -> int:
        """The largest tree size of the run that the witness cosigned (0 if none): where the
        next submission to it starts its consistency proof."""
        with db.read_session(self._engine) as session:
            _require_run(session, run_id)
            return cosignature_store.witnessed_size(session, run_id, witness_vkey)

    def tree_head_at(self, run_id: str, size: int) -> SignedTreeHead:
        """The signed tree head of size ``size`` (one is stored for every size)."""
        with db.read_session(self._engine) as session:
            _require_run(session, run_id)
            return head_record(_tree_head(session, run_id, size))

    def inclusion_proof(self, run_id: str, index: int, size: int | None = None) -> InclusionProof:
        """Proof that entry ``index`` is in the tree of ``size`` entries (default: all)."""
        # The hot path of a public log: two plain queries on a bare connection, no ORM.
        with db.read_connection(self._engine) as connection:
            size, root = _size_and_root(connection, run_id, size)
            if not 0 <= index < size:
                raise InvalidRangeError(f"expected 0 <= index < size {size}, got index {index}")
            leaf, hashes = tree_store.inclusion_proof(connection, run_id, index, size)
            return InclusionProof(
                index=index, size=size, leaf_hash=leaf, hashes=tuple(hashes), root_hash=root
            )

    def inclusion_proofs(self, run_id: str, size: int | None = None) -> list[InclusionProof]:
        """The inclusion proof of every entry in the tree of ``size`` (default: all), read in
        one pass over the stored tree."""
        with db.read_session(self._engine) as session:
            size = _check_size(_require_run(session, run_id), size)
            root = _tree_head(session, run_id, size).root_hash
            return [
                InclusionProof(
                    index=index, size=size, leaf_hash=leaf, hashes=tuple(hashes), root_hash=root
                )
                for index, (leaf, hashes) in enumerate(
                    tree_store.all_inclusion_proofs(session, run_id, size)
                )
            ]

    def consistency_proof(self, run_id: str, old: int, new: int | None = None) -> ConsistencyProof:
        """Proof that the tree of ``new`` entries (default: all) extends the tree of ``old``."""
        with db.read_session(self._engine) as session:
            new = _check_size(_require_run(session, run_id), new)
            if not 1 <= old <= new:
                raise InvalidRangeError(f"expected 1 <= old <= new {new}, got old {old}")
            hashes = tree_store.consistency_proof(session, run_id, old, new)
            return ConsistencyProof(
                old=old,
                new=new,
                hashes=tuple(hashes),
                old_root=_tree_head(session, run_id, old).root_hash,
                new_root=_tree_head(session, run_id, new).root_hash,
            )

    def tile(self, run_id: str, tile: Tile) -> bytes:
        """A C2SP tlog-tiles tile of the run's log (its concatenated hashes, read from the
        stored tree), or, for ``tile.level`` None, its entry bundle (the entries' canonical
        bodies, uint16-length-prefixed). Raises :class:`TileNotFoundError` for a tile the
        log does not reach yet (layout in ``ledger/tiles.py``)."""
        with db.read_connection(self._engine) as connection:
            size = connection.execute(sa.select(Run.size).where(Run.id == run_id)).scalar()
            if size is None:
                raise RunNotFoundError(f"no run {run_id!r} in the ledger")
            tiles.check_available(tile, size)
            if tile.level is not None:
                first = tile.index * tiles.TILE_WIDTH
                hashes = tree_store.read_level(
                    connection, run_id, tile.merkle_level, first, first + tile.width
                )
                return b"".join(hashes)
            start, end = tile.entry_range()
            bodies = (
                connection.execute(
                    sa.select(Entry.body)
                    .where(Entry.run_id == run_id, Entry.index >= start, Entry.index < end)
                    .order_by(Entry.index)
                )
                .scalars()
                .all()
            )
            if len(bodies) != end - start:
                raise VerificationError(
                    f"run {run_id!r}: expected entries "
                    f"{start}..{end - 1}, got {len(bodies)} of them"
                )
            return tiles.entry_bundle(bodies)

    def receipt(self, run_id: str, index: int, size: int | None = None) -> str:
        """A C2SP tlog-proof@v1 receipt for entry ``index``: verifiable offline with the entry
        body and the run's log key."""
        proof = self.inclusion_proof(run_id, index, size)
        head = self.tree_head_at(run_id, proof.size)
        return Receipt(index=index, proof=proof.hashes, checkpoint=head.note).text()

    def metrics(self, run_id: str, keys: Sequence[str] | None = None) -> list[MetricPoint]:
        """Metric values by key then step (all keys when ``keys`` is None)."""
        with db.read_session(self._engine) as session:
            _require_run(session, run_id)
            # Plain rows, not ORM objects: a long run has hundreds of thousands of points and
            # building an object per row costs ~15x more than reading the columns.
            query = sa.select(Metric.step, Metric.key, Metric.value, Metric.entry_index).where(
                Metric.run_id == run_id
            )
            if keys is not None:
                query = query.where(Metric.key.in_(list(keys)))
            rows = session.execute(query.order_by(Metric.key, Metric.step))
            return [
                MetricPoint(step=step, key=key, value=value, entry_index=index)
                for step, key, value, index in rows
            ]

    def keys(self, run_id: str | None, *, role: str | None = None) -> list[KeyRecord]:
        """Keys enrolled for ``run_id`` (global keys when None), optionally of one role."""
        with db.read_session(self._engine) as session:
            if run_id is not None:
                _require_run(session, run_id)
            query = sa.select(EnrolledKey).where(_same_run(run_id))
            if role is not None:
                query = query.where(EnrolledKey.role == role)
            rows = session.scalars(query.order_by(EnrolledKey.id))
            return [key_record(row) for row in rows]

    # -- audit --------------------------------------------------------------------------

    def audit_run(self, run_id: str) -> AuditSummary:
        """Re-verify ``run_id`` from what the database holds and return the summary, or raise
        :class:`VerificationError` naming the first bad entry.

        Runs :func:`ledger.audit.audit_run_log` (envelopes, hash chain, root and signature of
        the latest tree head), then checks that what proofs and charts are served from — the
        stored leaf hashes, tree nodes, every stored tree head, the metrics rows — agrees
        with the entries."""
        with db.read_session(self._engine) as session:
            run = _require_run(session, run_id)
            rows = session.execute(
                sa.select(Entry.index, Entry.body, Entry.leaf_hash)
                .where(Entry.run_id == run_id)
                .order_by(Entry.index)
            ).all()
            latest = _tree_head(session, run_id, run.size)
            vkeys = list(
                session.scalars(
                    sa.select(EnrolledKey.vkey).where(
                        EnrolledKey.run_id == run_id, EnrolledKey.role == ROLE_LOG
                    )
                )
            )
            heads = [
                head_record(head)
                for head in session.scalars(
                    sa.select(TreeHead).where(TreeHead.run_id == run_id).order_by(TreeHead.size)
                )
            ]
            nodes = tree_store.stored_nodes(session, run_id)
            points = [
                metric_point(m)
                for m in session.scalars(sa.select(Metric).where(Metric.run_id == run_id))
            ]

        bodies = [body for _, body, _ in rows]
        summary = audit_run_log(run_id, bodies, latest.note, vkeys, origin=run.origin)
        for index, body, stored in rows:
            if stored != leaf_hash(body):
                raise VerificationError(
                    f"entry {index}: stored leaf hash {stored.hex()} does not match its body",
                    index=index,
                )
        leaves = [leaf_hash(body) for body in bodies]
        check_tree_nodes(leaves, nodes)
        check_tree_heads(leaves, heads, vkeys, origin=run.origin)
        check_metrics(bodies, points)
        return summary

    # -- helpers ------------------------------------------------------------------------

    def _signing_key(self, origin: str) -> SigningKey:
        if self._log_keys is None:
            raise LedgerError("this ledger is read-only: it was opened without log keys")
        key = self._log_keys(origin)
        if key.name != origin:
            raise LedgerError(f"log key for {origin!r} has the wrong name: got {key.name!r}")
        return key


def _require_run(session: Session, run_id: str) -> Run:
    run = session.get(Run, run_id)
    if run is None:
        raise RunNotFoundError(f"no run {run_id!r} in the ledger")
    return run


def _check_size(run: Run, size: int | None) -> int:
    if size is None:
        return run.size
    if not 1 <= size <= run.size:
        raise InvalidRangeError(
            f"expected a tree size between 1 and {run.size} for run {run.id!r}, got {size}"
        )
    return size


def _size_and_root_statement(
    wanted: sa.ColumnElement[int] | InstrumentedAttribute[int],
) -> sa.Select[int, bytes]:
    return (
        sa.select(Run.size, TreeHead.root_hash)
        .select_from(Run)
        .outerjoin(TreeHead, sa.and_(TreeHead.run_id == Run.id, TreeHead.size == wanted))
        .where(Run.id == sa.bindparam("run_id"))
    )


# Built once: constructing the expression per proof cost more than running it (the proof path
# is the log's hottest, ledger/tree_store.py).
_LATEST_SIZE_AND_ROOT = _size_and_root_statement(Run.size)
_SIZE_AND_ROOT = _size_and_root_statement(sa.bindparam("size", type_=sa.Integer))


def _size_and_root(session: tree_store.Reader, run_id: str, size: int | None) -> tuple[int, bytes]:
    """A tree size of the run (its latest when ``size`` is None, else checked against it)
    and the root hash of the signed tree head of that size, in one Core query."""
    if size is None:
        row = session.execute(_LATEST_SIZE_AND_ROOT, {"run_id": run_id}).first()
    else:
        row = session.execute(_SIZE_AND_ROOT, {"run_id": run_id, "size": size}).first()
    if row is None:
        raise RunNotFoundError(f"no run {run_id!r} in the ledger")
    latest, root = row
    if size is not None and not 1 <= size <= latest:
        raise InvalidRangeError(
            f"expected a tree size between 1 and {latest} for run {run_id!r}, got {size}"
        )
    if root is None:
        raise TreeHeadNotFoundError(
            f"run {run_id!r} has no signed tree head of size {size or latest}"
        )
    return size or latest, root


def _tree_head(session: Session, run_id: str, size: int) -> TreeHead:
    head = session.get(TreeHead, (run_id, size))
    if head is None:
        raise TreeHeadNotFoundError(f"run {run_id!r} has no signed tree head of size {size}")
    return head


def _same_run(run_id: str | None) -> sa.ColumnElement[bool]:
    return EnrolledKey.run_id.is_(None) if run_id is None else EnrolledKey.run_id == run_id


def _public_key(key: PublicKey | str) -> PublicKey:
    if isinstance(key, PublicKey):
        return key
    try:
        return PublicKey.from_vkey(key)
    except AttestationError as exc:
        raise InvalidRequestError(f"bad verifier key {key!r}: {exc}") from None


def _add_key(
    session: Session, key: PublicKey, *, role: str, run_id: str | None, now: datetime
) -> EnrolledKey:
    row = EnrolledKey(
        run_id=run_id,
        role=role,
        name=key.name,
        key_id=key.key_id.hex(),
        vkey=key.vkey,
        created_at=now,
    )
    session.add(row)
    session.flush()
    return row
