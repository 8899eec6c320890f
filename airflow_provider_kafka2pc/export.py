"""One call, one exactly-once export: recover -> prepare -> decide -> commit | abort.

    with DAG("orders", schedule="@daily", catchup=True, ...):
        kafka_exactly_once_export(
            "export",
            source={"sql": "SELECT * FROM orders WHERE day = '{{ ds }}'"},
            topic="orders",
            key_column="order_id",
            num_partitions=8,
        )

Each DAG run is one distributed transaction keyed by its data interval. Any failure
before the verdict ends in abort, and an aborted export is a failed run: the abort task
fails, and no task of the group turns it green. The topic is an Airflow asset, outlet of
the commit task only, so DAGs scheduled on it run on committed data only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import Asset, BaseOperator, TaskGroup

from .errors import ConfigurationError
from .operators.decision import KafkaTransactionDecisionOperator
from .operators.finish import KafkaTransactionAbortOperator, KafkaTransactionCommitOperator
from .operators.prepare import SparkKafkaPrepareOperator
from .operators.spark_job import check_num_partitions, source_arguments
from .sensors.dangling import KafkaDanglingTransactionSensor
from .transaction import naming
from .transaction.naming import default_prefix as default_id_prefix
from .transaction.writer import DEFAULT_TRANSACTION_TIMEOUT_MS

#: The run key: the data interval, stable across retries, clears and backfills.
DEFAULT_RUN_KEY = "{{ data_interval_start | ts }}/{{ data_interval_end | ts }}"
TASK_IDS = ("recover", "prepare", "decide", "commit", "abort")
_DEFAULT_CLASSES: dict[str, type[BaseOperator]] = {
    "recover": KafkaDanglingTransactionSensor,
    "prepare": SparkKafkaPrepareOperator,
    "decide": KafkaTransactionDecisionOperator,
    "commit": KafkaTransactionCommitOperator,
    "abort": KafkaTransactionAbortOperator,
}
_UNSET = object()
#: Every option ``**options`` accepts, with its default.
OPTIONS: dict[str, Any] = {
    "export_id": None,  # default f"{dag_id}.{group_id}"
    "run_key": DEFAULT_RUN_KEY,
    "id_prefix": None,  # default derived from export_id
    "transaction_timeout_ms": DEFAULT_TRANSACTION_TIMEOUT_MS,
    "commit_margin_s": 60.0,
    "value_column": None,
    "header_columns": (),
    "spark_conf": None,  # dict of Spark settings for the prepare job
    "spark_binary": None,  # default: spark-submit on PATH, else pyspark's own
    "manifest_dir": None,  # default: a temporary local directory
    "prepare_kwargs": None,  # more SparkSubmitOperator arguments (executor_memory, ...)
    "grace_period": timedelta(hours=1),  # when another run's batch counts as abandoned
    "deferrable": False,  # the recover sensor waits in the triggerer
    "poke_interval": 30.0,
    "asset": _UNSET,  # default export_asset(topic, kafka_conn_id); None: no asset
    "default_args": None,  # for the group's tasks (retries, retry_delay, ...)
    "tooltip": "",
    "operator_classes": None,  # {task id: subclass} to extend a step
}


def export_asset(topic: str, kafka_conn_id: str = "kafka_default") -> Asset:
    """The asset an export to ``topic`` emits events for; schedule downstream DAGs on it.

    Its URI follows the Kafka provider's ``kafka://<server>/<topic>`` scheme with the
    connection id standing for the cluster, so it is known without opening a connection.
    """
    return Asset(uri=f"kafka://{kafka_conn_id}/{topic}")


def kafka_exactly_once_export(
    group_id: str,
    *,
    source: Mapping[str, Any],
    topic: str,
    key_column: str | None = None,
    num_partitions: int,
    kafka_conn_id: str = "kafka_default",
    spark_conn_id: str = "spark_default",
    ledger_conn_id: str | None = None,
    **options: Any,
) -> TaskGroup:
    """A TaskGroup that exports ``source`` to ``topic`` exactly once per run key.

    :param group_id: the group's id; the tasks are ``recover``, ``prepare``, ``decide``,
        ``commit`` and ``abort`` inside it.
    :param source: ``{"sql": ...}``, ``{"table": ...}`` or ``{"path": ..., "format": ...,
        "options": {...}}``, plus an optional ``"filter"``; Jinja-templated.
    :param topic: an existing Kafka topic.
    :param key_column: the record key (also what the rows are partitioned by).
    :param num_partitions: Spark partitions, each one Kafka transaction (>= 1).
    :param kafka_conn_id: the official Kafka provider's ``kafka`` connection.
    :param spark_conn_id: the ``spark`` connection.
    :param ledger_conn_id: the ledger's connection; None for SQLite under ``AIRFLOW_HOME``.
    :param options: see :data:`OPTIONS` (export_id, run_key, id_prefix, commit_margin_s,
        transaction_timeout_ms, spark_conf, grace_period, asset, default_args, ...).
    :raises TypeError: for an option this function does not know.
    :raises ConfigurationError: for a malformed source, prefix or partition count.
    """
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"unknown option(s) {unknown}; known: {sorted(OPTIONS)}")
    opts = {**OPTIONS, **options}
    check_num_partitions(num_partitions)
    if not any("{{" in str(v) for v in dict(source).values()):
        source_arguments(source)
    classes = {**_DEFAULT_CLASSES, **(opts["operator_classes"] or {})}
    if set(classes) - set(TASK_IDS):
        raise TypeError(f"operator_classes keys must be among {TASK_IDS}")

    with TaskGroup(
        group_id, tooltip=opts["tooltip"], default_args=dict(opts["default_args"] or {})
    ) as group:
        if group.dag is None:
            raise ConfigurationError(
                "kafka_exactly_once_export must be called inside a `with DAG(...)` block"
            )
        export_id = opts["export_id"] or f"{group.dag.dag_id}.{group.group_id}"
        id_prefix = opts["id_prefix"] or default_id_prefix(export_id)
        naming.check_slots(id_prefix, num_partitions)
        asset = export_asset(topic, kafka_conn_id) if opts["asset"] is _UNSET else opts["asset"]
        common = {
            "export_id": export_id,
            "run_key": opts["run_key"],
            "kafka_conn_id": kafka_conn_id,
            "ledger_conn_id": ledger_conn_id,
        }
        recover = classes["recover"](
            task_id="recover",
            id_prefix=id_prefix,
            grace_period=opts["grace_period"],
            deferrable=opts["deferrable"],
            poke_interval=opts["poke_interval"],
            **common,
        )
        prepare = classes["prepare"](
            task_id="prepare",
            source=dict(source),
            topic=topic,
            num_partitions=num_partitions,
            key_column=key_column,
            value_column=opts["value_column"],
            header_columns=list(opts["header_columns"]),
            id_prefix=id_prefix,
            spark_conn_id=spark_conn_id,
            transaction_timeout_ms=opts["transaction_timeout_ms"],
            manifest_dir=opts["manifest_dir"],
            conf=dict(opts["spark_conf"] or {}),
            spark_binary=opts["spark_binary"],
            **(opts["prepare_kwargs"] or {}),
            **common,
        )
        commit = classes["commit"](
            task_id="commit", outlets=[asset] if asset is not None else [], **common
        )
        # Retried on transient errors; its final AirflowFailException is never retried.
        abort = classes["abort"](task_id="abort", **common)
        decide = classes["decide"](
            task_id="decide",
            commit_task_id=commit.task_id,
            abort_task_id=abort.task_id,
            commit_margin_s=opts["commit_margin_s"],
            **common,
        )
        recover >> prepare >> decide >> [commit, abort]
    return group


__all__: Sequence[str] = (
    "DEFAULT_RUN_KEY",
    "OPTIONS",
    "default_id_prefix",
    "export_asset",
    "kafka_exactly_once_export",
)
