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
from confluent_kafka import Consumer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from airflow_provider_kafka2pc.errors import ConfigurationError
from airflow_provider_kafka2pc.protocol.client import KafkaProtocol
from airflow_provider_kafka2pc.spark.connect import remote_session
from airflow_provider_kafka2pc.spark.connect_artifacts import shipped
from airflow_provider_kafka2pc.spark.remote import prepare_remote_argv
from airflow_provider_kafka2pc.transaction.controller import TransactionController
from tests.airflow.test_connect_jvm_writer import argv, routed_rows
from tests.conftest import assert_exactly_once, audit, unique_id
from tests.support.connect import ConnectServer, connect_server
from tests.support.registry import protobuf_message, running_registry

ROWS = 400


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    with connect_server(tmp_path_factory.mktemp("connect-plain")) as running:
        yield running


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_registry(tmp_path_factory.mktemp("registry")) as url:
        yield url


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


def read_committed(bootstrap: str, topic: str, expected: int) -> list[Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_id("connect-registry"),
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    got: list[Any] = []
    try:
        for _ in range(60):
            got += [m for m in consumer.consume(1000, timeout=0.5) if m.error() is None]
            if len(got) >= expected:
                break
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("schema_type", ["AVRO", "JSON", "PROTOBUF"])
def test_registry_values_through_a_plain_server_read_back_against_the_registry(
    server: ConnectServer,
    registry: str,
    settings: dict[str, Any],
    protocol: KafkaProtocol,
    bootstrap: str,
    make_topic,
    tmp_path: Path,
    schema_type: str,
) -> None:
    topic = make_topic(2)
    ids = [unique_id("connect-registry") for _ in range(2)]
    source = routed_rows(tmp_path / "rows.json", [topic])
    formats = ["--value-format", json.dumps({"schema_type": schema_type})]
    if schema_type == "AVRO":
        formats += ["--key-format", "{}"]
    with remote_session(server.url, "connect-registry") as spark:
        batch = prepare_remote_argv(
            spark,
            [*registry_argv(source, tmp_path, ids, topic), *formats],
            settings,
            registry={"url": registry},
        )
        if schema_type == "AVRO":
            assert "spark-avro_2.13-4.2.0.jar" in shipped(spark)
        if schema_type == "PROTOBUF":  # the encoder: protobuf-java and the project's jar
            assert {"protobuf-java-4.36.2.jar", "kafka2pc-spark.jar"} <= shipped(spark)

    assert batch.metadata["writer"] == "jvm", batch.metadata
    TransactionController(protocol).commit_all(batch.committables)
    assert_exactly_once(protocol, bootstrap, topic, *batch.committables, committed=ROWS)
    client = SchemaRegistryClient({"url": registry})
    values, keys = _deserializers(schema_type, client)
    expected = {row["id"]: row for row in map(json.loads, source.read_text().splitlines())}
    got = {}
    for message in read_committed(bootstrap, topic, ROWS):
        value = values(message.value(), SerializationContext(topic, MessageField.VALUE))
        key = (
            keys(message.key(), SerializationContext(topic, MessageField.KEY))
            if keys
            else int(message.key())
        )
        assert key == value["id"]
        got[key] = value
    assert got == expected


def _deserializers(schema_type: str, client: SchemaRegistryClient) -> tuple[Any, Any]:
    """(the values' deserializer, the keys' or None), each giving a dict."""
    if schema_type == "AVRO":
        return AvroDeserializer(client), AvroDeserializer(client)
    if schema_type == "JSON":
        return JSONDeserializer(None, schema_registry_client=client), None
    # The derived message: the row's columns in order (Spark's JSON source sorts them).
    from google.protobuf.descriptor_pb2 import FieldDescriptorProto as FD

    fields = [("id", 1, FD.TYPE_INT64), ("kind", 2, FD.TYPE_STRING)]
    row = protobuf_message("", "topLevelRecord", [*fields, ("payload", 3, FD.TYPE_STRING)])
    decode = ProtobufDeserializer(row, {}, schema_registry_client=client)

    def values(data: bytes, ctx: SerializationContext) -> dict[str, Any]:
        message = decode(data, ctx)
        return {"id": message.id, "payload": message.payload, "kind": message.kind}

    return values, None


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
