"""Kafka-aligned partitioning: Kafka's partition of each key, Spark's hash of the owner."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from airflow_provider_kafka2pc.spark.alignment import (
    Alignment,
    kafka_partitions,
    proxies,
    spark_hash_int,
    why_not_aligned,
)
from airflow_provider_kafka2pc.transaction.native_writer import partition_for_key

_rng = random.Random(939)
#: Every length from 0 to 40 bytes (each murmur2 tail), random bytes.
RANDOM_KEYS = [bytes(_rng.randrange(256) for _ in range(n % 41)) for n in range(2000)]


@pytest.mark.parametrize("partitions", [1, 3, 8, 64])
@pytest.mark.parametrize(
    "array",
    [
        pytest.param(pa.array(RANDOM_KEYS, pa.binary()), id="binary"),
        pytest.param(pa.array(RANDOM_KEYS, pa.large_binary()), id="large_binary"),
        pytest.param(pa.array([b"x"] * 7 + RANDOM_KEYS, pa.binary())[7:], id="a slice"),
        pytest.param(pa.chunked_array([RANDOM_KEYS[:900], RANDOM_KEYS[900:]]), id="chunked"),
    ],
)
def test_kafka_partitions_are_where_java_puts_each_key(array, partitions):
    got = kafka_partitions(array, partitions).tolist()
    assert got == [partition_for_key(k, partitions) for k in RANDOM_KEYS]


def test_a_null_key_counts_as_empty_and_no_key_is_no_work():
    keys = pa.array([b"a", None, b"", b"abcd"], pa.binary())
    assert kafka_partitions(keys, 8).tolist() == [
        partition_for_key(k, 8) for k in (b"a", b"", b"", b"abcd")
    ]
    assert kafka_partitions(pa.array([], pa.binary()), 8).tolist() == []


@pytest.mark.parametrize(
    ("value", "spark_says"),
    # SELECT hash(CAST(v AS INT)) on Spark 4.3.0
    [(0, 933211791), (1, -559580957), (7, 1079293707), (42, 29417773), (-1, -1604776387)],
)
def test_spark_hash_int_is_sparks_hash(value, spark_says):
    assert spark_hash_int(value) == spark_says


@pytest.mark.parametrize("spark_partitions", [1, 2, 3, 8, 16, 200])
def test_each_proxy_is_hashed_to_its_own_spark_partition(spark_partitions):
    values = proxies(spark_partitions)
    assert [spark_hash_int(v) % spark_partitions for v in values] == list(range(spark_partitions))


def test_owners_are_kafka_partition_mod_spark_partitions():
    alignment = Alignment(kafka_partitions=8, spark_partitions=4)
    got = alignment.owner_proxies(pa.array(RANDOM_KEYS, pa.binary())).to_pylist()
    table = proxies(4)
    assert got == [table[partition_for_key(k, 8) % 4] for k in RANDOM_KEYS]


@pytest.mark.parametrize(
    ("kafka", "spark", "key", "config", "why"),
    [
        (8, 8, "k", {}, None),
        (16, 8, "k", {"partitioner": "murmur2_random"}, None),
        (8, 8, None, {}, "no key column"),
        (8, 8, "k", {"partitioner": "consistent_random"}, "is not Java's murmur2"),
        (4, 8, "k", {}, "not a multiple"),
        (12, 8, "k", {}, "not a multiple"),
    ],
)
def test_when_an_export_can_be_aligned(kafka, spark, key, config, why):
    reason = why_not_aligned(kafka, spark, key, config)
    assert (reason is None) if why is None else (why in (reason or ""))
