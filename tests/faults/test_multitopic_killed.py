"""A multi-topic export (``topic_column`` + ``topics``) killed in its prepare and in its
commit: each participant's one transaction spans both topics, so the orchestrator's own
abort (the run's abort task fencing the ids) or its rerun must finish every topic at once.
The test fences nothing itself; both witnesses judge every topic.

(One topic's partition leader killed mid-write needs the three-node cluster:
``tests/cluster/test_multitopic_leader_killed.py``.)
"""

from __future__ import annotations

import pytest

from airflow_provider_kafka2pc.ledger import BatchState, ParticipantState
from tests.conftest import assert_exactly_once
from tests.faults.conftest import (
    assert_exported_once_per_topic,
    open_and_aborted,
    routed_options,
)

DAY = 6


@pytest.fixture
def topics(make_topic) -> list[str]:
    return [make_topic(3), make_topic(2)]


# The default writer only: the Python writer's kill mid-write is test_spark_killed's, and
# its several topics test_multitopic's (CI time).
@pytest.mark.parametrize("writer", ["auto"], ids=["jvm"])
def test_prepare_job_killed_after_k_of_n_aborts_every_topic_then_the_rerun_commits(
    rig, protocol, bootstrap, topics, writer
):
    # local[1]: partitions 0 and 1 have prepared (into both topics) when partition 2's
    # first rows kill the job's JVM (driver and executor).
    first = rig.start(
        DAY,
        spark_master="local[1]",
        faults={
            "prepare": ["spark_dies", {"kind": "driver", "partition": 2}],
            "abort": ["abort_pauses", {}],
        },
        **routed_options(topics),
    )
    rig.reached("abort", first)
    assert rig.killed_at("spark-driver")["partition"] == 2
    ids = rig.batch(DAY).transactional_ids
    left = {d.transactional_id: d.state for d in protocol.describe_transactions(list(ids))}
    assert left[ids[0]] == left[ids[1]] == "Ongoing", left
    before = open_and_aborted(protocol, topics)
    assert all(v["open"] > 0 for v in before.values()), before  # open in every topic
    rig.go("abort")
    first = first.wait()

    # The orchestrator cleaned up: its abort fenced every id; nothing of either topic is
    # visible or open (the test fenced nothing).
    assert first.state == "failed", first.tail()
    assert first.tasks["prepare"] == "failed" and first.tasks["abort"] == "failed"
    assert sorted(first.result["aborted"]["fenced"]) == sorted(ids)
    aborted = {}
    for topic in topics:
        report, _ = assert_exactly_once(protocol, bootstrap, topic, committed=0)
        assert report.totals["aborted"] == before[topic]["open"], (topic, report.totals)
        aborted[topic] = report.totals["aborted"]

    second = rig.run(DAY, **routed_options(topics))

    assert second.state == "success", second.tail()
    assert second.result["prepared"]["attempt"] == 2
    rig.assert_writer(second)
    assert_exported_once_per_topic(protocol, bootstrap, rig, topics, DAY, aborted=aborted)


def test_commit_killed_after_k_of_n_finishes_every_topic_on_rerun(rig, protocol, bootstrap, topics):
    first = rig.run(
        DAY, faults={"commit": ["commit_dies_after", {"k": 1}]}, **routed_options(topics)
    )

    assert first.killed, first.tail()
    [done] = rig.killed_at("commit-after-k")["committed"]
    states = {p.transactional_id: p.state for p in rig.participants(DAY)}
    assert states.pop(done) is ParticipantState.COMMITTED
    assert set(states.values()) == {ParticipantState.PREPARED}
    assert rig.batch(DAY).state is BatchState.COMMIT_DECIDED
    # Half done in every topic: the committed participant's records visible in each, the
    # others' still open in each (one transaction per participant, spanning both topics).
    half = open_and_aborted(protocol, topics)
    assert all(v["open"] > 0 for v in half.values()), half

    second = rig.run(DAY, **routed_options(topics))

    assert second.state == "success", second.tail()
    outcomes = second.result["committed"]["outcomes"]
    assert sorted(outcomes) == sorted(states) and set(outcomes.values()) == {"COMMITTED"}
    assert second.result["committed"]["records_now"] == sum(v["open"] for v in half.values())
    assert_exported_once_per_topic(
        protocol, bootstrap, rig, topics, DAY, aborted=dict.fromkeys(topics, 0)
    )
