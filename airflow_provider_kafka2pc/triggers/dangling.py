"""Deferred recovery: resolve an export's in-doubt batches from the triggerer.

The recovery itself is blocking (database, Kafka requests); each round runs in a thread
(``sync_to_async``, as the official Kafka provider's triggers do) and the trigger sleeps
between rounds without holding a worker slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent
from asgiref.sync import sync_to_async

from ..hooks.coordinator import ParticipantLostError
from ..hooks.export import ExportHook
from ..transaction.errors import ConfigurationError


class DanglingTransactionTrigger(BaseTrigger):
    """Fires when none of an export's stale in-doubt batches is left unresolved.

    :param export_id: the export whose batches are resolved.
    :param run_key: the waiting run's own key (its batch is left to the run).
    :param kafka_conn_id: the official provider's ``kafka`` connection.
    :param ledger_conn_id: the ledger's connection; None for SQLite under ``AIRFLOW_HOME``.
    :param grace_period_s: a batch of another run key is stale after this long unchanged.
    :param poll_interval_s: seconds between rounds while something is left.
    """

    def __init__(
        self,
        export_id: str,
        run_key: str | None,
        kafka_conn_id: str = "kafka_default",
        ledger_conn_id: str | None = None,
        grace_period_s: float = 3600.0,
        poll_interval_s: float = 30.0,
    ) -> None:
        super().__init__()
        self.export_id = export_id
        self.run_key = run_key
        self.kafka_conn_id = kafka_conn_id
        self.ledger_conn_id = ledger_conn_id
        self.grace_period_s = grace_period_s
        self.poll_interval_s = poll_interval_s

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
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = ExportHook(self.kafka_conn_id, self.ledger_conn_id)
        grace_period = timedelta(seconds=self.grace_period_s)
        while True:
            try:
                report = await sync_to_async(hook.recover)(
                    self.export_id, self.run_key, grace_period
                )
            except (ParticipantLostError, ConfigurationError) as exc:
                # Not for retrying: a lost participant, or a missing/bad connection.
                yield TriggerEvent({"status": "failed", "message": str(exc)})
                return
            except Exception as exc:
                yield TriggerEvent({"status": "error", "message": f"{type(exc).__name__}: {exc}"})
                return
            if report.done:
                yield TriggerEvent({"status": "success", **report.to_dict()})
                return
            self.log.info(
                "%s: still in doubt %s; next round in %s s",
                self.export_id,
                report.left,
                self.poll_interval_s,
            )
            await asyncio.sleep(self.poll_interval_s)
