"""Deferred recovery: resolve an export's dangling transactions from the triggerer.

A round (:func:`recover_export`) is blocking (database, Kafka requests); the trigger runs
each round in a worker thread of its own (``asyncio.to_thread``: not asgiref's one shared
"thread-sensitive" thread, where a slow round would hold up other triggers) and sleeps
between rounds without holding a worker slot. The sensor's poke runs the same function,
so both modes decide alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ..coordination.recovery import RecoveryReport, recover
from ..errors import BrokerUnreachableError, ConfigurationError, ConnectionLostError
from ..hooks.kafka2pc import Kafka2pcHook
from ..hooks.ledger import LedgerHook
from ..ledger import Ledger
from ..transaction import naming
from ..transaction.controller import RetryPolicy, TransactionController

#: Errors after which the next round may well succeed (the broker is back).
TRANSIENT_ERRORS = (BrokerUnreachableError, ConnectionLostError)
#: Bound on finishing one batch or fencing one id within a round.
ROUND_DEADLINE_S = 120.0


def export_prefixes(ledger: Ledger, export_id: str, id_prefix: str | None) -> list[str]:
    """The transactional-id prefixes to search for ``export_id``'s open transactions.

    An explicit prefix wins. Otherwise: the prefixes of its in-doubt batches, and the one
    :func:`~airflow_provider_kafka2pc.transaction.naming.default_prefix` derives from the export id
    (what ``kafka_exactly_once_export`` uses unless told otherwise); a prefix the ledger
    never leased an id under is skipped by the round itself.
    """
    if id_prefix:
        return [id_prefix]
    seen = [batch.id_prefix for batch in ledger.in_doubt(export_id)]
    return list(dict.fromkeys([*seen, naming.default_prefix(export_id)]))


def recover_export(
    export_id: str,
    *,
    run_key: str | None,
    id_prefix: str | None,
    kafka_conn_id: str,
    ledger_conn_id: str | None,
    grace_period: timedelta,
    dry_run: bool = False,
) -> RecoveryReport:
    """One recovery round for ``export_id`` through Airflow connections (see
    :func:`~airflow_provider_kafka2pc.coordination.recovery.recover`)."""
    kafka = Kafka2pcHook(kafka_conn_id)
    with LedgerHook(ledger_conn_id).get_conn() as ledger:
        prefixes = export_prefixes(ledger, export_id, id_prefix)
        with kafka.protocol() as protocol:
            controller = TransactionController(protocol, RetryPolicy(deadline_s=ROUND_DEADLINE_S))
            return recover(
                ledger,
                protocol,
                controller,
                export_id,
                prefixes,
                grace_period=grace_period,
                own_run_key=run_key,
                dry_run=dry_run,
            )


class DanglingTransactionTrigger(BaseTrigger):
    """Fires when a round leaves nothing of the export's unresolved.

    :param export_id: the export whose batches and transactions are resolved.
    :param run_key: the waiting run's own key (its batch is left to the run).
    :param kafka_conn_id: the official provider's ``kafka`` connection.
    :param ledger_conn_id: the ledger's connection; None for SQLite under ``AIRFLOW_HOME``.
    :param grace_period_s: a batch or transaction is stale after this long.
    :param poll_interval_s: seconds between rounds while something is left.
    :param id_prefix: the export's transactional-id prefix; None: derived (see
        :func:`export_prefixes`).
    :param wait_for_live: also wait until live runs' transactions are gone.
    """

    def __init__(
        self,
        export_id: str,
        run_key: str | None,
        kafka_conn_id: str = "kafka_default",
        ledger_conn_id: str | None = None,
        grace_period_s: float = 3600.0,
        poll_interval_s: float = 30.0,
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
        return recover_export(
            self.export_id,
            run_key=self.run_key,
            id_prefix=self.id_prefix,
            kafka_conn_id=self.kafka_conn_id,
            ledger_conn_id=self.ledger_conn_id,
            grace_period=timedelta(seconds=self.grace_period_s),
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                report = await asyncio.to_thread(self._round)
            except ConfigurationError as exc:
                # Not for retrying: a missing/bad connection, a prefix of another export.
                yield TriggerEvent({"status": "failed", "message": str(exc)})
                return
            except TRANSIENT_ERRORS as exc:
                self.log.warning(
                    "%s: %s; next round in %s s", self.export_id, exc, self.poll_interval_s
                )
            except Exception as exc:
                yield TriggerEvent({"status": "error", "message": f"{type(exc).__name__}: {exc}"})
                return
            else:
                if report.failed:
                    message = "; ".join(f"{k}: {v}" for k, v in report.failed.items())
                    yield TriggerEvent(
                        {"status": "failed", "message": message, "report": report.to_dict()}
                    )
                    return
                if report.settled(self.wait_for_live):
                    yield TriggerEvent({"status": "success", "report": report.to_dict()})
                    return
                self.log.info(
                    "%s: %s; left %s; next round in %s s",
                    self.export_id,
                    report.summary(),
                    sorted(report.left),
                    self.poll_interval_s,
                )
            await asyncio.sleep(self.poll_interval_s)
