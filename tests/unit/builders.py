"""Values for the rule tables: ledger rows, committables and open transactions, built in
one line each, around one fixed clock.

Defaults describe the ordinary case (export ``exp``, run ``run-b``, three ids
``exp-0..2`` holding 10 records each, producer id 42 epoch 3, transactions opened at
:data:`NOW`, classic timeout 15 min); each table row overrides only what its rule is about.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow_provider_kafka2pc.coordination.recovery.discovery import OpenTransaction
from airflow_provider_kafka2pc.ledger import Batch, BatchState, Lease, Participant, Verdict
from airflow_provider_kafka2pc.ledger import ParticipantState as P
from airflow_provider_kafka2pc.protocol.described import CoordinatorTxnState
from airflow_provider_kafka2pc.transaction.committable import (
    TRANSACTION_VERSION_CLASSIC,
    TWO_PHASE_TIMEOUT_MS,
    Committable,
    PartitionRange,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)
GRACE = timedelta(minutes=10)
EXPORT = "exp"
RUN = "run-b"
TOPIC = "orders"
PID, EPOCH = 42, 3
RECORDS = 10
#: A classic transaction's timeout (the broker's default ``transaction.max.timeout.ms``).
TIMEOUT_MS = 15 * 60 * 1000


def ms(delta: timedelta) -> int:
    return int(delta.total_seconds() * 1000)


def tid(slot: int) -> str:
    return f"{EXPORT}-{slot}"


def committable(
    slot: int = 0,
    *,
    records: int = RECORDS,
    pid: int = PID,
    epoch: int = EPOCH,
    started: datetime = NOW,
    timeout_ms: int = TIMEOUT_MS,
    kip939: bool = False,
) -> Committable:
    """Slot ``slot``'s transaction: ``records`` records on partition ``slot`` of the topic
    (offsets 100..), or an empty committable (nothing opened) when ``records`` is 0."""
    start_ms = int(started.timestamp() * 1000)
    if records == 0:
        return Committable.empty(tid(slot), start_ms, timeout_ms)
    part = PartitionRange(TOPIC, slot, 100, 100 + records - 1, records)
    return Committable(
        transactional_id=tid(slot),
        producer_id=pid,
        producer_epoch=epoch,
        transaction_version=TRANSACTION_VERSION_CLASSIC,
        partitions=(part,),
        record_count=records,
        start_time_ms=start_ms,
        transaction_timeout_ms=TWO_PHASE_TIMEOUT_MS if kip939 else timeout_ms,
        kip939=kip939,
    )


def participant(
    slot: int = 0,
    state: P = P.PREPARED,
    *,
    index: int | None = None,
    **committable_fields,
) -> Participant:
    return Participant(
        index=slot if index is None else index,
        transactional_id=tid(slot),
        committable=committable(slot, **committable_fields),
        state=state,
        reason=None,
        updated_at=NOW,
    )


def participants(*states: P, **committable_fields) -> list[Participant]:
    """One participant per state, slots 0, 1, 2, ..."""
    return [participant(i, s, **committable_fields) for i, s in enumerate(states)]


def verdict_of(state: BatchState) -> Verdict | None:
    """The verdict a ledger row in ``state`` carries (the decided and final states)."""
    if state in (BatchState.COMMIT_DECIDED, BatchState.COMMITTED):
        return Verdict.COMMIT
    if state in (BatchState.ABORT_DECIDED, BatchState.ABORTED):
        return Verdict.ABORT
    return None


def batch(
    state: BatchState = BatchState.PREPARED,
    *,
    run_key: str = RUN,
    age: timedelta = timedelta(0),
    slots: int = 3,
    ids: tuple[str, ...] | None = None,
    source_rows: int | None = 3 * RECORDS,
) -> Batch:
    """The ledger row of (exp, ``run_key``), last changed ``age`` before :data:`NOW`."""
    verdict = verdict_of(state)
    changed = NOW - age
    return Batch(
        export_id=EXPORT,
        run_key=run_key,
        attempt=1,
        state=state,
        topic=TOPIC,
        id_prefix=EXPORT,
        transactional_ids=tuple(tid(i) for i in range(slots)) if ids is None else ids,
        verdict=verdict,
        verdict_reason=None if verdict is None else "decided",
        source_rows=source_rows,
        partitioning="hash",
        source_splits=None,
        created_at=changed,
        updated_at=changed,
        decided_at=changed if verdict is not None else None,
        finished_at=None,
    )


def lease(slot: int = 0, *, export_id: str | None = EXPORT, run_key: str | None = RUN) -> Lease:
    """Slot ``slot``'s pooled id, held by (``export_id``, ``run_key``), or free when None."""
    held = export_id is not None
    return Lease(
        id_prefix=EXPORT,
        slot=slot,
        transactional_id=tid(slot),
        export_id=export_id,
        run_key=run_key if held else None,
        leased=held,
        leased_at=NOW if held else None,
    )


def free_lease(slot: int = 0) -> Lease:
    return lease(slot, export_id=None, run_key=None)


def open_txn(
    slot: int = 0,
    *,
    age: timedelta | None = timedelta(0),
    pid: int = PID,
    epoch: int = EPOCH,
    state: CoordinatorTxnState = CoordinatorTxnState.ONGOING,
) -> OpenTransaction:
    """What discovery reports for slot ``slot``: open for ``age`` (None: start unknown);
    ``state`` UNKNOWN is a broker without DescribeTransactions."""
    if state is CoordinatorTxnState.UNKNOWN:
        return OpenTransaction.unknown(tid(slot))
    start = -1 if age is None else NOW_MS - ms(age)
    return OpenTransaction(tid(slot), state, pid, epoch, start, TIMEOUT_MS, (f"{TOPIC}-{slot}",))
