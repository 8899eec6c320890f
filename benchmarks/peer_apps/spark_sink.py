"""spark-submit application: Spark's own Kafka sink, the export a Spark user writes instead.

    spark-submit --jars <spark-sql-kafka-0-10 and its dependencies> spark_sink.py \\
        --source DIR --topic T --bootstrap-servers HOST:PORT

Reads the benchmark's parquet files and writes ``key`` and ``value`` as they are with
``df.write.format("kafka")`` and the Kafka producer's defaults (or the ones given with
``--kafka-option acks=all``, say): at least once, no transaction. No repartition: a user of
this sink has no reason for one.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pyspark.sql import SparkSession


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a producer setting (the sink's kafka.KEY option); repeatable",
    )
    parser.add_argument(
        "--hold-file",
        type=Path,
        help="after the write, create this file and keep the application (and its "
        "executors) alive until it is removed (at most 10 minutes): bench_cluster asks the "
        "executors for their class archive meanwhile",
    )
    args = parser.parse_args()
    spark = SparkSession.builder.appName("bench-spark-kafka-sink").getOrCreate()
    try:
        writer = (
            spark.read.parquet(args.source)
            .select("key", "value")
            .write.format("kafka")
            .option("kafka.bootstrap.servers", args.bootstrap_servers)
            .option("topic", args.topic)
        )
        for setting in args.kafka_option:
            key, _, value = setting.partition("=")
            writer = writer.option(f"kafka.{key}", value)
        writer.save()
        if args.hold_file is not None:
            hold(args.hold_file)
    finally:
        spark.stop()


def hold(path: Path, limit_s: float = 600.0) -> None:
    path.write_text("saved\n")
    deadline = time.monotonic() + limit_s
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)


if __name__ == "__main__":
    main()
