"""Several executors and a replicated cluster: kafka2pc and Spark's Kafka sink on Spark standalone.

``make bench-cluster BENCH_ARGS="--rows 8M --rounds 2"``, or
``python benchmarks/bench_cluster.py --rows 8M --rounds 2``. On a three-node local Apache
Kafka cluster (KRaft, every topic replicated to the three nodes, ``min.insync.replicas``
2; devtools' ``KafkaCluster``) and a Spark standalone cluster started from PySpark's own
distribution as the tests start it (a master and ``--workers`` workers of one core each,
``--worker-memory`` each; ``devtools/spark_standalone.py``), from the same generated
parquet files (``--rows`` records of a 16-byte key and a JSON value of about 130 bytes, in
``--partitions`` files), each system writes into a fresh topic of ``--partitions``
partitions, run as its user would run it against such a cluster (client deploy mode):

- kafka2pc: spark-submit of the package's prepare application with its defaults (writer
  and partitioning auto, the driver's class archive), then ``kafka2pc commit`` of its
  manifest. Exactly once; its producers are transactional, hence idempotent, hence
  ``acks=all`` (the client refuses anything else).
- Spark's Kafka sink: spark-submit of ``peer_apps/spark_sink.py`` (``bench_peers``' app and
  jars) with ``kafka.acks=all`` said explicitly. At least once.

Both get the same Spark settings: the package's quiet defaults, ``spark.executor.memory``
``--executor-memory`` and one core per executor (one executor per worker), the driver's
memory Spark's default unless ``--driver-memory``, Spark's event log.

The executors' start, and a class archive for them (``--executor-archive``, on by
default): each side also runs as "<side> [executor archive]", its executor JVMs started
from an application class-data-sharing archive (``spark.executor.extraJavaOptions``
``-XX:SharedArchiveFile=... -XX:+VerifySharedSpaces``, and a class-load log per executor
that says whether it mapped the archive and how many classes it took from it). The archive
is written once, before the rounds, by an untimed run of the sink's application whose
executors start with ``-XX:+RecordDynamicDumpInfo``: its write done, the application
holds its executors alive (``--hold-file``) while each is asked to dump the classes it
loaded (``jcmd <pid> VM.cds dynamic_dump``, JDK 17+); the dump's seconds, the archive's
size and whether it is complete (``-Xlog:cds+dynamic``) are printed. The driver's way,
``-XX:ArchiveClassesAtExit`` (``--executor-archive-write exit``), is cut short on a
standalone cluster: the worker kills its executors when their application ends (SIGTERM,
SIGKILL 10 s later), before their shutdown and dump are over. One archive serves both
systems (the executors' class path is Spark's jars in both; the sink's and our jars come
later, in Spark's own class loader).

For every run, per executor (seconds from the application's start, from the event log and
a watcher of the executor processes' start in ``/proc``): when its JVM was launched (the
master's scheduling and the worker's fork), when it registered with the driver, the JVM's
start to its registration (the part an archive can cut), its first task; and how long the
first job waited for an executor.

Untimed warm-up round (``--warmup-rows``; before it, as in ``bench_peers``, one more
untimed kafka2pc run if the driver's archive needs one to be written), then ``--rounds``
interleaved rounds. Every output is verified before any time is printed: the log audit,
a read_committed count, the digest of every (key, value) against the source's, and the
per-partition counts of Java's murmur2 placement. Printed: wall time, us per record, CPU
of the system's processes by group (the driver JVM, the executor JVMs, the standalone
daemons, the Python processes), the three Kafka nodes' CPU, the phases from Spark's event
log, the executors' start, and the ratios.

Run (the measured run, on a quiet machine):
``python benchmarks/bench_cluster.py --rows 8M --rounds 2``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_peers import APPS, SPARK_SINK, spark_kafka_jars
from bench_scale import classify as scale_classify
from bench_scale import parse_rows
from harness import (
    Cluster,
    Dataset,
    ExecutorStarts,
    Expected,
    Meter,
    Results,
    Round,
    Run,
    Side,
    Watch,
    add_cluster_arguments,
    add_subset_argument,
    checked,
    cmdline,
    event_log_conf,
    executor_starts,
    fmt,
    interleave,
    kafka2pc_commit,
    machine_line,
    measure,
    median,
    now_ms,
    parse_subset,
    print_results,
    print_table,
    spark_submit,
    timeline,
    watch_executors,
)
from harness.executors import ExecutorProcess

from airflow_provider_kafka2pc.spark.class_sharing import MAPPED_MARK, runs_until_mapped
from airflow_provider_kafka2pc.spark.job import spark_submit_binary
from airflow_provider_kafka2pc.transaction.manifest import Manifest
from devtools.broker import fetch_kafka
from devtools.spark_standalone import standalone_cluster
from devtools.spark_submit import submit_prepare

WORK_DIR = Path("/tmp/kafka2pc-bench/cluster")
KAFKA2PC = "kafka2pc"
ARCHIVED = " [executor archive]"
SYSTEMS = (KAFKA2PC, SPARK_SINK)
GUARANTEES = {
    KAFKA2PC: "exactly once: spark-submit prepare (the application's defaults) + kafka2pc "
    "commit; transactional producers (acks=all)",
    SPARK_SINK: "at least once: spark-submit, df.write.format('kafka'), kafka.acks=all",
}
#: How long the archive-writing run's executors may take to exit after their application.
DUMP_WAIT_S = 120.0
#: What the JVM logs (``-Xlog:cds+dynamic``) once a dynamic archive is complete.
WRITTEN = "Written dynamic archive"
#: A class the base (JDK) archive supplied, as the class-load log says it.
BASE_MARK = b"source: shared objects file\n"

# -- process groups ----------------------------------------------------------------------------

EXECUTORS = "executor JVMs"
DAEMONS = "standalone master + workers"


def classify(pid: int, name: str) -> str | None:
    """``bench_scale``'s groups, plus the executors' JVMs and the standalone daemons."""
    if name == "java":
        command = cmdline(pid)
        if b"CoarseGrainedExecutorBackend" in command:
            return EXECUTORS
        if b"deploy.master.Master" in command or b"deploy.worker.Worker" in command:
            return DAEMONS
    return scale_classify(pid, name)


# -- the executors' archive --------------------------------------------------------------------


@dataclass
class ExecutorArchive:
    """The executors' class archive: written once by one run, mapped by the archive sides.

    Two ways to write it (``--executor-archive-write``): ``exit``, the driver's way
    (``-XX:ArchiveClassesAtExit``: the JVM dumps as it exits), which a standalone worker
    cuts short: it kills its executors when their application ends (SIGTERM, then SIGKILL
    after 10 s, Spark's ``ExecutorRunner``), and an executor's shutdown and dump do not fit;
    ``jcmd`` (the default), the executors started with ``-XX:+RecordDynamicDumpInfo`` and
    asked to dump while they live (``jcmd <pid> VM.cds dynamic_dump``): by a run of the
    sink's application that, its write done, holds its executors alive until the dumps
    are over (``--hold-file``). Asked once kafka2pc's manifest appeared, they were killed
    mid-dump: the application stops right after it, and the dump takes longer than the
    worker's 10 s.
    """

    directory: Path
    how: str = "jcmd"
    #: The archive the mapping runs use (None until written, or when writing failed).
    path: Path | None = None
    #: What the writing run showed, in words (printed with the results).
    written: str = "not written"
    #: Per executor id, the jcmd dump's seconds and its output's last line.
    dumps: dict[str, tuple[float, str]] = field(default_factory=dict)

    def target(self, executor: str) -> Path:
        return self.directory / f"executor-{executor}.jsa"

    def write_options(self, files: Path) -> str:
        """The writing run's executor options; each executor logs when its dump is complete."""
        self.directory.mkdir(parents=True, exist_ok=True)
        log = f"-Xlog:cds+dynamic=info:file={files / 'cds-write-{{EXECUTOR_ID}}.log'}:uptime"
        if self.how == "exit":
            return f"-XX:ArchiveClassesAtExit={self.target('{{EXECUTOR_ID}}')} {log}"
        return f"-XX:+RecordDynamicDumpInfo {log}"

    @contextmanager
    def dumping(self, hold: Path, watch: Watch) -> Iterator[None]:
        """With ``jcmd``: once the application created ``hold`` (its write done), each
        live executor of the newest application dumps its classes (in parallel); then
        ``hold`` is removed, and the application goes on to its end."""
        if self.how != "jcmd":
            yield
            return
        stop = threading.Event()

        def run() -> None:
            try:
                while not hold.exists():
                    if stop.wait(0.05):
                        return
                self._dump_all(watch)
            finally:
                hold.unlink(missing_ok=True)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(DUMP_WAIT_S)

    def _dump_all(self, watch: Watch) -> None:
        newest = max(watch.processes.values(), key=lambda p: p.started_ms, default=None)
        if newest is None:
            return
        live = [p for p in watch.of_app(newest.app_id).values() if p.gone_ms is None]
        with ThreadPoolExecutor(max(1, len(live))) as pool:
            for process, result in zip(live, pool.map(self._dump, live), strict=True):
                self.dumps[process.executor_id] = result

    def _dump(self, process: ExecutorProcess) -> tuple[float, str]:
        began = time.perf_counter()
        target = self.target(process.executor_id)
        command = [shutil.which("jcmd") or "jcmd", str(process.pid), "VM.cds", "dynamic_dump"]
        try:
            done = subprocess.run(
                [*command, str(target)], capture_output=True, text=True, timeout=DUMP_WAIT_S
            )
            said = (done.stdout + done.stderr).strip().splitlines()
        except (OSError, subprocess.TimeoutExpired) as exc:
            said = [f"{type(exc).__name__}: {exc}"]
        return time.perf_counter() - began, said[-1] if said else ""

    def map_options(self, files: Path) -> str:
        """A mapping run's executor options: the archive, checked; each executor's class loads."""
        if self.path is None:
            raise RuntimeError("the executors' archive was not written")
        log = files / "classes-{{EXECUTOR_ID}}.log"
        return (
            f"-XX:SharedArchiveFile={self.path} -XX:+VerifySharedSpaces "
            f"-Xlog:class+load=info:file={log}:none:filecount=0"
        )

    def judge_written(self, files: Path, starts: ExecutorStarts | None) -> None:
        """Pick a complete archive the writing run left, and say what writing it took."""
        complete = []
        for log in sorted(files.glob("cds-write-*.log")):
            archive = self.target(log.stem.removeprefix("cds-write-"))
            if WRITTEN in log.read_text(errors="replace") and archive.is_file():
                complete.append(archive)
        exits = [e.exited_after_end_s for e in (starts.executors if starts else [])]
        shown = ", ".join(fmt(s if s is not None else float("nan"), ".1f") for s in exits)
        dumps = "; ".join(
            f"executor {e}: jcmd {seconds:.1f} s ({said!r})"
            for e, (seconds, said) in sorted(self.dumps.items())
        )
        how = f"written {'at exit' if self.how == 'exit' else 'by jcmd, the sink holding'}"
        if not complete:
            left = sorted(p.name for p in self.directory.glob("executor-*.jsa"))
            self.written = (
                f"NOT {how}: no executor logged {WRITTEN!r} (files left: {left or 'none'}; "
                f"executors exited {shown} s after the application's end; {dumps or 'no jcmd'}; "
                f"see {files})"
            )
            return
        self.path = max(complete, key=lambda p: p.stat().st_size)
        self.written = (
            f"{how}: {len(complete)} of {len(exits)} executors wrote a complete archive; using "
            f"{self.path.name} ({self.path.stat().st_size / 2**20:.0f} MiB); executors exited "
            f"{shown} s after the application's end; {dumps or 'no jcmd'}"
        )


def class_counts(files: Path) -> list[tuple[int, int, int]]:
    """Per executor class-load log of a mapping run: (classes loaded, from the executors'
    archive, from the JDK's base archive)."""
    counts = []
    for log in sorted(files.glob("classes-*.log")):
        data = log.read_bytes()
        counts.append((data.count(b"\n"), data.count(MAPPED_MARK), data.count(BASE_MARK)))
    return counts


# -- the systems -------------------------------------------------------------------------------


class Bench:
    """The two systems (and their archive variants) on one Spark and one Kafka cluster."""

    def __init__(
        self, args: argparse.Namespace, cluster: Cluster, master: str, jars: list[Path]
    ) -> None:
        self.args, self.cluster, self.master, self.jars = args, cluster, master, jars
        self.work = WORK_DIR / cluster.prefix
        self.full = Dataset(args.rows)
        self.warm = Dataset(min(args.rows, args.warmup_rows))
        self.archive = ExecutorArchive(self.work / "executor-archive", args.executor_archive_write)

    def prepare_data(self) -> None:
        for dataset in (self.warm, self.full):
            dataset.parquet(self.args.partitions)
            dataset.digest()
            dataset.partition_counts(self.args.partitions)
            print(
                f"dataset {dataset.rows:,} rows ({dataset.record_bytes:.0f} B key + value): "
                f"{dataset.parquet(self.args.partitions)}",
                flush=True,
            )
        self.full.read_through(self.args.partitions)

    def sides(self) -> dict[str, Side]:
        sides: dict[str, Side] = {}
        for system in self.args.systems:
            run = self.kafka2pc if system == KAFKA2PC else self.spark_sink
            sides[system] = lambda rnd, run=run: run(rnd, None)
            if self.archive.path is not None:
                sides[system + ARCHIVED] = lambda rnd, run=run: run(rnd, "map")
        return sides

    def write_archive(self) -> Run:
        """The untimed run of the sink whose executors write their archive (see
        :class:`ExecutorArchive`)."""
        run = self.spark_sink(Round(0, "executor-archive-write"), "write")
        self.archive.judge_written(run.info["files"], run.info.get("executors"))
        return run

    # -- one run ---------------------------------------------------------------------------

    def _dataset(self, rnd: Round) -> Dataset:
        return self.full if rnd.number > 0 else self.warm

    def _files(self, label: str, side: str) -> Path:
        slug = re.sub(r"[^a-z0-9]+", "-", f"{label}-{side}".lower()).strip("-")
        path = self.work / slug
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    def _conf(self, files: Path, archive: str | None) -> dict[str, str]:
        conf = {
            **event_log_conf(files / "events"),
            "spark.executor.memory": self.args.executor_memory,
            "spark.executor.cores": "1",
            "spark.cores.max": str(self.args.workers),
        }
        if self.args.driver_memory:
            conf["spark.driver.memory"] = self.args.driver_memory
        if archive == "write":
            conf["spark.executor.extraJavaOptions"] = self.archive.write_options(files)
        elif archive == "map":
            conf["spark.executor.extraJavaOptions"] = self.archive.map_options(files)
        return conf

    def _timeout_s(self, data: Dataset) -> float:
        return 1800 + data.rows * 50e-6

    @contextmanager
    def _measured(self, linger_s: float = 0.0) -> Iterator[tuple[Meter, Watch]]:
        """The run's meter (the Kafka nodes left out of its CPU, their own CPU as the
        meter's broker CPU) and the watch of its executor JVMs (``linger_s``: how long,
        after the run, to wait for them to exit)."""
        before = self.cluster.brokers_cpu()
        with (
            watch_executors(linger_s=linger_s) as watch,
            measure(exclude=self.cluster.broker_pids, classify=classify) as meter,
        ):
            yield meter, watch
        after = self.cluster.brokers_cpu()
        meter.broker_cpu = None if before is None or after is None else after - before

    def _dumping(self, archive: str | None, hold: Path, watch: Watch) -> Any:
        if archive == "write":
            return self.archive.dumping(hold, watch)
        return nullcontext()

    def _info(self, files: Path, watch: Watch, archive: str | None) -> dict[str, Any]:
        info: dict[str, Any] = {
            "files": files,
            "executors": executor_starts(files / "events", watch),
        }
        if archive == "map":
            info["classes"] = class_counts(files)
        return info

    def kafka2pc(self, rnd: Round, archive: str | None) -> Run:
        side = KAFKA2PC + (ARCHIVED if archive == "map" else "")
        data, files = self._dataset(rnd), self._files(rnd.label, side)
        topic = self.cluster.topic(
            f"{rnd.label}-{'k2pc-archive' if archive else 'k2pc'}", self.args.partitions
        )
        ids = [f"{topic}-{i}" for i in range(self.args.partitions)]
        manifest = files / "manifest.json"
        arguments = [
            *("--source-path", str(data.parquet(self.args.partitions))),
            *("--source-format", "parquet", "--key-column", "key"),
            *("--value-column", "value", "--topic", topic),
            *("--bootstrap-servers", self.cluster.servers),
            *("--transactional-ids", ",".join(ids), "--job-label", topic),
            *("--manifest", str(manifest)),
        ]
        linger = DUMP_WAIT_S if archive == "write" else 0.0
        committed: subprocess.CompletedProcess[str] | None = None
        with self._measured(linger) as (meter, watch):
            started = now_ms()
            submitted = submit_prepare(
                arguments,
                master=self.master,
                conf=self._conf(files, archive),
                log_path=files / "spark-submit.log",
                timeout_s=self._timeout_s(data),
            )
            prepared_ms = now_ms()
            if submitted.returncode == 0:
                committed = kafka2pc_commit(self.cluster.servers, manifest)
            ended = now_ms()
        if submitted.returncode != 0:
            raise SystemExit(f"kafka2pc prepare failed; see {files / 'spark-submit.log'}")
        if committed is None or committed.returncode != 0:
            out = "" if committed is None else committed.stdout + committed.stderr
            raise SystemExit(f"kafka2pc commit failed: {out}")
        batch = Manifest.from_json(manifest.read_text())
        meta = batch.metadata
        parts = {
            "spark-submit (prepare)": (prepared_ms - started) / 1000,
            "in it: prepare_dataframe": (meta["finished_ms"] - meta["started_ms"]) / 1000,
            "kafka2pc commit": (ended - prepared_ms) / 1000,
            **timeline(files / "events", started, prepared_ms),
        }
        info = self._info(files, watch, archive)
        info["how"] = f"writer {meta.get('writer')}, partitioning {meta.get('partitioning')}"
        expected = Expected(
            data.rows,
            digest=data.digest(),
            partition_counts=data.partition_counts(self.args.partitions),
            committables=batch.committables,
        )
        return checked(self.cluster, side, meter, topic, expected, parts=parts, info=info)

    def spark_sink(self, rnd: Round, archive: str | None) -> Run:
        side = SPARK_SINK + (ARCHIVED if archive == "map" else "")
        data, files = self._dataset(rnd), self._files(rnd.label, side)
        topic = self.cluster.topic(
            f"{rnd.label}-{'sink-archive' if archive else 'sink'}", self.args.partitions
        )
        hold = files / "hold"
        holding = (
            ["--hold-file", str(hold)] if archive == "write" and self.archive.how == "jcmd" else []
        )
        linger = DUMP_WAIT_S if archive == "write" else 0.0
        with self._measured(linger) as (meter, watch), self._dumping(archive, hold, watch):
            started = now_ms()
            done = spark_submit_app(
                [
                    *("--source", str(data.parquet(self.args.partitions))),
                    *("--topic", topic, "--bootstrap-servers", self.cluster.servers),
                    *("--kafka-option", "acks=all"),
                    *holding,
                ],
                master=self.master,
                conf=self._conf(files, archive),
                jars=self.jars,
                log_path=files / "spark-submit.log",
                timeout_s=self._timeout_s(data),
            )
            ended = now_ms()
        if done.returncode != 0:
            raise SystemExit(f"Spark's Kafka sink failed; see {files / 'spark-submit.log'}")
        expected = Expected(
            data.rows,
            transactional=False,
            digest=data.digest(),
            partition_counts=data.partition_counts(self.args.partitions),
        )
        parts = timeline(files / "events", started, ended)
        info = self._info(files, watch, archive)
        return checked(self.cluster, side, meter, topic, expected, parts=parts, info=info)


def spark_submit_app(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``peer_apps/spark_sink.py`` under the harness's spark-submit."""
    return spark_submit(str(APPS / "spark_sink.py"), args, **kwargs)


# -- the report --------------------------------------------------------------------------------


def print_us_per_record(results: Results) -> None:
    rows = []
    for side in results.sides:
        runs = results.runs[side]
        wall = median([r.seconds for r in runs])
        rows.append(
            [
                side,
                f"{runs[0].rows:,}" if runs else "-",
                fmt(wall, ".1f"),
                fmt(wall / runs[0].rows * 1e6 if runs else float("nan")),
                fmt(median([r.cpu for r in runs]), ".1f"),
                fmt(median([r.metric("broker_cpu") for r in runs]), ".1f"),
                runs[0].info.get("how", "") if runs else "",
            ]
        )
    headers = ["side", "rows", "wall s", "us/record", "CPU s", "3 nodes' CPU s", "kafka2pc took"]
    print_table(headers, rows, left=(0, 6))


def _executor_row(label: str, run: Run) -> list[str] | None:
    starts: ExecutorStarts | None = run.info.get("executors")
    if starts is None:
        return None
    classes = run.info.get("classes") or []
    mapped = "; ".join(f"{top:,}+{base:,} of {total:,}" for total, top, base in classes)
    return [
        run.side,
        label,
        str(len(starts.executors)),
        fmt(starts.mean("launched_s")),
        fmt(starts.mean("jvm_to_registered_s")),
        fmt(starts.mean("registered_s")),
        fmt(starts.mean("first_task_s")),
        fmt(starts.first_job_waited_s if starts.first_job_waited_s is not None else float("nan")),
        mapped or "-",
    ]


def print_executors(results: Results, extra: list[tuple[str, Run]]) -> None:
    """Per run, the executors' start (means over its executors, s from the app's start)."""
    headers = ["side", "run", "execs", "JVM launched", "JVM start->registered", "registered"]
    headers += ["first task", "1st job waited", "classes: executors' archive+JDK's of loaded"]
    rows = []
    labelled = [*extra, *[("warm-up", r) for r in results.warmups]]
    labelled += [(f"r{i + 1}", r) for s in results.sides for i, r in enumerate(results.runs[s])]
    for label, run in labelled:
        row = _executor_row(label, run)
        if row is not None:
            rows.append(row)
    print_table(headers, rows, left=(0, 1, 8))


def print_archive_saving(results: Results) -> None:
    """Per system, the median of the executors' JVM start to registration without and with
    the archive (timed rounds), and the difference: what the archive saves per start."""
    for system in SYSTEMS:
        plain, archived = results.runs.get(system), results.runs.get(system + ARCHIVED)
        if not plain or not archived:
            continue

        def jvm(runs: list[Run]) -> float:
            values = [s.mean("jvm_to_registered_s") for r in runs if (s := r.info.get("executors"))]
            return median(values)

        def registered(runs: list[Run]) -> float:
            values = [s.mean("registered_s") for r in runs if (s := r.info.get("executors"))]
            return median(values)

        a, b = jvm(plain), jvm(archived)
        c, d = registered(plain), registered(archived)
        wall = median([r.seconds for r in plain]) - median([r.seconds for r in archived])
        print(
            f"  {system}: JVM start->registered {fmt(a)} s without, {fmt(b)} s with the archive "
            f"({fmt(a - b)} s saved per executor start); registered {fmt(c)} -> {fmt(d)} s "
            f"after the app's start; wall {fmt(wall)} s shorter (median over the rounds)"
        )


# -- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=parse_rows, default=8_000_000)
    parser.add_argument("--partitions", type=int, default=8, help="Kafka partitions = files")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup-rows", type=parse_rows, default=200_000)
    parser.add_argument("--workers", type=int, default=2, help="standalone workers, 1 core each")
    parser.add_argument("--worker-memory", default="2g", help="each worker's --memory")
    parser.add_argument("--executor-memory", default="2g", help="spark.executor.memory")
    parser.add_argument("--driver-memory", help="spark.driver.memory (default: Spark's, 1g)")
    parser.add_argument(
        "--executor-archive",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run each system with its executors started from a class archive",
    )
    parser.add_argument(
        "--executor-archive-write",
        choices=("jcmd", "exit"),
        default="jcmd",
        help="how the executors' archive is written: jcmd VM.cds dynamic_dump once the "
        "manifest is written (default), or -XX:ArchiveClassesAtExit (the driver's way; a "
        "standalone worker kills its executors 10 s after their application's end)",
    )
    add_subset_argument(parser, "--systems", SYSTEMS)
    add_cluster_arguments(parser)
    parser.set_defaults(kafka_nodes=3)  # a replicated cluster: 3 or more
    args = parser.parse_args(argv)
    args.systems = parse_subset(parser, args.systems, SYSTEMS, "--systems")

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    fetch_kafka(args.kafka_version)
    jars = spark_kafka_jars() if SPARK_SINK in args.systems or args.executor_archive else []
    extra: list[tuple[str, Run]] = []
    with ExitStack() as stack:
        cluster = stack.enter_context(Cluster.from_args(args))
        spark_logs = WORK_DIR / cluster.prefix / "spark"
        spark_logs.mkdir(parents=True, exist_ok=True)
        master = stack.enter_context(
            standalone_cluster(args.workers, spark_logs, worker_memory=args.worker_memory)
        )
        bench = Bench(args, cluster, master, jars)
        described = cluster.describe()  # its pids, while the nodes run
        print(
            f"{cluster.describe()}; Spark standalone {master}: {args.workers} workers of 1 core, "
            f"{args.worker_memory} (logs {spark_logs}); {args.rows:,} rows, {args.partitions} "
            f"partitions, {args.rounds} rounds + warm-up ({bench.warm.rows:,} rows); "
            f"{machine_line()}",
            flush=True,
        )
        bench.prepare_data()
        if KAFKA2PC in args.systems and runs_until_mapped({}, spark_submit_binary()) == 2:
            # As in bench_peers: this run leaves the driver archive's trace, the next
            # writes it, the timed rounds map it.
            extra.append(("driver-archive", bench.kafka2pc(Round(0, "driver-archive"), None)))
        if args.executor_archive:
            run = bench.write_archive()
            extra.append(("archive-write", run))
            print(f"executors' archive: {bench.archive.written}", flush=True)
        results = interleave(bench.sides(), args.rounds, say=lambda s: print(s, flush=True))

    title = (
        f"{args.rows:,} rows, {args.partitions} partitions, Spark standalone ({args.workers} "
        f"executors of 1 core, {args.executor_memory}), {described}"
    )
    legend = [f"{s}: {GUARANTEES[s]}" for s in args.systems]
    if bench.archive.path is not None:
        legend.append(f"[executor archive]: the executors' JVMs map {bench.archive.path}")
    ok = all(r.verification is not None and r.verification.ok for _, r in extra)
    pairs: list[tuple[str, str]] = []
    if {KAFKA2PC, SPARK_SINK} <= set(results.sides):
        pairs.append((KAFKA2PC, SPARK_SINK))
    pairs += [(s + ARCHIVED, s) for s in SYSTEMS if s + ARCHIVED in results.sides]
    # The nodes' CPU is read per process (no per-thread split on a cluster of three).
    metrics = ("seconds", "cpu", "broker_cpu")
    ok = print_results(results, title, pairs, metrics, legend=legend) and ok
    for label, run in extra:
        check = run.verification
        print(
            f"  verified {'OK' if check and check.ok else 'FAILED':<6} {label}: "
            f"{check.summary() if check else '-'}"
        )
    print("\nwall time and us per record (medians of the timed rounds):")
    print_us_per_record(results)
    print("\nexecutors' start (means over a run's executors; s from the application's start):")
    print_executors(results, extra)
    if args.executor_archive:
        print(f"\nexecutors' archive: {bench.archive.written}")
        print_archive_saving(results)
    print(json.dumps({"verified": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
