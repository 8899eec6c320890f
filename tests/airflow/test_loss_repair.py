"""Timeout guard and loss repair: Flink's silent data loss, reproduced for real and repaired.

Flink's exactly-once Kafka sink loses data when a transaction outlives its timeout after
the checkpoint decided COMMIT: the broker aborts it, the commit fails, the records are
gone. Here the broker really aborts (short transaction timeouts; the test brokers abort
timed-out transactions within 500 ms), the commit finds the participant LOST, records it,
re-prepares exactly that partition from the deterministic input and commits it: the
batch ends COMMITTED exactly once (audit + read_committed). Where the input changed, the
commit fails loudly naming the lost partitions and rows, and nothing is written twice.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions
from sqlalchemy import update

from airflow_provider_kafka2pc.coordination.decision import assess, earliest_deadline_ms
from airflow_provider_kafka2pc.coordination.finish import Coordinator
from airflow_provider_kafka2pc.errors import ParticipantLostError, RepairImpossibleError
from airflow_provider_kafka2pc.export import export_asset
from airflow_provider_kafka2pc.ledger import BatchState, ParticipantState, Verdict
from airflow_provider_kafka2pc.ledger.schema import batches
from airflow_provider_kafka2pc.operators.finish import KafkaTransactionCommitOperator
from airflow_provider_kafka2pc.operators.prepare import SparkKafkaPrepareOperator
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.transaction.committable import TWO_PHASE_TIMEOUT_MS
from airflow_provider_kafka2pc.transaction.controller import TransactionController
from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter
from tests.airflow import dagtest
from tests.conftest import assert_exactly_once

#: Short enough to expire within a test, long enough for the writes and the decision.
SHORT_MS = 4_000
#: The Airflow runs: the prepare's spark-submit must exit and the decision run inside it.
EXPORT_TIMEOUT_MS = 20_000
RUN_KEY = "k"


def now_ms() -> int:
    return int(time.time() * 1000)


def wait_aborted_by_broker(settings: dict[str, Any], tids: list[str], timeout_s: float) -> None:
    """Until the coordinator has aborted each id's transaction (its timeout passed)."""
    deadline = time.monotonic() + timeout_s
    with KafkaProtocol(settings, timeout_ms=10_000) as protocol:
        while True:
            states = {d.transactional_id: d.state for d in protocol.describe_transactions(tids)}
            if all(states.get(t) in ("CompleteAbort", "Empty") for t in tids):
                return
            assert time.monotonic() < deadline, f"the broker did not abort {tids}: {states}"
            time.sleep(0.25)


def rows_of(partition: int) -> list[tuple[bytes, bytes]]:
    """Partition ``partition``'s records, the same on every call (deterministic input)."""
    return [(f"p{partition}-{n}".encode(), b'{"n": %d}' % n) for n in range(10 + partition)]


def write(settings, topic, tid, records, timeout_ms):
    return TransactionalWriter(settings, tid, transaction_timeout_ms=timeout_ms).write(
        topic, records
    )


# -- the timeout guard (no Airflow, no Spark) ---------------------------------------------------


def test_the_guard_refuses_commit_when_the_earliest_participant_would_expire_first(
    ledger, protocol, settings, bootstrap, make_topic, caplog
):
    topic = make_topic(2)
    with ledger.open() as store:
        batch = store.begin("guard", RUN_KEY, topic=topic, id_prefix="guard", num_partitions=2)
        timeouts = [120_000, 30_000]  # partition 1 expires first
        committables = [
            write(settings, topic, tid, rows_of(i), timeouts[i])
            for i, tid in enumerate(batch.transactional_ids)
        ]
        rows = sum(c.record_count for c in committables)
        batch = store.record_prepared("guard", RUN_KEY, committables, source_rows=rows)
        parts = store.participants("guard", RUN_KEY)

        def judge(participants, margin_s):
            return assess(
                batch, participants, protocol, now_ms=now_ms(), commit_margin_ms=margin_s * 1000
            )

        with caplog.at_level(
            logging.INFO, logger="airflow_provider_kafka2pc.coordination.decision"
        ):
            ok = judge(parts, 10)
        assert ok.verdict is Verdict.COMMIT, ok
        assert ok.earliest_deadline_ms == committables[1].expires_at_ms
        assert 20 < ok.seconds_left <= 30
        assert "s before the earliest transaction timeout" in ok.reason
        logged = [r.getMessage() for r in caplog.records]
        assert any(
            "s left before the earliest transaction timeout (partition 1, guard-1)" in m
            for m in logged
        ), logged

        # The commit needs 60 s, partition 1 has 30 at most: refused, naming it.
        tight = judge(parts, 60)
        assert tight.verdict is Verdict.ABORT, tight
        assert "partition 1, guard-1" in tight.reason and "commit margin of 60.0 s" in tight.reason

        # expires_at_ms None (a KIP-939 2PC transaction) is no deadline: only the classic
        # participant bounds the commit, and with none left nothing does.
        def as_2pc(p):
            c = dataclasses.replace(
                p.committable, kip939=True, transaction_timeout_ms=TWO_PHASE_TIMEOUT_MS
            )
            assert c.expires_at_ms is None
            return dataclasses.replace(p, committable=c)

        mixed = [parts[0], as_2pc(parts[1])]
        assert earliest_deadline_ms(mixed) == committables[0].expires_at_ms
        assert judge(mixed, 60).verdict is Verdict.COMMIT  # 120 s left on partition 0
        assert judge(mixed, 200).verdict is Verdict.ABORT
        native = [as_2pc(p) for p in parts]
        assert earliest_deadline_ms(native) is None
        never = judge(native, 3600)
        assert never.verdict is Verdict.COMMIT and never.seconds_left is None, never
        assert "none of them can time out (2PC)" in never.reason

        TransactionController(protocol).abort_all(committables)
    assert_exactly_once(protocol, bootstrap, topic, *committables, committed=0, aborted=rows)


def test_an_expired_participant_is_refused_and_named(ledger, protocol, settings, make_topic):
    topic = make_topic(1)
    with ledger.open() as store:
        batch = store.begin("expired", RUN_KEY, topic=topic, id_prefix="expired", num_partitions=1)
        c = write(settings, topic, batch.transactional_ids[0], rows_of(0), 60_000)
        batch = store.record_prepared("expired", RUN_KEY, [c], source_rows=c.record_count)
        parts = store.participants("expired", RUN_KEY)
        late = assess(
            batch, parts, protocol, now_ms=c.expires_at_ms + 5_000, commit_margin_ms=1_000
        )
        assert late.verdict is Verdict.ABORT
        assert "timed out 5.0 s ago (partition 0, expired-0)" in late.reason, late.reason
        TransactionController(protocol).abort_all([c])


# -- loss repair in the coordinator (no Airflow, no Spark) --------------------------------------


def test_the_coordinator_repairs_partitions_lost_to_a_real_timeout(
    ledger, protocol, settings, bootstrap, make_topic, tmp_path
):
    """The verdict is COMMIT; partition 0 commits in time, 1 and 2 outlive their timeout
    and the broker aborts them. A commit without repair (what recovery runs) fails naming
    them; a repair from a changed input is refused; the repair from the same input
    commits them: every row exactly once."""
    topic = make_topic(3)
    export = "core"
    controller = TransactionController(protocol)
    with ledger.open() as store:
        batch = store.begin(export, RUN_KEY, topic=topic, id_prefix=export, num_partitions=3)
        first = [
            write(settings, topic, tid, rows_of(i), SHORT_MS)
            for i, tid in enumerate(batch.transactional_ids)
        ]
        rows = sum(c.record_count for c in first)
        batch = store.record_prepared(export, RUN_KEY, first, source_rows=rows)
        parts = store.participants(export, RUN_KEY)
        verdict = assess(batch, parts, protocol, now_ms=now_ms(), commit_margin_ms=500)
        assert verdict.verdict is Verdict.COMMIT, verdict
        store.decide(export, RUN_KEY, Verdict.COMMIT, verdict.reason)

        coordinator = Coordinator(store, controller)
        coordinator.commit_participants(export, RUN_KEY, parts[:1])
        wait_aborted_by_broker(settings, [c.transactional_id for c in first[1:]], 30)

        with pytest.raises(ParticipantLostError) as lost:
            coordinator.commit(export, RUN_KEY)
        assert [(lp.index, lp.records) for lp in lost.value.lost] == [(1, 11), (2, 12)]
        assert "partition 1 (core-1, 11 rows)" in str(lost.value)
        assert "23 rows are NOT in the topic" in str(lost.value)
        when_lost = store.participants(export, RUN_KEY)
        states = [p.state for p in when_lost]
        assert states == [ParticipantState.COMMITTED, *[ParticipantState.LOST] * 2]
        assert store.get(export, RUN_KEY).state is BatchState.COMMIT_DECIDED

        changed = []

        def from_changed_input(batch, participants, lost):
            for p in lost:
                extra = [*rows_of(p.index), (f"new-{p.index}".encode(), b"{}")]
                changed.append(write(settings, topic, p.transactional_id, extra, 60_000))
            return {p.index: c for p, c in zip(lost, changed, strict=True)}

        with pytest.raises(RepairImpossibleError) as refused:
            coordinator.commit(export, RUN_KEY, from_changed_input)
        message = str(refused.value)
        assert "partition 1 (core-1, 11 rows), partition 2 (core-2, 12 rows)" in message
        assert "re-prepared 12 rows, 11 recorded" in message and "COMMIT_DECIDED" in message
        assert [p.state for p in store.participants(export, RUN_KEY)][1:] == [
            ParticipantState.LOST
        ] * 2
        assert store.get(export, RUN_KEY).state is BatchState.COMMIT_DECIDED

        # The prepare task's own re-prepare, its source gone: refused before any Spark job.
        gone = SparkKafkaPrepareOperator(
            task_id="prepare",
            export_id=export,
            run_key=RUN_KEY,
            source={"path": str(tmp_path / "deleted"), "format": "json"},
            topic=topic,
            num_partitions=3,
            id_prefix=export,
        )
        with pytest.raises(RepairImpossibleError) as vanished:
            coordinator.commit(export, RUN_KEY, lambda *args: gone.reprepare({}, *args))
        assert "partition 1 (core-1, 11 rows), partition 2 (core-2, 12 rows)" in str(vanished.value)
        assert f"the source path {str(tmp_path / 'deleted')!r} is gone" in str(vanished.value)
        assert store.get(export, RUN_KEY).state is BatchState.COMMIT_DECIDED

        asked = []
        repaired = {}

        def from_the_same_input(batch, participants, lost):
            asked.append([p.index for p in lost])
            repaired.update(
                {
                    p.index: write(settings, topic, p.transactional_id, rows_of(p.index), 60_000)
                    for p in lost
                }
            )
            return dict(repaired)

        finished = coordinator.commit(export, RUN_KEY, from_the_same_input)
        assert asked == [[1, 2]]
        assert finished.batch.state is BatchState.COMMITTED
        assert [(lp.index, lp.records) for lp in finished.repaired] == [(1, 11), (2, 12)]
        assert finished.records == rows and finished.records_now == 23
        final = store.participants(export, RUN_KEY)
        assert [p.state for p in final] == [ParticipantState.COMMITTED] * 3
        # The repair's transaction and outcome replaced the lost ones in the ledger.
        assert final[1].committable != first[1] and final[1].committable == repaired[1]
        assert when_lost[1].reason and final[1].reason != when_lost[1].reason, final[1].reason
        assert not any(lease.leased for lease in store.leases(export))
        # Committed again: nothing to do.
        assert coordinator.commit(export, RUN_KEY).notes == ["already committed"]

    every = [*first, *changed, *[p.committable for p in final[1:]]]
    assert_exactly_once(
        protocol,
        bootstrap,
        topic,
        *every,
        committed=rows,
        aborted=23 + sum(c.record_count for c in changed),
    )


# -- Flink's data-loss scenario in an Airflow export, for real ----------------------------------


def settings_of(operator: KafkaTransactionCommitOperator) -> dict[str, Any]:
    from airflow_provider_kafka2pc.hooks.kafka2pc import Kafka2pcHook

    return Kafka2pcHook(operator.kafka_conn_id).settings()


class CommitRetriedAfterTheTimeout(KafkaTransactionCommitOperator):
    """Try 1 commits partition 0 and dies; try 2 runs only once the broker has aborted the
    other participants (their timeout passed after the COMMIT verdict): Flink's scenario."""

    def __init__(self, **kwargs):
        # This file tests the re-prepare from the source: the copy from the log, tried
        # first by default, is off (tests/integration/test_log_copy_repair.py covers it).
        super().__init__(repair_from_log=False, **kwargs)

    seen: ClassVar[dict[str, Any]] = {}

    def commit(self, context, coordinator):
        parts = coordinator.ledger.participants(self.export_id, self.run_key)
        if context["ti"].try_number == 1:
            self.seen["batch"] = coordinator.batch(self.export_id, self.run_key)
            self.seen["prepared"] = [p.committable for p in parts]
            coordinator.commit_participants(self.export_id, self.run_key, parts[:1])
            raise RuntimeError("injected: the commit task died after committing partition 0")
        late = [p.transactional_id for p in parts if p.state is ParticipantState.PREPARED]
        self.seen["late"] = late
        wait_aborted_by_broker(settings_of(self), late, EXPORT_TIMEOUT_MS / 1000 + 30)
        return super().commit(context, coordinator)

    def prepare_task(self):
        raise AssertionError("the repair looked for the prepare task instead of the ledger's job")


# The JVM writer (the default) here; the repair with the Python writer and every option is
# tests/integration/test_wire_formats.py's (docs/matrix.md).
@pytest.mark.parametrize("writer", ["jvm"])
def test_flink_data_loss_scenario_is_repaired_exactly_once(
    export_dag, run_export, make_topic, protocol, bootstrap, ledger, writer
):
    """The loss repair re-prepares with the prepare's own writer."""
    topic = make_topic(3)
    rows = 300
    dag = export_dag(
        topic=topic,
        rows=rows,
        num_partitions=3,
        retries=1,
        transaction_timeout_ms=EXPORT_TIMEOUT_MS,
        commit_margin_s=1.0,
        operator_classes={"commit": CommitRetriedAfterTheTimeout},
        prepare_kwargs={"writer": writer},
    )
    started = time.monotonic()
    result = run_export(dag, day=7)
    seconds = time.monotonic() - started

    assert result.state == "success", result
    assert result.tries["commit"] == 2, result
    seen = CommitRetriedAfterTheTimeout.seen
    decided = seen["batch"]
    assert decided.verdict is Verdict.COMMIT and decided.state is BatchState.COMMIT_DECIDED
    # The repair ran the job the prepare recorded (its writer), not the DAG's prepare task.
    assert decided.spark_job["export"]["writer"] == writer and decided.spark_job["export"]["source"]
    prepared = seen["prepared"]
    assert len(seen["late"]) == 2
    committed = result.xcom("commit")
    lost_rows = sum(c.record_count for c in prepared[1:])
    assert [r["partition"] for r in committed["repaired"]] == [1, 2], committed
    assert sum(r["rows"] for r in committed["repaired"]) == lost_rows
    assert committed["records"] == rows and committed["state"] == "COMMITTED"
    with ledger.open() as store:
        batch = store.get(decided.export_id, decided.run_key)
        parts = store.participants(decided.export_id, decided.run_key)
        leases = store.leases(batch.id_prefix)
    assert batch.state is BatchState.COMMITTED and batch.attempt == 1
    assert [p.state for p in parts] == [ParticipantState.COMMITTED] * 3
    # Partition 0 is the original transaction; 1 and 2 were written again, same ids.
    assert parts[0].committable == prepared[0]
    for i in (1, 2):
        again = parts[i].committable
        assert again.transactional_id == prepared[i].transactional_id
        assert again.record_count == prepared[i].record_count
        assert again.producer_epoch != prepared[i].producer_epoch
    assert not any(lease.leased for lease in leases)
    assert_exactly_once(
        protocol,
        bootstrap,
        topic,
        *prepared,
        *[p.committable for p in parts[1:]],
        committed=rows,
        aborted=lost_rows,
    )
    assert [e["committed"] for e in dagtest.asset_events(export_asset(topic).uri)] == [rows]
    print(f"flink scenario repaired: {seconds:.1f} s for the run, lost {lost_rows} rows")


class CommitAfterPartitionsWereAdded(KafkaTransactionCommitOperator):
    """Commits partition 0, waits until the broker aborted the others, adds a partition to
    the topic (3 -> 4: no longer a multiple of the 3 Spark partitions), then commits."""

    def __init__(self, **kwargs):
        # This file tests the re-prepare from the source: the copy from the log, tried
        # first by default, is off (tests/integration/test_log_copy_repair.py covers it).
        super().__init__(repair_from_log=False, **kwargs)

    topic_name: ClassVar[str]
    seen: ClassVar[dict[str, Any]] = {}

    def commit(self, context, coordinator):
        parts = coordinator.ledger.participants(self.export_id, self.run_key)
        self.seen["prepared"] = [p.committable for p in parts]
        self.seen["batch"] = coordinator.batch(self.export_id, self.run_key)
        coordinator.commit_participants(self.export_id, self.run_key, parts[:1])
        settings = settings_of(self)
        wait_aborted_by_broker(settings, [p.transactional_id for p in parts[1:]], 60)
        admin = AdminClient({"bootstrap.servers": settings["bootstrap.servers"]})
        admin.create_partitions([NewPartitions(self.topic_name, 4)])[self.topic_name].result(30)
        # As a batch prepared before the ledger kept its Spark job (migration 0006): the
        # repair falls back to the DAG's prepare task, rendered for the run.
        with coordinator.ledger._engine.begin() as conn:
            mine = (batches.c.export_id == self.export_id, batches.c.run_key == self.run_key)
            conn.execute(update(batches).where(*mine).values(spark_job=None))
        return super().commit(context, coordinator)


def test_a_repair_after_partitions_were_added_partitions_as_its_prepare_did(
    export_dag, run_export, make_topic, protocol, bootstrap, ledger
):
    """The prepare aligned its 3 transactions with the topic's 3 partitions; by the repair
    the topic has 4, which a prepare would now partition by hash. Deciding afresh, the
    repair moved rows between transactions (refused by the counts, or, were they equal,
    writing rows another transaction had committed). It follows the ledger's record."""
    topic = make_topic(3)
    rows = 300
    CommitAfterPartitionsWereAdded.topic_name = topic
    dag = export_dag(
        topic=topic,
        rows=rows,
        num_partitions=3,
        transaction_timeout_ms=EXPORT_TIMEOUT_MS,
        commit_margin_s=1.0,
        operator_classes={"commit": CommitAfterPartitionsWereAdded},
    )
    result = run_export(dag, day=9)

    assert result.state == "success", result
    seen = CommitAfterPartitionsWereAdded.seen
    decided, prepared = seen["batch"], seen["prepared"]
    assert decided.partitioning == "kafka-aligned"
    committed = result.xcom("commit")
    assert [r["partition"] for r in committed["repaired"]] == [1, 2], committed
    assert committed["records"] == rows and committed["state"] == "COMMITTED"
    with ledger.open() as store:
        parts = store.participants(decided.export_id, decided.run_key)
    assert [p.committable.record_count for p in parts] == [c.record_count for c in prepared]
    assert parts[1].committable != prepared[1] and parts[2].committable != prepared[2]
    assert_exactly_once(
        protocol,
        bootstrap,
        topic,
        *prepared,
        *[p.committable for p in parts[1:]],
        committed=rows,
        aborted=sum(c.record_count for c in prepared[1:]),
    )


class CommitAfterTheSourceChanged(KafkaTransactionCommitOperator):
    """Commits partition 0, waits until the broker aborted the others, changes the source,
    then commits: the repair must refuse, naming the lost partitions and rows."""

    def __init__(self, **kwargs):
        # This file tests the re-prepare from the source: the copy from the log, tried
        # first by default, is off (tests/integration/test_log_copy_repair.py covers it).
        super().__init__(repair_from_log=False, **kwargs)

    source_dir: ClassVar[Path]
    seen: ClassVar[dict[str, Any]] = {}

    def commit(self, context, coordinator):
        parts = coordinator.ledger.participants(self.export_id, self.run_key)
        self.seen["prepared"] = [p.committable for p in parts]
        coordinator.commit_participants(self.export_id, self.run_key, parts[:1])
        late = [p.transactional_id for p in parts[1:]]
        wait_aborted_by_broker(settings_of(self), late, EXPORT_TIMEOUT_MS / 1000 + 30)
        write_orders(self.source_dir / "late-arrivals.json", range(5000, 5040))
        try:
            return super().commit(context, coordinator)
        except Exception as exc:
            self.seen["error"] = exc
            raise


def write_orders(path: Path, ids: range) -> None:
    path.write_text(
        "".join(
            json.dumps({"order_id": i, "customer": f"c-{i % 7}", "amount": i / 4}) + "\n"
            for i in ids
        )
    )


def test_a_changed_source_fails_loudly_and_commits_nothing_twice(
    export_dag, run_export, make_topic, protocol, bootstrap, ledger, tmp_path
):
    topic = make_topic(3)
    rows = 200
    source = tmp_path / "orders"
    source.mkdir()
    write_orders(source / "part-0.json", range(rows))
    CommitAfterTheSourceChanged.source_dir = source
    dag = export_dag(
        topic=topic,
        num_partitions=3,
        retries=1,
        source={"path": str(source), "format": "json"},
        transaction_timeout_ms=EXPORT_TIMEOUT_MS,
        commit_margin_s=1.0,
        operator_classes={"commit": CommitAfterTheSourceChanged},
        # Three participants from one file: the shuffle (source splits would give one).
        partitioning="kafka-aligned",
    )
    result = run_export(dag, day=8)

    assert result.state == "failed", result
    assert result.tasks["commit"] == "failed" and result.tries["commit"] == 1, result  # no retry
    seen = CommitAfterTheSourceChanged.seen
    prepared = seen["prepared"]
    error = seen["error"]
    assert isinstance(error, RepairImpossibleError), error
    message = str(error)
    lost_rows = sum(c.record_count for c in prepared[1:])
    for i in (1, 2):
        named = f"partition {i} ({prepared[i].transactional_id}, {prepared[i].record_count} rows)"
        assert named in message, message
    assert f"Their {lost_rows} rows are NOT in the topic" in message
    assert "the source changed since the batch was prepared" in message
    assert f"{rows + 40} rows now, {rows} recorded" in message
    assert "COMMIT_DECIDED" in message

    with ledger.open() as store:
        (batch,) = store.in_doubt()
        parts = store.participants(batch.export_id, batch.run_key)
        assert batch.state is BatchState.COMMIT_DECIDED, batch
        assert [p.state for p in parts] == [
            ParticipantState.COMMITTED,
            ParticipantState.LOST,
            ParticipantState.LOST,
        ]
        assert all(lease.leased for lease in store.leases(batch.id_prefix))
        # What recovery runs (a commit without repair) does not pretend it is fine.
        with pytest.raises(ParticipantLostError, match=r"partition 1 \("):
            Coordinator(store, TransactionController(protocol)).commit(
                batch.export_id, batch.run_key
            )
    # Nothing was written again: partition 0 committed once, the aborted copies invisible.
    assert_exactly_once(
        protocol,
        bootstrap,
        topic,
        *prepared,
        committed=prepared[0].record_count,
        aborted=lost_rows,
    )
    assert dagtest.asset_events(export_asset(topic).uri) == []
