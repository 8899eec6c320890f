"""The prepare when another operator runs the Spark job: lease before it, record after it.

:class:`KafkaPrepareLeaseOperator` does what the prepare operator does before its Spark
job (checks, lease, fence) and returns the job's parameters
(:class:`~..spark.external.JobParameters`, no secret) as its XCom; the job calls
:func:`~..spark.external.prepare_in_job` with them; :class:`KafkaPrepareRecordOperator`
reads the manifest into the ledger and returns what the prepare operator returns, so
the decide, commit and abort tasks follow unchanged. Loss repair copies a lost
participant from the log (no Spark); from the source it is impossible here (only the
prepare operator runs the job again), so once the log no longer holds the records the
commit fails naming the lost partitions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from .. import defaults, naming
from ..coordination.finish import Coordinator
from ..errors import CommittableError, ConfigurationError, Kafka2pcError, LedgerError
from ..hooks.kafka2pc import Kafka2pcHook
from ..hooks.ledger import LedgerHook
from ..ledger import BatchState
from ..spark.export_spec import OPTIONS, ExportSpec
from ..spark.external import JobParameters, raise_permanent_errors_as
from ..spark.job import check_num_partitions, committables_for, local_path, summary
from ..transaction.manifest import Manifest
from ..utils import config
from ..utils.task_errors import failing, failing_permanent_errors
from ..version_compat import AirflowSkipException

# The job task (``@task.pyspark``) runs prepare_in_job in this process, which imported this
# module with the job's DAG: its refusals fail that task without a retry, as the prepare
# operator's do.
raise_permanent_errors_as(failing)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


class KafkaPrepareLeaseOperator(BaseOperator):
    """Lease and fence the run's transactional ids; return the Spark job's parameters.

    :param export_id: identity of the export. (templated)
    :param run_key: the run's key, e.g. its data interval. (templated)
    :param topic: an existing Kafka topic, every row's; or None with ``topic_column``.
        (templated)
    :param num_partitions: Spark partitions = participants = leased transactional ids.
    :param id_prefix: transactional ids are ``<id_prefix>-<slot>``; owned by this export.
    :param manifest_dir: a URI the Spark job writes and this Airflow's workers read
        (``s3://``, ``gs://``, ``abfs://``, ``dbfs:/`` mounted locally, a shared path).
    :param key_column: the record key (also what the rows are partitioned by).
    :param value_column: string/binary column sent as the value; default the row as JSON.
    :param header_columns: string/binary columns sent as headers.
    :param align_with_kafka: see :class:`~.prepare.SparkKafkaPrepareOperator`.
    :param transaction_timeout_ms: None: ``[kafka2pc] transaction_timeout_ms``.
    :param export_options: every other option of the export, as
        :class:`~.prepare.SparkKafkaPrepareOperator` takes it (``topic_column`` and
        ``topics``, ``value_format``, ``key_format``, ``tombstone_when``,
        ``timestamp_column``, ``partitioning``, ``writer``, ...): the job reads them from
        the parameters' :class:`~..spark.export_spec.ExportSpec`.
    :param kafka_conn_id: the official provider's ``kafka`` connection.
    :param ledger_conn_id: the ledger's connection; None for SQLite under ``AIRFLOW_HOME``.
    """

    template_fields: Sequence[str] = (
        "export_id",
        "run_key",
        "topic",
        "id_prefix",
        "manifest_dir",
        "export_options",
    )
    ui_color = "#f4a460"

    def __init__(
        self,
        *,
        export_id: str,
        run_key: str,
        topic: str | None = None,
        num_partitions: int,
        id_prefix: str,
        manifest_dir: str,
        key_column: str | None = None,
        value_column: str | None = None,
        header_columns: Sequence[str] = (),
        align_with_kafka: bool = True,
        transaction_timeout_ms: int | None = None,
        kafka_conn_id: str = defaults.KAFKA_CONN_ID,
        ledger_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        check_num_partitions(num_partitions)
        if "{{" not in id_prefix:
            naming.check_slots(id_prefix, num_partitions)
        # The job brings its DataFrame: no source; the other options by name (ExportSpec's).
        export_options = {k: kwargs.pop(k) for k in OPTIONS if k in kwargs and k != "source"}
        super().__init__(**kwargs)
        self.export_options = export_options
        self.export_id = export_id
        self.run_key = run_key
        self.topic = topic
        self.num_partitions = num_partitions
        self.id_prefix = id_prefix
        self.manifest_dir = manifest_dir
        self.key_column = key_column
        self.value_column = value_column
        self.header_columns = list(header_columns)
        self.align_with_kafka = align_with_kafka
        self.transaction_timeout_ms = transaction_timeout_ms
        self.kafka_conn_id = kafka_conn_id
        self.ledger_conn_id = ledger_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        timeout_ms = self.transaction_timeout_ms or config.transaction_timeout_ms()
        kafka = Kafka2pcHook(self.kafka_conn_id)
        with failing_permanent_errors():
            if not self.manifest_dir:
                raise ConfigurationError("manifest_dir must name where the Spark job writes")
            naming.check_slots(self.id_prefix, self.num_partitions)
            export = self.export_spec(timeout_ms)
            route = export.route
            for topic in route.topics:
                kafka.check_topic(topic)
            with LedgerHook(self.ledger_conn_id).get_conn() as ledger:
                batch = ledger.begin(
                    self.export_id,
                    self.run_key,
                    topic=route.topic,
                    topics=route.topics if route.several else None,
                    id_prefix=self.id_prefix,
                    num_partitions=self.num_partitions,
                )
                if batch.state is BatchState.COMMITTED:
                    raise AirflowSkipException(f"{batch.key} is already committed")
                prepared = batch.verdict is not None
                if not prepared:
                    with kafka.controller() as controller:
                        Coordinator(ledger, controller).fence(batch.transactional_ids)
        manifest = (
            f"{self.manifest_dir.rstrip('/')}/{_safe(self.export_id)}/{_safe(self.run_key)}"
            f"/attempt-{batch.attempt}.json"
        )
        local = local_path(manifest)
        if local is not None:
            local.parent.mkdir(parents=True, exist_ok=True)
            local.unlink(missing_ok=True)  # an earlier try's must not be read for this one
        self.log.info(
            "%s attempt %d: leased %s; the Spark job writes its manifest to %s",
            batch.key,
            batch.attempt,
            list(batch.transactional_ids),
            manifest,
        )
        return JobParameters(
            export=export,
            transactional_ids=tuple(batch.transactional_ids),
            job_label=batch.key.job_label(batch.attempt),
            manifest=manifest,
            prepared=prepared,
        ).to_dict()

    def export_spec(self, timeout_ms: int) -> ExportSpec:
        """The export's options (rendered), validated once: what the job prepares."""
        return ExportSpec(
            topic=self.topic,
            key_column=self.key_column,
            value_column=self.value_column,
            header_columns=tuple(self.header_columns),
            align_with_kafka=self.align_with_kafka,
            transaction_timeout_ms=timeout_ms,
            **self.export_options,
        )


class KafkaPrepareRecordOperator(BaseOperator):
    """Read the Spark job's manifest into the ledger; return the prepare's summary.

    :param export_id: identity of the export. (templated)
    :param run_key: the run's key. (templated)
    :param lease_task_id: the :class:`KafkaPrepareLeaseOperator` of this run.
    :param kafka_conn_id: the official provider's ``kafka`` connection.
    :param ledger_conn_id: the ledger's connection; None for SQLite under ``AIRFLOW_HOME``.
    """

    template_fields: Sequence[str] = ("export_id", "run_key")
    ui_color = "#f4a460"

    def __init__(
        self,
        *,
        export_id: str,
        run_key: str,
        lease_task_id: str,
        kafka_conn_id: str = defaults.KAFKA_CONN_ID,
        ledger_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.export_id = export_id
        self.run_key = run_key
        self.lease_task_id = lease_task_id
        self.kafka_conn_id = kafka_conn_id
        self.ledger_conn_id = ledger_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        params = JobParameters.from_dict(context["ti"].xcom_pull(task_ids=self.lease_task_id))
        with LedgerHook(self.ledger_conn_id).get_conn() as ledger:
            batch = ledger.get(self.export_id, self.run_key)
            if params.prepared or batch.verdict is not None:
                return summary(batch, ledger.participants(self.export_id, self.run_key))
            manifest = self._read(params.manifest)
            if manifest.job_label != params.job_label:
                raise Kafka2pcError(
                    f"the manifest at {params.manifest} is job {manifest.job_label!r}'s, not "
                    f"this run's {params.job_label!r}"
                )
            committables = committables_for(manifest, batch, params.transaction_timeout_ms)
            try:
                batch = ledger.record_prepared(
                    self.export_id,
                    self.run_key,
                    committables,
                    source_rows=manifest.source_rows,
                    partitioning=manifest.partitioning,
                )
            except (LedgerError, CommittableError):
                # As the prepare operator: these transactions belong to no batch any more.
                with Kafka2pcHook(self.kafka_conn_id).controller() as controller:
                    controller.abort_all(committables)
                raise
            result = summary(batch, ledger.participants(self.export_id, self.run_key))
        self.log.info(
            "%s: recorded %d rows in %d participants from %s",
            batch.key,
            manifest.source_rows,
            len(committables),
            params.manifest,
        )
        return result

    def _read(self, uri: str) -> Manifest:
        try:
            local = local_path(uri)
            if local is not None:
                text = local.read_text()
            else:
                from airflow.sdk import ObjectStoragePath

                text = ObjectStoragePath(uri).read_text()
            return Manifest.from_json(text)
        except (OSError, CommittableError) as exc:
            raise Kafka2pcError(
                f"the Spark job's manifest {uri} is unusable ({exc}); did the job call "
                "prepare_in_job and succeed?"
            ) from exc
