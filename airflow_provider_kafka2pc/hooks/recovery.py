"""Resolving an export's in-doubt batches before a new prepare, free of Airflow.

Which batches to touch is a rule (:func:`plan`), kept apart from the doing
(:func:`resolve`). The rule never touches a live run: a batch of another run key is
resolved only when its last change is older than the grace period, or when its earliest
transaction has timed out (then no commit can succeed anyway). The run's own batch is
left to its own prepare/decide/commit, except an ABORT verdict, which is finished so
that the prepare can begin a new attempt.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ..ledger import Batch, BatchState, ConflictError, Ledger, Participant, Verdict
from ..transaction.errors import TransactionInDoubtError
from .coordinator import Coordinator, ParticipantLostError
from .verdict import earliest_deadline_ms

log = logging.getLogger(__name__)


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

    @property
    def label(self) -> str:
        return f"{self.batch.export_id}/{self.batch.run_key}"


def plan(
    batch: Batch,
    participants: Sequence[Participant],
    *,
    own_run_key: str | None,
    now: datetime,
    grace_period: timedelta,
) -> Plan:
    """What recovery does with one in-doubt batch, and why."""
    age = now - batch.updated_at
    if batch.run_key == own_run_key:
        if batch.state is BatchState.ABORT_DECIDED:
            return Plan(batch, Step.FINISH, "this run key's earlier attempt was decided ABORT")
        return Plan(batch, Step.OWN, "this run's own batch")
    if batch.verdict is not None:
        if age >= grace_period:
            return Plan(batch, Step.FINISH, f"verdict {batch.verdict.value} unfinished for {age}")
        return Plan(
            batch, Step.LIVE, f"verdict {batch.verdict.value} {age} ago; its run finishes it"
        )
    deadline = earliest_deadline_ms(participants)
    if deadline is not None and now.timestamp() * 1000 >= deadline:
        return Plan(batch, Step.DECIDE_ABORT, "its earliest transaction has timed out")
    if age >= grace_period:
        return Plan(
            batch, Step.DECIDE_ABORT, f"no verdict after {age} (grace period {grace_period})"
        )
    return Plan(batch, Step.LIVE, f"{batch.state.value} {age} ago, within the grace period")


@dataclass
class RecoveryReport:
    resolved: dict[str, str] = field(default_factory=dict)  # label -> outcome
    live: dict[str, str] = field(default_factory=dict)  # label -> why it was left
    left: dict[str, str] = field(default_factory=dict)  # label -> error, retried later

    @property
    def done(self) -> bool:
        return not self.left

    def to_dict(self) -> dict[str, Any]:
        return {"resolved": self.resolved, "live": self.live, "left": self.left}


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


def needs_broker(steps: Sequence[Plan]) -> bool:
    return any(step.step in (Step.FINISH, Step.DECIDE_ABORT) for step in steps)


def resolve(coordinator: Coordinator | None, steps: Sequence[Plan]) -> RecoveryReport:
    """Carry the plans out; transient failures are reported in ``left``.

    A lost participant of a COMMIT verdict raises :class:`ParticipantLostError`: it needs a
    person (or loss repair), not another poke.
    """
    report = RecoveryReport()
    for step in steps:
        if step.step in (Step.LIVE, Step.OWN):
            report.live[step.label] = step.why
            continue
        assert coordinator is not None, "plans that finish batches need a coordinator"
        log.info("recovering %s (%s): %s", step.label, step.batch.state.value, step.why)
        try:
            report.resolved[step.label] = _resolve(coordinator, step)
        except ParticipantLostError:
            raise
        except (TransactionInDoubtError, ConflictError) as exc:
            log.warning("could not resolve %s yet: %s", step.label, exc)
            report.left[step.label] = str(exc)
    return report


def _resolve(coordinator: Coordinator, step: Plan) -> str:
    batch = step.batch
    if step.step is Step.DECIDE_ABORT:
        reason = f"recovery: {step.why}"
        batch = coordinator.ledger.decide(batch.export_id, batch.run_key, Verdict.ABORT, reason)
    if batch.verdict is Verdict.COMMIT:
        finished = coordinator.commit(batch.export_id, batch.run_key)
    else:
        finished = coordinator.abort(batch.export_id, batch.run_key, f"recovery: {step.why}")
    return f"{finished.batch.state.value} ({finished.records} records)"
