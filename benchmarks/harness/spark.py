"""spark-submit runs on equal terms, and where their time went, from Spark's own event log.

Why: the systems compared run as a user would run them, each in its own spark-submit, so
their phases cannot be read from a session in this process. Every submit here gets the
same settings (the package's quiet defaults, ``local[N]``) and writes Spark's event log;
the log's timestamps split the wall time into start-up, each job, and shutdown.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from airflow_provider_kafka2pc.spark.submit import DEFAULT_CONF, spark_submit_binary

#: Python workers and the driver run this interpreter (it has the package and pyarrow).
PYTHON_ENV = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def event_log_conf(directory: Path) -> dict[str, str]:
    """Settings that make a Spark application write its (uncompressed) event log there."""
    directory.mkdir(parents=True, exist_ok=True)
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": f"file://{directory}",
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",  # one file (Spark 4 rolls by default)
    }


def spark_submit(
    application: str,
    args: Sequence[str],
    *,
    master: str,
    conf: Mapping[str, str] | None = None,
    jars: Sequence[Path] = (),
    log_path: Path,
    timeout_s: float = 1800,
) -> subprocess.CompletedProcess[str]:
    """spark-submit ``application`` with the package's default settings plus ``conf``."""
    command = [spark_submit_binary(), "--master", master]
    for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
        command += ["--conf", f"{key}={value}"]
    if jars:
        command += ["--jars", ",".join(str(j) for j in jars)]
    with log_path.open("w") as log:
        return subprocess.run(
            [*command, application, *args],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            timeout=timeout_s,
            env={**os.environ, **PYTHON_ENV},
        )


def now_ms() -> float:
    return time.time() * 1000


def timeline(event_dir: Path, started_ms: float, ended_ms: float) -> dict[str, float]:
    """Seconds from launch to the application's start, in and between its jobs (each job
    named after its last stage), and from its last job to the process's exit."""
    logs = sorted(event_dir.glob("*"), key=lambda p: p.stat().st_mtime)
    if not logs:
        return {}
    app_start = app_end = None
    jobs: dict[int, dict[str, float | str]] = {}
    with logs[-1].open() as f:
        for line in f:
            event = json.loads(line)
            kind = event["Event"]
            if kind == "SparkListenerApplicationStart":
                app_start = event["Timestamp"]
            elif kind == "SparkListenerApplicationEnd":
                app_end = event["Timestamp"]
            elif kind == "SparkListenerJobStart":
                last = max(event["Stage Infos"], key=lambda s: s["Stage ID"])
                jobs[event["Job ID"]] = {
                    "name": last["Stage Name"].split(" at ")[0],
                    "start": event["Submission Time"],
                }
            elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
                jobs[event["Job ID"]]["end"] = event["Completion Time"]
    if app_start is None:
        return {}
    parts = {"launch to Spark app start": (app_start - started_ms) / 1000}
    outside, cursor = 0.0, float(app_start)
    for job_id in sorted(jobs):
        job = jobs[job_id]
        if "end" in job:
            start, end = float(job["start"]), float(job["end"])
            name = f"job {job['name']}"
            while name in parts:  # the same action twice: number them
                name += "'"
            parts[name] = (end - start) / 1000
            outside, cursor = outside + (start - cursor) / 1000, end
    stop = float(app_end) if app_end is not None else cursor
    parts["driver outside jobs"] = outside + (stop - cursor) / 1000
    parts["Spark app end to exit"] = (ended_ms - stop) / 1000
    return parts
