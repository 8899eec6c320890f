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
fails, and no task of the group turns it green. The topic is an Airflow asset, emitted by
the commit task only, so DAGs scheduled on it run on committed data only. Parsing the DAG
file reads no connection: the commit's outlet is an asset alias that the commit resolves
to the topic's asset when it runs (:mod:`.utils.assets`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import Asset, AssetAlias, BaseOperator, TaskGroup

from . import defaults, naming
from .errors import ConfigurationError
from .hooks.kafka2pc import Kafka2pcHook
from .naming import default_prefix as default_id_prefix
from .operators.decision import KafkaTransactionDecisionOperator
from .operators.finish import KafkaTransactionAbortOperator, KafkaTransactionCommitOperator
from .operators.prepare import SparkKafkaPrepareOperator
from .sensors.dangling import KafkaDanglingTransactionSensor
from .spark.job import check_num_partitions, source_arguments
from .spark.partitionings import AUTO_PARTITIONING
from .spark.writers import AUTO_WRITER, check_writer
from .transaction.routing import routing
from .utils.assets import topic_alias, topic_asset

#: The run key: the data interval, stable across retries, clears and backfills.
DEFAULT_RUN_KEY = defaults.RUN_KEY
TASK_IDS = ("recover", "prepare", "decide", "commit", "abort")
_DEFAULT_CLASSES: dict[str, type[BaseOperator]] = {
    "recover": KafkaDanglingTransactionSensor,
    "prepare": SparkKafkaPrepareOperator,
    "decide": KafkaTransactionDecisionOperator,
    "commit": KafkaTransactionCommitOperator,
    "abort": KafkaTransactionAbortOperator,
}


class _FromConnection:
    """The default of ``asset``: the topic's asset (:func:`export_asset`), attached by the
    commit when it runs, through an alias declared at parse time (:func:`export_asset_alias`)."""

    def __repr__(self) -> str:
        return "<the topic's asset, from the Kafka connection when the commit runs>"


FROM_CONNECTION: Any = _FromConnection()


def export_asset(topic: str, kafka_conn_id: str = defaults.KAFKA_CONN_ID) -> Asset:
    """The asset an export to ``topic`` emits events for; schedule downstream DAGs on it.

    Built as the official Kafka provider builds a topic's asset, ``create_asset(server=...,
    topic=...)``, with the connection's first bootstrap server: ``kafka://<server>/<topic>``,
    whose host the provider's OpenLineage converter turns into the dataset namespace.

    Reads the connection: call it at run time (or in a test), not at the top of a DAG
    file; the export itself declares :func:`export_asset_alias` instead.
    """
    return topic_asset(Kafka2pcHook(kafka_conn_id).bootstrap_server(), topic)


def export_asset_alias(topic: str, kafka_conn_id: str = defaults.KAFKA_CONN_ID) -> AssetAlias:
    """The commit task's outlet by default: an alias named from the connection id and the
    topic, resolved to :func:`export_asset` when the commit runs. Reads nothing."""
    return topic_alias(topic, kafka_conn_id)


def kafka_exactly_once_export(
    group_id: str,
    *,
    source: Mapping[str, Any],
    topic: str | None = None,
    key_column: str | None = None,
    num_partitions: int,
    kafka_conn_id: str = defaults.KAFKA_CONN_ID,
    spark_conn_id: str = defaults.SPARK_CONN_ID,
    ledger_conn_id: str | None = None,
    export_id: str | None = None,
    run_key: str = defaults.RUN_KEY,
    id_prefix: str | None = None,
    transaction_timeout_ms: int | None = None,
    commit_margin_s: float | None = None,
    value_column: str | None = None,
    header_columns: Sequence[str] = (),
    registry_conn_id: str | None = None,
    value_format: Mapping[str, Any] | None = None,
    key_format: Mapping[str, Any] | None = None,
    tombstone_when: str | None = None,
    timestamp_column: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
    spark_binary: str | None = None,
    manifest_dir: str | None = None,
    partitioning: str | None = AUTO_PARTITIONING,
    writer: str = AUTO_WRITER,
    prepare_kwargs: Mapping[str, Any] | None = None,
    grace_period: timedelta | None = None,
    deferrable: bool = False,
    poke_interval: float = defaults.RECOVER_POLL_INTERVAL_S,
    asset: Asset | AssetAlias | None = FROM_CONNECTION,
    default_args: Mapping[str, Any] | None = None,
    tooltip: str = "",
    operator_classes: Mapping[str, type[BaseOperator]] | None = None,
    topic_column: str | None = None,
    topics: Sequence[str] | None = None,
    allow_expiring_timestamps: bool = False,
) -> TaskGroup:
    """A TaskGroup that exports ``source`` to ``topic`` exactly once per run key.

    :param group_id: the group's id; the tasks are ``recover``, ``prepare``, ``decide``,
        ``commit`` and ``abort`` inside it.
    :param source: ``{"sql": ...}``, ``{"table": ...}`` or ``{"path": ..., "format": ...,
        "options": {...}}``, plus an optional ``"filter"``; Jinja-templated.
    :param topic: an existing Kafka topic, every row's; or None with ``topic_column``.
    :param topic_column: a string column naming each row's topic, one of ``topics``: the
        export stays one transaction per participant, spanning its topics, and commits or
        aborts as one (docs/wire-formats.md).
    :param topics: with ``topic_column``, every topic it may name (checked before anything
        opens; one asset and one OpenLineage output each).
    :param key_column: the record key (also what the rows are partitioned by).
    :param num_partitions: Spark partitions, each one Kafka transaction (>= 1).
    :param kafka_conn_id: the official Kafka provider's ``kafka`` connection.
    :param spark_conn_id: the ``spark`` connection.
    :param ledger_conn_id: the ledger's connection; None for SQLite under ``AIRFLOW_HOME``.
    :param export_id: the export's identity in the ledger; default ``<dag_id>.<group_id>``.
    :param run_key: what one run exports; default the data interval (templated).
    :param id_prefix: transactional ids are ``<id_prefix>-<slot>``; default derived from
        the export id (:func:`~airflow_provider_kafka2pc.naming.default_prefix`).
    :param transaction_timeout_ms: how long the prepared transactions may stay open; None:
        ``[kafka2pc] transaction_timeout_ms`` (900000 unless configured).
    :param commit_margin_s: time the commit needs before the earliest transaction timeout;
        None: ``[kafka2pc] commit_margin_s`` (60 unless configured).
    :param value_column: string/binary column sent as the value; default the row as JSON.
    :param header_columns: string/binary columns sent as headers.
    :param registry_conn_id, value_format, key_format, tombstone_when, timestamp_column:
        what goes on the wire beyond bytes: registry Avro, tombstones, record timestamps
        (:class:`~.operators.prepare.SparkKafkaPrepareOperator`, docs/wire-formats.md).
    :param allow_expiring_timestamps: export record timestamps older than the topic's time
        retention anyway (docs/record-timestamps.md); refused by default.
    :param spark_conf: Spark settings for the prepare job.
    :param spark_binary: the spark-submit to run; default the connection's, else
        ``spark-submit`` on PATH, else pyspark's own.
    :param manifest_dir: where the prepare job writes its manifest (a URI the driver and
        the worker both reach); default a temporary local directory.
    :param partitioning: ``"auto"`` (default): no shuffle where the plan pins the source's
        own file splits, else aligned with Kafka where that applies, else by hash;
        ``"source-splits"``, ``"kafka-aligned"`` or ``"hash"`` ask for one
        (docs/partitioning.md).
    :param writer: ``"auto"`` (default: the JVM writer on spark-submit, the Python one on
        Spark Connect), ``"python"`` (confluent-kafka in Spark's Python workers) or
        ``"jvm"`` (Kafka's Java producer inside the executors; docs/jvm-writer.md).
    :param prepare_kwargs: more :class:`SparkSubmitOperator` arguments (executor_memory, ...).
    :param grace_period: when another run's batch counts as abandoned; None:
        ``[kafka2pc] grace_period_s`` (1 h unless configured).
    :param deferrable: the recover sensor waits in the triggerer.
    :param poke_interval: seconds between the recover sensor's rounds.
    :param asset: the asset the commit task emits; default the topic's asset (each
        topic's, with ``topics``)
        (:func:`export_asset`, from the Kafka connection), emitted through the alias
        :func:`export_asset_alias` so that parsing the DAG reads no connection; None for no
        asset.
    :param default_args: for the group's tasks (retries, retry_delay, ...).
    :param tooltip: the group's tooltip in the UI.
    :param operator_classes: ``{task id: subclass}`` to extend a step.
    :raises ConfigurationError: for a malformed source, prefix or partition count.
    """
    check_num_partitions(num_partitions)
    route = routing(topic, topic_column, topics)
    if not any("{{" in str(v) for v in dict(source).values()):
        source_arguments(source)
    classes = {**_DEFAULT_CLASSES, **(operator_classes or {})}
    if set(classes) - set(TASK_IDS):
        raise TypeError(f"operator_classes keys must be among {TASK_IDS}")

    with TaskGroup(group_id, tooltip=tooltip, default_args=dict(default_args or {})) as group:
        if group.dag is None:
            raise ConfigurationError(
                "kafka_exactly_once_export must be called inside a `with DAG(...)` block"
            )
        export_id = export_id or f"{group.dag.dag_id}.{group.group_id}"
        id_prefix = id_prefix or default_id_prefix(export_id)
        naming.check_slots(id_prefix, num_partitions)
        if "{{" not in writer:  # a templated writer is checked by the application
            check_writer(writer)
        outlets: list[Asset | AssetAlias] = []
        if asset is FROM_CONNECTION:
            outlets = [export_asset_alias(t, kafka_conn_id) for t in route.topics]
        elif asset is not None:
            outlets = [asset]
        common = {
            "export_id": export_id,
            "run_key": run_key,
            "kafka_conn_id": kafka_conn_id,
            "ledger_conn_id": ledger_conn_id,
        }
        recover = classes["recover"](
            task_id="recover",
            id_prefix=id_prefix,
            grace_period=grace_period,
            deferrable=deferrable,
            poke_interval=poke_interval,
            **common,
        )
        prepare = classes["prepare"](
            task_id="prepare",
            source=dict(source),
            topic=topic,
            topic_column=topic_column,
            topics=None if topics is None else list(topics),
            num_partitions=num_partitions,
            key_column=key_column,
            value_column=value_column,
            header_columns=list(header_columns),
            registry_conn_id=registry_conn_id,
            value_format=value_format,
            key_format=key_format,
            tombstone_when=tombstone_when,
            timestamp_column=timestamp_column,
            allow_expiring_timestamps=allow_expiring_timestamps,
            id_prefix=id_prefix,
            spark_conn_id=spark_conn_id,
            transaction_timeout_ms=transaction_timeout_ms,
            manifest_dir=manifest_dir,
            partitioning=partitioning,
            conf=dict(spark_conf or {}),
            spark_binary=spark_binary,
            # prepare_kwargs may name the writer too (as it could before writer= existed).
            **{"writer": writer, **dict(prepare_kwargs or {})},
            **common,
        )
        commit = classes["commit"](task_id="commit", outlets=outlets, **common)
        # Retried on transient errors; its final AirflowFailException is never retried.
        abort = classes["abort"](task_id="abort", **common)
        decide = classes["decide"](
            task_id="decide",
            commit_task_id=commit.task_id,
            abort_task_id=abort.task_id,
            commit_margin_s=commit_margin_s,
            **common,
        )
        recover >> prepare >> decide >> [commit, abort]
    return group


__all__: Sequence[str] = (
    "DEFAULT_RUN_KEY",
    "default_id_prefix",
    "export_asset",
    "export_asset_alias",
    "kafka_exactly_once_export",
)
