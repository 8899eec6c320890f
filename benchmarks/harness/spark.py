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

from airflow_provider_kafka2pc import defaults
from airflow_provider_kafka2pc.spark.job import spark_submit_binary
from airflow_provider_kafka2pc.spark.submit import LOCAL_CONF

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
    """spark-submit ``application`` with the settings the package's own local submit uses
    (``submit_prepare``), plus ``conf``."""
    command = [spark_submit_binary(), "--master", master]
    for key, value in defaults.spark_conf(LOCAL_CONF, dict(conf or {})).items():
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


def _job_name(stage_name: str) -> str:
    """``collect at /path/prepare.py:353`` -> ``collect at prepare.py:353``."""
    action, _, where = stage_name.partition(" at ")
    return f"{action} at {where.rsplit('/', 1)[-1]}" if where else action


def timeline(event_dir: Path, started_ms: float, ended_ms: float) -> dict[str, float]:
    """Seconds from launch to the application's start, to its first job, in its jobs (summed
    by the call site of their last stage: adaptive execution splits one action into several
    jobs), between jobs, and from its last job to the process's exit."""
    logs = sorted((p for p in event_dir.glob("*") if p.is_file()), key=lambda p: p.stat().st_mtime)
    if not logs:
        return {}
    app: dict[str, float] = {}
    jobs: dict[int, list] = {}
    with logs[-1].open() as f:
        for line in f:
            event = json.loads(line)
            kind = event["Event"]
            if kind in ("SparkListenerApplicationStart", "SparkListenerApplicationEnd"):
                app[kind] = event["Timestamp"]
            elif kind == "SparkListenerJobStart":
                last = max(event["Stage Infos"], key=lambda s: s["Stage ID"])
                jobs[event["Job ID"]] = [_job_name(last["Stage Name"]), event["Submission Time"]]
            elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
                jobs[event["Job ID"]].append(event["Completion Time"])
    done = [j for _, j in sorted(jobs.items()) if len(j) == 3]
    if "SparkListenerApplicationStart" not in app or not done:
        return {}
    start = app["SparkListenerApplicationStart"]
    stop = app.get("SparkListenerApplicationEnd", done[-1][2])
    parts = {
        "launch to Spark app start": (start - started_ms) / 1000,
        "app start to first job": (done[0][1] - start) / 1000,
    }
    between = 0.0
    for i, (name, begin, end) in enumerate(done):
        parts[f"jobs {name}"] = parts.get(f"jobs {name}", 0.0) + (end - begin) / 1000
        if i:
            between += (begin - done[i - 1][2]) / 1000
    parts["between jobs"] = between
    parts["last job to app end"] = (stop - done[-1][2]) / 1000
    parts["app end to exit"] = (ended_ms - stop) / 1000
    return parts
