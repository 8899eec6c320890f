"""The decision rule of the two-phase commit, free of Airflow.

COMMIT only when every leased id came back as a prepared participant, their records add
up to the source's rows, every transaction is still open on the broker, and the commit
has at least the commit margin before the earliest transaction timeout. Anything else
is ABORT, with a reason a person can act on.

The timeout guard reads each committable's ``expires_at_ms``: a KIP-939 2PC transaction
has none (the coordinator never times it out), so only classic ones bound the commit. A
COMMIT whose commit then takes longer than the margin anyway finds the participant LOST,
which loss repair (:mod:`.finish`) mends; the guard makes that the exception.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ConnectionLostError, ProtocolError
from ..ledger import Batch, BatchState, Participant, ParticipantState, Verdict
from ..ledger.store import earliest_deadline_ms
from ..protocol.client import KafkaProtocol
from ..protocol.described import CoordinatorTxnState
from ..protocol.versions import ApiKey
from ..transaction.committable import Committable
from ..transaction.log import LogReader, marker_views

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Assessment:
    verdict: Verdict
    reason: str
    #: When the first participant times out (epoch ms); None when none can (nothing was
    #: opened, or every transaction is a KIP-939 2PC one).
    earliest_deadline_ms: int | None = None
    #: Seconds from the judgement to that timeout (None as above).
    seconds_left: float | None = None


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
    live = [p.committable for p in participants if not p.committable.is_empty]
    if not live:
        return Assessment(Verdict.COMMIT, "the source was empty: nothing to commit")
    label = batch.key
    deadline = earliest_deadline_ms(participants)
    left_s: float | None = None
    if deadline is None:
        log.info(
            "%s: no participant can time out (KIP-939 2PC transactions): no commit margin to keep",
            label,
        )
        timing = "none of them can time out (2PC)"
    else:
        left_s = (deadline - now_ms) / 1000
        first = min(
            (
                p
                for p in participants
                if not p.committable.is_empty and p.committable.expires_at_ms == deadline
            ),
            key=lambda p: p.index,
        )
        log.info(
            "%s: %.1f s left before the earliest transaction timeout (partition %d, %s); "
            "commit margin %.1f s",
            label,
            left_s,
            first.index,
            first.transactional_id,
            commit_margin_ms / 1000,
        )
        if deadline - now_ms <= commit_margin_ms:
            when = (
                f"{left_s:.1f} s left before the earliest transaction timeout"
                if left_s > 0
                else f"the earliest transaction timed out {-left_s:.1f} s ago"
            )
            return Assessment(
                Verdict.ABORT,
                f"{when} (partition {first.index}, {first.transactional_id}), less than the "
                f"commit margin of {commit_margin_ms / 1000:.1f} s: the commit could not "
                "finish in time",
                deadline,
                left_s,
            )
        timing = f"{left_s:.1f} s before the earliest transaction timeout"
    closed = not_open(protocol, live)
    if closed:
        return Assessment(
            Verdict.ABORT,
            f"no longer open: {'; '.join(f'{t} ({why})' for t, why in closed.items())}",
            deadline,
            left_s,
        )
    return Assessment(
        Verdict.COMMIT,
        f"{len(participants)} participants prepared {records} records, all open, {timing}",
        deadline,
        left_s,
    )


def not_open(protocol: KafkaProtocol, committables: Sequence[Committable]) -> dict[str, str]:
    """Transactional id -> why it is not open any more; empty when all are open.

    Asks the coordinator (DescribeTransactions, Kafka 3.0+) where it can, else reads the
    partitions' markers: any commit or abort marker after a transaction's records ends it.
    """
    if protocol.api_version(ApiKey.DESCRIBE_TRANSACTIONS) is not None:
        try:
            described = protocol.describe_transactions([c.transactional_id for c in committables])
        except (ProtocolError, ConnectionLostError) as exc:
            # The coordinator could not say: an id it does not know or another error answer,
            # or no answer through the failover. The partitions' markers decide instead. Not
            # a refusal (AuthorizationError): the markers would call the batch open, and its
            # commit fail.
            log.warning("DescribeTransactions failed (%s); reading the markers", exc)
        else:
            by_id = {d.transactional_id: d for d in described}
            closed = {}
            for c in committables:
                d = by_id.get(c.transactional_id)
                if d is None:
                    closed[c.transactional_id] = "unknown to the coordinator"
                elif d.state is not CoordinatorTxnState.ONGOING:
                    closed[c.transactional_id] = f"coordinator state {d.state}"
                elif (d.producer_id, d.producer_epoch) != (c.producer_id, c.producer_epoch):
                    closed[c.transactional_id] = (
                        f"now pid {d.producer_id} epoch {d.producer_epoch}, "
                        f"prepared as pid {c.producer_id} epoch {c.producer_epoch}"
                    )
            return closed
    states = marker_views(LogReader(protocol), committables)
    return {
        c.transactional_id: "committed" if s.committed else "aborted" if s.aborted else "ended"
        for c, s in zip(committables, states, strict=True)
        if not s.open
    }
