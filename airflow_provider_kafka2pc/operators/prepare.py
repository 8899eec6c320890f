"""Prepare phase: lease ids, run the Spark prepare application, record its committables.

Everything a user can get wrong is checked before the ledger is touched (connections,
topic, source), so bad input leaves nothing behind. A run key already COMMITTED writes
nothing and skips downstream; one with a verdict is not prepared again. Kafka settings
reach the Spark job in a private file (``--kafka-config-file``), never on its command line.

The Spark job is described once (:meth:`SparkKafkaPrepareOperator.spark_job`, a frozen
:class:`~..spark.job_spec.SparkJob` with no secret), run by
:class:`~..hooks.spark_job.SparkJobHook` and recorded in the ledger beside the
committables: a loss repair (the commit task, recovery) runs the same job through the same
hook for the lost partitions only, and only if the source still yields the recorded counts.
The operator sets none of its parent's state: the hook composes its own ``SparkSubmitHook``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, ClassVar

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Context

from .. import compat, defaults, naming
from ..connection.registry import RegistryFormat
from ..coordination.finish import Coordinator
from ..errors import (
    CommittableError,
    ConfigurationError,
    LedgerError,
    RepairImpossibleError,
)
from ..hooks.kafka2pc import Kafka2pcHook
from ..hooks.ledger import LedgerHook
from ..hooks.registry import SchemaRegistryHook
from ..hooks.spark_connect import CONNECT, spark_mode
from ..hooks.spark_job import SparkJobHook
from ..ledger import Batch, BatchState, Ledger, Participant
from ..spark import APPLICATION, AVRO_PACKAGE
from ..spark.export_spec import OPTIONS, ExportSpec
from ..spark.job import (
    check_num_partitions,
    committables_for,
    local_path,
    source_arguments,
    summary,
)
from ..spark.job_spec import SparkJob, describe_job
from ..spark.partitionings import AUTO_PARTITIONING, check_partitioning
from ..spark.writers import AUTO_WRITER, check_writer
from ..transaction.committable import Committable
from ..transaction.manifest import HASH, Manifest
from ..transaction.routing import Routing, routing
from ..utils import config
from ..utils.connections import require_connection
from ..utils.task_errors import failing_permanent_errors
from ..version_compat import HAS_TASK_STATE_STORE, AirflowSkipException, Stats

#: The ``SparkSubmitOperator`` arguments it keeps public (templated) that the job carries
#: as given; ``conf``, ``env_vars`` and ``name`` are carried apart.
_PUBLIC_SUBMIT_ARGUMENTS = (
    "files",
    "py_files",
    "jars",
    "driver_class_path",
    "packages",
    "exclude_packages",
    "keytab",
    "principal",
    "proxy_user",
    "post_submit_commands",
    "properties_file",
)


class SparkKafkaPrepareOperator(SparkSubmitOperator):
    """Prepare phase of an exactly-once export: the Spark job writes one open Kafka
    transaction per partition, and their committables go to the ledger.

    :param export_id: identity of the export; with ``run_key`` it names the batch. (templated)
    :param run_key: the run's key, e.g. its data interval. (templated)
    :param source: ``{"sql": ...}``, ``{"table": ...}`` or ``{"path": ..., "format": ...,
        "options": {...}}``, plus an optional ``"filter"`` (a SQL predicate). (templated)
    :param topic: an existing Kafka topic, every row's. (templated) Give exactly one of
        ``topic`` and ``topic_column``.
    :param topic_column: a string column naming each row's topic, one of ``topics``: one
        export, one transaction per participant spanning every topic, committed or aborted
        as one. A row naming another topic (or null) is refused before anything opens.
    :param topics: with ``topic_column``, every topic it may name; each is checked (exists,
        writable) before anything opens, and each is an asset and an OpenLineage output.
    :param num_partitions: Spark partitions = participants = leased transactional ids (>= 1).
    :param key_column: column used as the record key (and to partition the rows).
    :param value_column: string/binary column sent as the value; default: the row as JSON.
    :param header_columns: string/binary columns sent as headers.
    :param id_prefix: transactional ids are ``<id_prefix>-<slot>``; owned by this export.
    :param kafka_conn_id: the official provider's ``kafka`` connection.
    :param ledger_conn_id: the ledger's connection; None for SQLite under ``AIRFLOW_HOME``.
    :param spark_conn_id: the ``spark`` connection (master URL).
    :param transaction_timeout_ms: how long the prepared transactions may stay open
        (at most the broker's ``transaction.max.timeout.ms``); None:
        ``[kafka2pc] transaction_timeout_ms`` (900000 unless configured).
    :param manifest_dir: where the job writes its manifest, any Hadoop URI the driver and
        this worker can both reach; default: a temporary local directory.
    :param progress_interval_s: each partition logs its rows written at most this often
        while the job writes, and once when delivered (0: never). The lines are the executors':
        they reach this task's log when the executors run in the spark-submit process
        (``local[*]``), and the executors' logs otherwise.
    :param align_with_kafka: each Spark partition owns the Kafka partitions ``p`` with
        ``p mod num_partitions`` = its index, so each transaction writes fewer, fuller record
        batches into fewer partitions (on by default; it applies with a key column and a
        topic whose partitions are a multiple of ``num_partitions``, otherwise the rows are
        partitioned by hash). Loss repair uses the same setting: change it only between
        intervals.
    :param partitioning: ``"auto"`` (default): source splits where the plan pins them,
        else aligned with Kafka where that applies, else by hash. ``"source-splits"``: each
        of the source's own file splits (coalesced to at most ``num_partitions``) is one
        transaction, without a shuffle; the split settings and a fingerprint of the input
        go to the ledger, and a loss repair recomputes the same splits or refuses. A source
        without pinnable splits is shuffled (the log says why). ``"kafka-aligned"`` or
        None: a shuffle, aligned by ``align_with_kafka``; ``"hash"``: a shuffle by hash.
        The ledger records what was used. docs/partitioning.md compares them.
    :param registry_conn_id: the schema registry's ``http`` connection
        (:class:`~..hooks.registry.SchemaRegistryHook`); needed with ``value_format`` or
        ``key_format``.
    :param value_format: values as Avro in the registry's wire format: a dict of
        :class:`~..connection.registry.RegistryFormat` options (``{}``: the schema derived
        from the columns, subject ``<topic>-value``). (templated)
    :param key_format: keys as registry Avro, likewise (subject ``<topic>-key``). (templated)
    :param tombstone_when: a SQL condition over the source's columns; where true the record
        is a tombstone (null value). A null ``value_column`` is one too. (templated)
    :param timestamp_column: the records' CreateTime: a timestamp column or a long column
        of epoch ms; null: the time of writing. (templated) Timestamps the topic would
        delete at once (older than its ``retention.ms``) or reject
        (``message.timestamp.before/after.max.ms``) are refused before anything opens.
    :param allow_expiring_timestamps: export timestamps older than the topic's time
        retention anyway (e.g. into a compacted topic the policy does not cover).
    :param writer: who writes the transactions: ``"auto"`` (default: the JVM writer on
        spark-submit, the Python one on Spark Connect or where the JVM one cannot load),
        ``"python"`` (confluent-kafka in Spark's Python workers) or ``"jvm"`` (Kafka's Java
        producer inside the executors; docs/jvm-writer.md). The task log and the manifest
        name the one used. Loss repair re-prepares with the same setting. (templated)
    :param spark_mode: ``"submit"`` (spark-submit of the packaged application) or
        ``"connect"`` (the same prepare in this task's process, its plan sent to a Spark
        Connect server: :mod:`.spark_connect`); None: ``"connect"`` when ``spark_conn_id``
        is a ``spark_connect`` connection, else ``"submit"``. On Connect, ``conf`` holds
        the session's runtime settings and the source's paths are the server's.
    :param kwargs: any other option of :class:`~..spark.export_spec.ExportSpec`, by its name;
        the rest is passed to :class:`SparkSubmitOperator` (``conf``, ``spark_binary``, ...).
        With a registry format, Spark's Avro package is added to ``packages``.
    """

    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "export_id",
        "run_key",
        "source",
        "topic",
        "id_prefix",
        "manifest_dir",
        "value_format",
        "key_format",
        "tombstone_when",
        "timestamp_column",
        "writer",
        "more_options",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {
        "source": "json",
        "conf": "json",
        "value_format": "json",
        "key_format": "json",
    }
    ui_color = "#f4a460"

    def __init__(
        self,
        *,
        export_id: str,
        run_key: str,
        source: Mapping[str, Any],
        topic: str | None = None,
        num_partitions: int,
        key_column: str | None = None,
        value_column: str | None = None,
        header_columns: Sequence[str] = (),
        id_prefix: str,
        kafka_conn_id: str = defaults.KAFKA_CONN_ID,
        ledger_conn_id: str | None = None,
        spark_conn_id: str = defaults.SPARK_CONN_ID,
        transaction_timeout_ms: int | None = None,
        manifest_dir: str | None = None,
        progress_interval_s: float = defaults.PROGRESS_INTERVAL_S,
        align_with_kafka: bool = True,
        partitioning: str | None = AUTO_PARTITIONING,
        registry_conn_id: str | None = None,
        value_format: Mapping[str, Any] | None = None,
        key_format: Mapping[str, Any] | None = None,
        tombstone_when: str | None = None,
        timestamp_column: str | None = None,
        writer: str = AUTO_WRITER,
        spark_mode: str | None = None,
        topic_column: str | None = None,
        topics: Sequence[str] | None = None,
        allow_expiring_timestamps: bool = False,
        **kwargs: Any,
    ) -> None:
        check_num_partitions(num_partitions)
        # An export option without an argument of its own here (one added to ExportSpec
        # later) is taken by name from kwargs: the spec is where an option is defined.
        self.more_options = {k: kwargs.pop(k) for k in OPTIONS if k in kwargs}
        if topic is None or "{{" not in topic:
            routing(topic, topic_column, topics)
        if "{{" not in writer:
            check_writer(writer)
        if "{{" not in id_prefix:
            naming.check_slots(id_prefix, num_partitions)
        if not any("{{" in str(v) for v in dict(source).values()):
            source_arguments(source)
        # Re-attaching to an earlier try's Spark job would race the fence this operator
        # applies before every submit: always submit afresh. Before Airflow 3.3 (no task
        # state store) every try submits afresh anyway, and an explicit value only warns.
        if HAS_TASK_STATE_STORE:
            kwargs.setdefault("durable", False)
        kwargs.setdefault("name", "kafka2pc-prepare")
        if value_format is not None or key_format is not None:
            kwargs["packages"] = _with_avro(kwargs.get("packages"))
        super().__init__(application=APPLICATION, conn_id=spark_conn_id, **kwargs)
        self.export_id = export_id
        self.run_key = run_key
        self.source = dict(source)
        self.topic = topic
        self.topic_column = topic_column
        self.topics = None if topics is None else list(topics)
        self.num_partitions = num_partitions
        self.key_column = key_column
        self.value_column = value_column
        self.header_columns = list(header_columns)
        self.id_prefix = id_prefix
        self.kafka_conn_id = kafka_conn_id
        self.ledger_conn_id = ledger_conn_id
        self.spark_conn_id = spark_conn_id
        self.transaction_timeout_ms = (
            config.transaction_timeout_ms()
            if transaction_timeout_ms is None
            else transaction_timeout_ms
        )
        self.manifest_dir = manifest_dir
        self.progress_interval_s = progress_interval_s
        self.align_with_kafka = align_with_kafka
        self.partitioning = check_partitioning(partitioning, align_with_kafka)
        self.registry_conn_id = registry_conn_id
        self.value_format = None if value_format is None else dict(value_format)
        self.key_format = None if key_format is None else dict(key_format)
        self.tombstone_when = tombstone_when
        self.timestamp_column = timestamp_column
        if "{{" not in json.dumps([self.value_format, self.key_format], default=str):
            self._registry_formats()
        self.writer = writer
        self.spark_mode = spark_mode
        self.allow_expiring_timestamps = allow_expiring_timestamps

    # -- the task -----------------------------------------------------------------------

    def execute(self, context: Context) -> dict[str, Any]:
        started = time.monotonic()
        kafka = Kafka2pcHook(self.kafka_conn_id)
        # Bad input fails without retry (no retry can mend it) and leaves nothing behind.
        with failing_permanent_errors():
            source_args = self.validate(kafka)
            self._job = self.spark_job()  # described once, from the rendered arguments
            with LedgerHook(self.ledger_conn_id).get_conn() as ledger:
                route = self.route
                batch = ledger.begin(
                    self.export_id,
                    self.run_key,
                    topic=route.topic,
                    topics=route.topics if route.several else None,
                    id_prefix=self.id_prefix,
                    num_partitions=self.num_partitions,
                )
                self._source_rows = batch.source_rows
                result = self._prepare(context, kafka, ledger, batch, source_args, started)
                self._source_rows = result["source_rows"]
                return result

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the source this prepare read, with its rows. No output: the topic
        is the commit task's output, once committed."""
        from ..utils.openlineage import lineage, source_datasets

        rows = getattr(self, "_source_rows", None)
        return lineage(self.source, source_datasets(self.source, dict(self.conf or {}), rows))

    @property
    def route(self) -> Routing:
        """The export's topics (rendered): one ``topic``, or ``topic_column`` among
        ``topics``."""
        return routing(self.topic, self.topic_column, self.topics)

    def validate(self, kafka: Kafka2pcHook) -> list[str]:
        """Everything checkable before the ledger is touched; returns the source's arguments."""
        check_num_partitions(self.num_partitions)
        export = self.export_spec()  # every export option, checked once
        if not isinstance(self.run_key, str) or self.run_key.strip() in ("", "None", "None/None"):
            raise ConfigurationError(
                f"run_key must be a non-empty string, got {self.run_key!r} (a run without a "
                "data interval needs an explicit run_key)"
            )
        naming.check_slots(self.id_prefix, self.num_partitions)
        source_args = source_arguments(self.source)
        for role, conn_id in (
            ("Kafka", self.kafka_conn_id),
            ("Spark", self.spark_conn_id),
            ("ledger", self.ledger_conn_id),
        ):
            if conn_id is not None:
                require_connection(role, conn_id)
        path = self.source.get("path")
        if path and not self._on_connect():  # on Connect, paths are the server's
            local = local_path(str(path))
            if local is not None and not local.exists():
                raise ConfigurationError(f"source path {str(path)!r} does not exist")
        if export.uses_registry:
            if self.registry_conn_id is None:
                raise ConfigurationError(
                    "value_format/key_format need registry_conn_id (the schema registry's "
                    "http connection)"
                )
            self.log.info(
                "schema registry %s", SchemaRegistryHook(self.registry_conn_id).describe()
            )
        route = self.route
        partitions = {t: kafka.check_topic(t) for t in route.topics}  # every one, first
        self.log.info(
            "export %s run %s: %s; Kafka settings %s",
            self.export_id,
            self.run_key,
            ", ".join(f"topic {t!r} has {n} partitions" for t, n in partitions.items())
            + (f", routed by column {route.column!r}" if route.several else ""),
            kafka.describe(),
        )
        return source_args

    def _prepare(
        self,
        context: Context,
        kafka: Kafka2pcHook,
        ledger: Ledger,
        batch: Batch,
        source_args: list[str],
        started: float,
    ) -> dict[str, Any]:
        label = batch.key
        if batch.state is BatchState.COMMITTED:
            self.log.info(
                "%s is already COMMITTED (%s rows, attempt %d): writing nothing, "
                "skipping downstream",
                label,
                batch.source_rows,
                batch.attempt,
            )
            raise AirflowSkipException(f"{label} is already committed")
        if batch.verdict is not None:
            self.log.info(
                "%s already has verdict %s: not preparing again", label, batch.verdict.value
            )
            return summary(batch, ledger.participants(self.export_id, self.run_key))
        self.log.info(
            "%s attempt %d: leased %s", label, batch.attempt, list(batch.transactional_ids)
        )
        with kafka.controller() as controller:
            # Whatever an earlier try left open under these ids is aborted first.
            Coordinator(ledger, controller).fence(batch.transactional_ids)
        prepared = self.run_spark(context, kafka, batch, source_args)
        committables = committables_for(prepared, batch, self.transaction_timeout_ms)
        job = getattr(self, "_job", None) or self.spark_job()
        try:
            batch = ledger.record_prepared(
                self.export_id,
                self.run_key,
                committables,
                source_rows=prepared.source_rows,
                partitioning=prepared.partitioning,
                source_splits=prepared.metadata.get("source_splits"),
                spark_job=job.record(),
            )
        except (LedgerError, CommittableError):
            # Another run of this run key moved the batch on (a verdict, a new attempt)
            # while Spark wrote: these transactions belong to no batch. End them now, by
            # their exact producer id and epoch: a stale epoch cannot touch whoever holds
            # the ids next, and leaving them open would stall read_committed consumers.
            with kafka.controller() as controller:
                ended = controller.abort_all(committables)
            self.log.warning(
                "%s: the ledger refused this prepare's committables; aborted them: %s",
                label,
                [f"{r.transactional_id}: {r.outcome.value}" for r in ended],
            )
            raise
        result = summary(batch, ledger.participants(self.export_id, self.run_key))
        self.log.info(
            "%s: prepared %d rows in %d partitions %s by the %s writer%s, partitioned %s%s; "
            "earliest transaction timeout in %s s",
            label,
            prepared.source_rows,
            len(committables),
            [c.record_count for c in committables],
            prepared.metadata.get("writer", "python"),
            f" ({why})" if (why := prepared.metadata.get("writer_reason")) else "",
            prepared.partitioning or HASH,
            f" ({why})" if (why := prepared.metadata.get("partitioning_reason")) else "",
            result["seconds_left"],
        )
        tags = {"export_id": self.export_id, "topic": ",".join(self.route.topics)}
        Stats.incr("kafka2pc.prepare.records", count=prepared.source_rows, tags=tags)
        Stats.timing(
            "kafka2pc.prepare.duration", timedelta(seconds=time.monotonic() - started), tags=tags
        )
        return result

    def run_spark(
        self, context: Context, kafka: Kafka2pcHook, batch: Batch, source_args: list[str]
    ) -> Manifest:
        """Run the export's Spark job (:class:`SparkJobHook`); return its manifest."""
        job = getattr(self, "_job", None) or self.spark_job()
        return self.spark_hook(self._with_lineage_conf(job, context), kafka).prepare(batch)

    # -- the Spark job ------------------------------------------------------------------

    def spark_job(self) -> SparkJob:
        """This export's Spark job from the (rendered) arguments: what the prepare runs and
        records, and a loss repair runs again. No secret: connections are named by id."""
        export = self.export_spec()
        return describe_job(
            export=export,
            spark_conn_id=self.spark_conn_id,
            kafka_conn_id=self.kafka_conn_id,
            spark_mode=self.spark_mode,
            registry_conn_id=self.registry_conn_id if export.uses_registry else None,
            name=self.name,
            conf=self.conf,
            env_vars=self.env_vars,
            submit={
                **{name: getattr(self, name) for name in _PUBLIC_SUBMIT_ARGUMENTS},
                **compat.submit_arguments(self),
            },
            manifest_dir=self.manifest_dir,
        )

    def spark_hook(self, job: SparkJob, kafka: Kafka2pcHook | None = None) -> SparkJobHook:
        hook = SparkJobHook(job, kafka=kafka, yarn_rm_auth=compat.yarn_rm_auth(self))
        self._spark_hook = hook  # for on_kill
        return hook

    def _with_lineage_conf(self, job: SparkJob, context: Context) -> SparkJob:
        """The job with OpenLineage's Spark settings for this run, when asked for (as
        :class:`SparkSubmitOperator` adds them); the record keeps the user's."""
        parent, transport = compat.openlineage_injection(self)
        if not (parent or transport):
            return job
        from airflow.providers.common.compat.openlineage.utils.spark import (
            inject_parent_job_information_into_spark_properties,
            inject_transport_information_into_spark_properties,
        )

        conf = job.conf_dict()
        if parent:
            conf = inject_parent_job_information_into_spark_properties(conf, context)
        if transport:
            conf = inject_transport_information_into_spark_properties(conf, context)
        return job.with_conf(conf)

    def on_kill(self) -> None:
        hook = getattr(self, "_spark_hook", None)
        if hook is not None:
            hook.on_kill()

    # -- loss repair --------------------------------------------------------------------

    def reprepare(
        self,
        context: Context,
        batch: Batch,
        participants: Sequence[Participant],
        lost: Sequence[Participant],
    ) -> dict[int, Committable]:
        """Write the ``lost`` partitions again with this operator's job (its templates
        rendered for the batch's run): :meth:`SparkJobHook.reprepare`. The commit task
        runs the job the ledger recorded instead; this is for batches without a record.

        :raises RepairImpossibleError: the source changed or is gone.
        :raises RepairFailedError: the job failed otherwise; a retry may succeed.
        """
        try:
            job = self.spark_job()
        except ConfigurationError as exc:
            raise RepairImpossibleError(f"the prepare's source is unusable: {exc}") from exc
        return self.spark_hook(job).reprepare(batch, participants, lost)

    # -- the export's spec ----------------------------------------------------------------

    def export_spec(self) -> ExportSpec:
        """The export's options from the (rendered) arguments, validated once: the same
        object the job reads on every path and the ledger records."""
        return ExportSpec(
            source=self.source,
            topic=self.topic,
            topic_column=self.topic_column,
            topics=None if self.topics is None else tuple(self.topics),
            key_column=self.key_column,
            value_column=self.value_column,
            header_columns=tuple(self.header_columns),
            value_format=self.value_format,
            key_format=self.key_format,
            tombstone_when=self.tombstone_when,
            timestamp_column=self.timestamp_column,
            allow_expiring_timestamps=self.allow_expiring_timestamps,
            transaction_timeout_ms=self.transaction_timeout_ms,
            progress_interval_s=self.progress_interval_s,
            align_with_kafka=self.align_with_kafka,
            partitioning=self.partitioning,
            writer=self.writer,
            **self.more_options,
        )

    def _registry_formats(self) -> tuple[RegistryFormat | None, RegistryFormat | None]:
        """(value format, key format) checked; a clear error for a bad option."""
        return tuple(  # type: ignore[return-value]
            None if f is None else RegistryFormat.from_dict(f)
            for f in (self.value_format, self.key_format)
        )

    def _on_connect(self) -> bool:
        return spark_mode(self.spark_conn_id, self.spark_mode) == CONNECT


def _with_avro(packages: str | None) -> str:
    """``packages`` (spark-submit's comma list) plus Spark's Avro package."""
    listed = [p.strip() for p in (packages or "").split(",") if p.strip()]
    if not any(p.startswith(AVRO_PACKAGE.rsplit(":", 1)[0]) for p in listed):
        listed.append(AVRO_PACKAGE)
    return ",".join(listed)
