"""Failures inside an export run, injected by small operator subclasses (no patching).

A decision that raises after recording its verdict keeps that verdict on retry; a commit
that raises halfway finishes on retry, exactly once; a participant fenced before the
decision, or a prepare that fails, ends in abort: a failed run, nothing committed,
nothing left open.

These tasks *raise* (``dag.test()`` runs them in this process, which must survive): their
exception handlers and callbacks run. The same points with the task process really
SIGKILLed (no handler runs) are fault cases 4 and 5 in ``tests/faults/``.

They run the default writer (``auto``: the JVM one on spark-submit). None strikes in the
write path (the failing prepare fails reading its source, before any writer runs), so none
is repeated with the Python writer; the write-path cases are (``tests/faults/README.md``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from airflow_provider_kafka2pc.coordination.decision import Assessment
from airflow_provider_kafka2pc.coordination.finish import Coordinator
from airflow_provider_kafka2pc.export import export_asset
from airflow_provider_kafka2pc.ledger import BatchState, ParticipantState, Verdict
from airflow_provider_kafka2pc.operators.decision import KafkaTransactionDecisionOperator
from airflow_provider_kafka2pc.operators.finish import KafkaTransactionCommitOperator
from airflow_provider_kafka2pc.version_compat import HAS_TASK_STATE_STORE
from tests.airflow import dagtest
from tests.conftest import assert_exactly_once

ROWS = 300


class DecisionRaisesAfterVerdict(KafkaTransactionDecisionOperator):
    """Try 1 raises right after the ledger recorded the verdict; a later try would judge
    ABORT if it judged at all (it must not: the recorded verdict stands)."""

    recorded: ClassVar[list[Any]] = []

    def choose_branch(self, context):
        self._try = context["ti"].try_number
        return super().choose_branch(context)

    def assess(self, hook, ledger, batch) -> Assessment:
        if self._try > 1:
            return Assessment(Verdict.ABORT, "a second opinion that must never be recorded")
        return super().assess(hook, ledger, batch)

    def publish_verdict(self, context, batch) -> None:
        if self._try == 1:
            DecisionRaisesAfterVerdict.recorded.append(batch)
            raise RuntimeError("injected: the decision task raised after the ledger write")
        super().publish_verdict(context, batch)


class CommitRaisesHalfway(KafkaTransactionCommitOperator):
    """Try 1 commits half of the participants, then raises."""

    def commit(self, context, coordinator: Coordinator):
        if context["ti"].try_number == 1:
            todo = coordinator.unfinished(self.export_id, self.run_key)
            coordinator.commit_participants(self.export_id, self.run_key, todo[: len(todo) // 2])
            raise RuntimeError("injected: the commit task raised after committing half")
        return super().commit(context, coordinator)


class FencingDecision(KafkaTransactionDecisionOperator):
    """Before judging, participant 0's id is re-initialised: as a timeout or a zombie
    writer would, the broker aborts its transaction."""

    def assess(self, hook, ledger, batch) -> Assessment:
        with hook.coordinator() as coordinator:
            coordinator.fence([batch.transactional_ids[0]])
        return super().assess(hook, ledger, batch)


def test_decision_retried_after_raising_keeps_the_recorded_verdict(
    export_dag, run_export, make_topic, protocol, bootstrap, ledger
):
    topic = make_topic(3)
    dag = export_dag(
        topic=topic, rows=ROWS, retries=1, operator_classes={"decide": DecisionRaisesAfterVerdict}
    )
    result = run_export(dag, day=3)

    assert result.state == "success", result
    assert result.tries["decide"] == 2 and result.tasks["commit"] == "success"
    first = DecisionRaisesAfterVerdict.recorded[-1]
    with ledger.open() as store:
        batch = store.get(first.export_id, first.run_key)
    assert first.verdict is batch.verdict is Verdict.COMMIT
    assert batch.decided_at == first.decided_at and batch.verdict_reason == first.verdict_reason
    assert batch.state is BatchState.COMMITTED
    # What the retry published: the task state store from Airflow 3.3, XCom before it.
    if HAS_TASK_STATE_STORE:
        stored = result.task_state_store("decide", "verdict")
    else:
        stored = result.xcom("decide", key="verdict")
    assert stored["verdict"] == "COMMIT" and stored["decided_at"] == first.decided_at.isoformat()
    assert_exactly_once(protocol, bootstrap, topic, committed=ROWS, aborted=0)


def test_commit_raising_halfway_is_finished_by_its_retry_exactly_once(
    export_dag, run_export, make_topic, protocol, bootstrap, ledger
):
    topic = make_topic(4)
    dag = export_dag(
        topic=topic,
        rows=ROWS,
        num_partitions=4,
        retries=1,
        operator_classes={"commit": CommitRaisesHalfway},
    )
    result = run_export(dag, day=4)

    assert result.state == "success", result
    assert result.tries["commit"] == 2
    committed = result.xcom("commit")
    # The retry committed only the two participants the first try had not.
    assert len(committed["outcomes"]) == 2
    assert set(committed["outcomes"].values()) == {"COMMITTED"}
    assert committed["records"] == ROWS and committed["records_now"] < ROWS
    with ledger.open() as store:
        parts = store.participants(committed["export_id"], committed["run_key"])
        batch = store.get(committed["export_id"], committed["run_key"])
    assert batch.state is BatchState.COMMITTED
    assert [p.state for p in parts] == [ParticipantState.COMMITTED] * 4
    assert_exactly_once(
        protocol, bootstrap, topic, *[p.committable for p in parts], committed=ROWS, aborted=0
    )
    # Only the successful try emitted the asset event.
    assert [e["committed"] for e in dagtest.asset_events(export_asset(topic).uri)] == [ROWS]


def test_participant_fenced_before_the_decision_aborts_and_fails_the_run(
    export_dag, run_export, make_topic, protocol, bootstrap, ledger
):
    topic = make_topic(3)
    dag = export_dag(topic=topic, rows=ROWS, operator_classes={"decide": FencingDecision})
    result = run_export(dag, day=5)

    assert result.state == "failed", result
    assert result.tasks == {
        "recover": "success",
        "prepare": "success",
        "decide": "success",
        "commit": "skipped",
        "abort": "failed",
    }
    verdict = result.xcom("decide", key="verdict")
    assert verdict["verdict"] == "ABORT" and "no longer open" in verdict["reason"]
    with ledger.open() as store:
        batch = store.get(verdict["export_id"], verdict["run_key"])
        parts = store.participants(verdict["export_id"], verdict["run_key"])
        leases = store.leases(batch.id_prefix)
    assert batch.state is BatchState.ABORTED
    assert [p.state for p in parts] == [ParticipantState.ABORTED] * 2
    assert not any(lease.leased for lease in leases)
    assert_exactly_once(
        protocol, bootstrap, topic, *[p.committable for p in parts], committed=0, aborted=ROWS
    )
    assert dagtest.asset_events(export_asset(topic).uri) == []


def test_failing_prepare_aborts_fences_its_ids_and_fails_the_run(
    export_dag, run_export, make_topic, protocol, bootstrap, ledger
):
    topic = make_topic(2)
    # The table does not exist: only Spark can tell, after the ids were leased.
    dag = export_dag(topic=topic, source={"table": "no_such_table"})
    result = run_export(dag, day=6)

    assert result.state == "failed", result
    assert result.tasks["prepare"] == "failed"
    assert result.tasks["decide"] == "success" and result.tasks["abort"] == "failed"
    assert result.tasks["commit"] == "skipped"
    verdict = result.xcom("decide", key="verdict")
    assert verdict["verdict"] == "ABORT" and "PREPARING" in verdict["reason"]
    fenced = result.xcom("abort", key="abort")["fenced"]
    with ledger.open() as store:
        batch = store.get(verdict["export_id"], verdict["run_key"])
    assert batch.state is BatchState.ABORTED
    assert sorted(fenced) == sorted(batch.transactional_ids)
    open_ = protocol.list_transactions(prefix=batch.id_prefix, states=["Ongoing"])
    assert open_ == []
    assert_exactly_once(protocol, bootstrap, topic, committed=0)
