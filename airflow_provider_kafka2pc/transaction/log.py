"""Reading a partition's raw log and its transaction markers.

Outcomes are decided from the commit/abort markers in the log, never from a
read_committed consumer or the broker's aborted-transactions index: those are
the parts some Kafka-compatible brokers get wrong, the markers are the truth.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import BrokerMovedError, ProtocolError
from ..protocol.codes import LEADER_MOVED, ErrorCode, error_name
from ..protocol.failover import Failover
from ..protocol.fetch import FetchAnswer
from ..protocol.records import ControlType, RecordBatch
from ..protocol.seam import TransactionProtocol
from .committable import Committable, PartitionRange

#: How long a fetch may wait for data. Apache Kafka answers at once when data is there,
#: so this costs only a fetch at the very end of the log; not 0, because some
#: Kafka-compatible brokers (Tansu) answer a zero-wait fetch with nothing. It grows with
#: each empty answer below the high watermark.
END_OF_LOG_WAIT_MS = 5
MAX_EMPTY_ANSWERS = 20


class LogReader:
    """Walks partitions batch by batch, control batches included.

    Every broker call (metadata, fetch) rides a failover: a lost connection or a leader
    that moved sends it to the leader the cluster names now, until the deadline (the
    caller's ``deadline``, a :func:`time.monotonic`-style instant of ``failover``'s
    clock, else ``failover.policy.deadline_s`` per call).
    """

    def __init__(self, protocol: TransactionProtocol, failover: Failover | None = None) -> None:
        self._protocol = protocol
        self._failover = failover or Failover()
        self._leaders: dict[str, dict[int, int]] = {}
        self._log_starts: dict[tuple[str, int], int] = {}

    def partitions(self, topic: str, *, deadline: float | None = None) -> list[int]:
        return sorted(self._leaders_of(topic, deadline))

    def _leaders_of(
        self, topic: str, deadline: float | None, partition: int | None = None
    ) -> dict[int, int]:
        """The topic's partition leaders, looked up once, and again for a ``partition`` the
        answer lacks: partitions added since (a loss repair's records may land there)."""
        cached = self._leaders.get(topic)
        if cached is None or (partition is not None and partition not in cached):
            self._leaders[topic] = self._failover.run(
                f"metadata of topic {topic!r}",
                lambda: self._protocol.partition_leaders(topic),
                deadline=deadline,
            )
        return self._leaders[topic]

    def _leader(self, topic: str, partition: int, until: float) -> int:
        leader = self._leaders_of(topic, until, partition).get(partition)
        if leader is None:
            raise ProtocolError(
                f"topic {topic!r} has no partition {partition}", "UNKNOWN_TOPIC_OR_PARTITION"
            )
        if leader < 0:
            raise BrokerMovedError(
                f"{topic}-{partition} has no leader (an election is under way)",
                "LEADER_NOT_AVAILABLE",
            )
        return leader

    def _fetch(
        self, topic: str, partition: int, offset: int, deadline: float | None, **options: Any
    ) -> FetchAnswer:
        """Fetch from the partition's leader; when it moved or died, look it up again."""
        until = self._failover.deadline() if deadline is None else deadline

        def attempt() -> FetchAnswer:
            leader = self._leader(topic, partition, until)
            answer = self._protocol.fetch(leader, topic, partition, offset, **options)
            if answer.error in LEADER_MOVED:
                name = error_name(answer.error)
                raise BrokerMovedError(f"fetch from node {leader}: {name}", name)
            if answer.log_start_offset >= 0:
                self._log_starts[(topic, partition)] = answer.log_start_offset
            return answer

        return self._failover.run(
            f"fetch {topic}-{partition}@{offset}",
            attempt,
            deadline=until,
            on_retry=lambda _: self._leaders.pop(topic, None),
        )

    def known_log_start(self, topic: str, partition: int) -> int | None:
        """Where the partition's log started at the latest fetch answer that said (Fetch
        v5+), else None."""
        return self._log_starts.get((topic, partition))

    def log_start(self, topic: str, partition: int, *, deadline: float | None = None) -> int:
        """Where the partition's log starts now (ListOffsets of its leader): past the
        records retention, DeleteRecords or a truncation removed."""
        until = self._failover.deadline() if deadline is None else deadline

        def attempt() -> int:
            leader = self._leader(topic, partition, until)
            code, offset = self._protocol.log_start_offset(leader, topic, partition)
            if code in LEADER_MOVED:
                name = error_name(code)
                raise BrokerMovedError(f"log start from node {leader}: {name}", name)
            if code != ErrorCode.NONE:
                name = error_name(code)
                raise ProtocolError(f"log start of {topic}-{partition}: {name}", name)
            self._log_starts[(topic, partition)] = offset
            return offset

        return self._failover.run(
            f"log start of {topic}-{partition}",
            attempt,
            deadline=until,
            on_retry=lambda _: self._leaders.pop(topic, None),
        )

    def batches(
        self,
        topic: str,
        partition: int,
        start: int = 0,
        *,
        with_keys: bool = False,
        with_records: bool = False,
        deadline: float | None = None,
        end: int | None = None,
    ) -> Iterator[RecordBatch]:
        """Every batch holding an offset >= ``start``, up to the end of the log (or the
        batch holding ``end``); ``with_records`` decodes their data records too.

        The end is the high watermark of the latest answer (with READ_UNCOMMITTED every
        record below it is readable). Apache Kafka always returns at least the batch at
        the offset; an empty answer below the high watermark (seen from a loaded
        Kafka-compatible broker) is not the end: it is asked again, a bounded number of
        times.
        """
        if partition not in self._leaders_of(topic, deadline, partition):
            raise ProtocolError(
                f"topic {topic!r} has no partition {partition}", "UNKNOWN_TOPIC_OR_PARTITION"
            )
        offset, empty = start, 0
        while True:
            answer = self._fetch(
                topic,
                partition,
                offset,
                deadline,
                max_wait_ms=END_OF_LOG_WAIT_MS * (1 + empty),
                with_keys=with_keys,
                **({"with_records": True} if with_records else {}),
            )
            if answer.error == ErrorCode.OFFSET_OUT_OF_RANGE and offset > start:
                return
            if answer.error != ErrorCode.NONE:
                name = error_name(answer.error)
                raise ProtocolError(f"fetch {topic}-{partition}@{offset}: {name}", name)
            fresh = [b for b in answer.batches if b.last_offset >= offset]
            if fresh:
                yield from fresh
                offset, empty = fresh[-1].last_offset + 1, 0
            if offset >= answer.high_watermark or (end is not None and offset > end):
                return
            if not fresh:
                empty += 1
                if empty > MAX_EMPTY_ANSWERS:
                    raise ProtocolError(
                        f"fetch {topic}-{partition}@{offset}: {empty} empty answers below "
                        f"the high watermark {answer.high_watermark}",
                        "REQUEST_TIMED_OUT",
                    )

    def log_ends(
        self, parts: Iterable[PartitionRange], *, deadline: float | None = None
    ) -> dict[tuple[str, int], int]:
        """The current end (high watermark) of each partition, with one small fetch each."""
        known: dict[tuple[str, int], int] = {}
        for part in parts:
            key = (part.topic, part.partition)
            known[key] = max(known.get(key, 0), part.last_offset)
        ends = {}
        for (topic, partition), offset in known.items():
            answer = self._fetch(
                topic, partition, offset, deadline, max_wait_ms=END_OF_LOG_WAIT_MS, max_bytes=1
            )
            if answer.error != ErrorCode.NONE:
                name = error_name(answer.error)
                raise ProtocolError(f"fetch {topic}-{partition}@{offset}: {name}", name)
            ends[(topic, partition)] = max(answer.high_watermark, offset + 1)
        return ends

    def markers_after(
        self,
        spans: Sequence[tuple[int, PartitionRange]],
        since: Mapping[tuple[str, int], int] | None = None,
        *,
        deadline: float | None = None,
    ) -> list[ControlType | None]:
        """For each (producer id, range), the marker that ended that transaction, if any yet.

        A producer has at most one open transaction per partition, so the first control
        batch of that producer after the range's last record is its end. Each partition
        is read once, from the earliest range on it (or from ``since``, to look only at
        what was appended after a known end), however many spans share it.
        """
        found: list[ControlType | None] = [None] * len(spans)
        by_partition: dict[tuple[str, int], dict[int, list[int]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for index, (producer_id, part) in enumerate(spans):
            by_partition[(part.topic, part.partition)][producer_id].append(index)
        for (topic, partition), waiting in by_partition.items():
            start = min(spans[i][1].last_offset for ids in waiting.values() for i in ids)
            if since is not None:
                start = max(start, since.get((topic, partition), start))
            for batch in self.batches(topic, partition, start, deadline=deadline):
                if batch.control is None or batch.producer_id not in waiting:
                    continue
                indexes = waiting[batch.producer_id]
                for i in [i for i in indexes if batch.base_offset > spans[i][1].last_offset]:
                    found[i] = batch.control
                    indexes.remove(i)
                if not indexes:
                    del waiting[batch.producer_id]
                    if not waiting:
                        break
        return found


@dataclass(frozen=True)
class MarkerView:
    """What the log says of one committable: a marker (or None) per partition."""

    markers: tuple[ControlType | None, ...]

    @property
    def committed(self) -> bool:
        return bool(self.markers) and all(m is ControlType.COMMIT for m in self.markers)

    @property
    def aborted(self) -> bool:
        return bool(self.markers) and all(m is ControlType.ABORT for m in self.markers)

    @property
    def open(self) -> bool:
        return all(m is None for m in self.markers)

    @property
    def contradictory(self) -> bool:
        return ControlType.COMMIT in self.markers and ControlType.ABORT in self.markers


def marker_views(
    reader: LogReader,
    committables: Sequence[Committable],
    since: Mapping[tuple[str, int], int] | None = None,
    *,
    deadline: float | None = None,
) -> list[MarkerView]:
    """What the log says of each committable, reading each partition once (from ``since``)."""
    spans = [(c.producer_id, part) for c in committables for part in c.partitions]
    markers = iter(reader.markers_after(spans, since, deadline=deadline))
    return [MarkerView(tuple(next(markers) for _ in c.partitions)) for c in committables]
