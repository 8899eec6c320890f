"""The data plane: write records into a Kafka transaction and leave it open (prepared).

confluent-kafka (librdkafka) does the writing because it is fast; it cannot resume a
transaction later, so the writer only prepares: it flushes, waits for every delivery
report, and returns a :class:`~.committable.Committable` that another process ends
with EndTxn. The producer is never closed: ``Producer.close()`` aborts the open
transaction, while dropping the object or exiting the process leaves it open.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from .. import defaults
from ..errors import BrokerUnreachableError, ConfigurationError, Kafka2pcError, WriteError
from .committable import TRANSACTION_VERSION_CLASSIC, Committable, PartitionRange
from .naming import validate_transactional_id
from .settings import bootstrap_servers, redact_strictly, scrub

log = logging.getLogger(__name__)

#: A record as the writer takes it: (key, value) or (key, value, headers).
Record = (
    tuple[bytes | None, bytes | None]
    | tuple[bytes | None, bytes | None, list[tuple[str, bytes]] | None]
)

#: Kafka brokers refuse longer transactions by default (transaction.max.timeout.ms).
#: Java clients and Spark's Kafka sink put a key on ``murmur2(key) % partitions``;
#: librdkafka's own default (consistent_random, CRC32) would put it elsewhere, which
#: breaks co-partitioned joins and compaction for anyone also producing from Java.
#: Used unless the caller's settings name a ``partitioner``.
DEFAULT_PARTITIONER = "murmur2_random"
_STATS_INTERVAL_MS = 50
#: The first metadata request is asked in slices this long, so that an authentication
#: failure (reported only through ``error_cb``) ends the wait at once.
_CONNECT_SLICE_S = 0.5
# Settings the writer owns; a caller's value for them would break the protocol.
_RESERVED = (
    "transactional.id",
    "transaction.timeout.ms",
    "enable.idempotence",
    "statistics.interval.ms",
    "stats_cb",
)


class DeliveryReports:
    """Delivery-report bookkeeping: offsets per partition, and the first error.

    The idempotent producer delivers each partition in order, so the first report
    of a partition carries its first offset.
    """

    __slots__ = ("count", "error", "first", "last", "per_partition")

    def __init__(self) -> None:
        self.first: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.per_partition: dict[int, int] = {}
        self.count = 0
        self.error: KafkaError | None = None

    def __call__(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            if self.error is None:
                self.error = err
            return
        partition = msg.partition()
        self.last[partition] = msg.offset()
        self.count += 1
        if partition in self.per_partition:
            self.per_partition[partition] += 1
        else:
            self.per_partition[partition] = 1
            self.first[partition] = self.last[partition]


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


class TransactionalWriter:
    """Writes one transaction per :meth:`write` call on a given transactional id.

    :param config: librdkafka producer settings (``bootstrap.servers``, security, tuning);
        keys are partitioned as Java clients do (:data:`DEFAULT_PARTITIONER`) unless it
        sets ``partitioner``.
    :param transactional_id: the id the transaction runs under; re-using it fences
        (aborts) whatever an earlier writer of the same id left open.
    :param transaction_timeout_ms: how long the prepared transaction may stay open
        before the coordinator aborts it; at most the broker's transaction.max.timeout.ms.
    :param timeout_s: bound on connecting, initialising, flushing and aborting.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        transactional_id: str,
        *,
        transaction_timeout_ms: int = defaults.TRANSACTION_TIMEOUT_MS,
        timeout_s: float = defaults.REQUEST_TIMEOUT_MS / 1000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._servers = bootstrap_servers(config)
        self.transactional_id = validate_transactional_id(transactional_id)
        if transaction_timeout_ms <= 0:
            raise ConfigurationError("transaction_timeout_ms must be positive")
        reserved = sorted(set(config) & set(_RESERVED))
        if reserved:
            raise ConfigurationError(f"setting(s) {reserved} are managed by the writer")
        self._config = dict(config)
        self.transaction_timeout_ms = transaction_timeout_ms
        self._timeout_s = timeout_s
        self._clock = clock

    def write(self, topic: str, records: Iterable[Record]) -> Committable:
        """Write ``records`` into a new transaction on ``topic`` and leave it open.

        The transaction opens at the first record, so an empty input opens none and
        yields an empty committable. Any failure aborts the transaction and raises.
        """
        if not isinstance(topic, str) or not topic:
            raise ConfigurationError("topic must be a non-empty string")
        stats: dict[str, Any] = {}
        deliveries = DeliveryReports()
        errors = ClientErrors(self._config.get("error_cb"))
        producer = self._producer(stats, deliveries, errors)
        self._check_topic(producer, topic, errors)
        iterator = iter(records)
        first = next(iterator, None)
        start_ms = int(self._clock() * 1000)
        if first is None:
            log.info("%s: no records, no transaction opened", self.transactional_id)
            return Committable.empty(self.transactional_id, start_ms, self.transaction_timeout_ms)
        self._call(producer.init_transactions, self._timeout_s, what="init_transactions")
        producer.begin_transaction()
        stats.clear()  # only snapshots taken inside this transaction may name its epoch
        try:
            produced = self._produce_all(producer, topic, first, iterator, deliveries)
            remaining = producer.flush(self._timeout_s)
            if remaining:
                raise WriteError(f"{remaining} records undelivered after {self._timeout_s} s")
            if deliveries.error is not None:
                raise WriteError(f"delivery failed: {deliveries.error.str()}")
            if deliveries.count != produced:
                raise WriteError(f"{produced} records produced but {deliveries.count} delivered")
            producer_id, epoch = self._producer_identity(producer, stats)
        except BaseException as exc:
            self._abort(producer, exc)
            if isinstance(exc, Kafka2pcError | KeyboardInterrupt | SystemExit):
                raise
            raise WriteError(f"writing to {topic!r} failed, transaction aborted: {exc}") from exc
        parts = tuple(
            PartitionRange(topic, p, deliveries.first[p], deliveries.last[p], n)
            for p, n in sorted(deliveries.per_partition.items())
        )
        committable = Committable(
            transactional_id=self.transactional_id,
            producer_id=producer_id,
            producer_epoch=epoch,
            transaction_version=TRANSACTION_VERSION_CLASSIC,
            partitions=parts,
            record_count=deliveries.count,
            start_time_ms=start_ms,
            transaction_timeout_ms=self.transaction_timeout_ms,
        )
        log.info(
            "%s: prepared %d records in %d partitions (pid %d, epoch %d)",
            self.transactional_id,
            committable.record_count,
            len(parts),
            producer_id,
            epoch,
        )
        # Deliberately no producer.close(): it would abort the prepared transaction.
        return committable

    # -- steps --------------------------------------------------------------

    def _producer(
        self, stats: dict[str, Any], deliveries: DeliveryReports, errors: ClientErrors
    ) -> Producer:
        def on_stats(payload: str) -> None:
            stats.update(json.loads(payload).get("eos") or {})

        config = {
            "allow.auto.create.topics": False,
            "partitioner": DEFAULT_PARTITIONER,
            "logger": log,
            **self._config,
            "transactional.id": self.transactional_id,
            "transaction.timeout.ms": self.transaction_timeout_ms,
            "enable.idempotence": True,
            "statistics.interval.ms": _STATS_INTERVAL_MS,
            "stats_cb": on_stats,
            "on_delivery": deliveries,  # once here, not per produce() call: cheaper
            "error_cb": errors,
        }
        try:
            return Producer(config)
        except KafkaException as exc:
            raise ConfigurationError(
                f"invalid producer settings {redact_strictly(self._config)}: "
                f"{scrub(exc.args[0].str(), self._config)}"
            ) from None

    def _check_topic(self, producer: Producer, topic: str, errors: ClientErrors) -> None:
        """Fail before anything is opened if the topic is missing, the login is refused or
        no broker answers.

        Asked twice: the second round trip lets librdkafka settle on the broker's own
        connection. Measured with confluent-kafka 2.16: after only one, init_transactions
        now and then waits 500 ms on a reconnect timer.
        """
        deadline = time.monotonic() + self._timeout_s
        try:
            while True:
                try:
                    slice_s = min(_CONNECT_SLICE_S, max(deadline - time.monotonic(), 0.01))
                    producer.list_topics(topic, timeout=slice_s)
                    break
                except KafkaException:
                    producer.poll(0)  # serves error_cb, where a refused login is reported
                    if errors.authentication is not None:
                        raise self._authentication_failed(errors.authentication) from None
                    if time.monotonic() >= deadline:
                        raise
            metadata = producer.list_topics(topic, timeout=self._timeout_s)
        except KafkaException as exc:
            raise BrokerUnreachableError(
                f"no Kafka broker answered at {self._servers} within {self._timeout_s} s "
                f"({exc.args[0].name()})"
            ) from None
        entry = metadata.topics.get(topic)
        if entry is None or entry.error is not None:
            reason = entry.error.str() if entry is not None and entry.error else "not found"
            raise ConfigurationError(
                f"topic {topic!r} does not exist at {self._servers} ({reason}); create it first"
            )

    def _authentication_failed(self, err: KafkaError) -> ConfigurationError:
        mechanism = self._config.get("sasl.mechanism") or self._config.get(
            "sasl.mechanisms", "GSSAPI"
        )
        return ConfigurationError(
            f"authentication failed for user {self._config.get('sasl.username')!r} "
            f"({mechanism}) at {self._servers}: {scrub(err.str(), self._config)}; "
            "check sasl.username, sasl.password and sasl.mechanism"
        )

    def _call(self, fn: Callable[[float], None], timeout: float, what: str) -> None:
        try:
            fn(timeout)
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT):
                raise BrokerUnreachableError(
                    f"{what} got no answer from {self._servers} within {timeout} s"
                ) from None
            raise WriteError(f"{what} failed: {err.str()}") from None

    @staticmethod
    def _produce_all(
        producer: Producer,
        topic: str,
        first: Record,
        rest: Iterable[Record],
        deliveries: DeliveryReports,
    ) -> int:
        """Queue every record, waiting while the local queue is full; returns the count.

        The hot loop: no per-record keyword arguments beyond the headers a record has.
        """
        produce, poll = producer.produce, producer.poll
        with_headers = len(first) > 2
        count = 0
        for record in itertools.chain((first,), rest):
            while True:
                try:
                    if with_headers:
                        produce(topic, record[1], record[0], headers=record[2])
                    else:
                        produce(topic, record[1], record[0])
                    break
                except BufferError:
                    poll(0.05)  # queue full: let deliveries drain (backpressure)
                except KafkaException as exc:
                    raise WriteError(f"record {count} refused: {exc.args[0].str()}") from None
            count += 1
            if not count & 1023:
                poll(0)
                if deliveries.error is not None:  # stop early; flush re-checks at the end
                    raise WriteError(f"delivery failed: {deliveries.error.str()}")
        return count

    def _producer_identity(self, producer: Producer, stats: dict[str, Any]) -> tuple[int, int]:
        """Producer id and epoch of the open transaction, from librdkafka's statistics."""
        deadline = time.monotonic() + self._timeout_s
        while not (stats.get("txn_state") == "InTransaction" and stats.get("producer_id", -1) >= 0):
            if time.monotonic() > deadline:
                raise WriteError("librdkafka statistics never reported the producer id")
            producer.poll(_STATS_INTERVAL_MS / 1000)
        return int(stats["producer_id"]), int(stats["producer_epoch"])

    def _abort(self, producer: Producer, cause: BaseException) -> None:
        try:
            producer.abort_transaction(self._timeout_s)
            log.warning(
                "%s: transaction aborted after %s", self.transactional_id, type(cause).__name__
            )
        except KafkaException as exc:
            log.error(
                "%s: abort after failure also failed (%s); the coordinator aborts it "
                "at its timeout, or fence the id",
                self.transactional_id,
                exc.args[0].str(),
            )
