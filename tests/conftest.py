"""Fixtures: one real broker per session (embedded Tansu, or a cluster named by env)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka2pc.broker import EmbeddedBroker
from airflow_provider_kafka2pc.transaction.audit import AuditReport, audit_topic
from airflow_provider_kafka2pc.transaction.committable import Committable
from airflow_provider_kafka2pc.transaction.protocol import KafkaProtocol

#: Point the suite at a real Apache Kafka cluster instead of the embedded broker.
REAL_KAFKA_ENV = "KAFKA2PC_TEST_BOOTSTRAP"


@pytest.fixture(scope="session")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get(REAL_KAFKA_ENV)
    if external:
        yield external
        return
    log_path = tmp_path_factory.mktemp("broker") / "tansu.log"
    with EmbeddedBroker(log_path=log_path) as broker:
        yield broker.bootstrap_servers


@pytest.fixture
def settings(bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap}


@pytest.fixture
def protocol(settings: dict[str, Any]) -> Iterator[KafkaProtocol]:
    with KafkaProtocol(settings, timeout_ms=10_000) as proto:
        yield proto


@pytest.fixture
def make_topic(protocol: KafkaProtocol):
    """Create a fresh topic (unique name) with the given number of partitions."""

    def create(partitions: int = 3) -> str:
        name = f"t-{uuid.uuid4().hex[:12]}"
        protocol.create_topic(name, partitions)
        return name

    return create


@pytest.fixture
def topic(make_topic) -> str:
    return make_topic(3)


def unique_id(prefix: str = "tx") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def audit(protocol: KafkaProtocol, topic: str, *committables: Committable) -> AuditReport:
    return audit_topic(protocol, topic, committables, duplicates=True)


def cli(*args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``kafka2pc`` in a separate process, as an operator would."""
    return subprocess.run(
        [sys.executable, "-m", "airflow_provider_kafka2pc.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def cli_prepare(bootstrap: str, topic: str, tid: str, source: Path) -> subprocess.CompletedProcess:
    """`kafka2pc prepare` keyed by the rows' ``id`` field, in its own process."""
    return cli(
        "prepare",
        "-b",
        bootstrap,
        "-t",
        topic,
        "--transactional-id",
        tid,
        "--input",
        str(source),
        "--key-field",
        "id",
    )


def write_jsonl(path: Path, count: int, start: int = 0) -> Path:
    path.write_text(
        "".join(f'{{"id": {i}, "payload": "row-{i}"}}\n' for i in range(start, start + count))
    )
    return path
