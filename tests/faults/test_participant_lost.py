"""A participant lost before the commit: the broker's transaction timeout aborts it after
the COMMIT verdict (Flink's silent data loss). Loss repair must re-prepare exactly that
partition from the deterministic input and commit it: the interval ends exactly once."""

from __future__ import annotations

import json

import pytest

from tests.faults.conftest import ROWS, assert_exported_once

DAY = 7
#: Short enough to wait out in a test, long enough for the decision to say COMMIT.
TIMEOUT_MS = 30_000


@pytest.mark.slow  # waits out a real 30 s transaction timeout, then a second Spark job
def test_participant_timed_out_after_the_commit_verdict_is_repaired_exactly_once(
    rig, protocol, bootstrap
):
    run = rig.run(
        DAY,
        options={"transaction_timeout_ms": TIMEOUT_MS, "commit_margin_s": 5},
        # Commits partitions 1 and 2, waits until the broker's timeout aborted partition
        # 0's transaction, then commits as the operator does.
        faults={"commit": ["commit_after_timeout", {"lost": 0}]},
    )

    lost = json.loads((rig.fault_dir / "timed-out.reached").read_text())
    assert lost["state"] in ("CompleteAbort", "PrepareAbort", "Empty"), lost
    assert run.result is not None, run.tail()
    assert run.result["verdict"]["verdict"] == "COMMIT", run.result["verdict"]
    assert run.state == "success", run.tail()
    committed = run.result["committed"]
    assert [r["transactional_id"] for r in committed["repaired"]] == [lost["lost"]], committed
    lost_rows = run.result["prepared"]["participants"][0]["records"]
    assert committed["repaired"][0]["rows"] == lost_rows
    assert committed["records"] == ROWS
    # The timed-out transaction's records stay aborted; their re-prepared copy is committed.
    assert_exported_once(protocol, bootstrap, rig, DAY, aborted=lost_rows)
