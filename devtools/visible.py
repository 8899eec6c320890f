"""What a read_committed consumer sees: the second, independent witness beside the audit.

The audit applies the log's markers itself; this module asks the broker, through an
ordinary confluent-kafka consumer with ``isolation.level=read_committed``, which is
what downstream applications do. Aborted records must be invisible and an open
transaction holds the partition back at its last stable offset (``stalled``).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, TopicPartition


@dataclass
class Visible:
    """Records a read_committed consumer received, per partition, and where it stopped."""

    topic: str
    counts: dict[int, int] = field(default_factory=dict)
    keys: Counter[bytes | None] = field(default_factory=Counter)
    #: Of the records above, those whose value is null (tombstones), by key.
    tombstones: Counter[bytes | None] = field(default_factory=Counter)
    #: Partitions whose position stayed below the high watermark: held back by an
    #: open transaction (or still being written).
    stalled: dict[int, dict[str, int]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def duplicate_keys(self) -> int:
        """Extra copies of keys seen more than once (0 for exactly-once keyed data)."""
        return sum(n - 1 for key, n in self.keys.items() if key is not None and n > 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "records": self.total,
            "duplicate_keys": self.duplicate_keys,
            "tombstones": sum(self.tombstones.values()),
            "stalled": {str(p): s for p, s in sorted(self.stalled.items())},
        }


def read_committed(settings: Mapping[str, Any], topic: str, *, timeout_s: float = 10.0) -> Visible:
    """Read ``topic`` from the beginning as a read_committed consumer.

    Returns as soon as every partition's position reaches its high watermark (the
    consumer steps over control markers and aborted records itself); a partition
    still short of it after ``timeout_s`` is reported in ``stalled``.
    """
    config = {
        **settings,  # librdkafka's own names already
        "group.id": f"kafka2pc-visible-{uuid.uuid4().hex[:8]}",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
    }
    consumer = Consumer(config)
    # A read_committed consumer's watermarks stop at the last stable offset, which would
    # hide the very stall we look for: the log's end comes from a read_uncommitted one.
    watermarks = Consumer({**config, "isolation.level": "read_uncommitted"})
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics[topic]
        if metadata.error is not None:
            raise ValueError(f"topic {topic!r}: {metadata.error}")
        partitions = sorted(metadata.partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        seen = Visible(topic, counts=dict.fromkeys(partitions, 0))
        deadline = time.monotonic() + timeout_s
        while True:
            for message in consumer.consume(num_messages=10_000, timeout=0.2):
                if message.error() is not None:
                    continue
                seen.counts[message.partition()] += 1
                seen.keys[message.key()] += 1
                if message.value() is None:
                    seen.tombstones[message.key()] += 1
            behind = _behind(consumer, watermarks, topic, partitions)
            if not behind:
                return seen
            if time.monotonic() >= deadline:
                seen.stalled = behind
                return seen
    finally:
        consumer.close()
        watermarks.close()


def _behind(
    consumer: Consumer, watermarks: Consumer, topic: str, partitions: list[int]
) -> dict[int, dict[str, int]]:
    behind = {}
    positions = consumer.position([TopicPartition(topic, p) for p in partitions])
    for tp in positions:
        _, high = watermarks.get_watermark_offsets(tp, timeout=5, cached=False)
        position = tp.offset if tp.offset >= 0 else 0
        if position < high:
            behind[tp.partition] = {"position": position, "high_watermark": high}
    return behind
