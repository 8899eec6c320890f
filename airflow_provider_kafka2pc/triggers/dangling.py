"""Deferred recovery: resolve an export's dangling transactions from the triggerer.

A round (:meth:`ExportHook.recover <airflow_provider_kafka2pc.hooks.export.ExportHook.recover>`)
is blocking (database, Kafka requests); the trigger runs each round in a worker thread of
its own (``asyncio.to_thread``: not asgiref's one shared "thread-sensitive" thread, where a
slow round would hold up other triggers) and sleeps between rounds without holding a
worker slot. The sensor's poke runs the same round, so both modes decide alike.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from .. import defaults
from ..coordination.recovery import RecoveryReport
from ..hooks.export import ExportHook
from ..utils.task_errors import Handling, handling


class RecoveryStatus(enum.StrEnum):
    """How a deferred recovery ended (the ``status`` of its trigger event)."""

    #: Nothing of the export is left unresolved.
    SUCCESS = "success"
    #: A person must act (a lost participant, a bad connection, a prefix of another export).
    FAILED = "failed"
    #: An error of no known kind; the sensor's own retries decide.
    ERROR = "error"


class DanglingTransactionTrigger(BaseTrigger):
    """Fires when a round leaves nothing of the export's unresolved.

    :param export_id: the export whose batches and transactions are resolved.
    :param run_key: the waiting run's own key (its batch is left to the run).
    :param kafka_conn_id: the official provider's ``kafka`` connection.
    :param ledger_conn_id: the ledger's connection; None for SQLite under ``AIRFLOW_HOME``.
    :param grace_period_s: a batch or transaction is stale after this long.
    :param poll_interval_s: seconds between rounds while something is left.
    :param id_prefix: the export's transactional-id prefix; None: derived (see
        :func:`~airflow_provider_kafka2pc.coordination.recovery.export_prefixes`).
    :param wait_for_live: also wait until live runs' transactions are gone.
    """

    def __init__(
        self,
        export_id: str,
        run_key: str | None,
        kafka_conn_id: str = defaults.KAFKA_CONN_ID,
        ledger_conn_id: str | None = None,
        grace_period_s: float = defaults.GRACE_PERIOD.total_seconds(),
        poll_interval_s: float = defaults.RECOVER_POLL_INTERVAL_S,
        id_prefix: str | None = None,
        wait_for_live: bool = False,
    ) -> None:
        super().__init__()
        self.export_id = export_id
        self.run_key = run_key
        self.kafka_conn_id = kafka_conn_id
        self.ledger_conn_id = ledger_conn_id
        self.grace_period_s = grace_period_s
        self.poll_interval_s = poll_interval_s
        self.id_prefix = id_prefix
        self.wait_for_live = wait_for_live

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "export_id": self.export_id,
                "run_key": self.run_key,
                "kafka_conn_id": self.kafka_conn_id,
                "ledger_conn_id": self.ledger_conn_id,
                "grace_period_s": self.grace_period_s,
                "poll_interval_s": self.poll_interval_s,
                "id_prefix": self.id_prefix,
                "wait_for_live": self.wait_for_live,
            },
        )

    def _round(self) -> RecoveryReport:
        return ExportHook(self.kafka_conn_id, self.ledger_conn_id).recover(
            self.export_id,
            run_key=self.run_key,
            id_prefix=self.id_prefix,
            grace_period=timedelta(seconds=self.grace_period_s),
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                report = await asyncio.to_thread(self._round)
            except Exception as exc:
                # Every error ends in an event (an unexpected one as ERROR, with its class and
                # message, which the sensor's execute_complete raises): one escaping run()
                # would fail the task from the triggerer, past execute_complete.
                kind = handling(exc)
                if kind is Handling.RETRY:  # the broker or the ledger may be back next round
                    self.log.warning(
                        "%s: %s; next round in %s s", self.export_id, exc, self.poll_interval_s
                    )
                elif kind is Handling.FAIL:
                    yield TriggerEvent({"status": RecoveryStatus.FAILED.value, "message": str(exc)})
                    return
                else:
                    message = f"{type(exc).__name__}: {exc}"
                    yield TriggerEvent({"status": RecoveryStatus.ERROR.value, "message": message})
                    return
            else:
                if report.failed:
                    message = "; ".join(f"{k}: {v}" for k, v in report.failed.items())
                    yield TriggerEvent(
                        {
                            "status": RecoveryStatus.FAILED.value,
                            "message": message,
                            "report": report.to_dict(),
                        }
                    )
                    return
                if report.settled(self.wait_for_live):
                    yield TriggerEvent(
                        {"status": RecoveryStatus.SUCCESS.value, "report": report.to_dict()}
                    )
                    return
                self.log.info(
                    "%s: %s; left %s; next round in %s s",
                    self.export_id,
                    report.summary(),
                    sorted(report.left),
                    self.poll_interval_s,
                )
            await asyncio.sleep(self.poll_interval_s)
