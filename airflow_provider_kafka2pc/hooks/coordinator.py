"""The coordinator's second phase, free of Airflow: finish a batch by its RECORDED verdict.

Every step consults the ledger before acting and records after, so any process may run
it again (a retried or cleared task, the recovery sensor): participants already final are
skipped, a transaction finished twice answers ``ALREADY_*``, and ``finish`` of a final
batch returns it unchanged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..ledger import Batch, BatchState, Ledger, Participant, ParticipantState, Verdict
from ..transaction.controller import Outcome, Resolution, TransactionController
from ..transaction.errors import Kafka2pcError

log = logging.getLogger(__name__)

#: Timeout InitProducerId registers for a fenced id (it opens no transaction).
FENCE_TIMEOUT_MS = 60_000


class NothingPreparedError(Kafka2pcError):
    """No batch for this run key: the prepare failed before the ledger was touched."""


class VerdictMismatchError(Kafka2pcError):
    """The recorded verdict is not the one this step finishes (commit vs abort)."""


class ParticipantLostError(Kafka2pcError):
    """A participant of a COMMIT verdict was aborted on the broker: its records are missing.

    Retrying the commit cannot bring them back; the participant must be re-prepared.
    """


@dataclass(frozen=True)
class Finished:
    """A batch after its second phase, and what this call did to it."""

    batch: Batch
    resolutions: tuple[Resolution, ...] = ()
    fenced: tuple[str, ...] = ()
    #: Records of the batch in final state (committed for COMMIT, discarded for ABORT).
    records: int = 0
    #: Records whose transaction this call ended (0 when others had finished them).
    records_now: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


class Coordinator:
    """Commits or aborts a batch's participants with one ``commit_all``/``abort_all``.

    :param ledger: the coordinator ledger (verdicts and outcomes).
    :param controller: finishes transactions on the broker.
    """

    def __init__(self, ledger: Ledger, controller: TransactionController) -> None:
        self.ledger = ledger
        self.controller = controller

    def batch(self, export_id: str, run_key: str) -> Batch:
        batch = self.ledger.get(export_id, run_key)
        if batch is None:
            raise NothingPreparedError(
                f"no batch {export_id}/{run_key} in the ledger: the prepare failed before it "
                "leased any id, so nothing was written"
            )
        return batch

    def unfinished(self, export_id: str, run_key: str) -> list[Participant]:
        return [
            p
            for p in self.ledger.participants(export_id, run_key)
            if p.state is ParticipantState.PREPARED
        ]

    # -- commit ---------------------------------------------------------------

    def commit_participants(
        self, export_id: str, run_key: str, participants: Sequence[Participant]
    ) -> list[Resolution]:
        """EndTxn(commit) for ``participants`` in one batch; each outcome recorded."""
        if not participants:
            return []
        resolutions = self.controller.commit_all([p.committable for p in participants])
        for r in resolutions:
            state = ParticipantState.COMMITTED if r.outcome.committed else ParticipantState.LOST
            self.ledger.record_outcome(export_id, run_key, r.transactional_id, state, r.reason)
        return resolutions

    def commit(self, export_id: str, run_key: str) -> Finished:
        """Finish a COMMIT verdict: every participant committed, then the batch COMMITTED."""
        started = time.monotonic()
        batch = self.batch(export_id, run_key)
        if batch.verdict is not Verdict.COMMIT:
            raise VerdictMismatchError(
                f"batch {export_id}/{run_key} has verdict {_verdict(batch)}; only a COMMIT "
                "verdict is committed"
            )
        if batch.state is BatchState.COMMITTED:
            return Finished(
                batch, records=_records(self.ledger, batch), notes=["already committed"]
            )
        before = self.ledger.participants(export_id, run_key)
        self._raise_lost(batch, before)
        todo = [p for p in before if p.state is ParticipantState.PREPARED]
        deadlines = [p.committable.deadline_ms for p in todo if not p.committable.is_empty]
        log.info(
            "committing %d of %d participants of %s/%s, %s before the earliest timeout",
            len(todo),
            len(before),
            export_id,
            run_key,
            f"{min(deadlines) / 1000 - time.time():.0f} s" if deadlines else "nothing open",
        )
        resolutions = self.commit_participants(export_id, run_key, todo)
        self._raise_lost(batch, self.ledger.participants(export_id, run_key))
        batch = self.ledger.finish(export_id, run_key)
        return Finished(
            batch,
            tuple(resolutions),
            records=_records(self.ledger, batch),
            records_now=sum(r.record_count for r in resolutions if r.outcome is Outcome.COMMITTED),
            seconds=time.monotonic() - started,
        )

    def _raise_lost(self, batch: Batch, participants: Sequence[Participant]) -> None:
        lost = [p for p in participants if p.state is ParticipantState.LOST]
        if lost:
            names = "; ".join(
                f"partition {p.index} {p.transactional_id} ({p.committable.record_count} "
                f"records): {p.reason}"
                for p in lost
            )
            raise ParticipantLostError(
                f"batch {batch.export_id}/{batch.run_key} has verdict COMMIT but lost "
                f"participants, aborted on the broker before the commit: {names}. Their "
                "records are NOT in the topic; the others are committed. Re-prepare the lost "
                "partitions (loss repair) to complete the batch."
            )

    # -- abort ----------------------------------------------------------------

    def abort(self, export_id: str, run_key: str, reason: str) -> Finished:
        """Record ABORT unless a verdict exists, abort every participant, fence leased ids
        whose committables never arrived, then the batch ABORTED."""
        started = time.monotonic()
        batch = self.batch(export_id, run_key)
        if batch.verdict is None:
            batch = self.ledger.decide(export_id, run_key, Verdict.ABORT, reason)
        if batch.verdict is not Verdict.ABORT:
            raise VerdictMismatchError(
                f"batch {export_id}/{run_key} has verdict {_verdict(batch)}; not aborting it"
            )
        if batch.state is BatchState.ABORTED:
            return Finished(batch, notes=["already aborted"])
        participants = self.ledger.participants(export_id, run_key)
        todo = [p for p in participants if p.state is ParticipantState.PREPARED]
        resolutions = self.controller.abort_all([p.committable for p in todo]) if todo else []
        for r in resolutions:
            if not r.outcome.aborted:
                raise VerdictMismatchError(
                    f"{r.transactional_id} of {export_id}/{run_key} was found {r.outcome.value} "
                    f"although the verdict is ABORT: {r.reason}"
                )
            self.ledger.record_outcome(
                export_id, run_key, r.transactional_id, ParticipantState.ABORTED, r.reason
            )
        known = {p.transactional_id for p in participants}
        fenced = tuple(t for t in batch.transactional_ids if t not in known)
        for tid in fenced:
            self.controller.fence(tid, FENCE_TIMEOUT_MS)
        if fenced:
            log.info("fenced %d leased ids without committables: %s", len(fenced), list(fenced))
        batch = self.ledger.finish(export_id, run_key)
        return Finished(
            batch,
            tuple(resolutions),
            fenced,
            records=sum(p.committable.record_count for p in participants),
            records_now=sum(r.record_count for r in resolutions if r.outcome is Outcome.ABORTED),
            seconds=time.monotonic() - started,
        )

    def fence(self, transactional_ids: Sequence[str]) -> None:
        """Abort whatever these ids left open (their producer ids/epochs are unknown)."""
        for tid in transactional_ids:
            self.controller.fence(tid, FENCE_TIMEOUT_MS)


def _verdict(batch: Batch) -> str:
    return "none yet" if batch.verdict is None else batch.verdict.value


def _records(ledger: Ledger, batch: Batch) -> int:
    return sum(
        p.committable.record_count for p in ledger.participants(batch.export_id, batch.run_key)
    )
