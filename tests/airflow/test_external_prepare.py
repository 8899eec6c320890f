"""The prepare inside a Spark job another operator runs: dags/orders_export_pyspark.py.

The example DAG, parsed from the dags folder (with no connection defined), then run with
``dag.test()``: ``@task.pyspark`` runs the job in a local session, the job calls
``prepare_in_job`` with the lease task's parameters, the record task reads its manifest.
Witnesses: the log's markers and a read_committed consumer; a rerun writes nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka2pc.errors import ConfigurationError
from airflow_provider_kafka2pc.ledger import BatchState, ParticipantState
from airflow_provider_kafka2pc.spark.export_spec import ExportSpec
from airflow_provider_kafka2pc.spark.external import JobParameters
from tests.airflow import dagtest
from tests.airflow.test_job_errors import CASES, EVERY_PATH, assert_refused_once
from tests.conftest import assert_exactly_once

DAGS_FOLDER = Path(__file__).resolve().parents[2] / "dags"
DAG_ID = "orders_export_pyspark"
ROWS = 500


def load_dag(monkeypatch: pytest.MonkeyPatch, **env: str) -> Any:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    bag = dagtest.dagbag_module().DagBag(dag_folder=str(DAGS_FOLDER / f"{DAG_ID}.py"))
    assert bag.import_errors == {}, bag.import_errors
    return bag.dags[DAG_ID]


def test_the_example_parses_without_any_connection(monkeypatch, airflow_db):
    for name in ("KAFKA_DEFAULT", "SPARK_DEFAULT", "KAFKA2PC_LEDGER"):
        monkeypatch.delenv(f"AIRFLOW_CONN_{name}", raising=False)
    dag = load_dag(monkeypatch)
    edges = {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks}
    assert edges == {
        "lease": ["job"],
        "job": ["record"],
        "record": ["decide"],
        "decide": ["abort", "commit"],
        "commit": [],
        "abort": [],
    }
    # No prepare operator to re-run, but the lost records are copied back from the log.
    commit = dag.get_task("commit")
    assert commit.repair_lost is True and commit.repair_from_log is True


def test_the_job_parameters_round_trip_and_refuse_another_version():
    params = JobParameters(
        ExportSpec(topic="t", key_column="k"), ("a-0", "a-1"), "e/k#1", "/m.json"
    )
    assert JobParameters.from_dict(json.dumps(params.to_dict())) == params
    with pytest.raises(ConfigurationError, match="version"):
        JobParameters.from_dict({**params.to_dict(), "version": 99})


def test_pyspark_task_prepares_exactly_once_and_a_rerun_writes_nothing(
    export_env, make_topic, protocol, bootstrap, ledger, monkeypatch, tmp_path
):
    topic = make_topic(2)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)  # the local session's workers
    dag = load_dag(
        monkeypatch,
        KAFKA2PC_ORDERS_TOPIC=topic,
        KAFKA2PC_ORDERS_ROWS=str(ROWS),
        KAFKA2PC_ORDERS_PARTITIONS="2",
        KAFKA2PC_ORDERS_LEDGER_CONN_ID=ledger.conn_id,
        KAFKA2PC_ORDERS_MANIFEST_DIR=str(tmp_path / "manifests"),
    )
    dagtest.register(dag)

    first = dag.test(logical_date=dagtest.logical_date(4))

    states = {ti.task_id: str(ti.state) for ti in first.get_task_instances()}
    assert states == {
        "lease": "success",
        "job": "success",
        "record": "success",
        "decide": "success",
        "commit": "success",
        "abort": "skipped",
    }, states
    with ledger.open() as store:
        (batch,) = store.recent("orders_export_pyspark.export")
        parts = store.participants(batch.export_id, batch.run_key)
    assert batch.state is BatchState.COMMITTED and batch.source_rows == ROWS
    assert [p.state for p in parts] == [ParticipantState.COMMITTED] * 2
    manifests = list((tmp_path / "manifests").rglob("attempt-1.json"))
    assert len(manifests) == 1
    assert_exactly_once(
        protocol, bootstrap, topic, *[p.committable for p in parts], committed=ROWS, aborted=0
    )

    again = dag.test(logical_date=dagtest.logical_date(4))

    states = {ti.task_id: str(ti.state) for ti in again.get_task_instances()}
    assert states["lease"] == "skipped" and states["commit"] == "skipped", states
    assert_exactly_once(protocol, bootstrap, topic, committed=ROWS, aborted=0)


def in_job_dag(
    dag_id: str, sql: str, manifest_dir: Path, raised: list[BaseException], **export: Any
) -> Any:
    """The example's shape (lease -> ``@task.pyspark`` job -> record -> decide -> commit |
    abort) around a job that prepares ``sql``'s rows; the job's task has ``retries=2`` and
    notes what it raised, as Airflow's task runner receives it."""
    from datetime import timedelta

    from airflow.sdk import DAG, task

    from airflow_provider_kafka2pc.naming import default_prefix
    from airflow_provider_kafka2pc.operators.decision import KafkaTransactionDecisionOperator
    from airflow_provider_kafka2pc.operators.external import (
        KafkaPrepareLeaseOperator,
        KafkaPrepareRecordOperator,
    )
    from airflow_provider_kafka2pc.operators.finish import (
        KafkaTransactionAbortOperator,
        KafkaTransactionCommitOperator,
    )

    export_id = f"{dag_id}.export"
    common = {
        "export_id": export_id,
        "run_key": "{{ data_interval_start }}",
        "kafka_conn_id": dagtest.KAFKA_CONN_ID,
        "ledger_conn_id": dagtest.LEDGER_CONN_ID,
    }
    with DAG(dag_id, schedule="@daily", start_date=dagtest.START, catchup=False) as dag:
        lease = KafkaPrepareLeaseOperator(
            task_id="lease",
            num_partitions=2,
            id_prefix=default_prefix(export_id),
            manifest_dir=str(manifest_dir),
            key_column="order_id",
            **export,
            **common,
        )

        @task.pyspark(
            config_kwargs={"spark.sql.shuffle.partitions": "4"},
            retries=2,
            retry_delay=timedelta(seconds=0),
        )
        def job(parameters: dict, spark: Any = None) -> None:
            from airflow_provider_kafka2pc.hooks.kafka2pc import Kafka2pcHook
            from airflow_provider_kafka2pc.spark.external import prepare_in_job

            settings = Kafka2pcHook(dagtest.KAFKA_CONN_ID).portable_settings()
            try:
                prepare_in_job(spark.sql(sql), parameters, producer_config=settings)
            except BaseException as exc:
                raised.append(exc)
                raise

        record = KafkaPrepareRecordOperator(task_id="record", lease_task_id="lease", **common)
        commit = KafkaTransactionCommitOperator(task_id="commit", **common)
        abort = KafkaTransactionAbortOperator(task_id="abort", **common)
        decide = KafkaTransactionDecisionOperator(
            task_id="decide", commit_task_id="commit", abort_task_id="abort", **common
        )
        lease >> job(lease.output) >> record >> decide >> [commit, abort]
    return dag


@pytest.mark.parametrize("case", EVERY_PATH)
def test_a_refusal_in_prepare_in_job_fails_the_job_task_once_with_its_own_error(
    case, export_env, make_topic, protocol, bootstrap, monkeypatch, tmp_path
):
    """As through spark-submit (test_job_errors): the ``@task.pyspark`` task raises the
    refusal ``prepare_in_job`` met, in the rows (the executors) or on the driver, as itself
    and as Airflow's no-retry failure; the abort task leaves nothing open."""
    from airflow_provider_kafka2pc.naming import default_prefix

    options, words, *kind = CASES[case]
    topic = make_topic(2)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)  # the local session's workers
    export = options(topic)
    sql = export.pop("source")["sql"]
    raised: list[BaseException] = []
    dag_id = f"in_job_refusal_{EVERY_PATH.index(case)}"
    dag = in_job_dag(dag_id, sql, tmp_path / "manifests", raised, **export)

    result = dagtest.run(dag, day=6)

    assert result.tasks["record"] == "upstream_failed", result
    assert result.tasks["decide"] == "success" and result.tries["abort"] == 1, result
    prefix = default_prefix(f"{dag_id}.export")
    assert_refused_once(
        result,
        "job",
        raised,
        words,
        *kind,
        protocol=protocol,
        bootstrap=bootstrap,
        topic=topic,
        prefix=prefix,
    )
