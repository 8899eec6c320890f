"""Daily exactly-once export of the day's orders into the Kafka topic ``orders``.

What it proves: each data interval is ONE distributed transaction. Spark prepares the
interval's orders into one open Kafka transaction per Spark partition, a decision task
records the verdict in the coordinator ledger, and the commit task finishes every
participant at once; re-running, clearing, retrying or backfilling an interval never
writes an order twice (the run key is the data interval; a COMMITTED interval writes
nothing and skips downstream). A read_committed consumer sees each ``order_id`` once.

The source is generated, so the DAG runs anywhere: ``ROWS`` orders per day from Spark
SQL over ``range()``, every column a pure function of the interval and the row number,
so a re-computed interval holds exactly the same orders (same keys, same values). The
key is ``order_id`` ("<yyyymmdd>-<n>"): stable and unique across days.

How to run it (the ``kafka`` and ``spark`` connections of the official providers)::

    export AIRFLOW_CONN_KAFKA_DEFAULT='{"conn_type": "kafka",
        "extra": {"bootstrap.servers": "localhost:9092"}}'
    export AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2]"}'
    kafka2pc topic create -b localhost:9092 -t orders --partitions 4
    airflow dags test orders_export 2026-11-21          # one interval, in-process
    airflow dags unpause orders_export                   # catchup: the last 3 days
    airflow backfill create --dag-id orders_export \\
        --from-date 2026-11-01 --to-date 2026-11-07 --max-active-runs 2   # one command

``make demo`` does all of that on a fresh machine (a local Apache Kafka broker, Spark
``local[2]``, the SQLite ledger under ``AIRFLOW_HOME``) and prints the proof.

Settings read from the environment when the file is parsed (for the demo and the tests;
an ordinary deployment keeps the defaults): ``KAFKA2PC_ORDERS_TOPIC`` (``orders``),
``KAFKA2PC_ORDERS_ROWS`` (orders per day, 10,000), ``KAFKA2PC_ORDERS_PARTITIONS`` (Spark
partitions = participants, 4), ``KAFKA2PC_ORDERS_LEDGER_CONN_ID`` (an Airflow connection
to the ledger's database; unset = SQLite under ``AIRFLOW_HOME``),
``KAFKA2PC_ORDERS_START_DATE`` (``YYYY-MM-DD``; default 3 days before today, UTC),
``KAFKA2PC_ORDERS_RETRIES`` (1) and ``KAFKA2PC_ORDERS_RETRY_DELAY_S`` (30) for every task
(the chaos soak retries more, sooner).
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG

try:  # Airflow 3.2+
    from airflow.sdk import CronDataIntervalTimetable
except ImportError:  # Airflow 3.1 has it in core only
    from airflow.timetables.interval import CronDataIntervalTimetable  # type: ignore[no-redef]

from airflow_provider_kafka2pc.export import kafka_exactly_once_export

DAG_ID = "orders_export"
TOPIC = os.environ.get("KAFKA2PC_ORDERS_TOPIC", "orders")
ROWS = int(os.environ.get("KAFKA2PC_ORDERS_ROWS", "10000"))
PARTITIONS = int(os.environ.get("KAFKA2PC_ORDERS_PARTITIONS", "4"))
LEDGER_CONN_ID = os.environ.get("KAFKA2PC_ORDERS_LEDGER_CONN_ID") or None
RETRIES = int(os.environ.get("KAFKA2PC_ORDERS_RETRIES", "1"))
#: "auto" (the default): the JVM writer on spark-submit; "python" also logs progress lines.
WRITER = os.environ.get("KAFKA2PC_ORDERS_WRITER", "auto")
RETRY_DELAY = timedelta(seconds=float(os.environ.get("KAFKA2PC_ORDERS_RETRY_DELAY_S", "30")))
#: A rolling start a few days back (midnight UTC, so it only moves once a day): unpausing
#: catches up a few intervals, never months of them.
START_DATE = (
    pendulum.parse(os.environ["KAFKA2PC_ORDERS_START_DATE"], tz="UTC")
    if os.environ.get("KAFKA2PC_ORDERS_START_DATE")
    else pendulum.today("UTC").subtract(days=3)
)

#: One day's orders. Every column is a deterministic function of (interval, id): Spark's
#: hash() is Murmur3 with a fixed seed, so a re-run recomputes byte-identical records.
#: Orders are spread evenly over the interval (86,400 s: the schedule is daily); their time is
#: UTC wall-clock without a zone (TIMESTAMP_NTZ), so Spark's session time zone cannot change it.
ORDERS_SQL = """
SELECT
    format_string('%s-%07d', '{{ data_interval_start | ds_nodash }}', id) AS order_id,
    timestampadd(SECOND, id * 86400 DIV {rows},
        TIMESTAMP_NTZ '{{ data_interval_start.strftime("%Y-%m-%d %H:%M:%S") }}') AS ordered_at,
    format_string('customer-%04d', pmod(hash('{{ data_interval_start | ds }}', id), 1000))
        AS customer_id,
    1 + pmod(hash(id, '{{ data_interval_start | ds }}'), 5) AS items,
    CAST(pmod(hash('amount', '{{ data_interval_start | ds }}', id), 100000) / 100.0
        AS DECIMAL(9, 2)) AS amount,
    element_at(array('EUR', 'USD', 'GBP'),
        1 + pmod(hash('currency', '{{ data_interval_start | ds }}', id), 3)) AS currency
FROM range({rows})
""".replace("{rows}", str(ROWS))

with DAG(
    dag_id=DAG_ID,
    description=f"Exactly-once daily export of generated orders to the Kafka topic {TOPIC!r}",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=START_DATE,
    catchup=True,
    max_active_runs=2,
    default_args={"retries": RETRIES, "retry_delay": RETRY_DELAY},
    tags=["kafka2pc", "example"],
    doc_md=__doc__,
) as dag:
    kafka_exactly_once_export(
        "export_orders",
        source={"sql": ORDERS_SQL},
        topic=TOPIC,
        key_column="order_id",
        num_partitions=PARTITIONS,
        kafka_conn_id="kafka_default",
        spark_conn_id="spark_default",
        ledger_conn_id=LEDGER_CONN_ID,
        writer=WRITER,
        # A day of orders is small: a few shuffle partitions, not Spark's 200.
        spark_conf={"spark.sql.shuffle.partitions": str(PARTITIONS)},
    )
