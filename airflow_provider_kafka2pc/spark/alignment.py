"""Kafka-aligned partitioning: each Spark partition owns a fixed set of Kafka partitions.

Why: with rows spread by Spark's hash, every transaction writes to every Kafka partition,
so an export of N transactions into K partitions sends N x K small record batches, adds
N x K partitions to transactions and writes N x K commit markers. When each Spark partition
owns the Kafka partitions ``p`` with ``p mod N`` equal to its index, each transaction
touches K / N partitions, its batches fill, and the broker does a fraction of the work
(``make bench-peers``: the broker's request threads spend about 0.6x the time).

Membership stays a pure function of the key and N, and each key still lands where Java's
producer puts it: the owner is Kafka's own partition of the key modulo N, and as N divides K,
``(toPositive(murmur2(key)) % K) % N`` is ``toPositive(murmur2(key)) % N`` whatever K is.
So a loss repair recomputes the same membership after partitions were added to the topic;
it is told how the prepare partitioned (the ledger records it), never decides afresh. The
hash is computed by a Java UDF shipped in
:data:`JAR` (source: ``jvm/``), code-generated like Spark's own ``hash`` and as cheap
(Spark SQL has no murmur2; an Arrow UDF sent every key through Python and back, about 5
CPU seconds per 2M rows). Spark's ``repartition(N, column)`` sends a row to
``pmod(murmur3(column), N)``; the column holds, for owner ``o``, the smallest int Spark
hashes to ``o``, so owner and Spark partition coincide.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..transaction.writer import DEFAULT_PARTITIONER
from . import PROJECT_JAR
from .connect import add_jar

log = logging.getLogger(__name__)

_MASK32 = 0xFFFFFFFF
#: The seed of Spark's ``hash`` and of its hash partitioning (``Murmur3Hash(_, 42)``).
SPARK_HASH_SEED = 42
#: The JVM side of alignment (built by ``jvm/build.sh`` from ``jvm/src``).
JAR = Path(PROJECT_JAR)
#: The Java UDF: a binary key's ``toPositive(murmur2(key))``, null for a null key.
KEY_HASH_CLASS = "kafka2pc.spark.KafkaKeyHash"
#: The name it is registered under in the session.
KEY_HASH_FUNCTION = "kafka2pc_key_hash"


def register_key_hash(spark: SparkSession) -> str | None:
    """Register :data:`KEY_HASH_FUNCTION` in ``spark``; None when done, else why it cannot be.

    A session started with the jar (spark-submit ``--jars``, ``spark.jars``) has the class;
    any other gets the jar added (``ADD JAR``, which also ships it to the executors; on
    Spark Connect, uploaded as an artifact: :func:`.connect.add_jar`).
    """
    try:
        spark.udf.registerJavaFunction(KEY_HASH_FUNCTION, KEY_HASH_CLASS, T.IntegerType())
        return None
    except Exception:  # AnalysisException: the class is not on the classpath yet
        # Broad on purpose, as below: classic and Connect sessions raise different classes,
        # and the worst outcome is the fallback, hash partitioning, which is correct.
        log.info("%s is not on the classpath: ADD JAR %s", KEY_HASH_CLASS, JAR)
    try:
        add_jar(spark, JAR)
        spark.udf.registerJavaFunction(KEY_HASH_FUNCTION, KEY_HASH_CLASS, T.IntegerType())
    except Exception as exc:  # not fatal: the rows are partitioned by hash, the reason recorded
        return f"the JVM could not load {KEY_HASH_CLASS} from {JAR} ({type(exc).__name__})"
    return None


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK32


def spark_hash_int(value: int, seed: int = SPARK_HASH_SEED) -> int:
    """Spark's ``hash()`` of an int (Murmur3_x86_32 ``hashInt``), as a signed 32-bit int."""
    k1 = (value & _MASK32) * 0xCC9E2D51 & _MASK32
    k1 = _rotl(k1, 15) * 0x1B873593 & _MASK32
    h1 = _rotl(seed ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & _MASK32
    h1 ^= 4  # the length in bytes
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _MASK32
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _MASK32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def proxies(spark_partitions: int) -> list[int]:
    """For each Spark partition ``o``, the smallest int that ``repartition`` sends to ``o``."""
    found: dict[int, int] = {}
    value = 0
    while len(found) < spark_partitions:
        found.setdefault(spark_hash_int(value) % spark_partitions, value)
        value += 1
    return [found[o] for o in range(spark_partitions)]


@dataclass(frozen=True)
class Alignment:
    """``spark_partitions`` Spark partitions, each owning the Kafka partitions ``p`` with
    ``p mod spark_partitions`` = its index (of any multiple of ``spark_partitions``)."""

    spark_partitions: int

    def owner_column(self, key: Column) -> Column:
        """The proxy of each row's owner, computed in the JVM (register the UDF first:
        :func:`register_key_hash`); null for a null key."""
        owner = F.call_udf(KEY_HASH_FUNCTION, key) % F.lit(self.spark_partitions)
        table = F.array(*[F.lit(v) for v in proxies(self.spark_partitions)])
        # Explicit: element_at of a null index gave 0 on Spark 4.3, not null.
        return F.when(key.isNotNull(), F.element_at(table, owner + F.lit(1)))


def why_not_aligned(
    kafka_partitions: int,
    spark_partitions: int,
    key_column: str | None,
    producer_config: Mapping[str, Any],
) -> str | None:
    """None when the export can be aligned; else why it is partitioned by hash instead."""
    if key_column is None:
        return "no key column (the broker's partitioner spreads keyless records)"
    partitioner = producer_config.get("partitioner", DEFAULT_PARTITIONER)
    if partitioner != DEFAULT_PARTITIONER:
        return f"partitioner {partitioner!r} is not Java's murmur2 ({DEFAULT_PARTITIONER!r})"
    if kafka_partitions < spark_partitions or kafka_partitions % spark_partitions:
        return (
            f"the topic's {kafka_partitions} partitions are not a multiple of the "
            f"{spark_partitions} Spark partitions"
        )
    return None
