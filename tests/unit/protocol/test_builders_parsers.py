"""The protocol room's pure halves, without a broker: a batch built for a Produce parses
back to the same records, versions are chosen as both sides offer, and the builders refuse
what the request version cannot carry. The sends are proved on the real broker
(tests/test_real_broker.py, tests/test_two_phase.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from airflow_provider_kafka2pc.errors import BrokerMovedError, ProtocolError, UnsupportedError
from airflow_provider_kafka2pc.protocol.codes import (
    COORDINATOR_MOVED,
    LEADER_MOVED,
    MOVED,
    ErrorCode,
    error_name,
)
from airflow_provider_kafka2pc.protocol.metadata import (
    parse_find_coordinator,
    parse_partition_leaders,
)
from airflow_provider_kafka2pc.protocol.producer import init_producer_id_request
from airflow_provider_kafka2pc.protocol.records import parse_batches, transactional_batch
from airflow_provider_kafka2pc.protocol.versions import ApiKey, highest_common


def test_a_built_transactional_batch_parses_back_to_its_records():
    rows = [(b"k1", b"v1"), (b"k2", None, [("h", b"x")]), (None, b"v3", None)]
    raw = transactional_batch(
        rows,
        producer_id=7,
        epoch=3,
        base_sequence=0,
        timestamp_ms=1_700_000_000_000,
        max_bytes=1 << 20,
        where="t-0",
    )
    (batch,) = parse_batches(raw, with_keys=True, with_records=True)
    assert (batch.producer_id, batch.producer_epoch, batch.is_transactional) == (7, 3, True)
    assert batch.control is None and batch.record_count == 3
    assert batch.keys == (b"k1", b"k2", None) and batch.tombstones == 1
    assert [(r.key, r.value, r.headers) for r in batch.records] == [
        (b"k1", b"v1", ()),
        (b"k2", None, (("h", b"x"),)),
        (None, b"v3", ()),
    ]
    assert {r.timestamp for r in batch.records} == {1_700_000_000_000}


def test_a_batch_over_its_bound_names_where_and_which_record():
    with pytest.raises(ValueError, match=r"batch for t-4 exceeds 200 bytes at record 1"):
        transactional_batch(
            [(b"k", b"v" * 100), (b"k", b"v" * 100)],
            producer_id=1,
            epoch=0,
            base_sequence=0,
            timestamp_ms=0,
            max_bytes=200,
            where="t-4",
        )


def test_nothing_fetched_parses_to_no_batch():
    assert parse_batches(None, with_keys=True) == []
    assert parse_batches(b"", with_keys=False) == []


@pytest.mark.parametrize(
    ("offered", "cap", "expected"),
    [
        ((0, 5), None, 5),  # EndTxn: kafka-python offers v5 too
        ((0, 5), 4, 4),  # capped for librdkafka's classic transactions
        (None, None, None),  # the broker lacks the API
        ((3, 5), 2, None),  # the cap is below what the broker takes
    ],
)
def test_the_version_sent_is_the_highest_both_sides_offer(offered, cap, expected):
    assert highest_common(ApiKey.END_TXN, offered, cap) == expected


def test_kip939_fields_need_init_producer_id_v6():
    with pytest.raises(UnsupportedError, match="v5 has no KIP-939 fields"):
        init_producer_id_request("tid", 60_000, 5, enable_2pc=True)
    assert init_producer_id_request("tid", 60_000, 5).producer_id == -1


def test_find_coordinator_answers_per_key_from_v4():
    v4 = SimpleNamespace(coordinators=[SimpleNamespace(error_code=0, node_id=2)])
    v3 = SimpleNamespace(error_code=15, node_id=-1)
    assert parse_find_coordinator(v4, 4) == (0, 2)
    assert parse_find_coordinator(v3, 3) == (15, -1)


def _metadata(error_code, operations=None):
    partitions = [SimpleNamespace(partition_index=0, leader_id=1)]
    entry = SimpleNamespace(
        error_code=error_code, partitions=partitions, authorized_operations=operations
    )
    return SimpleNamespace(topics=[entry])


def test_metadata_tells_a_moving_leader_from_a_missing_or_unwritable_topic():
    assert parse_partition_leaders(_metadata(0), "t", for_write=True) == {0: 1}
    with pytest.raises(BrokerMovedError, match="LEADER_NOT_AVAILABLE"):
        parse_partition_leaders(_metadata(ErrorCode.LEADER_NOT_AVAILABLE), "t", for_write=False)
    with pytest.raises(ProtocolError, match="UNKNOWN_TOPIC_OR_PARTITION"):
        parse_partition_leaders(_metadata(3), "t", for_write=False)
    with pytest.raises(ProtocolError, match="not writable"):
        parse_partition_leaders(_metadata(0, operations={3}), "t", for_write=True)
    assert parse_partition_leaders(_metadata(0, operations={3}), "t", for_write=False) == {0: 1}


def test_the_moved_table_splits_into_leader_and_coordinator_answers():
    assert LEADER_MOVED.isdisjoint(COORDINATOR_MOVED)
    assert set(MOVED) == LEADER_MOVED | COORDINATOR_MOVED
    assert {14, 15, 16} == COORDINATOR_MOVED
    assert error_name(16) == "NOT_COORDINATOR"
    assert error_name(58) == "SaslAuthenticationFailedError"  # outside ErrorCode
