"""Benchmark of the Spark prepare phase against its non-transactional twin and Airflow's operator.

Side by side in one run, on the shared harness (one local Apache Kafka broker, the shared
dataset read from parquet, interleaved rounds, every output verified) and an in-process
Spark session (``local[2]``), ``--partitions`` Spark partitions and as many Kafka ones:

(1) ``prepare_dataframe`` (one open transaction per partition, committed afterwards by one
    ``commit_all``, untimed) against the same job written non-transactionally: a copy of
    ``prepare_dataframe``'s steps through the library's own functions (``partitioned_input``,
    ``kafka_alignment``, ``mapInArrow`` over ``partition_writer``'s
    ``_chunks`` and the writer's ``_produce_all`` loop) where only the producer differs:
    idempotent, or plain (not idempotent, acks=all), or none at all (the no-Kafka floor: the
    job's writer only reads the Arrow batches). It must follow ``prepare_dataframe`` when that
    changes. A new idempotent librdkafka producer often sends nothing for 500 ms while its
    first producer-id request waits on a 500 ms retry timer; the transactional writer does not
    pay that, so the idempotent baseline carries a fixed cost per partition.
(2) The write phase: the ``mapInArrow`` job alone (the last job of a prepare), from Spark's
    status store (it reads the source, shuffles and writes: the input is read once); jobs
    before it, if any, are reported apart.
(3) End to end, cold, first thing in the process: session start (JVM launch included),
    ``prepare_dataframe`` of every row, one ``commit_all``. Compared with the official Airflow
    Kafka provider's ``ProduceToTopicOperator`` run in a child process as a worker runs it
    (``operator.execute(context={})``, the connection from ``AIRFLOW_CONN_KAFKA_DEFAULT``, its
    log to a file): "as shipped" (a synchronous flush after every record, a log line per
    delivery) on an ``--operator-slice`` of the rows, and "tuned" (``synchronous=False``, a
    silent callback, a queue that holds the whole input: the operator does not handle
    ``BufferError``) on all of them. Its ``producer_function`` yields the same records.
(4) Peak RSS of the Python worker for each of ``--rss-rows`` in one partition, measured inside
    the worker by an ``on_batch`` hook: at the task's first batch it resets the kernel's
    high-water mark (``/proc/self/clear_refs``), then a thread samples ``ru_maxrss`` until the
    task ends (the final flush included).

Run (minutes with the defaults on an idle 2-core machine):

    python benchmarks/bench_spark_prepare.py [--rows 2000000 --partitions 8 --rounds 2]
        [--operator-slice 50000 --rss-rows 1000000,4000000] [--skip-operator] [--skip-rss]

The Airflow comparison needs the Kafka provider in the same environment (a dependency of
the package); without it, pass ``--skip-operator``. Targets are reported, not enforced;
the exit status is 1 only when a commit or a verification fails.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import (
    PYTHON_ENV,
    Cluster,
    Dataset,
    Expected,
    Results,
    Round,
    Run,
    Side,
    add_cluster_arguments,
    checked,
    fmt,
    interleave,
    machine_line,
    measure,
    median,
    print_results,
    print_table,
    ratios,
)

from airflow_provider_kafka2pc.transaction.controller import TransactionController

WORK_DIR = Path("/tmp/kafka2pc-bench/spark-prepare")

# Targets of the issue (ratios are measured side by side in the same run).
TX_RATIO_TARGET = 0.95
WRITE_RATE_TARGET = 120_000.0
SHIPPED_RATIO_TARGET = 20.0
TUNED_RATIO_TARGET = 1.5
RSS_RATIO_TARGET = 1.25  # "flat": 4x the rows may cost at most 25% more peak memory

TX = "transactional"
IDEMPOTENT = "non-tx idempotent"
PLAIN = "non-tx plain"
FLOOR = "no-Kafka floor"
SHIPPED = "operator as shipped"
TUNED = "operator tuned"
BASELINE_PRODUCER = {IDEMPOTENT: "idempotent", PLAIN: "plain", FLOOR: "none"}
FLUSH_TIMEOUT_S = 120.0


# -- the Airflow operator, in a child process -----------------------------------------------

#: Operator child: delivery errors seen by the silent callback.
_DELIVERY_ERRORS: list[Any] = []


def silent_delivery(err: Any, msg: Any) -> None:
    """The tuned operator's delivery callback: no log line, errors kept for the report."""
    if err is not None:
        _DELIVERY_ERRORS.append(err)


def operator_child(mode: str, rows: int, topic: str, servers: str) -> int:
    """Run ProduceToTopicOperator once; its own log goes to this process's stdout/stderr."""
    extra: dict[str, Any] = {"bootstrap.servers": servers}
    if mode == "tuned":
        # The operator does not catch BufferError: the queue must hold the whole input.
        extra["queue.buffering.max.messages"] = max(100_000, rows + 10_000)
    os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"] = json.dumps({"conn_type": "kafka", "extra": extra})
    from airflow.providers.apache.kafka.operators.produce import ProduceToTopicOperator

    tuned: dict[str, Any] = {}
    if mode == "tuned":
        tuned = {"synchronous": False, "delivery_callback": f"{__name__}.silent_delivery"}
    operator = ProduceToTopicOperator(
        task_id=f"produce_{mode}",
        topic=topic,
        producer_function=lambda: Dataset(rows).iter_records(),
        **tuned,
    )
    operator.execute(context={})
    return 1 if _DELIVERY_ERRORS else 0


# -- the Spark side ---------------------------------------------------------------------------


def start_spark(driver_memory: str) -> tuple[Any, Any]:
    """The session and the JVM's process (to stop it by its PID at the end)."""
    from pyspark.sql import SparkSession

    from airflow_provider_kafka2pc import defaults
    from devtools.spark_submit import LOCAL_CONF

    os.environ.update(PYTHON_ENV)
    builder = SparkSession.builder.master("local[2]").appName("bench-spark-prepare")
    conf = defaults.spark_conf(LOCAL_CONF, {"spark.driver.memory": driver_memory})
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark, getattr(spark.sparkContext._gateway, "proc", None)


def spark_phases(spark: Any, after: int) -> dict[str, float]:
    """Jobs with an id above ``after`` from Spark's status store (submission to completion):
    materialise (up to a count job, which only a repair runs now), checks (other jobs before
    the write), write (the last job: the source read, the shuffle and the write)."""
    store = spark.sparkContext._jsc.sc().statusStore()
    seq = store.jobsList(None)
    jobs = []
    for i in range(seq.size()):
        job = seq.apply(i)
        submitted, completed = job.submissionTime(), job.completionTime()
        if job.jobId() > after and submitted.isDefined() and completed.isDefined():
            seconds = (completed.get().getTime() - submitted.get().getTime()) / 1000
            jobs.append((job.jobId(), str(job.name()), seconds))
    jobs.sort()
    if not jobs:
        return {}
    counted = [i for i, (_, name, _) in enumerate(jobs[:-1]) if name.startswith("count at")]
    split = counted[0] + 1 if counted else len(jobs) - 1
    return {
        "materialise": sum(s for _, _, s in jobs[:split]),
        "checks": sum(s for _, _, s in jobs[split:-1]),
        "write": jobs[-1][2],
    }


def last_job_id(spark: Any) -> int:
    ids = spark.sparkContext.statusTracker().getJobIdsForGroup(None)
    return max(ids, default=-1)


def baseline_writer(
    config: dict[str, Any], topic: str, producer_kind: str
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """``partition_writer`` with a non-transactional producer ("idempotent", "plain": not
    idempotent, acks=all) or none at all ("none": the rows are only read)."""

    def write_partition(batches: Iterator[Any]) -> Iterator[Any]:
        from confluent_kafka import Producer
        from pyspark import TaskContext

        from airflow_provider_kafka2pc.spark.partition_writer import (
            _chunks,
            _Counter,
            result_batch,
        )
        from airflow_provider_kafka2pc.transaction.delivery import BrokerLinks, DeliveryReports
        from airflow_provider_kafka2pc.transaction.writer import TransactionalWriter

        context = TaskContext.get()
        counter = _Counter()
        chunks = _chunks(batches, [], counter, None)
        delivered = 0
        if producer_kind != "none":
            # The writer's settings less the transactional ones, its bookkeeping, its loop.
            deliveries = DeliveryReports()
            producer = Producer(
                {
                    "allow.auto.create.topics": False,
                    "partitioner": "murmur2_random",
                    **config,
                    "enable.idempotence": producer_kind == "idempotent",
                    "acks": "all",
                    "on_delivery": deliveries,
                }
            )
            if topic not in producer.list_topics(topic, timeout=30).topics:
                raise RuntimeError(f"topic {topic} missing")
            first = next((c for c in chunks if len(c)), None)
            if first is not None:
                # Only its loop is used (no transaction): the id is never registered.
                loop = TransactionalWriter(config, f"{topic}-baseline-loop")
                produced = loop._produce_all(
                    producer, topic, first, chunks, deliveries, BrokerLinks()
                )
                if producer.flush(FLUSH_TIMEOUT_S):
                    raise RuntimeError("records undelivered")
                if deliveries.error is not None or deliveries.count != produced:
                    raise RuntimeError(f"{produced} produced, {deliveries.count} delivered")
                delivered = deliveries.count
        else:
            delivered = sum(len(c) for c in chunks)
        yield result_batch(
            context.partitionId(),
            context.attemptNumber(),
            counter.rows,
            json.dumps({"record_count": delivered}),
        )

    return write_partition


def prepare_non_transactional(
    df: Any, *, topic: str, partitions: int, config: dict[str, Any], producer_kind: str
) -> int:
    """``prepare_dataframe``'s steps, with :func:`baseline_writer`; returns the rows written."""
    from airflow_provider_kafka2pc.spark.encoding import partitioned_input
    from airflow_provider_kafka2pc.spark.partition_writer import RESULT_SCHEMA
    from airflow_provider_kafka2pc.spark.prepare import kafka_alignment

    # The topic checked and the rows aligned with Kafka, as prepare_dataframe does by default.
    alignment, _ = kafka_alignment(df.sparkSession, config, topic, partitions, "key")
    prepared = partitioned_input(
        df, partitions, "key", "value", require_keys=True, alignment=alignment
    )
    writer = baseline_writer(config, topic, producer_kind)
    reports = prepared.mapInArrow(writer, RESULT_SCHEMA).collect()
    got = sorted(
        (r["partition"], r["input_rows"], json.loads(r["committable"])["record_count"])
        for r in reports
    )
    if len(got) != partitions or any(rows != delivered for _, rows, delivered in got):
        raise RuntimeError(f"baseline reports {got}: one per partition, all delivered")
    return sum(rows for _, rows, _ in got)


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
        with open("/proc/self/statm") as f:
            start_kib = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            reset = True
        except OSError:
            reset = False
        threading.Thread(target=self._sample, args=(task, reset, start_kib), daemon=True).start()

    def _sample(self, task: int, reset: bool, start_kib: int) -> None:
        from pyspark import TaskContext

        deadline, last = time.monotonic() + 3600, -1
        while time.monotonic() < deadline:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            if peak != last:
                last = peak
                probe = {"peak_kib": peak, "start_kib": start_kib, "reset": reset}
                Path(f"{self.path}.tmp").write_text(json.dumps(probe))
                os.replace(f"{self.path}.tmp", self.path)
            time.sleep(self.interval_s)
            context = TaskContext.get()
            if context is None or context.taskAttemptId() != task:
                return


# -- the sides --------------------------------------------------------------------------------


@dataclass
class Cold:
    session_s: float
    run: Run

    @property
    def seconds(self) -> float:
        return self.session_s + self.run.seconds + self.run.parts["commit_all"]


class SparkPrepare:
    """The Spark session, the dataset and the sides of each round."""

    def __init__(self, args: argparse.Namespace, cluster: Cluster) -> None:
        self.args, self.cluster = args, cluster
        self.data = Dataset(args.rows)
        self.spark: Any = None
        self.controller = TransactionController(cluster.protocol)

    def source(self, data: Dataset) -> Any:
        return self.spark.read.parquet(str(data.parquet(self.args.partitions)))

    def expected(self, data: Dataset, partitions: int, **overrides: Any) -> Expected:
        fields = {"digest": data.digest(), "partition_counts": data.partition_counts(partitions)}
        return Expected(data.rows, **{**fields, **overrides})

    def transactional(self, label: str, data: Dataset, partitions: int, **hook: Any) -> Run:
        from airflow_provider_kafka2pc.spark import prepare_dataframe

        topic = self.cluster.topic(label, partitions)
        df, before = self.source(data), last_job_id(self.spark)
        with measure(self.cluster.broker_pid) as meter:
            batch = prepare_dataframe(
                df,
                topic=topic,
                transactional_ids=[f"{topic}-{i}" for i in range(partitions)],
                producer_config=self.cluster.config,
                key_column="key",
                value_column="value",
                **hook,
            )
        parts = spark_phases(self.spark, before)
        start = time.perf_counter()
        outcomes = {r.outcome.value for r in self.controller.commit_all(batch.committables)}
        parts["commit_all"] = time.perf_counter() - start
        if outcomes != {"COMMITTED"}:
            raise SystemExit(f"{topic}: commit outcomes {outcomes}")
        expected = self.expected(data, partitions, committables=batch.committables)
        return checked(self.cluster, TX, meter, topic, expected, parts=parts)

    def baseline(self, side: str, rnd: Round) -> Run:
        topic = self.cluster.topic(f"{rnd.label}-{side.split()[-1]}", self.args.partitions)
        df, before = self.source(self.data), last_job_id(self.spark)
        with measure(self.cluster.broker_pid) as meter:
            written = prepare_non_transactional(
                df,
                topic=topic,
                partitions=self.args.partitions,
                config=self.cluster.config,
                producer_kind=BASELINE_PRODUCER[side],
            )
        parts = spark_phases(self.spark, before)
        if written != self.data.rows:
            raise SystemExit(f"{side}: {written:,} of {self.data.rows:,} rows written")
        if side == FLOOR:  # nothing written: nothing to verify
            self.cluster.delete_topics([topic])
            return Run(side, self.data.rows, meter, None, parts)
        expected = self.expected(self.data, self.args.partitions, transactional=False)
        return checked(self.cluster, side, meter, topic, expected, parts=parts)

    def operator(self, mode: str, rnd: Round) -> Run:
        rows = self.args.operator_slice if mode == "shipped" else self.args.rows
        topic = self.cluster.topic(f"{rnd.label}-op-{mode}", self.args.partitions)
        log_path = WORK_DIR / f"operator-{mode}.log"
        with measure(self.cluster.broker_pid) as meter, log_path.open("w") as log:
            done = subprocess.run(
                [
                    *(sys.executable, __file__, "--operator-child", mode),
                    *("--child-rows", str(rows), "--child-topic", topic),
                    *("--bootstrap-servers", self.cluster.servers),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=600 + rows / 200,
            )
        if done.returncode != 0:
            raise SystemExit(f"operator child ({mode}) failed; see {log_path}")
        info = {"log lines": sum(1 for _ in log_path.open())}
        # librdkafka's own partitioner (the operator's default) places keys differently.
        expected = self.expected(Dataset(rows), 1, transactional=False, partition_counts=None)
        side = SHIPPED if mode == "shipped" else TUNED
        return checked(self.cluster, side, meter, topic, expected, info=info)

    def sides(self) -> dict[str, Side]:
        sides: dict[str, Side] = {
            TX: lambda rnd: self.transactional(f"{rnd.label}-tx", self.data, self.args.partitions)
        }
        for side in (IDEMPOTENT, PLAIN, FLOOR):
            sides[side] = lambda rnd, side=side: self.baseline(side, rnd)
        if not self.args.skip_operator:
            sides[SHIPPED] = lambda rnd: self.operator("shipped", rnd)
            sides[TUNED] = lambda rnd: self.operator("tuned", rnd)
        return sides

    def run(self) -> tuple[Cold, Results, list[tuple[int, dict[str, Any], Run]]]:
        print("round 0: end to end from a cold start", flush=True)
        start = time.perf_counter()
        self.spark, gateway = start_spark(self.args.driver_memory)
        try:
            cold = Cold(
                time.perf_counter() - start,
                self.transactional("cold-tx", self.data, self.args.partitions),
            )
            print(f"  cold: {cold.run.verification.summary()}", flush=True)  # type: ignore[union-attr]
            results = interleave(self.sides(), self.args.rounds, warmup=False)
            rss = []
            for n in [] if self.args.skip_rss else self.args.rss_rows:
                path = WORK_DIR / f"{self.cluster.prefix}-rss-{n}.json"
                probe = PeakRssProbe(str(path))
                run = self.transactional(f"rss-{n}", Dataset(n), 1, on_batch=probe)
                time.sleep(0.2)
                rss.append((n, json.loads(path.read_text()), run))
                print(f"  RSS {n:,} rows: {run.verification.summary()}", flush=True)  # type: ignore[union-attr]
        finally:
            self.spark.stop()
            if gateway is not None and gateway.poll() is None:
                gateway.terminate()
                gateway.wait(timeout=30)
        return cold, results, rss


# -- report ----------------------------------------------------------------------------------


def report(
    args: argparse.Namespace,
    cold: Cold,
    results: Results,
    rss: list[tuple[int, dict[str, Any], Run]],
) -> bool:
    title = f"{args.rows:,} rows, {args.partitions} partitions, local[2]"
    pairs = [(TX, IDEMPOTENT), (TX, PLAIN)]
    ok = print_results(results, title, pairs, ("rate", "write", "cpu", "broker_cpu"))
    ok &= all(r.verification.ok for r in [cold.run, *(run for _, _, run in rss)])  # type: ignore[union-attr]
    tx, rows = results.runs[TX], args.rows
    tx_ratio = median(ratios(results, TX, IDEMPOTENT, "rate"))
    write_rate = median([rows / r.parts["write"] for r in tx])
    e2e_rate = rows / cold.seconds
    table: list[tuple[str, str, bool | None, str]] = [
        (
            "(1) tx prepare / idempotent, rec/s",
            f">= {TX_RATIO_TARGET}",
            tx_ratio >= TX_RATIO_TARGET,
            f"{tx_ratio:.3f}",
        ),
        (
            "(2) write phase (mapInArrow job)",
            f">= {WRITE_RATE_TARGET:,.0f}",
            write_rate >= WRITE_RATE_TARGET,
            f"{write_rate:,.0f} rec/s",
        ),
    ]
    e2e = (
        f"{e2e_rate:,.0f} rec/s e2e (session {cold.session_s:.1f} + prepare "
        f"{cold.run.seconds:.1f} + commit {cold.run.parts['commit_all']:.1f} s)"
    )
    for side, target in ((SHIPPED, SHIPPED_RATIO_TARGET), (TUNED, TUNED_RATIO_TARGET)):
        name = f"(3) e2e / {side}"
        if side not in results.runs:
            table.append((name, "", None, f"skipped (--skip-operator); {e2e}"))
            continue
        rate = median([r.rate for r in results.runs[side]])
        value = f"{e2e_rate / rate:.2f} ({e2e} vs {rate:,.0f} rec/s)"
        table.append((name, f">= {target:g}", e2e_rate / rate >= target, value))
    if len(rss) >= 2:
        (n0, p0, _), (n1, p1, _) = rss[0], rss[-1]
        ratio = p1["peak_kib"] / p0["peak_kib"]
        value = (
            f"{ratio:.3f} ({p1['peak_kib'] / 1024:,.0f} vs {p0['peak_kib'] / 1024:,.0f} MiB; "
            f"high-water reset {'yes' if p0['reset'] and p1['reset'] else 'NO'})"
        )
        name = f"(4) worker peak RSS {n1:,} / {n0:,} rows"
        table.append((name, f"<= {RSS_RATIO_TARGET}", ratio <= RSS_RATIO_TARGET, value))
    table.append(("verified (commits + every output)", "", ok, "all" if ok else "see above"))
    print()
    print_table(
        ["measure", "target", "met", "value"],
        [[m, t, "-" if met is None else ("yes" if met else "no"), v] for m, t, met, v in table],
        left=(0, 3),
    )
    phases = ", ".join(f"{name} {fmt(s)}" for name, s in cold.run.parts.items())
    print(
        f"  cold: session start {fmt(cold.session_s)} s, "
        f"prepare {fmt(cold.run.seconds)} s ({phases})"
    )
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--operator-slice", type=int, default=50_000)
    parser.add_argument(
        "--rss-rows",
        type=lambda text: [int(x) for x in text.replace("_", "").split(",") if x.strip()],
        default=[1_000_000, 4_000_000],
        help="e.g. 1000000,4000000",
    )
    parser.add_argument("--skip-operator", action="store_true")
    parser.add_argument("--skip-rss", action="store_true")
    parser.add_argument("--driver-memory", default="2g", help="spark.driver.memory")
    parser.add_argument("--operator-child", choices=("shipped", "tuned"), help=argparse.SUPPRESS)
    parser.add_argument("--child-rows", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-topic", help=argparse.SUPPRESS)
    add_cluster_arguments(parser)
    args = parser.parse_args(argv)
    if args.operator_child:
        return operator_child(
            args.operator_child, args.child_rows, args.child_topic, args.bootstrap_servers
        )
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    with Cluster.from_args(args, data_dir=WORK_DIR / "kafka") as cluster:
        print(f"{cluster.describe()}; {machine_line()}", flush=True)
        bench = SparkPrepare(args, cluster)
        bench.data.read_through(args.partitions)  # written if missing, then read once
        cold, results, rss = bench.run()
    return 0 if report(args, cold, results, rss) else 1


if __name__ == "__main__":
    sys.exit(main())
