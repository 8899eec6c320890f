"""The example DAG under a real scheduler and worker: Airflow's own processes, not dag.test().

One Airflow deployment for the module, started and stopped here: api-server (the
execution API the workers talk to), scheduler with the LocalExecutor, dag-processor and
triggerer, each a subprocess in its own process group, with an AIRFLOW_HOME of its own and
the metadata DB in a database of its own on a throwaway PostgreSQL server (the LocalExecutor
runs two DAG runs at once, which SQLite cannot serve). The coordinator ledger lives in a
second database there. The dags folder holds ``dags/orders_export.py`` (parametrised by
env: the session's broker through ``AIRFLOW_CONN_KAFKA_DEFAULT``, a topic of its own, a
small day) and a canary DAG whose task opens the metadata DB through the ORM, which proves
that the task-log check below would see that error if any of our tasks caused it.

The test process never imports Airflow: it drives Airflow by its CLI (unpause, backfill
create, trigger) and watches the runs by reading the metadata DB with plain SQL.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import URL, make_url

from airflow_provider_kafka2pc.broker import DEFAULT_KAFKA_VERSION
from airflow_provider_kafka2pc.broker.node import free_port
from airflow_provider_kafka2pc.ledger import Batch, BatchState, Ledger
from airflow_provider_kafka2pc.transaction.protocol import KafkaProtocol
from airflow_provider_kafka2pc.transaction.visible import read_committed

from ..conftest import REAL_KAFKA_ENV, assert_exactly_once
from ..postgres_support import postgres_url

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DAG_FILE = REPO / "dags" / "orders_export.py"
DAG_ID = "orders_export"
EXPORT_ID = f"{DAG_ID}.export_orders"
CANARY_ID = "orm_canary"
ROWS = 200
PARTITIONS = 2
TOPIC_PARTITIONS = 3
ORM_ERROR = "Direct database access via the ORM is not allowed"
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
FINAL = ("success", "failed")
RUN_TIMEOUT_S = 420

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


@dataclass
class Deployment:
    """One Airflow deployment in subprocesses, watched through its metadata DB."""

    home: Path
    env: dict[str, str]
    meta_dsn: str
    ledger_url: str
    topic: str
    bootstrap: str
    today: datetime
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> Deployment:
        self.airflow("db", "migrate", timeout=300)
        port = self.env["AIRFLOW__API__PORT"]
        for name in COMPONENTS:
            args = (
                ["api-server", "--port", port, "--workers", "1"] if name == "api-server" else [name]
            )
            with (self.home / f"{name}.log").open("wb") as log:
                self.processes[name] = subprocess.Popen(
                    [AIRFLOW, *args],
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # its own process group: stopped as a whole
                )
        self.wait_for(
            lambda: (
                {DAG_ID, CANARY_ID}
                <= {row[0] for row in self.rows("SELECT dag_id FROM serialized_dag")}
            ),
            "both DAGs parsed by the dag-processor",
            timeout_s=180,
        )
        return self

    def stop(self) -> None:
        """SIGTERM each component's whole process group (workers, spark-submit), then KILL."""
        for process in self.processes.values():
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            _signal_group(process, signal.SIGKILL)  # stragglers left in the group
            process.wait(timeout=10)

    # -- driving and watching -------------------------------------------------------------

    def airflow(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, (args, done.stdout[-3000:], done.stderr[-3000:])
        return done

    def rows(self, sql: str, *params: Any) -> list[tuple]:
        with psycopg.connect(self.meta_dsn, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    def check_alive(self) -> None:
        for name, process in self.processes.items():
            assert process.poll() is None, f"airflow {name} exited: {self.tail(name)}"

    def wait_for(self, condition: Any, what: str, timeout_s: float = RUN_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            self.check_alive()
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; {self.diagnostics()}")
            time.sleep(2)

    def runs(self, run_type: str | None = None, dag_id: str = DAG_ID) -> list[dict[str, Any]]:
        sql = (
            "SELECT run_id, run_type, state, data_interval_start, data_interval_end, "
            "start_date, end_date FROM dag_run WHERE dag_id = %s"
        )
        params: list[Any] = [dag_id]
        if run_type:
            sql += " AND run_type = %s"
            params.append(run_type)
        keys = ("run_id", "run_type", "state", "start", "end", "started", "ended")
        rows = self.rows(sql + " ORDER BY data_interval_start", *params)
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def task_states(self, run_id: str) -> dict[str, str]:
        rows = self.rows(
            "SELECT task_id, state FROM task_instance WHERE dag_id = %s AND run_id = %s",
            DAG_ID,
            run_id,
        )
        return {task_id.split(".")[-1]: state for task_id, state in rows}

    def task_logs(self, dag_id: str) -> list[Path]:
        return sorted((self.home / "logs" / f"dag_id={dag_id}").glob("run_id=*/task_id=*/*.log"))

    def tail(self, name: str, chars: int = 3000) -> str:
        path = self.home / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"

    def diagnostics(self) -> str:
        runs = self.rows("SELECT dag_id, run_id, state FROM dag_run ORDER BY id")
        tis = self.rows("SELECT run_id, task_id, state, try_number FROM task_instance")
        return f"runs {runs}; task instances {tis}; scheduler log: {self.tail('scheduler')}"


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)  # the group this test created (start_new_session)


def _create_database(admin_dsn: str, name: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')


def _drop_database(admin_dsn: str, name: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _libpq(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, broker_pool: Any) -> Iterator[Deployment]:
    bootstrap = (
        os.environ.get(REAL_KAFKA_ENV) or broker_pool.get(DEFAULT_KAFKA_VERSION).bootstrap_servers
    )
    home = tmp_path_factory.mktemp("airflow-home")
    dags = home / "dags"
    dags.mkdir()
    shutil.copy(DAG_FILE, dags / DAG_FILE.name)
    (dags / f"{CANARY_ID}.py").write_text(CANARY_DAG)
    (dags / f"{DOWNSTREAM_ID}.py").write_text(DOWNSTREAM_DAG)
    suffix = uuid.uuid4().hex[:8]
    topic = f"orders-{suffix}"
    with KafkaProtocol({"bootstrap.servers": bootstrap}) as protocol:
        protocol.create_topic(topic, TOPIC_PARTITIONS)
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    with postgres_url() as server:
        base = make_url(server).set(drivername="postgresql+psycopg")
        admin = _libpq(base)
        meta_db, ledger_db = f"airflow_{suffix}", f"ledger_{suffix}"
        _create_database(admin, meta_db)
        _create_database(admin, ledger_db)
        meta, ledger = base.set(database=meta_db), base.set(database=ledger_db)
        port = str(free_port())
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        env.update(
            {
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": "4",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": meta.render_as_string(hide_password=False),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": meta.set(
                    drivername="postgresql+psycopg_async"
                ).render_as_string(hide_password=False),
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": port,
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
                "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
                "AIRFLOW__API__SECRET_KEY": secrets.token_hex(32),
                "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
                    {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}
                ),
                "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(
                    {"conn_type": "spark", "host": "local[2]"}
                ),
                "AIRFLOW_CONN_KAFKA2PC_LEDGER": json.dumps(
                    {
                        "conn_type": "postgres",
                        "host": ledger.host,
                        "port": ledger.port,
                        "login": ledger.username,
                        "password": ledger.password,
                        "schema": ledger_db,
                    }
                ),
                # The example DAG's knobs: this topic, a small day, the ledger above, and a
                # start date one day back, so catchup schedules exactly one interval.
                "KAFKA2PC_ORDERS_TOPIC": topic,
                "DOWNSTREAM_BOOTSTRAP_SERVER": bootstrap.split(",")[0],
                "KAFKA2PC_ORDERS_ROWS": str(ROWS),
                "KAFKA2PC_ORDERS_PARTITIONS": str(PARTITIONS),
                "KAFKA2PC_ORDERS_LEDGER_CONN_ID": "kafka2pc_ledger",
                "KAFKA2PC_ORDERS_START_DATE": (today - timedelta(days=1)).date().isoformat(),
            }
        )
        deployment = Deployment(
            home=home,
            env=env,
            meta_dsn=_libpq(meta),
            ledger_url=ledger.render_as_string(hide_password=False),
            topic=topic,
            bootstrap=bootstrap,
            today=today,
        )
        started = time.monotonic()
        try:
            deployment.start()
            print(f"Airflow up and both DAGs parsed in {time.monotonic() - started:.1f} s")
            yield deployment
        finally:
            deployment.stop()
            _drop_database(admin, meta_db)
            _drop_database(admin, ledger_db)


# -- checks -------------------------------------------------------------------------------


def run_key(run: dict[str, Any]) -> str:
    """The export's default run key: the data interval, as Airflow's ``ts`` filter writes it."""
    return f"{run['start'].astimezone(UTC).isoformat()}/{run['end'].astimezone(UTC).isoformat()}"


def committed_batches(deployment: Deployment, runs: list[dict[str, Any]]) -> list[Batch]:
    with Ledger(deployment.ledger_url) as ledger:
        batches = [ledger.get(EXPORT_ID, run_key(run)) for run in runs]
        participants = {b.run_key: ledger.participants(EXPORT_ID, b.run_key) for b in batches if b}
    for run, batch in zip(runs, batches, strict=True):
        assert batch is not None, f"no ledger batch for {run['run_id']}"
        assert batch.state is BatchState.COMMITTED, batch
        assert batch.source_rows == ROWS, batch
        assert len(participants[batch.run_key]) == PARTITIONS, participants[batch.run_key]
    return batches


def assert_topic_exactly_once(deployment: Deployment, intervals: list[dict[str, Any]]) -> None:
    """Every successful interval's orders once in the topic, by the audit and by the broker."""
    with Ledger(deployment.ledger_url) as ledger:
        committables = [
            p.committable for run in intervals for p in ledger.participants(EXPORT_ID, run_key(run))
        ]
    settings = {"bootstrap.servers": deployment.bootstrap}
    with KafkaProtocol(settings, timeout_ms=10_000) as protocol:
        report, _ = assert_exactly_once(
            protocol,
            deployment.bootstrap,
            deployment.topic,
            *committables,
            committed=ROWS * len(intervals),
        )
    assert all(view["state"] == "COMMITTED" and view["complete"] for view in report.committables)
    # Per interval, from the broker's side: each day's keys ("<yyyymmdd>-<n>") exactly ROWS.
    seen = read_committed(settings, deployment.topic)
    per_day: dict[str, int] = {}
    for key, copies in seen.keys.items():
        assert copies == 1, key
        day = key.decode().split("-")[0]
        per_day[day] = per_day.get(day, 0) + 1
    assert per_day == {f"{run['start']:%Y%m%d}": ROWS for run in intervals}, per_day


def assert_no_orm_access(deployment: Deployment, runs: list[dict[str, Any]]) -> None:
    logs = deployment.task_logs(DAG_ID)
    for run in runs:
        mine = [p for p in logs if f"run_id={run['run_id']}" in str(p)]
        tasks = {re.search(r"task_id=([^/]+)", str(p)).group(1).split(".")[-1] for p in mine}
        assert {"recover", "prepare", "decide", "commit"} <= tasks, (run["run_id"], mine)
    offenders = [p for p in logs if ORM_ERROR in p.read_text(errors="replace")]
    assert not offenders, [f"{p}: {p.read_text()[-2000:]}" for p in offenders]


def max_overlap(runs: list[dict[str, Any]]) -> int:
    """The most runs that were running at the same moment."""
    events = sorted(
        [(r["started"], 1) for r in runs] + [(r["ended"], -1) for r in runs],
        key=lambda e: (e[0], e[1]),
    )
    running = most = 0
    for _, delta in events:
        running += delta
        most = max(most, running)
    return most


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
    deployment.airflow("dags", "unpause", DAG_ID)  # backfill runs of a paused DAG stay queued
    deployment.airflow("dags", "unpause", CANARY_ID)
    deployment.airflow("dags", "trigger", CANARY_ID)
    first, last = deployment.today - timedelta(days=5), deployment.today - timedelta(days=3)
    deployment.airflow(
        "backfill",
        "create",
        "--dag-id",
        DAG_ID,
        "--from-date",
        first.date().isoformat(),
        "--to-date",
        last.date().isoformat(),
        "--max-active-runs",
        "2",
    )

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
