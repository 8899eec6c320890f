"""A tiny scripted broker at the seam ``decision.not_open`` asks: DescribeTransactions from
a script, or (a broker without it) the partitions' logs with the markers the script wrote.

Built from the committables it is asked about, so a table row names only what differs
from "every transaction is Ongoing with its recorded producer id and epoch".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from airflow_provider_kafka2pc.errors import ProtocolError
from airflow_provider_kafka2pc.protocol.codes import ErrorCode
from airflow_provider_kafka2pc.protocol.described import CoordinatorTxnState, DescribedTransaction
from airflow_provider_kafka2pc.protocol.fetch import FetchAnswer
from airflow_provider_kafka2pc.protocol.records import ControlType, RecordBatch
from airflow_provider_kafka2pc.protocol.versions import ApiKey
from airflow_provider_kafka2pc.transaction.committable import Committable

COORDINATOR = 7


class ScriptedCoordinator:
    """What the coordinator says of each transaction, and what the log holds.

    :param states: DescribeTransactions state per id (default Ongoing).
    :param identities: (producer id, epoch) per id (default the committable's).
    :param forgotten: ids DescribeTransactions does not return at all.
    :param markers: the marker written after an id's records (default none: open).
    :param can_describe: False for a broker without DescribeTransactions (Kafka < 3.0).
    :param describe_fails: DescribeTransactions raises (an unknown id and kin).
    """

    def __init__(
        self,
        committables: Iterable[Committable] = (),
        *,
        states: Mapping[str, CoordinatorTxnState] | None = None,
        identities: Mapping[str, tuple[int, int]] | None = None,
        forgotten: Iterable[str] = (),
        markers: Mapping[str, ControlType] | None = None,
        can_describe: bool = True,
        describe_fails: bool = False,
    ) -> None:
        self._txns = {c.transactional_id: c for c in committables if not c.is_empty}
        self._states = dict(states or {})
        self._identities = dict(identities or {})
        self._forgotten = set(forgotten)
        self._can_describe = can_describe
        self._describe_fails = describe_fails
        self.described: list[list[str]] = []
        self.fetched: list[tuple[str, int, int]] = []
        self._logs: dict[tuple[str, int], list[RecordBatch]] = defaultdict(list)
        for c in self._txns.values():
            for part in c.partitions:
                log = self._logs[(part.topic, part.partition)]
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
                marker = (markers or {}).get(c.transactional_id)
                if marker is not None:
                    end = part.last_offset + 1
                    log.append(
                        RecordBatch(end, end, c.producer_id, c.producer_epoch, True, marker, 1)
                    )

    # -- what not_open asks -----------------------------------------------------------------

    def api_version(self, api: ApiKey, cap: int | None = None) -> int | None:
        if api is ApiKey.DESCRIBE_TRANSACTIONS and self._can_describe:
            return 0
        return None

    def describe_transactions(self, transactional_ids: list[str]) -> list[DescribedTransaction]:
        self.described.append(list(transactional_ids))
        if self._describe_fails:
            raise ProtocolError("scripted: DescribeTransactions failed", "UNKNOWN_SERVER_ERROR")
        return [self._describe(t) for t in transactional_ids if t not in self._forgotten]

    def _describe(self, tid: str) -> DescribedTransaction:
        c = self._txns[tid]
        pid, epoch = self._identities.get(tid, (c.producer_id, c.producer_epoch))
        return DescribedTransaction(
            transactional_id=tid,
            state=self._states.get(tid, CoordinatorTxnState.ONGOING),
            producer_id=pid,
            producer_epoch=epoch,
            coordinator=COORDINATOR,
            transaction_timeout_ms=c.transaction_timeout_ms,
            transaction_start_time_ms=c.start_time_ms,
            partitions=tuple(f"{p.topic}-{p.partition}" for p in c.partitions),
        )

    # -- what the log reader asks (markers) -------------------------------------------------

    def partition_leaders(self, topic: str) -> dict[int, int]:
        return {p: 1 for (t, p) in self._logs if t == topic}

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
        self.fetched.append((topic, partition, offset))
        log = self._logs[(topic, partition)]
        end = log[-1].last_offset + 1 if log else 0
        return FetchAnswer(ErrorCode.NONE, end, [b for b in log if b.last_offset >= offset])

    def close(self) -> None:
        pass
