"""The calls kafka-python's admin client makes well (Describe/ListTransactions,
CreateTopics), asked again through a failover, with their answers typed.

kafka-python's admin client finds coordinators and brokers itself and caches them; after
an error kafka-python classes as retriable (a lost connection, NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, ...) the next attempt gets a fresh client, which bootstraps
again from the surviving servers and forgets the dead coordinator.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import kafka.errors as kafka_errors
from kafka.admin import KafkaAdminClient

from ..connection.acls import authorization_error
from ..errors import ConnectionLostError, ProtocolError
from ..naming import java_prefix_pattern
from .described import CoordinatorTxnState, DescribedTransaction, ListedTransaction
from .failover import Failover

T = TypeVar("T")


class Admin:
    """One admin client, made at its first use and made again after a retriable error.

    :param kp_config: kafka-python settings (the admin client takes those it knows).
    :param config: the librdkafka-style settings, to name the principal of a refusal.
    :param failover: how long and how often a call is asked again.
    """

    def __init__(
        self, kp_config: Mapping[str, Any], config: Mapping[str, Any], failover: Failover
    ) -> None:
        self._kp_config = kp_config
        self._config = config
        self._failover = failover
        self._admin: KafkaAdminClient | None = None

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()

    def _client(self) -> KafkaAdminClient:
        if self._admin is None:
            accepted = KafkaAdminClient.DEFAULT_CONFIG
            self._admin = KafkaAdminClient(
                **{k: v for k, v in self._kp_config.items() if k in accepted}
            )
        return self._admin

    def _call(self, what: str, call: Callable[[KafkaAdminClient], T]) -> T:
        """``call(admin)``, asked again through a failover after a retriable error; other
        errors (an unknown id) propagate as they are."""

        def attempt() -> T:
            try:
                return call(self._client())
            except (kafka_errors.KafkaError, ConnectionError) as exc:
                if not _retriable(exc):
                    raise
                self._drop()
                raise ConnectionLostError(f"{what}: {type(exc).__name__} {exc}") from None

        return self._failover.run(what, attempt)

    def _refusing(self, exc: kafka_errors.KafkaError, action: str, ids: Sequence[str] = ()) -> None:
        """Raise ``exc`` as the AuthorizationError it is, if it is one: kafka-python's admin
        client raises the broker's refusals as its own error classes."""
        refused = authorization_error(exc, self._config, action, transactional_ids=ids)
        if refused is not None:
            raise refused from None

    def _drop(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            with contextlib.suppress(Exception):
                admin.close()

    def create_topic(self, topic: str, partitions: int) -> None:
        try:
            self._client().create_topics(
                {topic: {"num_partitions": partitions, "replication_factor": -1}}
            )
        except kafka_errors.TopicAlreadyExistsError:
            raise ProtocolError(f"topic {topic!r} already exists", "TOPIC_ALREADY_EXISTS") from None

    def list_transactions(
        self, prefix: str | None, states: Sequence[str] | None, *, pattern_on_broker: bool
    ) -> list[ListedTransaction]:
        """See :meth:`.client.KafkaProtocol.list_transactions`; ``pattern_on_broker``: the
        broker takes an id pattern (ListTransactions v2+)."""
        on_broker = prefix is not None and pattern_on_broker
        try:
            by_broker = self._call(
                "ListTransactions",
                lambda admin: admin.list_transactions(
                    state_filters=[str(s) for s in states] if states else None,
                    transactional_id_pattern=(
                        java_prefix_pattern(prefix) if on_broker and prefix else None
                    ),
                ),
            )
        except kafka_errors.KafkaError as exc:
            self._refusing(exc, "list transactions")
            raise
        return parse_listed(by_broker, prefix, on_broker=on_broker)

    def describe_transactions(self, transactional_ids: list[str]) -> list[DescribedTransaction]:
        try:
            described = self._call(
                f"DescribeTransactions of {list(transactional_ids)}",
                lambda admin: admin.describe_transactions(transactional_ids),
            )
        except kafka_errors.KafkaError as exc:
            self._refusing(exc, "describe", transactional_ids)
            # The coordinator's answer for one id fails the whole call (an unknown id:
            # TRANSACTIONAL_ID_NOT_FOUND); callers tell it from a bug by this class.
            name = _error_name(exc)
            raise ProtocolError(
                f"DescribeTransactions of {list(transactional_ids)}: {name} ({exc})", name
            ) from exc
        return parse_described(described)


def parse_listed(
    by_broker: Mapping[int, Sequence[Any]], prefix: str | None, *, on_broker: bool
) -> list[ListedTransaction]:
    """kafka-python's listings by broker, typed, those of ``prefix`` only, sorted by id;
    ``filtered_by`` says where the prefix was applied."""
    rows = [
        ListedTransaction(
            broker=broker,
            transactional_id=t.transactional_id,
            producer_id=t.producer_id,
            state=CoordinatorTxnState.parse(t.state),
            filtered_by="broker" if on_broker else ("client" if prefix else None),
        )
        for broker, listings in by_broker.items()
        for t in listings
    ]
    if prefix is not None:
        rows = [r for r in rows if r.transactional_id.startswith(prefix)]
    return sorted(rows, key=lambda r: r.transactional_id)


def parse_described(described: Mapping[str, Any]) -> list[DescribedTransaction]:
    return [
        DescribedTransaction(
            transactional_id=tid,
            state=CoordinatorTxnState.parse(d.state),
            producer_id=d.producer_id,
            producer_epoch=d.producer_epoch,
            coordinator=d.coordinator_id,
            transaction_timeout_ms=d.transaction_timeout_ms,
            transaction_start_time_ms=d.transaction_start_time_ms,
            partitions=tuple(sorted(f"{tp.topic}-{tp.partition}" for tp in d.topic_partitions)),
        )
        for tid, d in described.items()
    ]


def _error_name(exc: kafka_errors.KafkaError) -> str:
    """Kafka's name of the broker's error (``TRANSACTIONAL_ID_NOT_FOUND``), else the class's."""
    if isinstance(exc, kafka_errors.BrokerResponseError):
        return exc.message
    return type(exc).__name__


def _retriable(exc: BaseException) -> bool:
    """Whether kafka-python (or the socket) says asking again may help."""
    if isinstance(exc, ConnectionError):
        return True
    if isinstance(exc, kafka_errors.UnknownTopicOrPartitionError):
        return False
    return bool(getattr(exc, "retriable", False)) or isinstance(
        exc, kafka_errors.UnknownBrokerIdError
    )
