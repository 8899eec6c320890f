"""The JVM writer's ``PartitionTransaction`` (jvm/src), driven outside Spark, against the broker.

One partition's transaction, as a task runs it, in a JVM of its own: the product jar, the
tests' jar (its harness, ``jvm/test-src/kafka2pc/spark/TransactionHarness.java``, and the
fault hook), kafka-clients and PySpark's jars (:mod:`tests.support.jvm_test_jar`). The JVM
exits before anything is checked, so what it left on the broker is all there is: an open
transaction under the producer id and epoch it reported, which this process then commits
by EndTxn (the project's controller), as the orchestrator does; or nothing open after a
failure. Witnesses: DescribeTransactions, the log audit, a read_committed consumer and the
records themselves. On both broker versions (4.x: transaction version 2; 3.9: classic).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from airflow_provider_kafka2pc.spark.jvm_writer import producer_settings
from airflow_provider_kafka2pc.transaction.committable import Committable
from airflow_provider_kafka2pc.transaction.controller import Outcome, TransactionController
from tests.conftest import assert_ended, assert_exactly_once, audit, unique_id
from tests.support.jvm_test_jar import fault_hook, run_harness, run_harness_many

from .test_log_copy_repair import records_in

TIMEOUT_MS = 60_000
ROWS = 60
#: CreateTimes an hour old (within the broker's retention).
STAMP = int(time.time() * 1000) - 3_600_000


def rows(count: int = ROWS) -> list[dict[str, Any]]:
    """Keys, values (every 10th a tombstone), a header on every other row, CreateTimes."""
    return [
        {
            "key": f"k-{n:04d}",
            "value": None if n % 10 == 9 else f"value-{n}",
            "timestamp": STAMP + n,
            "headers": {"tenant": f"t-{n % 3}"} if n % 2 == 0 else {},
        }
        for n in range(count)
    ]


def scenario(settings: dict[str, Any], topics: list[str], tid: str, **extra: Any) -> dict:
    return {
        "topics": topics,
        "ids": [tid],
        "settings": producer_settings(settings, TIMEOUT_MS),
        "transaction_timeout_ms": TIMEOUT_MS,
        "header_names": ["tenant"],
        "partition": 0,
        "attempt": 0,
        "rows": rows(),
        **extra,
    }


def committable_of(answer: dict[str, Any]) -> Committable:
    assert "prepared" in answer, answer
    return Committable.from_json(answer["prepared"]["committable"])


@pytest.mark.kafka_versions()
def test_prepare_leaves_the_transaction_open_under_the_id_and_epoch_it_reports(
    settings, bootstrap, protocol, make_topic, kafka_version
):
    topic, tid = make_topic(3), unique_id("jvm-ptx")

    answer = run_harness(scenario(settings, [topic], tid))

    prepared = answer["prepared"]
    assert (prepared["partition"], prepared["attempt"], prepared["input_rows"]) == (0, 0, ROWS)
    committable = committable_of(answer)
    assert committable.transactional_id == tid and committable.record_count == ROWS
    assert committable.transaction_version == (2 if kafka_version.startswith("4.") else 1)
    # The JVM is gone; its transaction is not: Ongoing, under the producer id and epoch it
    # reported, on the partitions it covered, every record open in the log.
    [described] = protocol.describe_transactions([tid])
    assert described.state == "Ongoing", described
    assert (described.producer_id, described.producer_epoch) == (
        committable.producer_id,
        committable.producer_epoch,
    )
    assert described.partitions == tuple(
        sorted(f"{p.topic}-{p.partition}" for p in committable.partitions)
    )
    assert audit(protocol, topic, committable).totals["open"] == ROWS

    [result] = TransactionController(protocol).commit_all([committable])

    assert result.outcome is Outcome.COMMITTED
    assert_exactly_once(protocol, bootstrap, topic, committable, committed=ROWS, aborted=0)
    # The records are the rows: key, value (tombstones null), header, CreateTime.
    seen = sorted(
        (k.decode(), v, h, ts[1])
        for records in records_in(bootstrap, committable, "read_committed").values()
        for k, v, h, ts in records
    )
    assert seen == [
        (
            r["key"],
            None if r["value"] is None else r["value"].encode(),
            [(name, value.encode()) for name, value in r["headers"].items()] or None,
            r["timestamp"],
        )
        for r in rows()
    ]


def test_an_empty_partition_opens_no_transaction(settings, protocol, make_topic):
    topic, tid = make_topic(1), unique_id("jvm-ptx-empty")

    answer = run_harness({**scenario(settings, [topic], tid), "rows": []})

    committable = committable_of(answer)
    assert committable.is_empty and committable.producer_id == -1, committable
    assert answer["prepared"]["input_rows"] == 0
    assert protocol.list_transactions(prefix=tid) == []  # not even an InitProducerId


def test_a_row_that_cannot_be_written_fails_the_task_and_aborts_its_transaction(
    settings, bootstrap, protocol, make_topic
):
    topics, tid = [make_topic(2), make_topic(2)], unique_id("jvm-ptx-fail")
    routed = [{**r, "topic": topics[n % 2]} for n, r in enumerate(rows())]
    routed[40]["topic"] = "elsewhere"  # no topic of the export's: refused mid-write

    answer = run_harness({**scenario(settings, topics, tid), "rows": routed})

    assert answer["failed"].startswith(f"kafka2pc: partition 0 ({tid}): "), answer
    assert "a row goes to topic elsewhere" in answer["failed"]
    assert f"kafka2pc: {tid}: writing failed" in answer["stderr"]
    assert "transaction aborted" in answer["stderr"]
    # Nothing left open: whatever of the first 40 rows reached the log is aborted.
    [described] = protocol.describe_transactions([tid])
    assert described.state in ("CompleteAbort", "Empty"), described
    for topic in topics:
        assert_exactly_once(protocol, bootstrap, topic, committed=0)


#: Rows sent before each try's abort: from right after the first send (the client's first
#: AddPartitionsToTxn, or on transaction version 2 its first Produce, still in flight) on.
RACE_ROWS = [1, 1, 2, 1, 3, 1, 5, 1, 8, 1, 13, 1, 21, 1, 34, 1]


@pytest.mark.kafka_versions()
def test_an_abort_racing_the_first_requests_leaves_nothing_open(
    settings, bootstrap, protocol, make_topic, kafka_version
):
    """The JVM writer's abort right after its first sends, whether a failed row (the task's
    own failure) or Spark's abort of the task ends the write. librdkafka skipped EndTxn
    when an abort raced its first AddPartitionsToTxn and left about 3 in 10 such
    transactions Ongoing (tests/integration/test_writer_chunks.py); Java's client must
    leave none: sixteen tries in one JVM, each transaction ended, whatever reached the log
    aborted."""
    topics = [make_topic(2), make_topic(2)]
    tries = []
    for n, count in enumerate(RACE_ROWS):
        tid = unique_id(f"jvm-ptx-race{n}")
        if n % 2:  # the task's failure: the row after ``count`` goes to no topic of ours
            routed = [{**r, "topic": topics[i % 2]} for i, r in enumerate(rows(count + 1))]
            routed[count]["topic"] = "elsewhere"
            tries.append({**scenario(settings, topics, tid), "rows": routed})
        else:  # Spark's abort of the task (the DataSource writer's abort)
            tries.append({**scenario(settings, topics[:1], tid), "rows": rows(count),
                          "end": "abort"})  # fmt: skip

    answers = run_harness_many(tries)

    for n, (attempt, answer) in enumerate(zip(tries, answers, strict=True)):
        tid = attempt["ids"][0]
        expected = "failed" if n % 2 else "aborted"
        assert expected in answer, (n, answer)
        assert_ended(protocol, tid)
    assert answers[0]["stderr"].count("transaction aborted") == len(tries)
    for topic in topics:
        assert_exactly_once(protocol, bootstrap, topic, committed=0)


def test_a_producer_the_client_refuses_fails_the_task_with_nothing_opened(
    settings, protocol, make_topic
):
    topic, tid = make_topic(1), unique_id("jvm-ptx-refused")
    config = {**producer_settings(settings, TIMEOUT_MS), "compression.type": "nope"}

    answer = run_harness({**scenario(settings, [topic], tid), "settings": config})

    assert answer["failed"].startswith(f"kafka2pc: partition 0 ({tid}): cannot create its producer")
    assert "compression.type" in answer["failed"], answer
    assert protocol.list_transactions(prefix=tid) == []


def test_the_fault_hook_leaves_a_dead_tasks_transaction_open_until_fenced(
    settings, bootstrap, protocol, make_topic
):
    """The tests' fault hook (loaded from the tests' jar by the product's hook property)
    plays a dead executor: 25 rows flushed, the producer closed, no abort."""
    topic, tid = make_topic(3), unique_id("jvm-ptx-die")

    answer = run_harness({**scenario(settings, [topic], tid), "hook": fault_hook("0,25,1,die")})

    assert "kafka2pc injected fault: partition 0 died after 25 rows" in answer["failed"], answer
    assert "left to be fenced" in answer["stderr"]
    [described] = protocol.describe_transactions([tid])
    assert described.state == "Ongoing", described
    assert audit(protocol, topic).totals["open"] == 25

    TransactionController(protocol).fence(tid)

    assert_exactly_once(protocol, bootstrap, topic, committed=0, aborted=25)


def test_a_hook_the_task_cannot_load_fails_it_before_anything_opens(settings, protocol, make_topic):
    topic, tid = make_topic(1), unique_id("jvm-ptx-nohook")

    answer = run_harness({**scenario(settings, [topic], tid), "hook": "kafka2pc.faults.Nope:x"})

    assert "kafka2pc.writer.hook names kafka2pc.faults.Nope" in answer["failed"], answer
    assert protocol.list_transactions(prefix=tid) == []
