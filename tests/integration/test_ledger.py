"""The coordinator ledger on SQLite and on a real PostgreSQL server.

Every test runs on both backends, each on a fresh database (a file, or a schema of its
own). Races run in threads and in separate processes.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, inspect, select

from airflow_provider_kafka2pc.errors import (
    CommittableError,
    ConfigurationError,
    ConflictError,
    IllegalTransitionError,
    LedgerSchemaError,
    NotFoundError,
    PrefixOwnedError,
)
from airflow_provider_kafka2pc.ledger import (
    BATCH_TRANSITIONS,
    PARTICIPANT_TRANSITIONS,
    Batch,
    BatchState,
    Ledger,
    ParticipantState,
    Verdict,
    database,
)
from airflow_provider_kafka2pc.ledger.schema import VERSION_TABLE, metadata
from airflow_provider_kafka2pc.transaction.committable import Committable, PartitionRange
from tests.conftest import cli
from tests.support.postgres import SKIP_POSTGRES_ENV, fresh_schema, postgres_url

BACKENDS = ["sqlite", "postgresql"]
TOPIC = "orders"
#: The newest migration of the ledger's schema.
HEAD = "0006"
#: How long racers wait for each other at a gate before the test fails (instead of hanging).
GATE_TIMEOUT = 30


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str | None]:
    if os.environ.get(SKIP_POSTGRES_ENV) == "1":
        yield None
        return
    with ExitStack() as stack:
        try:
            url = stack.enter_context(postgres_url())
        except RuntimeError as exc:
            pytest.fail(str(exc), pytrace=False)
        yield url


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty ledger database on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
        return
    postgres_server = request.getfixturevalue("postgres_server")
    if postgres_server is None:
        pytest.skip(f"{SKIP_POSTGRES_ENV}=1")
    with fresh_schema(postgres_server) as url:
        yield url


@pytest.fixture
def ledger(db_url: str) -> Iterator[Ledger]:
    with Ledger(db_url) as ledger:
        yield ledger


class Names:
    """Fresh export id, run keys and id prefix for one test."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:8]
        self.export = f"orders-{tag}"
        self.prefix = f"k2pc-{tag}"
        self._runs = itertools.count(1)

    def run(self) -> str:
        return f"run-{next(self._runs):03d}"


@pytest.fixture
def names() -> Names:
    return Names()


def committable(tid: str, records: int = 2, start_ms: int = 1_000) -> Committable:
    if records == 0:
        return Committable.empty(tid, start_ms, 60_000)
    return Committable(
        transactional_id=tid,
        producer_id=7,
        producer_epoch=0,
        transaction_version=1,
        partitions=(PartitionRange(TOPIC, 0, 0, records, records + 1),),
        record_count=records + 1,
        start_time_ms=start_ms,
        transaction_timeout_ms=60_000,
    )


def begin(ledger: Ledger, n: Names, run: str, partitions: int = 3) -> Batch:
    return ledger.begin(n.export, run, topic=TOPIC, id_prefix=n.prefix, num_partitions=partitions)


def prepare(ledger: Ledger, n: Names, run: str, partitions: int = 3) -> Batch:
    batch = begin(ledger, n, run, partitions)
    cs = [committable(t) for t in batch.transactional_ids]
    return ledger.record_prepared(n.export, run, cs, source_rows=3 * partitions)


def settle(ledger: Ledger, n: Names, run: str, verdict: Verdict) -> None:
    """Record every participant's outcome per the verdict and finish the batch."""
    outcome = ParticipantState.COMMITTED if verdict is Verdict.COMMIT else ParticipantState.ABORTED
    for p in ledger.participants(n.export, run):
        ledger.record_outcome(n.export, run, p.transactional_id, outcome, "done")
    ledger.finish(n.export, run)


def drive(ledger: Ledger, n: Names, run: str, state: BatchState) -> None:
    """Bring a new batch to ``state`` through the public API."""
    if state is BatchState.PREPARING:
        begin(ledger, n, run)
        return
    prepare(ledger, n, run)
    verdict = {
        BatchState.COMMIT_DECIDED: Verdict.COMMIT,
        BatchState.COMMITTED: Verdict.COMMIT,
        BatchState.ABORT_DECIDED: Verdict.ABORT,
        BatchState.ABORTED: Verdict.ABORT,
    }.get(state)
    if verdict is not None:
        ledger.decide(n.export, run, verdict, "test")
    if state.final:
        settle(ledger, n, run, verdict)
    assert ledger.get(n.export, run).state is state


def row_counts(url: str) -> dict[str, int]:
    with Ledger(url, migrate=False) as ledger, ledger._engine.connect() as conn:
        return {
            name: conn.execute(select(func.count()).select_from(table)).scalar_one()
            for name, table in metadata.tables.items()
        }


# -- the batch state machine ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "target"),
    list(itertools.product(BatchState, BatchState)),
    ids=lambda s: s.value,
)
def test_batch_transition_table(
    ledger: Ledger, names: Names, current: BatchState, target: BatchState
) -> None:
    run = names.run()
    drive(ledger, names, run, current)
    if target in BATCH_TRANSITIONS[current]:
        batch = ledger._transition(names.export, run, target, "table test")
        assert batch.state is target
        assert ledger.get(names.export, run).state is target
    else:
        with pytest.raises(IllegalTransitionError) as err:
            ledger._transition(names.export, run, target, "table test")
        message = str(err.value)
        assert f"{names.export}/{run}" in message
        assert f"{current.value} -> {target.value}" in message
        assert ledger.get(names.export, run).state is current


def test_lost_compare_and_set_is_a_conflict_or_illegal(ledger: Ledger, names: Names) -> None:
    run = names.run()
    prepare(ledger, names, run)
    # A writer that read PREPARING (stale) loses the compare-and-set; from what is there
    # now (PREPARED) its move is still legal: a conflict, worth a retry.
    with pytest.raises(ConflictError, match="expected PREPARING"):
        ledger._transition(
            names.export, run, BatchState.ABORT_DECIDED, expected=BatchState.PREPARING
        )
    ledger.decide(names.export, run, Verdict.COMMIT, "first")
    # One that read PREPARED but finds COMMIT_DECIDED may not abort at all.
    with pytest.raises(IllegalTransitionError, match="COMMIT_DECIDED -> ABORT_DECIDED"):
        ledger._transition(
            names.export, run, BatchState.ABORT_DECIDED, expected=BatchState.PREPARED
        )
    assert ledger.get(names.export, run).verdict is Verdict.COMMIT


# -- the named operations ---------------------------------------------------------------------


def test_source_splits_are_recorded_with_the_batch(ledger: Ledger, names: Names) -> None:
    """A source-split prepare's record (settings, counts, fingerprints) comes back as given,
    for its repair; other partitionings keep none."""
    run = names.run()
    batch = begin(ledger, names, run, partitions=2)
    assert batch.source_splits is None
    cs = [committable(t, records=1) for t in batch.transactional_ids]
    record = {
        "settings": {"spark.sql.files.minPartitionNum": "2"},
        "splits": 3,
        "partitions": 2,
        "fingerprint": "f" * 64,
        "layout": "a" * 64,
    }
    batch = ledger.record_prepared(
        names.export, run, cs, source_rows=2, partitioning="source-splits", source_splits=record
    )
    assert (batch.partitioning, batch.source_splits) == ("source-splits", record)
    assert ledger.get(names.export, run).source_splits == record
    other = names.run()
    begin(ledger, names, other, partitions=2)
    ids = ledger.get(names.export, other).transactional_ids
    again = [committable(t, records=1) for t in ids]
    assert ledger.record_prepared(names.export, other, again, source_rows=2).source_splits is None


def test_several_topics_are_recorded_with_the_batch(ledger: Ledger, names: Names) -> None:
    """An export routing rows among several topics keeps them all (``topic`` is the first),
    a retried begin must name the same ones, and a one-topic batch reads as its topic."""
    run = names.run()
    topics = [TOPIC, "returns", "refunds"]
    batch = ledger.begin(
        names.export, run, topic=TOPIC, topics=topics, id_prefix=names.prefix, num_partitions=2
    )
    assert (batch.topic, batch.topics) == (TOPIC, tuple(topics))
    assert batch.summary()["topics"] == topics
    assert ledger.get(names.export, run).topics == tuple(topics)
    with pytest.raises(ConfigurationError, match="before changing its topic"):
        ledger.begin(
            names.export, run, topic=TOPIC, topics=topics[:2], id_prefix=names.prefix,
            num_partitions=2,
        )  # fmt: skip
    for bad in (["returns", TOPIC], [TOPIC, "returns", "returns"]):
        with pytest.raises(ConfigurationError, match="distinct topics"):
            ledger.begin(
                names.export, names.run(), topic=TOPIC, topics=bad, id_prefix=names.prefix,
                num_partitions=2,
            )  # fmt: skip
    one = begin(ledger, names, names.run())
    assert one.topics == (TOPIC,) and "topics" not in one.summary()


def test_commit_path(ledger: Ledger, names: Names) -> None:
    run = names.run()
    batch = begin(ledger, names, run, partitions=3)
    assert batch.state is BatchState.PREPARING and batch.attempt == 1
    assert batch.transactional_ids == tuple(f"{names.prefix}-{i}" for i in range(3))
    assert ledger.participants(names.export, run) == []
    cs = [committable(t, records=i) for i, t in enumerate(batch.transactional_ids)]
    assert batch.partitioning is None
    batch = ledger.record_prepared(
        names.export, run, cs, source_rows=5, partitioning="kafka-aligned"
    )
    assert (batch.state, batch.source_rows) == (BatchState.PREPARED, 5)
    assert ledger.get(names.export, run).partitioning == "kafka-aligned"
    parts = ledger.participants(names.export, run)
    assert [p.committable for p in parts] == cs
    assert [p.index for p in parts] == [0, 1, 2]
    assert {p.state for p in parts} == {ParticipantState.PREPARED}
    assert [b.run_key for b in ledger.in_doubt(names.export)] == [run]

    batch = ledger.decide(names.export, run, Verdict.COMMIT, "all prepared")
    assert (batch.verdict, batch.verdict_reason) == (Verdict.COMMIT, "all prepared")
    assert batch.decided_at is not None and batch.decided_at.tzinfo is not None
    settle(ledger, names, run, Verdict.COMMIT)
    batch = ledger.get(names.export, run)
    assert batch.state is BatchState.COMMITTED and batch.finished_at >= batch.decided_at
    assert batch.transactional_ids == tuple(f"{names.prefix}-{i}" for i in range(3))
    assert ledger.in_doubt(names.export) == []
    assert ledger.finish(names.export, run) == batch  # a retried finish changes nothing
    assert not any(lease.leased for lease in ledger.leases(names.prefix))


def test_begin_returns_an_open_or_decided_batch_unchanged(ledger: Ledger, names: Names) -> None:
    run = names.run()
    first = begin(ledger, names, run)
    assert begin(ledger, names, run) == first  # a retried prepare re-uses its ids
    with pytest.raises(ConfigurationError, match="finish or abort it"):
        begin(ledger, names, run, partitions=4)
    prepared = prepare(ledger, names, run)
    assert begin(ledger, names, run) == prepared
    decided = ledger.decide(names.export, run, Verdict.COMMIT, "ok")
    assert begin(ledger, names, run) == decided
    settle(ledger, names, run, Verdict.COMMIT)
    committed = ledger.get(names.export, run)
    assert begin(ledger, names, run) == committed
    assert len(ledger.leases(names.prefix)) == 3


def test_abort_then_a_new_attempt(ledger: Ledger, names: Names) -> None:
    run = names.run()
    first = begin(ledger, names, run)
    # The committables never arrived: abort straight from PREPARING.
    with pytest.raises(IllegalTransitionError, match="PREPARING -> COMMIT_DECIDED"):
        ledger.decide(names.export, run, Verdict.COMMIT, "too early")
    ledger.decide(names.export, run, Verdict.ABORT, "prepare failed")
    aborted = ledger.finish(names.export, run)
    assert aborted.state is BatchState.ABORTED
    again = begin(ledger, names, run)
    assert (again.state, again.attempt) == (BatchState.PREPARING, 2)
    assert again.verdict is None and again.decided_at is None and again.finished_at is None
    assert again.transactional_ids == first.transactional_ids  # the pool's lowest slots


def test_decide_keeps_the_first_verdict(ledger: Ledger, names: Names) -> None:
    run = names.run()
    prepare(ledger, names, run)
    first = ledger.decide(names.export, run, Verdict.ABORT, "timeout too close")
    second = ledger.decide(names.export, run, Verdict.COMMIT, "retry thinks all is fine")
    assert first == second
    assert (second.verdict, second.verdict_reason) == (Verdict.ABORT, "timeout too close")


def test_re_prepare_replaces_the_participants(ledger: Ledger, names: Names) -> None:
    run = names.run()
    batch = prepare(ledger, names, run)
    newer = [committable(t, start_ms=9_000) for t in batch.transactional_ids]
    again = ledger.record_prepared(names.export, run, newer, source_rows=9)
    assert (again.state, again.source_rows) == (BatchState.PREPARED, 9)
    assert [p.committable for p in ledger.participants(names.export, run)] == newer


def test_record_prepared_checks_the_committables(ledger: Ledger, names: Names, db_url: str) -> None:
    run = names.run()
    batch = begin(ledger, names, run, partitions=2)
    ids = batch.transactional_ids
    before = row_counts(db_url)
    with pytest.raises(CommittableError, match="leased 2 ids but got 1"):
        ledger.record_prepared(names.export, run, [committable(ids[0])], source_rows=1)
    with pytest.raises(CommittableError, match=r"committables\[0\] carries"):
        swapped = [committable(ids[1]), committable(ids[0])]
        ledger.record_prepared(names.export, run, swapped, source_rows=1)
    with pytest.raises(ConfigurationError, match="source_rows"):
        ledger.record_prepared(names.export, run, [committable(t) for t in ids], source_rows=-1)
    with pytest.raises(ConfigurationError, match="partitioning must be one of"):
        every = [committable(t) for t in ids]
        ledger.record_prepared(names.export, run, every, source_rows=4, partitioning="random")
    assert row_counts(db_url) == before
    assert ledger.get(names.export, run) == batch
    with pytest.raises(NotFoundError, match="begin"):
        ledger.record_prepared(names.export, "no-such-run", [], source_rows=0)


def test_finish_names_the_participants_not_committed(ledger: Ledger, names: Names) -> None:
    run = names.run()
    batch = prepare(ledger, names, run)
    with pytest.raises(IllegalTransitionError, match="PREPARED -> COMMITTED"):
        ledger.finish(names.export, run)
    ledger.decide(names.export, run, Verdict.COMMIT, "ok")
    first, lost, last = batch.transactional_ids
    ledger.record_outcome(names.export, run, first, ParticipantState.COMMITTED, "done")
    ledger.record_outcome(names.export, run, lost, ParticipantState.LOST, "timed out")
    with pytest.raises(IllegalTransitionError) as err:
        ledger.finish(names.export, run)
    assert f"1 {lost} LOST" in str(err.value) and f"2 {last} PREPARED" in str(err.value)
    assert first not in str(err.value)
    assert ledger.get(names.export, run).state is BatchState.COMMIT_DECIDED
    assert all(lease.leased for lease in ledger.leases(names.prefix))


# -- participants -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "target"),
    list(itertools.product(ParticipantState, ParticipantState)),
    ids=lambda s: s.value,
)
def test_participant_transition_table(
    ledger: Ledger, names: Names, current: ParticipantState, target: ParticipantState
) -> None:
    run = names.run()
    batch = prepare(ledger, names, run)
    tid = batch.transactional_ids[0]
    # The verdict each outcome needs (the table decides before the verdict is looked at).
    commit = current is ParticipantState.COMMITTED or target in (
        ParticipantState.COMMITTED,
        ParticipantState.PREPARED,
    )
    if current is ParticipantState.ABORTED or (target is ParticipantState.ABORTED and not commit):
        commit = False
    ledger.decide(names.export, run, Verdict.COMMIT if commit else Verdict.ABORT, "test")
    if current is not ParticipantState.PREPARED:
        ledger.record_outcome(names.export, run, tid, current, "setup")

    def attempt() -> Any:
        if target is ParticipantState.PREPARED:
            same = ledger.participants(names.export, run)[0].committable
            repaired = same if current is target else committable(tid, start_ms=5_000)
            return ledger.replace_participant(names.export, run, repaired)
        return ledger.record_outcome(names.export, run, tid, target, "table test")

    if target is current or target in PARTICIPANT_TRANSITIONS[current]:
        assert attempt().state is target
        assert ledger.participants(names.export, run)[0].state is target
    else:
        with pytest.raises(IllegalTransitionError, match=f"{current.value} -> {target.value}"):
            attempt()
        assert ledger.participants(names.export, run)[0].state is current


def test_outcomes_must_follow_the_verdict(ledger: Ledger, names: Names) -> None:
    run = names.run()
    tid = prepare(ledger, names, run).transactional_ids[0]
    with pytest.raises(IllegalTransitionError, match="the batch is PREPARED"):
        ledger.record_outcome(names.export, run, tid, ParticipantState.COMMITTED, "eager")
    ledger.decide(names.export, run, Verdict.ABORT, "no")
    with pytest.raises(IllegalTransitionError, match="not COMMIT_DECIDED"):
        ledger.record_outcome(names.export, run, tid, ParticipantState.COMMITTED, "wrong")
    ledger.record_outcome(names.export, run, tid, ParticipantState.LOST, "fenced")
    with pytest.raises(IllegalTransitionError, match="not COMMIT_DECIDED or PREPARED"):
        ledger.replace_participant(names.export, run, committable(tid, start_ms=5))
    with pytest.raises(NotFoundError, match="no participant"):
        ledger.record_outcome(names.export, run, "other-0", ParticipantState.ABORTED, "x")


def test_outcomes_recorded_together(ledger: Ledger, names: Names) -> None:
    """record_outcomes: one transaction for many participants, a repeat moves none, and an
    illegal move among them records none of them (as record_outcome would refuse it)."""
    run = names.run()
    first, second, third = prepare(ledger, names, run).transactional_ids
    ledger.decide(names.export, run, Verdict.COMMIT, "ok")
    committed, lost = ParticipantState.COMMITTED, ParticipantState.LOST
    outcomes = [(first, committed, "done"), (second, lost, "timed out")]
    assert ledger.record_outcomes(names.export, run, outcomes) == 2
    assert ledger.record_outcomes(names.export, run, outcomes) == 0
    assert ledger.record_outcomes(names.export, run, []) == 0
    states = {
        p.transactional_id: (p.state, p.reason) for p in ledger.participants(names.export, run)
    }
    assert states == {
        first: (committed, "done"),
        second: (lost, "timed out"),
        third: (ParticipantState.PREPARED, None),
    }
    with pytest.raises(IllegalTransitionError, match="COMMITTED -> ABORTED"):
        ledger.record_outcomes(
            names.export,
            run,
            [(third, committed, "done"), (first, ParticipantState.ABORTED, "no")],
        )
    assert ledger.participants(names.export, run)[2].state is ParticipantState.PREPARED
    with pytest.raises(NotFoundError, match="no participant"):
        ledger.record_outcomes(names.export, run, [("other-0", committed, "x")])
    ledger.record_outcomes(names.export, run, [(third, committed, "done")])
    with pytest.raises(IllegalTransitionError, match="participants not COMMITTED"):
        ledger.finish(names.export, run)  # the lost one still is


def test_loss_repair(ledger: Ledger, names: Names) -> None:
    run = names.run()
    tids = prepare(ledger, names, run, partitions=2).transactional_ids
    ledger.decide(names.export, run, Verdict.COMMIT, "ok")
    ledger.record_outcome(names.export, run, tids[0], ParticipantState.LOST, "timed out")
    repaired = committable(tids[0], start_ms=77_000)
    part = ledger.replace_participant(names.export, run, repaired)
    assert (part.state, part.committable) == (ParticipantState.PREPARED, repaired)
    assert ledger.replace_participant(names.export, run, repaired) == part  # a retry
    settle(ledger, names, run, Verdict.COMMIT)
    assert ledger.get(names.export, run).state is BatchState.COMMITTED


def test_export_ids_and_recent_batches(ledger: Ledger, names: Names) -> None:
    """What the exports page lists: every export, and its newest batches first."""
    runs = [names.run() for _ in range(4)]
    for state, run in zip(
        (BatchState.COMMITTED, BatchState.ABORTED, BatchState.PREPARED, BatchState.PREPARING),
        runs,
        strict=True,
    ):
        drive(ledger, names, run, state)
    other = Names()
    begin(ledger, other, other.run())
    assert ledger.export_ids() == sorted([names.export, other.export])
    assert [b.run_key for b in ledger.recent(names.export)] == runs[::-1]
    assert [b.run_key for b in ledger.recent(names.export, limit=2)] == runs[:1:-1]
    assert [b.state for b in ledger.recent(names.export, limit=2)] == [
        BatchState.PREPARING,
        BatchState.PREPARED,
    ]
    assert ledger.recent("no-such-export") == []


# -- leases -----------------------------------------------------------------------------------


def test_pool_reuses_ids_across_runs(ledger: Ledger, names: Names) -> None:
    used: set[str] = set()
    for _ in range(50):
        run = names.run()
        used |= set(prepare(ledger, names, run, partitions=4).transactional_ids)
        ledger.decide(names.export, run, Verdict.COMMIT, "ok")
        settle(ledger, names, run, Verdict.COMMIT)
    assert used == {f"{names.prefix}-{i}" for i in range(4)}  # against 200 without a pool
    for _ in range(10):
        runs = [names.run(), names.run()]  # two runs at a time
        for run in runs:
            used |= set(prepare(ledger, names, run, partitions=4).transactional_ids)
        for run in runs:
            ledger.decide(names.export, run, Verdict.COMMIT, "ok")
            settle(ledger, names, run, Verdict.COMMIT)
    assert used == {f"{names.prefix}-{i}" for i in range(8)}


def test_slot_returns_only_when_the_batch_finishes(ledger: Ledger, names: Names) -> None:
    run_a = names.run()
    ids_a = prepare(ledger, names, run_a, partitions=4).transactional_ids
    ledger.decide(names.export, run_a, Verdict.COMMIT, "ok")
    for tid in ids_a[:3]:
        ledger.record_outcome(names.export, run_a, tid, ParticipantState.COMMITTED, "done")
    ids_b = begin(ledger, names, names.run(), partitions=4).transactional_ids
    assert ids_b == tuple(f"{names.prefix}-{i}" for i in range(4, 8))
    ledger.record_outcome(names.export, run_a, ids_a[3], ParticipantState.COMMITTED, "done")
    ids_c = begin(ledger, names, names.run(), partitions=2).transactional_ids
    assert ids_c == (f"{names.prefix}-8", f"{names.prefix}-9")  # all final, not finished
    ledger.finish(names.export, run_a)
    ids_d = begin(ledger, names, names.run(), partitions=5).transactional_ids
    assert ids_d == (*ids_a, f"{names.prefix}-10")  # lowest free first, then one new slot
    held = {lease.transactional_id: lease for lease in ledger.leases(names.prefix)}
    assert len(held) == 11 and all(lease.leased for lease in held.values())
    assert held[ids_d[0]].export_id == names.export and held[ids_d[0]].leased_at is not None


def test_concurrent_begins_lease_disjoint_ids(ledger: Ledger, names: Names) -> None:
    runs = [f"run-{i}" for i in range(6)]
    gate = threading.Barrier(len(runs), timeout=GATE_TIMEOUT)

    def go(run: str) -> tuple[str, ...]:
        gate.wait()
        return begin(ledger, names, run, partitions=4).transactional_ids

    with ThreadPoolExecutor(len(runs)) as pool:
        got = list(pool.map(go, runs))
    flat = [tid for ids in got for tid in ids]
    assert sorted(flat) == sorted(f"{names.prefix}-{i}" for i in range(24))
    _assert_leases_match_batches(ledger, names, runs)


def _assert_leases_match_batches(ledger: Ledger, names: Names, runs: list[str]) -> None:
    for run in runs:
        batch = ledger.get(names.export, run)
        held = [lease for lease in ledger.leases(names.prefix) if lease.run_key == run]
        assert sorted(lease.transactional_id for lease in held) == sorted(batch.transactional_ids)


# -- prefixes and bad input -------------------------------------------------------------------


def test_prefix_belongs_to_one_export(ledger: Ledger, names: Names, db_url: str) -> None:
    begin(ledger, names, names.run())
    before = row_counts(db_url)
    for prefix in (names.prefix, f"{names.prefix}-eu", names.prefix.rsplit("-", 1)[0]):
        with pytest.raises(PrefixOwnedError, match=names.export):
            ledger.begin("another-export", "r", topic=TOPIC, id_prefix=prefix, num_partitions=1)
    assert row_counts(db_url) == before
    # Neither a prefix of the other plus "-": no overlap, even with LIKE's wildcards around.
    other = ledger.begin(
        "another", "r", topic=TOPIC, id_prefix=f"{names.prefix}x", num_partitions=1
    )
    assert other.transactional_ids == (f"{names.prefix}x-0",)
    ledger.begin("tame", "r", topic=TOPIC, id_prefix="aXb-c", num_partitions=1)
    ledger.begin("wild", "r", topic=TOPIC, id_prefix="a_b", num_partitions=1)  # no LIKE a_b-%
    assert isinstance(PrefixOwnedError("x"), ConfigurationError)


def test_overlapping_prefixes_claimed_at_once(ledger: Ledger, names: Names) -> None:
    gate = threading.Barrier(2, timeout=GATE_TIMEOUT)

    def claim(export: str, prefix: str) -> str:
        gate.wait()
        try:
            ledger.begin(export, "r", topic=TOPIC, id_prefix=prefix, num_partitions=2)
            return "ok"
        except PrefixOwnedError:
            return "owned"

    with ThreadPoolExecutor(2) as pool:
        a = pool.submit(claim, "export-a", names.prefix)
        b = pool.submit(claim, "export-b", f"{names.prefix}-b")
        assert sorted([a.result(), b.result()]) == ["ok", "owned"]


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"num_partitions": 0}, "num_partitions must be >= 1"),
        ({"num_partitions": -3}, "num_partitions must be >= 1"),
        ({"num_partitions": True}, "num_partitions must be an integer"),
        ({"num_partitions": "4"}, "num_partitions must be an integer"),
        ({"id_prefix": ""}, "id_prefix must be a non-empty string"),
        ({"id_prefix": "has space"}, "id_prefix 'has space' is invalid"),
        ({"id_prefix": "x" * 191}, "longer than 190"),
        ({"topic": ""}, "topic must be"),
        ({"export_id": ""}, "export_id must be"),
        ({"run_key": "r" * 251}, "run_key is longer"),
    ],
    ids=lambda v: v if isinstance(v, str) else next(iter(v)),
)
def test_bad_input_leaves_nothing(
    ledger: Ledger, names: Names, db_url: str, change: dict[str, Any], error: str
) -> None:
    args = {"export_id": names.export, "run_key": "r", "topic": TOPIC}
    args |= {"id_prefix": names.prefix, "num_partitions": 2, **change}
    before = row_counts(db_url)
    with pytest.raises(ConfigurationError, match=error):
        ledger.begin(args.pop("export_id"), args.pop("run_key"), **args)
    assert row_counts(db_url) == before == dict.fromkeys(metadata.tables, 0)


def test_default_url_lives_under_airflow_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))
    assert Ledger.default_url() == f"sqlite:///{tmp_path / 'home' / 'kafka2pc_ledger.db'}"
    with Ledger(Ledger.default_url()) as ledger:
        assert ledger.in_doubt() == []
    assert (tmp_path / "home" / "kafka2pc_ledger.db").exists()


# -- migrations -------------------------------------------------------------------------------


def _schema_state(url: str) -> tuple[list[str], list[str]]:
    engine = database.open_engine(database.normalise_url(url))
    try:
        with engine.connect() as conn:
            tables = sorted(inspect(conn).get_table_names())
            versions = conn.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}").scalars()
            return tables, list(versions)
    finally:
        engine.dispose()


def test_migrations_are_idempotent(db_url: str) -> None:
    Ledger(db_url).close()
    first = _schema_state(db_url)
    assert first == (sorted([*metadata.tables, VERSION_TABLE]), [HEAD])
    with Ledger(db_url) as ledger:  # again: a no-op
        assert ledger.in_doubt() == []
    assert _schema_state(db_url) == first


def test_a_ledger_of_the_first_schema_is_refused_by_readers_until_upgraded(db_url: str) -> None:
    """A provider upgraded over a ledger at 0001: the page and ``recover`` (which only read)
    refuse it by name instead of failing on a missing column; ``kafka2pc ledger upgrade``
    (or any export task) migrates it, keeping the batches; one prepared before 0002 has no
    partitioning on record (its repair decides it afresh, as repairs did then)."""
    engine = database.open_engine(database.normalise_url(db_url))
    try:
        database.migrate(engine, "0001")
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO kafka2pc_batches (export_id, run_key, attempt, state, topic, "
                "id_prefix, num_partitions, transactional_ids, source_rows, created_at, "
                "updated_at) VALUES ('old', 'r', 1, 'PREPARED', 't', 'old', 1, '[\"old-0\"]', "
                "3, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
            )
    finally:
        engine.dispose()
    with pytest.raises(LedgerSchemaError, match=rf"revision 0001, this provider reads {HEAD}"):
        Ledger(db_url, migrate=False)
    refused = cli("recover", "--export-id", "old", "--ledger-url", db_url, "-b", "127.0.0.1:1")
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    assert "kafka2pc ledger upgrade" in refused.stdout, refused.stdout
    assert _schema_state(db_url)[1] == ["0001"]

    done = cli("ledger", "upgrade", "--ledger-url", db_url)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert json.loads(done.stdout.splitlines()[-1])["from"] == "0001"
    with Ledger(db_url, migrate=False) as ledger:
        batch = ledger.get("old", "r")
    assert (batch.state, batch.source_rows, batch.partitioning) == (BatchState.PREPARED, 3, None)
    assert _schema_state(db_url)[1] == [HEAD]


def test_a_ledger_newer_than_the_provider_is_refused(ledger: Ledger, db_url: str) -> None:
    """Migrated by a newer provider: this one neither migrates nor reads it."""
    with ledger._engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {VERSION_TABLE} SET version_num = '9999'")
    for migrate in (True, False):
        with pytest.raises(LedgerSchemaError, match="newer than this provider's"):
            Ledger(db_url, migrate=migrate)
    nothing = cli("ledger", "upgrade", "--ledger-url", db_url)
    assert nothing.returncode == 2 and "newer than" in nothing.stdout, nothing.stdout


# -- other processes --------------------------------------------------------------------------


def _in_process(task: str, url: str, args: tuple, gate: Any, results: Any) -> None:
    """Runs in a spawned process: one ledger of its own, started with the others at the gate."""
    try:
        if task == "migrate":
            gate.wait()
            Ledger(url).close()
            results.put("migrated")
            return
        with Ledger(url, migrate=False) as ledger:
            for item in args:
                gate.wait()
                if task == "decide":
                    export, run, verdict, reason = item
                    batch = ledger.decide(export, run, Verdict(verdict), reason)
                    results.put((run, batch.verdict.value, batch.verdict_reason))
                else:
                    export, run, prefix = item
                    spec = {"topic": TOPIC, "id_prefix": prefix, "num_partitions": 4}
                    batch = ledger.begin(export, run, **spec)
                    results.put(batch.transactional_ids)
    except BaseException as exc:  # reported to the test, which fails with it
        results.put(f"error: {exc!r}")


def _run_processes(task: str, url: str, per_process: list[tuple]) -> list[Any]:
    ctx = multiprocessing.get_context("spawn")
    gate, results = ctx.Barrier(len(per_process), timeout=GATE_TIMEOUT), ctx.Queue()
    procs = [
        ctx.Process(target=_in_process, args=(task, url, args, gate, results))
        for args in per_process
    ]
    try:
        for proc in procs:
            proc.start()
        expected = sum(max(len(args), 1) for args in per_process)
        got = [results.get(timeout=2 * GATE_TIMEOUT) for _ in range(expected)]
        for proc in procs:
            proc.join(timeout=GATE_TIMEOUT)
            assert proc.exitcode == 0
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
    assert not [g for g in got if isinstance(g, str) and g.startswith("error")], got
    return got


@pytest.mark.slow
def test_migrations_from_two_processes_at_once(db_url: str) -> None:
    assert _run_processes("migrate", db_url, [(), ()]) == ["migrated", "migrated"]
    assert _schema_state(db_url) == (sorted([*metadata.tables, VERSION_TABLE]), [HEAD])


def _race_decisions(ledger: Ledger, names: Names, runs: list[str]) -> list[tuple]:
    for run in runs:
        prepare(ledger, names, run, partitions=2)
    return [
        [(names.export, run, v.value, f"{v.value.lower()} by {who}") for run in runs]
        for who, v in (("one", Verdict.COMMIT), ("two", Verdict.ABORT))
    ]


def _assert_one_verdict_each(ledger: Ledger, names: Names, got: list[tuple]) -> None:
    by_run: dict[str, set[tuple]] = {}
    for run, verdict, reason in got:
        by_run.setdefault(run, set()).add((verdict, reason))
    for run, seen in by_run.items():
        assert len(seen) == 1, f"{run}: callers saw different verdicts {seen}"
        batch = ledger.get(names.export, run)
        assert seen == {(batch.verdict.value, batch.verdict_reason)}
        assert batch.verdict_reason.startswith(batch.verdict.value.lower())


def test_racing_decisions_in_threads(ledger: Ledger, names: Names) -> None:
    runs = [f"race-{i}" for i in range(10)]
    plans = _race_decisions(ledger, names, runs)
    gates = {run: threading.Barrier(2, timeout=GATE_TIMEOUT) for run in runs}

    def decide(plan: list[tuple]) -> list[tuple]:
        out = []
        for export, run, verdict, reason in plan:
            gates[run].wait()
            batch = ledger.decide(export, run, Verdict(verdict), reason)
            out.append((run, batch.verdict.value, batch.verdict_reason))
        return out

    with ThreadPoolExecutor(2) as pool:
        got = [item for out in pool.map(decide, plans) for item in out]
    _assert_one_verdict_each(ledger, names, got)


@pytest.mark.slow
def test_racing_decisions_in_processes(ledger: Ledger, names: Names, db_url: str) -> None:
    runs = [f"race-{i}" for i in range(5)]
    got = _run_processes("decide", db_url, _race_decisions(ledger, names, runs))
    assert len(got) == 10
    _assert_one_verdict_each(ledger, names, got)


@pytest.mark.slow
def test_processes_lease_disjoint_ids(ledger: Ledger, names: Names, db_url: str) -> None:
    plans = [[(names.export, f"p{p}-run-{i}", names.prefix) for i in range(4)] for p in (1, 2)]
    got = _run_processes("begin", db_url, plans)
    flat = [tid for ids in got for tid in ids]
    assert sorted(flat) == sorted(f"{names.prefix}-{i}" for i in range(32))
    _assert_leases_match_batches(ledger, names, [run for plan in plans for _, run, _ in plan])


# -- keep the schema and its migrations in step -----------------------------------------------


def test_migrations_match_the_schema(ledger: Ledger) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    with ledger._engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        assert compare_metadata(context, metadata) == []


# -- sightings: when recovery first saw an undated open transaction --------------------------


def test_a_sighting_keeps_its_first_time_per_identity_and_is_forgotten_once_gone(
    ledger: Ledger,
) -> None:
    """Kept while the same producer id and epoch stay open; a new identity is seen anew; an
    id no longer open under the prefix is forgotten; another prefix is left alone."""
    from datetime import UTC, datetime, timedelta

    t0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
    t1, t2 = t0 + timedelta(minutes=5), t0 + timedelta(minutes=10)
    assert ledger.record_sightings("p", [("p-0", 7, 1), ("p-1", 8, 0)], t0) == {
        "p-0": t0,
        "p-1": t0,
    }
    assert ledger.record_sightings("q", [("q-0", 9, 0)], t0) == {"q-0": t0}
    # Round two: p-0 unchanged keeps t0; p-1 has a new epoch (a new transaction): t1.
    assert ledger.record_sightings("p", [("p-0", 7, 1), ("p-1", 8, 1)], t1) == {
        "p-0": t0,
        "p-1": t1,
    }
    # Round three: p-0 ended; it is forgotten, and seen anew should it open again.
    assert ledger.record_sightings("p", [("p-1", 8, 1)], t2) == {"p-1": t1}
    assert ledger.sightings("p") == {"p-1": (8, 1, t1)}
    assert ledger.sightings("q") == {"q-0": (9, 0, t0)}
    assert ledger.record_sightings("p", [("p-0", 7, 1)], t2) == {"p-0": t2}
