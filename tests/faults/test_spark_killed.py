"""The Spark side dies: one task's Python worker mid-write, or the whole prepare job
after some of its partitions prepared.

The Spark-level retry of a killed task is tested in ``tests/integration/test_spark_prepare.py``;
here the job runs as users run it (spark-submit from the prepare task, ``local[N]``,
which does not retry tasks), so the prepare fails, and the run must abort cleanly:
every transaction the dead job opened is aborted, nothing is left open for a
read_committed consumer to stall on. Then the interval is run again and committed once.

The task killed mid-write runs under both writers (:data:`~tests.faults.conftest.BOTH_WRITERS`):
the Python writer's worker is SIGKILLed from the ``on_batch`` hook; under the JVM writer
the tests' fault hook (from the tests' jar) ends the task as a dead one. The job dying after
k of n partitions runs under the default writer, whose hook halts the JVM
(:mod:`tests.faults.spark_fault_app`).
"""

from __future__ import annotations

import pytest

from tests.conftest import assert_exactly_once, audit
from tests.faults.conftest import BOTH_WRITERS, assert_exported_once

DAY = 4


def open_records_of(protocol, topic: str, producer_id: int) -> int:
    """Records of ``producer_id``'s transactions still open in ``topic``'s log (the audit's
    spans: one producer's records in one partition, up to their marker)."""
    report = audit(protocol, topic)
    return sum(
        span.count
        for part in report.partitions.values()
        for span in part.spans
        if span.producer_id == producer_id and span.state == "OPEN"
    )


@BOTH_WRITERS
def test_spark_task_killed_mid_write_aborts_the_run_then_the_rerun_commits(
    rig, protocol, bootstrap, writer
):
    first = rig.start(
        DAY,
        faults={
            "prepare": ["spark_dies", {"kind": "worker", "partition": 1}],
            "abort": ["abort_pauses", {}],
        },
    )
    # The kill landed mid-write: at the pause before the abort, the killed partition's own
    # transaction is still Ongoing with the records it delivered open in the log (counted
    # on its producer id, not on the topic), and no partition's committable was recorded.
    rig.reached("abort", first)
    killed = rig.killed_at("spark-worker")
    assert killed["partition"] == 1, killed
    assert killed.get("mode") == (None if writer == "python" else "die"), killed
    ids = rig.batch(DAY).transactional_ids
    [victim] = protocol.describe_transactions([ids[1]])
    assert victim.state.value == "Ongoing", victim
    delivered = open_records_of(protocol, rig.topic, victim.producer_id)
    assert 0 < delivered <= killed["rows"], (delivered, killed)
    # The decision came after the failed prepare: ABORT, the batch never left PREPARING.
    batch = rig.batch(DAY)
    assert batch.state.value == "ABORT_DECIDED" and "PREPARING" in batch.verdict_reason, batch
    assert rig.participants(DAY) == []
    rig.go("abort")
    first = first.wait()

    assert first.state == "failed", first.tail()
    assert first.tasks["prepare"] == "failed" and first.tasks["abort"] == "failed"
    assert "PREPARING" in first.result["verdict"]["reason"]
    # The dead job's transactions, and the killed task's records among them, are aborted.
    assert sorted(first.result["aborted"]["fenced"]) == sorted(rig.batch(DAY).transactional_ids)
    report, _ = assert_exactly_once(protocol, bootstrap, rig.topic, committed=0)
    assert report.totals["aborted"] > 0

    second = rig.run(DAY)

    assert second.state == "success", second.tail()
    assert second.result["prepared"]["attempt"] == 2
    rig.assert_writer(second)
    assert_exported_once(protocol, bootstrap, rig, DAY, aborted=report.totals["aborted"])


# The default writer only: the Python writer's death mid-write is the case above, and what
# the orchestrator does after the job dies (abort every id, the rerun) is the same.
@pytest.mark.parametrize("writer", ["auto"], ids=["jvm"])
def test_prepare_job_dying_after_k_of_n_partitions_aborts_them_then_the_rerun_commits(
    rig, protocol, bootstrap, writer
):
    # local[1]: partitions run in order, so partitions 0 and 1 have prepared when the
    # job's JVM is killed from partition 2's first batch.
    first = rig.start(
        DAY,
        spark_master="local[1]",
        faults={
            "prepare": ["spark_dies", {"kind": "driver", "partition": 2}],
            "abort": ["abort_pauses", {}],
        },
    )
    rig.reached("abort", first)
    killed = rig.killed_at("spark-driver")
    assert killed["partition"] == 2, killed
    assert killed.get("mode") == (None if writer == "python" else "halt"), killed
    ids = rig.batch(DAY).transactional_ids
    left = {d.transactional_id: d.state for d in protocol.describe_transactions(list(ids))}
    assert left[ids[0]] == left[ids[1]] == "Ongoing", left  # k = 2 of n = 3 prepared
    open_records = audit(protocol, rig.topic).totals["open"]
    assert open_records > 0
    rig.go("abort")
    first = first.wait()

    assert first.state == "failed", first.tail()
    assert first.tasks["prepare"] == "failed" and first.tasks["abort"] == "failed"
    assert sorted(first.result["aborted"]["fenced"]) == sorted(ids)
    report, _ = assert_exactly_once(protocol, bootstrap, rig.topic, committed=0)
    assert report.totals["aborted"] == open_records

    second = rig.run(DAY)

    assert second.state == "success", second.tail()
    rig.assert_writer(second)
    assert_exported_once(protocol, bootstrap, rig, DAY, aborted=open_records)
