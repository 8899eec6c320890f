"""Running the prepare application with the spark-submit that ships with pyspark.

Airflow users submit :data:`~airflow_provider_kafka2pc.spark.APPLICATION` through
``SparkSubmitOperator``; this is for the demo, the tests and shells without Airflow.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

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


def submit_prepare(
    args: Sequence[str],
    *,
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    log_path: Path | None = None,
    timeout_s: float = 900,
) -> subprocess.CompletedProcess[str]:
    """Run the prepare application; its JSON summary is the last ``{...}`` line of stdout."""
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
