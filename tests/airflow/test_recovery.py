"""The recover sensor and its trigger: dangling batches resolved, live runs left alone.

The dangling batches are made the way a crashed run leaves them: ids leased in the
ledger, real transactions written under them and left open on the broker.
"""

from __future__ import annotations

import time
from datetime import timedelta

from airflow.sdk import DAG

from airflow_provider_kafka2pc.ledger import BatchState, Verdict
from airflow_provider_kafka2pc.sensors.dangling import KafkaDanglingTransactionSensor
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter
from tests.airflow import dagtest
from tests.conftest import assert_exactly_once

ROWS = 40  # per batch, split over its two participants
#: Long enough that a batch begun just before the DAG runs is still live when it pokes.
GRACE = timedelta(seconds=10)
SHORT_GRACE = timedelta(seconds=2)


def dangling_batch(store, settings, export_id, run_key, topic, *, verdict=None, write=True):
    """A batch as a crashed run leaves it: leased, written, open (optionally decided)."""
    batch = store.begin(export_id, run_key, topic=topic, id_prefix=export_id, num_partitions=2)
    if not write:
        return batch
    committables = []
    for i, tid in enumerate(batch.transactional_ids):
        records = [(f"{run_key}-{i}-{n}".encode(), b"{}") for n in range(ROWS // 2)]
        writer = TransactionalWriter(settings, tid, transaction_timeout_ms=120_000)
        committables.append(writer.write(topic, records))
    store.record_prepared(export_id, run_key, committables, source_rows=ROWS)
    if verdict is not None:
        store.decide(export_id, run_key, verdict, "decided by the crashed run")
    return batch


class DefersAtOnce(KafkaDanglingTransactionSensor):
    """Its own first poke finds nothing to do, so the trigger does the work."""

    def poke(self, context):
        return False


def sensor_dag(dag_id, sensor_class, grace=GRACE, **kwargs):
    with DAG(dag_id, schedule=None, start_date=dagtest.START) as dag:
        sensor_class(
            task_id="recover",
            ledger_conn_id=dagtest.LEDGER_CONN_ID,
            grace_period=grace,
            poke_interval=1,
            **kwargs,
        )
    return dag


def test_sensor_resolves_dangling_batches_by_verdict_and_leaves_live_ones(
    export_env, make_topic, protocol, bootstrap, settings
):
    topic = make_topic(2)
    export_id = "recovery.export"
    with export_env.open() as store:
        dangling_batch(store, settings, export_id, "crashed-undecided", topic)
        dangling_batch(store, settings, export_id, "crashed-commit", topic, verdict=Verdict.COMMIT)
        time.sleep(GRACE.total_seconds())
        dangling_batch(store, settings, export_id, "live-other-run", topic, write=False)
        dangling_batch(store, settings, export_id, "own", topic, verdict=Verdict.ABORT)

    dag = sensor_dag(
        "recovery_sensor", KafkaDanglingTransactionSensor, export_id=export_id, run_key="own"
    )
    result = dagtest.run(dag)

    assert result.state == "success", result
    with export_env.open() as store:
        states = {
            key: store.get(export_id, key).state
            for key in ("crashed-undecided", "crashed-commit", "live-other-run", "own")
        }
        undecided = store.get(export_id, "crashed-undecided")
    assert states == {
        "crashed-undecided": BatchState.ABORTED,
        "crashed-commit": BatchState.COMMITTED,
        "live-other-run": BatchState.PREPARING,  # within the grace period: a live run
        "own": BatchState.ABORTED,  # this run key's earlier ABORT, finished for a new attempt
    }
    assert undecided.verdict is Verdict.ABORT and "recovery" in undecided.verdict_reason
    assert_exactly_once(protocol, bootstrap, topic, committed=ROWS, aborted=2 * ROWS)


def test_deferred_sensor_recovers_in_its_trigger(
    export_env, make_topic, protocol, bootstrap, settings
):
    topic = make_topic(2)
    export_id = "deferred.export"
    with export_env.open() as store:
        dangling_batch(store, settings, export_id, "crashed", topic, verdict=Verdict.COMMIT)
    time.sleep(SHORT_GRACE.total_seconds())

    dag = sensor_dag(
        "recovery_deferred",
        DefersAtOnce,
        grace=SHORT_GRACE,
        export_id=export_id,
        run_key="now",
        deferrable=True,
    )
    result = dagtest.run(dag)

    assert result.state == "success", result
    with export_env.open() as store:
        assert store.get(export_id, "crashed").state is BatchState.COMMITTED
        assert store.in_doubt(export_id) == []
    assert_exactly_once(protocol, bootstrap, topic, committed=ROWS, aborted=0)


def test_trigger_serializes_to_an_importable_class():
    from airflow.sdk.module_loading import import_string

    from airflow_provider_kafka2pc.triggers.dangling import DanglingTransactionTrigger

    trigger = DanglingTransactionTrigger("e", "k", "kafka_default", "ledger", 5.0, 1.0)
    path, kwargs = trigger.serialize()
    again = import_string(path)(**kwargs)
    assert again.serialize() == (path, kwargs)
    assert path == "airflow_provider_kafka2pc.triggers.dangling.DanglingTransactionTrigger"
