"""A real Airflow deployment in subprocesses, driven by its CLI and watched through its DB.

Shared by the real-scheduler test (``tests/airflow/test_scheduler.py``, the oldest
Airflow's), the rolling restart on the three-node cluster
(``tests/cluster/test_rolling_restart.py``, the newest's) and the chaos soak
(``tests/soak``): api-server (the execution API the workers talk to), scheduler with
the LocalExecutor, dag-processor and triggerer, each in its own process group, with an
``AIRFLOW_HOME`` of its own and the metadata DB in a database of its own on a PostgreSQL
server (the LocalExecutor runs several DAG runs at once, which SQLite cannot serve). The
coordinator ledger lives in another database, on the same server or on one of its own.

The calling process never imports Airflow: it drives Airflow by its CLI (unpause,
backfill create, trigger, tasks clear) and reads the metadata DB with plain SQL.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import URL, make_url

from airflow_provider_kafka2pc import naming
from airflow_provider_kafka2pc.ledger import Batch, BatchState, Ledger
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from devtools.broker.node import free_port
from tests.airflow.env import without_airflow
from tests.conftest import assert_exactly_once

REPO = Path(__file__).resolve().parents[2]
#: The example DAG every deployment here runs (parametrised by env, see its docstring).
DAG_FILE = REPO / "dags" / "orders_export.py"
DAG_ID = "orders_export"
EXPORT_ID = f"{DAG_ID}.export_orders"
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
FINAL = ("success", "failed")
RUN_TIMEOUT_S = 420
#: What marks a task try's log as failed (Airflow 3 writes JSON lines).
FAILURE_WORDS = ('"level":"error"', "Task failed with exception")


#: A consumer's DAG, scheduled on the topic's asset built the official Kafka provider's way
#: (``create_asset(server=..., topic=...)``), knowing nothing of this provider.
DOWNSTREAM_ID = "orders_downstream"
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

#: A task that opens the metadata DB through the ORM, as no provider task may: it proves
#: that :func:`assert_no_orm_access` would see that error if any task caused it.
CANARY_ID = "orm_canary"
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
ORM_ERROR = "Direct database access via the ORM is not allowed"


def companion_dags(bootstrap: str) -> tuple[dict[str, str], dict[str, str]]:
    """The downstream DAG and the ORM canary beside the export: ``extra_dags`` and
    ``extra_env`` for :func:`airflow_deployment`."""
    return (
        {f"{CANARY_ID}.py": CANARY_DAG, f"{DOWNSTREAM_ID}.py": DOWNSTREAM_DAG},
        {"DOWNSTREAM_BOOTSTRAP_SERVER": bootstrap.split(",")[0]},
    )


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
    #: DAG ids the dag-processor must have parsed before :meth:`start` returns.
    dag_ids: frozenset[str] = frozenset({DAG_ID})
    rows_per_interval: int = 200
    partitions: int = 2
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
                self.dag_ids <= {row[0] for row in self.rows("SELECT dag_id FROM serialized_dag")}
            ),
            f"DAGs {sorted(self.dag_ids)} parsed by the dag-processor",
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

    def airflow(
        self, *args: str, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check:
            assert done.returncode == 0, (args, done.stdout[-3000:], done.stderr[-3000:])
        return done

    def backfill(self, first: datetime, last: datetime, max_active_runs: int) -> None:
        """``airflow backfill create`` of the days ``first`` to ``last`` (the DAG unpaused:
        backfill runs of a paused DAG stay queued)."""
        self.airflow("dags", "unpause", DAG_ID)
        self.airflow(
            "backfill",
            "create",
            "--dag-id",
            DAG_ID,
            "--from-date",
            first.date().isoformat(),
            "--to-date",
            last.date().isoformat(),
            "--max-active-runs",
            str(max_active_runs),
        )

    def rows(self, sql: str, *params: Any) -> list[tuple]:
        with psycopg.connect(self.meta_dsn, autocommit=True, connect_timeout=10) as conn:
            return conn.execute(sql, params).fetchall()

    def check_alive(self) -> None:
        for name, process in self.processes.items():
            assert process.poll() is None, f"airflow {name} exited: {self.tail(name)}"

    def wait_for(
        self,
        condition: Callable[[], Any],
        what: str,
        timeout_s: float = RUN_TIMEOUT_S,
        poll_s: float = 2.0,
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            self.check_alive()
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; {self.diagnostics()}")
            time.sleep(poll_s)

    def runs(self, run_type: str | None = None, dag_id: str = DAG_ID) -> list[dict[str, Any]]:
        sql = (
            "SELECT run_id, run_type, state, data_interval_start, data_interval_end, "
            "start_date, end_date, logical_date FROM dag_run WHERE dag_id = %s"
        )
        params: list[Any] = [dag_id]
        if run_type:
            sql += " AND run_type = %s"
            params.append(run_type)
        keys = ("run_id", "run_type", "state", "start", "end", "started", "ended", "logical")
        rows = self.rows(sql + " ORDER BY data_interval_start", *params)
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def task_states(self, run_id: str) -> dict[str, str]:
        rows = self.rows(
            "SELECT task_id, state FROM task_instance WHERE dag_id = %s AND run_id = %s",
            DAG_ID,
            run_id,
        )
        return {task_id.split(".")[-1]: state for task_id, state in rows}

    def task_instances(self) -> list[dict[str, Any]]:
        """Every task instance of the export DAG now (its current try)."""
        keys = ("id", "run_id", "task", "state", "try_number", "start", "end", "pid")
        rows = self.rows(
            "SELECT id, run_id, task_id, state, try_number, start_date, end_date, pid "
            "FROM task_instance WHERE dag_id = %s ORDER BY run_id, task_id",
            DAG_ID,
        )
        return [
            {**dict(zip(keys, row, strict=True)), "task": row[2].split(".")[-1]} for row in rows
        ]

    def asset_race_failed(self, run_id: str) -> bool:
        """Whether ``run_id`` failed only by Airflow's race on a new asset: its commit task
        committed, then the API server, creating the topic's asset for the alias event while
        another run's commit created it too, hit the asset's unique index and set the task to
        failed (docs/operators.md, "Known issue"). Any other failure is not this."""
        tis = [ti for ti in self.task_instances() if ti["run_id"] == run_id]
        failed = [ti for ti in tis if ti["state"] == "failed"]
        if [ti["task"] for ti in failed] != ["commit"]:
            return False
        commit_id = str(failed[0]["id"])
        api = self.home / "api-server.log"
        lines = api.read_text(errors="replace").splitlines() if api.exists() else []
        refused = any(
            "Error updating Task Instance state" in line and f"ti_id={commit_id}" in line
            for line in lines
        )
        raced = any("idx_asset_name_uri_unique" in line for line in lines)
        return refused and raced

    def task_logs(self, dag_id: str = DAG_ID) -> list[Path]:
        return sorted((self.home / "logs" / f"dag_id={dag_id}").glob("run_id=*/task_id=*/*.log"))

    def tail(self, name: str, chars: int = 3000) -> str:
        path = self.home / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"

    def diagnostics(self) -> str:
        """Runs, task instances, the scheduler's log tail and the end of every failed try's
        log: what a failing test needs to say why (printed whole, as pytest cuts reprs)."""
        runs = self.rows("SELECT dag_id, run_id, state FROM dag_run ORDER BY id")
        tis = self.rows("SELECT run_id, task_id, state, try_number FROM task_instance")
        failed = [
            path
            for path in self.task_logs()
            if any(word in path.read_text(errors="replace")[-4000:] for word in FAILURE_WORDS)
        ]
        logs = "".join(
            f"\n--- {p.relative_to(self.home)} ---\n{p.read_text(errors='replace')[-3000:]}"
            for p in failed
        )
        text = (
            f"runs {runs}; task instances {tis}; scheduler log: {self.tail('scheduler')}"
            f"\nfailed tries' logs:{logs or ' none'}"
        )
        print(text)
        return text


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)  # the group this module created (start_new_session)


def _create_database(admin_dsn: str, name: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')


def _drop_database(admin_dsn: str, name: str) -> None:
    with contextlib.suppress(psycopg.Error), psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def libpq(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


@contextlib.contextmanager
def airflow_deployment(
    home: Path,
    *,
    bootstrap: str,
    postgres: str,
    ledger_postgres: str | None = None,
    topic_partitions: int = 3,
    rows: int = 200,
    partitions: int = 2,
    extra_dags: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    dag_file: Path = DAG_FILE,
    parallelism: int = 4,
) -> Iterator[Deployment]:
    """An Airflow deployment running ``dag_file`` (the example DAG by default) against
    ``bootstrap``, its metadata DB on ``postgres`` and the ledger on ``ledger_postgres``
    (``postgres`` when None), a fresh topic of ``topic_partitions``; started, yielded,
    stopped and its databases dropped.

    :param extra_dags: more DAG files for the dags folder, ``{file name: source}``; their
        DAG ids (the file names without ``.py``) must be parsed before it is yielded.
    :param extra_env: more environment for every component (overrides).
    """
    dags = home / "dags"
    dags.mkdir(parents=True, exist_ok=True)
    shutil.copy(dag_file, dags / DAG_FILE.name)
    for name, source in (extra_dags or {}).items():
        (dags / name).write_text(source)
    suffix = uuid.uuid4().hex[:8]
    topic = f"orders-{suffix}"
    with KafkaProtocol({"bootstrap.servers": bootstrap}, timeout_ms=10_000) as protocol:
        protocol.create_topic(topic, topic_partitions)
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    meta_base = make_url(postgres).set(drivername="postgresql+psycopg")
    ledger_base = make_url(ledger_postgres or postgres).set(drivername="postgresql+psycopg")
    meta_db, ledger_db = f"airflow_{suffix}", f"ledger_{suffix}"
    _create_database(libpq(meta_base), meta_db)
    _create_database(libpq(ledger_base), ledger_db)
    meta, ledger = meta_base.set(database=meta_db), ledger_base.set(database=ledger_db)
    port = str(free_port())
    env = without_airflow()
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(parallelism),
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
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
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
            "KAFKA2PC_ORDERS_ROWS": str(rows),
            "KAFKA2PC_ORDERS_PARTITIONS": str(partitions),
            "KAFKA2PC_ORDERS_LEDGER_CONN_ID": "kafka2pc_ledger",
            "KAFKA2PC_ORDERS_START_DATE": (today - timedelta(days=1)).date().isoformat(),
        }
    )
    env.update(extra_env or {})
    deployment = Deployment(
        home=home,
        env=env,
        meta_dsn=libpq(meta),
        ledger_url=ledger.render_as_string(hide_password=False),
        topic=topic,
        bootstrap=bootstrap,
        today=today,
        dag_ids=frozenset({DAG_ID, *(n.removesuffix(".py") for n in (extra_dags or {}))}),
        rows_per_interval=rows,
        partitions=partitions,
    )
    started = time.monotonic()
    try:
        deployment.start()
        print(f"Airflow up and its DAGs parsed in {time.monotonic() - started:.1f} s")
        yield deployment
    finally:
        deployment.stop()
        _drop_database(libpq(meta_base), meta_db)
        _drop_database(libpq(ledger_base), ledger_db)


# -- checks -------------------------------------------------------------------------------


def run_key(run: Mapping[str, Any]) -> str:
    """The export's default run key: the data interval, as Airflow's ``ts`` filter writes it."""
    return f"{run['start'].astimezone(UTC).isoformat()}/{run['end'].astimezone(UTC).isoformat()}"


def committed_batches(deployment: Deployment, runs: list[dict[str, Any]]) -> list[Batch]:
    """Each run's batch, COMMITTED with the day's rows in every participant."""
    with Ledger(deployment.ledger_url) as ledger:
        batches = [ledger.get(EXPORT_ID, run_key(run)) for run in runs]
        participants = {b.run_key: ledger.participants(EXPORT_ID, b.run_key) for b in batches if b}
    for run, batch in zip(runs, batches, strict=True):
        assert batch is not None, f"no ledger batch for {run['run_id']}"
        assert batch.state is BatchState.COMMITTED, batch
        assert batch.source_rows == deployment.rows_per_interval, batch
        assert len(participants[batch.run_key]) == deployment.partitions, participants
    return batches


def assert_topic_exactly_once(deployment: Deployment, intervals: list[dict[str, Any]]) -> None:
    """Every listed interval's orders once in the topic, by the audit and by the broker,
    and nothing else visible."""
    rows = deployment.rows_per_interval
    with Ledger(deployment.ledger_url) as ledger:
        committables = [
            p.committable for run in intervals for p in ledger.participants(EXPORT_ID, run_key(run))
        ]
    settings = {"bootstrap.servers": deployment.bootstrap}
    with KafkaProtocol(settings, timeout_ms=10_000) as protocol:
        report, seen = assert_exactly_once(
            protocol,
            deployment.bootstrap,
            deployment.topic,
            *committables,
            committed=rows * len(intervals),
        )
    assert all(view["state"] == "COMMITTED" and view["complete"] for view in report.committables)
    # Per interval, from the broker's side: each day's keys ("<yyyymmdd>-<n>") exactly ROWS.
    per_day: dict[str, int] = {}
    for key, copies in seen.keys.items():
        assert copies == 1, key
        day = key.decode().split("-")[0]
        per_day[day] = per_day.get(day, 0) + 1
    assert per_day == {f"{run['start']:%Y%m%d}": rows for run in intervals}, per_day


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


#: Coordinator states in which a transaction is still open (not finished).
OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})


def open_on_broker(deployment: Deployment) -> list[str]:
    """The export's transactions the coordinators still hold open (ListTransactions)."""
    prefix = naming.starts(naming.default_prefix(EXPORT_ID))
    settings = {"bootstrap.servers": deployment.bootstrap}
    with KafkaProtocol(settings, timeout_ms=10_000) as protocol:
        listed = protocol.list_transactions(prefix)
    return [
        f"{t.transactional_id}: {t.state.value}" for t in listed if t.state.value in OPEN_STATES
    ]


def still_leased(deployment: Deployment) -> list[str]:
    """Transactional ids the ledger still has leased to a batch."""
    with Ledger(deployment.ledger_url) as ledger:
        leases = ledger.leases(naming.default_prefix(EXPORT_ID))
    return [f"{lease.transactional_id} -> {lease.run_key}" for lease in leases if lease.leased]


def start_companions(deployment: Deployment) -> None:
    """Unpause the downstream DAG (before any commit emits the asset) and run the canary."""
    deployment.airflow("dags", "unpause", DOWNSTREAM_ID)
    deployment.airflow("dags", "unpause", CANARY_ID)
    deployment.airflow("dags", "trigger", CANARY_ID)


def assert_no_orm_access(deployment: Deployment, runs: list[dict[str, Any]]) -> None:
    """Every run's export tasks logged, none of them refused an ORM access; and the check
    can fail: the canary's task log holds the worker's refusal."""
    logs = deployment.task_logs(DAG_ID)
    for run in runs:
        mine = [p for p in logs if f"run_id={run['run_id']}" in str(p)]
        tasks = {p.parent.name.removeprefix("task_id=").split(".")[-1] for p in mine}
        assert {"recover", "prepare", "decide", "commit"} <= tasks, (run["run_id"], mine)
    offenders = [p for p in logs if ORM_ERROR in p.read_text(errors="replace")]
    assert not offenders, [f"{p}: {p.read_text()[-2000:]}" for p in offenders]
    deployment.wait_for(
        lambda: deployment.rows(
            "SELECT 1 FROM dag_run WHERE dag_id = %s AND state IN ('success', 'failed')",
            CANARY_ID,
        ),
        "the ORM canary",
    )
    canary = deployment.task_logs(CANARY_ID)
    assert canary and any(ORM_ERROR in p.read_text(errors="replace") for p in canary), canary


def assert_downstream_ran(deployment: Deployment) -> None:
    """The commit's asset event is the official provider's asset: the consumer's DAG ran."""
    downstream = lambda: deployment.runs("asset_triggered", dag_id=DOWNSTREAM_ID)  # noqa: E731
    deployment.wait_for(
        lambda: any(r["state"] in FINAL for r in downstream()), "the downstream DAG's run"
    )
    assert [r["state"] for r in downstream()][:1] == ["success"], deployment.diagnostics()


def assert_concurrent_batches_disjoint(batches: list[Batch]) -> None:
    """Batches open at the same time held disjoint transactional ids, and two were."""
    overlapping = 0
    for i, a in enumerate(batches):
        for b in batches[i + 1 :]:
            if a.created_at < b.finished_at and b.created_at < a.finished_at:
                overlapping += 1
                assert not set(a.transactional_ids) & set(b.transactional_ids), (a, b)
    assert overlapping >= 1, f"no two batches were open at once: {batches}"
