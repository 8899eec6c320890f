"""The fault rig: export runs in child processes, and what they leave behind.

Each run is ``python -m tests.faults.child SPEC`` (``dag.test()`` in its own process,
every task of the run in it), so a fault can kill the Airflow task process for real. The
test process never imports Airflow: it reads the ledger (no Airflow imports), the
broker (audit + read_committed) and the child's printed result.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from airflow_provider_kafka2pc.ledger import Batch, BatchState, Ledger
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.transaction.audit import audit_topic
from tests.airflow import dagtest
from tests.airflow.env import without_airflow
from tests.conftest import assert_exactly_once

REPO = Path(__file__).resolve().parents[2]
ROWS = 300
#: Spark settings that halve a tiny job's time on a busy machine: the driver JVM (driver
#: and executor in local mode) compiles with C1 only and collects with the serial GC.
QUICK_SPARK = {
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.ui.enabled": "false",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}
#: How long one child run may take (a Spark job on a busy 2-core machine included).
RUN_TIMEOUT_S = 300.0
#: Cases whose fault is in the write path run under both writers: the default (``auto``,
#: the JVM writer on spark-submit) and the Python writer. The others run the default only:
#: by the time they strike, the writer has returned its committables, which are the same.
BOTH_WRITERS = pytest.mark.parametrize("writer", ["auto", "python"], ids=["jvm", "python"])


@dataclass
class ExportRun:
    """A finished child: its exit code, ``dag.test()``'s result (None when killed), output."""

    returncode: int
    result: dict[str, Any] | None
    output: str = field(repr=False)

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL

    @property
    def state(self) -> str | None:
        return None if self.result is None else self.result["state"]

    @property
    def tasks(self) -> dict[str, str | None]:
        return {} if self.result is None else self.result["tasks"]

    def tail(self, chars: int = 4000) -> str:
        return self.output[-chars:]


class Forked:
    """A run forked by the :class:`ForkServer`, seen as much of a :class:`subprocess.Popen`
    as :class:`Child` uses: its pid, ``poll``, ``wait``, ``kill`` and ``returncode``."""

    def __init__(self, pid: int, status: Path) -> None:
        self.pid = pid
        self.status = status
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self.status.exists():
            self.returncode = int(self.status.read_text())
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"forked run {self.pid}", timeout or 0)
            time.sleep(0.05)
        return self.returncode  # type: ignore[return-value]

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)


class ForkServer:
    """One ``tests.faults.forkserver`` per test process: each run forked from a process
    that already imported Airflow and built its Execution API app (about 11 CPU-s a run
    less, measured). ``KAFKA2PC_TEST_FORKSERVER=0`` starts each run as its own process."""

    def __init__(self, root: Path) -> None:
        env = without_airflow(PYTHONPATH=str(REPO))
        self.log = root / "forkserver.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.faults.forkserver", str(root)],
                cwd=REPO,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=out,
                text=True,
            )
        assert self._line() == "ready", self.log.read_text()[-3000:]

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        assert line, f"the fork server ended: {self.log.read_text()[-3000:]}"
        return line

    def start(self, spec: dict[str, Any], env: dict[str, str], log: Path) -> Forked:
        assert self.process.stdin is not None
        status = log.with_suffix(".status")
        order = {"spec": spec, "env": env, "log": str(log), "status": str(status)}
        self.process.stdin.write(json.dumps(order) + "\n")
        self.process.stdin.flush()
        return Forked(int(self._line()), status)

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_SERVER: list[ForkServer] = []


def fork_server(root: Path) -> ForkServer | None:
    """This test process's fork server, started on first use (None: runs are processes)."""
    if os.environ.get("KAFKA2PC_TEST_FORKSERVER", "1") == "0":
        return None
    if not _SERVER:
        _SERVER.append(ForkServer(root))
        # At the test process's exit (the cluster tier's rig uses it too; the server also
        # ends when its stdin closes).
        atexit.register(_SERVER[0].stop)
    return _SERVER[0]


class Child:
    """A running export run; :meth:`wait` returns its :class:`ExportRun`."""

    def __init__(self, process: subprocess.Popen[bytes] | Forked, log: Path) -> None:
        self.process = process
        self.log = log

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait(self, timeout_s: float = RUN_TIMEOUT_S) -> ExportRun:
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(
                f"export run still going after {timeout_s} s: {self.log}"
            ) from None
        output = self.log.read_text(errors="replace")
        result = dagtest.result_in(output)
        return ExportRun(self.process.returncode, result, output)


class FaultRig:
    """Runs one export (one DAG, one topic) in child processes against one broker and ledger.

    :param settings: librdkafka settings of the broker the export writes to.
    :param ledger_url: where the ledger is (SQLite file or PostgreSQL).
    """

    def __init__(
        self,
        root: Path,
        *,
        dag_id: str,
        topic: str,
        settings: Mapping[str, Any],
        ledger_url: str,
        spark_master: str = "local[2]",
        writer: str | None = None,
    ) -> None:
        self.root = root
        self.writer = writer
        self.dag_id = dag_id
        self.topic = topic
        self.settings = dict(settings)
        self.ledger_url = ledger_url
        self.spark_master = spark_master
        self.home = root / "airflow"
        self.fault_dir = root / "faults"
        self.fault_dir.mkdir(parents=True, exist_ok=True)
        self._children = 0

    @property
    def export_id(self) -> str:
        return f"{self.dag_id}.{dagtest.GROUP_ID}"

    @staticmethod
    def run_key(day: int) -> str:
        """The export's default run key for ``dag.test()``'s manual run of ``day``, whose
        data interval starts and ends at the logical date."""
        start = dagtest.logical_date(day).isoformat()
        return f"{start}/{start}"

    @staticmethod
    def source_keys(day: int, rows: int = ROWS) -> set[bytes]:
        """The record keys of interval ``day`` (see :func:`dagtest.orders_source`)."""
        first = (dagtest.logical_date(day).day - 1) * dagtest.DAY_KEYS
        return {str(i).encode() for i in range(first, first + rows)}

    def env(self, spark_master: str | None = None) -> dict[str, str]:
        env = without_airflow(PYTHONPATH=str(REPO))
        env.update(dagtest.kafka_connection_env(self.settings))
        env.update(dagtest.spark_connection_env(spark_master or self.spark_master))
        env.update(ledger_connection_env(self.ledger_url))
        return env

    def start(
        self,
        day: int,
        *,
        faults: Mapping[str, list[Any]] | None = None,
        home: Path | None = None,
        spark_master: str | None = None,
        **spec: Any,
    ) -> Child:
        """Start one run of interval ``day`` (``faults``: see :mod:`tests.faults.injected`)."""
        self._children += 1
        writer = {"writer": self.writer} if self.writer else {}
        options = {"spark_conf": QUICK_SPARK, **writer, **spec.pop("options", {})}
        full = {
            "home": str(home or self.home),
            "dag_id": self.dag_id,
            "topic": self.topic,
            "day": day,
            "rows": ROWS,
            "num_partitions": 3,
            "fault_dir": str(self.fault_dir),
            "faults": dict(faults or {}),
            "options": options,
            **spec,
        }
        log = self.root / f"run-{self._children}.log"
        server = fork_server(self.root.parent)
        if server is not None:
            return Child(server.start(full, self.env(spark_master), log), log)
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.faults.child", json.dumps(full)],
                cwd=REPO,
                env=self.env(spark_master),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        return Child(process, log)

    def run(self, day: int, **kwargs: Any) -> ExportRun:
        return self.start(day, **kwargs).wait()

    def reached(self, point: str, child: Child, timeout_s: float = RUN_TIMEOUT_S) -> dict:
        """Wait until ``child`` paused at ``point``; what it said there."""
        marker = self.fault_dir / f"{point}.reached"
        deadline = time.monotonic() + timeout_s
        while not marker.exists():
            if not child.alive():
                done = child.wait()
                raise AssertionError(f"the run ended before {point}:\n{done.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{point} not reached within {timeout_s} s")
            time.sleep(0.1)
        return json.loads(marker.read_text())

    def go(self, point: str) -> None:
        (self.fault_dir / f"{point}.go").touch()

    def killed_at(self, point: str) -> dict[str, Any]:
        """What the process said just before it was killed at ``point``."""
        marker = self.fault_dir / f"{point}.killed"
        assert marker.exists(), f"nothing was killed at {point}"
        return json.loads(marker.read_text())

    def assert_writer(self, run: ExportRun) -> None:
        """The run's prepare used this rig's writer (``auto``: the JVM one, spark-submit)."""
        used = "python" if self.writer == "python" else "jvm"
        assert f"by the {used} writer" in run.output, run.tail()

    def ledger(self) -> Ledger:
        return Ledger(self.ledger_url)

    def batch(self, day: int) -> Batch | None:
        with self.ledger() as store:
            return store.get(self.export_id, self.run_key(day))

    def participants(self, day: int) -> list[Any]:
        with self.ledger() as store:
            return store.participants(self.export_id, self.run_key(day))


def assert_exported_once(
    protocol: KafkaProtocol,
    bootstrap: str,
    rig: FaultRig,
    *days: int,
    aborted: int | None = None,
) -> None:
    """The end state every fault test must reach: the audit and a read_committed consumer
    agree that exactly the source rows of ``days`` are committed, once each, nothing is
    open; each batch is COMMITTED in the ledger and no pooled id is still leased."""
    expected = set().union(*(rig.source_keys(day) for day in days))
    _, seen = assert_exactly_once(
        protocol, bootstrap, rig.topic, committed=len(expected), aborted=aborted
    )
    assert set(seen.keys) == expected, "committed keys are not the source's keys"
    prefixes = set()
    with rig.ledger() as store:
        for day in days:
            batch = store.get(rig.export_id, rig.run_key(day))
            assert batch is not None and batch.state is BatchState.COMMITTED, batch
            prefixes.add(batch.id_prefix)
        held = [lease for lease in store.leases() if lease.leased]
    assert held == [], held
    for prefix in prefixes:
        assert protocol.list_transactions(prefix=prefix, states=["Ongoing"]) == []


def ledger_connection_env(url: str) -> dict[str, str]:
    """The ledger connection for a SQLite file or a PostgreSQL URL (its options kept)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return dagtest.ledger_connection_env(Path(parsed.database))
    conn = {
        "conn_type": "postgres",
        "host": parsed.host,
        "port": parsed.port,
        "login": parsed.username,
        "schema": parsed.database,
        "extra": {k: v for k, v in parsed.query.items() if isinstance(v, str)},
    }
    if parsed.password:
        conn["password"] = parsed.password
    key = f"AIRFLOW_CONN_{dagtest.LEDGER_CONN_ID.upper()}"
    return {key: json.dumps(conn)}


def dag_id_for(request: pytest.FixtureRequest) -> str:
    name = request.node.name
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:180]


@pytest.fixture
def rig(
    tmp_path: Path, request: pytest.FixtureRequest, settings: dict[str, Any], make_topic
) -> FaultRig:
    """An export to a fresh 3-partition topic on the session broker, SQLite ledger; the
    test's ``writer`` parameter (:data:`BOTH_WRITERS`) when it has one, else the default."""
    params = getattr(request.node, "callspec", None)
    return FaultRig(
        tmp_path,
        dag_id=dag_id_for(request),
        topic=make_topic(3),
        settings=settings,
        ledger_url=f"sqlite:///{tmp_path / 'ledger.db'}",
        writer=params.params.get("writer") if params else None,
    )


@pytest.fixture
def make_rig(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """``make_rig(settings=..., topic=..., ledger_url=None)`` for a broker or ledger of the
    test's own."""

    def build(*, settings: Mapping[str, Any], topic: str, ledger_url: str | None = None):
        return FaultRig(
            tmp_path,
            dag_id=dag_id_for(request),
            topic=topic,
            settings=settings,
            ledger_url=ledger_url or f"sqlite:///{tmp_path / 'ledger.db'}",
        )

    yield build


# -- several topics in one export ---------------------------------------------------------


def routed_options(topics: list[str], rows: int = ROWS) -> dict[str, Any]:
    """``rig.start`` arguments of a multi-topic export: the orders source with a ``route``
    column sending order ``id`` to ``topics[id % n]`` (``topic_column`` + ``topics``)."""
    sql = dagtest.orders_source(rows)["sql"]
    names = ", ".join(f"'{t}'" for t in topics)
    route = f", element_at(array({names}), CAST(id % {len(topics)} + 1 AS INT)) AS route FROM"
    return {
        "topic": None,
        "options": {
            "source": {"sql": sql.replace(" FROM", route, 1)},
            "topic_column": "route",
            "topics": list(topics),
        },
    }


def keys_per_topic(rig: FaultRig, topics: list[str], day: int) -> dict[str, set[bytes]]:
    """Each topic's record keys of interval ``day`` (as :func:`routed_options` routes)."""
    return {
        topic: {k for k in rig.source_keys(day) if int(k) % len(topics) == i}
        for i, topic in enumerate(topics)
    }


def assert_exported_once_per_topic(
    protocol: KafkaProtocol,
    bootstrap: str,
    rig: FaultRig,
    topics: list[str],
    day: int,
    *,
    aborted: dict[str, int] | None = None,
) -> None:
    """:func:`assert_exported_once` on every topic of a multi-topic export: the audit and a
    read_committed consumer agree on each topic's own keys, once; the batch COMMITTED,
    nothing leased, nothing Ongoing under its prefix."""
    for topic, keys in keys_per_topic(rig, topics, day).items():
        _, seen = assert_exactly_once(
            protocol,
            bootstrap,
            topic,
            committed=len(keys),
            aborted=None if aborted is None else aborted[topic],
        )
        assert set(seen.keys) == keys, f"{topic}: committed keys are not its source keys"
    with rig.ledger() as store:
        batch = store.get(rig.export_id, rig.run_key(day))
        assert batch is not None and batch.state is BatchState.COMMITTED, batch
        held = [lease for lease in store.leases() if lease.leased]
    assert held == [], held
    assert protocol.list_transactions(prefix=batch.id_prefix, states=["Ongoing"]) == []


def open_and_aborted(protocol: KafkaProtocol, topics: list[str]) -> dict[str, dict[str, int]]:
    """Per topic, the audit's open and aborted records now."""
    return {
        t: {k: audit_topic(protocol, t, duplicates=True).totals[k] for k in ("open", "aborted")}
        for t in topics
    }
