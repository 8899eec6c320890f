"""Before a new prepare: resolve this export's dangling (in-doubt) batches.

A batch whose verdict is recorded is finished by it; one without a verdict that is stale
(unchanged for the grace period, or past its earliest transaction timeout) is decided
ABORT first. Batches of live runs of other intervals are left alone, so concurrent runs
do not abort each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from ..hooks.coordinator import ParticipantLostError
from ..hooks.export import ExportHook
from ..hooks.recovery import RecoveryReport
from ..transaction.errors import ConfigurationError
from ..triggers.dangling import DanglingTransactionTrigger


class KafkaDanglingTransactionSensor(BaseSensorOperator):
    """Succeeds when none of the export's stale in-doubt batches is left unresolved.

    :param export_id: the export whose batches are resolved. (templated)
    :param run_key: this run's key; its own batch is left to its prepare/decide/commit. (templated)
    :param kafka_conn_id: the official provider's ``kafka`` connection.
    :param ledger_conn_id: the ledger's connection; None for SQLite under ``AIRFLOW_HOME``.
    :param grace_period: how long a batch of another run key may stay unchanged before it
        counts as abandoned; longer than your slowest prepare.
    :param deferrable: wait in the triggerer instead of a worker slot.
    """

    template_fields: Sequence[str] = ("export_id", "run_key")
    ui_color = "#add8e6"

    def __init__(
        self,
        *,
        export_id: str,
        run_key: str | None = None,
        kafka_conn_id: str = "kafka_default",
        ledger_conn_id: str | None = None,
        grace_period: timedelta = timedelta(hours=1),
        deferrable: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.export_id = export_id
        self.run_key = run_key
        self.kafka_conn_id = kafka_conn_id
        self.ledger_conn_id = ledger_conn_id
        self.grace_period = grace_period
        self.deferrable = deferrable

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        if self.poke(context):
            return None
        self.defer(
            trigger=DanglingTransactionTrigger(
                export_id=self.export_id,
                run_key=self.run_key,
                kafka_conn_id=self.kafka_conn_id,
                ledger_conn_id=self.ledger_conn_id,
                grace_period_s=self.grace_period.total_seconds(),
                poll_interval_s=float(self.poke_interval),
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) if self.timeout else None,
        )

    def poke(self, context: Context) -> bool:
        try:
            hook = ExportHook(self.kafka_conn_id, self.ledger_conn_id)
            report = hook.recover(self.export_id, self.run_key, self.grace_period)
        except (ParticipantLostError, ConfigurationError) as exc:
            raise AirflowFailException(str(exc)) from exc
        self._log_report(report)
        return report.done

    def execute_complete(self, context: Context, event: dict[str, Any]) -> None:
        status = event.get("status")
        if status == "failed":
            raise AirflowFailException(event["message"])
        if status != "success":
            raise AirflowException(f"recovery of {self.export_id} failed: {event.get('message')}")
        self._log_report(RecoveryReport(event["resolved"], event["live"], event["left"]))

    def _log_report(self, report: RecoveryReport) -> None:
        for label, outcome in report.resolved.items():
            self.log.info("recovered %s: %s", label, outcome)
        for label, why in report.live.items():
            self.log.info("left %s alone: %s", label, why)
        for label, error in report.left.items():
            self.log.warning("still in doubt %s: %s", label, error)
        if not (report.resolved or report.live or report.left):
            self.log.info("%s: nothing in doubt", self.export_id)
