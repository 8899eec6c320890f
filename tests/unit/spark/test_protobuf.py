"""Registry Protobuf, the pure parts: the schema derived from Spark types, a user's .proto
text compiled, the columns checked against it, and the message-index framing."""

from __future__ import annotations

import base64
import importlib.util

import pytest
from google.protobuf import descriptor_pb2
from pyspark.sql import types as T

from airflow_provider_kafka2pc.connection.registry import RegisteredSchema, subject_name
from airflow_provider_kafka2pc.errors import ConfigurationError
from airflow_provider_kafka2pc.spark import protobuf

ROW = T.StructType(
    [
        T.StructField("id", T.LongType(), False),
        T.StructField("name", T.StringType()),
        T.StructField("small", T.ShortType(), False),
        T.StructField("ok", T.BooleanType(), False),
        T.StructField("ratio", T.FloatType()),
        T.StructField("amount", T.DoubleType(), False),
        T.StructField("raw", T.BinaryType()),
        T.StructField("at", T.TimestampType()),
        T.StructField("tags", T.ArrayType(T.StringType())),
        T.StructField("address", T.StructType([T.StructField("city", T.StringType(), False)])),
        T.StructField("counts", T.MapType(T.StringType(), T.LongType())),
        T.StructField("lines", T.ArrayType(T.StructType([T.StructField("sku", T.StringType())]))),
    ]
)


def test_the_derived_schema_is_proto3_with_nested_messages_repeated_maps_and_optionals():
    assert protobuf.derive_schema(ROW, "Order", "shop") == "\n".join(
        [
            'syntax = "proto3";',
            "package shop;",
            'import "google/protobuf/timestamp.proto";',
            "",
            "message Order {",
            "  message Address {",
            "    string city = 1;",
            "  }",
            "  message Lines {",
            "    optional string sku = 1;",
            "  }",
            "  int64 id = 1;",
            "  optional string name = 2;",
            "  int32 small = 3;",
            "  bool ok = 4;",
            "  optional float ratio = 5;",
            "  double amount = 6;",
            "  optional bytes raw = 7;",
            "  google.protobuf.Timestamp at = 8;",
            "  repeated string tags = 9;",
            "  Address address = 10;",
            "  map<string, int64> counts = 11;",
            "  repeated Lines lines = 12;",
            "}",
        ]
    )


def _file(schema: protobuf.ProtoSchema) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto()
    proto.ParseFromString(schema.file)
    return proto


def test_the_derived_schema_compiles_and_its_columns_fit_it():
    compiled = protobuf.compile_schema(protobuf.derive_schema(ROW, "Order", "shop"), "Order")
    assert (compiled.message, compiled.indexes) == ("shop.Order", (0,))
    protobuf.check_encodable(ROW, compiled, "value")
    order = _file(compiled).message_type[0]
    fields = {f.name: f for f in order.field}
    assert fields["name"].proto3_optional and order.oneof_decl[fields["name"].oneof_index].name
    assert fields["address"].type_name == ".shop.Order.Address"
    assert fields["at"].type_name == ".google.protobuf.Timestamp"
    entry = next(m for m in order.nested_type if m.options.map_entry)
    assert (entry.name, [f.name for f in entry.field]) == ("CountsEntry", ["key", "value"])
    # registered as confluent-kafka's ProtobufSerializer registers: base64 of the file
    assert base64.standard_b64decode(compiled.registered) == compiled.file


@pytest.mark.parametrize(
    ("data_type", "says"),
    [
        (T.DecimalType(10, 2), "cast it to string or double"),
        (T.DateType(), "cast it to string"),
        (T.TimestampNTZType(), "to_utc_timestamp"),
        (T.ArrayType(T.ArrayType(T.StringType())), "an array of arrays"),
        (T.MapType(T.DoubleType(), T.StringType()), "map keys must be"),
    ],
)
def test_types_without_a_protobuf_form_are_refused_by_name(data_type, says):
    row = T.StructType([T.StructField("c", data_type)])
    with pytest.raises(ConfigurationError, match=f"column 'c' .*{says}"):
        protobuf.derive_schema(row, "R")


def test_a_non_struct_and_a_bad_name_are_refused():
    with pytest.raises(ConfigurationError, match="must be a struct"):
        protobuf.derive_schema(T.LongType(), "R")
    with pytest.raises(ConfigurationError, match="not a Protobuf name"):
        protobuf.derive_schema(T.StructType([T.StructField("a-b", T.LongType())]), "R")


GIVEN = """
syntax = "proto3";
package shop;
option java_package = "com.example.shop"; // kept in the descriptor
import "google/protobuf/timestamp.proto";
/* the first message is not the one written */
message Audit { string who = 1; }
message Envelope {
  enum Kind { KIND_UNSPECIFIED = 0; SALE = 1; }
  message Order {
    int64 id = 1 [json_name = "orderId"];
    optional string note = 2;
    google.protobuf.Timestamp at = 3;
    repeated Line lines = 4;
    map<string, Line> by_sku = 5;
    Kind kind = 6;
    oneof payment { string card = 7; string cash = 8; }
    reserved 9, 10;
  }
  message Line { string sku = 1; int32 count = 2; }
}
"""


def test_given_proto_text_compiles_and_record_name_picks_a_nested_message():
    compiled = protobuf.compile_schema(GIVEN, "shop.Envelope.Order")
    assert (compiled.message, compiled.indexes) == ("shop.Envelope.Order", (1, 0))
    order = _file(compiled).message_type[1].nested_type[0]
    fields = {f.name: f for f in order.field}
    assert fields["lines"].type_name == ".shop.Envelope.Line"
    assert fields["kind"].type == descriptor_pb2.FieldDescriptorProto.TYPE_ENUM
    assert [o.name for o in order.oneof_decl] == ["payment", "_note"]
    assert protobuf.compile_schema(GIVEN).message == "shop.Audit"  # no name: the first
    assert protobuf.compile_schema(GIVEN, "Line").indexes == (1, 1)


def test_the_columns_are_checked_against_a_given_schema():
    compiled = protobuf.compile_schema(GIVEN, "Order")
    line = T.StructType(
        [T.StructField("sku", T.StringType()), T.StructField("count", T.ByteType())]
    )
    fits = T.StructType(
        [
            T.StructField("id", T.IntegerType()),
            T.StructField("at", T.TimestampType()),
            T.StructField("lines", T.ArrayType(line)),
            T.StructField("by_sku", T.MapType(T.StringType(), line)),
        ]
    )
    protobuf.check_encodable(fits, compiled, "value")
    wrong = T.StructType(
        [
            T.StructField("id", T.StringType()),
            T.StructField("extra", T.LongType()),
            T.StructField("lines", T.StringType()),
            T.StructField("kind", T.StringType()),
        ]
    )
    with pytest.raises(ConfigurationError) as refused:
        protobuf.check_encodable(wrong, compiled, "value")
    said = str(refused.value)
    assert "column 'id' is string, the field int64" in said
    assert "column 'extra' is not a field of shop.Envelope.Order" in said
    assert "column 'lines' is string, the field repeated" in said
    assert "the field enum shop.Envelope.Kind" in said


@pytest.mark.parametrize(
    ("text", "says"),
    [
        # protoc's own errors, with the line and column
        ('syntax = "proto3"; message A { int32 a = 1 }', r'schema.proto:1:\d+: Expected ";"'),
        ('syntax = "proto3"; message A { Missing m = 1; }', '"Missing" is not defined'),
        ('syntax = "proto3"; import "other.proto"; message A {}', "other.proto: File not found"),
        # ours: what the encoder cannot write
        ('syntax = "proto2"; message A { optional int32 a = 1; }', "proto3 only"),
        ("message A { optional int32 a = 1; }", "proto3 only"),  # no syntax: proto2
        ('syntax = "proto3"; import "google/protobuf/duration.proto"; message A {}', "only"),
        ('syntax = "proto3"; enum E { E0 = 0; }', "no message"),
        ("  ", "empty"),
    ],
)
def test_proto_text_that_does_not_parse_is_refused(text, says):
    with pytest.raises(ConfigurationError, match=f"does not parse: .*{says}"):
        protobuf.compile_schema(text)


def test_without_grpcio_tools_the_error_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "grpc_tools" else real(name)
    )
    with pytest.raises(ConfigurationError, match=r"grpcio-tools.*kafka2pc\[registry\]"):
        protobuf.compile_schema('syntax = "proto3"; message A {}')


@pytest.mark.parametrize(
    ("path", "framed"),
    [
        ((0,), b"\x00"),  # the first message: one byte, not [1, 0]
        ((1,), b"\x02\x02"),
        ((0, 0), b"\x04\x00\x00"),
        ((1, 2), b"\x04\x02\x04"),
        ((64,), b"\x02\x80\x01"),  # zigzag 128: a two-byte varint
    ],
)
def test_message_indexes_are_zigzag_varints_with_the_single_zero(path, framed):
    assert protobuf.message_indexes(path) == framed


def test_the_header_carries_the_message_indexes_and_the_subject_the_message_name():
    schema = RegisteredSchema("s", 7, "", "PROTOBUF", "shop.Order", b"\x02\x02")
    assert schema.header == b"\x00\x00\x00\x00\x07\x02\x02"
    assert subject_name("record_name", "t", "", schema_type="PROTOBUF", full_name="shop.Order") == (
        "shop.Order"
    )
    assert subject_name("topic_record_name", "t", "", full_name="shop.Order") == "t-shop.Order"
