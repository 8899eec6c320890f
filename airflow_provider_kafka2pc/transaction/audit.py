"""The log audit: what a topic's log really holds, by its transaction markers.

It reads raw batches (READ_UNCOMMITTED, control batches included) and applies the
commit/abort markers itself; it never relies on the broker's aborted-transactions index
or a read_committed consumer, so it stays an independent witness beside one (the tests
check that both agree, see ``devtools/visible.py``). A tool for operators too: records committed,
aborted and still open, per partition and per committable.

A committable whose records retention (or DeleteRecords) removed is not MISSING but
REMOVED: the partition's log now starts past its range (``removed`` names where). The
audit then reads each partition from its log start instead of failing on offsets no
longer there.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ProtocolError
from ..protocol.records import ControlType, RecordBatch
from ..protocol.seam import TransactionProtocol
from .committable import Committable
from .log import LogReader

OPEN = "OPEN"
COMMITTED = "COMMITTED"
ABORTED = "ABORTED"
#: A committable's state when none of its records is in the log any more and the log
#: starts past them: removed by retention (or DeleteRecords), not never written.
REMOVED = "REMOVED"


@dataclass
class _Span:
    """Records of one producer's transaction in one partition."""

    producer_id: int
    first_offset: int
    last_offset: int
    count: int = 0
    state: str = OPEN
    keys: list[bytes | None] = field(default_factory=list)
    #: Of ``count``, the records whose value is null (tombstones), when records are read.
    tombstones: int = 0


@dataclass
class PartitionAudit:
    partition: int
    committed: int = 0
    aborted: int = 0
    open: int = 0
    non_transactional: int = 0
    commit_markers: int = 0
    abort_markers: int = 0
    end_offset: int = 0
    #: Record batches holding data (markers apart): how the producers batched.
    data_batches: int = 0
    #: Committed records whose value is null (tombstones); counted when records are read
    #: (``audit_topic(tombstones=True)`` or ``duplicates=True``). Also in ``committed``.
    tombstones: int = 0
    spans: list[_Span] = field(default_factory=list)
    #: Where the partition's log starts, when the broker said (a fetch v5+, or ListOffsets
    #: when the audit's start was below it); records before it are gone.
    log_start: int | None = None

    def to_dict(self) -> dict[str, int]:
        extra = {} if self.log_start is None else {"log_start": self.log_start}
        return {
            **extra,
            "committed": self.committed,
            "aborted": self.aborted,
            "open": self.open,
            "non_transactional": self.non_transactional,
            "commit_markers": self.commit_markers,
            "abort_markers": self.abort_markers,
            "end_offset": self.end_offset,
            "data_batches": self.data_batches,
            "tombstones": self.tombstones,
        }


@dataclass
class AuditReport:
    topic: str
    partitions: dict[int, PartitionAudit]
    committables: list[dict[str, Any]]
    duplicates: dict[str, Any] | None = None

    @property
    def totals(self) -> dict[str, int]:
        parts = self.partitions.values()
        return {
            "committed": sum(p.committed for p in parts),
            "aborted": sum(p.aborted for p in parts),
            "open": sum(p.open for p in parts),
            "non_transactional": sum(p.non_transactional for p in parts),
        }

    @property
    def tombstones(self) -> int:
        """Committed records whose value is null (counted only when records were read)."""
        return sum(p.tombstones for p in self.partitions.values())

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "topic": self.topic,
            "totals": self.totals,
            "tombstones": self.tombstones,
            "partitions": {str(p): a.to_dict() for p, a in sorted(self.partitions.items())},
            "committables": self.committables,
        }
        if self.duplicates is not None:
            data["duplicates"] = self.duplicates
        return data


def audit_topic(
    protocol: TransactionProtocol,
    topic: str,
    committables: Iterable[Committable] = (),
    *,
    start_offsets: Mapping[int, int] | None = None,
    duplicates: bool = False,
    tombstones: bool = False,
) -> AuditReport:
    """Audit every partition of ``topic`` from ``start_offsets`` (default: offset 0).

    Non-transactional records count as committed (they are visible) and also
    separately. With ``duplicates``, committed records are grouped by key and keys
    seen more than once are reported. With ``tombstones`` (or ``duplicates``), records are
    read one by one and the committed ones with a null value are counted apart as well
    (``tombstones``): a null value is a deletion, never a missing record.
    """
    reader = LogReader(protocol)
    starts = dict(start_offsets or {})
    partitions = {
        p: _audit_partition(reader, topic, p, starts.get(p, 0), duplicates or tombstones)
        for p in reader.partitions(topic)
    }
    by_producer = {p: _spans_by_producer(audit) for p, audit in partitions.items()}
    report = AuditReport(
        topic,
        partitions,
        [_committable_view(c, partitions, topic, by_producer) for c in committables],
    )
    if duplicates:
        report.duplicates = _duplicates(partitions.values())
    return report


def _audit_partition(
    reader: LogReader, topic: str, partition: int, start: int, with_keys: bool
) -> PartitionAudit:
    audit = PartitionAudit(partition, end_offset=start)
    pending: dict[int, _Span] = {}
    for batch in _from_log_start(reader, topic, partition, start, with_keys, audit):
        audit.end_offset = batch.last_offset + 1
        if batch.control is not None:
            span = pending.pop(batch.producer_id, None)
            if batch.control is ControlType.COMMIT:
                audit.commit_markers += 1
            else:
                audit.abort_markers += 1
            if span is not None:
                span.state = COMMITTED if batch.control is ControlType.COMMIT else ABORTED
            continue
        audit.data_batches += 1
        if not batch.is_transactional:
            audit.non_transactional += batch.record_count
            audit.spans.append(
                _Span(
                    batch.producer_id,
                    batch.base_offset,
                    batch.last_offset,
                    batch.record_count,
                    COMMITTED,
                    list(batch.keys),
                    batch.tombstones,
                )
            )
            continue
        span = pending.get(batch.producer_id)
        if span is None:
            span = pending[batch.producer_id] = _Span(
                batch.producer_id, batch.base_offset, batch.last_offset
            )
            audit.spans.append(span)
        span.last_offset = batch.last_offset
        span.count += batch.record_count
        span.keys.extend(batch.keys)
        span.tombstones += batch.tombstones
    for span in audit.spans:
        if span.state == COMMITTED:
            audit.committed += span.count
            audit.tombstones += span.tombstones
        elif span.state == ABORTED:
            audit.aborted += span.count
        else:
            audit.open += span.count
    if audit.log_start is None:
        audit.log_start = reader.known_log_start(topic, partition)
    return audit


def _from_log_start(
    reader: LogReader,
    topic: str,
    partition: int,
    start: int,
    with_keys: bool,
    audit: PartitionAudit,
) -> Iterator[RecordBatch]:
    """The batches from ``start``, or, when the log now starts past it (a fetch there
    answers OFFSET_OUT_OF_RANGE), from the log start, which ``audit`` records."""
    batches = reader.batches(topic, partition, start, with_keys=with_keys)
    try:
        first = next(batches, None)
    except ProtocolError as exc:
        if exc.error_name != "OFFSET_OUT_OF_RANGE":
            raise
        log_start = reader.log_start(topic, partition)
        if log_start <= start:
            raise
        audit.log_start = audit.end_offset = log_start
        yield from reader.batches(topic, partition, log_start, with_keys=with_keys)
        return
    if first is not None:
        yield first
        yield from batches


def _spans_by_producer(audit: PartitionAudit) -> dict[int, list[_Span]]:
    """The partition's spans by producer id, so that each committable looks only at its
    producer's (with a thousand participants, every span of every partition per committable
    made the audit quadratic)."""
    spans: dict[int, list[_Span]] = defaultdict(list)
    for span in audit.spans:
        spans[span.producer_id].append(span)
    return spans


def _committable_view(
    c: Committable,
    partitions: Mapping[int, PartitionAudit],
    topic: str,
    by_producer: Mapping[int, Mapping[int, list[_Span]]] | None = None,
) -> dict[str, Any]:
    counts = Counter({COMMITTED: 0, ABORTED: 0, OPEN: 0})
    removed: list[str] = []
    for part in c.partitions:
        audit = partitions.get(part.partition) if part.topic == topic else None
        if audit is None:
            spans: Iterable[_Span] = ()
        elif by_producer is not None and part.partition in by_producer:
            spans = by_producer[part.partition].get(c.producer_id, ())
        else:
            spans = audit.spans
        for span in spans:
            if (
                span.producer_id == c.producer_id
                and span.first_offset <= part.last_offset
                and span.last_offset >= part.first_offset
            ):
                counts[span.state] += span.count
        if (
            audit is not None
            and audit.log_start is not None
            and part.first_offset < (audit.log_start)
        ):
            whole = "" if part.last_offset < audit.log_start else "partly "
            removed.append(
                f"{whole}removed by retention: log start {audit.log_start} of "
                f"{part.topic}-{part.partition} past committed range "
                f"{part.first_offset}..{part.last_offset}"
            )
    seen = sum(counts.values())
    # A transaction over several topics is audited one topic at a time: complete when this
    # topic holds all of its records that went to this topic ("expected": all of them).
    in_topic = sum(p.record_count for p in c.partitions if p.topic == topic)
    if c.is_empty:
        state = "EMPTY"
    elif seen == 0 and removed:
        state = REMOVED
    elif seen == 0:
        state = "MISSING"
    elif counts[COMMITTED] == seen:
        state = COMMITTED
    elif counts[ABORTED] == seen:
        state = ABORTED
    elif counts[OPEN] == seen:
        state = OPEN
    else:
        state = "MIXED"
    return {
        "transactional_id": c.transactional_id,
        "producer_id": c.producer_id,
        "expected": c.record_count,
        "committed": counts[COMMITTED],
        "aborted": counts[ABORTED],
        "open": counts[OPEN],
        "state": state,
        "expected_in_topic": in_topic,
        "complete": seen == in_topic,
        **({"removed": removed} if removed else {}),
    }


def _duplicates(partitions: Iterable[PartitionAudit]) -> dict[str, Any]:
    keys = Counter(
        key
        for audit in partitions
        for span in audit.spans
        if span.state == COMMITTED
        for key in span.keys
    )
    repeated = {k: n for k, n in keys.items() if n > 1}
    return {
        "committed_keys": sum(keys.values()),
        "duplicate_keys": len(repeated),
        "extra_copies": sum(n - 1 for n in repeated.values()),
        "examples": [_show(k) for k in list(repeated)[:10]],
    }


def _show(key: bytes | None) -> str | None:
    if key is None:
        return None
    return key.decode("utf-8", "backslashreplace")
