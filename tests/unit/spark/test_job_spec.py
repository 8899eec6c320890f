"""The prepare's Spark job as the ledger records it: what a repair runs again, no secret."""

from __future__ import annotations

import dataclasses
import json

import pytest

from airflow_provider_kafka2pc.errors import ConfigurationError
from airflow_provider_kafka2pc.spark.job_spec import SPARK_JOB_VERSION, SparkJob, describe_job


def job(**changes) -> SparkJob:
    values = {
        "source": {"path": "/data/orders", "format": "json", "options": {"multiLine": "true"}},
        "writer_arguments": ["--topic", "orders", "--writer", "auto"],
        "writer": "auto",
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
    assert again.arguments == [
        "--source-path",
        "/data/orders",
        "--source-format",
        "json",
        "--source-option",
        "multiLine=true",
        "--topic",
        "orders",
        "--writer",
        "auto",
    ]


def test_the_job_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        job().writer = "python"  # type: ignore[misc]


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
    with pytest.raises(ConfigurationError, match="layout version 99"):
        SparkJob.from_record({**job().record(), "version": 99})
