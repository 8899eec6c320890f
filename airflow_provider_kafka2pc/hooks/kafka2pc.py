"""Kafka settings from the official provider's ``kafka`` connection, for both planes.

Users already have a ``kafka`` connection (extra = librdkafka settings as JSON) for the
official Kafka provider; this hook reads it through that provider's ``KafkaBaseHook`` and
hands the settings to the control plane (:class:`KafkaProtocol`, the controller) and, in a
private file, to the Spark prepare job. Settings are never logged: :func:`redact` first.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook

from ..errors import ConfigurationError, ProtocolError
from ..transaction.controller import RetryPolicy, TransactionController
from ..transaction.protocol import KafkaProtocol
from ..transaction.settings import redact
from .connections import require_connection

#: Bound on connecting and on each control-plane request.
DEFAULT_TIMEOUT_MS = 30_000


class Kafka2pcHook(KafkaBaseHook):
    """The ``kafka`` connection as our two planes need it.

    :param kafka_config_id: the ``kafka`` connection (extra = librdkafka settings JSON).
    :param timeout_ms: bound on connecting and on each control-plane request.
    """

    hook_name = "Apache Kafka (two-phase commit)"

    def __init__(
        self,
        kafka_config_id: str = KafkaBaseHook.default_conn_name,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> None:
        super().__init__(kafka_config_id=kafka_config_id)
        self.timeout_ms = timeout_ms

    def settings(self) -> dict[str, Any]:
        """librdkafka settings of the connection (callbacks resolved as the official hook does)."""
        require_connection("Kafka", self.kafka_config_id)
        try:
            return self._build_config()
        except ValueError as exc:  # the official hook's "bootstrap.servers must be provided"
            raise ConfigurationError(
                f"Kafka connection {self.kafka_config_id!r}: {exc}; its extra must be a JSON "
                'object of librdkafka settings, e.g. {"bootstrap.servers": "host:9092"}'
            ) from None

    def portable_settings(self) -> dict[str, Any]:
        """The settings as JSON for another process (the Spark job); refuses Python callbacks."""
        config = self.settings()
        callables = sorted(k for k, v in config.items() if callable(v))
        if callables:
            raise ConfigurationError(
                f"Kafka connection {self.kafka_config_id!r} sets Python callbacks {callables}; "
                "the Spark prepare job runs in other processes and cannot use them"
            )
        return config

    def describe(self) -> dict[str, Any]:
        """The settings with secrets replaced by ``***``: the only form fit for a log line."""
        return redact({k: v for k, v in self.settings().items() if not callable(v)})

    @contextmanager
    def protocol(self) -> Iterator[KafkaProtocol]:
        with KafkaProtocol(self.settings(), timeout_ms=self.timeout_ms) as protocol:
            yield protocol

    @contextmanager
    def controller(self, deadline_s: float = 120.0) -> Iterator[TransactionController]:
        """A controller that finishes transactions by EndTxn from their committables."""
        with self.protocol() as protocol:
            yield TransactionController(protocol, RetryPolicy(deadline_s=deadline_s))

    def check_topic(self, topic: str) -> int:
        """Number of partitions of ``topic``; a clear error when it does not exist."""
        with self.protocol() as protocol:
            try:
                return len(protocol.partition_leaders(topic))
            except ProtocolError as exc:
                raise ConfigurationError(
                    f"topic {topic!r} is not usable through Kafka connection "
                    f"{self.kafka_config_id!r}: {exc.error_name}; create it first"
                ) from None

    @contextmanager
    def config_file(self) -> Iterator[Path]:
        """The settings in a file only this user can read, removed afterwards.

        It is how the Spark job gets secrets without them appearing on a command line.
        """
        directory = Path(tempfile.mkdtemp(prefix="kafka2pc-conf-"))  # mode 0700
        path = directory / "kafka.json"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                json.dump(self.portable_settings(), handle)
            yield path
        finally:
            path.unlink(missing_ok=True)
            directory.rmdir()
