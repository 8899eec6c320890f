"""The ledger's tables (SQLAlchemy Core). Alembic's migrations create them; keep both in step.

Every name starts with ``kafka2pc_`` so the ledger can share a database (even Airflow's)
without clashing.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

#: Alembic's own bookkeeping table, renamed so it never meets Airflow's ``alembic_version``.
VERSION_TABLE = "kafka2pc_alembic_version"

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata = MetaData(naming_convention=NAMING)


class UtcDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on every backend (SQLite stores them naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value


def now() -> datetime:
    return datetime.now(UTC)


prefixes = Table(
    "kafka2pc_prefixes",
    metadata,
    Column("id_prefix", String(200), primary_key=True),
    Column("export_id", String(200), nullable=False, index=True),
    Column("created_at", UtcDateTime(), nullable=False),
)

batches = Table(
    "kafka2pc_batches",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("export_id", String(200), nullable=False),
    Column("run_key", String(250), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("state", String(16), nullable=False, index=True),
    Column("topic", String(249), nullable=False),
    Column("id_prefix", String(200), nullable=False),
    Column("num_partitions", Integer, nullable=False),
    # JSON list; index i = Spark partition i. Kept after the leases are released.
    Column("transactional_ids", Text, nullable=False),
    Column("verdict", String(8)),
    Column("verdict_reason", Text),
    Column("source_rows", BigInteger),
    # How the prepare partitioned its rows ("kafka-aligned" or "hash"): a repair follows it.
    Column("partitioning", String(16)),
    # With "source-splits": JSON of the split settings, counts and input fingerprint.
    Column("source_splits", Text),
    # With a topic_column: JSON list of every topic, declared order ("topic" is the first);
    # NULL for a one-topic batch.
    Column("topics", Text),
    # JSON of the prepare's Spark job (``spark.job_spec.SparkJob.record``): what a loss
    # repair from the source runs again. NULL when no prepare operator ran the job.
    Column("spark_job", Text),
    Column("created_at", UtcDateTime(), nullable=False),
    Column("updated_at", UtcDateTime(), nullable=False),
    Column("decided_at", UtcDateTime()),
    Column("finished_at", UtcDateTime()),
    UniqueConstraint("export_id", "run_key"),
)

participants = Table(
    "kafka2pc_participants",
    metadata,
    Column("batch_id", Integer, ForeignKey(batches.c.id, ondelete="CASCADE"), primary_key=True),
    # Earlier attempts' participants stay for the record; only the batch's current one counts.
    Column("attempt", Integer, primary_key=True),
    Column("partition_index", Integer, primary_key=True),
    Column("transactional_id", String(200), nullable=False),
    Column("committable", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("reason", Text),
    Column("updated_at", UtcDateTime(), nullable=False),
)

leases = Table(
    "kafka2pc_leases",
    metadata,
    Column("id_prefix", String(200), ForeignKey(prefixes.c.id_prefix), primary_key=True),
    Column("slot", Integer, primary_key=True),
    Column("transactional_id", String(200), nullable=False, unique=True),
    Column("export_id", String(200)),
    Column("run_key", String(250)),
    Column("leased", Boolean, nullable=False),
    Column("leased_at", UtcDateTime()),
    Index(None, "export_id", "run_key"),
)

#: Open transactions recovery found that no ledger record holds and whose start the
#: transaction coordinator did not report: when recovery first saw each one (as this
#: producer id and epoch), so that the grace period can run from then.
sightings = Table(
    "kafka2pc_sightings",
    metadata,
    Column("transactional_id", String(200), primary_key=True),
    Column("id_prefix", String(200), nullable=False, index=True),
    Column("producer_id", BigInteger, nullable=False),
    Column("producer_epoch", Integer, nullable=False),
    Column("first_seen_at", UtcDateTime(), nullable=False),
)
