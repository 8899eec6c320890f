"""Kafka-aligned partitioning: each Spark partition owns a fixed set of Kafka partitions.

Why: with rows spread by Spark's hash, every transaction writes to every Kafka partition,
so an export of N transactions into K partitions sends N x K small record batches and
N x K commit markers. When each Spark partition owns the Kafka partitions ``p`` with
``p mod N`` equal to its index, each transaction touches K / N partitions, its batches
fill, and the broker does a fraction of the work (``make bench-levers``).

Membership stays a pure function of the key (loss repair recomputes the same partitions),
and each key still lands where Java's producer puts it: the owner is computed from Kafka's
own partition of the key (``toPositive(murmur2(key)) % K``), vectorised over the Arrow
batch of keys (about 0.1 µs a key; Spark SQL has no murmur2, and an unrolled SQL
expression cost 30 times as much). Spark's ``repartition(N, column)`` sends a row to
``pmod(murmur3(column), N)``; the column holds, for owner ``o``, the smallest int Spark
hashes to ``o``, so owner and Spark partition coincide.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..transaction.writer import DEFAULT_PARTITIONER

_M = np.uint32(0x5BD1E995)
_MASK32 = 0xFFFFFFFF
#: The seed of Spark's ``hash`` and of its hash partitioning (``Murmur3Hash(_, 42)``).
SPARK_HASH_SEED = 42


def kafka_partitions(keys: pa.Array | pa.ChunkedArray, partitions: int) -> np.ndarray:
    """Java's ``BuiltInPartitioner.partitionForKey`` of every key (a null counts as empty).

    Vectorised per key length: the keys of one length form a byte matrix whose 4-byte
    little-endian words are murmur2's input, so each step is one numpy operation.
    """
    if isinstance(keys, pa.ChunkedArray):
        keys = pa.concat_arrays(keys.chunks) if keys.num_chunks else pa.array([], pa.binary())
    width = np.int64 if pa.types.is_large_binary(keys.type) else np.int32
    count = len(keys)
    out = np.zeros(count, dtype=np.int32)
    if count == 0:
        return out
    _, offset_buffer, data_buffer = keys.buffers()
    offsets = np.frombuffer(
        offset_buffer,
        dtype=width,
        count=count + 1,
        offset=keys.offset * np.dtype(width).itemsize,
    ).astype(np.int64)
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer else np.zeros(1, np.uint8)
    lengths = np.diff(offsets)
    if keys.null_count:
        lengths = np.where(keys.is_null().to_numpy(zero_copy_only=False), 0, lengths)
    with np.errstate(over="ignore"):
        for length in np.unique(lengths):
            rows = np.nonzero(lengths == length)[0]
            out[rows] = _murmur2_same_length(data, offsets[rows], int(length)) % partitions
    return out


def _murmur2_same_length(data: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    """``toPositive(Utils.murmur2(key))`` of keys that all have ``length`` bytes."""
    block = data[starts[:, None] + np.arange(length)[None, :]] if length else None
    h = np.full(len(starts), (0x9747B28C ^ length) & _MASK32, dtype=np.uint32)
    words = length // 4
    if block is not None and words:
        w = np.ascontiguousarray(block[:, : words * 4]).view("<u4")
        for i in range(words):
            k = w[:, i] * _M
            k ^= k >> np.uint32(24)
            k *= _M
            h *= _M
            h ^= k
    tail = length % 4
    if block is not None and tail:
        base = words * 4
        if tail >= 3:
            h ^= block[:, base + 2].astype(np.uint32) << np.uint32(16)
        if tail >= 2:
            h ^= block[:, base + 1].astype(np.uint32) << np.uint32(8)
        h ^= block[:, base].astype(np.uint32)
        h *= _M
    h ^= h >> np.uint32(13)
    h *= _M
    h ^= h >> np.uint32(15)
    return (h & np.uint32(0x7FFFFFFF)).astype(np.int64)


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
    """``kafka_partitions`` Kafka partitions owned by ``spark_partitions`` Spark partitions."""

    kafka_partitions: int
    spark_partitions: int

    def owner_proxies(self, keys: pa.Array | pa.ChunkedArray) -> pa.Array:
        """Per key: the proxy value of the Spark partition that owns its Kafka partition."""
        table = np.asarray(proxies(self.spark_partitions), dtype=np.int32)
        owners = kafka_partitions(keys, self.kafka_partitions) % self.spark_partitions
        return pa.array(table[owners], type=pa.int32())

    def owner_column(self, key: Column) -> Column:
        """The proxy of each row's owner, computed on the executors by an Arrow UDF."""

        def owner(keys: pa.Array) -> pa.Array:
            return self.owner_proxies(keys)

        return F.arrow_udf(owner, T.IntegerType())(key)


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
