"""Second phase: finish every participant of a batch by its recorded verdict.

Both operators read the verdict from the ledger (never from XCom), finish what is not
final yet with ONE ``commit_all``/``abort_all``, and record each outcome, so a retry or a
clear picks up where the last try stopped. The abort task then FAILS, so that an
aborted export shows as a failed run.

The commit task also repairs loss: a participant the broker aborted before the commit
(timed out, fenced) is copied from the log into a new transaction while its records are
still there (no Spark, no source), else re-prepared from the source by the Spark job the
prepare recorded in the ledger (:class:`~..hooks.spark_job.SparkJobHook`, the prepare's own
hook), run again for just those partitions; then committed. See
:mod:`..coordination.finish`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, Context

from .. import defaults
from ..coordination.finish import Coordinator, Finished, Reprepare
from ..errors import (
    ConfigurationError,
    NothingPreparedError,
    ParticipantLostError,
    RepairImpossibleError,
)
from ..hooks.export import ExportHook
from ..hooks.spark_job import SparkJobHook
from ..ledger import Batch, BatchKey, Participant
from ..spark.job_spec import SparkJob
from ..transaction.committable import Committable
from ..utils.assets import emit_committed
from ..utils.task_errors import failing_permanent_errors
from ..version_compat import AirflowFailException, Stats

if TYPE_CHECKING:
    from .prepare import SparkKafkaPrepareOperator


class _FinishOperator(BaseOperator):
    template_fields: Sequence[str] = ("export_id", "run_key")

    def __init__(
        self,
        *,
        export_id: str,
        run_key: str,
        kafka_conn_id: str = defaults.KAFKA_CONN_ID,
        ledger_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.export_id = export_id
        self.run_key = run_key
        self.kafka_conn_id = kafka_conn_id
        self.ledger_conn_id = ledger_conn_id

    @property
    def label(self) -> BatchKey:
        return BatchKey(self.export_id, self.run_key)

    def _tags(self, batch: Batch) -> dict[str, str]:
        return {"export_id": self.export_id, "topic": ",".join(batch.topics)}

    @staticmethod
    def _result(finished: Finished) -> dict[str, Any]:
        batch = finished.batch
        return {
            **batch.summary(),
            "records": finished.records,
            "records_now": finished.records_now,
            "outcomes": {r.transactional_id: r.outcome.value for r in finished.resolutions},
            "fenced": list(finished.fenced),
            "late": list(finished.late),
            "repaired": [
                {
                    "partition": lp.index,
                    "transactional_id": lp.transactional_id,
                    "rows": lp.records,
                    "from": finished.repaired_from.get(lp.index, "source"),
                }
                for lp in finished.repaired
            ],
        }


class KafkaTransactionCommitOperator(_FinishOperator):
    """Commit every participant of a batch whose recorded verdict is COMMIT.

    On success the batch is COMMITTED in the ledger and each asset in ``outlets`` gets an
    event whose extra carries ``{"export_id", "run_key", "committed"}``; through the
    export's alias (``kafka2pc:<kafka_conn_id>:<topic>``, declared without reading the
    connection) the event is for the topic's asset ``create_asset(server=..., topic=...)``,
    built from the connection now. Downstream DAGs scheduled on it run on committed data
    only.

    A participant found LOST (aborted on the broker before the commit, its transaction
    timed out or fenced) is recorded LOST, written again and committed, so the batch still
    ends COMMITTED exactly once: copied from the log while its aborted records are all
    still there (``repair_from_log``; no Spark, no source, so also on the external-operator
    path), else re-prepared from the source for just its partition, by the Spark job the
    prepare task recorded in the ledger (a batch recorded before the ledger kept its job:
    by the DAG's prepare task, rendered for the run). When
    neither gives the recorded records the task fails (no retry) naming the lost
    partitions, their rows and why; the batch stays COMMIT_DECIDED with them LOST, for an
    operator.

    :param export_id: the export. (templated)
    :param run_key: the run's key. (templated)
    :param kafka_conn_id: the official provider's ``kafka`` connection.
    :param ledger_conn_id: the ledger's connection; None for SQLite under ``AIRFLOW_HOME``.
    :param prepare_task_id: for a batch whose Spark job the ledger does not hold (recorded
        before 0.2.0's migration 0006): the :class:`SparkKafkaPrepareOperator` that prepared
        it, used again to re-prepare lost partitions; default: the one upstream of this task.
    :param repair_lost: repair lost participants (False: fail naming them instead).
    :param repair_from_log: try the copy from the log first (False: from the source only).
    :param max_repairs: repair rounds one try may run (a repaired participant can be lost
        again when the commit is delayed past its timeout once more).
    """

    ui_color = "#90ee90"

    def __init__(
        self,
        *,
        prepare_task_id: str | None = None,
        repair_lost: bool = True,
        repair_from_log: bool = True,
        max_repairs: int = defaults.MAX_REPAIRS,
        **kwargs: Any,
    ) -> None:
        if isinstance(max_repairs, bool) or not isinstance(max_repairs, int) or max_repairs < 0:
            raise ConfigurationError(f"max_repairs must be an integer >= 0, got {max_repairs!r}")
        super().__init__(**kwargs)
        self.prepare_task_id = prepare_task_id
        self.repair_lost = repair_lost
        self.repair_from_log = repair_from_log
        self.max_repairs = max_repairs

    def execute(self, context: Context) -> dict[str, Any]:
        self._source_for_lineage(context)
        with failing_permanent_errors():
            try:
                hook = ExportHook(self.kafka_conn_id, self.ledger_conn_id)
                from_log = self.repair_lost and self.repair_from_log
                with hook.coordinator(repair_from_log=from_log) as coordinator:
                    finished = self.commit(context, coordinator)
                    per_topic = records_per_topic(
                        finished.batch,
                        coordinator.ledger.participants(self.export_id, self.run_key),
                    )
            except RepairImpossibleError as exc:
                self.log.error("%s: LOST and not repairable: %s", self.label, _lost(exc))
                raise
        batch = finished.batch
        if finished.repaired:
            self.log.warning(
                "%s: repaired loss: %s were aborted on the broker after the COMMIT verdict; "
                "written again and committed",
                self.label,
                ", ".join(
                    f"{lp} from the {finished.repaired_from.get(lp.index, 'source')}"
                    for lp in finished.repaired
                ),
            )
            Stats.incr(
                "kafka2pc.commit.repaired_partitions",
                count=len(finished.repaired),
                tags=self._tags(batch),
            )
        self.log.info(
            "%s: COMMITTED %d records in %d participants (%d committed by this try, %.2f s)",
            self.label,
            finished.records,
            len(batch.transactional_ids),
            finished.records_now,
            finished.seconds,
        )
        tags = self._tags(batch)
        Stats.incr("kafka2pc.commit.records", count=finished.records_now, tags=tags)
        Stats.timing("kafka2pc.commit.duration", timedelta(seconds=finished.seconds), tags=tags)
        if batch.decided_at and batch.finished_at:
            Stats.timing("kafka2pc.commit.latency", batch.finished_at - batch.decided_at, tags=tags)
        extra = {
            "export_id": self.export_id,
            "run_key": self.run_key,
            "committed": finished.records,
        }
        server = hook.kafka.bootstrap_server()
        emit_committed(
            context["outlet_events"],
            self.outlets,
            kafka_conn_id=self.kafka_conn_id,
            topics=per_topic,
            server=server,
            extra=extra,
        )
        self._committed = (server, batch, per_topic)
        return self._result(finished)

    def get_openlineage_facets_on_start(self) -> Any:
        """OpenLineage, before committing: the source only. (Returning no dataset would let
        OpenLineage fall back to the task's outlet and name the topic before it has data.)"""
        from ..utils.openlineage import lineage, source_datasets

        source, conf = self._source_for_lineage()
        return lineage(source, source_datasets(source, conf, None))

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the export's source in, each topic out with the records committed
        to it."""
        from ..utils.openlineage import lineage, source_datasets, topic_dataset

        source, conf = self._source_for_lineage()
        committed = getattr(self, "_committed", None)
        if committed is None:  # nothing committed by this try: the source only
            return lineage(source, source_datasets(source, conf, None))
        server, batch, per_topic = committed
        inputs = source_datasets(source, conf, batch.source_rows)
        outputs = [topic_dataset(server, topic, records) for topic, records in per_topic.items()]
        return lineage(source, inputs, outputs)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """A failed commit reports the source only: no output until the topic has the data."""
        return self.get_openlineage_facets_on_start()

    def _source_for_lineage(
        self, context: Context | None = None
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """The source and Spark settings of the job that prepared this run (the ledger's
        record; for an older batch, the prepare task rendered for the run): what the
        committed records were read from. Empty when unknown.

        Worked out once, in the first call that has the run's context: OpenLineage's start
        (the task's context is current then) or :meth:`execute`; the listener may call the
        later methods in a forked process, without it.
        """
        if getattr(self, "_lineage_source", None) is None:
            try:
                job = self.recorded_job() or self._job_from_dag(context)
                self._lineage_source = (dict(job.source), job.conf_dict())
            except Exception as exc:
                # Lineage is never worth failing the commit for, and a batch prepared before
                # the ledger kept its job may have no prepare task to read it from either.
                self.log.debug("no source for OpenLineage: %s", exc)
                return {}, {}
        return self._lineage_source

    def recorded_job(self, batch: Batch | None = None) -> SparkJob | None:
        """The Spark job the ledger recorded for this run's batch; None when it holds none
        (the external-operator path, or a batch recorded before the ledger kept it)."""
        if batch is None:
            with ExportHook(self.kafka_conn_id, self.ledger_conn_id).ledger() as ledger:
                batch = ledger.get(self.export_id, self.run_key)
        if batch is None or batch.spark_job is None:
            return None
        return SparkJob.from_record(batch.spark_job)

    def _job_from_dag(self, context: Context | None) -> SparkJob:
        """The fallback for a batch without a recorded job: the DAG's prepare task,
        rendered for this run, describes its job."""
        return self._rendered_prepare(context).spark_job()

    def _rendered_prepare(self, context: Context | None) -> SparkKafkaPrepareOperator:
        from airflow.sdk import get_current_context

        prepare = self.prepare_task().prepare_for_execution()
        prepare.render_template_fields(context or get_current_context())
        return prepare

    def commit(self, context: Context, coordinator: Coordinator) -> Finished:
        """The commit itself, loss repair included; a subclass may wrap it (it is idempotent)."""
        reprepare = self.reprepare_with(context) if self.repair_lost else None
        return coordinator.commit(
            self.export_id, self.run_key, reprepare, max_repairs=self.max_repairs
        )

    def reprepare_with(self, context: Context) -> Reprepare:
        """Loss repair's re-prepare: the Spark job the prepare recorded in the ledger runs
        again through :class:`SparkJobHook` for the lost partitions only. A batch without
        a recorded job falls back to the DAG's prepare task, rendered for this run. Without
        either (the Spark job runs elsewhere: operators/external.py) there is no way back
        to the source: :class:`RepairImpossibleError`."""

        def reprepare(
            batch: Batch, participants: Sequence[Participant], lost: Sequence[Participant]
        ) -> Mapping[int, Committable]:
            try:
                job = self.recorded_job(batch)
            except ConfigurationError as exc:
                raise RepairImpossibleError(f"the recorded Spark job is unusable: {exc}") from exc
            if job is not None:
                return SparkJobHook(job).reprepare(batch, participants, lost)
            # A batch recorded before the ledger kept its job: the DAG's prepare task.
            try:
                prepare = self._rendered_prepare(context)
            except ConfigurationError as exc:
                raise RepairImpossibleError(
                    f"no re-prepare from the source: {exc} (the Spark job runs outside "
                    "this DAG's operators, e.g. the external-operator path)"
                ) from exc
            self.log.info(
                "%s: the ledger holds no Spark job for this batch (recorded before it kept "
                "one): re-preparing with the DAG's prepare task %r",
                self.label,
                prepare.task_id,
            )
            return prepare.reprepare(context, batch, participants, lost)

        return reprepare

    def prepare_task(self) -> SparkKafkaPrepareOperator:
        """The prepare task of this export, for a batch whose job the ledger does not hold:
        ``prepare_task_id``, else the one upstream."""
        from .prepare import SparkKafkaPrepareOperator

        if self.prepare_task_id is not None:
            task = self.dag.get_task(self.prepare_task_id)
            if not isinstance(task, SparkKafkaPrepareOperator):
                raise ConfigurationError(
                    f"prepare_task_id {self.prepare_task_id!r} is a {type(task).__name__}, "
                    "not a SparkKafkaPrepareOperator: lost partitions cannot be re-prepared"
                )
            return task
        found: list[SparkKafkaPrepareOperator] = []
        seen: set[str] = set()
        todo = list(self.upstream_list)
        while todo:
            task = todo.pop()
            if task.task_id in seen:
                continue
            seen.add(task.task_id)
            if isinstance(task, SparkKafkaPrepareOperator):
                found.append(task)
            else:
                todo.extend(task.upstream_list)
        if len(found) > 1:  # several exports chained: this one's (export ids unrendered)
            found = [t for t in found if t.export_id == self.export_id]
        if len(found) != 1:
            raise ConfigurationError(
                f"{len(found)} SparkKafkaPrepareOperator tasks of export {self.export_id!r} "
                f"upstream of {self.task_id!r}: set prepare_task_id to re-prepare lost "
                "partitions"
            )
        return found[0]


def _lost(exc: ParticipantLostError) -> str:
    return ", ".join(str(lp) for lp in exc.lost) or str(exc)


class KafkaTransactionAbortOperator(_FinishOperator):
    """Abort every participant of a batch, fence the leased ids whose committables never
    arrived, record the batch ABORTED, then fail: an aborted export is a failed run.

    Records ABORT when no verdict exists yet; refuses a batch whose verdict is COMMIT.

    :param export_id: the export. (templated)
    :param run_key: the run's key. (templated)
    :param kafka_conn_id: the official provider's ``kafka`` connection.
    :param ledger_conn_id: the ledger's connection; None for SQLite under ``AIRFLOW_HOME``.
    """

    ui_color = "#f08080"

    def execute(self, context: Context) -> None:
        hook = ExportHook(self.kafka_conn_id, self.ledger_conn_id)
        with failing_permanent_errors():
            with hook.ledger() as ledger:
                nothing = ledger.get(self.export_id, self.run_key) is None
            if nothing:  # the broker is not needed, nor perhaps reachable
                raise NothingPreparedError(
                    f"export {self.label} failed before anything was prepared: no batch in "
                    "the ledger, no transactional id leased, nothing written"
                )
            with hook.coordinator() as coordinator:
                finished = coordinator.abort(
                    self.export_id, self.run_key, "aborted by the abort task"
                )
        batch = finished.batch
        self.log.info(
            "%s: ABORTED attempt %d, %d records discarded (%d by this try), %d ids fenced, "
            "%d found open again after that and fenced",
            self.label,
            batch.attempt,
            finished.records,
            finished.records_now,
            len(finished.fenced),
            len(finished.late),
        )
        Stats.incr("kafka2pc.abort.batches", tags=self._tags(batch))
        context["ti"].xcom_push(key="abort", value=self._result(finished))
        raise AirflowFailException(
            f"export {self.label} aborted: {batch.verdict_reason}; nothing was committed"
        )


def records_per_topic(batch: Batch, participants: Sequence[Participant]) -> dict[str, int]:
    """Records of the batch per topic, every declared topic listed (0 when no row went to
    it), from the participants' committables: one output dataset and asset event each."""
    counts = dict.fromkeys(batch.topics, 0)
    for participant in participants:
        for part in participant.committable.partitions:
            counts[part.topic] = counts.get(part.topic, 0) + part.record_count
    return counts
