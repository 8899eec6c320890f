"""Two intervals of one export as concurrent runs: two processes, each running dag.test()
with its own Airflow metadata DB, sharing the ledger and the broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from airflow_provider_kafka2pc.export import default_id_prefix
from airflow_provider_kafka2pc.ledger import BatchState
from tests.airflow import dagtest
from tests.conftest import assert_exactly_once

ROWS = 300
REPO = Path(__file__).resolve().parents[2]


def test_two_intervals_run_concurrently_with_disjoint_ids_both_exactly_once(
    export_env, make_topic, protocol, bootstrap, tmp_path
):
    ledger = export_env
    topic = make_topic(3)
    dag_id = "concurrent_orders"
    children = []
    for day in (7, 8):
        spec = {
            "home": str(tmp_path / f"airflow-{day}"),
            "dag_id": dag_id,
            "topic": topic,
            "day": day,
            "rows": ROWS,
            "num_partitions": 2,
            "rendezvous": 2,  # both hold their leases before either writes
        }
        children.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests.airflow.dagtest", json.dumps(spec)],
                cwd=REPO,
                env=os.environ.copy(),  # the connections, from the fixtures
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = [child.communicate(timeout=400)[0] for child in children]
    results = []
    for child, out in zip(children, outputs, strict=True):
        result = dagtest.result_in(out)
        assert child.returncode == 0 and result is not None, out[-3000:]
        results.append(result)

    assert [r["state"] for r in results] == ["success", "success"], results
    export_id = f"{dag_id}.{dagtest.GROUP_ID}"
    run_keys = [r["prepared"]["run_key"] for r in results]
    assert {r["prepared"]["export_id"] for r in results} == {export_id}
    with ledger.open() as store:
        batches = [store.get(export_id, key) for key in run_keys]
        leases = store.leases(default_id_prefix(export_id))
    assert {b.state for b in batches} == {BatchState.COMMITTED}
    first, second = (set(b.transactional_ids) for b in batches)
    assert len(first) == len(second) == 2 and not first & second
    assert len(leases) == 4 and not any(lease.leased for lease in leases)
    assert_exactly_once(protocol, bootstrap, topic, committed=2 * ROWS, aborted=0)
