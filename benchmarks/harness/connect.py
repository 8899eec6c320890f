"""A warm Spark Connect server for the benchmark: started once, shared by every Connect export.

Why: on Connect the JVM (driver and executors) is the server's and outlives each export,
so an export pays a client's start, a session and its jobs, not a JVM launch. The server is
started from PySpark's own distribution (``pyspark/sbin/start-connect-server.sh --wait``,
the bundled ``spark-connect`` jar) with the settings every spark-submit of the benchmark
gets (``local[N]``, the package's quiet defaults, Python workers on this interpreter),
the extra ``jars`` on its class path, and an event log (one application for the server's
whole life; :func:`.spark.server_phases` cuts one export out of it). It runs in a session
of its own, so its process group (the script, the JVM, its Python workers) is stopped by
the PID started here, on every way out.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyspark

from airflow_provider_kafka2pc import defaults

from .spark import LOCAL_CONF, PYTHON_ENV, event_log_conf

START_SCRIPT = Path(pyspark.__file__).parent / "sbin" / "start-connect-server.sh"


@dataclass
class ConnectServer:
    """A listening server: its ``sc://`` URL, event log, log file, process and start time."""

    url: str
    event_dir: Path
    log: Path
    process: subprocess.Popen
    #: Seconds from launching the script to the port accepting connections.
    start_seconds: float

    @property
    def pid(self) -> int:
        """The process group's leader: excluding it from a meter excludes the whole server."""
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_listening(port: int, process: subprocess.Popen, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the Connect server exited with {process.returncode}; see {log}")
        # The gRPC port opens once the server's session is up (its "started" line is an
        # INFO line, which the package's quiet defaults leave out).
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"the Connect server did not listen on {port} within {timeout_s} s")


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the server's process group, SIGKILL it after 30 s."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


@contextlib.contextmanager
def connect_server(
    directory: Path,
    *,
    master: str,
    conf: Mapping[str, str] | None = None,
    jars: Sequence[Path] = (),
    timeout_s: float = 300,
) -> Iterator[ConnectServer]:
    """Start a server with the benchmark's spark-submit settings plus ``conf`` and ``jars``;
    yield it once it listens; stop it (its whole process group) on leaving, also on error."""
    directory.mkdir(parents=True, exist_ok=True)
    events = directory / "events"
    log = directory / "server.log"
    port = _free_port()
    settings = defaults.spark_conf(
        LOCAL_CONF,
        event_log_conf(events),
        {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(port),
        },
        dict(conf or {}),
    )
    command = ["bash", str(START_SCRIPT), "--wait", "--master", master]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    if jars:
        command += ["--jars", ",".join(str(j) for j in jars)]
    env = {
        **os.environ,
        **PYTHON_ENV,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(directory),
        "SPARK_PID_DIR": str(directory),
        "SPARK_IDENT_STRING": f"kafka2pc-bench-{port}",
    }
    started = time.perf_counter()
    with log.open("w") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        _wait_listening(port, process, log, timeout_s)
        server = ConnectServer(
            f"sc://127.0.0.1:{port}", events, log, process, time.perf_counter() - started
        )
        yield server
    finally:
        _stop(process)
