"""Resolve an export's dangling transactions: in-doubt batches and open transactions.

Each poke is one recovery round (:meth:`~..hooks.export.ExportHook.recover`): the ledger's
in-doubt batches are finished by their verdicts (decided ABORT first when stale), and the
transactions open on the broker under the export's transactional-id prefix are committed,
aborted or fenced by the verdict of the batch that holds their id (fenced when none does,
once the grace period has passed). Live runs are never touched. The report goes to XCom.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue

from .. import defaults
from ..coordination.recovery import RecoveryReport
from ..hooks.export import ExportHook
from ..triggers.dangling import DanglingTransactionTrigger, RecoveryStatus
from ..utils import config
from ..utils.task_errors import Handling, failing_permanent_errors, handling
from ..version_compat import AirflowException, AirflowFailException


class KafkaDanglingTransactionSensor(BaseSensorOperator):
    """Succeeds when a recovery round leaves nothing of the export's unresolved.

    :param export_id: the export whose batches and transactions are resolved. (templated)
    :param run_key: this run's key; its own batch is left to its prepare/decide/commit;
        None outside an export (the maintenance DAG). (templated)
    :param id_prefix: the export's transactional-id prefix; None: the prefixes of its
        in-doubt batches and the one ``kafka_exactly_once_export`` derives by default.
        (templated)
    :param kafka_conn_id: the official provider's ``kafka`` connection.
    :param ledger_conn_id: the ledger's connection; None for SQLite under ``AIRFLOW_HOME``.
    :param grace_period: how long a batch may stay unchanged, or a transaction without a
        ledger record stay open, before it counts as abandoned; longer than your slowest
        prepare.
    :param wait_for_live: also wait until live runs' batches and transactions are gone
        (the maintenance DAG); an export's own recover task leaves concurrent runs of
        other intervals alone and does not wait for them.
    :param deferrable: wait in the triggerer instead of a worker slot.
    """

    template_fields: Sequence[str] = ("export_id", "run_key", "id_prefix")
    ui_color = "#add8e6"

    def __init__(
        self,
        *,
        export_id: str,
        run_key: str | None = None,
        id_prefix: str | None = None,
        kafka_conn_id: str = defaults.KAFKA_CONN_ID,
        ledger_conn_id: str | None = None,
        grace_period: timedelta | None = None,
        wait_for_live: bool = False,
        deferrable: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.export_id = export_id
        self.run_key = run_key
        self.id_prefix = id_prefix
        self.kafka_conn_id = kafka_conn_id
        self.ledger_conn_id = ledger_conn_id
        self.grace_period = config.grace_period() if grace_period is None else grace_period
        self.wait_for_live = wait_for_live
        self.deferrable = deferrable

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)
        if first:
            return first.xcom_value if isinstance(first, PokeReturnValue) else None
        self.defer(
            trigger=DanglingTransactionTrigger(
                export_id=self.export_id,
                run_key=self.run_key,
                kafka_conn_id=self.kafka_conn_id,
                ledger_conn_id=self.ledger_conn_id,
                grace_period_s=self.grace_period.total_seconds(),
                poll_interval_s=float(self.poke_interval),
                id_prefix=self.id_prefix,
                wait_for_live=self.wait_for_live,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) if self.timeout else None,
        )

    def poke(self, context: Context) -> PokeReturnValue | bool:
        try:
            with failing_permanent_errors():
                report = ExportHook(self.kafka_conn_id, self.ledger_conn_id).recover(
                    self.export_id,
                    run_key=self.run_key,
                    id_prefix=self.id_prefix,
                    grace_period=self.grace_period,
                )
        except Exception as exc:  # classified: only what handling() calls retriable pokes again
            if handling(exc) is not Handling.RETRY:
                raise
            self.log.warning("%s: %s; poking again", self.export_id, exc)
            return False
        self._log_report(report)
        if report.failed:
            raise AirflowFailException(_failure(self.export_id, report))
        return PokeReturnValue(report.settled(self.wait_for_live), report.to_dict())

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        status = RecoveryStatus(event.get("status", RecoveryStatus.ERROR))
        if "report" in event:
            self._log_report(RecoveryReport.from_dict(event["report"]))
        if status is RecoveryStatus.FAILED:
            raise AirflowFailException(f"recovery of {self.export_id}: {event['message']}")
        if status is not RecoveryStatus.SUCCESS:
            raise AirflowException(f"recovery of {self.export_id} failed: {event.get('message')}")
        return event["report"]

    def _log_report(self, report: RecoveryReport) -> None:
        for prefix, method in report.discovery.items():
            self.log.info("prefix %s: open transactions found by %s", prefix, method)
        for txn in report.found:
            self.log.info(
                "found %s %s (pid %s, epoch %s, open %s s) of %s: %s, %s",
                txn["transactional_id"],
                txn["state"],
                txn["producer_id"],
                txn["producer_epoch"],
                txn["age_s"],
                txn["holder"] or "no batch",
                txn["action"],
                txn["why"],
            )
        for title, items in (
            ("finished batch", report.batches),
            ("committed", report.committed),
            ("aborted", report.aborted),
            ("fenced", report.fenced),
            ("ended meanwhile", report.ended),
            ("left alone (own run)", report.own),
        ):
            for key, what in items.items():
                self.log.info("%s %s: %s", title, key, what)
        for key, why in report.left.items():
            kind = "live, left alone" if key in report.live else "still unresolved"
            self.log.warning("%s %s: %s", kind, key, why)
        for key, why in report.failed.items():
            self.log.error("needs a person: %s: %s", key, why)
        for note in report.notes:
            self.log.info("%s", note)
        self.log.info("recovery of %s: %s", self.export_id, report.summary())


def _failure(export_id: str, report: RecoveryReport) -> str:
    items = "; ".join(f"{key}: {why}" for key, why in report.failed.items())
    return f"recovery of {export_id} needs a person (retrying will not help): {items}"
