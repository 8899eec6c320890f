"""The prepare's options on a real Spark Connect server: honoured or refused, never dropped.

``prepare_remote`` (the Connect path of the prepare task) once parsed ``--writer``,
``--no-shuffle`` and ``--value-format`` and ignored them: a JVM-writer, source-split or
registry-Avro export on a ``spark_connect`` connection wrote JSON values through the Python
writer after a shuffle, and its manifest said nothing of it. (A plain server now runs the
JVM writer and registry Avro with their jars shipped: test_connect_artifacts.) Witnesses:
the error, and the topic's log (nothing written, nothing open).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka2pc.errors import ConfigurationError
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.spark.connect import remote_session
from airflow_provider_kafka2pc.spark.remote import prepare_remote_argv
from tests.conftest import audit, unique_id, write_jsonl
from tests.support.connect import ConnectServer, connect_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    with connect_server(tmp_path_factory.mktemp("connect")) as running:
        yield running


@pytest.mark.parametrize(
    ("option", "reason"),
    [
        # A plain server runs the JVM writer (its jars shipped: test_connect_artifacts), but
        # the Java producer reads its files where the executors run.
        (["--writer", "jvm"], "cannot ship local files"),
        (["--no-shuffle"], "partitioning='source-splits'"),
        (["--value-format", "{}"], "registry"),
    ],
    ids=["jvm-writer-with-a-local-file", "source-splits", "registry-avro-without-registry"],
)
def test_an_option_connect_cannot_honour_is_refused_before_anything_is_written(
    server: ConnectServer,
    settings: dict[str, Any],
    protocol: KafkaProtocol,
    make_topic,
    tmp_path: Path,
    option: list[str],
    reason: str,
) -> None:
    assert_refused(server, settings, protocol, make_topic(2), tmp_path, option, reason)


def assert_refused(
    server: ConnectServer,
    settings: dict[str, Any],
    protocol: KafkaProtocol,
    topic: str,
    tmp_path: Path,
    option: list[str],
    reason: str,
) -> None:
    """The prepare on ``server`` with ``option`` fails with ``reason`` and writes nothing."""
    source = write_jsonl(tmp_path / "rows.json", 20)
    manifest = tmp_path / "manifest.json"
    ids = [unique_id("connect-options") for _ in range(2)]
    argv = [
        *("--source-path", str(source), "--source-format", "json"),
        *("--key-column", "id", "--value-column", "payload", "--topic", topic),
        *("--transactional-ids", ",".join(ids), "--manifest", str(manifest)),
        *option,
    ]
    if "jvm" in option:
        ca = tmp_path / "ca.pem"
        ca.write_text("not read: refused first\n")
        settings = {**settings, "ssl.ca.location": str(ca)}
    with (
        remote_session(server.url, "connect-options") as spark,
        pytest.raises(ConfigurationError, match=reason),
    ):
        prepare_remote_argv(spark, argv, settings)
    assert not manifest.exists()
    totals = audit(protocol, topic).totals
    assert totals["committed"] == totals["open"] == totals["aborted"] == 0
    assert totals["non_transactional"] == 0
