"""Which topics an export writes: exactly one of ``topic`` and ``topic_column`` (with the
``topics`` it may name); and the manifest that records them."""

from __future__ import annotations

import json

import pytest

from airflow_provider_kafka2pc.errors import CommittableError, ConfigurationError
from airflow_provider_kafka2pc.transaction.committable import Committable, PartitionRange
from airflow_provider_kafka2pc.transaction.manifest import Manifest
from airflow_provider_kafka2pc.transaction.routing import Routing, routing


def test_one_topic_or_a_column_among_declared_topics() -> None:
    assert routing("orders") == Routing(("orders",))
    assert routing("orders", topics=["orders"]).several is False
    several = routing(topic_column="kind", topics=["orders", "returns"])
    assert (several.topic, several.topics, several.several) == (
        "orders",
        ("orders", "returns"),
        True,
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of topic"),
        ({"topic": "a", "topic_column": "c", "topics": ["a"]}, "exactly one of topic"),
        ({"topic": "a", "topics": ["a", "b"]}, "goes with topic_column"),
        ({"topic_column": "c"}, "needs topics"),
        ({"topic_column": "c", "topics": []}, "needs topics"),
        ({"topic_column": "c", "topics": "a"}, "needs topics"),
        ({"topic_column": "c", "topics": ["a", "a"]}, "twice"),
        ({"topic_column": "", "topics": ["a"]}, "topic_column must be a column name"),
        ({"topic": "a/b"}, "Kafka topic name"),
        ({"topic_column": "c", "topics": ["ok", "x" * 250]}, "Kafka topic name"),
    ],
)
def test_bad_routing_is_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        routing(**kwargs)


def _committable(tid: str, *ranges: tuple[str, int, int]) -> Committable:
    parts = tuple(PartitionRange(t, p, 0, n - 1, n) for t, p, n in ranges)
    return Committable(tid, 1, 0, 1, parts, sum(n for _, _, n in ranges), 0, 60_000)


def test_the_manifest_records_every_topic_and_reads_an_old_one_as_its_topic() -> None:
    batch = Manifest(
        "job",
        "orders",
        (_committable("t-0", ("orders", 0, 3), ("returns", 0, 2)),),
        5,
        (5,),
        topics=("orders", "returns", "refunds"),
    )
    again = Manifest.from_json(batch.to_json())
    assert again == batch
    assert again.records_per_topic() == {"orders": 3, "returns": 2, "refunds": 0}
    old = json.loads(batch.to_json())
    del old["topics"]
    assert Manifest.from_json(json.dumps(old)).topics == ("orders",)
    with pytest.raises(CommittableError, match="not the first of its topics"):
        Manifest("job", "returns", (), 0, (), topics=("orders", "returns"))
