"""One Apache Kafka KRaft node (broker and controller in one JVM) on loopback.

It formats its storage once, starts on free ports (kept in the data directory so a
restart on the same data serves the same address), waits until the broker reports
itself started, logs to a file, and stops or kills exactly its own process. The JVM
gets PR_SET_PDEATHSIG so it never outlives the process that started it.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import logging
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from airflow_provider_kafka2pc.errors import Kafka2pcError

from .distribution import DEFAULT_KAFKA_VERSION, fetch_kafka, java_binary, major

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
_STARTED = "Kafka Server started"

#: Settings a one-node cluster needs (replication factors of the internal topics), and
#: the ones that keep it small; ``config`` overrides any of them.
BASE_CONFIG: dict[str, str] = {
    "process.roles": "broker,controller",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "num.partitions": "1",
    # Topics are created on purpose; a typo must fail, not create a topic.
    "auto.create.topics.enable": "false",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "8",
    "group.initial.rebalance.delay.ms": "0",
}
CONFIG_4X: dict[str, str] = {
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
}

_LOG4J2 = """\
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
logger.raft.name = kafka.server.KafkaRaftServer
logger.raft.level = INFO
logger.txn.name = kafka.coordinator.transaction
logger.txn.level = INFO
logger.txn2.name = org.apache.kafka.coordinator.transaction
logger.txn2.level = INFO
"""
_LOG4J1 = """\
log4j.rootLogger=WARN, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaRaftServer=INFO
log4j.logger.kafka.coordinator.transaction=INFO
"""


@dataclass(frozen=True)
class BrokerTls:
    """What a broker needs for its TLS listeners, as PEM files (Kafka 3.x/4.x read them
    with ``ssl.keystore.type=PEM``/``ssl.truststore.type=PEM``).

    :param keystore: the broker's private key (unencrypted PKCS#8) followed by its
        certificate chain.
    :param truststore: the CA certificate(s) client certificates must chain to.
    :param client_auth: ``required`` (mutual TLS), ``requested`` or ``none``, for the SSL
        listener; a SASL_SSL listener authenticates by SASL and asks for no certificate.
    """

    keystore: Path
    truststore: Path
    client_auth: str = "required"

    #: An SSL client's principal is its certificate's common name (``User:<CN>``), not
    #: the whole distinguished name.
    PRINCIPAL_MAPPING = "RULE:^CN=([^,]+).*$/$1/,DEFAULT"

    def config(self) -> dict[str, str]:
        if self.client_auth not in ("required", "requested", "none"):
            raise Kafka2pcError(
                f"client_auth must be required, requested or none, not {self.client_auth!r}"
            )
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.truststore),
            "listener.name.ssl.ssl.client.auth": self.client_auth,
            "ssl.principal.mapping.rules": self.PRINCIPAL_MAPPING,
        }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def new_cluster_id() -> str:
    """A random KRaft cluster id (a base64 UUID that does not start with '-')."""
    cluster_id = "-"
    while cluster_id.startswith("-"):  # would be read as an option (Kafka's Uuid avoids it too)
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    return cluster_id


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class KafkaBroker:
    """An Apache Kafka node of ``version`` on loopback.

    :param version: Apache Kafka release, fetched from Maven Central on first use.
    :param data_dir: storage, configuration and logs; kept. A temporary directory,
        removed on :meth:`stop`, when None.
    :param port: client port; a free one (or the one this data directory used) when None.
    :param config: broker settings over :data:`BASE_CONFIG`.
    :param heap_mb: the JVM's maximum heap.
    :param whole_heap: start with the whole heap committed (``-Xms`` = ``-Xmx``), as Apache
        Kafka's ``kafka-server-start.sh`` does. Benchmarks want it: with a small committed
        heap, G1 starts a concurrent cycle at each humongous allocation (a produce request
        over half a 1 MB region), so the broker's GC depends on its clients' request sizes
        in a way no production broker shows (docs/performance.md). Tests keep a small heap.
    :param sasl_users: user -> password; adds a SASL_PLAINTEXT listener with
        SCRAM-SHA-512 (credentials stored at format time, so give them on first start).
    :param advertised_port: the client port to advertise instead of the real one, for a
        proxy in front of the broker (fault tests): every client then goes through it.
    :param node_id: this node's KRaft id (one node of a cluster; 1 alone).
    :param controller_port: the controller listener's port. Given, it is required: the
        other voters of a quorum know this node by it, so it may not silently move.
    :param quorum_voters: ``controller.quorum.voters`` of a multi-node quorum; this node
        alone when None.
    :param cluster_id: the id storage is formatted with; every node of a cluster shares
        one. A fresh one when None.
    :param tls: adds an SSL listener (and a SASL_SSL one with ``sasl_users``) serving
        these certificates; the PLAINTEXT listener stays for the inter-broker traffic.
    """

    SASL_MECHANISM = "SCRAM-SHA-512"

    def __init__(
        self,
        version: str = DEFAULT_KAFKA_VERSION,
        *,
        data_dir: Path | None = None,
        port: int | None = None,
        config: Mapping[str, str] | None = None,
        heap_mb: int = 768,
        whole_heap: bool = False,
        cache_dir: Path | None = None,
        sasl_users: Mapping[str, str] | None = None,
        advertised_port: int | None = None,
        node_id: int = 1,
        controller_port: int | None = None,
        quorum_voters: str | None = None,
        cluster_id: str | None = None,
        tls: BrokerTls | None = None,
    ) -> None:
        self.version = version
        self.tls = tls
        self.node_id = node_id
        self._requested_controller_port = controller_port
        self._quorum_voters = quorum_voters
        self._cluster_id = cluster_id
        self._sasl_users = dict(sasl_users or {})
        self._advertised_port = advertised_port
        self.sasl_port = 0
        self.ssl_port = 0
        self.sasl_ssl_port = 0
        self._temporary = data_dir is None
        self.data_dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="kafka2pc-"))
        self._requested_port = port
        self._config = dict(config or {})
        self._heap_mb = heap_mb
        self._whole_heap = whole_heap
        self._cache_dir = cache_dir
        self._process: subprocess.Popen[bytes] | None = None
        self._logged_before = 0
        self._launched_at = 0.0
        self.port = 0
        self.controller_port = 0

    # -- where things are ---------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def sasl_bootstrap_servers(self) -> str:
        if not self._sasl_users:
            raise Kafka2pcError("this broker has no SASL listener (no sasl_users)")
        return f"{HOST}:{self.sasl_port}"

    def sasl_settings(self, user: str) -> dict[str, str]:
        """librdkafka-style settings for ``user`` on the SASL listener."""
        return {
            "bootstrap.servers": self.sasl_bootstrap_servers,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": self.SASL_MECHANISM,
            "sasl.username": user,
            "sasl.password": self._sasl_users[user],
        }

    @property
    def ssl_bootstrap_servers(self) -> str:
        if self.tls is None:
            raise Kafka2pcError("this broker has no TLS listener (no tls)")
        return f"{HOST}:{self.ssl_port}"

    @property
    def sasl_ssl_bootstrap_servers(self) -> str:
        if self.tls is None or not self._sasl_users:
            raise Kafka2pcError("this broker has no SASL_SSL listener (needs tls and sasl_users)")
        return f"{HOST}:{self.sasl_ssl_port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "broker.log"

    @property
    def log_dirs(self) -> Path:
        """Where the broker keeps its partitions (``log.dirs``) and its KRaft metadata."""
        return self.data_dir / "data"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # -- lifecycle ----------------------------------------------------------

    def start(self, timeout_s: float = 90.0) -> KafkaBroker:
        """Fetch (once), format (once), start, and wait until the broker serves."""
        self.launch()
        return self.wait_started(timeout_s)

    def launch(self) -> None:
        """Fetch (once), format (once) and start the JVM without waiting for it to serve.

        A node of a multi-node quorum serves only once a majority of controllers runs,
        so a cluster launches every node before it waits for any (:meth:`wait_started`).
        """
        lib = fetch_kafka(self.version, self._cache_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._pick_ports()
        properties = self._write_config()
        classpath = str(lib / "*")
        if not (self.log_dirs / "meta.properties").exists():
            self._format(classpath, properties)
        self._logged_before = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.data_dir / "stdout.log", "ab") as out:
            self._process = subprocess.Popen(
                [*self._java(classpath), "kafka.Kafka", str(properties)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self._launched_at = time.monotonic()

    def wait_started(self, timeout_s: float = 90.0) -> KafkaBroker:
        """Wait until the launched broker logs that it started and accepts connections."""
        if self._process is None:
            raise Kafka2pcError(f"Apache Kafka node {self.node_id} was not launched")
        started = self._launched_at
        while time.monotonic() - started < timeout_s:
            if self._process.poll() is not None:
                code = self._process.returncode
                self._process = None
                raise Kafka2pcError(
                    f"Apache Kafka {self.version} exited with code {code} while starting; "
                    f"see {self.log_path} and {self.data_dir / 'stdout.log'}"
                    f"{self._tail()}"
                )
            if self._started_since(self._logged_before) and self._listening():
                log.info(
                    "Apache Kafka %s serving at %s (node %d, pid %d, %.1f s, data %s)",
                    self.version,
                    self.bootstrap_servers,
                    self.node_id,
                    self._process.pid,
                    time.monotonic() - started,
                    self.data_dir,
                )
                return self
            time.sleep(0.1)
        self.kill()
        raise Kafka2pcError(
            f"Apache Kafka {self.version} did not start within {timeout_s:.0f} s; "
            f"see {self.log_path}{self._tail()}"
        )

    def stop(self, timeout_s: float = 30.0) -> None:
        """Shut our own broker down cleanly (SIGTERM), killing it if it hangs."""
        self._signal(signal.SIGTERM, timeout_s)
        if self._temporary:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def request_stop(self) -> None:
        """Send SIGTERM without waiting: a cluster stops its nodes together, because the
        last node of a quorum cannot shut down cleanly once the others are gone."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """``kill -9`` our own broker: a crash; the data directory stays for a restart."""
        self._signal(signal.SIGKILL, 10.0)

    def restart(self, timeout_s: float = 90.0) -> KafkaBroker:
        """Start again on the same data directory and port (after :meth:`kill`)."""
        self._signal(signal.SIGTERM, 30.0)
        return self.start(timeout_s)

    def __enter__(self) -> KafkaBroker:
        return self.start() if self._process is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals ----------------------------------------------------------

    def _signal(self, signum: int, timeout_s: float) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signum)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("Apache Kafka pid %d ignored signal %d; killing it", process.pid, signum)
            process.kill()
            process.wait(timeout=10)

    def _pick_ports(self) -> None:
        saved = self.data_dir / "ports.json"
        ports = json.loads(saved.read_text()) if saved.exists() else {}
        taken: set[int] = set()

        def pick(name: str, wanted: int | None = None) -> int:
            port = wanted or ports.get(name)
            if not (port and port not in taken and _port_free(port)):
                port = free_port()
                while port in taken:
                    port = free_port()
            taken.add(port)
            return port

        self.port = pick("port", self._requested_port)
        wanted = self._requested_controller_port
        if wanted is not None and (wanted in taken or not _port_free(wanted)):
            raise Kafka2pcError(
                f"controller port {wanted} of Apache Kafka node {self.node_id} is taken; "
                "the other voters of its quorum know the node by it"
            )
        self.controller_port = pick("controller_port", wanted)
        self.sasl_port = pick("sasl_port") if self._sasl_users else 0
        self.ssl_port = pick("ssl_port") if self.tls else 0
        self.sasl_ssl_port = pick("sasl_ssl_port") if self.tls and self._sasl_users else 0
        saved.write_text(
            json.dumps(
                {
                    "port": self.port,
                    "controller_port": self.controller_port,
                    "sasl_port": self.sasl_port,
                    "ssl_port": self.ssl_port,
                    "sasl_ssl_port": self.sasl_ssl_port,
                }
            )
        )

    def _write_config(self) -> Path:
        config = dict(BASE_CONFIG)
        if major(self.version) >= 4:
            config.update(CONFIG_4X)
        listeners = [
            f"PLAINTEXT://{HOST}:{self.port}",
            f"CONTROLLER://{HOST}:{self.controller_port}",
        ]
        advertised = [f"PLAINTEXT://{HOST}:{self._advertised_port or self.port}"]
        protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
        secured = []
        if self._sasl_users:
            secured.append(("SASL_PLAINTEXT", self.sasl_port))
        if self.tls is not None:
            secured.append(("SSL", self.ssl_port))
            config.update(self.tls.config())
            if self._sasl_users:
                secured.append(("SASL_SSL", self.sasl_ssl_port))
        for name, port in secured:
            listeners.append(f"{name}://{HOST}:{port}")
            advertised.append(f"{name}://{HOST}:{port}")
            protocols.append(f"{name}:{name}")
            if name.startswith("SASL"):
                mechanism = self.SASL_MECHANISM.lower()
                config["sasl.enabled.mechanisms"] = self.SASL_MECHANISM
                config[f"listener.name.{name.lower()}.{mechanism}.sasl.jaas.config"] = (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                )
        config.update(
            {
                "node.id": str(self.node_id),
                "controller.quorum.voters": self._quorum_voters
                or f"{self.node_id}@{HOST}:{self.controller_port}",
                "listeners": ",".join(listeners),
                "advertised.listeners": ",".join(advertised),
                "listener.security.protocol.map": ",".join(protocols),
                "log.dirs": str(self.log_dirs),
            }
        )
        config.update(self._config)
        path = self.data_dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        (self.data_dir / "log4j2.properties").write_text(_LOG4J2.format(log=self.log_path))
        (self.data_dir / "log4j.properties").write_text(_LOG4J1.format(log=self.log_path))
        return path

    def _java(self, classpath: str) -> list[str]:
        return [
            java_binary(),
            f"-Xmx{self._heap_mb}m",
            f"-Xms{self._heap_mb if self._whole_heap else 128}m",
            # kafka-run-class.sh's GC settings.
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:InitiatingHeapOccupancyPercent=35",
            "-XX:+ExplicitGCInvokesConcurrent",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            f"-Dlog4j.configuration=file:{self.data_dir / 'log4j.properties'}",
            f"-Dkafka.logs.dir={self.data_dir}",
            "-cp",
            classpath,
        ]

    def _format(self, classpath: str, properties: Path) -> None:
        cluster_id = self._cluster_id or new_cluster_id()
        done = subprocess.run(
            [
                *self._java(classpath),
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(properties),
                *self._scram_arguments(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            output = (done.stderr or done.stdout).strip()[-2000:]
            for password in self._sasl_users.values():
                output = output.replace(password, "***")
            raise Kafka2pcError(
                f"formatting Apache Kafka {self.version} storage in {self.data_dir} failed: "
                f"{output}"
            )

    def _scram_arguments(self) -> list[str]:
        """SCRAM credentials are written into the metadata log when storage is formatted."""
        out = []
        for user, password in self._sasl_users.items():
            if any(c in user + password for c in ",=[]\"'"):
                raise Kafka2pcError(
                    f"SASL user {user!r}: name and password may not contain ,=[]\"'"
                )
            out += ["--add-scram", f"{self.SASL_MECHANISM}=[name={user},password={password}]"]
        return out

    def _started_since(self, offset: int) -> bool:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return _STARTED.encode() in f.read()
        except FileNotFoundError:
            return False

    def _listening(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def _tail(self, lines: int = 15) -> str:
        texts = []
        for path in (self.log_path, self.data_dir / "stdout.log"):
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                texts.append("\n".join(tail))
        return ("\n--- last lines ---\n" + "\n".join(texts)) if texts else ""
