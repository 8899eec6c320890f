"""The three-node cluster itself: replicated as configured, coordinator lookup right,
a node killed -9 loses leadership and comes back in sync."""

from __future__ import annotations

import time

import pytest

from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.protocol.codes import ErrorCode
from devtools.broker.cluster import (
    TRANSACTION_STATE_TOPIC,
    java_string_hash,
    transaction_state_partition,
)

pytestmark = pytest.mark.cluster


def test_java_string_hash_matches_java():
    # Values printed by Java 17's String.hashCode.
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(1 << 31)  # Integer.MIN_VALUE
    assert java_string_hash("é€😀") == 16_752_006  # UTF-16 code units, a surrogate pair
    assert transaction_state_partition("polygenelubricants", 8) == 0  # Utils.abs(MIN) == 0


def test_every_partition_is_replicated_three_times_with_two_in_sync_required(
    kafka_cluster, cluster_topic
):
    assert kafka_cluster.running() == [1, 2, 3]
    for name in (cluster_topic, TRANSACTION_STATE_TOPIC):
        parts = kafka_cluster.partitions(name)
        assert parts and all(
            sorted(p.replicas) == [1, 2, 3] and sorted(p.isr) == [1, 2, 3] for p in parts.values()
        ), (name, parts)
    # Leadership is spread, so a kill hits some partitions and not others.
    assert len({p.leader for p in kafka_cluster.partitions(cluster_topic).values()}) > 1
    settings = (kafka_cluster.node(1).data_dir / "server.properties").read_text()
    for line in (
        "min.insync.replicas=2",
        "transaction.state.log.min.isr=2",
        "transaction.state.log.replication.factor=3",
        "offsets.topic.replication.factor=3",
        "default.replication.factor=3",
        "node.id=1",
    ):
        assert line in settings.splitlines()


def test_coordinator_helper_agrees_with_find_coordinator(kafka_cluster, cluster_settings):
    with KafkaProtocol(cluster_settings, timeout_ms=10_000) as protocol:
        for tid in ("a", "tx-1", "orders-2026-11-21-0", "polygenelubricants", "é€😀"):
            code, node = protocol.find_transaction_coordinator(tid)
            assert code == ErrorCode.NONE
            assert kafka_cluster.transaction_coordinator(tid) == node, tid


def test_a_killed_node_loses_leadership_and_rejoins_in_sync(kafka_cluster, cluster_topic):
    victim = kafka_cluster.leader(cluster_topic, 0)
    pid = kafka_cluster.node(victim).pid
    kafka_cluster.kill(victim)
    assert victim not in kafka_cluster.running()
    began = time.monotonic()
    while True:
        parts = kafka_cluster.partitions(cluster_topic)
        if all(p.leader not in (victim, -1) and victim not in p.isr for p in parts.values()):
            break
        assert time.monotonic() - began < 30, parts
        time.sleep(0.1)
    moved_s = time.monotonic() - began
    print(f"\nTIMING leadership moved off node {victim} {moved_s:.1f} s after kill")
    assert all(len(p.isr) == 2 for p in parts.values())
    address = kafka_cluster.node(victim).bootstrap_servers
    began = time.monotonic()
    kafka_cluster.restart(victim)
    print(f"TIMING node {victim} restarted and in sync in {time.monotonic() - began:.1f} s")
    assert kafka_cluster.node(victim).pid != pid
    assert kafka_cluster.node(victim).bootstrap_servers == address
    assert kafka_cluster.unhealthy() == []
