"""Hourly sweep for dangling Kafka transactions of every listed exactly-once export.

Why: a prepared transaction nobody finishes holds back every read_committed consumer of
the partitions it touched until it times out (up to 15 minutes by default), and one an
export's ledger has forgotten is invisible to that export's own ``recover`` task, which
runs only when the export runs next. This DAG looks on the broker every hour.

What each task does (one ``KafkaDanglingTransactionSensor`` per export, deferrable): it
lists the transactions open under the export's transactional-id prefix (ListTransactions
with a broker-side id pattern on Kafka 4.1+, our prefix filter on older brokers, the
ledger's leases where the broker cannot list), describes them (state, producer id, epoch,
start, timeout) and resolves each by the ledger's verdict for the batch that holds its
id: COMMIT -> committed with the stored producer id/epoch (a transaction under the id
with another producer id/epoch is not the committable's: fenced); ABORT, or no verdict
after the grace period -> aborted and fenced; a pooled id back in the pool (its batch
finished: a task that opened late) -> fenced at once; no ledger record at all (an id under
the prefix the pool never handed out) and open longer than the grace period -> fenced. A live run's
transaction (its batch changed, or the transaction opened, within the grace period) is
never touched: the task waits for it (``wait_for_live``) and succeeds only when nothing
is left. Its XCom is the report (found / committed / aborted / fenced / left, with
reasons). A task that fails says why: a COMMIT verdict whose participant the broker
aborted (loss repair needed), or a prefix that another export is using.

The same from a shell, for the on-call person::

    export KAFKA2PC_LEDGER_URL=sqlite:///$AIRFLOW_HOME/kafka2pc_ledger.db
    kafka2pc recover -b localhost:9092 --export-id orders_export.export_orders \\
        --id-prefix orders_export.export_orders --dry-run   # what it would do
    # then without --dry-run: a JSON report; exit 0 only when nothing is left

Configuration (read when the file is parsed): ``KAFKA2PC_MAINTENANCE_EXPORTS``, a JSON list
of objects ``{"export_id": ..., "id_prefix": ..., "kafka_conn_id": "kafka_default",
"ledger_conn_id": null, "grace_period_s": 3600, "poke_interval_s": 60}`` (only ``export_id``
is required; without ``id_prefix`` the prefix ``kafka_exactly_once_export`` derives from the
export id is used, with those of the export's in-doubt batches). Default: the example
``orders_export`` DAG's export. ``KAFKA2PC_MAINTENANCE_SCHEDULE`` (``@hourly``).
Needs a running triggerer (the sensors defer between rounds).
"""

from __future__ import annotations

import json
import os
import re
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG

from airflow_provider_kafka2pc import defaults
from airflow_provider_kafka2pc.sensors.dangling import KafkaDanglingTransactionSensor

DAG_ID = "kafka2pc_maintenance"
SCHEDULE = os.environ.get("KAFKA2PC_MAINTENANCE_SCHEDULE", "@hourly")
#: The example export of dags/orders_export.py (export id = "<dag id>.<group id>").
DEFAULT_EXPORTS = [
    {
        "export_id": "orders_export.export_orders",
        "ledger_conn_id": os.environ.get("KAFKA2PC_ORDERS_LEDGER_CONN_ID") or None,
    }
]
_FIELDS = {
    "export_id",
    "id_prefix",
    "kafka_conn_id",
    "ledger_conn_id",
    "grace_period_s",
    "poke_interval_s",
}


def exports_from_env() -> list[dict[str, Any]]:
    """The exports to sweep; a malformed setting fails the DAG's import with its reason."""
    raw = os.environ.get("KAFKA2PC_MAINTENANCE_EXPORTS")
    if not raw:
        return DEFAULT_EXPORTS
    try:
        exports = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"KAFKA2PC_MAINTENANCE_EXPORTS is not JSON: {exc.msg}") from None
    if not isinstance(exports, list) or not all(isinstance(e, dict) for e in exports):
        raise ValueError("KAFKA2PC_MAINTENANCE_EXPORTS must be a JSON list of objects")
    for number, entry in enumerate(exports):
        unknown = sorted(set(entry) - _FIELDS)
        if unknown or not isinstance(entry.get("export_id"), str) or not entry["export_id"]:
            raise ValueError(
                f"KAFKA2PC_MAINTENANCE_EXPORTS[{number}]: needs a non-empty 'export_id' and "
                f"knows only {sorted(_FIELDS)}; got {sorted(entry)}"
            )
    return exports


def grace_period(seconds: object) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=float(str(seconds)))


def task_id_for(export_id: str) -> str:
    return "recover__" + re.sub(r"[^A-Za-z0-9_]+", "_", export_id).strip("_")


with DAG(
    dag_id=DAG_ID,
    description="Find and resolve dangling Kafka transactions of the exactly-once exports",
    schedule=SCHEDULE,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    # A failed sweep is an alert, not something to retry blindly: the report says why.
    default_args={"retries": 0},
    tags=["kafka2pc", "maintenance"],
    doc_md=__doc__,
) as dag:
    for export in exports_from_env():
        KafkaDanglingTransactionSensor(
            task_id=task_id_for(export["export_id"]),
            export_id=export["export_id"],
            id_prefix=export.get("id_prefix"),
            kafka_conn_id=export.get("kafka_conn_id", defaults.KAFKA_CONN_ID),
            ledger_conn_id=export.get("ledger_conn_id"),
            # None: the [kafka2pc] grace_period_s setting.
            grace_period=grace_period(export.get("grace_period_s")),
            wait_for_live=True,
            deferrable=True,
            poke_interval=float(export.get("poke_interval_s", 60)),
            # Ends before the next hourly run; a timeout means something stayed unresolved.
            timeout=50 * 60,
        )
