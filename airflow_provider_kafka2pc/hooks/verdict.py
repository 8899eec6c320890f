"""The decision rule of the two-phase commit, free of Airflow.

COMMIT only when every leased id came back as a prepared participant, their records add
up to the source's rows, every transaction is still open on the broker, and the commit
has at least the commit margin before the earliest transaction timeout. Anything else
is ABORT, with a reason a person can act on.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from ..ledger import Batch, BatchState, Participant, ParticipantState, Verdict
from ..transaction.committable import Committable
from ..transaction.log import LogReader, transaction_states
from ..transaction.protocol import ApiKey, KafkaProtocol

log = logging.getLogger(__name__)

#: DescribeTransactions' name for a transaction that has records and no end yet.
ONGOING = "Ongoing"


@dataclass(frozen=True)
class Assessment:
    verdict: Verdict
    reason: str
    #: Earliest participant timeout (epoch ms), None when no transaction was opened.
    earliest_deadline_ms: int | None = None


def earliest_deadline_ms(participants: Sequence[Participant]) -> int | None:
    deadlines = [p.committable.deadline_ms for p in participants if not p.committable.is_empty]
    return min(deadlines) if deadlines else None


def assess(
    batch: Batch,
    participants: Sequence[Participant],
    protocol: KafkaProtocol,
    *,
    now_ms: int,
    commit_margin_ms: int,
) -> Assessment:
    """What the verdict should be, judged from the ledger and the broker (records nothing)."""

    def abort(reason: str, deadline: int | None = None) -> Assessment:
        return Assessment(Verdict.ABORT, reason, deadline)

    if batch.state is not BatchState.PREPARED:
        return abort(f"the prepare did not complete (batch is {batch.state.value})")
    got = [p.transactional_id for p in participants]
    if got != list(batch.transactional_ids):
        return abort(
            f"participants {got} do not match the leased ids {list(batch.transactional_ids)}"
        )
    unprepared = [
        f"{p.transactional_id} {p.state.value}"
        for p in participants
        if p.state is not ParticipantState.PREPARED
    ]
    if unprepared:
        return abort(f"participants not prepared: {', '.join(unprepared)}")
    records = sum(p.committable.record_count for p in participants)
    if batch.source_rows is None or records != batch.source_rows:
        return abort(
            f"participants hold {records} records but the source had {batch.source_rows} rows"
        )
    deadline = earliest_deadline_ms(participants)
    if deadline is None:
        return Assessment(Verdict.COMMIT, "the source was empty: nothing to commit")
    left_ms = deadline - now_ms
    if left_ms <= commit_margin_ms:
        return abort(
            f"{left_ms / 1000:.0f} s left before the earliest transaction timeout, "
            f"less than the commit margin of {commit_margin_ms / 1000:.0f} s",
            deadline,
        )
    live = [p.committable for p in participants if not p.committable.is_empty]
    closed = not_open(protocol, live)
    if closed:
        return abort(
            f"no longer open: {'; '.join(f'{t} ({why})' for t, why in closed.items())}", deadline
        )
    return Assessment(
        Verdict.COMMIT,
        f"{len(participants)} participants prepared {records} records, all open, "
        f"{left_ms / 1000:.0f} s before the earliest transaction timeout",
        deadline,
    )


def not_open(protocol: KafkaProtocol, committables: Sequence[Committable]) -> dict[str, str]:
    """Transactional id -> why it is not open any more; empty when all are open.

    Asks the coordinator (DescribeTransactions, Kafka 3.0+) where it can, else reads the
    partitions' markers: any commit or abort marker after a transaction's records ends it.
    """
    if protocol.api_version(ApiKey.DESCRIBE_TRANSACTIONS) is not None:
        try:
            described = protocol.describe_transactions([c.transactional_id for c in committables])
        except Exception as exc:  # unknown id and kin: the log's markers decide instead
            log.warning("DescribeTransactions failed (%s); reading the markers", exc)
        else:
            by_id = {d["transactional_id"]: d for d in described}
            closed = {}
            for c in committables:
                d = by_id.get(c.transactional_id)
                if d is None:
                    closed[c.transactional_id] = "unknown to the coordinator"
                elif d["state"] != ONGOING:
                    closed[c.transactional_id] = f"coordinator state {d['state']}"
                elif (d["producer_id"], d["producer_epoch"]) != (c.producer_id, c.producer_epoch):
                    closed[c.transactional_id] = (
                        f"now pid {d['producer_id']} epoch {d['producer_epoch']}, "
                        f"prepared as pid {c.producer_id} epoch {c.producer_epoch}"
                    )
            return closed
    states = transaction_states(LogReader(protocol), committables)
    return {
        c.transactional_id: "committed" if s.committed else "aborted" if s.aborted else "ended"
        for c, s in zip(committables, states, strict=True)
        if not s.open
    }
