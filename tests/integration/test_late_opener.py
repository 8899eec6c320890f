"""A transaction opened after its batch's abort is closed by the orchestrator alone.

A Spark task can open its transaction after the abort task fenced its id: a job the Connect
server ran on after its client was gone, a zombie executor on a cluster, a retried or
speculative attempt. Its InitProducerId then bumps the epoch past the abort's fence and a
new transaction holds back read_committed consumers of its partitions until something
ends it. Here on the real broker, with no fence by the test: the late task is played by a
writer of our own under the batch's transactional id (the same InitProducerId, records and
flush as the JVM writer's task; deterministic where a real task's timing is not), and
what ends it is the orchestrator's own code: the abort (its sweep after the fences) when
the late opener is there before the abort ends, the next recovery round when it comes
after (a pooled id back in the pool: fenced at once, not after the grace period).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_kafka2pc import defaults
from airflow_provider_kafka2pc.coordination.finish import Coordinator
from airflow_provider_kafka2pc.coordination.recovery import recover
from airflow_provider_kafka2pc.ledger import BatchState, Ledger, Verdict
from airflow_provider_kafka2pc.protocol.described import CoordinatorTxnState
from airflow_provider_kafka2pc.transaction.controller import RetryPolicy, TransactionController
from devtools.visible import read_committed
from tests.conftest import assert_exactly_once
from tests.integration.test_recover_cli import ROWS, open_transaction, prepared_batch, state


@pytest.fixture
def names() -> tuple[str, str]:
    """An export of its own: id prefix, export id (the ledger is per test)."""
    prefix = f"lo{uuid.uuid4().hex[:8]}"
    return prefix, f"late.{prefix}"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Ledger]:
    with Ledger(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        yield ledger


def test_a_task_opening_after_the_abort_is_fenced_by_the_next_recovery_round_at_once(
    store, names, make_topic, protocol, bootstrap, settings
):
    prefix, export_id = names
    topic = make_topic(2)
    batch = store.begin(export_id, "failed", topic=topic, id_prefix=prefix, num_partitions=2)
    controller = TransactionController(protocol, RetryPolicy(deadline_s=30))
    # The prepare failed (no manifest, nothing recorded): the abort task decides ABORT,
    # fences the leased ids, finds nothing open after its fences and gives them back.
    aborted = Coordinator(store, controller).abort(export_id, "failed", "the prepare failed")
    assert aborted.batch.state is BatchState.ABORTED
    assert set(aborted.fenced) == set(batch.transactional_ids) and aborted.late == ()
    # Then the late task opens its transaction on its id, writes and flushes.
    tid = batch.transactional_ids[1]
    late = open_transaction(settings, tid, topic, "late")
    assert state(protocol, tid) is CoordinatorTxnState.ONGOING
    stalled = read_committed(settings, topic, timeout_s=2)
    assert stalled.stalled, stalled.to_dict()

    # The next recovery round (the next run's recover task, the maintenance DAG,
    # kafka2pc recover), with the default grace period of an hour.
    started = time.monotonic()
    report = recover(
        store, protocol, controller, export_id, [prefix], grace_period=defaults.GRACE_PERIOD
    )
    round_s = time.monotonic() - started

    assert "a late opener, fenced at once" in report.fenced[tid], report.to_dict()
    assert f"pid {late.producer_id}, epoch {late.producer_epoch}" in report.fenced[tid]
    assert not report.left and not report.failed, report.to_dict()
    assert state(protocol, tid) is not CoordinatorTxnState.ONGOING
    # Its records reached the log and are aborted; a read_committed consumer moves on.
    _, seen = assert_exactly_once(protocol, bootstrap, topic, committed=0, aborted=ROWS)
    assert not seen.stalled
    print(f"late opener fenced by the recovery round in {round_s:.2f} s")
    assert round_s < 10


def test_a_zombie_reopening_a_participant_before_the_abort_is_fenced_by_the_abort_itself(
    store, names, make_topic, protocol, bootstrap, settings
):
    prefix, export_id = names
    topic = make_topic(2)
    _, (c0, _) = prepared_batch(store, settings, export_id, prefix, "decided", topic, Verdict.ABORT)
    # Another attempt of partition 0's task reopens its id: its InitProducerId ends the
    # recorded transaction, and it opens one of its own under a newer epoch, which the
    # abort's EndTxn with the recorded epoch does not touch.
    zombie = open_transaction(settings, c0.transactional_id, topic, "zombie")
    assert zombie.producer_epoch > c0.producer_epoch
    controller = TransactionController(protocol, RetryPolicy(deadline_s=30))

    started = time.monotonic()
    aborted = Coordinator(store, controller).abort(export_id, "decided", "decided ABORT")
    abort_s = time.monotonic() - started

    assert aborted.batch.state is BatchState.ABORTED
    assert aborted.late == (c0.transactional_id,)
    assert state(protocol, c0.transactional_id) is not CoordinatorTxnState.ONGOING
    # The batch's two participants and the zombie: all in the log, all aborted.
    assert_exactly_once(protocol, bootstrap, topic, committed=0, aborted=3 * ROWS)
    # Nothing is left for a recovery round.
    report = recover(
        store, protocol, controller, export_id, [prefix], grace_period=defaults.GRACE_PERIOD
    )
    assert not report.found and not report.fenced, report.to_dict()
    print(f"abort with the sweep's fence: {abort_s:.2f} s")
