"""Kafka-aligned partitioning: Spark's hash of the owner, when an export can be aligned, and
the shipped jar built from the sources in the repository (its murmur2 is checked against
Java's placement in a real Spark session: tests/integration/test_spark_prepare.py)."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from airflow_provider_kafka2pc.spark.alignment import (
    JAR,
    proxies,
    register_key_hash,
    spark_hash_int,
    why_not_aligned,
)

SOURCES = Path(__file__).parents[3] / "jvm" / "src"


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


def test_the_shipped_jar_is_built_from_the_sources_in_the_repository():
    """jvm/build.sh writes the SHA-256 of jvm/src into the jar's manifest: a changed source
    whose jar was not rebuilt fails here, not in a user's export."""
    sources = sorted(SOURCES.rglob("*.java"))
    assert sources, SOURCES
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()
    with zipfile.ZipFile(JAR) as jar:
        manifest = jar.read("META-INF/MANIFEST.MF").decode().replace("\r\n", "\n")
        names = jar.namelist()
    attributes = dict(
        line.split(": ", 1) for line in manifest.replace("\n ", "").splitlines() if ": " in line
    )
    assert attributes.get("Kafka2pc-Source-SHA256") == digest, "run jvm/build.sh"
    assert "kafka2pc/spark/KafkaKeyHash.class" in names


class _SessionWithoutTheClass:
    """A session whose JVM cannot load the UDF, even after ADD JAR (the jar unreadable)."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.udf = self

    def registerJavaFunction(self, name: str, java_class: str, return_type: object) -> None:
        raise RuntimeError(f"Can not load class {java_class}")

    def sql(self, statement: str) -> None:
        self.statements.append(statement)


def test_a_session_that_cannot_load_the_udf_gets_the_jar_added_then_a_reason():
    """The prepare then partitions by hash and its manifest says why, instead of failing."""
    session = _SessionWithoutTheClass()
    why = register_key_hash(session)  # type: ignore[arg-type]
    assert session.statements == [f"ADD JAR '{JAR}'"]
    assert why is not None and "could not load kafka2pc.spark.KafkaKeyHash" in why
