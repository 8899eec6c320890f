"""A Spark standalone cluster from PySpark's own distribution: a master and one-core workers.

Why shared: the tests (``tests/support/spark.py``) and the cluster benchmark
(``benchmarks/bench_cluster.py``) start the same cluster, a master and N workers on
loopback, each daemon its own ``spark-class`` process stopped by its own PID.
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

from devtools.broker.node import free_port

SPARK_CLASS = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
#: Python workers must run this interpreter (it has the package and pyarrow).
PYTHON_ENV = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


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
def standalone_cluster(
    workers: int,
    log_dir: Path,
    rest_port: int | None = None,
    *,
    worker_memory: str = "1g",
) -> Iterator[str]:
    """A Spark standalone master and ``workers`` one-core workers on loopback; yields the
    master's URL. Each daemon logs to ``log_dir/<name>.log``; each worker's directory (its
    executors' ``stdout``/``stderr``, and drivers' in cluster deploy mode) is under
    ``log_dir/work``.

    :param rest_port: turn on the master's REST submission server on this port (what the
        Spark provider's hook polls a cluster-mode driver's status from; off by default
        since Spark 4).
    :param worker_memory: what each worker offers its executors (``--memory``).
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
                worker_memory,
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
