"""A rolling restart of all three brokers while a real scheduler backfills three intervals.

What an operator does to upgrade or reconfigure Kafka: one node at a time, down, up, wait
until every replica is back in sync, next. Here it happens while Airflow (scheduler with
the LocalExecutor, PostgreSQL metadata DB and ledger; ``tests/scheduler_support.py``)
backfills three days of the example DAG, two runs at a time, plus the one interval the
scheduler catches up on its own. The restarts are timed on the runs' own progress:

1. the transaction coordinator of the export's first pooled id is killed -9 as soon as a
   prepare runs (its Spark writers, the coordinator and a partition leader at once);
2. the next node is stopped cleanly (SIGTERM: controlled shutdown, leaders moved away) as
   soon as a commit task runs;
3. the last node is killed -9 right after the second is back.

Each node is restarted on its data and waited for until it is back in every partition's
ISR (and its preferred leaderships returned) before the next one goes down, so there are
always two in-sync replicas: ``min.insync.replicas=2`` is met throughout and nothing may be
lost. The test checks from the task instances' times that the restarts did overlap a
prepare and a commit, then ends with every witness: the log audit (markers applied by us),
a read_committed consumer, Kafka's Java console consumer, every batch COMMITTED in the
ledger, no transaction of the export open on the broker and no id still leased.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from airflow_provider_kafka2pc.broker import KafkaCluster
from airflow_provider_kafka2pc.transaction import naming
from tests.java_witness import assert_java_witness
from tests.postgres_support import postgres_url
from tests.scheduler_support import (
    EXPORT_ID,
    FINAL,
    Deployment,
    airflow_deployment,
    assert_topic_exactly_once,
    committed_batches,
    open_on_broker,
    still_leased,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ROWS = 200
PARTITIONS = 2
#: How long a node stays down before it is started again.
DOWN_S = 3.0


@dataclass
class Restart:
    """One node's turn: how it went down, when, and when it was whole again."""

    node: int
    how: str  # "kill -9" or "SIGTERM"
    trigger: str
    down_at: datetime
    up_at: datetime | None = None

    def overlapped(self, ti: dict[str, Any]) -> bool:
        """Whether task instance ``ti`` was running while this node was down or rejoining."""
        end = ti["end"] or datetime.now(UTC)
        return ti["start"] is not None and ti["start"] < self.up_at and end > self.down_at


def _running(deployment: Deployment, task: str) -> bool:
    return any(
        ti["task"] == task and ti["state"] == "running" for ti in deployment.task_instances()
    )


def _roll(
    cluster: KafkaCluster, deployment: Deployment, order: list[tuple[int, str, str]]
) -> list[Restart]:
    """Restart each node in ``order`` (node, how, trigger task or "" for at once)."""
    done: list[Restart] = []
    for node, how, trigger in order:
        if trigger:
            deployment.wait_for(
                lambda t=trigger: _running(deployment, t), f"a {trigger} task running", poll_s=0.5
            )
        restart = Restart(node, how, trigger or "the previous node back", datetime.now(UTC))
        if how == "kill -9":
            cluster.kill(node)
        else:
            cluster.node(node).stop()
        time.sleep(DOWN_S)
        cluster.restart(node, timeout_s=120)  # back in every ISR, preferred leaders back
        restart.up_at = datetime.now(UTC)
        done.append(restart)
        print(
            f"node {node} ({how}, at {restart.trigger}) down {restart.down_at:%H:%M:%S}, "
            f"whole again {restart.up_at:%H:%M:%S} "
            f"({(restart.up_at - restart.down_at).total_seconds():.1f} s)"
        )
    return done


def test_rolling_restart_of_every_broker_during_a_backfill_is_exactly_once(
    kafka_cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    started = time.monotonic()
    with (
        postgres_url() as server,
        airflow_deployment(
            tmp_path_factory.mktemp("airflow-home"),
            bootstrap=kafka_cluster.bootstrap_servers,
            postgres=server,
            rows=ROWS,
            partitions=PARTITIONS,
        ) as deployment,
    ):
        up = time.monotonic()
        first = deployment.today - timedelta(days=4)
        last = deployment.today - timedelta(days=2)
        deployment.backfill(first, last, max_active_runs=2)

        coordinator = kafka_cluster.transaction_coordinator(
            naming.build(naming.default_prefix(EXPORT_ID), 0)
        )
        others = [n for n in kafka_cluster.node_ids if n != coordinator]
        restarts = _roll(
            kafka_cluster,
            deployment,
            [
                (coordinator, "kill -9", "prepare"),
                (others[0], "SIGTERM", "commit"),
                (others[1], "kill -9", ""),
            ],
        )
        rolled = time.monotonic()

        done: Callable[[], bool] = lambda: (  # noqa: E731
            len(deployment.runs()) == 4 and all(r["state"] in FINAL for r in deployment.runs())
        )
        deployment.wait_for(done, "the backfill's three runs and the scheduled one")
        runs = deployment.runs()
        finished = time.monotonic()

        backfill = [r for r in runs if r["run_type"] == "backfill"]
        assert [r["start"] for r in backfill] == [
            first,
            first + timedelta(days=1),
            last,
        ], backfill
        for run in runs:
            assert run["state"] == "success", (run, deployment.diagnostics())
            states = deployment.task_states(run["run_id"])
            assert states["commit"] == "success" and states["abort"] == "skipped", states

        # The restarts did hit the work: a prepare and a commit ran while a node was out.
        tis = deployment.task_instances()
        history = deployment.rows(
            "SELECT task_id, start_date, end_date FROM task_instance_history WHERE dag_id = %s",
            "orders_export",
        )
        attempts = [{"task": t.split(".")[-1], "start": s, "end": e} for t, s, e in history] + tis
        hit = {ti["task"] for ti in attempts for r in restarts if r.overlapped(ti)}
        retried = [
            (ti["run_id"], ti["task"], ti["try_number"]) for ti in tis if ti["try_number"] > 1
        ]
        print(f"tasks running during the restarts: {sorted(hit)}; retried: {retried}")
        assert {"prepare", "commit"} <= hit, (restarts, attempts)

        # Every witness, on the whole cluster again.
        committed_batches(deployment, runs)
        assert_topic_exactly_once(deployment, runs)
        assert_java_witness(kafka_cluster.bootstrap_servers, deployment.topic, committed=ROWS * 4)
        assert open_on_broker(deployment) == []
        assert still_leased(deployment) == []
    print(
        f"\nTIMING rolling restart test: Airflow up {up - started:.1f} s, rolling restart "
        f"{rolled - up:.1f} s, runs finished {finished - up:.1f} s after the backfill began, "
        f"{time.monotonic() - started:.1f} s in all"
    )
