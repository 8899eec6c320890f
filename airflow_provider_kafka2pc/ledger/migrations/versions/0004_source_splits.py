"""What a source-split prepare's loss repair needs to recompute its partitions.

A prepare partitioned by the source's own file splits (no shuffle) records the split
settings it pinned, the number of splits and partitions, a fingerprint of the input files
and a digest of each partition's file ranges (JSON). NULL for every other partitioning.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("kafka2pc_batches", sa.Column("source_splits", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("kafka2pc_batches") as batch:  # SQLite drops by copying
        batch.drop_column("source_splits")
