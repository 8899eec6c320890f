"""The example DAG (dags/orders_export.py): imports cleanly, has the promised shape, and its
source is what the exactly-once claim needs (deterministic per interval, a stable unique key).

Runs what the scheduler would: the DagBag parse and the serialization round trip; the SQL is
rendered with the DAG's own Jinja environment and executed by Spark ``local[2]``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pendulum
import pytest

from ..support.spark import PYTHON_ENV, QUIET_CONF

REPO = Path(__file__).resolve().parents[2]
DAGS_FOLDER = REPO / "dags"
DAG_ID = "orders_export"
GROUP = "export_orders"


@pytest.fixture(scope="module")
def dagbag() -> Any:
    from tests.airflow.dagtest import dagbag_module

    DagBag = dagbag_module().DagBag
    with pytest.MonkeyPatch.context() as env:  # parsing needs no Kafka connection
        env.delenv("AIRFLOW_CONN_KAFKA_DEFAULT", raising=False)
        return DagBag(dag_folder=str(DAGS_FOLDER))


@pytest.fixture(scope="module")
def dag(dagbag: Any) -> Any:
    return dagbag.dags[DAG_ID]


@pytest.fixture(scope="module")
def orders_module(dag: Any) -> Any:
    """The DAG file as the DagBag loaded it (its constants: ROWS, ORDERS_SQL, ...)."""
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) == dag.fileloc and hasattr(module, "ORDERS_SQL"):
            return module
    raise AssertionError(f"the module of {dag.fileloc} is not loaded")


def render(dag: Any, sql: str, start: datetime) -> str:
    """The source SQL for the interval [start, start + 1 day), as Airflow renders it."""
    context = {
        "data_interval_start": pendulum.instance(start),
        "data_interval_end": pendulum.instance(start + timedelta(days=1)),
    }
    return dag.get_template_env().from_string(sql).render(**context)


def test_the_dag_imports_cleanly(dagbag: Any) -> None:
    assert dagbag.import_errors == {}
    assert DAG_ID in dagbag.dag_ids


def test_it_survives_serialization(dag: Any) -> None:
    """The scheduler and dag-processor only ever see the serialized DAG."""
    from airflow.serialization import serialized_objects

    # Named DagSerialization from Airflow 3.3; SerializedDAG before.
    serializer = getattr(serialized_objects, "DagSerialization", None) or (
        serialized_objects.SerializedDAG
    )
    restored = serializer.deserialize_dag(serializer.serialize_dag(dag))
    assert sorted(restored.task_ids) == sorted(dag.task_ids)
    assert restored.catchup is True


def test_a_daily_interval_schedule_with_catchup(dag: Any) -> None:
    """Run key = data interval: the schedule must produce real intervals (start < end), and
    catchup makes a backfill one command; the start date lies a few days back at midnight."""
    try:  # Airflow 3.2+
        from airflow.sdk import CronDataIntervalTimetable
    except ImportError:  # Airflow 3.1
        from airflow.timetables.interval import CronDataIntervalTimetable

    assert isinstance(dag.timetable, CronDataIntervalTimetable)
    # ``expression`` on the SDK's timetable (3.2+), ``_expression`` on core's (3.1).
    timetable = dag.timetable
    expression = getattr(timetable, "expression", None) or timetable._expression
    assert expression == "0 0 * * *"
    assert dag.catchup is True
    assert dag.max_active_runs == 2
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if not os.environ.get("KAFKA2PC_ORDERS_START_DATE"):
        assert dag.start_date == today - timedelta(days=3)


def test_the_export_group_and_its_edges(dag: Any, orders_module: Any) -> None:
    tasks = {t.task_id.removeprefix(f"{GROUP}."): t for t in dag.tasks}
    assert set(tasks) == {"recover", "prepare", "decide", "commit", "abort"}
    assert tasks["recover"].downstream_task_ids == {f"{GROUP}.prepare"}
    assert tasks["prepare"].downstream_task_ids == {f"{GROUP}.decide"}
    assert tasks["decide"].downstream_task_ids == {f"{GROUP}.commit", f"{GROUP}.abort"}
    assert str(tasks["decide"].trigger_rule.value) == "all_done"  # a failed prepare gets a verdict
    prepare = tasks["prepare"]
    assert prepare.topic == orders_module.TOPIC
    assert prepare.key_column == "order_id"
    assert prepare.num_partitions == orders_module.PARTITIONS
    assert set(prepare.source) == {"sql"}
    # The topic is an asset, and only the commit emits it: through an alias declared
    # without the connection (the commit attaches kafka://<server>/<topic> when it runs).
    outlets = {t: [(type(a).__name__, a.name) for a in tasks[t].outlets] for t in tasks}
    alias = f"kafka2pc:kafka_default:{orders_module.TOPIC}"
    assert outlets.pop("commit") == [("AssetAlias", alias)]
    assert not any(outlets.values()), outlets


# -- the source: Spark runs the rendered SQL -------------------------------------------------


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    os.environ.update(PYTHON_ENV)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("example-dag-source")
    for key, value in QUIET_CONF.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    try:
        yield session
    finally:
        session.stop()


def test_the_source_is_deterministic_per_interval_with_a_unique_stable_key(
    spark: Any, dag: Any, orders_module: Any
) -> None:
    rows = orders_module.ROWS
    day = datetime(2026, 11, 20, tzinfo=UTC)
    sql = render(dag, orders_module.ORDERS_SQL, day)
    assert "{{" not in sql and "2026-11-20" in sql

    def records(sql: str) -> list[dict[str, Any]]:
        """The records as Spark's JSON encoding writes them (what lands in the topic)."""
        found = spark.sql(sql).selectExpr("to_json(struct(*)) AS record").collect()
        return sorted((json.loads(r.record) for r in found), key=lambda r: r["order_id"])

    first = records(sql)
    assert len(first) == rows
    assert len({r["order_id"] for r in first}) == rows
    # Recomputed, in another session time zone even: the very same records.
    spark.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")
    try:
        assert records(render(dag, orders_module.ORDERS_SQL, day)) == first
    finally:
        spark.conf.unset("spark.sql.session.timeZone")
    # Another interval: other keys, so days never collide in the topic.
    next_day = records(render(dag, orders_module.ORDERS_SQL, day + timedelta(days=1)))
    assert not {r["order_id"] for r in next_day} & {r["order_id"] for r in first}
    # Orders lie inside their interval.
    times = sorted(r["ordered_at"] for r in first)
    assert times[0] == "2026-11-20T00:00:00.000" and times[-1] < "2026-11-21", times[-1]
