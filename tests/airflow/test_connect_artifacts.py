"""A plain Spark Connect server (``start-connect-server.sh`` without ``--jars``) gets what
the export needs as session artifacts: the JVM writer's jars, Spark's spark-avro,
protobuf-java.

``writer="jvm"`` runs there (our jar and kafka-clients shipped with the session, loaded by
the server's driver and fetched by its executors; ``auto`` keeps the Python writer on such a
server, where shipping them costs what the JVM writer saves), registry Avro, JSON Schema
and Protobuf values are encoded by the server and read back with confluent-kafka's
deserializers asking the real registry; a column the given Avro schema cannot carry is
refused in the shuffle's map stage, before any transaction opens. Witnesses: the log's
markers and a read_committed consumer, and the server's own log of the session's jars.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_kafka2pc.errors import ConfigurationError
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.spark.connect import remote_session
from airflow_provider_kafka2pc.spark.connect_artifacts import shipped
from airflow_provider_kafka2pc.spark.remote import prepare_remote_argv
from airflow_provider_kafka2pc.transaction.controller import TransactionController
from tests.airflow.connect_cases import CASES, export_case
from tests.airflow.test_connect_jvm_writer import argv, routed_rows
from tests.conftest import assert_exactly_once, audit, unique_id
from tests.support.connect import ConnectServer, connect_server

ROWS = 400


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    with connect_server(tmp_path_factory.mktemp("connect-plain")) as running:
        yield running


def test_the_jvm_writer_on_a_plain_server_ships_the_jars_and_writes_several_topics(
    server: ConnectServer,
    settings: dict[str, Any],
    protocol: KafkaProtocol,
    bootstrap: str,
    make_topic,
    tmp_path: Path,
) -> None:
    topics = [make_topic(2), make_topic(3)]
    ids = [unique_id("connect-plain") for _ in range(3)]
    source = routed_rows(tmp_path / "rows.json", topics)
    with remote_session(server.url, "connect-plain") as spark:
        # auto takes the Python writer here (shipping the jars costs what the JVM writer
        # saves: docs/spark-connect.md); an explicit jvm ships them.
        batch = prepare_remote_argv(
            spark,
            [*argv(source, tmp_path / "manifest.json", ids, topics), "--writer", "jvm"],
            settings,
        )
        assert shipped(spark) == {"kafka2pc-spark.jar", "kafka-clients-4.4.0.jar"}

    assert batch.metadata["writer"] == "jvm", batch.metadata
    assert "writer_reason" not in batch.metadata
    TransactionController(protocol).commit_all(batch.committables)
    for i, topic in enumerate(topics):
        rows = len(range(i, ROWS, len(topics)))
        assert_exactly_once(protocol, bootstrap, topic, *batch.committables, committed=rows)
    # The executors loaded both jars from the session's artifacts, not from a class path.
    logged = server.logged()
    for jar in ("kafka2pc-spark.jar", "kafka-clients-4.4.0.jar"):
        assert f"/{jar} to class loader" in logged, jar


def registry_argv(source: Path, tmp_path: Path, ids: list[str], topic: str) -> list[str]:
    return [
        *("--source-path", str(source), "--source-format", "json"),
        *("--key-column", "id", "--topic", topic, "--writer", "jvm"),
        *("--transactional-ids", ",".join(ids), "--manifest", str(tmp_path / "manifest.json")),
    ]


@pytest.mark.parametrize("case", sorted(CASES))
def test_registry_values_through_a_plain_server_read_back_against_the_registry(
    server: ConnectServer,
    registry: str,
    settings: dict[str, Any],
    protocol: KafkaProtocol,
    bootstrap: str,
    make_topic,
    tmp_path: Path,
    case: str,
) -> None:
    """Each registry format for values (Avro keys, Protobuf keys), each subject strategy,
    headers, tombstones, timestamps, hash and Kafka-aligned partitioning, both writers:
    what the session ships for each is on the server (Avro: Spark's package; Protobuf:
    protobuf-java with the encoder's jar), and every record reads back against the registry."""
    _, jars = export_case(
        server.url,
        case,
        registry=registry,
        settings=settings,
        protocol=protocol,
        bootstrap=bootstrap,
        topic=make_topic(2),
        tmp_path=tmp_path,
        auto_takes="python",
        session_name="connect-registry",
    )
    spec_formats = {CASES[case]["value_format"].get("schema_type", "AVRO")}
    if "AVRO" in spec_formats:
        assert "spark-avro_2.13-4.2.0.jar" in jars
    if "PROTOBUF" in spec_formats:  # the encoder: protobuf-java and the project's jar
        assert {"protobuf-java-4.36.2.jar", "kafka2pc-spark.jar"} <= jars


def test_a_column_the_given_avro_schema_cannot_carry_is_refused_before_anything_opens(
    server: ConnectServer,
    registry: str,
    settings: dict[str, Any],
    protocol: KafkaProtocol,
    make_topic,
    tmp_path: Path,
) -> None:
    topic = make_topic(2)
    ids = [unique_id("connect-incompatible") for _ in range(2)]
    source = routed_rows(tmp_path / "rows.json", [topic])
    given = {
        "type": "record",
        "name": "Row",
        "fields": [
            {"name": "id", "type": "string"},  # a long column
            {"name": "payload", "type": ["null", "string"]},
            {"name": "kind", "type": ["null", "string"]},
        ],
    }
    option = ["--value-format", json.dumps({"schema": json.dumps(given)})]
    with (
        remote_session(server.url, "connect-incompatible") as spark,
        pytest.raises(ConfigurationError, match="cannot be written with the Avro schema") as err,
    ):
        prepare_remote_argv(
            spark,
            [*registry_argv(source, tmp_path, ids, topic), *option],
            settings,
            registry={"url": registry},
        )
    assert "Cannot convert SQL type" in str(err.value) and "nothing was written" in str(err.value)
    assert not (tmp_path / "manifest.json").exists()
    totals = audit(protocol, topic).totals
    assert totals == {"committed": 0, "aborted": 0, "open": 0, "non_transactional": 0}
    assert protocol.list_transactions(prefix="connect-incompatible") == []
