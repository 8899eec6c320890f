"""The audit's view of each committable, from spans looked up by producer id.

Why: with a thousand participants every partition holds a span per producer, and each
committable scanned all of them (quadratic); it now looks up its own producer's spans.
The views must be what the scan gave.
"""

from __future__ import annotations

from airflow_provider_kafka2pc.transaction.audit import (
    ABORTED,
    COMMITTED,
    OPEN,
    PartitionAudit,
    _committable_view,
    _Span,
    _spans_by_producer,
)
from airflow_provider_kafka2pc.transaction.committable import Committable, PartitionRange

TOPIC = "orders"


def committable(pid: int, ranges: list[tuple[int, int, int]]) -> Committable:
    """Producer ``pid``'s transaction over (partition, first, last) ranges."""
    parts = tuple(PartitionRange(TOPIC, p, a, b, b - a + 1) for p, a, b in ranges)
    return Committable(
        transactional_id=f"exp-{pid}",
        producer_id=pid,
        producer_epoch=0,
        transaction_version=1,
        partitions=parts,
        record_count=sum(r.record_count for r in parts),
        start_time_ms=1_000,
        transaction_timeout_ms=60_000,
    )


def audits(n: int) -> dict[int, PartitionAudit]:
    """Two partitions, each with one span of ``n`` records per producer 0..n-1 (every
    third committed, aborted, open), interleaved as many producers' spans are."""
    states = (COMMITTED, ABORTED, OPEN)
    out = {}
    for p in (0, 1):
        audit = PartitionAudit(p)
        for pid in range(n):
            first = pid * 10
            audit.spans.append(_Span(pid, first, first + 2, 3, states[pid % 3]))
        out[p] = audit
    return out


def test_the_views_by_producer_are_the_scans():
    partitions = audits(30)
    index = {p: _spans_by_producer(a) for p, a in partitions.items()}
    committables = [
        committable(pid, [(0, pid * 10, pid * 10 + 2), (1, pid * 10, pid * 10 + 2)])
        for pid in range(30)
    ]
    committables.append(committable(99, [(0, 0, 2)]))  # a producer with no span: MISSING
    committables.append(committable(4, [(7, 40, 42)]))  # a partition the audit did not read

    for c in committables:
        assert _committable_view(c, partitions, TOPIC, index) == _committable_view(
            c, partitions, TOPIC
        )
    views = [_committable_view(c, partitions, TOPIC, index) for c in committables]
    assert [v["state"] for v in views[:3]] == [COMMITTED, ABORTED, OPEN]
    assert views[0]["committed"] == 6 and views[0]["complete"]
    assert views[-2]["state"] == views[-1]["state"] == "MISSING"


def test_only_the_producers_overlapping_spans_count():
    audit = PartitionAudit(0)
    audit.spans += [_Span(7, 0, 4, 5, ABORTED), _Span(8, 5, 9, 5), _Span(7, 10, 14, 5, COMMITTED)]
    partitions = {0: audit}
    view = _committable_view(
        committable(7, [(0, 10, 14)]), partitions, TOPIC, {0: _spans_by_producer(audit)}
    )
    assert (view["state"], view["committed"], view["aborted"]) == (COMMITTED, 5, 0)


def test_a_transaction_over_two_topics_is_complete_in_each_topic_it_wrote():
    """Audited one topic at a time, a transaction of 5 records in each of two topics is
    complete in each (its 5 there), while ``expected`` stays its whole 10."""
    audit = PartitionAudit(0)
    audit.spans.append(_Span(7, 0, 4, 5, COMMITTED))
    parts = (PartitionRange(TOPIC, 0, 0, 4, 5), PartitionRange("refunds", 0, 0, 4, 5))
    both = Committable(
        transactional_id="exp-7",
        producer_id=7,
        producer_epoch=0,
        transaction_version=1,
        partitions=parts,
        record_count=10,
        start_time_ms=1_000,
        transaction_timeout_ms=60_000,
    )
    view = _committable_view(both, {0: audit}, TOPIC)
    assert (view["state"], view["committed"], view["expected"]) == (COMMITTED, 5, 10)
    assert (view["expected_in_topic"], view["complete"]) == (5, True)
