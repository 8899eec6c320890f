"""The prepare's levers, each measured against the defaults side by side in one run.

``make bench-levers``. On the shared harness (one local Apache Kafka broker, the shared
dataset, interleaved rounds, every output committed and verified: log audit, read_committed,
digest of keys and values, per-partition counts where Java's murmur2 puts each key) and the
in-process Spark session of ``bench_spark_prepare`` (``local[2]``, ``--partitions`` Spark
partitions = transactions = Kafka partitions), ``prepare_dataframe`` + ``commit_all`` with:

- ``defaults``: the package as shipped (the input read once: shuffled by the owner of each
  key's Kafka partition, then written: each Spark partition owns the Kafka partitions ``p``
  with ``p mod partitions == its index``, so each transaction writes one Kafka partition and
  its batches fill; the owner is computed in the JVM by the package's Java UDF);
- ``count first``: the input cached and counted per partition before the write, as every
  prepare did until 2026-11-24 and a loss repair still does (run here as a repair of every
  partition, with the counts of the ``defaults`` side's manifest);
- ``by hash``: ``align_with_kafka=False``: rows shuffled by Spark's hash of the key, so
  every transaction writes every Kafka partition (the default until 2026-11-26);
- ``linger 50 ms``: ``linger.ms=50`` (librdkafka's default is 5; ``batch.size`` is already
  1 MB against the Java producer's 16 KB);
- ``lz4``: ``compression.type=lz4`` (the Java producers of Spark's and Flink's sinks send
  uncompressed by default);
- ``java batches``: ``batch.size=16384``, the Java producer's default, as Spark's and
  Flink's sinks send.

Printed: wall time (prepare + commit), records/s, CPU of this process tree (Spark's JVM and
Python workers), the broker's CPU, the write job, and each lever's ratios to the defaults.

Run: ``python benchmarks/bench_levers.py [--rows 2000000 --partitions 8 --rounds 2]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bench_spark_prepare import SparkPrepare, last_job_id, spark_phases, start_spark
from harness import (
    Cluster,
    Round,
    Run,
    Side,
    add_cluster_arguments,
    add_subset_argument,
    checked,
    interleave,
    machine_line,
    measure,
    parse_subset,
    print_results,
)

from airflow_provider_kafka2pc.spark import prepare as prepare_module

WORK_DIR = Path("/tmp/kafka2pc-bench/levers")
DEFAULTS = "defaults"
#: Producer settings of each settings lever (over the defaults).
SETTINGS = {
    "linger 50 ms": {"linger.ms": 50},
    "lz4": {"compression.type": "lz4"},
    "java batches": {"batch.size": 16384},
}
BY_HASH = "by hash"
COUNT_FIRST = "count first"


class Levers(SparkPrepare):
    #: Rows per Spark partition, from the last ``defaults`` run (the ``count first`` repair).
    counts: list[int]

    def run_side(self, side: str, rnd: Round) -> Run:
        from airflow_provider_kafka2pc.spark.prepare import Repair

        partitions = self.args.partitions
        topic = self.cluster.topic(f"{rnd.label}-{side.replace(' ', '-')}", partitions)
        config = {**self.cluster.config, **SETTINGS.get(side, {})}
        df = self.source(self.data)
        before = last_job_id(self.spark)
        with measure(self.cluster.broker_pid) as meter:
            batch = prepare_module.prepare_dataframe(
                df,
                topic=topic,
                transactional_ids=[f"{topic}-{i}" for i in range(partitions)],
                producer_config=config,
                key_column="key",
                value_column="value",
                repair=Repair(range(partitions), self.counts) if side == COUNT_FIRST else None,
                align_with_kafka=side != BY_HASH,
            )
            start = time.perf_counter()
            outcomes = {r.outcome.value for r in self.controller.commit_all(batch.committables)}
            commit_s = time.perf_counter() - start
        if outcomes != {"COMMITTED"}:
            raise SystemExit(f"{topic}: commit outcomes {outcomes}")
        if side == DEFAULTS:
            self.counts = list(batch.partition_rows)
        if (batch.metadata.get("partitioning") == "kafka-aligned") == (side == BY_HASH):
            raise SystemExit(f"{topic} ({side}): partitioned {batch.metadata['partitioning']!r}")
        parts = {
            "write job": spark_phases(self.spark, before).get("write", float("nan")),
            "commit": commit_s,
        }
        touched = sum(len(c.partitions) for c in batch.committables)
        expected = self.expected(self.data, partitions, committables=batch.committables)
        return checked(
            self.cluster,
            side,
            meter,
            topic,
            expected,
            parts=parts,
            info={"transaction partitions": touched},
        )


def main(argv: list[str] | None = None) -> int:
    levers = [DEFAULTS, COUNT_FIRST, BY_HASH, *SETTINGS]
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--driver-memory", default="2g", help="spark.driver.memory")
    add_subset_argument(parser, "--levers", levers)
    add_cluster_arguments(parser)
    args = parser.parse_args(argv)
    args.levers = parse_subset(parser, args.levers, levers, "--levers")
    if DEFAULTS not in args.levers:
        parser.error(f"--levers must include {DEFAULTS!r}: every lever is measured against it")
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    with Cluster.from_args(args, data_dir=WORK_DIR / "kafka") as cluster:
        bench = Levers(args, cluster)
        bench.data.read_through(args.partitions)  # written if missing, then read once
        bench.spark, jvm = start_spark(args.driver_memory)
        try:
            print(
                f"{cluster.describe()}; {args.rows:,} rows, {args.partitions} partitions; "
                f"{machine_line()}",
                flush=True,
            )
            sides: dict[str, Side] = {
                name: (lambda rnd, name=name: bench.run_side(name, rnd)) for name in args.levers
            }
            results = interleave(sides, args.rounds, say=lambda s: print(s, flush=True))
        finally:
            bench.spark.stop()
            if jvm is not None and jvm.poll() is None:
                jvm.terminate()
                jvm.wait(timeout=30)
    for side in results.sides:
        touched = {r.info["transaction partitions"] for r in results.runs[side]}
        print(f"  {side}: (transaction, Kafka partition) pairs written: {sorted(touched)}")
    pairs = [(side, DEFAULTS) for side in results.sides if side != DEFAULTS]
    ok = print_results(
        results, f"{args.rows:,} rows, {args.partitions} partitions, local[2]", pairs
    )
    print(json.dumps({"verified": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
