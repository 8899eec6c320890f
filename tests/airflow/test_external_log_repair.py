"""The external-operator path (``@task.pyspark`` + ``prepare_in_job``) repairs a lost
participant from the log: no prepare operator exists to re-run the job, yet the batch ends
COMMITTED exactly once.

Real Airflow (``dag.test()``), real Spark, real broker: the transactions get a 20 s timeout;
the commit task starts late (it first waits, for real, until the broker has aborted
participant 0's transaction by its timeout: a slow scheduler); it finds participant 0
LOST and copies it from the log.
"""

from __future__ import annotations

import sys

from airflow_provider_kafka2pc.ledger import BatchState, ParticipantState
from airflow_provider_kafka2pc.operators.finish import KafkaTransactionCommitOperator
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from tests.airflow import dagtest
from tests.airflow.test_external_prepare import ROWS, load_dag
from tests.conftest import assert_exactly_once
from tests.integration.test_log_copy_repair import wait_aborted_by_broker

TIMEOUT_MS = 20_000


def test_a_lost_participant_of_the_external_path_is_repaired_from_the_log(
    export_env, make_topic, protocol, bootstrap, ledger, monkeypatch, tmp_path
):
    topic = make_topic(2)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("AIRFLOW__KAFKA2PC__TRANSACTION_TIMEOUT_MS", str(TIMEOUT_MS))
    monkeypatch.setenv("AIRFLOW__KAFKA2PC__COMMIT_MARGIN_S", "2")
    dag = load_dag(
        monkeypatch,
        KAFKA2PC_ORDERS_TOPIC=topic,
        KAFKA2PC_ORDERS_ROWS=str(ROWS),
        KAFKA2PC_ORDERS_PARTITIONS="2",
        KAFKA2PC_ORDERS_LEDGER_CONN_ID=ledger.conn_id,
        KAFKA2PC_ORDERS_MANIFEST_DIR=str(tmp_path / "manifests"),
    )
    dagtest.register(dag)
    late: list[str] = []
    commit = KafkaTransactionCommitOperator.commit

    def commit_late(self, context, coordinator):
        (batch,) = coordinator.ledger.recent(self.export_id)
        lost = coordinator.ledger.participants(batch.export_id, batch.run_key)[0]
        with KafkaProtocol({"bootstrap.servers": bootstrap}, timeout_ms=10_000) as proto:
            wait_aborted_by_broker(proto, [lost.transactional_id], 120)
        late.append(lost.transactional_id)
        return commit(self, context, coordinator)

    monkeypatch.setattr(KafkaTransactionCommitOperator, "commit", commit_late)

    run = dag.test(logical_date=dagtest.logical_date(5))

    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert states["commit"] == "success" and states["abort"] == "skipped", states
    assert len(late) == 1
    result = next(ti for ti in run.get_task_instances() if ti.task_id == "commit").xcom_pull(
        task_ids="commit"
    )
    repaired = {r["transactional_id"]: r["from"] for r in result["repaired"]}
    assert repaired.get(late[0]) == "log", result
    with ledger.open() as store:
        (batch,) = store.recent("orders_export_pyspark.export")
        parts = store.participants(batch.export_id, batch.run_key)
    assert batch.state is BatchState.COMMITTED
    assert [p.state for p in parts] == [ParticipantState.COMMITTED] * 2
    assert_exactly_once(protocol, bootstrap, topic, *[p.committable for p in parts], committed=ROWS)
