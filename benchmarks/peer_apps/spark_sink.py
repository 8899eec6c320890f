"""spark-submit application: Spark's own Kafka sink, the export a Spark user writes instead.

    spark-submit --jars <spark-sql-kafka-0-10 and its dependencies> spark_sink.py \\
        --source DIR --topic T --bootstrap-servers HOST:PORT

Reads the benchmark's parquet files and writes ``key`` and ``value`` as they are with
``df.write.format("kafka")`` and the Kafka producer's defaults: at least once, no
transaction. No repartition: a user of this sink has no reason for one.
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--bootstrap-servers", required=True)
    args = parser.parse_args()
    spark = SparkSession.builder.appName("bench-spark-kafka-sink").getOrCreate()
    try:
        (
            spark.read.parquet(args.source)
            .select("key", "value")
            .write.format("kafka")
            .option("kafka.bootstrap.servers", args.bootstrap_servers)
            .option("topic", args.topic)
            .save()
        )
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
