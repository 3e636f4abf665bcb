"""The ledger schema (SQLAlchemy 2.0 typed models). Alembic versions in ``migrations/`` create
exactly these tables; ``tests/integration/test_migrations.py`` checks that they agree.

Tables, all keyed by run so each run is its own log:

- ``runs``          one row per run: origin, status, latest size and outer step.
- ``entries``       the log: canonical JSON bodies and their RFC 9162 leaf hashes.
- ``tree_nodes``    hashes of every complete perfect subtree, for O(log n) proofs
                    (layout in ``ledger/subtrees.py``).
- ``tree_heads``    one signed C2SP checkpoint per tree size.
- ``enrolled_keys`` public keys (log, attester, platform, cluster-j), never private ones.
- ``metrics``       one row per (run, step, key), denormalised from the entries for charts.
- ``cosignatures``  witnesses' C2SP ``cosignature/v1`` lines on the run's tree heads.

and one table of the witness side (``veritrain witness serve``, usually its own database):

- ``witness_checkpoints``  per witness key and log origin, the latest checkpoint cosigned.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    Double,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Text,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

# Explicit constraint names: Alembic batch mode on SQLite can only alter named constraints.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

RUN_ID_LENGTH = 64
KIND_LENGTH = 64
ROLE_LENGTH = 64
NAME_LENGTH = 255
METRIC_KEY_LENGTH = 128
VKEY_LENGTH = 512
"""A C2SP verifier key string: a name of at most NAME_LENGTH, '+', 8 hex digits, '+', 44
base64 characters."""

STATUS_RUNNING = "running"
STATUS_FINISHED = "finished"


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that is always timezone-aware UTC in Python.

    PostgreSQL keeps the zone (timestamptz); SQLite keeps none, so values are converted to
    UTC on the way in and marked UTC on the way out."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"expected a timezone-aware datetime, got {value!r}")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Run(Base):
    """A training run and the state of its log."""

    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(RUN_ID_LENGTH), primary_key=True)
    origin: Mapped[str] = mapped_column(String(NAME_LENGTH))
    """C2SP log origin, ``<VERITRAIN_ORIGIN>/runs/<id>``; also the log key's name."""
    status: Mapped[str] = mapped_column(String(16))
    """``running`` until a ``run.final`` entry is appended, then ``finished``."""
    size: Mapped[int] = mapped_column(BigInteger)
    """Entries in the log = size of the latest signed tree head."""
    latest_step: Mapped[int | None] = mapped_column(BigInteger)
    """Highest outer step recorded so far (None before the first ``outer_step``)."""
    outer_steps: Mapped[int] = mapped_column(BigInteger)
    """Number of ``outer_step`` entries."""
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (
        CheckConstraint(f"status IN ('{STATUS_RUNNING}', '{STATUS_FINISHED}')", name="status"),
        CheckConstraint("size >= 0", name="size"),
        Index(None, "created_at"),
    )


class Entry(Base):
    """One log entry: its canonical JSON body and RFC 9162 leaf hash."""

    __tablename__ = "entries"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    index: Mapped[int] = mapped_column("idx", BigInteger, primary_key=True)
    """Zero-based position in the run's log; (run_id, index) is unique, so two appenders can
    never write the same position."""
    kind: Mapped[str] = mapped_column(String(KIND_LENGTH))
    step: Mapped[int | None] = mapped_column(BigInteger)
    """Outer step this entry belongs to, if any."""
    body: Mapped[bytes] = mapped_column(LargeBinary)
    """RFC 8785 canonical JSON of the envelope (kind, run, index, prev, recorded_at, payload)."""
    leaf_hash: Mapped[bytes] = mapped_column(LargeBinary(32))
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime())

    __table_args__ = (
        CheckConstraint("idx >= 0", name="idx"),
        # A resumed trainer must never record the same outer step twice.
        Index(
            "uq_entries_outer_step",
            "run_id",
            "step",
            unique=True,
            sqlite_where=text("kind = 'outer_step'"),
            postgresql_where=text("kind = 'outer_step'"),
        ),
    )


class TreeNode(Base):
    """The hash of one complete perfect subtree of a run's tree (see ``ledger/subtrees.py``)."""

    __tablename__ = "tree_nodes"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    level: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    index: Mapped[int] = mapped_column("idx", BigInteger, primary_key=True)
    hash: Mapped[bytes] = mapped_column(LargeBinary(32))


class TreeHead(Base):
    """A signed tree head: the C2SP tlog-checkpoint of the run's log at one size."""

    __tablename__ = "tree_heads"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    root_hash: Mapped[bytes] = mapped_column(LargeBinary(32))
    note: Mapped[str] = mapped_column(Text)
    """The whole signed note (checkpoint text, blank line, signature lines)."""
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class EnrolledKey(Base):
    """A public key the ledger vouches for: the run's log key, attesters, clusters, the
    platform root. Private keys never reach the database."""

    __tablename__ = "enrolled_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id"))
    """None for keys that are not tied to one run (e.g. the platform root)."""
    role: Mapped[str] = mapped_column(String(ROLE_LENGTH))
    """``log``, ``attester``, ``platform``, ``cluster-<j>``, ..."""
    name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    key_id: Mapped[str] = mapped_column(String(8))
    """C2SP key id, hex."""
    vkey: Mapped[str] = mapped_column(Text)
    """C2SP verifier key string ``name+keyid+base64(0x01 || pubkey)``."""
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())

    __table_args__ = (Index(None, "run_id", "role"),)


class Metric(Base):
    """One metric value at one outer step, copied from the entry that recorded it."""

    __tablename__ = "metrics"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    step: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    key: Mapped[str] = mapped_column(String(METRIC_KEY_LENGTH), primary_key=True)
    value: Mapped[float] = mapped_column(Double)
    entry_index: Mapped[int] = mapped_column(BigInteger)
    """The entry whose append wrote this row; ``veritrain verify`` compares the two."""

    __table_args__ = (
        ForeignKeyConstraint(["run_id", "entry_index"], ["entries.run_id", "entries.idx"]),
    )


class Cosignature(Base):
    """A witness's ``cosignature/v1`` on one of the run's signed tree heads (C2SP
    tlog-cosignature), verified against the witness key before it was stored."""

    __tablename__ = "cosignatures"

    run_id: Mapped[str] = mapped_column(String(RUN_ID_LENGTH), primary_key=True)
    witness_key: Mapped[str] = mapped_column(String(VKEY_LENGTH), primary_key=True)
    """The witness's C2SP verifier key (signature type 0x04)."""
    size: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    """Size of the cosigned tree head; (run, witness, largest size) is where the next
    submission to that witness starts its consistency proof."""
    witness_name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    root_hash: Mapped[bytes] = mapped_column(LargeBinary(32))
    line: Mapped[str] = mapped_column(Text)
    """The signature line ``— <name> base64(key id || timestamp || signature)``."""
    timestamp: Mapped[int] = mapped_column(BigInteger)
    """The cosignature's own POSIX timestamp (signed by the witness)."""
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())

    __table_args__ = (
        ForeignKeyConstraint(["run_id", "size"], ["tree_heads.run_id", "tree_heads.size"]),
        Index(None, "run_id", "size"),
    )


class WitnessCheckpoint(Base):
    """Witness side: the latest checkpoint one witness key cosigned for one log origin
    (C2SP tlog-witness: "the witness is only required to keep track of the latest
    checkpoint it observed and verified")."""

    __tablename__ = "witness_checkpoints"

    witness_key: Mapped[str] = mapped_column(String(VKEY_LENGTH), primary_key=True)
    """The witness's own verifier key: one database may serve several witnesses."""
    origin: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    origin_hash: Mapped[str] = mapped_column(String(64))
    """Lowercase hex SHA-256 of the origin: the monitoring path ``/<origin hash>/checkpoint``."""
    size: Mapped[int] = mapped_column(BigInteger)
    root_hash: Mapped[bytes] = mapped_column(LargeBinary(32))
    note: Mapped[str] = mapped_column(Text)
    """The checkpoint as cosigned: the log's signature(s) the witness verified, then its
    own cosignature."""
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())

    __table_args__ = (
        CheckConstraint("size >= 0", name="size"),
        Index(None, "witness_key", "origin_hash"),
    )
