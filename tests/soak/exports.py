"""The soak's exports: the example DAG and DAGs of its own, each exporting some intervals.

Every interval is exported by one export (one DAG with one ``kafka_exactly_once_export``
task group), so a fault is judged against the export whose work it struck. The kinds:

``jvm``
    the example DAG (``dags/orders_export.py``): one topic, the default writer (``auto``,
    the JVM writer on spark-submit).
``multi``
    several topics (``topic_column`` + ``topics``: a row's topic is ``id % 2``), the
    Python writer (Spark's Python workers write).
``avro``
    registry Avro values (a real schema registry, spark-avro through ``spark.jars.ivy``,
    as ``tests/airflow/test_export_wire.py``), the default writer.

Every record's key is ``<yyyymmdd>-<n>`` whatever the format, so the checker counts each
interval's records per topic by key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date
from typing import Any

from airflow_provider_kafka2pc import naming
from tests.support.registry import HOME
from tests.support.scheduler import DAG_ID

GROUP = "export_orders"
#: Every kind, in the order the intervals are handed out.
KINDS = ("jvm", "multi", "avro")
#: The Airflow connection of the soak's schema registry (an ``http`` one).
REGISTRY_CONN_ID = "soak_registry"


@dataclass(frozen=True)
class SoakExport:
    """One export of the soak: its DAG, its topics and what it writes with."""

    kind: str
    dag_id: str
    topics: tuple[str, ...]
    #: What the prepare should log ("by the <writer> writer").
    writer: str
    registry: bool = False

    @property
    def export_id(self) -> str:
        return f"{self.dag_id}.{GROUP}"

    @property
    def prefix(self) -> str:
        return naming.default_prefix(self.export_id)

    def owns(self, transactional_id: str) -> bool:
        return naming.pattern(self.prefix).fullmatch(transactional_id) is not None

    def per_topic(self, rows: int) -> dict[str, int]:
        """Each topic's records of one interval (row ``id`` goes to ``topics[id % n]``)."""
        n = len(self.topics)
        return {topic: len(range(i, rows, n)) for i, topic in enumerate(self.topics)}


def plan_exports(kinds: tuple[str, ...], example_topic: str, suffix: str) -> list[SoakExport]:
    """The exports of ``kinds``: ``jvm`` is the example DAG on the deployment's topic; the
    others get DAG ids and topics of their own (``suffix`` keeps topics apart)."""
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or not kinds:
        raise ValueError(f"soak exports must be among {KINDS}, not {list(kinds)}")
    exports = []
    for kind in kinds:
        if kind == "jvm":
            exports.append(SoakExport("jvm", DAG_ID, (example_topic,), "jvm"))
        elif kind == "multi":
            topics = (f"multi-a-{suffix}", f"multi-b-{suffix}")
            exports.append(SoakExport("multi", "orders_multi", topics, "python"))
        else:
            exports.append(SoakExport("avro", "orders_avro", (f"avro-{suffix}",), "jvm", True))
    return exports


def assign_days(days: list[date], exports: list[SoakExport]) -> dict[str, list[date]]:
    """Contiguous blocks of ``days`` per export (a backfill takes a range), in order; with
    fewer days than exports the last exports get none."""
    size = max(1, math.ceil(len(days) / len(exports)))
    return {e.dag_id: days[i * size : (i + 1) * size] for i, e in enumerate(exports)}


_SQL = """
SELECT
    format_string('%s-%07d', '{{ data_interval_start | ds_nodash }}', id) AS order_id,
    format_string('customer-%04d', pmod(hash('{{ data_interval_start | ds }}', id), 1000))
        AS customer_id,
    CAST(pmod(hash('amount', '{{ data_interval_start | ds }}', id), 100000) / 100.0
        AS DOUBLE) AS amount{route}
FROM range({rows})
"""

_DAG = '''"""Chaos soak export {dag_id}: an airflow DAG written by tests/soak/exports.py."""

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

try:  # Airflow 3.2+
    from airflow.sdk import CronDataIntervalTimetable
except ImportError:  # Airflow 3.1 has it in core only
    from airflow.timetables.interval import CronDataIntervalTimetable

from airflow_provider_kafka2pc.export import kafka_exactly_once_export

with DAG(
    dag_id={dag_id!r},
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=pendulum.parse({start!r}, tz="UTC"),
    catchup=True,
    default_args={{"retries": {retries!r}, "retry_delay": timedelta(seconds={delay!r})}},
    tags=["kafka2pc", "soak"],
) as dag:
    kafka_exactly_once_export({group!r}, source={{"sql": {sql!r}}}, **{options!r})
'''


def export_options(export: SoakExport, partitions: int) -> dict[str, Any]:
    """The task group's options of a soak DAG (the example DAG has its own)."""
    options: dict[str, Any] = {
        "key_column": "order_id",
        "num_partitions": partitions,
        "kafka_conn_id": "kafka_default",
        "spark_conn_id": "spark_default",
        "ledger_conn_id": "kafka2pc_ledger",
        "writer": export.writer if export.writer == "python" else "auto",
        "spark_conf": {"spark.sql.shuffle.partitions": str(partitions)},
    }
    if len(export.topics) > 1:
        options.update(topic_column="to", topics=list(export.topics))
    else:
        options["topic"] = export.topics[0]
    if export.registry:
        options.update(
            registry_conn_id=REGISTRY_CONN_ID,
            value_format={"record_name": "Order", "namespace": "soak"},
        )
        options["spark_conf"]["spark.jars.ivy"] = str(HOME / "spark-ivy")
    return options


def dag_source(
    export: SoakExport, *, rows: int, partitions: int, start: str, retries: int, delay_s: float
) -> str:
    """The DAG file of a soak export other than the example DAG."""
    route = ""
    if len(export.topics) > 1:
        names = ", ".join(f"'{t}'" for t in export.topics)
        route = (
            f",\n    element_at(array({names}), CAST(id % {len(export.topics)} + 1 AS INT)) AS to"
        )
    return _DAG.format(
        dag_id=export.dag_id,
        start=start,
        retries=retries,
        delay=delay_s,
        group=GROUP,
        sql=_SQL.replace("{route}", route).replace("{rows}", str(rows)),
        options=export_options(export, partitions),
    )
