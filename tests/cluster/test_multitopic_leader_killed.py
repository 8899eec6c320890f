"""A multi-topic export run (``topic_column`` + ``topics``) on the three-node cluster while
one topic's partition leader is killed -9 mid-write.

The run is the fault tier's (``tests/faults``: ``dag.test()`` in a child process, the
prepare's spark-submit on ``local[2]``, the Python writer in batches of 20 rows). Spark
partition 1 holds after its first batch (its transaction open in both topics, the batch
PREPARING) while the test kills the node leading a partition of the first topic (not the
transaction's coordinator); then it writes its other batches, to the new leaders. The
orchestrator carries on by itself (the test fences nothing): the run commits, and both
witnesses agree on every topic, exactly once.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from airflow_provider_kafka2pc.ledger import BatchState
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from tests.faults.conftest import (
    QUICK_SPARK,
    FaultRig,
    assert_exported_once_per_topic,
    routed_options,
)
from tests.support.java_witness import assert_java_witness

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

DAY = 7
HELD = 1


def replicated_topic(cluster, settings) -> str:
    name = f"m-{uuid.uuid4().hex[:12]}"
    with KafkaProtocol(settings, timeout_ms=10_000) as protocol:
        protocol.create_topic(name, 3)
    cluster.wait_topic(name)
    return name


def test_one_topics_leader_killed_mid_write_the_export_commits_every_topic_once(
    kafka_cluster, cluster_settings, cluster_bootstrap, tmp_path: Path
):
    topics = [replicated_topic(kafka_cluster, cluster_settings) for _ in range(2)]
    rig = FaultRig(
        tmp_path,
        dag_id=f"multi_leader_{uuid.uuid4().hex[:6]}",
        topic=topics[0],
        settings=cluster_settings,
        ledger_url=f"sqlite:///{tmp_path / 'ledger.db'}",
        writer="python",
    )
    spec = routed_options(topics)
    spec["options"]["spark_conf"] = {
        **QUICK_SPARK,
        "spark.sql.execution.arrow.maxRecordsPerBatch": "20",
    }
    first = rig.start(DAY, faults={"prepare": ["spark_holds", {"partition": HELD}]}, **spec)
    held = rig.reached("spark-hold", first)
    assert held["partition"] == HELD and held["rows"] <= 20, held

    ids = rig.batch(DAY).transactional_ids
    coordinator = kafka_cluster.transaction_coordinator(ids[HELD])
    leaders = {p: i.leader for p, i in kafka_cluster.partitions(topics[0]).items()}
    victim = next(node for node in sorted(set(leaders.values())) if node != coordinator)
    with KafkaProtocol(cluster_settings, timeout_ms=10_000) as protocol:
        [txn] = protocol.describe_transactions([ids[HELD]])
    # The kill lands mid-write: the held partition's transaction open, the batch still
    # PREPARING (no participant recorded), the victim leading a partition of topic 0.
    assert txn.state.value == "Ongoing", txn
    assert rig.batch(DAY).state is BatchState.PREPARING
    kafka_cluster.kill(victim)
    rig.go("spark-hold")
    first = first.wait()

    assert first.state == "success", first.tail()
    rig.assert_writer(first)
    moved = {p: i.leader for p, i in kafka_cluster.partitions(topics[0]).items()}
    assert victim not in moved.values(), (leaders, moved)
    kafka_cluster.restart(victim)
    with KafkaProtocol(cluster_settings, timeout_ms=10_000) as protocol:
        assert_exported_once_per_topic(
            protocol, cluster_bootstrap, rig, topics, DAY, aborted=dict.fromkeys(topics, 0)
        )
    for topic, keys in zip(topics, (150, 150), strict=True):
        assert_java_witness(cluster_bootstrap, topic, committed=keys)
