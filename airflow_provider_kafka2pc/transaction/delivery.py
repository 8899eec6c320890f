"""What librdkafka reports back while a writer writes: delivery reports, the brokers'
connection states (statistics) and client errors, kept by the callbacks the producer calls.

Called from librdkafka's poll, once per record for the delivery reports: each does as
little as it can, and the writer (:mod:`.writer`) reads them between chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError


class DeliveryReports:
    """Delivery-report bookkeeping: offsets per partition, and the first error.

    The idempotent producer delivers each partition in order, so the first report
    of a partition carries its first offset. Called once per record: it does as little
    as it can (no running total; :attr:`count` sums the partitions when asked).
    """

    __slots__ = ("error", "first", "last", "per_partition")

    def __init__(self) -> None:
        self.first: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.per_partition: dict[int, int] = {}
        self.error: KafkaError | None = None

    @property
    def count(self) -> int:
        """Records delivered so far, in every partition."""
        return sum(self.per_partition.values())

    def __call__(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            if self.error is None:
                self.error = err
            return
        partition = msg.partition()
        offset = msg.offset()
        self.last[partition] = offset
        if partition in self.per_partition:
            self.per_partition[partition] += 1
        else:
            self.per_partition[partition] = 1
            self.first[partition] = offset


class TopicDeliveryReports(DeliveryReports):
    """:class:`DeliveryReports` of a write to several topics: keyed by (topic, partition).
    A subclass, so a one-topic write's callback keeps its plain int keys."""

    __slots__ = ()

    def __call__(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            if self.error is None:
                self.error = err
            return
        where = (msg.topic(), msg.partition())
        offset = msg.offset()
        self.last[where] = offset  # type: ignore[index]
        if where in self.per_partition:
            self.per_partition[where] += 1  # type: ignore[index]
        else:
            self.per_partition[where] = 1  # type: ignore[index]
            self.first[where] = offset  # type: ignore[index]


class BrokerLinks:
    """``stats_cb`` side table: each broker's connection state, as librdkafka last saw it.

    What names the brokers that did not answer when a write fails.
    """

    __slots__ = ("states",)

    def __init__(self) -> None:
        self.states: dict[str, str] = {}

    def update(self, brokers: Mapping[str, Any]) -> None:
        self.states = {
            f"{b.get('nodename', name)} (node {b['nodeid']})": str(b.get("state"))
            for name, b in brokers.items()
            if isinstance(b, Mapping) and b.get("nodeid", -1) >= 0
        }

    def down(self) -> list[str]:
        """Brokers not connected now: ``host:port (node N): STATE``."""
        return [f"{name}: {state}" for name, state in sorted(self.states.items()) if state != "UP"]


class ClientErrors:
    """``error_cb``: keeps librdkafka's first authentication error, then calls the user's.

    librdkafka reports a refused login only there; ``list_topics`` itself just times out
    with ``_TRANSPORT``, which would read as "no broker answered".
    """

    __slots__ = ("authentication", "chained")

    def __init__(self, chained: Callable[[KafkaError], None] | None = None) -> None:
        self.authentication: KafkaError | None = None
        self.chained = chained

    def __call__(self, err: KafkaError) -> None:
        if err.code() == KafkaError._AUTHENTICATION and self.authentication is None:
            self.authentication = err
        if self.chained is not None:
            self.chained(err)
