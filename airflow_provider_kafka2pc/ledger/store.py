"""The coordinator ledger: a batch per (export id, run key), its participants and verdict.

Every state change is a compare-and-set (``UPDATE ... WHERE state = :expected``) inside one
database transaction; zero rows means another writer moved first, and a re-read tells a
lost race (:class:`ConflictError`) from a move that is now illegal
(:class:`IllegalTransitionError`). See :mod:`.database` for how writers are serialised.

Over 500 lines: every write of the batch and participant state machines is here, one
method per transition of :mod:`.states`' tables, so that no other module writes the ledger.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Connection, bindparam, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from .. import naming
from ..errors import (
    CommittableError,
    ConfigurationError,
    ConflictError,
    IllegalTransitionError,
    NotFoundError,
)
from ..transaction.committable import Committable
from ..transaction.manifest import PARTITIONINGS
from . import database, pool
from .key import BatchKey
from .schema import batches, leases, now, participants, sightings
from .states import (
    BATCH_TRANSITIONS,
    BatchState,
    ParticipantState,
    Verdict,
    check_batch_move,
    check_participant_move,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Batch:
    """One (export id, run key): its state, verdict and the ids leased for its partitions."""

    export_id: str
    run_key: str
    attempt: int
    state: BatchState
    topic: str
    id_prefix: str
    #: Index i is Spark partition i; kept after the leases are given back.
    transactional_ids: tuple[str, ...]
    verdict: Verdict | None
    verdict_reason: str | None
    source_rows: int | None
    #: How the prepare partitioned its rows (``manifest.PARTITIONINGS``), which a loss
    #: repair follows; None before the prepare, or for batches recorded before the ledger
    #: kept it.
    partitioning: str | None
    #: With ``partitioning`` "source-splits": what recomputing the splits needs
    #: (``spark.source_splits.SourceSplits.to_dict``); else None.
    source_splits: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime
    decided_at: datetime | None
    finished_at: datetime | None
    #: Every topic the export writes, ``topic`` first (a ``topic_column`` routes rows
    #: among several); ``(topic,)`` for a one-topic export.
    topics: tuple[str, ...] = ()
    #: The prepare's Spark job as recorded (``spark.job_spec.SparkJob.record``), which a
    #: loss repair from the source runs again; None when no prepare operator ran it (the
    #: external-operator path) or for batches recorded before the ledger kept it.
    spark_job: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not self.topics:
            object.__setattr__(self, "topics", (self.topic,))

    @property
    def key(self) -> BatchKey:
        return BatchKey(self.export_id, self.run_key)

    def summary(self) -> dict[str, Any]:
        """Who and where the batch is, for XCom and reports (never settings)."""
        return {
            "export_id": self.export_id,
            "run_key": self.run_key,
            "attempt": self.attempt,
            "state": self.state.value,
            "topic": self.topic,
            **({"topics": list(self.topics)} if len(self.topics) > 1 else {}),
        }


@dataclass(frozen=True)
class Participant:
    """One prepared transaction of the batch's current attempt."""

    index: int
    transactional_id: str
    committable: Committable
    state: ParticipantState
    reason: str | None
    updated_at: datetime


@dataclass(frozen=True)
class Lease:
    """One pooled id ``<id_prefix>-<slot>``; the holder fields are None while it is free."""

    id_prefix: str
    slot: int
    transactional_id: str
    export_id: str | None
    run_key: str | None
    leased: bool
    leased_at: datetime | None


def earliest_deadline_ms(participants: Sequence[Participant]) -> int | None:
    """When the first participant's transaction times out on the broker (epoch ms).

    None when none can: no transaction was opened, or each is a KIP-939 one
    (:attr:`Committable.expires_at_ms` is None: there is no deadline to guard).
    """
    deadlines = [
        expires
        for p in participants
        if not p.committable.is_empty and (expires := p.committable.expires_at_ms) is not None
    ]
    return min(deadlines) if deadlines else None


class Ledger:
    """The coordinator's durable memory, shared by every task process of every run."""

    def __init__(self, url: str, *, migrate: bool = True) -> None:
        self._url = database.normalise_url(url)
        self._engine = database.open_engine(self._url)
        try:
            if migrate:
                database.migrate(self._engine)
            else:  # read as it is: only a schema this code knows how to read
                at = self._url.render_as_string()
                database.check_revision(database.schema_revision(self._engine), at)
        except BaseException:
            self._engine.dispose()
            raise

    default_url = staticmethod(database.default_url)

    def __repr__(self) -> str:
        return f"Ledger({self._url.render_as_string(hide_password=True)!r})"

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- batches --------------------------------------------------------------------------

    def begin(
        self,
        export_id: str,
        run_key: str,
        *,
        topic: str,
        id_prefix: str,
        num_partitions: int,
        topics: Sequence[str] | None = None,
    ) -> Batch:
        """Create the batch in PREPARING with leased ids, or return the existing one.

        ``topics``: every topic of an export routing its rows among several (``topic`` is
        the first); None for one topic.

        An ABORTED batch starts a new attempt; PREPARING/PREPARED ones come back unchanged
        (a retried prepare re-uses its ids); decided or COMMITTED ones come back unchanged
        for the caller to act on. One transaction: on any error nothing is written.
        """
        label = _key(export_id, run_key)
        _check_name(topic, "topic", _length(batches.c.topic))
        naming.validate_prefix(id_prefix)
        if isinstance(num_partitions, bool) or not isinstance(num_partitions, int):
            raise ConfigurationError(f"num_partitions must be an integer, got {num_partitions!r}")
        if num_partitions < 1:
            raise ConfigurationError(f"num_partitions must be >= 1, got {num_partitions}")
        several = None
        if topics is not None and list(topics) != [topic]:
            named = [_check_name(t, "topics[]", _length(batches.c.topic)) for t in topics]
            if not named or named[0] != topic or len(set(named)) != len(named):
                raise ConfigurationError(
                    f"topics must list distinct topics, {topic!r} first; got {list(topics)}"
                )
            several = json.dumps(named)
        spec = {
            "topic": topic,
            "id_prefix": id_prefix,
            "num_partitions": num_partitions,
            "topics": several,
        }
        try:
            with database.writing(self._engine) as conn:
                pool.claim_prefix(conn, export_id, id_prefix)
                row = _batch_row(conn, export_id, run_key)
                if row is None:
                    _begin_new(conn, export_id, run_key, spec)
                elif row.state == BatchState.ABORTED:
                    _begin_new_attempt(conn, row, spec)
                elif row.state in (BatchState.PREPARING, BatchState.PREPARED):
                    _check_same_spec(label, row, spec)
                return _to_batch(_batch_row(conn, export_id, run_key))
        except IntegrityError as exc:
            raise ConflictError(f"batch {label}: begun concurrently elsewhere; retry") from exc

    def record_prepared(
        self,
        export_id: str,
        run_key: str,
        committables: Sequence[Committable],
        *,
        source_rows: int,
        partitioning: str | None = None,
        source_splits: Mapping[str, Any] | None = None,
        spark_job: Mapping[str, Any] | None = None,
    ) -> Batch:
        """PREPARING -> PREPARED with one participant per committable (index = partition),
        and how the prepare partitioned its rows (``manifest.PARTITIONINGS``; None: unknown).
        ``source_splits``: with source-split partitioning, what its repair recomputes.
        ``spark_job``: the Spark job that prepared them, as recorded (no secret), which a
        loss repair from the source runs again.

        A PREPARED batch is re-prepared (-> PREPARING -> PREPARED, participants replaced):
        its prepare ran again before any verdict.
        """
        label = _key(export_id, run_key)
        if isinstance(source_rows, bool) or not isinstance(source_rows, int) or source_rows < 0:
            raise ConfigurationError(f"source_rows must be an integer >= 0, got {source_rows!r}")
        if partitioning is not None and partitioning not in PARTITIONINGS:
            raise ConfigurationError(
                f"partitioning must be one of {PARTITIONINGS} or None, got {partitioning!r}"
            )
        committables = tuple(committables)
        with database.writing(self._engine) as conn:
            row = _require(conn, export_id, run_key)
            ref = _ref(row)
            if ref.state is BatchState.PREPARED:
                ref = _move(conn, ref, BatchState.PREPARING, "re-prepare")
            check_batch_move(label, ref.state, BatchState.PREPARED)
            _check_committables(label, json.loads(row.transactional_ids), committables)
            reason = f"{len(committables)} participants"
            _move(
                conn,
                ref,
                BatchState.PREPARED,
                reason,
                source_rows=source_rows,
                partitioning=partitioning,
                source_splits=None if source_splits is None else json.dumps(dict(source_splits)),
                spark_job=None if spark_job is None else json.dumps(dict(spark_job)),
            )
            key = {"batch_id": row.id, "attempt": row.attempt}
            conn.execute(delete(participants).filter_by(**key))
            prepared = {"state": ParticipantState.PREPARED.value, "updated_at": now(), **key}
            rows = [
                {
                    "partition_index": i,
                    "transactional_id": c.transactional_id,
                    "committable": c.to_json(),
                    **prepared,
                }
                for i, c in enumerate(committables)
            ]
            conn.execute(insert(participants), rows)
            return _to_batch(_batch_row(conn, export_id, run_key))

    def decide(self, export_id: str, run_key: str, verdict: Verdict, reason: str) -> Batch:
        """Record the verdict; the first writer wins and every caller gets the RECORDED one.

        COMMIT needs PREPARED; ABORT is also allowed from PREPARING.
        """
        label = _key(export_id, run_key)
        verdict = Verdict(verdict)
        _check_reason(reason)
        with database.writing(self._engine) as conn:
            # After a lost compare-and-set, look again: a verdict recorded meanwhile is
            # returned; a batch re-prepared meanwhile is tried again.
            for _ in range(5):
                row = _require(conn, export_id, run_key)
                if BatchState(row.state).decided:
                    return _to_batch(row)
                ref = _ref(row)
                check_batch_move(label, ref.state, verdict.decided_state)
                if _cas(conn, ref, verdict.decided_state, reason):
                    return _to_batch(_batch_row(conn, export_id, run_key))
            raise ConflictError(f"batch {label}: kept moving while deciding; retry")

    def finish(self, export_id: str, run_key: str) -> Batch:
        """*_DECIDED -> COMMITTED/ABORTED once every participant is final; gives the ids back.

        COMMIT needs every participant COMMITTED; ABORT needs each ABORTED or LOST (gone on
        the broker: nothing left to abort). A final batch comes back unchanged (a retry).
        """
        label = _key(export_id, run_key)
        with database.writing(self._engine) as conn:
            row = _require(conn, export_id, run_key)
            ref = _ref(row)
            if ref.state.final:
                return _to_batch(row)
            target = BatchState.ABORTED
            done = {ParticipantState.ABORTED, ParticipantState.LOST}
            if ref.state is not BatchState.ABORT_DECIDED:
                target, done = BatchState.COMMITTED, {ParticipantState.COMMITTED}
            check_batch_move(label, ref.state, target)
            pending = [p for p in _participants(conn, row) if p.state not in done]
            if pending:
                names = ", ".join(f"{p.index} {p.transactional_id} {p.state}" for p in pending)
                wanted = "/".join(sorted(done))
                raise IllegalTransitionError(
                    label, ref.state, target, f"participants not {wanted}: {names}"
                )
            _move(conn, ref, target, f"{row.verdict}: {row.verdict_reason}")
            released = pool.release(conn, export_id, run_key)
            log.info("ledger: batch %s gave %d ids back to the pool", label, released)
            return _to_batch(_batch_row(conn, export_id, run_key))

    # -- participants ---------------------------------------------------------------------

    def record_outcome(
        self,
        export_id: str,
        run_key: str,
        transactional_id: str,
        state: ParticipantState,
        reason: str,
    ) -> Participant:
        """Move one participant per PARTICIPANT_TRANSITIONS; the same state again is a no-op.

        COMMITTED needs the batch's COMMIT verdict and ABORTED its ABORT verdict: the
        ledger never records an outcome that contradicts the decision.
        """
        label = _key(export_id, run_key)
        state = ParticipantState(state)
        _check_reason(reason)
        with database.writing(self._engine) as conn:
            row = _require(conn, export_id, run_key)
            part = _participant(conn, row, transactional_id)
            if part.state is state:
                return part
            where = f"{label} participant {part.index} ({transactional_id})"
            check_participant_move(where, part.state, state, BatchState(row.state))
            return _participant_cas(conn, row, part, where, state, reason)

    def record_outcomes(
        self,
        export_id: str,
        run_key: str,
        outcomes: Sequence[tuple[str, ParticipantState, str]],
    ) -> int:
        """:meth:`record_outcome` for many participants ((id, state, reason) each) in one
        database transaction; returns how many moved (a same-state repeat moves none).

        Why: a commit of a thousand participants recorded one transaction each spent most
        of its time in the database's commits (a sync to disk each) and in finding each
        participant by its id; here the participants are read once and each move is one
        keyed compare-and-set. All or nothing: an illegal or lost move raises (as
        :meth:`record_outcome` would) and records none of them.
        """
        label = _key(export_id, run_key)
        wanted = [(tid, ParticipantState(state), reason) for tid, state, reason in outcomes]
        for _, _, reason in wanted:
            _check_reason(reason)
        if not wanted:
            return 0
        with database.writing(self._engine) as conn:
            row = _require(conn, export_id, run_key)
            batch_state = BatchState(row.state)
            by_id = {p.transactional_id: p for p in _participants(conn, row)}
            moves: list[tuple[Participant, ParticipantState, str]] = []
            for tid, state, reason in wanted:
                part = by_id.get(tid)
                if part is None:
                    part = _participant(conn, row, tid)  # raises NotFoundError
                if part.state is state:
                    continue
                where = f"{label} participant {part.index} ({tid})"
                check_participant_move(where, part.state, state, batch_state)
                moves.append((part, state, reason))
                by_id[tid] = replace(part, state=state, reason=reason)
            if moves:
                _participants_cas(conn, row, label, moves)
            log.info("ledger: batch %s recorded %d of %d outcomes", label, len(moves), len(wanted))
            return len(moves)

    def replace_participant(
        self, export_id: str, run_key: str, committable: Committable
    ) -> Participant:
        """LOST -> PREPARED with a re-prepared committable (loss repair); a repeat is a no-op."""
        label = _key(export_id, run_key)
        tid = committable.transactional_id
        with database.writing(self._engine) as conn:
            row = _require(conn, export_id, run_key)
            part = _participant(conn, row, tid)
            if part.state is ParticipantState.PREPARED and part.committable == committable:
                return part
            where = f"{label} participant {part.index} ({tid})"
            check_participant_move(
                where, part.state, ParticipantState.PREPARED, BatchState(row.state)
            )
            return _participant_cas(
                conn,
                row,
                part,
                where,
                ParticipantState.PREPARED,
                "re-prepared after loss",
                committable=committable.to_json(),
            )

    # -- reads ----------------------------------------------------------------------------

    def get(self, export_id: str, run_key: str) -> Batch | None:
        with database.reading(self._engine) as conn:
            row = _batch_row(conn, export_id, run_key)
            return None if row is None else _to_batch(row)

    def participants(self, export_id: str, run_key: str) -> list[Participant]:
        """The current attempt's participants by index ([] before record_prepared)."""
        with database.reading(self._engine) as conn:
            row = _batch_row(conn, export_id, run_key)
            return [] if row is None else _participants(conn, row)

    def in_doubt(self, export_id: str | None = None) -> list[Batch]:
        """Batches not yet COMMITTED/ABORTED, oldest first."""
        query = select(batches).where(
            batches.c.state.not_in([BatchState.COMMITTED.value, BatchState.ABORTED.value])
        )
        if export_id is not None:
            query = query.where(batches.c.export_id == export_id)
        with database.reading(self._engine) as conn:
            rows = conn.execute(query.order_by(batches.c.created_at, batches.c.id))
            return [_to_batch(r) for r in rows]

    def export_ids(self) -> list[str]:
        """Every export that ever began a batch, sorted (what an overview lists)."""
        query = select(batches.c.export_id).distinct().order_by(batches.c.export_id)
        with database.reading(self._engine) as conn:
            return [row.export_id for row in conn.execute(query)]

    def recent(self, export_id: str, limit: int = 10) -> list[Batch]:
        """The export's ``limit`` most recently begun batches, newest first."""
        query = (
            select(batches)
            .where(batches.c.export_id == export_id)
            .order_by(batches.c.created_at.desc(), batches.c.id.desc())
            .limit(limit)
        )
        with database.reading(self._engine) as conn:
            return [_to_batch(r) for r in conn.execute(query)]

    def leases(self, id_prefix: str | None = None) -> list[Lease]:
        query = select(leases).order_by(leases.c.id_prefix, leases.c.slot)
        if id_prefix is not None:
            query = query.where(leases.c.id_prefix == id_prefix)
        with database.reading(self._engine) as conn:
            return [Lease(**r._asdict()) for r in conn.execute(query)]

    # -- open transactions no record holds ------------------------------------------------

    def sightings(self, id_prefix: str) -> dict[str, tuple[int, int, datetime]]:
        """``{transactional id: (producer id, epoch, first seen)}`` under ``id_prefix``."""
        query = select(sightings).where(sightings.c.id_prefix == id_prefix)
        with database.reading(self._engine) as conn:
            return {
                r.transactional_id: (r.producer_id, r.producer_epoch, r.first_seen_at)
                for r in conn.execute(query)
            }

    def record_sightings(
        self, id_prefix: str, seen: Sequence[tuple[str, int, int]], when: datetime
    ) -> dict[str, datetime]:
        """Record that recovery saw ``seen`` ((id, producer id, epoch), all under
        ``id_prefix``) open at ``when``, and forget the prefix's other sightings (ended).

        An id keeps its first sighting while its producer id and epoch stay the same; a new
        identity is a new transaction, first seen now. Returns each seen id's first sighting.
        """
        wanted = {tid: (pid, epoch) for tid, pid, epoch in seen}
        first: dict[str, datetime] = {}
        with database.writing(self._engine) as conn:
            known = {
                r.transactional_id: r
                for r in conn.execute(select(sightings).where(sightings.c.id_prefix == id_prefix))
            }
            gone = [tid for tid in known if tid not in wanted]
            if gone:
                conn.execute(delete(sightings).where(sightings.c.transactional_id.in_(gone)))
            for tid, (pid, epoch) in wanted.items():
                row = known.get(tid)
                if row is not None and (row.producer_id, row.producer_epoch) == (pid, epoch):
                    first[tid] = row.first_seen_at
                    continue
                if row is not None:
                    conn.execute(delete(sightings).where(sightings.c.transactional_id == tid))
                conn.execute(
                    insert(sightings).values(
                        transactional_id=tid,
                        id_prefix=id_prefix,
                        producer_id=pid,
                        producer_epoch=epoch,
                        first_seen_at=when,
                    )
                )
                first[tid] = when
        return first

    def _transition(
        self,
        export_id: str,
        run_key: str,
        target: BatchState,
        reason: str = "",
        *,
        expected: BatchState | None = None,
    ) -> Batch:
        """The bare move the named methods build on (no leases, no participants).

        For the transition-table tests; ``expected`` stands in for a stale read.
        """
        with database.writing(self._engine) as conn:
            ref = _ref(_require(conn, export_id, run_key))
            if expected is not None:
                ref = ref._replace(state=expected)
            _move(conn, ref, target, reason)
            return _to_batch(_batch_row(conn, export_id, run_key))


# -- batch rows and their compare-and-set (inside the caller's transaction) ---------------------


class _Ref(NamedTuple):
    """What a compare-and-set expects the batch row to still be."""

    id: int
    label: str
    state: BatchState
    attempt: int


def _ref(row: Any) -> _Ref:
    return _Ref(
        row.id, str(BatchKey(row.export_id, row.run_key)), BatchState(row.state), row.attempt
    )


def _batch_row(conn: Connection, export_id: str, run_key: str) -> Any:
    query = select(batches).where(batches.c.export_id == export_id, batches.c.run_key == run_key)
    return conn.execute(query).first()


def _require(conn: Connection, export_id: str, run_key: str) -> Any:
    row = _batch_row(conn, export_id, run_key)
    if row is None:
        raise NotFoundError(
            f"no batch {BatchKey(export_id, run_key)} in the ledger: begin() it first"
        )
    return row


def _to_batch(row: Any) -> Batch:
    return Batch(
        export_id=row.export_id,
        run_key=row.run_key,
        attempt=row.attempt,
        state=BatchState(row.state),
        topic=row.topic,
        id_prefix=row.id_prefix,
        transactional_ids=tuple(json.loads(row.transactional_ids)),
        verdict=None if row.verdict is None else Verdict(row.verdict),
        verdict_reason=row.verdict_reason,
        source_rows=row.source_rows,
        partitioning=row.partitioning,
        source_splits=None if row.source_splits is None else json.loads(row.source_splits),
        topics=tuple(json.loads(row.topics)) if row.topics else (),
        spark_job=None if row.spark_job is None else json.loads(row.spark_job),
        created_at=row.created_at,
        updated_at=row.updated_at,
        decided_at=row.decided_at,
        finished_at=row.finished_at,
    )


def _cas(conn: Connection, ref: _Ref, target: BatchState, reason: str, **values: Any) -> bool:
    """One compare-and-set on the batch row; it also sets the columns the target implies."""
    when = now()
    values.update(state=target.value, updated_at=when)
    if ref.state is BatchState.ABORTED and target is BatchState.PREPARING:
        values.update(
            attempt=ref.attempt + 1,
            verdict=None,
            verdict_reason=None,
            decided_at=None,
            finished_at=None,
            source_rows=None,
            partitioning=None,
            source_splits=None,
            spark_job=None,
        )
    elif target in (BatchState.COMMIT_DECIDED, BatchState.ABORT_DECIDED):
        verdict = Verdict.COMMIT if target is BatchState.COMMIT_DECIDED else Verdict.ABORT
        values.update(verdict=verdict.value, verdict_reason=reason, decided_at=when)
    elif target.final:
        values.update(finished_at=when)
    expected = (
        batches.c.id == ref.id,
        batches.c.state == ref.state.value,
        batches.c.attempt == ref.attempt,
    )
    if conn.execute(update(batches).where(*expected).values(**values)).rowcount != 1:
        return False
    log.info("ledger: batch %s %s -> %s (%s)", ref.label, ref.state, target, reason)
    return True


def _move(conn: Connection, ref: _Ref, target: BatchState, reason: str, **values: Any) -> _Ref:
    """Check the table, compare-and-set; on zero rows tell a lost race from an illegal move."""
    check_batch_move(ref.label, ref.state, target)
    if _cas(conn, ref, target, reason, **values):
        attempt = ref.attempt + 1 if ref.state is BatchState.ABORTED else ref.attempt
        return ref._replace(state=target, attempt=attempt)
    now_row = conn.execute(select(batches.c.state, batches.c.attempt).where(batches.c.id == ref.id))
    state, attempt = now_row.one()
    moved = f"expected {ref.state} (attempt {ref.attempt}), another writer left it {state} "
    moved += f"(attempt {attempt})"
    if target not in BATCH_TRANSITIONS[BatchState(state)]:
        raise IllegalTransitionError(ref.label, BatchState(state), target, moved)
    raise ConflictError(f"batch {ref.label}: {moved}; re-read and retry")


# -- participants -----------------------------------------------------------------------------


def _to_participant(row: Any) -> Participant:
    return Participant(
        index=row.partition_index,
        transactional_id=row.transactional_id,
        committable=Committable.from_json(row.committable),
        state=ParticipantState(row.state),
        reason=row.reason,
        updated_at=row.updated_at,
    )


def _current(batch: Any) -> tuple[Any, ...]:
    return (participants.c.batch_id == batch.id, participants.c.attempt == batch.attempt)


def _participants(conn: Connection, batch: Any) -> list[Participant]:
    query = select(participants).where(*_current(batch)).order_by(participants.c.partition_index)
    return [_to_participant(r) for r in conn.execute(query)]


def _participant(conn: Connection, batch: Any, transactional_id: str) -> Participant:
    query = select(participants).where(
        *_current(batch), participants.c.transactional_id == transactional_id
    )
    row = conn.execute(query).first()
    if row is None:
        raise NotFoundError(
            f"batch {BatchKey(batch.export_id, batch.run_key)} attempt {batch.attempt} has no "
            f"participant {transactional_id!r}"
        )
    return _to_participant(row)


def _participant_cas(
    conn: Connection,
    batch: Any,
    part: Participant,
    where: str,
    target: ParticipantState,
    reason: str,
    **values: Any,
) -> Participant:
    cols = participants.c
    expected = (cols.partition_index == part.index, cols.state == part.state.value)
    result = conn.execute(
        update(participants)
        .where(*_current(batch), *expected)
        .values(state=target.value, reason=reason, updated_at=now(), **values)
    )
    fresh = _participant(conn, batch, part.transactional_id)
    if result.rowcount != 1:
        if fresh.state is target and not values:
            return fresh  # a concurrent writer recorded the same outcome
        check_participant_move(where, fresh.state, target)
        raise ConflictError(f"{where}: expected {part.state} but found {fresh.state}")
    log.info("ledger: %s %s -> %s (%s)", where, part.state, target, reason)
    return fresh


def _participants_cas(
    conn: Connection,
    batch: Any,
    label: str,
    moves: Sequence[tuple[Participant, ParticipantState, str]],
) -> None:
    """Many participants' compare-and-sets as one statement run for each (executemany):
    built once, where a statement per participant cost more than the database did.

    A participant another writer moved meanwhile (PostgreSQL; SQLite serialises writers)
    is fine when it holds the same state; anything else raises, and the caller's
    transaction records none of the moves."""
    cols = participants.c
    statement = (
        update(participants)
        .where(
            *_current(batch),
            cols.partition_index == bindparam("p_index"),
            cols.state == bindparam("p_from"),
        )
        .values(
            state=bindparam("p_to"),
            reason=bindparam("p_reason"),
            updated_at=bindparam("p_when", type_=cols.updated_at.type),
        )
    )
    when = now()
    rows = [
        {
            "p_index": p.index,
            "p_from": p.state.value,
            "p_to": t.value,
            "p_reason": r,
            "p_when": when,
        }
        for p, t, r in moves
    ]
    if conn.execute(statement, rows).rowcount != len(rows):
        found = {p.index: p.state for p in _participants(conn, batch)}
        for part, target, _ in moves:
            if found[part.index] is not target:
                where = f"{label} participant {part.index} ({part.transactional_id})"
                check_participant_move(where, found[part.index], target)
                raise ConflictError(f"{where}: expected {part.state} but found {found[part.index]}")
    for part, target, reason in moves:
        where = f"{label} participant {part.index} ({part.transactional_id})"
        log.info("ledger: %s %s -> %s (%s)", where, part.state, target, reason)


# -- input checks -----------------------------------------------------------------------------


def _key(export_id: str, run_key: str) -> str:
    """The batch key as shown, once both halves are checked against the ledger's columns."""
    _check_name(export_id, "export_id", _length(batches.c.export_id))
    _check_name(run_key, "run_key", _length(batches.c.run_key))
    return str(BatchKey(export_id, run_key))


def _length(column: Any) -> int:
    return int(column.type.length)


def _check_name(value: object, field: str, max_length: int) -> str:
    if not isinstance(value, str) or not value.strip() or not value.isprintable():
        raise ConfigurationError(f"{field} must be a non-empty printable string, got {value!r}")
    if len(value) > max_length:
        raise ConfigurationError(f"{field} is longer than {max_length} characters")
    return value


def _check_reason(reason: object) -> None:
    if not isinstance(reason, str):
        raise ConfigurationError(f"reason must be a string, got {reason!r}")


def _check_committables(label: str, ids: list[str], committables: tuple[Committable, ...]) -> None:
    if len(committables) != len(ids):
        raise CommittableError(
            f"batch {label} leased {len(ids)} ids but got {len(committables)} committables"
        )
    for i, (tid, committable) in enumerate(zip(ids, committables, strict=True)):
        if not isinstance(committable, Committable):
            raise CommittableError(f"committables[{i}] is a {type(committable).__name__}")
        if committable.transactional_id != tid:
            raise CommittableError(
                f"committables[{i}] carries transactional_id {committable.transactional_id!r}; "
                f"batch {label} leased {tid!r} for partition {i}"
            )


def _begin_new(conn: Connection, export_id: str, run_key: str, spec: dict[str, Any]) -> None:
    """Attempt 1 of a new batch, with freshly leased ids."""
    ids = pool.lease(conn, export_id, run_key, spec["id_prefix"], spec["num_partitions"])
    when = now()
    conn.execute(
        insert(batches).values(
            export_id=export_id,
            run_key=run_key,
            attempt=1,
            state=BatchState.PREPARING.value,
            transactional_ids=json.dumps(ids),
            created_at=when,
            updated_at=when,
            **spec,
        )
    )
    log.info("ledger: batch %s begun with ids %s", BatchKey(export_id, run_key), ids)


def _begin_new_attempt(conn: Connection, row: Any, spec: dict[str, Any]) -> None:
    """An ABORTED batch starts over: attempt + 1, freshly leased ids."""
    ids = pool.lease(conn, row.export_id, row.run_key, spec["id_prefix"], spec["num_partitions"])
    values = {**spec, "transactional_ids": json.dumps(ids)}
    _move(conn, _ref(row), BatchState.PREPARING, "new attempt", **values)


def _check_same_spec(label: str, row: Any, spec: dict[str, Any]) -> None:
    """A batch being prepared keeps its topic, prefix and partitions until it ends."""
    was = {key: getattr(row, key) for key in spec}
    if was != spec:
        raise ConfigurationError(
            f"batch {label} is {row.state} with {was}, not {spec}; "
            "finish or abort it before changing its topic, prefix or partitions"
        )
