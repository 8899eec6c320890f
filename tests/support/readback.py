"""Every committed record of an export read back as its spec wrote it: the key and value
through confluent-kafka's own deserializer for their registry format (asking the real
registry), the header, the record timestamp and the tombstone checked per row.

The rows it expects are the option-matrix tests' (tests/airflow/connect_cases.py, the loss
repair cases of tests/integration/test_wire_formats.py, the cluster-mode export): each
row's key is its ``id``, ``customer`` is ``customer-<id % 97>``, ``origin`` is ``even``
for even ids (else null), ``ms`` is ``base_ms + id``, tombstones where ``id % 5 = 0``, a
value column ``v-<id>``. A derived Protobuf value's first two fields are ``customer`` and
``id``, in that order.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import TIMESTAMP_CREATE_TIME
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf.descriptor_pb2 import FieldDescriptorProto as FD

from airflow_provider_kafka2pc.spark.export_spec import ExportSpec
from tests.support.registry import protobuf_message


def read_back(
    spec: ExportSpec,
    registry: str,
    messages: list[Any],
    topic: str,
    ids: Iterable[int],
    base_ms: int,
) -> None:
    """Assert that ``messages`` (a read_committed consumer's of ``topic``) are the rows
    ``spec`` wrote there, whose ids are ``ids``."""
    client = SchemaRegistryClient({"url": registry})
    value_of = _value_reader(spec, client)
    key_of = key_reader(spec, client)
    seen = set()
    for message in messages:
        key = key_of(message.key(), SerializationContext(topic, MessageField.KEY))
        seen.add(key)
        if spec.header_columns:
            assert message.headers() == ([("origin", b"even")] if key % 2 == 0 else None)
        if spec.timestamp_column:
            assert message.timestamp() == (TIMESTAMP_CREATE_TIME, base_ms + key)
        if spec.tombstone_when and key % 5 == 0:
            assert message.value() is None
            continue
        value = value_of(message.value(), SerializationContext(topic, MessageField.VALUE))
        expected = (
            {"payload": f"v-{key}"}
            if spec.value_column
            else {"id": key, "customer": f"customer-{key % 97}"}
        )
        assert value == expected, (key, value)
    assert seen == set(ids)
    fmt = spec.value_format
    if fmt is not None:  # its schema registered under the subject its strategy names
        record = f"{fmt.namespace}.{fmt.record_name}" if fmt.namespace else fmt.record_name
        subject = {
            "topic_record_name": f"{topic}-{record}",
            "record_name": record,
        }.get(fmt.subject_name_strategy, f"{topic}-value")
        assert client.get_latest_version(subject).schema_id


def key_reader(spec: ExportSpec, client: SchemaRegistryClient) -> Any:
    """A key's reader: its text as a number, or through the registry (a Protobuf key is
    the struct ``named_struct('id', id)``)."""
    if spec.key_format is None:
        return lambda data, ctx: int(data)
    if spec.key_format.schema_type == "PROTOBUF":
        key = protobuf_message("", "topLevelRecord", [("id", 1, FD.TYPE_INT64)])
        decode = ProtobufDeserializer(key, {}, schema_registry_client=client)
        return lambda data, ctx: decode(data, ctx).id
    return AvroDeserializer(client)


def _value_reader(spec: ExportSpec, client: SchemaRegistryClient) -> Any:
    """The checked fields of a value: the value column's text, or ``id`` and ``customer``
    through the registry."""
    if spec.value_column:
        return lambda data, ctx: {"payload": data.decode()}
    assert spec.value_format is not None
    if spec.value_format.schema_type == "PROTOBUF":
        fields = [("customer", 1, FD.TYPE_STRING), ("id", 2, FD.TYPE_INT64)]
        message = protobuf_message("shop", "Row", fields)
        proto = ProtobufDeserializer(message, {}, schema_registry_client=client)
        return lambda data, ctx: _pick(proto(data, ctx))
    if spec.value_format.schema_type == "JSON":
        decode = JSONDeserializer(None, schema_registry_client=client)
    else:
        decode = AvroDeserializer(client)
    return lambda data, ctx: _pick(decode(data, ctx))


def _pick(row: Any) -> dict[str, Any]:
    if isinstance(row, dict):
        return {"id": row["id"], "customer": row["customer"]}
    return {"id": row.id, "customer": row.customer}
