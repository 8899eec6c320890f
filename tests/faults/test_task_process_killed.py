"""The Airflow task process killed (SIGKILL) at each step of the second phase.

``dag.test()`` runs every task of the run in one child process, so killing the task
process kills the run where it stands: no exception handler, no callback, no retry.
Recovery is what a user does: run the same interval again, in a new process of the same
Airflow deployment (its ``recover`` task first, then prepare/decide/commit carry on from
the ledger).
"""

from __future__ import annotations

from airflow_provider_kafka2pc.ledger import BatchState, ParticipantState, Verdict
from tests.conftest import audit
from tests.faults.conftest import ROWS, assert_exported_once

DAY = 2


def test_decision_killed_after_its_verdict_is_recorded_commits_on_rerun(rig, protocol, bootstrap):
    first = rig.run(DAY, faults={"decide": ["decide_dies_after_verdict", {}]})

    assert first.killed, first.tail()
    assert rig.killed_at("decide-after-verdict")["verdict"] == "COMMIT"
    batch = rig.batch(DAY)
    assert batch.state is BatchState.COMMIT_DECIDED and batch.verdict is Verdict.COMMIT
    assert audit(protocol, rig.topic).totals["open"] == ROWS  # prepared, waiting

    second = rig.run(DAY)

    assert second.state == "success", second.tail()
    # The recorded verdict stands: nothing prepared again, nothing judged again.
    assert second.result["verdict"]["decided_at"] == batch.decided_at.isoformat()
    assert second.result["prepared"]["attempt"] == 1
    assert second.result["committed"]["records_now"] == ROWS
    assert_exported_once(protocol, bootstrap, rig, DAY, aborted=0)


def test_commit_killed_after_k_of_n_participants_finishes_on_rerun(rig, protocol, bootstrap):
    first = rig.run(DAY, faults={"commit": ["commit_dies_after", {"k": 1}]})

    assert first.killed, first.tail()
    [done] = rig.killed_at("commit-after-k")["committed"]
    states = {p.transactional_id: p.state for p in rig.participants(DAY)}
    assert states.pop(done) is ParticipantState.COMMITTED
    assert set(states.values()) == {ParticipantState.PREPARED}
    half = audit(protocol, rig.topic).totals
    assert half["committed"] > 0 and half["open"] > 0
    assert half["committed"] + half["open"] == ROWS

    second = rig.run(DAY)

    assert second.state == "success", second.tail()
    # Only the two participants the killed task had not committed were committed now.
    outcomes = second.result["committed"]["outcomes"]
    assert sorted(outcomes) == sorted(states) and set(outcomes.values()) == {"COMMITTED"}
    assert second.result["committed"]["records_now"] == half["open"]
    assert_exported_once(protocol, bootstrap, rig, DAY, aborted=0)


def test_decision_killed_before_its_verdict_is_prepared_again_on_rerun(rig, protocol, bootstrap):
    first = rig.run(DAY, faults={"decide": ["decide_dies_before_verdict", {}]})

    assert first.killed, first.tail()
    assert rig.killed_at("decide-before-verdict")["judged"] == "COMMIT"
    batch = rig.batch(DAY)
    assert batch.state is BatchState.PREPARED and batch.verdict is None
    assert audit(protocol, rig.topic).totals["open"] == ROWS

    second = rig.run(DAY)

    assert second.state == "success", second.tail()
    # No verdict was recorded: the rerun's prepare fenced the open transactions (they
    # are aborted) and prepared the interval again under the same ids.
    assert second.result["prepared"]["attempt"] == 1
    assert rig.batch(DAY).transactional_ids == batch.transactional_ids
    assert second.result["committed"]["records_now"] == ROWS
    assert_exported_once(protocol, bootstrap, rig, DAY, aborted=ROWS)


def test_abort_killed_midway_is_finished_by_recovery_then_the_rerun_commits(
    rig, protocol, bootstrap
):
    # A commit margin longer than the transaction timeout: the decision rule says ABORT.
    first = rig.run(
        DAY,
        options={"commit_margin_s": 10**6},
        faults={"abort": ["abort_dies_after", {"k": 1}]},
    )

    assert first.killed, first.tail()
    [done] = rig.killed_at("abort-after-k")["aborted"]
    batch = rig.batch(DAY)
    assert batch.state is BatchState.ABORT_DECIDED and "commit margin" in batch.verdict_reason
    states = {p.transactional_id: p.state for p in rig.participants(DAY)}
    assert states.pop(done) is ParticipantState.ABORTED
    assert set(states.values()) == {ParticipantState.PREPARED}
    half = audit(protocol, rig.topic).totals
    assert half["aborted"] > 0 and half["open"] > 0 and half["committed"] == 0

    second = rig.run(DAY)

    assert second.state == "success", second.tail()
    # The recover task finished the first attempt's ABORT; the prepare began attempt 2.
    assert second.tasks["recover"] == "success"
    assert second.result["prepared"]["attempt"] == 2
    assert_exported_once(protocol, bootstrap, rig, DAY, aborted=ROWS)
