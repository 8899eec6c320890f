"""Spark for the tests: an in-process session, spark-submit, and a standalone cluster.

Every Spark process is started here and stopped by its own PID.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyspark

from airflow_provider_kafka2pc import defaults
from airflow_provider_kafka2pc.spark import PROTOBUF_JAVA
from airflow_provider_kafka2pc.spark.maven import fetch_jar
from devtools.broker.node import free_port
from devtools.spark_submit import LOCAL_CONF

SPARK_CLASS = str(Path(pyspark.__file__).parent / "bin" / "spark-class")

#: Python workers must run our venv's interpreter, or they miss our package.
PYTHON_ENV = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
#: protobuf-java on the driver's class path of every in-process session: one test process
#: starts one JVM for all its modules, and a module that loaded the project's jar first would
#: leave the Protobuf encoder unable to see a protobuf-java added later by ``ADD JAR`` (a
#: child class loader). A user's session needs the same: docs/wire-formats.md.
QUIET_CONF = {
    **defaults.spark_conf(LOCAL_CONF),
    "spark.driver.extraClassPath": str(fetch_jar(PROTOBUF_JAVA)),
}


def local_session() -> Iterator[object]:
    """A ``local[2]`` SparkSession with the tests' quiet settings, stopped after use: the
    body of the module-scoped ``spark`` fixtures (``yield from local_session()``)."""
    from pyspark.sql import SparkSession

    os.environ.update(PYTHON_ENV)
    builder = SparkSession.builder.master("local[2]")
    for key, value in QUIET_CONF.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    yield session
    session.stop()


def _wait_for_port(port: int, process: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"Spark daemon exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing listens on port {port} after {timeout} s")


@contextmanager
def standalone_cluster(workers: int, log_dir: Path, rest_port: int | None = None) -> Iterator[str]:
    """A Spark standalone master and ``workers`` one-core workers on loopback; each
    worker's directory (its executors', and drivers' in cluster deploy mode) under
    ``log_dir/work``.

    :param rest_port: turn on the master's REST submission server on this port (what the
        Spark provider's hook polls a cluster-mode driver's status from; off by default
        since Spark 4).
    """
    env = {**os.environ, **PYTHON_ENV, "SPARK_LOCAL_IP": "127.0.0.1"}
    master_env = dict(env)
    if rest_port is not None:
        master_env["SPARK_MASTER_OPTS"] = (
            f"-Dspark.master.rest.enabled=true -Dspark.master.rest.port={rest_port} "
            "-Dspark.master.rest.host=127.0.0.1"
        )
    port = free_port()
    processes: list[subprocess.Popen] = []

    def daemon(name: str, *args: str, environment: dict[str, str] = env) -> subprocess.Popen:
        log = (log_dir / f"{name}.log").open("w")
        process = subprocess.Popen(
            [SPARK_CLASS, *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
            start_new_session=True,
        )
        processes.append(process)
        return process

    try:
        master = daemon(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(free_port()),
            environment=master_env,
        )
        _wait_for_port(port, master)
        url = f"spark://127.0.0.1:{port}"
        for i in range(workers):
            daemon(
                f"worker-{i}",
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--work-dir",
                str(log_dir / "work"),
                "--webui-port",
                str(free_port()),
            )
        _wait_for_workers(log_dir / "master.log", workers)
        yield url
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def _wait_for_workers(master_log: Path, count: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if master_log.read_text().count("Registering worker") >= count:
            return
        time.sleep(0.3)
    raise RuntimeError(f"{count} workers did not register within {timeout} s")
