"""What the cluster tests and the chaos soak both need from a fresh three-node cluster."""

from __future__ import annotations

import time

from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.protocol.codes import ErrorCode
from devtools.broker import KafkaCluster


def create_transaction_state_log(cluster: KafkaCluster, timeout_s: float = 60.0) -> None:
    """The first FindCoordinator creates ``__transaction_state``; wait until it serves."""
    deadline = time.monotonic() + timeout_s
    with KafkaProtocol({"bootstrap.servers": cluster.bootstrap_servers}) as protocol:
        while protocol.find_transaction_coordinator("warm-up")[0] != ErrorCode.NONE:
            if time.monotonic() > deadline:
                raise AssertionError("the transaction state log was not created")
            time.sleep(0.2)
    cluster.wait_healthy(max(1.0, deadline - time.monotonic()))
