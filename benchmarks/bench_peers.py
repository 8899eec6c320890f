"""kafka2pc against what users would pick instead: Spark's Kafka sink and Flink's exactly-once sink.

``make bench-peers``. On one local Apache Kafka broker, from the same generated parquet
files (``--rows`` records: a 16-byte key and a JSON value of about 130 bytes, in
``--partitions`` files), each system writes into a fresh topic of ``--partitions``
partitions, run as its user would run it:

- kafka2pc: spark-submit of the package's prepare application (``local[--cores]``,
  ``--partitions`` transactional ids, keyed by ``key``) with its defaults, as a user gets
  it (partitioning and writer ``auto``: for these files, the source's own splits and the
  JVM writer; what it took is printed beside its name), then ``kafka2pc commit`` of its
  manifest. Exactly once.
- Variants, each asking for one partitioning (``--partition-by``; the manifest must say
  it was used): "kafka2pc aligned" (a shuffle aligned with Kafka), "kafka2pc by hash" (a
  shuffle by hash: every transaction writes every Kafka partition) and "kafka2pc no
  shuffle" (the source's own splits, coalesced to one per transactional id;
  docs/partitioning.md). ``--kafka2pc-writers`` runs each once per named writer.
- Spark's Kafka sink: spark-submit of ``peer_apps/spark_sink.py``, ``df.write.format("kafka")``
  with ``org.apache.spark:spark-sql-kafka-0-10_2.13`` (resolved once by spark-submit
  ``--packages``, then passed as ``--jars`` so no run pays the resolution). At least once.
- Flink: ``peer_apps/flink_sql.py`` in PyFlink's own virtualenv, SQL INSERT from a filesystem
  table into a kafka table, ``'sink.delivery-guarantee'='exactly-once'``, BATCH mode,
  parallelism ``--cores``. Exactly once.
- On a warm Spark Connect server (``harness/connect.py``: started once per benchmark run
  from PySpark's own distribution, ``local[--cores]`` and the spark-submit runs' settings,
  Spark's Kafka sink jars on its class path; its start is printed apart, never in an
  export's time; the warm-up round is each Connect system's untimed first export):
  "kafka2pc on Connect (warm)", a client process (``peer_apps/connect_prepare.py``, what
  an Airflow prepare task on a ``spark_connect`` connection runs: a session, the prepare
  through the package's Connect path, the manifest written by the
  client; writer auto, which takes the JVM writer: the server has our jar), then
  ``kafka2pc commit``; and "Spark Kafka sink on Connect (warm)", the same
  ``peer_apps/spark_sink.py`` run as a Connect client (``SPARK_REMOTE``). Each timed from
  the client's launch to its end (kafka2pc: to the commit's end).
- Kafka's ProducerPerformance (``kafka-tools``): as many records of the same mean size in one
  transaction, the broker's ceiling on this machine. Its payload is random and keyless, so
  its output is checked by count only.

Every run is verified before any time is printed (log audit, read_committed consumer,
digest of keys and values against the source, per-partition counts equal to Java's murmur2
placement, hence equal across systems). Untimed warm-up round (``--warmup-rows``), then
``--rounds`` interleaved rounds. Printed: wall time, records/s, CPU of each system's
processes, the broker's CPU, kafka2pc's phases (from Spark's event log), and the ratios.

The peers are fetched on first use into ``~/.cache/kafka2pc/peers`` (minutes the first
time); a peer that cannot be had is reported and left out.

Run: ``python benchmarks/bench_peers.py [--rows 2000000 --partitions 8 --rounds 2]``: by
default kafka2pc with its defaults, Spark's sink, Flink and ProducerPerformance
(``--systems`` names others).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from harness import (
    Cluster,
    ConnectServer,
    CoreTimeline,
    Dataset,
    Expected,
    PeerUnavailable,
    Phase,
    Results,
    Round,
    Run,
    Side,
    add_cluster_arguments,
    add_subset_argument,
    checked,
    connect_server,
    driver_java_options,
    event_log_conf,
    interleave,
    kafka2pc_commit,
    machine_line,
    maven_jars,
    measure,
    now_ms,
    parse_subset,
    peers_root,
    positive_int,
    print_costs,
    print_results,
    profiled,
    python_venv,
    same_partition_counts,
    server_phases,
    setting,
    spark_phases,
    spark_submit,
    summed,
    task_spans,
    timeline,
    write_svg,
)

from airflow_provider_kafka2pc.spark.alignment import JAR
from airflow_provider_kafka2pc.spark.class_sharing import runs_until_mapped
from airflow_provider_kafka2pc.spark.job import spark_submit_binary
from airflow_provider_kafka2pc.spark.jvm_writer import kafka_clients_jar
from airflow_provider_kafka2pc.transaction.manifest import Manifest
from devtools.broker import fetch_kafka
from devtools.broker.distribution import java_binary
from devtools.spark_submit import submit_prepare

WORK_DIR = Path("/tmp/kafka2pc-bench/peers")
APPS = Path(__file__).resolve().parent / "peer_apps"
#: The command line the package installs beside this interpreter.

SPARK_KAFKA = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
FLINK = "apache-flink==2.3.0"
FLINK_JARS = (
    "org.apache.flink:flink-sql-connector-kafka:5.0.0-2.2",
    # The filesystem table's parquet format, and the Hadoop classes it needs.
    "org.apache.flink:flink-sql-parquet:2.3.0",
    "org.apache.hadoop:hadoop-client-api:3.4.1",
    "org.apache.hadoop:hadoop-client-runtime:3.4.1",
)
KAFKA_TOOLS = "org.apache.kafka:kafka-tools:4.3.1"

KAFKA2PC = "kafka2pc"
KAFKA2PC_ALIGNED = "kafka2pc aligned"
KAFKA2PC_HASH = "kafka2pc by hash"
KAFKA2PC_UNSHUFFLED = "kafka2pc no shuffle"
SPARK_SINK = "Spark Kafka sink"
KAFKA2PC_CONNECT = "kafka2pc on Connect (warm)"
SPARK_SINK_CONNECT = "Spark Kafka sink on Connect (warm)"
#: The systems that run as clients of the one warm Spark Connect server.
CONNECT_SYSTEMS = (KAFKA2PC_CONNECT, SPARK_SINK_CONNECT)
FLINK_SINK = "Flink KafkaSink"
PRODUCER_PERF = "ProducerPerformance"
#: The prepare's writer when none is named: the application's own choice (``auto``).
AUTO_WRITER = "auto"
JVM_WRITER = "jvm"
WRITERS = (AUTO_WRITER, "python", JVM_WRITER)
KAFKA2PC_VARIANTS = (KAFKA2PC, KAFKA2PC_ALIGNED, KAFKA2PC_HASH, KAFKA2PC_UNSHUFFLED)
#: What each variant asks for (``--partition-by``); the application's default: none.
PARTITION_BY = {
    KAFKA2PC_ALIGNED: "kafka-aligned",
    KAFKA2PC_HASH: "hash",
    KAFKA2PC_UNSHUFFLED: "source-splits",
}
#: What runs when ``--systems`` is not given: the export as users get it, and what they
#: would pick instead.
DEFAULT_SYSTEMS = (KAFKA2PC, SPARK_SINK, FLINK_SINK, PRODUCER_PERF)
GUARANTEES = {
    KAFKA2PC: "exactly once: spark-submit prepare with the application's defaults "
    "(partitioning and writer auto) + kafka2pc commit",
    KAFKA2PC_ALIGNED: "the same, a shuffle aligned with Kafka (--partition-by kafka-aligned)",
    KAFKA2PC_HASH: "the same, a shuffle by hash: each transaction writes every partition "
    "(--partition-by hash)",
    KAFKA2PC_UNSHUFFLED: "the same, one transaction per source split, no shuffle "
    "(--partition-by source-splits; docs/partitioning.md)",
    SPARK_SINK: "at least once: spark-submit, df.write.format('kafka')",
    KAFKA2PC_CONNECT: "exactly once: a Connect client runs the prepare (writer auto: the JVM "
    "writer through the server's kafka2pc DataSource, aligned with Kafka) on the warm server "
    "+ kafka2pc commit",
    SPARK_SINK_CONNECT: "at least once: the same df.write.format('kafka') app as a Connect "
    "client of the warm server",
    FLINK_SINK: "exactly once: PyFlink SQL, BATCH, exactly-once sink",
    PRODUCER_PERF: "one transaction, keyless random payload: the broker's ceiling",
}


def with_writer(variant: str, writer: str) -> str:
    """The system name of a kafka2pc variant run with ``writer`` (the default keeps its name)."""
    return variant if writer == AUTO_WRITER else f"{variant} [{writer} writer]"


def kafka2pc_systems(variants: list[str], writers: list[str]) -> dict[str, tuple[str, str]]:
    """Each kafka2pc system to run: name -> (variant, writer)."""
    return {with_writer(v, w): (v, w) for v in variants for w in writers}


# -- fetching the peers ------------------------------------------------------------------------


def spark_kafka_jars() -> list[Path]:
    """Resolve Spark's Kafka sink once with spark-submit ``--packages`` (Spark's own Ivy)."""
    ivy = peers_root() / "spark-ivy"
    jars = ivy / "jars"
    if not (ivy / ".complete").exists():
        ivy.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [
                spark_submit_binary(),
                "--packages",
                SPARK_KAFKA,
                "--conf",
                f"spark.jars.ivy={ivy}",
                str(APPS / "spark_sink.py"),
                "--help",  # the application only prints its usage: resolution is the point
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0 or not list(jars.glob("*.jar")):
            tail = "\n".join(done.stderr.strip().splitlines()[-8:])
            raise PeerUnavailable(f"spark-submit --packages {SPARK_KAFKA} failed:\n{tail}")
        (ivy / ".complete").write_text(SPARK_KAFKA + "\n")
    return sorted(jars.glob("*.jar"))


def fetch_peers(wanted: list[str]) -> dict[str, object]:
    """Each wanted peer's artifacts; a peer that cannot be had is reported and dropped."""
    fetchers: dict[str, Callable[[], object]] = {
        SPARK_SINK: spark_kafka_jars,
        # The server gets the sink's jars on its class path (local paths, no --packages).
        SPARK_SINK_CONNECT: spark_kafka_jars,
        FLINK_SINK: lambda: (
            python_venv("flink-2.3.0", [FLINK]),
            maven_jars("flink-jars-2.3.0", FLINK_JARS, transitive=False),
        ),
        PRODUCER_PERF: lambda: maven_jars("kafka-tools-4.3.1", [KAFKA_TOOLS]),
    }
    got: dict[str, object] = {}
    for name in wanted:
        if name not in fetchers:
            continue
        start = time.perf_counter()
        try:
            got[name] = fetchers[name]()
        except (PeerUnavailable, subprocess.TimeoutExpired, OSError) as exc:
            print(f"{name}: NOT AVAILABLE, left out: {exc}", flush=True)
            continue
        print(f"{name}: ready ({time.perf_counter() - start:.0f} s)", flush=True)
    return got


# -- the systems -------------------------------------------------------------------------------


class Peers:
    """The four sides, writing the same dataset into fresh topics of one broker."""

    def __init__(
        self, args: argparse.Namespace, cluster: Cluster, peers: dict[str, object]
    ) -> None:
        self.args, self.cluster, self.peers = args, cluster, peers
        self.full = Dataset(args.rows)
        self.warm = Dataset(min(args.rows, args.warmup_rows))
        self.work = WORK_DIR / cluster.prefix
        self.work.mkdir(parents=True, exist_ok=True)
        self.master = f"local[{args.cores}]"
        #: The warm Spark Connect server (:meth:`start_connect`), when a system needs one.
        self.server: ConnectServer | None = None

    def start_connect(self, stack: ExitStack) -> None:
        """Start the warm Connect server when a Connect system was chosen (stopped by
        ``stack``, also on failure); its start-up time is printed here, apart."""
        wanted = KAFKA2PC_CONNECT in self.args.systems or (
            SPARK_SINK_CONNECT in self.args.systems and SPARK_SINK_CONNECT in self.peers
        )
        if not wanted:
            return
        jars = list(self.peers.get(SPARK_SINK_CONNECT, []))
        if KAFKA2PC_CONNECT in self.args.systems:
            # Our DataSource (the JVM writer on Connect) and a kafka-clients: the sink's when
            # it is there (one kafka-clients on the class path), else the JVM writer's.
            jars.append(JAR)
            if not any(
                j.name.startswith(("kafka-clients", "org.apache.kafka_kafka-clients")) for j in jars
            ):
                jars.append(kafka_clients_jar())
        print(f"starting the Spark Connect server ({self.master})", flush=True)
        self.server = stack.enter_context(
            connect_server(self.work / "connect-server", master=self.master, jars=jars)  # type: ignore[arg-type]
        )
        print(
            f"Spark Connect server: listening at {self.server.url} after "
            f"{self.server.start_seconds:.1f} s (launch of start-connect-server.sh to the port "
            f"accepting clients; paid once, in no export's time)",
            flush=True,
        )

    def _others(self) -> list[int]:
        """What a system that does not use the Connect server leaves out of its CPU: the
        server (idle meanwhile, but alive)."""
        return [self.server.pid] if self.server is not None else []

    def prepare_data(self) -> None:
        for dataset in (self.warm, self.full):
            start = time.perf_counter()
            dataset.parquet(self.args.partitions)
            dataset.digest()
            dataset.partition_counts(self.args.partitions)
            print(
                f"dataset {dataset.rows:,} rows ({dataset.record_bytes:.0f} B key + value): "
                f"{dataset.parquet(self.args.partitions)} ({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
        self.full.read_through(self.args.partitions)  # in the page cache before round 1

    def sides(self) -> dict[str, Side]:
        variants = [v for v in KAFKA2PC_VARIANTS if v in self.args.systems]
        sides: dict[str, Side] = {
            name: (lambda rnd, v=variant, w=writer: self.kafka2pc(rnd, v, w))
            for name, (variant, writer) in kafka2pc_systems(variants, self.args.writers).items()
        }
        if self.server is not None and KAFKA2PC_CONNECT in self.args.systems:
            sides[KAFKA2PC_CONNECT] = self.kafka2pc_connect
        available = {
            SPARK_SINK: self.spark_sink,
            SPARK_SINK_CONNECT: self.spark_sink_connect,
            FLINK_SINK: self.flink,
            PRODUCER_PERF: self.producer_performance,
        }
        sides.update(
            {
                name: side
                for name, side in available.items()
                if name in self.peers and name in self.args.systems
            }
        )
        return sides

    def _dataset(self, rnd: Round) -> Dataset:
        return self.warm if rnd.warmup else self.full

    def _expected(self, data: Dataset, **overrides: Any) -> Expected:
        """The source's rows, digest and Java placement, unless ``overrides`` say otherwise."""
        expected = Expected(
            data.rows,
            digest=data.digest(),
            partition_counts=data.partition_counts(self.args.partitions),
        )
        return dataclasses.replace(expected, **overrides)

    def _files(self, rnd: Round, side: str) -> Path:
        # Only letters, digits and dashes: Spark reads the event-log directory as a Hadoop
        # path, where brackets (as in "kafka2pc [jvm-writer]") are glob characters.
        slug = re.sub(r"[^a-z0-9]+", "-", side.lower()).strip("-")
        path = self.work / f"{rnd.label}-{slug}"
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    def kafka2pc(self, rnd: Round, side: str = KAFKA2PC, writer: str = AUTO_WRITER) -> Run:
        if rnd.label == "warmup" and runs_until_mapped({}, spark_submit_binary()) == 2:
            # The driver's class archive (spark/class_sharing.py) is written by the second
            # run that finds the cache: this extra untimed run leaves the trace, the warm-up
            # writes the archive, the timed rounds map it, as on a worker after two exports.
            self.kafka2pc(Round(0, "warmup-archive"), side, writer)
        name = with_writer(side, writer)
        data, files = self._dataset(rnd), self._files(rnd, name)
        slug = name.replace(" ", "-").replace("[", "").replace("]", "")
        topic = self.cluster.topic(f"{rnd.label}-{slug}", self.args.partitions)
        ids = [f"{topic}-{i}" for i in range(self.args.partitions)]
        manifest = files / "manifest.json"
        events = files / "events"
        arguments = [
            *("--source-path", str(data.parquet(self.args.partitions))),
            *("--source-format", "parquet", "--key-column", "key"),
            *("--value-column", "value", "--topic", topic),
            *("--bootstrap-servers", self.cluster.servers),
            *("--transactional-ids", ",".join(ids), "--job-label", topic),
            *("--manifest", str(manifest)),
            # A variant asks for its partitioning, a named writer for itself; "kafka2pc"
            # with the default writer passes neither: the application's defaults (auto).
            *(("--partition-by", PARTITION_BY[side]) if side in PARTITION_BY else ()),
            *(("--writer", writer) if writer != AUTO_WRITER else ()),
        ]
        submit = {
            "master": self.master,
            "conf": {**event_log_conf(events), **driver_java_options(f"{files.name}-kafka2pc")},
            "log_path": files / "spark-submit.log",
            "kafka_config": dict(self.args.kafka2pc_settings) or None,
        }
        with measure(self.cluster.broker_pid, exclude=self._others()) as meter:
            started = now_ms()
            submitted = submit_prepare(arguments, **submit)
            prepared_ms = now_ms()
            if submitted.returncode != 0:
                summary = submitted.stdout.strip().splitlines()[-1:] or ["no output"]
                raise SystemExit(
                    f"kafka2pc prepare failed (exit {submitted.returncode}: {summary[0]}); "
                    f"see {files / 'spark-submit.log'}"
                )
            committed = kafka2pc_commit(self.cluster.servers, manifest)
            ended = now_ms()
        if committed.returncode != 0:
            raise SystemExit(f"kafka2pc commit failed: {committed.stdout} {committed.stderr}")
        batch = Manifest.from_json(manifest.read_text())
        meta = batch.metadata
        if side in PARTITION_BY and meta.get("partitioning") != PARTITION_BY[side]:
            raise SystemExit(f"{topic} ({name}): partitioned {meta.get('partitioning')!r}")
        if writer != AUTO_WRITER and meta.get("writer") != writer:
            raise SystemExit(f"{topic} ({name}): written by the {meta.get('writer')!r} writer")
        parts = {
            "spark-submit (prepare)": (prepared_ms - started) / 1000,
            "in it: prepare_dataframe": (meta["finished_ms"] - meta["started_ms"]) / 1000,
            "kafka2pc commit": (ended - prepared_ms) / 1000,
            **timeline(events, started, prepared_ms),
        }
        phases = [*spark_phases(events, started, prepared_ms)]
        phases.append(Phase("kafka2pc commit", prepared_ms, ended))
        cores = self._cores(name, meter, started, ended, phases, task_spans(events))
        expected = self._expected(data, committables=batch.committables)
        took = f"{meta.get('partitioning')}, the {meta.get('writer')} writer"
        if self.args.kafka2pc_settings:
            took += ", " + ", ".join(f"{k}={v}" for k, v in self.args.kafka2pc_settings)
        return checked(
            self.cluster,
            name,
            meter,
            topic,
            expected,
            parts=parts,
            info={"cores": cores, "took": took},
        )

    def _cores(
        self,
        side: str,
        meter: Any,
        started: float,
        ended: float,
        phases: list[Phase],
        tasks: list[tuple[float, float, str]] = (),  # type: ignore[assignment]
    ) -> CoreTimeline:
        """Where the machine's cores went in this run (:mod:`harness.cores`)."""
        cores = os.cpu_count() or 1
        slots = self.args.cores
        return CoreTimeline(side, started, ended, cores, phases, meter.series, list(tasks), slots)

    def spark_sink(self, rnd: Round) -> Run:
        data, files = self._dataset(rnd), self._files(rnd, SPARK_SINK)
        topic = self.cluster.topic(f"{rnd.label}-spark-sink", self.args.partitions)
        events = files / "events"
        with measure(self.cluster.broker_pid, exclude=self._others()) as meter:
            started = now_ms()
            done = spark_submit(
                str(APPS / "spark_sink.py"),
                [
                    *("--source", str(data.parquet(self.args.partitions))),
                    *("--topic", topic, "--bootstrap-servers", self.cluster.servers),
                ],
                master=self.master,
                conf=event_log_conf(events),
                jars=self.peers[SPARK_SINK],  # type: ignore[arg-type]
                log_path=files / "spark-submit.log",
            )
            ended = now_ms()
        if done.returncode != 0:
            raise SystemExit(f"Spark's Kafka sink failed; see {files / 'spark-submit.log'}")
        expected = self._expected(data, transactional=False)
        parts = timeline(events, started, ended)
        phases = spark_phases(events, started, ended)
        cores = self._cores(SPARK_SINK, meter, started, ended, phases, task_spans(events))
        return checked(
            self.cluster, SPARK_SINK, meter, topic, expected, parts=parts, info={"cores": cores}
        )

    # -- on the warm Spark Connect server ---------------------------------------------------

    def _connect_client(
        self, command: list[str], log_path: Path, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """A Connect client process on this interpreter; stdout returned, stderr logged."""
        with log_path.open("w") as log:
            return subprocess.run(
                [sys.executable, *command],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                timeout=1800,
                env={**os.environ, **(env or {})},
            )

    def _check_server(self, name: str) -> ConnectServer:
        server = self.server
        if server is None or not server.alive():
            log = server.log if server is not None else "no server"
            raise SystemExit(f"{name}: the Spark Connect server is gone; see {log}")
        return server

    def kafka2pc_connect(self, rnd: Round) -> Run:
        """A Connect client runs the prepare (what the prepare task does on a
        ``spark_connect`` connection), then ``kafka2pc commit``: one export."""
        name = KAFKA2PC_CONNECT
        server = self._check_server(name)
        data, files = self._dataset(rnd), self._files(rnd, name)
        topic = self.cluster.topic(f"{rnd.label}-kafka2pc-connect", self.args.partitions)
        ids = [f"{topic}-{i}" for i in range(self.args.partitions)]
        manifest = files / "manifest.json"
        arguments = [
            str(APPS / "connect_prepare.py"),
            *("--remote", server.url),
            *("--source-path", str(data.parquet(self.args.partitions))),
            *("--source-format", "parquet", "--key-column", "key"),
            *("--value-column", "value", "--topic", topic),
            *("--bootstrap-servers", self.cluster.servers),
            *("--transactional-ids", ",".join(ids), "--job-label", topic),
            *("--manifest", str(manifest)),
            "--align-with-kafka",
        ]
        with measure(self.cluster.broker_pid) as meter:
            started = now_ms()
            prepared = self._connect_client(arguments, files / "client.log")
            prepared_ms = now_ms()
            if prepared.returncode != 0:
                raise SystemExit(
                    f"kafka2pc prepare on Connect failed (exit {prepared.returncode}); "
                    f"see {files / 'client.log'} and {server.log}"
                )
            committed = kafka2pc_commit(self.cluster.servers, manifest)
            ended = now_ms()
        if committed.returncode != 0:
            raise SystemExit(f"kafka2pc commit failed: {committed.stdout} {committed.stderr}")
        batch = Manifest.from_json(manifest.read_text())
        meta = batch.metadata
        aligned = PARTITION_BY[KAFKA2PC_ALIGNED]  # Connect has no source splits (py4j)
        if meta.get("partitioning") != aligned or meta.get("writer") != JVM_WRITER:
            raise SystemExit(
                f"{topic} ({name}): partitioned {meta.get('partitioning')!r}, "
                f"writer {meta.get('writer')!r} (expected {aligned}, {JVM_WRITER}: "
                f"{meta.get('writer_reason')})"
            )
        marks = client_marks(prepared.stdout)
        phases = server_phases(server.event_dir, started, prepared_ms)
        phases.append(Phase("kafka2pc commit", prepared_ms, ended))
        parts = {
            "Connect client (prepare)": (prepared_ms - started) / 1000,
            "in it: launch to imports done": (marks["imported"] - started) / 1000,
            "in it: session open": (marks["session"] - marks["imported"]) / 1000,
            "in it: prepare_dataframe": (meta["finished_ms"] - meta["started_ms"]) / 1000,
            "in it: session release to exit": (prepared_ms - marks["prepared"]) / 1000,
            "kafka2pc commit": (ended - prepared_ms) / 1000,
            **summed(phases[:-1]),
        }
        tasks = task_spans(server.event_dir, started, prepared_ms)
        cores = self._cores(name, meter, started, ended, phases, tasks)
        expected = self._expected(data, committables=batch.committables)
        return checked(
            self.cluster, name, meter, topic, expected, parts=parts, info={"cores": cores}
        )

    def spark_sink_connect(self, rnd: Round) -> Run:
        """``peer_apps/spark_sink.py`` unchanged, as a client of the warm server: PySpark's
        ``SparkSession.builder.getOrCreate()`` connects to ``SPARK_REMOTE``."""
        name = SPARK_SINK_CONNECT
        server = self._check_server(name)
        data, files = self._dataset(rnd), self._files(rnd, name)
        topic = self.cluster.topic(f"{rnd.label}-spark-sink-connect", self.args.partitions)
        with measure(self.cluster.broker_pid) as meter:
            started = now_ms()
            done = self._connect_client(
                [
                    str(APPS / "spark_sink.py"),
                    *("--source", str(data.parquet(self.args.partitions))),
                    *("--topic", topic, "--bootstrap-servers", self.cluster.servers),
                ],
                files / "client.log",
                env={"SPARK_REMOTE": server.url},
            )
            ended = now_ms()
        if done.returncode != 0:
            raise SystemExit(
                f"Spark's Kafka sink on Connect failed; see {files / 'client.log'} and {server.log}"
            )
        phases = server_phases(server.event_dir, started, ended)
        tasks = task_spans(server.event_dir, started, ended)
        cores = self._cores(name, meter, started, ended, phases, tasks)
        return checked(
            self.cluster,
            name,
            meter,
            topic,
            self._expected(data, transactional=False),
            parts=summed(phases),
            info={"cores": cores},
        )

    def flink(self, rnd: Round) -> Run:
        data, files = self._dataset(rnd), self._files(rnd, FLINK_SINK)
        topic = self.cluster.topic(f"{rnd.label}-flink", self.args.partitions)
        python, jars = self.peers[FLINK_SINK]  # type: ignore[misc]
        with (
            measure(self.cluster.broker_pid, exclude=self._others()) as meter,
            (files / "flink.log").open("w") as log,
        ):
            started = now_ms()
            done = subprocess.run(
                [
                    str(python),
                    str(APPS / "flink_sql.py"),
                    *("--source", str(data.parquet(self.args.partitions))),
                    *("--topic", topic, "--bootstrap-servers", self.cluster.servers),
                    *("--jars", ",".join(str(j) for j in jars)),
                    *("--transactional-id-prefix", topic, "--parallelism", str(self.args.cores)),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=1800,
            )
            ended = now_ms()
        if done.returncode != 0:
            raise SystemExit(f"the Flink job failed; see {files / 'flink.log'}")
        phases = flink_phases(files / "flink.log", started, ended)
        parts = {p.name: p.seconds for p in phases}
        cores = self._cores(FLINK_SINK, meter, started, ended, phases)
        return checked(
            self.cluster,
            FLINK_SINK,
            meter,
            topic,
            self._expected(data),
            parts=parts,
            info={"cores": cores},
        )

    def producer_performance(self, rnd: Round) -> Run:
        data, files = self._dataset(rnd), self._files(rnd, PRODUCER_PERF)
        topic = self.cluster.topic(f"{rnd.label}-producer-perf", self.args.partitions)
        jars = self.peers[PRODUCER_PERF]
        classpath = ":".join(str(j) for j in jars)  # type: ignore[union-attr]
        with measure(self.cluster.broker_pid, exclude=self._others()) as meter:
            started = now_ms()
            done = subprocess.run(
                [
                    java_binary(),
                    "-Xmx1g",
                    "-cp",
                    classpath,
                    "org.apache.kafka.tools.ProducerPerformance",
                    *("--topic", topic, "--num-records", str(data.rows)),
                    *("--record-size", str(round(data.record_bytes)), "--throughput", "-1"),
                    *("--transactional-id", topic, "--transaction-duration-ms", "86400000"),
                    "--producer-props",
                    f"bootstrap.servers={self.cluster.servers}",
                    "transaction.timeout.ms=600000",
                ],
                capture_output=True,
                text=True,
                timeout=1800,
            )
            ended = now_ms()
        (files / "output.log").write_text(done.stdout + done.stderr)
        if done.returncode != 0:
            raise SystemExit(f"ProducerPerformance failed; see {files / 'output.log'}")
        summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        # Random keyless payload: the count and the markers are checked, not the content.
        expected = self._expected(
            data, content=False, digest=None, partition_counts=None, keys_unique=False
        )
        cores = self._cores(PRODUCER_PERF, meter, started, ended, [])
        return checked(
            self.cluster,
            PRODUCER_PERF,
            meter,
            topic,
            expected,
            info={"summary": summary, "cores": cores},
        )


def client_marks(stdout: str) -> dict[str, float]:
    """The instants ``peer_apps/connect_prepare.py`` prints as its last line."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith('{"bench_phases"'):
            return dict(json.loads(line)["bench_phases"])
    raise SystemExit(f"the Connect client printed no phases: {stdout[-300:]!r}")


def flink_phases(log: Path, started_ms: float, ended_ms: float) -> list[Phase]:
    """The Flink run cut at the instants ``peer_apps/flink_sql.py`` prints last (PyFlink
    imported, the INSERT submitted, the job finished); one phase when it printed none."""
    marks: dict[str, float] = {}
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if line.startswith('{"bench_phases"'):
            marks = json.loads(line)["bench_phases"]
            break
    if not marks:
        return [Phase("whole run", started_ms, ended_ms)]
    return [
        Phase("launch to PyFlink imported", started_ms, marks["imported"]),
        Phase("table environment, DDL", marks["imported"], marks["submitted"]),
        Phase("INSERT job", marks["submitted"], marks["finished"]),
        Phase("job end to exit", marks["finished"], ended_ms),
    ]


# -- where the cores went ---------------------------------------------------------------------


def print_cores(results: Results, directory: Path) -> None:
    """Per system, each phase's wall, CPU and idle core-seconds (of its run of median wall);
    then every round's per-core timelines, written as text and SVG, the last round's shown."""
    print(f"\nwhere the cores went (idle = wall x {os.cpu_count()} cores - CPU of the system and")
    print("the broker; each system's run of median wall; Spark's tasks from its event log):")
    print_costs([tl for side in results.sides if (tl := median_cores(results.runs[side]))])
    directory.mkdir(parents=True, exist_ok=True)
    rounds = max(len(runs) for runs in results.runs.values())
    for number in range(rounds):
        runs = [results.runs[s][number] for s in results.sides if len(results.runs[s]) > number]
        timelines = [r.info["cores"] for r in runs if "cores" in r.info]
        text = [line for tl in timelines for line in tl.text()]
        (directory / f"r{number + 1}.txt").write_text("\n".join(text) + "\n")
        write_svg(timelines, directory / f"r{number + 1}.svg", f"round {number + 1}")
        if number == rounds - 1:
            print(f"\nper-core timelines of round {number + 1} (every round in {directory}):")
            for line in text:
                print(f"  {line}")


def median_cores(runs: list[Run]) -> CoreTimeline | None:
    """The timeline of the run whose wall time is the median of the system's runs."""
    ordered = sorted((r for r in runs if "cores" in r.info), key=lambda r: r.seconds)
    return ordered[(len(ordered) - 1) // 2].info["cores"] if ordered else None


# -- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    systems = [
        KAFKA2PC,
        KAFKA2PC_ALIGNED,
        KAFKA2PC_HASH,
        KAFKA2PC_UNSHUFFLED,
        KAFKA2PC_CONNECT,
        SPARK_SINK,
        SPARK_SINK_CONNECT,
        FLINK_SINK,
        PRODUCER_PERF,
    ]
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=positive_int, default=2_000_000)
    parser.add_argument(
        "--partitions", type=positive_int, default=8, help="Kafka = Spark partitions"
    )
    parser.add_argument("--rounds", type=positive_int, default=2)
    parser.add_argument("--warmup-rows", type=positive_int, default=200_000)
    parser.add_argument(
        "--cores", type=positive_int, default=2, help="Spark local[N], Flink parallelism"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="afterwards, one extra kafka2pc run under py-spy (not timed): where its Python "
        "processes spend their CPU",
    )
    parser.add_argument(
        "--kafka2pc-setting",
        dest="kafka2pc_settings",
        action="append",
        default=[],
        type=setting,
        metavar="KEY=VALUE",
        help="a producer setting (librdkafka's name, as the export's Kafka connection gives "
        "it) for kafka2pc's spark-submit prepares, e.g. linger.ms=50; repeatable",
    )
    parser.add_argument(
        "--kafka2pc-writers",
        dest="writers",
        type=lambda text: [s.strip() for s in text.split(",") if s.strip()],
        default=[AUTO_WRITER],
        help="comma-separated writers of the prepare (auto, python, jvm): one kafka2pc system "
        "per writer and variant; a writer other than auto (the application's default) is "
        f"passed as --writer (not to {KAFKA2PC_CONNECT!r}, which runs with writer auto)",
    )
    parser.add_argument(
        "--timelines",
        type=Path,
        help="directory for the per-core timelines of every round (text and SVG; default: "
        "the run's work directory)",
    )
    add_subset_argument(parser, "--systems", systems, default=DEFAULT_SYSTEMS)
    add_cluster_arguments(parser)
    args = parser.parse_args(argv)
    args.systems = parse_subset(parser, args.systems, systems, "--systems")
    if not args.writers or len(set(args.writers)) != len(args.writers):
        parser.error("--kafka2pc-writers: name each writer once")
    if set(args.writers) - set(WRITERS):
        parser.error(f"--kafka2pc-writers: each of {', '.join(WRITERS)}")

    # A SIGTERM (a CI timeout, kill PID) unwinds like Ctrl-C: the broker and the Connect
    # server are stopped by their context managers instead of outliving the benchmark.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(f"fetching the peers (cached in {peers_root()})", flush=True)
    fetch_kafka(args.kafka_version)
    peers = fetch_peers(args.systems)
    with ExitStack() as stack:
        cluster = stack.enter_context(Cluster.from_args(args, data_dir=WORK_DIR / "kafka"))
        bench = Peers(args, cluster, peers)
        bench.prepare_data()
        bench.start_connect(stack)  # stopped when the stack closes, also on failure
        sides = bench.sides()
        print(
            f"{cluster.describe()}; {args.rows:,} rows, {args.partitions} partitions, "
            f"{args.rounds} rounds + warm-up ({bench.warm.rows:,} rows), {bench.master}; "
            f"{machine_line()}",
            flush=True,
        )
        results = interleave(sides, args.rounds, say=lambda s: print(s, flush=True))
        profile = None
        if args.profile:
            print("profiling one more kafka2pc run with py-spy (not timed)", flush=True)
            with profiled(bench.work / "py-spy") as profile:
                extra = bench.kafka2pc(Round(args.rounds + 1, "profile"))
            print(f"  profile {KAFKA2PC:<26} {extra.verification.summary()}", flush=True)  # type: ignore[union-attr]

    keyed = [r for s in results.sides if s != PRODUCER_PERF for r in results.runs[s]]
    same, counts = same_partition_counts(keyed)
    mine = kafka2pc_systems(list(KAFKA2PC_VARIANTS), args.writers)
    mine[KAFKA2PC_CONNECT] = (KAFKA2PC_CONNECT, JVM_WRITER)
    ours = [s for s in results.sides if s in mine]
    peers = [s for s in results.sides if s not in ours]
    pairs = [(a, b) for a in ours for b in peers]
    if KAFKA2PC in ours:
        pairs[:0] = [(variant, KAFKA2PC) for variant in ours if variant != KAFKA2PC]
    if {SPARK_SINK_CONNECT, SPARK_SINK} <= set(results.sides):
        pairs.append((SPARK_SINK_CONNECT, SPARK_SINK))
    # What the application took, as each run's manifest says (the defaults: auto).
    took = {s: sorted({r.info["took"] for r in results.runs[s] if "took" in r.info}) for s in ours}
    legend = [
        f"{side}: {GUARANTEES[mine[side][0]] if side in mine else GUARANTEES[side]}"
        + (f"; writer {mine[side][1]}" if side in mine and mine[side][1] != AUTO_WRITER else "")
        + "".join(f"; took {t}" for t in took.get(side, ()))
        for side in results.sides
    ]
    title = f"{args.rows:,} rows, {args.partitions} partitions, {bench.master}"
    ok = print_results(results, title, pairs, legend=legend) and same
    names = ", ".join(s for s in results.sides if s != PRODUCER_PERF)
    print(f"per-partition counts equal across {names}: {'yes' if same else 'NO'} ({counts})")
    print_cores(results, args.timelines or bench.work / "timelines")
    if profile is not None:
        print(f"\nkafka2pc's Python processes under py-spy ({args.rows:,} rows, an extra run):")
        for line in profile.lines():
            print(f"  {line}")
    print(json.dumps({"verified": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
