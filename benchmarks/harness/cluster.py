"""The broker every benchmark writes to, and the fresh topics each run gets.

Why one place: each benchmark used to start its broker, name, create and delete its topics
its own way. Here: Apache Kafka's own broker (the package's :class:`KafkaBroker`), a
replicated cluster of three or more of them (``nodes``: devtools' :class:`KafkaCluster`,
replication factor 3, ``min.insync.replicas`` 2), or an existing cluster
(``--bootstrap-servers``, whose CPU then cannot be read); every topic is new, named under
one random prefix, and deleted after its check.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from airflow_provider_kafka2pc.errors import ProtocolError
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from devtools.broker import DEFAULT_KAFKA_VERSION, KafkaBroker, KafkaCluster

from .measure import become_subreaper, process_cpu

#: How long a new topic may take to get a leader for every partition.
TOPIC_READY_S = 30.0
#: Over the local broker's defaults: a deleted topic's files go at once, not a minute later
#: (``log.segment.delete.delay.ms``, the broker's default of every topic's
#: ``file.delete.delay.ms``), so that removing one run's topic is not counted in the broker
#: CPU of a later run.
BROKER_CONFIG = {"log.segment.delete.delay.ms": "0"}


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-servers", help="use this Kafka cluster instead of a local Apache Kafka broker"
    )
    parser.add_argument(
        "--kafka-version",
        default=DEFAULT_KAFKA_VERSION,
        help="Apache Kafka release of the local broker (fetched from Maven Central once)",
    )
    parser.add_argument(
        "--kafka-nodes",
        type=int,
        default=1,
        help="local Kafka nodes: 1, one broker; 3 or more, a replicated cluster",
    )


class Cluster:
    """A broker (started here unless ``bootstrap_servers`` names one), a protocol client,
    and the topics of this run.

    :param broker_config: settings over the local broker's defaults.
    :param data_dir: the local broker's directory (temporary when None; a cluster's nodes
        each get a sub-directory).
    :param nodes: 1, one broker; 3 or more, a replicated cluster (every topic on three
        nodes, two in sync required): its nodes' CPU is :meth:`brokers_cpu`, and
        :attr:`broker_pid` is None.
    """

    def __init__(
        self,
        bootstrap_servers: str | None = None,
        kafka_version: str = DEFAULT_KAFKA_VERSION,
        *,
        data_dir: Path | None = None,
        broker_config: dict[str, str] | None = None,
        heap_mb: int = 1024,
        nodes: int = 1,
    ) -> None:
        self._external = bootstrap_servers
        self._nodes = (
            KafkaCluster(
                kafka_version,
                nodes=nodes,
                data_dir=data_dir,
                config={**BROKER_CONFIG, **(broker_config or {})},
                heap_mb=heap_mb,
                whole_heap=True,
            )
            if nodes > 1 and not bootstrap_servers
            else None
        )
        self._broker = (
            None
            if bootstrap_servers or self._nodes is not None
            else KafkaBroker(
                kafka_version,
                data_dir=data_dir,
                config={**BROKER_CONFIG, **(broker_config or {})},
                heap_mb=heap_mb,
                # As kafka-server-start.sh starts it (-Xms1G -Xmx1G): see KafkaBroker.
                whole_heap=True,
            )
        )
        self.version = kafka_version if self._broker or self._nodes else "external"
        self.prefix = f"bench-{uuid.uuid4().hex[:8]}"
        self.servers = bootstrap_servers or ""
        self._protocol: KafkaProtocol | None = None
        self._topics: list[str] = []

    @classmethod
    def from_args(cls, args: argparse.Namespace, **kwargs: Any) -> Cluster:
        kwargs.setdefault("nodes", getattr(args, "kafka_nodes", 1))
        return cls(args.bootstrap_servers, args.kafka_version, **kwargs)

    def __enter__(self) -> Cluster:
        become_subreaper()
        if self._broker is not None:
            self.servers = self._broker.start().bootstrap_servers
        if self._nodes is not None:
            self.servers = self._nodes.start().bootstrap_servers
        self._protocol = KafkaProtocol(self.config)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._external:
                self.delete_topics(list(self._topics))
            if self._protocol is not None:
                self._protocol.close()
        finally:
            if self._broker is not None:
                self._broker.stop()
            if self._nodes is not None:
                self._nodes.stop()

    @property
    def config(self) -> dict[str, Any]:
        """librdkafka settings that reach the cluster."""
        return {"bootstrap.servers": self.servers}

    @property
    def protocol(self) -> KafkaProtocol:
        if self._protocol is None:
            raise RuntimeError("use the Cluster as a context manager")
        return self._protocol

    @property
    def broker_pid(self) -> int | None:
        """The one local broker's pid (None for a cluster of several or not started here)."""
        return self._broker.pid if self._broker else None

    @property
    def broker_pids(self) -> list[int]:
        """Every local node's pid: the one broker's, or each node's of a cluster."""
        brokers = [self._broker] if self._broker else []
        if self._nodes is not None:
            brokers = [self._nodes.node(n) for n in self._nodes.node_ids]
        return [b.pid for b in brokers if b.pid is not None]

    def _log_dirs(self) -> list[Path]:
        if self._nodes is not None:
            return [self._nodes.node(n).log_dirs for n in self._nodes.node_ids]
        return [self._broker.log_dirs] if self._broker is not None else []

    @property
    def broker_log(self) -> Path | None:
        return self._broker.log_path if self._broker else None

    def describe(self) -> str:
        if self._nodes is not None:
            pids = ", ".join(map(str, self.broker_pids))
            return (
                f"Apache Kafka {self.version} cluster of {len(self.broker_pids)} nodes "
                f"(pids {pids}; replication factor 3, min.insync.replicas 2) at {self.servers}"
            )
        if self._broker is None:
            return f"Kafka cluster at {self.servers} (not started here: its CPU is not counted)"
        return f"Apache Kafka {self.version} (pid {self.broker_pid}) at {self.servers}"

    def topic_bytes(self, topic: str) -> int | None:
        """Bytes of ``topic``'s log segments on the local brokers' disk: records, their batch
        headers and the transaction markers; every replica's on a cluster (None for a
        cluster not started here)."""
        if not self._log_dirs():
            return None
        partition = re.compile(re.escape(topic) + r"-\d+")
        return sum(
            segment.stat().st_size
            for logs in self._log_dirs()
            for directory in logs.iterdir()
            if partition.fullmatch(directory.name)
            for segment in directory.glob("*.log")
        )

    def broker_cpu(self) -> float | None:
        """CPU seconds the local broker has used so far."""
        return process_cpu(self.broker_pid) if self.broker_pid else None

    def brokers_cpu(self) -> float | None:
        """CPU seconds every local node has used so far, summed (None: none started here)."""
        pids = self.broker_pids
        return sum(process_cpu(pid) or 0.0 for pid in pids) if pids else None

    def topic(self, name: str, partitions: int) -> str:
        """A new topic ``<prefix>-<name>`` with ``partitions`` partitions."""
        topic = f"{self.prefix}-{name}"
        self.protocol.create_topic(topic, partitions)
        self._topics.append(topic)
        # Creation returns before every partition has a leader; a writer's topic check right
        # after it would find the topic missing.
        deadline = time.monotonic() + TOPIC_READY_S
        while True:
            try:
                if len(self.protocol.partition_leaders(topic)) == partitions:
                    break
            except ProtocolError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {topic} has no leaders after {TOPIC_READY_S:.0f} s")
            time.sleep(0.05)
        if self._nodes is not None:
            # Each node applies the metadata on its own, and a replica out of sync at the
            # first produce would leave a write of acks=all waiting on min.insync.replicas.
            self._nodes.wait_topic(topic, TOPIC_READY_S)
        return topic

    def delete_topics(self, topics: list[str]) -> None:
        """Best effort (only disk and memory are at stake): remove topics after their check."""
        if not topics:
            return
        admin = AdminClient({**self.config, "log_level": 4})  # must outlive its futures
        for topic, future in admin.delete_topics(topics).items():
            try:
                future.result(30)
            except Exception as exc:
                print(f"  note: could not delete topic {topic}: {exc}", file=sys.stderr)
            with contextlib.suppress(ValueError):
                self._topics.remove(topic)
        self._wait_until_gone(topics)

    def _wait_until_gone(self, topics: list[str], timeout_s: float = 60.0) -> None:
        """Until the local broker has removed the topics' files: the removal then costs no
        later run any broker CPU (an external cluster's disk cannot be seen: no wait)."""
        dirs = self._log_dirs()
        if not dirs:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            left = [
                d
                for logs in dirs
                for d in logs.iterdir()
                if any(d.name.startswith(t + "-") for t in topics)
            ]
            if not left:
                return
            time.sleep(0.1)
        print(f"  note: {len(left)} directories of deleted topics still on disk", file=sys.stderr)
