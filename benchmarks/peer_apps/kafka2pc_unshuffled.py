"""spark-submit application: kafka2pc's prepare without its shuffle, a lever measured, not shipped.

The package's prepare application (``airflow_provider_kafka2pc.spark.app``) with one change:
the rows are not repartitioned by their key. Each partition of the source as Spark reads it
(its file splits, coalesced to at most one per transactional id) is written as one
transaction, as Spark's own Kafka sink writes it. Everything else is the package's: the
encoding in the JVM, the writer, the per-partition check of rows read against records
delivered, the manifest. ``bench_peers`` runs it as ``kafka2pc no shuffle`` to measure what
the shuffle costs end to end.

Why it is not the default: a partition then holds whatever the file source's splits hold,
and those depend on Spark's settings (``spark.sql.files.maxPartitionBytes``, the cores: the
split size is the input divided by the default parallelism), so a loss repair run with other
settings would recompute other partitions; hash partitioning of the key is a pure function
of the row.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame

from airflow_provider_kafka2pc.spark import app
from airflow_provider_kafka2pc.spark import prepare as package_prepare
from airflow_provider_kafka2pc.transaction.manifest import Manifest

_shipped = package_prepare.prepare_dataframe


def unshuffled_input(
    df: DataFrame, partitions: int, *columns: Any, require_keys: bool = False, **_: Any
) -> DataFrame:
    """In place of ``prepare.partitioned_input`` (called the same way: the key, value and
    header columns, then the options): the rows encoded as the package encodes them, in the
    source's own partitions, at most ``partitions`` of them (coalesce: no shuffle)."""
    encoded = package_prepare._encode(df, *columns, require_keys)
    return df.select(*encoded).coalesce(partitions)


def prepare_unshuffled(df: DataFrame, *, transactional_ids: Sequence[str], **kw: Any) -> Manifest:
    """One transaction per source split: as many of the ids as the source has splits.

    Spark sizes file splits as the input divided by ``spark.sql.files.minPartitionNum``
    (default: the cores), so ``local[2]`` reads 8 small files as 2-3 splits; asking for one
    per id gives the writers the export's parallelism, as the shuffle does."""
    df.sparkSession.conf.set("spark.sql.files.minPartitionNum", str(len(transactional_ids)))
    splits = df.rdd.getNumPartitions()
    return _shipped(df, transactional_ids=list(transactional_ids)[:splits], **kw)


if __name__ == "__main__":
    package_prepare.partitioned_input = unshuffled_input
    package_prepare.prepare_dataframe = prepare_unshuffled
    sys.exit(app.main())
