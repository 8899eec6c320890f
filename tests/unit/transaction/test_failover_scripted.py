"""A failover at the protocol seam (issue 19): every control-plane call asks again, re-resolving
leader or coordinator, until its deadline; then an error naming what did not answer.

The real thing (nodes killed -9 on a three-node cluster) is in ``tests/cluster``; these pin
the retry rules with a scripted broker and a fake clock.
"""

from __future__ import annotations

import pytest

from airflow_provider_kafka2pc.errors import (
    BrokerMovedError,
    BrokerUnreachableError,
    ConnectionLostError,
    FailoverTimeoutError,
    ProtocolError,
    RetriableError,
    TransactionInDoubtError,
)
from airflow_provider_kafka2pc.protocol.codes import ErrorCode
from airflow_provider_kafka2pc.protocol.failover import Failover, RetryPolicy
from airflow_provider_kafka2pc.protocol.records import ControlType
from airflow_provider_kafka2pc.transaction.controller import Outcome, TransactionController
from airflow_provider_kafka2pc.transaction.log import LogReader
from tests.support.scripted import Answer, FakeClock, ScriptedBroker

COMMIT = ControlType.COMMIT


def failover(deadline_s: float = 10.0) -> tuple[Failover, FakeClock]:
    clock = FakeClock()
    return Failover(RetryPolicy(deadline_s=deadline_s), clock, clock.sleep), clock


def test_failover_asks_again_after_lost_connections_and_moved_answers():
    fo, clock = failover()
    answers: list[Exception | str] = [
        ConnectionLostError("FetchRequest to node 2: KafkaConnectionError"),
        BrokerMovedError("fetch from node 2: NOT_LEADER_OR_FOLLOWER", "NOT_LEADER_OR_FOLLOWER"),
        "answer",
    ]
    retried: list[Exception] = []

    def call() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert fo.run("fetch t-0@5", call, on_retry=retried.append) == "answer"
    assert [type(e) for e in retried] == [ConnectionLostError, BrokerMovedError]
    assert clock.sleeps == [0.05, 0.1]


def test_failover_gives_up_at_the_deadline_naming_the_call_and_the_last_error():
    fo, clock = failover(deadline_s=10.0)

    def dead() -> None:
        raise ConnectionLostError("EndTxnRequest to node 3 at 127.0.0.1:9093: KafkaConnectionError")

    with pytest.raises(FailoverTimeoutError) as raised:
        fo.run("EndTxn for 'tx-1'", dead)
    text = str(raised.value)
    assert text.startswith("EndTxn for 'tx-1': no usable answer within 10.0 s")
    assert "127.0.0.1:9093" in text
    assert clock.now == pytest.approx(1010.0)  # never sleeps past the deadline
    # Retriable, and caught where a lost connection or an unreachable broker is.
    assert isinstance(raised.value, RetriableError)
    assert isinstance(raised.value, ConnectionLostError | BrokerUnreachableError)


def test_failover_passes_refusals_and_spent_deadlines_through_at_once():
    fo, clock = failover()

    def refused() -> None:
        raise ProtocolError("topic 't': UNKNOWN_TOPIC_OR_PARTITION", "UNKNOWN_TOPIC_OR_PARTITION")

    with pytest.raises(ProtocolError):
        fo.run("metadata", refused)

    def inner_spent() -> None:
        raise FailoverTimeoutError("metadata of topic 't': no usable answer within 10.0 s")

    with pytest.raises(FailoverTimeoutError):
        fo.run("fetch", inner_spent)
    assert clock.sleeps == []


def test_log_reader_looks_the_leader_up_again_after_the_leader_died():
    broker = ScriptedBroker()
    c = broker.prepare("tx-1")
    broker.dropped_fetches = 2
    fo, _ = failover()
    ends = LogReader(broker, fo).log_ends(c.partitions)
    assert ends == {("topic", 0): 10, ("topic", 1): 10}
    assert broker.count("metadata") == 3  # the first lookup, and one after each lost fetch


def test_commit_rides_a_dead_leader_while_reading_log_ends():
    """Issue 19: the log ends were read before the retry loop; a dead leader ended the commit."""
    broker = ScriptedBroker(end_txn=[Answer(ErrorCode.NONE, COMMIT)])
    c = broker.prepare("tx-1")
    broker.dropped_fetches = 3
    broker.dropped_metadata = 1
    clock = FakeClock()
    controller = TransactionController(
        broker, RetryPolicy(deadline_s=30), clock=clock, sleep=clock.sleep
    )
    [result] = controller.commit_all([c])
    assert result.outcome is Outcome.COMMITTED


def test_commit_that_cannot_read_the_log_changes_nothing_and_says_what_did_not_answer():
    broker = ScriptedBroker(end_txn=[Answer(ErrorCode.NONE, COMMIT)])
    c = broker.prepare("tx-1")
    broker.dropped_fetches = 10_000
    clock = FakeClock()
    controller = TransactionController(
        broker, RetryPolicy(deadline_s=30), clock=clock, sleep=clock.sleep
    )
    with pytest.raises(FailoverTimeoutError) as raised:
        controller.commit_all([c])
    text = str(raised.value)
    assert "commit of ['tx-1'] not begun, nothing changed" in text
    assert "FetchRequest to node 1" in text
    assert broker.count("end_txn") == 0
    assert clock.now - 1000.0 == pytest.approx(30.0)


def test_commit_whose_markers_cannot_be_read_after_end_txn_is_in_doubt():
    broker = ScriptedBroker(end_txn=[Answer(ErrorCode.NONE)])  # accepted, markers unseen
    c = broker.prepare("tx-1")
    clock = FakeClock()
    controller = TransactionController(
        broker, RetryPolicy(deadline_s=30), clock=clock, sleep=clock.sleep
    )
    real_fetch = broker.fetch

    def fetch(*args, **kwargs):
        if broker.count("end_txn"):  # every read after the EndTxn finds the leader dead
            raise ConnectionLostError("scripted: FetchRequest to node 1: refused")
        return real_fetch(*args, **kwargs)

    broker.fetch = fetch  # type: ignore[method-assign]
    with pytest.raises(TransactionInDoubtError) as raised:
        controller.commit_all([c])
    assert "commit of ['tx-1'] unresolved" in str(raised.value)
    assert "may still be open" in str(raised.value)


def test_find_coordinator_asks_again_while_the_new_coordinator_loads():
    broker = ScriptedBroker(
        end_txn=[Answer(ErrorCode.NONE, COMMIT)],
        find=[
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            ErrorCode.NOT_COORDINATOR,
        ],
    )
    c = broker.prepare("tx-1")
    clock = FakeClock()
    controller = TransactionController(
        broker, RetryPolicy(deadline_s=30), clock=clock, sleep=clock.sleep
    )
    [result] = controller.commit_all([c])
    assert result.outcome is Outcome.COMMITTED
    assert broker.count("find") == 4 and broker.count("end_txn") == 1
