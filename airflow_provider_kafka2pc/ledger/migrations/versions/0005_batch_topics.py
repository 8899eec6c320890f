"""Every topic of an export that routes its rows among several (``topic_column``).

A JSON list of the topics, declared order; NULL for a one-topic batch, whose ``topic`` is
its only one (``topic`` keeps the first topic either way, so older readers still see one).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("kafka2pc_batches", sa.Column("topics", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("kafka2pc_batches") as batch:  # SQLite drops by copying
        batch.drop_column("topics")
