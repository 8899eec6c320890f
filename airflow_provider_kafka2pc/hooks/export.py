"""The two connections one export run needs together: Kafka (the broker) and the ledger."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import BaseHook

from ..ledger import Ledger
from .coordinator import Coordinator
from .kafka2pc import Kafka2pcHook
from .ledger import LedgerHook
from .recovery import RecoveryReport, needs_broker, plans, resolve


class ExportHook(BaseHook):
    """Opens the ledger and a transaction controller for the second phase and recovery.

    :param kafka_conn_id: the ``kafka`` connection (extra = librdkafka settings JSON).
    :param ledger_conn_id: the ledger's connection; None for SQLite under ``AIRFLOW_HOME``.
    """

    hook_name = "Kafka exactly-once export"

    def __init__(self, kafka_conn_id: str = "kafka_default", ledger_conn_id: str | None = None):
        super().__init__()
        self.kafka = Kafka2pcHook(kafka_conn_id)
        self.ledger_hook = LedgerHook(ledger_conn_id)

    def get_conn(self) -> Any:
        return self.ledger_hook.get_conn()

    @contextmanager
    def ledger(self) -> Iterator[Ledger]:
        with self.ledger_hook.get_conn() as ledger:
            yield ledger

    @contextmanager
    def coordinator(self) -> Iterator[Coordinator]:
        with self.ledger() as ledger, self.kafka.controller() as controller:
            yield Coordinator(ledger, controller)

    def recover(
        self, export_id: str, run_key: str | None, grace_period: timedelta
    ) -> RecoveryReport:
        """One recovery round over ``export_id``'s in-doubt batches (see :mod:`.recovery`).

        The broker is contacted only when some batch is to be finished.
        """
        with self.ledger() as ledger:
            steps = plans(
                ledger,
                export_id,
                own_run_key=run_key,
                now=datetime.now(UTC),
                grace_period=grace_period,
            )
            if not needs_broker(steps):
                return resolve(None, steps)
            with self.kafka.controller() as controller:
                return resolve(Coordinator(ledger, controller), steps)
