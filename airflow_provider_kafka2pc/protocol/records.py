"""Record batches as a partition's log stores them: parsed from a fetch, built for a produce.

Pure: bytes in, typed batches out, and rows in, bytes out (kafka-python's record codecs,
any compression it has). Nothing here sends.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords


class ControlType(enum.IntEnum):
    """Transaction marker written into each partition at the end of a transaction."""

    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True)
class LoggedRecord:
    """One data record as the log holds it: what a loss repair copies (log_copy)."""

    offset: int
    #: The record's timestamp in epoch ms (CreateTime as the writer set it, or the
    #: broker's LogAppendTime when the topic says so: see ``RecordBatch.log_append_time``).
    timestamp: int
    key: bytes | None
    #: None for a tombstone.
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True)
class RecordBatch:
    """One record batch as stored in a partition's log: header fields, and the keys or
    the whole records when asked for."""

    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    is_transactional: bool
    control: ControlType | None
    record_count: int
    keys: tuple[bytes | None, ...] = ()
    #: Records whose value is null (tombstones); counted only when keys are read.
    tombstones: int = 0
    #: The data records, decoded (decompressed), only when asked for (``with_records``).
    records: tuple[LoggedRecord, ...] = ()
    #: The batch's timestamps are the broker's (LogAppendTime), not the writer's.
    log_append_time: bool = False


#: A record at protocol level: (key, value) or (key, value, headers).
Row = (
    tuple[bytes | None, bytes | None]
    | tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]] | None]
)


def parse_batches(
    raw: bytes | None, with_keys: bool, with_records: bool = False
) -> list[RecordBatch]:
    """The batches in a fetch answer's records, control batches included."""
    if not raw:
        return []
    records = MemoryRecords(raw)
    out: list[RecordBatch] = []
    while (batch := records.next_batch()) is not None:
        control = None
        keys: tuple[bytes | None, ...] = ()
        tombstones = 0
        logged: tuple[LoggedRecord, ...] = ()
        if batch.is_control_batch:
            control = next((ControlType(r.type) for r in batch), None)
        elif with_keys or with_records:
            rows = list(batch)
            keys = tuple(r.key for r in rows)
            tombstones = sum(1 for r in rows if r.value is None)
            if with_records:
                logged = tuple(
                    LoggedRecord(r.offset, r.timestamp, r.key, r.value, tuple(r.headers))
                    for r in rows
                )
        out.append(
            RecordBatch(
                base_offset=batch.base_offset,
                last_offset=batch.last_offset,
                producer_id=batch.producer_id,
                producer_epoch=batch.producer_epoch,
                is_transactional=batch.is_transactional,
                control=control,
                record_count=batch.records_count,
                keys=keys,
                tombstones=tombstones,
                records=logged,
                log_append_time=batch.timestamp_type == 1,
            )
        )
    return out


def transactional_batch(
    rows: Sequence[Row],
    *,
    producer_id: int,
    epoch: int,
    base_sequence: int,
    timestamp_ms: int,
    max_bytes: int,
    where: str,
) -> bytes:
    """One uncompressed transactional v2 batch of ``rows``; raises ValueError naming
    ``where`` (``topic-partition``) when it would exceed ``max_bytes``."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=True,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=base_sequence,
        batch_size=max_bytes,
    )
    for offset, row in enumerate(rows):
        headers = list(row[2] or ()) if len(row) > 2 else []
        if builder.append(offset, timestamp_ms, row[0], row[1], headers) is None:
            raise ValueError(f"batch for {where} exceeds {max_bytes} bytes at record {offset}")
    return bytes(builder.build())
