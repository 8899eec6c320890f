"""Kafka's own Java console consumer as the third witness on the three-node cluster.

Three transactions are prepared on a replicated topic (each touching all three
partitions, whose leaders are spread over the nodes); two are committed, one aborted, all
from another connection than the writers'. Our audit (markers applied by us),
our read_committed consumer (librdkafka) and Kafka's ConsoleConsumer with
``--isolation-level read_committed`` (Java, ``kafka-tools`` 4.3.1) must each count the
committed records only, once each. A witness that read uncommitted, or counted the aborted
transaction, would see half as many again.
"""

from __future__ import annotations

import pytest

from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.transaction.controller import (
    Outcome,
    RetryPolicy,
    TransactionController,
)
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter
from tests.conftest import assert_exactly_once, unique_id
from tests.support.java_witness import assert_java_witness

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ROWS = 500


def rows(start: int) -> list[tuple[bytes, bytes]]:
    return [(f"k{i}".encode(), f'{{"id": {i}}}'.encode()) for i in range(start, start + ROWS)]


def test_kafka_console_consumer_counts_only_the_committed_records(
    kafka_cluster, cluster_settings, cluster_topic
):
    ids = [unique_id("jw") for _ in range(3)]
    committables = [
        TransactionalWriter(cluster_settings, tid, transaction_timeout_ms=120_000).write(
            cluster_topic, rows(i * ROWS)
        )
        for i, tid in enumerate(ids)
    ]
    assert all(len(c.partitions) == 3 for c in committables), committables
    assert len({p.leader for p in kafka_cluster.partitions(cluster_topic).values()}) > 1
    with KafkaProtocol(cluster_settings, timeout_ms=10_000) as protocol:
        controller = TransactionController(protocol, RetryPolicy(deadline_s=60))
        results = controller.commit_all(committables[:2])
        assert [r.outcome for r in results] == [Outcome.COMMITTED] * 2
        assert controller.abort(committables[2]).outcome is Outcome.ABORTED

    bootstrap = kafka_cluster.bootstrap_servers
    with KafkaProtocol(cluster_settings, timeout_ms=10_000) as protocol:
        assert_exactly_once(
            protocol, bootstrap, cluster_topic, *committables, committed=2 * ROWS, aborted=ROWS
        )
    java = assert_java_witness(bootstrap, cluster_topic, committed=2 * ROWS)
    assert set(java.counts) == {0, 1, 2}, java.to_dict()  # every replicated partition read
    print(f"\nJava console consumer on the cluster: {java.to_dict()}")
