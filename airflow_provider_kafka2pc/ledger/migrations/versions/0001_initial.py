"""The ledger's first schema: prefixes, batches, participants, leases.

Revision ID: 0001
Revises:
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _when(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "kafka2pc_prefixes",
        sa.Column("id_prefix", sa.String(200), nullable=False),
        sa.Column("export_id", sa.String(200), nullable=False),
        _when("created_at"),
        sa.PrimaryKeyConstraint("id_prefix", name="pk_kafka2pc_prefixes"),
    )
    op.create_index("ix_kafka2pc_prefixes_export_id", "kafka2pc_prefixes", ["export_id"])
    op.create_table(
        "kafka2pc_batches",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("export_id", sa.String(200), nullable=False),
        sa.Column("run_key", sa.String(250), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("topic", sa.String(249), nullable=False),
        sa.Column("id_prefix", sa.String(200), nullable=False),
        sa.Column("num_partitions", sa.Integer(), nullable=False),
        sa.Column("transactional_ids", sa.Text(), nullable=False),
        sa.Column("verdict", sa.String(8), nullable=True),
        sa.Column("verdict_reason", sa.Text(), nullable=True),
        sa.Column("source_rows", sa.BigInteger(), nullable=True),
        _when("created_at"),
        _when("updated_at"),
        _when("decided_at", nullable=True),
        _when("finished_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_kafka2pc_batches"),
        sa.UniqueConstraint("export_id", "run_key", name="uq_kafka2pc_batches_export_id_run_key"),
    )
    op.create_index("ix_kafka2pc_batches_state", "kafka2pc_batches", ["state"])
    op.create_table(
        "kafka2pc_participants",
        sa.Column("batch_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("partition_index", sa.Integer(), nullable=False),
        sa.Column("transactional_id", sa.String(200), nullable=False),
        sa.Column("committable", sa.Text(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        _when("updated_at"),
        sa.ForeignKeyConstraint(
            ["batch_id"],
            ["kafka2pc_batches.id"],
            name="fk_kafka2pc_participants_batch_id_kafka2pc_batches",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "batch_id", "attempt", "partition_index", name="pk_kafka2pc_participants"
        ),
    )
    op.create_table(
        "kafka2pc_leases",
        sa.Column("id_prefix", sa.String(200), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("transactional_id", sa.String(200), nullable=False),
        sa.Column("export_id", sa.String(200), nullable=True),
        sa.Column("run_key", sa.String(250), nullable=True),
        sa.Column("leased", sa.Boolean(), nullable=False),
        _when("leased_at", nullable=True),
        sa.ForeignKeyConstraint(
            ["id_prefix"],
            ["kafka2pc_prefixes.id_prefix"],
            name="fk_kafka2pc_leases_id_prefix_kafka2pc_prefixes",
        ),
        sa.PrimaryKeyConstraint("id_prefix", "slot", name="pk_kafka2pc_leases"),
        sa.UniqueConstraint("transactional_id", name="uq_kafka2pc_leases_transactional_id"),
    )
    op.create_index(
        "ix_kafka2pc_leases_export_id_run_key", "kafka2pc_leases", ["export_id", "run_key"]
    )


def downgrade() -> None:
    op.drop_table("kafka2pc_leases")
    op.drop_table("kafka2pc_participants")
    op.drop_table("kafka2pc_batches")
    op.drop_table("kafka2pc_prefixes")
