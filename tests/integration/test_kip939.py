"""KIP-939 feature detection on live brokers (findings: docs/kip-939.md).

Released brokers do not offer InitProducerId v6 unless unstable API versions are
enabled, so every prepared transaction still lives under the transaction timeout.
These tests fail the day a default broker starts offering it: time to revisit.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest

from airflow_provider_kafka2pc.errors import ConnectionLostError, UnsupportedError
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.protocol.codes import ErrorCode
from devtools.broker import DEFAULT_KAFKA_VERSION, KafkaBroker
from devtools.broker_answers import coordinator_of
from tests.conftest import REAL_KAFKA_ENV, TEST_BROKER_CONFIG

#: What InitProducerId v6 with enable2Pc makes of the transaction timeout (Int.MaxValue).
TWO_PC_TIMEOUT_MS = 2**31 - 1
LOADING = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR)


@pytest.mark.kafka_versions()
def test_default_brokers_do_not_offer_two_phase_commit(protocol, kafka_version):
    assert not protocol.offers_kip939()
    node = coordinator_of(protocol, "kip939-probe")
    with pytest.raises(UnsupportedError, match="v6"):
        protocol.init_producer_id(node, "kip939-probe", 3_000, enable_2pc=True)
    # Sent anyway, v6 is a disabled API: the broker drops the connection, no answer.
    with pytest.raises(ConnectionLostError):
        protocol.init_producer_id(node, "kip939-probe", 3_000, enable_2pc=True, version=6)


@pytest.mark.slow
def test_two_phase_commit_with_unstable_api_versions(tmp_path):
    """4.x with 2PC and unstable APIs: enable2Pc is granted, keepPreparedTxn is not."""
    if os.environ.get(REAL_KAFKA_ENV):
        pytest.skip(f"needs a local broker of its own; {REAL_KAFKA_ENV} is set")
    config = {
        **TEST_BROKER_CONFIG,
        "transaction.two.phase.commit.enable": "true",
        "unstable.api.versions.enable": "true",
    }
    broker = KafkaBroker(DEFAULT_KAFKA_VERSION, data_dir=tmp_path / "kafka", config=config)
    with broker.start(), KafkaProtocol({"bootstrap.servers": broker.bootstrap_servers}) as proto:
        assert proto.offers_kip939()
        tid = f"kip939-{uuid.uuid4().hex[:8]}"
        node = coordinator_of(proto, tid)
        deadline = time.monotonic() + 30
        answer = proto.init_producer_id(node, tid, 3_000, enable_2pc=True)
        while answer.error in LOADING and time.monotonic() < deadline:
            time.sleep(0.2)  # a fresh broker's coordinator is still loading
            answer = proto.init_producer_id(node, tid, 3_000, enable_2pc=True)
        assert answer.error == ErrorCode.NONE, answer
        [state] = proto.describe_transactions([tid])
        assert state.transaction_timeout_ms == TWO_PC_TIMEOUT_MS
        kept = proto.init_producer_id(node, tid, 3_000, enable_2pc=True, keep_prepared_txn=True)
        assert kept.error == ErrorCode.UNSUPPORTED_VERSION
