"""The soak itself: the world it runs in, the nemesis, the healing, the check, the history.

The world, all real and all its own: a three-node Apache Kafka cluster with a loopback TCP
proxy in front of each node (every client and every replica fetcher goes through it, so a
dropped proxy cuts the node off the network), a PostgreSQL server for Airflow's metadata DB
and another for the coordinator ledger (the one the nemesis crash-restarts; it keeps every
acknowledged commit, ``synchronous_commit=on``), and an Airflow deployment (scheduler with
the LocalExecutor, ``tests/support/scheduler.py``) running the example DAG with more
retries, sooner. Airflow backfills ``intervals`` days, ``concurrency`` runs at a time.

While any run is unfinished, the nemesis works through the seed's schedule
(:mod:`.schedule`), one fault at a time. Then everything is healed (proxies pass, paused
nodes resumed, dead nodes restarted, the cluster whole), the runs are left to their retries
and recovery, and a run that still failed is re-run the way an operator would (``airflow
tasks clear`` of the whole run), at most :data:`RERUN_ROUNDS` times. The checker
(:mod:`.checker`) then judges the final state; the history (faults, task attempts,
verdicts, outcomes, anomalies) is written as JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow_provider_kafka2pc import naming
from airflow_provider_kafka2pc.ledger import Ledger
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.transaction.audit import audit_topic
from devtools.broker import DEFAULT_KAFKA_VERSION, KafkaCluster
from devtools.broker.node import HOST, free_port
from devtools.visible import read_committed
from tests.cluster.support import create_transaction_state_log
from tests.conftest import TEST_BROKER_CONFIG
from tests.support.java_witness import java_read_committed
from tests.support.postgres import RestartablePostgres, find_bindir, postgres_url
from tests.support.proxy import Mode, TcpProxy
from tests.support.scheduler import (
    DAG_ID,
    EXPORT_ID,
    FINAL,
    Deployment,
    airflow_deployment,
    open_on_broker,
    still_leased,
)

from . import procs
from .checker import FinalState, find_anomalies, find_nemesis_anomalies, tally_strikes
from .schedule import TASK_TARGETS, Fault, fault_schedule

#: How often a run that failed after the heal is re-run (cleared whole) by the soak.
RERUN_ROUNDS = 3
#: How long a task kill waits for a process of its target kind to appear.
TARGET_WAIT_S = 30.0
GROUP = "export_orders"
#: The long soak's minimum hits during in-flight work, per fault kind. Every kind is struck
#: in the first six faults and the default soak strikes about 50 times over some 7 minutes
#: of runs; a task kill can find no process of its kind (abort, recover are rare), so it
#: needs more strikes per hit than the others.
LONG_MIN_HITS: dict[str, int] = {
    "kill_task": 3,
    "kill_broker": 1,
    "pause_broker": 1,
    "restart_postgres": 1,
    "drop_connections": 1,
    "clear_task": 1,
}


class DurablePostgres(RestartablePostgres):
    """The ledger's server: crash-restarted by the nemesis, so it must keep what it
    acknowledged (``synchronous_commit=on``, as PostgreSQL and production have it)."""

    synchronous_commit = "on"


@dataclass
class SoakConfig:
    seed: int
    intervals: int = 30
    concurrency: int = 3
    rows: int = 100
    partitions: int = 2
    #: The nemesis stops at the end of this window even if runs are unfinished.
    window_s: float = 3600.0
    #: How long the runs get after the heal (each rerun round gets it again).
    settle_s: float = 900.0
    retries: int = 6
    retry_delay_s: float = 5.0
    java_witness: bool = True
    workdir: Path = Path(".kafka2pc-soak")
    #: Fault kind -> hits during in-flight work the checker demands (missing kind: 0).
    min_hits: dict[str, int] = field(default_factory=lambda: dict(LONG_MIN_HITS))

    def to_dict(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}


@dataclass
class SoakResult:
    config: SoakConfig
    anomalies: list[str]
    history_path: Path
    figures: dict[str, Any]

    @property
    def ok(self) -> bool:
        return not self.anomalies

    def failure(self) -> str:
        """The first anomaly and how to replay it."""
        return (
            f"soak seed {self.config.seed}: {len(self.anomalies)} anomalies, the first: "
            f"{self.anomalies[0]}. History: {self.history_path}. Replay: make soak "
            f"SOAK_ARGS='--seed {self.config.seed} --intervals {self.config.intervals}'"
        )


@dataclass
class World:
    """Everything the nemesis may break, and the deployment it runs."""

    cluster: KafkaCluster
    proxies: dict[int, TcpProxy]
    ledger_server: DurablePostgres
    deployment: Deployment
    began: float = field(default_factory=time.monotonic)

    def now_s(self) -> float:
        return round(time.monotonic() - self.began, 3)


@contextlib.contextmanager
def world(config: SoakConfig, workdir: Path) -> Iterator[World]:
    """Start the cluster behind its proxies, both PostgreSQL servers and Airflow."""
    proxy_ports = {node_id: free_port() for node_id in (1, 2, 3)}
    cluster = KafkaCluster(
        DEFAULT_KAFKA_VERSION,
        data_dir=workdir / "cluster",
        config=TEST_BROKER_CONFIG,
        advertised_ports=proxy_ports,
    )
    proxies = {
        n: TcpProxy(cluster.client_port(n), port=port).start() for n, port in proxy_ports.items()
    }
    bindir = find_bindir()
    if bindir is None:
        raise RuntimeError("the soak needs PostgreSQL's binaries (apt-get install postgresql)")
    ledger_server = DurablePostgres(bindir)
    with contextlib.ExitStack() as stack:
        for proxy in proxies.values():
            stack.callback(proxy.stop)
        ledger_server.url = ledger_server.start()
        stack.callback(ledger_server.stop)
        cluster.start(timeout_s=180)
        stack.callback(cluster.stop)
        create_transaction_state_log(cluster)
        meta = stack.enter_context(postgres_url())
        today = datetime.now(UTC).date()
        deployment = stack.enter_context(
            airflow_deployment(
                workdir / "airflow",
                bootstrap=",".join(f"{HOST}:{p}" for p in proxy_ports.values()),
                postgres=meta,
                ledger_postgres=ledger_server.url,
                rows=config.rows,
                partitions=config.partitions,
                parallelism=2 * config.concurrency,
                extra_env={
                    "KAFKA2PC_ORDERS_RETRIES": str(config.retries),
                    "KAFKA2PC_ORDERS_RETRY_DELAY_S": str(config.retry_delay_s),
                    # No scheduled run: only the backfill's intervals (before the start).
                    "KAFKA2PC_ORDERS_START_DATE": today.isoformat(),
                    # The default grace period (1 h), on purpose: it must exceed the slowest
                    # prepare. With 300 s, prepares of 8 min on a loaded machine were taken
                    # for abandoned by another run's recover and aborted under the live job
                    # (safe: the job's record_prepared was refused and it aborted its own
                    # writes; but the run retried into the same fate).
                    "AIRFLOW__KAFKA2PC__GRACE_PERIOD_S": "3600",
                },
            )
        )
        yield World(cluster, proxies, ledger_server, deployment)


# -- the nemesis ------------------------------------------------------------------------


class Nemesis:
    """Carries out one :class:`Fault` at a time on the world; says what it hit.

    Every strike returns ``victim`` and ``result`` (what it did), ``hit`` (the evidence
    that the fault landed: the pid alive just before and dead after, the node down and
    back, the connections the proxy cut, the server's new pid, the task's state changed)
    and ``in_flight`` (work under way at the moment it struck: tasks running, transactions
    open on the broker), so the checker counts hits during work, not strikes.
    """

    def __init__(self, w: World, config: SoakConfig) -> None:
        self.w = w
        self.config = config
        self.prefix = naming.default_prefix(EXPORT_ID)

    def strike(self, fault: Fault) -> dict[str, Any]:
        return getattr(self, f"_{fault.kind.value}")(fault)

    def _in_flight(self) -> dict[str, Any]:
        """What was under way now: the running task instances (the scheduler's table) and
        the export's open transactions (ListTransactions); ``any`` if either is non-empty."""
        running = sorted(
            f"{ti['run_id']} {ti['task']}"
            for ti in self.w.deployment.task_instances()
            if ti["state"] == "running"
        )
        try:
            open_now = open_on_broker(self.w.deployment)
        except Exception as exc:  # a broker fault may be healing: the tasks still say
            open_now = [f"ListTransactions failed: {exc!r}"[:200]]
        listed = [t for t in open_now if not t.startswith("ListTransactions failed")]
        return {"running": running, "open": open_now, "any": bool(running or listed)}

    def _task_processes(self) -> dict[str, list[tuple[procs.Proc, dict[str, Any]]]]:
        """The deployment's task processes now, by target kind, with their task instance."""
        table = procs.processes()
        scheduler = self.w.deployment.processes["scheduler"].pid
        mine = {p.pid for p in procs.descendants(scheduler, table)}
        runners = {tid: p for tid, p in procs.task_runners(table).items() if p.pid in mine}
        found: dict[str, list[tuple[procs.Proc, dict[str, Any]]]] = {t: [] for t in TASK_TARGETS}
        if not runners:
            return found
        tis = {str(ti["id"]): ti for ti in self.w.deployment.task_instances()}
        for tid, runner in sorted(runners.items()):
            ti = tis.get(tid)
            if ti is None:
                continue
            if ti["task"] == "prepare":
                found["spark_driver"] += [(p, ti) for p in procs.spark_drivers(runner, table)]
                found["spark_worker"] += [(p, ti) for p in procs.spark_workers(runner, table)]
            elif ti["task"] in found:
                found[ti["task"]].append((runner, ti))
        return found

    def _kill_task(self, fault: Fault) -> dict[str, Any]:
        """SIGKILL a process of the fault's target kind, waiting up to
        :data:`TARGET_WAIT_S` for one: the prepare runs most of the time, so without the wait
        nearly every kill would hit it and the short tasks (decide, commit) almost never.
        A hit: the pid was alive (not a zombie) just before the signal and dead after."""
        target = fault.target
        deadline = time.monotonic() + TARGET_WAIT_S
        while not (candidates := self._task_processes()[target]):
            if time.monotonic() > deadline or _all_final(self.w.deployment, self.config.intervals):
                return {
                    "victim": None,
                    "hit": False,
                    "in_flight": False,
                    "result": f"no {target} process within {TARGET_WAIT_S} s",
                }
            time.sleep(0.2)
        proc, ti = candidates[int(fault.pick * len(candidates))]
        victim = f"{target} pid {proc.pid} of {ti['run_id']} {ti['task']} try {ti['try_number']}"
        alive_before = not procs.gone(proc.pid)
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            alive_before = False
        died = alive_before and procs.wait_gone(proc.pid)
        return {
            "victim": victim,
            "target_hit": target if died else None,
            "hit": died,
            # The victim is a task process: its task was running when it died.
            "in_flight": died,
            "evidence": {"task_state": ti["state"], "alive_before": alive_before, "died": died},
            "result": "SIGKILL: died"
            if died
            else ("SIGKILL: had already exited" if not alive_before else "SIGKILL: still alive"),
        }

    def _healthy_first(self, timeout_s: float = 120.0) -> None:
        """Broker faults start from a whole cluster: one node at a time, never two."""
        self.w.cluster.wait_healthy(timeout_s)

    def _kill_broker(self, fault: Fault) -> dict[str, Any]:
        """``kill -9`` of a pooled id's coordinator; a hit: its pid alive before, dead after."""
        self._healthy_first()
        slot = int(fault.pick * self.config.partitions)
        tid = naming.build(self.prefix, slot)
        node = self.w.cluster.transaction_coordinator(tid)
        pid = self.w.cluster.node(node).pid
        assert pid is not None
        flight = self._in_flight()
        alive_before = not procs.gone(pid)
        self.w.cluster.kill(node)
        down_at = self.w.now_s()
        died = alive_before and procs.wait_gone(pid)
        time.sleep(fault.duration_s)
        began = time.monotonic()
        self.w.cluster.restart(node, timeout_s=180)
        back_at = self.w.now_s()
        return {
            "victim": f"node {node} pid {pid} (coordinator of {tid})",
            "hit": died,
            "in_flight": died and flight["any"],
            "evidence": {"down_at_s": down_at, "back_at_s": back_at, "pid": pid, **flight},
            "result": f"killed -9 ({'died' if died else 'NOT dead'}), "
            f"down {fault.duration_s:.1f} s, "
            f"whole again {time.monotonic() - began:.1f} s after its restart",
        }

    def _pause_broker(self, fault: Fault) -> dict[str, Any]:
        """SIGSTOP of a node past its session timeout; a hit: its state was T (stopped)."""
        self._healthy_first()
        ids = self.w.cluster.node_ids
        node = ids[int(fault.pick * len(ids))]
        pid = self.w.cluster.node(node).pid
        assert pid is not None
        flight = self._in_flight()
        os.kill(pid, signal.SIGSTOP)
        stopped_at = self.w.now_s()
        try:
            stopped = procs.wait_state(pid, "T", timeout_s=5.0)
            time.sleep(fault.duration_s)
        finally:
            os.kill(pid, signal.SIGCONT)
        resumed_at = self.w.now_s()
        began = time.monotonic()
        self.w.cluster.wait_healthy(180)
        self.w.cluster.balance_leaders(60)
        return {
            "victim": f"node {node} pid {pid}",
            "hit": stopped,
            "in_flight": stopped and flight["any"],
            "evidence": {"stopped_at_s": stopped_at, "resumed_at_s": resumed_at, **flight},
            "result": f"SIGSTOP {fault.duration_s:.1f} s "
            f"({'stopped' if stopped else 'NOT seen stopped'}), "
            f"whole again {time.monotonic() - began:.1f} s after SIGCONT",
        }

    def _restart_postgres(self, fault: Fault) -> dict[str, Any]:
        """Crash-restart of the ledger's server; a hit: it ran before, under a new pid after."""
        flight = self._in_flight()
        before = self.w.ledger_server.postmaster_pid()
        began = time.monotonic()
        self.w.ledger_server.restart()
        after = self.w.ledger_server.postmaster_pid()
        hit = before is not None and after is not None and after != before
        return {
            "victim": "the ledger's PostgreSQL server",
            "hit": hit,
            "in_flight": hit and flight["any"],
            "evidence": {"pid_before": before, "pid_after": after, **flight},
            "result": f"crash-restarted (-m immediate) in {time.monotonic() - began:.1f} s, "
            f"pid {before} -> {after}",
        }

    def _drop_connections(self, fault: Fault) -> dict[str, Any]:
        """Connections to one node (or all) cut and refused by the proxies; a hit: at least
        one connection was cut or refused (clients and replica fetchers use the proxies)."""
        ids = sorted(self.w.proxies)
        nodes = ids if fault.pick < 0.25 else [ids[int((fault.pick - 0.25) / 0.75 * len(ids))]]
        flight = self._in_flight()
        before = {n: (self.w.proxies[n].dropped, self.w.proxies[n].refused) for n in nodes}
        for node in nodes:
            self.w.proxies[node].set_mode(Mode.DROP)
        try:
            time.sleep(fault.duration_s)
        finally:
            for node in nodes:
                self.w.proxies[node].set_mode(Mode.PASS)
        dropped = sum(self.w.proxies[n].dropped - before[n][0] for n in nodes)
        refused = sum(self.w.proxies[n].refused - before[n][1] for n in nodes)
        hit = dropped + refused > 0
        return {
            "victim": f"proxies of nodes {nodes}",
            "hit": hit,
            "in_flight": hit and flight["any"],
            "evidence": {"dropped": dropped, "refused": refused, **flight},
            "result": f"dropped and refused for {fault.duration_s:.1f} s: "
            f"{dropped} connections cut, {refused} refused",
        }

    def _clear_task(self, fault: Fault) -> dict[str, Any]:
        """``airflow tasks clear`` of a finished task; a hit: the CLI succeeded and the task
        instance left the finished state it had (Airflow will run it again)."""
        finished = [
            ti
            for ti in self.w.deployment.task_instances()
            if ti["state"] in ("success", "failed", "skipped")
        ]
        if not finished:
            return {"victim": None, "hit": False, "in_flight": False, "result": "no finished task"}
        ti = finished[int(fault.pick * len(finished))]
        logical = self._logical(ti["run_id"])
        flight = self._in_flight()
        done = self.w.deployment.airflow(
            "tasks",
            "clear",
            DAG_ID,
            # Airflow 3.3.2 matches --task-regex as a substring of the task id (the
            # serialized DAG's partial_subset: `task_ids in t.task_id`), not a regex: an
            # anchored pattern matched nothing, so every clear before this was a no-op.
            # The group-qualified id is a substring of exactly one task (and a regex
            # matching it, should Airflow go back to regexes).
            "--task-regex",
            f"{GROUP}.{ti['task']}",
            "--start-date",
            logical,
            "--end-date",
            logical,
            "--yes",
            check=False,
        )
        # Airflow 3 gives a cleared task instance a new id: find it by run and task.
        now = next(
            (
                t
                for t in self.w.deployment.task_instances()
                if (t["run_id"], t["task"]) == (ti["run_id"], ti["task"])
            ),
            None,
        )
        changed = now is not None and (
            now["id"] != ti["id"]
            or now["state"] != ti["state"]
            or now["try_number"] != ti["try_number"]
        )
        hit = done.returncode == 0 and changed
        return {
            "victim": f"{ti['run_id']} {ti['task']} ({ti['state']}, try {ti['try_number']})",
            "hit": hit,
            "in_flight": hit and flight["any"],
            "evidence": {"after": (now or {}).get("state"), **flight},
            "result": f"airflow tasks clear exit {done.returncode}, "
            f"now {(now or {}).get('state')} try {(now or {}).get('try_number')}",
        }

    def _logical(self, run_id: str) -> str:
        (logical,) = self.w.deployment.rows(
            "SELECT logical_date FROM dag_run WHERE dag_id = %s AND run_id = %s", DAG_ID, run_id
        )[0]
        return logical.astimezone(UTC).isoformat()

    def heal(self) -> list[str]:
        """Undo whatever a fault may have left: proxies pass, nodes resumed and running,
        the cluster whole, the ledger's server up."""
        done = []
        for proxy in self.w.proxies.values():
            proxy.set_mode(Mode.PASS)
        for node_id in self.w.cluster.running():
            pid = self.w.cluster.node(node_id).pid
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        restarted = self.w.cluster.heal(180)
        if restarted:
            done.append(f"restarted nodes {restarted}")
        self.w.cluster.wait_healthy(180)
        try:
            with Ledger(self.w.deployment.ledger_url, migrate=False):
                pass
        except Exception:
            self.w.ledger_server.restart()
            done.append("restarted the ledger's server")
        return done


# -- the run ----------------------------------------------------------------------------


def _days(config: SoakConfig, today: datetime) -> tuple[datetime, datetime]:
    return today - timedelta(days=config.intervals), today - timedelta(days=1)


def _all_final(d: Deployment, expected: int) -> bool:
    runs = d.runs()
    return len(runs) >= expected and all(r["state"] in FINAL for r in runs)


def _wait_final(d: Deployment, expected: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not _all_final(d, expected):
        d.check_alive()
        if time.monotonic() > deadline:
            return False
        time.sleep(3)
    return True


def _attempts(d: Deployment) -> list[dict[str, Any]]:
    """Every try of every task: the past ones (task_instance_history) and the current."""
    keys = ("run_id", "task", "try_number", "state", "start", "end")
    rows = d.rows(
        "SELECT run_id, task_id, try_number, state, start_date, end_date "
        "FROM task_instance_history WHERE dag_id = %s "
        "UNION ALL SELECT run_id, task_id, try_number, state, start_date, end_date "
        "FROM task_instance WHERE dag_id = %s ORDER BY 5 NULLS LAST",
        DAG_ID,
        DAG_ID,
    )
    return [
        {
            **dict(zip(keys, row, strict=True)),
            "task": row[1].split(".")[-1],
            "start": row[4].isoformat() if row[4] else None,
            "end": row[5].isoformat() if row[5] else None,
        }
        for row in rows
    ]


_VERDICT = re.compile(r"attempt (\d+): verdict (COMMIT|ABORT) \(([^)]*)")


def _verdicts(d: Deployment) -> list[dict[str, Any]]:
    """Each verdict a decide try recorded or found, from its task log."""
    found = []
    for path in d.task_logs():
        if f"task_id={GROUP}.decide" not in str(path):
            continue
        for match in _VERDICT.finditer(path.read_text(errors="replace")):
            found.append(
                {
                    "run_id": path.parent.parent.name.removeprefix("run_id="),
                    "log": path.name,
                    "batch_attempt": int(match.group(1)),
                    "verdict": match.group(2),
                    "reason": match.group(3)[:200],
                }
            )
    return found


def _day(key: str) -> str:
    return key[:10].replace("-", "")


def read_final_state(w: World, config: SoakConfig, days: list[str]) -> tuple[FinalState, dict]:
    """Ask every witness; returns the state and the ledger's batches and outcomes."""
    d = w.deployment
    runs = d.runs()
    run_states = {f"{r['start']:%Y%m%d}": r["state"] for r in runs}
    with Ledger(d.ledger_url) as ledger:
        batches = ledger.recent(EXPORT_ID, limit=10_000)
        participants = {b.run_key: ledger.participants(EXPORT_ID, b.run_key) for b in batches}
    by_day = {_day(b.run_key): b for b in batches}
    settings = {"bootstrap.servers": w.cluster.bootstrap_servers}
    committables = [p.committable for b in batches for p in participants[b.run_key]]
    with KafkaProtocol(settings, timeout_ms=10_000) as protocol:
        report = audit_topic(protocol, d.topic, committables, duplicates=True)
    seen = read_committed(settings, d.topic)
    java = (
        java_read_committed(w.cluster.bootstrap_servers, d.topic) if config.java_witness else None
    )
    state = FinalState(
        days=days,
        rows_per_day=config.rows,
        partitions=config.partitions,
        run_states=run_states,
        batches={
            day: (
                (
                    by_day[day].state.value,
                    by_day[day].source_rows,
                    len(participants[by_day[day].run_key]),
                )
                if day in by_day
                else None
            )
            for day in days
        },
        other_batches=sorted(b.run_key for b in batches if _day(b.run_key) not in days),
        audit={
            **report.totals,
            "extra_copies": (report.duplicates or {}).get("extra_copies", 0),
        },
        audit_unfinished=[
            f"{v.get('transactional_id')}: {v.get('state')}"
            for v in report.committables
            if not (v["state"] == "COMMITTED" and v["complete"])
        ],
        visible={k.decode(): n for k, n in seen.keys.items()},
        stalled=[str(p) for p in seen.stalled],
        java_records=java.total if java else None,
        java_keys=dict(java.keys) if java else {},
        open_transactions=open_on_broker(d),
        leased=still_leased(d),
    )
    ledger_view = {
        "batches": [b.summary() for b in batches],
        "outcomes": {
            key: [
                {
                    "index": p.index,
                    "id": p.transactional_id,
                    "state": p.state.value,
                    "reason": p.reason,
                }
                for p in ps
            ]
            for key, ps in participants.items()
        },
    }
    return state, ledger_view


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def run_soak(config: SoakConfig, log: Any = print) -> SoakResult:
    """Run the whole soak; returns its anomalies and figures (never raises on anomalies)."""
    workdir = config.workdir / f"seed-{config.seed}-{datetime.now(UTC):%Y%m%dT%H%M%S}"
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    schedule = fault_schedule(config.seed, config.window_s)
    history: dict[str, Any] = {
        "seed": config.seed,
        "config": config.to_dict(),
        "schedule": [f.to_dict() for f in schedule],
        "faults": [],
        "heal": [],
        "reruns": [],
    }
    history_path = workdir / "history.json"
    anomalies: list[str] = []
    figures: dict[str, Any] = {}
    try:
        with world(config, workdir) as w:
            d = w.deployment
            setup_s = time.monotonic() - started
            log(f"soak seed {config.seed}: world up in {setup_s:.1f} s ({workdir})")
            today = d.today
            first, last = _days(config, today)
            days = [f"{first + timedelta(days=i):%Y%m%d}" for i in range(config.intervals)]
            w.began = time.monotonic()
            d.backfill(first, last, max_active_runs=config.concurrency)
            nemesis = Nemesis(w, config)
            for fault in schedule:
                while w.now_s() < fault.at_s and not _all_final(d, config.intervals):
                    d.check_alive()
                    time.sleep(0.5)
                if _all_final(d, config.intervals):
                    break
                event = {**fault.to_dict(), "started_s": w.now_s()}
                try:
                    event.update(nemesis.strike(fault))
                except Exception as exc:
                    # Not swallowed: the checker reports it as an anomaly (a nemesis that
                    # breaks in its own code proves nothing about the export).
                    event.update(
                        {
                            "victim": None,
                            "hit": False,
                            "in_flight": False,
                            "error": f"{exc!r}"[:500],
                            "result": "nemesis error",
                        }
                    )
                    nemesis.heal()
                event["ended_s"] = w.now_s()
                history["faults"].append(event)
                mark = "HIT" if event["hit"] else "MISS"
                if event["hit"] and not event["in_flight"]:
                    mark = "HIT (nothing in flight)"
                log(
                    f"  fault {fault.index} at {event['started_s']:.0f} s {fault.kind.value}: "
                    f"{mark}: {event.get('victim')}: {event['result']}"
                    + (f": {event['error']}" if "error" in event else "")
                )
            nemesis_s = w.now_s()
            history["heal"] = nemesis.heal()
            log(
                f"nemesis done after {nemesis_s:.0f} s, {len(history['faults'])} strikes, "
                f"{sum(1 for e in history['faults'] if e['hit'])} hits; healed: {history['heal']}"
            )
            for kind, row in tally_strikes(history["faults"]).items():
                log(
                    f"  {kind}: {row['strikes']} strikes, {row['hits']} hits, "
                    f"{row['in_flight']} during in-flight work "
                    f"(at least {config.min_hits.get(kind, 0)} asked)"
                )
            settled = _wait_final(d, config.intervals, config.settle_s)
            for round_ in range(1, RERUN_ROUNDS + 1):
                failed = [r for r in d.runs() if r["state"] == "failed"]
                if not failed:
                    break
                for run in failed:
                    logical = run["logical"].astimezone(UTC).isoformat()
                    d.airflow(
                        "tasks", "clear", DAG_ID, "-s", logical, "-e", logical, "--yes", check=False
                    )
                    history["reruns"].append(
                        {"round": round_, "run_id": run["run_id"], "at_s": w.now_s()}
                    )
                log(f"rerun round {round_}: {[r['run_id'] for r in failed]}")
                time.sleep(5)
                settled = _wait_final(d, config.intervals, config.settle_s)
            finished_s = w.now_s()
            # Whatever is still open was left by something recovery should have finished.
            state, ledger_view = read_final_state(w, config, days)
            # The export's anomalies first (the gravest), then where the nemesis proved nothing.
            anomalies = find_anomalies(state)
            anomalies += find_nemesis_anomalies(history["faults"], config.min_hits)
            if not settled:
                anomalies.insert(0, f"runs not finished {config.settle_s:.0f} s after the heal")
            attempts = _attempts(d)
            tally = tally_strikes(history["faults"])
            figures = {
                "seed": config.seed,
                "intervals": config.intervals,
                "strikes": len(history["faults"]),
                "hits": sum(1 for e in history["faults"] if e["hit"]),
                "hits_in_flight": sum(1 for e in history["faults"] if e["in_flight"]),
                "by_kind": tally,
                "task_kills_by_target": _by(history["faults"], "target_hit"),
                "task_attempts": len(attempts),
                "failed_attempts": sum(
                    1 for a in attempts if a["state"] in ("failed", "up_for_retry")
                ),
                "reruns_after_heal": len(history["reruns"]),
                "anomalies": len(anomalies),
                "setup_s": round(setup_s, 1),
                "nemesis_s": round(nemesis_s, 1),
                "finished_s": round(finished_s, 1),
                "records_committed": state.audit.get("committed"),
                "records_aborted": state.audit.get("aborted"),
            }
            history.update(
                {
                    "task_attempts": attempts,
                    "verdicts": _verdicts(d),
                    "ledger": ledger_view,
                    "final_state": state.to_dict(),
                }
            )
    except Exception as exc:
        anomalies = anomalies or [f"the soak itself failed: {exc!r}"[:2000]]
        raise
    finally:
        figures["total_s"] = round(time.monotonic() - started, 1)
        history.update({"anomalies": anomalies, "figures": figures})
        history_path.write_text(json.dumps(history, indent=1, default=_jsonable))
    return SoakResult(config, anomalies, history_path, figures)


def _by(events: list[dict[str, Any]], key: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for event in events:
        if event.get(key):
            counts[event[key]] = counts.get(event[key], 0) + 1
    return dict(sorted(counts.items()))
