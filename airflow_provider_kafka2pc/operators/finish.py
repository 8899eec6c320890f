"""Second phase: finish every participant of a batch by its recorded verdict.

Both operators read the verdict from the ledger (never from XCom), finish what is not
final yet with ONE ``commit_all``/``abort_all``, and record each outcome, so a retry or a
clear picks up where the last try stopped. The abort task then FAILS, so that an
aborted export shows as a failed run.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import Asset, BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException
from airflow.sdk.observability.stats import Stats

from ..hooks.coordinator import (
    Coordinator,
    Finished,
    NothingPreparedError,
    ParticipantLostError,
    VerdictMismatchError,
)
from ..hooks.export import ExportHook
from ..transaction.errors import ConfigurationError


class _FinishOperator(BaseOperator):
    template_fields: Sequence[str] = ("export_id", "run_key")

    def __init__(
        self,
        *,
        export_id: str,
        run_key: str,
        kafka_conn_id: str = "kafka_default",
        ledger_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.export_id = export_id
        self.run_key = run_key
        self.kafka_conn_id = kafka_conn_id
        self.ledger_conn_id = ledger_conn_id

    @property
    def label(self) -> str:
        return f"{self.export_id}/{self.run_key}"

    def _tags(self, topic: str) -> dict[str, str]:
        return {"export_id": self.export_id, "topic": topic}

    @staticmethod
    def _result(finished: Finished) -> dict[str, Any]:
        batch = finished.batch
        return {
            "export_id": batch.export_id,
            "run_key": batch.run_key,
            "attempt": batch.attempt,
            "state": batch.state.value,
            "topic": batch.topic,
            "records": finished.records,
            "records_now": finished.records_now,
            "outcomes": {r.transactional_id: r.outcome.value for r in finished.resolutions},
            "fenced": list(finished.fenced),
        }


class KafkaTransactionCommitOperator(_FinishOperator):
    """Commit every participant of a batch whose recorded verdict is COMMIT.

    On success the batch is COMMITTED in the ledger and, when ``outlets`` hold the topic's
    asset, an asset event carries ``{"run_key", "committed"}`` in its extra; downstream
    DAGs scheduled on it run on committed data only. A participant found LOST (aborted on
    the broker before the commit) fails the task naming it: retrying cannot bring its
    records back.

    :param export_id: the export. (templated)
    :param run_key: the run's key. (templated)
    :param kafka_conn_id: the official provider's ``kafka`` connection.
    :param ledger_conn_id: the ledger's connection; None for SQLite under ``AIRFLOW_HOME``.
    """

    ui_color = "#90ee90"

    def execute(self, context: Context) -> dict[str, Any]:
        try:
            with ExportHook(self.kafka_conn_id, self.ledger_conn_id).coordinator() as coordinator:
                finished = self.commit(context, coordinator)
        except (
            ParticipantLostError,
            VerdictMismatchError,
            NothingPreparedError,
            ConfigurationError,
        ) as exc:
            raise AirflowFailException(str(exc)) from exc
        batch = finished.batch
        self.log.info(
            "%s: COMMITTED %d records in %d participants (%d committed by this try, %.2f s)",
            self.label,
            finished.records,
            len(batch.transactional_ids),
            finished.records_now,
            finished.seconds,
        )
        tags = self._tags(batch.topic)
        Stats.incr("kafka2pc.commit.records", count=finished.records_now, tags=tags)
        Stats.timing("kafka2pc.commit.duration", timedelta(seconds=finished.seconds), tags=tags)
        if batch.decided_at and batch.finished_at:
            Stats.timing("kafka2pc.commit.latency", batch.finished_at - batch.decided_at, tags=tags)
        extra = {
            "export_id": self.export_id,
            "run_key": self.run_key,
            "committed": finished.records,
        }
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                context["outlet_events"][outlet].extra = extra
        return self._result(finished)

    def commit(self, context: Context, coordinator: Coordinator) -> Finished:
        """The commit itself; a subclass may wrap it (it is idempotent)."""
        return coordinator.commit(self.export_id, self.run_key)


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
        try:
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
        except (NothingPreparedError, VerdictMismatchError, ConfigurationError) as exc:
            raise AirflowFailException(str(exc)) from exc
        batch = finished.batch
        self.log.info(
            "%s: ABORTED attempt %d, %d records discarded (%d by this try), %d ids fenced",
            self.label,
            batch.attempt,
            finished.records,
            finished.records_now,
            len(finished.fenced),
        )
        Stats.incr("kafka2pc.abort.batches", tags=self._tags(batch.topic))
        context["ti"].xcom_push(key="abort", value=self._result(finished))
        raise AirflowFailException(
            f"export {self.label} aborted: {batch.verdict_reason}; nothing was committed"
        )
