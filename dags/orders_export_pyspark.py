"""Daily exactly-once export of generated orders, the Spark job run by ``@task.pyspark``.

The same exactly-once export as ``orders_export``, for when another operator runs the
Spark job (here the Spark provider's ``@task.pyspark``; on a platform, its own operator:
docs/spark-connect.md). The prepare is split around that job:

    lease (ids leased, fenced; the job's parameters to XCom)
      -> job (the user's PySpark code: read the source, ``prepare_in_job``)
      -> record (the job's manifest into the ledger)
      -> decide -> commit | abort

The job's parameters carry no secret; here the job takes the Kafka settings from the
``kafka_default`` connection because it runs in an Airflow worker (on a platform it would
read its own secret store). Loss repair copies a lost participant's records from the log
(no Spark needed); a re-prepare from the source would re-run a prepare operator's job,
which this DAG has not: when the records are gone from the log too, its commit fails
naming the lost partitions.

Settings from the environment at parse time (no connection is read while parsing):
``KAFKA2PC_ORDERS_TOPIC`` (``orders``), ``KAFKA2PC_ORDERS_ROWS`` (10,000),
``KAFKA2PC_ORDERS_PARTITIONS`` (4), ``KAFKA2PC_ORDERS_LEDGER_CONN_ID`` (unset: SQLite
under ``AIRFLOW_HOME``), ``KAFKA2PC_ORDERS_SPARK_CONN_ID`` (unset: ``local[*]`` in the
worker; a ``spark_connect`` connection runs the job on that server),
``KAFKA2PC_ORDERS_MANIFEST_DIR`` (where the job writes its manifest and the record task
reads it: storage both reach; default a local directory, for one machine only).
"""

from __future__ import annotations

import os
import tempfile

import pendulum
from airflow.sdk import DAG, task

from airflow_provider_kafka2pc import defaults
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

DAG_ID = "orders_export_pyspark"
EXPORT_ID = f"{DAG_ID}.export"
TOPIC = os.environ.get("KAFKA2PC_ORDERS_TOPIC", "orders")
ROWS = int(os.environ.get("KAFKA2PC_ORDERS_ROWS", "10000"))
PARTITIONS = int(os.environ.get("KAFKA2PC_ORDERS_PARTITIONS", "4"))
LEDGER_CONN_ID = os.environ.get("KAFKA2PC_ORDERS_LEDGER_CONN_ID") or None
SPARK_CONN_ID = os.environ.get("KAFKA2PC_ORDERS_SPARK_CONN_ID") or None
KAFKA_CONN_ID = "kafka_default"
MANIFEST_DIR = os.environ.get("KAFKA2PC_ORDERS_MANIFEST_DIR") or os.path.join(
    tempfile.gettempdir(), "kafka2pc-manifests"
)

#: One day's orders, a pure function of (interval, id): a rerun recomputes the same records.
ORDERS_SQL = """
SELECT
    format_string('%s-%07d', '{day}', id) AS order_id,
    format_string('customer-%04d', pmod(hash('{day}', id), 1000)) AS customer_id,
    CAST(pmod(hash('amount', '{day}', id), 100000) / 100.0 AS DECIMAL(9, 2)) AS amount
FROM range({rows})
"""

with DAG(
    dag_id=DAG_ID,
    description=f"Exactly-once daily export to {TOPIC!r}, the Spark job run by @task.pyspark",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    tags=["kafka2pc", "example"],
    doc_md=__doc__,
):
    common = {
        "export_id": EXPORT_ID,
        "run_key": defaults.RUN_KEY,
        "kafka_conn_id": KAFKA_CONN_ID,
        "ledger_conn_id": LEDGER_CONN_ID,
    }
    lease = KafkaPrepareLeaseOperator(
        task_id="lease",
        topic=TOPIC,
        num_partitions=PARTITIONS,
        id_prefix=default_prefix(EXPORT_ID),
        manifest_dir=MANIFEST_DIR,
        key_column="order_id",
        **common,
    )

    @task.pyspark(conn_id=SPARK_CONN_ID, config_kwargs={"spark.sql.shuffle.partitions": "4"})
    def job(parameters: dict, spark=None, ds_nodash: str | None = None) -> None:
        """The user's Spark code: read the interval's rows, prepare them (the contract)."""
        from airflow_provider_kafka2pc.hooks.kafka2pc import Kafka2pcHook
        from airflow_provider_kafka2pc.spark.external import prepare_in_job

        orders = spark.sql(ORDERS_SQL.format(day=ds_nodash, rows=ROWS))
        settings = Kafka2pcHook(KAFKA_CONN_ID).portable_settings()
        prepare_in_job(orders, parameters, producer_config=settings)

    record = KafkaPrepareRecordOperator(task_id="record", lease_task_id="lease", **common)
    commit = KafkaTransactionCommitOperator(task_id="commit", **common)
    abort = KafkaTransactionAbortOperator(task_id="abort", **common)
    decide = KafkaTransactionDecisionOperator(
        task_id="decide", commit_task_id="commit", abort_task_id="abort", **common
    )
    lease >> job(lease.output) >> record >> decide >> [commit, abort]
