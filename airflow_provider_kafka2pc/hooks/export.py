"""The two connections one export run needs together: Kafka (the broker) and the ledger."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseHook

from .. import defaults
from ..coordination.finish import Coordinator
from ..coordination.recovery import RecoveryReport, export_prefixes, recover
from ..ledger import Ledger
from ..transaction.log import LogReader
from ..transaction.log_copy import LogCopy
from .kafka2pc import Kafka2pcHook
from .ledger import LedgerHook


class ExportHook(BaseHook):
    """Opens the ledger and a transaction controller for the second phase and recovery.

    :param kafka_conn_id: the ``kafka`` connection (extra = librdkafka settings JSON).
    :param ledger_conn_id: the ledger's connection; None for SQLite under ``AIRFLOW_HOME``.
    """

    hook_name = "Kafka exactly-once export"

    def __init__(
        self, kafka_conn_id: str = defaults.KAFKA_CONN_ID, ledger_conn_id: str | None = None
    ) -> None:
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
    def coordinator(self, *, repair_from_log: bool = False) -> Iterator[Coordinator]:
        """The second phase's coordinator; ``repair_from_log``: it repairs lost
        participants from the log first (:class:`~..transaction.log_copy.LogCopy`)."""
        with (
            self.ledger() as ledger,
            self.kafka.protocol() as protocol,
            self.kafka.controller(protocol) as controller,
        ):
            yield Coordinator(
                ledger, controller, self.log_copy(protocol) if repair_from_log else None
            )

    def log_copy(self, protocol: Any) -> LogCopy:
        """Loss repair from the log on ``protocol``, writing with this connection's settings."""
        return LogCopy(LogReader(protocol), self.kafka.settings())

    def recover(
        self,
        export_id: str,
        *,
        run_key: str | None,
        id_prefix: str | None,
        grace_period: timedelta,
        dry_run: bool = False,
        repair_from_log: bool = True,
    ) -> RecoveryReport:
        """One recovery round of ``export_id`` (:func:`~..coordination.recovery.recover`);
        the sensor's poke and the trigger's rounds both call this."""
        with self.ledger() as ledger:
            prefixes = export_prefixes(ledger, export_id, id_prefix)
            with self.kafka.protocol() as protocol, self.kafka.controller(protocol) as controller:
                return recover(
                    ledger,
                    protocol,
                    controller,
                    export_id,
                    prefixes,
                    grace_period=grace_period,
                    own_run_key=run_key,
                    dry_run=dry_run,
                    log_copy=self.log_copy(protocol) if repair_from_log else None,
                )
