"""The two connections one export run needs together: Kafka (the broker) and the ledger."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from airflow.sdk import BaseHook

from ..coordination.finish import Coordinator
from ..ledger import Ledger
from .kafka2pc import Kafka2pcHook
from .ledger import LedgerHook


class ExportHook(BaseHook):
    """Opens the ledger and a transaction controller for the second phase.

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
