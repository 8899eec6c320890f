"""Reading a partition's raw log and its transaction markers.

Outcomes are decided from the commit/abort markers in the log, never from a
read_committed consumer or the broker's aborted-transactions index: those are
the parts some Kafka-compatible brokers get wrong, the markers are the truth.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .committable import Committable, PartitionRange
from .errors import ProtocolError
from .protocol import ControlType, ErrorCode, LogBatch, TransactionProtocol, error_name

#: How long a fetch waits for data (not 0: the embedded broker answers a zero-wait
#: fetch with nothing at all); it grows with each empty answer below the high watermark.
END_OF_LOG_WAIT_MS = 5
MAX_EMPTY_ANSWERS = 20


class LogReader:
    """Walks partitions batch by batch, control batches included."""

    def __init__(self, protocol: TransactionProtocol) -> None:
        self._protocol = protocol
        self._leaders: dict[str, dict[int, int]] = {}

    def partitions(self, topic: str) -> list[int]:
        return sorted(self._leaders_of(topic))

    def _leaders_of(self, topic: str) -> dict[int, int]:
        if topic not in self._leaders:
            self._leaders[topic] = self._protocol.partition_leaders(topic)
        return self._leaders[topic]

    def batches(
        self, topic: str, partition: int, start: int = 0, *, with_keys: bool = False
    ) -> Iterator[LogBatch]:
        """Every batch holding an offset >= ``start``, up to the end of the log.

        The end is the high watermark of the latest answer. An empty answer below it is
        not the end (a loaded broker may answer a short fetch with nothing): it is asked
        again, a bounded number of times.
        """
        leaders = self._leaders_of(topic)
        if partition not in leaders:
            raise ProtocolError(
                f"topic {topic!r} has no partition {partition}", "UNKNOWN_TOPIC_OR_PARTITION"
            )
        offset, empty = start, 0
        while True:
            answer = self._protocol.fetch(
                leaders[partition],
                topic,
                partition,
                offset,
                max_wait_ms=END_OF_LOG_WAIT_MS * (1 + empty),
                with_keys=with_keys,
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
            if offset >= answer.high_watermark:
                return
            if not fresh:
                empty += 1
                if empty > MAX_EMPTY_ANSWERS:
                    raise ProtocolError(
                        f"fetch {topic}-{partition}@{offset}: {empty} empty answers below "
                        f"the high watermark {answer.high_watermark}",
                        "REQUEST_TIMED_OUT",
                    )

    def marker_after(self, producer_id: int, part: PartitionRange) -> ControlType | None:
        """The marker that ended ``producer_id``'s transaction holding ``part``, if any yet.

        A producer has at most one open transaction per partition, so the first
        control batch of that producer after the range's last record is its end.
        """
        for batch in self.batches(part.topic, part.partition, part.last_offset):
            if (
                batch.control is not None
                and batch.producer_id == producer_id
                and batch.base_offset > part.last_offset
            ):
                return batch.control
        return None


@dataclass(frozen=True)
class TransactionState:
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


def transaction_state(reader: LogReader, committable: Committable) -> TransactionState:
    return TransactionState(
        tuple(reader.marker_after(committable.producer_id, part) for part in committable.partitions)
    )
