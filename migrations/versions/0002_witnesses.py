"""Witnesses: the log side's collected cosignatures and the witness side's state.

Revision ID: 0002_witnesses
Revises: 0001
Create Date: 2026-12-01

``cosignatures`` holds witnesses' C2SP cosignature/v1 lines on a run's tree heads;
``witness_checkpoints`` is the state of ``veritrain witness serve`` (per witness key and log
origin, the latest checkpoint cosigned). Written out in full, like 0001.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_witnesses"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "cosignatures",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("witness_key", sa.String(512), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("witness_name", sa.String(255), nullable=False),
        sa.Column("root_hash", sa.LargeBinary(32), nullable=False),
        sa.Column("line", sa.Text(), nullable=False),
        sa.Column("timestamp", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id", "size"],
            ["tree_heads.run_id", "tree_heads.size"],
            name="fk_cosignatures_run_id_size_tree_heads",
        ),
        sa.PrimaryKeyConstraint("run_id", "witness_key", "size", name="pk_cosignatures"),
    )
    op.create_index("ix_cosignatures_run_id_size", "cosignatures", ["run_id", "size"])

    op.create_table(
        "witness_checkpoints",
        sa.Column("witness_key", sa.String(512), nullable=False),
        sa.Column("origin", sa.String(255), nullable=False),
        sa.Column("origin_hash", sa.String(64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("root_hash", sa.LargeBinary(32), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("size >= 0", name="ck_witness_checkpoints_size"),
        sa.PrimaryKeyConstraint("witness_key", "origin", name="pk_witness_checkpoints"),
    )
    op.create_index(
        "ix_witness_checkpoints_witness_key_origin_hash",
        "witness_checkpoints",
        ["witness_key", "origin_hash"],
    )


def downgrade() -> None:
    op.drop_table("witness_checkpoints")
    op.drop_table("cosignatures")
