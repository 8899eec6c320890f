"""The prepare's Spark job, recorded beside its committables, for a loss repair.

JSON of ``spark.job_spec.SparkJob.record()`` (the source, the application's options, the
Spark settings and connection ids; no secret). NULL for a batch prepared outside the
prepare operator (the external-operator path) or before this revision: a loss repair of
such a batch from the source falls back to the DAG's prepare task.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("kafka2pc_batches", sa.Column("spark_job", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("kafka2pc_batches") as batch:  # SQLite drops by copying
        batch.drop_column("spark_job")
