"""Record timestamps a topic will not keep, on the real broker (Apache Kafka 4.x).

The check reads each topic's settings by DescribeConfigs (topic settings over the broker's
defaults) and refuses before anything opens; the broker is then asked whether it really
does what the check says: a record beyond ``message.timestamp.after.max.ms`` is rejected,
and committed records stamped last March are deleted by time retention at the broker's
next check (a broker of this module's own, checking every second), after which the audit
names them REMOVED, not MISSING. The rules themselves: tests/unit/transaction/test_retention.py.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from airflow_provider_kafka2pc.errors import TimestampRefusedError
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.protocol.configs import ConfigSource
from airflow_provider_kafka2pc.transaction.audit import REMOVED
from airflow_provider_kafka2pc.transaction.controller import Outcome, TransactionController
from airflow_provider_kafka2pc.transaction.retention import LONG_MAX, SETTINGS
from airflow_provider_kafka2pc.transaction.topic_configs import (
    check_record_timestamps,
    topic_timestamp_policies,
)
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter
from devtools.broker import KafkaBroker
from tests.conftest import REAL_KAFKA_ENV, TEST_BROKER_CONFIG, assert_exactly_once, unique_id

DAY = 86_400_000
HOUR = 3_600_000
#: 2026-03-01T00:00:00Z: "historical rows stamped last March".
MARCH = 1_772_323_200_000


def now_ms() -> int:
    return int(time.time() * 1000)


def new_topic(settings: dict[str, Any], partitions: int = 1, **config: str) -> str:
    """A fresh topic with these topic-level settings (``retention_ms`` -> ``retention.ms``)."""
    name = f"r-{uuid.uuid4().hex[:12]}"
    topic = NewTopic(
        name, partitions, 1, config={k.replace("_", "."): v for k, v in config.items()}
    )
    admin = AdminClient(settings)  # held until the answer: a collected client cancels it
    [future] = admin.create_topics([topic]).values()
    future.result(30)
    return name


def write(settings: dict[str, Any], topic: str, stamp: int, count: int = 10):
    rows = [(f"k{n}".encode(), b"v", None, stamp + n) for n in range(count)]
    return TransactionalWriter(settings, unique_id()).write(topic, rows)


def test_default_retention_refuses_a_march_timestamp(protocol, settings):
    topic = new_topic(settings)
    policy = topic_timestamp_policies(protocol, [topic])[topic]
    assert (policy.retention_ms, policy.cleanup_policy) == (7 * DAY, frozenset({"delete"}))
    assert policy.sources["retention.ms"] == "Kafka's default"
    with pytest.raises(TimestampRefusedError) as refused:
        check_record_timestamps(protocol, [topic], MARCH, now_ms(), "updated_at")
    text = str(refused.value)
    assert "timestamp_column 'updated_at'" in text and f"topic {topic!r}" in text
    assert "2026-03-01T00:00:00.000Z (1772323200000 ms)" in text
    assert "retention.ms=604800000 (7 days, Kafka's default)" in text
    # A recent export into the same topic passes.
    assert check_record_timestamps(protocol, [topic], now_ms() - DAY, now_ms(), "ts") == []


def test_a_compacted_topic_takes_a_march_timestamp(protocol, settings):
    topic = new_topic(settings, cleanup_policy="compact")
    assert check_record_timestamps(protocol, [topic], MARCH, now_ms(), "ts") == []
    policy = topic_timestamp_policies(protocol, [topic])[topic]
    assert policy.time_retention_ms is None and policy.sources["cleanup.policy"] == (
        "set on the topic"
    )


def test_topic_retention_minus_one_takes_a_march_timestamp(protocol, settings):
    topic = new_topic(settings, retention_ms="-1")
    assert check_record_timestamps(protocol, [topic], MARCH, now_ms(), "ts") == []
    described = protocol.describe_topic_configs([topic], SETTINGS)[topic]
    assert described["retention.ms"].value == "-1"
    assert described["retention.ms"].source is ConfigSource.TOPIC
    assert described["message.timestamp.before.max.ms"].value == str(LONG_MAX)


def test_a_future_beyond_after_max_is_refused_and_the_broker_rejects_it(protocol, settings):
    """Kafka 4's 1 h ahead: refused by the check, even with allow_expiring; and the broker
    really rejects such a record (the claim, asked of the broker once)."""
    topic = new_topic(settings)
    future = now_ms() + 2 * HOUR
    assert topic_timestamp_policies(protocol, [topic])[topic].after_max_ms == HOUR
    with pytest.raises(TimestampRefusedError) as refused:
        check_record_timestamps(protocol, [topic], now_ms(), future, "ts", allow_expiring=True)
    [refusal] = refused.value.refusals
    assert (refusal.kind, refusal.setting) == ("rejected", "message.timestamp.after.max.ms")
    assert check_record_timestamps(protocol, [topic], now_ms(), now_ms() + HOUR // 2, "ts") == []

    errors: list[Any] = []
    producer = Producer({**settings, "message.send.max.retries": 0})
    producer.produce(topic, b"v", timestamp=future, on_delivery=lambda e, _m: errors.append(e))
    producer.flush(30)
    assert [e.name() if e else None for e in errors] == ["INVALID_TIMESTAMP"]


def test_allow_expiring_lets_a_march_timestamp_through(protocol, settings):
    topic = new_topic(settings)
    assert (
        check_record_timestamps(protocol, [topic], MARCH, now_ms(), "ts", allow_expiring=True) == []
    )


def test_several_topics_in_one_call_name_only_the_refusing_one(protocol, settings):
    kept, expiring = new_topic(settings, retention_ms="-1"), new_topic(settings)
    controller = TransactionController(protocol)
    with pytest.raises(TimestampRefusedError) as refused:
        check_record_timestamps(controller, [kept, expiring], MARCH, now_ms(), "ts")
    assert [r.topic for r in refused.value.refusals] == [expiring]


def test_the_audit_names_records_deleted_from_the_log_removed(protocol, settings, bootstrap):
    """DeleteRecords past a committed transaction (what retention does to its segment): the
    audit reads from the new log start and says REMOVED, naming the log start and the range;
    the transaction after it is still COMMITTED in full."""
    topic = new_topic(settings)
    first, second = write(settings, topic, now_ms()), write(settings, topic, now_ms())
    controller = TransactionController(protocol)
    assert [r.outcome for r in controller.commit_all([first, second])] == [Outcome.COMMITTED] * 2
    log_start = second.partitions[0].first_offset
    admin = AdminClient(settings)
    [deleted] = admin.delete_records([TopicPartition(topic, 0, log_start)]).values()
    assert deleted.result(30).low_watermark == log_start

    report, _ = assert_exactly_once(protocol, bootstrap, topic, first, second, committed=10)
    gone, kept = report.committables
    part = first.partitions[0]
    assert gone["state"] == REMOVED and gone["committed"] == 0
    assert gone["removed"] == [
        f"removed by retention: log start {log_start} of {topic}-0 past committed range "
        f"{part.first_offset}..{part.last_offset}"
    ]
    assert (kept["state"], kept["complete"], "removed" in kept) == ("COMMITTED", True, False)
    assert report.partitions[0].to_dict()["log_start"] == log_start


@pytest.fixture(scope="module")
def retaining_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A broker that applies time retention every second (Kafka's default: 5 min)."""
    if os.environ.get(REAL_KAFKA_ENV):
        pytest.skip(f"needs the local broker; {REAL_KAFKA_ENV} is set")
    broker = KafkaBroker(
        data_dir=Path(tmp_path_factory.mktemp("retaining")) / "kafka",
        config={**TEST_BROKER_CONFIG, "log.retention.check.interval.ms": "1000"},
    )
    try:
        yield broker.start()
    finally:
        broker.stop()


def test_the_claim_march_records_committed_then_deleted_by_retention(retaining_broker):
    """What the check prevents, on the broker: a March-stamped export into a topic with
    Kafka's default retention commits fine, then the broker's time retention deletes it
    (its first retention check comes about 30 s after start). The audit then says REMOVED,
    not MISSING; a read_committed consumer sees nothing."""
    settings = {"bootstrap.servers": retaining_broker.bootstrap_servers}
    topic = new_topic(settings)
    with KafkaProtocol(settings, timeout_ms=10_000) as protocol:
        with pytest.raises(TimestampRefusedError):
            check_record_timestamps(protocol, [topic], MARCH, MARCH + 9, "ts")
        committable = write(settings, topic, MARCH)
        assert TransactionController(protocol).commit(committable).outcome is Outcome.COMMITTED
        leader = protocol.partition_leaders(topic)[0]
        deadline = time.monotonic() + 90
        while protocol.log_start_offset(leader, topic, 0)[1] == 0:
            assert time.monotonic() < deadline, "retention did not delete the March segment"
            time.sleep(1)
        report, seen = assert_exactly_once(
            protocol, settings["bootstrap.servers"], topic, committable, committed=0
        )
    [view] = report.committables
    assert view["state"] == REMOVED, report.to_dict()
    assert seen.total == 0
