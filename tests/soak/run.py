"""The soak itself: the world it runs in, the nemesis, the healing, the check, the history.

The world, all real and all its own: a three-node Apache Kafka cluster with a loopback TCP
proxy in front of each node (every client and every replica fetcher goes through it, so a
dropped proxy cuts the node off the network), a PostgreSQL server for Airflow's metadata DB
and another for the coordinator ledger (the one the nemesis crash-restarts; it keeps every
acknowledged commit, ``synchronous_commit=on``), and an Airflow deployment (scheduler with
the LocalExecutor, ``tests/support/scheduler.py``) running the soak's exports
(:mod:`.exports`: the example DAG, a multi-topic export by the Python writer and a registry
Avro export; a schema registry of its own for the latter) with more retries, sooner.
Airflow backfills ``intervals`` days, each export a contiguous block of them, about
``concurrency`` runs at a time.

While any run is unfinished, the nemesis works through the seed's schedule
(:mod:`.schedule`), one fault at a time, each aimed at work in flight (it waits up to
:data:`AIM_WAIT_S` for an export's prepare, commit or open transaction; a broker fault
strikes the coordinator of an open transaction; a kill of the prepare's JVM strikes one that
writes, :mod:`.aim`). Then everything is healed (proxies pass, paused
nodes resumed, dead nodes restarted, the cluster whole), the runs are left to their retries
and recovery, and a run that still failed is re-run the way an operator would (``airflow
tasks clear`` of the whole run), at most :data:`RERUN_ROUNDS` times. The checker
(:mod:`.checker`) then judges the final state on every topic; each strike is classified
against its export's windows of work (:mod:`.flight`); the history (faults, windows, task
attempts, verdicts, outcomes, anomalies) is written as JSON.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import signal
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
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
from tests.support.registry import running_registry
from tests.support.scheduler import (
    FINAL,
    OPEN_STATES,
    Deployment,
    airflow_deployment,
)

from . import aim, procs
from .checker import (
    FinalState,
    TopicState,
    find_anomalies,
    find_nemesis_anomalies,
    tally_strikes,
)
from .exports import (
    GROUP,
    KINDS,
    REGISTRY_CONN_ID,
    SoakExport,
    assign_days,
    dag_source,
    plan_exports,
)
from .flight import OpenRecorder, Window, classify_strikes, task_windows
from .schedule import TASK_TARGETS, Fault, FaultKind, fault_schedule

#: How often a run that failed after the heal is re-run (cleared whole) by the soak.
RERUN_ROUNDS = 3
#: How long a task kill waits for a process of its target kind to appear (the prepare's
#: JVM, aimed at work, waits up to :data:`AIM_WAIT_S`).
TARGET_WAIT_S = 30.0
#: A prepare's JVM is struck while it writes (:mod:`.aim`); after this long waiting for
#: one, any driver JVM at least :data:`JVM_MIN_AGE_S` old (a loaded machine's prepare may
#: take minutes before it writes).
JVM_PATIENCE_S = 30.0
JVM_MIN_AGE_S = 10.0
#: How long another aimed fault waits for work in flight before it strikes anyway.
AIM_WAIT_S = 60.0
#: Faults aimed at work in flight (a clear needs a finished task, not work).
AIMED = frozenset(
    {
        FaultKind.KILL_BROKER,
        FaultKind.PAUSE_BROKER,
        FaultKind.RESTART_POSTGRES,
        FaultKind.DROP_CONNECTIONS,
    }
)
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
    #: The exports the intervals are handed to, in order (:data:`.exports.KINDS`).
    exports: tuple[str, ...] = KINDS
    #: Aim :data:`AIMED` faults at work in flight (else they strike on the schedule's time).
    aim: bool = True
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
    exports: list[SoakExport]
    began: float = field(default_factory=time.monotonic)
    recorder: OpenRecorder | None = None

    def now_s(self) -> float:
        return round(time.monotonic() - self.began, 3)

    @property
    def dag_ids(self) -> list[str]:
        return [e.dag_id for e in self.exports]

    def export_of(self, dag_id: str) -> SoakExport:
        return next(e for e in self.exports if e.dag_id == dag_id)

    def runs(self) -> list[dict[str, Any]]:
        """Every run of the soak's exports: DAG, run id, state, day, logical date."""
        keys = ("dag_id", "run_id", "state", "day", "logical")
        rows = self.deployment.rows(
            "SELECT dag_id, run_id, state, data_interval_start, logical_date FROM dag_run "
            "WHERE dag_id = ANY(%s) ORDER BY data_interval_start",
            self.dag_ids,
        )
        return [{**dict(zip(keys, r, strict=True)), "day": f"{r[3]:%Y%m%d}"} for r in rows]

    def task_instances(self) -> list[dict[str, Any]]:
        """Every task instance of the soak's exports now (its current try), with its day."""
        keys = ("id", "dag_id", "run_id", "task", "state", "try_number", "day")
        rows = self.deployment.rows(
            "SELECT ti.id, ti.dag_id, ti.run_id, ti.task_id, ti.state, ti.try_number, "
            "dr.data_interval_start FROM task_instance ti JOIN dag_run dr "
            "ON dr.dag_id = ti.dag_id AND dr.run_id = ti.run_id "
            "WHERE ti.dag_id = ANY(%s) ORDER BY ti.dag_id, ti.run_id, ti.task_id",
            self.dag_ids,
        )
        return [
            {
                **dict(zip(keys, r, strict=True)),
                "task": r[3].split(".")[-1],
                "day": f"{r[6]:%Y%m%d}",
            }
            for r in rows
        ]


@contextlib.contextmanager
def world(config: SoakConfig, workdir: Path) -> Iterator[World]:
    """Start the cluster behind its proxies, both PostgreSQL servers, the schema registry
    (when an export needs it), the exports' topics and Airflow."""
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
        suffix = uuid.uuid4().hex[:8]
        exports = plan_exports(config.exports, "", suffix)
        bootstrap = ",".join(f"{HOST}:{p}" for p in proxy_ports.values())
        extra_env: dict[str, str] = {}
        if any(e.registry for e in exports):
            registry = stack.enter_context(running_registry(workdir / "registry"))
            extra_env[f"AIRFLOW_CONN_{REGISTRY_CONN_ID.upper()}"] = json.dumps(
                {"conn_type": "http", "host": registry}
            )
        own = [e for e in exports if e.kind != "jvm"]
        with KafkaProtocol({"bootstrap.servers": bootstrap}, timeout_ms=10_000) as protocol:
            for topic in (t for e in own for t in e.topics):
                protocol.create_topic(topic, 3)
        extra_dags = {
            f"{e.dag_id}.py": dag_source(
                e,
                rows=config.rows,
                partitions=config.partitions,
                start=today.isoformat(),
                retries=config.retries,
                delay_s=config.retry_delay_s,
            )
            for e in own
        }
        deployment = stack.enter_context(
            airflow_deployment(
                workdir / "airflow",
                bootstrap=bootstrap,
                postgres=meta,
                ledger_postgres=ledger_server.url,
                rows=config.rows,
                partitions=config.partitions,
                parallelism=2 * config.concurrency,
                extra_dags=extra_dags,
                extra_env={
                    **extra_env,
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
        exports = [
            dataclasses.replace(e, topics=(deployment.topic,)) if e.kind == "jvm" else e
            for e in exports
        ]
        yield World(cluster, proxies, ledger_server, deployment, exports)


# -- the nemesis ------------------------------------------------------------------------


class Nemesis:
    """Carries out one :class:`Fault` at a time on the world; says what it hit.

    Every strike returns ``victim`` and ``result`` (what it did), ``hit`` (the evidence
    that the fault landed: the pid alive just before and dead after, the node down and
    back, the connections the proxy cut, the server's new pid, the task's state changed),
    ``moment`` (when it struck, wall clock) and ``own`` (for a task kill or a clear, the
    export and interval it struck), and ``live`` (the work it saw in flight then). Whether it
    landed on work is decided afterwards against the exports' windows
    (:func:`.flight.classify_strikes`), so the checker counts hits on work, not strikes.
    """

    def __init__(self, w: World, config: SoakConfig) -> None:
        self.w = w
        self.config = config

    def strike(self, fault: Fault) -> dict[str, Any]:
        waited = {}
        if self.config.aim and fault.kind in AIMED:
            waited = {"aimed_s": self._aim()}
        return {**waited, **getattr(self, f"_{fault.kind.value}")(fault)}

    def _live(self) -> dict[str, Any]:
        """The work in flight now: prepare and commit tries running (the scheduler's table)
        and the exports' open transactions (the recorder's last sample)."""
        running = sorted(
            f"{self.w.export_of(ti['dag_id']).kind} {ti['day']} {ti['task']}"
            for ti in self.w.task_instances()
            if ti["state"] == "running" and ti["task"] in ("prepare", "commit")
        )
        recorder = self.w.recorder
        open_now = sorted(f"{k} {d} {tid}" for k, d, tid in recorder.open_now()) if recorder else []
        return {"running": running, "open": open_now, "any": bool(running or open_now)}

    def _aim(self) -> float:
        """Wait up to :data:`AIM_WAIT_S` for work in flight (an open transaction preferred
        for half of it); the seconds waited."""
        began = time.monotonic()
        while time.monotonic() - began < AIM_WAIT_S:
            live = self._live()
            if live["open"] or (live["any"] and time.monotonic() - began > AIM_WAIT_S / 2):
                break
            if _all_final(self.w, self.config.intervals):
                break
            time.sleep(0.25)
        return round(time.monotonic() - began, 1)

    def _open_pick(self, fault: Fault) -> str | None:
        """One of the exports' transactional ids open now, picked by the fault."""
        recorder = self.w.recorder
        open_now = sorted(tid for _, _, tid in recorder.open_now()) if recorder else []
        return open_now[int(fault.pick * len(open_now))] if open_now else None

    def _task_processes(self) -> dict[str, list[tuple[procs.Proc, dict[str, Any]]]]:
        """The deployment's task processes now, by target kind, with their task instance."""
        table = procs.processes()
        scheduler = self.w.deployment.processes["scheduler"].pid
        mine = {p.pid for p in procs.descendants(scheduler, table)}
        runners = {tid: p for tid, p in procs.task_runners(table).items() if p.pid in mine}
        found: dict[str, list[tuple[procs.Proc, dict[str, Any]]]] = {t: [] for t in TASK_TARGETS}
        if not runners:
            return found
        tis = {str(ti["id"]): ti for ti in self.w.task_instances()}
        for tid, runner in sorted(runners.items()):
            ti = tis.get(tid)
            if ti is None:
                continue
            if ti["task"] == "prepare":
                found["spark_jvm"] += [(p, ti) for p in procs.spark_jvms(runner, table)]
                found["python_worker"] += [(p, ti) for p in procs.python_workers(runner, table)]
            if ti["task"] in found:
                found[ti["task"]].append((runner, ti))
        return found

    def _victims(
        self, target: str, waited_s: float
    ) -> list[tuple[procs.Proc, dict[str, Any], str]]:
        """The processes of ``target`` kind a task kill may strike now, with why: for the
        prepare's JVM, when aimed, those at work (:func:`.aim.choose`); for the others,
        every one running."""
        candidates = self._task_processes()[target]
        if target != "spark_jvm" or not self.config.aim:
            return [(proc, ti, "") for proc, ti in candidates]
        jvms = {}
        for proc, ti in candidates:
            started = procs.started_at(proc.pid)
            if started is not None:
                kind = self.w.export_of(ti["dag_id"]).kind
                jvms[proc.pid] = (aim.Jvm(proc.pid, kind, ti["day"], started), proc, ti)
        recorder = self.w.recorder
        chosen = aim.choose(
            [jvm for jvm, _, _ in jvms.values()],
            recorder.open_since() if recorder else [],
            now=time.time(),
            waited_s=waited_s,
            patience_s=JVM_PATIENCE_S,
            min_age_s=JVM_MIN_AGE_S,
        )
        return [(jvms[jvm.pid][1], jvms[jvm.pid][2], why) for jvm, why in chosen]

    def _kill_task(self, fault: Fault) -> dict[str, Any]:
        """SIGKILL a process of the fault's target kind, waiting for one: the prepare runs
        most of the time, so without the wait nearly every kill would hit it and the short
        tasks (decide, commit) almost never. The prepare's JVM is aimed at work
        (:meth:`_victims`; up to :data:`AIM_WAIT_S`), the others wait up to
        :data:`TARGET_WAIT_S`. A victim that exits between the choice and the signal is no
        strike: the kill chooses again. A hit: the pid was alive (not a zombie) just before
        the signal and dead after."""
        target = fault.target
        wait_s = AIM_WAIT_S if target == "spark_jvm" and self.config.aim else TARGET_WAIT_S
        began = time.monotonic()
        escaped = 0
        while True:
            waited = time.monotonic() - began
            if victims := self._victims(target, waited):
                proc, ti, why = victims[int(fault.pick * len(victims))]
                live = self._live()
                moment, aimed_s = time.time(), round(time.monotonic() - began, 1)
                if not procs.gone(proc.pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.pid, signal.SIGKILL)
                        break
                escaped += 1  # it ended while chosen: nothing struck yet
            done = _all_final(self.w, self.config.intervals)
            if waited > wait_s or done:
                return {
                    "victim": None,
                    "hit": False,
                    "aimed_s": round(waited, 1),
                    "result": f"no {target} process "
                    + (
                        f"before every run finished ({waited:.0f} s)"
                        if done
                        else f"within {wait_s} s"
                    )
                    + (f" ({escaped} ended while chosen)" if escaped else ""),
                }
            time.sleep(0.25)
        died = procs.wait_gone(proc.pid)
        export = self.w.export_of(ti["dag_id"])
        victim = (
            f"{target} pid {proc.pid} of {export.kind} {ti['day']} {ti['task']} "
            f"try {ti['try_number']}" + (f" ({why})" if why else "")
        )
        return {
            "victim": victim,
            "target_hit": target if died else None,
            "hit": died,
            "aimed_s": aimed_s,
            "moment": moment,
            "own": [export.kind, ti["day"]],
            "live": live,
            "evidence": {
                "task_state": ti["state"],
                "alive_before": True,
                "died": died,
                "why": why,
                "ended_while_chosen": escaped,
            },
            "result": "SIGKILL: died" if died else "SIGKILL: still alive",
        }

    def _healthy_first(self, timeout_s: float = 120.0) -> None:
        """Broker faults start from a whole cluster: one node at a time, never two."""
        self.w.cluster.wait_healthy(timeout_s)

    def _kill_broker(self, fault: Fault) -> dict[str, Any]:
        """``kill -9`` of the coordinator of an open transaction of the exports (else of a
        pooled id); a hit: its pid alive before, dead after."""
        self._healthy_first()
        tid = self._open_pick(fault)
        if tid is None:
            export = self.w.exports[int(fault.pick * len(self.w.exports))]
            tid = naming.build(export.prefix, int(fault.pick * self.config.partitions))
        node = self.w.cluster.transaction_coordinator(tid)
        pid = self.w.cluster.node(node).pid
        assert pid is not None
        live = self._live()
        alive_before = not procs.gone(pid)
        moment = time.time()
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
            "moment": moment,
            "live": live,
            "evidence": {"down_at_s": down_at, "back_at_s": back_at, "pid": pid},
            "result": f"killed -9 ({'died' if died else 'NOT dead'}), "
            f"down {fault.duration_s:.1f} s, "
            f"whole again {time.monotonic() - began:.1f} s after its restart",
        }

    def _pause_broker(self, fault: Fault) -> dict[str, Any]:
        """SIGSTOP of a node past its session timeout (the coordinator of an open
        transaction of the exports when there is one); a hit: its state was T (stopped)."""
        self._healthy_first()
        tid = self._open_pick(fault)
        ids = self.w.cluster.node_ids
        node = (
            self.w.cluster.transaction_coordinator(tid) if tid else ids[int(fault.pick * len(ids))]
        )
        pid = self.w.cluster.node(node).pid
        assert pid is not None
        live = self._live()
        moment = time.time()
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
            "victim": f"node {node} pid {pid}" + (f" (coordinator of {tid})" if tid else ""),
            "hit": stopped,
            "moment": moment,
            "live": live,
            "evidence": {"stopped_at_s": stopped_at, "resumed_at_s": resumed_at},
            "result": f"SIGSTOP {fault.duration_s:.1f} s "
            f"({'stopped' if stopped else 'NOT seen stopped'}), "
            f"whole again {time.monotonic() - began:.1f} s after SIGCONT",
        }

    def _restart_postgres(self, fault: Fault) -> dict[str, Any]:
        """Crash-restart of the ledger's server; a hit: it ran before, under a new pid after."""
        live = self._live()
        before = self.w.ledger_server.postmaster_pid()
        began = time.monotonic()
        moment = time.time()
        self.w.ledger_server.restart()
        after = self.w.ledger_server.postmaster_pid()
        hit = before is not None and after is not None and after != before
        return {
            "victim": "the ledger's PostgreSQL server",
            "hit": hit,
            "moment": moment,
            "live": live,
            "evidence": {"pid_before": before, "pid_after": after},
            "result": f"crash-restarted (-m immediate) in {time.monotonic() - began:.1f} s, "
            f"pid {before} -> {after}",
        }

    def _drop_connections(self, fault: Fault) -> dict[str, Any]:
        """Connections to one node (or all) cut and refused by the proxies; a hit: at least
        one connection was cut or refused (clients and replica fetchers use the proxies)."""
        ids = sorted(self.w.proxies)
        nodes = ids if fault.pick < 0.25 else [ids[int((fault.pick - 0.25) / 0.75 * len(ids))]]
        live = self._live()
        before = {n: (self.w.proxies[n].dropped, self.w.proxies[n].refused) for n in nodes}
        moment = time.time()
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
            "moment": moment,
            "live": live,
            "evidence": {"dropped": dropped, "refused": refused},
            "result": f"dropped and refused for {fault.duration_s:.1f} s: "
            f"{dropped} connections cut, {refused} refused",
        }

    def _clear_task(self, fault: Fault) -> dict[str, Any]:
        """``airflow tasks clear`` of a finished task; a hit: the CLI succeeded and the task
        instance left the finished state it had (Airflow will run it again)."""
        finished = [
            ti for ti in self.w.task_instances() if ti["state"] in ("success", "failed", "skipped")
        ]
        if not finished:
            return {"victim": None, "hit": False, "result": "no finished task"}
        ti = finished[int(fault.pick * len(finished))]
        logical = self._logical(ti["dag_id"], ti["run_id"])
        live = self._live()
        moment = time.time()
        done = self.w.deployment.airflow(
            "tasks",
            "clear",
            ti["dag_id"],
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
                for t in self.w.task_instances()
                if (t["dag_id"], t["run_id"], t["task"]) == (ti["dag_id"], ti["run_id"], ti["task"])
            ),
            None,
        )
        changed = now is not None and (
            now["id"] != ti["id"]
            or now["state"] != ti["state"]
            or now["try_number"] != ti["try_number"]
        )
        hit = done.returncode == 0 and changed
        kind = self.w.export_of(ti["dag_id"]).kind
        return {
            "victim": f"{kind} {ti['day']} {ti['task']} ({ti['state']}, try {ti['try_number']})",
            "hit": hit,
            "moment": moment,
            "own": [kind, ti["day"]],
            "live": live,
            "evidence": {"after": (now or {}).get("state")},
            "result": f"airflow tasks clear exit {done.returncode}, "
            f"now {(now or {}).get('state')} try {(now or {}).get('try_number')}",
        }

    def _logical(self, dag_id: str, run_id: str) -> str:
        (logical,) = self.w.deployment.rows(
            "SELECT logical_date FROM dag_run WHERE dag_id = %s AND run_id = %s", dag_id, run_id
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


def _days(config: SoakConfig, today: datetime) -> list[datetime]:
    first = today - timedelta(days=config.intervals)
    return [first + timedelta(days=i) for i in range(config.intervals)]


def _all_final(w: World, expected: int) -> bool:
    runs = w.runs()
    return len(runs) >= expected and all(r["state"] in FINAL for r in runs)


def _wait_final(w: World, expected: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not _all_final(w, expected):
        w.deployment.check_alive()
        if time.monotonic() > deadline:
            return False
        time.sleep(3)
    return True


def _backfill(w: World, blocks: dict[str, list[datetime]], concurrency: int) -> None:
    """One backfill per export over its block of days, about ``concurrency`` runs in all;
    the exports' CLI calls side by side (each ``airflow`` call costs seconds of start-up)."""
    busy = [dag_id for dag_id, days in blocks.items() if days]
    per_dag = max(1, math.ceil(concurrency / max(1, len(busy))))

    def one(dag_id: str) -> None:
        days = blocks[dag_id]
        w.deployment.airflow("dags", "unpause", dag_id)
        w.deployment.airflow(
            "backfill",
            "create",
            "--dag-id",
            dag_id,
            "--from-date",
            days[0].date().isoformat(),
            "--to-date",
            days[-1].date().isoformat(),
            "--max-active-runs",
            str(per_dag),
        )

    with ThreadPoolExecutor(max_workers=len(busy) or 1) as pool:
        for done in [pool.submit(one, dag_id) for dag_id in busy]:
            done.result()


def _attempts(w: World) -> list[dict[str, Any]]:
    """Every try of every task: the past ones (task_instance_history) and the current."""
    keys = ("dag_id", "run_id", "task", "try_number", "state", "start", "end", "day")
    query = (
        "SELECT t.dag_id, t.run_id, t.task_id, t.try_number, t.state, t.start_date, "
        "t.end_date, dr.data_interval_start FROM {table} t JOIN dag_run dr "
        "ON dr.dag_id = t.dag_id AND dr.run_id = t.run_id WHERE t.dag_id = ANY(%s)"
    )
    rows = w.deployment.rows(
        query.format(table="task_instance_history")
        + " UNION ALL "
        + query.format(table="task_instance")
        + " ORDER BY 6 NULLS LAST",
        w.dag_ids,
        w.dag_ids,
    )
    return [
        {
            **dict(zip(keys, row, strict=True)),
            "task": row[2].split(".")[-1],
            "day": f"{row[7]:%Y%m%d}",
        }
        for row in rows
    ]


_VERDICT = re.compile(r"attempt (\d+): verdict (COMMIT|ABORT) \(([^)]*)")
_WRITER = re.compile(r"by the (\w+) writer")


def _task_logs(w: World, task: str) -> Iterator[tuple[str, Path]]:
    """(DAG id, log file) of every try of ``task``."""
    for dag_id in w.dag_ids:
        for path in w.deployment.task_logs(dag_id):
            if f"task_id={GROUP}.{task}" in str(path):
                yield dag_id, path


def _verdicts(w: World) -> list[dict[str, Any]]:
    """Each verdict a decide try recorded or found, from its task log."""
    found = []
    for dag_id, path in _task_logs(w, "decide"):
        for match in _VERDICT.finditer(path.read_text(errors="replace")):
            found.append(
                {
                    "dag_id": dag_id,
                    "run_id": path.parent.parent.name.removeprefix("run_id="),
                    "log": path.name,
                    "batch_attempt": int(match.group(1)),
                    "verdict": match.group(2),
                    "reason": match.group(3)[:200],
                }
            )
    return found


def _writers(w: World) -> dict[str, list[str]]:
    """Export kind -> the writers its prepare tries said they wrote with."""
    used: dict[str, set[str]] = {e.kind: set() for e in w.exports}
    for dag_id, path in _task_logs(w, "prepare"):
        used[w.export_of(dag_id).kind].update(_WRITER.findall(path.read_text(errors="replace")))
    return {kind: sorted(writers) for kind, writers in used.items()}


def _writer_anomalies(w: World, used: dict[str, list[str]], days: dict[str, str]) -> list[str]:
    """An export that exported intervals but never said it wrote with its writer."""
    return [
        f"export {e.kind}: no prepare wrote by the {e.writer} writer (saw {used[e.kind]})"
        for e in w.exports
        if e.kind in days.values() and e.writer not in used[e.kind]
    ]


def _day(key: str) -> str:
    return key[:10].replace("-", "")


def _open_transactions(w: World) -> list[str]:
    """The exports' transactions the coordinators still hold open (ListTransactions)."""
    settings = {"bootstrap.servers": w.cluster.bootstrap_servers}
    with KafkaProtocol(settings, timeout_ms=10_000) as protocol:
        listed = protocol.list_transactions()
    return [
        f"{t.transactional_id}: {t.state.value}"
        for t in listed
        if t.state.value in OPEN_STATES and any(e.owns(t.transactional_id) for e in w.exports)
    ]


def _topic_state(
    w: World, config: SoakConfig, protocol: KafkaProtocol, topic: str, expected: dict, done: list
) -> tuple[TopicState, list[dict[str, Any]]]:
    """Both witnesses (and Kafka's Java consumer) on one topic; and the audit's view of
    each committable in this topic (a multi-topic one is judged over all its topics)."""
    settings = {"bootstrap.servers": w.cluster.bootstrap_servers}
    report = audit_topic(protocol, topic, done, duplicates=True)
    seen = read_committed(settings, topic)
    java = java_read_committed(w.cluster.bootstrap_servers, topic) if config.java_witness else None
    return TopicState(
        topic=topic,
        expected=expected,
        audit={
            **report.totals,
            "extra_copies": (report.duplicates or {}).get("extra_copies", 0),
        },
        audit_unfinished=[],
        visible={k.decode(): n for k, n in seen.keys.items()},
        stalled=[str(p) for p in seen.stalled],
        java_records=java.total if java else None,
        java_keys=dict(java.keys) if java else {},
    ), list(report.committables)


def unfinished(views: list[dict[str, Any]]) -> list[str]:
    """Committables not committed in full, judged over every topic they span: the audit
    of one topic sees only that topic's records of a multi-topic transaction, so the
    committed records of every topic are summed against its ``expected`` (all topics)."""
    by_txn: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for view in views:
        by_txn.setdefault((view["transactional_id"], view["producer_id"]), []).append(view)
    found = []
    for (tid, _), seen in sorted(by_txn.items(), key=lambda item: str(item[0])):
        present = [v for v in seen if v["state"] not in ("MISSING", "EMPTY")]
        committed = sum(v["committed"] for v in seen)
        states = sorted({v["state"] for v in present}) or ["MISSING"]
        if states != ["COMMITTED"] or committed != seen[0]["expected"]:
            found.append(f"{tid}: {'/'.join(states)}, {committed} of {seen[0]['expected']}")
    return found


def read_final_state(w: World, config: SoakConfig, days: dict[str, str]) -> tuple[FinalState, dict]:
    """Ask every witness on every topic of every export; returns the state and the ledger's
    batches and outcomes. ``days``: day -> the export kind that exported it."""
    runs = w.runs()
    run_states = {r["day"]: r["state"] for r in runs}
    settings = {"bootstrap.servers": w.cluster.bootstrap_servers}
    batch_of: dict[str, tuple[str, int | None, int] | None] = dict.fromkeys(days)
    others, topics, leased = [], [], []
    ledger_view: dict[str, Any] = {"batches": [], "outcomes": {}}
    with (
        Ledger(w.deployment.ledger_url) as ledger,
        KafkaProtocol(settings, timeout_ms=10_000) as protocol,
    ):
        for export in w.exports:
            mine = sorted(day for day, kind in days.items() if kind == export.kind)
            batches = ledger.recent(export.export_id, limit=10_000)
            parts = {b.run_key: ledger.participants(export.export_id, b.run_key) for b in batches}
            for b in batches:
                if _day(b.run_key) in mine:
                    batch_of[_day(b.run_key)] = (
                        b.state.value,
                        b.source_rows,
                        len(parts[b.run_key]),
                    )
                else:
                    others.append(f"{export.kind} {b.run_key}")
            done = [p.committable for ps in parts.values() for p in ps]
            views: list[dict[str, Any]] = []
            mine_topics = []
            for topic, rows in export.per_topic(config.rows).items():
                expected = dict.fromkeys(mine, rows)
                topic_state, topic_views = _topic_state(w, config, protocol, topic, expected, done)
                mine_topics.append(topic_state)
                views += topic_views
            mine_topics[0].audit_unfinished = unfinished(views)
            topics += mine_topics
            leased += [
                f"{lease.transactional_id} -> {lease.run_key}"
                for lease in ledger.leases(export.prefix)
                if lease.leased
            ]
            ledger_view["batches"] += [{"export": export.kind, **b.summary()} for b in batches]
            ledger_view["outcomes"].update(
                {
                    f"{export.kind} {key}": [
                        {
                            "index": p.index,
                            "id": p.transactional_id,
                            "state": p.state.value,
                            "reason": p.reason,
                        }
                        for p in ps
                    ]
                    for key, ps in parts.items()
                }
            )
    state = FinalState(
        days=days,
        rows_per_day=config.rows,
        partitions=config.partitions,
        run_states=run_states,
        batches=batch_of,
        other_batches=sorted(others),
        topics=topics,
        open_transactions=_open_transactions(w),
        leased=leased,
    )
    return state, ledger_view


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Window):
        return value.to_dict()
    return str(value)


def _strike_line(fault: Fault, event: dict[str, Any]) -> str:
    live = event.get("live") or {}
    seen = "work seen" if live.get("any") else "no work seen"
    mark = "HIT" if event["hit"] else "MISS"
    return (
        f"  fault {fault.index} at {event['started_s']:.0f} s {fault.kind.value}"
        + (f" [{fault.target}]" if fault.target else "")
        + (f" (aimed {event['aimed_s']} s)" if event.get("aimed_s") else "")
        + f": {mark} ({seen}): {event.get('victim')}: {event['result']}"
        + (f": {event['error']}" if "error" in event else "")
    )


def _nemesis(w: World, config: SoakConfig, schedule: list[Fault], history: dict, log: Any) -> None:
    """Work through the schedule while any run is unfinished, one fault at a time."""
    nemesis = Nemesis(w, config)
    for fault in schedule:
        while w.now_s() < fault.at_s and not _all_final(w, config.intervals):
            w.deployment.check_alive()
            time.sleep(0.5)
        if _all_final(w, config.intervals):
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
                    "error": f"{exc!r}"[:500],
                    "result": "nemesis error",
                }
            )
            nemesis.heal()
        event["ended_s"] = w.now_s()
        history["faults"].append(event)
        log(_strike_line(fault, event))
    history["nemesis_s"] = w.now_s()
    history["heal"] = nemesis.heal()
    log(
        f"nemesis done after {history['nemesis_s']:.0f} s, {len(history['faults'])} strikes, "
        f"{sum(1 for e in history['faults'] if e['hit'])} hits; healed: {history['heal']}"
    )


def _rerun_failed(w: World, config: SoakConfig, history: dict, log: Any) -> bool:
    """Clear each failed run whole, as an operator would, at most :data:`RERUN_ROUNDS`
    times; whether every run then finished."""
    settled = _wait_final(w, config.intervals, config.settle_s)
    for round_ in range(1, RERUN_ROUNDS + 1):
        failed = [r for r in w.runs() if r["state"] == "failed"]
        if not failed:
            break
        for run in failed:
            logical = run["logical"].astimezone(UTC).isoformat()
            w.deployment.airflow(
                "tasks", "clear", run["dag_id"], "-s", logical, "-e", logical, "--yes", check=False
            )
            history["reruns"].append(
                {
                    "round": round_,
                    "dag_id": run["dag_id"],
                    "run_id": run["run_id"],
                    "at_s": w.now_s(),
                }
            )
        log(f"rerun round {round_}: {[r['run_id'] for r in failed]}")
        time.sleep(5)
        settled = _wait_final(w, config.intervals, config.settle_s)
    return settled


def _report(tally: dict[str, dict[str, int]], config: SoakConfig, log: Any) -> None:
    """The per-kind table: strikes, hits, hits on work in flight (and the minimum asked)."""
    log(f"  {'fault':<17} {'strikes':>7} {'hits':>5} {'in flight':>9}  asked")
    for kind, row in tally.items():
        log(
            f"  {kind:<17} {row['strikes']:>7} {row['hits']:>5} {row['in_flight']:>9}  "
            f">= {config.min_hits.get(kind, 0)}"
        )


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
            blocks = assign_days(_days(config, d.today), w.exports)
            days = {
                f"{day:%Y%m%d}": w.export_of(dag_id).kind
                for dag_id, block in blocks.items()
                for day in block
            }
            log(f"exports: {[(e.kind, e.dag_id, e.topics, e.writer) for e in w.exports]}")
            with OpenRecorder(w.cluster.bootstrap_servers, d.ledger_url, w.exports) as recorder:
                w.recorder = recorder
                w.began = time.monotonic()
                _backfill(w, blocks, config.concurrency)
                _nemesis(w, config, schedule, history, log)
                settled = _rerun_failed(w, config, history, log)
                finished_s = w.now_s()
                attempts = _attempts(w)
                windows = [
                    *task_windows(attempts, {e.dag_id: e.kind for e in w.exports}),
                    *recorder.windows(),
                ]
                history["recorder"] = {
                    "samples": recorder.samples,
                    "failed_samples": recorder.failed_samples,
                }
            classify_strikes(history["faults"], windows)
            tally = tally_strikes(history["faults"])
            log("strikes per kind, classified against each export's windows of work:")
            _report(tally, config, log)
            # Whatever is still open was left by something recovery should have finished.
            state, ledger_view = read_final_state(w, config, days)
            writers = _writers(w)
            # The export's anomalies first (the gravest), then where the nemesis proved nothing.
            anomalies = find_anomalies(state)
            anomalies += _writer_anomalies(w, writers, days)
            anomalies += find_nemesis_anomalies(history["faults"], config.min_hits)
            if not settled:
                anomalies.insert(0, f"runs not finished {config.settle_s:.0f} s after the heal")
            figures = {
                "seed": config.seed,
                "intervals": config.intervals,
                "exports": {
                    e.kind: sorted(k for k, v in days.items() if v == e.kind) for e in w.exports
                },
                "writers": writers,
                "topics": {t.topic: sum(t.expected.values()) for t in state.topics},
                "strikes": len(history["faults"]),
                "hits": sum(1 for e in history["faults"] if e["hit"]),
                "hits_in_flight": sum(1 for e in history["faults"] if e["in_flight"]),
                "by_kind": tally,
                "task_kills_by_target": _by_target(history["faults"]),
                "task_attempts": len(attempts),
                "failed_attempts": sum(
                    1 for a in attempts if a["state"] in ("failed", "up_for_retry")
                ),
                "reruns_after_heal": len(history["reruns"]),
                "anomalies": len(anomalies),
                "setup_s": round(setup_s, 1),
                "nemesis_s": round(history["nemesis_s"], 1),
                "finished_s": round(finished_s, 1),
                "records_committed": sum(t.audit.get("committed") or 0 for t in state.topics),
                "records_aborted": sum(t.audit.get("aborted") or 0 for t in state.topics),
            }
            history.update(
                {
                    "windows": [win.to_dict() for win in windows],
                    "task_attempts": attempts,
                    "verdicts": _verdicts(w),
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


def _by_target(events: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Task kills per target: strikes, hits, hits on work in flight."""
    return tally_strikes([{**e, "kind": e["target"]} for e in events if e["kind"] == "kill_task"])
