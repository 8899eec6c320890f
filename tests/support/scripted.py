"""The scripted broker at the protocol seam, for answers the embedded broker cannot give.

It stands in for :class:`KafkaProtocol`: EndTxn / FindCoordinator / InitProducerId
answer from a script, DescribeTransactions from a table, and an in-memory log holds data
and control batches, so the controller's log verification and the decision's marker
reading run unchanged against it. The integration tier scripts the controller and the
failover transport with it; the unit tier (``ScriptedBroker.holding``) the decision's
``not_open``.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from airflow_provider_kafka2pc.errors import ConnectionLostError, ProtocolError
from airflow_provider_kafka2pc.protocol.codes import ErrorCode
from airflow_provider_kafka2pc.protocol.described import CoordinatorTxnState, DescribedTransaction
from airflow_provider_kafka2pc.protocol.fetch import FetchAnswer
from airflow_provider_kafka2pc.protocol.producer import InitProducerIdAnswer
from airflow_provider_kafka2pc.protocol.records import ControlType, RecordBatch
from airflow_provider_kafka2pc.protocol.versions import ApiKey
from airflow_provider_kafka2pc.transaction.committable import (
    TRANSACTION_VERSION_CLASSIC,
    Committable,
    PartitionRange,
)

COORDINATOR = 7
DROP = "drop"  # scripted answer: the broker drops the connection


@dataclass(frozen=True)
class Answer:
    """One scripted EndTxn answer and what the broker does to the log with it."""

    code: int | str
    marker: ControlType | None = None


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class ScriptedBroker:
    def __init__(
        self,
        end_txn: list[Answer] | None = None,
        find: list[int] | None = None,
        init_producer_id: list[int] | None = None,
        end_txn_max_version: int = 4,
    ) -> None:
        self.end_txn_script = deque(end_txn or [])
        self.find_script = deque(find or [])
        self.init_script = deque(init_producer_id or [])
        self.versions = {
            ApiKey.END_TXN: end_txn_max_version,
            ApiKey.FETCH: 11,
            ApiKey.METADATA: 8,
            ApiKey.FIND_COORDINATOR: 3,
            ApiKey.INIT_PRODUCER_ID: 4,
        }
        self.logs: dict[tuple[str, int], list[RecordBatch]] = defaultdict(list)
        self.txns: dict[str, Committable] = {}
        self.calls: list[tuple] = []
        self.empty_answers = 0
        self.not_leader_answers = 0
        #: The next this many fetches / metadata requests find the node dead.
        self.dropped_fetches = 0
        self.dropped_metadata = 0
        #: DescribeTransactions (answered once ``versions`` has it, see :meth:`holding`):
        #: a state and (producer id, epoch) per id, by default Ongoing with the recorded
        #: ones; ``forgotten`` ids are not returned; ``describe_fails`` raises.
        self.states: dict[str, CoordinatorTxnState] = {}
        self.identities: dict[str, tuple[int, int]] = {}
        self.forgotten: set[str] = set()
        self.describe_fails = False

    @classmethod
    def holding(
        cls,
        committables: Iterable[Committable] = (),
        *,
        states: Mapping[str, CoordinatorTxnState] | None = None,
        identities: Mapping[str, tuple[int, int]] | None = None,
        forgotten: Iterable[str] = (),
        markers: Mapping[str, ControlType] | None = None,
        can_describe: bool = True,
        describe_fails: bool = False,
    ) -> ScriptedBroker:
        """A broker whose log holds ``committables`` (the opened ones) where they were
        recorded, each followed by its entry in ``markers`` (default none: open), and whose
        coordinator answers DescribeTransactions unless ``can_describe`` is False (Kafka <
        3.0), so a table row names only what differs from "every transaction is Ongoing
        with its recorded producer id and epoch"."""
        broker = cls()
        for c in committables:
            if not c.is_empty:
                broker.record(c, (markers or {}).get(c.transactional_id))
        broker.states = dict(states or {})
        broker.identities = dict(identities or {})
        broker.forgotten = set(forgotten)
        broker.describe_fails = describe_fails
        if can_describe:
            broker.versions[ApiKey.DESCRIBE_TRANSACTIONS] = 0
        return broker

    # -- building the log ---------------------------------------------------

    def prepare(
        self,
        tid: str = "tx-1",
        records: int = 10,
        partitions: int = 2,
        transaction_version: int = TRANSACTION_VERSION_CLASSIC,
        producer_id: int = 42,
        epoch: int = 3,
    ) -> Committable:
        """Append an open transaction's data batches and return its committable."""
        parts = []
        for p in range(partitions):
            log = self.logs[("topic", p)]
            base = log[-1].last_offset + 1 if log else 0
            log.append(
                RecordBatch(base, base + records - 1, producer_id, epoch, True, None, records)
            )
            parts.append(PartitionRange("topic", p, base, base + records - 1, records))
        committable = Committable(
            tid,
            producer_id,
            epoch,
            transaction_version,
            tuple(parts),
            records * partitions,
            0,
            60_000,
        )
        self.txns[tid] = committable
        return committable

    def record(self, committable: Committable, marker: ControlType | None = None) -> None:
        """Append a transaction's data batches at the offsets its committable recorded,
        then ``marker`` right after each partition's last record (None: left open)."""
        c = committable
        self.txns[c.transactional_id] = c
        for part in c.partitions:
            log = self.logs[(part.topic, part.partition)]
            log.append(
                RecordBatch(
                    part.first_offset,
                    part.last_offset,
                    c.producer_id,
                    c.producer_epoch,
                    True,
                    None,
                    part.record_count,
                )
            )
            if marker is not None:
                end = part.last_offset + 1
                log.append(RecordBatch(end, end, c.producer_id, c.producer_epoch, True, marker, 1))

    def write_marker(self, tid: str, marker: ControlType) -> None:
        c = self.txns[tid]
        for part in c.partitions:
            log = self.logs[(part.topic, part.partition)]
            offset = log[-1].last_offset + 1
            log.append(
                RecordBatch(offset, offset, c.producer_id, c.producer_epoch, True, marker, 1)
            )

    # -- TransactionProtocol ------------------------------------------------

    def api_version(self, api: ApiKey, cap: int | None = None) -> int | None:
        top = self.versions.get(api)
        if top is None:
            return None
        return top if cap is None else min(top, cap)

    def find_transaction_coordinator(self, transactional_id: str) -> tuple[int, int]:
        self.calls.append(("find", transactional_id))
        code = self.find_script.popleft() if self.find_script else ErrorCode.NONE
        return code, COORDINATOR

    def end_txn(
        self,
        node: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        result: ControlType,
        version: int,
    ) -> int:
        self.calls.append(("end_txn", transactional_id, producer_id, epoch, result, version))
        assert node == COORDINATOR
        answer = self.end_txn_script.popleft()
        if answer.marker is not None:
            self.write_marker(transactional_id, answer.marker)
        if answer.code == DROP:
            raise ConnectionLostError("scripted: connection dropped")
        return int(answer.code)

    def init_producer_id(
        self, node: int, transactional_id: str, transaction_timeout_ms: int
    ) -> InitProducerIdAnswer:
        self.calls.append(("init_producer_id", transactional_id))
        code = self.init_script.popleft() if self.init_script else ErrorCode.NONE
        if code == ErrorCode.NONE and transactional_id in self.txns:
            self.write_marker(transactional_id, ControlType.ABORT)
        return InitProducerIdAnswer(code, 42, 4)

    def describe_transactions(self, transactional_ids: list[str]) -> list[DescribedTransaction]:
        self.calls.append(("describe", list(transactional_ids)))
        if self.api_version(ApiKey.DESCRIBE_TRANSACTIONS) is None:
            raise ProtocolError("scripted: no DescribeTransactions", "UNSUPPORTED_VERSION")
        if self.describe_fails:
            raise ProtocolError("scripted: DescribeTransactions failed", "UNKNOWN_SERVER_ERROR")
        return [self._describe(t) for t in transactional_ids if t not in self.forgotten]

    def _describe(self, tid: str) -> DescribedTransaction:
        c = self.txns[tid]
        pid, epoch = self.identities.get(tid, (c.producer_id, c.producer_epoch))
        return DescribedTransaction(
            transactional_id=tid,
            state=self.states.get(tid, CoordinatorTxnState.ONGOING),
            producer_id=pid,
            producer_epoch=epoch,
            coordinator=COORDINATOR,
            transaction_timeout_ms=c.transaction_timeout_ms,
            transaction_start_time_ms=c.start_time_ms,
            partitions=tuple(f"{p.topic}-{p.partition}" for p in c.partitions),
        )

    def partition_leaders(self, topic: str) -> dict[int, int]:
        self.calls.append(("metadata", topic))
        if self.dropped_metadata:
            self.dropped_metadata -= 1
            raise ConnectionLostError("scripted: MetadataRequest to node 1: KafkaConnectionError")
        return {p: 1 for (t, p) in self.logs if t == topic}

    def fetch(
        self,
        node: int,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_wait_ms: int,
        with_keys: bool = False,
        max_bytes: int = 0,
    ) -> FetchAnswer:
        self.calls.append(("fetch", topic, partition, offset))
        log = self.logs[(topic, partition)]
        end = log[-1].last_offset + 1 if log else 0
        if self.dropped_fetches:
            self.dropped_fetches -= 1  # the leader died
            raise ConnectionLostError(f"scripted: FetchRequest to node {node}: refused")
        if self.not_leader_answers:
            self.not_leader_answers -= 1  # leadership moved to another broker
            return FetchAnswer(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, [])
        if self.empty_answers and offset < end:
            self.empty_answers -= 1  # a loaded broker's empty answer in the middle of the log
            return FetchAnswer(ErrorCode.NONE, end, [])
        return FetchAnswer(ErrorCode.NONE, end, [b for b in log if b.last_offset >= offset])

    def close(self) -> None:
        pass

    def count(self, kind: str) -> int:
        return sum(1 for call in self.calls if call[0] == kind)

    @property
    def described(self) -> list[list[str]]:
        """The ids of each DescribeTransactions asked, in order."""
        return [call[1] for call in self.calls if call[0] == "describe"]

    @property
    def fetched(self) -> list[tuple[str, int, int]]:
        """(topic, partition, offset) of each fetch asked, in order."""
        return [call[1:] for call in self.calls if call[0] == "fetch"]
