"""Kafka settings from the official provider's ``kafka`` connection, for both planes.

Users already have a ``kafka`` connection (extra = librdkafka settings as JSON) for the
official Kafka provider; this hook reads it through that provider's ``KafkaBaseHook`` and
hands the settings to the control plane (:class:`KafkaProtocol`, the controller) and, in a
private file, to the Spark prepare job. Settings are never logged: :func:`redact` first.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook

from .. import compat, defaults
from ..connection.acls import authorization_error
from ..connection.settings import redact
from ..errors import ConfigurationError, ProtocolError
from ..protocol.client import KafkaProtocol
from ..spark.job import private_config_file
from ..transaction.controller import RetryPolicy, TransactionController
from ..utils.connections import require_connection


class Kafka2pcHook(KafkaBaseHook):
    """The ``kafka`` connection as our two planes need it.

    :param kafka_config_id: the ``kafka`` connection (extra = librdkafka settings JSON).
    :param timeout_ms: bound on connecting and on each control-plane request.
    """

    hook_name = "Apache Kafka (two-phase commit)"

    def __init__(
        self,
        kafka_config_id: str = defaults.KAFKA_CONN_ID,
        timeout_ms: int = defaults.REQUEST_TIMEOUT_MS,
    ) -> None:
        super().__init__(kafka_config_id=kafka_config_id)
        self.timeout_ms = timeout_ms

    def settings(self) -> dict[str, Any]:
        """librdkafka settings of the connection (callbacks resolved as the official hook does)."""
        require_connection("Kafka", self.kafka_config_id)
        try:
            return compat.kafka_client_config(self)
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

    def bootstrap_server(self) -> str:
        """The first of the connection's bootstrap servers: what names the cluster in the
        topic's asset URI (``kafka://<server>/<topic>``), as the official provider builds it."""
        servers = str(self.settings().get("bootstrap.servers", ""))
        return servers.split(",")[0].strip()

    def describe(self) -> dict[str, Any]:
        """The settings with secrets replaced by ``***``: the only form fit for a log line."""
        return redact({k: v for k, v in self.settings().items() if not callable(v)})

    @contextmanager
    def protocol(self) -> Iterator[KafkaProtocol]:
        """A control-plane connection. A TLS problem (untrusted broker certificate, host
        name not in it, client certificate refused) is named before anything opens, and
        the broker's authorization refusals inside the block become
        :class:`~..errors.AuthorizationError`, naming the principal and the missing ACL."""
        settings = self.settings()
        try:  # KafkaProtocol names a TLS problem (check_tls) before anything opens
            with KafkaProtocol(settings, timeout_ms=self.timeout_ms) as protocol:
                yield protocol
        except Exception as exc:  # nothing swallowed: a refusal re-raised as one, the rest as is
            refused = authorization_error(
                exc, settings, f"use Kafka connection {self.kafka_config_id!r}"
            )
            if refused is None:
                raise
            raise refused from None

    @contextmanager
    def controller(
        self,
        protocol: KafkaProtocol | None = None,
        deadline_s: float = defaults.FINISH_DEADLINE_S,
    ) -> Iterator[TransactionController]:
        """A controller that finishes transactions by EndTxn from their committables, on
        ``protocol`` when given (else a connection of its own)."""
        if protocol is not None:
            yield TransactionController(protocol, RetryPolicy(deadline_s=deadline_s))
            return
        with self.protocol() as own:
            yield TransactionController(own, RetryPolicy(deadline_s=deadline_s))

    def check_topic(self, topic: str) -> int:
        """Number of partitions of ``topic``; a clear error when it does not exist or this
        connection's principal may not WRITE it."""
        with self.protocol() as protocol:
            try:
                leaders = protocol.partition_leaders(
                    topic, for_write=True, wait_s=defaults.TOPIC_WAIT_S
                )
                return len(leaders)
            except ProtocolError as exc:
                refused = authorization_error(
                    exc,
                    self.settings(),
                    f"write to topic {topic!r} through Kafka connection {self.kafka_config_id!r}",
                    topics=[topic],
                )
                if refused is not None:
                    raise refused from None
                raise ConfigurationError(
                    f"topic {topic!r} is not usable through Kafka connection "
                    f"{self.kafka_config_id!r}: {exc.error_name}; create it first"
                ) from None

    @contextmanager
    def config_file(self) -> Iterator[Path]:
        """The settings in a file only this user can read, removed afterwards: how the
        Spark job gets secrets without them appearing on a command line."""
        with private_config_file(self.portable_settings()) as path:
            yield path
