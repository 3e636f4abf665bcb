"""Ledger core: runs, entries, tree nodes, signed tree heads, enrolled keys, metrics.

Revision ID: 0001
Revises:
Create Date: 2026-11-22

Written out in full rather than importing ``ledger.models``: a migration must keep creating
the schema of its own revision however the models change later.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OUTER_STEP_ONLY = sa.text("kind = 'outer_step'")


def _timestamp(name: str, *, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _run_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=f"fk_{table}_run_id_runs")


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("origin", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("latest_step", sa.BigInteger(), nullable=True),
        sa.Column("outer_steps", sa.BigInteger(), nullable=False),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        _timestamp("finished_at", nullable=True),
        sa.CheckConstraint("status IN ('running', 'finished')", name="ck_runs_status"),
        sa.CheckConstraint("size >= 0", name="ck_runs_size"),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
    )
    op.create_index("ix_runs_created_at", "runs", ["created_at"])

    op.create_table(
        "entries",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("idx", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=True),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("leaf_hash", sa.LargeBinary(32), nullable=False),
        _timestamp("recorded_at"),
        sa.CheckConstraint("idx >= 0", name="ck_entries_idx"),
        _run_fk("entries"),
        sa.PrimaryKeyConstraint("run_id", "idx", name="pk_entries"),
    )
    op.create_index(
        "uq_entries_outer_step",
        "entries",
        ["run_id", "step"],
        unique=True,
        sqlite_where=_OUTER_STEP_ONLY,
        postgresql_where=_OUTER_STEP_ONLY,
    )

    op.create_table(
        "tree_nodes",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("level", sa.SmallInteger(), nullable=False),
        sa.Column("idx", sa.BigInteger(), nullable=False),
        sa.Column("hash", sa.LargeBinary(32), nullable=False),
        _run_fk("tree_nodes"),
        sa.PrimaryKeyConstraint("run_id", "level", "idx", name="pk_tree_nodes"),
    )

    op.create_table(
        "tree_heads",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("root_hash", sa.LargeBinary(32), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        _timestamp("created_at"),
        _run_fk("tree_heads"),
        sa.PrimaryKeyConstraint("run_id", "size", name="pk_tree_heads"),
    )

    op.create_table(
        "enrolled_keys",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(64), nullable=True),
        sa.Column("role", sa.String(64), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("key_id", sa.String(8), nullable=False),
        sa.Column("vkey", sa.Text(), nullable=False),
        _timestamp("created_at"),
        _run_fk("enrolled_keys"),
        sa.PrimaryKeyConstraint("id", name="pk_enrolled_keys"),
    )
    op.create_index("ix_enrolled_keys_run_id_role", "enrolled_keys", ["run_id", "role"])

    op.create_table(
        "metrics",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("key", sa.String(128), nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.Column("entry_index", sa.BigInteger(), nullable=False),
        _run_fk("metrics"),
        sa.ForeignKeyConstraint(
            ["run_id", "entry_index"],
            ["entries.run_id", "entries.idx"],
            name="fk_metrics_run_id_entry_index_entries",
        ),
        sa.PrimaryKeyConstraint("run_id", "step", "key", name="pk_metrics"),
    )


def downgrade() -> None:
    for table in ("metrics", "enrolled_keys", "tree_heads", "tree_nodes", "entries", "runs"):
        op.drop_table(table)
