"""Two runs of one interval at once, and a stale committable on a re-leased pooled id.

Both are races that only the ledger and the broker together can settle: the same run
key prepared twice under the same transactional ids, and an earlier run's handle
replayed (by a zombie task, a person with the CLI) while a later run holds its id.
"""

from __future__ import annotations

import json

import pytest

from airflow_provider_kafka2pc.ledger import BatchState
from tests.conftest import audit, cli
from tests.faults.conftest import ROWS, assert_exported_once

#: The two runs of case 8, in the order their Spark jobs write.
RACE = ("first", "second")


class LeftOpen(AssertionError):
    """A run of the race ended and left transactions open on the broker."""


# The default writer only: the race is decided by the ledger (first writer wins, the
# second's record refused) and the fence by the broker (InitProducerId on an id whose
# transaction is open), which each writer meets when Spark retries a task killed mid-write
# (tests/integration/test_spark_prepare.py, test_task_killed_mid_write_is_retried_...).
@pytest.mark.slow
def test_two_runs_of_one_interval_at_once_export_it_exactly_once(rig, protocol, bootstrap):
    day = 6
    # Two deployments (own Airflow homes) run the interval at once; their prepares are
    # interleaved: both begin, the first writes, the second writes, the first records
    # and is decided, the second records.
    children = [
        rig.start(
            day,
            home=rig.root / f"airflow-{role}",
            faults={"prepare": ["prepare_races", {"role": role}]},
        )
        for role in RACE
    ]
    runs = [child.wait() for child in children]

    for run in runs:
        assert run.result is not None, run.tail()
    # The race named above really happened: both prepares met, both Spark jobs wrote, the
    # second after the first, and the second recorded only after the first's run was
    # decided. A wait that timed out means the interleaving was not the one under test.
    race = {role: json.loads((rig.fault_dir / f"{role}.race").read_text()) for role in RACE}
    assert race["first"]["met"] and race["second"]["met"], race
    assert race["second"]["after_first_wrote"] and race["first"]["second_wrote"], race
    assert race["first"]["written_at"] <= race["second"]["written_at"], race
    assert race["second"]["first_decided"] == "ABORT", race  # the first was fenced
    ids = [json.loads((rig.fault_dir / f"{role}.written").read_text()) for role in RACE]
    assert ids[0] == ids[1] and len(ids[0]) == 3, ids  # the same pooled ids, both fenced

    # What the README says of this race: the first is decided ABORT and aborts; the
    # second's record_prepared is refused and it aborts what its job wrote; both fail.
    raced = audit(protocol, rig.topic).totals
    assert sorted(run.state for run in runs) == ["failed", "failed"], [r.tasks for r in runs]
    # Each run of the race ended clean: nothing it prepared was left open behind it.
    if raced["open"]:
        raise LeftOpen(f"after both runs ended: {raced}; tasks {[r.tasks for r in runs]}")
    assert raced["committed"] == 0, raced
    again = rig.run(day)
    assert again.state == "success", again.tail()
    rig.assert_writer(again)
    assert_exported_once(protocol, bootstrap, rig, day)


def test_stale_committable_on_a_re_leased_id_neither_commits_nor_loses_the_new_run(
    rig, protocol, bootstrap, tmp_path
):
    earlier = rig.run(1)
    assert earlier.state == "success", earlier.tail()
    stale = [p.committable for p in rig.participants(1)]
    stale_file = tmp_path / "stale.json"
    stale_file.write_text(json.dumps([c.to_dict() for c in stale]))

    later = rig.start(2, faults={"decide": ["decide_pauses", {}]})
    paused = rig.reached("decide", later)
    # The pool gave the later run the very ids of the earlier one: its transactions are
    # open under them, with a newer epoch.
    assert paused["ids"] == [c.transactional_id for c in stale]
    before = {
        d.transactional_id: (d.state, d.producer_id, d.producer_epoch)
        for d in protocol.describe_transactions(paused["ids"])
    }
    assert {state for state, _, _ in before.values()} == {"Ongoing"}, before

    # A zombie (a task of the earlier run, a person with the CLI) replays its handles.
    commit = cli("commit", "-b", bootstrap, str(stale_file))
    abort = cli("abort", "-b", bootstrap, str(stale_file))

    committed = json.loads(commit.stdout)["results"]
    assert commit.returncode == 0, commit
    assert {r["outcome"] for r in committed} == {"ALREADY_COMMITTED"}, committed
    aborted = json.loads(abort.stdout)["results"]
    assert abort.returncode == 1, abort  # an abort that finds it committed fails loudly
    assert {r["outcome"] for r in aborted} == {"ALREADY_COMMITTED"}, aborted
    # The later run's transactions are untouched: still open, same producer and epoch.
    after = {
        d.transactional_id: (d.state, d.producer_id, d.producer_epoch)
        for d in protocol.describe_transactions(paused["ids"])
    }
    assert after == before
    totals = audit(protocol, rig.topic).totals
    assert (totals["committed"], totals["open"]) == (ROWS, ROWS), totals

    rig.go("decide")
    done = later.wait()

    assert done.state == "success", done.tail()
    assert rig.batch(1).state is BatchState.COMMITTED
    assert_exported_once(protocol, bootstrap, rig, 1, 2, aborted=0)
