"""A rolling restart of all three brokers while a real scheduler backfills three intervals.

What an operator does to upgrade or reconfigure Kafka: one node at a time, down, up, wait
until every replica is back in sync, next. Here it happens while Airflow (scheduler with
the LocalExecutor, PostgreSQL metadata DB and ledger; ``tests/support/scheduler.py``)
backfills three days of the example DAG, two runs at a time, plus the one interval the
scheduler catches up on its own. The restarts are timed on the runs' own progress:

1. the transaction coordinator of the export's first pooled id is killed -9 as soon as a
   prepare runs (the coordinator and a partition leader at once), and stays down until a
   prepare's Spark writers have delivered a partition (a ``kafka2pc progress`` line in its
   task log);
2. the next node is stopped cleanly (SIGTERM: controlled shutdown, leaders moved away)
   right after, and stays down until a commit task has ended a transaction on the broker
   (its ``commit <id> (pid, epoch): COMMITTED`` line);
3. the last node is killed -9 right after the second is back.

Each node is restarted on its data and waited for until it is back in every partition's
ISR (and its preferred leaderships returned) before the next one goes down, so there are
always two in-sync replicas: ``min.insync.replicas=2`` is met throughout and nothing may be
lost. The test checks from the task logs that a prepare's and a commit's broker calls were
answered while a node was down (between its kill and its process starting again, not its
rejoining), then ends with every witness: the log audit (markers applied by us), a
read_committed consumer, Kafka's Java console consumer, every batch COMMITTED in the
ledger, no transaction of the export open on the broker and no id still leased.

It is also the newest Airflow's real-scheduler test (``make test`` leaves
``tests/airflow/test_scheduler.py``, the same scheduled run on one broker, to the oldest
Airflow's tier): the backfill ran two at a time and never three, runs open at once held
disjoint transactional ids, no task opened the metadata DB through the ORM (an ORM canary
DAG shows that the check can fail), and the commits' asset ran a downstream DAG written
against the official Kafka provider's ``create_asset``.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from airflow_provider_kafka2pc import naming
from devtools.broker import KafkaCluster
from tests.support.java_witness import assert_java_witness
from tests.support.postgres import postgres_url
from tests.support.scheduler import (
    EXPORT_ID,
    FINAL,
    Deployment,
    airflow_deployment,
    assert_concurrent_batches_disjoint,
    assert_downstream_ran,
    assert_no_orm_access,
    assert_topic_exactly_once,
    committed_batches,
    companion_dags,
    max_overlap,
    open_on_broker,
    start_companions,
    still_leased,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ROWS = 200
PARTITIONS = 2
#: How long a node stays down before it is started again.
DOWN_S = 3.0


#: How long a node held down waits for its evidence before it is started anyway (the test
#: then fails naming what did not happen while it was down).
HOLD_S = 300.0
#: Task log lines that show a broker call answered: a prepare's Spark writer delivered a
#: partition; a commit's EndTxn ended a transaction.
EVIDENCE = {
    "prepare": re.compile(r"kafka2pc progress .*partition \d+.*rows written"),
    "commit": re.compile(r"commit \S+ \(pid \d+, epoch \d+\): (COMMITTED|ALREADY_COMMITTED)"),
}
_STAMP = re.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)")


@dataclass
class Restart:
    """One node's turn: how it went down, when, when its process ran again and when it was
    whole again, and what each task's log showed while it was down."""

    node: int
    how: str  # "kill -9" or "SIGTERM"
    trigger: str
    down_at: datetime
    started_at: datetime | None = None
    up_at: datetime | None = None
    #: task -> log lines (``<file>: <line>``) of broker calls answered while it was down
    seen: dict[str, list[str]] = field(default_factory=dict)


def _stamp(line: str) -> datetime | None:
    """A task log line's time: the ``timestamp`` of Airflow 3's JSON lines, else the first
    ISO time in it (naive ones are UTC)."""
    text = line
    with contextlib.suppress(ValueError, AttributeError):
        text = str(json.loads(line).get("timestamp", line))
    match = _STAMP.search(text)
    if match is None:
        return None
    raw = match.group(1).replace(",", ".").replace(" ", "T").replace("Z", "+00:00")
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def calls_while_down(
    deployment: Deployment, task: str, since: datetime, until: datetime | None = None
) -> list[str]:
    """Lines of ``task``'s logs (every attempt) showing a broker call answered in the window."""
    found = []
    for path in deployment.task_logs():
        if not path.parent.name.endswith(f".{task}"):
            continue
        for line in path.read_text(errors="replace").splitlines():
            if not EVIDENCE[task].search(line):
                continue
            when = _stamp(line)
            if when is not None and when >= since and (until is None or when <= until):
                found.append(f"{path.parent.parent.name}/{path.name}: {line[:300]}")
    return found


def _running(deployment: Deployment, task: str) -> bool:
    return any(
        ti["task"] == task and ti["state"] == "running" for ti in deployment.task_instances()
    )


def _roll(
    cluster: KafkaCluster, deployment: Deployment, order: list[tuple[int, str, str, str]]
) -> list[Restart]:
    """Restart each node in ``order`` (node, how, trigger task or "" for at once, the task
    whose broker calls must be answered while it is down or "")."""
    done: list[Restart] = []
    for node, how, trigger, hold_for in order:
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
        if hold_for:
            deadline = time.monotonic() + HOLD_S
            while not calls_while_down(deployment, hold_for, restart.down_at):
                deployment.check_alive()
                if time.monotonic() > deadline:
                    break
                time.sleep(1.0)
        restart.started_at = datetime.now(UTC)
        cluster.restart(node, timeout_s=120)  # back in every ISR, preferred leaders back
        restart.up_at = datetime.now(UTC)
        for task in EVIDENCE:
            restart.seen[task] = calls_while_down(
                deployment, task, restart.down_at, restart.started_at
            )
        done.append(restart)
        print(
            f"node {node} ({how}, at {restart.trigger}) down {restart.down_at:%H:%M:%S}, "
            f"started again {restart.started_at:%H:%M:%S}, whole again {restart.up_at:%H:%M:%S} "
            f"({(restart.up_at - restart.down_at).total_seconds():.1f} s); broker calls "
            f"answered while down: { {t: len(v) for t, v in restart.seen.items()} }"
        )
    return done


def test_rolling_restart_of_every_broker_during_a_backfill_is_exactly_once(
    kafka_cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    started = time.monotonic()
    extra_dags, extra_env = companion_dags(kafka_cluster.bootstrap_servers)
    with (
        postgres_url() as server,
        airflow_deployment(
            tmp_path_factory.mktemp("airflow-home"),
            bootstrap=kafka_cluster.bootstrap_servers,
            postgres=server,
            rows=ROWS,
            partitions=PARTITIONS,
            # The prepare's evidence is the Python writer's progress lines (the JVM writer
            # logs none yet): the restart must be seen to hit a prepare that is writing.
            extra_dags=extra_dags,
            extra_env={**extra_env, "KAFKA2PC_ORDERS_WRITER": "python"},
        ) as deployment,
    ):
        up = time.monotonic()
        start_companions(deployment)
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
                (coordinator, "kill -9", "prepare", "prepare"),
                (others[0], "SIGTERM", "", "commit"),
                (others[1], "kill -9", "", ""),
            ],
        )
        rolled = time.monotonic()

        def done() -> bool:
            # The scheduled runs are one, or two when midnight (UTC) passes during the test.
            runs = deployment.runs()
            kinds = [r["run_type"] for r in runs]
            return (
                kinds.count("backfill") == 3
                and kinds.count("scheduled") >= 1
                and all(r["state"] in FINAL for r in runs)
            )

        deployment.wait_for(done, "the backfill's three runs and the scheduled ones")
        runs = deployment.runs()
        finished = time.monotonic()

        backfill = [r for r in runs if r["run_type"] == "backfill"]
        assert [r["start"] for r in backfill] == [
            first,
            first + timedelta(days=1),
            last,
        ], backfill
        for run in runs:
            if run["state"] == "failed" and deployment.asset_race_failed(run["run_id"]):
                # Airflow failed the commit task after it committed (an upstream race on
                # the topic's new asset): the ledger and both witnesses below still hold
                # every run's batch committed exactly once.
                print(f"{run['run_id']}: its commit committed, then met Airflow's asset race")
                continue
            assert run["state"] == "success", (run, deployment.diagnostics())
            states = deployment.task_states(run["run_id"])
            assert states["commit"] == "success" and states["abort"] == "skipped", states
        assert max_overlap(backfill) == 2, backfill  # two at a time, never three

        # The restarts did hit the work: a prepare's writers and a commit's EndTxn were
        # answered while a node was down (its process gone, not merely rejoining).
        tis = deployment.task_instances()
        hit = {task for r in restarts for task, lines in r.seen.items() if lines}
        retried = [
            (ti["run_id"], ti["task"], ti["try_number"]) for ti in tis if ti["try_number"] > 1
        ]
        print(f"broker calls answered while a node was down: {sorted(hit)}; retried: {retried}")
        for r in restarts:
            for task, lines in r.seen.items():
                print(f"  node {r.node} down, {task}: {lines[:2]}")
        assert {"prepare", "commit"} <= hit, restarts

        # Every witness, on the whole cluster again.
        # Runs open at once held disjoint ids; no task opened the metadata DB (the canary
        # shows the check can fail); the commits' asset ran the downstream DAG.
        assert_concurrent_batches_disjoint(committed_batches(deployment, runs))
        assert_no_orm_access(deployment, runs)
        assert_downstream_ran(deployment)
        assert_topic_exactly_once(deployment, runs)
        assert_java_witness(
            kafka_cluster.bootstrap_servers, deployment.topic, committed=ROWS * len(runs)
        )
        assert open_on_broker(deployment) == []
        assert still_leased(deployment) == []
    print(
        f"\nTIMING rolling restart test: Airflow up {up - started:.1f} s, rolling restart "
        f"{rolled - up:.1f} s, runs finished {finished - up:.1f} s after the backfill began, "
        f"{time.monotonic() - started:.1f} s in all"
    )
