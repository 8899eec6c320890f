"""spark-submit application: read a source, prepare it into Kafka transactions, write the manifest.

    spark-submit .../airflow_provider_kafka2pc/spark/app.py \\
        --spec-file export.json \\
        --transactional-ids run-0,run-1,... \\
        --kafka-config-file kafka.json --manifest s3a://b/manifests/run.json

The export's options come from one file, the :class:`~.export_spec.ExportSpec` as JSON (what
the prepare operator writes); for a run by hand the same options are flags generated from the
spec's fields instead (``--source-table db.orders --topic orders ...``, see ``--help``).

Exit 0 only when every partition prepared. A kafka2pc error is written beside the manifest
(:mod:`.failure`: its class, message and whether a retry can help) before the exit, for the
task to raise it again; exit 2 for a permanent one, 1 otherwise. The manifest (the Manifest
as JSON) is written atomically (temporary file, then rename) through Hadoop's FileSystem, so any
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
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from airflow_provider_kafka2pc.spark.bytecode import prefer_installed_packages

prefer_installed_packages()  # before pyspark's first import: see the module

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from airflow_provider_kafka2pc.connection.settings import is_secret
from airflow_provider_kafka2pc.errors import (
    ConfigurationError,
    Kafka2pcError,
    PermanentError,
    SourceChangedError,
)
from airflow_provider_kafka2pc.spark.cluster_packages import share_with_executors
from airflow_provider_kafka2pc.spark.export_spec import (
    ExportSpec,
    add_arguments,
    from_arguments,
    json_object,
)
from airflow_provider_kafka2pc.spark.failure import JobFailure, failure_uri
from airflow_provider_kafka2pc.spark.job import local_path
from airflow_provider_kafka2pc.spark.partitionings import AUTO_PARTITIONING
from airflow_provider_kafka2pc.transaction.manifest import PARTITIONINGS, SOURCE, Manifest

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


def by_source_splits(spark: SparkSession, spec: ExportSpec, args: argparse.Namespace) -> None:
    """Before the source is read: without block locations (read when the files are listed)
    a coalesce groups contiguous splits wherever it runs; a repair also sets the recorded
    split settings."""
    recorded = args.recorded_partitioning
    if (recorded or spec.partitioning) not in (SOURCE, AUTO_PARTITIONING):
        return
    from airflow_provider_kafka2pc.spark.source_splits import IGNORE_LOCALITY, SPLIT_SETTINGS

    spark.conf.set(IGNORE_LOCALITY, "true")
    for key, value in ((args.source_splits or {}).get("settings") or {}).items():
        if key in SPLIT_SETTINGS and value is not None:
            spark.conf.set(key, str(value))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The run's options, and the export's (its ``--spec-file``, or its flags)."""
    parser = argparse.ArgumentParser(
        prog="kafka2pc-spark-prepare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)  # the export spec's flags, generated from its fields
    run = parser.add_argument_group("this run")
    run.add_argument(
        "--transactional-ids", required=True, help="comma-separated; one Spark partition per id"
    )
    run.add_argument(
        "--kafka-config-file", help="JSON object of librdkafka settings (keeps secrets off argv)"
    )
    run.add_argument("--bootstrap-servers", help="overrides bootstrap.servers")
    run.add_argument(
        "--registry-config-file",
        help="JSON object of SchemaRegistryClient settings (url, basic.auth.user.info, ssl.*); "
        "a file, to keep the credentials off argv",
    )
    run.add_argument("--job-label")
    run.add_argument("--manifest", required=True, help="where to write the Manifest JSON")
    repair = parser.add_argument_group("loss repair")
    repair.add_argument(
        "--only-partitions",
        type=_indexes,
        help="write only these partition indexes (comma-separated); "
        "--transactional-ids still lists one id per partition",
    )
    repair.add_argument(
        "--expected-partition-rows",
        type=_indexes,
        help="every partition's recorded rows (comma-separated); a source that no longer "
        "yields them is refused before anything is written",
    )
    repair.add_argument(
        "--partitioning",
        dest="recorded_partitioning",
        choices=PARTITIONINGS,
        help="how the prepare being repaired partitioned its rows (the ledger's record); the "
        "repair partitions alike, whatever the spec and the topic say",
    )
    repair.add_argument(
        "--source-splits",
        type=json_object,
        help="a source-split prepare's recorded split settings, counts and input fingerprint "
        "(a JSON object, the ledger's record)",
    )
    return parser.parse_args(argv)


def repair_of(args: argparse.Namespace) -> Any:
    """The run's :class:`~.prepare.Repair` (None outside a loss repair)."""
    if args.only_partitions is None:
        return None
    from airflow_provider_kafka2pc.spark.prepare import Repair

    return Repair(
        args.only_partitions,
        args.expected_partition_rows,
        args.recorded_partitioning,
        args.source_splits,
    )


def transactional_ids(args: argparse.Namespace) -> list[str]:
    return [t.strip() for t in args.transactional_ids.split(",") if t.strip()]


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


def registry_settings(args: argparse.Namespace) -> dict[str, Any] | None:
    """The schema registry's settings, from their private file (None: not given)."""
    if not args.registry_config_file:
        return None
    return _private_json("--registry-config-file", args.registry_config_file)


def kafka_config(args: argparse.Namespace) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if args.kafka_config_file:
        config.update(_private_json("--kafka-config-file", args.kafka_config_file))
    if args.bootstrap_servers:
        config["bootstrap.servers"] = args.bootstrap_servers
    if "bootstrap.servers" not in config:
        raise ConfigurationError("--bootstrap-servers or bootstrap.servers in the config file")
    return config


def read_source(spark: SparkSession, source: Mapping[str, Any]) -> DataFrame:
    """The export's ``source`` (sql, table or path) as a DataFrame, filtered."""
    if source.get("table"):
        df = spark.table(source["table"])
    elif source.get("sql"):
        df = spark.sql(source["sql"])
    else:
        reader = spark.read.format(source.get("format") or "parquet")
        df = reader.options(**dict(source.get("options") or {})).load(source["path"])
    return df.where(source["filter"]) if source.get("filter") else df


def write_manifest(spark: SparkSession, uri: str, batch: Manifest) -> None:
    """Write through Hadoop's FileSystem: temporary file, then rename (atomic on HDFS/local)."""
    write_text(spark, uri, batch.to_json())


def write_text(spark: SparkSession, uri: str, text: str) -> None:
    """``text`` at ``uri`` through Hadoop's FileSystem: temporary file, then rename."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    target = jvm.org.apache.hadoop.fs.Path(uri)
    fs = target.getFileSystem(conf)
    temporary = jvm.org.apache.hadoop.fs.Path(uri + ".inprogress")
    stream = fs.create(temporary, True)
    try:
        stream.write(bytearray(text.encode()))
    finally:
        stream.close()
    if fs.exists(target):
        fs.delete(target, False)
    if not fs.rename(temporary, target):
        raise Kafka2pcError(f"could not move {uri} into place")


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
        spec = from_arguments(args)
        if spec.source is None:
            raise ConfigurationError("the export spec names no source (--source-* or source)")
    except ConfigurationError as exc:
        return fail(None, args.manifest, exc)
    repair = args.only_partitions is not None
    # While the SparkSession starts: the import, then the topic check (kafka-python's
    # connection and a Metadata round trip), which would otherwise run between the session's
    # start and the first job. Their errors surface where they did before (config.result(),
    # prepare_export's topic check).
    pool = ThreadPoolExecutor(2, thread_name_prefix="kafka2pc-start")
    loading = pool.submit(importlib.import_module, PREPARE_MODULE)
    config = pool.submit(kafka_config, args)
    checking = pool.submit(_topic_partitions, loading, config, spec.route.topics)
    pool.shutdown(wait=False)
    spark = SparkSession.builder.appName(
        f"kafka2pc-{'repair' if repair else 'prepare'}-{'+'.join(spec.route.topics)}"
    ).getOrCreate()
    try:
        share_with_executors(spark)
        prepare = loading.result()
        by_source_splits(spark, spec, args)
        try:
            source = read_source(spark, spec.source)
        except AnalysisException as exc:
            if not repair:
                raise ConfigurationError(f"the source cannot be read: {exc}") from None
            return refuse(spark, spec, args, f"the source cannot be read any more: {exc}", ())
        try:
            batch = prepare.prepare_export(
                source,
                spec,
                transactional_ids=transactional_ids(args),
                producer_config=config.result(),
                registry=registry_settings(args),
                job_label=args.job_label,
                repair=repair_of(args),
                topic_partitions=checking,
            )
        except SourceChangedError as exc:
            return refuse(spark, spec, args, str(exc), exc.partition_rows)
        write_manifest(spark, args.manifest, batch)
    except Kafka2pcError as exc:
        return fail(spark, args.manifest, exc)
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


def fail(spark: SparkSession | None, manifest: str, exc: Kafka2pcError) -> int:
    """Log the error, write it beside the manifest for the task to raise again
    (:mod:`.failure`), print it as the last line; the exit code: 2 permanent, 1 otherwise."""
    log.error("%s: %s", type(exc).__name__, exc)
    failure = JobFailure.of(exc)
    try:
        local = local_path(failure_uri(manifest))
        if spark is not None:
            write_text(spark, failure_uri(manifest), failure.to_json())
        elif local is not None:
            local.write_text(failure.to_json())
    except Exception as written:  # any: the exit code and the last stdout line still say it
        log.warning("could not write the failure beside the manifest: %s", written)
    print(json.dumps({"error": failure.error, "message": failure.message}), flush=True)
    return 2 if isinstance(exc, PermanentError) else 1


def refuse(
    spark: SparkSession,
    spec: ExportSpec,
    args: argparse.Namespace,
    why: str,
    partition_rows: Sequence[int],
) -> int:
    """A repair that wrote nothing: the manifest says why (the orchestrator reads it)."""
    log.error("refusing to re-prepare partitions %s: %s", args.only_partitions, why)
    route = spec.route
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
