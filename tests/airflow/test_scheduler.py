"""The example DAG under a real scheduler and worker: Airflow's own processes, not dag.test().

One Airflow deployment (``tests/support/scheduler.py``): api-server, scheduler with the
LocalExecutor, dag-processor and triggerer in subprocesses, the metadata DB and the
coordinator ledger in databases of their own on a throwaway PostgreSQL server. The dags
folder holds ``dags/orders_export.py`` (parametrised by env: the session's broker through
``AIRFLOW_CONN_KAFKA_DEFAULT``, a topic of its own, a small day), a downstream DAG on the
topic's asset, and a canary DAG whose task opens the metadata DB through the ORM, which
proves that the task-log check would see that error if any task caused it.

This is the oldest supported Airflow's scheduler test (``make test-airflow-oldest``), on
one broker. ``make test`` leaves it out: on the newest Airflow the rolling restart
(``tests/cluster/test_rolling_restart.py``) runs the same scheduled run with a backfill of
three intervals two at a time, on the cluster, with these checks and its own.

The test process never imports Airflow: it drives Airflow by its CLI (unpause, trigger)
and watches the runs by reading the metadata DB with plain SQL.
"""

from __future__ import annotations

import os
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
    assert_downstream_ran,
    assert_no_orm_access,
    assert_topic_exactly_once,
    committed_batches,
    companion_dags,
    start_companions,
)

pytestmark = pytest.mark.slow

ROWS = 200
PARTITIONS = 2
TOPIC_PARTITIONS = 3


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, broker_pool: Any) -> Iterator[Deployment]:
    bootstrap = (
        os.environ.get(REAL_KAFKA_ENV) or broker_pool.get(DEFAULT_KAFKA_VERSION).bootstrap_servers
    )
    extra_dags, extra_env = companion_dags(bootstrap)
    with (
        postgres_url() as server,
        airflow_deployment(
            tmp_path_factory.mktemp("airflow-home"),
            bootstrap=bootstrap,
            postgres=server,
            topic_partitions=TOPIC_PARTITIONS,
            rows=ROWS,
            partitions=PARTITIONS,
            extra_dags=extra_dags,
            extra_env=extra_env,
        ) as deployment,
    ):
        yield deployment


# -- tests --------------------------------------------------------------------------------


def test_scheduled_run_is_exactly_once(deployment: Deployment) -> None:
    """Unpaused with catchup, the scheduler runs the one interval since the start date;
    its commit's asset runs the downstream DAG, and no task opened the metadata DB."""
    started = time.monotonic()
    start_companions(deployment)
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
    assert_downstream_ran(deployment)
    print(f"scheduled run: {time.monotonic() - started:.1f} s from unpause to verified")
