"""Protobuf in the schema registry's wire format, encoded by Spark in the JVM.

The bytes: magic byte 0, the schema id (4 bytes), the message indexes (which message of the
file: a zigzag varint count, then each index; the first message is the single byte 0), then
the message. The header is the same for every record, so it is a literal, as for Avro:
``concat(lit(header), kafka2pc_protobuf(struct, descriptor, name))``, where the function is
the project's Java UDF (``kafka2pc.spark.ProtobufEncode``: protobuf-java's
``DynamicMessage`` built from the descriptor). Spark's own ``spark-protobuf`` is not served
by Maven Central; protobuf-java is, and is added to the session like spark-avro.

The schema comes from the DataFrame (:func:`derive_schema`, proto3 ``.proto`` text) or from
the user (``.proto`` text); either way ``protoc`` compiles it (:mod:`.proto_text`) into a
file descriptor, checked against the columns on the driver (:func:`check_encodable`) and
registered as confluent-kafka's ``ProtobufSerializer`` registers one: the base64 of the
``FileDescriptorProto``.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass

from google.protobuf import descriptor_pb2, descriptor_pool, timestamp_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..errors import ConfigurationError
from . import PROJECT_JAR, PROTOBUF_JAVA
from .proto_text import TIMESTAMP_IMPORT, parse

log = logging.getLogger(__name__)

#: The Java UDF and the name it is registered under in the session.
ENCODE_CLASS = "kafka2pc.spark.ProtobufEncode"
ENCODE_FUNCTION = "kafka2pc_protobuf"
_TIMESTAMP = "google.protobuf.Timestamp"
_INTEGERS = (T.ByteType, T.ShortType, T.IntegerType)
_MAP_KEYS = {T.StringType: "string", T.IntegerType: "int32", T.LongType: "int64"}
_MAP_KEYS.update({T.ByteType: "int32", T.ShortType: "int32", T.BooleanType: "bool"})


@dataclass(frozen=True)
class ProtoSchema:
    """A compiled schema: the file (resolved, serialized), the message written and its
    path of indexes in the file."""

    file: bytes
    message: str
    indexes: tuple[int, ...]

    @property
    def registered(self) -> str:
        """What is registered: the base64 ``FileDescriptorProto`` (confluent-kafka's form)."""
        return base64.standard_b64encode(self.file).decode("ascii")


# -- the schema of a DataFrame ---------------------------------------------------------------


def derive_schema(data_type: T.DataType, record_name: str, namespace: str = "") -> str:
    """The proto3 ``.proto`` text of a struct: a message ``record_name`` in package
    ``namespace``; a struct column is a nested message named after it (``address``:
    ``Address``)."""
    if not isinstance(data_type, T.StructType):
        raise ConfigurationError(
            "Protobuf values and keys must be a struct: the whole row, or a struct column "
            f"(got {data_type.simpleString()})"
        )
    body = _message(data_type, record_name, "")
    head = ['syntax = "proto3";']
    if namespace:
        head.append(f"package {namespace};")
    if _TIMESTAMP in body:
        head.append(f'import "{TIMESTAMP_IMPORT}";')
    return "\n".join(head) + "\n\n" + body


def _message(data_type: T.StructType, name: str, indent: str) -> str:
    _check_name(name)
    lines, nested = [], []
    taken = {f.name for f in data_type.fields}
    for number, f in enumerate(data_type.fields, start=1):
        _check_name(f.name)
        inner = _nested_name(f.name, taken)
        kind, message = _field_type(f.dataType, f.name, inner, indent + "  ")
        if message:
            nested.append(message)
            taken.add(inner)
        scalar = not kind.startswith(("repeated ", "map<")) and message is None
        optional = "optional " if f.nullable and scalar and kind != _TIMESTAMP else ""
        lines.append(f"{indent}  {optional}{kind} {f.name} = {number};")
    return "\n".join([f"{indent}message {name} {{", *nested, *lines, f"{indent}}}"])


def _field_type(
    data_type: T.DataType, column: str, inner: str, indent: str
) -> tuple[str, str | None]:
    """(the field's type as written, a nested message to declare or None)."""
    scalar = _scalar(data_type)
    if scalar is not None:
        return scalar, None
    if isinstance(data_type, T.StructType):
        return inner, _message(data_type, inner, indent)
    if isinstance(data_type, T.ArrayType):
        if isinstance(data_type.elementType, T.ArrayType | T.MapType):
            raise _no_type(data_type, column, "an array of arrays or maps has no Protobuf form")
        kind, message = _field_type(data_type.elementType, column, inner, indent)
        return f"repeated {kind}", message
    if isinstance(data_type, T.MapType):
        key = _MAP_KEYS.get(type(data_type.keyType))
        if key is None or isinstance(data_type.valueType, T.ArrayType | T.MapType):
            raise _no_type(
                data_type,
                column,
                "map keys must be strings, integers or booleans, values neither arrays nor maps",
            )
        kind, message = _field_type(data_type.valueType, column, inner, indent)
        return f"map<{key}, {kind}>", message
    advice = {
        T.DecimalType: "cast it to string or double",
        T.DateType: "cast it to string, or to a timestamp",
        T.TimestampNTZType: "convert it with to_utc_timestamp",
    }
    said = next((a for t, a in advice.items() if isinstance(data_type, t)), "cast it first")
    raise _no_type(data_type, column, said)


#: Spark's scalar types -> the proto3 field type each is written as.
_SCALARS: tuple[tuple[type[T.DataType] | tuple[type[T.DataType], ...], str], ...] = (
    (T.StringType, "string"),
    (T.BinaryType, "bytes"),
    (T.BooleanType, "bool"),
    (_INTEGERS, "int32"),
    (T.LongType, "int64"),
    (T.FloatType, "float"),
    (T.DoubleType, "double"),
    (T.TimestampType, _TIMESTAMP),
)


def _scalar(data_type: T.DataType) -> str | None:
    return next((proto for kind, proto in _SCALARS if isinstance(data_type, kind)), None)


def _nested_name(column: str, taken: set[str]) -> str:
    """The nested message of a struct column: its name capitalised, unique in the scope."""
    name = column[:1].upper() + column[1:]
    while name in taken:
        name += "Record"
    return name


def _check_name(name: str) -> None:
    if (
        not name
        or not (name[0].isalpha() or name[0] == "_")
        or not name.isascii()
        or not (name.replace("_", "a").isalnum())
    ):
        raise ConfigurationError(
            f"{name!r} is not a Protobuf name (letters, digits and _, not first a digit): "
            "rename the column; nothing was written"
        )


def _no_type(data_type: T.DataType, column: str, advice: str) -> ConfigurationError:
    return ConfigurationError(
        f"column {column!r} of type {data_type.simpleString()} has no Protobuf type here: "
        f"{advice}; nothing was written"
    )


# -- compiling a schema -----------------------------------------------------------------------


def compile_schema(text: str, record_name: str | None = None) -> ProtoSchema:
    """``.proto`` text as a resolved file descriptor; the message written is ``record_name``
    (a full or a simple name, nested allowed) where the file has it, else its first one."""
    proto = parse(text)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    try:
        pool.Add(proto)
        built = pool.FindFileByName(proto.name)
    except (TypeError, KeyError, ValueError) as exc:  # unresolved names, duplicates, ...
        raise ConfigurationError(
            f"the Protobuf schema does not compile: {exc}; nothing was written"
        ) from None
    resolved = descriptor_pb2.FileDescriptorProto()
    built.CopyToProto(resolved)
    top = [built.message_types_by_name[m.name] for m in resolved.message_type]
    messages = list(_messages(top, ()))
    chosen = next((m for m in messages if record_name in (m[0].full_name, m[0].name)), messages[0])
    return ProtoSchema(resolved.SerializeToString(), chosen[0].full_name, chosen[1])


def _messages(descriptors: list[Descriptor], path: tuple[int, ...]):  # type: ignore[no-untyped-def]
    """Every message (not map entries) with its path of indexes, depth first; a map entry
    keeps its place in the count (it is a nested type in the file, as Confluent counts)."""
    for index, descriptor in enumerate(descriptors):
        if descriptor.GetOptions().map_entry:
            continue
        yield descriptor, (*path, index)
        yield from _messages(list(descriptor.nested_types), (*path, index))


def message_indexes(path: tuple[int, ...]) -> bytes:
    """The wire format's message indexes: the count, then each index, as zigzag varints;
    ``(0,)`` (the first message) as the single byte 0."""
    if path == (0,):
        return b"\x00"
    return b"".join(_zigzag_varint(n) for n in (len(path), *path))


def _zigzag_varint(value: int) -> bytes:
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = encoded & 0x7F
        encoded >>= 7
        if encoded:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


# -- checking the columns ---------------------------------------------------------------------


def check_encodable(data_type: T.DataType, schema: ProtoSchema, role: str) -> None:
    """Refuse, before anything opens, a column the message has no field for, or one whose
    type the field cannot hold. A field without a column is left unset (proto3)."""
    if not isinstance(data_type, T.StructType):
        derive_schema(data_type, "x")  # the error for a non-struct
    problems = _problems(data_type, _descriptor(schema), "")
    if problems:
        raise ConfigurationError(
            f"the {role} columns cannot be written with the Protobuf schema: "
            f"{'; '.join(problems)}; nothing was written"
        )


def _descriptor(schema: ProtoSchema) -> Descriptor:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.AddSerializedFile(schema.file)
    return pool.FindMessageTypeByName(schema.message)


def _problems(data_type: T.StructType, message: Descriptor, prefix: str) -> list[str]:
    problems = []
    for f in data_type.fields:
        field = message.fields_by_name.get(f.name)
        where = prefix + f.name
        if field is None:
            problems.append(f"column {where!r} is not a field of {message.full_name}")
            continue
        problems += _type_problems(f.dataType, field, where)
    return problems


def _type_problems(data_type: T.DataType, field: FieldDescriptor, where: str) -> list[str]:
    entry = field.message_type if field.type == FieldDescriptor.TYPE_MESSAGE else None
    if entry is not None and entry.GetOptions().map_entry:
        if not isinstance(data_type, T.MapType):
            return [f"column {where!r} is {data_type.simpleString()}, the field a map"]
        return _element_problems(
            data_type.keyType, entry.fields_by_number[1], where + " (key)"
        ) + _element_problems(data_type.valueType, entry.fields_by_number[2], where + " (value)")
    if _is_repeated(field):
        if not isinstance(data_type, T.ArrayType):
            return [f"column {where!r} is {data_type.simpleString()}, the field repeated"]
        return _element_problems(data_type.elementType, field, where)
    return _element_problems(data_type, field, where)


def _is_repeated(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated)


def _element_problems(data_type: T.DataType, field: FieldDescriptor, where: str) -> list[str]:
    """One value of ``data_type`` into one value of ``field``'s type."""
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        if field.message_type.full_name == _TIMESTAMP:
            ok = isinstance(data_type, T.TimestampType)
        elif isinstance(data_type, T.StructType):
            return _problems(data_type, field.message_type, where + ".")
        else:
            ok = False
    else:
        ok = any(isinstance(data_type, t) for t in _ACCEPTS.get(field.type, ()))
    if ok:
        return []
    return [f"column {where!r} is {data_type.simpleString()}, the field {_type_name(field)}"]


_FT = FieldDescriptor
_INT32 = (*_INTEGERS,)
_INT64 = (*_INTEGERS, T.LongType)
_ACCEPTS: dict[int, tuple[type, ...]] = {
    _FT.TYPE_INT32: _INT32,
    _FT.TYPE_SINT32: _INT32,
    _FT.TYPE_SFIXED32: _INT32,
    _FT.TYPE_INT64: _INT64,
    _FT.TYPE_SINT64: _INT64,
    _FT.TYPE_SFIXED64: _INT64,
    _FT.TYPE_FLOAT: (T.FloatType,),
    _FT.TYPE_DOUBLE: (T.FloatType, T.DoubleType, *_INT32),
    _FT.TYPE_BOOL: (T.BooleanType,),
    _FT.TYPE_STRING: (T.StringType,),
    _FT.TYPE_BYTES: (T.BinaryType,),
}


def _type_name(field: FieldDescriptor) -> str:
    if field.type in (_FT.TYPE_MESSAGE, _FT.TYPE_ENUM):
        kind = "enum " if field.type == _FT.TYPE_ENUM else ""
        descriptor = field.message_type or field.enum_type
        return kind + descriptor.full_name
    names = {v: k for k, v in vars(_FT).items() if k.startswith("TYPE_")}
    return names.get(field.type, str(field.type)).removeprefix("TYPE_").lower()


# -- encoding ---------------------------------------------------------------------------------


def encode(column: Column, schema: ProtoSchema, header: bytes) -> Column:
    """``column`` (a struct) as the registry's wire format: ``header`` (magic byte, id and
    message indexes) + the message; null stays null (a tombstone)."""
    message = F.call_udf(ENCODE_FUNCTION, column, F.lit(schema.file), F.lit(schema.message))
    return F.concat(F.lit(header), message)


def register_encoder(spark: SparkSession) -> None:
    """Make :data:`ENCODE_FUNCTION` callable in ``spark``: protobuf-java and the project's
    jar added where missing (protobuf-java first: a class that once failed to load stays
    failed), on Spark Connect shipped as session artifacts.

    :raises ConfigurationError: the session cannot load them.
    """
    from .connect import is_connect

    if is_connect(spark):
        from .connect_artifacts import ensure_loaded

        ensure_loaded(
            spark,
            lambda: _register(spark),
            lambda: [_protobuf_java_jar(), _project_jar()],
            "the kafka2pc Protobuf encoder",
            _advice(),
        )
        return
    from .connect import add_jar

    jvm = spark.sparkContext._jvm
    if not _loads(jvm, "com.google.protobuf.DynamicMessage"):
        add_jar(spark, _protobuf_java_jar())
    if not _loads(jvm, ENCODE_CLASS):
        add_jar(spark, _project_jar())
    try:
        _register(spark)
    except Exception as exc:  # AnalysisException, Py4JJavaError: the class cannot load
        raise ConfigurationError(
            f"the session cannot load the kafka2pc Protobuf encoder ({type(exc).__name__}); "
            f"{_advice()}"
        ) from None


def _register(spark: SparkSession) -> None:
    spark.udf.registerJavaFunction(ENCODE_FUNCTION, ENCODE_CLASS, T.BinaryType())


def _loads(jvm: object, name: str) -> bool:
    from py4j.java_gateway import JavaClass

    found = jvm
    for part in name.split("."):
        found = getattr(found, part)
    return isinstance(found, JavaClass)


def _protobuf_java_jar():  # type: ignore[no-untyped-def]
    from .maven import fetch_jar

    return fetch_jar(PROTOBUF_JAVA)


def _project_jar():  # type: ignore[no-untyped-def]
    from pathlib import Path

    return Path(PROJECT_JAR)


def _advice() -> str:
    return (
        f"start Spark with --packages {PROTOBUF_JAVA} and --jars {PROJECT_JAR} (protobuf-java "
        "on the same class path as the project's jar); nothing was written"
    )
