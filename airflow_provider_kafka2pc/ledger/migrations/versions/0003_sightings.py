"""When recovery first saw an open transaction it cannot date.

An open transaction under an export's prefix that no ledger record holds, and whose start
the transaction coordinator does not report, was judged live on every recovery round. Its
first sighting (per producer id and epoch) is kept here so the grace period runs from it.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "kafka2pc_sightings",
        sa.Column("transactional_id", sa.String(200), primary_key=True),
        sa.Column("id_prefix", sa.String(200), nullable=False, index=True),
        sa.Column("producer_id", sa.BigInteger, nullable=False),
        sa.Column("producer_epoch", sa.Integer, nullable=False),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("kafka2pc_sightings")
