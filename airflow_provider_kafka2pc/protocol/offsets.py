"""ListOffsets for a partition's log start: where its log begins now. Pure.

Retention, DeleteRecords and compaction's cleaning move a partition's log start; a fetch
below it answers OFFSET_OUT_OF_RANGE without saying where the log now begins. The audit asks
here, to tell records removed from the log from records never written.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer.offsets import ListOffsetsRequest

from .fetch import READ_UNCOMMITTED

#: ListOffsets' timestamp asking for the earliest offset: the log start offset.
EARLIEST_TIMESTAMP = -2


def log_start_request(topic: str, partition: int, version: int) -> ListOffsetsRequest:
    """The earliest offset of one partition (v1+: one offset, not a list)."""
    topic_entry = ListOffsetsRequest.ListOffsetsTopic
    return ListOffsetsRequest(
        replica_id=-1,
        isolation_level=READ_UNCOMMITTED,
        topics=[
            topic_entry(
                name=topic,
                partitions=[
                    topic_entry.ListOffsetsPartition(
                        partition_index=partition,
                        current_leader_epoch=-1,
                        timestamp=EARLIEST_TIMESTAMP,
                        max_num_offsets=1,
                    )
                ],
            )
        ],
        timeout_ms=0,
        version=version,
    )


def parse_log_start(answer: Any) -> tuple[int, int]:
    """(error code, log start offset) of the one partition asked; (error, -1) on an error."""
    for topic_answer in answer.topics:
        for part in topic_answer.partitions:
            if part.error_code:
                return part.error_code, -1
            return 0, part.offset
    return 0, -1
