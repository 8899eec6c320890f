"""Running the prepare application with the spark-submit that ships with pyspark.

Airflow users submit :data:`~airflow_provider_kafka2pc.spark.APPLICATION` through
``SparkSubmitOperator``; this is for the demo, the tests and the benchmarks (not installed).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_provider_kafka2pc import defaults
from airflow_provider_kafka2pc.spark import APPLICATION
from airflow_provider_kafka2pc.spark.class_sharing import driver_archive
from airflow_provider_kafka2pc.spark.compilation import with_compile_thresholds
from airflow_provider_kafka2pc.spark.job import (
    private_config_file,
    spark_submit_binary,
    with_project_jar,
)
from airflow_provider_kafka2pc.spark.writers import AUTO_WRITER

#: Local runs (demo, tests): no Spark UI, few shuffle partitions.
LOCAL_CONF = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"}


def submit_prepare(
    args: Sequence[str],
    *,
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    log_path: Path | None = None,
    timeout_s: float = 900,
    kafka_config: Mapping[str, Any] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the prepare application; its JSON summary is the last ``{...}`` line of stdout.

    ``kafka_config`` (librdkafka settings, credentials included) is handed over in a
    private file (``--kafka-config-file``) that is removed when the application ends.
    """
    if kafka_config is None:
        return _run(args, master, conf, log_path, timeout_s)
    with private_config_file(kafka_config) as path:
        return _run([*args, "--kafka-config-file", str(path)], master, conf, log_path, timeout_s)


def _run(
    args: Sequence[str],
    master: str,
    conf: Mapping[str, str] | None,
    log_path: Path | None,
    timeout_s: float,
) -> subprocess.CompletedProcess[str]:
    writer = args[list(args).index("--writer") + 1] if "--writer" in args else AUTO_WRITER
    protobuf = "PROTOBUF" in " ".join(args)  # a format flag's JSON, or a spec file's
    if "--spec-file" in args:
        protobuf = "PROTOBUF" in Path(args[list(args).index("--spec-file") + 1]).read_text()
    settings = with_project_jar(
        defaults.spark_conf(LOCAL_CONF, dict(conf or {})), writer, protobuf=protobuf
    )
    binary = spark_submit_binary()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    stderr = log_path.open("w") if log_path else subprocess.DEVNULL
    try:
        with driver_archive(with_compile_thresholds(settings, binary), binary) as archive:
            command = [binary, "--master", master]
            for key, value in archive.conf.items():
                command += ["--conf", f"{key}={value}"]
            done = subprocess.run(
                [*command, APPLICATION, *args],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                timeout=timeout_s,
                env=env,
            )
            if done.returncode == 0:
                archive.publish()
        return done
    finally:
        if log_path:
            stderr.close()
