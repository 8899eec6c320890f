"""The example DAG under a real scheduler and worker: Airflow's own processes, not dag.test().

One Airflow deployment for the module (``tests/support/scheduler.py``): api-server,
scheduler with the LocalExecutor, dag-processor and triggerer in subprocesses, the metadata
DB and the coordinator ledger in databases of their own on a throwaway PostgreSQL server.
The dags folder holds ``dags/orders_export.py`` (parametrised by env: the session's broker
through ``AIRFLOW_CONN_KAFKA_DEFAULT``, a topic of its own, a small day), a downstream DAG
on the topic's asset, and a canary DAG whose task opens the metadata DB through the ORM,
which proves that the task-log check below would see that error if any task caused it.

The test process never imports Airflow: it drives Airflow by its CLI (unpause, backfill
create, trigger) and watches the runs by reading the metadata DB with plain SQL.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from devtools.broker import DEFAULT_KAFKA_VERSION

from ..conftest import REAL_KAFKA_ENV
from ..support.postgres import postgres_url
from ..support.scheduler import (
    DAG_ID,
    FINAL,
    Deployment,
    airflow_deployment,
    assert_topic_exactly_once,
    committed_batches,
    max_overlap,
)

pytestmark = pytest.mark.slow

CANARY_ID = "orm_canary"
ROWS = 200
PARTITIONS = 2
TOPIC_PARTITIONS = 3
ORM_ERROR = "Direct database access via the ORM is not allowed"

DOWNSTREAM_ID = "orders_downstream"
#: A consumer's DAG, scheduled on the topic's asset built the official Kafka provider's way
#: (``create_asset(server=..., topic=...)``), knowing nothing of this provider.
DOWNSTREAM_DAG = '''
"""Downstream: runs when the export's commit emits the topic's asset."""
import os

from airflow.providers.apache.kafka.assets.kafka import create_asset
from airflow.sdk import DAG, task

ORDERS = create_asset(
    server=os.environ["DOWNSTREAM_BOOTSTRAP_SERVER"], topic=os.environ["KAFKA2PC_ORDERS_TOPIC"]
)

with DAG("orders_downstream", schedule=[ORDERS], catchup=False):

    @task
    def read_committed_orders():
        print("committed orders are there")

    read_committed_orders()
'''

CANARY_DAG = '''
"""Canary: a task that opens the metadata DB through the ORM, as no provider task may."""
from airflow.sdk import DAG, task

with DAG("orm_canary", schedule=None, catchup=False):

    @task
    def open_the_metadata_db():
        from airflow.models import DagRun
        from airflow.settings import Session

        try:
            Session().query(DagRun).count()
        except Exception as exc:  # the worker refuses; its message goes to the task log
            print(f"refused: {exc}")

    open_the_metadata_db()
'''


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, broker_pool: Any) -> Iterator[Deployment]:
    bootstrap = (
        os.environ.get(REAL_KAFKA_ENV) or broker_pool.get(DEFAULT_KAFKA_VERSION).bootstrap_servers
    )
    with (
        postgres_url() as server,
        airflow_deployment(
            tmp_path_factory.mktemp("airflow-home"),
            bootstrap=bootstrap,
            postgres=server,
            topic_partitions=TOPIC_PARTITIONS,
            rows=ROWS,
            partitions=PARTITIONS,
            extra_dags={f"{CANARY_ID}.py": CANARY_DAG, f"{DOWNSTREAM_ID}.py": DOWNSTREAM_DAG},
            extra_env={"DOWNSTREAM_BOOTSTRAP_SERVER": bootstrap.split(",")[0]},
        ) as deployment,
    ):
        yield deployment


# -- checks -------------------------------------------------------------------------------


def assert_no_orm_access(deployment: Deployment, runs: list[dict[str, Any]]) -> None:
    logs = deployment.task_logs(DAG_ID)
    for run in runs:
        mine = [p for p in logs if f"run_id={run['run_id']}" in str(p)]
        tasks = {re.search(r"task_id=([^/]+)", str(p)).group(1).split(".")[-1] for p in mine}
        assert {"recover", "prepare", "decide", "commit"} <= tasks, (run["run_id"], mine)
    offenders = [p for p in logs if ORM_ERROR in p.read_text(errors="replace")]
    assert not offenders, [f"{p}: {p.read_text()[-2000:]}" for p in offenders]


# -- tests --------------------------------------------------------------------------------


def test_scheduled_run_is_exactly_once(deployment: Deployment) -> None:
    """Unpaused with catchup, the scheduler runs the one interval since the start date."""
    started = time.monotonic()
    deployment.airflow("dags", "unpause", DOWNSTREAM_ID)
    deployment.airflow("dags", "unpause", DAG_ID)
    interval_start = deployment.today - timedelta(days=1)

    def scheduled() -> list[dict[str, Any]]:
        return [r for r in deployment.runs("scheduled") if r["start"] == interval_start]

    deployment.wait_for(
        lambda: any(r["state"] in FINAL for r in scheduled()), "the scheduled run to finish"
    )
    (run,) = scheduled()
    states = deployment.task_states(run["run_id"])
    assert run["state"] == "success", (run, states, deployment.diagnostics())
    assert states == {
        "recover": "success",
        "prepare": "success",
        "decide": "success",
        "commit": "success",
        "abort": "skipped",
    }, states
    committed_batches(deployment, [run])
    # (A run past midnight UTC would add the next day; it must be exactly once too.)
    deployment.wait_for(
        lambda: all(r["state"] in FINAL for r in deployment.runs()), "every scheduled run"
    )
    assert_topic_exactly_once(deployment, deployment.runs("scheduled"))
    assert_no_orm_access(deployment, [run])
    # The commit's asset event is the official provider's asset: a consumer's DAG runs.
    downstream = lambda: deployment.runs("asset_triggered", dag_id=DOWNSTREAM_ID)  # noqa: E731
    deployment.wait_for(
        lambda: any(r["state"] in FINAL for r in downstream()), "the downstream DAG's run"
    )
    assert [r["state"] for r in downstream()][:1] == ["success"], deployment.diagnostics()
    print(f"scheduled run: {time.monotonic() - started:.1f} s from unpause to verified")


def test_backfill_of_three_intervals_two_at_a_time(deployment: Deployment) -> None:
    """`airflow backfill create` of three earlier days, at most two runs at once: each day
    exactly once, concurrent runs on disjoint transactional ids, no ORM access in a task."""
    started = time.monotonic()
    deployment.airflow("dags", "unpause", CANARY_ID)
    deployment.airflow("dags", "trigger", CANARY_ID)
    first, last = deployment.today - timedelta(days=5), deployment.today - timedelta(days=3)
    deployment.backfill(first, last, max_active_runs=2)

    def backfill() -> list[dict[str, Any]]:
        return deployment.runs("backfill")

    deployment.wait_for(
        lambda: len(backfill()) == 3 and all(r["state"] in FINAL for r in backfill()),
        "three backfill runs to finish",
    )
    runs = backfill()
    assert [r["start"] for r in runs] == [first, first + timedelta(days=1), last], runs
    for run in runs:
        states = deployment.task_states(run["run_id"])
        assert run["state"] == "success", (run, states, deployment.diagnostics())
        assert states["commit"] == "success" and states["abort"] == "skipped", states
    assert max_overlap(runs) == 2, runs  # two at a time, never three

    batches = committed_batches(deployment, runs)
    # Batches that were open at the same time must hold disjoint transactional ids.
    overlapping = 0
    for i, a in enumerate(batches):
        for b in batches[i + 1 :]:
            if a.created_at < b.finished_at and b.created_at < a.finished_at:
                overlapping += 1
                assert not set(a.transactional_ids) & set(b.transactional_ids), (a, b)
    assert overlapping >= 1, f"no two batches were open at once: {batches}"

    everything = [*deployment.runs("scheduled"), *runs]
    assert all(r["state"] == "success" for r in everything), everything
    assert_topic_exactly_once(deployment, everything)
    assert_no_orm_access(deployment, runs)

    # The check above can fail: the canary's task log holds the worker's refusal.
    deployment.wait_for(
        lambda: deployment.rows(
            "SELECT 1 FROM dag_run WHERE dag_id = %s AND state IN ('success', 'failed')",
            CANARY_ID,
        ),
        "the ORM canary",
    )
    canary = deployment.task_logs(CANARY_ID)
    assert canary and any(ORM_ERROR in p.read_text(errors="replace") for p in canary), canary
    print(f"backfill of 3 intervals: {time.monotonic() - started:.1f} s to verified")
