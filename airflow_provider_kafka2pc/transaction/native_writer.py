"""The KIP-939 native writer: a prepared transaction that the coordinator never times out.

It opens the transaction with InitProducerId v6 ``enable2Pc`` (granted only where the
broker accepts native 2PC, see :mod:`.two_phase`), adds the partitions
(AddPartitionsToTxn v3), writes the records (Produce <= v11: a classic TV1 transaction),
checks with DescribeTransactions that the coordinator holds it as a 2PC transaction, and
returns an ordinary :class:`~.committable.Committable` flagged ``kip939``.
The controller, the audit and the commit path finish it unchanged (EndTxn <= v4 with the
stored producer id and epoch), from any process.

Not the high-throughput path: pure Python, records encoded by kafka-python, one request
in flight. The fast data plane, librdkafka, cannot send InitProducerId v6.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from .. import defaults
from ..errors import ConfigurationError, ConnectionLostError, ProtocolError, WriteError
from ..naming import validate_transactional_id
from ..protocol.codes import COORDINATOR_MOVED, ErrorCode, error_name
from ..protocol.described import CoordinatorTxnState, DescribedTransaction
from ..protocol.records import ControlType, Row
from ..protocol.seam import NativeTransactionProtocol
from ..protocol.versions import ApiKey
from .committable import (
    TRANSACTION_VERSION_CLASSIC,
    TWO_PHASE_TIMEOUT_MS,
    Committable,
    PartitionRange,
)
from .controller import CLASSIC_END_TXN_MAX_VERSION
from .two_phase import refusal_message, request_two_phase

log = logging.getLogger(__name__)

#: Records per partition go out in batches of about this size (the broker's default
#: message.max.bytes is 1 MB).
BATCH_BYTES = 256 * 1024
#: Kafka's per-record framing (length, attributes, deltas, header count), roughly.
RECORD_OVERHEAD = 24
#: The coordinator's state of a transaction with records and no end yet.
ONGOING = CoordinatorTxnState.ONGOING

# -- partitioning as Java's producer does ---------------------------------------

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (a signed 32-bit int, as Java returns it)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    tail = length & ~3
    for i in range(0, tail, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """Java's ``BuiltInPartitioner.partitionForKey``: ``toPositive(murmur2(key)) % n``;
    librdkafka's ``murmur2_random`` (the classic writer's default) agrees."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


# -- the writer -------------------------------------------------------------------


class NativeWriter:
    """Writes one KIP-939 2PC transaction per :meth:`write` call on a transactional id.

    :param protocol: the broker connection (:class:`~.protocol.KafkaProtocol`).
    :param transactional_id: re-using it aborts whatever the id left open.
    :param transaction_timeout_ms: sent with InitProducerId; the coordinator stores
        Int.MaxValue for a 2PC transaction whatever is asked (docs/kip-939.md).
    :param deadline_s: bound on retries of coordinator moves and on the abort after a failure.
    :param batch_bytes: target size of one partition's batch.
    """

    def __init__(
        self,
        protocol: NativeTransactionProtocol,
        transactional_id: str,
        *,
        transaction_timeout_ms: int = defaults.TRANSACTION_TIMEOUT_MS,
        deadline_s: float = defaults.WRITER_DEADLINE_S,
        batch_bytes: int = BATCH_BYTES,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.transactional_id = validate_transactional_id(transactional_id)
        if transaction_timeout_ms <= 0:
            raise ConfigurationError("transaction_timeout_ms must be positive")
        self.transaction_timeout_ms = transaction_timeout_ms
        self._protocol = protocol
        self._deadline_s = deadline_s
        self._batch_bytes = batch_bytes
        self._clock = clock
        self._monotonic = monotonic
        self._sleep = sleep

    def write(self, topic: str, records: Iterable[Row]) -> Committable:
        """Write ``records`` into a new 2PC transaction on ``topic`` and leave it open.

        An empty input opens nothing. A refused grant raises ConfigurationError with
        nothing written; any later failure aborts the transaction and raises WriteError.
        """
        if not isinstance(topic, str) or not topic:
            raise ConfigurationError("topic must be a non-empty string")
        leaders = self._leaders(topic)
        iterator = iter(records)
        first = next(iterator, None)
        start_ms = int(self._clock() * 1000)
        if first is None:
            log.info("%s: no records, no transaction opened", self.transactional_id)
            return Committable.empty(self.transactional_id, start_ms, self.transaction_timeout_ms)
        grant = request_two_phase(
            self._protocol,
            self.transactional_id,
            self.transaction_timeout_ms,
            deadline_s=self._deadline_s,
            clock=self._monotonic,
            sleep=self._sleep,
        )
        if not grant.granted:
            raise ConfigurationError(refusal_message(self.transactional_id, grant.answer.error))
        txn = _OpenTransaction(
            self._protocol,
            grant.node,
            self.transactional_id,
            grant.answer.producer_id,
            grant.answer.producer_epoch,
            topic,
            leaders,
            self._batch_bytes,
            deadline=self._monotonic() + self._deadline_s,
            monotonic=self._monotonic,
            sleep=self._sleep,
        )
        try:
            for row in itertools.chain((first,), iterator):
                txn.append(row)
            txn.flush(list(txn.buffers))
            described = self._check_coordinator(txn)
        except BaseException as exc:
            ended = self._abort(txn)
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            if isinstance(exc, ConfigurationError):  # bad input stays bad input
                raise ConfigurationError(f"{exc} ({ended})") from None
            raise WriteError(f"native write to {topic!r} failed, {ended}: {exc}") from exc
        started = (
            described.transaction_start_time_ms
            if described.transaction_start_time_ms > 0
            else start_ms
        )
        committable = Committable(
            transactional_id=self.transactional_id,
            producer_id=txn.producer_id,
            producer_epoch=txn.epoch,
            transaction_version=TRANSACTION_VERSION_CLASSIC,
            partitions=txn.ranges(),
            record_count=txn.count,
            start_time_ms=started,
            transaction_timeout_ms=described.transaction_timeout_ms,
            kip939=True,
        )
        log.info(
            "%s: prepared %d records in %d partitions as a 2PC transaction (pid %d, epoch %d)",
            self.transactional_id,
            committable.record_count,
            len(committable.partitions),
            txn.producer_id,
            txn.epoch,
        )
        return committable

    # -- steps ----------------------------------------------------------------

    def _leaders(self, topic: str) -> dict[int, int]:
        """Fail before anything is opened when the topic does not exist."""
        try:
            leaders = self._protocol.partition_leaders(topic)
        except ProtocolError as exc:
            raise ConfigurationError(f"{exc}; create the topic first") from None
        if not leaders:
            raise ConfigurationError(f"topic {topic!r} has no partitions; create it first")
        return leaders

    def _check_coordinator(self, txn: _OpenTransaction) -> DescribedTransaction:
        """The coordinator must hold our producer id/epoch, Ongoing, with the 2PC timeout:
        anything else is not a transaction that waits for us."""
        described = self._protocol.describe_transaction(self.transactional_id)
        expected = (ONGOING, txn.producer_id, txn.epoch, TWO_PHASE_TIMEOUT_MS)
        got = (
            (None, None, None, None)
            if described is None
            else (
                described.state,
                described.producer_id,
                described.producer_epoch,
                described.transaction_timeout_ms,
            )
        )
        if described is None or got != expected:
            raise WriteError(
                f"the coordinator holds {self.transactional_id!r} as state {got[0]}, pid "
                f"{got[1]}, epoch {got[2]}, timeout {got[3]} ms; expected {ONGOING}, pid "
                f"{txn.producer_id}, epoch {txn.epoch}, timeout {TWO_PHASE_TIMEOUT_MS} ms (2PC)"
            )
        return described

    def _abort(self, txn: _OpenTransaction) -> str:
        """EndTxn(abort) for our own pid/epoch; says what became of the transaction."""
        if not txn.added:
            return "nothing was opened"
        version = self._protocol.api_version(ApiKey.END_TXN, cap=CLASSIC_END_TXN_MAX_VERSION)
        deadline = self._monotonic() + self._deadline_s
        node, code, attempt = txn.node, ErrorCode.UNKNOWN_SERVER_ERROR, 0
        while version is not None:
            attempt += 1
            try:
                code = self._protocol.end_txn(
                    node,
                    self.transactional_id,
                    txn.producer_id,
                    txn.epoch,
                    ControlType.ABORT,
                    version,
                )
            except ConnectionLostError:
                code = ErrorCode.COORDINATOR_NOT_AVAILABLE
            if code == ErrorCode.NONE:
                log.warning("%s: 2PC transaction aborted after a failure", self.transactional_id)
                return "transaction aborted"
            retriable = code in COORDINATOR_MOVED or code == ErrorCode.CONCURRENT_TRANSACTIONS
            if not retriable or self._monotonic() >= deadline:
                break
            if code in COORDINATOR_MOVED:
                with contextlib.suppress(ConnectionLostError):
                    _, node = self._protocol.find_transaction_coordinator(self.transactional_id)
            self._sleep(min(1.0, 0.05 * 2 ** (attempt - 1)))
        log.error(
            "%s: abort after a failure answered %s; a 2PC transaction never times out: "
            "run `kafka2pc fence --transactional-id %s`",
            self.transactional_id,
            error_name(code),
            self.transactional_id,
        )
        return (
            f"and the abort failed too ({error_name(code)}): the transaction stays open until "
            f"`kafka2pc fence --transactional-id {self.transactional_id}`"
        )


class _OpenTransaction:
    """One open 2PC transaction being written: per-partition buffers, sequences, offsets."""

    def __init__(
        self,
        protocol: NativeTransactionProtocol,
        node: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        topic: str,
        leaders: Mapping[int, int],
        batch_bytes: int,
        *,
        deadline: float,
        monotonic: Callable[[], float],
        sleep: Callable[[float], None],
    ) -> None:
        self.protocol = protocol
        self.node = node
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.epoch = epoch
        self.topic = topic
        self.leaders = dict(leaders)
        self.partitions = sorted(leaders)
        self.batch_bytes = batch_bytes
        self.deadline = deadline
        self.monotonic = monotonic
        self.sleep = sleep
        self.buffers: dict[int, list[Row]] = {}
        self.sizes: dict[int, int] = {}
        self.added: set[int] = set()
        self.sequence: dict[int, int] = {}  # next base sequence = records written so far
        self.first: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.count = 0
        self._round_robin = itertools.cycle(self.partitions)

    def append(self, row: Row) -> None:
        key, value = row[0], row[1]
        for name, part in (("key", key), ("value", value)):
            if part is not None and not isinstance(part, bytes | bytearray | memoryview):
                raise ConfigurationError(
                    f"record {self.count}: {name} must be bytes or None, got {type(part).__name__}"
                )
        if key is None:
            partition = next(self._round_robin)
        else:
            partition = self.partitions[partition_for_key(bytes(key), len(self.partitions))]
        size = RECORD_OVERHEAD + len(key or b"") + len(value or b"")
        if len(row) > 2 and row[2]:
            size += sum(len(h) + len(v or b"") + 4 for h, v in row[2])
        self.buffers.setdefault(partition, []).append(row)
        self.sizes[partition] = self.sizes.get(partition, 0) + size
        self.count += 1
        if self.sizes[partition] >= self.batch_bytes:
            self.flush([partition])

    def flush(self, partitions: Sequence[int]) -> None:
        """Send the buffered batch of each partition: one Produce request per leader."""
        batches = {p: self.buffers.pop(p) for p in partitions if self.buffers.get(p)}
        for p in partitions:
            self.sizes.pop(p, None)
        if not batches:
            return
        self._add(sorted(set(batches) - self.added))
        by_leader: dict[int, dict[int, list[Row]]] = {}
        for p, rows in batches.items():
            by_leader.setdefault(self.leaders[p], {})[p] = rows
        for leader, request in sorted(by_leader.items()):
            answers = self.protocol.produce_transactional(
                leader,
                self.transactional_id,
                self.producer_id,
                self.epoch,
                self.topic,
                request,
                kip890=False,
                base_sequence={p: self.sequence.get(p, 0) for p in request},
            )
            for p, rows in request.items():
                answer = answers.get(p)
                if answer is None or answer.error != ErrorCode.NONE:
                    why = "no answer" if answer is None else error_name(answer.error)
                    raise WriteError(f"Produce to {self.topic}-{p}: {why}")
                self.first.setdefault(p, answer.base_offset)
                self.last[p] = answer.base_offset + len(rows) - 1
                self.sequence[p] = self.sequence.get(p, 0) + len(rows)

    def _add(self, partitions: list[int]) -> None:
        """AddPartitionsToTxn before the first batch of a partition (classic TV1)."""
        attempt = 0
        while partitions:
            attempt += 1
            answer = self.protocol.add_partitions_to_txn(
                self.node,
                self.transactional_id,
                self.producer_id,
                self.epoch,
                self.topic,
                partitions,
            )
            failed = {p: e for p, e in answer.items() if e != ErrorCode.NONE}
            self.added.update(p for p in partitions if p not in failed)
            busy = all(e == ErrorCode.CONCURRENT_TRANSACTIONS for e in failed.values())
            if not failed:
                return
            if not busy or self.monotonic() >= self.deadline:
                names = {p: error_name(e) for p, e in failed.items()}
                raise WriteError(f"AddPartitionsToTxn for {self.topic}: {names}")
            partitions = sorted(failed)
            self.sleep(min(1.0, 0.05 * 2 ** (attempt - 1)))

    def ranges(self) -> tuple[PartitionRange, ...]:
        return tuple(
            PartitionRange(self.topic, p, self.first[p], self.last[p], self.sequence[p])
            for p in sorted(self.sequence)
        )
