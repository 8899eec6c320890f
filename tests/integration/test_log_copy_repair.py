"""Loss repair from the log: a lost participant's aborted records copied into a new
transaction under its own id, with no source and no Spark.

Real broker, real ledger (SQLite), real timeouts: the verdict is COMMIT, the broker aborts
the participants' transactions (a 4 s timeout, waited out), and the coordinator, given a
:class:`LogCopy` and NO way to re-prepare, commits the batch exactly once. The witnesses:
the log's markers (the audit), a read_committed consumer, and the records themselves,
compared field by field (partition, order, key, value, headers, CreateTime) with what the
lost transactions wrote, read back read_uncommitted by confluent-kafka.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from airflow_provider_kafka2pc.coordination.finish import Coordinator
from airflow_provider_kafka2pc.errors import RepairImpossibleError
from airflow_provider_kafka2pc.ledger import BatchState, Ledger, ParticipantState, Verdict
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.transaction.committable import Committable
from airflow_provider_kafka2pc.transaction.controller import TransactionController
from airflow_provider_kafka2pc.transaction.log import LogReader
from airflow_provider_kafka2pc.transaction.log_copy import LogCopy, NotInLogError
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter
from tests.conftest import assert_exactly_once, unique_id

SHORT_MS = 4_000
RUN_KEY = "k"
#: CreateTimes an hour old: an old one (2023) would let the broker's time retention (7 days)
#: delete the segment under the test, which is the "not in the log" case, not this one.
STAMP = int(time.time() * 1000) - 3_600_000


def source_rows(participant: int, count: int = 300) -> list[tuple[Any, ...]]:
    """What a source would give for one participant: keys, values (every 7th a tombstone),
    headers (none, one, two with a repeated name and a null value) and CreateTimes."""
    rows = []
    for n in range(count):
        key = f"p{participant}-{n:05d}".encode()
        value = None if n % 7 == 3 else (b'{"n": %d, "pad": "%s"}' % (n, b"x" * (n % 50)))
        headers = [None, [("h", b"%d" % n)], [("h", b"a"), ("h", None), ("z", b"")]][n % 3]
        rows.append((key, value, headers, STAMP + participant * 10_000 + n))
    return rows


def write(settings, topic, tid, rows, timeout_ms=SHORT_MS) -> Committable:
    return TransactionalWriter(settings, tid, transaction_timeout_ms=timeout_ms).write(topic, rows)


def wait_aborted_by_broker(protocol: KafkaProtocol, tids: list[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        states = {d.transactional_id: d.state for d in protocol.describe_transactions(tids)}
        if all(states.get(t) in ("CompleteAbort", "Empty") for t in tids):
            return
        assert time.monotonic() < deadline, f"the broker did not abort {tids}: {states}"
        time.sleep(0.25)


def records_in(bootstrap: str, committable: Committable, isolation: str) -> dict[int, list]:
    """Per partition, the records of the committable's ranges, in log order, as a
    confluent-kafka consumer reads them (not our parser)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_id("witness"),
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    out: dict[int, list] = {}
    try:
        for part in committable.partitions:
            consumer.assign([TopicPartition(part.topic, part.partition, part.first_offset)])
            rows: list = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None or message.error():
                    if rows and message is None:
                        break
                    continue
                if message.offset() > part.last_offset:
                    break
                rows.append(
                    (
                        message.key(),
                        message.value(),
                        message.headers(),
                        message.timestamp(),
                    )
                )
                if message.offset() == part.last_offset:
                    break
            out[part.partition] = rows
    finally:
        consumer.close()
    return out


class Rig:
    """One export batch of ``n`` participants prepared with a short timeout, COMMIT decided,
    lost to the broker's timeout."""

    def __init__(self, tmp_path: Path, protocol, settings, topic: str, n: int, **writer: Any):
        self.export = unique_id("logcopy")
        self.protocol, self.settings, self.topic = protocol, settings, topic
        self.store = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
        batch = self.store.begin(
            self.export, RUN_KEY, topic=topic, id_prefix=self.export, num_partitions=n
        )
        self.rows = [source_rows(i) for i in range(n)]
        config = {**settings, **writer}
        self.lost = [
            write(config, topic, tid, self.rows[i]) for i, tid in enumerate(batch.transactional_ids)
        ]
        self.total = sum(c.record_count for c in self.lost)
        self.store.record_prepared(self.export, RUN_KEY, self.lost, source_rows=self.total)
        self.store.decide(self.export, RUN_KEY, Verdict.COMMIT, "test")
        wait_aborted_by_broker(protocol, [c.transactional_id for c in self.lost], 60)

    def coordinator(self, log_copy: bool = True) -> Coordinator:
        copy = LogCopy(LogReader(self.protocol), self.settings) if log_copy else None
        return Coordinator(self.store, TransactionController(self.protocol), copy)

    def participants(self):
        return self.store.participants(self.export, RUN_KEY)


@pytest.fixture
def rigs(tmp_path):
    made: list[Rig] = []

    def make(*args: Any, **kwargs: Any) -> Rig:
        made.append(Rig(tmp_path, *args, **kwargs))
        return made[-1]

    yield make
    for rig in made:
        rig.store.close()


def never(*_: Any) -> Any:
    raise AssertionError("the source must not be read: the records are in the log")


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_lost_participants_are_copied_from_the_log_byte_for_byte(
    rigs, protocol, settings, bootstrap, make_topic, codec
):
    """Every codec librdkafka writes: the copy holds the same records, in the same
    partitions and order, keys, values, tombstones, headers and CreateTimes; the batch
    ends COMMITTED exactly once without any source."""
    topic = make_topic(3)
    rig = rigs(protocol, settings, topic, 2, **{"compression.codec": codec, "linger.ms": 50})
    originals = [records_in(bootstrap, c, "read_uncommitted") for c in rig.lost]
    assert sum(len(r) for o in originals for r in o.values()) == rig.total

    finished = rig.coordinator().commit(rig.export, RUN_KEY, never)

    assert finished.batch.state is BatchState.COMMITTED
    assert finished.repaired_from == {0: "log", 1: "log"}
    assert [lp.index for lp in finished.repaired] == [0, 1]
    assert "repaired partition 0" in finished.notes[-1] and "from the log" in finished.notes[-1]
    copies = [p.committable for p in rig.participants()]
    assert all(p.state is ParticipantState.COMMITTED for p in rig.participants())
    assert [c.transactional_id for c in copies] == [c.transactional_id for c in rig.lost]
    for lost, copy, original in zip(rig.lost, copies, originals, strict=True):
        assert copy.producer_epoch != lost.producer_epoch or copy.producer_id != lost.producer_id
        assert [(p.partition, p.record_count) for p in copy.partitions] == [
            (p.partition, p.record_count) for p in lost.partitions
        ]
        assert records_in(bootstrap, copy, "read_committed") == original
    # The source itself, as a multiset: nothing lost, nothing invented.
    seen = sorted(
        (k, v, h or None, t[1]) for o in originals for rows in o.values() for k, v, h, t in rows
    )
    want = sorted(
        (k, v, [tuple(x) for x in h] if h else None, t) for rows in rig.rows for k, v, h, t in rows
    )
    assert [(k, v, [tuple(x) for x in h] if h else None, t) for k, v, h, t in seen] == want
    assert_exactly_once(
        protocol, bootstrap, topic, *rig.lost, *copies, committed=rig.total, aborted=rig.total
    )


def test_records_deleted_from_the_log_fall_back_to_the_source(
    rigs, protocol, settings, bootstrap, make_topic
):
    """DeleteRecords past participant 0's range: it is re-prepared from the source, the
    other still copied from the log; the log line says which way and why."""
    topic = make_topic(1)  # both participants in one partition: the delete hits one range
    rig = rigs(protocol, settings, topic, 2)
    first, second = rig.lost
    assert first.partitions[0].last_offset < second.partitions[0].first_offset
    record_lost(rig)  # a commit without repair found them LOST; then retention struck
    delete_records(settings, topic, 0, first.partitions[0].last_offset + 1)
    with pytest.raises(NotInLogError, match="retention or DeleteRecords"):
        LogCopy(LogReader(protocol), settings).locate(first)

    asked: list[list[int]] = []

    def from_source(batch, participants, lost):
        asked.append([p.index for p in lost])
        return {
            p.index: write(settings, topic, p.transactional_id, rig.rows[p.index], 60_000)
            for p in lost
        }

    finished = rig.coordinator().commit(rig.export, RUN_KEY, from_source)
    assert asked == [[0]]
    assert finished.repaired_from == {0: "source", 1: "log"}
    assert finished.batch.state is BatchState.COMMITTED
    copies = [p.committable for p in rig.participants()]
    assert_exactly_once(
        protocol,
        bootstrap,
        topic,
        *copies,
        start_offsets={0: first.partitions[0].last_offset + 1},
        committed=rig.total,
        aborted=second.record_count,
    )


def test_not_in_the_log_and_no_source_is_refused_leaving_nothing_open(
    rigs, protocol, settings, bootstrap, make_topic
):
    """The external-operator path: no re-prepare. A participant whose records were partly
    deleted (all but its last) fails the repair naming it and why; the copy already made
    of the other is aborted; the batch stays COMMIT_DECIDED with both LOST; nothing open,
    nothing committed."""
    topic = make_topic(1)
    rig = rigs(protocol, settings, topic, 2)
    first = rig.lost[0]
    delete_records(settings, topic, 0, first.partitions[0].last_offset)

    with pytest.raises(RepairImpossibleError) as refused:
        rig.coordinator().commit(rig.export, RUN_KEY)
    text = str(refused.value)
    assert f"partition 0 ({first.transactional_id}, 300 rows)" in text
    assert "not in the log" in text and "retention or DeleteRecords" in text
    assert "no way to re-prepare from the source here" in text
    assert "600 rows are NOT in the topic" in text
    assert [lp.index for lp in refused.value.lost] == [0, 1]
    assert rig.store.get(rig.export, RUN_KEY).state is BatchState.COMMIT_DECIDED
    assert [p.state for p in rig.participants()] == [ParticipantState.LOST] * 2
    # The second participant's records (still in the log) and its aborted copy: aborted.
    assert_exactly_once(
        protocol,
        bootstrap,
        topic,
        *rig.lost,
        start_offsets={0: first.partitions[0].last_offset},
        committed=0,
        aborted=None,  # the batch holding the new log start is read whole: 601 or more
    )


def test_without_a_log_copy_the_commit_still_reports_the_loss(rigs, protocol, settings, make_topic):
    """The switch: no log copy and no re-prepare = the loss is raised as before."""
    from airflow_provider_kafka2pc.errors import ParticipantLostError

    rig = rigs(protocol, settings, make_topic(1), 1)
    with pytest.raises(ParticipantLostError, match="rows are NOT in the topic"):
        rig.coordinator(log_copy=False).commit(rig.export, RUN_KEY)
    record_lost(rig)


def record_lost(rig: Rig) -> None:
    from airflow_provider_kafka2pc.errors import ParticipantLostError

    with pytest.raises(ParticipantLostError):
        rig.coordinator(log_copy=False).commit(rig.export, RUN_KEY)
    assert {p.state for p in rig.participants()} == {ParticipantState.LOST}


def delete_records(settings: dict[str, Any], topic: str, partition: int, before: int) -> None:
    admin = AdminClient(settings)
    [future] = admin.delete_records([TopicPartition(topic, partition, before)]).values()
    assert future.result(30).low_watermark == before
