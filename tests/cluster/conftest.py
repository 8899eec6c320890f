"""The three-node Apache Kafka cluster: started once per session, whole again after each test.

Tests kill nodes for real (``kill -9``). Each test restarts what it killed; the
``kafka_cluster`` fixture also restarts anything still down afterwards and waits until
every partition is back in sync, so a failed test cannot leave the next one a
degraded cluster.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from devtools.broker import DEFAULT_KAFKA_VERSION, KafkaCluster
from devtools.broker.cluster import (
    TRANSACTION_STATE_TOPIC,
    transaction_state_partition,
)
from tests.cluster.support import create_transaction_state_log
from tests.conftest import TEST_BROKER_CONFIG


@pytest.fixture(scope="package")  # stopped after the last test here (one xdist group)
def cluster_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(
        DEFAULT_KAFKA_VERSION,
        data_dir=tmp_path_factory.mktemp("cluster"),
        config=TEST_BROKER_CONFIG,
    )
    cluster.start()
    try:
        create_transaction_state_log(cluster)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def kafka_cluster(cluster_session: KafkaCluster) -> Iterator[KafkaCluster]:
    """The session's cluster, healthy and led by the preferred replicas; anything a test
    left down is restarted after it."""
    cluster_session.wait_healthy(60)
    cluster_session.balance_leaders(30)
    yield cluster_session
    cluster_session.heal()


@pytest.fixture
def cluster_bootstrap(kafka_cluster: KafkaCluster) -> str:
    return kafka_cluster.bootstrap_servers


@pytest.fixture
def cluster_settings(cluster_bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": cluster_bootstrap}


@pytest.fixture
def cluster_topic(cluster_settings: dict[str, Any], kafka_cluster: KafkaCluster) -> str:
    """A fresh 3-partition topic, replicated to all three nodes, every replica in sync."""
    name = f"c-{uuid.uuid4().hex[:12]}"
    with KafkaProtocol(cluster_settings, timeout_ms=10_000) as protocol:
        protocol.create_topic(name, 3)
    kafka_cluster.wait_topic(name)
    return name


def ids_coordinated_by(
    cluster: KafkaCluster, node_id: int, count: int, prefix: str = "fo"
) -> list[str]:
    """``count`` fresh transactional ids whose coordinator is ``node_id``, so one kill
    takes the coordinator of all of them."""
    leaders = cluster.partitions(TRANSACTION_STATE_TOPIC)
    if all(p.leader != node_id for p in leaders.values()):
        raise AssertionError(f"node {node_id} coordinates nothing: {leaders}")
    found: list[str] = []
    while len(found) < count:
        tid = f"{prefix}-{uuid.uuid4().hex[:10]}"
        if leaders[transaction_state_partition(tid, len(leaders))].leader == node_id:
            found.append(tid)
    return found


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    began = time.monotonic()
    result = fn()
    return result, time.monotonic() - began
