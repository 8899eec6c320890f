"""Fetch: the request that reads a partition's raw log, and its answer, typed. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kafka.protocol.consumer.fetch import FetchRequest

from .codes import ErrorCode
from .records import RecordBatch, parse_batches

#: Control batches and aborted records too: the markers are read, not trusted to a filter.
READ_UNCOMMITTED = 0
#: The most one fetch asks for; also the bound of a batch built here, so that any batch
#: this package writes is read back in one fetch.
FETCH_MAX_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class FetchAnswer:
    """One partition's fetch answer: error code, the broker's high watermark, the batches."""

    error: int
    high_watermark: int
    batches: list[RecordBatch]
    #: Where the partition's log starts (Fetch v5+); -1 when unknown, as on an error
    #: (OFFSET_OUT_OF_RANGE below the log start says -1 too: ListOffsets tells).
    log_start_offset: int = -1


def fetch_request(
    topic: str, partition: int, offset: int, *, max_wait_ms: int, max_bytes: int, version: int
) -> FetchRequest:
    fetch_topic = FetchRequest.FetchTopic
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=READ_UNCOMMITTED,
        session_id=0,
        session_epoch=-1,
        topics=[
            fetch_topic(
                topic=topic,
                partitions=[
                    fetch_topic.FetchPartition(
                        partition=partition,
                        fetch_offset=offset,
                        partition_max_bytes=max_bytes,
                        current_leader_epoch=-1,
                        log_start_offset=-1,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        version=version,
    )


def parse_fetch(answer: Any, *, with_keys: bool, with_records: bool) -> FetchAnswer:
    """The one partition's answer; an error code comes with no batches."""
    for topic_answer in answer.responses:
        for part in topic_answer.partitions:
            if part.error_code:
                return FetchAnswer(part.error_code, -1, [])
            batches = parse_batches(part.records, with_keys, with_records)
            log_start = getattr(part, "log_start_offset", None)
            return FetchAnswer(
                ErrorCode.NONE, part.high_watermark, batches, -1 if log_start is None else log_start
            )
    return FetchAnswer(ErrorCode.NONE, -1, [])
