"""One recovery round: discover, plan, then act, and verify on the broker afterwards."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from ... import defaults, naming
from ...connection.acls import authorization_failure
from ...errors import (
    ConflictError,
    ConnectionLostError,
    Kafka2pcError,
    ParticipantLostError,
    PrefixOwnedError,
    TransactionInDoubtError,
    VerdictMismatchError,
)
from ...ledger import BatchKey, Lease, Ledger, ParticipantState, Verdict
from ...protocol.client import KafkaProtocol
from ...transaction.controller import Outcome, TransactionController
from ...transaction.log_copy import LogCopy
from ..finish import Coordinator, Finished
from .discovery import OpenTransaction, discover
from .report import RecoveryReport
from .rules import BatchAction, BatchPlan, TransactionAction, TransactionPlan, classify, plan

log = logging.getLogger(__name__)


def plans(
    ledger: Ledger,
    export_id: str,
    *,
    own_run_key: str | None,
    now: datetime,
    grace_period: timedelta,
) -> list[BatchPlan]:
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


def export_prefixes(ledger: Ledger, export_id: str, id_prefix: str | None) -> list[str]:
    """The transactional-id prefixes to search for ``export_id``'s open transactions.

    An explicit prefix wins. Otherwise: the prefixes of its in-doubt batches, and the one
    :func:`~airflow_provider_kafka2pc.naming.default_prefix` derives from the
    export id (what ``kafka_exactly_once_export`` uses unless told otherwise); a prefix the
    ledger never leased an id under is skipped by the round itself.
    """
    if id_prefix:
        return [id_prefix]
    seen = [batch.id_prefix for batch in ledger.in_doubt(export_id)]
    return list(dict.fromkeys([*seen, naming.default_prefix(export_id)]))


def check_ownership(ledger: Ledger, export_id: str, id_prefix: str) -> list[Lease]:
    """The prefix's leases; refuses a prefix whose ids another export holds right now."""
    leases = ledger.leases(id_prefix)
    others = sorted({lease.export_id for lease in leases if lease.leased} - {export_id})
    if others:
        raise PrefixOwnedError(
            f"id_prefix {id_prefix!r} is in use by export(s) {others}, not {export_id!r}: "
            "nothing was touched; recover it as that export"
        )
    return leases


#: What recovery does to a transaction itself (the others leave it to someone).
_ACTS = (TransactionAction.COMMIT, TransactionAction.ABORT, TransactionAction.FENCE)


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
    settle_s: float = defaults.SETTLE_S,
    log_copy: LogCopy | None = None,
) -> RecoveryReport:
    """One recovery round over ``export_id``: its in-doubt batches and its open transactions.

    The broker is read before the ledger: a transaction listed before a lease was taken
    cannot belong to that lease's run. A ``ParticipantLostError`` (a COMMIT verdict whose
    participant was aborted on the broker) lands in ``failed`` after everything else was done,
    unless ``log_copy`` repairs it from the log (its records still there).
    """
    now = now or datetime.now(UTC)
    id_prefixes = [naming.validate_prefix(p) for p in dict.fromkeys(id_prefixes)]
    report = RecoveryReport(export_id, list(id_prefixes), dry_run=dry_run)
    found, searched = discover_all(report, protocol, ledger, export_id, id_prefixes, settle_s)
    batch_plans, txn_plans = plan_round(
        ledger,
        export_id,
        found,
        searched,
        own_run_key=own_run_key,
        now=now,
        grace_period=grace_period,
        first_seen=first_sightings(ledger, found, searched, now, dry_run=dry_run),
    )
    _report_plans(report, batch_plans, txn_plans, now)
    if dry_run:
        for bp in batch_plans:
            if bp.acts:
                report.planned[str(bp.key)] = f"finish {bp.verdict.value}: {bp.why}"
        for tp in txn_plans:
            if tp.action in _ACTS:
                report.planned[tp.txn.transactional_id] = f"{tp.action.value}: {tp.why}"
        return report
    act_round(report, protocol, controller, ledger, batch_plans, txn_plans, log_copy)
    if found:
        _verify(report, protocol, ledger, searched, txn_plans, settle_s)
    log.info("recovery of %s: %s", export_id, report.summary())
    return report


def discover_all(
    report: RecoveryReport,
    protocol: KafkaProtocol,
    ledger: Ledger,
    export_id: str,
    id_prefixes: Sequence[str],
    settle_s: float,
) -> tuple[list[OpenTransaction], list[str]]:
    """What is open under each of the export's prefixes; returns it and the prefixes searched
    (a prefix the ledger never leased an id under is not this export's to search)."""
    found: list[OpenTransaction] = []
    searched: list[str] = []
    for prefix in id_prefixes:
        if not check_ownership(ledger, export_id, prefix):
            report.notes.append(
                f"the ledger has no id under prefix {prefix!r}: no run of this export used "
                "it, so nothing open under it is this export's; not searched"
            )
            continue
        discovery = discover(protocol, ledger, prefix, settle_s=settle_s)
        report.discovery[prefix] = discovery.method
        found.extend(discovery.transactions)
        searched.append(prefix)
    return found, searched


def first_sightings(
    ledger: Ledger,
    found: Sequence[OpenTransaction],
    searched: Sequence[str],
    now: datetime,
    *,
    dry_run: bool = False,
) -> dict[str, datetime]:
    """When recovery first saw each found transaction whose start the coordinator does not
    report, kept in the ledger across rounds (a dry run only reads); the ledger forgets
    the prefix's other sightings, whose transactions have ended."""
    first: dict[str, datetime] = {}
    for prefix in searched:
        undated = [
            (t.transactional_id, t.producer_id, t.producer_epoch)
            for t in found
            if t.known and t.start_time_ms < 0 and naming.prefix_of(t.transactional_id) == prefix
        ]
        if dry_run:
            known = ledger.sightings(prefix)
            first.update(
                (tid, known[tid][2])
                for tid, pid, epoch in undated
                if tid in known and known[tid][:2] == (pid, epoch)
            )
        else:
            first.update(ledger.record_sightings(prefix, undated, now))
    return first


def plan_round(
    ledger: Ledger,
    export_id: str,
    found: Sequence[OpenTransaction],
    searched: Sequence[str],
    *,
    own_run_key: str | None,
    now: datetime,
    grace_period: timedelta,
    first_seen: Mapping[str, datetime] | None = None,
) -> tuple[list[BatchPlan], list[TransactionPlan]]:
    """The rules (:mod:`.rules`) applied to the ledger's in-doubt batches and to what was
    found open; acts on nothing."""
    batch_plans = plans(
        ledger, export_id, own_run_key=own_run_key, now=now, grace_period=grace_period
    )
    holders = {tid: bp for bp in batch_plans for tid in bp.batch.transactional_ids}
    leases = {lease.transactional_id: lease for p in searched for lease in ledger.leases(p)}
    txn_plans = [
        classify(
            txn,
            holders.get(txn.transactional_id),
            leases.get(txn.transactional_id),
            export_id=export_id,
            now=now,
            grace_period=grace_period,
            first_seen=(first_seen or {}).get(txn.transactional_id),
        )
        for txn in found
    ]
    return batch_plans, txn_plans


def act_round(
    report: RecoveryReport,
    protocol: KafkaProtocol,
    controller: TransactionController,
    ledger: Ledger,
    batch_plans: Sequence[BatchPlan],
    txn_plans: Sequence[TransactionPlan],
    log_copy: LogCopy | None = None,
) -> None:
    """Do what the plans say: fence strangers, finish batches by their verdicts (a lost
    participant repaired from the log when ``log_copy`` is given), fence what was aborted."""
    coordinator = Coordinator(ledger, controller, log_copy)
    # Strangers first: an id has one open transaction at a time, so a stranger's being open
    # means the committable's own transaction has ended already; fencing changes nothing
    # for it, and the batch's commit then reads its true outcome from the log.
    for tp in txn_plans:
        if tp.action is TransactionAction.FENCE:
            _fence_checked(report, protocol, controller, ledger, tp)
    finished: dict[BatchKey, Finished] = {}
    for bp in batch_plans:
        if bp.acts:
            result = _finish_batch(report, coordinator, bp)
            if result is not None:
                finished[bp.key] = result
    for tp in txn_plans:
        tid = tp.txn.transactional_id
        done = finished.get(tp.batch_key) if tp.batch_key else None
        fenced_by_abort = done is not None and (tid in done.fenced or tid in done.late)
        if tp.action is TransactionAction.ABORT and done is not None and not fenced_by_abort:
            # Abort + fence: the epoch bump stops a zombie writer from going on.
            _fence(report, controller, tid, f"after the abort of {tp.batch_key}")


def _report_plans(
    report: RecoveryReport,
    batch_plans: Sequence[BatchPlan],
    txn_plans: Sequence[TransactionPlan],
    now: datetime,
) -> None:
    """What was found and what is planned for it, in the report and the log."""
    report.found = [
        {
            **tp.txn.to_dict(now),
            "holder": _shown(tp.batch_key),
            "action": tp.action.value,
            "why": tp.why,
        }
        for tp in txn_plans
    ]
    for tp in txn_plans:
        log.info(
            "open transaction %s (%s, pid %s, epoch %s) of %s: %s, %s",
            tp.txn.transactional_id,
            tp.txn.state,
            tp.txn.producer_id,
            tp.txn.producer_epoch,
            tp.batch_key or "no batch",
            tp.action.value,
            tp.why,
        )
    _settle_plans(report, batch_plans, txn_plans)


def _settle_plans(
    report: RecoveryReport, batch_plans: Sequence[BatchPlan], txn_plans: Sequence[TransactionPlan]
) -> None:
    """Record what is left alone (live or own) before acting."""
    for bp in batch_plans:
        if bp.action is BatchAction.OWN:
            report.own[str(bp.key)] = bp.why
        elif bp.action is BatchAction.LIVE:
            report.leave(str(bp.key), bp.why, live=True)
    for tp in txn_plans:
        tid = tp.txn.transactional_id
        if tp.action is TransactionAction.OWN:
            report.own[tid] = f"{tp.batch_key}: {tp.why}"
        elif tp.action is TransactionAction.LEAVE:
            report.leave(tid, tp.why, live=tp.live)


def _fence_checked(
    report: RecoveryReport,
    protocol: KafkaProtocol,
    controller: TransactionController,
    ledger: Ledger,
    tp: TransactionPlan,
) -> None:
    """Fence ``tp``'s id unless it changed since it was found (a run may have taken it)."""
    txn = tp.txn
    tid = txn.transactional_id
    try:
        if tp.batch_key is None:
            leases = ledger.leases(naming.prefix_of(tid))
            lease = next((x for x in leases if x.transactional_id == tid), None)
            if lease is not None and lease.leased:
                report.leave(tid, f"leased by run {lease.run_key!r} meanwhile", live=True)
                return
        if txn.known:
            row = protocol.describe_transaction(tid)
            current = OpenTransaction.described(row) if row is not None else None
            if current is None or not current.state.open:
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
        result = controller.fence(tid, defaults.FENCE_TIMEOUT_MS)
    except (ConnectionLostError, TransactionInDoubtError) as exc:
        report.leave(tid, f"fence failed, retried next round: {exc}")
        return
    except Kafka2pcError as exc:
        if authorization_failure(exc) is not None:
            raise  # a missing ACL stops the round: no later round does better
        report.failed[tid] = f"fence failed: {exc}"
        return
    report.fenced[tid] = f"{why}; now pid {result.producer_id} epoch {result.producer_epoch}"


def _finish_batch(
    report: RecoveryReport, coordinator: Coordinator, bp: BatchPlan
) -> Finished | None:
    """Finish one batch by its verdict; outcomes go into the report per participant."""
    label = str(bp.key)
    log.info("recovering %s (%s): %s", label, bp.batch.state.value, bp.why)
    try:
        finished = _resolve(coordinator, bp)
    except ParticipantLostError as exc:
        report.failed[label] = str(exc)
        _record_outcomes(report, coordinator.ledger, bp)
        return None
    except VerdictMismatchError as exc:
        report.failed[label] = str(exc)
        return None
    except (TransactionInDoubtError, ConflictError, ConnectionLostError) as exc:
        log.warning("could not resolve %s yet: %s", label, exc)
        report.leave(label, str(exc))
        return None
    except Kafka2pcError as exc:  # refused by the broker or the ledger: a person looks
        if authorization_failure(exc) is not None:
            raise  # a missing ACL stops the round: no later round does better
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
    for tid in finished.late:
        report.fenced[tid] = f"open again after the abort of {label} (a late opener): fenced"
    return finished


def _record_outcomes(report: RecoveryReport, ledger: Ledger, bp: BatchPlan) -> None:
    """After a failed commit: which participants did commit (the others are in ``failed``)."""
    for p in ledger.participants(bp.batch.export_id, bp.batch.run_key):
        if p.state is ParticipantState.COMMITTED:
            report.committed[p.transactional_id] = f"{p.reason} ({bp.key})"


def _resolve(coordinator: Coordinator, bp: BatchPlan) -> Finished:
    batch = bp.batch
    if bp.action is BatchAction.DECIDE_ABORT:
        reason = f"recovery: {bp.why}"
        batch = coordinator.ledger.decide(batch.export_id, batch.run_key, Verdict.ABORT, reason)
    if batch.verdict is Verdict.COMMIT:
        return coordinator.commit(batch.export_id, batch.run_key)
    return coordinator.abort(batch.export_id, batch.run_key, f"recovery: {bp.why}")


def _verify(
    report: RecoveryReport,
    protocol: KafkaProtocol,
    ledger: Ledger,
    prefixes: Sequence[str],
    txn_plans: Sequence[TransactionPlan],
    settle_s: float,
) -> None:
    """Ask the broker again: whatever this round acted on must no longer be open."""
    acted = {tp.txn.transactional_id: tp for tp in txn_plans if tp.action in _ACTS}
    for prefix in prefixes:
        for txn in discover(protocol, ledger, prefix, settle_s=settle_s).transactions:
            tid = txn.transactional_id
            tp = acted.get(tid)
            if tp is None or tid in report.left or tid in report.failed:
                continue
            if not txn.known:
                continue  # nothing to compare on such a broker
            if txn.identity == tp.txn.identity:
                report.leave(tid, f"still {txn.state} after {tp.action.value}")
            else:
                why = f"a new transaction opened during recovery (pid {txn.producer_id})"
                report.leave(tid, why, live=True)


def _state(txn: OpenTransaction | None) -> str:
    return "unknown to the coordinator" if txn is None else txn.state


def _shown(key: BatchKey | None) -> str | None:
    return None if key is None else str(key)
