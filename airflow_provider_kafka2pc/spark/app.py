"""spark-submit application: read a source, prepare it into Kafka transactions, write the manifest.

    spark-submit .../airflow_provider_kafka2pc/spark/app.py \\
        --source-table db.orders | --source-path s3a://b/orders --source-format parquet \\
        | --source-sql "SELECT ..." [--filter "day = '2026-11-21'"] \\
        --topic orders --transactional-ids run-0,run-1,... \\
        --kafka-config-file kafka.json --manifest s3a://b/manifests/run.json

Exit 0 only when every partition prepared; the manifest (the Manifest as JSON) is
written atomically (temporary file, then rename) through Hadoop's FileSystem, so any
Hadoop-supported URI works. Without a manifest the orchestrator must abort the ids.

Loss repair: ``--only-partitions 2,5`` with the batch's full id list partitions the input
exactly as the prepare did and writes only those partitions (under their own ids);
``--expected-partition-rows`` gives every partition's recorded rows and ``--partitioning``
how the prepare partitioned them (the ledger's record; with source splits,
``--source-splits`` their recorded settings and fingerprint). When the source no
longer yields them (or cannot be read), nothing is written: the manifest then holds no
committable and ``metadata.refused`` says why, and the exit code is 3.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from airflow_provider_kafka2pc.spark.bytecode import prefer_installed_packages

prefer_installed_packages()  # before pyspark's first import: see the module

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from airflow_provider_kafka2pc import defaults
from airflow_provider_kafka2pc.connection.registry import RegistryFormat
from airflow_provider_kafka2pc.connection.settings import is_secret
from airflow_provider_kafka2pc.errors import ConfigurationError, Kafka2pcError, SourceChangedError
from airflow_provider_kafka2pc.spark.partitionings import AUTO_PARTITIONING
from airflow_provider_kafka2pc.spark.wire import WireOptions
from airflow_provider_kafka2pc.spark.writers import AUTO_WRITER, WRITERS
from airflow_provider_kafka2pc.transaction.manifest import PARTITIONINGS, SOURCE, Manifest
from airflow_provider_kafka2pc.transaction.routing import routing

log = logging.getLogger("kafka2pc.spark.app")

#: Imported in a thread while the SparkSession starts: it brings both Kafka clients
#: (confluent-kafka, kafka-python), a second or more of imports that the session's start,
#: mostly spent waiting on the JVM, hides (py-spy: two thirds of the driver's own samples
#: were imports).
PREPARE_MODULE = "airflow_provider_kafka2pc.spark.prepare"

#: Exit code of a repair that refused to write (the source changed or is gone).
EXIT_REFUSED = 3


def _indexes(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None


def _registry_format(text: str) -> RegistryFormat:
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return RegistryFormat.from_dict(data)
    except (ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(f"expected a JSON object of options: {exc}") from None


def _json_object(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a JSON object: {exc}") from None
    if not isinstance(data, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return data


def by_source_splits(spark: SparkSession, args: argparse.Namespace) -> None:
    """Before the source is read: without block locations (read when the files are listed)
    a coalesce groups contiguous splits wherever it runs; a repair also sets the recorded
    split settings."""
    if args.shuffle and args.partitioning != SOURCE:
        return
    from airflow_provider_kafka2pc.spark.source_splits import IGNORE_LOCALITY, SPLIT_SETTINGS

    spark.conf.set(IGNORE_LOCALITY, "true")
    for key, value in ((args.source_splits or {}).get("settings") or {}).items():
        if key in SPLIT_SETTINGS and value is not None:
            spark.conf.set(key, str(value))


def requested_partitioning(args: argparse.Namespace) -> str | None:
    """The partitioning ``--shuffle`` asks for: none said, auto; ``--no-shuffle``, source
    splits; ``--shuffle``, aligned or by hash as ``--align-with-kafka`` says."""
    if args.shuffle is None:
        return AUTO_PARTITIONING
    return None if args.shuffle else SOURCE


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="kafka2pc-spark-prepare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--source-table", help="a table name known to the Spark catalog")
    source.add_argument("--source-path", help="a path or URI, read with --source-format")
    source.add_argument("--source-sql", help="a SQL query")
    parser.add_argument(
        "--source-format",
        default="parquet",
        help="format for --source-path (parquet, json, csv, orc, ...)",
    )
    parser.add_argument(
        "--source-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="reader option for --source-path (e.g. header=true)",
    )
    parser.add_argument("--filter", help="a SQL predicate applied to the source")
    parser.add_argument("--topic", help="every row's topic (or --topic-column and --topics)")
    parser.add_argument(
        "--topic-column", help="a string column naming each row's topic, one of --topics"
    )
    parser.add_argument(
        "--topics",
        type=lambda text: [t.strip() for t in text.split(",") if t.strip()],
        help="comma-separated: every topic --topic-column may name",
    )
    parser.add_argument(
        "--transactional-ids", required=True, help="comma-separated; one Spark partition per id"
    )
    parser.add_argument("--key-column")
    parser.add_argument("--value-column")
    parser.add_argument("--header-column", action="append", default=[], dest="header_columns")
    parser.add_argument(
        "--kafka-config-file", help="JSON object of librdkafka settings (keeps secrets off argv)"
    )
    parser.add_argument("--bootstrap-servers", help="overrides bootstrap.servers")
    parser.add_argument(
        "--registry-config-file",
        help="JSON object of SchemaRegistryClient settings (url, basic.auth.user.info, ssl.*); "
        "a file, to keep the credentials off argv",
    )
    parser.add_argument(
        "--value-format",
        type=_registry_format,
        help="values as registry Avro: a JSON object of RegistryFormat options, e.g. {} or "
        '{"subject_name_strategy": "record_name", "record_name": "Order"}',
    )
    parser.add_argument("--key-format", type=_registry_format, help="keys as registry Avro")
    parser.add_argument("--tombstone-when", help="SQL condition: where true, a null value")
    parser.add_argument(
        "--timestamp-column", help="the record timestamp (timestamp, or long epoch ms)"
    )
    parser.add_argument(
        "--transaction-timeout-ms", type=int, default=defaults.TRANSACTION_TIMEOUT_MS
    )
    parser.add_argument(
        "--progress-interval-s",
        type=float,
        default=defaults.PROGRESS_INTERVAL_S,
        help="each partition logs rows written at most this often, and once done (0: never)",
    )
    parser.add_argument(
        "--align-with-kafka",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="each Spark partition owns the Kafka partitions p with p mod N = its index, "
        "where the export has a key and the topic's partitions are a multiple of N "
        "(default: on)",
    )
    parser.add_argument(
        "--writer",
        choices=WRITERS,
        default=AUTO_WRITER,
        help="who writes the transactions: confluent-kafka in Python workers (python), "
        "Kafka's Java producer inside the executors (jvm; docs/jvm-writer.md), or the JVM "
        "one where it loads, else the Python one (auto, the default)",
    )
    parser.add_argument(
        "--shuffle",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="--no-shuffle: each of the source's own file splits (coalesced to at most one "
        "per id) is one transaction, no shuffle; a source without such splits is shuffled "
        "and the manifest says why. --shuffle: aligned with Kafka or by hash (by "
        "--align-with-kafka). Neither: source splits where the plan pins them, else the "
        "shuffle (docs/partitioning.md)",
    )
    parser.add_argument("--job-label")
    parser.add_argument("--manifest", required=True, help="where to write the Manifest JSON")
    parser.add_argument(
        "--only-partitions",
        type=_indexes,
        help="loss repair: write only these partition indexes (comma-separated); "
        "--transactional-ids still lists one id per partition",
    )
    parser.add_argument(
        "--expected-partition-rows",
        type=_indexes,
        help="loss repair: every partition's recorded rows (comma-separated); a source that "
        "no longer yields them is refused before anything is written",
    )
    parser.add_argument(
        "--partitioning",
        choices=PARTITIONINGS,
        help="loss repair: how the prepare being repaired partitioned its rows (the ledger's "
        "record); the repair partitions alike, whatever --align-with-kafka and the topic say",
    )
    parser.add_argument(
        "--source-splits",
        type=_json_object,
        help="loss repair of a source-split prepare: its recorded split settings, counts and "
        "input fingerprint (a JSON object, the ledger's record)",
    )
    return parser.parse_args(argv)


def _private_json(option: str, file: str) -> dict[str, Any]:
    """A JSON object from a settings file; a warning when others may read its secrets."""
    path = Path(file)
    try:
        loaded = json.loads(path.read_text())
        mode = path.stat().st_mode
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigurationError(f"{option}: {exc}") from None
    if not isinstance(loaded, dict):
        raise ConfigurationError(f"{option} {path}: must be a JSON object")
    if mode & 0o077 and any(is_secret(key) or key == "basic.auth.user.info" for key in loaded):
        log.warning(
            "%s %s holds credentials and is readable by other users (mode %o); "
            "create it with mode 600",
            option,
            path,
            mode & 0o777,
        )
    return loaded


def wire_options(args: argparse.Namespace) -> WireOptions:
    """The wire options of the command line (the registry's settings from their file)."""
    registry = (
        _private_json("--registry-config-file", args.registry_config_file)
        if args.registry_config_file
        else None
    )
    return WireOptions(
        registry=registry,
        value_format=args.value_format,
        key_format=args.key_format,
        tombstone_when=args.tombstone_when,
        timestamp_column=args.timestamp_column,
    )


def kafka_config(args: argparse.Namespace) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if args.kafka_config_file:
        config.update(_private_json("--kafka-config-file", args.kafka_config_file))
    if args.bootstrap_servers:
        config["bootstrap.servers"] = args.bootstrap_servers
    if "bootstrap.servers" not in config:
        raise ConfigurationError("--bootstrap-servers or bootstrap.servers in the config file")
    return config


def read_source(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    if args.source_table:
        df = spark.table(args.source_table)
    elif args.source_sql:
        df = spark.sql(args.source_sql)
    else:
        options = dict(item.split("=", 1) for item in args.source_option)
        df = spark.read.format(args.source_format).options(**options).load(args.source_path)
    return df.where(args.filter) if args.filter else df


def write_manifest(spark: SparkSession, uri: str, batch: Manifest) -> None:
    """Write through Hadoop's FileSystem: temporary file, then rename (atomic on HDFS/local)."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    target = jvm.org.apache.hadoop.fs.Path(uri)
    fs = target.getFileSystem(conf)
    temporary = jvm.org.apache.hadoop.fs.Path(uri + ".inprogress")
    stream = fs.create(temporary, True)
    try:
        stream.write(bytearray(batch.to_json().encode()))
    finally:
        stream.close()
    if fs.exists(target):
        fs.delete(target, False)
    if not fs.rename(temporary, target):
        raise Kafka2pcError(f"could not move the manifest into place at {uri}")


def _topic_partitions(
    loading: Future[Any], config: Future[dict[str, Any]], topics: Sequence[str]
) -> dict[str, int]:
    """The prepare's topic check, run ahead (``prepare._check_topics``)."""
    return loading.result()._check_topics(config.result(), list(topics))


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for name in ("airflow_provider_kafka2pc", log.name):
        logging.getLogger(name).setLevel(logging.INFO)
    args = parse_args(argv)
    try:
        route = routing(args.topic, args.topic_column, args.topics)
    except ConfigurationError as exc:
        log.error("%s", exc)
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
        return 2
    repair = args.only_partitions is not None
    # While the SparkSession starts: the import, then the topic check (kafka-python's
    # connection and a Metadata round trip), which would otherwise run between the session's
    # start and the first job. Their errors surface where they did before (config.result(),
    # prepare_dataframe's topic check).
    pool = ThreadPoolExecutor(2, thread_name_prefix="kafka2pc-start")
    loading = pool.submit(importlib.import_module, PREPARE_MODULE)
    config = pool.submit(kafka_config, args)
    checking = pool.submit(_topic_partitions, loading, config, route.topics)
    pool.shutdown(wait=False)
    spark = SparkSession.builder.appName(
        f"kafka2pc-{'repair' if repair else 'prepare'}-{'+'.join(route.topics)}"
    ).getOrCreate()
    prepare = loading.result()
    try:
        by_source_splits(spark, args)
        try:
            source = read_source(spark, args)
        except AnalysisException as exc:
            if not repair:
                raise
            return refuse(spark, args, f"the source cannot be read any more: {exc}", ())
        try:
            batch = prepare.prepare_dataframe(
                source,
                topic=args.topic,
                topic_column=args.topic_column,
                topics=args.topics,
                transactional_ids=[
                    t.strip() for t in args.transactional_ids.split(",") if t.strip()
                ],
                producer_config=config.result(),
                key_column=args.key_column,
                value_column=args.value_column,
                header_columns=args.header_columns,
                transaction_timeout_ms=args.transaction_timeout_ms,
                job_label=args.job_label,
                progress_interval_s=args.progress_interval_s,
                align_with_kafka=args.align_with_kafka,
                wire=wire_options(args),
                writer=args.writer,
                partitioning=requested_partitioning(args),
                repair=prepare.Repair(
                    args.only_partitions,
                    args.expected_partition_rows,
                    args.partitioning,
                    args.source_splits,
                )
                if repair
                else None,
                topic_partitions=checking,
            )
        except SourceChangedError as exc:
            return refuse(spark, args, str(exc), exc.partition_rows)
        write_manifest(spark, args.manifest, batch)
    except Kafka2pcError as exc:
        log.error("%s", exc)
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
        return 2 if isinstance(exc, ConfigurationError) else 1
    finally:
        spark.stop()
    summary = {
        "job_label": batch.job_label,
        "manifest": args.manifest,
        "source_rows": batch.source_rows,
        "transactions": sum(1 for c in batch.committables if not c.is_empty),
        **({"partitions": args.only_partitions} if repair else {}),
    }
    if batch.is_empty:
        summary["message"] = "source is empty; nothing prepared"
    print(json.dumps(summary), flush=True)
    return 0


def refuse(
    spark: SparkSession, args: argparse.Namespace, why: str, partition_rows: Sequence[int]
) -> int:
    """A repair that wrote nothing: the manifest says why (the orchestrator reads it)."""
    log.error("refusing to re-prepare partitions %s: %s", args.only_partitions, why)
    route = routing(args.topic, args.topic_column, args.topics)
    refused = Manifest(
        job_label=args.job_label or "",
        topic=route.topic,
        topics=route.topics,
        committables=(),
        source_rows=0,
        partition_rows=tuple(partition_rows),
        metadata={"refused": why, "partitions": list(args.only_partitions)},
    )
    write_manifest(spark, args.manifest, refused)
    print(json.dumps({"error": "RepairRefused", "message": why}), flush=True)
    return EXIT_REFUSED


if __name__ == "__main__":
    sys.exit(main())
