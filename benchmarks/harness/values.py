"""Every value of a topic read back, checked against its header, decoded and compared.

Why apart from :mod:`.verify`: the digest there compares raw bytes with the source's,
which works when every system writes the same bytes. Systems that encode the same rows
differently (JSON, registry Avro, JSON Schema, Protobuf) are checked by what a consumer decodes
instead: each value's header carries the registered schema id, and the decoded record
equals the source's row of its key, field by field (:func:`.typed.row_of`).

Decoding in Python can cost more than the export (tens of microseconds a record through
confluent-kafka's deserializers): every value's header and size are checked, and the
values decoded are every one, or a deterministic sample (the rows whose id is a multiple
of ``stride``, the same rows for every system) when decoding all would take too long.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.serialization import MessageField, SerializationContext

from .typed import row_of

#: A value's bytes and its context -> the row a consumer gets.
Decode = Callable[[bytes, SerializationContext], dict[str, Any]]
#: Seconds a reader waits without a record before it gives up on reaching the ends.
IDLE_TIMEOUT_S = 120.0
#: The least number of decoded records per partition when sampling.
SAMPLE_PER_PARTITION = 10_000


@dataclass
class ValuesCheck:
    """What the read-back found: records, value bytes, how many were decoded, problems."""

    records: int = 0
    value_bytes: int = 0
    decoded: int = 0
    stride: int = 1
    decode_seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def per_record_s(self) -> float:
        return self.decode_seconds / self.decoded if self.decoded else float("nan")

    def summary(self) -> str:
        """What was read and decoded (the problems are the caller's to print)."""
        which = "all" if self.stride == 1 else f"the ids divisible by {self.stride}"
        cost = "" if not self.decoded else f"; {self.per_record_s * 1e6:.0f} us each"
        return (
            f"values: {self.records:,} read, {self.value_bytes:,} B, {self.decoded:,} decoded "
            f"({which}{cost}) and compared with the source's rows"
        )


def choose_stride(per_record_s: float, rows: int, smallest_partition: int, budget_s: float) -> int:
    """1 (decode all) when that fits in ``budget_s``; else every ``stride``-th id, with at
    least :data:`SAMPLE_PER_PARTITION` ids in the smallest partition."""
    if per_record_s != per_record_s or per_record_s * rows <= budget_s:
        return 1
    return max(1, smallest_partition // SAMPLE_PER_PARTITION)


def check_values(
    settings: dict[str, Any],
    topic: str,
    decode: Decode,
    *,
    header: bytes | None,
    stride: int = 1,
) -> ValuesCheck:
    """Read ``topic`` as read_committed to its partitions' ends: every value must start with
    ``header`` (when given); the values of ids divisible by ``stride`` are decoded and
    compared with the source's rows."""
    check = ValuesCheck(stride=stride)
    context = SerializationContext(topic, MessageField.VALUE)
    bad_header = mismatched = 0
    examples: list[str] = []
    consumer = Consumer(
        {
            **settings,
            "group.id": f"bench-values-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        done: set[int] = set()
        idle_since = time.monotonic()
        while len(done) < len(partitions):
            messages = consumer.consume(num_messages=10_000, timeout=0.5)
            if not messages:
                if time.monotonic() - idle_since > IDLE_TIMEOUT_S:
                    check.problems.append(f"partitions {sorted(set(partitions) - done)} stalled")
                    break
                continue
            idle_since = time.monotonic()
            for message in messages:
                if message.error() is not None:
                    done.add(message.partition())  # _PARTITION_EOF
                    continue
                value, key = message.value() or b"", message.key() or b""
                check.records += 1
                check.value_bytes += len(value)
                if header is not None and value[: len(header)] != header:
                    bad_header += 1
                    continue
                row_id = int(key[1:])
                if row_id % stride:
                    continue
                start = time.perf_counter()
                try:
                    got: Any = decode(value, context)
                except Exception as exc:  # a value its deserializer refuses
                    got = f"undecodable: {type(exc).__name__}: {exc}"
                check.decode_seconds += time.perf_counter() - start
                check.decoded += 1
                if got != row_of(row_id):
                    mismatched += 1
                    if len(examples) < 2:
                        examples.append(f"key {key.decode()}: {got} vs {row_of(row_id)}")
    finally:
        consumer.close()
    if bad_header:
        check.problems.append(f"{bad_header:,} values without the header {header!r}")
    if mismatched:
        check.problems.append(f"{mismatched:,} decoded values differ: {'; '.join(examples)}")
    return check
