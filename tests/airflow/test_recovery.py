"""The recover sensor, its trigger and the maintenance DAG: dangling batches and open
transactions resolved, live runs and other exports' transactions left alone.

The dangling batches are made the way a crashed run leaves them: ids leased in the
ledger, real transactions written under them and left open on the broker; the forgotten
transactions the way a zombie leaves them: open under the export's prefix with no batch
holding the id.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG

from airflow_provider_kafka2pc import naming
from airflow_provider_kafka2pc.ledger import BatchState, Verdict
from airflow_provider_kafka2pc.sensors.dangling import KafkaDanglingTransactionSensor
from airflow_provider_kafka2pc.transaction.controller import TransactionController
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter
from tests.airflow import dagtest
from tests.conftest import assert_exactly_once

REPO = Path(__file__).resolve().parents[2]
MAINTENANCE_DAG = REPO / "dags" / "kafka2pc_maintenance.py"

ROWS = 40  # per batch, split over its two participants
#: Far longer than Airflow takes to start a task on a loaded machine: a batch begun just
#: before the DAG runs is certainly live when it pokes. Stale batches are made by dating
#: their last change back (:func:`crashed_ago`), not by waiting.
GRACE = timedelta(minutes=5)
SHORT_GRACE = timedelta(seconds=2)


def crashed_ago(ledger_handle, export_id, run_key, ago):
    """Date the batch's last change ``ago`` back: a run that crashed that long ago."""
    from sqlalchemy import create_engine, select, update

    from airflow_provider_kafka2pc.ledger.schema import batches

    engine = create_engine(ledger_handle.url)
    key = (batches.c.export_id == export_id, batches.c.run_key == run_key)
    try:
        with engine.begin() as conn:
            changed = conn.execute(select(batches.c.updated_at).where(*key)).scalar_one()
            conn.execute(update(batches).where(*key).values(updated_at=changed - ago))
    finally:
        engine.dispose()


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
    export_id = f"recovery{uuid.uuid4().hex[:6]}.export"
    with export_env.open() as store:
        dangling_batch(store, settings, export_id, "crashed-undecided", topic)
        dangling_batch(store, settings, export_id, "crashed-commit", topic, verdict=Verdict.COMMIT)
        live = dangling_batch(store, settings, export_id, "live-other-run", topic)
        dangling_batch(store, settings, export_id, "own", topic, verdict=Verdict.ABORT)
    for run_key in ("crashed-undecided", "crashed-commit"):
        crashed_ago(export_env, export_id, run_key, 2 * GRACE)

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
        "live-other-run": BatchState.PREPARED,  # within the grace period: a live run
        "own": BatchState.ABORTED,  # this run key's earlier ABORT, finished for a new attempt
    }
    assert undecided.verdict is Verdict.ABORT and "recovery" in undecided.verdict_reason
    report = sensor_xcom(result)
    assert sorted(report["live"]) == sorted(
        [f"{export_id}/live-other-run", *live.transactional_ids]
    )
    for tid in live.transactional_ids:  # found open on the broker, and left alone
        assert describe_state(protocol, tid) == "Ongoing"
        TransactionController(protocol).fence(tid)
    assert_exactly_once(protocol, bootstrap, topic, committed=ROWS, aborted=3 * ROWS)


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


def test_trigger_serializes_to_an_importable_class(tmp_path):
    from airflow.sdk.module_loading import import_string

    from airflow_provider_kafka2pc.triggers.dangling import DanglingTransactionTrigger

    trigger = DanglingTransactionTrigger(
        "e", "k", "kafka_default", "ledger", 5.0, 1.0, id_prefix="p", wait_for_live=True
    )
    path, kwargs = trigger.serialize()
    again = import_string(path)(**kwargs)
    assert again.serialize() == (path, kwargs)
    assert path == "airflow_provider_kafka2pc.triggers.dangling.DanglingTransactionTrigger"
    # As the triggerer does it: another process, another directory, the installed package.
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys; from airflow.sdk.module_loading import import_string; "
            "path, kwargs = json.loads(sys.argv[1]); "
            "print(json.dumps(import_string(path)(**kwargs).serialize()))",
            json.dumps([path, kwargs]),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout.splitlines()[-1]) == [path, kwargs]


def forgotten_transaction(settings, tid, topic, tag):
    """Open under ``tid`` with no batch holding it (a zombie, or a prepare that crashed
    before recording)."""
    records = [(f"{tag}-{n}".encode(), b"{}") for n in range(ROWS // 2)]
    return TransactionalWriter(settings, tid, transaction_timeout_ms=120_000).write(topic, records)


def finished_batch(store, export_id, prefix, run_key, topic):
    """A batch that ended ABORTED before writing: its ids are leased once, now free."""
    batch = store.begin(export_id, run_key, topic=topic, id_prefix=prefix, num_partitions=2)
    store.decide(export_id, run_key, Verdict.ABORT, "nothing prepared")
    store.finish(export_id, run_key)
    return batch


def sensor_xcom(result, task_id="recover"):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        query = XComModel.get_many(
            run_id=result.run_id, key="return_value", task_ids=task_id, dag_ids=result.dag_id
        )
        row = session.scalars(query).first()
        return None if row is None else XComModel.deserialize_value(row)


def describe_state(protocol, tid):
    described = protocol.describe_transaction(tid)
    return None if described is None else described.state


def test_poke_finds_open_transactions_the_ledger_forgot(
    export_env, make_topic, protocol, bootstrap, settings
):
    """Broker-side discovery in poke mode: a zombie on a free pooled id and an id under the
    prefix that was never leased are fenced; another export's prefix is not touched."""
    topic = make_topic(2)
    prefix = f"poke{uuid.uuid4().hex[:6]}"
    export_id = f"{prefix}.export"
    with export_env.open() as store:
        free = finished_batch(store, export_id, prefix, "earlier", topic).transactional_ids[0]
        dangling = {
            free: forgotten_transaction(settings, free, topic, "zombie"),
            f"{prefix}-7": forgotten_transaction(settings, f"{prefix}-7", topic, "unleased"),
        }
        other = f"{prefix}-eu-0"
        forgotten_transaction(settings, other, topic, "other")
    time.sleep(SHORT_GRACE.total_seconds())

    dag = sensor_dag(
        "recovery_poke_broker",
        KafkaDanglingTransactionSensor,
        grace=SHORT_GRACE,
        export_id=export_id,
        id_prefix=prefix,
        run_key="now",
    )
    result = dagtest.run(dag)

    assert result.state == "success", result
    report = sensor_xcom(result)
    assert {t["transactional_id"] for t in report["found"]} == set(dangling)
    assert set(report["fenced"]) == set(dangling)
    assert "ListTransactions" in report["discovery"][prefix]
    for tid in dangling:
        assert describe_state(protocol, tid) != "Ongoing"
    assert describe_state(protocol, other) == "Ongoing"
    TransactionController(protocol).fence(other)
    assert_exactly_once(protocol, bootstrap, topic, committed=0, aborted=3 * ROWS // 2)


def test_deferred_sensor_fences_a_forgotten_transaction_in_its_trigger(
    export_env, make_topic, protocol, bootstrap, settings
):
    """deferrable=True, no id_prefix given: the prefix kafka_exactly_once_export derives
    from the export id, and a COMMIT batch next to a forgotten transaction."""
    topic = make_topic(2)
    export_id = f"defer{uuid.uuid4().hex[:6]}.export"  # default prefix = the export id
    with export_env.open() as store:
        dangling_batch(store, settings, export_id, "crashed", topic, verdict=Verdict.COMMIT)
        unleased = f"{export_id}-5"
        forgotten_transaction(settings, unleased, topic, "unleased")
    time.sleep(SHORT_GRACE.total_seconds())

    dag = sensor_dag(
        "recovery_deferred_broker",
        DefersAtOnce,
        grace=SHORT_GRACE,
        export_id=export_id,
        run_key="now",
        deferrable=True,
    )
    result = dagtest.run(dag)

    assert result.state == "success", result
    report = sensor_xcom(result)
    assert set(report["fenced"]) == {unleased}
    assert len(report["committed"]) == 2
    with export_env.open() as store:
        assert store.get(export_id, "crashed").state is BatchState.COMMITTED
    assert_exactly_once(protocol, bootstrap, topic, committed=ROWS, aborted=ROWS // 2)


def load_maintenance_dag(monkeypatch, exports):
    """dags/kafka2pc_maintenance.py as the dag processor parses it, with ``exports``."""
    monkeypatch.setenv("KAFKA2PC_MAINTENANCE_EXPORTS", json.dumps(exports))
    spec = importlib.util.spec_from_file_location("kafka2pc_maintenance_test", MAINTENANCE_DAG)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def test_maintenance_dag_waits_for_a_live_transaction_then_fences_it(
    export_env, monkeypatch, make_topic, protocol, bootstrap, settings
):
    """The hourly DAG's deferred sensor: a transaction younger than the grace period, on an
    id under the prefix that the pool never handed out, may be a live writer's and is left;
    the trigger keeps going until it is stale, then fences it. (On a pooled id back in the
    pool it would be a late opener, fenced at once: test_rules.)"""
    topic = make_topic(1)
    prefix = f"maint{uuid.uuid4().hex[:6]}"
    export_id = f"{prefix}.export"
    grace_s = 12.0  # longer than Airflow takes to start the task: it first sees it young
    with export_env.open() as store:
        finished_batch(store, export_id, prefix, "earlier", topic)
    free = naming.build(prefix, 999)  # under the prefix, never leased
    dag = load_maintenance_dag(
        monkeypatch,
        [
            {
                "export_id": export_id,
                "id_prefix": prefix,
                "ledger_conn_id": dagtest.LEDGER_CONN_ID,
                "grace_period_s": grace_s,
                "poke_interval_s": 1,
            }
        ],
    )
    forgotten_transaction(settings, free, topic, "young")
    opened = time.monotonic()

    result = dagtest.run(dag)
    waited = time.monotonic() - opened

    task_id = f"recover__{prefix}_export"
    assert result.state == "success", result
    assert dag.task_ids == [task_id]
    report = sensor_xcom(result, task_id)
    # It did not fence the young transaction at once: only once it was stale.
    assert report["found"][0]["age_s"] >= grace_s and waited >= grace_s - 1, report
    assert set(report["fenced"]) == {free} and report["left"] == {}
    assert describe_state(protocol, free) != "Ongoing"
    assert_exactly_once(protocol, bootstrap, topic, committed=0, aborted=ROWS // 2)


def test_maintenance_dag_imports_with_its_default_config(monkeypatch):
    monkeypatch.delenv("KAFKA2PC_MAINTENANCE_EXPORTS", raising=False)
    from tests.airflow.dagtest import dagbag_module

    bag = dagbag_module().DagBag(dag_folder=str(MAINTENANCE_DAG))
    assert bag.import_errors == {}
    dag = bag.dags["kafka2pc_maintenance"]
    assert dag.task_ids == ["recover__orders_export_export_orders"]
    sensor = dag.get_task("recover__orders_export_export_orders")
    assert sensor.deferrable and sensor.wait_for_live
