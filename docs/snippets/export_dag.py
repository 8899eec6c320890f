import pendulum
from airflow.sdk import DAG

from airflow_provider_kafka2pc.export import kafka_exactly_once_export

with DAG(
    "orders_export",
    schedule="@daily",
    catchup=True,
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
):
    kafka_exactly_once_export(
        "export",
        source={"sql": "SELECT * FROM orders WHERE day = '{{ ds }}'"},  # or table / path
        topic="orders",
        key_column="order_id",
        num_partitions=8,  # Spark partitions = Kafka transactions = participants
        kafka_conn_id="kafka_default",  # the official Kafka provider's `kafka` connection
        spark_conn_id="spark_default",  # `spark`; a `spark_connect` one runs it on Connect
        ledger_conn_id=None,  # None: SQLite under AIRFLOW_HOME; else a postgres connection
        # writer="auto", partitioning="auto": the defaults, the fastest path that applies
    )
