"""The export through the operator on a Spark standalone cluster, a worker killed mid-prepare.

A standalone master and two one-core workers (``spark-class``, tests/support/spark.py);
the ``spark`` connection points at ``spark://127.0.0.1:<port>``, so the prepare task's
spark-submit runs its driver here (client mode) and its executors on the workers; the
manifest goes to ``manifest_dir``, a path the driver and the Airflow task both see.

When partition 0's first attempt has written its first records (its transaction open,
records in the log), the worker running it is killed with SIGKILL together with its
executor and Python workers (the worker daemon's process group: the machine, as Spark
sees it). What happens is asserted, not assumed: Spark loses the executor, runs the task
again on the other worker, the retry re-initialises the same transactional id (which
fences and aborts the dead attempt's transaction), and the run commits exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka2pc.ledger import BatchState, ParticipantState
from tests.airflow import dagtest
from tests.conftest import assert_exactly_once
from tests.faults.conftest import QUICK_SPARK
from tests.faults.injected import spark_dies
from tests.support.spark import standalone_cluster

pytestmark = pytest.mark.slow

ROWS = 4_000
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def worker_daemon_of(pid: int) -> int:
    """The standalone Worker daemon whose executor runs the Python worker ``pid``."""
    while pid > 1:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        if WORKER_CLASS.encode() in command:
            return pid
        pid = _parent(pid)
    raise AssertionError("the paused Python worker has no standalone Worker ancestor")


class WorkerKiller(threading.Thread):
    """Waits for the paused task's marker, then SIGKILLs its worker's process group."""

    def __init__(self, marker: Path, timeout_s: float = 300.0) -> None:
        super().__init__(daemon=True)
        self.marker = marker
        self.timeout_s = timeout_s
        self.facts: dict[str, Any] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            deadline = time.monotonic() + self.timeout_s
            while not self.marker.exists():
                if time.monotonic() > deadline:
                    raise TimeoutError("the prepare never reached partition 0's first batch")
                time.sleep(0.1)
            time.sleep(0.2)  # the marker is written in one call; let it land
            facts = json.loads(self.marker.read_text())
            worker = worker_daemon_of(facts["pid"])
            group = os.getpgid(worker)
            os.killpg(group, signal.SIGKILL)
            self.facts = {**facts, "worker_pid": worker, "killed_group": group}
        except BaseException as exc:
            self.error = exc


def test_prepare_on_spark_standalone_with_a_worker_killed_mid_prepare_commits_exactly_once(
    export_dag, run_export, make_topic, protocol, bootstrap, ledger, monkeypatch, tmp_path
):
    topic = make_topic(3)
    faults = tmp_path / "faults"
    faults.mkdir()
    manifests = tmp_path / "manifests"
    logs = tmp_path / "spark"
    logs.mkdir()
    with standalone_cluster(workers=2, log_dir=logs) as master:
        for key, value in dagtest.spark_connection_env(master).items():
            monkeypatch.setenv(key, value)
        dag = export_dag(
            topic=topic,
            rows=ROWS,
            num_partitions=2,
            manifest_dir=str(manifests),
            spark_conf={
                **QUICK_SPARK,
                "spark.sql.shuffle.partitions": "2",
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.executor.memory": "512m",
                "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
            },
            operator_classes={"prepare": spark_dies(str(faults), "pause", 0)},
            # The fault pauses a Python worker, whose process group the killer ends (the
            # JVM writer's killed executor: tests/faults/test_spark_killed.py).
            writer="python",
        )
        killer = WorkerKiller(faults / "spark-pause.killed")
        killer.start()
        began = time.monotonic()
        result = run_export(dag, day=5)
        run_s = time.monotonic() - began
        killer.join(timeout=5)
    assert killer.error is None, killer.error
    assert killer.facts, "no worker was killed"

    assert result.state == "success", result
    assert result.tasks == {
        "recover": "success",
        "prepare": "success",
        "decide": "success",
        "commit": "success",
        "abort": "skipped",
    }
    assert result.tries["prepare"] == 1, result  # Spark recovered; Airflow did not retry
    prepared = result.xcom("prepare")
    # The manifest was written where both sides see it.
    written = sorted(manifests.rglob("*.json"))
    assert written, list(manifests.rglob("*"))
    manifest = json.loads(written[-1].read_text())
    attempts = manifest["metadata"]["attempts"]
    with ledger.open() as store:
        batch = store.get(prepared["export_id"], prepared["run_key"])
        parts = store.participants(prepared["export_id"], prepared["run_key"])
    assert batch.state is BatchState.COMMITTED and batch.attempt == 1
    assert [p.state for p in parts] == [ParticipantState.COMMITTED] * 2
    committables = [p.committable for p in parts]
    # Partition 0's id was initialised again after the kill (each InitProducerId bumps the
    # epoch: the prepare's fence, the killed attempt, then the retry): the retry fenced the
    # dead attempt. Partition 1 was written once, after the fence.
    epochs = [c.producer_epoch for c in committables]
    assert committables[1].producer_epoch == 1 and committables[0].producer_epoch >= 2, epochs
    # The killed attempt's records are in the log, aborted by the retry's fence.
    report, seen = assert_exactly_once(protocol, bootstrap, topic, *committables, committed=ROWS)
    assert report.totals["aborted"] >= killer.facts["rows"] > 0, report.to_dict()
    master_log = (logs / "master.log").read_text()
    print(
        f"\nworker killed: {killer.facts}; task attempt numbers {attempts}, epochs {epochs}; "
        f"aborted {report.totals['aborted']}, committed {report.totals['committed']}; "
        f"read_committed {seen.total}; run {run_s:.0f} s; "
        f"master saw the worker lost: {'Removing worker' in master_log or 'lost' in master_log}"
    )
