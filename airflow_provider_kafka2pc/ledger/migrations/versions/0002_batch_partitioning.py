"""How each batch's prepare partitioned its rows, which a loss repair must follow.

Aligned with Kafka or by hash was decided from the topic at the prepare; a repair deciding
it afresh (after partitions were added) would put other rows into the lost transactions.
Batches prepared before this revision have none recorded (NULL): their repairs decide as
before.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("kafka2pc_batches", sa.Column("partitioning", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("kafka2pc_batches") as batch:  # SQLite drops by copying
        batch.drop_column("partitioning")
