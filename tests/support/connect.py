"""A real Spark Connect server for the tests, from PySpark's own distribution.

``pyspark/sbin/start-connect-server.sh --wait`` runs the server in the foreground (no
daemon, no PID file) with the bundled ``spark-connect`` jar; it is started in a session of
its own, so killing its process group by the PID we started ends the server, its JVM and
its Python workers together (``kill()``: SIGKILL, the "server died" fault).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyspark

from devtools.broker.node import free_port

START_SCRIPT = Path(pyspark.__file__).parent / "sbin" / "start-connect-server.sh"


@dataclass
class ConnectServer:
    """A running server: its ``sc://`` URL, its UI, where it logs, and its process."""

    url: str
    port: int
    ui_port: int
    log: Path
    event_dir: Path
    process: subprocess.Popen

    def kill(self) -> None:
        """SIGKILL the server's whole process group (JVM, executors, Python workers)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def logged(self) -> str:
        """Everything the server wrote: its own log and its event log files."""
        texts = [self.log.read_text(errors="replace")]
        texts += [p.read_text(errors="replace") for p in self.event_dir.rglob("*") if p.is_file()]
        return "\n".join(texts)


def _wait_for_port(port: int, process: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the Connect server exited with {process.returncode}: see {log}")
        if "Spark Connect server started" in log.read_text(errors="replace"):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return
            except OSError:
                pass
        time.sleep(0.3)
    raise RuntimeError(f"the Connect server did not listen on {port} within {timeout} s")


@contextmanager
def connect_server(
    directory: Path, *, master: str = "local[2]", timeout: float = 180, jars: Sequence[Path] = ()
) -> Iterator[ConnectServer]:
    """Start a Connect server (Python workers on this interpreter, an event log, its UI on
    a free port, ``jars`` on its class path), yield it once it listens, stop it by the PID
    we started."""
    directory.mkdir(parents=True, exist_ok=True)
    events = directory / "events"
    events.mkdir(exist_ok=True)
    log = directory / "server.log"
    port, ui_port = free_port(), free_port()
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(directory),
        "SPARK_PID_DIR": str(directory),
        "SPARK_IDENT_STRING": f"kafka2pc-{port}",
    }
    process = subprocess.Popen(
        [
            "bash",
            str(START_SCRIPT),
            "--wait",
            "--master",
            master,
            "--conf",
            f"spark.connect.grpc.binding.port={port}",
            "--conf",
            "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf",
            f"spark.ui.port={ui_port}",
            "--conf",
            "spark.eventLog.enabled=true",
            "--conf",
            f"spark.eventLog.dir={events.as_uri()}",
            "--conf",
            "spark.eventLog.compress=false",  # readable by the tests' witnesses
            "--conf",
            "spark.sql.shuffle.partitions=4",
            "--conf",
            f"spark.pyspark.python={sys.executable}",
            *(["--jars", ",".join(str(j) for j in jars)] if jars else []),
        ],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    server = ConnectServer(f"sc://127.0.0.1:{port}", port, ui_port, log, events, process)
    try:
        _wait_for_port(port, process, log, timeout)
        yield server
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
