"""What goes on the wire: registry Avro values and keys, tombstones, record timestamps.

Real components only: Spark (in process, with Spark's Avro package from Maven Central),
the real broker, and a real schema registry (Apicurio Registry 2.4.2's Confluent-compatible
API, :mod:`tests.support.registry`). After every export, the usual witnesses (the log audit of
markers, a read_committed consumer); then every registry record is read back through
confluent-kafka's ``AvroDeserializer`` asking that registry.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_provider_kafka2pc.connection.registry import RegistryFormat, wire_header
from airflow_provider_kafka2pc.errors import (
    ConfigurationError,
    SchemaRefusedError,
    SchemaRegistryUnreachableError,
)
from airflow_provider_kafka2pc.spark import AVRO_PACKAGE, avro, prepare_dataframe
from airflow_provider_kafka2pc.spark.wire import WireOptions
from airflow_provider_kafka2pc.transaction.audit import audit_topic
from airflow_provider_kafka2pc.transaction.controller import Outcome, TransactionController
from airflow_provider_kafka2pc.transaction.manifest import Manifest
from airflow_provider_kafka2pc.transaction.native_writer import partition_for_key
from tests.conftest import assert_exactly_once, unique_id
from tests.support.readback import key_reader, read_back
from tests.support.registry import HOME, protobuf_message
from tests.support.spark import PYTHON_ENV, QUIET_CONF

ROWS = 2_000


IVY = HOME / "spark-ivy"


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    """A local session with Spark's Avro package, resolved from Maven Central once.

    ``spark.jars.packages`` only applies when this session starts the JVM; when another
    test module of this process started it first, the package's jars (resolved into the
    Ivy cache by a short-lived session of their own) are added with ``ADD JAR``.
    """
    os.environ.update(PYTHON_ENV)
    builder = SparkSession.builder.master("local[2]")
    for key, value in QUIET_CONF.items():
        builder = builder.config(key, value)
    session = (
        builder.config("spark.jars.packages", AVRO_PACKAGE)
        .config("spark.jars.ivy", str(IVY))
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    if not _has_avro(session):
        for jar in _avro_jars():
            session.sql(f"ADD JAR '{jar}'")
        assert _has_avro(session), "Spark's Avro package could not be loaded"
    yield session
    session.stop()


def _has_avro(session: SparkSession) -> bool:
    from airflow_provider_kafka2pc.spark.avro import _jvm_class

    try:
        _jvm_class(session, "org.apache.spark.sql.avro.CatalystDataToAvro")
    except ConfigurationError:
        return False
    return True


def _avro_jars() -> list[Path]:
    """The Avro package's jars from the Ivy cache, resolved first in a JVM of their own."""
    jars = IVY / "jars"
    if not list(jars.glob("*spark-avro_2.13-*.jar")):
        code = (
            "from pyspark.sql import SparkSession; SparkSession.builder.master('local[1]')"
            f".config('spark.jars.packages', {AVRO_PACKAGE!r})"
            f".config('spark.jars.ivy', {str(IVY)!r}).getOrCreate().stop()"
        )
        subprocess.run([sys.executable, "-c", code], check=True, timeout=600)
    return sorted(jars.glob("*.jar"))


def ids(count: int) -> list[str]:
    run = unique_id("wire")
    return [f"{run}-{i}" for i in range(count)]


def orders(spark: SparkSession, rows: int = ROWS):
    """Rows with a nullable column, so that the derived schema holds a union."""
    return spark.range(rows).selectExpr(
        "id",
        "concat('customer-', id % 97) AS customer",
        "CAST(id * 1.5 AS DOUBLE) AS amount",
        "CASE WHEN id % 3 = 0 THEN NULL ELSE concat('note ', id) END AS note",
    )


def commit(protocol, batch: Manifest) -> None:
    outcomes = TransactionController(protocol).commit_all(batch.committables)
    assert {r.outcome for r in outcomes} == {Outcome.COMMITTED}


def consume_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 30) -> list[Any]:
    """Every record a read_committed consumer gets, ``expected`` of them at most."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"wire-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < expected and time.monotonic() < deadline:
            got += [m for m in consumer.consume(1000, timeout=0.5) if m.error() is None]
    finally:
        consumer.close()
    return got


def nothing_opened(protocol, topic: str, leased: list[str]) -> None:
    """No record in the topic and no transactional id of the run known to a coordinator:
    the refusal came before any InitProducerId."""
    report = audit_topic(protocol, topic)
    assert report.totals == {"committed": 0, "aborted": 0, "open": 0, "non_transactional": 0}
    prefix = leased[0].rsplit("-", 1)[0]
    assert protocol.list_transactions(prefix=prefix) == []


# -- registry Avro ----------------------------------------------------------------------------


@pytest.mark.parametrize("writer", ["python", "jvm"])
def test_registry_avro_values_and_keys_read_back_through_the_registry(
    spark, registry, settings, bootstrap, protocol, make_topic, writer
):
    """Spark 4.2.0's Avro package runs under pyspark 4.3.0; the schema derived from the
    DataFrame is registered once as ``<topic>-value`` (the key's as ``<topic>-key``); every
    record carries magic 0 + that id, and AvroDeserializer gives back every row."""
    topic = make_topic(4)
    source = orders(spark)
    batch = prepare_dataframe(
        source,
        topic=topic,
        transactional_ids=ids(4),
        producer_config=settings,
        writer=writer,
        key_column="id",
        wire=WireOptions(
            registry={"url": registry},
            value_format=RegistryFormat(),
            key_format=RegistryFormat(),
        ),
    )
    commit(protocol, batch)
    assert_exactly_once(protocol, bootstrap, topic, *batch.committables, committed=ROWS, aborted=0)

    client = SchemaRegistryClient({"url": registry})
    # The registry outlives the test's cases: only this topic's subjects are this case's.
    subjects = [s for s in client.get_subjects() if s.startswith(f"{topic}-")]
    assert sorted(subjects) == sorted([f"{topic}-key", f"{topic}-value"])
    value_id = client.get_latest_version(f"{topic}-value").schema_id
    key_id = client.get_latest_version(f"{topic}-key").schema_id
    values, keys = AvroDeserializer(client), AvroDeserializer(client)
    rows = {}
    for message in consume_all(bootstrap, topic, ROWS):
        assert message.value()[:5] == wire_header(value_id)
        assert message.key()[:5] == wire_header(key_id)
        key = keys(message.key(), SerializationContext(topic, MessageField.KEY))
        rows[key] = values(message.value(), SerializationContext(topic, MessageField.VALUE))
    assert rows == {r["id"]: r.asDict() for r in source.collect()}


def test_a_given_schema_under_the_record_name_strategy(
    spark, registry, settings, bootstrap, protocol, make_topic
):
    """A user's schema, its subject named after the record (``shop.Order``), read back."""
    topic = make_topic(2)
    schema = json.dumps(
        {
            "type": "record",
            "name": "Order",
            "namespace": "shop",
            "fields": [
                {"name": "id", "type": "long"},
                {"name": "customer", "type": "string"},
                {"name": "amount", "type": "double"},
                {"name": "note", "type": ["null", "string"], "default": None},
            ],
        }
    )
    batch = prepare_dataframe(
        orders(spark, 300),
        topic=topic,
        transactional_ids=ids(2),
        producer_config=settings,
        key_column="id",
        wire=WireOptions(
            registry={"url": registry},
            value_format=RegistryFormat(schema=schema, subject_name_strategy="record_name"),
        ),
    )
    commit(protocol, batch)
    assert_exactly_once(protocol, bootstrap, topic, *batch.committables, committed=300, aborted=0)
    client = SchemaRegistryClient({"url": registry})
    assert client.get_latest_version("shop.Order").schema_id is not None
    decode = AvroDeserializer(client)
    decoded = [
        decode(m.value(), SerializationContext(topic, MessageField.VALUE))
        for m in consume_all(bootstrap, topic, 300)
    ]
    assert sorted(d["id"] for d in decoded) == list(range(300))
    assert all(d["customer"] == f"customer-{d['id'] % 97}" for d in decoded)


@pytest.mark.parametrize("writer", ["python", "jvm"])
def test_several_topics_carry_registry_values_under_one_schema_id(
    spark, registry, settings, bootstrap, protocol, make_topic, writer
):
    """Rows routed among two topics: the derived schema is registered under each topic's
    subject (``<topic>-value``), which the registry answers with one id, and every record
    of both topics reads back through it. When one topic's subject refuses the schema
    (incompatible under FULL), the export is refused before any transaction opens, in
    either topic."""
    topics = [make_topic(2), make_topic(2)]
    source = orders(spark).selectExpr(
        "*", f"CASE WHEN id % 2 = 0 THEN '{topics[0]}' ELSE '{topics[1]}' END AS to"
    )
    wire = WireOptions(registry={"url": registry}, value_format=RegistryFormat())
    batch = prepare_dataframe(
        source,
        topic_column="to",
        topics=topics,
        transactional_ids=ids(2),
        producer_config=settings,
        writer=writer,
        key_column="id",
        wire=wire,
    )
    commit(protocol, batch)
    client = SchemaRegistryClient({"url": registry})
    [schema_id] = {client.get_latest_version(f"{t}-value").schema_id for t in topics}
    decode = AvroDeserializer(client)
    for index, topic in enumerate(topics):
        assert_exactly_once(
            protocol, bootstrap, topic, *batch.committables, committed=ROWS // 2, aborted=0
        )
        got = consume_all(bootstrap, topic, ROWS // 2)
        assert all(m.value()[:5] == wire_header(schema_id) for m in got)
        decoded = [decode(m.value(), SerializationContext(topic, MessageField.VALUE)) for m in got]
        assert sorted(d["id"] for d in decoded) == list(range(index, ROWS, 2))

    others = [make_topic(2), make_topic(2)]
    other = {"type": "record", "name": "Other", "fields": [{"name": "x", "type": "int"}]}
    client.register_schema(f"{others[1]}-value", Schema(json.dumps(other), "AVRO"))
    client.set_compatibility(f"{others[1]}-value", "FULL")
    leased = ids(2)
    with pytest.raises(SchemaRefusedError, match=f"{others[1]}-value"):
        prepare_dataframe(
            orders(spark, 100).selectExpr(
                "*", f"CASE WHEN id % 2 = 0 THEN '{others[0]}' ELSE '{others[1]}' END AS to"
            ),
            topic_column="to",
            topics=others,
            transactional_ids=leased,
            producer_config=settings,
            writer=writer,
            key_column="id",
            wire=wire,
        )
    for topic in others:
        nothing_opened(protocol, topic, leased)


def test_json_schema_values_read_back_through_the_registry(
    spark, registry, settings, bootstrap, protocol, make_topic
):
    """JSON Schema fits the same shape: the header, then Spark's ``to_json``. The derived
    schema (``<topic>-value``) and a given one named by its title (``record_name``): every
    record passes JSONDeserializer, which validates it against the registered schema."""
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer

    source = orders(spark, 500)
    given = json.dumps(
        {
            "title": "shop.OrderJson",
            "type": "object",
            "properties": {"id": {"type": "integer"}, "customer": {"type": "string"}},
            "required": ["id", "customer"],
        }
    )
    client = SchemaRegistryClient({"url": registry})
    for fmt, subject in (
        (RegistryFormat(schema_type="JSON"), "{topic}-value"),
        (
            RegistryFormat(schema_type="JSON", schema=given, subject_name_strategy="record_name"),
            "shop.OrderJson",
        ),
    ):
        topic = make_topic(2)
        batch = prepare_dataframe(
            source,
            topic=topic,
            transactional_ids=ids(2),
            producer_config=settings,
            key_column="id",
            wire=WireOptions(registry={"url": registry}, value_format=fmt),
        )
        commit(protocol, batch)
        assert_exactly_once(
            protocol, bootstrap, topic, *batch.committables, committed=500, aborted=0
        )
        schema_id = client.get_latest_version(subject.format(topic=topic)).schema_id
        decode = JSONDeserializer(None, schema_registry_client=client)
        rows = {}
        for message in consume_all(bootstrap, topic, 500):
            assert message.value()[:5] == wire_header(schema_id)
            row = decode(message.value(), SerializationContext(topic, MessageField.VALUE))
            rows[row["id"]] = row
        expected = {
            r["id"]: {k: v for k, v in r.asDict().items() if v is not None}
            for r in source.collect()
        }
        assert rows == expected


def _read_protobuf(bootstrap, topic, client, rows, values, keys=None):
    """Every record through ProtobufDeserializer (the registry's id, then the message
    indexes, then the message), as dicts by the value's id."""
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from google.protobuf.json_format import MessageToDict

    value_decode = ProtobufDeserializer(values, {}, schema_registry_client=client)
    key_decode = keys and ProtobufDeserializer(keys, {}, schema_registry_client=client)
    got, messages = {}, consume_all(bootstrap, topic, rows)
    for message in messages:
        ctx = SerializationContext(topic, MessageField.VALUE)
        value = MessageToDict(value_decode(message.value(), ctx))
        if key_decode is not None:
            key_ctx = SerializationContext(topic, MessageField.KEY)
            value["key"] = MessageToDict(key_decode(message.key(), key_ctx))
        got[int(value["id"])] = value
    return messages, got


def test_protobuf_values_and_keys_read_back_through_the_registry(
    spark, registry, settings, bootstrap, protocol, make_topic
):
    """Protobuf: the schema derived from the columns (value and key, ``<topic>-value`` and
    ``<topic>-key``, the JVM writer) and a given ``.proto`` whose second message is written
    (``record_name``, message indexes [1], the Python writer): each record is magic 0, the
    id, the message indexes, the message; ProtobufDeserializer reads every one back."""
    from google.protobuf.descriptor_pb2 import FieldDescriptorProto as FD

    rows = 300
    source = (
        orders(spark, rows)
        .withColumn("id", F.col("id") + 1)  # a 0 would be left out: read back by id
        .selectExpr("*", "named_struct('id', id) AS k")
    )
    client = SchemaRegistryClient({"url": registry})
    topic = make_topic(2)
    protobuf = {"schema_type": "PROTOBUF"}
    batch = prepare_dataframe(
        source,
        topic=topic,
        transactional_ids=ids(2),
        producer_config=settings,
        key_column="k",
        wire=WireOptions(
            registry={"url": registry},
            value_format=RegistryFormat(**protobuf, record_name="Order", namespace="shop"),
            key_format=RegistryFormat(**protobuf),
        ),
    )
    commit(protocol, batch)
    assert_exactly_once(protocol, bootstrap, topic, *batch.committables, committed=rows, aborted=0)
    value_id = client.get_latest_version(f"{topic}-value").schema_id
    key_id = client.get_latest_version(f"{topic}-key").schema_id
    fields = [("id", 1, FD.TYPE_INT64), ("customer", 2, FD.TYPE_STRING)]
    fields += [("amount", 3, FD.TYPE_DOUBLE), ("note", 4, FD.TYPE_STRING)]
    key_class = protobuf_message("", "topLevelRecord", [("id", 1, FD.TYPE_INT64)])
    messages, got = _read_protobuf(
        bootstrap, topic, client, rows, protobuf_message("shop", "Order", fields), key_class
    )
    assert {m.value()[:6] for m in messages} == {wire_header(value_id) + b"\x00"}
    assert {m.key()[:6] for m in messages} == {wire_header(key_id) + b"\x00"}
    expected = {}
    for r in source.collect():  # proto3 leaves a 0 and a null out; int64 reads as text
        row = {"id": str(r["id"]), "customer": r["customer"], "key": {"id": str(r["id"])}}
        row.update({k: r[k] for k in ("amount", "note") if r[k]})
        expected[r["id"]] = row
    assert got == expected

    given = """
        syntax = "proto3";
        package shop;
        // The first message is not the one written: the header says which.
        message Audit { string who = 1; }
        message OrderLine {
          int64 id = 1;
          string customer = 2;
          optional string note = 7;
        }
    """
    topic = make_topic(2)
    fmt = RegistryFormat(
        **protobuf, schema=given, record_name="OrderLine", subject_name_strategy="record_name"
    )
    batch = prepare_dataframe(
        source.select("id", "customer", "note"),
        topic=topic,
        transactional_ids=ids(2),
        producer_config=settings,
        writer="python",
        key_column="id",
        wire=WireOptions(registry={"url": registry}, value_format=fmt),
    )
    commit(protocol, batch)
    assert_exactly_once(protocol, bootstrap, topic, *batch.committables, committed=rows, aborted=0)
    schema_id = client.get_latest_version("shop.OrderLine").schema_id
    line = protobuf_message(
        "shop",
        "OrderLine",
        [("id", 1, FD.TYPE_INT64), ("customer", 2, FD.TYPE_STRING), ("note", 7, FD.TYPE_STRING)],
        "Audit",
    )
    messages, got = _read_protobuf(bootstrap, topic, client, rows, line)
    assert {m.value()[:7] for m in messages} == {wire_header(schema_id) + b"\x02\x02"}
    assert got == {
        r["id"]: {"id": str(r["id"]), "customer": r["customer"]}
        | ({"note": r["note"]} if r["note"] is not None else {})
        for r in source.collect()
    }


def _refused_cases(registry: str, topic: str) -> dict[str, tuple[WireOptions, type, str]]:
    incompatible = json.dumps(
        {"type": "record", "name": "topLevelRecord", "fields": [{"name": "x", "type": "int"}]}
    )
    client = SchemaRegistryClient({"url": registry})
    client.register_schema(f"{topic}-value", Schema(incompatible, "AVRO"))
    client.set_compatibility(f"{topic}-value", "FULL")
    wrong_type = json.dumps(
        {
            "type": "record",
            "name": "Order",
            "fields": [{"name": "id", "type": "long"}, {"name": "customer", "type": "int"}],
        }
    )
    strict = json.dumps(
        {
            "type": "record",
            "name": "Strict",
            "fields": [
                {"name": "id", "type": "long"},
                {"name": "customer", "type": "string"},
                {"name": "amount", "type": "double"},
                {"name": "note", "type": "string"},
            ],
        }
    )
    closed = f"http://127.0.0.1:{_closed_port()}"
    return {
        "incompatible": (
            WireOptions(registry={"url": registry}, value_format=RegistryFormat()),
            SchemaRefusedError,
            "incompatible",
        ),
        "unreachable": (
            WireOptions(registry={"url": closed}, value_format=RegistryFormat()),
            SchemaRegistryUnreachableError,
            "did not answer",
        ),
        "column the schema cannot carry": (
            WireOptions(registry={"url": registry}, value_format=RegistryFormat(schema=wrong_type)),
            ConfigurationError,
            "cannot be written with the Avro schema",
        ),
        "a null where the schema allows none": (
            WireOptions(
                registry={"url": registry},
                value_format=RegistryFormat(schema=strict, subject_name_strategy="record_name"),
            ),
            ConfigurationError,
            "column 'note' is null in some rows",
        ),
        "not registered, no auto-register": (
            WireOptions(
                registry={"url": registry},
                value_format=RegistryFormat(record_name="Other", auto_register=False),
                key_format=None,
            ),
            SchemaRefusedError,
            "not registered",
        ),
        "tombstone without a key": (
            WireOptions(tombstone_when="id % 2 = 0"),
            ConfigurationError,
            "needs a key_column",
        ),
        "tombstone condition not boolean": (
            WireOptions(tombstone_when="id + 1"),
            ConfigurationError,
            "not boolean",
        ),
        "tombstone condition not over the columns": (
            WireOptions(tombstone_when="no_such_column = 1"),
            ConfigurationError,
            "is not a SQL expression over the source's columns",
        ),
        "timestamp of a wrong type": (
            WireOptions(timestamp_column="customer"),
            ConfigurationError,
            "use a timestamp column or a long column",
        ),
    }


def _closed_port() -> int:
    from devtools.broker.node import free_port

    return free_port()


def test_refusals_come_before_any_transaction_opens(
    spark, registry, settings, protocol, make_topic
):
    """An incompatible schema (the registry refuses it), an unreachable registry, a column
    the schema cannot carry (a type on the driver; a null in a non-null field in the
    shuffle's map stage, before any writing task), a schema not registered, a bad tombstone
    or timestamp option:
    each a clear error, no record written and no transactional id ever initialised."""
    topic = make_topic(2)
    for case, (wire, error, says) in _refused_cases(registry, topic).items():
        leased = ids(2)
        keyed = "tombstone without a key" not in case
        with pytest.raises(error, match=says):
            prepare_dataframe(
                orders(spark, 100).drop("note") if "column" in case else orders(spark, 100),
                topic=topic,
                transactional_ids=leased,
                producer_config=settings,
                key_column="id" if keyed else None,
                wire=wire,
            )
        nothing_opened(protocol, topic, leased)


def test_a_class_missing_from_the_session_is_named_with_the_package_to_add(spark):
    """The JVM's ClassNotFoundException (a Py4JJavaError) becomes the ConfigurationError
    naming Spark's Avro package; the check the Avro paths make before anything opens."""
    with pytest.raises(
        ConfigurationError, match=f"not on this session's classpath.*{AVRO_PACKAGE}"
    ):
        avro._jvm_class(spark, "org.apache.spark.sql.avro.NoSuchClass")


def test_the_registry_credentials_never_show(registry):
    """Refusals quote the registry's address only: no password from the settings."""
    from airflow_provider_kafka2pc.connection.registry import redacted, resolve

    settings = {"url": f"http://user:s3cr3t@127.0.0.1:{_closed_port()}"}
    with pytest.raises(SchemaRegistryUnreachableError) as refused:
        resolve(settings, "t-value", '"string"')
    assert "s3cr3t" not in str(refused.value)
    shown = redacted({"url": settings["url"], "basic.auth.user.info": "user:s3cr3t"})
    assert "s3cr3t" not in json.dumps(shown)


# -- tombstones --------------------------------------------------------------------------------


def _compacted_topic(bootstrap: str, partitions: int = 2) -> str:
    name = f"compacted-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {
        "cleanup.policy": "compact",
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.001",
        "min.compaction.lag.ms": "0",
        "delete.retention.ms": "0",
    }
    admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(30)
    # Handed over at once: the prepare's topic check waits while the broker does not know a
    # topic created just before (CI once saw UNKNOWN_TOPIC_OR_PARTITION here, before it did).
    return name


@pytest.mark.parametrize("writer", ["python", "jvm"])
def test_tombstones_are_counted_and_delete_their_keys_after_compaction(
    spark, settings, bootstrap, protocol, writer
):
    """A second export deletes the even keys: ``tombstone_when`` for id % 4 = 0, a null
    value column for id % 4 = 2. Both witnesses count the 50 tombstones apart from the
    values; once the log cleaner ran, no even key has a value left, every odd key one."""
    rows = 100
    topic = _compacted_topic(bootstrap)
    first = prepare_dataframe(
        spark.range(rows).selectExpr("id", "concat('v1-', id) AS payload"),
        topic=topic,
        transactional_ids=ids(2),
        producer_config=settings,
        writer=writer,
        key_column="id",
        value_column="payload",
    )
    commit(protocol, first)
    second = prepare_dataframe(
        spark.range(rows).selectExpr(
            "id", "CASE WHEN id % 4 = 2 THEN NULL ELSE concat('v2-', id) END AS payload"
        ),
        topic=topic,
        transactional_ids=ids(2),
        producer_config=settings,
        writer=writer,
        key_column="id",
        value_column="payload",
        wire=WireOptions(tombstone_when="id % 4 = 0"),
    )
    commit(protocol, second)
    report, seen = assert_exactly_once(
        protocol,
        bootstrap,
        topic,
        *first.committables,
        *second.committables,
        committed=2 * rows,
        aborted=0,
        keys_unique=False,
    )
    assert report.tombstones == rows // 2
    assert sum(seen.tombstones.values()) == rows // 2
    assert set(seen.tombstones) == {str(i).encode() for i in range(0, rows, 2)}

    # The active segment is never cleaned: roll it with one more record per partition.
    time.sleep(0.5)
    roller = Producer({"bootstrap.servers": bootstrap})
    for partition in range(2):
        roller.produce(topic, b"roll", b"roll", partition=partition)
    roller.flush(10)
    deadline = time.monotonic() + 120
    while True:
        latest: dict[bytes, list[bytes | None]] = {}
        for message in consume_all(bootstrap, topic, 10**6, timeout_s=5):
            latest.setdefault(message.key(), []).append(message.value())
        even_values = [k for k in latest if k != b"roll" and int(k) % 2 == 0 and any(latest[k])]
        odd = {k: v for k, v in latest.items() if k != b"roll" and int(k) % 2 == 1}
        if not even_values and all(len(v) == 1 for v in odd.values()):
            break
        assert time.monotonic() < deadline, f"not compacted: {len(even_values)} even keys left"
        time.sleep(3)
    assert {k: v[0] for k, v in odd.items()} == {
        str(i).encode(): f"v2-{i}".encode() for i in range(1, rows, 2)
    }


# -- record timestamps -------------------------------------------------------------------------


@pytest.mark.parametrize("writer", ["python", "jvm"])
def test_record_timestamps_from_a_column(spark, settings, bootstrap, protocol, make_topic, writer):
    """A timestamp column and a long epoch-ms column become the records' CreateTime; a null
    one is the time of writing; a value at or before 1970 fails before anything opens."""
    # A day ago: inside the topic's retention (older ones are refused, docs/record-timestamps.md)
    base = (int(time.time()) - 24 * 3600) * 1000
    frame = spark.range(200).selectExpr(
        "id",
        f"CASE WHEN id % 10 = 0 THEN NULL ELSE {base} + id * 1000 END AS ms",
    )
    frame = frame.withColumn("at", F.timestamp_millis("ms")).withColumn(
        "origin", F.when(F.col("id") % 2 == 0, F.lit("even"))
    )
    for column in ("at", "ms"):
        topic = make_topic(2)
        before = int(time.time() * 1000)
        batch = prepare_dataframe(
            frame,
            topic=topic,
            transactional_ids=ids(2),
            producer_config=settings,
            writer=writer,
            key_column="id",
            header_columns=["origin"] if column == "at" else [],
            wire=WireOptions(timestamp_column=column),
        )
        commit(protocol, batch)
        after = int(time.time() * 1000)
        assert_exactly_once(protocol, bootstrap, topic, *batch.committables, committed=200)
        for message in consume_all(bootstrap, topic, 200):
            kind, stamp = message.timestamp()
            assert kind == TIMESTAMP_CREATE_TIME
            i = int(message.key())
            if column == "at":  # headers and timestamps together
                assert message.headers() == ([("origin", b"even")] if i % 2 == 0 else None)
            if i % 10:
                assert stamp == base + i * 1000, (column, i)
            else:
                assert before <= stamp <= after, (column, i)

    topic = make_topic(2)
    leased = ids(2)
    with pytest.raises(ConfigurationError, match=r"holds -5 \(epoch ms\)"):
        prepare_dataframe(
            spark.range(50).selectExpr("id", "CASE WHEN id = 7 THEN -5 ELSE id + 1 END AS ms"),
            topic=topic,
            transactional_ids=leased,
            producer_config=settings,
            writer=writer,
            key_column="id",
            wire=WireOptions(timestamp_column="ms"),
        )
    nothing_opened(protocol, topic, leased)


def test_the_prepare_application_takes_the_wire_options(tmp_path: Path):
    """spark-submit's options: the formats as JSON, the registry settings from a file."""
    from airflow_provider_kafka2pc.spark.app import parse_args, registry_settings
    from airflow_provider_kafka2pc.spark.export_spec import from_arguments

    conf = tmp_path / "registry.json"
    conf.write_text(json.dumps({"url": "http://r:8081", "basic.auth.user.info": "u:p"}))
    conf.chmod(0o600)
    args = parse_args(
        [
            "--source-table",
            "t",
            "--topic",
            "x",
            "--transactional-ids",
            "a-0",
            "--manifest",
            "m.json",
            "--registry-config-file",
            str(conf),
            "--value-format",
            '{"subject_name_strategy": "topic_record_name", "record_name": "Order"}',
            "--tombstone-when",
            "deleted",
            "--timestamp-column",
            "updated_at",
        ]
    )
    wire = from_arguments(args)
    assert registry_settings(args) == {"url": "http://r:8081", "basic.auth.user.info": "u:p"}
    assert wire.value_format == RegistryFormat(
        subject_name_strategy="topic_record_name", record_name="Order"
    )
    assert (wire.key_format, wire.tombstone_when, wire.timestamp_column) == (
        None,
        "deleted",
        "updated_at",
    )
    with pytest.raises(ConfigurationError, match="subject_name_strategy"):
        from_arguments(
            parse_args(
                [
                    "--source-table",
                    "t",
                    "--topic",
                    "x",
                    "--transactional-ids",
                    "a-0",
                    "--manifest",
                    "m",
                    "--value-format",
                    '{"subject_name_strategy": "nope"}',
                ]
            )
        )


# -- prepare_in_job: the same spec from the lease task ------------------------------------------


# Each writer with one format: the value is encoded before the writer, which sends its bytes.
@pytest.mark.parametrize(
    ("writer", "schema_type"), [("python", "AVRO"), ("jvm", "PROTOBUF"), ("auto", "JSON")]
)
def test_prepare_in_job_takes_several_topics_registry_avro_tombstones_and_timestamps(
    spark, registry, settings, bootstrap, protocol, make_topic, tmp_path, writer, schema_type
):
    """The lease task's parameters carry the whole export spec (layout 2): a job of the
    user's own (``prepare_in_job``) exports rows routed among two topics as registry Avro
    (or Protobuf, read back by ProtobufDeserializer), with tombstones and record timestamps,
    exactly once; the job brings the registry's settings as it brings Kafka's. The Avro case
    also writes its keys in the registry's Avro; the Protobuf case its keys as a Protobuf
    message, names its value subject by the record and aligns its participants with Kafka's
    partitions; the JSON Schema case names its subjects by topic and record, sends a header
    column and partitions by hash."""
    from airflow_provider_kafka2pc.spark.export_spec import ExportSpec
    from airflow_provider_kafka2pc.spark.external import JobParameters, prepare_in_job

    topics = [make_topic(2), make_topic(2)]
    base = (int(time.time()) - 3600) * 1000  # an hour ago: inside the topics' retention
    source = orders(spark, 400).selectExpr(
        "*",
        f"CASE WHEN id % 2 = 0 THEN '{topics[0]}' ELSE '{topics[1]}' END AS to",
        f"{base} + id AS ms",
        "CASE WHEN id % 2 = 0 THEN 'even' END AS origin",
    )
    value_format = {"schema_type": schema_type, "record_name": "Order", "namespace": "shop"}
    more: dict[str, Any] = {"key_column": "id"}
    if schema_type == "AVRO":
        more["key_format"] = {"schema_type": "AVRO"}
    if schema_type == "PROTOBUF":  # its own record: shop.Order is an Avro subject here
        value_format |= {"subject_name_strategy": "record_name", "record_name": "JobOrder"}
        # A Protobuf key is a message: the struct column k (the value's last field).
        source = source.selectExpr("*", "named_struct('id', id) AS k")
        more |= {"partitioning": "kafka-aligned", "key_column": "k"}
        more["key_format"] = {"schema_type": "PROTOBUF"}
    if schema_type == "JSON":
        value_format["subject_name_strategy"] = "topic_record_name"
        more |= {"header_columns": ("origin",), "partitioning": "hash"}
    spec = ExportSpec(
        topic_column="to",
        topics=tuple(topics),
        value_format=value_format,
        tombstone_when="id % 5 = 0",
        timestamp_column="ms",
        writer=writer,
        **more,
    )
    manifest_path = tmp_path / "manifest.json"
    params = JobParameters(spec, ids(2), unique_id("job"), str(manifest_path)).to_dict()

    batch = prepare_in_job(
        source, json.dumps(params), producer_config=settings, registry={"url": registry}
    )

    assert batch is not None and manifest_path.exists()
    assert batch.metadata["writer"] == ("jvm" if writer == "auto" else writer)
    aligned = batch.metadata["partitioning"] == "kafka-aligned"
    assert aligned or spec.partitioning != "kafka-aligned", batch.metadata
    assert batch.topics == tuple(topics)
    if aligned:  # participant i owns partition i of each topic
        for i, committable in enumerate(batch.committables):
            assert {p.partition for p in committable.partitions} == {i}, committable.partitions
    commit(protocol, batch)
    client = SchemaRegistryClient({"url": registry})
    decode = _order_reader(schema_type, client)
    read_key = key_reader(spec, client)
    for index, topic in enumerate(topics):
        report, _ = assert_exactly_once(
            protocol, bootstrap, topic, *batch.committables, committed=200, aborted=0
        )
        assert report.tombstones == 40  # ids 0, 10, 20, ... and 5, 15, 25, ...
        for message in consume_all(bootstrap, topic, 200):
            key_context = SerializationContext(topic, MessageField.KEY)
            key = int(read_key(message.key(), key_context))
            # Where Java's partitioner puts the key's bytes as written (encoded or not).
            assert message.partition() == partition_for_key(message.key(), 2)
            assert key % 2 == index and message.timestamp() == (TIMESTAMP_CREATE_TIME, base + key)
            if spec.header_columns:  # odd ids: a null header column, no header
                assert message.headers() == ([("origin", b"even")] if key % 2 == 0 else None)
            if key % 5 == 0:
                assert message.value() is None
                continue
            row = decode(message.value(), SerializationContext(topic, MessageField.VALUE))
            assert row["id"] == key and row["customer"] == f"customer-{key % 97}"
        if schema_type == "JSON":
            assert client.get_latest_version(f"{topic}-shop.Order").schema_id
        if spec.key_format:
            assert client.get_latest_version(f"{topic}-key").schema_id
    if schema_type == "PROTOBUF":  # one subject for both topics
        assert client.get_latest_version("shop.JobOrder").schema_id


def _order_reader(schema_type: str, client: SchemaRegistryClient) -> Any:
    """A value's reader through the registry, giving ``id`` and ``customer``: Avro's, JSON
    Schema's, or Protobuf's with a message ``shop.Order`` of the first two columns (a reader
    needs no more fields than it reads)."""
    if schema_type == "AVRO":
        return AvroDeserializer(client)
    if schema_type == "JSON":
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer

        return JSONDeserializer(None, schema_registry_client=client)
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from google.protobuf.descriptor_pb2 import FieldDescriptorProto as FD

    fields = [("id", 1, FD.TYPE_INT64), ("customer", 2, FD.TYPE_STRING)]
    order = ProtobufDeserializer(
        protobuf_message("shop", "Order", fields), {}, schema_registry_client=client
    )

    def read(data: bytes, ctx: SerializationContext) -> dict[str, Any]:
        message = order(data, ctx)
        return {"id": message.id, "customer": message.customer}

    return read


# -- the loss repair of every option (docs/matrix.md's repair column) ---------------------------

#: name -> (the spec's options, the source's columns). Each: its recorded spec read back from
#: JSON (the ledger's record), one participant aborted as the broker aborts a timed-out one,
#: written again from the same input, then every record read back through the registry.
REPAIR_CASES: dict[str, tuple[dict[str, Any], list[str]]] = {
    "avro-topic-record-name-hash-python": (
        {
            "key_column": "id",
            "key_format": {},
            "value_format": {
                "subject_name_strategy": "topic_record_name",
                "record_name": "Order",
                "namespace": "shop",
            },
            "header_columns": ["origin"],
            "tombstone_when": "id % 5 = 0",
            "timestamp_column": "ms",
            "partitioning": "hash",
            "writer": "python",
        },
        ["id", "customer", "amount", "ms", "origin"],
    ),
    "protobuf-record-name-jvm": (
        {
            "key_column": "k",
            "key_format": {"schema_type": "PROTOBUF"},
            "value_format": {
                "schema_type": "PROTOBUF",
                "subject_name_strategy": "record_name",
                "record_name": "RepairedOrder",  # its own subject in the shared registry
                "namespace": "shop",
            },
            "writer": "jvm",
        },
        ["customer", "id", "named_struct('id', id) AS k"],  # readback's Protobuf fields
    ),
    "json-schema-auto": (
        {"key_column": "id", "value_format": {"schema_type": "JSON"}, "partitioning": "auto"},
        ["id", "customer", "note"],
    ),
    "value-column-headers-auto": (
        {"key_column": "id", "value_column": "payload", "header_columns": ["origin"]},
        ["id", "concat('v-', id) AS payload", "origin"],
    ),
}


@pytest.mark.parametrize("case", sorted(REPAIR_CASES))
def test_a_lost_participant_is_repaired_exactly_once_with_every_option(
    spark, registry, settings, bootstrap, protocol, make_topic, case
):
    """The loss repair re-writes a lost participant's rows from the spec the ledger
    recorded, so every option must come back the same: registry formats (values, keys,
    each subject strategy), headers, tombstones, timestamps, value column, partitioning and
    writer. Both witnesses count the batch once; every record decodes against the registry
    (or is the tombstone or plain value it was), with its headers and timestamp."""
    from airflow_provider_kafka2pc.spark.export_spec import ExportSpec
    from airflow_provider_kafka2pc.spark.job import Repair
    from airflow_provider_kafka2pc.spark.prepare import prepare_export

    options, columns = REPAIR_CASES[case]
    rows, base = 300, (int(time.time()) - 3600) * 1000
    frame = orders(spark, rows).selectExpr(
        "*", f"{base} + id AS ms", "CASE WHEN id % 2 = 0 THEN 'even' END AS origin"
    )
    source = frame.selectExpr(*columns)
    topic = make_topic(4)
    spec = ExportSpec(topic=topic, **options)
    leased = ids(4)
    first = prepare_export(
        source,
        spec,
        transactional_ids=leased,
        producer_config=settings,
        registry={"url": registry},
    )
    controller = TransactionController(protocol)
    lost = first.committables[1]
    assert [r.outcome for r in controller.abort_all([lost])] == [Outcome.ABORTED]

    recorded = ExportSpec.from_dict(json.loads(spec.to_json()))
    assert recorded == spec
    repaired = prepare_export(
        source,
        recorded,
        transactional_ids=leased,
        producer_config=settings,
        registry={"url": registry},
        repair=Repair([1], first.partition_rows, first.partitioning),
    )
    assert repaired.metadata["partitions"] == [1]
    assert repaired.metadata["writer"] == first.metadata["writer"]
    assert [c.record_count for c in repaired.committables] == [lost.record_count]
    final = [first.committables[0], *repaired.committables, *first.committables[2:]]
    assert {r.outcome for r in controller.commit_all(final)} == {Outcome.COMMITTED}
    report, _ = assert_exactly_once(
        protocol, bootstrap, topic, *final, committed=rows, aborted=lost.record_count
    )
    tombstones = rows // 5 if spec.tombstone_when else 0
    assert report.tombstones == tombstones

    read_back(spec, registry, consume_all(bootstrap, topic, rows), topic, range(rows), base)
