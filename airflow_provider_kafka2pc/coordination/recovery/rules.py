"""What recovery does, as pure rules: with each in-doubt batch (:func:`plan`) and with each
open transaction given the batch holding its id (:func:`classify`).

Kept apart from the doing (:mod:`.rounds`) so a dry run reports exactly what a real run
would do, and so the rules read as tables (``tests/unit/coordination``).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from ...ledger import Batch, BatchKey, BatchState, Lease, Participant, ParticipantState, Verdict
from ...ledger.store import earliest_deadline_ms
from .discovery import OpenTransaction


class BatchAction(enum.Enum):
    """What recovery does with one in-doubt batch."""

    LIVE = "live"  # another run is working on it: leave it
    OWN = "own"  # this run's own batch: its prepare/decide/commit carry it on
    FINISH = "finish"  # a verdict is recorded: finish it
    DECIDE_ABORT = "decide_abort"  # no verdict and stale: decide ABORT, then finish


@dataclass(frozen=True)
class BatchPlan:
    """An in-doubt batch, what recovery does with it, and why."""

    batch: Batch
    action: BatchAction
    why: str
    participants: tuple[Participant, ...] = ()

    @property
    def key(self) -> BatchKey:
        return self.batch.key

    @property
    def acts(self) -> bool:
        return self.action in (BatchAction.FINISH, BatchAction.DECIDE_ABORT)

    @property
    def verdict(self) -> Verdict | None:
        """The verdict this plan finishes the batch by (ABORT for DECIDE_ABORT)."""
        return Verdict.ABORT if self.action is BatchAction.DECIDE_ABORT else self.batch.verdict

    def participant(self, transactional_id: str) -> Participant | None:
        return self._by_id.get(transactional_id)

    @functools.cached_property
    def _by_id(self) -> dict[str, Participant]:
        """The participants by id, built once: :func:`classify` asks for each open
        transaction's, and a scan per ask made a round over N participants quadratic."""
        by_id: dict[str, Participant] = {}
        for p in self.participants:
            by_id.setdefault(p.transactional_id, p)  # the first, as a scan would find
        return by_id


def plan(
    batch: Batch,
    participants: Sequence[Participant],
    *,
    own_run_key: str | None,
    now: datetime,
    grace_period: timedelta,
) -> BatchPlan:
    """What recovery does with one in-doubt batch, and why."""
    parts = tuple(participants)
    age = now - batch.updated_at
    if batch.run_key == own_run_key:
        if batch.state is BatchState.ABORT_DECIDED:
            why = "this run key's earlier attempt was decided ABORT"
            return BatchPlan(batch, BatchAction.FINISH, why, parts)
        return BatchPlan(batch, BatchAction.OWN, "this run's own batch", parts)
    if batch.verdict is not None:
        if age >= grace_period:
            why = f"verdict {batch.verdict.value} unfinished for {_span(age)}"
            return BatchPlan(batch, BatchAction.FINISH, why, parts)
        why = f"verdict {batch.verdict.value} {_span(age)} ago; its run finishes it"
        return BatchPlan(batch, BatchAction.LIVE, why, parts)
    deadline = earliest_deadline_ms(participants)
    if deadline is not None and now.timestamp() * 1000 >= deadline:
        return BatchPlan(
            batch, BatchAction.DECIDE_ABORT, "its earliest transaction has timed out", parts
        )
    if age >= grace_period:
        why = f"no verdict after {_span(age)} (grace period {_span(grace_period)})"
        return BatchPlan(batch, BatchAction.DECIDE_ABORT, why, parts)
    why = f"{batch.state.value} {_span(age)} ago, within the grace period"
    return BatchPlan(batch, BatchAction.LIVE, why, parts)


class TransactionAction(enum.Enum):
    """What recovery does with one transaction open on the broker."""

    COMMIT = "commit"  # its batch's COMMIT verdict commits it (stored producer id/epoch)
    ABORT = "abort"  # its batch is finished ABORT: aborted, then its id fenced
    FENCE = "fence"  # InitProducerId on its id aborts it
    LEAVE = "leave"  # a live run's, or not resolvable yet: left for the next round
    OWN = "own"  # the waiting run's own batch: its tasks carry it on


@dataclass(frozen=True)
class TransactionPlan:
    """An open transaction, what recovery does with it, and why."""

    txn: OpenTransaction
    action: TransactionAction
    why: str
    #: The batch that holds the id, None when no ledger record does.
    batch_key: BatchKey | None = None
    #: Left because a live run may still finish it (not because something failed).
    live: bool = False


def classify(
    txn: OpenTransaction,
    holder: BatchPlan | None,
    lease: Lease | None,
    *,
    export_id: str,
    now: datetime,
    grace_period: timedelta,
    first_seen: datetime | None = None,
) -> TransactionPlan:
    """What to do with one open transaction, given the batch that holds its id (if any).

    ``first_seen``: when recovery first saw this transaction (same producer id and epoch)
    open, from the ledger; it dates a transaction whose start the coordinator does not
    report, so that one too is fenced once open past the grace period.
    """
    tid = txn.transactional_id
    if holder is None:
        if lease is not None and lease.leased:
            if lease.export_id != export_id:
                why = f"leased by export {lease.export_id!r}: not this export's"
                return TransactionPlan(txn, TransactionAction.LEAVE, why)
            why = f"leased by run {lease.run_key!r}, begun after this round read the ledger"
            return TransactionPlan(txn, TransactionAction.LEAVE, why, live=True)
        if lease is not None and txn.known:
            return _late_opener(txn, lease)
        record = "no batch holds this id" if lease is not None else "no ledger record of this id"
        age = txn.age(now)
        if not txn.known:
            why = f"{record}; the broker cannot say whether it is open: fenced to be sure"
            return TransactionPlan(txn, TransactionAction.FENCE, why)
        if age is None:
            return _undated(txn, record, now, grace_period, first_seen)
        if age < grace_period:
            why = (
                f"{record}; opened {_span(age)} ago, within the grace period {_span(grace_period)}"
            )
            return TransactionPlan(txn, TransactionAction.LEAVE, why, live=True)
        why = f"{record}; open for {_span(age)} (grace period {_span(grace_period)})"
        return TransactionPlan(txn, TransactionAction.FENCE, why)
    key = holder.key
    if holder.action is BatchAction.OWN:
        return TransactionPlan(txn, TransactionAction.OWN, holder.why, key)
    if holder.action is BatchAction.LIVE:
        return TransactionPlan(txn, TransactionAction.LEAVE, holder.why, key, live=True)
    if holder.verdict is Verdict.ABORT:
        return TransactionPlan(txn, TransactionAction.ABORT, f"batch {key}: {holder.why}", key)
    part = holder.participant(tid)
    if part is None:
        why = f"batch {key} has a COMMIT verdict but no committable for {tid}: not ours"
        return TransactionPlan(txn, TransactionAction.FENCE, why, key)
    recorded = (part.committable.producer_id, part.committable.producer_epoch)
    if part.state is not ParticipantState.PREPARED:
        why = (
            f"batch {key}: its participant is already {part.state.value}; this later "
            f"transaction (pid {txn.producer_id}, epoch {txn.producer_epoch}) is not ours"
        )
        return TransactionPlan(txn, TransactionAction.FENCE, why, key)
    if txn.known and txn.identity != recorded:
        why = (
            f"batch {key}: open as pid {txn.producer_id} epoch {txn.producer_epoch}, but "
            f"the recorded committable is pid {recorded[0]} epoch {recorded[1]}: not ours "
            "to commit"
        )
        return TransactionPlan(txn, TransactionAction.FENCE, why, key)
    return TransactionPlan(txn, TransactionAction.COMMIT, f"batch {key}: {holder.why}", key)


def _late_opener(txn: OpenTransaction, lease: Lease) -> TransactionPlan:
    """An open transaction on a pooled id that is back in the pool: fenced at once.

    A lease returns to the pool only when its batch is final (COMMITTED: its transactions
    committed; ABORTED: aborted and fenced), so no run owns what is open there: a task that
    opened after its batch's abort fence (a job the server ran on, a zombie executor).
    Safe against a run leasing the id meanwhile: the round read the broker before the
    ledger, and a run opens its transactions only after its lease, so the transaction found
    is not that run's; the fence checks the lease and the transaction's producer id and epoch
    again right before it strikes (``rounds._fence_checked``).
    """
    why = (
        f"pooled id {lease.transactional_id} is back in the pool (its last batch finished), "
        f"yet a transaction (pid {txn.producer_id}, epoch {txn.producer_epoch}) is open on it:"
        " a late opener, fenced at once"
    )
    return TransactionPlan(txn, TransactionAction.FENCE, why)


def _undated(
    txn: OpenTransaction,
    record: str,
    now: datetime,
    grace_period: timedelta,
    first_seen: datetime | None,
) -> TransactionPlan:
    """No record, and the coordinator reports no start: the grace period runs from when
    recovery first saw it open (kept in the ledger); never seen before: seen now."""
    seen = now - first_seen if first_seen is not None else timedelta(0)
    if seen < grace_period:
        why = (
            f"{record}; start not reported, first seen open {_span(seen)} ago, within the "
            f"grace period {_span(grace_period)}"
        )
        return TransactionPlan(txn, TransactionAction.LEAVE, why, live=True)
    why = (
        f"{record}; start not reported, open since recovery first saw it {_span(seen)} ago "
        f"(grace period {_span(grace_period)})"
    )
    return TransactionPlan(txn, TransactionAction.FENCE, why)


def _span(delta: timedelta) -> str:
    """A duration for people: 42 s, 3 min 5 s, 2 h 10 min."""
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"
