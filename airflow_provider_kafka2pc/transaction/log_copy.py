"""Loss repair from the log: copy a lost transaction's records into a new transaction.

A participant LOST after a COMMIT verdict was aborted by the broker, but its records are
still in the log, marked aborted, until retention removes them. Its committable says
exactly where: the producer id and epoch, and per partition the first and last offset and
the record count. :class:`LogCopy` reads those ranges (read_uncommitted, the project's
:class:`~.log.LogReader`; kafka-python's record parser decodes every v2 batch and codec)
and writes the same records, keys, values (tombstones stay null), headers and CreateTime,
each into its own partition in order, in a new transaction under the participant's own
transactional id, left open: a committable with the same record count, which the
coordinator records (LOST -> PREPARED) and commits. No Spark, no source.

The copy is all or nothing per participant: only when every partition's range still
holds exactly the recorded number of data records of that producer id and epoch, in
transactional batches. Anything else (retention or DeleteRecords moved the log start past
the range, compaction removed records, the log was truncated, the topic is gone) raises
:class:`NotInLogError` with the reason, and the caller falls back to the source.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .. import defaults
from ..connection.acls import authorization_error
from ..errors import AuthorizationError, Kafka2pcError, PermanentError, ProtocolError
from ..protocol.records import RecordBatch
from .chunks import CHUNK_RECORDS, RecordChunk
from .committable import Committable, PartitionRange
from .log import LogReader
from .writer import TransactionalWriter

log = logging.getLogger(__name__)

#: Fetch answers that mean "the range is not there to read" rather than "try again".
_GONE = {
    "OFFSET_OUT_OF_RANGE": "the log now starts after the range (retention or DeleteRecords "
    "removed its records)",
    "UNKNOWN_TOPIC_OR_PARTITION": "the topic or partition no longer exists",
}


class NotInLogError(PermanentError):
    """A lost transaction's records are no longer all in the log; ``reason`` says why."""

    def __init__(self, committable: Committable, reason: str) -> None:
        super().__init__(f"{committable.transactional_id}: not in the log: {reason}")
        self.committable = committable
        self.reason = reason


@dataclass(frozen=True)
class Located:
    """Where a lost transaction's data batches are, per partition, checked complete."""

    committable: Committable
    #: (partition range, its batches' base offsets) in the committable's order.
    batches: tuple[tuple[PartitionRange, tuple[int, ...]], ...]

    @property
    def record_count(self) -> int:
        return sum(part.record_count for part, _ in self.batches)


WriterFactory = Callable[[Mapping[str, Any], str, int], TransactionalWriter]


def _writer(config: Mapping[str, Any], transactional_id: str, timeout_ms: int) -> Any:
    return TransactionalWriter(config, transactional_id, transaction_timeout_ms=timeout_ms)


class LogCopy:
    """Finds a lost transaction's records in the log and re-writes them, left open.

    :param reader: reads the partitions (read_uncommitted, failover included).
    :param producer_config: librdkafka settings for the copy's writer (the commit's Kafka
        connection: its principal needs WRITE on the topic and the transactional id).
    :param transaction_timeout_ms: the copy's transaction timeout; None: the lost one's
        (the default timeout for a KIP-939 one, whose own is the coordinator's maximum).
    """

    def __init__(
        self,
        reader: LogReader,
        producer_config: Mapping[str, Any],
        *,
        transaction_timeout_ms: int | None = None,
        writer_factory: WriterFactory = _writer,
    ) -> None:
        self._reader = reader
        self._config = dict(producer_config)
        self._timeout_ms = transaction_timeout_ms
        self._writer_factory = writer_factory

    # -- find -----------------------------------------------------------------

    def locate(self, committable: Committable, *, deadline: float | None = None) -> Located:
        """Check that every recorded record is still in the log, from batch headers only
        (nothing decompressed); :class:`NotInLogError` naming the first gap otherwise."""
        if committable.is_empty:
            raise NotInLogError(committable, "it recorded no records")
        found = []
        for part in committable.partitions:
            batches = self._batches(committable, part, with_records=False, deadline=deadline)
            count = 0
            offsets = []
            for batch in batches:
                count += batch.record_count
                offsets.append(batch.base_offset)
            if count != part.record_count:
                raise NotInLogError(
                    committable,
                    f"{part.topic}-{part.partition} offsets {part.first_offset}.."
                    f"{part.last_offset} hold {count} of its {part.record_count} records "
                    "(removed by retention, compaction or a truncation)",
                )
            found.append((part, tuple(offsets)))
        return Located(committable, tuple(found))

    def _batches(
        self,
        committable: Committable,
        part: PartitionRange,
        *,
        with_records: bool,
        deadline: float | None,
    ) -> Iterator[RecordBatch]:
        """The lost transaction's data batches in ``part``'s range, in offset order."""
        where = f"{part.topic}-{part.partition}"
        try:
            for batch in self._reader.batches(
                part.topic,
                part.partition,
                part.first_offset,
                with_records=with_records,
                deadline=deadline,
                end=part.last_offset,
            ):
                if batch.base_offset > part.last_offset:
                    return
                if batch.last_offset < part.first_offset:
                    continue
                if batch.producer_id != committable.producer_id or batch.control is not None:
                    continue
                if batch.producer_epoch != committable.producer_epoch:
                    raise NotInLogError(
                        committable,
                        f"{where} offset {batch.base_offset} holds a batch of producer "
                        f"{batch.producer_id} at epoch {batch.producer_epoch}, not the "
                        f"recorded {committable.producer_epoch}",
                    )
                if not batch.is_transactional:
                    raise NotInLogError(
                        committable,
                        f"{where} offset {batch.base_offset}: the producer's batch there "
                        "is not transactional",
                    )
                yield batch
        except ProtocolError as exc:
            gone = _GONE.get(exc.error_name or "")
            if gone is not None:
                raise NotInLogError(
                    committable, f"{where} offset {part.first_offset}: {gone}"
                ) from exc
            refused = authorization_error(exc, self._config, "commit", topics=[part.topic])
            if refused is not None:
                raise refused from None
            raise

    # -- copy -----------------------------------------------------------------

    def copy(self, committable: Committable, *, deadline: float | None = None) -> Committable:
        """Re-write ``committable``'s records under its own transactional id, left open.

        :class:`NotInLogError` before anything is written when the log lacks any of them;
        a gap found while writing (the log moved on meanwhile) aborts the new transaction
        and raises the same. The new committable has the same partitions and counts.
        """
        located = self.locate(committable, deadline=deadline)
        # A transaction of a routed export spans several topics: the copy spans the same.
        topics = list(dict.fromkeys(part.topic for part in committable.partitions))
        timeout_ms = self._timeout_ms or (
            defaults.TRANSACTION_TIMEOUT_MS
            if committable.kip939
            else committable.transaction_timeout_ms
        )
        writer = self._writer_factory(self._config, committable.transactional_id, timeout_ms)
        try:
            copied = writer.write_chunks(topics, self._chunks(located, deadline))
        except Kafka2pcError as exc:
            refused = authorization_error(
                exc,
                self._config,
                "repair a lost participant from the log (produce)",
                transactional_ids=[committable.transactional_id],
                topics=topics,
            )
            if refused is not None and not isinstance(exc, AuthorizationError):
                raise refused from None
            raise
        problems = differences(committable, copied)
        if problems:
            raise CopyMismatchError(copied, "; ".join(problems))
        log.info(
            "%s: copied %d records in %d partitions from the log (pid %d epoch %d, aborted) "
            "into a new transaction (pid %d epoch %d)",
            committable.transactional_id,
            copied.record_count,
            len(copied.partitions),
            committable.producer_id,
            committable.producer_epoch,
            copied.producer_id,
            copied.producer_epoch,
        )
        return copied

    def _chunks(self, located: Located, deadline: float | None) -> Iterator[RecordChunk]:
        """The located records as the writer takes them, partition by partition, in order;
        each partition's count checked again as it is read."""
        committable = located.committable
        for part, _ in located.batches:
            count = 0
            for batch in self._batches(committable, part, with_records=True, deadline=deadline):
                rows = batch.records
                count += len(rows)
                for start in range(0, len(rows), CHUNK_RECORDS):
                    chunk = rows[start : start + CHUNK_RECORDS]
                    headers = [list(r.headers) if r.headers else None for r in chunk]
                    yield RecordChunk(
                        keys=[r.key for r in chunk],
                        values=[r.value for r in chunk],
                        headers=headers if any(h is not None for h in headers) else None,
                        # LogAppendTime: the broker stamps the copy anew, as it did the original.
                        timestamps=[
                            None if batch.log_append_time or r.timestamp <= 0 else r.timestamp
                            for r in chunk
                        ],
                        partitions=[part.partition] * len(chunk),
                        topic=part.topic,
                    )
            if count != part.record_count:
                raise NotInLogError(
                    committable,
                    f"{part.topic}-{part.partition} held {count} of {part.record_count} "
                    "records when copied (the log moved on while copying)",
                )


class CopyMismatchError(Kafka2pcError):
    """The copy landed differently from the lost transaction (a partition or count differs);
    ``copied`` is the copy's committable, still open: the caller aborts it."""

    def __init__(self, copied: Committable, reason: str) -> None:
        super().__init__(f"{copied.transactional_id}: the copy differs: {reason}")
        self.copied = copied
        self.reason = reason


def differences(lost: Committable, copied: Committable) -> list[str]:
    """How the copy's partitions and counts differ from the lost transaction's (none: [])."""
    want = {(p.topic, p.partition): p.record_count for p in lost.partitions}
    got = {(p.topic, p.partition): p.record_count for p in copied.partitions}
    problems = []
    for key in sorted(set(want) | set(got)):
        if want.get(key, 0) != got.get(key, 0):
            problems.append(
                f"{key[0]}-{key[1]}: {got.get(key, 0)} records copied, {want.get(key, 0)} recorded"
            )
    if copied.transactional_id != lost.transactional_id:
        problems.append(f"written under {copied.transactional_id!r}")
    return problems
