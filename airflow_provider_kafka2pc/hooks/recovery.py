"""Resolving an export's dangling transactions, free of Airflow.

Two witnesses say what dangles. The ledger knows the in-doubt batches and their verdicts;
the broker knows which transactions are really open under the export's transactional-id
prefix (an open transaction holds back every read_committed consumer of the partitions it
touched, so one the ledger forgot is an outage too). Each open transaction is resolved by
the verdict of the batch that holds its id:

* COMMIT verdict: committed with the stored producer id and epoch of its committable. An
  open transaction under that id with another producer id/epoch is not the committable's
  (that one has already ended: an id has one open transaction at a time): it is fenced.
* ABORT verdict, or none once the batch is stale (unchanged for the grace period, or past
  its earliest transaction timeout): aborted, then fenced, so a zombie writer cannot go on.
* No ledger record at all (an id under the prefix that no batch holds): fenced once it has
  been open for the grace period; InitProducerId aborts whatever the id left open.

A live run (its batch changed within the grace period, or its transaction younger than
that) is never touched: it is reported as left. Which batches to touch is a rule
(:func:`plan`, :func:`classify`), kept apart from the doing (:func:`recover`), so a dry run
reports exactly what a real run would do.
"""

from __future__ import annotations

import enum
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ..ledger import (
    Batch,
    BatchState,
    ConflictError,
    Lease,
    Ledger,
    Participant,
    ParticipantState,
    PrefixOwnedError,
    Verdict,
)
from ..ledger.pool import check_prefix as valid_prefix
from ..transaction.controller import Outcome, TransactionController
from ..transaction.errors import (
    Kafka2pcError,
    TransactionInDoubtError,
    UnsupportedError,
)
from ..transaction.protocol import ApiKey, ConnectionLostError, KafkaProtocol
from .coordinator import (
    FENCE_TIMEOUT_MS,
    Coordinator,
    Finished,
    ParticipantLostError,
    VerdictMismatchError,
)
from .verdict import earliest_deadline_ms

log = logging.getLogger(__name__)

#: DescribeTransactions/ListTransactions states in which a transaction still holds back
#: the last stable offset. The Prepare* ones are the coordinator writing its markers.
OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")
ONGOING = "Ongoing"
#: The state of an id on a broker that can neither list nor describe transactions.
UNKNOWN_STATE = "Unknown"
#: How long to wait for a transaction the coordinator is already ending (Prepare*).
DEFAULT_SETTLE_S = 5.0


# -- the ledger's in-doubt batches ------------------------------------------------------------


class Step(enum.Enum):
    LIVE = "live"  # another run is working on it: leave it
    OWN = "own"  # this run's own batch: its prepare/decide/commit carry it on
    FINISH = "finish"  # a verdict is recorded: finish it
    DECIDE_ABORT = "decide_abort"  # no verdict and stale: decide ABORT, then finish


@dataclass(frozen=True)
class Plan:
    batch: Batch
    step: Step
    why: str
    participants: tuple[Participant, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.batch.export_id}/{self.batch.run_key}"

    @property
    def acts(self) -> bool:
        return self.step in (Step.FINISH, Step.DECIDE_ABORT)

    @property
    def verdict(self) -> Verdict | None:
        """The verdict this plan finishes the batch by (ABORT for DECIDE_ABORT)."""
        return Verdict.ABORT if self.step is Step.DECIDE_ABORT else self.batch.verdict

    def participant(self, transactional_id: str) -> Participant | None:
        return next((p for p in self.participants if p.transactional_id == transactional_id), None)


def plan(
    batch: Batch,
    participants: Sequence[Participant],
    *,
    own_run_key: str | None,
    now: datetime,
    grace_period: timedelta,
) -> Plan:
    """What recovery does with one in-doubt batch, and why."""
    parts = tuple(participants)
    age = now - batch.updated_at
    if batch.run_key == own_run_key:
        if batch.state is BatchState.ABORT_DECIDED:
            why = "this run key's earlier attempt was decided ABORT"
            return Plan(batch, Step.FINISH, why, parts)
        return Plan(batch, Step.OWN, "this run's own batch", parts)
    if batch.verdict is not None:
        if age >= grace_period:
            why = f"verdict {batch.verdict.value} unfinished for {_span(age)}"
            return Plan(batch, Step.FINISH, why, parts)
        why = f"verdict {batch.verdict.value} {_span(age)} ago; its run finishes it"
        return Plan(batch, Step.LIVE, why, parts)
    deadline = earliest_deadline_ms(participants)
    if deadline is not None and now.timestamp() * 1000 >= deadline:
        return Plan(batch, Step.DECIDE_ABORT, "its earliest transaction has timed out", parts)
    if age >= grace_period:
        why = f"no verdict after {_span(age)} (grace period {_span(grace_period)})"
        return Plan(batch, Step.DECIDE_ABORT, why, parts)
    why = f"{batch.state.value} {_span(age)} ago, within the grace period"
    return Plan(batch, Step.LIVE, why, parts)


def plans(
    ledger: Ledger,
    export_id: str,
    *,
    own_run_key: str | None,
    now: datetime,
    grace_period: timedelta,
) -> list[Plan]:
    """:func:`plan` for every in-doubt batch of ``export_id``, oldest first."""
    return [
        plan(
            batch,
            ledger.participants(batch.export_id, batch.run_key),
            own_run_key=own_run_key,
            now=now,
            grace_period=grace_period,
        )
        for batch in ledger.in_doubt(export_id)
    ]


# -- the broker's open transactions -----------------------------------------------------------


@dataclass(frozen=True)
class OpenTransaction:
    """One transaction the coordinator reports open under the export's prefix."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    #: When the coordinator saw it begin (epoch ms); -1 when unknown.
    start_time_ms: int
    timeout_ms: int
    partitions: tuple[str, ...] = ()

    @classmethod
    def described(cls, row: Mapping[str, Any]) -> OpenTransaction:
        return cls(
            transactional_id=row["transactional_id"],
            state=row["state"],
            producer_id=row["producer_id"],
            producer_epoch=row["producer_epoch"],
            start_time_ms=row["transaction_start_time_ms"],
            timeout_ms=row["transaction_timeout_ms"],
            partitions=tuple(row.get("partitions", ())),
        )

    @classmethod
    def unknown(cls, transactional_id: str) -> OpenTransaction:
        """An id whose state the broker cannot tell (no DescribeTransactions)."""
        return cls(transactional_id, UNKNOWN_STATE, -1, -1, -1, -1)

    @property
    def known(self) -> bool:
        return self.state != UNKNOWN_STATE

    @property
    def identity(self) -> tuple[int, int]:
        return self.producer_id, self.producer_epoch

    def age(self, now: datetime) -> timedelta | None:
        if self.start_time_ms < 0:
            return None
        return now - datetime.fromtimestamp(self.start_time_ms / 1000, UTC)

    def to_dict(self, now: datetime) -> dict[str, Any]:
        age = self.age(now)
        return {
            **asdict(self),
            "partitions": list(self.partitions),
            "age_s": None if age is None else round(age.total_seconds(), 1),
        }


@dataclass(frozen=True)
class Discovery:
    """The open transactions under one prefix, and how they were found."""

    id_prefix: str
    method: str
    transactions: tuple[OpenTransaction, ...]


def pooled_id_pattern(id_prefix: str) -> re.Pattern[str]:
    """The ids the ledger's pool hands out under ``id_prefix``: ``<prefix>-<slot>``.

    Stricter than "starts with": prefix ``a`` must not claim ``a-eu-0`` or ``ab-0``.
    """
    return re.compile(re.escape(id_prefix) + r"-\d+")


def discover(
    protocol: KafkaProtocol,
    ledger: Ledger,
    id_prefix: str,
    *,
    settle_s: float = DEFAULT_SETTLE_S,
    sleep: Callable[[float], None] = time.sleep,
) -> Discovery:
    """Open transactions whose id is ``<id_prefix>-<slot>``.

    ListTransactions (an id pattern on the broker from Kafka 4.1, our prefix filter before
    that), then DescribeTransactions for producer id, epoch, start and timeout. A broker
    without ListTransactions: the ledger's leases of the prefix are the candidates (every
    id the pool ever handed out has one). A transaction the coordinator is already ending
    (Prepare*) is waited for up to ``settle_s``.
    """
    pattern = pooled_id_pattern(id_prefix)
    try:
        listed = protocol.list_transactions(f"{id_prefix}-", OPEN_STATES)
    except UnsupportedError:
        ids = [lease.transactional_id for lease in ledger.leases(id_prefix)]
        method = "ledger leases (the broker offers no ListTransactions)"
    else:
        ids = [r["transactional_id"] for r in listed if pattern.fullmatch(r["transactional_id"])]
        on_broker = (protocol.api_version(ApiKey.LIST_TRANSACTIONS) or 0) >= 2
        method = "ListTransactions, " + (
            "id pattern on the broker" if on_broker else "prefix filtered here (broker < 4.1)"
        )
    try:
        described = _describe(protocol, ids)
    except UnsupportedError:
        method += "; no DescribeTransactions: states unknown"
        found = tuple(OpenTransaction.unknown(tid) for tid in sorted(ids))
        return Discovery(id_prefix, method, found)
    found = tuple(
        _settle(protocol, t, settle_s, sleep)
        for t in sorted(described.values(), key=lambda t: t.transactional_id)
        if t.state in OPEN_STATES
    )
    return Discovery(id_prefix, method, tuple(t for t in found if t.state in OPEN_STATES))


def _describe(protocol: KafkaProtocol, ids: Sequence[str]) -> dict[str, OpenTransaction]:
    if not ids:
        return {}
    try:
        rows = protocol.describe_transactions(list(ids))
    except UnsupportedError:
        raise
    except Exception as exc:  # one unknown id fails the whole request: ask one by one
        log.info("DescribeTransactions of %d ids failed (%s); asking per id", len(ids), exc)
        rows = [row for tid in ids if (row := protocol.describe_transaction(tid)) is not None]
    return {row["transactional_id"]: OpenTransaction.described(row) for row in rows}


def _settle(
    protocol: KafkaProtocol, txn: OpenTransaction, settle_s: float, sleep: Callable[[float], None]
) -> OpenTransaction:
    deadline = time.monotonic() + settle_s
    while txn.state in OPEN_STATES and txn.state != ONGOING and time.monotonic() < deadline:
        sleep(0.2)
        row = protocol.describe_transaction(txn.transactional_id)
        if row is None:
            return OpenTransaction(txn.transactional_id, "Dead", *txn.identity, -1, -1)
        txn = OpenTransaction.described(row)
    return txn


# -- joining the two: what to do with each open transaction -----------------------------------


class Act(enum.Enum):
    COMMIT = "commit"  # its batch's COMMIT verdict commits it (stored producer id/epoch)
    ABORT = "abort"  # its batch is finished ABORT: aborted, then its id fenced
    FENCE = "fence"  # InitProducerId on its id aborts it
    LEAVE = "leave"  # a live run's, or not resolvable yet: left for the next round
    OWN = "own"  # the waiting run's own batch: its tasks carry it on


@dataclass(frozen=True)
class TxnPlan:
    txn: OpenTransaction
    act: Act
    why: str
    #: The batch that holds the id ("export/run key"), None when no ledger record does.
    holder: str | None = None
    #: Left because a live run may still finish it (not because something failed).
    live: bool = False


def classify(
    txn: OpenTransaction,
    holder: Plan | None,
    lease: Lease | None,
    *,
    export_id: str,
    now: datetime,
    grace_period: timedelta,
) -> TxnPlan:
    """What to do with one open transaction, given the batch that holds its id (if any)."""
    tid = txn.transactional_id
    if holder is None:
        if lease is not None and lease.leased:
            if lease.export_id != export_id:
                why = f"leased by export {lease.export_id!r}: not this export's"
                return TxnPlan(txn, Act.LEAVE, why)
            why = f"leased by run {lease.run_key!r}, begun after this round read the ledger"
            return TxnPlan(txn, Act.LEAVE, why, live=True)
        record = "no batch holds this id" if lease is not None else "no ledger record of this id"
        age = txn.age(now)
        if not txn.known:
            why = f"{record}; the broker cannot say whether it is open: fenced to be sure"
            return TxnPlan(txn, Act.FENCE, why)
        if age is None or age < grace_period:
            opened = "at an unknown time" if age is None else f"{_span(age)} ago"
            why = f"{record}; opened {opened}, within the grace period {_span(grace_period)}"
            return TxnPlan(txn, Act.LEAVE, why, live=True)
        why = f"{record}; open for {_span(age)} (grace period {_span(grace_period)})"
        return TxnPlan(txn, Act.FENCE, why)
    label = holder.label
    if holder.step is Step.OWN:
        return TxnPlan(txn, Act.OWN, holder.why, label)
    if holder.step is Step.LIVE:
        return TxnPlan(txn, Act.LEAVE, holder.why, label, live=True)
    if holder.verdict is Verdict.ABORT:
        return TxnPlan(txn, Act.ABORT, f"batch {label}: {holder.why}", label)
    part = holder.participant(tid)
    if part is None:
        why = f"batch {label} has a COMMIT verdict but no committable for {tid}: not ours"
        return TxnPlan(txn, Act.FENCE, why, label)
    recorded = (part.committable.producer_id, part.committable.producer_epoch)
    if part.state is not ParticipantState.PREPARED:
        why = (
            f"batch {label}: its participant is already {part.state.value}; this later "
            f"transaction (pid {txn.producer_id}, epoch {txn.producer_epoch}) is not ours"
        )
        return TxnPlan(txn, Act.FENCE, why, label)
    if txn.known and txn.identity != recorded:
        why = (
            f"batch {label}: open as pid {txn.producer_id} epoch {txn.producer_epoch}, but "
            f"the recorded committable is pid {recorded[0]} epoch {recorded[1]}: not ours "
            "to commit"
        )
        return TxnPlan(txn, Act.FENCE, why, label)
    return TxnPlan(txn, Act.COMMIT, f"batch {label}: {holder.why}", label)


# -- the report -------------------------------------------------------------------------------


@dataclass
class RecoveryReport:
    """What one recovery round found and did; JSON-ready (``to_dict``/``from_dict``).

    Keys are transactional ids for broker transactions and ``export/run key`` for batches.
    """

    export_id: str = ""
    id_prefixes: list[str] = field(default_factory=list)
    dry_run: bool = False
    #: Per prefix: how its open transactions were found.
    discovery: dict[str, str] = field(default_factory=dict)
    #: Every open transaction found, with the batch holding it and the planned action.
    found: list[dict[str, Any]] = field(default_factory=list)
    #: Batches finished: label -> final state and records.
    batches: dict[str, str] = field(default_factory=dict)
    committed: dict[str, str] = field(default_factory=dict)
    aborted: dict[str, str] = field(default_factory=dict)
    fenced: dict[str, str] = field(default_factory=dict)
    #: Found open, but ended by someone else before this round acted.
    ended: dict[str, str] = field(default_factory=dict)
    #: Not resolved (retried next round): key -> why.
    left: dict[str, str] = field(default_factory=dict)
    #: Keys of ``left`` that a live run may still finish (within the grace period).
    live: list[str] = field(default_factory=list)
    #: The waiting run's own batch, carried on by its own tasks (not left).
    own: dict[str, str] = field(default_factory=dict)
    #: Needs a person, retrying will not help (a lost participant of a COMMIT verdict...).
    failed: dict[str, str] = field(default_factory=dict)
    #: A dry run: what a real run would do.
    planned: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def done(self) -> bool:
        """Nothing left, nothing failed, and (dry run) nothing to do."""
        return not (self.left or self.failed or self.planned)

    def settled(self, wait_for_live: bool) -> bool:
        """Done, or (``wait_for_live`` False) only live runs' transactions left."""
        if wait_for_live or self.failed or self.planned:
            return self.done
        return all(key in self.live for key in self.left)

    def leave(self, key: str, why: str, *, live: bool = False) -> None:
        self.left[key] = why
        if live and key not in self.live:
            self.live.append(key)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "done": self.done}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RecoveryReport:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})

    def summary(self) -> str:
        counts = {
            "found": len(self.found),
            "batches": len(self.batches),
            "committed": len(self.committed),
            "aborted": len(self.aborted),
            "fenced": len(self.fenced),
            "left": len(self.left),
            "failed": len(self.failed),
        }
        if self.dry_run:
            counts["planned"] = len(self.planned)
        return ", ".join(f"{k} {v}" for k, v in counts.items())


# -- doing it ---------------------------------------------------------------------------------


def check_prefix(ledger: Ledger, export_id: str, id_prefix: str) -> list[Lease]:
    """The prefix's leases; refuses a prefix whose ids another export holds right now."""
    leases = ledger.leases(id_prefix)
    others = sorted({lease.export_id for lease in leases if lease.leased} - {export_id})
    if others:
        raise PrefixOwnedError(
            f"id_prefix {id_prefix!r} is in use by export(s) {others}, not {export_id!r}: "
            "nothing was touched; recover it as that export"
        )
    return leases


def recover(
    ledger: Ledger,
    protocol: KafkaProtocol,
    controller: TransactionController,
    export_id: str,
    id_prefixes: Sequence[str],
    *,
    grace_period: timedelta,
    own_run_key: str | None = None,
    now: datetime | None = None,
    dry_run: bool = False,
    settle_s: float = DEFAULT_SETTLE_S,
) -> RecoveryReport:
    """One recovery round over ``export_id``: its in-doubt batches and its open transactions.

    The broker is read before the ledger: a transaction listed before a lease was taken
    cannot belong to that lease's run. A ``ParticipantLostError`` (a COMMIT verdict whose
    participant was aborted on the broker) lands in ``failed`` after everything else was done.
    """
    now = now or datetime.now(UTC)
    id_prefixes = [valid_prefix(p) for p in dict.fromkeys(id_prefixes)]
    report = RecoveryReport(export_id, list(id_prefixes), dry_run=dry_run)
    found: list[OpenTransaction] = []
    searched: list[str] = []
    for prefix in id_prefixes:
        if not check_prefix(ledger, export_id, prefix):
            report.notes.append(
                f"the ledger has no id under prefix {prefix!r}: no run of this export used "
                "it, so nothing open under it is this export's; not searched"
            )
            continue
        discovery = discover(protocol, ledger, prefix, settle_s=settle_s)
        report.discovery[prefix] = discovery.method
        found.extend(discovery.transactions)
        searched.append(prefix)

    steps = plans(ledger, export_id, own_run_key=own_run_key, now=now, grace_period=grace_period)
    holders = {tid: step for step in steps for tid in step.batch.transactional_ids}
    leases = {lease.transactional_id: lease for p in searched for lease in ledger.leases(p)}
    txn_plans = [
        classify(
            txn,
            holders.get(txn.transactional_id),
            leases.get(txn.transactional_id),
            export_id=export_id,
            now=now,
            grace_period=grace_period,
        )
        for txn in found
    ]
    report.found = [
        {**tp.txn.to_dict(now), "holder": tp.holder, "action": tp.act.value, "why": tp.why}
        for tp in txn_plans
    ]
    for tp in txn_plans:
        log.info(
            "open transaction %s (%s, pid %s, epoch %s) of %s: %s, %s",
            tp.txn.transactional_id,
            tp.txn.state,
            tp.txn.producer_id,
            tp.txn.producer_epoch,
            tp.holder or "no batch",
            tp.act.value,
            tp.why,
        )
    _settle_plans(report, steps, txn_plans)
    if dry_run:
        for step in steps:
            if step.acts:
                report.planned[step.label] = f"finish {step.verdict.value}: {step.why}"
        for tp in txn_plans:
            if tp.act in (Act.COMMIT, Act.ABORT, Act.FENCE):
                report.planned[tp.txn.transactional_id] = f"{tp.act.value}: {tp.why}"
        return report

    coordinator = Coordinator(ledger, controller)
    # Strangers first: an id has one open transaction at a time, so a stranger's being open
    # means the committable's own transaction has ended already; fencing changes nothing
    # for it, and the batch's commit then reads its true outcome from the log.
    for tp in txn_plans:
        if tp.act is Act.FENCE:
            _fence_checked(report, protocol, controller, ledger, tp)
    finished: dict[str, Finished] = {}
    for step in steps:
        if step.acts:
            result = _finish_batch(report, coordinator, step)
            if result is not None:
                finished[step.label] = result
    for tp in txn_plans:
        tid = tp.txn.transactional_id
        done = finished.get(tp.holder or "")
        if tp.act is Act.ABORT and done is not None and tid not in done.fenced:
            # Abort + fence: the epoch bump stops a zombie writer from going on.
            _fence(report, controller, tid, f"after the abort of {tp.holder}")
    if found:
        _verify(report, protocol, ledger, searched, txn_plans, settle_s)
    log.info("recovery of %s: %s", export_id, report.summary())
    return report


def _settle_plans(
    report: RecoveryReport, steps: Sequence[Plan], txn_plans: Sequence[TxnPlan]
) -> None:
    """Record what is left alone (live or own) before acting."""
    for step in steps:
        if step.step is Step.OWN:
            report.own[step.label] = step.why
        elif step.step is Step.LIVE:
            report.leave(step.label, step.why, live=True)
    for tp in txn_plans:
        tid = tp.txn.transactional_id
        if tp.act is Act.OWN:
            report.own[tid] = f"{tp.holder}: {tp.why}"
        elif tp.act is Act.LEAVE:
            report.leave(tid, tp.why, live=tp.live)


def _fence_checked(
    report: RecoveryReport,
    protocol: KafkaProtocol,
    controller: TransactionController,
    ledger: Ledger,
    tp: TxnPlan,
) -> None:
    """Fence ``tp``'s id unless it changed since it was found (a run may have taken it)."""
    txn = tp.txn
    tid = txn.transactional_id
    try:
        if tp.holder is None:
            leases = ledger.leases(_prefix_of(tid))
            lease = next((x for x in leases if x.transactional_id == tid), None)
            if lease is not None and lease.leased:
                report.leave(tid, f"leased by run {lease.run_key!r} meanwhile", live=True)
                return
        if txn.known:
            row = protocol.describe_transaction(tid)
            current = OpenTransaction.described(row) if row is not None else None
            if current is None or current.state not in OPEN_STATES:
                report.ended[tid] = f"ended before this round acted ({_state(current)})"
                return
            if current.identity != txn.identity:
                why = (
                    f"now pid {current.producer_id} epoch {current.producer_epoch}: "
                    "changed meanwhile"
                )
                report.leave(tid, why, live=True)
                return
    except (ConnectionLostError, ConflictError, TransactionInDoubtError) as exc:
        report.leave(tid, f"could not check before fencing: {exc}")
        return
    _fence(report, controller, tid, tp.why)


def _fence(report: RecoveryReport, controller: TransactionController, tid: str, why: str) -> None:
    try:
        result = controller.fence(tid, FENCE_TIMEOUT_MS)
    except (ConnectionLostError, TransactionInDoubtError) as exc:
        report.leave(tid, f"fence failed, retried next round: {exc}")
        return
    except Kafka2pcError as exc:
        report.failed[tid] = f"fence failed: {exc}"
        return
    report.fenced[tid] = f"{why}; now pid {result.producer_id} epoch {result.producer_epoch}"


def _finish_batch(report: RecoveryReport, coordinator: Coordinator, step: Plan) -> Finished | None:
    """Finish one batch by its verdict; outcomes go into the report per participant."""
    label = step.label
    log.info("recovering %s (%s): %s", label, step.batch.state.value, step.why)
    try:
        finished = _resolve(coordinator, step)
    except ParticipantLostError as exc:
        report.failed[label] = str(exc)
        _record_outcomes(report, coordinator.ledger, step)
        return None
    except VerdictMismatchError as exc:
        report.failed[label] = str(exc)
        return None
    except (TransactionInDoubtError, ConflictError, ConnectionLostError) as exc:
        log.warning("could not resolve %s yet: %s", label, exc)
        report.leave(label, str(exc))
        return None
    except Kafka2pcError as exc:  # refused by the broker or the ledger: a person looks
        report.failed[label] = f"{type(exc).__name__}: {exc}"
        return None
    report.batches[label] = f"{finished.batch.state.value} ({finished.records} records)"
    for r in finished.resolutions:
        line = f"{r.outcome.value}, {r.record_count} records ({label})"
        if r.outcome.committed:
            report.committed[r.transactional_id] = line
        elif r.outcome is Outcome.LOST:
            report.failed[r.transactional_id] = line
        else:
            report.aborted[r.transactional_id] = line
    for tid in finished.fenced:
        report.fenced[tid] = f"leased by {label}, no committable: fenced by its abort"
    return finished


def _record_outcomes(report: RecoveryReport, ledger: Ledger, step: Plan) -> None:
    """After a failed commit: which participants did commit (the others are in ``failed``)."""
    for p in ledger.participants(step.batch.export_id, step.batch.run_key):
        if p.state is ParticipantState.COMMITTED:
            report.committed[p.transactional_id] = f"{p.reason} ({step.label})"


def _resolve(coordinator: Coordinator, step: Plan) -> Finished:
    batch = step.batch
    if step.step is Step.DECIDE_ABORT:
        reason = f"recovery: {step.why}"
        batch = coordinator.ledger.decide(batch.export_id, batch.run_key, Verdict.ABORT, reason)
    if batch.verdict is Verdict.COMMIT:
        return coordinator.commit(batch.export_id, batch.run_key)
    return coordinator.abort(batch.export_id, batch.run_key, f"recovery: {step.why}")


def _verify(
    report: RecoveryReport,
    protocol: KafkaProtocol,
    ledger: Ledger,
    prefixes: Sequence[str],
    txn_plans: Sequence[TxnPlan],
    settle_s: float,
) -> None:
    """Ask the broker again: whatever this round acted on must no longer be open."""
    acted = {
        tp.txn.transactional_id: tp
        for tp in txn_plans
        if tp.act in (Act.COMMIT, Act.ABORT, Act.FENCE)
    }
    for prefix in prefixes:
        for txn in discover(protocol, ledger, prefix, settle_s=settle_s).transactions:
            tid = txn.transactional_id
            tp = acted.get(tid)
            if tp is None or tid in report.left or tid in report.failed:
                continue
            if not txn.known:
                continue  # nothing to compare on such a broker
            if txn.identity == tp.txn.identity:
                report.leave(tid, f"still {txn.state} after {tp.act.value}")
            else:
                why = f"a new transaction opened during recovery (pid {txn.producer_id})"
                report.leave(tid, why, live=True)


# -- helpers ----------------------------------------------------------------------------------


def _prefix_of(transactional_id: str) -> str:
    return transactional_id.rsplit("-", 1)[0]


def _state(txn: OpenTransaction | None) -> str:
    return "unknown to the coordinator" if txn is None else txn.state


def _span(delta: timedelta) -> str:
    """A duration for people: 42 s, 3 min 5 s, 2 h 10 min."""
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


__all__ = [
    "OPEN_STATES",
    "Act",
    "Discovery",
    "OpenTransaction",
    "Plan",
    "RecoveryReport",
    "Step",
    "TxnPlan",
    "check_prefix",
    "classify",
    "discover",
    "plan",
    "plans",
    "pooled_id_pattern",
    "recover",
]
