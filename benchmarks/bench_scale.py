"""Scale: kafka2pc's default path beside Spark's Kafka sink at 100M rows; memory's slope in rows.

``python benchmarks/bench_scale.py [--sizes 8M,32M,100M]``. On one local Apache Kafka
broker, from the same generated parquet files (records of a 16-byte key and a JSON value
of about 130 bytes, in ``--partitions`` files), for each size (smallest first) each system
writes into a fresh topic of ``--partitions`` partitions, as its user would run it:

- kafka2pc: spark-submit of the package's prepare application with its defaults (the
  writer, the partitioning: auto, which picks the JVM writer and the source's splits where
  they apply; the driver's class archive), ``local[--cores]``, one transactional id per
  Kafka partition, then ``kafka2pc commit`` of its manifest. Exactly once.
- Spark's Kafka sink: spark-submit of ``peer_apps/spark_sink.py`` (``bench_peers``' app and
  jars), ``df.write.format("kafka")``. At least once.

Both get the settings ``bench_peers`` gives them (the package's quiet local defaults; the
driver's memory Spark's default, 1 GB, unless ``--driver-memory``); in ``local`` mode the
executors are threads of the driver's JVM. An untimed warm-up (``--warmup-rows``) runs each
system first; the order of the systems rotates from one size to the next.

Measured per system and size: wall time, its cost per record (and the marginal cost from
the size before), CPU; the peak resident memory of each process group, sampled from /proc
every ``--sample-s`` over this process's tree (the driver JVM, the driver's Python, Spark's
Python workers, the ``kafka2pc commit`` process) and of the broker's JVM; the heap after
garbage collection: the driver JVM's from its own GC log (``-Xlog:gc``: it exits with the
application, so it cannot be asked afterwards), with a full collection forced every
``--live-probe-s`` (``jcmd GC.run``) so that the log holds the live heap, not only what
young collections leave; the broker's asked with ``jcmd GC.run`` + ``GC.heap_info`` after
each write. Then, per system and process, the slope of each memory figure in rows (MiB per
10M rows, least squares over the sizes; flat when the change it predicts over the sizes run
is within 10% of the mean or 16 MiB).

Every output is verified in bounded memory (``Expected(streaming=True)``, at every size so
the small runs exercise the same path): the log audit (kafka2pc: the package's audit of its
committables, committed once, none open; the sink: the same counts, without a span per
batch), one streaming read_committed pass (records per partition, no partition held back,
the digest of every (key, value) against the source's, computed once and kept beside the
files), and the per-partition counts of Java's murmur2 placement. The peak RSS of this
process while it verifies is printed beside each check.

Disk: the parquet files are kept between runs (``/tmp/kafka2pc-bench/data/rows-N``, about
30 B a row: 3 GB for 100M rows, 4.2 GB for 8M+32M+100M); one topic at a time is on the
broker's disk (about 155 B a record: 15.5 GB at 100M), deleted after its check. Plan on
25 GB free for ``--sizes 8M,32M,100M``. The first run at a size also writes the files and
computes the source's digest (some 7 us a record on one core, on every core in parallel)
and Java's placement of its keys (on arrays, about a second per million keys).

Memory: this process stays bounded (the files are written a row group at a time, the
digest and the checks stream); the timed runs include the live probe's forced collections
(some 0.1-0.5 s each) and its jcmd processes' CPU (group ``jcmd probe``).

Run: ``python benchmarks/bench_scale.py --sizes 8M,32M,100M`` (default: ``--rows``, 100M).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench_peers import APPS, SPARK_SINK, spark_kafka_jars
from harness import (
    Cluster,
    Dataset,
    Expected,
    HeapAfterGc,
    Meter,
    Run,
    add_cluster_arguments,
    add_subset_argument,
    checked,
    cmdline,
    descendants,
    event_log_conf,
    fmt,
    gc_log_option,
    heap_after_full_gc,
    kafka2pc_commit,
    machine_line,
    measure,
    now_ms,
    parse_subset,
    print_table,
    read_gc_log,
    rss_mib,
    spark_submit,
    timeline,
)

from airflow_provider_kafka2pc.spark import APPLICATION
from airflow_provider_kafka2pc.spark.class_sharing import runs_until_mapped
from airflow_provider_kafka2pc.spark.job import spark_submit_binary
from airflow_provider_kafka2pc.transaction.manifest import Manifest
from devtools.broker import fetch_kafka
from devtools.spark_submit import submit_prepare

WORK_DIR = Path("/tmp/kafka2pc-bench/scale")
KAFKA2PC = "kafka2pc"
SYSTEMS = (KAFKA2PC, SPARK_SINK)
GUARANTEES = {
    KAFKA2PC: "exactly once: spark-submit prepare (the application's defaults) + kafka2pc commit",
    SPARK_SINK: "at least once: spark-submit, df.write.format('kafka')",
}

# -- process groups ----------------------------------------------------------------------------

DRIVER_JVM = "driver JVM"
DRIVER_PYTHON = "driver Python"
WORKERS = "Python workers"
COMMIT = "kafka2pc commit"
PROBE = "jcmd probe"
BROKER = "broker JVM"
#: The groups whose peak RSS is reported (as a group: the sum of its processes in one sample).
GROUPS = (DRIVER_JVM, DRIVER_PYTHON, WORKERS, COMMIT)
_SPARK_SUBMIT = b"org.apache.spark.deploy.SparkSubmit"


def classify(pid: int, name: str) -> str | None:
    """This benchmark's process groups (None: the harness's default grouping)."""
    command = cmdline(pid)
    if name == "jcmd" or b"sun.tools.jcmd" in command:
        return PROBE
    if name == "java" and _SPARK_SUBMIT in command:
        return DRIVER_JVM
    if name.startswith("pyspark") or b"pyspark.daemon" in command or b"pyspark.worker" in command:
        return WORKERS
    if APPLICATION.encode() in command or b"spark_sink.py" in command:
        return DRIVER_PYTHON
    if b"kafka2pc" in command and b"\x00commit\x00" in command:
        return COMMIT
    return None


@contextmanager
def live_probe(interval_s: float) -> Iterator[list[int]]:
    """Every ``interval_s`` (0: never), a full collection in each Spark driver JVM of this
    process's tree (``jcmd GC.run``): its GC log then says what the heap keeps live. Yields
    a one-item list: the number of collections asked for."""
    asked = [0]
    stop = threading.Event()
    jcmd = shutil.which("jcmd")

    def probe() -> None:
        while not stop.wait(interval_s):
            for pid, name in descendants():
                if name == "java" and _SPARK_SUBMIT in cmdline(pid):
                    subprocess.run(
                        [jcmd or "jcmd", str(pid), "GC.run"], capture_output=True, timeout=120
                    )
                    asked[0] += 1

    thread = threading.Thread(target=probe, daemon=True)
    if interval_s > 0 and jcmd is not None:
        thread.start()
    try:
        yield asked
    finally:
        stop.set()
        if thread.is_alive():
            thread.join()


# -- the systems -------------------------------------------------------------------------------


def make_files(rows: int, partitions: int) -> None:
    """The dataset's parquet files and Java placement, kept beside them."""
    data = Dataset(rows)
    data.parquet(partitions)
    data.partition_counts(partitions)


class Scale:
    """The two systems, writing one dataset at a time into fresh topics of one broker."""

    def __init__(self, args: argparse.Namespace, cluster: Cluster, jars: list[Path]) -> None:
        self.args, self.cluster, self.jars = args, cluster, jars
        self.work = WORK_DIR / cluster.prefix
        self.work.mkdir(parents=True, exist_ok=True)
        self.master = f"local[{args.cores}]"

    def prepare(self, data: Dataset) -> dict[str, float]:
        """The size's parquet files, digest and Java placement (made once, kept); then read
        through the page cache. Returns seconds and the files' bytes."""
        start = time.perf_counter()
        # In a child process: what making the files costs in memory is not left in this
        # one's resident set, where the checks' peak is read.
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as child:
            child.submit(make_files, data.rows, self.args.partitions).result()
        path = data.parquet(self.args.partitions)
        data.digest()
        data.partition_counts(self.args.partitions)
        made = time.perf_counter() - start
        data.read_through(self.args.partitions)
        size = sum(f.stat().st_size for f in path.glob("*.parquet"))
        print(
            f"dataset {data.rows:,} rows ({data.record_bytes:.0f} B key + value): {path}, "
            f"{size / 1e9:.2f} GB ({made:.0f} s to make or find)",
            flush=True,
        )
        return {"seconds": made, "bytes": size}

    def run(self, system: str, data: Dataset, label: str) -> Run:
        side = self.kafka2pc if system == KAFKA2PC else self.spark_sink
        return side(data, label)

    def _files(self, label: str, system: str) -> Path:
        slug = re.sub(r"[^a-z0-9]+", "-", f"{label}-{system}".lower()).strip("-")
        path = self.work / slug
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    def _conf(self, files: Path) -> dict[str, str]:
        conf = {
            **event_log_conf(files / "events"),
            "spark.driver.extraJavaOptions": gc_log_option(files / "gc-driver.log"),
        }
        if self.args.driver_memory:
            conf["spark.driver.memory"] = self.args.driver_memory
        return conf

    def _timeout_s(self, data: Dataset) -> float:
        return 1800 + data.rows * 50e-6

    def _measure(self) -> Any:
        return measure(self.cluster.broker_pid, classify=classify, interval_s=self.args.sample_s)

    def kafka2pc(self, data: Dataset, label: str) -> Run:
        files = self._files(label, KAFKA2PC)
        topic = self.cluster.topic(f"{label}-kafka2pc", self.args.partitions)
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
        if self.args.transaction_timeout_ms:
            arguments += ["--transaction-timeout-ms", str(self.args.transaction_timeout_ms)]
        committed = None
        with self._measure() as meter, live_probe(self.args.live_probe_s) as probes:
            started = now_ms()
            submitted = submit_prepare(
                arguments,
                master=self.master,
                conf=self._conf(files),
                log_path=files / "spark-submit.log",
                timeout_s=self._timeout_s(data),
            )
            prepared_ms = now_ms()
            if submitted.returncode == 0:
                committed = kafka2pc_commit(self.cluster.servers, manifest)
            ended = now_ms()
        if submitted.returncode != 0:
            return self._failed(KAFKA2PC, data, meter, topic, files, "prepare")
        if committed is None or committed.returncode != 0:
            out = "" if committed is None else committed.stdout + committed.stderr
            raise SystemExit(f"kafka2pc commit failed: {out}")
        batch = Manifest.from_json(manifest.read_text())
        meta = batch.metadata
        parts = {
            "spark-submit (prepare)": (prepared_ms - started) / 1000,
            "kafka2pc commit": (ended - prepared_ms) / 1000,
            **timeline(files / "events", started, prepared_ms),
        }
        info = self._after_write(files, topic, probes[0])
        info |= {
            "writer": meta.get("writer"),
            "partitioning": meta.get("partitioning"),
            "transactions": len(batch.committables),
        }
        expected = self._expected(data, committables=batch.committables)
        return self._checked(KAFKA2PC, meter, topic, expected, parts, info)

    def spark_sink(self, data: Dataset, label: str) -> Run:
        files = self._files(label, SPARK_SINK)
        topic = self.cluster.topic(f"{label}-spark-sink", self.args.partitions)
        with self._measure() as meter, live_probe(self.args.live_probe_s) as probes:
            started = now_ms()
            done = spark_submit(
                str(APPS / "spark_sink.py"),
                [
                    *("--source", str(data.parquet(self.args.partitions))),
                    *("--topic", topic, "--bootstrap-servers", self.cluster.servers),
                ],
                master=self.master,
                conf=self._conf(files),
                jars=self.jars,
                log_path=files / "spark-submit.log",
                timeout_s=self._timeout_s(data),
            )
            ended = now_ms()
        if done.returncode != 0:
            return self._failed(SPARK_SINK, data, meter, topic, files, "spark-submit")
        parts = timeline(files / "events", started, ended)
        info = self._after_write(files, topic, probes[0])
        expected = self._expected(data, transactional=False)
        return self._checked(SPARK_SINK, meter, topic, expected, parts, info)

    def _after_write(self, files: Path, topic: str, probes: int) -> dict[str, Any]:
        """What is read right after the write, before the check: the driver's GC log, the
        broker's heap after a full collection, the topic's bytes on disk."""
        broker = self.cluster.broker_pid
        return {
            "driver_heap": read_gc_log(files / "gc-driver.log"),
            "broker_heap_mib": heap_after_full_gc(broker) if broker else None,
            "topic_bytes": self.cluster.topic_bytes(topic),
            "probes": probes,
        }

    def _expected(self, data: Dataset, **overrides: Any) -> Expected:
        return Expected(
            data.rows,
            digest=data.digest(),
            partition_counts=data.partition_counts(self.args.partitions),
            streaming=True,
            **overrides,
        )

    def _checked(
        self,
        system: str,
        meter: Meter,
        topic: str,
        expected: Expected,
        parts: dict[str, float],
        info: dict[str, Any],
    ) -> Run:
        """Verified (then the topic deleted), with this process's peak RSS meanwhile."""
        at_start = rss_mib(os.getpid())
        with measure() as verifier:
            run = checked(self.cluster, system, meter, topic, expected, parts=parts, info=info)
        run.info["verify_s"] = verifier.seconds
        run.info["verifier_start_rss_mib"] = at_start
        run.info["verifier_rss_mib"] = verifier.peak_rss_mib.get("benchmark")
        return run

    def _failed(
        self, system: str, data: Dataset, meter: Meter, topic: str, files: Path, what: str
    ) -> Run:
        """A run whose job failed: reported (an out-of-memory error named), never verified."""
        log = files / "spark-submit.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        oom = "OutOfMemoryError" in text
        reason = f"{what} failed{' (java.lang.OutOfMemoryError)' if oom else ''}; see {log}"
        self.cluster.delete_topics([topic])
        info = {"failed": reason, "driver_heap": read_gc_log(files / "gc-driver.log")}
        return Run(system, data.rows, meter, None, {}, info)


# -- the report --------------------------------------------------------------------------------

Key = tuple[str, int]


def us_per_record(run: Run) -> float:
    return run.seconds / run.rows * 1e6 if run.rows else float("nan")


def print_checks(runs: Sequence[tuple[str, Run]]) -> bool:
    """One line per run, warm-ups included: what its check proved, or why it failed."""
    ok = True
    for label, run in runs:
        check = run.verification
        if check is None:
            ok = False
            print(f"  FAILED   {label:<8} {run.side:<16} {run.rows:>12,}: {run.info.get('failed')}")
            continue
        ok = ok and check.ok
        status = "OK" if check.ok else "FAILED"
        rss = run.info.get("verifier_rss_mib")
        owned = run.info.get("transactions")
        text = check.summary()
        if owned:
            text += f"; its {owned} transactions each committed in full (audit of the manifest)"
        print(
            f"  {status:<8} {label:<8} {run.side:<16} {run.rows:>12,}: {text}; "
            f"checked in {run.info['verify_s']:.0f} s, this process's peak RSS meanwhile "
            f"{fmt(rss if rss is not None else float('nan'), '.0f')} MiB "
            f"({fmt(run.info.get('verifier_start_rss_mib') or float('nan'), '.0f')} at its start)"
        )
    return ok


def print_times(results: dict[Key, Run], systems: Sequence[str], sizes: Sequence[int]) -> None:
    headers = ["system", "rows", "wall s", "us/record", "marginal us/rec", "CPU s"]
    headers += ["broker CPU s", "writer / partitioning"]
    rows = []
    for system in systems:
        before: Run | None = None
        for size in sizes:
            run = results.get((system, size))
            if run is None:
                continue
            failed = run.verification is None
            marginal = (
                (run.seconds - before.seconds) / (run.rows - before.rows) * 1e6
                if before is not None and not failed
                else float("nan")
            )
            how = (
                f"{run.info.get('writer')} / {run.info.get('partitioning')}"
                if system == KAFKA2PC and not failed
                else ("FAILED" if failed else "")
            )
            rows.append(
                [
                    system,
                    f"{size:,}",
                    fmt(run.seconds, ".1f"),
                    fmt(us_per_record(run)),
                    fmt(marginal),
                    fmt(run.cpu, ".1f"),
                    fmt(run.metric("broker_cpu"), ".1f"),
                    how,
                ]
            )
            before = None if failed else run
    print_table(headers, rows, left=(0, 7))


#: Each memory figure: its column, and how it is read from a run (MiB; NaN: not seen).
def _memory_figures() -> list[tuple[str, Callable[[Run], float]]]:
    def group(name: str) -> Callable[[Run], float]:
        return lambda run: run.meter.group_rss_mib.get(name, float("nan"))

    def heap(attribute: str) -> Callable[[Run], float]:
        def read(run: Run) -> float:
            found: HeapAfterGc | None = run.info.get("driver_heap")
            value = getattr(found, attribute) if found is not None else None
            return float("nan") if value is None else float(value)

        return read

    def value(name: str) -> Callable[[Run], float]:
        return lambda run: float("nan") if run.info.get(name) is None else run.info[name]

    return [
        *[(f"RSS {g}", group(g)) for g in GROUPS],
        (f"RSS {BROKER}", lambda run: run.meter.broker_peak_rss_mib or float("nan")),
        ("driver heap after GC, peak", heap("peak_after_mib")),
        ("driver heap after full GC, peak", heap("peak_after_full_mib")),
        ("broker heap after full GC", value("broker_heap_mib")),
        ("verifier RSS", value("verifier_rss_mib")),
    ]


def print_memory(results: dict[Key, Run], systems: Sequence[str], sizes: Sequence[int]) -> None:
    """Per system and size, each memory figure (MiB), and the driver's GC in words."""
    figures = _memory_figures()
    headers = ["system", "rows", *[name for name, _ in figures], "topic GB"]
    rows = []
    for system in systems:
        for size in sizes:
            run = results.get((system, size))
            if run is None:
                continue
            topic = run.info.get("topic_bytes")
            rows.append(
                [
                    system,
                    f"{size:,}",
                    *[fmt(read(run), ".0f") for _, read in figures],
                    fmt(topic / 1e9 if topic else float("nan")),
                ]
            )
    print_table(headers, rows)
    print("  driver JVM's GC log, per run:")
    for system in systems:
        for size in sizes:
            run = results.get((system, size))
            if run is not None:
                heap: HeapAfterGc | None = run.info.get("driver_heap")
                said = heap.summary() if heap is not None else "no pause logged"
                print(f"    {system} {size:,}: {said}; {run.info.get('probes', 0)} full GCs asked")


def slope(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares slope of ys in xs and its standard error (NaN with fewer than 3 points)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if n < 2 or sxx == 0:
        return float("nan"), float("nan")
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    if n < 3:
        return b, float("nan")
    residual = sum((y - my - b * (x - mx)) ** 2 for x, y in zip(xs, ys, strict=True))
    return b, math.sqrt(residual / (n - 2) / sxx)


def print_phases(results: dict[Key, Run], systems: Sequence[str], sizes: Sequence[int]) -> None:
    """Each run's phases (seconds; Spark's from its event log), where the time went."""
    for system in systems:
        for size in sizes:
            run = results.get((system, size))
            if run is not None and run.parts:
                phases = ", ".join(f"{name} {value:.1f}" for name, value in run.parts.items())
                print(f"  {system} {size:,}: {phases}")


def print_slopes(results: dict[Key, Run], systems: Sequence[str], sizes: Sequence[int]) -> None:
    """Per system and memory figure: the values by size, the slope (MiB per 10M rows) and
    its standard error (3 sizes or more), and whether it is flat: the change it predicts
    over the sizes within 10% of the mean or 16 MiB, or the slope within two standard
    errors of 0."""
    headers = ["system", "process / figure", *[f"{s:,}" for s in sizes]]
    headers += ["MiB per 10M rows", "+-", "verdict"]
    rows = []
    for system in systems:
        for name, read in _memory_figures():
            values = {s: read(r) for s in sizes if (r := results.get((system, s))) is not None}
            points = [(s / 1e7, v) for s, v in values.items() if v == v]
            if not points:
                continue
            b, error = slope([x for x, _ in points], [y for _, y in points])
            verdict = "-"
            if b == b:
                span = max(x for x, _ in points) - min(x for x, _ in points)
                mean = sum(y for _, y in points) / len(points)
                flat = abs(b * span) <= max(0.10 * mean, 16.0) or abs(b) <= 2 * error
                verdict = "flat" if flat else ("grows" if b > 0 else "shrinks")
            rows.append(
                [
                    system,
                    name,
                    *[fmt(values.get(s, float("nan")), ".0f") for s in sizes],
                    fmt(b, "+.1f"),
                    fmt(error, ".1f"),
                    verdict,
                ]
            )
    print_table(headers, rows, left=(0, 1, len(headers) - 1))


def print_disk(results: dict[Key, Run], data_bytes: dict[int, float]) -> None:
    """Bytes a row costs on disk: in the parquet files and in a topic (records, batch
    headers, markers), to size a larger run."""
    per_row = [b / rows for rows, b in data_bytes.items() if rows]
    topics = [r.info["topic_bytes"] / r.rows for r in results.values() if r.info.get("topic_bytes")]
    print(
        f"  parquet: {fmt(max(per_row, default=float('nan')), '.1f')} B a row; topic: "
        f"{fmt(max(topics, default=float('nan')), '.1f')} B a record (largest seen); per "
        f"100M rows: {fmt(max(per_row, default=0) * 1e8 / 1e9, '.1f')} GB of parquet (kept), "
        f"{fmt(max(topics, default=0) * 1e8 / 1e9, '.1f')} GB of topic (one at a time, deleted "
        f"after its check)"
    )


# -- main --------------------------------------------------------------------------------------


def parse_rows(text: str) -> int:
    """``8M``, ``200k``, ``1_000_000`` or ``1000000``."""
    text = text.strip().replace("_", "")
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:].lower(), 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=parse_rows, default=100_000_000, help="one size")
    parser.add_argument(
        "--sizes",
        type=lambda text: sorted({parse_rows(s) for s in text.split(",") if s.strip()}),
        help="comma-separated sizes (e.g. 8M,32M,100M), run smallest first; default --rows",
    )
    parser.add_argument("--partitions", type=int, default=8, help="Kafka partitions = files")
    parser.add_argument("--warmup-rows", type=parse_rows, default=200_000)
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    parser.add_argument(
        "--driver-memory", help="spark.driver.memory for both systems (default: Spark's, 1g)"
    )
    parser.add_argument(
        "--transaction-timeout-ms",
        type=int,
        help="kafka2pc's transaction timeout (default the package's, 15 min; the broker's "
        "transaction.max.timeout.ms is raised to it)",
    )
    parser.add_argument("--sample-s", type=float, default=0.5, help="RSS sampling interval")
    parser.add_argument(
        "--live-probe-s",
        type=float,
        default=20.0,
        help="a full GC of the driver JVM this often (jcmd GC.run), so that its GC log "
        "holds the live heap; 0: never",
    )
    add_subset_argument(parser, "--systems", SYSTEMS)
    add_cluster_arguments(parser)
    args = parser.parse_args(argv)
    args.systems = parse_subset(parser, args.systems, SYSTEMS, "--systems")
    sizes: list[int] = args.sizes or [args.rows]

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    fetch_kafka(args.kafka_version)
    jars = spark_kafka_jars() if SPARK_SINK in args.systems else []
    broker_config = {}
    if args.transaction_timeout_ms:
        broker_config["transaction.max.timeout.ms"] = str(max(900_000, args.transaction_timeout_ms))
    results: dict[Key, Run] = {}
    checks: list[tuple[str, Run]] = []
    data_bytes: dict[int, float] = {}
    cluster = Cluster.from_args(args, data_dir=WORK_DIR / "kafka", broker_config=broker_config)
    with cluster:
        bench = Scale(args, cluster, jars)
        print(
            f"{cluster.describe()}; sizes {', '.join(f'{s:,}' for s in sizes)}, "
            f"{args.partitions} partitions, {bench.master}; {machine_line()}",
            flush=True,
        )
        warm = Dataset(args.warmup_rows)
        bench.prepare(warm)
        if KAFKA2PC in args.systems and runs_until_mapped({}, spark_submit_binary()) == 2:
            # As in bench_peers: this run leaves the class archive's trace, the warm-up
            # writes the archive, the measured runs map it.
            checks.append(("archive", bench.run(KAFKA2PC, warm, "warmup-archive")))
        for system in args.systems:
            run = bench.run(system, warm, "warmup")
            checks.append(("warm-up", run))
            print(f"  warm-up {system:<16} {_status(run)}", flush=True)
        for index, size in enumerate(sizes):
            data = Dataset(size)
            data_bytes[size] = bench.prepare(data)["bytes"]
            shift = index % len(args.systems)
            for system in args.systems[shift:] + args.systems[:shift]:
                run = bench.run(system, data, f"rows-{size}")
                results[(system, size)] = run
                checks.append((f"{size:,}", run))
                print(
                    f"  {size:>12,} {system:<16} {run.seconds:7.1f} s  {_status(run)}", flush=True
                )

    print("\nverification (log audit, read_committed count, digest; streaming, bounded memory):")
    ok = print_checks(checks)
    if not ok:
        print("NOT VERIFIED: the figures below are not to be believed")
    print(f"\nscale, {bench.master}, {args.partitions} partitions; {machine_line()}")
    for system in args.systems:
        print(f"  {system}: {GUARANTEES[system]}")
    print("\ntime per system and size:")
    print_times(results, args.systems, sizes)
    print("\nphases, s:")
    print_phases(results, args.systems, sizes)
    print(
        "\npeak memory per system and size, MiB (RSS: a group's processes summed in one "
        f"sample, every {args.sample_s} s; heap: after GC):"
    )
    print_memory(results, args.systems, sizes)
    print("\nslope of memory in rows (MiB per 10M rows, least squares over the sizes):")
    print_slopes(results, args.systems, sizes)
    print("\ndisk:")
    print_disk(results, data_bytes)
    print(json.dumps({"verified": ok}))
    return 0 if ok else 1


def _status(run: Run) -> str:
    if run.verification is None:
        return f"FAILED: {run.info.get('failed')}"
    return run.verification.summary()


if __name__ == "__main__":
    sys.exit(main())
