"""Apache Kafka answers EndTxn before its markers reach the partitions.

The controller looks a transaction up over its whole range once when no fresh marker
has arrived; a marker that lands between those two reads is ours, and must be reported
COMMITTED, not ALREADY_COMMITTED (seen on Kafka 4.4 in the transaction-core benchmark).
"""

from __future__ import annotations

from airflow_provider_kafka2pc.protocol.codes import ErrorCode
from airflow_provider_kafka2pc.protocol.records import ControlType
from airflow_provider_kafka2pc.transaction.controller import (
    Outcome,
    RetryPolicy,
    TransactionController,
)
from tests.support.scripted import Answer, FakeClock, ScriptedBroker


class LateMarkers(ScriptedBroker):
    """Writes the marker of an accepted EndTxn only after ``delay`` more fetches."""

    def __init__(self, delay: int, marker: ControlType) -> None:
        super().__init__(end_txn=[Answer(ErrorCode.NONE)])
        self._delay, self._marker, self._pending = delay, marker, None

    def end_txn(self, node, transactional_id, producer_id, epoch, commit, version):
        self._pending = transactional_id
        return super().end_txn(node, transactional_id, producer_id, epoch, commit, version)

    def fetch(self, node, topic, partition, offset, **kwargs):
        if self._pending is not None:
            if self._delay == 0:
                self.write_marker(self._pending, self._marker)
                self._pending = None
            else:
                self._delay -= 1
        return super().fetch(node, topic, partition, offset, **kwargs)


def run(broker: ScriptedBroker, commit: bool = True) -> Outcome:
    clock = FakeClock()
    controller = TransactionController(
        broker, RetryPolicy(deadline_s=30), clock=clock, sleep=clock.sleep
    )
    committable = broker.prepare(partitions=1)
    finish = controller.commit if commit else controller.abort
    return finish(committable).outcome


def test_marker_landing_between_fresh_read_and_look_back_is_ours():
    # Fresh read finds nothing; the marker lands just before the look-back reads.
    assert run(LateMarkers(delay=1, marker=ControlType.COMMIT)) is Outcome.COMMITTED
    assert run(LateMarkers(delay=1, marker=ControlType.ABORT), commit=False) is Outcome.ABORTED


def test_marker_arriving_later_still_is_ours():
    assert run(LateMarkers(delay=4, marker=ControlType.COMMIT)) is Outcome.COMMITTED


def test_marker_already_in_the_log_before_end_txn_is_already_committed():
    broker = ScriptedBroker(end_txn=[Answer(ErrorCode.NONE)])
    committable = broker.prepare(partitions=1)
    broker.write_marker(committable.transactional_id, ControlType.COMMIT)
    clock = FakeClock()
    controller = TransactionController(broker, clock=clock, sleep=clock.sleep)
    assert controller.commit(committable).outcome is Outcome.ALREADY_COMMITTED
