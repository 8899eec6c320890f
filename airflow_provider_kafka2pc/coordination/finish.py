"""The coordinator's second phase, free of Airflow: finish a batch by its RECORDED verdict.

Every step consults the ledger before acting and records after, so any process may run
it again (a retried or cleared task, the recovery sensor): participants already final are
skipped, a transaction finished twice answers ``ALREADY_*``, and ``finish`` of a final
batch returns it unchanged.

Loss repair: a participant of a COMMIT verdict that the broker aborted first (its
transaction outlived its timeout, or was fenced) is recorded LOST; its records are not in
the topic. Two ways to write them again, tried in this order per lost participant:

1. *from the log* (``log_copy``): its aborted records are still in the log until
   retention removes them; :class:`~..transaction.log_copy.LogCopy` copies them into a
   new transaction under the same transactional id. No Spark, no source.
2. *from the source* (``reprepare``): for the participants not (fully) in the log, the
   commit recomputes exactly those partitions from the deterministic input.

Each new committable is recorded in place of the lost one (LOST -> PREPARED) and
committed, so the batch still ends COMMITTED exactly once. Where neither way gives the same
records again, :class:`RepairImpossibleError` names the partitions, their rows and why,
aborts any copy already made, and the batch stays COMMIT_DECIDED for an operator.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .. import defaults
from ..errors import (
    Kafka2pcError,
    NothingPreparedError,
    ParticipantLostError,
    ProtocolError,
    RepairImpossibleError,
    VerdictMismatchError,
)
from ..ledger import Batch, BatchKey, BatchState, Ledger, Participant, ParticipantState, Verdict
from ..protocol.described import CoordinatorTxnState, DescribedTransaction
from ..protocol.seam import TransactionProtocol
from ..transaction.committable import Committable
from ..transaction.controller import Outcome, Resolution, TransactionController
from ..transaction.log_copy import CopyMismatchError, LogCopy, NotInLogError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LostParticipant:
    """A participant of a COMMIT verdict that the broker aborted before our commit."""

    index: int
    transactional_id: str
    records: int
    reason: str | None = None

    @classmethod
    def of(cls, participant: Participant) -> LostParticipant:
        return cls(
            participant.index,
            participant.transactional_id,
            participant.committable.record_count,
            participant.reason,
        )

    def __str__(self) -> str:
        return f"partition {self.index} ({self.transactional_id}, {self.records} rows)"


#: Re-prepares lost partitions: (batch, all its participants, the lost ones) -> the new
#: committables by partition index, each under the lost participant's transactional id.
#: Raises :class:`RepairImpossibleError` when the input no longer yields those partitions.
Reprepare = Callable[
    [Batch, Sequence[Participant], Sequence[Participant]], Mapping[int, Committable]
]


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
    #: Lost partitions this call re-prepared and committed (loss repair).
    repaired: tuple[LostParticipant, ...] = ()
    #: How each repaired partition was written again: ``"log"`` or ``"source"``.
    repaired_from: dict[int, str] = field(default_factory=dict)
    #: Ids an abort found with a transaction open after its EndTxns and fences (a task
    #: that opened late, a zombie writer) and fenced.
    late: tuple[str, ...] = ()


class Coordinator:
    """Commits or aborts a batch's participants with one ``commit_all``/``abort_all``.

    :param ledger: the coordinator ledger (verdicts and outcomes).
    :param controller: finishes transactions on the broker.
    :param log_copy: repairs a lost participant from the log, tried before any re-prepare
        from the source; None: from the source only.
    """

    def __init__(
        self,
        ledger: Ledger,
        controller: TransactionController,
        log_copy: LogCopy | None = None,
    ) -> None:
        self.ledger = ledger
        self.controller = controller
        self.log_copy = log_copy
        #: How the last :meth:`repair` wrote each partition again ("log" or "source").
        self.repaired_from: dict[int, str] = {}

    def batch(self, export_id: str, run_key: str) -> Batch:
        batch = self.ledger.get(export_id, run_key)
        if batch is None:
            raise NothingPreparedError(
                f"no batch {BatchKey(export_id, run_key)} in the ledger: the prepare failed "
                "before it leased any id, so nothing was written"
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
        self.ledger.record_outcomes(
            export_id,
            run_key,
            [
                (
                    r.transactional_id,
                    ParticipantState.COMMITTED if r.outcome.committed else ParticipantState.LOST,
                    r.reason,
                )
                for r in resolutions
            ],
        )
        return resolutions

    def commit(
        self,
        export_id: str,
        run_key: str,
        reprepare: Reprepare | None = None,
        *,
        max_repairs: int = defaults.MAX_REPAIRS,
    ) -> Finished:
        """Finish a COMMIT verdict: every participant committed, then the batch COMMITTED.

        A lost participant raises :class:`ParticipantLostError`, unless this coordinator
        has a ``log_copy`` or ``reprepare`` is given: then the lost partitions are repaired
        (:meth:`repair`) and committed, up to ``max_repairs`` rounds.
        """
        started = time.monotonic()
        repaired: list[LostParticipant] = []
        sources: dict[int, str] = {}
        done: list[Resolution] = []  # every round's outcomes, for what this call did
        rounds = 0
        while True:
            try:
                finished = self._commit_once(export_id, run_key, started, done)
            except ParticipantLostError:
                if (reprepare is None and self.log_copy is None) or rounds >= max_repairs:
                    raise
                rounds += 1
                repaired += self.repair(export_id, run_key, reprepare)
                sources.update(self.repaired_from)
                continue
            if repaired:
                finished = _with_repaired(finished, repaired, sources)
            return finished

    def _commit_once(
        self, export_id: str, run_key: str, started: float, done: list[Resolution]
    ) -> Finished:
        batch = self.batch(export_id, run_key)
        if batch.verdict is not Verdict.COMMIT:
            raise VerdictMismatchError(
                f"batch {batch.key} has verdict {_verdict(batch)}; only a COMMIT verdict is "
                "committed"
            )
        if batch.state is BatchState.COMMITTED:
            return Finished(
                batch, records=_records(self.ledger, batch), notes=["already committed"]
            )
        before = self.ledger.participants(export_id, run_key)
        self._raise_lost(batch, before)
        todo = [p for p in before if p.state is ParticipantState.PREPARED]
        log.info(
            "committing %d of %d participants of %s/%s, %s",
            len(todo),
            len(before),
            export_id,
            run_key,
            _time_left(todo),
        )
        done += self.commit_participants(export_id, run_key, todo)
        self._raise_lost(batch, self.ledger.participants(export_id, run_key))
        batch = self.ledger.finish(export_id, run_key)
        return Finished(
            batch,
            tuple(done),
            records=_records(self.ledger, batch),
            records_now=sum(r.record_count for r in done if r.outcome is Outcome.COMMITTED),
            seconds=time.monotonic() - started,
        )

    def _raise_lost(self, batch: Batch, participants: Sequence[Participant]) -> None:
        lost = [LostParticipant.of(p) for p in participants if p.state is ParticipantState.LOST]
        if lost:
            names = "; ".join(f"{lp}: {lp.reason}" for lp in lost)
            raise ParticipantLostError(
                f"batch {batch.key} has verdict COMMIT but lost "
                f"participants, aborted on the broker before the commit: {names}. Their "
                f"{sum(lp.records for lp in lost)} rows are NOT in the topic; the others are "
                "committed. Re-prepare the lost partitions (loss repair) to complete the batch.",
                lost,
            )

    # -- loss repair ------------------------------------------------------------

    def repair(
        self, export_id: str, run_key: str, reprepare: Reprepare | None = None
    ) -> list[LostParticipant]:
        """Write a COMMIT_DECIDED batch's LOST participants again and record them PREPARED:
        each from the log when it is all still there (``log_copy``), the others by
        ``reprepare`` from the source.

        Each new committable must be the lost partition's own transactional id with the
        recorded number of rows; anything else is refused (and the new transactions are
        aborted) with :class:`RepairImpossibleError`, as is a participant neither way can
        write. Commits nothing itself.
        """
        batch = self.batch(export_id, run_key)
        label = BatchKey(export_id, run_key)
        if batch.verdict is not Verdict.COMMIT or batch.state is not BatchState.COMMIT_DECIDED:
            raise VerdictMismatchError(
                f"batch {label} is {batch.state.value} with verdict {_verdict(batch)}; loss "
                "repair applies to a COMMIT_DECIDED batch only"
            )
        participants = self.ledger.participants(export_id, run_key)
        lost = [p for p in participants if p.state is ParticipantState.LOST]
        if not lost:
            return []
        described = [LostParticipant.of(p) for p in lost]
        names = ", ".join(str(lp) for lp in described)
        log.warning(
            "%s: verdict COMMIT, but %d participants were LOST on the broker (%s): "
            "writing them again (%s)",
            label,
            len(lost),
            names,
            "from the log, else from the source" if self.log_copy else "from the source",
        )
        self.repaired_from = {}
        fresh, not_in_log = self._copy_from_log(label, lost)
        rest = [p for p in lost if p.index not in fresh]
        if rest:
            try:
                if reprepare is None:
                    raise RepairImpossibleError(
                        "not in the log ("
                        + "; ".join(f"partition {p.index}: {not_in_log[p.index]}" for p in rest)
                        + ") and no way to re-prepare from the source here"
                    )
                log.warning(
                    "%s: re-preparing partitions %s from the source (%s)",
                    label,
                    [p.index for p in rest],
                    "; ".join(
                        f"partition {p.index}: {not_in_log.get(p.index, 'no log copy')}"
                        for p in rest
                    ),
                )
                reprepared = dict(reprepare(batch, participants, rest))
            except RepairImpossibleError as exc:
                self._discard(fresh.values())
                why = str(exc)
                if not_in_log and reprepare is not None:
                    why += "; not in the log: " + "; ".join(
                        f"partition {i}: {r}" for i, r in sorted(not_in_log.items())
                    )
                raise RepairImpossibleError(_impossible(batch, described, why), described) from exc
            except BaseException:
                self._discard(fresh.values())
                raise
            for index in reprepared:
                self.repaired_from.setdefault(index, "source")
            overlap = set(fresh) & set(reprepared)
            fresh.update({i: c for i, c in reprepared.items() if i not in overlap})
            if overlap:  # a re-prepare that also wrote partitions copied from the log
                self._discard(reprepared[i] for i in overlap)
        problems = _mismatches(lost, fresh)
        if problems:
            self._discard(fresh.values())
            raise RepairImpossibleError(
                _impossible(batch, described, "; ".join(problems)), described
            )
        recorded: set[int] = set()
        try:
            for p in lost:
                self.ledger.replace_participant(export_id, run_key, fresh[p.index])
                recorded.add(p.index)
        except Exception:  # whatever stopped the recording: discard the rest, then re-raise
            self._discard(c for i, c in fresh.items() if i not in recorded)
            raise
        log.info(
            "%s: wrote %s again (%s); recorded LOST -> PREPARED, committing them now",
            label,
            names,
            ", ".join(f"partition {i} from the {w}" for i, w in sorted(self.repaired_from.items())),
        )
        return described

    def _copy_from_log(
        self, label: BatchKey, lost: Sequence[Participant]
    ) -> tuple[dict[int, Committable], dict[int, str]]:
        """Copy each lost participant whose records are all still in the log; returns the
        copies by partition index, and why each other one is not in the log."""
        copies: dict[int, Committable] = {}
        missing: dict[int, str] = {}
        if self.log_copy is None:
            return copies, missing
        try:
            for p in lost:
                try:
                    copies[p.index] = self.log_copy.copy(p.committable)
                except NotInLogError as exc:
                    missing[p.index] = exc.reason
                    log.warning(
                        "%s: partition %d is not in the log: %s", label, p.index, exc.reason
                    )
                    continue
                except CopyMismatchError as exc:
                    self._discard([exc.copied])
                    missing[p.index] = str(exc)
                    continue
                self.repaired_from[p.index] = "log"
                log.info(
                    "%s: partition %d (%s): %d records copied from the log into a new "
                    "transaction (no Spark, no source)",
                    label,
                    p.index,
                    p.transactional_id,
                    copies[p.index].record_count,
                )
        except BaseException:
            self._discard(copies.values())
            raise
        return copies, missing

    def _discard(self, committables: Iterable[Committable]) -> None:
        """Abort re-prepared transactions that will not be recorded (best effort: they
        would time out anyway, but until then they hold read_committed consumers back)."""
        todo = [c for c in committables if not c.is_empty]
        if not todo:
            return
        try:
            self.controller.abort_all(todo)
        except Kafka2pcError as exc:
            log.error(
                "could not abort re-prepared transactions %s (%s); they end at their timeout",
                [c.transactional_id for c in todo],
                exc,
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
                f"batch {batch.key} has verdict {_verdict(batch)}; not aborting it"
            )
        if batch.state is BatchState.ABORTED:
            return Finished(batch, notes=["already aborted"])
        participants = self.ledger.participants(export_id, run_key)
        todo = [p for p in participants if p.state is ParticipantState.PREPARED]
        resolutions = self.controller.abort_all([p.committable for p in todo]) if todo else []
        # The outcomes before the first one found not aborted are recorded, then it raises.
        wrong = next((r for r in resolutions if not r.outcome.aborted), None)
        aborted = resolutions if wrong is None else resolutions[: resolutions.index(wrong)]
        self.ledger.record_outcomes(
            export_id,
            run_key,
            [(r.transactional_id, ParticipantState.ABORTED, r.reason) for r in aborted],
        )
        if wrong is not None:
            raise VerdictMismatchError(
                f"{wrong.transactional_id} of {batch.key} was found {wrong.outcome.value} "
                f"although the verdict is ABORT: {wrong.reason}"
            )
        known = {p.transactional_id for p in participants}
        fenced = tuple(t for t in batch.transactional_ids if t not in known)
        for tid in fenced:
            self.controller.fence(tid, defaults.FENCE_TIMEOUT_MS)
        if fenced:
            log.info("fenced %d leased ids without committables: %s", len(fenced), list(fenced))
        late = self._sweep(batch)
        batch = self.ledger.finish(export_id, run_key)
        return Finished(
            batch,
            tuple(resolutions),
            fenced,
            records=sum(p.committable.record_count for p in participants),
            records_now=sum(r.record_count for r in resolutions if r.outcome is Outcome.ABORTED),
            seconds=time.monotonic() - started,
            late=tuple(late),
        )

    def _sweep(self, batch: Batch) -> list[str]:
        """After the abort's EndTxns and fences: fence each of the batch's ids still found
        Ongoing (one DescribeTransactions for all), before the ids go back to the pool.

        Whatever is Ongoing there now is no committable of this batch (those were just
        aborted, and an EndTxn leaves PrepareAbort/CompleteAbort, not Ongoing): a task
        that opened after its id was fenced, or a zombie attempt that reopened a
        participant's id under a newer epoch, which an EndTxn with the recorded epoch does
        not touch. Only what is open at this moment is seen; one that opens later is the
        next recovery round's (an open transaction on an id back in the pool is fenced at
        once). A broker that cannot describe: nothing swept, said in the log.
        """
        ids = list(dict.fromkeys(batch.transactional_ids))
        try:
            ongoing = ongoing_ids(self.controller.protocol, ids)
        except Kafka2pcError as exc:
            log.warning(
                "%s: could not look for transactions opened after the abort (%s); the next "
                "recovery round fences any",
                batch.key,
                exc,
            )
            return []
        for tid in ongoing:
            log.warning(
                "%s: %s has a transaction open after the batch's abort (a task that opened "
                "late, or a zombie writer): fencing it",
                batch.key,
                tid,
            )
            self.controller.fence(tid, defaults.FENCE_TIMEOUT_MS)
        return ongoing

    def fence(self, transactional_ids: Sequence[str]) -> None:
        """Abort whatever these ids left open (their producer ids/epochs are unknown)."""
        for tid in transactional_ids:
            self.controller.fence(tid, defaults.FENCE_TIMEOUT_MS)


def ongoing_ids(protocol: TransactionProtocol, ids: Sequence[str]) -> list[str]:
    """Those of ``ids`` the coordinator reports Ongoing: one DescribeTransactions for all
    where the protocol offers it, else (or when one unknown id fails the whole request)
    one per id; an id the coordinator does not know is not open."""
    if not ids:
        return []
    many = getattr(protocol, "describe_transactions", None)
    rows: list[DescribedTransaction] = []
    if many is not None:
        try:
            rows = list(many(list(ids)))
        except ProtocolError:
            many = None
    if many is None:
        rows = [row for tid in ids if (row := protocol.describe_transaction(tid)) is not None]
    return [r.transactional_id for r in rows if r.state is CoordinatorTxnState.ONGOING]


def _time_left(participants: Sequence[Participant]) -> str:
    """How long the earliest of these transactions has left, for the log."""
    expiry = [
        e for p in participants if not p.committable.is_empty and (e := p.committable.expires_at_ms)
    ]
    if not expiry:
        return "none of them can time out"
    left = min(expiry) / 1000 - time.time()
    if left >= 0:
        return f"{left:.1f} s before the earliest transaction timeout"
    return f"the earliest transaction timed out {-left:.1f} s ago: expect LOST participants"


def _mismatches(lost: Sequence[Participant], fresh: Mapping[int, Committable]) -> list[str]:
    problems = []
    for p in lost:
        c = fresh.get(p.index)
        if c is None:
            problems.append(f"partition {p.index} was not re-prepared")
        elif c.transactional_id != p.transactional_id:
            problems.append(
                f"partition {p.index} was re-prepared under {c.transactional_id!r}, "
                f"not its own {p.transactional_id!r}"
            )
        elif c.record_count != p.committable.record_count:
            problems.append(
                f"partition {p.index} re-prepared {c.record_count} rows, "
                f"{p.committable.record_count} recorded"
            )
    extra = sorted(set(fresh) - {p.index for p in lost})
    if extra:
        problems.append(f"partitions {extra} were re-prepared but not lost")
    return problems


def _impossible(batch: Batch, lost: Sequence[LostParticipant], why: str) -> str:
    rows = sum(lp.records for lp in lost)
    return (
        f"batch {batch.key}: verdict COMMIT, but "
        f"{', '.join(str(lp) for lp in lost)} were LOST on the broker and cannot be "
        f"written again: {why}. Their {rows} rows are NOT in the topic; nothing was written "
        "twice. The batch stays COMMIT_DECIDED with these participants LOST: restore the "
        "source as it was at the prepare and run the commit again, or export the missing "
        "rows by hand and settle the batch."
    )


def _with_repaired(
    finished: Finished, repaired: Sequence[LostParticipant], sources: Mapping[int, str]
) -> Finished:
    how = ", ".join(f"{lp} from the {sources.get(lp.index, 'source')}" for lp in repaired)
    return Finished(
        finished.batch,
        finished.resolutions,
        finished.fenced,
        finished.records,
        finished.records_now,
        finished.seconds,
        [*finished.notes, f"repaired {how}"],
        tuple(repaired),
        dict(sources),
    )


def _verdict(batch: Batch) -> str:
    return "none yet" if batch.verdict is None else batch.verdict.value


def _records(ledger: Ledger, batch: Batch) -> int:
    return sum(
        p.committable.record_count for p in ledger.participants(batch.export_id, batch.run_key)
    )
