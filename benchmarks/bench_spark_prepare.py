"""Benchmark of the Spark prepare phase against its non-transactional twin and Airflow's operator.

What it measures, side by side in one run, against a local Apache Kafka broker and an
in-process Spark session (``local[2]``); rows are about 200 bytes (key: the id as text;
value: the row as JSON, encoded by Spark), written into ``--partitions`` Spark partitions
and as many Kafka partitions:

(1) ``prepare_dataframe`` (one open transaction per partition) against the same job
    written non-transactionally: a copy of ``prepare_dataframe`` in this file that runs the
    same steps through the library's own functions (``partitioned_input``, ``_check_topic``,
    persist, ``materialise``, ``mapInArrow`` over ``partition_writer._records`` and the
    writer's ``_produce_all`` loop with its ``DeliveryReports``) where only the producer
    differs: idempotent, not transactional, flushed at the end, no statistics callback, no
    committable. It must follow ``prepare_dataframe`` when that changes. Timed: the whole call;
    the CPU each process group used meanwhile is printed too. A second baseline, for
    information, uses a plain producer (not idempotent, acks=all): a new idempotent
    librdkafka producer often sends nothing for 500 ms (at times 1 s) because its first
    producer-id request finds no broker connection yet and is retried on a fixed 500 ms
    timer; the transactional writer does not pay that (``init_transactions`` waits for
    the id itself), so the idempotent baseline carries a fixed cost per partition.
    One session serves every round; each round runs the four sides (transactional,
    idempotent, plain, and a no-Kafka floor: the same job whose writer only reads the Arrow
    batches), in reverse order every other round; the result is the median of the rounds.
(2) The write phase: the duration of the ``mapInArrow`` Spark job alone (the last job that
    ``prepare_dataframe`` runs), read from Spark's status store (job submission to
    completion); the jobs before it (materialisation and checks) are printed separately.
(3) End to end, cold: the benchmark's fresh process builds its Spark session (JVM launch
    included), runs ``prepare_dataframe`` on the full rows and commits every committable with
    one ``TransactionController.commit_all``. This is the first thing it does (round 0, a
    single sample, not reused for (1)). Compared with the official Airflow Kafka provider's
    ``ProduceToTopicOperator`` (its runs interleaved with the rounds), run in a child process
    the way a worker runs it (``operator.execute(context={})``, the connection from
    ``AIRFLOW_CONN_KAFKA_DEFAULT``, its log lines written to a task log file under the work
    directory): "as shipped" (defaults:
    a synchronous ``flush()`` after every record, a log line per delivery) on an
    ``--operator-slice`` of the rows, and "tuned" (``synchronous=False``, a silent
    ``delivery_callback``, and a connection whose producer queue holds the whole input,
    since the operator does not handle ``BufferError``) on the full rows. Its
    ``producer_function`` yields the same keys and JSON values, built as it goes (as Spark's
    time includes its JSON encoding); the cost of building them alone is printed.
(4) Peak RSS of the Python worker for 1M and 4M rows in one partition, measured inside the
    worker by an ``on_batch`` hook: at the task's first batch it resets the kernel's
    high-water mark (``/proc/self/clear_refs``, so earlier tasks of a reused worker do not
    count), then a thread samples ``getrusage(RUSAGE_SELF).ru_maxrss`` until the task ends
    (the final flush included) and writes it to a file under the work directory.

Every transactional write is committed and then audited from the log's markers
(``audit_topic(..., duplicates=True)``): exactly the source rows must be committed, once
each, nothing open or aborted. Non-transactional writes are counted back. Each run writes a
fresh topic, deleted after its check.

Run (about 5 minutes with the defaults on an idle 2-core machine, 8 when it is busy):

    python benchmarks/bench_spark_prepare.py [--rows 2000000 --partitions 8 --rounds 2]
        [--operator-slice 50000 --rss-rows 1000000,4000000] [--skip-operator] [--skip-rss]
        [--driver-memory 2g] [--bootstrap-servers HOST:PORT]

Scratch files (the operator's task logs, the RSS probes, the broker's log) go to
/tmp/bench-spark; every topic it creates is deleted after its check.

It needs the ``spark`` and ``embedded`` extras, and for the Airflow comparison the provider
in the same environment (it pulls neither pyspark-client nor other versions of pyspark,
pyarrow or pandas, unlike the Spark provider; check with ``pip install --dry-run``):

    pip install apache-airflow==3.3.2 apache-airflow-providers-apache-kafka confluent-kafka==2.16.1

Without it, pass ``--skip-operator``: the comparison (3) is then reported as skipped.

The closing table gives each ratio, its target and whether it is met. Targets are reported,
not enforced; the exit status is 1 only when a commit or an audit fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WORK_DIR = Path("/tmp/bench-spark")

# Targets of the issue (ratios are measured side by side in the same run).
TX_RATIO_TARGET = 0.95
WRITE_RATE_TARGET = 120_000.0
SHIPPED_RATIO_TARGET = 20.0
TUNED_RATIO_TARGET = 1.5
RSS_RATIO_TARGET = 1.25  # "flat": 4x the rows may cost at most 25% more peak memory

# The sides of each round; the baselines differ from TX in the producer only.
TX = "transactional"
IDEMPOTENT = "non-tx idempotent"
PLAIN = "non-tx plain"
FLOOR = "no-Kafka floor"
SIDES = (TX, IDEMPOTENT, PLAIN, FLOOR)
BASELINE_PRODUCER = {IDEMPOTENT: "idempotent", PLAIN: "plain", FLOOR: "none"}

AUDIT_ATTEMPTS = 3
FLUSH_TIMEOUT_S = 120.0

# Operator child: delivery errors seen by the silent callback.
_DELIVERY_ERRORS: list[Any] = []


# -- the Airflow operator, in a child process -----------------------------------------------


def silent_delivery(err: Any, msg: Any) -> None:
    """The tuned operator's delivery callback: no log line, errors kept for the report."""
    if err is not None:
        _DELIVERY_ERRORS.append(err)


NOTE = "note-" + ("abcdefghij" * 13)[:125]  # the same 130 characters as the Spark source


def operator_records(rows: int) -> Iterator[tuple[bytes, bytes]]:
    """The Spark source's records, built in Python: key = id as text, value = row as JSON."""
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    for i in range(rows):
        row = {"id": i, "customer": f"customer-{i % 9973:05d}", "amount": i * 1.5, "note": NOTE}
        yield str(i).encode(), dumps(row).encode()


def operator_child(args: argparse.Namespace) -> int:
    """Run ProduceToTopicOperator once; its own log goes to this process's stdout/stderr."""
    extra: dict[str, Any] = {"bootstrap.servers": args.child_bootstrap}
    if args.operator_child == "tuned":
        # The operator does not catch BufferError: the queue must hold the whole input.
        extra["queue.buffering.max.messages"] = max(100_000, args.child_rows + 10_000)
    os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"] = json.dumps({"conn_type": "kafka", "extra": extra})
    import airflow.providers.apache.kafka as provider
    from airflow.providers.apache.kafka.operators.produce import ProduceToTopicOperator

    rows = args.child_rows
    # The producer_function builds each record as a DAG's would (Spark's time includes its
    # JSON encoding too); what building alone costs is measured apart and reported.
    start = time.perf_counter()
    value_bytes = sum(len(value) for _, value in operator_records(rows))
    build_seconds = time.perf_counter() - start
    tuned: dict[str, Any] = {}
    if args.operator_child == "tuned":
        tuned = {"synchronous": False, "delivery_callback": f"{__name__}.silent_delivery"}
    operator = ProduceToTopicOperator(
        task_id=f"produce_{args.operator_child}",
        topic=args.child_topic,
        producer_function=lambda: operator_records(rows),
        **tuned,
    )
    start = time.perf_counter()
    operator.execute(context={})
    seconds = time.perf_counter() - start
    result = {
        "seconds": seconds,
        "rows": rows,
        "build_seconds": build_seconds,
        "delivery_errors": len(_DELIVERY_ERRORS),
        "provider_version": provider.__version__,
        "value_bytes": value_bytes / max(1, rows),
    }
    Path(args.child_result).write_text(json.dumps(result))
    return 0


# -- the Spark side ---------------------------------------------------------------------------

# As in tests/spark_support.py: the workers run this interpreter, Spark stays quiet.
PYTHON_ENV = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
QUIET_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.pyspark.python": sys.executable,
}


@dataclass
class JobTiming:
    job_id: int
    name: str
    seconds: float


@dataclass
class SparkRun:
    """One prepare (transactional, non-transactional, or the no-Kafka floor)."""

    side: str
    topic: str
    seconds: float
    jobs: list[JobTiming]
    commit_seconds: float = 0.0  # one commit_all of every committable (transactional runs)
    verified: bool | None = None
    verify_note: str = ""
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds during the prepare

    @property
    def write_seconds(self) -> float:
        return self.jobs[-1].seconds if self.jobs else float("nan")

    def phases(self) -> dict[str, float]:
        """Materialise (the jobs up to a persist's count, or all before the write), checks
        (jobs between that count and the write, if any), write (the last job), and the
        driver's time outside Spark jobs."""
        if not self.jobs:
            return {}
        count_at = next(
            (i for i, j in enumerate(self.jobs[:-1]) if j.name.startswith("count at")), None
        )
        split = len(self.jobs) - 1 if count_at is None else count_at + 1
        out = {
            "materialise": sum(j.seconds for j in self.jobs[:split]),
            "checks": sum(j.seconds for j in self.jobs[split:-1]),
            "write": self.jobs[-1].seconds,
        }
        out["driver"] = self.seconds - sum(out.values())
        return out


def spark_jobs(spark: Any, after: int) -> list[JobTiming]:
    """Jobs with an id above ``after`` from Spark's status store, submission to completion."""
    store = spark.sparkContext._jsc.sc().statusStore()
    seq = store.jobsList(None)
    jobs = []
    for i in range(seq.size()):
        job = seq.apply(i)
        if job.jobId() <= after:
            continue
        submitted, completed = job.submissionTime(), job.completionTime()
        seconds = float("nan")
        if submitted.isDefined() and completed.isDefined():
            seconds = (completed.get().getTime() - submitted.get().getTime()) / 1000
        jobs.append(JobTiming(job.jobId(), str(job.name()), seconds))
    return sorted(jobs, key=lambda j: j.job_id)


def last_job_id(spark: Any) -> int:
    jobs = spark_jobs(spark, -1)
    return jobs[-1].job_id if jobs else -1


def start_spark(driver_memory: str) -> tuple[Any, Any]:
    """The session and the JVM's process (to stop it by its PID at the end)."""
    os.environ.update(PYTHON_ENV)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("bench-spark-prepare")
    for key, value in {**QUIET_CONF, "spark.driver.memory": driver_memory}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark, getattr(spark.sparkContext._gateway, "proc", None)


def source(spark: Any, rows: int) -> Any:
    """About 200 bytes a row as JSON: id, customer, amount, a 130-character note."""
    return spark.range(rows).selectExpr(
        "id",
        "concat('customer-', lpad(CAST(id % 9973 AS STRING), 5, '0')) AS customer",
        "CAST(id * 1.5 AS DOUBLE) AS amount",
        f"'{NOTE}' AS note",
    )


def baseline_writer(
    config: dict[str, Any], topic: str, producer_kind: str
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """``partition_writer`` with a non-transactional producer, or none at all.

    ``producer_kind``: "idempotent" (``enable.idempotence``, as the writer's), "plain" (not
    idempotent, acks=all), or "none" (the rows are only read: the floor of the job).
    """

    def write_partition(batches: Iterator[Any]) -> Iterator[Any]:
        from confluent_kafka import Producer
        from pyspark import TaskContext

        from airflow_provider_kafka2pc.spark.partition_writer import (
            _Counter,
            _records,
            result_batch,
        )
        from airflow_provider_kafka2pc.transaction.writer import (
            DeliveryReports,
            TransactionalWriter,
        )

        context = TaskContext.get()
        counter = _Counter()
        records = _records(batches, [], counter, None)
        delivered = 0
        if producer_kind != "none":
            # The writer's settings less the transactional ones (no transactional.id, no
            # statistics callback), its delivery bookkeeping, its topic check, its loop.
            deliveries = DeliveryReports()
            producer = Producer(
                {
                    "allow.auto.create.topics": False,
                    **config,
                    "enable.idempotence": producer_kind == "idempotent",
                    "acks": "all",
                    "on_delivery": deliveries,
                }
            )
            metadata = producer.list_topics(topic, timeout=30)
            if topic not in metadata.topics:
                raise RuntimeError(f"topic {topic} missing")
            first = next(records, None)
            if first is not None:
                produced = TransactionalWriter._produce_all(
                    producer, topic, first, records, deliveries
                )
                if producer.flush(FLUSH_TIMEOUT_S):
                    raise RuntimeError("records undelivered")
                if deliveries.error is not None or deliveries.count != produced:
                    raise RuntimeError(f"{produced} produced, {deliveries.count} delivered")
                delivered = deliveries.count
        else:
            for _ in records:
                delivered += 1
        yield result_batch(
            context.partitionId(),
            context.attemptNumber(),
            counter.rows,
            json.dumps({"record_count": delivered}),
        )

    return write_partition


def prepare_non_transactional(
    df: Any,
    *,
    topic: str,
    partitions: int,
    producer_config: dict[str, Any],
    key_column: str,
    producer_kind: str,
) -> int:
    """``prepare_dataframe``'s steps, with :func:`baseline_writer`; returns the rows written."""
    from pyspark import StorageLevel

    from airflow_provider_kafka2pc.spark.partition_writer import RESULT_SCHEMA
    from airflow_provider_kafka2pc.spark.prepare import (
        _check_topic,
        materialise,
        partitioned_input,
    )

    prepared = partitioned_input(df, partitions, key_column)
    _check_topic(producer_config, topic)
    prepared = prepared.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        partition_rows, nulls = materialise(prepared, partitions)
        source_rows = sum(partition_rows)
        if nulls:
            raise RuntimeError(f"{nulls} null keys")
        writer = baseline_writer(producer_config, topic, producer_kind)
        reports = prepared.mapInArrow(writer, RESULT_SCHEMA).collect()
    finally:
        prepared.unpersist()
    got = sorted(
        (r["partition"], r["input_rows"], json.loads(r["committable"])["record_count"])
        for r in reports
    )
    expected = [(p, n, n) for p, n in enumerate(partition_rows)]
    if got != expected:
        raise RuntimeError(f"baseline reports {got}, expected {expected}")
    return source_rows


# -- peak RSS inside the Python worker -------------------------------------------------------


class PeakRssProbe:
    """``on_batch`` hook: the worker's peak RSS over one task, written to ``path`` (JSON).

    At the task's first batch the kernel's high-water mark is reset (clear_refs "5"), so a
    reused worker's earlier tasks do not count; a thread then samples ru_maxrss until the
    next task starts in this worker (the flush after the last batch is included).
    """

    def __init__(self, path: str, interval_s: float = 0.02) -> None:
        self.path = path
        self.interval_s = interval_s

    def __call__(self, partition: int, attempt: int, rows: int) -> None:
        from pyspark import TaskContext

        task = TaskContext.get().taskAttemptId()
        marker = f"{self.path}:{task}"
        if os.environ.get("KAFKA2PC_BENCH_RSS_TASK") == marker:
            return
        os.environ["KAFKA2PC_BENCH_RSS_TASK"] = marker
        start_kib = _current_rss_kib()
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            reset = True
        except OSError:
            reset = False
        threading.Thread(
            target=self._sample, args=(task, reset, start_kib, partition), daemon=True
        ).start()

    def _sample(self, task: int, reset: bool, start_kib: int, partition: int) -> None:
        from pyspark import TaskContext

        deadline = time.monotonic() + 3600
        last = -1
        while time.monotonic() < deadline:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            if peak != last:
                last = peak
                tmp = f"{self.path}.tmp"
                with open(tmp, "w") as f:
                    json.dump(
                        {
                            "peak_kib": peak,
                            "start_kib": start_kib,
                            "reset": reset,
                            "pid": os.getpid(),
                            "partition": partition,
                        },
                        f,
                    )
                os.replace(tmp, self.path)
            time.sleep(self.interval_s)
            context = TaskContext.get()
            if context is None or context.taskAttemptId() != task:
                return


def _current_rss_kib() -> int:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") // 1024


# -- CPU accounting ----------------------------------------------------------------------------

CPU_GROUPS = ("broker", "spark JVM", "python workers", "driver")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # from field 3 (state) on


def cpu_snapshot(broker_pid: int | None, jvm_pid: int | None) -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) so far of each process of interest, by PID.

    The Python workers are the Spark JVM's descendants (its daemon forks them).
    """
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat_fields(int(entry))) is not None:
            stats[int(entry)] = fields
    children: dict[int, list[int]] = {}
    for pid, fields in stats.items():
        children.setdefault(int(fields[1]), []).append(pid)
    labels = {os.getpid(): "driver"}
    if broker_pid is not None:
        labels[broker_pid] = "broker"
    if jvm_pid is not None:
        labels[jvm_pid] = "spark JVM"
        todo = list(children.get(jvm_pid, []))
        while todo:
            pid = todo.pop()
            labels[pid] = "python workers"
            todo.extend(children.get(pid, []))
    return {
        pid: (label, (int(stats[pid][11]) + int(stats[pid][12])) / tick)
        for pid, label in labels.items()
        if pid in stats
    }


def cpu_used(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds per group between two snapshots (processes that ended are not counted)."""
    used = dict.fromkeys(CPU_GROUPS, 0.0)
    for pid, (label, seconds) in after.items():
        used[label] += seconds - (before[pid][1] if pid in before else 0.0)
    return used


# -- Kafka helpers ----------------------------------------------------------------------------


class Bench:
    """The broker connection, the topics and the Spark session of one benchmark run."""

    def __init__(self, args: argparse.Namespace, servers: str, protocol: Any) -> None:
        self.args = args
        self.servers = servers
        self.config: dict[str, Any] = {"bootstrap.servers": servers}
        self.protocol = protocol
        self.prefix = f"bench-{uuid.uuid4().hex[:8]}"
        self.spark: Any = None
        self.broker_pid: int | None = None
        self.jvm_pid: int | None = None
        self.last_audit = ""

    def new_topic(self, name: str) -> str:
        topic = f"{self.prefix}-{name}"
        self.protocol.create_topic(topic, self.args.partitions)
        return topic

    def delete_topic(self, topic: str) -> None:
        """Free the broker's memory (between rounds)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self.config)
        for future in admin.delete_topics([topic]).values():
            try:
                future.result(30)
            except Exception as exc:  # best effort: only memory is at stake
                print(f"  note: could not delete {topic}: {exc}", flush=True)

    def audit(self, topic: str, committables: Sequence[Any], rows: int, keys: bool) -> str:
        """Check the log; returns "" when exactly ``rows`` records are visible once each.

        An audit that reads fewer records than were acknowledged is repeated (the embedded
        broker sometimes answers a fetch before the log end with nothing, which the log
        reader takes for the end); every such retry is reported.
        """
        from airflow_provider_kafka2pc.transaction.audit import audit_topic

        notes = []
        for attempt in range(1, AUDIT_ATTEMPTS + 1):
            report = audit_topic(self.protocol, topic, committables, duplicates=keys)
            totals = report.totals
            seen = totals["committed"] + totals["aborted"] + totals["open"]
            if seen < rows and attempt < AUDIT_ATTEMPTS:
                notes.append(f"audit {attempt} read only {seen:,} of {rows:,} records; retried")
                continue
            problems = []
            if committables:
                if totals["committed"] != rows or totals["non_transactional"]:
                    problems.append(f"committed {totals['committed']:,} of {rows:,}")
                if totals["open"] or totals["aborted"]:
                    problems.append(f"open {totals['open']:,}, aborted {totals['aborted']:,}")
                states = {v["state"] for v in report.committables}
                if states != {"COMMITTED"} or not all(v["complete"] for v in report.committables):
                    problems.append(f"committable states {sorted(states)}")
            elif totals["non_transactional"] != rows:
                problems.append(f"{totals['non_transactional']:,} of {rows:,} records visible")
            if keys and report.duplicates is not None:
                dup = report.duplicates
                if dup["committed_keys"] != rows or dup["extra_copies"]:
                    problems.append(
                        f"{dup['committed_keys']:,} keys, {dup['extra_copies']:,} extra copies"
                    )
            summary = (
                f"committed {totals['committed']:,}, open {totals['open']:,}, aborted "
                f"{totals['aborted']:,}, non-transactional {totals['non_transactional']:,}"
            )
            if keys and report.duplicates is not None:
                summary += f", duplicate keys {report.duplicates['duplicate_keys']:,}"
            notes.append(summary)
            if problems:
                return "FAILED: " + "; ".join(problems) + " (" + "; ".join(notes) + ")"
            self.last_audit = "; ".join(notes)
            return ""
        return "FAILED: no audit"

    # -- the Spark runs --------------------------------------------------------------------

    def run_transactional(self, label: str, rows: int, partitions: int, **hook: Any) -> SparkRun:
        from airflow_provider_kafka2pc.spark import prepare_dataframe
        from airflow_provider_kafka2pc.transaction.controller import (
            Outcome,
            TransactionController,
        )

        topic = self.new_topic(label)
        ids = [f"{topic}-{i}" for i in range(partitions)]
        df = source(self.spark, rows)
        before = last_job_id(self.spark)
        cpu_before = cpu_snapshot(self.broker_pid, self.jvm_pid)
        start = time.perf_counter()
        batch = prepare_dataframe(
            df,
            topic=topic,
            transactional_ids=ids,
            producer_config=self.config,
            key_column="id",
            **hook,
        )
        seconds = time.perf_counter() - start
        cpu = cpu_used(cpu_before, cpu_snapshot(self.broker_pid, self.jvm_pid))
        run = SparkRun(TX, topic, seconds, spark_jobs(self.spark, before), cpu=cpu)
        controller = TransactionController(self.protocol)
        start = time.perf_counter()
        outcomes = [r.outcome for r in controller.commit_all(batch.committables)]
        run.commit_seconds = time.perf_counter() - start
        problem = ""
        if any(o is not Outcome.COMMITTED for o in outcomes):
            problem = f"FAILED: commit outcomes {[o.value for o in outcomes]}"
        if batch.source_rows != rows:
            problem = f"FAILED: prepared {batch.source_rows:,} of {rows:,} rows"
        problem = problem or self.audit(topic, batch.committables, rows, keys=True)
        run.verified = not problem
        run.verify_note = problem or self.last_audit
        self.delete_topic(topic)
        return run

    def run_baseline(self, label: str, rows: int, side: str) -> SparkRun:
        topic = self.new_topic(label)
        df = source(self.spark, rows)
        before = last_job_id(self.spark)
        cpu_before = cpu_snapshot(self.broker_pid, self.jvm_pid)
        start = time.perf_counter()
        written = prepare_non_transactional(
            df,
            topic=topic,
            partitions=self.args.partitions,
            producer_config=self.config,
            key_column="id",
            producer_kind=BASELINE_PRODUCER[side],
        )
        seconds = time.perf_counter() - start
        cpu = cpu_used(cpu_before, cpu_snapshot(self.broker_pid, self.jvm_pid))
        run = SparkRun(side, topic, seconds, spark_jobs(self.spark, before), cpu=cpu)
        if side != FLOOR:
            problem = "" if written == rows else f"FAILED: {written:,} of {rows:,} rows"
            problem = problem or self.audit(topic, (), rows, keys=False)
            run.verified = not problem
            run.verify_note = problem or self.last_audit
        self.delete_topic(topic)
        return run

    # -- the operator -------------------------------------------------------------------------

    def run_operator(self, mode: str, rows: int, label: str) -> dict[str, Any]:
        topic = self.new_topic(label)
        result_path = WORK_DIR / f"{topic}.json"
        log_path = WORK_DIR / f"operator-{mode}.log"
        with log_path.open("w") as log:
            done = subprocess.run(
                [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--operator-child",
                    mode,
                    "--child-rows",
                    str(rows),
                    "--child-topic",
                    topic,
                    "--child-bootstrap",
                    self.servers,
                    "--child-result",
                    str(result_path),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=600 + rows / 200,
            )
        if done.returncode != 0:
            raise RuntimeError(f"operator child ({mode}) failed; see {log_path}")
        result = json.loads(result_path.read_text())
        result_path.unlink()
        result["log_lines"] = sum(1 for _ in log_path.open())
        result["log_path"] = str(log_path)
        problem = self.audit(topic, (), rows, keys=False)
        if result["delivery_errors"]:
            problem = f"FAILED: {result['delivery_errors']} delivery errors " + problem
        result["verified"] = not problem
        result["verify_note"] = problem or self.last_audit
        self.delete_topic(topic)
        return result


def operator_available() -> str | None:
    """The provider's version, or None; checked in a child (importing Airflow sets up logging)."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import airflow.providers.apache.kafka as p, "
            "airflow.providers.apache.kafka.operators.produce; print(p.__version__)",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.stdout.strip().splitlines()[-1] if done.returncode == 0 else None


# -- report ----------------------------------------------------------------------------------


def rate(rows: int, seconds: float) -> float:
    return rows / seconds if seconds > 0 else float("nan")


def fmt_rate(value: float) -> str:
    return f"{value:,.0f} rec/s"


def yes_no(ok: bool | None) -> str:
    return "skipped" if ok is None else ("yes" if ok else "no")


def print_run(run: SparkRun, rows: int, tag: str) -> None:
    phases = run.phases()
    extra = ""
    if run.side == TX:
        extra = f", commit_all {run.commit_seconds:.2f} s"
    check = ""
    if run.verified is not None:
        check = f"; check: {'OK' if run.verified else run.verify_note}"
    print(
        f"  {tag:<9}{run.side:<19}{run.seconds:>7.2f} s {fmt_rate(rate(rows, run.seconds)):>15}"
        f"  [materialise {phases.get('materialise', 0):.2f}, checks "
        f"{phases.get('checks', 0):.2f}, write {phases.get('write', 0):.2f} "
        f"({fmt_rate(rate(rows, run.write_seconds))}), driver {phases.get('driver', 0):.2f}]"
        f"{extra}{check}",
        flush=True,
    )


def print_jobs(run: SparkRun) -> None:
    print(f"  Spark jobs of one {run.side} prepare (submission to completion):")
    for job in run.jobs:
        name = job.name if len(job.name) < 70 else job.name[:67] + "..."
        print(f"    job {job.job_id:>4}  {job.seconds:>7.2f} s  {name}")


def count(n: int) -> str:
    return f"{n / 1e6:g}M" if n >= 1_000_000 else f"{n / 1e3:g}k"


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


# -- main -------------------------------------------------------------------------------------


def parse_rows(text: str) -> list[int]:
    return [int(x.replace("_", "")) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--operator-slice", type=int, default=50_000)
    parser.add_argument(
        "--rss-rows", type=parse_rows, default=[1_000_000, 4_000_000], help="e.g. 1000000,4000000"
    )
    parser.add_argument("--skip-operator", action="store_true")
    parser.add_argument("--skip-rss", action="store_true")
    parser.add_argument("--driver-memory", default="2g", help="spark.driver.memory")
    parser.add_argument(
        "--bootstrap-servers", help="use this Kafka cluster instead of a local Apache Kafka broker"
    )
    parser.add_argument(
        "--kafka-version",
        default="4.4.0",  # DEFAULT_KAFKA_VERSION; imported late, after the argument check
        help="Apache Kafka release of the local broker (fetched from Maven Central once)",
    )
    for name in ("child-rows", "child-topic", "child-bootstrap", "child-result"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    parser.add_argument("--operator-child", choices=("shipped", "tuned"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.operator_child:
        args.child_rows = int(args.child_rows)
        return operator_child(args)
    WORK_DIR.mkdir(parents=True, exist_ok=True)

    provider = None
    if not args.skip_operator:
        provider = operator_available()
        if provider is None:
            print(
                "apache-airflow-providers-apache-kafka is not importable here; install it "
                "(see the docstring) or pass --skip-operator",
                file=sys.stderr,
            )
            return 2

    from airflow_provider_kafka2pc.broker import KafkaBroker
    from airflow_provider_kafka2pc.transaction.protocol import KafkaProtocol

    rows, parts = args.rows, args.partitions
    load_start = os.getloadavg()
    wall = time.perf_counter()
    print(
        f"rows {rows:,} (~200 B JSON values), {parts} partitions, local[2], "
        f"{args.rounds} rounds; operator slice {args.operator_slice:,}; "
        f"provider {provider or 'skipped'}; load average {load_start[0]:.1f}",
        flush=True,
    )
    gateway = None
    ok = True
    with contextlib.ExitStack() as stack:
        servers, broker_pid = args.bootstrap_servers, None
        if not servers:
            local = KafkaBroker(args.kafka_version, data_dir=WORK_DIR / "kafka")
            broker = stack.enter_context(local)
            servers, broker_pid = broker.bootstrap_servers, broker.pid
            print(f"Apache Kafka {args.kafka_version} pid {broker_pid} at {servers}", flush=True)
        else:
            print(f"broker {servers} (not started here: its CPU is not counted)", flush=True)
        protocol = stack.enter_context(KafkaProtocol({"bootstrap.servers": servers}))
        bench = Bench(args, servers, protocol)
        bench.broker_pid = broker_pid
        try:
            # Round 0: end to end, cold (session start, prepare, commit of every committable).
            print("round 0: end to end from a cold start", flush=True)
            start = time.perf_counter()
            bench.spark, gateway = start_spark(args.driver_memory)
            bench.jvm_pid = getattr(gateway, "pid", None)
            session_s = time.perf_counter() - start
            cold = bench.run_transactional("e2e", rows, parts)
            e2e_s = session_s + cold.seconds + cold.commit_seconds
            print(f"  session start {session_s:.2f} s (JVM pid {getattr(gateway, 'pid', '?')})")
            print_run(cold, rows, "cold")
            print(
                f"  end to end {e2e_s:.2f} s = {fmt_rate(rate(rows, e2e_s))} "
                f"(session {session_s:.2f} + prepare {cold.seconds:.2f} + commit "
                f"{cold.commit_seconds:.2f})",
                flush=True,
            )
            ok &= bool(cold.verified)

            runs: dict[str, list[SparkRun]] = {side: [] for side in SIDES}
            shipped: list[dict[str, Any]] = []
            tuned: list[dict[str, Any]] = []
            for rnd in range(1, args.rounds + 1):
                print(f"round {rnd}/{args.rounds}", flush=True)
                ops = ["shipped", "tuned"] if rnd % 2 else ["tuned", "shipped"]
                sides = SIDES if rnd % 2 else tuple(reversed(SIDES))
                if not args.skip_operator:
                    shipped_or_tuned = ops[0]
                    n = args.operator_slice if shipped_or_tuned == "shipped" else rows
                    res = bench.run_operator(shipped_or_tuned, n, f"op-{shipped_or_tuned}-r{rnd}")
                    (shipped if shipped_or_tuned == "shipped" else tuned).append(res)
                    print_operator(shipped_or_tuned, res)
                for side in sides:
                    label = f"{side.split()[-1]}-r{rnd}"
                    if side == TX:
                        run = bench.run_transactional(label, rows, parts)
                    else:
                        run = bench.run_baseline(label, rows, side)
                    runs[side].append(run)
                    print_run(run, rows, f"r{rnd}")
                    ok &= run.verified is not False
                if not args.skip_operator:
                    mode = ops[1]
                    n = args.operator_slice if mode == "shipped" else rows
                    res = bench.run_operator(mode, n, f"op-{mode}-r{rnd}")
                    (shipped if mode == "shipped" else tuned).append(res)
                    print_operator(mode, res)
            ok &= all(r["verified"] for r in shipped + tuned)

            rss: list[tuple[int, dict[str, Any], SparkRun]] = []
            if not args.skip_rss:
                print("peak RSS of the Python worker, one partition", flush=True)
                for n in args.rss_rows:
                    path = WORK_DIR / f"{bench.prefix}-rss-{n}.json"
                    run = bench.run_transactional(
                        f"rss-{n}", n, 1, on_batch=PeakRssProbe(str(path))
                    )
                    time.sleep(0.2)
                    probe = json.loads(path.read_text())
                    rss.append((n, probe, run))
                    print(
                        f"  {n:>11,} rows: peak {probe['peak_kib'] / 1024:,.0f} MiB, "
                        f"{(probe['peak_kib'] - probe['start_kib']) / 1024:+,.0f} MiB over the "
                        f"{probe['start_kib'] / 1024:,.0f} MiB at the first batch (worker pid "
                        f"{probe['pid']}, high-water reset {'yes' if probe['reset'] else 'NO'}); "
                        f"prepare {run.seconds:.1f} s; check: "
                        f"{'OK' if run.verified else run.verify_note}",
                        flush=True,
                    )
                    ok &= bool(run.verified)
            if runs[TX]:
                print_jobs(runs[TX][0])
                print_jobs(runs[IDEMPOTENT][0])
            report(args, rows, session_s, cold, e2e_s, runs, shipped, tuned, rss, ok)
        finally:
            if bench.spark is not None:
                bench.spark.stop()
            if gateway is not None and gateway.poll() is None:
                gateway.terminate()
                try:
                    gateway.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    gateway.kill()
                    gateway.wait(timeout=10)
    load_end = os.getloadavg()
    print(
        f"total wall time {time.perf_counter() - wall:.0f} s; load average "
        f"{load_start[0]:.1f} at start, {load_end[0]:.1f} at end (2 cores)"
    )
    return 0 if ok else 1


def print_operator(mode: str, res: dict[str, Any]) -> None:
    check = "OK" if res["verified"] else res["verify_note"]
    print(
        f"  operator {mode:<8}{res['rows']:>10,} rows {res['seconds']:>7.2f} s "
        f"{fmt_rate(rate(res['rows'], res['seconds'])):>15}  (of which building the records "
        f"{res['build_seconds']:.2f} s; values {res['value_bytes']:.0f} B; task log "
        f"{res['log_lines']:,} lines); check: {check}",
        flush=True,
    )


def report(
    args: argparse.Namespace,
    rows: int,
    session_s: float,
    cold: SparkRun,
    e2e_s: float,
    runs: dict[str, list[SparkRun]],
    shipped: list[dict[str, Any]],
    tuned: list[dict[str, Any]],
    rss: list[tuple[int, dict[str, Any], SparkRun]],
    ok: bool,
) -> None:
    tx, base, plain = runs[TX], runs[IDEMPOTENT], runs[PLAIN]
    ratios = [b.seconds / t.seconds for t, b in zip(tx, base, strict=True)]
    write_ratios = [b.write_seconds / t.write_seconds for t, b in zip(tx, base, strict=True)]
    plain_ratios = [b.seconds / t.seconds for t, b in zip(tx, plain, strict=True)]
    plain_write = [b.write_seconds / t.write_seconds for t, b in zip(tx, plain, strict=True)]
    write_rate = median([rate(rows, t.write_seconds) for t in tx])
    e2e_rate = rate(rows, e2e_s)
    shipped_rate = median([rate(r["rows"], r["seconds"]) for r in shipped])
    tuned_rate = median([rate(r["rows"], r["seconds"]) for r in tuned])
    print()
    print(f"medians over {len(tx)} rounds ({rows:,} rows, {args.partitions} partitions):")
    for name, side_runs in runs.items():
        if not side_runs:
            continue
        phases = [r.phases() for r in side_runs]
        prepare_rate = median([rate(rows, r.seconds) for r in side_runs])
        job_rate = median([rate(rows, r.write_seconds) for r in side_runs])
        print(
            f"  {name:<18} prepare {fmt_rate(prepare_rate):>14}  write job {fmt_rate(job_rate):>14}"
            f"  materialise {median([p['materialise'] for p in phases]):.2f} s, checks "
            f"{median([p['checks'] for p in phases]):.2f} s, write "
            f"{median([p['write'] for p in phases]):.2f} s, driver "
            f"{median([p['driver'] for p in phases]):.2f} s"
        )
    print("  CPU seconds used during one prepare (median; the machine has 2 CPU-s per second):")
    for name, side_runs in runs.items():
        if side_runs:
            wall = median([r.seconds for r in side_runs])
            parts = ", ".join(
                f"{g} {median([r.cpu.get(g, 0.0) for r in side_runs]):.1f}" for g in CPU_GROUPS
            )
            total = median([sum(r.cpu.values()) for r in side_runs])
            print(f"    {name:<18} {parts}; total {total:.1f} in {wall:.1f} s wall")
    if tx:
        print(
            f"  commit of {args.partitions} committables: median "
            f"{median([r.commit_seconds for r in tx]):.2f} s (one commit_all)"
        )
    rows_out: list[tuple[str, str, str, bool | None]] = []
    rows_out.append(
        (
            "(1) tx prepare / idempotent non-tx",
            f"{median(ratios):.3f}x ({', '.join(f'{r:.3f}' for r in ratios)}; "
            f"write job alone {median(write_ratios):.3f}x)",
            f">= {TX_RATIO_TARGET}x",
            median(ratios) >= TX_RATIO_TARGET if ratios else None,
        )
    )
    rows_out.append(
        (
            "(1') tx prepare / plain non-tx (info)",
            f"{median(plain_ratios):.3f}x ({', '.join(f'{r:.3f}' for r in plain_ratios)}; "
            f"write job alone {median(plain_write):.3f}x; not idempotent, acks=all)",
            f"({TX_RATIO_TARGET}x)",
            None if not plain_ratios else median(plain_ratios) >= TX_RATIO_TARGET,
        )
    )
    rows_out.append(
        (
            "(2) write phase (mapInArrow job)",
            f"{write_rate:,.0f} rec/s",
            f">= {WRITE_RATE_TARGET:,.0f}",
            write_rate >= WRITE_RATE_TARGET if tx else None,
        )
    )
    e2e_note = (
        f"{e2e_rate:,.0f} rec/s e2e (session {session_s:.1f} + prepare {cold.seconds:.1f} + "
        f"commit {cold.commit_seconds:.1f} s)"
    )
    if shipped:
        rows_out.append(
            (
                "(3a) e2e / operator as shipped",
                f"{e2e_rate / shipped_rate:.1f}x ({e2e_note} vs {shipped_rate:,.0f} rec/s)",
                f">= {SHIPPED_RATIO_TARGET:g}x",
                e2e_rate / shipped_rate >= SHIPPED_RATIO_TARGET,
            )
        )
        rows_out.append(
            (
                "(3b) e2e / operator tuned",
                f"{e2e_rate / tuned_rate:.2f}x ({e2e_rate:,.0f} vs {tuned_rate:,.0f} rec/s)",
                f">= {TUNED_RATIO_TARGET:g}x",
                e2e_rate / tuned_rate >= TUNED_RATIO_TARGET,
            )
        )
    else:
        reason = "skipped: Airflow comparison not run (--skip-operator)"
        rows_out.append(("(3a) e2e / operator as shipped", f"{reason}; {e2e_note}", "", None))
        rows_out.append(("(3b) e2e / operator tuned", reason, "", None))
    if len(rss) >= 2:
        (n0, p0, _), (n1, p1, _) = rss[0], rss[-1]
        ratio = p1["peak_kib"] / p0["peak_kib"]
        rows_out.append(
            (
                f"(4) worker peak RSS {count(n1)} / {count(n0)} rows",
                f"{ratio:.3f}x ({p1['peak_kib'] / 1024:,.0f} vs {p0['peak_kib'] / 1024:,.0f} MiB; "
                f"growth within the task {(p1['peak_kib'] - p1['start_kib']) / 1024:+,.0f} vs "
                f"{(p0['peak_kib'] - p0['start_kib']) / 1024:+,.0f} MiB)",
                f"<= {RSS_RATIO_TARGET}x",
                ratio <= RSS_RATIO_TARGET,
            )
        )
    else:
        rows_out.append(("(4) worker peak RSS", "skipped", "", None))
    rows_out.append(("verified (commits + log audits)", "all runs" if ok else "see above", "", ok))
    print()
    print(f"{'measure':<38} {'target':<10} {'met':<8} value")
    for name, value, target, met in rows_out:
        shown = f"({yes_no(met)})" if target.startswith("(") else yes_no(met)  # information
        print(f"{name:<38} {target:<10} {shown:<8} {value}")


if __name__ == "__main__":
    sys.exit(main())
