"""PyFlink job: Flink's KafkaSink with exactly-once delivery, the other exactly-once export.

    <flink venv>/bin/python flink_sql.py --source DIR --topic T --bootstrap-servers HOST:PORT \\
        --jars A.jar,B.jar --transactional-id-prefix P [--parallelism 2]

BATCH mode: a filesystem table over the benchmark's parquet files is INSERTed into a kafka
table with ``'sink.delivery-guarantee'='exactly-once'``; the sink commits its transactions
when the input ends. Runs in Flink's own virtualenv (it pins its own pyarrow and pandas),
so it imports nothing from the benchmarks or the package. Its last line of output is a
JSON object of epoch-ms instants (``bench_phases``: PyFlink imported, the INSERT submitted,
the job finished), from which the benchmark cuts the run into phases.
"""

from __future__ import annotations

import argparse
import json
import time

from pyflink.table import EnvironmentSettings, TableEnvironment

#: When PyFlink was imported (epoch ms): the end of the process's start-up.
IMPORTED_MS = time.time() * 1000

#: Below the broker's transaction.max.timeout.ms (15 min); the sink's default (1 h) is not.
TRANSACTION_TIMEOUT_MS = 600_000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--jars", required=True, help="comma-separated jar paths")
    parser.add_argument("--transactional-id-prefix", required=True)
    parser.add_argument("--parallelism", type=int, default=2)
    args = parser.parse_args()
    env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    config = env.get_config()
    config.set("pipeline.jars", ";".join(f"file://{j}" for j in args.jars.split(",")))
    config.set("parallelism.default", str(args.parallelism))
    env.execute_sql(
        f"""CREATE TABLE source_rows (`key` STRING, `value` STRING) WITH (
            'connector' = 'filesystem', 'path' = 'file://{args.source}', 'format' = 'parquet')"""
    )
    env.execute_sql(
        f"""CREATE TABLE kafka_rows (`key` STRING, `value` STRING) WITH (
            'connector' = 'kafka',
            'topic' = '{args.topic}',
            'properties.bootstrap.servers' = '{args.bootstrap_servers}',
            'properties.transaction.timeout.ms' = '{TRANSACTION_TIMEOUT_MS}',
            'key.format' = 'raw',
            'key.fields' = 'key',
            'value.format' = 'raw',
            'value.fields-include' = 'EXCEPT_KEY',
            'sink.delivery-guarantee' = 'exactly-once',
            'sink.transactional-id-prefix' = '{args.transactional_id_prefix}')"""
    )
    submitted_ms = time.time() * 1000
    env.execute_sql("INSERT INTO kafka_rows SELECT `key`, `value` FROM source_rows").wait()
    finished_ms = time.time() * 1000
    phases = {"imported": IMPORTED_MS, "submitted": submitted_ms, "finished": finished_ms}
    print(json.dumps({"bench_phases": phases}), flush=True)


if __name__ == "__main__":
    main()
