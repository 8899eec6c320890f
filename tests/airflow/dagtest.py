"""Build DAGs with the export TaskGroup and run them with ``dag.test()``; read what they left.

Import only after :func:`tests.airflow.env.configure` (the conftest does it). Also a
command for child processes (concurrent runs): ``python -m tests.airflow.dagtest SPEC``
configures its own Airflow home, runs one export and prints ``RESULT {json}``.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

KAFKA_CONN_ID = "kafka_default"
SPARK_CONN_ID = "spark_default"
LEDGER_CONN_ID = "kafka2pc_ledger"
GROUP_ID = "export"
#: Interval ``day`` of the test DAGs starts at START + day days.
START = datetime(2026, 11, 1, tzinfo=UTC)
#: Rows per interval in :func:`orders_source`; keys of different days never overlap.
DAY_KEYS = 100_000


#: How a child process (``python -m tests.airflow.dagtest``, ``tests.faults.child``) reports.
RESULT_PREFIX = "RESULT "


def print_result(payload: Mapping[str, Any]) -> None:
    """One write and a flush, so no log line of another thread lands between the result
    and its newline."""
    sys.stdout.write(f"{RESULT_PREFIX}{json.dumps(payload, default=str)}\n")
    sys.stdout.flush()


def result_in(output: str) -> dict[str, Any] | None:
    """The last result a child printed, or None. Only the JSON value is read: a log line
    written onto the same line after it (seen under load, from the OpenLineage client's
    thread at exit) is not part of it."""
    lines = [line for line in output.splitlines() if line.startswith(RESULT_PREFIX)]
    if not lines:
        return None
    value, _ = json.JSONDecoder().raw_decode(lines[-1], len(RESULT_PREFIX))
    return value


def kafka_connection_env(
    settings: Mapping[str, Any], conn_id: str = KAFKA_CONN_ID
) -> dict[str, str]:
    """The official Kafka provider's connection: extra = librdkafka settings."""
    value = {"conn_type": "kafka", "extra": dict(settings)}
    return {f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(value)}


def spark_connection_env(master: str = "local[2]", conn_id: str = SPARK_CONN_ID) -> dict[str, str]:
    """JSON, not a URI: ``spark://local[2]`` silently falls back to yarn."""
    return {f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps({"conn_type": "spark", "host": master})}


def ledger_connection_env(path: Path, conn_id: str = LEDGER_CONN_ID) -> dict[str, str]:
    """A SQLite ledger connection: the database file's path in the host field."""
    return {
        f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps({"conn_type": "sqlite", "host": str(path)})
    }


def migrate() -> None:
    """Create the metadata DB of the configured home and register its DAG bundles."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.utils import db

    db.initdb()
    DagBundlesManager().sync_bundles_to_db()


def logical_date(day: int) -> datetime:
    return START + timedelta(days=day)


def orders_source(rows: int = 300) -> dict[str, str]:
    """A deterministic orders dataset per data interval, keyed by a stable order_id."""
    first = f"(({{{{ data_interval_start.day }}}} - 1) * {DAY_KEYS})"
    return {
        "sql": (
            f"SELECT id AS order_id, concat('customer-', CAST(id % 17 AS STRING)) AS customer, "
            f"CAST(id % 1000 AS DOUBLE) / 4 AS amount FROM range({first}, {first} + {rows})"
        )
    }


def export_dag(
    dag_id: str,
    *,
    topic: str,
    rows: int = 300,
    key_column: str = "order_id",
    num_partitions: int = 2,
    retries: int = 0,
    source: Mapping[str, Any] | None = None,
    ledger_conn_id: str | None = LEDGER_CONN_ID,
    **options: Any,
) -> Any:
    """A daily DAG whose only content is the export group (``export``) to ``topic``."""
    from airflow.sdk import DAG

    from airflow_provider_kafka2pc.export import kafka_exactly_once_export

    with DAG(
        dag_id,
        schedule="@daily",
        start_date=START,
        catchup=False,
        default_args={"retries": retries, "retry_delay": timedelta(seconds=0)},
    ) as dag:
        kafka_exactly_once_export(
            GROUP_ID,
            source=source if source is not None else orders_source(rows),
            topic=topic,
            key_column=key_column,
            num_partitions=num_partitions,
            kafka_conn_id=KAFKA_CONN_ID,
            spark_conn_id=SPARK_CONN_ID,
            ledger_conn_id=ledger_conn_id,
            **{"spark_conf": {"spark.sql.shuffle.partitions": "4"}, **options},
        )
    return dag


def dagbag_module() -> Any:
    """The module of ``DagBag`` and ``sync_bag_to_db``: moved to dag_processing in Airflow 3.2."""
    try:
        from airflow.dag_processing import dagbag
    except ImportError:  # Airflow 3.1
        from airflow.models import dagbag  # type: ignore[no-redef]
    return dagbag


def register(dag: Any) -> None:
    """Serialize a DAG defined outside the dags folder into the metadata DB (dag.test needs it)."""
    from airflow_provider_kafka2pc.version_compat import conf

    dagbag = dagbag_module()
    bag = dagbag.DagBag(dag_folder=conf.get("core", "dags_folder"), collect_dags=False)
    bag.bag_dag(dag)
    dagbag.sync_bag_to_db(bag, "dags-folder", None)


@dataclass
class DagTestResult:
    """A finished ``dag.test()`` run: its state, and each task's state and try number."""

    dag_id: str
    run_id: str
    state: str
    #: Task id without the group prefix ("prepare", ...) -> state.
    tasks: dict[str, str | None]
    tries: dict[str, int] = field(default_factory=dict)
    #: The DagRun ``dag.test()`` returned (metadata DB object; not in ``to_dict``).
    dag_run: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k != "dag_run"}

    def xcom(self, task: str, key: str = "return_value") -> Any:
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session

        with create_session() as session:
            query = XComModel.get_many(
                run_id=self.run_id, key=key, task_ids=f"{GROUP_ID}.{task}", dag_ids=self.dag_id
            )
            row = session.scalars(query).first()
            return None if row is None else XComModel.deserialize_value(row)

    def task_state_store(self, task: str, key: str) -> Any:
        """The task's stored value of ``key``; Airflow 3.3+ only (3.1 and 3.2 have no store)."""
        from airflow.models.task_state_store import TaskStateStoreModel
        from airflow.utils.session import create_session

        with create_session() as session:
            row = (
                session.query(TaskStateStoreModel)
                .filter_by(
                    dag_id=self.dag_id, run_id=self.run_id, task_id=f"{GROUP_ID}.{task}", key=key
                )
                .first()
            )
            return None if row is None else json.loads(row.value)


def share_the_execution_api() -> None:
    """One in-process Execution API app for every task ``dag.test()`` runs in this process.

    Why: ``dag.test()`` builds a new app for each task instance, whose first request builds
    its versioned routers (Cadwyn) again. Sharing one took a happy-path test's process from
    19.5 to 16.7 CPU-seconds (one run each). Tasks run one at a time; each call still sets
    its DAG bag.
    """
    from airflow.sdk.execution_time import supervisor

    build = getattr(supervisor, "in_process_api_server", None)
    if build is not None and not hasattr(build, "cache_info"):
        supervisor.in_process_api_server = functools.cache(build)


def run(dag: Any, day: int = 1, *, register_first: bool = True) -> DagTestResult:
    """``dag.test()`` for interval ``day``; it does not raise when the run fails."""
    share_the_execution_api()
    if register_first:
        register(dag)
    dag_run = dag.test(logical_date=logical_date(day))
    tis = dag_run.get_task_instances()
    return DagTestResult(
        dag_id=dag.dag_id,
        run_id=dag_run.run_id,
        state=str(getattr(dag_run.state, "value", dag_run.state)),
        tasks={ti.task_id.split(".")[-1]: _state(ti.state) for ti in tis},
        tries={ti.task_id.split(".")[-1]: ti.try_number for ti in tis},
        dag_run=dag_run,
    )


def asset_events(uri: str) -> list[dict[str, Any]]:
    """The extras of every event of the asset ``uri``, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        events = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri == uri)
            .order_by(AssetEvent.id)
            .all()
        )
        return [dict(e.extra or {}) for e in events]


def rendezvous_prepare(peers: int, timeout_s: float = 120.0) -> type:
    """A prepare that, its ids leased, waits until ``peers`` batches of its export are in
    doubt before it writes: concurrent runs then certainly hold their leases together."""
    import time

    from airflow_provider_kafka2pc.hooks.ledger import LedgerHook
    from airflow_provider_kafka2pc.operators.prepare import SparkKafkaPrepareOperator

    class RendezvousPrepare(SparkKafkaPrepareOperator):
        def run_spark(self, context, kafka, batch, source_args):
            deadline = time.monotonic() + timeout_s
            with LedgerHook(self.ledger_conn_id).get_conn() as ledger:
                while len(ledger.in_doubt(self.export_id)) < peers:
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"fewer than {peers} concurrent runs after {timeout_s} s"
                        )
                    time.sleep(0.2)
            return super().run_spark(context, kafka, batch, source_args)

    return RendezvousPrepare


def _state(state: Any) -> str | None:
    return None if state is None else str(getattr(state, "value", state))


def main(argv: list[str]) -> int:
    """Child process: ``SPEC`` = JSON {home, dag_id, topic, day, ...export_dag options}."""
    spec = json.loads(argv[0])
    from tests.airflow import env

    env.configure(Path(spec.pop("home")))
    migrate()
    day = spec.pop("day")
    peers = spec.pop("rendezvous", 0)
    if peers:
        spec["operator_classes"] = {"prepare": rendezvous_prepare(peers)}
    dag = export_dag(spec.pop("dag_id"), **spec)
    result = run(dag, day)
    payload = {**result.to_dict(), "prepared": result.xcom("prepare")}
    print_result(payload)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
