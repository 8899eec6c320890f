"""The decision: one durable verdict per batch, then the commit or the abort branch.

The verdict goes to the ledger first, where the first writer wins: a retried or cleared
decision, or a recovery racing it, gets the RECORDED verdict back and acts on that. Only
then is it copied to the task state store (Airflow's metadata DB, Airflow 3.3+; older
releases have none and get XCom only) and XCom, for people and downstream tasks to read;
they are never consulted to decide.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context, TriggerRule

from .. import defaults
from ..coordination.decision import Assessment, assess
from ..hooks.export import ExportHook
from ..ledger import Batch, BatchKey, BatchState, Ledger, Verdict
from ..utils import config
from ..utils.task_errors import failing_permanent_errors
from ..version_compat import AirflowSkipException, BaseBranchOperator, log_degraded_once

#: task_state_store and XCom key of the recorded verdict.
VERDICT_KEY = "verdict"


class KafkaTransactionDecisionOperator(BaseBranchOperator):
    """Decide COMMIT or ABORT for an export run's batch and branch accordingly.

    COMMIT only when the batch is PREPARED, every leased id came back as a participant,
    the records add up to the source's rows, every transaction is still open (by
    DescribeTransactions, else the log's markers), and the commit margin fits before the
    earliest transaction timeout. Runs even when the prepare failed (trigger rule
    ``all_done``), so a failed prepare still gets its ABORT.

    :param export_id: the export. (templated)
    :param run_key: the run's key. (templated)
    :param commit_task_id: task to follow on COMMIT.
    :param abort_task_id: task to follow on ABORT (also when nothing was prepared).
    :param kafka_conn_id: the official provider's ``kafka`` connection.
    :param ledger_conn_id: the ledger's connection; None for SQLite under ``AIRFLOW_HOME``.
    :param commit_margin_s: time the commit needs before the earliest transaction timeout;
        None: ``[kafka2pc] commit_margin_s`` (60 s unless configured).
    """

    template_fields: Sequence[str] = ("export_id", "run_key")
    ui_color = "#ffd700"

    def __init__(
        self,
        *,
        export_id: str,
        run_key: str,
        commit_task_id: str,
        abort_task_id: str,
        kafka_conn_id: str = defaults.KAFKA_CONN_ID,
        ledger_conn_id: str | None = None,
        commit_margin_s: float | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("trigger_rule", TriggerRule.ALL_DONE)
        super().__init__(**kwargs)
        self.export_id = export_id
        self.run_key = run_key
        self.commit_task_id = commit_task_id
        self.abort_task_id = abort_task_id
        self.kafka_conn_id = kafka_conn_id
        self.ledger_conn_id = ledger_conn_id
        self.commit_margin_s = (
            config.commit_margin_s() if commit_margin_s is None else commit_margin_s
        )

    def choose_branch(self, context: Context) -> str:
        with failing_permanent_errors():
            return self._choose(context)

    def _choose(self, context: Context) -> str:
        label = BatchKey(self.export_id, self.run_key)
        hook = ExportHook(self.kafka_conn_id, self.ledger_conn_id)
        with hook.ledger() as ledger:
            batch = ledger.get(self.export_id, self.run_key)
            if batch is None:
                self.log.error("%s: nothing was prepared (no batch in the ledger): abort", label)
                return self.abort_task_id
            if batch.state is BatchState.COMMITTED:
                raise AirflowSkipException(f"{label} is already committed: nothing to decide")
            if batch.verdict is None:
                assessment = self.assess(hook, ledger, batch)
                self.log.info(
                    "%s: assessed %s: %s", label, assessment.verdict.value, assessment.reason
                )
                batch = ledger.decide(
                    self.export_id, self.run_key, assessment.verdict, assessment.reason
                )
            else:
                self.log.info("%s: verdict already recorded, not judging again", label)
        verdict = batch.verdict or Verdict.ABORT
        self.log.info(
            "%s attempt %d: verdict %s (%s), recorded %s",
            label,
            batch.attempt,
            verdict.value,
            batch.verdict_reason,
            batch.decided_at,
        )
        self.publish_verdict(context, batch)
        return self.commit_task_id if verdict is Verdict.COMMIT else self.abort_task_id

    def assess(self, hook: ExportHook, ledger: Ledger, batch: Batch) -> Assessment:
        """Judge the batch from the ledger and the broker; records nothing."""
        with hook.kafka.protocol() as protocol:
            return assess(
                batch,
                ledger.participants(self.export_id, self.run_key),
                protocol,
                now_ms=int(time.time() * 1000),
                commit_margin_ms=int(self.commit_margin_s * 1000),
            )

    def publish_verdict(self, context: Context, batch: Batch) -> None:
        """Copy the recorded verdict to the task state store (Airflow 3.3+), then XCom."""
        record = {
            "export_id": batch.export_id,
            "run_key": batch.run_key,
            "attempt": batch.attempt,
            "verdict": (batch.verdict or Verdict.ABORT).value,
            "reason": batch.verdict_reason,
            "decided_at": batch.decided_at.isoformat() if batch.decided_at else None,
        }
        store = context.get("task_state_store")
        if store is not None:
            store.set(VERDICT_KEY, record)
        else:
            log_degraded_once(
                self.log,
                "task state store",
                "the recorded verdict is published to XCom only",
            )
        context["ti"].xcom_push(key=VERDICT_KEY, value=record)
