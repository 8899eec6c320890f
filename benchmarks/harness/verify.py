"""Every benchmark output is checked before its time is believed.

Three witnesses, as the tests use them: the package's log audit (markers applied by us:
committed once, nothing open), a read_committed consumer (``devtools/visible.py``: what
downstream readers see, no key twice, nothing stalled), and a digest of every visible
(key, value) pair against the source's. Per-partition counts are kept so that systems can
be compared with each other (same keys, same partitioner: same counts).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from airflow_provider_kafka2pc.protocol.records import ControlType
from airflow_provider_kafka2pc.transaction.audit import (
    COMMITTED,
    AuditReport,
    PartitionAudit,
    audit_topic,
)
from airflow_provider_kafka2pc.transaction.committable import Committable
from airflow_provider_kafka2pc.transaction.log import LogReader
from devtools.visible import Visible, read_committed

from .cluster import Cluster
from .data import Digest

#: Seconds a read_committed reader waits for partitions to reach their end.
READ_TIMEOUT_S = 300.0
#: Above this many records the package's ``read_committed`` (which counts every key in
#: memory: several GB at 32M) is replaced by one streaming pass that keeps only the digest,
#: per-partition counts and positions. A key seen twice still shows: the count and the
#: order-independent digest of a source of unique keys then differ.
KEYS_IN_MEMORY = 8_000_000


@dataclass
class Expected:
    """What an output must hold. ``content``: read every (key, value) into a digest, compared
    with ``digest`` when one is given (False for a load generator's random payload);
    ``partition_counts`` None: keyless or not known."""

    rows: int
    transactional: bool = True
    content: bool = True
    digest: Digest | None = None
    partition_counts: Sequence[int] | None = None
    keys_unique: bool = True
    committables: Sequence[Committable] = ()
    #: Verify in bounded memory: True always, False never, None above
    #: :data:`KEYS_IN_MEMORY` records. Streaming, the read_committed witness is one pass
    #: (:func:`read_streaming`), and an output without committables is audited by
    #: :func:`audit_counts` (the package's audit keeps one span per non-transactional
    #: batch: a million and more for 100M records of an at-least-once sink).
    streaming: bool | None = None

    @property
    def streams(self) -> bool:
        return self.rows > KEYS_IN_MEMORY if self.streaming is None else self.streaming


@dataclass
class Verification:
    topic: str
    audit: dict[str, int]
    visible: int
    partition_counts: list[int]
    digest: Digest | None
    problems: list[str] = field(default_factory=list)
    #: Record batches of data in the log, and commit/abort markers: how the producer
    #: batched, which is most of what a record costs the broker.
    batches: int = 0
    markers: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        a = self.audit
        text = (
            f"audit: {a['committed']:,} committed ({a['non_transactional']:,} non-transactional),"
            f" {a['open']:,} open, {a['aborted']:,} aborted; read_committed {self.visible:,}"
        )
        if self.digest is not None:
            text += f"; {self.digest}"
        if self.batches:
            text += (
                f"; {self.batches:,} record batches ({a['committed'] / self.batches:,.0f} "
                f"records each), {self.markers} markers"
            )
        return text + ("" if self.ok else " -- FAILED: " + "; ".join(self.problems))


def verify_topic(cluster: Cluster, topic: str, expected: Expected) -> Verification:
    """Audit ``topic``, read it as read_committed, digest it; list every mismatch."""
    if expected.streams and not expected.committables:
        report = audit_counts(cluster.protocol, topic)
    else:
        report = audit_topic(cluster.protocol, topic, expected.committables)
    totals = report.totals
    problems = []
    n = expected.rows
    if totals["committed"] != n:
        problems.append(f"{totals['committed']:,} of {n:,} records committed")
    if totals["open"]:
        problems.append(f"{totals['open']:,} records in open transactions")
    if expected.transactional and totals["non_transactional"]:
        problems.append(f"{totals['non_transactional']:,} records outside transactions")
    bad = [c for c in report.committables if c["state"] != COMMITTED or not c["complete"]]
    if bad:
        problems.append(f"committables not committed in full: {bad[:3]}")
    streamed = None
    if expected.streams and expected.content:
        streamed = read_streaming(cluster.config, topic)
        seen = streamed.visible
    else:
        seen = read_committed(cluster.config, topic, timeout_s=READ_TIMEOUT_S)
    if seen.stalled:
        problems.append(f"read_committed stalled at {seen.stalled}")
    if seen.total != n:
        problems.append(f"read_committed saw {seen.total:,} of {n:,}")
    if expected.keys_unique and seen.duplicate_keys:
        problems.append(f"{seen.duplicate_keys:,} extra copies of keys")
    counts = [seen.counts[p] for p in sorted(seen.counts)]
    audited = [report.partitions[p].committed for p in sorted(report.partitions)]
    if counts != audited:
        problems.append(f"per partition: read_committed {counts}, audit {audited}")
    if expected.partition_counts is not None and counts != list(expected.partition_counts):
        problems.append(f"per partition {counts}, expected {list(expected.partition_counts)}")
    if streamed is not None:
        digest: Digest | None = streamed.digest
    else:
        digest = read_digest(cluster.config, topic) if expected.content else None
    if expected.digest is not None and digest != expected.digest:
        problems.append(f"content differs from the source: {digest} vs {expected.digest}")
    parts = report.partitions.values()
    return Verification(
        topic,
        totals,
        seen.total,
        counts,
        digest,
        problems,
        batches=sum(p.data_batches for p in parts),
        markers=sum(p.commit_markers + p.abort_markers for p in parts),
    )


def audit_counts(protocol: Any, topic: str) -> AuditReport:
    """The log audit's counts in memory bounded by the open transactions, not the batches:
    the raw batches (READ_UNCOMMITTED, control batches included, the package's
    ``LogReader``), each producer's records held until its commit or abort marker, as
    ``audit_topic`` applies them; records outside transactions count as committed, and
    apart. No committables (ask ``audit_topic`` for those)."""
    reader = LogReader(protocol)
    partitions = {p: _count_partition(reader, topic, p) for p in reader.partitions(topic)}
    return AuditReport(topic, partitions, [])


def _count_partition(reader: LogReader, topic: str, partition: int) -> PartitionAudit:
    audit = PartitionAudit(partition)
    pending: dict[int, int] = {}  # producer id -> records of its open transaction
    for batch in reader.batches(topic, partition, 0):
        audit.end_offset = batch.last_offset + 1
        if batch.control is not None:
            count = pending.pop(batch.producer_id, 0)
            if batch.control is ControlType.COMMIT:
                audit.commit_markers += 1
                audit.committed += count
            else:
                audit.abort_markers += 1
                audit.aborted += count
            continue
        audit.data_batches += 1
        if batch.is_transactional:
            pending[batch.producer_id] = pending.get(batch.producer_id, 0) + batch.record_count
        else:
            audit.non_transactional += batch.record_count
            audit.committed += batch.record_count
    audit.open = sum(pending.values())
    audit.log_start = reader.known_log_start(topic, partition)
    return audit


def read_digest(settings: dict[str, Any], topic: str) -> Digest:
    """Digest of what a read_committed consumer sees, read up to the partitions' ends."""
    consumer = Consumer(
        {
            **settings,
            "group.id": f"bench-digest-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        digest, done = Digest(), set()
        idle = 0
        while len(done) < len(partitions) and idle < READ_TIMEOUT_S / 0.5:
            messages = consumer.consume(num_messages=10_000, timeout=0.5)
            idle = 0 if messages else idle + 1
            for message in messages:
                if message.error() is not None:
                    done.add(message.partition())  # _PARTITION_EOF (or an error: stops it)
                    continue
                digest.add(message.key(), message.value())
        return digest
    finally:
        consumer.close()


@dataclass
class Streamed:
    visible: Visible
    digest: Digest


def read_streaming(settings: dict[str, Any], topic: str) -> Streamed:
    """One read_committed pass in bounded memory: digest, records per partition, and the
    partitions whose position stayed below the log's end (a read_uncommitted consumer's high
    watermark: an open transaction holds read_committed back there)."""
    group = f"bench-stream-{uuid.uuid4().hex[:8]}"
    base = {**settings, "group.id": group, "enable.auto.commit": False}
    consumer = Consumer(
        {**base, "isolation.level": "read_committed", "auto.offset.reset": "earliest"}
    )
    ends = Consumer({**base, "isolation.level": "read_uncommitted"})
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        high = {
            p: ends.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in partitions
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        seen = Visible(topic, counts=dict.fromkeys(partitions, 0))
        digest, idle = Digest(), 0
        behind: dict[int, dict[str, int]] = {}
        while idle < READ_TIMEOUT_S / 0.5:
            messages = consumer.consume(num_messages=10_000, timeout=0.5)
            idle = 0 if messages else idle + 1
            for message in messages:
                if message.error() is None:
                    seen.counts[message.partition()] += 1
                    digest.add(message.key(), message.value())
            if not messages or idle:
                positions = consumer.position([TopicPartition(topic, p) for p in partitions])
                behind = {
                    tp.partition: {
                        "position": max(tp.offset, 0),
                        "high_watermark": high[tp.partition],
                    }
                    for tp in positions
                    if max(tp.offset, 0) < high[tp.partition]
                }
                if not behind:
                    return Streamed(seen, digest)
        seen.stalled = behind
        return Streamed(seen, digest)
    finally:
        consumer.close()
        ends.close()
