"""The prepare's Spark job as the ledger records it: what a repair runs again, no secret."""

from __future__ import annotations

import dataclasses
import json

import pytest

from airflow_provider_kafka2pc.errors import ConfigurationError
from airflow_provider_kafka2pc.spark.export_spec import ExportSpec
from airflow_provider_kafka2pc.spark.job_spec import SPARK_JOB_VERSION, SparkJob, describe_job

SOURCE = {"path": "/data/orders", "format": "json", "options": {"multiLine": "true"}}


def job(source=SOURCE, **changes) -> SparkJob:
    values = {
        "export": ExportSpec(source=source, topic="orders"),
        "spark_conn_id": "spark_default",
        "kafka_conn_id": "kafka_default",
        "conf": {"spark.sql.shuffle.partitions": "4"},
        "env_vars": {"TZ": "UTC"},
        "submit": {"packages": "org.apache.spark:spark-avro_2.13:4.0.1", "verbose": False},
        "manifest_dir": "s3://bucket/manifests",
        **changes,
    }
    return describe_job(**values)


def test_the_record_reads_back_as_the_same_job():
    original = job()
    record = json.loads(json.dumps(original.record()))  # as the ledger stores it
    assert record["version"] == SPARK_JOB_VERSION
    again = SparkJob.from_record(record)
    assert again == original
    assert again.export.to_argv() == [
        "--source-path",
        "/data/orders",
        "--source-format",
        "json",
        "--source-option",
        "multiLine=true",
        "--topic",
        "orders",
    ]


#: A ledger row's ``spark_job`` as release 0.2.0 wrote it: the export as application flags.
RECORD_0_2_0 = {
    "version": 1,
    "source": {"sql": "SELECT * FROM orders WHERE day = '2026-11-01'"},
    "writer_arguments": [
        "--topic-column",
        "dest",
        "--topics",
        "orders,refunds",
        "--transaction-timeout-ms",
        "600000",
        "--progress-interval-s",
        "30.0",
        "--no-align-with-kafka",
        "--writer",
        "jvm",
        "--shuffle",
        "--key-column",
        "id",
        "--header-column",
        "trace",
        "--value-format",
        '{"schema": null, "subject_name_strategy": "topic_name", "record_name": "Order", '
        '"namespace": "", "auto_register": true, "schema_type": "AVRO"}',
        "--tombstone-when",
        "deleted",
        "--timestamp-column",
        "ts",
    ],
    "writer": "jvm",
    "spark_conn_id": "spark_default",
    "kafka_conn_id": "kafka_default",
    "spark_mode": None,
    "registry_conn_id": "registry",
    "name": "kafka2pc-prepare",
    "conf": {"spark.sql.shuffle.partitions": "4"},
    "env_vars": {},
    "submit": {},
    "manifest_dir": None,
    "withheld": [],
}


def test_a_record_of_release_0_2_0_reads_as_the_same_export():
    old = SparkJob.from_record(RECORD_0_2_0)
    spec = old.export
    assert spec.source == RECORD_0_2_0["source"]
    assert (spec.topic_column, spec.topics, spec.key_column) == (
        "dest",
        ("orders", "refunds"),
        "id",
    )
    assert spec.header_columns == ("trace",) and spec.writer == "jvm"
    assert spec.partitioning == "hash"  # --shuffle --no-align-with-kafka
    assert spec.value_format is not None and spec.value_format.record_name == "Order"
    assert (spec.tombstone_when, spec.timestamp_column) == ("deleted", "ts")
    assert spec.transaction_timeout_ms == 600000
    assert old.registry_conn_id == "registry" and old.conf_dict() == {
        "spark.sql.shuffle.partitions": "4"
    }
    # and it is written back in today's layout, read back the same
    assert SparkJob.from_record(json.loads(json.dumps(old.record()))) == old


def test_the_job_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        job().export = ExportSpec(topic="x")  # type: ignore[misc]


def test_settings_named_like_secrets_stay_out_of_the_record():
    secret = job(
        conf={"spark.hadoop.fs.s3a.secret.key": "s3cr3t", "spark.sql.shuffle.partitions": "4"},
        env_vars={"AWS_SECRET_ACCESS_KEY": "s3cr3t", "API_TOKEN": "t0k3n", "TZ": "UTC"},
    )
    record = secret.record()
    assert "s3cr3t" not in json.dumps(record) and "t0k3n" not in json.dumps(record)
    assert record["conf"] == {"spark.sql.shuffle.partitions": "4"}
    assert record["env_vars"] == {"TZ": "UTC"}
    assert record["withheld"] == [
        "API_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "spark.hadoop.fs.s3a.secret.key",
    ]
    assert SparkJob.from_record(record).withheld == tuple(record["withheld"])


def test_a_malformed_source_or_a_newer_record_is_refused_clearly():
    with pytest.raises(ConfigurationError, match="exactly one of"):
        job(source={"path": "/a", "table": "t"})
    with pytest.raises(ConfigurationError, match="needs a source"):
        job(source=None)
    with pytest.raises(ConfigurationError, match="layout version 99"):
        SparkJob.from_record({**job().record(), "version": 99})
