"""spark-submit runs on equal terms, and where their time went, from Spark's own event log.

Why: the systems compared run as a user would run them, each in its own spark-submit, so
their phases cannot be read from a session in this process. Every submit here gets the
same settings (the package's quiet defaults, ``local[N]``) and writes Spark's event log;
the log's timestamps split the wall time into start-up, each job, and shutdown.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_kafka2pc import defaults
from airflow_provider_kafka2pc.spark.job import spark_submit_binary
from devtools.spark_submit import LOCAL_CONF

#: Python workers and the driver run this interpreter (it has the package and pyarrow).
PYTHON_ENV = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


#: A directory: each spark-submit then records a Java Flight Recording there (JDK's JFR,
#: ``settings=profile``), read with ``jfr print --events jdk.ExecutionSample``.
JFR_ENV = "KAFKA2PC_BENCH_JFR"


#: Java options added to every Spark driver the harness submits (local mode: the JVM that
#: runs the tasks too), kafka2pc's and the peers' alike: how a JVM setting is tried on equal
#: terms, e.g. ``-XX:TieredStopAtLevel=1``.
DRIVER_OPTIONS_ENV = "KAFKA2PC_BENCH_DRIVER_OPTIONS"


def driver_java_options(name: str) -> dict[str, str]:
    """The driver's Java options from :data:`DRIVER_OPTIONS_ENV` and, with :data:`JFR_ENV`
    set, the one that records the Spark JVM's samples as ``<name>.jfr`` there (a profiling
    run, never a timed one); none when neither is set."""
    options = os.environ.get(DRIVER_OPTIONS_ENV, "").split()
    recordings = os.environ.get(JFR_ENV)
    if recordings:
        recording = Path(recordings) / f"{name}.jfr"
        options.append(f"-XX:StartFlightRecording=filename={recording},settings=profile")
    return {"spark.driver.extraJavaOptions": " ".join(options)} if options else {}


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
    conf = {
        **(conf or {}),
        **driver_java_options(f"{log_path.parent.name}-{Path(application).stem}"),
    }
    for key, value in defaults.spark_conf(LOCAL_CONF, conf).items():
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


#: A Spark Connect server names a job's stages by the client's plan: ``Spark Connect -
#: session_id: "..." plan { root { common { ... } map_partitions { ...`` (cut at 144
#: characters); its top operation's name is the part worth printing.
_CONNECT_PLAN = re.compile(r"^\s*(?:root|command) \{\s*(?:common \{[^}]*\}\s*)?([a-z_]+) \{", re.M)


def _job_name(stage_name: str) -> str:
    """``collect at /path/prepare.py:353`` -> ``collect at prepare.py:353``; a Connect
    client's plan -> ``Connect plan map_partitions``."""
    if stage_name.startswith("Spark Connect - "):
        top = _CONNECT_PLAN.search(stage_name)
        return f"Connect plan {top.group(1) if top else '(unnamed)'}"
    action, _, where = stage_name.partition(" at ")
    return f"{action} at {where.rsplit('/', 1)[-1]}" if where else action


@dataclass(frozen=True)
class Phase:
    """One named span of a run (epoch ms); several spans may share a name (jobs, gaps)."""

    name: str
    start_ms: float
    end_ms: float

    @property
    def seconds(self) -> float:
        return (self.end_ms - self.start_ms) / 1000


def _events(event_dir: Path) -> Iterator[dict]:
    logs = sorted((p for p in event_dir.glob("*") if p.is_file()), key=lambda p: p.stat().st_mtime)
    if logs:
        with logs[-1].open() as f:
            for line in f:
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    # A live server's log (``.inprogress``) may end in a line being written.
                    if line.endswith("\n"):
                        raise


def spark_phases(event_dir: Path, started_ms: float, ended_ms: float) -> list[Phase]:
    """The run from launch to exit cut at the application's start, each job's start and end
    (named by the call site of its last stage: adaptive execution splits one action into
    several jobs), and the application's end; empty when the log has no finished job."""
    app: dict[str, float] = {}
    jobs: dict[int, list] = {}
    for event in _events(event_dir):
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
        return []
    start = app["SparkListenerApplicationStart"]
    stop = app.get("SparkListenerApplicationEnd", done[-1][2])
    phases = [
        Phase("launch to Spark app start", started_ms, start),
        Phase("app start to first job", start, done[0][1]),
    ]
    for i, (name, begin, end) in enumerate(done):
        if i:
            phases.append(Phase("between jobs", done[i - 1][2], begin))
        phases.append(Phase(f"jobs {name}", begin, end))
    phases.append(Phase("last job to app end", done[-1][2], stop))
    phases.append(Phase("app end to exit", stop, ended_ms))
    return phases


def task_spans(
    event_dir: Path, since_ms: float = 0.0, until_ms: float = float("inf")
) -> list[tuple[float, float, str]]:
    """Every finished task of the application launched in [``since_ms``, ``until_ms``]
    (by default all): (launch ms, finish ms, ``stage N``)."""
    spans = []
    for event in _events(event_dir):
        if event["Event"] == "SparkListenerTaskEnd":
            info = event["Task Info"]
            if since_ms <= info["Launch Time"] <= until_ms:
                stage = f"stage {event['Stage ID']}"
                spans.append((info["Launch Time"], info["Finish Time"], stage))
    return sorted(spans)


@dataclass(frozen=True)
class StageCpu:
    """CPU seconds of an application's tasks by Spark's task metrics (the executor threads
    running them: the JVM's share, not the Python workers they feed), split into the stages
    that write a shuffle (read, evaluate the columns, shuffle write) and the others."""

    map_stages: float
    other_stages: float
    shuffle_bytes: int


def stage_cpu(event_dir: Path) -> StageCpu:
    """The tasks' executor CPU from the event log (``Executor CPU Time``, ns)."""
    cpu: dict[int, float] = {}
    shuffled: dict[int, int] = {}
    for event in _events(event_dir):
        if event["Event"] == "SparkListenerTaskEnd":
            metrics = event.get("Task Metrics") or {}
            stage = event["Stage ID"]
            cpu[stage] = cpu.get(stage, 0.0) + metrics.get("Executor CPU Time", 0) / 1e9
            written = (metrics.get("Shuffle Write Metrics") or {}).get("Shuffle Bytes Written", 0)
            shuffled[stage] = shuffled.get(stage, 0) + written
    return StageCpu(
        sum(c for s, c in cpu.items() if shuffled.get(s)),
        sum(c for s, c in cpu.items() if not shuffled.get(s)),
        sum(shuffled.values()),
    )


def server_phases(
    event_dir: Path, started_ms: float, ended_ms: float, *, client: str = "client"
) -> list[Phase]:
    """One export cut out of a long-lived server's event log (a Spark Connect server: one
    application for many clients): from the client's launch to the first job submitted in
    [``started_ms``, ``ended_ms``], each such job (named as in :func:`spark_phases`), between
    jobs, and from the last job to ``ended_ms``; one phase when no job was seen."""
    jobs: dict[int, list] = {}
    for event in _events(event_dir):
        kind = event["Event"]
        if kind == "SparkListenerJobStart" and started_ms <= event["Submission Time"] <= ended_ms:
            last = max(event["Stage Infos"], key=lambda s: s["Stage ID"])
            jobs[event["Job ID"]] = [_job_name(last["Stage Name"]), event["Submission Time"]]
        elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
            jobs[event["Job ID"]].append(event["Completion Time"])
    done = [j for _, j in sorted(jobs.items()) if len(j) == 3]
    if not done:
        return [Phase("whole run", started_ms, ended_ms)]
    phases = [Phase(f"{client} launch to first job", started_ms, done[0][1])]
    for i, (name, begin, end) in enumerate(done):
        if i:
            phases.append(Phase("between jobs", done[i - 1][2], begin))
        phases.append(Phase(f"jobs {name}", begin, end))
    phases.append(Phase(f"last job to {client} exit", done[-1][2], ended_ms))
    return phases


def summed(phases: Sequence[Phase]) -> dict[str, float]:
    """Seconds per phase name (jobs of one call site and the gaps between jobs summed)."""
    parts: dict[str, float] = {}
    for phase in phases:
        parts[phase.name] = parts.get(phase.name, 0.0) + phase.seconds
    return parts


def timeline(event_dir: Path, started_ms: float, ended_ms: float) -> dict[str, float]:
    """Seconds from launch to the application's start, to its first job, in its jobs (summed
    by the call site of their last stage: adaptive execution splits one action into several
    jobs), between jobs, and from its last job to the process's exit."""
    parts: dict[str, float] = {}
    for phase in spark_phases(event_dir, started_ms, ended_ms):
        parts[phase.name] = parts.get(phase.name, 0.0) + phase.seconds
    if parts:
        parts.setdefault("between jobs", 0.0)
        # keep the order launch, first job, jobs..., between jobs, last job, exit
        tail = ("between jobs", "last job to app end", "app end to exit")
        parts = {k: v for k, v in parts.items() if k not in tail} | {k: parts[k] for k in tail}
    return parts


#: The package's command line, beside this interpreter (the venv the benchmark runs in).
KAFKA2PC_CLI = str(Path(sys.executable).with_name("kafka2pc"))


def kafka2pc_commit(servers: str, manifest: Path) -> subprocess.CompletedProcess[str]:
    """``kafka2pc commit`` of a prepare's manifest, as a user's commit task runs it (its
    process start included in the timed section); the caller checks the return code."""
    return subprocess.run(
        [KAFKA2PC_CLI, "commit", "-b", servers, str(manifest)],
        capture_output=True,
        text=True,
        timeout=300,
    )
