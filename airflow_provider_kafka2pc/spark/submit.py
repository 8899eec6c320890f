"""Running the prepare application with the spark-submit that ships with pyspark.

Airflow users submit :data:`~airflow_provider_kafka2pc.spark.APPLICATION` through
``SparkSubmitOperator``; this is for the demo, the tests and shells without Airflow.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import APPLICATION

#: Keep the driver quiet and make every Python worker use this interpreter, which has
#: our package (a worker on another interpreter fails to unpickle our functions).
DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.pyspark.python": sys.executable,
}


def spark_submit_binary() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


@contextmanager
def private_config_file(kafka_config: Mapping[str, Any]) -> Iterator[Path]:
    """``kafka_config`` as JSON in a file only this user can read, removed afterwards.

    How credentials reach the application without showing on a command line.
    """
    directory = Path(tempfile.mkdtemp(prefix="kafka2pc-conf-"))  # mode 0700
    path = directory / "kafka.json"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(dict(kafka_config), handle)
        yield path
    finally:
        shutil.rmtree(directory, ignore_errors=True)


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
    settings = {**DEFAULT_CONF, **(conf or {})}
    command = [spark_submit_binary(), "--master", master]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    stderr = log_path.open("w") if log_path else subprocess.DEVNULL
    try:
        return subprocess.run(
            [*command, APPLICATION, *args],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            timeout=timeout_s,
            env=env,
        )
    finally:
        if log_path:
            stderr.close()
