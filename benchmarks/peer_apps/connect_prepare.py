"""A Spark Connect client: what an Airflow prepare task on a ``spark_connect`` connection runs.

    python connect_prepare.py --remote sc://HOST:PORT <the prepare application's options>

The prepare operator's Connect path without Airflow around it
(``operators/spark_connect.prepare_on_connect``): a new session on the server
(``spark.connect.remote_session``), the prepare application's options run on it
(``spark.remote.prepare_remote``: the Kafka settings shipped as session artifacts, the key
hash's jar uploaded, the manifest written by this process), the session released. The
commit is the benchmark's next step, as it is the DAG's next task.

Its last line is ``{"bench_phases": {...}}``: epoch ms when the imports were done, the
session open, the prepare (and its manifest) done, the session released.
"""

from __future__ import annotations

import json
import logging
import sys
import time


def now_ms() -> float:
    return time.time() * 1000


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "--remote":
        print(__doc__, file=sys.stderr)
        return 2
    url, options = argv[1], argv[2:]
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("airflow_provider_kafka2pc").setLevel(logging.INFO)

    from airflow_provider_kafka2pc.spark.app import kafka_config, parse_args
    from airflow_provider_kafka2pc.spark.connect import remote_session
    from airflow_provider_kafka2pc.spark.export_spec import from_arguments
    from airflow_provider_kafka2pc.spark.remote import prepare_remote_argv

    marks = {"imported": now_ms()}
    args = parse_args(options)
    with remote_session(
        url, f"kafka2pc-prepare-{'+'.join(from_arguments(args).route.topics)}"
    ) as spark:
        marks["session"] = now_ms()
        batch = prepare_remote_argv(spark, options, kafka_config(args))
        marks["prepared"] = now_ms()
    marks["released"] = now_ms()
    print(json.dumps({"source_rows": batch.source_rows, "manifest": args.manifest}))
    print(json.dumps({"bench_phases": marks}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
