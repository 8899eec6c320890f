"""The data plane: write records into a Kafka transaction and leave it open (prepared).

confluent-kafka (librdkafka) does the writing because it is fast; it cannot resume a
transaction later, so the writer only prepares: it flushes, waits for every delivery
report, and returns a :class:`~.committable.Committable` that another process ends
with EndTxn. The producer is never closed: ``Producer.close()`` aborts the open
transaction, while dropping the object or exiting the process leaves it open.

Over 500 lines, on purpose: one class, whose steps (open, queue with backpressure, flush,
verify every delivery, abort) share one write's producer, delivery reports and time
bounds. What needs no producer is apart: the records and chunks (:mod:`.chunks`) and what
librdkafka's callbacks report (:mod:`.delivery`).
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from .. import defaults
from ..connection.acls import authorization_error
from ..connection.settings import bootstrap_servers, redact_strictly, scrub
from ..errors import (
    BrokerUnreachableError,
    ConfigurationError,
    Kafka2pcError,
    ProtocolError,
    WriteError,
)
from ..naming import validate_transactional_id
from .chunks import Record, RecordChunk, chunked, routed
from .committable import TRANSACTION_VERSION_CLASSIC, Committable, PartitionRange
from .delivery import BrokerLinks, ClientErrors, DeliveryReports, TopicDeliveryReports

log = logging.getLogger(__name__)

#: Java clients and Spark's Kafka sink put a key on ``murmur2(key) % partitions``;
#: librdkafka's own default (consistent_random, CRC32) would put it elsewhere, which
#: breaks co-partitioned joins and compaction for anyone also producing from Java.
#: Used unless the caller's settings name a ``partitioner``.
DEFAULT_PARTITIONER = "murmur2_random"
_STATS_INTERVAL_MS = 50
#: librdkafka's names for how long one record may take to be delivered (aliases).
_DELIVERY_TIMEOUT_KEYS = ("message.timeout.ms", "delivery.timeout.ms")
#: librdkafka's default ``queue.buffering.max.messages``.
_QUEUE_MESSAGES = 100_000
#: How often the writer looks up from a full queue or a flush to check for failures.
_WAIT_SLICE_S = 0.05
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


class TransactionalWriter:
    """Writes one transaction per :meth:`write` call on a given transactional id.

    :param config: librdkafka producer settings (``bootstrap.servers``, security, tuning);
        keys are partitioned as Java clients do (:data:`DEFAULT_PARTITIONER`) unless it
        sets ``partitioner``.
    :param transactional_id: the id the transaction runs under; re-using it fences
        (aborts) whatever an earlier writer of the same id left open.
    :param transaction_timeout_ms: how long the prepared transaction may stay open
        before the coordinator aborts it; at most the broker's transaction.max.timeout.ms.
    :param timeout_s: bound on connecting, initialising and aborting, and the grace a
        stalled queue gets beyond the delivery timeout.
    :param batch_produce: queue each chunk without headers in one ``produce_batch`` call
        (confluent-kafka 2.12+) instead of one ``produce()`` call per record; an option
        until measured (docs/performance.md).

    Every wait is bounded. A record is delivered within the delivery timeout
    (``message.timeout.ms``; :attr:`delivery_timeout_ms`) or fails; librdkafka would
    otherwise use the whole transaction timeout (15 min by default) and a write with no
    broker left would sit that long. A full local queue or a flush that sees no delivery
    report for the delivery timeout plus ``timeout_s`` fails, and so does the first failed
    delivery. Once the brokers stop answering mid-write, :meth:`write` raises within
    :attr:`failure_bound_s`, naming the brokers it could not reach.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        transactional_id: str,
        *,
        transaction_timeout_ms: int = defaults.TRANSACTION_TIMEOUT_MS,
        timeout_s: float = defaults.REQUEST_TIMEOUT_MS / 1000,
        clock: Callable[[], float] = time.time,
        batch_produce: bool = False,
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
        self.delivery_timeout_ms = self._delivery_timeout_ms(transaction_timeout_ms)
        self._timeout_s = timeout_s
        self._clock = clock
        self.batch_produce = batch_produce
        self._queue_limit = int(self._config.get("queue.buffering.max.messages", _QUEUE_MESSAGES))

    def _delivery_timeout_ms(self, transaction_timeout_ms: int) -> int:
        """The settings' ``message.timeout.ms``, or :data:`~..defaults.DELIVERY_TIMEOUT_MS`;
        at most half the transaction timeout, so a write that fails does so while its
        transaction still has time left to be aborted and written again."""
        most = max(1, transaction_timeout_ms // 2)
        given = [self._config[k] for k in _DELIVERY_TIMEOUT_KEYS if k in self._config]
        if not given:
            return min(defaults.DELIVERY_TIMEOUT_MS, most)
        try:
            value = int(given[0])
        except (TypeError, ValueError):
            raise ConfigurationError(
                f"message.timeout.ms must be an integer of milliseconds, not {given[0]!r}"
            ) from None
        if not 0 < value <= most:
            raise ConfigurationError(
                f"message.timeout.ms {value} must be positive and at most half the "
                f"transaction timeout ({most} of {transaction_timeout_ms} ms): a record "
                "stuck longer would leave its transaction too little time"
            )
        return value

    @property
    def stall_limit_s(self) -> float:
        """How long a full queue or a flush may go without any delivery report."""
        return self.delivery_timeout_ms / 1000 + self._timeout_s

    @property
    def failure_bound_s(self) -> float:
        """The longest :meth:`write` takes to fail once the brokers stop answering while
        records are queued: a stalled queue for :attr:`stall_limit_s`, then the abort's
        ``timeout_s``, plus a second of polling slack."""
        return self.stall_limit_s + self._timeout_s + 1.0

    def write(self, topic: str, records: Iterable[Record]) -> Committable:
        """Write ``records`` into a new transaction on ``topic`` and leave it open.

        The transaction opens at the first record, so an empty input opens none and
        yields an empty committable. Any failure aborts the transaction and raises.
        """
        return self.write_chunks(topic, chunked(records))

    def write_chunks(
        self, topic: str | Sequence[str], chunks: Iterable[RecordChunk]
    ) -> Committable:
        """:meth:`write` for records already grouped in :class:`RecordChunk` s (Arrow batches).

        The input is consumed one chunk at a time: a chunk is queued before the next is
        asked for, so a caller's generator sees each of its chunks queued when it resumes.
        ``topic`` may list several topics: each chunk then names its own (``chunk.topic``),
        every topic is checked before the transaction opens, and the one transaction spans
        them all (its committable has a range per topic-partition).
        """
        topics = [topic] if isinstance(topic, str) else list(topic)
        if not topics or not all(isinstance(t, str) and t for t in topics):
            raise ConfigurationError("topic must be a non-empty string (or a list of them)")
        several = len(topics) > 1
        stats: dict[str, Any] = {}
        links = BrokerLinks()
        deliveries = TopicDeliveryReports() if several else DeliveryReports()
        errors = ClientErrors(self._config.get("error_cb"))
        producer = self._producer(stats, links, deliveries, errors)
        for each in topics:
            self._check_topic(producer, each, errors)
        chunks = routed(chunks, topics)
        topic = topics[0] if not several else ", ".join(topics)  # what errors name
        iterator = iter(chunks)
        first = next((c for c in iterator if len(c)), None)
        start_ms = int(self._clock() * 1000)
        if first is None:
            log.info("%s: no records, no transaction opened", self.transactional_id)
            return Committable.empty(self.transactional_id, start_ms, self.transaction_timeout_ms)
        self._call(producer.init_transactions, self._timeout_s, what="init_transactions")
        producer.begin_transaction()
        stats.clear()  # only snapshots taken inside this transaction may name its epoch
        try:
            produced = self._produce_all(producer, topic, first, iterator, deliveries, links)
            self._flush(producer, topic, deliveries, links)
            if deliveries.count != produced:
                raise WriteError(f"{produced} records produced but {deliveries.count} delivered")
            producer_id, epoch = self._producer_identity(producer, stats)
        except BaseException as exc:
            aborted = self._abort(producer, exc)
            if isinstance(exc, WriteError) and not aborted:
                raise WriteError(
                    f"{exc}; the abort got no answer within {self._timeout_s} s either: the "
                    "transaction is left to its timeout or to recovery (fence the id)"
                ) from exc
            if isinstance(exc, Kafka2pcError | KeyboardInterrupt | SystemExit):
                raise
            raise WriteError(f"writing to {topic!r} failed, transaction aborted: {exc}") from exc
        parts = tuple(
            PartitionRange(*where, deliveries.first[where], deliveries.last[where], n)  # type: ignore[index]
            if several
            else PartitionRange(
                topics[0], where, deliveries.first[where], deliveries.last[where], n
            )
            for where, n in sorted(deliveries.per_partition.items())
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
        self,
        stats: dict[str, Any],
        links: BrokerLinks,
        deliveries: DeliveryReports,
        errors: ClientErrors,
    ) -> Producer:
        def on_stats(payload: str) -> None:
            data = json.loads(payload)
            stats.update(data.get("eos") or {})
            links.update(data.get("brokers") or {})

        config = {
            "allow.auto.create.topics": False,
            "partitioner": DEFAULT_PARTITIONER,
            **self._id_settings(),
            "message.timeout.ms": self.delivery_timeout_ms,
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

    def _id_settings(self) -> dict[str, Any]:
        """The caller's settings (connection, security) under this writer's transactional id
        and timeout: what both the write's producer and the fence after an abort use."""
        return {
            "logger": log,
            **{k: v for k, v in self._config.items() if k not in _DELIVERY_TIMEOUT_KEYS},
            "transactional.id": self.transactional_id,
            "transaction.timeout.ms": self.transaction_timeout_ms,
        }

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
        if (
            entry is not None
            and entry.error is not None
            and entry.error.code() == (KafkaError.TOPIC_AUTHORIZATION_FAILED)
        ):
            refused = ProtocolError(f"topic {topic!r}: {entry.error.str()}", entry.error.name())
            raise authorization_error(refused, self._config, "prepare", topics=[topic]) or refused
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
            refused = authorization_error(
                ProtocolError(f"{what}: {err.str()}", err.name()),
                self._config,
                "prepare",
                transactional_ids=[self.transactional_id],
            )
            if refused is not None:  # InitProducerId: WRITE on the transactional id
                raise refused from None
            raise WriteError(f"{what} failed: {err.str()}") from None

    def _produce_all(
        self,
        producer: Producer,
        topic: str,
        first: RecordChunk,
        rest: Iterable[RecordChunk],
        deliveries: DeliveryReports,
        links: BrokerLinks,
    ) -> int:
        """Queue every record, waiting while the local queue is full; returns the count.

        The hot loop, one per chunk: ``produce()`` with positional arguments only (headers
        only for a chunk that has some), no per-record bookkeeping; delivery reports are
        served and checked between chunks. With :attr:`batch_produce`, a chunk without
        headers goes to librdkafka in one ``produce_batch`` call instead.
        """
        count = 0
        for chunk in itertools.chain((first,), rest):
            to = chunk.topic or topic
            if (
                self.batch_produce
                and chunk.headers is None
                and chunk.timestamps is None
                and chunk.partitions is None
            ):
                self._produce_batch(producer, to, chunk, count, deliveries, links)
            else:
                self._produce_chunk(producer, to, chunk, count, deliveries, links)
            count += len(chunk)
            producer.poll(0)
            self._raise_delivery_error(topic, deliveries, links)
        return count

    def _produce_chunk(
        self,
        producer: Producer,
        topic: str,
        chunk: RecordChunk,
        done: int,
        deliveries: DeliveryReports,
        links: BrokerLinks,
    ) -> None:
        """``produce()`` each record of ``chunk`` (``done`` records came before it)."""
        produce = producer.produce
        if chunk.timestamps is not None or chunk.partitions is not None:
            self._produce_timestamped(producer, topic, chunk, done, deliveries, links)
            return
        if chunk.headers is None:
            records: Iterator[tuple[Any, ...]] = zip(chunk.keys, chunk.values, strict=True)
        else:
            records = zip(chunk.keys, chunk.values, chunk.headers, strict=True)
        start = position = done
        while True:
            try:
                if chunk.headers is None:
                    for position, (key, value) in enumerate(records, start):  # noqa: B007
                        produce(topic, value, key)
                else:
                    for position, (key, value, headers) in enumerate(records, start):  # noqa: B007
                        produce(topic, value, key, headers=headers)
                return
            except BufferError:
                # Queue full: wait for deliveries to drain it (backpressure), then queue the
                # record that did not fit and go on with the rest of the chunk.
                record = (key, value) if chunk.headers is None else (key, value, headers)
                self._retry_full(producer, topic, record, position, deliveries, links)
                start = position + 1
            except KafkaException as exc:
                self._refused(producer, topic, position, exc, deliveries, links)

    def _produce_timestamped(
        self,
        producer: Producer,
        topic: str,
        chunk: RecordChunk,
        done: int,
        deliveries: DeliveryReports,
        links: BrokerLinks,
    ) -> None:
        """:meth:`_produce_chunk` for records that carry their CreateTime or their partition
        (keyword arguments per record: slower, and only when a timestamp column is asked
        for, or a loss repair copies records back where they were)."""
        produce = producer.produce
        headers = chunk.headers or [None] * len(chunk)
        stamps = chunk.timestamps or [None] * len(chunk)
        # librdkafka's -1 is "the partitioner decides" (RD_KAFKA_PARTITION_UA).
        places = chunk.partitions or [-1] * len(chunk)
        records = zip(chunk.keys, chunk.values, headers, stamps, places, strict=True)
        start = position = done
        while True:
            try:
                for position, (key, value, header, stamp, place) in enumerate(records, start):  # noqa: B007
                    # librdkafka reads 0 as "now": a null timestamp is the time of writing.
                    produce(topic, value, key, place, headers=header, timestamp=stamp or 0)
                return
            except BufferError:
                record = (key, value, header, stamp, place)
                self._retry_full(producer, topic, record, position, deliveries, links)
                start = position + 1
            except KafkaException as exc:
                self._refused(producer, topic, position, exc, deliveries, links)

    def _retry_full(
        self,
        producer: Producer,
        topic: str,
        record: tuple[Any, ...],
        position: int,
        deliveries: DeliveryReports,
        links: BrokerLinks,
    ) -> None:
        """Queue ``record`` once the full queue has room; waits only while deliveries
        progress (see :meth:`_stalled`)."""
        waited: tuple[int, float] | None = None
        while True:
            producer.poll(_WAIT_SLICE_S)
            waited = self._stalled(topic, deliveries, links, waited, "the queue is full")
            try:
                if len(record) > 4:
                    producer.produce(
                        topic,
                        record[1],
                        record[0],
                        record[4],
                        headers=record[2],
                        timestamp=record[3] or 0,
                    )
                elif len(record) > 3:
                    producer.produce(
                        topic, record[1], record[0], headers=record[2], timestamp=record[3] or 0
                    )
                elif len(record) > 2:
                    producer.produce(topic, record[1], record[0], headers=record[2])
                else:
                    producer.produce(topic, record[1], record[0])
                return
            except BufferError:
                continue
            except KafkaException as exc:
                self._refused(producer, topic, position, exc, deliveries, links)

    def _refused(
        self,
        producer: Producer,
        topic: str,
        position: int,
        exc: KafkaException,
        deliveries: DeliveryReports,
        links: BrokerLinks,
    ) -> None:
        # The transaction failed (a delivery error puts it in an error state): the
        # delivery report says why, better than "Erroneous state".
        producer.poll(0)
        self._raise_delivery_error(topic, deliveries, links)
        raise WriteError(f"record {position} refused: {exc.args[0].str()}") from None

    def _produce_batch(
        self,
        producer: Producer,
        topic: str,
        chunk: RecordChunk,
        done: int,
        deliveries: DeliveryReports,
        links: BrokerLinks,
    ) -> None:
        """One ``produce_batch`` call for ``chunk`` (no headers: it would drop them).

        librdkafka tries every message of a batch, so a full queue could let a later record
        in before an earlier one: the queue is first given room for the whole chunk, and any
        message refused all the same fails the write (no reordering, no silent drop).
        """
        room = self._queue_limit - len(chunk)
        waited: tuple[int, float] | None = None
        while len(producer) > room:
            producer.poll(_WAIT_SLICE_S)
            waited = self._stalled(topic, deliveries, links, waited, "the queue is full")
        messages = [{"key": k, "value": v} for k, v in zip(chunk.keys, chunk.values, strict=True)]
        queued = producer.produce_batch(topic, messages)
        if queued == len(messages):
            return
        position, error = next(
            (i, m["_error"]) for i, m in enumerate(messages) if m.get("_error") is not None
        )
        producer.poll(0)
        self._raise_delivery_error(topic, deliveries, links)
        reason = error.str() if isinstance(error, KafkaError) else str(error)
        raise WriteError(f"record {done + position} refused: {reason}")

    def _flush(
        self, producer: Producer, topic: str, deliveries: DeliveryReports, links: BrokerLinks
    ) -> None:
        """Wait until every record is delivered, stopping at the first failed delivery or
        once no report arrives for :attr:`stall_limit_s`."""
        waited: tuple[int, float] | None = None
        while producer.flush(_WAIT_SLICE_S * 4):
            waited = self._stalled(topic, deliveries, links, waited, "flushing")
        self._raise_delivery_error(topic, deliveries, links)

    def _stalled(
        self,
        topic: str,
        deliveries: DeliveryReports,
        links: BrokerLinks,
        waited: tuple[int, float] | None,
        doing: str,
    ) -> tuple[int, float]:
        """One look while waiting on librdkafka: raise at a failed delivery or when no
        report (delivered or failed) came for :attr:`stall_limit_s`; returns the new
        (reports seen, since when) to pass back next time."""
        self._raise_delivery_error(topic, deliveries, links)
        now = time.monotonic()
        if waited is None or waited[0] != deliveries.count:
            return deliveries.count, now
        if now - waited[1] > self.stall_limit_s:
            raise WriteError(
                f"writing to {topic!r} stalled ({doing}): no delivery report for "
                f"{now - waited[1]:.0f} s (message.timeout.ms {self.delivery_timeout_ms} plus "
                f"{self._timeout_s} s){self._unreachable(links)}"
            )
        return waited

    def _raise_delivery_error(
        self, topic: str, deliveries: DeliveryReports, links: BrokerLinks
    ) -> None:
        err = deliveries.error
        if err is None:
            return
        reason = err.str()
        if err.code() == KafkaError._MSG_TIMED_OUT:
            reason += f" (not delivered within message.timeout.ms {self.delivery_timeout_ms})"
        raise WriteError(
            f"delivery to {topic!r} failed: {err.name()}: {reason}{self._unreachable(links)}"
        )

    @staticmethod
    def _unreachable(links: BrokerLinks) -> str:
        down = links.down()
        return f"; brokers not connected: {', '.join(down)}" if down else ""

    def _producer_identity(self, producer: Producer, stats: dict[str, Any]) -> tuple[int, int]:
        """Producer id and epoch of the open transaction, from librdkafka's statistics."""
        deadline = time.monotonic() + self._timeout_s
        while not (stats.get("txn_state") == "InTransaction" and stats.get("producer_id", -1) >= 0):
            if time.monotonic() > deadline:
                raise WriteError("librdkafka statistics never reported the producer id")
            producer.poll(_STATS_INTERVAL_MS / 1000)
        return int(stats["producer_id"]), int(stats["producer_epoch"])

    def _abort(self, producer: Producer, cause: BaseException) -> bool:
        """Abort the failed transaction within ``timeout_s``; True when it was."""
        try:
            producer.abort_transaction(self._timeout_s)
        except KafkaException as exc:
            log.error(
                "%s: abort after failure also failed (%s); the coordinator aborts it "
                "at its timeout, or fence the id",
                self.transactional_id,
                exc.args[0].str(),
            )
            return False
        if not self._fence_leftover():
            return False
        log.warning("%s: transaction aborted after %s", self.transactional_id, type(cause).__name__)
        return True

    def _fence_leftover(self) -> bool:
        """Make sure the coordinator holds nothing open for this id after an abort.

        librdkafka 2.16 skips EndTxn when ``abort_transaction()`` comes while its first
        AddPartitionsToTxn is in flight: it drops the late answer ("Ignoring outdated
        AddPartitionsToTxn response"), believes no partition was registered, and the
        coordinator keeps the transaction Ongoing, records and all, until its timeout
        (3 aborts in 8 right after the first chunk, on Kafka 4.4). Initialising the id
        again (InitProducerId) from a second producer makes the coordinator abort what
        is still open and write its markers before it answers; on an id with nothing
        open it is one round trip. The failure path only. Whose transaction it could end:
        only one begun on this id since the abort, i.e. by another writer of the same
        leased id at once (two runs of one interval), whose fencing the ledger already
        arbitrates; a retried Spark task starts after this one has raised."""
        try:
            Producer(self._id_settings()).init_transactions(self._timeout_s)
        except KafkaException as exc:
            log.error(
                "%s: aborted, but initialising the id again to end what the coordinator "
                "may still hold open failed (%s); recovery fences it, or its timeout ends it",
                self.transactional_id,
                exc.args[0].str(),
            )
            return False
        return True
