"""The writer's chunked hot path on the real broker: records handed over an Arrow batch at a
time, by ``produce()`` per record or one ``produce_batch`` call per chunk, land exactly once,
in order, with their headers, and the committable says exactly where.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from airflow_provider_kafka2pc.errors import WriteError
from airflow_provider_kafka2pc.transaction.chunks import RecordChunk
from airflow_provider_kafka2pc.transaction.controller import Outcome, TransactionController
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter
from tests.conftest import assert_ended, assert_exactly_once, unique_id


def read_all(bootstrap: str, topic: str, partition: int) -> list[tuple]:
    """Every committed record of one partition, in log order: (key, value, headers)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"chunks-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        out = []
        while True:
            message = consumer.poll(10)
            assert message is not None, "no end of partition within 10 s"
            if message.error() is not None:
                return out
            out.append((message.key(), message.value(), message.headers()))
    finally:
        consumer.close()


def chunks(n: int, size: int, start: int = 0) -> list[RecordChunk]:
    return [
        RecordChunk(
            [b"k%06d" % i for i in range(s, min(n, s + size))],
            [b"v%06d" % i for i in range(s, min(n, s + size))],
        )
        for s in range(start, n, size)
    ]


@pytest.mark.parametrize("batch_produce", [False, True], ids=["produce", "produce_batch"])
def test_chunks_land_once_in_order_and_the_committable_says_where(
    settings, bootstrap, protocol, make_topic, batch_produce
):
    topic = make_topic(1)
    writer = TransactionalWriter(settings, unique_id(), batch_produce=batch_produce)
    committable = writer.write_chunks(topic, chunks(25_000, 1_000))
    (part,) = committable.partitions
    assert (part.partition, part.first_offset, part.record_count) == (0, 0, 25_000)
    assert part.last_offset == 24_999 and committable.record_count == 25_000
    assert TransactionController(protocol).commit(committable).outcome is Outcome.COMMITTED
    assert_exactly_once(protocol, bootstrap, topic, committable, committed=25_000, aborted=0)
    assert [k for k, _, _ in read_all(bootstrap, topic, 0)] == [b"k%06d" % i for i in range(25_000)]


def test_produce_batch_waits_for_room_instead_of_reordering(
    settings, bootstrap, protocol, make_topic
):
    """A queue smaller than two chunks: each produce_batch call first waits for room."""
    topic = make_topic(1)
    config = {**settings, "queue.buffering.max.messages": 1_500}
    writer = TransactionalWriter(config, unique_id(), batch_produce=True)
    committable = writer.write_chunks(topic, chunks(20_000, 1_000))
    assert committable.record_count == 20_000
    assert TransactionController(protocol).commit(committable).outcome is Outcome.COMMITTED
    assert_exactly_once(protocol, bootstrap, topic, committable, committed=20_000, aborted=0)
    assert [k for k, _, _ in read_all(bootstrap, topic, 0)] == [b"k%06d" % i for i in range(20_000)]


@pytest.mark.parametrize("batch_produce", [False, True], ids=["produce", "produce_batch"])
def test_a_chunk_with_headers_keeps_them(settings, bootstrap, protocol, make_topic, batch_produce):
    """produce_batch drops headers: a chunk that has some goes through produce() instead."""
    topic = make_topic(1)
    with_headers = RecordChunk([b"a", b"b"], [b"1", b"2"], [[("h", b"x")], None])
    plain = RecordChunk([b"c"], [b"3"])
    writer = TransactionalWriter(settings, unique_id(), batch_produce=batch_produce)
    committable = writer.write_chunks(topic, [plain, with_headers, plain])
    assert TransactionController(protocol).commit(committable).outcome is Outcome.COMMITTED
    assert read_all(bootstrap, topic, 0) == [
        (b"c", b"3", None),
        (b"a", b"1", [("h", b"x")]),
        (b"b", b"2", None),
        (b"c", b"3", None),
    ]


def test_records_with_and_without_headers_mixed_in_one_write(
    settings, bootstrap, protocol, make_topic
):
    """write() groups records into chunks: headers of a later record are not dropped because
    the chunk's first record had none."""
    topic = make_topic(1)
    records = [(b"k%d" % i, b"v") for i in range(5)] + [(b"h", b"v", [("n", b"1")])]
    committable = TransactionalWriter(settings, unique_id()).write(topic, records)
    assert TransactionController(protocol).commit(committable).outcome is Outcome.COMMITTED
    assert read_all(bootstrap, topic, 0)[-1] == (b"h", b"v", [("n", b"1")])


def test_produce_batch_refusal_names_the_record_and_aborts(
    settings, bootstrap, protocol, make_topic
):
    topic = make_topic(1)
    chunk = RecordChunk([b"%d" % i for i in range(6)], [b"small"] * 5 + [b"x" * 2_000_000])
    writer = TransactionalWriter(settings, unique_id(), batch_produce=True)
    with pytest.raises(WriteError, match=r"record 1005 refused"):
        writer.write_chunks(topic, [*chunks(1_000, 500), chunk])
    assert_ended(protocol, writer.transactional_id)
    report, _ = assert_exactly_once(protocol, bootstrap, topic, committed=0)
    assert report.totals["open"] == 0


def routed_chunks(topics: list[str], n: int, size: int) -> list[RecordChunk]:
    """``chunks(n, size)``, chunk i going to ``topics[i % len(topics)]``."""
    return [
        RecordChunk(c.keys, c.values, topic=topics[i % len(topics)])
        for i, c in enumerate(chunks(n, size))
    ]


@pytest.mark.parametrize("batch_produce", [False, True], ids=["produce", "produce_batch"])
def test_one_transaction_spans_several_topics(
    settings, bootstrap, protocol, make_topic, batch_produce
):
    topics = [make_topic(2), make_topic(3)]
    writer = TransactionalWriter(settings, unique_id(), batch_produce=batch_produce)
    committable = writer.write_chunks(topics, routed_chunks(topics, 10_000, 1_000))
    assert {p.topic for p in committable.partitions} == set(topics)
    assert [(p.topic, p.partition) for p in committable.partitions] == sorted(
        (p.topic, p.partition) for p in committable.partitions
    )
    per_topic = {
        t: sum(p.record_count for p in committable.partitions if p.topic == t) for t in topics
    }
    assert per_topic == {topics[0]: 5_000, topics[1]: 5_000}
    assert TransactionController(protocol).commit(committable).outcome is Outcome.COMMITTED
    for topic in topics:
        assert_exactly_once(protocol, bootstrap, topic, committable, committed=5_000, aborted=0)


def test_a_chunk_for_an_undeclared_topic_aborts_the_whole_transaction(
    settings, bootstrap, protocol, make_topic
):
    """Also the writer's abort racing librdkafka's first AddPartitionsToTxn: librdkafka 2.16
    then skips EndTxn and the coordinator kept about 3 in 10 of these transactions Ongoing
    until their timeout, until the writer fenced its id after each abort. Fifteen tries:
    without the fence, all fifteen pass less than once in a hundred runs."""
    topics = [make_topic(1), make_topic(1)]
    stray = RecordChunk([b"x"], [b"y"], topic="not-declared")
    for _ in range(15):
        writer = TransactionalWriter(settings, unique_id())
        with pytest.raises(WriteError, match="not among"):
            writer.write_chunks(topics, [*routed_chunks(topics, 3_000, 1_000), stray])
        assert_ended(protocol, writer.transactional_id)
    for topic in topics:  # what reached either topic before the stray chunk: aborted
        assert_exactly_once(protocol, bootstrap, topic, committed=0)
    with pytest.raises(WriteError, match="names no topic"):
        TransactionalWriter(settings, unique_id()).write_chunks(topics, chunks(10, 10))
