"""Three (or more) replicated Apache Kafka KRaft nodes on loopback, from the same jars.

Exactly-once is most at risk where one node cannot go: the transaction coordinator
moving between prepare and commit, a partition leader dying mid-write, replicas out
of sync. Each node is a :class:`~.node.KafkaBroker` (broker and controller in one
JVM) with its own ports and data directory, all voters of one controller quorum;
topics, the offsets topic and the transaction state log are replicated to every node
with two in-sync replicas required, so one node may die without losing a write and a
second one stops writes. Nodes are killed (``kill -9``) and restarted one by one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import kafka.errors as kafka_errors
from confluent_kafka import ElectionType, KafkaException
from confluent_kafka.admin import AdminClient
from kafka.net.compat import KafkaNetClient
from kafka.protocol.metadata.metadata import MetadataRequest

from airflow_provider_kafka2pc.errors import ConfigurationError, Kafka2pcError

from .distribution import DEFAULT_KAFKA_VERSION, major
from .node import HOST, KafkaBroker, free_port, new_cluster_id

log = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC = "__transaction_state"
#: Partitions of the transaction state log (the same as a single test node's).
TRANSACTION_STATE_PARTITIONS = 8

#: What makes it a replicated cluster; ``config`` overrides any of them.
CLUSTER_CONFIG: dict[str, str] = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": str(TRANSACTION_STATE_PARTITIONS),
    # A replica that falls behind can never be elected: no committed write is lost.
    "unclean.leader.election.enable": "false",
}
CLUSTER_CONFIG_4X: dict[str, str] = {
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
}


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def transaction_state_partition(
    transactional_id: str, partitions: int = TRANSACTION_STATE_PARTITIONS
) -> int:
    """The ``__transaction_state`` partition that holds ``transactional_id``.

    Kafka's ``TransactionStateManager.partitionFor``: ``Utils.abs(id.hashCode()) % n``,
    where ``Utils.abs(Integer.MIN_VALUE)`` is 0. Its leader is the id's coordinator.
    """
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass(frozen=True)
class PartitionInfo:
    """Leader, replicas and in-sync replicas of one partition (node ids; leader -1: none)."""

    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class KafkaCluster:
    """``nodes`` Apache Kafka KRaft nodes of ``version`` on loopback, one quorum.

    :param version: Apache Kafka release, fetched from Maven Central on first use.
    :param nodes: how many combined (broker + controller) nodes; at least 3, so that one
        may die while a majority of the quorum and two in-sync replicas remain.
    :param data_dir: one sub-directory per node (``node-<id>``) and ``cluster.json``
        (cluster id and ports, so a restart on the same data serves the same addresses);
        kept. A temporary directory, removed on :meth:`stop`, when None.
    :param config: broker settings over :data:`CLUSTER_CONFIG`, for every node.
    :param heap_mb: each JVM's maximum heap.
    :param whole_heap: each JVM starts with its whole heap committed (``-Xms`` = ``-Xmx``),
        as ``kafka-server-start.sh`` starts it: for benchmarks (see :class:`KafkaBroker`).
    :param advertised_ports: ``{node id: port}`` to advertise instead of the node's own
        client port, for a proxy in front of each node (network faults in tests): every
        client, and the other nodes' replica fetchers, then go through it. The node's own
        port is :meth:`client_port`.
    """

    def __init__(
        self,
        version: str = DEFAULT_KAFKA_VERSION,
        *,
        nodes: int = 3,
        data_dir: Path | None = None,
        config: Mapping[str, str] | None = None,
        heap_mb: int = 512,
        whole_heap: bool = False,
        cache_dir: Path | None = None,
        advertised_ports: Mapping[int, int] | None = None,
    ) -> None:
        if nodes < 3:
            raise ConfigurationError(
                f"a cluster needs at least 3 nodes (replication factor 3, "
                f"min.insync.replicas 2), not {nodes}; use KafkaBroker for one"
            )
        self.version = version
        self._temporary = data_dir is None
        self.data_dir = (
            Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="kafka2pc-cluster-"))
        )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        layout = self._layout(nodes)
        self._ports = {node_id: ports["port"] for node_id, ports in layout["nodes"].items()}
        voters = ",".join(
            f"{node_id}@{HOST}:{ports['controller_port']}"
            for node_id, ports in sorted(layout["nodes"].items())
        )
        settings = dict(CLUSTER_CONFIG)
        if major(version) >= 4:
            settings.update(CLUSTER_CONFIG_4X)
        settings.update(config or {})
        self.config = settings
        self._nodes: dict[int, KafkaBroker] = {
            node_id: KafkaBroker(
                version,
                data_dir=self.data_dir / f"node-{node_id}",
                port=ports["port"],
                controller_port=ports["controller_port"],
                quorum_voters=voters,
                cluster_id=layout["cluster_id"],
                node_id=node_id,
                config=settings,
                heap_mb=heap_mb,
                whole_heap=whole_heap,
                cache_dir=cache_dir,
                advertised_port=(advertised_ports or {}).get(node_id),
            )
            for node_id, ports in sorted(layout["nodes"].items())
        }
        self._admin: AdminClient | None = None

    def _layout(self, nodes: int) -> dict[str, Any]:
        """Cluster id and every node's ports: chosen once, before any node starts, because
        each node's quorum configuration names every controller's address."""
        saved = self.data_dir / "cluster.json"
        if saved.exists():
            layout = json.loads(saved.read_text())
            layout["nodes"] = {int(k): v for k, v in layout["nodes"].items()}
            if len(layout["nodes"]) != nodes:
                raise ConfigurationError(
                    f"{self.data_dir} holds a cluster of {len(layout['nodes'])} nodes, not {nodes}"
                )
            return layout
        taken: set[int] = set()

        def pick() -> int:
            port = free_port()
            while port in taken:
                port = free_port()
            taken.add(port)
            return port

        layout = {
            "cluster_id": new_cluster_id(),
            "nodes": {
                node_id: {"port": pick(), "controller_port": pick()}
                for node_id in range(1, nodes + 1)
            },
        }
        saved.write_text(json.dumps(layout))
        return layout

    # -- where things are ---------------------------------------------------

    @property
    def node_ids(self) -> list[int]:
        return sorted(self._nodes)

    def node(self, node_id: int) -> KafkaBroker:
        try:
            return self._nodes[node_id]
        except KeyError:
            raise ConfigurationError(
                f"no node {node_id} in this cluster (nodes {self.node_ids})"
            ) from None

    def client_port(self, node_id: int) -> int:
        """The port node ``node_id`` listens on for clients (known before it starts)."""
        self.node(node_id)
        return self._ports[node_id]

    @property
    def bootstrap_servers(self) -> str:
        """Every node's client address, comma-separated: a client survives any one down."""
        return ",".join(node.bootstrap_servers for node in self._nodes.values())

    def running(self) -> list[int]:
        """Ids of the nodes whose process is alive."""
        return [node_id for node_id, node in sorted(self._nodes.items()) if node.running]

    def describe(self) -> dict[str, Any]:
        """What a caller (``python -m devtools broker --nodes 3``) prints: addresses, pids, logs."""
        return {
            "bootstrap_servers": self.bootstrap_servers,
            "kafka_version": self.version,
            "nodes": [
                {
                    "node_id": node_id,
                    "bootstrap_servers": node.bootstrap_servers,
                    "pid": node.pid,
                    "log": str(node.log_path),
                }
                for node_id, node in sorted(self._nodes.items())
            ],
        }

    # -- lifecycle ----------------------------------------------------------

    def start(self, timeout_s: float = 120.0) -> KafkaCluster:
        """Start every node, wait until each serves and every partition is fully in sync.

        Every node is launched before any is waited for: a node serves only once a
        majority of the controller quorum runs.
        """
        began = time.monotonic()
        try:
            for node in self._nodes.values():
                if not node.running:
                    node.launch()
            for node in self._nodes.values():
                node.wait_started(max(1.0, timeout_s - (time.monotonic() - began)))
            self.wait_healthy(max(1.0, timeout_s - (time.monotonic() - began)))
        except BaseException:
            for node in self._nodes.values():
                node.kill()
            raise
        log.info(
            "Apache Kafka %s cluster of %d nodes serving at %s (%.1f s, data %s)",
            self.version,
            len(self._nodes),
            self.bootstrap_servers,
            time.monotonic() - began,
            self.data_dir,
        )
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """Shut every node down together (SIGTERM), killing any that hangs.

        Together, not one by one: the last nodes of a quorum cannot finish a controlled
        shutdown once the majority is gone.
        """
        self._admin = None
        for node in self._nodes.values():
            node.request_stop()
        for node in self._nodes.values():
            node.stop(timeout_s)
        if self._temporary:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def kill(self, node_id: int) -> None:
        """``kill -9`` one node: a crash; its data directory stays for :meth:`restart`."""
        node = self.node(node_id)
        pid = node.pid
        node.kill()
        log.info("killed Apache Kafka node %d (pid %s)", node_id, pid)

    def restart(self, node_id: int, timeout_s: float = 90.0, *, healthy: bool = True) -> None:
        """Start a killed (or stopped) node again on its data and ports.

        With ``healthy`` (the default) it also waits until the node is back in every
        partition's in-sync replicas, so the cluster can lose another node afterwards,
        and gives it back the leaderships it had (:meth:`balance_leaders`).
        """
        began = time.monotonic()
        self.node(node_id).restart(timeout_s)
        if healthy:
            self.wait_healthy(max(1.0, timeout_s - (time.monotonic() - began)))
            self.balance_leaders(max(1.0, timeout_s - (time.monotonic() - began)))
        log.info("restarted Apache Kafka node %d (%.1f s)", node_id, time.monotonic() - began)

    def heal(self, timeout_s: float = 120.0) -> list[int]:
        """Restart every node that is down, together, and wait until the cluster is whole
        (in sync, preferred leaders back). Returns the ids restarted.

        Together, because a node of a quorum that lost its majority serves only once
        enough voters run again.
        """
        began = time.monotonic()
        down = [node_id for node_id in self.node_ids if node_id not in self.running()]
        for node_id in down:
            self.node(node_id).launch()
        for node_id in down:
            self.node(node_id).wait_started(max(1.0, timeout_s - (time.monotonic() - began)))
        self.wait_healthy(max(1.0, timeout_s - (time.monotonic() - began)))
        self.balance_leaders(max(1.0, timeout_s - (time.monotonic() - began)))
        if down:
            log.info("restarted nodes %s (%.1f s)", down, time.monotonic() - began)
        return down

    def __enter__(self) -> KafkaCluster:
        return self.start() if not self.running() else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- metadata -----------------------------------------------------------

    def _client(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(
                {
                    "bootstrap.servers": self.bootstrap_servers,
                    # Refused connections to a killed node are expected here.
                    "log_level": 0,
                    "socket.connection.setup.timeout.ms": 2000,
                }
            )
        return self._admin

    def partitions(self, topic: str, timeout_s: float = 5.0) -> dict[int, PartitionInfo]:
        """Leader, replicas and ISR of each partition of ``topic``, as the cluster says now."""
        try:
            metadata = self._client().list_topics(topic, timeout=timeout_s)
        except KafkaException as exc:
            raise Kafka2pcError(
                f"no node of the cluster at {self.bootstrap_servers} answered a metadata "
                f"request for {topic!r} within {timeout_s} s ({exc.args[0].name()})"
            ) from None
        entry = metadata.topics.get(topic)
        if entry is None or entry.error is not None:
            reason = entry.error.str() if entry is not None and entry.error else "not found"
            raise Kafka2pcError(f"topic {topic!r}: {reason}")
        return {
            p.id: PartitionInfo(p.leader, tuple(p.replicas), tuple(p.isrs))
            for p in entry.partitions.values()
        }

    def leader(self, topic: str, partition: int) -> int:
        """The node that leads ``topic``-``partition`` now (-1 while none does)."""
        info = self.partitions(topic).get(partition)
        if info is None:
            raise Kafka2pcError(f"topic {topic!r} has no partition {partition}")
        return info.leader

    def transaction_coordinator(self, transactional_id: str) -> int:
        """The node coordinating ``transactional_id``: leader of its ``__transaction_state``
        partition (the log must exist: after the first transactional producer started)."""
        partition = transaction_state_partition(
            transactional_id,
            int(self.config.get("transaction.state.log.num.partitions", "50")),
        )
        return self.leader(TRANSACTION_STATE_TOPIC, partition)

    def wait_topic(self, topic: str, timeout_s: float = 30.0) -> None:
        """Wait until every running node knows ``topic`` with a leader for each partition,
        and the cluster reports every replica in sync.

        Each node applies the metadata log on its own: right after a topic is created, a
        client whose metadata request lands on a lagging node is told it does not exist.
        So each node is asked itself (kafka-python lets a request name its node;
        librdkafka picks one).
        """
        deadline = time.monotonic() + timeout_s
        missing: dict[int, str] = {}
        while True:
            missing = {}
            for node_id in self.running():
                why = self._node_lacks(node_id, topic)
                if why:
                    missing[node_id] = why
            if not missing:
                try:
                    parts = self.partitions(topic)
                except Kafka2pcError as exc:
                    missing[0] = str(exc)
                else:
                    if parts and all(set(p.isr) == set(p.replicas) for p in parts.values()):
                        return
                    missing[0] = f"replicas out of sync: {parts}"
            if time.monotonic() >= deadline:
                raise Kafka2pcError(
                    f"topic {topic!r} not served by every node after {timeout_s:.0f} s: {missing}"
                )
            time.sleep(0.1)

    def _node_lacks(self, node_id: int, topic: str) -> str | None:
        """Why node ``node_id``'s own metadata does not serve ``topic`` yet; None if it does."""
        client = KafkaNetClient(
            bootstrap_servers=[self.node(node_id).bootstrap_servers], request_timeout_ms=5000
        )
        try:
            client.check_version(timeout_ms=5000)
            answer = client.send_and_receive(
                node_id,
                MetadataRequest(
                    topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                    allow_auto_topic_creation=False,
                    version=8,
                ),
                timeout_ms=5000,
            )
        except kafka_errors.KafkaError as exc:
            return f"no answer ({type(exc).__name__})"
        finally:
            client.close()
        for entry in answer.topics:
            if entry.error_code:
                return f"error code {entry.error_code}"
            if not entry.partitions or any(p.leader_id < 0 for p in entry.partitions):
                return "no leader yet"
            return None
        return "not in its metadata"

    def unbalanced(self) -> list[str]:
        """Partitions not led by their preferred (first) replica."""
        metadata = self._client().list_topics(timeout=5.0)
        return [
            f"{name}-{p.id}: leader {p.leader}, preferred {p.replicas[0]}"
            for name, topic in sorted(metadata.topics.items())
            for p in topic.partitions.values()
            if p.replicas and p.leader != p.replicas[0]
        ]

    def balance_leaders(self, timeout_s: float = 30.0) -> None:
        """Give every partition back to its preferred replica (a preferred leader election).

        A restarted node leads nothing until Kafka's own rebalance, minutes later
        (``leader.imbalance.check.interval.seconds``); until then the coordinators and
        leaders crowd on the nodes that never died, and the next kill hits them all.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            off = self.unbalanced()
            if not off:
                return
            if time.monotonic() >= deadline:
                raise Kafka2pcError(
                    f"preferred leaders not back after {timeout_s:.0f} s: {'; '.join(off[:5])}"
                )
            # ELECTION_NOT_NEEDED for some partitions, or a node still catching up: look again.
            with contextlib.suppress(KafkaException):
                self._client().elect_leaders(ElectionType.PREFERRED, None).result()
            time.sleep(0.2)

    def unhealthy(self) -> list[str]:
        """Why the cluster is not whole yet: nodes missing from the metadata, partitions
        without a leader or with replicas out of sync. Empty when healthy."""
        try:
            metadata = self._client().list_topics(timeout=5.0)
        except KafkaException as exc:
            return [f"no metadata ({exc.args[0].name()})"]
        problems = []
        missing = set(self._nodes) - set(metadata.brokers)
        if missing:
            problems.append(f"nodes {sorted(missing)} not registered")
        for name, topic in sorted(metadata.topics.items()):
            if topic.error is not None:
                problems.append(f"{name}: {topic.error.str()}")
                continue
            for p in topic.partitions.values():
                if p.leader < 0 or set(p.isrs) != set(p.replicas):
                    problems.append(
                        f"{name}-{p.id}: leader {p.leader}, replicas {sorted(p.replicas)}, "
                        f"isr {sorted(p.isrs)}"
                    )
        return problems

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        """Wait until every node is registered and every partition has a leader and all its
        replicas in sync: then any one node may die without losing a committed write."""
        deadline = time.monotonic() + timeout_s
        while True:
            problems = self.unhealthy()
            if not problems:
                return
            if time.monotonic() >= deadline:
                shown = "; ".join(problems[:5]) + (" ..." if len(problems) > 5 else "")
                raise Kafka2pcError(
                    f"Apache Kafka cluster at {self.bootstrap_servers} not healthy after "
                    f"{timeout_s:.0f} s: {shown}"
                )
            time.sleep(0.2)
